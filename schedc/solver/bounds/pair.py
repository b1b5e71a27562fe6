"""The two-rank relaxation: a lower bound on the makespan from two ranks together, every other rank free.

Problem: is there a schedule of a problem (per-rank orders of its actions under the dependency
and memory rules of docs/design.md) with makespan <= `target`? When there is none, `target` is a
lower bound, and plan's bound over partitions can drop a partition that the one-rank bounds
could not.

Why two ranks: the one-rank relaxation (``schedc.solver.bounds.rank``) bounds each rank
alone, with the rest of the pipeline as fixed delays (heads and tails). Where two ranks are
both nearly saturated, each can be tight alone but not both at once: in a V, the rank of a heavy
early stage has to feed rank 0 (the LM head) early, and its work on the mirrored late stage comes
back late (a measured case: docs/design.md, the plan's certificate).

Method: the CP-SAT formulation of ``schedc.solver.engines.cpsat`` (one interval per action, its
precedences, the orders kinds-in-microbatch-order and the memory cap force) with the one-at-a-
time rule (NoOverlap) and the memory cap kept only on the two ranks. Dropping constraints of
ranks makes it a relaxation: every schedule of the problem is a point of it. The horizon is the
target, so CP-SAT answers "infeasible" (the bound is the target) or gives the best bound it
proved within its time. Times are floored to the model's unit, a relaxation again (cpsat's
docstring). When the byte unit is not exact the caps are left out too (rounding bytes is not a
relaxation). The pairs tried are those among the ranks with the three largest one-rank bounds,
the largest first, until one reaches the target.

Only for ``makespan``, like the one-rank relaxation.

Cost: a CP-SAT model of the whole problem (O(actions) variables) with two NoOverlaps, one per
pair tried; a fraction of a second per pair when the target is out of reach (CP-SAT's propagation
settles it at once), bounded by the time limit otherwise.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Optional, Union

from schedc.core.tolerances import REL
from schedc.solver import interrupt
from schedc.solver.bounds.rank import rank_relaxation_values
from schedc.solver.deadline import Deadline
from schedc.solver.graph import Graph, graph_of
from schedc.solver.problem import Problem

CANDIDATE_RANKS = 3  # pairs among the ranks with the largest one-rank bounds
# the pairs that settle a partition solve in well under a second; others can search for long
# (measured: docs/design.md, the plan's certificate)
SECONDS_PER_PAIR = 0.75


def pair_relaxation_bound(problem: Union[Problem, Graph], target: float, deadline: Deadline) -> float:
    """A lower bound on the problem's makespan from its two-rank relaxations (module docstring):
    `target` when one of them has no schedule within it, else the best bound they proved (0.0
    when none finished anything, or for span, or without OR-Tools). Never past `deadline`."""
    relaxation = PairRelaxation(problem, target)
    while not relaxation.settled and deadline.left() >= 0.05 and not deadline.expired():
        relaxation.next(deadline)
    return relaxation.best


def _exact_or_relaxed(g: Graph) -> Graph:
    """The graph itself where CP-SAT states its memory exactly (cpsat._add_memory holds rises and
    transients; exact byte units): two ranks' exact rules are a relaxation of all ranks'.
    Otherwise the relaxed view (Graph.relaxed), whose memory has fewer values to scale."""
    if not g.new_terms:
        return g
    from schedc.solver.engines import cpsat

    return g if cpsat._scales(g)[1].exact else g.relaxed()


class PairRelaxation:
    """The two-rank relaxations of one problem, one pair at a time (a caller weighing many
    problems can go on with whichever needs it most). ``best``: the bound so far; ``settled``:
    it reached `target`, or every pair is done. The model without any rank's one-at-a-time rule
    or cap is built on the first pair; each pair adds its two ranks' to a copy."""

    def __init__(self, problem: Union[Problem, Graph], target: float):
        from schedc.solver.engines.cpsat import cpsat_available

        self.g, self.target, self.best = _exact_or_relaxed(graph_of(problem)), target, 0.0
        self.pairs: list[tuple[int, int]] = []
        self.model: Optional[Any] = None  # ortools' CpModel, built on the first solve
        if self.g.problem.objective != "makespan" or not math.isfinite(target) or self.g.R < 2 \
                or not cpsat_available():
            return  # (an infinite target: nothing found yet to measure against)
        values = rank_relaxation_values(self.g)
        if values is None:
            return
        if math.isinf(max(values)):  # a rank cannot hold one microbatch: no schedule at all
            self.best = math.inf
            return
        ranks = sorted(range(self.g.R), key=lambda r: -values[r])[:CANDIDATE_RANKS]
        self.pairs = list(itertools.combinations(ranks, 2))

    @property
    def settled(self) -> bool:
        return self.best >= self.target or not self.pairs

    def next(self, deadline: Deadline) -> float:
        """Solve the next pair (for at most SECONDS_PER_PAIR, never past `deadline`); the bound so far."""
        if self.settled:
            return self.best
        if self.model is None:
            self._build()
        self.best = max(self.best, self._solve(self.pairs.pop(0), min(SECONDS_PER_PAIR, deadline.left())))
        if self.settled:
            self.model = None  # a plan keeps many of these while it weighs partitions
        return self.best

    def _build(self) -> None:
        from ortools.sat.python import cp_model

        from schedc.solver.engines import cpsat

        g = self.g
        self.ts, self.bs = cpsat._scales(g)
        self.horizon = self.ts.floor(self.target)
        self.dur = cpsat._durations(g, self.ts)
        self.model = cp_model.CpModel()
        starts, ends, intervals = cpsat._intervals(self.model, g, self.dur, self.horizon)
        cpsat._add_precedences(self.model, g, starts, ends, cpsat._lags(g, self.ts))
        # only an action nothing waits for can end last (lags and durations are >= 0)
        has_successor = {a for preds in g.preds for a, _ in preds}
        may_end_last = [[i for i in acts if i not in has_successor] for acts in g.by_rank]
        cpsat._add_objective(self.model, g, starts, ends, "makespan", self.horizon, 0, may_end_last)
        self.start_index = [v.index for v in starts]
        self.interval_index = [v.index for v in intervals]

    def _solve(self, ranks: tuple[int, ...], seconds: float) -> float:
        """The relaxation with `ranks`' rules: the target when it is infeasible, else CP-SAT's
        proven bound in seconds."""
        from ortools.sat.python import cp_model

        from schedc.solver.engines import cpsat

        assert self.model is not None, "_solve runs after _build"
        g, m = self.g, self.model.clone()
        for r in ranks:
            m.add_no_overlap([m.get_interval_var_from_proto_index(self.interval_index[i]) for i in g.by_rank[r]])
        if self.bs.exact:
            starts = [m.get_int_var_from_proto_index(k) for k in self.start_index]
            ends = [x + d for x, d in zip(starts, self.dur)]
            cpsat._add_memory(m, g, self.bs, starts, ends, self.horizon, ranks=ranks)
        solver = cpsat._solver(max(0.05, seconds), 1, 0)
        with interrupt.stop_native_solver(solver.stop_search):
            status = solver.solve(m)
        if status == cp_model.INFEASIBLE:
            # every schedule, floored to units, would be a point within the horizon: none is
            return self.target
        if status == cp_model.MODEL_INVALID or not math.isfinite(solver.best_objective_bound):
            return 0.0
        # floored times make the integer makespan <= the real one over the unit (cpsat's docstring)
        return max(0.0, math.ceil(solver.best_objective_bound - REL) * self.ts.unit)
