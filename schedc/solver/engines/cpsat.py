"""A second engine: the same scheduling problem as a CP-SAT model (OR-Tools), with its own bound.

Problem. As schedc.solver.engines.mip: order every F, I, W (or B) of every stage on its rank so that the
simulated step time (makespan or span) is smallest and no rank's running memory sum exceeds its
cap. The answer is turned back into a Schedule (each rank's actions by start time) and simulated;
the simulated value is the reported one.

Formulation (scheduling, integer time). One interval variable per action of
the problem graph (schedc.solver.graph) (its duration from the problem's executed profile: stage 0's I under
torch's runtime is a legal 0-length interval), and

* precedence: ``start[b] >= end[a] + lag`` for every producer a of b (the boundary's comm when
  the two stages sit on different ranks), plus the instance's valid precedences: kinds in
  microbatch order on each stage and the orders the memory cap forces;
* ``NoOverlap`` over each rank's intervals;
* memory: per rank, a reservoir with level in ``[0, room]`` (cap minus the bytes held all step,
  schedc.core.cost_model) where an F adds its activation bytes at its start, an I that rises adds its
  rise at its start, an I / W / B its (negative) delta at its end, and every action's transient
  bytes are held over its own interval. Because a
  rank's intervals do not overlap and every F lasts > 0, the level at an F's start is exactly
  the simulator's running sum after that F in rank order (releases that end at that instant
  belong to actions before it): simulate()'s accounting, not an approximation. It is stated as
  the equivalent cumulative (each microbatch of a stage holds "I's bytes" over [F start, I end)
  and "W's bytes" over [F start, W end)), because CP-SAT expands a reservoir into one Boolean
  per pair of events (quadratic in a rank's events; measured: docs/design.md, "CP-SAT") while
  cumulative propagation stays near-linear;
* objective: ``makespan >= end[a]`` for all a; or ``span >= end[a] - start[first action of the
  rank]``, where the rank's first start is free (a rank may start late): this optimum is a lower
  bound on every schedule's simulated span (simulate's earliest starts are one feasible point),
  and the extracted order is re-simulated at earliest starts, so its span may come out higher.

Kinds in microbatch order lose nothing here for either objective: relabelling each (stage, kind)
by start time keeps a feasible time assignment feasible with the same times (see model's
docstring), and with free start times the span is a function of those times only.

Integer scaling and what it does to the certificate. Times are multiples of a unit ``u``: the
largest that divides every duration and comm exactly (to 1e-9 relative; the benchmark costs all
do): the first of 1, 0.1, ..., 1e-6 in which all are integers, times their greatest common
divisor there (quarters of a second give 0.25, not 0.01); else ``min positive duration / 1000``
with every duration and lag rounded *down*. Rounding down is a relaxation: flooring the times of
any real schedule gives a feasible integer point with makespan' <= makespan / u and
span' < span / u + 1.
So a CP-SAT bound LB' converts to ``u * LB'`` for makespan, and to ``u * LB'`` for span when the
unit is exact, ``u * (LB' - 1)`` when it is not. Bytes likewise: exact integers of a unit when
activation and weight-grad bytes allow it (byte counts, 0.5-unit fractions), the cap floored
(exact, as every level is a multiple of the unit); otherwise the deltas are rounded against the
cap (adds up, releases down), which makes every answer fit but is no relaxation, and the bound
is then not reported.

Warm start: the schedule it is given (the compile driver passes its best so far; alone, the
heuristic's, schedc.solver.engines.warm.warm_start), relabelled in microbatch order and simulated;
its times (floored to units) are the solution hint, which is a feasible point of the integer
model.

Use: ``schedc.solver.compile`` runs it first, before the integer program (the default when
OR-Tools is installed), or alone (``--solver cpsat``). On instances too large for the full
integer program it stops once it has found nothing new for a while (``stale_seconds``), and the
time goes to windows: ``solve_window`` is the same model with every action outside a time window
held in its rank's order, which CP-SAT solves quickly where the whole model stalls. The actions
before a window keep their times as plain integers, not variables, so a window late in the
timeline builds and solves a model of its own size, not of the whole timeline's. Measured:
docs/design.md, "CP-SAT".

Cost: CP-SAT search, exponential in the worst case, bounded by the time limit; the model has
O(actions) variables and constraints (no pairwise binaries: NoOverlap and the reservoir reason
on orders themselves).
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from schedc.choices import Status
from schedc.core.ir import Kind, Schedule
from schedc.core.simulate import SimResult, simulate
from schedc.core.tolerances import REL, TIE
from schedc.errors import ParameterError, SchedcError
from schedc.solver import interrupt
from schedc.solver.bounds.chains import lower_bound
from schedc.solver.deadline import Deadline, charge, counting_work_on, now, wall_cut, wall_left
from schedc.solver.engine import Incumbent, Result
from schedc.solver.graph import Graph, canonical_orders, graph_of, orders_from_schedule, schedule_from_orders
from schedc.solver.problem import Problem

_REL = REL
WORKERS = 2  # what the compiler runs: CP-SAT's parallel search is its strength; one worker finds much less
# work units per unit of CP-SAT's deterministic time on one worker without its LP: 4.5-7 CPU
# seconds on the window models of a Llama-3.1-70B plan, times 1.5 for the wall clock of a 2-core
# machine with two busy processes (schedc.solver.deadline, "work unit"; benchmarks/work_charges.py
# prints CPU seconds per unit charged, per charge)
WORK_PER_DETERMINISTIC_UNIT = 10.0
# and per solve for what its deterministic time leaves out (presolve, loading the cumulative
# constraints): about 1.6e-6 to 2.3e-6 CPU seconds x (variables + constraints)^1.5 on the same
# models, within a factor of two from 700 to 14,000 (times 1.5 as above)
SETUP_WORK_PER_SIZE = 3.4e-6


@dataclass
class Scale:
    unit: float
    exact: bool

    def floor(self, x: float) -> int:
        return int(math.floor(x / self.unit * (1 + _REL) + _REL))

    def ceil(self, x: float) -> int:
        return int(math.ceil(x / self.unit * (1 - _REL) - _REL))


def _exact_unit(values: list[float], exponents, max_int: float) -> Optional[float]:
    """The largest unit that divides every value: the first 10**-k (k in `exponents`) in which
    every value is an integer (to 1e-9 relative) and the largest stays below `max_int`, times the
    values' greatest common divisor in it; None when there is none."""
    positive = [abs(v) for v in values if abs(v) > 0]
    if not positive:
        return 1.0
    for k in exponents:
        unit = 10.0 ** -k
        if max(positive) / unit > max_int:
            continue
        if all(round(v / unit) >= 1 and abs(v / unit - round(v / unit)) <= _REL * v / unit for v in positive):
            return unit * math.gcd(*(round(v / unit) for v in positive))
    return None


