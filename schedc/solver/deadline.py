"""One deadline for every phase of a compile, and the largest problem a compile takes.

Problem: ``--time-limit S`` must end the whole command within about S seconds at any size, and
Ctrl-C must stop it at once, and not only the engines (CP-SAT, the integer program, windows)
can run long: building the action graph, the hand-made schedules, the greedy families and the
list heuristic, run to completion, take many times the limit on large problems (docs/design.md,
"Deadlines and sizes").

Method: a :class:`Deadline` is passed down to every phase; loops that can run long ask
``deadline.expired()`` (the clock, or a Ctrl-C recorded by schedc.solver.interrupt) every few
thousand steps and give up, returning what they have. Phases whose cost is known in advance (the
action graph, a CP-SAT model, one window) are skipped when the time left is below their
estimate, from the measured cost per action below. Sizes beyond :data:`MAX_ACTIONS` are refused
before anything is built (:func:`check_size`), and so is a time limit shorter than the least a
compile of that size takes (one hand-made schedule, its simulation, the result, the report and
the CSV: :func:`check_time_limit`).

Work budgets (``budget="work"``, ``schedc compile --budget work``): on a busy machine wall-clock
limits cut every phase short at a different point, so the same inputs give another answer.
Inside :func:`counting_work` the clock that deadlines read (:func:`now`) is a *work clock*: it
starts at 0 and advances only when a phase charges the work it did
(:func:`charge`): CP-SAT its deterministic time, the integer program its node limit's share,
the list heuristic a fixed cost per construction and per local-search move. A work unit is
about a second of wall clock on the reference machine (2 cores with two other busy processes:
about 2/3 of a CPU second), each charge's rate measured there (benchmarks/work_charges.py prints
CPU seconds per unit charged, per charge); so a work budget ends near its size in seconds on
such a machine, sooner on an idle or faster one, and one far slower is cut by the wall clock
(the plan's clock takes over: schedc.planning.clock). Every decision
taken on time (phase shares, skips, stopping) is then a function of the inputs alone, and the
solvers run with fixed seeds and worker counts, so the same inputs give the same schedule,
value and bound on any machine. A wall-clock cap (:data:`WORK_WALL_FACTOR` x the budget + a
margin) stays as a safety net: when it fires, the result is marked as cut by the wall clock.

Cost: a clock read per check.
"""

from __future__ import annotations

import contextvars
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Optional

from schedc.core import limits
from schedc.errors import ParameterError, SchedcError
from schedc.solver import interrupt

# The largest compile is the largest schedule schedc reads back (schedc.core.limits, one number for
# both), sized by what a warm start, the report and the CSV cost there (benchmarks/
# compile_quality.py, cost curve; measured: docs/design.md, "Deadlines and sizes").
MAX_ACTIONS = limits.MAX_ACTIONS
# seconds per action of one pass over the action graph (building it, one simulation), measured
# on the shared 2-core machine; the estimates below use it to skip what cannot finish in time
SECONDS_PER_ACTION = 2e-5
CHECK_EVERY = 4096  # loop steps between clock reads in long constructions
# the least a compile takes, process start included: one hand-made schedule built and simulated,
# the result, the report and the CSV (measured: docs/design.md, "Deadlines and sizes").
FLOOR_START_SECONDS = 1.0
FLOOR_SECONDS_PER_ACTION = 1e-5


# work mode: the wall clock may run this many times the work budget (plus the margin) before the
# safety net stops the search; results are reproducible only when it does not fire
WORK_WALL_FACTOR, WORK_WALL_MARGIN = 10.0, 60.0
BUDGETS = ("time", "work")


@dataclass
class WorkClock:
    """The work clock of one compile (or plan) in work mode: it reads `origin` + `spent` (the
    work charged so far); `wall_at` is the safety net, on time.monotonic()."""

    origin: float
    wall_at: float
    spent: float = 0.0
    cut_by_wall: bool = False
    started: float = field(default_factory=time.monotonic)  # on time.monotonic(): the wall's zero
    before: float = 0.0  # wall seconds the command spent before the clock started (command_wall_clock)


_work: contextvars.ContextVar[Optional[WorkClock]] = contextvars.ContextVar("schedc_work_clock", default=None)


def work_clock() -> Optional[WorkClock]:
    """The work clock in force, None under wall-clock budgets (the default)."""
    return _work.get()


def counting_work_on() -> bool:
    return _work.get() is not None


@contextmanager
def counting_work(budget: float) -> Iterator[WorkClock]:
    """Run the body on a work clock for a budget of `budget` work units (module docstring).
    Nested use keeps the outer clock, so a plan that compiles many partitions charges one."""
    outer = _work.get()
    if outer is not None:
        yield outer
        return
    # the work clock starts at 0: elapsed work then sums the same floats on every run
    wall_at = time.monotonic() + WORK_WALL_FACTOR * budget + WORK_WALL_MARGIN
    command_at, before = _command_wall.get()
    clock = WorkClock(0.0, min(wall_at, command_at), before=before)
    token = _work.set(clock)
    try:
        yield clock
    finally:
        _work.reset(token)


# (the wall-clock point a command's work clocks stop at, the seconds it spent before them)
_command_wall: contextvars.ContextVar[tuple[float, float]] = contextvars.ContextVar(
    "schedc_command_wall", default=(math.inf, 0.0))


@contextmanager
def command_wall_clock(seconds: float, before: float = 0.0) -> Iterator[None]:
    """The work clocks started inside the block have their safety net at most `seconds` of wall
    clock from now, and `before` (the command's start-up) on their wall: for a command whose work
    budget must also end it in about that many seconds (``schedc plan --budget work``: its time
    limit plus 10% and 2 s, less its start-up), where a machine slower than the charges' nominal
    rate would otherwise run past it."""
    token = _command_wall.set((time.monotonic() + max(0.0, seconds), max(0.0, before)))
    try:
        yield
    finally:
        _command_wall.reset(token)


