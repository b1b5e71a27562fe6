"""The two-rank relaxation (schedc.solver.bounds.pair) against the exact optimum of tiny instances."""

from __future__ import annotations

import math

import pytest
from exhaustive import exact_optimum  # noqa: E402  (tests/exhaustive.py: the oracle these tests serve)

from schedc.core.costs import Profile, StageCost
from schedc.solver.bounds.chains import lower_bound
from schedc.solver.bounds.pair import PairRelaxation, pair_relaxation_bound
from schedc.solver.bounds.rank import rank_relaxation_bound
from schedc.solver.deadline import Deadline
from schedc.solver.problem import Problem

pytest.importorskip("ortools")

EPS = 1e-9


def _v3(costs, memory, comm=0.0) -> Problem:
    stages = [StageCost(forward=f, backward_input=i, backward_weight=w, activation_bytes=1.0) for f, i, w in costs]
    return Problem.build(6, 2, n_ranks=3, placement="v", profile=Profile(stages=stages, comm=comm), memory=memory)


# 3 ranks in a V, 2 microbatches, uneven stages (found by a random search over tiny instances):
# every rank alone, its neighbours' work as fixed delays, stays one unit below the optimum
STRONGER = [
    ([(3.0, 2.0, 2.0), (1.0, 2.0, 0.0), (3.0, 2.0, 1.0), (3.0, 1.0, 1.0), (3.0, 3.0, 2.0), (3.0, 2.0, 0.0)], "1p", 0.0),
    ([(2.0, 2.0, 2.0), (1.0, 2.0, 0.0), (2.0, 3.0, 2.0), (3.0, 3.0, 1.0), (3.0, 1.0, 0.0), (3.0, 1.0, 0.0)], "none",
     0.0),
    ([(3.0, 2.0, 1.0), (2.0, 3.0, 2.0), (3.0, 3.0, 0.0), (2.0, 3.0, 2.0), (1.0, 3.0, 2.0), (1.0, 2.0, 0.0)], "1p", 0.5),
]


@pytest.mark.parametrize("costs,memory,comm", STRONGER)
def test_two_ranks_together_prove_optima_each_rank_alone_misses(costs, memory, comm):
    p = _v3(costs, memory, comm)
    opt, _ = exact_optimum(p, use_bounds=False)
    assert max(lower_bound(p), rank_relaxation_bound(p)) < opt - 0.5
    assert pair_relaxation_bound(p, 1.5 * opt, Deadline.after(30)) == pytest.approx(opt)
    # asked only whether a schedule within a target exists: none within opt - 0.5, so the target
    assert pair_relaxation_bound(p, opt - 0.5, Deadline.after(30)) == pytest.approx(opt - 0.5)


@pytest.mark.parametrize("n_stages,n_mb,placement,n_ranks", [(3, 3, "loop", None), (4, 2, "v", 2),
                                                              (4, 2, "loop", None), (6, 2, "v", 3)])
@pytest.mark.parametrize("memory", ["0.5p", "1p", "none"])
@pytest.mark.parametrize("costs", [(1.0, 1.0, 1.0, 0.0), (1.0, 2.0, 0.5, 0.3), (2.0, 1.0, 0.0, 0.5), None])
def test_two_rank_bound_never_above_the_exact_optimum(n_stages, n_mb, placement, n_ranks, memory, costs):
    prof = Profile.edge_heavy(n_stages) if costs is None else Profile.uniform(n_stages, *costs[:3], comm=costs[3])
    p = Problem.build(n_stages, n_mb, n_ranks=n_ranks, placement=placement, profile=prof, memory=memory)
    opt, _ = exact_optimum(p, use_bounds=False)
    # a target above the optimum: a relaxation that wrongly had no schedule within it would say so
    assert pair_relaxation_bound(p, 1.2 * opt, Deadline.after(30)) <= opt + EPS


def test_pairs_go_one_at_a_time_until_one_reaches_the_target():
    p = _v3(*STRONGER[0])
    opt, _ = exact_optimum(p, use_bounds=False)
    relaxation = PairRelaxation(p, 1.5 * opt)
    assert len(relaxation.pairs) == 3 and not relaxation.settled  # the pairs among the 3 busiest ranks
    bounds = []
    while not relaxation.settled:
        bounds.append(relaxation.next(Deadline.after(30)))
    assert bounds == sorted(bounds) and bounds[-1] == pytest.approx(opt)  # the best so far, pair by pair
    assert relaxation.model is None  # settled: the model is let go


def test_no_bound_for_span_without_time_or_without_a_finite_target():
    p = _v3(*STRONGER[0])
    span = Problem(given_profile=p.given_profile, placement=p.placement, n_microbatches=p.n_microbatches,
                   memory=p.memory, objective="span", runtime=p.runtime)
    assert pair_relaxation_bound(span, 100.0, Deadline.after(30)) == 0.0
    assert PairRelaxation(span, 100.0).settled
    assert pair_relaxation_bound(p, 100.0, Deadline.after(0.0)) == 0.0
    assert pair_relaxation_bound(p, math.inf, Deadline.after(30)) == 0.0  # plan before any compile answered