def choose_time_scale(values: list[float]) -> Scale:
    """Seconds: the largest exact unit (`_exact_unit`, from decimals 1 to 1e-6), else 1/1000 of
    the smallest positive value (inexact: durations and lags are floored), but never so fine that
    the sum of all values passes 1e9 units (a 1e-45 s action would overflow CP-SAT's 64-bit
    domains)."""
    unit = _exact_unit(values, range(0, 7), 1e9)
    if unit is not None:
        return Scale(unit, True)
    positive = [abs(v) for v in values if abs(v) > 0]
    return Scale(max(min(positive) / 1000.0, sum(positive) / 1e9), False)


def choose_byte_scale(values: list[float]) -> Scale:
    """Bytes: the largest exact unit (`_exact_unit`, from decimals 1e12 to 1e-6: byte counts,
    halves of a unit), else a millionth of the largest value (inexact: deltas rounded against the
    cap)."""
    unit = _exact_unit(values, range(-12, 7), 1e12)
    if unit is not None:
        return Scale(unit, True)
    return Scale(max(abs(v) for v in values) / 1e6, False)


def import_cp_model():
    """OR-Tools' CP-SAT module, or a one-line SchedcError saying how to get a working one."""
    try:
        from ortools.sat.python import cp_model
    except ImportError as e:
        if "undefined symbol" in str(e):
            # OR-Tools >= 9.12 ships its own libhighs.so.1: a HiGHS built as a shared library
            # elsewhere on the loader's path (not highspy's wheels, which link it in) can bind
            # one to the other's symbols
            raise ParameterError("solver", "{name}cpsat: OR-Tools does not load beside another HiGHS library in "
                                           f"this process ({e}); pip install --upgrade ortools highspy") from None
        raise ParameterError("solver", "{name}cpsat: OR-Tools is not installed (pip install 'schedc[cpsat]')") from None
    return cp_model


