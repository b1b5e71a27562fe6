"""The window search: re-solve a time window of the incumbent at a time, the rest held in order.

Problem: improve a schedule too large for one CP-SAT or integer-program model (thousands of
actions, or free order pairs past model.FULL_MODEL_PAIRS) and keep it feasible throughout.

Method: a rolling horizon (a variable-neighbourhood search over time windows, ``window_search``):
free the actions of every rank whose simulated start lies in a time window, keep every other
action in its rank's incumbent order, re-solve that with CP-SAT (schedc.solver.engines.cpsat.solve_window)
or the integer program (schedc.solver.engines.mip.solve_model with ``free``), keep the answer when it
is no worse, slide, widen, slant and focus as ``window_search`` describes. :class:`WindowSearch`
is its engine (schedc.solver.engine): the incumbent's orders in, the best orders out.

Cost: each window builds a model of the whole graph with most actions as constants (CP-SAT) or
the graph's transitive closure (the integer program: quadratic memory, hence
``MIP_WINDOW_MAX_ACTIONS``); the search runs until the deadline or until no window size finds
anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional

from schedc.choices import Status
from schedc.core.ir import Kind
from schedc.core.tolerances import REL, TIE
from schedc.solver.deadline import Deadline, now
from schedc.solver.engine import Incumbent, Result, close, materialize
from schedc.solver.graph import Graph, canonical_orders
from schedc.solver.problem import Problem

WINDOW_SOLVE_LIMIT = 6.0  # seconds per window model
# a CP-SAT window that has found nothing new for this long rarely finds more (measured:
# docs/design.md, "Windows")
WINDOW_STALE_SECONDS = 1.0
WINDOW_PASSES = 4  # one window: CP-SAT's model keeps every action, most of them as constants
# an integer-program window computes the transitive closure of the whole graph (bitsets,
# quadratic memory: 30k actions ~ 110 MB); above this, --solver highs/cbc keep the warm start
MIP_WINDOW_MAX_ACTIONS = 30_000


@dataclass
class WindowSearch:
    """The window search as an engine: `engine` is "cpsat" or a MIP solver name; `objective`
    overrides the problem's (the driver runs makespan windows first for span); `report(best,
    what)` hears of progress; `lower_bound` ends the search when met."""

    engine: str
    lower_bound: float = 0.0
    report: Callable[[float, str], None] = lambda best, what: None
    seed: int = 0
    objective: Optional[str] = None
    name: str = "windows"

    def run(self, graph: Graph, incumbent: Optional[Incumbent], deadline: Deadline) -> Result:
        if incumbent is None or incumbent.orders is None:
            return Result()
        problem = graph.problem
        if self.objective and self.objective != problem.objective:
            problem = replace(problem, objective=self.objective)
        orders, sched, sim, used = window_search(
            graph, problem, incumbent.orders, incumbent.schedule, incumbent.sim, deadline.at, self.engine,
            self.lower_bound, self.report, self.seed)
        return Result(schedule=sched, sim=sim, orders=orders, status=Status.FEASIBLE if used else Status.NONE)


# Window sizes, in actions per rank, tried smallest first. CP-SAT takes larger windows than the
# integer program (NoOverlap and the cumulative reason on orders directly); the integer
# program's pairwise order binaries grow with the square of the window.
WINDOW_SIZES = {"cpsat": (24, 48, 72), "mip": (8, 14, 22)}
WINDOW_OFFSETS = (0.0, 0.5, 0.25, 0.75)  # of a step: where each round of sweeps puts its window edges
# how far a window's edges move from one rank to the next, in forward hops, once upright windows
# stop finding anything: a window that follows the forward wave (or runs against it) re-times a
# microbatch's passage through all ranks at once, where an upright one cuts it (measured:
# docs/design.md, "Windows")
WINDOW_SHEARS = (0.0, 1.0, -1.0)


def window_search(inst, problem, orders, sched, sim, deadline, engine, lb, report, seed):
    """Rolling horizon (a variable-neighbourhood search over time windows): free the actions
    starting inside a time window on every rank, keep the rest in order, re-solve with `engine`
    (``cpsat`` or a MIP solver name), keep the answer when it is no worse (so the incumbent can
    drift across plateaus), slide by half a window (alternately from the end and from the
    start). After a sweep that improved, start again from the smallest upright windows; after a
    fruitless one, try the next size; after a whole round of sizes has found nothing, slant the
    windows along the forward wave, then against it (WINDOW_SHEARS). Each sweep shifts the
    window edges by a quarter or half step (WINDOW_OFFSETS).

    Focus: once a window has improved, sweeps skip the windows that lie wholly before the
    earliest window that has improved, until every size at every offset has found nothing in a
    row there; then they cover the whole timeline again. The search stops when that happens
    with no focus, or at the deadline. Why: the step time is decided where gains are found, late
    in the timeline, while most of an unfocused search's window time goes to the early part
    (measured: docs/design.md, "Windows")."""
    obj_name = problem.objective
    best_val = sim.objective(obj_name)
    used = False
    if orders is None or (engine != "cpsat" and inst.n > MIP_WINDOW_MAX_ACTIONS):
        return orders, sched, sim, used
    solve = _window_solver(inst, problem, engine, lb)
    sizes = WINDOW_SIZES["cpsat" if engine == "cpsat" else "mip"]
    per_rank = max(len(r) for r in orders)
    hop = _forward_hop(problem)
    size_i = 0
    n_windows = 0
    n_sweeps = 0
    fruitless = 0  # sweeps in a row that found nothing better
    focus_from = None  # share of the step time before which no window has improved yet
    last_report = now()
    while now() < deadline - 0.5 and Deadline(deadline).allows(inst.n, WINDOW_PASSES):
        if fruitless >= len(sizes) * len(WINDOW_OFFSETS):
            if focus_from is None:
                break
            focus_from, fruitless = None, 0  # the focus is exhausted: sweep all of the timeline again
        k = sizes[size_i]
        improved_sweep = False
        length = sim.makespan * min(1.0, k / max(1, per_rank))
        # upright windows until a whole round of sizes has found nothing, then slanted ones
        shear = hop * WINDOW_SHEARS[(fruitless // len(sizes)) % len(WINDOW_SHEARS)]
        reach = abs(shear) * (len(orders) - 1) / 2
        positions = _sweep(sim.makespan, length, n_sweeps, reach, focus_from)
        n_sweeps += 1
        for t in positions:
            if now() >= deadline - 0.5 or not Deadline(deadline).allows(inst.n, WINDOW_PASSES):
                break
            free = _window_at(inst, orders, sim, t, length, shear)
            if sum(hi - lo for lo, hi in free) < 2:
                continue
            seconds = min(WINDOW_SOLVE_LIMIT, deadline - now())
            answer = solve(orders, sim, best_val, free, seconds, seed + n_windows)
            n_windows += 1
            if now() - last_report >= 2.0:
                last_report = now()
                report(best_val, f"window {n_windows} ({k}/rank) t={max(t, 0.0):.4g}")
            if answer is None:
                continue
            used = True
            cand = canonical_orders(inst, answer)
            cs, csim = materialize(inst, cand, problem)
            tol = REL * max(1.0, best_val)
            if csim is None or not csim.fits or csim.objective(obj_name) > best_val + tol:
                continue
            orders, sched, sim = cand, cs, csim
            if sim.objective(obj_name) < best_val - tol:
                best_val = sim.objective(obj_name)
                improved_sweep = True
                gained_from = (t - length - reach) / sim.makespan
                focus_from = gained_from if focus_from is None else min(focus_from, gained_from)
                report(best_val, f"window {n_windows} ({k}/rank) t={max(t, 0.0):.4g} improved")
                if close(best_val, lb):
                    return orders, sched, sim, used
        report(best_val, f"windows of {k}/rank swept")
        size_i = 0 if improved_sweep else (size_i + 1) % len(sizes)
        fruitless = 0 if improved_sweep else fruitless + 1
    return orders, sched, sim, used


def _sweep(end: float, length: float, n_sweeps: int, reach: float = 0.0,
           focus_from: Optional[float] = None) -> list[float]:
    """Window starts every half window over [-reach, end + reach) (a slanted window's middle
    rank must go that far for its outer ranks to reach both ends), edges shifted by this sweep's
    offset, and none before ``focus_from * end`` when focused; every other sweep runs from the
    end (the cool-down first: the objective is decided there)."""
    step = length / 2
    offset = step * WINDOW_OFFSETS[n_sweeps % len(WINDOW_OFFSETS)]
    first = (offset - step if offset > 0 else 0.0) - reach
    positions = [first + i * step for i in range(int(math.ceil((end + reach - first) / step)))]
    if focus_from is not None:
        positions = [t for t in positions if t >= focus_from * end]
    return positions[::-1] if n_sweeps % 2 == 0 else positions


def _forward_hop(problem: Problem) -> float:
    """A microbatch's forward time per rank: all its F's and comms but the last stage's,
    spread over the ranks (with one stage per rank, the mean of F + the comm after it)."""
    hops = [problem.duration(s, Kind.F) + problem.comm(s) for s in range(problem.n_stages - 1)]
    return sum(hops) / max(1, problem.n_ranks - 1)


def _window_solver(inst, problem: Problem, engine: str, lower_bound: float):
    """solve(orders, sim, value, free, seconds, seed) -> new orders or None, for one window."""
    if engine == "cpsat":
        from schedc.solver.engines import cpsat

        def solve(orders, sim, value, free, seconds, seed):
            return cpsat.solve_window(problem, inst, orders, sim, free, seconds, workers=cpsat.WORKERS, seed=seed,
                                      stale_seconds=WINDOW_STALE_SECONDS)
    else:
        from schedc.solver.engines import mip

        def solve(orders, sim, value, free, seconds, seed):
            return mip.solve_model(inst, orders, value, problem.objective, seconds, engine, free=free,
                                     lower_bound=lower_bound, seed=seed).orders
    return solve


def _window_at(inst, orders, sim, t: float, length: float, shear: float = 0.0) -> list[tuple[int, int]]:
    """Per rank r, the positions (lo, hi) of its actions whose simulated start lies in
    [t_r, t_r + length), t_r = t + shear * (r - middle rank)."""
    free = []
    middle = (len(orders) - 1) / 2
    for r, row in enumerate(orders):
        t_r = t + shear * (r - middle)
        starts = [sim.timings[inst.actions[i]].start for i in row]
        lo = next((j for j, s in enumerate(starts) if s >= t_r - TIE), len(row))
        hi = next((j for j, s in enumerate(starts) if s >= t_r + length - TIE), len(row))
        free.append((lo, hi))
    return free
