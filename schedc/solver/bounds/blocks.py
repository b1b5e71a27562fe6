"""The block relaxation: a lower bound on the makespan from the whole problem on a few microbatches.

Problem: a number L such that every schedule of a problem (per-rank orders of its actions under
the dependency and memory rules of docs/design.md) has makespan >= L. Under a tight cap in a V
the anchored relaxation (schedc.solver.bounds.anchored) keeps every rank's memory but drops the rule that
a rank runs one action at a time; CP-SAT on the whole problem keeps everything but proves little
in seconds at 16 microbatches and more (a measured case: docs/design.md, "Anchored and block
relaxations").

Method. Let tau_m be the start of F(S-1, m). On n consecutive microbatches the exact problem
is small: every action of every stage as an interval with its duration, the dependencies of
schedc.simulate with the boundary's comm as lag, each (stage, kind) in microbatch order, one
action at a time per rank (NoOverlap), and per rank the memory as a cumulative (a microbatch of
stage s holds the bytes its I frees over [F start, I end) and the bytes its W frees over [F start,
W end): simulate()'s running sums, as in schedc.solver.engines.cpsat). Its times carry no release dates,
so it is invariant under translation: s(n), the least tau_n - tau_1 of such a block, is a lower
bound on tau_(k+n-1) - tau_k in every schedule, because the actions of microbatches k..k+n-1 of a
schedule are a feasible block (fewer actions on each rank, fewer bytes held). Blocks that share
their end points tile tau_1..tau_M: with M - 1 = q (n - 1) + r,

    makespan >= head(S-1) + q s(n) + s(r + 1) + F(S-1) + tailF(S-1)

(head and tail: the one-microbatch chains of schedc.solver.bounds.chains). Where the cap is tight the
steady rate decides the step, and a block of 4-8 microbatches already has it: s(n)/(n - 1) levels
off at the optimum's average spread per microbatch (measured: docs/design.md). Bounding the first
block from time 0 and the last to its makespan instead added nothing on the measured case.

Rounding keeps it a relaxation: with time unit u (the busiest rank's work per microbatch / 2000)
every duration and lag is floored and every rule is stated on start times, so the floors of a real
schedule's starts are a feasible integer point (``floor(x + d) >= floor(x) + floor(d)``; an
integer instant covered by floored memory intervals is covered by the real ones just before it);
bytes are floored and the room taken as simulate()'s tolerance allows, floored (a sum of floors
is at most the floor of the sum); the real spread is at least (integer spread - 1) u. Times lie
within +-H, H the serial schedule's makespan of all M microbatches: every schedule no longer than
that maps into the domain, and that schedule itself bounds L.

Only for ``makespan``, like the other relaxations; without OR-Tools or with one microbatch, no
bound (0.0).

Cost: one CP-SAT model of 3 S n intervals per block size (two where r + 1 differs from n); the
solve time grows quickly with n and not with M (timings: docs/design.md).
"""

from __future__ import annotations

import math
from typing import Sequence, Union

from schedc.core.ir import Kind
from schedc.core.tolerances import REL
from schedc.solver.bounds.anchored import makespan_bound, tiled_spread
from schedc.solver.bounds.chains import chains
from schedc.solver.deadline import Deadline
from schedc.solver.graph import Graph, graph_of
from schedc.solver.problem import Problem

SIZES = (4, 6, 8)  # block sizes, smallest (cheapest) first: one step each (BlockRelaxation)
UNITS_PER_MICROBATCH = 2000  # time resolution: the busiest rank's work per microbatch in this many units
BYTE_UNITS = 10_000  # byte resolution: a rank's largest held bytes in this many units
# CP-SAT workers, more than the cores: the portfolio's other strategies prove blocks of 4 of a
# tight-cap V faster than 2 workers on 2 cores (measured: docs/design.md)
WORKERS = 4


def time_unit(g: Graph) -> float:
    """Seconds per integer time unit of the block models: the busiest rank's work per microbatch
    in UNITS_PER_MICROBATCH units."""
    return g.busiest_work() / UNITS_PER_MICROBATCH