def cpsat_available() -> bool:
    """Whether a working CP-SAT can be imported (the default compile then polishes with it)."""
    try:
        import_cp_model()
    except SchedcError:
        return False
    return True


@dataclass
class CpsatOutcome:
    schedule: Optional[Schedule]  # the best simulated schedule (the warm start when CP-SAT found nothing better)
    sim: Optional[SimResult]
    value: float  # simulated objective of `schedule`
    bound: float  # certified lower bound in seconds: the combinatorial one or CP-SAT's, whichever is higher
    cp_bound: Optional[float]  # CP-SAT's bound in seconds (None: not certifiable, see the module docstring)
    cp_value: Optional[float]  # CP-SAT's objective in seconds (u x integer value)
    proven: bool  # CP-SAT proved its integer model optimal (or the warm start met the bound)
    status: str  # CP-SAT's status name
    solve_time: float
    time_unit: float
    time_exact: bool
    memory_exact: bool
    improved: bool  # CP-SAT's schedule beat the warm start
    cp_schedule: Optional[Schedule] = None  # CP-SAT's own answer, before comparing with the warm start
    cp_sim: Optional[SimResult] = None


def _scales(inst: Graph, times: Sequence[float] = (), nbytes: Sequence[float] = ()) -> tuple[Scale, Scale]:
    """The time unit (durations and lags) and the byte unit (memory deltas) of the instance, with
    `times` and `nbytes` of a model's own beside them."""
    transients = [t for k in inst.trans for t in inst.trans[k] if t > 0]
    return choose_time_scale(list(inst.dur) + [lag for p in inst.preds for _, lag in p] + list(times)), \
        choose_byte_scale(list(inst.delta) + transients + list(nbytes))


def _durations(inst: Graph, ts: Scale) -> list[int]:
    return [ts.floor(d) for d in inst.dur]


def _memory_events(inst: Graph, bs: Scale) -> tuple[list[int], list[float]]:
    """Integer deltas and the integer room per rank (cap - static; inf when uncapped)."""
    if bs.exact:
        deltas = [int(round(d / bs.unit)) for d in inst.delta]
    else:  # held bytes rounded up: every answer fits, no bound is claimed
        deltas = [math.ceil(d / bs.unit) if d > 0 else -math.ceil(-d / bs.unit) for d in inst.delta]
    room = [math.inf if math.isinf(left) else bs.floor(left) for left in inst.room]
    return deltas, room


def _units(x: float, bs: Scale) -> int:
    """Bytes held as integer units: exact, or rounded up (against the cap) when inexact."""
    return int(round(x / bs.unit)) if bs.exact else math.ceil(x / bs.unit)


def _horizon(inst: Graph, dur: list[int], lags: dict, objective: str, incumbent_units: int) -> int:
    """Latest time any action may end without cutting off an optimum. Makespan: the incumbent.
    Span (free starts): closing every instant no action or lag covers never lengthens a span,
    so some optimum ends by the total of all durations and lags."""
    if objective == "makespan":
        return incumbent_units
    return sum(dur) + sum(lags.values()) + incumbent_units


