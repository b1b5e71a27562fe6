"""The anchored relaxation: a lower bound on the makespan from the memory of several ranks at once.

Problem: a number L such that every schedule of a problem (per-rank orders of its actions under
the dependency and memory rules of docs/design.md) has makespan >= L. Under a tight cap the step
is set by how often microbatches can pass through the ranks that hold them, and that is decided
by several ranks together: in a V, rank 0 holds stage 0, whose activations live for the whole
round trip, and the last stage, whose bytes leave room for only two of stage 0's. The closed-form
memory terms (schedc.solver.bounds.chains) and the one-rank relaxation (schedc.solver.bounds.rank)
see one rank at a time, and CP-SAT on the two-rank relaxation (schedc.solver.bounds.pair)
proves little in seconds. What this relaxation gains over them on a measured case: docs/design.md,
"Anchored and block relaxations".

Method. Let tau_m be the start of F(S-1, m), microbatch m's forward on the last stage. Every
stage's part of m is pinned to it by the dependency chains (schedc.solver.bounds.chains' notation):

* F(s, m) starts no later than tau_m - A(s), A(s) = head(S-1) - head(s): the forwards of stages
  s..S-2, with communications, run before F(S-1, m);
* I(s, m) (or B) ends no earlier than tau_m + Z(s), Z(s) = F(S-1), then the backwards of stages
  S-1 down to s with communications; W(s, m) ends no earlier than tau_m + Z(s) + W(s).

So on the rank of stage s microbatch m holds the bytes its I frees over at least
[tau_m - A(s), tau_m + Z(s)), and the bytes its W frees over at least [tau_m - A(s),
tau_m + Z(s) + W(s)): windows of fixed length, fixed once tau_m is. The bytes a rank holds at an
instant are at most one of the running sums simulate() checks (at the latest F start before it,
every microbatch then held was already counted and not yet freed), so within the room. Hence
every schedule gives M points tau_1 <= ... <= tau_M (microbatches are interchangeable, so sorted)
whose windows keep each rank within its room at every instant, tau_1 >= head(S-1), and the step
ends no earlier than tau_M + F(S-1) + tailF(S-1). The least spread tau_M - tau_1 of such points
gives

    makespan >= head(S-1) + least spread + F(S-1) + tailF(S-1).

The least spread is an integer program CP-SAT solves well: one variable per point, per rank a
Cumulative of fixed-size intervals. The other rules (one action at a time, the forwards of stages
after s) are dropped: that only makes it a relaxation. Adding each rank's one-at-a-time rule
with free action times did not raise it on the measured case (docs/design.md).

Rounding keeps it a relaxation: with time unit u, a schedule's points ceil(tau / u) are feasible
when each window starts at ceil(tau / u) - floor(A / u) (no earlier than the real one) and lasts
floor((A + Z') / u) - 2 units (every integer instant it covers lies in the real window);
demands are bytes floored to the byte unit, the room as simulate()'s tolerance allows, floored;
the real spread is at least (integer spread - 1) u.

Many microbatches: the least spread s(n) of n points is superadditive over a shared point: the
points tau_1..tau_k and tau_k..tau_n of a feasible set are feasible sets themselves (fewer
windows hold fewer bytes), so s(n) >= s(k) + s(n - k + 1). For each block size b in
:data:`BLOCKS` (at most M), smallest first while time allows, M points are bounded by q blocks of
b points and the remainder: s(M) >= q s(b) + s(r + 1), M - 1 = q (b - 1) + r; the best is kept.

``ranks`` restricts the windows to some ranks (a relaxation again).

Only for ``makespan``, like the other relaxations. Without OR-Tools, without a finite cap on the
ranks chosen, or with one microbatch, no bound (0.0).

Cost: at most two CP-SAT models per block size, of at most 16 points and 2 x (stages) x points
intervals, each capped by the deadline (CP-SAT's proven bound stands when it stops early); the
time grows with the block size, independent of M (timings: docs/design.md).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, Union

from schedc.core.ir import Kind
from schedc.core.tolerances import REL
from schedc.solver.bounds.chains import chains
from schedc.solver.deadline import Deadline
from schedc.solver.graph import Graph, graph_of
from schedc.solver.problem import Problem

# block sizes, smallest first: a block of 8 points solves in hundredths of a second and bounds
# any count; 16 points take up to a few seconds and lose less at the seams (module docstring)
BLOCKS = (8, 16)
TIME_UNITS = 4000  # time resolution: the longest window in this many units
BYTE_UNITS = 10_000  # byte resolution: a rank's largest window in this many units
SHRINK = 2  # units taken off each window so that it lies inside the real one (module docstring)

# one rank's windows: (capacity, ((offset before tau, length, bytes), ...)) in integer units
RankWindows = tuple[int, tuple[tuple[int, int, int], ...]]


def windows(g: Graph, ranks: Optional[Sequence[int]] = None) -> tuple[float, tuple[RankWindows, ...]]:
    """(the time unit in seconds, per rank with a cap that can bind: its windows). Ranks whose
    windows for every microbatch at once fit their room are left out: they constrain nothing."""
    ch = chains(g)
    a = g.S - 1
    # Z(s): from the start of F(S-1, m) to the earliest end of I(s, m)
    reach = {s: ch["head_i"][s] + ch[Kind.I][s] - ch["head"][a] for s in range(g.S)}
    # per rank with a cap: (A(s), Z(s) or Z(s) + W(s), bytes) of each window
    spans = {r: [(ch["head"][a] - ch["head"][s], reach[s] + (g.dW[s] if k == Kind.W else 0.0), held)
                 for s in g.stages[r] for k, held in g.held(s)]
             for r in (range(g.R) if ranks is None else ranks) if math.isfinite(g.room[r])}
    if not any(spans.values()):
        return 1.0, ()
    unit = max(before + end for mine in spans.values() for before, end, _ in mine) / TIME_UNITS
    out = []
    for r, mine in spans.items():
        if not mine:
            continue
        byte_unit = max(max(held for *_, held in mine) / BYTE_UNITS, 1.0)
        capacity = math.floor((g.room[r] + g.caps[r] * REL + REL) / byte_unit)
        rows = []
        for before, end, held in mine:
            length = math.floor((before + end) / unit + REL) - SHRINK
            amount = math.floor(held / byte_unit + REL)
            if length > 0 and amount > 0:
                rows.append((math.floor(before / unit + REL), length, amount))
        if rows and g.M * sum(x[2] for x in rows) > capacity:
            out.append((capacity, tuple(sorted(rows))))
    return unit, tuple(out)


def least_spread(model: tuple[RankWindows, ...], n: int, seconds: float) -> tuple[int, bool]:
    """(a lower bound on the least integer spread of n points whose windows keep every rank
    within its capacity, whether it is the optimum): CP-SAT's optimum, or its proven bound when
    `seconds` run out (0 when it proves nothing)."""
    from ortools.sat.python import cp_model

    if n < 2 or not model:
        return 0, True
    # n points, each past every window of the last: no two microbatches share an instant
    apart = max(b for _, rows in model for b, _, _ in rows) + max(ln for _, rows in model for _, ln, _ in rows) + 1
    horizon = (n - 1) * apart
    m = cp_model.CpModel()
    tau = [m.new_int_var(0, horizon, f"tau_{i}") for i in range(n)]
    m.add(tau[0] == 0)
    for i in range(1, n):
        m.add(tau[i] >= tau[i - 1])
    for capacity, rows in model:
        intervals, demands = [], []
        for before, length, amount in rows:
            for t in tau:
                intervals.append(m.new_fixed_size_interval_var(t - before, length, ""))
                demands.append(amount)
        m.add_cumulative(intervals, demands, capacity)
    m.minimize(tau[-1])
    from schedc.solver.engines.cpsat import new_solver, run_solver

    # configured as the compile's other CP-SAT phases (a work budget: deterministic time, charged)
    solver = new_solver(seconds, 2, least=0.05)
    status = run_solver(solver, m)
    if status == cp_model.INFEASIBLE or status == cp_model.MODEL_INVALID:
        return 0, False  # the horizon admits a solution whenever one microbatch fits: claim nothing
    bound = solver.best_objective_bound
    return (max(0, math.ceil(bound - REL)) if math.isfinite(bound) else 0), status == cp_model.OPTIMAL


def tiled_spread(M: int, sizes: Sequence[int], deadline: Deadline,
                 solve: Callable[[int, float], tuple[int, bool]]) -> tuple[int, bool]:
    """(a lower bound on the least integer spread of M points, whether every solve behind it was
    optimal) from blocks of each size in `sizes` (at most M) in turn while the deadline allows,
    the best kept: M - 1 = q (n - 1) + r points tiled by q blocks of n and one of r + 1 sharing
    their ends (superadditivity, module docstring). ``solve(n, seconds)`` bounds the least spread
    of n points: (the bound, whether it is the optimum). schedc.solver.bounds.blocks tiles its blocks of
    microbatches the same way."""
    best, solved = 0, True
    for size in sorted({min(M, b) for b in sizes}):
        if size < 2 or (best and deadline.expired()):
            break
        q, r = divmod(M - 1, size - 1)
        total = 0
        for n, times in ((size, q), (r + 1, 1)):
            if times and n >= 2:
                value, proven = solve(n, deadline.left())
                total += times * value
                solved = solved and proven
        best = max(best, total)
    return best, solved


def spread_bound(model: tuple[RankWindows, ...], M: int, deadline: Deadline, blocks: Sequence[int] = BLOCKS) -> int:
    """A lower bound on the least integer spread of M points, from blocks of each size in `blocks`
    (at most M) in turn while the deadline allows, the best kept (module docstring)."""
    return tiled_spread(M, blocks, deadline, lambda n, seconds: least_spread(model, n, seconds))[0]


def makespan_bound(g: Graph, spread: int, unit: float) -> float:
    """makespan >= head(S-1) + (spread - 1) unit + F(S-1) + tailF(S-1), for a lower bound `spread`
    on the integer spread of tau_1..tau_M in units of `unit` seconds (module docstring; the one
    unit off covers the rounding of the points); 0.0 when the spread proves nothing."""
    if spread <= 1:
        return 0.0
    ch = chains(g)
    a = g.S - 1
    return ch["head"][a] + (spread - 1) * unit + ch[Kind.F][a] + ch["tail_f"][a]


def anchored_bound(problem: Union[Problem, Graph], deadline: Deadline, ranks: Optional[Sequence[int]] = None,
                   blocks: Sequence[int] = BLOCKS) -> float:
    """A lower bound on the problem's makespan from its anchored relaxation (module docstring),
    with the windows of `ranks` only (all ranks by default) and blocks of the sizes in `blocks`:
    0.0 when it does not apply."""
    from schedc.solver.engines.cpsat import cpsat_available

    g = graph_of(problem).relaxed()  # valid whatever rises or is transient (Graph.relaxed)
    if g.problem.objective != "makespan" or g.M < 2 or not cpsat_available():
        return 0.0
    unit, model = windows(g, ranks)
    if not model:
        return 0.0
    return makespan_bound(g, spread_bound(model, g.M, deadline, blocks), unit)