def now() -> float:
    """What deadlines compare with: time.monotonic(), or the work clock in work mode."""
    clock = _work.get()
    return time.monotonic() if clock is None else clock.origin + clock.spent


def charge(units: float) -> None:
    """Advance the work clock by `units` (nothing under wall-clock budgets)."""
    clock = _work.get()
    if clock is not None and units > 0:
        clock.spent += units


def wall_left() -> float:
    """Seconds of wall clock left to the work mode's safety net (inf under wall-clock budgets)."""
    clock = _work.get()
    return math.inf if clock is None else clock.wall_at - time.monotonic()


def wall_cut() -> bool:
    """Whether the work mode's wall-clock safety net has fired (recorded on the clock)."""
    clock = _work.get()
    if clock is None or time.monotonic() < clock.wall_at:
        return False
    clock.cut_by_wall = True
    return True


def wall_elapsed() -> float:
    """Wall-clock seconds since the work clock in force started (0 under wall-clock budgets)."""
    clock = _work.get()
    return 0.0 if clock is None else time.monotonic() - clock.started


@contextmanager
def wall_cap(seconds: float) -> Iterator[None]:
    """Under a work budget, the safety net of the block at `seconds` of wall clock from now (or
    the outer one, if earlier); nothing under a wall-clock budget. For a caller whose phases must
    end near their shares on a machine where the charged work runs slower than its nominal rate
    (CP-SAT's deterministic time can be a tenth of the wall clock it takes): a phase cut by it is
    marked, as the safety net's cuts are, not reproducible."""
    clock = _work.get()
    if clock is None:
        yield
        return
    saved = clock.wall_at
    clock.wall_at = min(saved, time.monotonic() + max(0.0, seconds))
    try:
        yield
    finally:
        clock.wall_at = saved


def process_seconds() -> float:
    """Wall seconds since this process started (Linux's /proc/self/stat against /proc/uptime; 0
    where they cannot be read): what a command's start-up (the interpreter, its imports) already
    took of a time limit that covers the whole command."""
    import os

    try:
        with open("/proc/self/stat") as f:
            started = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, up - started)


def charge_passes(n_actions: int, passes: float = 1.0) -> None:
    """Charge `passes` passes over `n_actions` actions at the nominal cost per action."""
    charge(passes * n_actions * SECONDS_PER_ACTION)


@dataclass(frozen=True)
class Deadline:
    """A point in time.monotonic(); ``expired()`` also turns true on Ctrl-C (unless
    ``interruptible`` is off: :data:`NEVER`, for calls that have no deadline)."""

    at: float = math.inf
    interruptible: bool = True

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        return cls(now() + seconds)

    def left(self) -> float:
        return self.at - now()

    def expired(self) -> bool:
        return (self.interruptible and interrupt.requested()) or now() >= self.at or \
            (self.interruptible and wall_cut())

    def allows(self, n_actions: int, passes: float = 1.0) -> bool:
        """Whether `passes` passes over `n_actions` actions likely end before the deadline."""
        return not self.expired() and self.left() > passes * n_actions * seconds_per_action()


NEVER = Deadline(interruptible=False)

_observed: list[float] = []  # seconds per action of the passes timed in this process


def observe(seconds: float, n_actions: int) -> None:
    """Record a timed pass (a simulation) over `n_actions` actions: on a loaded machine the
    estimates follow what this process actually gets."""
    if n_actions >= 1000 and not counting_work_on():
        _observed.append(seconds / n_actions)


def seconds_per_action() -> float:
    """The larger of the default and the slowest pass seen lately (the default alone in work
    mode, where no estimate may follow the machine's load)."""
    if counting_work_on():
        return SECONDS_PER_ACTION
    return max([SECONDS_PER_ACTION] + _observed[-8:])


def n_actions(n_stages: int, n_microbatches: int) -> int:
    """F, I and W for every stage and microbatch (a stage without weights has fewer)."""
    return 3 * n_stages * n_microbatches


def check_size(n_stages: int, n_microbatches: int) -> None:
    """Refuse, in one line, a problem larger than a compile handles."""
    n = n_actions(n_stages, n_microbatches)
    if n > MAX_ACTIONS and n_actions(n_stages, 1) > MAX_ACTIONS:
        raise SchedcError(f"{n_stages} stages is more than schedc compiles: at most {MAX_ACTIONS:,} actions "
                          f"(3 x stages x microbatches), so at most {MAX_ACTIONS // 3:,} stages")
    if n > MAX_ACTIONS:
        raise ParameterError(
            "microbatches", f"{n_stages} stages x {n_microbatches} microbatches is {n:,} actions; schedc compiles "
            f"up to {MAX_ACTIONS:,} (3 x stages x microbatches): use fewer microbatches per step (e.g. {{name}}"
            f"{max(1, MAX_ACTIONS // (3 * n_stages))}) and accumulate gradients over several steps")


def check_time_limit(n: int, time_limit: float) -> None:
    """Refuse, in one line, a time limit that the least compile of `n` actions cannot keep
    within 10% + 2 s (:data:`FLOOR_SECONDS_PER_ACTION`)."""
    floor = FLOOR_START_SECONDS + n * FLOOR_SECONDS_PER_ACTION
    if floor > 1.1 * time_limit + 2.0:
        need = math.ceil((floor - 2.0) / 1.1)
        raise ParameterError("time_limit", f"{{name}}{time_limit:g} is too short for {n:,} actions: one hand-made "
                                           f"schedule, its simulation, the report and the CSV take about {floor:.0f} "
                                           f"s; give {{name}}{need} or more, or fewer microbatches per step")