def build_cp_model(inst: Graph, ts: Scale, bs: Scale, objective: str, incumbent_units: int,
                   bound_units: int = 0):
    """The CP-SAT model; returns (model, starts, ends, objective variable). `bound_units` is a
    lower bound on the integer objective (lets CP-SAT stop when it reaches it)."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    dur = _durations(inst, ts)
    lags = _lags(inst, ts)
    horizon = _horizon(inst, dur, lags, objective, incumbent_units)
    starts, ends, intervals = _intervals(m, inst, dur, horizon)
    _add_precedences(m, inst, starts, ends, lags)
    for acts in inst.by_rank:
        m.add_no_overlap([intervals[i] for i in acts])
    _add_memory(m, inst, bs, starts, ends, horizon)
    obj = _add_objective(m, inst, starts, ends, objective, incumbent_units, bound_units, inst.by_rank)
    return m, starts, ends, obj


def _lags(inst: Graph, ts: Scale) -> dict:
    return {(a, b): ts.floor(lag) for b in range(inst.n) for a, lag in inst.preds[b]}


def _intervals(m, inst: Graph, dur: list[int], horizon: int, fixed: Optional[dict] = None,
               earliest: Optional[list[int]] = None):
    """One fixed-size interval per action within [0, horizon]: starts, ends (start + duration,
    an expression) and intervals. An action in `fixed` (action -> the start it keeps) gets no
    variable: its start and end are plain integers and its interval is None, so constraints
    between fixed actions cost nothing to build; `earliest[i]` is the lowest start of action i
    (what its fixed predecessors already imply)."""
    fixed = fixed or {}
    starts: list = []
    ends: list = []
    intervals: list = []
    for i, a in enumerate(inst.actions):
        if i in fixed:
            starts.append(fixed[i])
            ends.append(fixed[i] + dur[i])
            intervals.append(None)
            continue
        lo = earliest[i] if earliest else 0
        start = m.new_int_var(lo, max(lo, horizon - dur[i]), f"start_{a}")
        starts.append(start)
        ends.append(start + dur[i])
        intervals.append(m.new_fixed_size_interval_var(start, dur[i], f"iv_{a}"))
    return starts, ends, intervals


def _solver(time_limit: float, workers: int, seed: int):
    """A CpSolver for `time_limit` seconds, or, under a work budget (schedc.solver.deadline),
    for `time_limit` units of CP-SAT's deterministic time on one worker (the same search on any
    machine, whatever its load; interleaving several workers in one thread overran its
    deterministic limit several times over and found less), capped by the wall-clock safety
    net."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.1, time_limit)
    solver.parameters.num_workers = max(1, int(workers))
    solver.parameters.random_seed = int(seed)
    solver.parameters.catch_sigint_signal = False  # its handler is never given back (interrupt.py)
    if counting_work_on():
        # the LP relaxation's work is missing from CP-SAT's deterministic time (a 2,593-variable
        # window model: 0.03 units after 11.6 CPU seconds; without it 2 units took 9), so a work
        # budget runs CP-SAT without it and charges its deterministic time at a measured rate
        solver.parameters.linearization_level = 0
        solver.parameters.max_deterministic_time = max(0.1, time_limit) / WORK_PER_DETERMINISTIC_UNIT
        solver.parameters.max_time_in_seconds = max(0.1, wall_left())
        solver.parameters.num_workers = 1
    return solver


def new_solver(seconds: float, workers: int, seed: Optional[int] = None, least: float = 0.1):
    """A CpSolver as every CP-SAT phase of a compile configures it (:func:`_solver`): `seconds`
    of wall clock, or of deterministic time under a work budget; `seed` None keeps CP-SAT's own
    default; at least `least` seconds."""
    solver = _solver(max(least, seconds), workers, 0 if seed is None else seed)
    if seed is None:
        solver.parameters.clear_random_seed()
    if not counting_work_on():
        solver.parameters.max_time_in_seconds = max(least, seconds)
    return solver


def run_solver(solver, m):
    """``solver.solve(m)``, stopped by Ctrl-C, its deterministic time charged to the work clock."""
    return _run(solver, m, None)


def _run(solver, m, stale_seconds: Optional[float]):
    """solver.solve(m) stopped by Ctrl-C and, under wall-clock budgets, by `stale_seconds`
    without news (a wall-clock rule, so a work budget leaves it out); the deterministic time it
    used is charged to the work clock."""
    if counting_work_on():
        stale_seconds = None
    with interrupt.stop_native_solver(solver.stop_search), _stop_when_stale(solver, stale_seconds) as on_solution:
        status = solver.solve(m, on_solution)
    if counting_work_on():
        size = len(m.proto.variables) + len(m.proto.constraints)
        charge(WORK_PER_DETERMINISTIC_UNIT * solver.deterministic_time + SETUP_WORK_PER_SIZE * size ** 1.5)
    wall_cut()  # a solve stopped by the safety net is recorded as such
    return status