def block_spread(g: Graph, n: int, seconds: float) -> tuple[int, bool]:
    """(a lower bound on the least integer spread tau_n - tau_1 of a block of n microbatches, in
    :func:`time_unit` units, whether the value is the block's optimum): CP-SAT's optimum, or its
    proven bound when `seconds` run out (0 when it proves nothing)."""
    from ortools.sat.python import cp_model

    unit = time_unit(g)
    if n < 2 or unit <= 0:
        return 0, True

    def floor(x: float) -> int:
        return math.floor(x / unit + REL)

    S = g.S
    lag = [floor(c) for c in g.comm[: S - 1]]
    serial = sum(g.d[k][s] for s in range(S) for k in g.kinds(s)) + 2 * sum(g.comm[: S - 1])
    horizon = math.ceil(g.M * serial / unit) + 1  # the serial schedule of the whole step (docstring)
    m = cp_model.CpModel()
    start: dict[tuple[int, str, int], cp_model.IntVar] = {}
    for s in range(S):
        for k in g.kinds(s):
            for i in range(n):
                start[s, k, i] = m.new_int_var(-horizon, horizon, f"start_{s}{k}{i}")

    def end(s: int, k: str, i: int):
        return start[s, k, i] + floor(g.d[k][s])

    tau = [start[S - 1, Kind.F, i] for i in range(n)]
    m.add(tau[0] == 0)
    for i in range(n):
        for s in range(S):
            back = g.kinds(s)[1]  # I, or B on a stage without weights
            if s > 0:
                m.add(start[s, Kind.F, i] >= end(s - 1, Kind.F, i) + lag[s - 1])
            m.add(start[s, back, i] >= end(s, Kind.F, i))
            if s < S - 1:
                m.add(start[s, back, i] >= end(s + 1, g.kinds(s + 1)[1], i) + lag[s])
            if Kind.W in g.kinds(s):
                m.add(start[s, Kind.W, i] >= end(s, Kind.I, i))
            for k in g.kinds(s):  # each (stage, kind) in microbatch order, on one rank
                if i > 0:
                    m.add(start[s, k, i] >= end(s, k, i - 1))
    # the chains again, from each microbatch's anchor: implied, but CP-SAT propagates them at once
    # (as starts: a floored start plus a floored duration can fall a unit short of a floored end)
    ch = chains(g)
    for s in range(S - 1):
        back = g.kinds(s)[1]
        for i in range(n):
            m.add(start[s, Kind.F, i] <= tau[i] - floor(ch["head"][S - 1] - ch["head"][s]))
            m.add(start[s, back, i] >= tau[i] + floor(ch["head_i"][s] - ch["head"][S - 1]))
    for r in range(g.R):
        actions, held, demands = [], [], []
        byte_unit = max(max((b for s in g.stages[r] for _, b in g.held(s)), default=1.0) / BYTE_UNITS, 1.0)
        for s in g.stages[r]:
            for i in range(n):
                for k in g.kinds(s):
                    actions.append(m.new_fixed_size_interval_var(start[s, k, i], floor(g.d[k][s]), ""))
                for k, b in g.held(s):
                    amount = math.floor(b / byte_unit + REL)
                    if amount > 0:
                        length = m.new_int_var(0, 2 * horizon, "")
                        held.append(m.new_interval_var(start[s, Kind.F, i], length, end(s, k, i), ""))
                        demands.append(amount)
        m.add_no_overlap(actions)
        if held and math.isfinite(g.room[r]):
            m.add_cumulative(held, demands, math.floor((g.room[r] + g.caps[r] * REL + REL) / byte_unit))
    m.minimize(tau[-1])
    from schedc.solver.engines.cpsat import new_solver, run_solver

    # configured as the compile's other CP-SAT phases (a work budget: deterministic time, charged)
    solver = new_solver(seconds, WORKERS, least=0.05)
    status = run_solver(solver, m)
    if status == cp_model.INFEASIBLE or status == cp_model.MODEL_INVALID:
        return 0, False  # the domain holds the serial schedule whenever one microbatch fits: claim nothing
    bound = solver.best_objective_bound
    return (max(0, math.ceil(bound - REL)) if math.isfinite(bound) else 0), status == cp_model.OPTIMAL


def block_bound(problem: Union[Problem, Graph], deadline: Deadline, sizes: Sequence[int] = SIZES[:1]) -> float:
    """A lower bound on the problem's makespan from blocks of each size in `sizes` (at most M) in
    turn while the deadline allows, the best kept (module docstring): 0.0 when it does not apply."""
    return _bound(graph_of(problem).relaxed(), deadline, sizes)[0]


def _bound(g: Graph, deadline: Deadline, sizes: Sequence[int]) -> tuple[float, bool]:
    """(block_bound's value, whether every block was solved to its optimum)."""
    from schedc.solver.engines.cpsat import cpsat_available

    if g.problem.objective != "makespan" or g.M < 2 or not cpsat_available():
        return 0.0, True
    spread, solved = tiled_spread(g.M, sizes, deadline, lambda n, seconds: block_spread(g, n, seconds))
    return makespan_bound(g, spread, time_unit(g)), solved


class BlockRelaxation:
    """The block relaxation of one problem, one block size at a time (the interface of
    schedc.solver.bounds.pair.PairRelaxation), for a plan that weighs many partitions: blocks
    of 4 first (a tenth of a second on 4 ranks in a V), then 6 and 8. ``best``: the bound so far;
    ``settled``: it reached `target`, or every size is done; ``solved``: every block so far was
    solved to its optimum (not cut short by a deadline)."""

    def __init__(self, problem: Union[Problem, Graph], target: float, sizes: Sequence[int] = SIZES):
        from schedc.solver.engines.cpsat import cpsat_available

        self.g, self.target, self.best, self.solved = graph_of(problem).relaxed(), target, 0.0, True
        applies = self.g.problem.objective == "makespan" and self.g.M >= 2 and cpsat_available()
        self.steps = sorted({min(self.g.M, n) for n in sizes}) if applies else []

    @property
    def settled(self) -> bool:
        return self.best >= self.target or not self.steps

    def next(self, deadline: Deadline) -> float:
        """Take the next step (never past `deadline`); the bound so far."""
        if not self.settled:
            value, solved = _bound(self.g, deadline, (self.steps.pop(0),))
            self.best, self.solved = max(self.best, value), self.solved and solved
        return self.best
