"""schedc.runtime on real gloo ranks: CSV schedules train exactly like the unsplit model, and
every mismatch between the launch and the CSV is a clear SchedcError on every rank.

All distributed checks share one spawned 2-rank group (spawning dominates the cost): the parent
writes the CSVs, the ranks run every case in turn and report numbers, the tests assert on them.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from _dist import ROOT, run_ranks, worker_env  # noqa: E402

from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.io.csvio import write_csv  # noqa: E402
from schedc.runtime import GPT, GPTConfig, lm_loss, make_batch, split_model, stages_for_rank  # noqa: E402
from schedc.runtime.split import stage_layer_ranges  # noqa: E402

M = 4  # microbatches in every distributed case
CFG = dict(vocab_size=32, hidden=16, layers=4, heads=2, seq_len=8, dtype="float64")


def compiled(n_stages: int, placement: str):
    """The compiler's schedule for the case, or None while schedc.solver cannot compile."""
    try:
        from schedc.solver import compile_schedule
    except ImportError:
        return None
    return compile_schedule(n_stages, M, n_ranks=2, placement=placement, time_limit=5).schedule


# (case name, schedule factory, how the rank builds its schedule)
GRADIENT_CASES = [
    ("1f1b", lambda: make_baseline("1f1b", 2, M), "load_pipeline"),
    ("zb-h1", lambda: make_baseline("zb-h1", 2, M), "factory"),
    ("gpipe", lambda: make_baseline("gpipe", 2, M), "build_schedule"),
    ("compiled-2x1", lambda: compiled(2, "loop"), "load_pipeline"),
    ("interleaved-1f1b-loop", lambda: make_baseline("interleaved-1f1b", 4, M, n_ranks=2), "factory"),
    ("interleaved-zb-loop", lambda: make_baseline("interleaved-zb", 4, M, n_ranks=2), "load_pipeline"),
    ("compiled-2x2-loop", lambda: compiled(4, "loop"), "load_pipeline"),
    ("zb-v", lambda: make_baseline("zb-v", 4, M, n_ranks=2), "build_schedule"),
    ("dualpipev", lambda: make_baseline("dualpipev", 4, M, n_ranks=2), "load_pipeline"),
    ("compiled-2x2-v", lambda: compiled(4, "v"), "factory"),
    # how torchtitan / forgather call a schedule: scale_grads=False, loss pre-divided by M
    ("zb-v-trainer-convention", lambda: make_baseline("zb-v", 4, M, n_ranks=2), "factory-noscale"),
    # torch's own classes through load_torch_pipeline: the comparison path of the example/benchmark
    ("torch-1F1B", None, "torch"),
    ("torch-ZBVZeroBubble", None, "torch"),
]

DEADLOCK_CSV = "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n"  # rank 0 waits for 1B0, rank 1 for 0F1


# ------------------------------------------------------------------------------- rank side
def _new_model():
    return GPT(GPTConfig(**CFG), seed=1)


def _build(csv: str, via: str, model, group_rank: int, n_microbatches=None, stage_ids=None,
           n_stages=None):
    """(pipeline-like step function, parameters this rank owns) through one of the entry points."""
    from torch.distributed.pipelining import PipelineStage

    from schedc.runtime import build_schedule, csv_schedule_factory, load_pipeline
    from schedc.runtime.pipeline import read_schedule

    if via == "load_pipeline":
        pipe = load_pipeline(csv, model, lm_loss, n_microbatches=n_microbatches)
        return pipe.step, list(pipe.parameters())
    if via == "torch":
        from schedc.runtime import load_torch_pipeline

        pipe = load_torch_pipeline(csv, model, lm_loss, M)
        return pipe.step, list(pipe.parameters())
    schedule = read_schedule(csv)
    n_stages = schedule.n_stages if n_stages is None else n_stages
    ids = stages_for_rank(csv, group_rank) if stage_ids is None else stage_ids
    modules = split_model(model, ids, n_stages)
    stages = [PipelineStage(modules[s], s, n_stages, torch.device("cpu")) for s in ids]
    mb = schedule.n_microbatches if n_microbatches is None else n_microbatches
    if via == "factory":
        factory = csv_schedule_factory(csv)
        runtime = factory(stages if len(stages) > 1 else stages[0], mb, loss_fn=lm_loss)
    elif via == "factory-noscale":
        factory = csv_schedule_factory(csv)
        runtime = factory(stages, mb, loss_fn=lambda out, tgt: lm_loss(out, tgt) / mb, scale_grads=False)
    else:
        runtime = build_schedule(csv, stages, mb, lm_loss)
    first = any(s.is_first for s in stages)
    last = any(s.is_last for s in stages)

    def step(x, target=None, losses=None):
        out = runtime.step(*((x,) if first else ()), target=target if last else None, losses=losses)
        if via == "factory-noscale" and losses:
            losses[:] = [loss * mb for loss in losses]  # report the unscaled loss
        return out

    params = [p for m in modules.values() for p in m.parameters()]
    return step, params