def _add_precedences(m, inst: Graph, starts, ends, lags: dict, fixed: Optional[dict] = None) -> None:
    """``start[b] >= end[a] + lag``, except from a fixed action: that one is already in b's
    lowest start (`_intervals`' earliest), or b is fixed too."""
    fixed = fixed or {}
    for b in range(inst.n):
        for a, _ in inst.preds[b]:
            if a not in fixed:
                m.add(starts[b] >= ends[a] + lags[(a, b)])


def _add_memory(m, inst: Graph, bs: Scale, starts, ends, horizon: int, fixed: Optional[dict] = None,
                ranks: Optional[Sequence[int]] = None) -> None:
    """Per rank, what each microbatch of a stage holds, as intervals of one cumulative: from
    its F's start to its I's end the bytes I frees, to its W's (B's) end the rest. At every
    instant their sum is the reservoir level described in the module docstring (an interval
    covers [start, end), so a release at an F's start instant is already counted); cumulative
    propagation (time tables, energy) stays linear in the actions, where CP-SAT's reservoir
    expands into one Boolean per pair of events.

    With `fixed` actions (a prefix of each rank's order, as in solve_window) a hold between two
    fixed actions ends before any moved action of its rank starts; the level up to then is the
    hint's, which fits, so such holds are left out. `ranks`: only these ranks' caps (None: all)."""
    fixed = fixed or {}
    deltas, room = _memory_events(inst, bs)
    for r, acts in enumerate(inst.by_rank):
        if math.isinf(room[r]) or (ranks is not None and r not in ranks):
            continue
        intervals, demands = [], []

        def hold(first: int, last: int, amount: int, name: str) -> None:
            """`amount` units from `first`'s start to `last`'s end."""
            if amount <= 0 or (first in fixed and last in fixed):
                return
            size = m.new_int_var(0, horizon, f"held_{name}")
            intervals.append(m.new_interval_var(starts[first], size, ends[last], f"hold_{name}"))  # noqa: B023 (called within this iteration)
            demands.append(amount)  # noqa: B023 (called within this iteration)

        for f in acts:
            a = inst.actions[f]
            if a.kind != Kind.F:
                continue
            i = inst.id(a.stage, Kind.I, a.microbatch)
            rise = i is not None and deltas[i] > 0  # I allocates: act held to W's end, the rise from I
            for kind in (Kind.I, Kind.W, Kind.B):
                j = inst.id(a.stage, kind, a.microbatch)
                if j is None or deltas[j] >= 0:
                    continue
                hold(f, j, deltas[f] if rise else -deltas[j], f"{a}_{kind}")
                if rise and i is not None:  # rise holds only with an I
                    hold(i, j, deltas[i], f"{a}_rise")
        for j in acts:  # transients: live while their action runs
            a = inst.actions[j]
            t = inst.trans[a.kind][a.stage] if inst.trans else 0.0
            if t > 0 and inst.dur[j] > 0:
                hold(j, j, _units(t, bs), f"{a}_transient")
        if intervals:
            m.add_cumulative(intervals, demands, int(room[r]))


def _add_objective(m, inst: Graph, starts, ends, objective: str, incumbent_units: int, bound_units: int,
                   may_end_last: list[list[int]]):
    """The objective variable, at least every rank's makespan or span; `may_end_last[r]` are the
    actions of rank r that can end last (all of them, unless the model chains its order)."""
    obj = m.new_int_var(min(bound_units, incumbent_units), incumbent_units, objective)
    for r, acts in enumerate(may_end_last):
        first = 0 if objective == "makespan" else starts[inst.first[r]]
        for i in acts:
            m.add(obj >= ends[i] - first)
    m.minimize(obj)
    return obj


