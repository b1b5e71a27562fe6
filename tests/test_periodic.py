"""Periodic schedules (schedc.solver.engines.periodic) against the exact optimum of tiny instances, and the
compile phase that runs them under a tight cap."""

from __future__ import annotations

import pytest
from exhaustive import exact_optimum  # noqa: E402  (tests/exhaustive.py: the oracle these tests serve)

from schedc.core.costs import Profile
from schedc.core.simulate import simulate
from schedc.solver.compile import compile_problem
from schedc.solver.engines import periodic
from schedc.solver.graph import graph_of
from schedc.solver.problem import Problem

pytest.importorskip("ortools")

EPS = 1e-9
SHAPES = [(3, 3, "loop", None), (4, 2, "v", 2), (2, 4, "loop", None), (4, 3, "v", 2)]
COSTS = [(1.0, 1.0, 1.0, 0.0), (1.0, 2.0, 0.5, 0.3), None]


def _problem(n_stages, n_mb, placement, n_ranks, memory, costs) -> Problem:
    prof = Profile.edge_heavy(n_stages) if costs is None else Profile.uniform(n_stages, *costs[:3], comm=costs[3])
    return Problem.build(n_stages, n_mb, n_ranks=n_ranks, placement=placement, profile=prof, memory=memory)


@pytest.mark.parametrize("n_stages,n_mb,placement,n_ranks", SHAPES)
@pytest.mark.parametrize("costs", COSTS)
def test_where_a_rank_holds_one_microbatch_the_periodic_schedule_is_near_optimal(n_stages, n_mb, placement, n_ranks,
                                                                                 costs):
    # 0.5p: room for one microbatch of each stage, so the steady state is the whole question.
    # It met the optimum on every case of three runs here; the margin is for CP-SAT's two workers
    # and per-period time caps on a busy machine
    p = _problem(n_stages, n_mb, placement, n_ranks, "0.5p", costs)
    g = graph_of(p)
    assert periodic.worth_trying(g)
    opt, _ = exact_optimum(p, use_bounds=False)
    sched, sim = periodic.periodic_schedule(g, 10)
    assert sim.fits
    assert opt - EPS <= sim.makespan <= 1.05 * opt


@pytest.mark.parametrize("n_stages,n_mb,placement,n_ranks", SHAPES)
@pytest.mark.parametrize("memory", ["1p", "none"])
def test_periodic_schedules_are_complete_fit_and_never_beat_the_optimum(n_stages, n_mb, placement, n_ranks, memory):
    p = _problem(n_stages, n_mb, placement, n_ranks, memory, COSTS[1])
    g = graph_of(p)
    assert not periodic.worth_trying(g)  # room for two of everything: the compiler leaves it to the others
    opt, _ = exact_optimum(p, use_bounds=False)
    sched, sim = periodic.periodic_schedule(g, 10)
    assert sim.fits and sim.makespan >= opt - EPS
    assert sorted(a for r in range(p.n_ranks) for a in sched.actions(r)) == sorted(g.actions)


def test_a_timetable_runs_as_timed_or_sooner_and_no_period_beats_the_busiest_rank():
    p = _problem(4, 6, "v", 2, "0.5p", COSTS[1])
    g = graph_of(p)
    work = max(sum(g.d[k][s] for s in g.stages[r] for k in g.kinds(s)) for r in range(g.R))
    unit = work / 100
    assert periodic.solve_period(g, 99, unit, 10)[0] == "infeasible"  # shorter than rank 0's work
    serial = periodic.serial_timetable(g, unit)
    status, table = periodic.solve_period(g, serial.period, unit, 10, hint=serial)
    assert status == "feasible" and table.period == serial.period
    sim = simulate(periodic.schedule_of(g, table), p.profile, p.memory)
    latency = max(t + periodic._costs(g, unit)[0][key] for key, t in table.start.items())
    assert sim.fits
    assert sim.makespan <= ((g.M - 1) * table.period + latency) * unit + EPS


def test_the_compiler_runs_periodic_schedules_only_under_a_tight_cap():
    phases = {}
    for memory in ("0.5p", "1p"):
        p = _problem(4, 6, "v", 2, memory, None)
        log = []
        res = compile_problem(p, time_limit=4, progress=log.append)
        phases[memory] = [e["phase"] for e in log]
        assert res.sim.fits
    assert "periodic" in phases["0.5p"]
    assert "periodic" not in phases["1p"]


@pytest.mark.parametrize("profile,runtime", [(Profile.uniform(4, 1.0, 2.0, 0.0), "torch"),  # W costs 0: one B
                                             (Profile.uniform(4, 1.0, 1.0, 1.0), "ideal"),  # stage 0's I too
                                             (Profile.edge_heavy(4), "ideal")])
def test_merged_backwards_and_the_ideal_runtime(profile, runtime):
    p = Problem.build(4, 3, n_ranks=2, placement="v", profile=profile, memory="0.5p", runtime=runtime)
    opt, _ = exact_optimum(p, use_bounds=False)
    sched, sim = periodic.periodic_schedule(graph_of(p), 10)
    assert sim.fits and opt - EPS <= sim.makespan <= 1.05 * opt
    assert sim.runtime == runtime
