"""`schedc plan`: the bound over partitions holds, the plan finds the best partition on tiny models,
beats torchtitan's default split where the head is heavy, and bad input fails in one line."""

from __future__ import annotations

import itertools
import json
import math
import signal
import subprocess
import sys
import time

import pytest
from exhaustive import exact_optimum  # noqa: E402  (tests/exhaustive.py: the oracle these tests serve)

from schedc.core.costs import Profile, StageCost
from schedc.core.partition import partition_bound, partitions_below, stage_modules, torchtitan_default_counts
from schedc.core.simulate import simulate
from schedc.errors import SchedcError
from schedc.io import csvio
from schedc.planning import own_bound, parse_cap, plan, problem_for
from schedc.planning.problem import holds_one_microbatch

GiB = 2**30


def tiny_units(n_layers: int = 3, head: float = 2.0, seed: int = 0, modules: bool = True, comm: float = 0.1) -> Profile:
    """Embedding, n_layers layers of slightly different cost, a head `head` times a layer."""
    units = [StageCost(forward=0.05, backward_input=0.0, backward_weight=0.05, activation_bytes=0.2 * GiB,
                       static_bytes=2 * GiB, modules=["tok_embeddings"] if modules else None)]
    for k in range(n_layers):
        f = 1.0 + 0.1 * ((k + seed) % 3)
        units.append(StageCost(forward=f, backward_input=1.1 * f, backward_weight=0.9 * f, activation_bytes=1 * GiB,
                               static_bytes=1 * GiB, modules=[f"layers.{k}"] if modules else None))
    units.append(StageCost(forward=head, backward_input=head, backward_weight=head, activation_bytes=2 * GiB,
                           static_bytes=2 * GiB, modules=["norm", "lm_head"] if modules else None))
    return Profile(stages=units, comm=comm, model="tiny per-unit")


def compositions(n: int, parts: int):
    for cuts in itertools.combinations(range(1, n), parts - 1):
        bounds = (0,) + cuts + (n,)
        yield [bounds[k + 1] - bounds[k] for k in range(parts)]


@pytest.mark.parametrize("placement,ranks,mb", [("loop", 2, 3), ("v", 2, 2)])
@pytest.mark.parametrize("memory", ["none", "8GiB"])
@pytest.mark.parametrize("objective", ["makespan", "span"])
def test_bound_over_partitions_never_exceeds_the_best_partitions_optimum(placement, ranks, mb, memory, objective):
    units = tiny_units(n_layers=3, seed=1)
    limit = parse_cap(memory)
    cap = float("inf") if limit.kind == "none" else limit.value
    stages = ranks * (2 if placement == "v" else 1)
    best = float("inf")
    for counts in compositions(units.n_stages, stages):
        problem = problem_for(units, counts, placement, ranks, mb, limit, objective)
        try:
            value, _ = exact_optimum(problem)
        except SchedcError:  # this partition cannot hold one microbatch under the cap
            continue
        best = min(best, value)
    bound = partition_bound(units, ranks, mb, cap, placement, objective)
    assert best < float("inf")
    assert bound.value <= best * (1 + 1e-9), (bound, best)
    assert bound.value > 0.5 * best  # and it is not vacuous
    # plan's bound, where the partitions that could beat its answer are bounded one by one
    res = plan(profile=units, ranks=ranks, microbatches=mb, memory=memory, placement=placement,
               objective=objective, time_limit=3)
    assert bound.value * (1 - 1e-9) <= res.bound <= best * (1 + 1e-9), (bound.value, res.bound, best)


@pytest.mark.parametrize("placement,mb,memory", [("v", 2, "none"), ("v", 4, "none")])
def test_partitions_that_could_beat_the_answer_are_bounded_one_by_one(placement, mb, memory):
    # the dynamic program's relaxation stays well below the best plan; bounding each partition
    # whose relaxation is below the answer (one-rank relaxation included) proves the answer optimal
    units = tiny_units(n_layers=3, seed=1)
    limit = parse_cap(memory)
    relaxed = partition_bound(units, 2, mb, float("inf") if limit.kind == "none" else limit.value, placement)
    res = plan(profile=units, ranks=2, microbatches=mb, memory=memory, placement=placement, time_limit=5)
    assert relaxed.value < res.value - 0.5
    assert res.bound == pytest.approx(res.value) and res.gap < 1e-9
    assert res.report["plan"]["partitions_bounded_one_by_one"][placement] >= 1