def _hint(m, inst: Graph, ts: Scale, starts, obj, sim: SimResult, objective: str) -> None:
    for i, a in enumerate(inst.actions):
        m.add_hint(starts[i], ts.floor(sim.timings[a].start))
    m.add_hint(obj, ts.ceil(sim.objective(objective)))


def _orders(inst: Graph, start_vals: list[int], end_vals: list[int]) -> list[list[int]]:
    """Each rank's actions by start; a 0-length action at an instant goes before the action that
    starts there (it cannot depend on it), ties between 0-length ones in dependency order."""
    topo_pos = {i: k for k, i in enumerate(inst.topo)}
    return [sorted(acts, key=lambda i: (start_vals[i], end_vals[i], topo_pos[i])) for acts in inst.by_rank]


def solve_cpsat(
    problem: Problem,
    time_limit: float = 10.0,
    warm: Optional[tuple[Schedule, SimResult, str]] = None,
    workers: int = 1,
    seed: int = 0,
    hint: bool = True,
    stop_at_bound: bool = True,
    stale_seconds: Optional[float] = None,
    inst: Optional[Graph] = None,
) -> CpsatOutcome:
    """Solve `problem` with CP-SAT within `time_limit` seconds (see the module docstring).
    `hint=False` starts CP-SAT cold; `stop_at_bound=False` runs it even when the warm start
    already meets the combinatorial bound; `stale_seconds` ends the search early once that
    long has passed without a better solution."""
    cp_model = import_cp_model()
    from schedc.solver.engines import heuristic
    from schedc.solver.engines import warm as warm_starts

    t0 = now()
    heuristic.check_memory_feasible(problem)
    objective = problem.objective
    if warm is None:
        warm = warm_starts.warm_start(problem, time_budget=min(1.0, 0.1 * time_limit))
    inst = inst if inst is not None else graph_of(problem)
    inc_sim, best_sched, best_sim = _incumbent(problem, inst, warm)
    ts, bs = _scales(inst)
    comb = lower_bound(problem)
    if stop_at_bound and best_sim.objective(objective) <= comb * (1 + REL) + REL:
        return CpsatOutcome(best_sched, best_sim, best_sim.objective(objective), comb, None, None, True,
                            "WARM_START_AT_BOUND", now() - t0, ts.unit, ts.exact, bs.exact, False)
    inc_units = ts.ceil(max(inc_sim.objective(objective), best_sim.objective(objective))) + 1
    # with exact units the integer makespan is the real one over u, so the combinatorial bound
    # holds for it too (not for span: the free first starts relax what that bound assumes)
    bound_units = ts.ceil(comb) if ts.exact and objective == "makespan" else 0
    m, starts, ends, obj = build_cp_model(inst, ts, bs, objective, inc_units, bound_units)
    if hint and inc_sim.fits:
        _hint(m, inst, ts, starts, obj, inc_sim, objective)

    solver = _solver(time_limit - (now() - t0), workers, seed)
    status = _run(solver, m, stale_seconds)
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    cp_bound = _certified_bound(solver, status, ts, bs, objective)
    out = CpsatOutcome(best_sched, best_sim, best_sim.objective(objective),
                       comb if cp_bound is None else max(comb, cp_bound), cp_bound,
                       solver.objective_value * ts.unit if found else None, status == cp_model.OPTIMAL,
                       solver.status_name(status), 0.0, ts.unit, ts.exact, bs.exact, False)
    if found:
        _take_answer(out, problem, inst, [solver.value(v) for v in starts], [solver.value(v) for v in ends])
    out.solve_time = now() - t0
    return out


