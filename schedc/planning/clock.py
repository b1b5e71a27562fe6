"""The plan's clocks: every share of its time limit is read on one clock.

Problem: ``plan`` splits its time limit into shares (search, compiles, certificate, least memory)
and must end on time under a wall-clock budget, or give the same plan on any machine under a work
budget. Method: thin wrappers over schedc.solver.deadline (wall clock, or the work clock with its
charges) and schedc.solver.interrupt (Ctrl-C, SIGTERM), imported at call time so that
``import schedc`` does not load the solver. Cost: a function call each.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

WALL_LEAD = 2.0  # seconds the wall clock may run ahead of the work charged before it sets the plan's clock


def clock_now() -> float:
    """The clock every share of the time limit is read on: the wall clock, or under a work
    budget the work clock (schedc.solver.deadline.now), imported here so that ``import schedc``
    does not load the solver. Under a work budget the wall clock takes over where it runs more
    than ``WALL_LEAD`` seconds ahead of the work charged (a machine slower than the charges'
    nominal rate): the plan then ends near its budget in seconds too, and is marked as cut by the
    wall clock (not reproducible); where the charges keep up, the work clock alone decides."""
    from schedc.solver.deadline import now, wall_elapsed, work_clock

    clock = work_clock()
    work = now()
    if clock is not None and wall_elapsed() > clock.spent + WALL_LEAD:
        clock.cut_by_wall = True
        # the command's start-up too (schedc.solver.deadline.command_wall_clock), as a time budget counts it
        return clock.origin + clock.before + wall_elapsed()
    return work


def work_budget_on() -> bool:
    from schedc.solver.deadline import counting_work_on

    return counting_work_on()


def charge_work(units: float) -> None:
    """Charge the work clock (nothing under a wall-clock budget)."""
    from schedc.solver.deadline import charge

    charge(units)


def compile_within(problem, time_limit: float, **kwargs):
    """schedc.solver.compile.compile_problem for `time_limit` on the plan's clock, under a work
    budget also capped at that many seconds of wall clock plus ``WALL_LEAD``
    (schedc.solver.deadline.wall_cap): a compile whose charges run slower than the wall (CP-SAT
    on a busy machine) cannot take the plan past its budget."""
    from schedc.solver.compile import compile_problem
    from schedc.solver.deadline import wall_cap

    with wall_cap(time_limit + WALL_LEAD):
        return compile_problem(problem, time_limit=time_limit, **kwargs)


def stop_requested() -> bool:
    """Ctrl-C or SIGTERM inside ``schedc.solver.interrupt.stop_on_sigint`` (imported here, not at
    the top: ``import schedc`` must not load the solver)."""
    from schedc.solver.interrupt import requested

    return requested()


@contextmanager
def bounded_program(placement: str, n_units: int, ranks: int, end: float) -> Iterator[None]:
    """The V's dynamic programs (O(R U^4), no clock read inside) cut at `end` on the plan's clock
    or at a stop (schedc.solver.interrupt.cut_after). Under a work budget they run only where
    their estimated seconds fit before `end` on the work clock (else Cut at once, a decision the
    charges alone make), and that estimate is charged; they are cut on the wall clock only where
    they run past `end` in seconds (a machine far slower than the estimate), and the plan is then
    marked cut by the wall clock. The loop's programs (O(R U^2)) run as they are."""
    from schedc.core.partition import v_bound_seconds
    from schedc.solver.deadline import wall_left
    from schedc.solver.interrupt import Cut, cut_after

    if placement != "v":
        yield
        return
    if not work_budget_on():
        with cut_after(end - clock_now()):
            yield
        return
    from schedc.solver.deadline import work_clock

    left, estimate = end - clock_now(), v_bound_seconds(n_units, ranks)
    if estimate > left:
        # skipped on the work clock, the same on any machine: not a cut by the wall clock
        raise Cut("deadline")
    charge_work(estimate)
    try:  # on the wall too (as clock_now() takes over): a cut one is marked not reproducible
        with cut_after(min(wall_left(), left)):
            yield
    except Cut:
        clock = work_clock()
        assert clock is not None, "a work budget is on, so its clock is in force"
        clock.cut_by_wall = True
        raise


def raise_stopped() -> None:
    """A stop that came before the plan had anything to return: the interrupt the CLI reports
    (Terminated, exit 143, for SIGTERM; KeyboardInterrupt, 130, for Ctrl-C)."""
    import signal

    from schedc.errors import Terminated
    from schedc.solver.interrupt import received

    raise Terminated() if received() == signal.SIGTERM else KeyboardInterrupt()


class Phases:
    """Where a plan's time went: per step, the wall seconds and the seconds (or work units) of the
    plan's own clock (:func:`clock_now`). Under a work budget the two differ by what the charges miss;
    under a wall-clock budget a step's wall seconds past its share show which one overran.
    ``line()`` is the progress line ``plan`` ends with. Cost: two clock reads per step."""

    def __init__(self) -> None:
        self.done: list[tuple[str, float, float]] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        wall, clock = time.monotonic(), clock_now()
        try:
            yield
        finally:
            self.done.append((name, time.monotonic() - wall, clock_now() - clock))

    def line(self, work: bool) -> str:
        unit = "work" if work else "clock s"
        return "phases (wall s / " + unit + "): " + ", ".join(
            f"{name} {wall:.1f}/{clock:.1f}" for name, wall, clock in self.done)
