"""Memory actions run by schedc's runtime on 2 gloo ranks: offloaded (after F, after I, or both)
and recomputed microbatches train exactly like the unsplit model (float64, 1e-10), every fetch happens at its compiled point,
nothing is held after a step, an offload's fraction copies at least that share of the saved bytes
(largest tensors first) and memory actions that do not fit the CSV are one line on every rank
before any communication.

One spawned group runs every case (spawning dominates the cost); the tests assert on its report.
"""

from __future__ import annotations

import gc
import json

import pytest

torch = pytest.importorskip("torch")

from _dist import run_ranks  # noqa: E402

from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.io.csvio import write_csv  # noqa: E402
from schedc.runtime import GPT, GPTConfig, lm_loss, make_batch  # noqa: E402

M = 4
STEPS = 5
CFG = dict(vocab_size=32, hidden=16, layers=4, heads=2, seq_len=8, dtype="float64")

# (case, schedule, memory actions). 1F1B rank 0 runs 0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3; ZB-V's rank
# 0 runs 0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 ... and rank 1 holds stages 1 and 2.
# Interleaved 1F1B's rank 0 runs 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 ..., rank 1 stages 1 and 3.
CASES = {
    "1f1b": (lambda: make_baseline("1f1b", 2, M), [
        {"stage": 0, "microbatch": 0, "action": "offload"},                      # fetched at 0F1
        {"stage": 0, "microbatch": 1, "action": "offload", "fetch_at": "0F2", "fraction": 0.5, "room_for": "0F2"},
        {"stage": 0, "microbatch": 2, "action": "recompute"},
        {"stage": 0, "microbatch": 3, "action": "offload", "fraction": 0.2},      # fetched at 0B2
        {"stage": 1, "microbatch": 1, "action": "recompute"},
        {"stage": 1, "microbatch": 3, "action": "keep"},
    ]),
    "zb-h1": (lambda: make_baseline("zb-h1", 2, M), [
        {"stage": 0, "microbatch": 1, "action": "offload"},
        {"stage": 0, "microbatch": 3, "action": "recompute"},                    # stage 0: I runs nothing
    ]),
    "zb-v": (lambda: make_baseline("zb-v", 4, M, n_ranks=2), [
        {"stage": 0, "microbatch": 0, "action": "offload", "fetch_at": "3F1"},
        {"stage": 0, "microbatch": 1, "action": "offload", "fraction": 0.5},
        {"stage": 0, "microbatch": 2, "action": "recompute"},
        {"stage": 1, "microbatch": 0, "action": "offload"},
        {"stage": 2, "microbatch": 1, "action": "offload", "fraction": 0.2},
    ]),
    # two stages a rank interleaved (a plan sized for offload on an interleaved loop), backwards whole
    "interleaved-1f1b": (lambda: make_baseline("interleaved-1f1b", 4, M, n_ranks=2), [
        {"stage": 0, "microbatch": 1, "action": "offload"},
        {"stage": 2, "microbatch": 0, "action": "offload", "fraction": 0.5},
        {"stage": 1, "microbatch": 2, "action": "recompute"},
        {"stage": 2, "microbatch": 3, "action": "recompute"},
        {"stage": 1, "microbatch": 1, "action": "offload", "fetch_at": "3B1"},   # at rank 1's other stage
    ]),
    # torch's OVERLAP_F_B cells: rank 0 runs ... 3F1 (0F3;3B1) (3F2;0B0) 3B2 (3F3;0B1) ..., rank 1
    # 1F0 2F0 1F1 2F1 1F2 2B0 (2F2;1B0) (1F3;2B1) (2F3;1B1) 2B2 1B2 ...
    "dualpipev": (lambda: make_baseline("dualpipev", 4, M, n_ranks=2), [
        {"stage": 0, "microbatch": 1, "action": "offload"},                      # fetched at 3F3
        {"stage": 3, "microbatch": 1, "action": "offload"},                      # at 0F3, in its cell
        {"stage": 3, "microbatch": 2, "action": "recompute"},
        {"stage": 1, "microbatch": 1, "action": "offload", "fetch_at": "1F3"},
        {"stage": 1, "microbatch": 0, "action": "recompute"},
        {"stage": 2, "microbatch": 1, "action": "recompute"},
    ]),
    # what the I keeps for W moves out after the I and comes back for the W: ZB-H1's rank 1 runs
    # 1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 ..., so 1W0's default fetch is 1I1
    "after-i": (lambda: make_baseline("zb-h1", 2, M), [
        {"stage": 1, "microbatch": 0, "action": "offload", "after": "I"},
        {"stage": 1, "microbatch": 1, "action": "offload", "after": "I", "fetch_at": "1F2", "fraction": 0.5},
        {"stage": 0, "microbatch": 1, "action": "offload"},
    ]),
    # ZB-V's rank 1 runs ... 1F2 ... 2W2 1I2 2I3 1I3 1W2 2W3 1W3: stage 1's microbatch 2 moves out
    # after its F (fetched at 2W2) and again after its I (fetched at 1I3)
    "refetch": (lambda: make_baseline("zb-v", 4, M, n_ranks=2), [
        {"stage": 1, "microbatch": 2, "action": "offload", "refetch_at": "1I3"},
        {"stage": 2, "microbatch": 3, "action": "offload", "after": "I", "fetch_at": "1W2"},
        {"stage": 0, "microbatch": 1, "action": "offload", "fraction": 0.5},
    ]),
}

