"""The splits a plan is compared with: torchtitan's default, the even and the compute-balanced split.

Problem: a plan says what it gains over what a user would otherwise run. Method: each split with
its best hand-made schedule (schedc.core.baselines) that fits the same cap, per placement tried, and
torchtitan's default split with each of its own schedule classes, simulated under the plan's memory
model (a row over the cap says by how much). Cost: one simulation per hand-made schedule and split.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from schedc.core.costs import AC_MODES, MemoryLimit, Profile
from schedc.core.formatting import format_bytes
from schedc.core.partition import even_counts, torchtitan_default_counts
from schedc.errors import SchedcError
from schedc.frameworks import launchable_modes
from schedc.planning.handmade import balanced_split, best_hand_made
from schedc.planning.problem import INTERLEAVED, holds_one_microbatch, problem_for, stages_for
from schedc.planning.report import plan_status
from schedc.planning.result import Comparison, PlanResult

if TYPE_CHECKING:
    from schedc.core.ir import Schedule


def compare_splits(profile, units, ranks, microbatches, limit, cap, objective, placements,
                   memo: Optional[dict] = None) -> list[Comparison]:
    """torchtitan's default, the even and the compute-balanced split, each with its best hand-made
    schedule that fits, per placement."""
    rows = []
    for pl in placements:
        S = stages_for(pl, ranks)
        splits = [("torchtitan default", torchtitan_default_counts(profile.n_stages, S)),
                  ("even", even_counts(profile.n_stages, S)),
                  ("compute-balanced", balanced_split(units, pl, ranks, cap))]
        for name, counts in splits:
            if counts is None:
                continue
            problem = problem_for(profile, counts, pl, ranks, microbatches, limit, objective)
            if not holds_one_microbatch(problem):
                rows.append(Comparison(name, pl, list(counts), None, None, "a rank cannot hold one microbatch"))
                continue
            key = (pl, tuple(counts))  # `memo`: what the screening already found for this split
            sched, value = memo[key] if memo and key in memo else best_hand_made(problem)
            rows.append(Comparison(name, pl, list(counts), sched, value, "" if sched else "no hand-made schedule fits"))
    return rows


# torchtitan 0.3.0's own schedule classes on its default split: (class, schedc's baseline, stages per rank)
TORCHTITAN_CLASSES = (("1F1B", "1f1b", 1), ("Interleaved1F1B", "interleaved-1f1b", 2), ("ZBVZeroBubble", "zb-v", 2))


def torchtitan_rows(profile: Profile, ranks: int, microbatches: int, limit: MemoryLimit,
                    objective: str) -> list[Comparison]:
    """What a torchtitan user runs by default: its default split (``torchtitan_default_counts``)
    with each of its schedule classes (schedc's baselines that build the same order), simulated
    under the plan's memory model; a row that exceeds the cap says by how much."""
    from schedc.core.baselines import make_baseline
    from schedc.core.simulate import simulate

    rows = []
    for cls, name, per_rank in TORCHTITAN_CLASSES:
        n = per_rank * ranks
        pl = "v" if name == "zb-v" else "loop" if per_rank == 1 else INTERLEAVED
        if n > profile.n_stages:
            rows.append(Comparison("torchtitan default", pl, [], cls, None, f"{n} stages need {n} units"))
            continue
        counts = torchtitan_default_counts(profile.n_stages, n)
        try:
            sim = simulate(make_baseline(name, n, microbatches, ranks), profile.merge(counts), limit)
        except SchedcError as e:
            rows.append(Comparison("torchtitan default", pl, counts, cls, None, str(e)))
            continue
        peak = max(sim.peak_memory)
        value = sim.objective(objective)
        note = "" if sim.fits else f"does not fit: peak {format_bytes(peak)} over the cap (step {value:.6g})"
        rows.append(Comparison("torchtitan default", pl, counts, cls, value if sim.fits else None, note, peak=peak))
    return rows


def comparison_pictures(result: PlanResult) -> list[tuple[str, Schedule, Profile]]:
    """(title, schedule, merged profile) of the plan and of the fastest torchtitan class on its
    default split that fits (else the fastest that does not), for one picture."""
    from schedc.core.baselines import make_baseline

    out = [(f"plan {result.placement} {result.counts} ({plan_status(result)})", result.schedule, result.profile)]
    rows = [c for c in result.comparisons if c.peak is not None and c.split in ("torchtitan default", *(
        f"torchtitan default, {m} AC" for m in AC_MODES if m not in launchable_modes("torchtitan")))]  # light
    row = min(rows, key=lambda c: (c.value is None, c.value or 0.0), default=None)
    if row is not None:
        assert row.schedule is not None, "a row with a peak was simulated, so it names its class"
        name = {cls: base for cls, base, _ in TORCHTITAN_CLASSES}[row.schedule]
        M, R = result.compiled.problem.n_microbatches, result.compiled.problem.n_ranks
        fits = "" if row.value is not None else ", over the cap"
        out.append((f"torchtitan {row.schedule} {row.counts}{fits}", make_baseline(name, len(row.counts), M, R),
                    result.units.merge(row.counts)))
    return out
