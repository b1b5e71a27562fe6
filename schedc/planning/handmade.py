"""Hand-made schedules as upper bounds: the best one that fits a partition's cap.

Problem: the search screens partitions, the comparisons print rows and the final compile needs a
warm start, each from the best hand-made schedule (schedc.core.baselines) that fits the cap. Method: the
schedules of a shape do not depend on costs, so they are built once per shape and placement and
simulated per partition; the compute-balanced split (schedc.core.partition.balanced) is cached per plan.
Cost: one simulation per hand-made schedule (milliseconds each), charged to the work clock.
"""

from __future__ import annotations

import math
from typing import Optional

from schedc.core.partition import Units, balanced
from schedc.errors import SchedcError
from schedc.planning.clock import bounded_program
from schedc.solver.interrupt import Cut

# passes over the actions charged per simulation of a hand-made schedule: 0.36-0.58 CPU seconds
# per unit charged at 1.5 passes (benchmarks/work_charges.py), times 1.5 for a work unit's wall clock
SIMULATION_PASSES = 0.75


def hand_made_warm(problem):
    """(schedule, simulation, name) of the shortest hand-made schedule that fits, else None."""
    from schedc.core.simulate import simulate

    name, _ = best_hand_made(problem)
    if name is None:
        return None
    sched = hand_made_shapes(problem)[name]
    return sched, simulate(sched, problem.profile, problem.memory), name


def hand_made_shapes(problem) -> dict:
    """The hand-made schedules (schedc.core.baselines) of the problem's shape and placement: they do not
    depend on costs, so one set serves every partition."""
    from schedc.core.baselines import baselines_for

    key = (problem.n_stages, problem.n_microbatches, problem.n_ranks, problem.placement_name, tuple(problem.placement))
    if key not in _SHAPES:
        found = baselines_for(problem.n_stages, problem.n_microbatches, problem.n_ranks, problem.placement_name)
        if len(_SHAPES) > 64:
            _SHAPES.clear()
        _SHAPES[key] = {k: v for k, v in found.items() if tuple(v.placement) == tuple(problem.placement)}
    return _SHAPES[key]


def balanced_split(units: Units, placement: str, ranks: int, cap: float, end: float = math.inf):
    """``schedc.core.partition.balanced``'s partition (None when cut at `end`), computed once per plan (a dynamic program that
    takes a fraction of a second on a V of 8 ranks, asked for by the screening, the comparisons
    and the limiter)."""
    key = (id(units), placement, ranks, cap)
    if key not in _BALANCED:
        if len(_BALANCED) > 64:
            _BALANCED.clear()
        if placement == "interleaved":
            # each of the 2R stages balanced as if on its own rank, each alone under the cap: a
            # start for the search (which checks what a rank of two stages holds), not a bound
            found = balanced(units, "loop", 2 * ranks, cap)[1]
        else:
            try:  # the V's program reads no clock: cut at `end`, and then no balanced split (kept so)
                with bounded_program(placement, units.n, ranks, end):
                    found = balanced(units, placement, ranks, cap)[1]
            except Cut:
                found = None
        _BALANCED[key] = (units, found)  # units kept: its id stays its own
    return _BALANCED[key][1]


_BALANCED: dict = {}
_SHAPES: dict = {}  # the hand-made schedules by shape: built once per process (they are never modified)


def best_hand_made(problem, shapes: Optional[dict] = None) -> tuple[Optional[str], Optional[float]]:
    """(name, step) of the hand-made schedule (schedc.core.baselines) with the shortest step that fits
    the problem's cap; (None, None) when none fits."""
    from schedc.core.simulate import simulate
    from schedc.solver.deadline import charge_passes

    best: tuple[Optional[str], Optional[float]] = (None, None)
    for name, sched in (shapes if shapes is not None else hand_made_shapes(problem)).items():
        charge_passes(3 * problem.n_stages * problem.n_microbatches, SIMULATION_PASSES)
        try:
            sim = simulate(sched, problem.profile, problem.memory)
        except SchedcError:
            continue
        value = sim.objective(problem.objective)
        if sim.fits and (best[1] is None or value < best[1]):
            best = (name, value)
    return best