# (case, CSV case, memory actions, what the one-line error says)
HOSTILE = {
    "fetch-after-backward": ("1f1b", [{"stage": 0, "microbatch": 1, "action": "offload", "fetch_at": "0B2"}],
                             "memory_actions[0] (stage 0, microbatch 1): \"fetch_at\" '0B2' runs at or after 0B1 on "
                             "rank 0"),
    "fetch-on-another-rank": ("1f1b", [{"stage": 0, "microbatch": 1, "action": "offload", "fetch_at": "1F2"}],
                              "runs on rank 1, not on rank 0 that holds stage 0"),
    "unknown-stage": ("1f1b", [{"stage": 2, "microbatch": 0, "action": "offload"}], "the CSV has stages 0..1"),
    "unknown-microbatch": ("1f1b", [{"stage": 0, "microbatch": 4, "action": "recompute"}],
                           "the CSV runs microbatches 0..3"),
    "duplicate": ("1f1b", [{"stage": 0, "microbatch": 0, "action": "keep"},
                           {"stage": 0, "microbatch": 0, "action": "offload"}], "already has an entry"),
    "recompute-split": ("zb-v", [{"stage": 2, "microbatch": 0, "action": "recompute"}],
                        "runs this backward as I and W (2I0)"),
    "after-i-of-a-whole-backward": ("1f1b", [{"stage": 0, "microbatch": 1, "action": "offload", "after": "I"}],
                                    "an offload after I needs the CSV to run this backward split"),
    "refetch-after-the-w": ("refetch", [{"stage": 1, "microbatch": 2, "action": "offload", "refetch_at": "2W3"}],
                            "\"refetch_at\" '2W3' must be an action of rank 1 between 1I2 and 1W2"),
}


# ------------------------------------------------------------------------------- rank side
def rank_main(rank: int, world: int, csvs: dict, cases: dict, hostile: dict):
    import torch.distributed as dist
    from _dist import capture

    from schedc.runtime import load_pipeline

    cfg = GPTConfig(**CFG)
    out = {"cases": {}, "hostile": {}}
    for name, (csv, bad, _) in hostile.items():
        out["hostile"][name] = capture(lambda: load_pipeline(csvs[csv], GPT(cfg, seed=1), lm_loss,
                                                             memory_actions=bad) and "built")
    for name, actions in cases.items():
        dist.barrier()

        def run(name=name, actions=actions):
            model, ref = GPT(cfg, seed=1), GPT(cfg, seed=1)
            pipe = load_pipeline(csvs[name], model, lm_loss, memory_actions=actions)
            memory = pipe.schedule.memory
            mine = {id(p) for p in pipe.parameters()}
            steps = []
            for k in range(STEPS):
                x, y = make_batch(cfg, 2 * M, seed=10 + k)
                for p in list(model.parameters()) + list(ref.parameters()):
                    p.grad = None
                losses: list = []
                pipe.step(x, target=y, losses=losses)
                ref_loss = lm_loss(ref(x), y)
                ref_loss.backward()
                err = max((p.grad - q.grad).abs().max().item() / (q.grad.abs().max().item() + 1e-30)
                          for p, q in zip(model.parameters(), ref.parameters()) if id(p) in mine)
                stats = memory.stats
                steps.append({
                    "rel_err": err, "ref_loss": ref_loss.item(),
                    "loss": (sum(losses) / len(losses)).item() if losses else None,
                    "live": memory.live(), "fetches": stats.fetches, "room_waits": stats.room_waits, "late_fetches": stats.late_fetches,
                    "left_at_end": stats.left_at_end, "offloaded_tensors": stats.offloaded_tensors,
                    "offloaded_bytes": stats.offloaded_bytes, "peak_host_bytes": stats.peak_host_bytes,
                    "forward_runs": {f"{s},{m}": n for (s, m), n in stats.forward_runs.items()},
                    "moved": {f"{s},{m}": list(v) for (s, m), v in stats.moved.items()},
                })
            return {"stages": [s.stage_index for s in pipe.stages], "steps": steps}
        out["cases"][name] = capture(run)
    return out


