"""The plan's clocks: every share of its time limit is read on one clock.

Problem: ``plan`` splits its time limit into shares (search, compiles, certificate, least memory)
and must end on time under a wall-clock budget, or give the same plan on any machine under a work
budget. Method: thin wrappers over schedc.solver.deadline (wall clock, or the work clock with its
charges) and schedc.solver.interrupt (Ctrl-C, SIGTERM), imported at call time so that
``import schedc`` does not load the solver. Cost: a function call each.
"""

from __future__ import annotations


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
