"""Periodic schedules: one microbatch's timetable, repeated every P seconds (modulo scheduling).

Problem: under a tight memory cap a rank holds only one or two microbatches of a heavy stage,
and the step is set by the steady state -- how often a new microbatch can enter the pipeline
while every rank keeps to its cap -- more than by the warm-up and cool-down. The list heuristic
and the greedies decide one action at a time and do not look for that rhythm; CP-SAT on the
whole problem searches 3 x S x M intervals and finds it slowly (measured: docs/design.md,
"Periodic schedules").

Method: modulo scheduling. Fix a period P (an integer number of time units). Microbatch m's
action (s, kind) starts at ``start[s, kind] + m * P``, so the unknowns are one start per
(stage, kind): 3 x S integers, whatever the microbatch count. Constraints, for every microbatch
at once:

* dependencies: the rule of schedc.simulate on one microbatch (F after the previous stage's F,
  I or B after its F and the next stage's backward, W after its I), with the boundary's comm as
  the lag across ranks;
* one action at a time per rank: the actions' phases (start mod P) as intervals on a circle of
  length P must not overlap. Each action is laid down twice, at its phase and one period later,
  in one ``NoOverlap``: two intervals overlap on the circle exactly when some of their copies
  overlap on the line;
* memory: a microbatch of stage s holds the bytes its I frees over [F start, I end) and the
  bytes its W (or B) frees over [F start, W end). A lifetime of L = q P + rho is held by q
  microbatches all the time and by one more over a window of length rho from F's phase: per
  rank, a cumulative of those windows (twice, as above) plus a constant q x bytes, within the
  rank's room;
* objective: the latency of one microbatch (its last end), ties to the timetable whose actions
  start earliest. Run as timed the step is (M - 1) P + latency; the simulator runs the rank
  orders as early as they allow, which only shortens the warm-up and cool-down. Only the
  simulated value counts.

Search over P: no period is shorter than the busiest rank's work per microbatch. The first
period tried is twice that, then 3, 4, 6 and 8 times, until one is solved; if none is, the search
comes down instead from the serial timetable (one microbatch at a time, always feasible), each
period 85% of the last feasible one. Then bisection between the last period shown infeasible (or
not solved in its time) and the shortest feasible one, to 0.5%, each period hinted with the last
feasible timetable scaled to it and solved for any timetable, not the least latency; then the
shortest period again for its least latency, and periods 5, 10 and 20% longer (with few
microbatches a shorter latency can pay for a longer period). Every feasible period's schedule is
simulated (where the deadline allows a pass over 3 x S x M actions) and the best kept.

Why any timetable in the bisection: near the least period the latency's optimum takes CP-SAT
longer than the question "is there one", and an attempt that runs out of time counts as
infeasible, so the bisection stopped short and kept the rank orders of whichever timetable it
had, so the result varied from run to run.

Why from above: near the least feasible period unhinted solves often run out of time, while a
period well above it is solved unhinted in a fraction of a second and then hints every period
of the bisection, which CP-SAT solves in hundredths of a second.

When to use it: :func:`worth_trying`, where some rank cannot hold two microbatches of each of
its stages at once. With room to spare the warm-up and cool-down decide more than the steady
state and the other engines do better.

Rounding: durations and lags are rounded *up* to the time unit (1/2000 of the busiest rank's
work per microbatch) and bytes against the cap (held bytes up, the room down). The schedule keeps
only the rank orders the timetable implies (actions by start time) and the simulator re-times
them; it fits the caps because a rank's memory depends on its order alone, and the order is that
of a timetable that fits. The model is an upper-bound construction, never a bound.

CP-SAT states ``start mod P`` and a lifetime's laps and rest with its own modulo and division
constraints: with the linear form (start == laps * P + phase) it searched much longer without
a timetable at periods it now solves quickly (measured: docs/design.md).

Cost: one CP-SAT model of 3 x S starts per period tried (about fifteen), each solve capped at a
share of the time given; independent of the microbatch count. Without OR-Tools, with one
microbatch, or when no period is feasible in time, no answer. Measured runs and
benchmarks/periodic.py's table: docs/design.md, "Periodic schedules".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from schedc.core.ir import Action, Kind, Schedule
from schedc.core.simulate import simulate
from schedc.errors import SchedcError
from schedc.solver import interrupt
from schedc.solver.deadline import Deadline, n_actions
from schedc.solver.engine import Incumbent, Result, found
from schedc.solver.graph import Graph

NAME = "periodic"
# first periods tried, over the busiest rank's work, until one is solved (module docstring)
GROWTH = (2.0, 3.0, 4.0, 6.0, 8.0)
LONGER = (1.05, 1.1, 1.2)  # after the bisection: periods this much longer than the shortest one
DESCENT = 0.85  # from the serial timetable down, each period this much of the last feasible one
RESOLUTION = 0.005  # bisection stops when the feasible and infeasible periods are this close
SIMULATION_PASSES = 3  # a timetable's schedule: built, sorted and simulated
UNITS_PER_PERIOD = 2000  # time resolution: the busiest rank's work per microbatch in this many units


@dataclass(frozen=True)
class Timetable:
    """One microbatch's start times (time units) and the period they repeat with."""

    period: int
    start: dict  # (stage, kind) -> start of microbatch 0
    unit: float  # seconds per unit