# ------------------------------------------------------------------------------- parent side
@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("offload")
    csvs = {}
    for name, (make, _) in CASES.items():
        csvs[name] = str(tmp / f"{name}.csv")
        write_csv(make(), csvs[name])
    results = run_ranks(rank_main, 2, timeout=120, csvs=csvs, cases={n: a for n, (_, a) in CASES.items()},
                        hostile=HOSTILE)
    for r in results:
        assert "ok" in r, f"rank failed outside the cases: {r}"
    return [r["ok"] for r in results]


def _case(ranks, name):
    per_rank = [out["cases"][name] for out in ranks]
    for rank, got in enumerate(per_rank):
        assert "ok" in got, f"rank {rank}: {got.get('error')}\n{got.get('traceback', '')}"
    return [got["ok"] for got in per_rank]


def _expected(name):
    """(stage, mb) -> action, and offload -> fetch point, as check_memory_actions resolves them."""
    from schedc.core.memory_actions import check_memory_actions

    make, actions = CASES[name]
    return check_memory_actions(actions, make())


@pytest.mark.parametrize("case", sorted(CASES))
def test_offload_and_recompute_give_the_unsplit_models_loss_and_gradients(ranks, case):
    oks = _case(ranks, case)
    for ok in oks:
        for k, step in enumerate(ok["steps"]):
            assert step["rel_err"] < 1e-10, (k, step["rel_err"])
    last = [ok for ok in oks if ok["steps"][0]["loss"] is not None]
    assert len(last) == 1
    for step in last[0]["steps"]:
        assert step["loss"] == pytest.approx(step["ref_loss"], rel=1e-12, abs=0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_fetch_happens_when_its_rank_starts_the_compiled_action(ranks, case):
    expected = _expected(case)
    for ok in _case(ranks, case):
        mine = {key: a for key, a in expected.items() if key[0] in ok["stages"] and a.action == "offload"}
        want = sorted([(str(a.fetch_at), list(key)) for key, a in mine.items()] +
                      [(str(a.refetch_at), list(key)) for key, a in mine.items() if a.refetch_at is not None])
        for step in ok["steps"]:
            assert sorted((at, list(key)) for at, key in step["fetches"]) == want
            assert step["late_fetches"] == 0, "a saved tensor was needed before its fetch point"
            assert (step["offloaded_tensors"] > 0) == bool(mine)
            assert (step["offloaded_bytes"] > 0) == bool(mine)
            # an F named as room_for waits at its start for that copy out, once a step
            assert sorted((at, list(key)) for at, key in step["room_waits"]) == sorted(
                (str(a.room_for), list(key)) for key, a in mine.items() if a.room_for is not None)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_recomputed_microbatch_runs_its_forward_twice_and_the_others_once(ranks, case):
    expected = _expected(case)
    for ok in _case(ranks, case):
        for step in ok["steps"]:
            runs = {tuple(int(v) for v in key.split(",")): n for key, n in step["forward_runs"].items()}
            want = {key: 2 if a.action == "recompute" else 1 for key, a in expected.items() if key[0] in ok["stages"]}
            assert runs == want


@pytest.mark.parametrize("case", sorted(CASES))
def test_nothing_is_held_after_any_of_five_steps(ranks, case):
    for ok in _case(ranks, case):
        assert len(ok["steps"]) == STEPS
        for step in ok["steps"]:
            assert step["live"] == {"host_buffers": 0, "device_buffers": 0, "host_bytes": 0, "device_bytes": 0,
                                    "microbatches": 0}
            assert step["left_at_end"] == 0, "every offloaded microbatch is released by its own backward"
        peaks = {step["peak_host_bytes"] for step in ok["steps"]}
        assert len(peaks) == 1, f"the host bytes differ from step to step (a leak?): {peaks}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_offload_copies_at_least_its_fraction_of_the_saved_bytes_and_fraction_1_all(ranks, case):
    expected = _expected(case)
    fractions = {a.fraction for a in expected.values() if a.action == "offload"}
    for ok in _case(ranks, case):
        mine = {key: a for key, a in expected.items() if key[0] in ok["stages"] and a.action == "offload"}
        for step in ok["steps"]:
            moved = {tuple(int(v) for v in key.split(",")): tuple(v) for key, v in step["moved"].items()}
            assert set(moved) == set(mine)
            for key, (copied, saved) in moved.items():
                times = 2 if mine[key].refetch_at is not None else 1  # moved after F, and again after I
                assert saved > 0 and copied >= times * mine[key].fraction * saved, (key, copied, saved)
                if mine[key].fraction < 1:
                    assert copied < times * saved, f"{key}: fraction {mine[key].fraction} copied every saved byte"
                else:
                    assert copied == times * saved, key
            assert sum(c for c, _ in moved.values()) == step["offloaded_bytes"]
            assert step["moved"] == ok["steps"][0]["moved"]
    if case in ("1f1b", "zb-v"):
        assert {0.2, 0.5, 1.0} <= fractions, "the cases cover fractions below 1 and whole offloads"


def test_the_largest_saved_tensors_are_picked_first_ties_in_saved_order():
    from schedc.runtime.offload import _pick, _Saved

    sizes = [4, 16, 8, 16, 2]
    holders = [_Saved((0, 0), torch.zeros(n, dtype=torch.uint8), n) for n in sizes]
    assert _pick(holders, 1.0) == [holders[i] for i in (1, 3, 2, 0, 4)]
    assert _pick(holders, 0.25) == [holders[1]]          # 16 of 46 >= 11.5
    assert _pick(holders, 0.5) == [holders[1], holders[3]]  # 16 < 23 <= 32: at least, never less
    assert _pick(holders, 0.75) == [holders[1], holders[3], holders[2]]  # 40 >= 34.5
    assert _pick([], 0.5) == []


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_memory_actions_that_do_not_fit_the_csv_are_one_line_on_every_rank(ranks, case):
    for rank, out in enumerate(ranks):
        got = out["hostile"][case]
        assert got.get("type") == "SchedcError", f"rank {rank}: {got}"
        assert HOSTILE[case][2] in got["error"], got["error"]
        assert "\n" not in got["error"] and ".csv: memory_actions[" in got["error"], got["error"]


# ------------------------------------------------------------------------------- one process
def test_plan_settings_returns_a_plans_memory_actions_and_names_a_bad_entry(tmp_path):
    from schedc.core.ir import Action
    from schedc.core.memory_actions import MemoryAction
    from schedc.errors import SchedcError
    from schedc.runtime.checkpointing import plan_settings

    plan = {"partition": [["tok_embeddings", "layers.0", "layers.1"], ["layers.2", "layers.3", "norm", "output"]],
            "assumes": {"activation_checkpoint": "none"},
            "memory_actions": [{"stage": 0, "microbatch": 1, "action": "offload", "fetch_at": "0F2"},
                               {"stage": 1, "microbatch": 0, "action": "recompute"}]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    got = plan_settings(path)
    assert got["memory_actions"] == [MemoryAction(0, 1, "offload", Action(0, "F", 2)),
                                     MemoryAction(1, 0, "recompute")]
    # checked against the CSV by load_pipeline, before anything communicates, naming both files
    from schedc.runtime import load_pipeline
    from schedc.runtime.one_rank import one_rank_group

    csv = tmp_path / "other.csv"  # not the plan's CSV: one rank, two microbatches, no 0F2
    csv.write_text("0F0,1F0,0F1,1F1,1B1,0B1,1B0,0B0\n")
    with one_rank_group("cpu"):
        with pytest.raises(SchedcError, match=r"plan.json \(against .*other.csv\): memory_actions\[0\] \(stage 0, "
                                              r"microbatch 1\): \"fetch_at\" '0F2' is not an action of the CSV"):
            load_pipeline(str(csv), GPT(GPTConfig(**CFG), seed=1), lm_loss, **plan_settings(path))
    del plan["memory_actions"]
    path.write_text(json.dumps(plan))
    assert "memory_actions" not in plan_settings(path)
    plan["memory_actions"] = [{"stage": 0, "microbatch": "1", "action": "offload"}]
    path.write_text(json.dumps(plan))
    with pytest.raises(SchedcError, match=r"plan.json: memory_actions\[0\]: \"microbatch\" must be an integer"):
        plan_settings(path)


@pytest.mark.parametrize("device,ac,fraction", [("cpu", "none", 1.0), ("cpu", "full", 1.0), ("cpu", "none", 0.5),
                                                 pytest.param("cuda", "none", 1.0, marks=pytest.mark.cuda),
                                                 pytest.param("cuda", "none", 0.5, marks=pytest.mark.cuda)])
def test_one_rank_offload_moves_the_bytes_off_the_device_and_returns_to_baseline(device, ac, fraction):
    # both stages on one rank (no communication), every forward before any backward: stage 0 of
    # microbatches 0..2 offloaded (each fetched at 1B_m, the action before its 0B_m), stage 1 of
    # microbatch 3 recomputed. On CUDA the peak drops by most of the offloaded bytes and every
    # step ends at the same allocated level; on CPU the host copy is a CPU tensor too, so only
    # the gradients and the bookkeeping are checked. Under full checkpointing of the blocks the
    # offload moves what stays saved (the blocks' inputs), and the recompute nests around theirs.
    # With a fraction, microbatch 1 moves at least that share of its saved bytes, largest first.
    from schedc.io.csvio import parse_csv_text
    from schedc.runtime import load_pipeline
    from schedc.runtime.one_rank import one_rank_group

    cfg = GPTConfig(**(CFG if device == "cpu" else dict(CFG, hidden=64, seq_len=64, vocab_size=128)))
    row = [f"{s}F{m}" for m in range(M) for s in (0, 1)] + [f"{s}B{m}" for m in reversed(range(M)) for s in (1, 0)]
    schedule = parse_csv_text(",".join(row) + "\n")
    actions = [{"stage": 0, "microbatch": m, "action": "offload"} for m in range(3)] + [
        {"stage": 1, "microbatch": 3, "action": "recompute"}]
    actions[1]["fraction"] = fraction
    x, y = make_batch(cfg, 2 * M, seed=3, device=device)
    ref = GPT(cfg, seed=1).to(device)
    lm_loss(ref(x), y).backward()

    def run(memory_actions):
        model = GPT(cfg, seed=1)
        pipe = load_pipeline(schedule, model, lm_loss, device, memory_actions=memory_actions,
                             activation_checkpoint=ac)
        levels, peaks = [], []
        for _ in range(3):
            for p in pipe.parameters():
                p.grad = None
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            pipe.step(x, target=y)
            if device == "cuda":
                torch.cuda.synchronize()
                levels.append(torch.cuda.memory_allocated())
                peaks.append(torch.cuda.max_memory_allocated())
        held = {id(p) for p in pipe.parameters()}  # the stages share the model's parameters
        grads = {n: p.grad for n, p in model.named_parameters() if id(p) in held}
        return pipe, grads, levels, peaks

    with one_rank_group(device):
        plain_levels, plain_peaks = run(None)[2:]
        gc.collect()  # the plain pipeline's stages, before the levels of the next one are read
        pipe, grads, levels, peaks = run(actions)
    reference = dict(ref.named_parameters())
    assert len(grads) == len(reference)
    for name, g in grads.items():
        want = reference[name].grad
        assert (g - want).abs().max().item() <= 1e-10 * want.abs().max().item(), name
    memory = pipe.schedule.memory
    assert memory.live()["host_buffers"] == memory.live()["device_buffers"] == 0
    assert memory.stats.late_fetches == 0 and memory.stats.left_at_end == 0
    assert sorted(memory.stats.fetches) == [(f"1B{m}", (0, m)) for m in range(3)]
    assert memory.stats.forward_runs == {(0, 0): 1, (0, 1): 1, (0, 2): 1, (1, 3): 2}
    moved = memory.stats.moved
    assert sorted(moved) == [(0, m) for m in range(3)]
    assert moved[(0, 0)][0] == moved[(0, 0)][1] > 0 and moved[(0, 2)][0] == moved[(0, 2)][1]
    copied, saved = moved[(0, 1)]
    assert (copied == saved) if fraction == 1 else (fraction * saved <= copied < saved), (copied, saved)
    assert memory.stats.offloaded_bytes == sum(c for c, _ in moved.values())
    if device == "cuda":
        assert levels == [levels[0]] * 3 == [plain_levels[0]] * 3, (levels, plain_levels)
        drop = plain_peaks[-1] - peaks[-1]
        assert drop >= 0.5 * memory.stats.offloaded_bytes, (drop, memory.stats.offloaded_bytes)
