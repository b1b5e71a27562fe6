"""The offload heuristic (schedc.solver.engines.offload_heuristic): its schedules and memory actions
are valid and fit the cap; it fits where nothing fits without offload (a V whose lower stage waits
in host memory); ``--offload auto`` keeps its answer only when shorter and ends within its time
limit; ``plan --offload auto`` returns an offload plan where nothing fits without offload.

Uniform stages (F = I = W = 1, one unit of activation per microbatch, ``held_fraction=0``: nothing
held from I to W) on a link that copies a microbatch in 0.01 s, as in tests/test_offload_compile.py,
and the per-unit model of tests/test_plan_offload.py on a V.
"""

import time

import pytest
from test_plan_offload import units  # the per-unit model of the plan's offload tests

from schedc.core.costs import MemoryLimit, Profile
from schedc.core.host_link import HostLink
from schedc.core.memory_actions import check_memory_actions
from schedc.core.simulate import simulate
from schedc.errors import SchedcError
from schedc.solver.compile import compile_schedule
from schedc.solver.deadline import Deadline
from schedc.solver.engines.heuristic import heuristic_schedule
from schedc.solver.engines.offload_heuristic import offload_heuristic
from schedc.solver.offload import choose_offload, compile_schedule_offloading
from schedc.solver.problem import Problem

FAST = HostLink(bandwidth=100.0, latency=0.0)
V_COUNTS = [1, 1, 1, 1, 1, 1, 2, 2]  # the V partition whose rank 1 holds 1 + 2 GiB of one microbatch
V_CAP = "4.25GiB"  # below what one microbatch needs without offload on every partition (4.5GiB)


def _flat(n_stages):
    return Profile.uniform(n_stages, held_fraction=0.0)


def _v_problem(memory=V_CAP):
    from schedc.planning.problem import problem_for

    return problem_for(units(), V_COUNTS, "v", 4, 8, MemoryLimit.parse(memory), "makespan")


@pytest.mark.parametrize("n_stages,n_mb,memory", [(4, 8, "0.75p"), (4, 12, "0.75p"), (6, 12, "0.6p")])
def test_its_schedules_and_memory_actions_are_valid_and_fit_the_cap(n_stages, n_mb, memory):
    problem = Problem.build(n_stages, n_mb, profile=_flat(n_stages), memory=memory)
    built = offload_heuristic(problem, FAST)
    assert built is not None and built.actions
    checked = check_memory_actions(list(built.actions), built.schedule)  # fetch points on the CSV's ranks
    assert len(checked) == len(built.actions)
    sim = simulate(built.schedule, problem.profile, problem.memory, memory_actions=built.actions, link=FAST)
    assert sim.fits and all(p <= c * (1 + 1e-9) for p, c in zip(sim.peak_memory, sim.memory_limit))
    assert sim.makespan == pytest.approx(built.sim.makespan)
    assert not simulate(built.schedule, problem.profile, problem.memory).fits  # the offloads are what fit it
    # shorter than the list heuristic's own schedule under the cap: offload bought time
    plain = heuristic_schedule(problem, time_budget=0.5)
    assert built.sim.makespan < simulate(plain, problem.profile, problem.memory).makespan - 1e-9


def test_schedc_validate_takes_its_csv_and_memory_actions(tmp_path, capsys):
    import json

    from schedc import cli
    from schedc.io.csvio import write_csv

    problem = Problem.build(4, 8, profile=_flat(4), memory="0.75p")
    built = offload_heuristic(problem, FAST)
    assert built is not None
    write_csv(built.schedule, tmp_path / "s.csv")
    (tmp_path / "a.json").write_text(json.dumps([a.to_json() for a in built.actions]))
    assert cli.main(["validate", str(tmp_path / "s.csv"), "--stages", "4", "--mb", "8", "--memory-actions",
                     str(tmp_path / "a.json"), "--host-bandwidth", "100", "--host-latency", "0"]) == 0
    assert f"{len(built.actions)} memory action(s) match the CSV" in capsys.readouterr().out


def test_a_link_too_slow_for_any_copy_gives_nothing():
    problem = Problem.build(4, 8, profile=_flat(4), memory="0.75p")
    assert offload_heuristic(problem, HostLink(bandwidth=0.01, latency=0.0)) is None


def test_on_a_v_it_fits_where_one_microbatch_does_not_fit_without_offload():
    from schedc.planning.problem import holds_one_microbatch

    problem = _v_problem()
    assert not holds_one_microbatch(problem)
    with pytest.raises(SchedcError, match="smallest"):
        compile_schedule(problem.n_stages, problem.n_microbatches, profile=problem.given_profile,
                         n_ranks=4, placement=problem.placement, memory=V_CAP, time_limit=2)
    built = offload_heuristic(problem, HostLink())
    assert built is not None and built.sim.fits
    again = simulate(built.schedule, problem.profile, problem.memory, memory_actions=list(built.actions),
                     link=HostLink())
    assert again.fits and again.makespan == pytest.approx(built.sim.makespan)


