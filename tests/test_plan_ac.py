"""`schedc plan --ac auto`: activation checkpointing chosen per stage with the partition, honest to
torch's runtime (checkpointed stages run a full backward B), and launched by schedc's runtime
with one mode per stage, recomputing where the plan checkpoints and training like the unsplit model."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from test_plan import _modes, _schedc, tiny_units  # noqa: E402  (the per-unit profiles these tests share)

M = 4  # microbatches of the tiny plans
TIGHT = "11GiB"  # stage 0 of the tiny model holds its microbatches only when checkpointed, stage 1 without
STACKED_CAP = "8GiB"  # a stage must save more than selective checkpointing of all its layers saves


def _auto(memory: str, placement: str = "loop"):
    from schedc.planning import plan_ac

    return plan_ac(_modes(tiny_units(n_layers=6, head=1.0)), ranks=2, microbatches=M, memory=memory,
                   placement=placement, time_limit=4, budget="work")


def test_ac_auto_chooses_the_mode_that_fits_and_reports_each_global_mode():
    from schedc.planning import mixed_units

    profiles = _modes(tiny_units(n_layers=6, head=1.0))
    res = _auto("9GiB")
    steps = res.ac.global_steps
    assert steps["none"] is None and steps["selective"] is not None  # without checkpointing no partition fits
    assert res.value <= min(v for v in steps.values() if v is not None) * (1 + 1e-9)
    chosen = res.report["assumes"]["activation_checkpoint"]
    assert chosen == res.ac.chosen and res.report["plan"]["activation_checkpoint"]["global"] == steps
    mixed = mixed_units(profiles, [3, 5], ["none", "full"])
    assert mixed.stages[:3] == profiles["none"].stages[:3] and mixed.stages[3:] == profiles["full"].stages[3:]
    assert mixed.assumes["activation_checkpoint"] == ["none", "full"]


def test_a_mode_whose_bound_cannot_beat_the_best_plan_is_not_planned():
    res = _auto("80GiB")
    assert res.ac.chosen == "none" and res.ac.global_steps["full"] is None  # full recomputes every forward
    assert any("activation checkpointing full: cannot beat" in note for note in res.notes)


def test_a_checkpointed_unit_runs_one_full_backward_with_one_recompute():
    from schedc.planning.ac import checkpointed_form

    profiles = _modes(tiny_units(n_layers=3))
    b = checkpointed_form(profiles["full"], profiles["none"])
    for none, full, run in zip(profiles["none"].stages, profiles["full"].stages, b.stages):
        assert run.backward_weight == 0.0  # the compiler schedules B for a stage whose W costs nothing
        recompute = full.backward_input - none.backward_input  # the forward again, once
        assert run.backward_input == pytest.approx(none.backward + recompute)
        assert run.activation_bytes == full.activation_bytes and run.transient("B") >= full.transient("I")
    # without the none profile: the mode's own I + W
    assert checkpointed_form(profiles["full"]).stages[1].backward_input == pytest.approx(
        profiles["full"].stages[1].backward)


def test_per_stage_choice_beats_every_global_mode_where_memory_binds():
    res = _auto(TIGHT)
    assert res.ac.memory_binds["none"]  # without checkpointing the cap sets the step
    best_global = min(v for v in res.ac.global_steps.values() if v is not None)
    assert isinstance(res.ac.chosen, list) and res.ac.chosen[0] != "none" and "none" in res.ac.chosen
    assert res.value < best_global * 0.95  # the first rank checkpoints and holds more layers
    ac = res.report["plan"]["activation_checkpoint"]
    assert ac["per_stage"]["modes"] == res.ac.chosen == res.report["assumes"]["activation_checkpoint"]
    assert ac["per_stage"]["units_per_stage"] == res.counts and ac["per_stage"]["step"] == res.value
    assert res.report["plan"]["status"] != "optimal"  # its bound covers its own partition only
    assert res.value >= res.bound * (1 - 1e-9)
    # the schedule runs every checkpointed stage but the first as B (torch: no W after a selective I)
    split = {a.stage for _, a in res.schedule.all_actions() if a.kind in ("I", "W")}
    assert not [s for s, m in enumerate(res.ac.chosen) if m != "none" and s != 0 and s in split]


def test_a_stage_saves_past_selective_by_upgrading_layers_to_full_one_at_a_time():
    from schedc.planning.ac import STACKED, mode_forms, runtime_modes, spec_units

    res = _auto(STACKED_CAP)
    best_global = min(v for v in res.ac.global_steps.values() if v is not None)
    stacked = [m for m in res.ac.chosen if isinstance(m, list) and {"full", "selective"} <= set(m)]
    assert stacked and res.value < best_global * (1 - 1e-6), (res.ac.chosen, res.ac.global_steps)
    # the spec (STACKED, k): the stage's first k layers full, its other layers selective, the rest in B
    profiles = _modes(tiny_units(n_layers=6, head=1.0))
    forms = mode_forms(profiles)
    units = spec_units(forms, [4, 4], ((STACKED, 1), ("none", 0)))
    assert units.stages[0] == forms["none-b"].stages[0]  # the embedding: not a layer
    assert units.stages[1] == forms["full"].stages[1]
    assert units.stages[2:4] == forms["selective"].stages[2:4]
    assert units.stages[4:] == profiles["none"].stages[4:]
    assert runtime_modes(forms, [4, 4], ((STACKED, 1), ("none", 0))) == [["full", "selective", "selective"], "none"]


def _with_light(profiles: dict) -> dict:
    """`profiles` and a light mode: a layer keeps 60% and its I recomputes 5% of its forward."""
    units = profiles["none"]
    stages = [u.model_copy(update={"activation_bytes": u.activation_bytes * 0.6,
                                   "weight_grad_bytes": u.weight_grad_bytes * 0.6,
                                   "backward_input": u.backward_input + 0.05 * u.forward})
              if u.modules and u.modules[0].startswith("layers.") else u for u in units.stages]
    return {**profiles, "light": units.model_copy(update={"stages": stages})}


def test_a_stage_may_take_any_two_modes_the_faster_on_every_layer_and_the_fewest_upgraded():
    from schedc.planning.ac import _canonical, checkpointing_forms, mode_forms, runtime_modes, spec_units

    forms = mode_forms(_with_light(_modes(tiny_units(n_layers=6, head=1.0))))
    assert checkpointing_forms(forms) == ["light", "selective", "full", "light+selective", "light+full",
                                          "selective+full"]
    specs = (("light+full", 1), ("none", 0))
    units = spec_units(forms, [4, 4], specs)
    assert units.stages[1] == forms["full"].stages[1] and units.stages[2:4] == forms["light"].stages[2:4]
    assert runtime_modes(forms, [4, 4], specs) == [["full", "light", "light"], "none"]
    # no layer upgraded: all the faster mode; every layer upgraded: all the slower one
    assert _canonical("light+full", 0, 3) == ("light", 3) and _canonical("light+full", 3, 3) == ("full", 3)


@pytest.mark.parametrize("cap", ["9GiB", "14GiB"])
def test_light_checkpointing_where_it_fits_shortens_the_step(cap):
    from schedc.planning import plan_ac

    profiles = _modes(tiny_units(n_layers=6, head=1.0))
    kw = dict(ranks=2, microbatches=M, memory=cap, placement="loop", time_limit=4, budget="work")
    without, with_light = plan_ac(profiles, **kw), plan_ac(_with_light(profiles), **kw)
    assert with_light.value < without.value * (1 - 1e-6)
    chosen = with_light.ac.chosen if isinstance(with_light.ac.chosen, list) else [with_light.ac.chosen]
    assert "light" in str(chosen) and with_light.ac.global_steps["light"] is not None


def test_a_per_op_mode_chosen_from_counted_times_names_the_host_dispatch_they_leave_out():
    # on an H100 torch's per-op checkpoint dispatch set a layer's F (docs/results.md, "On a GPU"):
    # a plan that leans on counted light times says so and how to measure them; measured ones do not
    from schedc.model_costs import unit_profile
    from schedc.planning import plan_ac

    shape = dict(layers=4, hidden=256, ffn_hidden=512, heads=4, kv_heads=2, vocab=512, family="llama")
    counted = {m: unit_profile(**shape, seq=512, activation_checkpoint=m, device="cpu") for m in ("none", "light")}
    kw = dict(ranks=2, microbatches=4, placement="loop", time_limit=2, budget="work")
    res = plan_ac(counted, memory="40MiB", **kw)  # without checkpointing nothing fits
    assert res.ac.global_steps["none"] is None and "light" in str(res.ac.chosen)
    assert any("host's per-op dispatch" in n and "schedc profile --units --ac MODE" in n for n in res.notes), res.notes
    roomy = plan_ac(counted, memory="1GiB", **kw)
    assert roomy.ac.chosen == "none" and not any("host's per-op dispatch" in n for n in roomy.notes)
    like_measured = {m: p.model_copy(update={"assumes": {k: v for k, v in p.assumes.items() if k != "implementation"}})
                     for m, p in counted.items()}
    assert not any("host's per-op dispatch" in n for n in plan_ac(like_measured, memory="40MiB", **kw).notes)


def test_for_torchtitan_auto_plans_one_of_its_modes_and_reports_what_schedc_would_run():
    from schedc.core.costs import FRAMEWORK_AC
    from schedc.planning import plan_ac

    profiles = {m: p.model_copy(update={"assumes": {"framework": "torchtitan"}})
                for m, p in _with_light(_modes(tiny_units(n_layers=6, head=1.0))).items()}
    res = plan_ac(profiles, ranks=2, microbatches=M, memory=TIGHT, placement="loop", time_limit=4, budget="work")
    assert res.ac.chosen in FRAMEWORK_AC and "light" not in res.ac.global_steps
    assert res.value == pytest.approx(min(v for v in res.ac.global_steps.values() if v is not None))
    assert res.ac.per_stage is not None and res.ac.per_stage["step"] < res.value  # reported beside it
    assert any("torchtitan applies one mode to every layer" in note for note in res.notes)


@pytest.mark.parametrize("placement,cap", [("loop", "12GiB"), ("v", "13.5GiB")])
def test_every_screened_candidate_fits_with_the_receive_buffers(placement, cap):
    from schedc.planning.ac import heuristic_step, mode_forms, stage_candidates
    from schedc.planning.request import parse_cap

    GiB = 2**30
    units = tiny_units(n_layers=6, head=1.0).model_copy(update={"boundary_bytes": 0.5 * GiB})
    # the newest torch's buffers: per boundary side one receive and M sends, the last stage's M inputs
    forms = mode_forms(_modes(units))
    found = stage_candidates(forms, placement, 2, M, parse_cap(cap).value)
    assert found
    for depth, counts, specs in found:
        assert heuristic_step(forms, counts, specs, placement, 2, M, parse_cap(cap), "makespan") is not None, \
            (depth, counts, specs)


def test_a_checkpointed_choice_in_a_v_never_splits_its_stages():
    res = _auto("9GiB", placement="v")  # without checkpointing nothing fits
    modes = [res.ac.chosen] * len(res.counts) if isinstance(res.ac.chosen, str) else res.ac.chosen
    split = {a.stage for _, a in res.schedule.all_actions() if a.kind in ("I", "W")}
    assert [m for m in modes if m != "none"]
    assert not [s for s, m in enumerate(modes) if m != "none" and s != 0 and s in split]


def _write_modes(tmp_path) -> list[str]:
    args = []
    for mode, units in _modes(tiny_units(n_layers=6, head=1.0)).items():
        units.save(tmp_path / f"{mode}.json")
        args += ["--profile", f"{mode}={mode}.json"]
    return args


def _plan_in(tmp, memory: str):
    out = _schedc("plan", *_write_modes(tmp), "--ac", "auto", "--ranks", "2", "--mb", str(M), "--memory", memory,
                  "--placement", "loop", "--time-limit", "4", "--budget", "work", "--quiet", cwd=tmp)
    assert out.returncode == 0, out.stderr
    return tmp, out.stdout


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """`schedc plan --ac auto` of the tiny model under the tight cap: (folder, stdout)."""
    return _plan_in(tmp_path_factory.mktemp("plan_ac"), TIGHT)


@pytest.fixture(scope="module")
def planned_stacked(tmp_path_factory):
    """The same under a tighter cap, where a stage checkpoints one layer fully and the others
    selectively."""
    return _plan_in(tmp_path_factory.mktemp("plan_ac_stacked"), STACKED_CAP)


def test_cli_prints_global_modes_and_the_per_stage_choice_side_by_side_and_how_to_launch_it(planned):
    tmp, stdout = planned
    report = json.loads((tmp / "plan.json").read_text())
    modes = report["assumes"]["activation_checkpoint"]
    assert isinstance(modes, list) and len(modes) == 2
    assert "activation checkpointing for the whole model (what torchtitan and NeMo launch): none " in stdout
    line = re.search(r"per stage \(schedc's runtime; checkpointed stages run B\): (.*) on \[(.*)\] \(loop; "
                     r"backward I\+W [BI+W]+\): .*% shorter than the best global mode", stdout)
    assert line and json.loads(line.group(1)) == modes, stdout
    assert f"chosen: {json.dumps(modes)}" in stdout
    assert "bound for this partition and per-stage checkpointing" in stdout
    assert "pipe = load_pipeline('plan.csv', model, loss_fn, device, **plan_settings('plan.json'))" in stdout
    assert "torchrun --nproc-per-node 2 examples/train.py --plan plan.json" in stdout


def test_plan_settings_reads_the_per_stage_modes_and_blocks_and_names_what_is_missing(planned, tmp_path):
    from schedc.errors import SchedcError
    from schedc.runtime.checkpointing import plan_settings

    tmp, _ = planned
    report = json.loads((tmp / "plan.json").read_text())
    got = plan_settings(tmp / "plan.json")
    assert got["activation_checkpoint"] == report["assumes"]["activation_checkpoint"]
    counts = report["plan"]["units_per_stage"]
    assert got["layers_per_stage"] == [counts[0] - 1, *counts[1:-1], counts[-1] - 1]  # less embedding, head
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps({"assumes": {}}))
    with pytest.raises(SchedcError, match=r'plan.json: no "partition"'):
        plan_settings(bad)
    bad.write_text(json.dumps({"partition": [["layers.0"]], "assumes": {"activation_checkpoint": ["some"]}}))
    with pytest.raises(SchedcError, match=r"activation_checkpoint\[0\]: 'some' is not one of"):
        plan_settings(bad)


# ------------------------------------------------------------------ schedc's runtime runs the plan


def rank_runs_the_plan(rank: int, world: int, plan_json: str):
    """On each rank: the plan's pipeline (its per-stage checkpointing) and the same CSV without
    checkpointing: tensors autograd saved, the loss, and each gradient's largest relative error
    against the unsplit model in a first step; block forwards in a second."""
    import torch

    from schedc.runtime import GPT, GPTConfig, lm_loss, load_pipeline, make_batch
    from schedc.runtime.checkpointing import plan_settings

    settings = plan_settings(plan_json)
    cfg = GPTConfig(vocab_size=32, hidden=16, layers=sum(settings["layers_per_stage"]), heads=2, seq_len=8,
                    dtype="float64")
    x, y = make_batch(cfg, 2 * M, seed=3)
    ref = GPT(cfg, seed=1)
    lm_loss(ref(x), y).backward()
    out = {}
    for label, ac in (("plan", settings["activation_checkpoint"]), ("none", "none")):
        model = GPT(cfg, seed=1)
        pipe = load_pipeline(plan_json.replace(".json", ".csv"), model, lm_loss,
                             layers_per_stage=settings["layers_per_stage"], activation_checkpoint=ac)
        runs, saved = {}, [0]
        for s, module in pipe.modules.items():
            for k, block in enumerate(module.blocks):
                first = next(block.children())  # called again when the block's forward is recomputed
                first.register_forward_hook(lambda *a, key=(s, k): runs.__setitem__(key, runs.get(key, 0) + 1))

        def pack(t):
            saved[0] += 1
            return t

        losses: list = []
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            pipe.step(x, target=y, losses=losses)
        mine = {id(p) for p in pipe.parameters()}
        err = max((p.grad - q.grad).abs().max().item() / (q.grad.abs().max().item() + 1e-30)
                  for p, q in zip(model.parameters(), ref.parameters()) if id(p) in mine)
        # block forwards counted in a second step: the first also runs torch's metadata inference
        # (a forward, and on every stage but the first a backward that recomputes checkpointed blocks)
        runs.clear()
        pipe.step(x, target=y)
        out[label] = {"stages": sorted(pipe.modules), "runs": [runs[key] for key in sorted(runs)], "saved": saved[0],
                      "loss": (sum(losses) / len(losses)).item() if losses else None, "rel_err": err}
    return out


def test_schedc_runtime_runs_the_per_stage_plan_recomputing_where_it_checkpoints(planned):
    _check_runs_the_plan(planned[0])


def test_schedc_runtime_runs_a_stage_whose_blocks_checkpoint_fully_and_selectively(planned_stacked):
    modes = json.loads((planned_stacked[0] / "plan.json").read_text())["assumes"]["activation_checkpoint"]
    assert any(isinstance(m, list) and {"full", "selective"} <= set(m) for m in modes), modes
    _check_runs_the_plan(planned_stacked[0])


def _check_runs_the_plan(tmp):
    from _dist import run_ranks

    modes = json.loads((tmp / "plan.json").read_text())["assumes"]["activation_checkpoint"]
    results = run_ranks(rank_runs_the_plan, 2, timeout=120, plan_json=str(tmp / "plan.json"))
    for rank, got in enumerate(results):
        assert "ok" in got, f"rank {rank}: {got.get('error')}\n{got.get('traceback', '')}"
        plan, none = got["ok"]["plan"], got["ok"]["none"]
        (stage,) = plan["stages"]
        assert set(none["runs"]) == {M}  # every block's forward once per microbatch
        assert plan["rel_err"] < 1e-10 and none["rel_err"] < 1e-10  # the unsplit model's gradients
        per_block = [modes[stage]] * len(plan["runs"]) if isinstance(modes[stage], str) else modes[stage]
        # a checkpointed block runs its forward once more per microbatch, in the backward
        assert plan["runs"] == [2 * M if m != "none" else M for m in per_block], (rank, modes, plan)
        if any(m != "none" for m in per_block):  # ... and autograd keeps fewer tensors from F
            assert plan["saved"] < none["saved"]
        else:
            assert plan["saved"] == none["saved"]
    last = [g["ok"]["plan"] for g in results if g["ok"]["plan"]["loss"] is not None]
    assert len(last) == 1


def train_plan(folder) -> None:
    """`torchrun --nproc-per-node 2 examples/train.py --plan plan.json` in `folder` (gloo, a tiny model,
    two steps) trains with the plan's activation checkpointing."""
    from _dist import ROOT, free_port, worker_env

    modes = json.loads((folder / "plan.json").read_text())["assumes"]["activation_checkpoint"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(ROOT / "examples" / "train.py"), "--plan", "plan.json",
           "--steps", "2", "--warmup", "0", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--vocab", "64",
           "--backend", "gloo", "--timeout", "60"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=worker_env(), cwd=str(folder))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"activation checkpointing {modes}" in out.stdout
    assert len(re.findall(r"^step +\d+ +loss ", out.stdout, re.M)) == 2