def _costs(g: Graph, unit: float):
    """Integer durations per (stage, kind) and lags per boundary, rounded up."""
    dur = {(s, k): math.ceil(g.d[k][s] / unit - 1e-9) for s in range(g.S) for k in g.kinds(s)}
    lag = [math.ceil(c / unit - 1e-9) for c in g.comm]
    return dur, lag


@dataclass
class _PeriodModel:
    """The CP-SAT model of one period P: one start per (stage, kind) of microbatch 0, within a
    horizon of one microbatch's work plus up to three periods of waiting per stage."""

    m: Any  # cp_model.CpModel
    P: int
    dur: dict  # (stage, kind) -> units
    lag: list  # per boundary, units
    horizon: int
    start: dict  # (stage, kind) -> start variable

    @classmethod
    def new(cls, dur: dict, lag: list, n_stages: int, period: int) -> "_PeriodModel":
        from ortools.sat.python import cp_model

        # a construction, so a limit here can only cost timetables, never validity
        horizon = (sum(dur.values()) + sum(lag)) + 3 * n_stages * period
        m = cp_model.CpModel()
        start = {(s, k): m.new_int_var(0, horizon, f"start_{s}{k}") for (s, k) in dur}
        return cls(m, period, dur, lag, horizon, start)

    def end(self, s: int, k: str):
        return self.start[s, k] + self.dur[s, k]

    def phase_of(self, s: int, k: str):
        """start mod P, as a variable."""
        phase = self.m.new_int_var(0, self.P - 1, f"phase_{s}{k}")
        self.m.add_modulo_equality(phase, self.start[s, k], self.P)
        return phase

    def two_laps(self, phase, length) -> list:
        """The interval [phase, phase + length) and its copy one period later."""
        m, P = self.m, self.P
        out = []
        for lap in (0, P):
            at = m.new_int_var(0, 2 * P, "")
            m.add(at == phase + lap)
            if isinstance(length, int):
                out.append(m.new_fixed_size_interval_var(at, length, ""))
            else:
                until = m.new_int_var(0, 3 * P, "")
                m.add(until == at + length)
                out.append(m.new_interval_var(at, length, until, ""))
        return out


def _add_hint(mod: _PeriodModel, hint: Timetable) -> None:
    """`hint`'s starts scaled from its period to this one."""
    for key, v in mod.start.items():
        mod.m.add_hint(v, min(mod.horizon, round(hint.start[key] * mod.P / hint.period)))