@pytest.mark.parametrize("n_mb,copy", [(8, 1.0), (8, 2.0), (16, 2.0)])
def test_where_copies_are_slower_than_forwards_a_forward_waits_for_one_and_reaches_the_uncapped_step(n_mb, copy):
    # a copy out takes one or two forwards: a rank's warm-up forwards cannot wait for room
    # without waiting for copies (room_for); without that wait nothing fitted, or 32 of 27 at 8
    problem = Problem.build(4, n_mb, profile=_flat(4), memory="0.75p")
    link = HostLink(bandwidth=problem.profile.stages[0].activation_bytes / copy, latency=0.0)
    built = offload_heuristic(problem, link)
    assert built is not None and built.sim.fits
    assert any(a.room_for is not None for a in built.actions)
    again = simulate(built.schedule, problem.profile, problem.memory, memory_actions=list(built.actions), link=link)
    assert again.fits and again.makespan == pytest.approx(built.sim.makespan)
    uncapped = compile_schedule(4, n_mb, profile=_flat(4), memory="none", time_limit=2)
    assert uncapped.status.value == "optimal"
    assert built.sim.makespan == pytest.approx(uncapped.value)


def test_it_stops_at_its_deadline():
    problem = Problem.build(8, 32, profile=_flat(8), memory="0.6p")
    assert offload_heuristic(problem, FAST, Deadline.after(0.0)) is None


def test_offload_auto_takes_the_heuristic_only_when_shorter_and_never_exceeds_none():
    for memory in ("0.6p",):
        none = compile_schedule(6, 12, profile=_flat(6), memory=memory, time_limit=2)
        auto = compile_schedule_offloading(6, 12, profile=_flat(6), memory=memory, time_limit=3, link=FAST)
        assert auto.sim.fits and auto.value <= none.value + 1e-9
        again = simulate(auto.schedule, auto.problem.profile, auto.problem.memory,
                         memory_actions=auto.report["memory_actions"], link=FAST)
        assert again.fits and again.makespan == pytest.approx(auto.value)


def test_the_chooser_stops_at_its_deadline():
    from schedc.core.baselines import make_baseline

    schedule = make_baseline("zb-h1", n_stages=8, n_microbatches=32)
    t0 = time.monotonic()
    choice = choose_offload(schedule, _flat(8), MemoryLimit.parse("0.6p"), FAST, deadline=Deadline.after(0.0))
    assert time.monotonic() - t0 < 5.0
    assert not choice.fits and "time limit" in choice.why and choice.actions == ()


@pytest.mark.parametrize("budget", ["time", "work"])
def test_compile_offload_auto_ends_within_its_time_limit(budget):
    # 8 stages x 32 microbatches: the chooser alone, with no deadline, runs for many seconds here
    limit = 3.0
    t0 = time.monotonic()
    res = compile_schedule_offloading(8, 32, profile=_flat(8), memory="0.6p", time_limit=limit, link=FAST,
                                      budget=budget)
    took = time.monotonic() - t0
    assert res.sim.fits
    if budget == "time":
        assert took < 2 * limit + 5  # a busy 2-core machine: generous
    else:
        assert res.report["work_spent"] <= limit * 1.05 or res.report["cut_by_wall_clock"]


def test_plan_offload_auto_returns_an_offload_plan_where_nothing_fits_without_it():
    from schedc.planning.ac import plan_mode
    from schedc.planning.offload import plan_with_offload

    kw = dict(ranks=4, microbatches=8, memory=V_CAP, placement="v", time_limit=3, budget="work")
    with pytest.raises(SchedcError, match="memory"):
        plan_mode(units(), None, None, **kw)
    res = plan_with_offload({None: units()}, HostLink(), **kw)
    summary = res.offload
    assert summary["chosen"] and summary["row"] == "offload only" and summary["step_without_offload"] is None
    rows = {r["row"]: r for r in summary["rows"]}
    assert not rows["nothing"]["fits"] and rows["offload only"]["step"] == pytest.approx(res.value)
    actions = res.report["memory_actions"]
    assert actions and len(check_memory_actions(actions, res.schedule)) == len(actions)
    sim = simulate(res.schedule, res.profile, MemoryLimit.parse(V_CAP), memory_actions=actions, link=HostLink())
    assert sim.fits and sim.makespan == pytest.approx(res.value)
    assert res.bound <= res.value


def test_plan_offload_auto_still_refuses_a_cap_that_offload_cannot_fit():
    from schedc.planning.offload import plan_with_offload

    with pytest.raises(SchedcError, match="memory"):
        plan_with_offload({None: units()}, HostLink(), ranks=4, microbatches=8, memory="3GiB", placement="v",
                          time_limit=2, budget="work")
