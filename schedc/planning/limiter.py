"""What limits a plan's step: memory, one rank's work or the fill and drain.

Problem: a user who wants a shorter step needs to know which change helps (more memory, another
partition, more microbatches). Method: :func:`plan_limiter` compares the plan with the uncapped
problem: the hand-made schedules with no cap on the chosen, the compute-balanced and torchtitan's
split, and schedc's list heuristic with no cap on the chosen split. Memory binds when one of them
is over 1% shorter and does not fit the cap (more memory then shortens the step); else
schedc.core.diagnose.limiter answers. ``_why_partition`` compares the busiest rank's work with the
fastest comparison row's. Cost: one simulation per hand-made schedule and split, and two list
constructions (milliseconds to a fraction of a second), none charged to a work clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from schedc.core.costs import MemoryLimit
from schedc.core.formatting import format_bytes
from schedc.core.partition import Units, torchtitan_default_counts
from schedc.errors import SchedcError
from schedc.planning.handmade import hand_made_shapes
from schedc.planning.problem import INTERLEAVED, problem_for, stages_for
from schedc.planning.result import PlanResult

HEURISTIC = "schedc's heuristic"
SHORTER = 0.99  # an uncapped schedule counts when its step is under this fraction of the plan's
# above this many actions the uncapped heuristic is skipped: one construction would take seconds
HEURISTIC_ACTIONS = 100_000


@dataclass(frozen=True)
class PlanLimiter:
    """What limits the plan's step: ``memory`` (with no cap a schedule that exceeds the cap is
    shorter: ``uncapped_step`` at ``uncapped_peak``), else ``rank`` or ``critical-path``
    (schedc.core.diagnose.limiter on the chosen schedule); ``why_partition`` compares the busiest
    rank's work with the comparison splits'."""

    kind: str
    message: str
    why_partition: str
    uncapped_step: Optional[float] = None
    uncapped_peak: Optional[float] = None

    def as_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "why_partition": self.why_partition,
                "uncapped_step": self.uncapped_step, "uncapped_peak": self.uncapped_peak}


@dataclass(frozen=True)
class Uncapped:
    """One schedule of the uncapped problem: its step, its peak (largest over ranks), whether it
    fits the plan's cap, and which schedule on which split it is."""

    value: float
    peak: float
    fits: bool
    name: str
    split: str
    placement: str
    counts: list


def uncapped_schedules(profile, splits, ranks: int, microbatches: int, limit: MemoryLimit,
                       objective: str) -> list[Uncapped]:
    """The hand-made schedules on each (split name, placement, counts) of `splits`, and schedc's
    list heuristic with no cap on the first split, each simulated under `limit` (the step does not
    depend on it; whether it fits does)."""
    from schedc.core.simulate import simulate

    found = []
    for k, (split, pl, counts) in enumerate(splits):
        problem = problem_for(profile, counts, pl, ranks, microbatches, limit, objective)
        shapes = dict(hand_made_shapes(problem))
        if k == 0:
            shapes[HEURISTIC] = _uncapped_heuristic(profile, counts, pl, ranks, microbatches, objective)
        for name, sched in shapes.items():
            if sched is None:
                continue
            try:
                sim = simulate(sched, problem.profile, problem.memory)
            except SchedcError:
                continue
            found.append(Uncapped(sim.objective(objective), max(sim.peak_memory), sim.fits, name, split, pl,
                                  list(counts)))
    return found


def _uncapped_heuristic(profile, counts, placement: str, ranks: int, microbatches: int, objective: str):
    """schedc.solver.engines.heuristic's schedule with no cap (its fixed rules, no local search:
    deterministic), or None on problems too large for a quick construction. The work clock is
    left as it was: the plan is chosen, and what follows it must not depend on this."""
    from schedc.solver.deadline import n_actions, work_clock
    from schedc.solver.engines.heuristic import heuristic_schedule

    problem = problem_for(profile, counts, placement, ranks, microbatches, MemoryLimit(kind="none"), objective)
    if n_actions(problem.n_stages, microbatches) > HEURISTIC_ACTIONS:
        return None
    clock = work_clock()
    spent = 0.0 if clock is None else clock.spent  # restored below only where a clock is in force
    try:
        return heuristic_schedule(problem, time_budget=0.0)
    except SchedcError:
        return None
    finally:
        if clock is not None:
            clock.spent = spent


def rank_work(units: Units, counts: Sequence[int], placement: str, ranks: int) -> list[float]:
    """Per rank: F + I + W of one microbatch of its stages (its busy time per microbatch)."""
    work, start = [0.0] * ranks, 0
    for k, n in enumerate(counts):
        r = k % ranks if placement in ("loop", INTERLEAVED) else (k if k < ranks else 2 * ranks - 1 - k)
        work[r] += float(units.F[start + n] - units.F[start] + units.I[start + n] - units.I[start]
                         + units.W[start + n] - units.W[start])
        start += n
    return work


