"""What limits a plan's step: memory, one rank's work or the fill and drain.

Problem: a user who wants a shorter step needs to know which change helps (more memory, another
partition, more microbatches). Method: :func:`plan_limiter` compares the plan with the shortest
hand-made schedule with no cap on the chosen, the compute-balanced and torchtitan's split (memory
binds when that one is over 1% shorter and some rank has no room for one more microbatch), else
asks schedc.core.diagnose.limiter; ``_why_partition`` compares the busiest rank's work with the fastest
comparison row's. Cost: one simulation per hand-made schedule and split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from schedc.core.cost_model import fits
from schedc.core.costs import MemoryLimit, Profile, format_bytes
from schedc.errors import SchedcError
from schedc.core.partition import Units, n_stages_for, torchtitan_default_counts
from schedc.plan.handmade import _hand_made_shapes
from schedc.plan.problem import problem_for
from schedc.plan.result import PlanResult


@dataclass(frozen=True)
class PlanLimiter:
    """What limits the plan's step: ``memory`` (with no cap a known schedule is shorter:
    ``uncapped_step`` at ``uncapped_peak``), else ``rank`` or ``critical-path``
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


def _uncapped_best(profile: Profile, splits, ranks: int, microbatches: int, objective: str):
    """(step, peak, schedule name, split name, placement, counts) of the shortest hand-made
    schedule with no cap over the given splits."""
    from schedc.core.simulate import simulate

    none = MemoryLimit(kind="none")
    best = None
    for split, pl, counts in splits:
        problem = problem_for(profile, counts, pl, ranks, microbatches, none, objective)
        for name, sched in _hand_made_shapes(problem).items():
            try:
                sim = simulate(sched, problem.profile, none)
            except SchedcError:
                continue
            value = sim.objective(objective)
            if best is None or value < best[0]:
                best = (value, max(sim.peak_memory), name, split, pl, list(counts))
    return best


def rank_work(units: Units, counts: Sequence[int], placement: str, ranks: int) -> list[float]:
    """Per rank: F + I + W of one microbatch of its stages (its busy time per microbatch)."""
    work, start = [0.0] * ranks, 0
    for k, n in enumerate(counts):
        r = k % ranks if placement == "loop" else (k if k < ranks else 2 * ranks - 1 - k)
        work[r] += float(units.F[start + n] - units.F[start] + units.I[start + n] - units.I[start]
                         + units.W[start + n] - units.W[start])
        start += n
    return work


def plan_limiter(result: "PlanResult") -> PlanLimiter:
    """Memory-bound when some rank has no room for one more microbatch and, with no cap, a
    hand-made schedule on the chosen, the compute-balanced or torchtitan's split is over 1% shorter
    than the plan (the step then shortens with more memory, and more microbatches do not help);
    otherwise what ``schedc.core.diagnose.limiter`` says of the
    chosen schedule. Cost: one simulation per hand-made schedule and split (milliseconds each)."""
    from schedc.core.diagnose import limiter

    units = Units.of(result.units)
    ranks, M = result.compiled.problem.n_ranks, result.compiled.problem.n_microbatches
    objective = result.compiled.problem.objective
    splits = [("the chosen", result.placement, result.counts)]
    for pl in result.bounds:
        S = n_stages_for(pl, ranks)
        splits += [("the compute-balanced", pl, next((c.counts for c in result.comparisons if c.placement == pl
                                                      and c.split == "compute-balanced"), None)),
                   ("torchtitan's default", pl, torchtitan_default_counts(result.units.n_stages, S))]
    splits = [x for x in splits if x[2] is not None]
    best = _uncapped_best(result.units, splits, ranks, M, objective) if _cap_binds(result.compiled) else None
    why = _why_partition(result, units, ranks)
    if best is not None and best[0] < result.value * 0.99:
        value, peak, name, split, pl, counts = best
        message = (f"memory: with no cap {name} on {split} split {counts} ({pl}) takes {value:.6g} s, "
                   f"{100 * (1 - value / result.value):.0f}% shorter, at a peak of {format_bytes(peak)}; more memory "
                   "per rank or activation checkpointing shortens the step, more microbatches do not")
        return PlanLimiter("memory", message, why, value, peak)
    diag = limiter(result.compiled.sim, result.compiled.problem.profile)
    return PlanLimiter(diag.kind, diag.message, why)


def _cap_binds(compiled) -> bool:
    """Whether some rank's peak leaves no room for one more microbatch of its largest stage: only
    then can more memory shorten the step."""
    problem, sim = compiled.problem, compiled.sim
    costs = problem.costs
    for r in range(problem.n_ranks):
        if r >= len(sim.memory_limit):
            continue
        biggest = max((costs.activation(s) for s in costs.stages_of(r)), default=0.0)
        if not fits(sim.peak_memory[r] + biggest, sim.memory_limit[r]):
            return True
    return False


def _why_partition(result: "PlanResult", units: Units, ranks: int) -> str:
    """One sentence: the fastest comparison row, how much longer it takes, and whether the plan
    wins on its busiest rank's work or on the order of the same work (fill, drain, memory)."""
    rows = [c for c in result.comparisons if c.value is not None and c.counts
            and (list(c.counts), c.placement) != (list(result.counts), result.placement)]
    mine = rank_work(units, result.counts, result.placement, ranks)
    text = f"its busiest rank computes {max(mine):.4g} s per microbatch"
    if not rows:
        return text + "; no comparison split fits the cap"
    c = min(rows, key=lambda row: row.value)
    pl = c.placement if len(c.counts) == n_stages_for(c.placement, ranks) else "loop"
    theirs = max(rank_work(units, c.counts, pl, ranks))
    if c.value < result.value:
        return (f"{c.split} split {c.counts} ({c.placement}) with {c.schedule} is "
                f"{100 * (1 - c.value / result.value):.1f}% shorter: the plan does not build {len(c.counts)} stages "
                f"in a loop on {ranks} ranks, or its search needs a longer --time-limit")
    lead = (f"the fastest comparison, {c.split} split {c.counts} ({c.placement}) with {c.schedule}, takes "
            f"{100 * (c.value / result.value - 1):.1f}% longer; ")
    if max(mine) < theirs * (1 - 0.005):
        return lead + text + f", {theirs:.4g} s there: less work on the busiest rank"
    return lead + text + f", {theirs:.4g} s there: the plan wins on the order (fill, drain, memory), not the balance"