@pytest.mark.parametrize("placement,ranks", [("loop", 3), ("v", 2)])
@pytest.mark.parametrize("memory", ["none", "9GiB"])
def test_partitions_below_a_threshold_are_listed_exactly(placement, ranks, memory):
    units = tiny_units(n_layers=5, head=2.5)
    limit = parse_cap(memory)
    cap = float("inf") if limit.kind == "none" else limit.value
    theta, listed = partitions_below(units, ranks, 4, cap, placement, "makespan", float("inf"), 10**6)
    fitting = [tuple(c) for c in compositions(units.n_stages, ranks * (2 if placement == "v" else 1))
               if holds_one_microbatch(problem_for(units, c, placement, ranks, 4, limit, "makespan"))]
    assert sorted(c for _, c in listed) == sorted(fitting)  # every partition that holds a microbatch
    values = dict((c, v) for v, c in listed)
    for counts, value in values.items():  # each value is a relaxation of the partition's own bound
        assert value <= own_bound(problem_for(units, counts, placement, ranks, 4, limit, "makespan")) * (1 + 1e-9)
    mid = sorted(values.values())[len(values) // 2]
    theta, below = partitions_below(units, ranks, 4, cap, placement, "makespan", mid, 10**6)
    assert theta == mid and sorted(c for _, c in below) == sorted(c for c, v in values.items() if v < mid)
    # too many below the threshold: a lower one, and everything left out is at or above it
    theta, few = partitions_below(units, ranks, 4, cap, placement, "makespan", float("inf"), 3)
    assert len(few) <= 3
    assert all(v >= theta for c, v in values.items() if c not in {c for _, c in few})


def test_two_ranks_together_settle_partitions_each_rank_alone_could_not(monkeypatch):
    # 3 ranks in a V: the one-rank bounds leave partitions below the best step (40.6 against
    # 43.71); two ranks together show that none can beat it, and the short compiles skip them
    pytest.importorskip("ortools")
    from schedc.solver.bounds import pair as pair_relaxation

    args = dict(profile=tiny_units(n_layers=7, head=2.0, seed=0), ranks=3, microbatches=3, memory="9GiB",
                placement="v", time_limit=15)  # a busy machine: the pair relaxation runs on the wall clock
    lines = []
    res = plan(**args, progress=lines.append)
    assert res.gap < 1e-9 and res.bound == pytest.approx(res.value)
    skipped = [line for line in lines if "two ranks together need" in line and "not compiled" in line]
    assert skipped and len(res.candidates) == 1
    monkeypatch.setattr(pair_relaxation, "rank_relaxation_values", lambda g, enough=None: None)  # no pairs
    alone = plan(**args)
    assert alone.value == pytest.approx(res.value) and alone.bound < res.value - 1
    assert len(alone.candidates) > 1


def test_relaxed_terms_stay_below_each_partitions_own_bound():
    # the dynamic program minimizes a relaxation of schedc.solver.bounds.chains: on a single partition
    # (the only one when units = stages) it must not exceed that partition's bound
    units = tiny_units(n_layers=4, head=3.0)
    for placement, ranks in (("loop", 6), ("v", 3)):
        for memory in ("none", "9GiB"):
            limit = parse_cap(memory)
            cap = float("inf") if limit.kind == "none" else limit.value
            for mb in (3, 8):
                pb = partition_bound(units, ranks, mb, cap, placement)
                own = own_bound(problem_for(units, [1] * 6, placement, ranks, mb, limit, "makespan"))
                assert pb.value <= own * (1 + 1e-9)


def test_a_bound_asked_only_whether_it_is_below_a_value_stays_a_bound():
    # the certificate asks own_bound(problem, enough): below `enough` it must be the full bound,
    # else any value between `enough` and the full bound (it may stop at the first rank that
    # reaches `enough`)
    units = tiny_units(n_layers=6, head=3.0)
    limit = parse_cap("9GiB")
    for placement, ranks in (("loop", 4), ("v", 2)):
        for counts in ([2, 2, 2, 2], [1, 3, 2, 2], [3, 1, 1, 3]):
            problem = problem_for(units, counts, placement, ranks, 8, limit, "makespan")
            full = own_bound(problem)
            for enough in (0.5 * full, full, 2 * full):
                early = own_bound(problem, enough)
                assert early <= full * (1 + 1e-12)
                assert early == full if full < enough else early >= enough * (1 - 1e-12)


def test_the_search_moves_a_unit_across_stages_and_finds_the_least_own_bound():
    # one step of the search moves a unit from any stage to any other, the stages between keeping
    # their counts: in a V a layer goes from the middle to rank 0 without the ranks between taking
    # it on the way (where a maximum over ranks would rise); and it finds the least own bound
    import importlib

    plan_module = importlib.import_module("schedc.planning.search")
    units = tiny_units(n_layers=6, head=3.0)
    limit = parse_cap("16GiB")
    args = (units, "v", 2, 6, limit, "makespan")
    one_step = plan_module._best_first(*args, [(5, 1, 1, 1)], time.monotonic())  # past its deadline: a few dozen
    assert (4, 1, 1, 2) in one_step and (4, 2, 1, 1) in one_step
    for counts, value in one_step.items():
        assert value == pytest.approx(own_bound(problem_for(units, counts, "v", 2, 6, limit, "makespan")))
    # under a tight cap (far=False) only one boundary moves: the own bound ranks poorly there
    near = plan_module._best_first(*args, [(5, 1, 1, 1)], time.monotonic(), far=False)
    assert (4, 2, 1, 1) in near and (4, 1, 1, 2) not in near
    scores = plan_module._best_first(*args, [(5, 1, 1, 1)], time.monotonic() + 30)
    every = {tuple(c): own_bound(problem_for(units, c, "v", 2, 6, limit, "makespan"))
             for c in compositions(units.n_stages, 4) if holds_one_microbatch(problem_for(units, c, "v", 2, 6, limit,
                                                                                           "makespan"))}
    assert min(scores.values()) == pytest.approx(min(every.values()))


def test_the_certificate_is_skipped_where_a_partition_meets_the_relaxed_bound(monkeypatch):
    # where step 2 already found a partition whose own bound is the dynamic program's bound, no
    # partition can raise the bound over partitions: nothing is listed or bounded, the time goes
    # to the compiles
    import importlib

    plan_module = importlib.import_module("schedc.planning.certificate")
    units = tiny_units(n_layers=3, seed=1)
    limit = parse_cap("none")
    pb = partition_bound(units, 2, 4, math.inf, "loop", "makespan")

    def listed(*args, **kwargs):
        raise AssertionError("no partition should be listed")

    monkeypatch.setattr(plan_module, "partitions_below", listed)
    lines = []
    bounds, certified, setters, reached = plan_module.certified_bounds(
        units, [("loop", pb)], 2, 4, limit, math.inf, "makespan", 2 * pb.value, False, 10.0, {}, False,
        lines.append, time.monotonic(), {"loop": pb.value})
    assert bounds == {"loop": pb.value} and certified == {"loop": 0}
    assert setters == [] and reached == {}
    assert "none can raise it" in lines[0]


def test_among_equal_bounds_the_partition_to_compile_is_bounded_in_full_with_the_fewest_units_first():
    import importlib

    plan_module = importlib.import_module("schedc.planning.certificate")
    own_so_far, own = plan_module.OWN_SO_FAR, plan_module.OWN
    heap = [(1.0, own_so_far, (1, 1, 4)), (1.0, own, (2, 1, 3)), (1.0, own, (1, 2, 3)), (1.1, own, (1, 1, 4))]
    assert min(heap, key=plan_module._setter_key) == (1.0, own, (1, 2, 3))


def test_the_request_checks_the_inputs_once_before_any_search():
    # schedc.planning.request: the cap in bytes, the placements a profile can fill (auto drops the V
    # where every stage would not get a unit), the units lowered once; frozen, and each bad input
    # refused with what works
    import dataclasses

    from schedc.planning import PlanRequest

    units = tiny_units(n_layers=3)  # 5 units
    common = {"profile": units, "microbatches": 4, "objective": "makespan", "time_limit": 5.0, "source": "u.json"}
    req = PlanRequest.build(ranks=3, memory="20GiB", placement="auto", **common)
    assert req.cap == 20 * GiB and req.placements == ["loop"] and req.units.n == units.n_stages
    assert PlanRequest.build(ranks=2, memory="none", placement="auto", **common).placements == ["loop", "v"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.ranks = 4
    with pytest.raises(SchedcError, match="Kp is relative to 1F1B"):
        PlanRequest.build(ranks=2, memory="1.5p", placement="auto", **common)
    with pytest.raises(SchedcError, match=r"u.json: 5 units cannot fill 6 stages \(v on 3 ranks\)"):
        PlanRequest.build(ranks=3, memory="20GiB", placement="v", **common)
    with pytest.raises(SchedcError, match=r"u.json: unit 4 \(norm, lm_head\) alone needs .* --memory 4.00GiB"):
        PlanRequest.build(ranks=2, memory="3GiB", placement="loop", **common)


def test_plan_finds_the_best_partition_of_a_tiny_model():
    units = tiny_units(n_layers=3, head=2.5)
    res = plan(profile=units, ranks=2, microbatches=3, memory="none", placement="loop", time_limit=10)
    optimum = min(exact_optimum(problem_for(units, c, "loop", 2, 3, parse_cap("none"), "makespan"))[0]
                  for c in compositions(units.n_stages, 2))
    assert res.value <= optimum * (1 + 1e-6)
    assert res.bound <= res.value and res.gap <= 0.25


def test_plan_moves_layers_off_a_heavy_head_and_reports_it():
    units = tiny_units(n_layers=6, head=3.0)
    res = plan(profile=units, ranks=2, microbatches=4, memory="20GiB", placement="loop", time_limit=8)
    default = next(c for c in res.comparisons if c.split == "torchtitan default")
    assert default.counts == torchtitan_default_counts(8, 2) == [4, 4]
    assert res.counts[0] > res.counts[1]  # the head's stage takes fewer layers
    assert res.value < default.value
    # the partition names every module once, in model order, one list per stage
    flat = [m for stage in res.partition for m in stage]
    assert flat == [m for u in units.stages for m in u.modules]
    assert len(res.partition) == 2 == len(res.report["partition"])
    assert res.report["plan"]["units_per_stage"] == res.counts
    # the merged profile is a per-stage profile that simulates the plan's schedule to its value
    merged = Profile.model_validate(res.report["profile"])
    assert simulate(res.schedule, merged.executed(), parse_cap("20GiB")).makespan == pytest.approx(res.value)
    assert res.report["frameworks"]["torchtitan"]["config"]["parallelism.module_fqns_per_model_part"] == res.partition


def test_the_final_compile_starts_from_a_fresh_warm_start_when_it_is_better(monkeypatch):
    # a short compile gives its warm start a tenth of its seconds; the final compile gets a fresh
    # warm start with a fifth of its own when that one is shorter (here the short compile's answer
    # is ZB-V, 46.7; the list heuristic finds 40.5)
    import importlib
    import types

    import schedc.solver.compile as compile_module
    from schedc.solver.engines.warm import build_baselines

    heavy = (2, 6)
    units = Profile(stages=[StageCost(forward=2.0 if s in heavy else 1.0, backward_input=2.2 if s in heavy else 1.1,
                                      backward_weight=1.8 if s in heavy else 0.9, activation_bytes=1.0,
                                      modules=[f"layers.{s}"]) for s in range(8)], comm=0.2)
    counts, limit = [1] * 8, parse_cap("none")
    _, zb_v, sim = next(b for b in build_baselines(problem_for(units, counts, "v", 4, 4, limit, "makespan"))
                        if b[0] == "zb-v")
    short = types.SimpleNamespace(schedule=zb_v, sim=sim, status="feasible", value=sim.makespan)
    started = []

    def compile_as_given(problem, time_limit, seed=0, warm=None):  # the final compile, minus its search
        started.append(warm)
        return types.SimpleNamespace(schedule=warm[0], sim=warm[1], status="feasible", value=warm[1].makespan)

    monkeypatch.setattr(compile_module, "compile_problem", compile_as_given)
    plan_module = importlib.import_module("schedc.planning.compiles")
    res, pl, got = plan_module.final_compile(units, (short.value, short, "v", counts), 4, 4, limit, "makespan",
                                              time_limit=5.0, seed=0, say=lambda line: None, t0=time.monotonic())
    assert sim.makespan == pytest.approx(46.7)
    assert started[0][1].makespan == pytest.approx(40.5) and res.value == pytest.approx(40.5)
    assert (pl, got) == ("v", counts)


def test_the_least_bound_partition_is_not_compiled_where_a_partition_as_low_lost(monkeypatch):
    # step 4b compiles the partition whose own bound is the least when the best step is well
    # above it; when a short compile already tried another partition with as low a bound and it
    # lost, the bound is loose there, and the time stays with the final compile
    import importlib
    import types

    import schedc.solver.compile as compile_module

    calls = []

    def compile_counted(problem, time_limit, seed=0, warm=None):
        calls.append(problem)
        return types.SimpleNamespace(schedule=None, sim=None, status="feasible", value=9.0)

    monkeypatch.setattr(compile_module, "compile_problem", compile_counted)
    plan_module = importlib.import_module("schedc.planning.compiles")
    units = tiny_units(n_layers=4)
    best = (10.0, types.SimpleNamespace(status="feasible"), "loop", (3, 3))
    setter = [(5.0, "loop", (2, 4))]
    lost = {"placement": "loop", "units_per_stage": [4, 2], "lower_bound": 5.0, "best_hand_made": None,
            "step": 12.0, "status": "feasible"}
    for candidates, compiled in (([], 1), ([lost], 0)):
        calls.clear()
        out = plan_module.compile_bound_setter(units, best, setter, list(candidates), {}, 2, 4, parse_cap("none"),
                                                "makespan", 20.0, 0, lambda line: None, time.monotonic())
        assert len(calls) == compiled
        assert out[0] == (9.0 if compiled else 10.0)


def test_auto_keeps_the_better_placement():
    units = tiny_units(n_layers=6, head=1.5)
    auto = plan(profile=units, ranks=2, microbatches=4, memory="none", placement="auto", time_limit=8)
    assert set(auto.bounds) == {"loop", "v", "interleaved"}  # two stages per rank interleaved too
    assert auto.bound == pytest.approx(min(auto.bounds.values()))
    for pl in ("loop", "v"):
        one = plan(profile=units, ranks=2, microbatches=4, memory="none", placement=pl, time_limit=4)
        assert auto.value <= one.value * (1 + 0.02)


def test_units_without_module_names_are_named_by_index():
    units = tiny_units(n_layers=2, modules=False)
    res = plan(profile=units, ranks=2, microbatches=2, memory="none", placement="loop", time_limit=3)
    assert any("no 'modules'" in n for n in res.notes)
    assert [m for s in res.partition for m in s] == [f"unit{k}" for k in range(4)]
    assert stage_modules(units, [1, 3]) == [["unit0"], ["unit1", "unit2", "unit3"]]


# ---------------------------------------------------------------- the command line


def _schedc(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "schedc.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_cli_writes_the_plan_its_report_and_a_profile_the_other_commands_take(tmp_path):
    tiny_units(n_layers=4, head=2.5).save(tmp_path / "units.json")
    out = _schedc("plan", "--profile", "units.json", "--ranks", "2", "--mb", "4", "--memory", "20GiB",
                  "--placement", "loop", "--time-limit", "5", "-o", "plan.csv", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "torchtitan default split" in out.stdout and "bound over every partition" in out.stdout
    assert "--parallelism.module_fqns_per_model_part tok_embeddings," in out.stdout
    assert 'pp_schedule_csv: "plan.csv"' in out.stdout
    report = json.loads((tmp_path / "plan.json").read_text())
    assert report["format"] == "schedc.report/v1" and len(report["partition"]) == 2  # a compile report, plus
    schedule = csvio.read_csv(tmp_path / "plan.csv")
    assert schedule.n_stages == 2
    sim = _schedc("simulate", "plan.csv", "--profile", "plan.profile.json", "--memory", "20GiB", cwd=tmp_path)
    assert sim.returncode == 0, sim.stderr
    assert f"makespan {report['predicted']['makespan']:.4g}" in sim.stdout
    fit = _schedc("validate", "plan.csv", "--for", "torchtitan:1F1B", "--partition", "plan.json", cwd=tmp_path)
    assert fit.returncode == 0 and "fits torchtitan:1F1B" in fit.stdout, fit.stderr


@pytest.mark.parametrize("delay", [0.3, 6.0])
def test_ctrl_c_during_a_plan_writes_the_best_plan_so_far(tmp_path, delay):
    # a plan that would search for 120 s (a tight cap in a V: no proof comes early); SIGINT while
    # Python loads (nothing to write yet) or during the search (the best plan so far is written)
    from schedc.model_costs import unit_profile

    unit_profile(layers=32, hidden=4096, vocab=128256, seq=4096, ffn_hidden=14336, heads=32,
                 kv_heads=8, impl="paper").save(tmp_path / "units.json")
    # the console script's entry (schedc_entry): it answers a signal before `import schedc` runs,
    # where `python -m schedc.cli` imports the package first
    proc = subprocess.Popen([sys.executable, "-m", "schedc_entry", "plan", "--profile", "units.json", "--ranks", "8",
                             "--mb", "16", "--memory", "40GiB", "--placement", "v", "--time-limit", "120", "--quiet",
                             "-o", "plan.csv"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=90)
    assert time.monotonic() - sent < 45, f"took {time.monotonic() - sent:.1f}s to stop after Ctrl-C"
    assert proc.returncode == 130 and "Traceback" not in err, (proc.returncode, err)
    if "wrote the best plan found so far to plan.csv" in err:
        report = json.loads((tmp_path / "plan.json").read_text())
        assert len(report["partition"]) == csvio.read_csv(tmp_path / "plan.csv").n_stages
        assert (tmp_path / "plan.profile.json").exists()
    else:  # before the plan started: nothing written
        assert err.endswith("interrupted\n") and sorted(f.name for f in tmp_path.iterdir()) == ["units.json"]


def _bad(tmp_path, units: Profile | dict, *args, memory="20GiB", ranks="2"):
    path = tmp_path / "units.json"
    if isinstance(units, dict):
        path.write_text(json.dumps(units))
    else:
        units.save(path)
    out = _schedc("plan", "--profile", "units.json", "--ranks", ranks, "--mb", "4", "--memory", memory,
                  "--time-limit", "3", "--quiet", "-o", "plan.csv", *args, cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert not any((tmp_path / n).exists() for n in ("plan.csv", "plan.json", "plan.profile.json"))
    return out.stderr


def test_relative_memory_is_refused_with_what_to_pass(tmp_path):
    err = _bad(tmp_path, tiny_units(), memory="1p")
    assert "Kp is relative to 1F1B" in err and "--memory 80GiB" in err


def test_a_unit_that_alone_exceeds_the_cap_is_named_with_the_cap_it_needs(tmp_path):
    err = _bad(tmp_path, tiny_units(), memory="3GiB")
    assert "unit 4 (norm, lm_head) alone needs 4.00GiB" in err and "--memory 4.00GiB" in err


def test_a_cap_no_partition_fits_says_the_smallest_that_does(tmp_path):
    # 5 units, 2 ranks: the best loop split holds 6.2 GiB on rank 0 or 7 GiB on rank 1
    err = _bad(tmp_path, tiny_units(), memory="5GiB", ranks="2")
    assert "no partition of the 5 units onto 2 ranks" in err and "smallest cap that does is --memory" in err


def test_more_stages_than_units_is_refused(tmp_path):
    err = _bad(tmp_path, tiny_units(n_layers=2), ranks="5")
    assert "4 units cannot fill 5 stages" in err


def test_duplicate_module_names_are_refused(tmp_path):
    units = tiny_units(n_layers=2).model_dump(exclude_none=True)
    units["stages"][2]["modules"] = ["layers.0"]
    err = _bad(tmp_path, units)
    assert "stages[2].modules: 'layers.0' is already in unit 1" in err


def test_an_explicit_partition_sets_the_stage_count_the_frameworks_build():
    from schedc.frameworks import framework_build

    assert framework_build("torchtitan", "1F1B", 4, partition=4).n_stages == 4
    v = framework_build("nemo", "ZBVZeroBubble", 2, partition=4)
    assert (v.n_stages, v.placement) == (4, "v")
    assert framework_build("torchtitan", "Interleaved1F1B", 2, partition=6).n_stages == 6
    with pytest.raises(SchedcError, match="1F1B needs exactly 1 stage per rank"):
        framework_build("torchtitan", "1F1B", 2, partition=4)
    with pytest.raises(SchedcError, match="not a multiple of the 2 PP ranks"):
        framework_build("nemo", "Interleaved1F1B", 2, partition=5)


def test_under_a_tight_cap_the_block_relaxation_ranks_the_partition_to_compile(monkeypatch):
    # step 4 under a tight cap: every partition that could lower the bound takes the block
    # relaxation's steps (schedc.solver.bounds.blocks; here a stand-in whose values are known), the bound
    # over partitions is the least they leave, and step 4b gets the partition they rank first,
    # not the one whose own bound is the least
    import importlib

    import schedc.solver.bounds.blocks as blocks_module
    from schedc.core.partition import partition_bound

    plan_module = importlib.import_module("schedc.planning.certificate")
    units = tiny_units(n_layers=4)
    limit = parse_cap("none")
    firsts = {u.modules[0] for u in units.stages}  # a unit's first module: counts units per stage
    best_counts = (5, 1)  # own bounds: 40.0 for (4, 2), 52.0 for (5, 1), 52.65 and more for the rest
    taken = []

    class Blocks:
        def __init__(self, problem, target, sizes):
            self.counts = tuple(sum(m in firsts for m in s.modules) for s in problem.profile.stages)
            self.steps, self.best, self.solved, self.target = list(sizes), 0.0, True, target

        @property
        def settled(self):
            return self.best >= self.target or not self.steps

        def next(self, deadline):
            taken.append((self.counts, self.steps.pop(0)))
            # the partition the blocks rank first gains nothing over its own bound, the others pass it
            self.best = 0.0 if self.counts == best_counts else 500.0
            return self.best

    monkeypatch.setattr(blocks_module, "BlockRelaxation", Blocks)
    pb = partition_bound(units, 2, 4, math.inf, "loop", "makespan")
    bounds, _, setters, reached = plan_module.certified_bounds(
        units, [("loop", pb)], 2, 4, limit, math.inf, "makespan", 100.0, False, 10.0, {}, True,
        lambda line: None, time.monotonic())
    own = {c: plan_module.own_bound(problem_for(units, c, "loop", 2, 4, limit, "makespan")) for (_, c) in reached}
    assert min(own, key=own.get) == (4, 2)  # the own bounds alone would name another one
    assert setters == [(pytest.approx(own[best_counts]), "loop", best_counts)]
    assert bounds["loop"] == pytest.approx(own[best_counts])
    assert reached[("loop", (4, 2))] == 500.0
    assert [n for c, n in taken if c == best_counts] == list(plan_module.CERTIFY_BLOCKS)
    assert {c for c, _ in taken} == {(4, 2), best_counts}  # the others' own bounds already pass it


def test_under_a_tight_cap_two_short_compiles_and_no_second_round(monkeypatch):
    # where the best partition so far leaves a rank room for fewer than two microbatches of its
    # stages, step 3 stops at two short compiles per placement and skips the second round: the
    # time goes to the block relaxation and the compile of the partition it ranks first
    import importlib
    import types

    import schedc.solver.compile as compile_module
    from schedc.model_costs import unit_profile

    calls = []

    def compile_recorded(problem, time_limit, seed=0, warm=None):
        calls.append((problem, warm))
        return types.SimpleNamespace(problem=problem, status="feasible", value=10.0 - len(calls), schedule=None,
                                     sim=None)

    monkeypatch.setattr(compile_module, "compile_problem", compile_recorded)
    plan_module = importlib.import_module("schedc.planning.compiles")
    units = unit_profile(layers=32, hidden=4096, vocab=128256, seq=4096, ffn_hidden=14336, heads=32, kv_heads=8, impl="paper")
    pool = [(1.0, math.inf, c) for c in ((5, 1, 6, 1, 8, 3, 9, 1), (5, 1, 6, 2, 7, 3, 9, 1), (4, 1, 6, 1, 8, 3, 9, 2),
                                         (5, 1, 5, 1, 8, 4, 9, 1))]
    for memory, compiles, second in (("48GiB", 2, False), ("none", 3, True)):
        calls.clear()
        best, candidates, _ = plan_module.short_compiles(
            units, {"v": pool}, {"v": []}, 4, 16, parse_cap(memory), "makespan", 6.0, 0, {}, lambda line: None,
            time.monotonic())
        assert len(candidates) == compiles
        assert any(warm is not None for _, warm in calls) == second


# ---------------------------------------------------------------- issue 35 items 2, 3, 6-8; issue 39 items 1-3, 13


def _modes(units: Profile) -> dict:
    """Per-mode profiles of the same units, shaped as checkpointing shapes them: a layer keeps
    less (selective: 40%, full: its input only) and its I runs its forward again (part, all)."""
    def mode(keep: float, recompute: float) -> Profile:
        stages = [u.model_copy(update={"activation_bytes": u.activation_bytes * keep,
                                       "weight_grad_bytes": u.weight_grad_bytes * keep,
                                       "backward_input": u.backward_input + recompute * u.forward})
                  if u.modules and u.modules[0].startswith("layers.") else u for u in units.stages]
        return units.model_copy(update={"stages": stages})

    return {"none": units, "selective": mode(0.4, 0.2), "full": mode(0.05, 1.0)}


def test_optimal_is_claimed_only_when_no_partition_can_be_shorter():
    from types import SimpleNamespace

    from schedc.planning import plan_status

    def result(gap, status, ac=None):
        return SimpleNamespace(gap=gap, compiled=SimpleNamespace(status=status), ac=ac)

    assert plan_status(result(0.0, "optimal")) == plan_status(result(5e-7, "optimal")) == "optimal"
    assert plan_status(result(0.0441, "optimal")) == "optimal for its partition"
    assert plan_status(result(0.0441, "feasible")) == "feasible"
    # a per-stage checkpointing choice is bounded on its own partition only, even at gap 0
    per_stage = SimpleNamespace(chosen=["full", "none"])
    assert plan_status(result(0.0, "optimal", per_stage)) == "optimal for its partition and checkpointing"
    assert plan_status(result(0.0, "optimal", SimpleNamespace(chosen="none"))) == "optimal"


def test_the_time_limit_holds_as_for_compile():
    # compile's promise (schedc.solver.deadline.check_time_limit): within 10% + 2 s, here beside
    # the work no deadline stops: step 1's dynamic programs (timed first: on a busy machine they
    # alone take seconds) and, about as long again, the comparison splits, their hand-made
    # schedules and the report
    from schedc.model_costs import unit_profile

    units = unit_profile(layers=16, hidden=4096, vocab=128256, seq=4096, ffn_hidden=14336, heads=32, kv_heads=8)
    start = time.monotonic()
    for placement in ("loop", "v"):
        partition_bound(units, 4, 8, 80 * GiB, placement)
    programs = time.monotonic() - start
    start = time.monotonic()
    res = plan(profile=units, ranks=4, microbatches=8, memory="80GiB", time_limit=1.0)
    assert time.monotonic() - start < 1.1 * 1.0 + 2.0 + 2 * programs
    assert res.schedule is not None


def test_the_same_step_is_found_under_a_lower_peak():
    # GPipe's order holds every microbatch at once; a schedule with its step fits in much less
    from types import SimpleNamespace

    from schedc.core.baselines import make_baseline
    from schedc.planning import least_memory_at_step

    units = tiny_units(n_layers=4)
    problem = problem_for(units, [2, 2, 2], "loop", 3, 6, parse_cap("60GiB"), "makespan")
    sim = simulate(make_baseline("gpipe", 3, 6, 3), problem.profile, problem.memory)
    found = SimpleNamespace(problem=problem, sim=sim, value=sim.makespan)
    lm = least_memory_at_step(found, time.monotonic() + 6.0)
    assert lm.compiled is not None and lm.peak < lm.found_peak == max(sim.peak_memory)
    assert lm.compiled.value <= sim.makespan * (1 + 1e-9) and max(lm.compiled.sim.peak_memory) == lm.peak


def test_the_report_says_the_least_peak_and_the_margin_and_the_csv_runs_at_it():
    res = plan(profile=tiny_units(n_layers=4), ranks=2, microbatches=4, memory="40GiB", placement="loop",
               time_limit=4)
    lm = res.report["plan"]["least_memory"]
    assert lm["peak"] <= lm["found_peak"] and lm["margin_to_cap"] == pytest.approx(40 * GiB - lm["peak"])
    assert max(res.compiled.sim.peak_memory) == pytest.approx(lm["peak"])
    assert simulate(res.schedule, res.compiled.problem.profile).makespan == pytest.approx(res.value)


def test_under_a_tight_cap_memory_is_named_as_the_limit_at_any_microbatch_count_and_more_memory_lifts_it():
    units = tiny_units(n_layers=6, head=1.0)
    tight = plan(profile=units, ranks=2, microbatches=6, memory="10GiB", placement="loop", time_limit=3)
    assert tight.limiter.kind == "memory" and tight.limiter.uncapped_step < tight.value
    assert "more memory per rank" in tight.limiter.message
    assert tight.report["plan"]["limiter"]["kind"] == "memory"
    doubled = plan(profile=units, ranks=2, microbatches=12, memory="10GiB", placement="loop", time_limit=3)
    assert doubled.limiter.kind == "memory"
    roomy = plan(profile=units, ranks=2, microbatches=6, memory="80GiB", placement="loop", time_limit=3)
    assert roomy.limiter.kind != "memory" and roomy.value < tight.value


def test_torchtitan_rows_are_its_own_classes_on_its_default_split():
    from schedc.core.baselines import make_baseline
    from schedc.planning import torchtitan_rows

    units = tiny_units(n_layers=6)
    rows = torchtitan_rows(units, 2, 4, parse_cap("80GiB"), "makespan")
    assert [(r.schedule, r.placement, len(r.counts)) for r in rows] == [
        ("1F1B", "loop", 2), ("Interleaved1F1B", "interleaved", 4), ("ZBVZeroBubble", "v", 4)]
    for row, name in zip(rows, ("1f1b", "interleaved-1f1b", "zb-v")):
        assert row.counts == torchtitan_default_counts(units.n_stages, len(row.counts))
        sim = simulate(make_baseline(name, len(row.counts), 4, 2), units.merge(row.counts))
        assert row.value == pytest.approx(sim.makespan) and row.peak == pytest.approx(max(sim.peak_memory))
    over = torchtitan_rows(units, 2, 4, parse_cap("9GiB"), "makespan")
    assert any(r.value is None and "does not fit" in r.note for r in over)


def test_a_plan_is_never_slower_than_a_comparison_it_prints():
    res = plan(profile=tiny_units(n_layers=5, head=3.0), ranks=2, microbatches=4, memory="20GiB", time_limit=3)
    assert all(c.value is None or c.value >= res.value * (1 - 1e-9) for c in res.comparisons)


def test_a_work_budget_gives_the_same_plan_twice_and_says_so():
    runs = [plan(profile=tiny_units(n_layers=4), ranks=2, microbatches=4, memory="20GiB", time_limit=2, budget="work")
            for _ in range(2)]
    assert [(r.counts, r.placement, r.value, r.bound) for r in runs] == [(runs[0].counts, runs[0].placement,
                                                                          runs[0].value, runs[0].bound)] * 2
    assert runs[0].report["plan"]["budget"]["mode"] == "work"
    with pytest.raises(SchedcError, match="^budget must be time or work"):
        plan(profile=tiny_units(), ranks=2, microbatches=4, memory="20GiB", time_limit=2, budget="cpu")


def test_cli_prints_the_limit_the_margin_the_comparisons_and_draws_the_plan(tmp_path):
    tiny_units(n_layers=4, head=2.5).save(tmp_path / "units.json")
    out = _schedc("plan", "--profile", "units.json", "--ranks", "2", "--mb", "4", "--memory", "20GiB",
                  "--time-limit", "4", "--quiet", "--plot", "plan.png", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for text in ("limits the step: ", "why this partition: ", "this step also fits in ", "margin to the cap",
                 "torchtitan class 1F1B", "with ZBVZeroBubble" if "with ZBVZeroBubble" in out.stdout
                 else "torchtitan class ZBVZeroBubble"):
        assert text in out.stdout, text
    gap = json.loads((tmp_path / "plan.json").read_text())["plan"]["gap_over_partitions"]
    assert ("(optimal," in out.stdout) == (gap <= 1e-6)
    assert (tmp_path / "plan.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_counts_a_config_with_the_run_settings_and_records_them(tmp_path):
    config = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 512,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    out = _schedc("plan", "--config", "config.json", "--seq", "128", "--ac", "full", "--ranks", "2", "--mb", "4",
                  "--memory", "20GiB", "--time-limit", "3", "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assumes = json.loads((tmp_path / "plan.json").read_text())["assumes"]
    assert assumes["seq_len"] == 128 and assumes["activation_checkpoint"] == "full"
    assert assumes["microbatches"] == 4 and assumes["pipeline_parallel_degree"] == 2


def test_a_bad_run_setting_is_named_by_its_flag(tmp_path):
    config = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 512,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}
    (tmp_path / "config.json").write_text(json.dumps(config))
    out = _schedc("plan", "--config", "config.json", "--seq", "128", "--mbs", "0", "--ranks", "2", "--mb", "4",
                  "--memory", "20GiB", "--quiet", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("schedc plan: error: --mbs: must be an integer >= 1")
    assert not (tmp_path / "plan.csv").exists()


def test_settings_without_a_config_and_auto_without_a_profile_per_mode_are_refused(tmp_path):
    assert "--seq sets the counted route's run: give --config" in _bad(tmp_path, tiny_units(), "--seq", "128")
    assert "--ac auto with --profile needs one profile per mode" in _bad(tmp_path, tiny_units(), "--ac", "auto")
    assert "unknown picture format" in _bad(tmp_path, tiny_units(), "--plot", "plan.gif")


def test_a_time_limit_shorter_than_any_plan_is_refused_as_by_compile():
    with pytest.raises(SchedcError, match=r"^time_limit=1e-09 is shorter than any plan takes"):
        plan(profile=tiny_units(n_layers=4), ranks=2, microbatches=4, memory="40GiB", time_limit=1e-9)


# --for: the plan counts memory as the framework that will launch it holds it
_FOR_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 4,
               "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
               "vocab_size": 100, "torch_dtype": "bfloat16"}
# its parameters, counted by hand: untied embedding and head, per layer q/o 64x64, k/v 64x32, SwiGLU 3 x 64x128
# and two norms, the final norm
_FOR_PARAMS = 2 * 100 * 64 + 4 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64) + 64
_TT_FSDP, _NEMO_FSDP = "torchtitan wraps every block in FSDP2", "NeMo AutoModel wraps every block in FSDP2"


def _plan_for(tmp_path, capsys, *flags, name="plan") -> tuple[int, str, str, dict]:
    from schedc.cli import toplevel as cli

    (tmp_path / "config.json").write_text(json.dumps(_FOR_CONFIG))
    source = ["--config", str(tmp_path / "config.json"), "--seq", "16"] if "--profile" not in flags else []
    code = cli.main(["plan", *source, *flags, "--ranks", "2", "--mb", "4", "--memory", "80GiB", "--time-limit", "2",
                     "--budget", "work", "--quiet", "-o", str(tmp_path / f"{name}.csv")])
    out, err = capsys.readouterr()
    report = json.loads((tmp_path / f"{name}.json").read_text()) if code == 0 else {}
    return code, out, err, report


def _blocks(out: str) -> tuple[str, str]:
    """The torchtitan and NeMo hand-off blocks of a plan's printout."""
    tt = out[out.index("torchtitan 0.3.0 ("):out.index("NeMo AutoModel 0.7.0 (")]
    return tt, out[out.index("NeMo AutoModel 0.7.0 ("):]


def test_a_plan_for_torchtitan_counts_fsdp2s_bytes_at_shard_degree_1_and_its_hand_off_does_not_warn(tmp_path, capsys):
    code, out, _, titan = _plan_for(tmp_path, capsys, "--for", "torchtitan", name="titan")
    assert code == 0
    code, plain_out, _, plain = _plan_for(tmp_path, capsys, "--for", "schedc", name="plain")
    assert code == 0

    def static(report):
        return sum(stage["static_bytes"] for stage in report["profile"]["stages"])

    # bf16 compute, fp32 gradients: the bf16 weights, the fp32 accumulator and the bf16 gradient W leaves
    assert static(titan) - static(plain) == 8 * _FOR_PARAMS
    assert static(plain) == titan["assumes"]["static_bytes_per_param"] * _FOR_PARAMS
    assert (titan["assumes"]["framework"], plain["assumes"]["framework"]) == ("torchtitan", "schedc")
    assert titan["assumes"]["fsdp_unsharded_bytes_per_param"] == 8 and "fsdp" not in plain["assumes"]
    assert _TT_FSDP not in out and _NEMO_FSDP not in out  # NeMo holds the same 8 bytes there
    tt, nemo = _blocks(plain_out)
    assert f"warning: {_TT_FSDP}" in tt and "8 bytes per parameter where the plan counted 0" in tt
    assert "--parallelism.data_parallel_shard_degree 1" in tt  # the flags that start the run it under-counts
    assert f"warning: {_NEMO_FSDP}" in nemo and "dp_size: 1" in nemo


def test_a_plan_for_nemo_counts_hugging_face_modules_under_fsdp2(tmp_path, capsys):
    code, out, _, report = _plan_for(tmp_path, capsys, "--for", "nemo")
    assert code == 0
    a = report["assumes"]
    assert (a["framework"], a["implementation"], a["fsdp_unsharded_bytes_per_param"]) == ("nemo", "hf", 8)
    assert report["partition"][0][0] == "model.embed_tokens"  # NeMo's own module names, not translated
    tt, nemo = _blocks(out)
    assert "warning" not in nemo
    assert _TT_FSDP not in tt and "count the profile for torchtitan" in tt  # torchtitan runs its own model code


def test_for_with_a_measured_profile_names_the_target_and_counts_nothing_more(tmp_path, capsys):
    units = tiny_units(n_layers=4)
    units.save(tmp_path / "units.json")
    code, out, _, report = _plan_for(tmp_path, capsys, "--profile", str(tmp_path / "units.json"), "--for", "torchtitan")
    assert code == 0
    assert report["assumes"]["framework"] == "torchtitan"
    assert sum(s["static_bytes"] for s in report["profile"]["stages"]) == sum(u.static_bytes for u in units.stages)
    assert f"warning: {_TT_FSDP}" in _blocks(out)[0]  # the profile holds what it measured: FSDP2's bytes not among it


def test_a_framework_schedc_does_not_count_for_is_one_line(tmp_path, capsys):
    import schedc

    code, out, err, _ = _plan_for(tmp_path, capsys, "--for", "megatron")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err == ("schedc plan: error: --for: 'megatron' is not a framework schedc counts for; give one of schedc, "
                   "torchtitan, nemo\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
    with pytest.raises(SchedcError, match=r"^framework: 'megatron' is not a framework schedc counts for"):
        schedc.count_profile(tmp_path / "config.json", seq=16, framework="megatron")


def test_the_framework_a_plan_counts_for_by_default_is_the_apis(tmp_path, capsys, monkeypatch):
    from schedc import api

    code, _, _, report = _plan_for(tmp_path, capsys)
    assert code == 0 and report["assumes"]["framework"] == "schedc" and "fsdp" not in report["assumes"]
    monkeypatch.setitem(api.count_profile.__wrapped__.__kwdefaults__, "framework", "torchtitan")
    code, _, _, report = _plan_for(tmp_path, capsys, name="moved")
    assert code == 0 and report["assumes"]["framework"] == "torchtitan"
    assert report["assumes"]["fsdp_unsharded_bytes_per_param"] == 8


def test_a_framework_and_a_model_code_that_contradict_it_are_one_line(tmp_path, capsys):
    import schedc
    from schedc.cli import toplevel as cli

    (tmp_path / "config.json").write_text(json.dumps(_FOR_CONFIG))
    code = cli.main(["profile", "--units", "--config", str(tmp_path / "config.json"), "--seq", "16", "--for", "nemo",
                     "--impl", "torchtitan", "-o", str(tmp_path / "units.json")])
    _, err = capsys.readouterr()
    assert code == 2 and err == ("schedc profile: error: --impl 'torchtitan' contradicts --for 'nemo', which runs 'hf' "
                                 "model code; leave --impl out\n")
    assert not (tmp_path / "units.json").exists()
    with pytest.raises(SchedcError, match=r"^names 'torchtitan' contradicts framework 'nemo'"):
        schedc.count_profile(tmp_path / "config.json", seq=16, framework="nemo", names="torchtitan")
    assert schedc.count_profile(tmp_path / "config.json", seq=16, framework="nemo", names="hf").assumes[
        "implementation"] == "hf"
