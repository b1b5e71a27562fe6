"""The seam between a partition and a problem, and a partition's own lower bound.

Problem: every step of the plan turns a partition of the units (units per stage) into the
scheduling problem of its merged per-stage profile, and ranks partitions by a lower bound that
holds for every schedule of that problem. Method: :func:`problem_for` merges the units and builds
``schedc.solver.problem.Problem``; :func:`own_bound` takes the closed-form terms of
schedc.solver.bounds.chains and the one-rank relaxation of schedc.solver.bounds.rank on one graph;
``_fits`` checks that every rank holds its static bytes and one microbatch of its stages; ``_tight``
says whether the cap leaves some rank room for fewer than two microbatches of its stages. Cost:
``problem_for`` linear in the units; ``own_bound`` milliseconds (one graph, one relaxation).
"""

from __future__ import annotations

import math
from typing import Sequence

from schedc.core.costs import MemoryLimit, Profile
from schedc.core.partition import Units, n_stages_for
from schedc.plan.clock import _charge
from schedc.core.tolerances import TIE


OWN_BOUND_WORK = 2e-3  # work units (schedc.solver.deadline) charged per partition's own bound


def _tight(best) -> bool:
    """Whether the best partition's cap leaves some rank room for fewer than two microbatches of
    each of its stages (``_tight_problem``): there the block relaxation ranks the partitions in
    step 4, and steps 3 and 4 make room for it."""
    return best[1] is not None and _tight_problem(best[1].problem)


def _tight_problem(problem) -> bool:
    """Whether the cap leaves some rank room for fewer than two microbatches of each of its
    stages (schedc.solver.engines.periodic.worth_trying)."""
    from schedc.solver.graph import graph_of
    from schedc.solver.engines.periodic import worth_trying

    return worth_trying(graph_of(problem))


def problem_for(profile: Profile, counts, placement: str, ranks: int, microbatches: int, limit: MemoryLimit,
                objective: str):
    from schedc.solver.problem import Problem

    merged = profile.merge(counts)
    return Problem.build(merged.n_stages, microbatches, n_ranks=ranks, placement=placement, profile=merged,
                         memory=limit, objective=objective)


def own_bound(problem, enough: float = math.inf) -> float:
    """A partition's own lower bound: the closed-form terms (schedc.solver.bounds.chains) and the one-rank
    relaxation (schedc.solver.bounds.rank) on one graph of the problem, milliseconds. With
    `enough` it may stop early at a value >= enough (still a bound): for callers that only keep
    the least bound below it."""
    from schedc.solver.bounds.chains import lower_bound
    from schedc.solver.graph import graph_of
    from schedc.solver.bounds.rank import rank_relaxation_bound

    _charge(OWN_BOUND_WORK)
    graph = graph_of(problem)  # both bounds read its stage level: built once
    closed = lower_bound(graph)
    if closed >= enough:
        return closed
    return max(closed, rank_relaxation_bound(graph, enough) or 0.0)


def _fits(units: Units, counts: Sequence[int], placement: str, ranks: int, cap: float) -> bool:
    """Every rank holds its static bytes and one microbatch of its stages under the cap."""
    need = [0.0] * ranks
    start = 0
    S = len(counts)
    for k, n in enumerate(counts):
        r = k if placement == "loop" else (k if k < ranks else 2 * ranks - 1 - k)
        need[r] += units.seg(units.static, start, start + n) + units.seg(units.act, start, start + n)
        start += n
    return max(need) <= cap * (1 + TIE) and S == n_stages_for(placement, ranks)
