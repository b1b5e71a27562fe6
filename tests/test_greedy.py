"""zb-greedy (the zero-bubble paper's greedy): valid, torch-loadable schedules that fit memory on
any small instance, all eight flag combinations, and the compiler never behind it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedc.core.costs import Profile, StageCost
from schedc.core.validate import validate
from schedc.errors import SchedcError
from schedc.solver import compile_problem
from schedc.solver.engines.warm import matching_baselines
from schedc.solver.engines.zb_greedy import ALL_FLAGS, NAME, greedy_family, zb_greedy
from schedc.solver.problem import Problem


@st.composite
def instances(draw):
    n = draw(st.integers(1, 5))
    m = draw(st.integers(1, 9))
    stages = []
    for _ in range(n):
        f = draw(st.sampled_from([0.5, 1.0, 1.5]))
        act = draw(st.sampled_from([1.0, 2.0]))
        stages.append(StageCost(forward=f, backward_input=f * draw(st.sampled_from([0.8, 1.0, 1.3])),
                                backward_weight=f * draw(st.sampled_from([0.0, 0.7, 1.0])),
                                activation_bytes=act, weight_grad_bytes=act * draw(st.sampled_from([0.5, 1.0]))))
    comm = draw(st.sampled_from([0.0, 0.25, 0.5]))
    memory = draw(st.sampled_from(["1p", "1.25p", "2p", "none", "0.5p"]))
    runtime = draw(st.sampled_from(["torch", "ideal"]))
    try:
        return Problem.build(n, m, profile=Profile(stages=stages, comm=comm), memory=memory, runtime=runtime)
    except SchedcError:
        return None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_every_flag_combination_is_valid_and_fits(problem):
    if problem is None:
        return
    from schedc.solver.engines.heuristic import check_memory_feasible

    try:
        check_memory_feasible(problem)
    except SchedcError:
        return
    family = greedy_family(problem)
    assert [f for f, _, _ in family] == list(ALL_FLAGS)
    for flags, sched, sim in family:
        validate(sched, n_stages=problem.n_stages, n_microbatches=problem.n_microbatches,
                 n_ranks=problem.n_ranks, placement=problem.placement, source=flags.describe())
        assert sim.fits, f"{flags.describe()}: peak {sim.peak_memory} over caps {sim.memory_limit}"
    best = zb_greedy(problem)
    assert best is not None
    assert best[1].objective(problem.objective) == min(sim.objective(problem.objective) for _, _, sim in family)


def test_torch_loads_the_greedy_schedules():
    pytest.importorskip("torch")
    from schedc.runtime.torch_check import check_with_torch

    problem = Problem.build(4, 8, profile=Profile.uniform(4, comm=0.25), memory="1.25p")
    for flags, sched, _ in greedy_family(problem):
        check_with_torch(sched, source=f"{NAME} {flags.describe()}")


def test_reaches_zb_h2_and_zb_h1_where_the_paper_says():
    """F = I = W, no comm, ideal runtime: at 2p the greedy meets ZB-H2's span 3M (zero bubble);
    at 1p ZB-H1's 3M + (p-1)."""
    for memory, want in (("2p", 3 * 12), ("1p", 3 * 12 + 3)):
        problem = Problem.build(4, 12, memory=memory, objective="span", runtime="ideal")
        assert zb_greedy(problem)[1].span == want


def test_listed_among_the_baselines_and_only_for_one_stage_per_rank():
    problem = Problem.build(4, 8, profile=Profile.uniform(4, comm=0.5), memory="1.25p")
    assert NAME in [name for name, _, _ in matching_baselines(problem)]
    v = Problem.build(8, 8, n_ranks=4, placement="v", memory="0.75p")
    assert zb_greedy(v) is None
    with pytest.raises(SchedcError, match="one stage per rank"):
        greedy_family(v)


def test_compiled_span_not_behind_the_greedy_on_slow_links():
    problem = Problem.build(4, 8, profile=Profile.uniform(4, comm=0.5), memory="1.25p", objective="span")
    greedy_span = zb_greedy(problem)[1].span
    result = compile_problem(problem, time_limit=4.0)
    assert result.sim.fits
    assert result.value <= greedy_span + 1e-9
    assert result.baselines[NAME]["span"] == greedy_span