def rank_main(rank: int, world: int, gradient_cases, mismatch_cases):
    import torch.distributed as dist
    from _dist import capture

    cfg = GPTConfig(**CFG)
    x, y = make_batch(cfg, 2 * M, seed=3)
    out = {"mismatch": {}, "gradients": {}}

    for name, spec in mismatch_cases.items():
        def attempt(spec=spec):
            model = _new_model()
            if spec.get("stages_for_rank"):
                return stages_for_rank(spec["csv"], rank, n_ranks=world)
            step, _ = _build(spec["csv"], spec["via"], model, rank,
                             n_microbatches=spec.get("n_microbatches"),
                             stage_ids=spec.get("stage_ids", {}).get(str(rank)),
                             n_stages=spec.get("n_stages"))
            step(x, target=y, losses=[])
            return "ran"
        out["mismatch"][name] = capture(attempt)
        out["mismatch"][name].pop("traceback", None) if out["mismatch"][name].get("type") == "SchedcError" else None

    for name, csv, via in gradient_cases:
        dist.barrier()

        def check(csv=csv, via=via):
            model, ref = _new_model(), _new_model()
            step, params = _build(csv, via, model, rank)
            losses: list = []
            step(x, target=y, losses=losses)
            ref_loss = lm_loss(ref(x), y)
            ref_loss.backward()
            mine = {id(p) for p in params}
            err, names, stray = 0.0, [], []
            for (pname, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
                if id(p) in mine:
                    names.append(pname)
                    err = max(err, (p.grad - q.grad).abs().max().item() / (q.grad.abs().max().item() + 1e-30))
                elif p.grad is not None:
                    stray.append(pname)
            result = {"params": names, "stray": stray, "rel_err": err, "ref_loss": ref_loss.item(),
                      "loss": (sum(losses) / len(losses)).item() if losses else None}
            # A few AdamW steps on one batch: the pipelined model must learn.
            opt = torch.optim.AdamW(params, lr=1e-2)
            curve = []
            for _ in range(6):
                opt.step()
                opt.zero_grad()
                losses = []
                step(x, target=y, losses=losses)
                curve.append((sum(losses) / len(losses)).item() if losses else None)
            result["curve"] = curve
            return result
        out["gradients"][name] = capture(check)
    return out


# ------------------------------------------------------------------------------- parent side
@pytest.fixture(scope="module")
def dist_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runtime")
    gradient_cases = []
    for name, make, via in GRADIENT_CASES:
        if via == "torch":
            gradient_cases.append((name, name.split("-", 1)[1], via))
            continue
        schedule = make()
        if schedule is None:
            continue
        path = tmp / f"{name}.csv"
        write_csv(schedule, path)
        gradient_cases.append((name, str(path), via))

    def csv(name, schedule_or_text):
        path = tmp / f"{name}.csv"
        if isinstance(schedule_or_text, str):
            path.write_text(schedule_or_text)
        else:
            write_csv(schedule_or_text, path)
        return str(path)

    three = csv("three-ranks", make_baseline("1f1b", 3, M))
    two = csv("two-ranks", make_baseline("1f1b", 2, M))
    zbv = csv("zbv", make_baseline("zb-v", 4, M, n_ranks=2))
    mismatch_cases = {
        "world-size-stages_for_rank": {"csv": three, "stages_for_rank": True},
        "world-size-build": {"csv": three, "via": "build_schedule",
                             "stage_ids": {"0": [0], "1": [1]}, "n_stages": 3},
        "microbatches-build": {"csv": two, "via": "build_schedule", "n_microbatches": 6},
        "microbatches-factory": {"csv": two, "via": "factory", "n_microbatches": 2},
        "microbatches-load": {"csv": two, "via": "load_pipeline", "n_microbatches": 8},
        "placement": {"csv": zbv, "via": "build_schedule", "stage_ids": {"0": [0, 2], "1": [1, 3]}},
        "stage-count": {"csv": two, "via": "factory", "stage_ids": {"0": [0], "1": [1]}, "n_stages": 4},
        "corrupt": {"csv": csv("corrupt", "0F0,0F1,0B0,0X1\n1F0,1B0,1F1,1B1\n"), "via": "load_pipeline"},
        "truncated": {"csv": csv("truncated", "0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n"), "via": "build_schedule"},
        "deadlock": {"csv": csv("deadlock", DEADLOCK_CSV), "via": "load_pipeline"},
    }
    results = run_ranks(rank_main, 2, timeout=150, gradient_cases=gradient_cases,
                        mismatch_cases=mismatch_cases)
    for r in results:
        assert "ok" in r, f"rank failed outside the cases: {r}"
    return {"cases": [c[0] for c in gradient_cases], "ranks": [r["ok"] for r in results]}


MISMATCH_EXPECT = {
    "world-size-stages_for_rank": "3 rows (ranks) but the pipeline group has 2 ranks",
    "world-size-build": "3 rows (ranks) but the pipeline group has 2 ranks",
    "microbatches-build": "runs 4 microbatches but the schedule was asked for 6",
    "microbatches-factory": "runs 4 microbatches but the schedule was asked for 2",
    "microbatches-load": "runs 4 microbatches but n_microbatches=8",
    "placement": "holds stages",
    "stage-count": "num_stages=[4] but the CSV has 2 stages",
    "corrupt": "0X1",
    "truncated": "",
    "deadlock": "",
}


@pytest.mark.parametrize("case", sorted(MISMATCH_EXPECT))
def test_mismatch_is_a_clear_error_on_every_rank(dist_results, case):
    for rank, out in enumerate(dist_results["ranks"]):
        got = out["mismatch"][case]
        assert got.get("type") == "SchedcError", f"rank {rank}: {got}"
        assert MISMATCH_EXPECT[case] in got["error"], got["error"]
        assert "\n" not in got["error"] and ".csv" in got["error"], got["error"]
        assert got["seconds"] < 10, f"rank {rank} took {got['seconds']:.1f}s to fail"


def test_placement_error_names_both_stage_lists(dist_results):
    msg = dist_results["ranks"][0]["mismatch"]["placement"]["error"]
    assert "rank 0 holds stages [0, 2] but the CSV puts stages [0, 3] on rank 0" in msg


@pytest.mark.parametrize("case", [c[0] for c in GRADIENT_CASES])
def test_gradients_and_loss_match_unsplit_model(dist_results, case):
    if case not in dist_results["cases"]:
        pytest.skip("schedc.solver.compile_schedule not available yet")
    per_rank = [out["gradients"][case] for out in dist_results["ranks"]]
    for rank, got in enumerate(per_rank):
        assert "ok" in got, f"rank {rank}: {got.get('error')}\n{got.get('traceback', '')}"
    oks = [g["ok"] for g in per_rank]
    all_params = [n for n, _ in _new_model().named_parameters()]
    held = [n for ok in oks for n in ok["params"]]
    assert sorted(held) == sorted(all_params), "every parameter is on exactly one rank"
    for ok in oks:
        assert ok["stray"] == [], f"gradients on parameters another rank owns: {ok['stray']}"
        assert ok["rel_err"] < 1e-10, ok["rel_err"]
    last = [ok for ok in oks if ok["loss"] is not None]
    assert len(last) == 1
    assert math.isclose(last[0]["loss"], last[0]["ref_loss"], rel_tol=1e-12)
    curve = [last[0]["loss"]] + last[0]["curve"]
    assert curve[-1] < curve[0] - 0.1, curve
    assert all(b < a for a, b in zip(curve, curve[1:])), curve


# ------------------------------------------------------------------------------- single process
def test_gpt_is_deterministic_and_learns_shapes():
    cfg = GPTConfig(**CFG)
    a, b = GPT(cfg, seed=5), GPT(cfg, seed=5)
    torch.manual_seed(123)  # the global RNG must not matter
    c = GPT(cfg, seed=5)
    for p, q, r in zip(a.parameters(), b.parameters(), c.parameters()):
        assert torch.equal(p, q) and torch.equal(p, r)
    assert any(not torch.equal(p, q) for p, q in zip(a.parameters(), GPT(cfg, seed=6).parameters()))
    x, y = make_batch(cfg, 3)
    assert x.shape == y.shape == (3, cfg.seq_len) and torch.equal(x[:, 1:], y[:, :-1])
    logits = a(x)
    assert logits.shape == (3, cfg.seq_len, cfg.vocab_size) and logits.dtype == torch.float64
    assert abs(lm_loss(logits, y).item() - math.log(cfg.vocab_size)) < 0.1


def test_gpt_is_causal():
    cfg = GPTConfig(**CFG)
    model = GPT(cfg, seed=0)
    x, _ = make_batch(cfg, 1)
    x2 = x.clone()
    x2[0, -1] = (x2[0, -1] + 1) % cfg.vocab_size
    assert torch.allclose(model(x)[0, :-1], model(x2)[0, :-1])


@pytest.mark.parametrize("n_stages,per_rank", [(2, None), (3, None), (4, [0, 2, 1, 1]), (4, None)])
def test_split_stages_compose_to_the_model(n_stages, per_rank):
    cfg = GPTConfig(**{**CFG, "layers": 4})
    model = GPT(cfg, seed=0)
    stages = split_model(model, range(n_stages), n_stages, layers_per_stage=per_rank)
    x, _ = make_batch(cfg, 2)
    h = x
    for s in range(n_stages):
        h = stages[s](h)
    assert torch.equal(h, model(x))
    # parameters are shared, each exactly once across the stages, none copied
    ids = [id(p) for s in range(n_stages) for p in stages[s].parameters()]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())
    assert stages[0].embed is model.embed and stages[n_stages - 1].head is model.head
    assert len(model.blocks) == 4 and model.embed is not None  # the model itself is untouched


