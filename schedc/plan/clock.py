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


def _now() -> float:
    """The clock every share of the time limit is read on: the wall clock, or under a work
    budget the work clock (schedc.solver.deadline.now), imported here so that ``import schedc``
    does not load the solver."""
    from schedc.solver.deadline import now

    return now()


def _counting_work() -> bool:
    from schedc.solver.deadline import counting_work_on

    return counting_work_on()


def _charge(units: float) -> None:
    """Charge the work clock (nothing under a wall-clock budget)."""
    from schedc.solver.deadline import charge

    charge(units)


def stop_requested() -> bool:
    """Ctrl-C or SIGTERM inside ``schedc.solver.interrupt.stop_on_sigint`` (imported here, not at
    the top: ``import schedc`` must not load the solver)."""
    from schedc.solver.interrupt import requested

    return requested()


class Phases:
    """Where a plan's time went: per step, the wall seconds and the seconds (or work units) of the
    plan's own clock (:func:`_now`). Under a work budget the two differ by what the charges miss;
    under a wall-clock budget a step's wall seconds past its share show which one overran.
    ``line()`` is the progress line ``plan`` ends with. Cost: two clock reads per step."""

    def __init__(self) -> None:
        self.done: list[tuple[str, float, float]] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        wall, clock = time.monotonic(), _now()
        try:
            yield
        finally:
            self.done.append((name, time.monotonic() - wall, _now() - clock))

    def line(self, work: bool) -> str:
        unit = "work" if work else "clock s"
        return "phases (wall s / " + unit + "): " + ", ".join(
            f"{name} {wall:.1f}/{clock:.1f}" for name, wall, clock in self.done)