def plan_limiter(result: "PlanResult") -> PlanLimiter:
    """Memory-bound when, with no cap, a hand-made schedule on the chosen, the compute-balanced or
    torchtitan's split, or schedc's heuristic on the chosen split, is over 1% shorter than the plan
    and does not fit the cap: the step then shortens with more memory, and the message names the
    least cap that one of them fits. The test is the uncapped schedules themselves, not the plan's
    room: a rank with room for one more microbatch can still be one the next shorter order does not
    fit. Other microbatch counts are not tried: more microbatches spread the fill and drain, and
    their step per microbatch can fall below the uncapped one's, so the message claims nothing
    about them beyond the count compared. Otherwise, and always with no cap, what
    ``schedc.core.diagnose.limiter`` says of the chosen schedule. Cost: one simulation per
    hand-made schedule and split and two list constructions (milliseconds each)."""
    from schedc.core.diagnose import limiter

    units = Units.of(result.units)
    problem = result.compiled.problem
    ranks, M = problem.n_ranks, problem.n_microbatches
    named: list[tuple[str, str, Optional[list[int]]]] = [("the chosen", result.placement, result.counts)]
    for pl in result.bounds:
        S = stages_for(pl, ranks)
        named += [("the compute-balanced", pl, next((c.counts for c in result.comparisons if c.placement == pl
                                                     and c.split == "compute-balanced"), None)),
                  ("torchtitan's default", pl, torchtitan_default_counts(result.units.n_stages, S))]
    splits = [(name, pl, counts) for name, pl, counts in named if counts is not None]
    # with no cap the plan's problem is the uncapped one: nothing is shorter for want of memory, and
    # simulating every schedule again would take longer than the search at thousands of microbatches
    found = [] if problem.memory.kind == "none" else \
        uncapped_schedules(result.units, splits, ranks, M, problem.memory, problem.objective)
    # a shorter schedule that fits the cap is the search's miss, not the memory's
    shorter = [u for u in found if u.value < result.value * SHORTER and not u.fits]
    why = _why_partition(result, units, ranks)
    if shorter:
        best = min(shorter, key=lambda u: u.value)
        least = min(shorter, key=lambda u: u.peak)
        also = "" if least.peak >= best.peak else (
            f"; with the least memory of those, {_named(least)} is {_percent(least, result)} shorter at a peak of "
            f"{format_bytes(least.peak)}")
        message = (f"memory: with no cap {_named(best)} takes {best.value:.6g} s, {_percent(best, result)} shorter, "
                   f"at a peak of {format_bytes(best.peak)}{also}; more memory per rank shortens the step: "
                   f"--memory {format_bytes(least.peak, round_up=True)} or more fits {'that one' if also else 'it'}, "
                   f"at the same {M} microbatches")
        return PlanLimiter("memory", message, why, best.value, best.peak)
    diag = limiter(result.compiled.sim, problem.profile)
    return PlanLimiter(diag.kind, diag.message, why)


def _named(u: Uncapped) -> str:
    return f"{u.name} on {u.split} split {u.counts} ({u.placement})"


def _percent(u: Uncapped, result: "PlanResult") -> str:
    return f"{100 * (1 - u.value / result.value):.1f}%"


def _why_partition(result: "PlanResult", units: Units, ranks: int) -> str:
    """One sentence: the fastest comparison row, how much longer it takes, and whether the plan
    wins on its busiest rank's work or on the order of the same work (fill, drain, memory)."""
    rows = [c for c in result.comparisons if c.value is not None and c.counts
            and (list(c.counts), c.placement) != (list(result.counts), result.placement)]
    mine = rank_work(units, result.counts, result.placement, ranks)
    text = f"its busiest rank computes {max(mine):.4g} s per microbatch"
    if not rows:
        return text + "; no comparison split fits the cap"
    c = min(rows, key=lambda row: math.inf if row.value is None else row.value)
    value = c.value
    assert value is not None, "the rows kept have a step"
    pl = c.placement if len(c.counts) == stages_for(c.placement, ranks) else "loop"
    theirs = max(rank_work(units, c.counts, pl, ranks))
    if value < result.value:
        return (f"{c.split} split {c.counts} ({c.placement}) with {c.schedule} is "
                f"{100 * (1 - value / result.value):.1f}% shorter: the plan does not build {len(c.counts)} stages "
                f"in a loop on {ranks} ranks, or its search needs a longer --time-limit")
    lead = (f"the fastest comparison, {c.split} split {c.counts} ({c.placement}) with {c.schedule}, takes "
            f"{100 * (value / result.value - 1):.1f}% longer; ")
    if max(mine) < theirs * (1 - 0.005):
        return lead + text + f", {theirs:.4g} s there: less work on the busiest rank"
    return lead + text + f", {theirs:.4g} s there: the plan wins on the order (fill, drain, memory), not the balance"