def test_split_rule_and_errors():
    assert [list(r) for r in stage_layer_ranges(5, 3)] == [[0, 1], [2, 3], [4]]
    assert [len(r) for r in stage_layer_ranges(7, 4)] == [2, 2, 2, 1]
    model = GPT(GPTConfig(**CFG), seed=0)
    with pytest.raises(SchedcError, match="sum to the model's 4 blocks"):
        split_model(model, [0], 2, layers_per_stage=[1, 1])
    with pytest.raises(SchedcError, match="2 entries but there are 3 stages"):
        split_model(model, [0], 3, layers_per_stage=[2, 2])
    with pytest.raises(SchedcError, match="stage 4 would hold no blocks"):
        split_model(model, [4], 6)
    with pytest.raises(SchedcError, match="no attribute 'tok_embeddings'"):
        split_model(model, [0], 2, first=("tok_embeddings",))
    with pytest.raises(SchedcError, match="outside 0..1"):
        split_model(model, [2], 2)


def test_split_module_dict_keeps_names():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Linear(3, 4)
            self.layers = torch.nn.ModuleDict({str(i): torch.nn.Linear(4, 4) for i in range(3)})
            self.out = torch.nn.Linear(4, 2)

    stages = split_model(Net(), [1], 2, blocks="layers", first=("inp",), last=("out",))
    assert list(stages[1].layers.keys()) == ["2"] and stages[1].inp is None
    assert [n for n, _ in stages[1].named_parameters()] == ["layers.2.weight", "layers.2.bias", "out.weight", "out.bias"]


