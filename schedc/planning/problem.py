"""The seam between a partition and a problem, and a partition's own lower bound.

Problem: every step of the plan turns a partition of the units (units per stage) into the
scheduling problem of its merged per-stage profile, and ranks partitions by a lower bound that
holds for every schedule of that problem. Method: :func:`problem_for` merges the units and builds
``schedc.solver.problem.Problem``; :func:`own_bound` takes the closed-form terms of
schedc.solver.bounds.chains and the one-rank relaxation of schedc.solver.bounds.rank on one graph;
:func:`holds_one_microbatch` asks the cost model whether some schedule fits the cap; ``is_tight``
says whether the cap leaves some rank room for fewer than two microbatches of its stages. Cost:
``problem_for`` linear in the units; ``own_bound`` milliseconds (one graph, one relaxation).
"""

from __future__ import annotations

import math

from schedc.core.cost_model import fits
from schedc.core.costs import MemoryLimit, Profile
from schedc.core.formatting import format_bytes
from schedc.errors import ParameterError, SchedcError

# passes over the actions (schedc.solver.deadline.charge_passes) charged per partition's own bound:
# 0.30-0.47 CPU seconds per unit charged at 1.25 passes (Llama-3.1-70B and Mistral-NeMo-12B-like
# plans, benchmarks/work_charges.py), times 1.5 for a work unit's wall clock; at 0.5 passes the
# --ac auto plans of Llama-3-8B and Qwen2.5-7B at 28 GiB ran 0.61 and 1.07 CPU s per unit since
# the charge before (work_charges.py --ac-auto), where a unit stands for 0.67
OWN_BOUND_PASSES = 0.8

# a loop of two stages per rank: stage s on rank s mod R, what torchtitan's Interleaved1F1B and
# InterleavedZeroBubble build (torch's schedule classes and schedc's interleaved baselines run it)
INTERLEAVED = "interleaved"


def stages_for(placement: str, ranks: int) -> int:
    """The stages a plan's placement has on `ranks` ranks: R for loop, 2R for v and interleaved."""
    return ranks * (1 if placement == "loop" else 2)


def problem_placement(placement: str) -> str:
    """The compile request's placement of a plan's placement (interleaved is a loop of 2R stages)."""
    return "loop" if placement == INTERLEAVED else placement


def is_tight(best) -> bool:
    """Whether the best partition's cap leaves some rank room for fewer than two microbatches of
    each of its stages (``tight_problem``): there the block relaxation ranks the partitions in
    step 4, and steps 3 and 4 make room for it."""
    return best[1] is not None and tight_problem(best[1].problem)


def tight_problem(problem) -> bool:
    """Whether the cap leaves some rank room for fewer than two microbatches of each of its
    stages (schedc.solver.engines.periodic.worth_trying)."""
    from schedc.solver.engines.periodic import worth_trying
    from schedc.solver.graph import graph_of

    return worth_trying(graph_of(problem))


def problem_for(profile: Profile, counts, placement: str, ranks: int, microbatches: int, limit: MemoryLimit,
                objective: str):
    from schedc.solver.problem import Problem

    merged = profile.merge(counts)
    return Problem.build(merged.n_stages, microbatches, n_ranks=ranks, placement=problem_placement(placement),
                         profile=merged,
                         memory=limit, objective=objective)


def own_bound(problem, enough: float = math.inf) -> float:
    """A partition's own lower bound: the closed-form terms (schedc.solver.bounds.chains) and the one-rank
    relaxation (schedc.solver.bounds.rank) on one graph of the problem, milliseconds. With
    `enough` it may stop early at a value >= enough (still a bound): for callers that only keep
    the least bound below it."""
    from schedc.solver.bounds.chains import lower_bound
    from schedc.solver.bounds.rank import rank_relaxation_bound
    from schedc.solver.deadline import charge_passes, n_actions
    from schedc.solver.graph import graph_of

    charge_passes(n_actions(problem.n_stages, problem.n_microbatches), OWN_BOUND_PASSES)
    graph = graph_of(problem)  # both bounds read its stage level: built once
    closed = lower_bound(graph)
    if closed >= enough:
        return closed
    return max(closed, rank_relaxation_bound(graph, enough) or 0.0)


def holds_one_microbatch(problem) -> bool:
    """Whether some schedule of the partition's problem fits its cap: every rank's least cap
    (schedc.core.cost_model.CostModel.least_caps: static bytes, receive buffers, reserve and one
    microbatch through its stages, transients and rises included) fits the rank's cap."""
    costs = problem.costs
    return all(fits(need, cap) for need, cap in zip(costs.least_caps, costs.caps))


def no_partition_holds(profile: Profile, searches, ranks: int, microbatches: int, limit: MemoryLimit,
                       objective: str) -> SchedcError:
    """The error when no partition the search reached holds one microbatch on every rank (the
    dynamic program over partitions, schedc.core.partition, counts what the cost model counts,
    so its start partition fits whenever min_cap does: a safeguard). It names the start split
    (the program's, torchtitan's default or the even one) with the least cap under the cost
    model, a cap that works."""
    from schedc.core.partition import even_counts, torchtitan_default_counts

    none = MemoryLimit(kind="none")
    tried = []
    for pl, pb in searches:
        S = stages_for(pl, ranks)
        for counts in (pb.counts, torchtitan_default_counts(profile.n_stages, S), even_counts(profile.n_stages, S)):
            if counts and min(counts) >= 1:
                need = max(problem_for(profile, counts, pl, ranks, microbatches, none, objective).costs.least_caps)
                tried.append((need, pl, list(counts)))
    message = (f"{{name}}{limit}: no partition the search reached holds one microbatch on every rank once its "
               "receive buffers, the reserve and transients are counted")
    if tried:
        need, pl, counts = min(tried, key=lambda t: t[0])
        message += f"; {{name}}{format_bytes(need, round_up=True)} fits the split {counts} ({pl})"
    return ParameterError("memory", message)
