"""schedc emulate: schedules run in torch's own pipeline runtime with sleeping stages match the
simulator's torch model; stage 0 behaves as in a real torch run; bad input fails fast."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

from _dist import run_ranks, worker_env  # noqa: E402
from schedc.baselines import make_baseline  # noqa: E402
from schedc.costs import Profile  # noqa: E402
from schedc.csvio import write_csv  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.runtime.emulate import emulate  # noqa: E402
from schedc.runtime.launch import LaunchError  # noqa: E402
from schedc.solver.compile import compile_schedule  # noqa: E402

# Sleeps of 10 ms per profile unit; the machine running the tests may be shared and loaded, so the
# tolerance is wide here; benchmarks/emulate_check.py shows the 3% target on a quiet host.
SCALE = 0.01
TOLERANCE = 0.15
MB = 4


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    """1F1B, ZB-H1 and a compiled schedule (loop), ZB-V and a compiled schedule (V): all on 4
    ranks, edge-heavy costs without comm (the emulation has none), in one launch."""
    d = tmp_path_factory.mktemp("emulate")
    loop, v = Profile.edge_heavy(4, comm=0.0), Profile.edge_heavy(8, comm=0.0)
    schedules = {
        "1f1b": (make_baseline("1f1b", 4, MB), loop),
        "zb-h1": (make_baseline("zb-h1", 4, MB), loop),
        "compiled-loop": (compile_schedule(4, MB, n_ranks=4, placement="loop", profile=loop, memory="1p",
                                           time_limit=2).schedule, loop),
        "zb-v": (make_baseline("zb-v", 8, MB), v),
        "compiled-v": (compile_schedule(8, MB, n_ranks=4, placement="v", profile=v, memory="1p",
                                        time_limit=2).schedule, v),
    }
    paths = []
    for name, (schedule, _) in schedules.items():
        paths.append(d / f"{name}.csv")
        write_csv(schedule, paths[-1])
    runs = emulate(paths, [p for _, p in schedules.values()], scale=SCALE, steps=3, warmup=1, overhead_steps=5)
    return dict(zip(schedules, runs))


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "compiled-loop", "zb-v", "compiled-v"])
def test_emulated_step_matches_the_prediction(four_ranks, name):
    run = four_ranks[name]
    assert abs(run.ratio - 1) <= TOLERANCE, (name, run.measured_step, run.predicted_step)
    for measured, predicted in zip(run.measured_finish, run.predicted_finish):
        assert abs(measured - predicted) <= TOLERANCE * run.predicted_step, (name, measured, predicted)


def test_compiled_is_no_slower_than_zb_h1_on_edge_heavy_costs(four_ranks):
    compiled, zb_h1 = four_ranks["compiled-loop"], four_ranks["zb-h1"]
    assert compiled.plain_prediction.makespan <= zb_h1.plain_prediction.makespan * (1 + 1e-6)
    assert compiled.measured_step <= zb_h1.measured_step * (1 + TOLERANCE / 2), (compiled.measured_step,
                                                                                 zb_h1.measured_step)


def test_sleeping_stages_split_as_torch_splits_a_real_backward(four_ranks):
    run = four_ranks["zb-h1"]
    cost = Profile.edge_heavy(4, comm=0.0).stages
    seconds = run.action_seconds
    # stage 0: torch skips the input backward, its W runs the whole backward (I + W)
    assert seconds[(0, "I")] < 0.2 * SCALE * cost[0].backward_input
    assert seconds[(0, "W")] == pytest.approx(SCALE * cost[0].backward, rel=TOLERANCE)
    for s in (1, 2, 3):
        assert seconds[(s, "I")] == pytest.approx(SCALE * cost[s].backward_input, rel=TOLERANCE)
        assert seconds[(s, "W")] == pytest.approx(SCALE * cost[s].backward_weight, rel=TOLERANCE)


DEADLOCK_CSV = "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n"  # rank 0 waits for 1B0, rank 1 for 0F1


def test_a_deadlocking_csv_fails_before_any_rank_starts(tmp_path):
    path = tmp_path / "dead.csv"
    path.write_text(DEADLOCK_CSV)
    t0 = time.monotonic()
    with pytest.raises(SchedcError, match=r"dead\.csv: the schedule deadlocks: .* reorder"):
        emulate([path], Profile.uniform(2), scale=SCALE)
    assert time.monotonic() - t0 < 5


def test_a_profile_for_other_stages_is_refused(tmp_path):
    path = tmp_path / "zb.csv"
    write_csv(make_baseline("zb-h1", 2, 4), path)
    with pytest.raises(SchedcError, match=r"zb\.csv: the schedule has 2 stages but the profile describes 3"):
        emulate([path], Profile.uniform(3), scale=SCALE)


def test_a_launch_that_mismatches_the_csv_fails_fast_in_the_ranks(tmp_path):
    path = tmp_path / "two.csv"
    write_csv(make_baseline("1f1b", 2, 2), path)
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as e:
        emulate([path], Profile.uniform(2), scale=SCALE, ranks=3, timeout=90)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith("emulate: rank ")
    assert "two.csv: the CSV has 2 rows (ranks) but the pipeline group has 3 ranks" in message
    assert time.monotonic() - t0 < 60


def test_cli_deadlock_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "dead.csv").write_text(DEADLOCK_CSV)
    out = subprocess.run([sys.executable, "-m", "schedc.cli", "emulate", "dead.csv", "--costs", "1,1,1"],
                         capture_output=True, text=True, cwd=tmp_path, env=worker_env(), timeout=60)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("schedc emulate: error: dead.csv: the schedule deadlocks")


# ----------------------------------------------------------- stage 0 in a real (computing) torch run


def real_two_stages(rank: int, world: int, csv: str) -> dict:
    """A 2-stage MLP run by torch's _PipelineScheduleRuntime. Per action kind of this rank: the
    median seconds, and which gradients autograd computed while such an action ran ("output":
    the gradient of a layer's output, on the input path; "weight": a parameter's gradient)."""
    import re
    import statistics

    import torch
    import torch.nn as nn
    from torch.distributed.pipelining import PipelineStage

    from schedc.runtime.calibrate import timed_actions
    from schedc.runtime.pipeline import build_schedule

    torch.manual_seed(rank)
    width = 256
    layers = [nn.Linear(width, width) for _ in range(4)]
    fired: list[tuple[float, str]] = []

    def note(what):
        return lambda grad: fired.append((time.perf_counter(), what))

    def watch_output(module, inputs, out):
        out.register_hook(note("output"))

    for layer in layers:
        layer.weight.register_hook(note("weight"))
        layer.register_forward_hook(watch_output)
    module = nn.Sequential(*[nn.Sequential(layer, nn.Tanh()) for layer in layers])
    stage = PipelineStage(module, rank, world, torch.device("cpu"))
    runtime = build_schedule(csv, stage, loss_fn=lambda out, tgt: ((out - tgt) ** 2).mean())
    x, y = torch.randn(4 * 64, width), torch.randn(4 * 64, width)
    times: dict[str, list[float]] = {}
    grads: dict[str, set[str]] = {}
    for step in range(3):
        fired.clear()
        with timed_actions() as rec:
            runtime.step(*((x,) if rank == 0 else ()), target=y if rank == world - 1 else None)
        spans = [(re.match(r"^PP:\d+([FIW])\d+$", label), enter, wait, exit_)
                 for label, enter, wait, exit_ in rec.events]
        spans = [(m.group(1), enter, wait, exit_) for m, enter, wait, exit_ in spans if m]
        if step:  # the first step also infers shapes
            for t, what in fired:
                kind = next((k for k, enter, _, exit_ in spans if enter <= t <= exit_), "outside")
                grads.setdefault(kind, set()).add(what)
            for kind, enter, wait, exit_ in spans:
                times.setdefault(kind, []).append(exit_ - enter - wait)
    return {"seconds": {k: statistics.median(v) for k, v in times.items()},
            "grads": {k: sorted(v) for k, v in grads.items()}}


def test_stage_0_rule_holds_in_a_real_torch_run(tmp_path):
    """torch runs no backward-for-inputs on stage 0 (its I computes nothing, takes ~no time) and
    its W does the whole backward; on stage 1 the input path runs in I and the weights in W: the
    simulator's torch rule, seen in a real computing run."""
    path = tmp_path / "zb.csv"
    write_csv(make_baseline("zb-h1", 2, 4), path)
    results = run_ranks(real_two_stages, 2, timeout=120, csv=str(path))
    assert all("ok" in r for r in results), results
    first, last = (r["ok"] for r in results)
    assert first["grads"] == {"W": ["output", "weight"]}, first
    assert last["grads"]["I"] == ["output"] and "weight" in last["grads"]["W"], last
    assert first["seconds"]["I"] < 0.2 * last["seconds"]["I"], (first, last)