@dataclass
class CpsatEngine:
    """CP-SAT as an engine (schedc.solver.engine): the whole model, hinted with the incumbent,
    until the deadline (or `stale_seconds` without news); `objective` overrides the problem's
    (the driver runs makespan first for span). Its answer comes back simulated and in the
    graph's orders; its converted bound is a certificate when the byte scale is exact."""

    workers: int = WORKERS
    seed: int = 0
    stale_seconds: Optional[float] = None
    objective: Optional[str] = None
    name: str = "cpsat"

    def run(self, graph: Graph, incumbent: Optional[Incumbent], deadline: Deadline) -> Result:
        problem = graph.problem
        if self.objective and self.objective != problem.objective:
            problem = replace(problem, objective=self.objective)
        warm = None if incumbent is None else (incumbent.schedule, incumbent.sim, incumbent.source)
        out = solve_cpsat(problem, time_limit=deadline.left(), warm=warm, workers=self.workers, seed=self.seed,
                          stale_seconds=self.stale_seconds, inst=graph)
        res = Result(bound=out.cp_bound, proven=out.proven and out.cp_sim is not None,
                     bound_source="cp-sat (proven optimal)" if out.proven else "cp-sat bound")
        if out.cp_sim is not None:
            assert out.cp_schedule is not None, "cp_sim simulates cp_schedule"
            res.schedule, res.sim = out.cp_schedule, out.cp_sim
            res.orders = canonical_orders(graph, orders_from_schedule(graph, out.cp_schedule))
            res.status = Status.OPTIMAL if out.proven else Status.FEASIBLE
        return res


def solve_window(problem: Problem, inst: Graph, orders, sim: SimResult, free, time_limit: float,
                 workers: int = 1, seed: int = 0, stale_seconds: Optional[float] = None) -> Optional[list[list[int]]]:
    """One step of the window search (schedc.solver.compile): CP-SAT re-orders and re-times the
    actions at positions ``free[r] = (lo, hi)`` of each rank's order (``orders``, simulated as
    ``sim``); every other action keeps its place in its rank's order. Actions before a rank's
    window keep their simulated start too (fixed times propagate far better than orders); in an
    upright time window what they wait for is fixed as well, in a slanted one a producer that
    moves must still finish in time for them. Those after it keep only their order, so a gain
    inside the window carries on to the end. `stale_seconds`: stop after that long without a
    new solution.

    Goal: the objective, capped at its current value, then the latest end of a moved action.
    The second goal matters because the step time is usually decided outside the window: then
    every answer ties, and ending the window's work early is what leaves the next window room.

    Returns the new orders (each rank's actions by CP-SAT's start times), or None when CP-SAT
    found no answer in time."""
    cp_model = import_cp_model()
    objective = problem.objective
    ts, bs = _scales(inst)
    dur = _durations(inst, ts)
    lags = _lags(inst, ts)
    current = ts.ceil(sim.objective(objective))
    horizon = _horizon(inst, dur, lags, objective, current)
    hint = [ts.floor(sim.timings[a].start) for a in inst.actions]
    fixed = {i: hint[i] for r, row in enumerate(orders) for i in row[: free[r][0]]}
    earliest = _earliest_starts(inst, orders, free, dur, lags, fixed)

    m = cp_model.CpModel()
    starts, ends, intervals = _intervals(m, inst, dur, horizon, fixed, earliest)
    _add_precedences(m, inst, starts, ends, lags, fixed)
    moved, may_end_last = [], []
    for r, row in enumerate(orders):
        lo, hi = free[r]
        window = row[lo:hi]
        moved += window
        m.add_no_overlap([intervals[i] for i in window])
        if hi < len(row):
            for i in window:
                m.add(starts[row[hi]] >= ends[i])
        for a, b in zip(row[hi:], row[hi + 1:]):
            m.add(starts[b] >= ends[a])
        # after the window the rank's order is a chain, and its last action ends last
        may_end_last.append((window if hi == len(row) else []) or row[-1:])
    _add_memory(m, inst, bs, starts, ends, horizon, fixed)
    obj = _add_objective(m, inst, starts, ends, objective, current, 0, may_end_last)
    # the window's work ends by the current makespan (true of the hint, so a restriction that
    # keeps it), which keeps the weighted sum far inside 64 bits
    last_end = ts.ceil(sim.makespan)
    if moved and (current + 1) * (last_end + 1) < 2**62:
        window_end = m.new_int_var(0, last_end, "window_end")
        m.add_max_equality(window_end, [ends[i] for i in moved])
        m.minimize(obj * (last_end + 1) + window_end)
    m.add_hint(obj, current)
    for i in range(inst.n):
        if i not in fixed:
            m.add_hint(starts[i], hint[i])

    solver = _solver(time_limit, workers, seed)
    status = _run(solver, m, stale_seconds)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return _orders(inst, [solver.value(v) for v in starts], [solver.value(v) for v in ends])