def _add_dependencies(mod: _PeriodModel, g: Graph) -> None:
    """The dependency rule of schedc.simulate on one microbatch, the boundary's comm as the lag."""
    m, start, end, lag = mod.m, mod.start, mod.end, mod.lag
    m.add(start[0, Kind.F] == 0)
    for s in range(g.S):
        back = g.kinds(s)[1]  # I, or B on a stage without weights
        if s > 0:
            m.add(start[s, Kind.F] >= end(s - 1, Kind.F) + lag[s - 1])
        m.add(start[s, back] >= end(s, Kind.F))
        if s < g.S - 1:
            m.add(start[s, back] >= end(s + 1, g.kinds(s + 1)[1]) + lag[s])
        if Kind.W in g.kinds(s):
            m.add(start[s, Kind.W] >= end(s, Kind.I))


def _add_one_at_a_time(mod: _PeriodModel, g: Graph) -> dict:
    """Per rank, its actions' phases on the circle of length P do not overlap; returns each
    stage's F phase (where its memory windows start, whatever F lasts)."""
    f_phase = {}
    for r in range(g.R):
        busy = []
        for s in g.stages[r]:
            f_phase[s] = mod.phase_of(s, Kind.F)
            for k in g.kinds(s):
                if mod.dur[s, k] == 0:
                    continue  # stage 0's I under torch's runtime: it takes no time
                busy += mod.two_laps(f_phase[s] if k == Kind.F else mod.phase_of(s, k), mod.dur[s, k])
        mod.m.add_no_overlap(busy)
    return f_phase