def test_stages_for_rank_reads_placement(tmp_path):
    path = tmp_path / "v.csv"
    write_csv(make_baseline("zb-v", 4, M, n_ranks=2), path)
    assert stages_for_rank(path, 0) == [0, 3] and stages_for_rank(path, 1) == [1, 2]
    with pytest.raises(SchedcError, match="rank 2 is outside the CSV's 2 ranks"):
        stages_for_rank(path, 2)
    with pytest.raises(SchedcError, match="no such file"):
        stages_for_rank(tmp_path / "missing.csv", 0)


def test_runtime_names_are_declared_for_type_checkers_and_load_on_first_use():
    import ast

    tree = ast.parse((ROOT / "schedc" / "runtime" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    declared = sorted(alias.name for imp in block.body for alias in imp.names)
    code = "import sys, schedc.runtime as r; print('torch' in sys.modules, sorted(r.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=worker_env(), cwd=str(ROOT), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"False {declared}"
    assert stages_for_rank.__module__ == "schedc.runtime.pipeline"  # and a name loads its module when asked


def test_runtime_without_torch_is_one_import_error_naming_the_extra(tmp_path):
    # torch not installed (a plain `pip install schedc`): schedc works, its runtime says what to install
    code = ("import importlib.util, sys\n"
            "find = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda name, *a: None if name == 'torch' else find(name, *a)\n"
            "import schedc\n"
            "for name in ('schedc.runtime', 'schedc.runtime.launch'):\n"
            "    try:\n        __import__(name)\n    except ImportError as e:\n        print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=worker_env(), cwd=str(ROOT), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["schedc.runtime needs torch, which is not installed: pip install 'schedc[torch]'"] * 2


# ------------------------------------------------------------------ activation checkpointing


def test_activation_checkpointing_keeps_loss_and_gradients():
    # per stage, as a plan chooses it: full everywhere, light or selective where the CSV runs B
    # (or on stage 0), a list; float64 on gloo, all stages on one rank (no communication to hide a
    # difference)
    from schedc.io.csvio import parse_csv_text
    from schedc.runtime import load_pipeline
    from schedc.runtime.one_rank import one_rank_group

    cfg = GPTConfig(**CFG)
    x, y = make_batch(cfg, 2 * M, seed=3)
    split = make_baseline("zb-v", 2, M, n_ranks=1)
    full_b = parse_csv_text("".join(f"0F{m},1F{m},1B{m},0B{m}," for m in range(M)).rstrip(",") + "\n")
    mixed = parse_csv_text("".join(f"0F{m},1F{m},1B{m},0I{m},0W{m}," for m in range(M)).rstrip(",") + "\n")

    def run(schedule, ac):
        pipe = load_pipeline(schedule, _new_model(), lm_loss, activation_checkpoint=ac)
        losses = []
        pipe.step(x, target=y, losses=losses)
        return torch.stack(losses), {f"{s}.{n}": p.grad for s, m in pipe.modules.items()
                                     for n, p in m.named_parameters()}

    with one_rank_group("cpu"):
        base_loss, base_grads = run(split, "none")
        cases = [(split, "full"), (full_b, "selective"), (full_b, "full"), (mixed, ["full", "selective"]),
                 (full_b, "light"), (mixed, "light"), (split, ["light", "full"])]
        for schedule, ac in cases:
            loss, grads = run(schedule, ac)
            assert torch.allclose(loss, base_loss, rtol=0, atol=1e-12), ac
            assert grads.keys() == base_grads.keys()
            for name, g in grads.items():
                assert torch.allclose(g, base_grads[name], rtol=1e-10, atol=1e-12), (ac, name)
        # torch's split backward cannot go twice through a region checkpointed per op
        # (stage 0 is exempt: torch runs its whole backward in W)
        for mode in ("selective", "light"):
            with pytest.raises(SchedcError, match=f"stage 1 runs I and W apart.*'{mode}'.*'full' or 'none'"):
                run(split, mode)
        loss, _ = run(mixed, "selective")
        assert torch.allclose(loss, base_loss, rtol=0, atol=1e-12)
        with pytest.raises(SchedcError, match=r"activation_checkpoint\[1\]: 'some' is not one of none, light, "
                                              r"selective, full; give one"):
            run(split, ["full", "some"])
        # torch's own classes: per op where the class runs a full backward, refused where it splits
        from schedc.runtime import load_torch_pipeline

        for name, ac in (("Interleaved1F1B", "light"), ("DualPipeV", ["light", "light"]),
                         ("ZBVZeroBubble", ["light", "full"])):
            pipe = load_torch_pipeline(name, _new_model(), lm_loss, M, activation_checkpoint=ac)
            losses = []
            pipe.step(x, target=y, losses=losses)
            assert torch.allclose(torch.stack(losses), base_loss, rtol=0, atol=1e-12), name
        for name in ("ZBVZeroBubble", "InterleavedZeroBubble"):
            with pytest.raises(SchedcError, match=f"^torch's Schedule{name}: stage 1 runs I and W apart.*'light'"):
                load_torch_pipeline(name, _new_model(), lm_loss, M, activation_checkpoint="light")