def _earliest_starts(inst: Graph, orders, free, dur: list[int], lags: dict, fixed: dict) -> list[int]:
    """For solve_window: each action's lowest start implied by fixed actions alone (its fixed
    predecessors' ends plus lags, and the end of its rank's last fixed action)."""
    earliest = [0] * inst.n
    for b in range(inst.n):
        for a, _ in inst.preds[b]:
            if a in fixed:
                earliest[b] = max(earliest[b], fixed[a] + dur[a] + lags[(a, b)])
    for r, row in enumerate(orders):
        lo = free[r][0]
        if lo > 0:
            frontier = fixed[row[lo - 1]] + dur[row[lo - 1]]
            for i in row[lo:]:
                earliest[i] = max(earliest[i], frontier)
    return earliest


@contextmanager
def _stop_when_stale(solver, stale_seconds: Optional[float]):
    """A solution callback for `solver.solve`, and a watcher thread that stops the search once
    `stale_seconds` pass without a new solution (None: never). The clock starts with the search,
    and the first solution does not reset it: with a hint it is the hint, which is no news and
    which CP-SAT can take seconds to complete on a large model (docs/design.md, "CP-SAT")."""
    from ortools.sat.python import cp_model

    if stale_seconds is None:
        yield None
        return
    last = [time.monotonic()]
    solutions = [0]

    class OnSolution(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            solutions[0] += 1
            if solutions[0] > 1:
                last[0] = time.monotonic()

    finished = threading.Event()

    def watch() -> None:
        while not finished.wait(0.2):
            if time.monotonic() - last[0] > stale_seconds:
                solver.stop_search()
                return

    watcher = threading.Thread(target=watch, name="schedc-cpsat-stale", daemon=True)
    watcher.start()
    try:
        yield OnSolution()
    finally:
        finished.set()
        watcher.join()


def _incumbent(problem: Problem, inst: Graph, warm):
    """The warm start in the model's vocabulary (kinds in microbatch order) and simulated; plus
    the better of it and the warm start as given (the answer to beat)."""
    orders = canonical_orders(inst, orders_from_schedule(inst, warm[0]))
    sim = simulate(schedule_from_orders(inst, orders, name="schedc-cpsat"), problem.profile, problem.memory)
    best_sched, best_sim = warm[0], warm[1]
    if sim.fits and sim.objective(problem.objective) < best_sim.objective(problem.objective):
        best_sched, best_sim = schedule_from_orders(inst, orders, name="schedc-cpsat"), sim
    return sim, best_sched, best_sim


def _take_answer(out: CpsatOutcome, problem: Problem, inst: Graph, start_vals, end_vals) -> None:
    """Turn CP-SAT's times into a schedule, simulate it, keep it when it fits and beats the best."""
    sched = schedule_from_orders(inst, _orders(inst, start_vals, end_vals), name="schedc-cpsat")
    sim = simulate(sched, problem.profile, problem.memory)
    out.cp_schedule, out.cp_sim = sched, sim
    if sim.fits and sim.objective(problem.objective) < out.value * (1 - TIE):
        out.schedule, out.sim, out.value, out.improved = sched, sim, sim.objective(problem.objective), True


def _certified_bound(solver, status, ts: Scale, bs: Scale, objective: str) -> Optional[float]:
    """CP-SAT's bound, converted to seconds conservatively (module docstring); None when the
    byte rounding was not exact (the model is then a restriction, not a relaxation)."""
    from ortools.sat.python import cp_model

    if not bs.exact or status in (cp_model.MODEL_INVALID, cp_model.INFEASIBLE):
        return None
    if not math.isfinite(solver.best_objective_bound):
        return None
    lb = math.ceil(solver.best_objective_bound - REL)
    if objective == "span" and not ts.exact:
        lb -= 1
    return max(0.0, lb * ts.unit)