def _add_rank_memory(mod: _PeriodModel, g: Graph, r: int, f_phase: dict) -> None:
    """Rank r's held bytes within its room: a lifetime of q P + rho is held by q microbatches
    all the time and by one more over rho from F's phase (module docstring)."""
    room = g.room[r]
    if not math.isfinite(room):
        return
    m, P = mod.m, mod.P
    byte_unit = max(max((b for s in g.stages[r] for _, b in g.held(s)), default=1.0) / 1e4, 1.0)
    capacity = math.floor(room / byte_unit)
    windows, demands, always = [], [], []
    for s in g.stages[r]:
        for k, held in g.held(s):
            amount = math.ceil(held / byte_unit - 1e-9)
            lifetime = m.new_int_var(0, mod.horizon + P, "")
            m.add(lifetime == mod.end(s, k) - mod.start[s, Kind.F])
            full_laps = m.new_int_var(0, mod.horizon // P + 1, "")
            rest = m.new_int_var(0, P - 1, "")
            m.add_division_equality(full_laps, lifetime, P)
            m.add_modulo_equality(rest, lifetime, P)
            always.append(amount * full_laps)
            windows += mod.two_laps(f_phase[s], rest)
            demands += [amount, amount]
    if not windows:
        return
    base = m.new_int_var(0, capacity, f"always_held_{r}")
    m.add(base == sum(always))
    windows.append(m.new_fixed_size_interval_var(0, 4 * P, ""))
    demands.append(base)
    m.add_cumulative(windows, demands, capacity)


def _minimize_latency(mod: _PeriodModel) -> None:
    """The least latency first, then every action as early as it can be: of the timetables with
    that latency, the one the simulator's earliest starts keep closest (CP-SAT's workers
    otherwise return any of them, and their schedules simulate to different steps)."""
    m, horizon = mod.m, mod.horizon
    latency = m.new_int_var(0, horizon + mod.P, "latency")
    for s, k in mod.dur:
        m.add(latency >= mod.end(s, k))
    weight = len(mod.start) * (horizon + 1) + 1
    if weight * (horizon + mod.P) < 2 ** 62:  # CP-SAT's 64-bit objective: else the latency alone
        m.minimize(latency * weight + sum(mod.start.values()))
    else:
        m.minimize(latency)


def solve_period(g: Graph, period: int, unit: float, seconds: float, seed: int = 0,
                 workers: int = 2, hint: Optional[Timetable] = None,
                 first: bool = False) -> tuple[str, Optional[Timetable]]:
    """The timetable with the least latency at `period` units, within `seconds`.

    Problem: one microbatch's start per (stage, kind) such that every microbatch, started P
    units after the one before, keeps the dependencies, one action at a time per rank and each
    rank's room.

    Method: the CP-SAT model of the module docstring. A `hint` (a timetable of another period)
    is scaled to this one and given to CP-SAT as its first guess; `first` stops at the first
    timetable found (any latency).

    Cost: one model of 3 x S starts, solved within `seconds` (deterministic time under a work
    budget). Returns ("feasible" | "infeasible" | "unknown", the timetable or None)."""
    from ortools.sat.python import cp_model

    from schedc.solver.engines.cpsat import new_solver, run_solver

    dur, lag = _costs(g, unit)
    if max(dur.values()) > period:
        return "infeasible", None
    mod = _PeriodModel.new(dur, lag, g.S, period)
    if hint is not None:
        _add_hint(mod, hint)
    _add_dependencies(mod, g)
    f_phase = _add_one_at_a_time(mod, g)
    for r in range(g.R):
        _add_rank_memory(mod, g, r, f_phase)
    _minimize_latency(mod)
    # configured as the compile's other CP-SAT phases (a work budget: deterministic time, charged)
    solver = new_solver(seconds, workers, seed, least=0.05)
    solver.parameters.stop_after_first_solution = first
    status = run_solver(solver, mod.m)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return "feasible", Timetable(period, {key: solver.value(v) for key, v in mod.start.items()}, unit)
    if status == cp_model.INFEASIBLE:
        return "infeasible", None
    return "unknown", None


def serial_timetable(g: Graph, unit: float) -> Timetable:
    """One microbatch at a time: every action of a microbatch one after another (its F's up the
    stages, then each stage's backward and W down them), the next microbatch when it is done. It
    keeps every rule as long as one microbatch of each stage fits, which the compiler checks
    first (schedc.solver.engines.heuristic.check_memory_feasible)."""
    dur, lag = _costs(g, unit)
    start, t = {}, 0
    sequence = [(s, Kind.F) for s in range(g.S)] + [(s, k) for s in reversed(range(g.S)) for k in g.kinds(s)[1:]]
    for s, k in sequence:
        start[s, k] = t
        t += dur[s, k] + max(lag)
    return Timetable(max(t, 1), start, unit)


def schedule_of(g: Graph, table: Timetable) -> Schedule:
    """The rank orders the timetable implies for the problem's M microbatches: actions by start
    time (a zero-length action before one that starts with it: it ends first)."""
    dur, _ = _costs(g, table.unit)
    rows: list[list[tuple]] = [[] for _ in range(g.R)]
    for (s, k), t in table.start.items():
        for mb in range(g.M):
            at = t + mb * table.period
            rows[g.stage_rank[s]].append((at, at + dur[s, k], s, k, mb))
    orders = [[Action(s, k, mb) for _, _, s, k, mb in sorted(row)] for row in rows]
    return Schedule(rows=orders, placement=tuple(g.stage_rank), n_microbatches=g.M, name=NAME)


def worth_trying(g: Graph) -> bool:
    """Whether the memory cap leaves some rank too little room to hold two microbatches of each
    of its stages at once (the steady state then decides the step, module docstring)."""
    return g.M >= 2 and any(math.isfinite(g.room[r]) and g.room[r] < 2 * sum(g.act[s] for s in g.stages[r])
                            for r in range(g.R))


@dataclass
class _Bracket:
    """Where the search over periods stands: the longest period shown infeasible (or not solved
    in its time), the shortest feasible one and its timetable (None: none yet)."""

    infeasible: int
    feasible: Optional[int] = None
    table: Optional[Timetable] = None


@dataclass
class _Search:
    """One run's search: each period solved within a share of the time left, each timetable
    found simulated, the best schedule that fits kept in ``best`` (schedule, simulation)."""

    g: Graph
    unit: float
    deadline: Deadline
    seed: int
    workers: int
    best: Optional[tuple] = None

    def stop(self) -> bool:
        return self.deadline.expired() or interrupt.requested()

    def evaluate(self, table: Timetable) -> None:
        g, problem = self.g, self.g.problem
        if not self.deadline.allows(n_actions(g.S, g.M), SIMULATION_PASSES):
            return  # the table still hints the next period
        sched = schedule_of(g, table)
        try:
            sim = simulate(sched, problem.profile, problem.memory)
        except SchedcError:  # a deadlock would be a bug in the model; the other tables stand
            return
        obj = problem.objective
        if sim.fits and (self.best is None or sim.objective(obj) < self.best[1].objective(obj)):
            self.best = (sched, sim)

    def attempt(self, period: int, hint: Optional[Timetable], first: bool = False) -> tuple[str, Optional[Timetable]]:
        left = self.deadline.left()
        status, table = solve_period(self.g, period, self.unit, min(left, max(0.2, left / 4)), self.seed,
                                     self.workers, hint, first)
        if table is not None:
            self.evaluate(table)
        return status, table


def _grow(search: _Search, lowest: int) -> _Bracket:
    """Periods well above the least one first, unhinted: one is solved quickly and hints the rest."""
    br = _Bracket(infeasible=lowest - 1)
    for factor in GROWTH:
        if search.stop():
            break
        period = max(br.infeasible + 1, math.ceil(lowest * factor))
        status, table = search.attempt(period, None)
        if status == "feasible":
            br.feasible, br.table = period, table
            break
        if status == "infeasible":
            br.infeasible = period
    return br


def _descend(search: _Search, br: _Bracket) -> None:
    """No period solved: come down from one microbatch at a time instead, each period hinted with
    the last feasible timetable."""
    br.table = serial_timetable(search.g, search.unit)
    br.feasible = br.table.period
    search.evaluate(br.table)
    while not search.stop():
        period = max(br.infeasible + 1, math.floor(br.feasible * DESCENT))
        if period >= br.feasible:
            break
        status, table = search.attempt(period, br.table, first=True)
        if status != "feasible":
            br.infeasible = period
            break
        br.feasible, br.table = period, table


def _bisect(search: _Search, br: _Bracket) -> None:
    """Between the infeasible and the feasible period, any timetable at each (module docstring)."""
    while br.feasible is not None and br.feasible - br.infeasible > max(1, RESOLUTION * br.feasible) \
            and not search.stop():
        middle = (br.feasible + br.infeasible) // 2
        status, table = search.attempt(middle, br.table, first=True)
        if status == "feasible":
            br.feasible, br.table = middle, table
        else:
            br.infeasible = middle


def _polish(search: _Search, br: _Bracket) -> None:
    """The least latency at the least period, then a few longer periods: with few microbatches
    the latency weighs as much as the period."""
    if br.feasible is None:
        return
    if not search.stop():
        search.attempt(br.feasible, br.table)
    for step in LONGER:
        if search.stop():
            break
        search.attempt(math.ceil(br.feasible * step), br.table)


@dataclass
class PeriodicEngine:
    """Modulo scheduling as an engine (schedc.solver.engine): the search over periods of the
    module docstring, until the deadline; the best simulated schedule that fits, or none."""

    seed: int = 0
    workers: int = 2
    name: str = NAME

    def run(self, graph: Graph, incumbent: Optional[Incumbent], deadline: Deadline) -> Result:
        from schedc.solver.engines.cpsat import cpsat_available

        g = graph.safe()  # timetables hold F-to-W windows: rises and transients kept free (Graph.safe)
        if g.M < 2 or not cpsat_available():
            return Result()
        work = g.busiest_work()
        if work <= 0:
            return Result()
        unit = work / UNITS_PER_PERIOD
        search = _Search(g, unit, deadline, self.seed, self.workers)
        br = _grow(search, math.ceil(work / unit - 1e-9))
        if br.feasible is None and not search.stop():
            _descend(search, br)
        _bisect(search, br)
        _polish(search, br)
        return Result() if search.best is None else found(*search.best)


def periodic_schedule(graph: Graph, seconds: float, seed: int = 0):
    """The best periodic schedule found within `seconds` (schedule, simulation), or None."""
    res = PeriodicEngine(seed=seed).run(graph, None, Deadline.after(seconds))
    return (res.schedule, res.sim) if res.answered else None
