"""Cool-down re-listing (schedc.solver.engines.cooldown): valid, within memory, and better than ZB-V on slow links."""

import pytest

from schedc.core.costs import Profile
from schedc.core.validate import validate
from schedc.solver.bounds.chains import lower_bound
from schedc.solver.engines import cooldown
from schedc.solver.engines.warm import feasible_baselines, warm_start
from schedc.solver.problem import Problem


def _v(ranks: int, m: int, memory: str = "1p", objective: str = "makespan", runtime: str = "torch") -> Problem:
    return Problem.build(2 * ranks, m, n_ranks=ranks, placement="v", profile=Profile.uniform(2 * ranks, comm=0.25),
                         memory=memory, objective=objective, runtime=runtime)


def _hand_made(p: Problem, name: str):
    return next((s, sim) for n, s, sim in feasible_baselines(p, with_greedy=False) if n == name)


@pytest.mark.parametrize("ranks, m, zb_v, bound, from_lowest", [
    # 8 ranks: ZB-V's cool-down leaves 3 above the bound; the first family (a W gives way to the
    # last microbatch's I's) meets it, so it is optimal
    (8, 32, 207.25, 204.25, False),
    # 12 ranks: the first family's best is 163.75; the second (re-listed from each rank's last F
    # of its lowest stage, a W giving way only while the rank can afford it) meets the bound
    (12, 24, 168.25, 163.25, True),
])
def test_meets_the_bound_where_zb_v_does_not(ranks, m, zb_v, bound, from_lowest):
    # V, comm 0.25F, 1p
    p = _v(ranks, m)
    zbv = _hand_made(p, "zb-v")
    sched, sim = cooldown.relist_cooldown(p, zbv[0])
    assert zbv[1].makespan == pytest.approx(zb_v)
    assert sim.makespan == pytest.approx(lower_bound(p)) == pytest.approx(bound)
    assert sched.meta["from_lowest"] is from_lowest
    validate(sched, 2 * ranks, m, ranks, "v")
    assert sim.fits


@pytest.mark.parametrize("placement", ["v", "loop"])
@pytest.mark.parametrize("memory", ["0.75p", "1p", "2p"])
@pytest.mark.parametrize("objective", ["makespan", "span"])
@pytest.mark.parametrize("runtime", ["torch", "ideal"])
def test_keeps_every_action_and_the_caps(placement, memory, objective, runtime):
    # every hand-made schedule of the case (B's included: 1F1B, GPipe) goes through it
    n = 8 if placement == "v" else 4
    p = Problem.build(n, 12, n_ranks=4, placement=placement, profile=Profile.edge_heavy(n), memory=memory,
                      objective=objective, runtime=runtime)
    relisted = 0
    fitting = feasible_baselines(p, with_greedy=False)
    for _name, sched, _ in fitting:
        out = cooldown.relist_cooldown(p, sched)
        if out is None:
            continue
        relisted += 1
        validate(out[0], n, 12, 4, placement)
        assert out[1].fits
        assert out[0].meta["start"] == sched.name
    assert relisted or not fitting  # (loop at 0.75p: no hand-made schedule fits)


def test_the_warm_start_uses_it():
    # without it the warm start here is ZB-V (207.25); the heuristic's list schedules are further off
    sched, sim, source = warm_start(_v(8, 32), time_budget=0.5)
    assert sim.makespan == pytest.approx(204.25)
    assert source == "zb-v+cooldown"


@pytest.mark.parametrize("reserve", [0.0, 0.5])  # the second family; the third (a round trip in reserve)
@pytest.mark.parametrize("last", [0, 4, 16])
def test_second_family_keeps_the_caps_when_it_moves_forwards(last, reserve):
    # ZB-V sits at the cap on every rank at 1p; the second and third families move F's, and every
    # member (not only the best, which is re-simulated anyway) stays within each rank's room
    from schedc.core.ir import Schedule
    from schedc.core.simulate import simulate

    p = _v(12, 24)
    rows, value = cooldown._relist(p, _hand_made(p, "zb-v")[0], lambda: False, last, from_lowest=True,
                                   target=lower_bound(p) - reserve)
    sim = simulate(Schedule(rows=rows, placement=tuple(p.placement), n_microbatches=24), p.profile, p.memory)
    assert sim.fits
    assert sim.makespan == pytest.approx(value)