def test_examples_train_launches_the_plan_as_printed(planned):
    train_plan(planned[0])


def test_a_plan_without_its_csv_is_refused_in_one_line_before_any_process_group(tmp_path):
    from _dist import ROOT, worker_env

    (tmp_path / "plan.json").write_text("{}")
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "train.py"), "--plan", "plan.json"],
                         capture_output=True, text=True, timeout=120, env=worker_env(), cwd=str(tmp_path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "error: --plan plan.json: the schedule plan.csv is not beside it" in out.stderr


def test_ac_auto_where_nothing_fits_names_the_least_cap_not_an_infinite_bound():
    from schedc.errors import SchedcError

    with pytest.raises(SchedcError) as e:
        _auto("1GiB")
    assert "cannot beat" not in str(e.value) and "the smallest cap it fits is memory=" in str(e.value), str(e.value)


def test_a_per_stage_search_out_of_time_says_so_and_names_the_time_limit(monkeypatch):
    # the per-stage search given no time of its own (its end already past, on the work clock the
    # tiny plans run on): it must not read as "no per-stage choice fits"
    import schedc.planning.ac as ac
    from schedc.planning.clock import clock_now

    search = ac._per_stage_choice
    monkeypatch.setattr(ac, "_per_stage_choice", lambda forms, best, mode, kwargs, end, *rest, **kw:
                        search(forms, best, mode, kwargs, clock_now() - 1.0, *rest, **kw))
    res = _auto(TIGHT)
    assert res.ac.per_stage is None
    assert "the time limit ran out" in res.ac.per_stage_missing and "--time-limit" in res.ac.per_stage_missing
    assert "fits the cap" not in res.ac.per_stage_missing


def test_stages_sized_for_offload_hold_fewer_microbatches_and_recompute_less():
    # sized to hold at most 2 microbatches on the device (offload keeps the others) rather than
    # 1F1B's 4, 3 and 2 in flight, the stages checkpoint fewer layers, and no stage but the last
    # splits its backward (the offload heuristic holds a split stage's bytes for W from its F on)
    from schedc.planning.ac import layer_units, mode_forms, stage_candidates

    GiB = 2**30
    forms = mode_forms(_modes(tiny_units(n_layers=6, head=1.0)))
    layers = np.concatenate([[0], np.cumsum(layer_units(forms))])

    def checkpointed(counts, specs):
        bounds = np.concatenate([[0], np.cumsum(counts)])
        return sum(min(k, int(layers[bounds[s + 1]] - layers[bounds[s]])) for s, (form, k) in enumerate(specs)
                   if form not in ("none", "none-b"))

    [(_, counts, specs)] = stage_candidates(forms, "loop", 4, M, 6 * GiB, depths=(1.0,))
    [(_, sized_counts, sized)] = stage_candidates(forms, "loop", 4, M, 6 * GiB, depths=(1.0,), hold_at_most=2)
    assert checkpointed(sized_counts, sized) < checkpointed(counts, specs)
    assert all(form != "none" for form, _ in sized[:-1])
