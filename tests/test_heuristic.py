"""The heuristic scheduler: valid, within the memory cap, never worse than a hand-made schedule that
fits, clear errors when nothing can fit."""

from __future__ import annotations

import pytest

from schedc.core.costs import MemoryLimit, Profile, StageCost
from schedc.core.simulate import simulate
from schedc.core.validate import validate
from schedc.errors import SchedcError
from schedc.solver.engines.heuristic import heuristic_schedule, min_memory_limit
from schedc.solver.engines.warm import feasible_baselines, warm_start
from schedc.solver.problem import Problem


def check(problem: Problem, budget: float = 0.2):
    """The list scheduler's schedule is valid and fits; the warm start built from it and the
    hand-made schedules is never behind a fitting hand-made schedule."""
    sched = heuristic_schedule(problem, time_budget=budget)
    validate(sched, problem.n_stages, problem.n_microbatches, problem.n_ranks, tuple(problem.placement))
    sim = simulate(sched, problem.profile, problem.memory)
    assert sim.fits, (sim.peak_memory, sim.memory_limit)
    _, warm_sim, _ = warm_start(problem, time_budget=budget)
    assert warm_sim.fits
    value = warm_sim.objective(problem.objective)
    for name, _, bsim in feasible_baselines(problem):
        assert value <= bsim.objective(problem.objective) + 1e-9, (name, value, bsim.objective(problem.objective))
    return sched, sim


GRID = [
    (2, 4, "loop", None),
    (4, 8, "loop", None),
    (4, 6, "v", 2),
    (8, 8, "v", 4),
    (4, 8, "loop", 2),  # interleaved: two stages per rank
]


@pytest.mark.parametrize("n_stages,n_mb,placement,n_ranks", GRID)
@pytest.mark.parametrize("memory", ["1p", "2p", "none"])
@pytest.mark.parametrize("objective", ["makespan", "span"])
def test_valid_fits_and_beats_feasible_baselines(n_stages, n_mb, placement, n_ranks, memory, objective):
    for profile in (Profile.uniform(n_stages), Profile.edge_heavy(n_stages)):
        p = Problem.build(n_stages, n_mb, n_ranks=n_ranks, placement=placement, profile=profile,
                          memory=memory, objective=objective)
        check(p)


def test_matches_zb_h1_closed_form_on_identical_stages():
    # span objective, 1p: ZB-H1's bubble (p-1)(F+I-W) per rank span, here with F=I=W=1
    p = Problem.build(4, 12, profile=Profile.uniform(4), memory="1p", objective="span")
    _, sim = check(p)
    assert sim.span <= 12 * 3 + 3 * (1 + 1 - 1) + 1e-9


def test_a_v_keeps_the_first_microbatches_climb_moving():
    # V, 4 ranks; stages 2 and 6 twice as heavy. A rank that starts its lower stage's next F just
    # before microbatch 0 reaches its upper stage delays every rank after it: 42.2 without the
    # protect_f rules, 40.5 with them, which compile proves optimal
    heavy = (2, 6)
    stages = [StageCost(forward=2.0 if s in heavy else 1.0, backward_input=2.2 if s in heavy else 1.1,
                        backward_weight=1.8 if s in heavy else 0.9, activation_bytes=1.0) for s in range(8)]
    p = Problem.build(8, 4, n_ranks=4, placement="v", profile=Profile(stages=stages, comm=0.2), memory="none")
    _, sim = check(p, budget=0.5)
    assert sim.makespan == pytest.approx(40.5)


def test_tight_memory_below_1p_is_still_feasible():
    for placement, n_ranks in (("loop", None), ("v", 2), ("loop", 2)):
        p = Problem.build(4, 6, n_ranks=n_ranks, placement=placement, profile=Profile.edge_heavy(4), memory=min_limit(4, n_ranks, placement))
        check(p)


def min_limit(n_stages, n_ranks, placement):
    p = Problem.build(n_stages, 2, n_ranks=n_ranks, placement=placement, memory="1p")
    return min_memory_limit(p)


def test_explicit_placements_do_not_deadlock():
    prof = Profile.edge_heavy(4)
    for placement in ((1, 0, 1, 0), (0, 0, 1, 1), (0, 1, 1, 0), (1, 0, 0, 1)):
        for memory in ("0.5p", "1p", "none"):
            p = Problem.build(4, 5, placement=placement, profile=prof, memory=memory)
            check(p)


def test_infeasible_memory_names_the_smallest_limit():
    p = Problem.build(4, 8, profile=Profile.uniform(4), memory="0.1p")
    with pytest.raises(SchedcError, match=r"0\.25p"):
        heuristic_schedule(p)
    # the named limit works
    check(Problem.build(4, 8, profile=Profile.uniform(4), memory="0.25p"))
    p = Problem.build(4, 2, n_ranks=2, placement="v", profile=Profile.uniform(4), memory=MemoryLimit(kind="bytes", value=1.5))
    with pytest.raises(SchedcError, match=r"rank 0 needs 2B .* --memory 2B"):
        heuristic_schedule(p)


def test_stage_without_weights_uses_full_backward():
    stages = [StageCost(forward=1, backward_input=1, backward_weight=w, activation_bytes=1, weight_grad_bytes=0.5 if w else 0)
              for w in (1, 0, 1)]
    p = Problem.build(3, 4, profile=Profile(stages=stages), memory="1p")
    sched, _ = check(p)
    kinds_stage1 = {a.kind for r in range(3) for a in sched.actions(r) if a.stage == 1}
    assert kinds_stage1 == {"F", "B"}


def test_single_stage_and_single_microbatch():
    check(Problem.build(1, 3, profile=Profile.uniform(1), memory="1p"))
    check(Problem.build(4, 1, profile=Profile.edge_heavy(4), memory="1p", objective="span"))


def test_large_problem_is_valid_quickly():
    p = Problem.build(16, 48, profile=Profile.edge_heavy(16), memory="1p")
    sched, sim = check(p, budget=2.0)
    assert sched.meta["rules_tried"] >= 1


def test_warm_start_is_best_of_heuristic_and_baselines():
    for objective in ("makespan", "span"):
        p = Problem.build(4, 8, profile=Profile.edge_heavy(4), memory="2p", objective=objective)
        sched, sim, source = warm_start(p, time_budget=0.2)
        assert sim.fits
        h = simulate(heuristic_schedule(p, time_budget=0.2), p.profile, p.memory).objective(objective)
        assert sim.objective(objective) <= h + 1e-9
        for _name, _, bsim in feasible_baselines(p):
            assert sim.objective(objective) <= bsim.objective(objective) + 1e-9
        assert source == "heuristic" or source in {n for n, _, _ in feasible_baselines(p)}


def test_feasible_baselines_respect_memory_and_placement():
    p = Problem.build(4, 8, profile=Profile.uniform(4), memory="1p")
    names = {n for n, _, _ in feasible_baselines(p)}
    assert "1f1b" in names and "zb-h1" in names
    assert "gpipe" not in names and "zb-h2" not in names  # hold more than 1p
    pv = Problem.build(8, 8, n_ranks=4, placement="v", memory="2p")
    assert {n for n, _, _ in feasible_baselines(pv)} <= {"zb-v", "dualpipev", "v-half", "v-min"}
    assert "zb-v" in {n for n, _, _ in feasible_baselines(pv)}


def test_warm_start_polishes_a_winning_baseline(monkeypatch):
    """When a hand-made schedule beats the heuristic, warm_start returns it or a split + locally
    searched version of it, never anything worse and always within memory."""
    from schedc.core import baselines
    from schedc.solver.engines import heuristic, warm

    p = Problem.build(4, 8, profile=Profile.edge_heavy(4), memory="1p", objective="span")
    poor = baselines.make_baseline("1f1b", 4, 8)  # B everywhere: worse than ZB-H1 here
    monkeypatch.setattr(heuristic, "heuristic_schedule", lambda problem, time_budget=1.0, seed=0, deadline=None: poor)
    sched, sim, source = warm.warm_start(p, time_budget=0.5)
    best_baseline = min(b.objective("span") for _, _, b in feasible_baselines(p))
    assert source != "heuristic"
    assert sim.fits and sim.objective("span") <= best_baseline + 1e-9
    validate(sched, 4, 8, 4, "loop")
