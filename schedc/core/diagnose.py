"""What limits a schedule's step: one rank's work, or the pipeline's fill and drain.

Problem: a report that says "makespan 4.4 s, bubble 74%, optimal" does not say why the step is
that long. When one rank carries much more work than the others (a stage with the LM head and
the loss, say), no order of actions helps: the step is at least that rank's busy time, and only
moving work off it (another partition: ``schedc plan``) shortens it. When the ranks' work is
balanced, the idle time is the pipeline's fill and drain and waiting on dependencies and
communication, which more microbatches or another schedule shorten.

Method: from a simulation, the busiest rank r* (largest compute time). Its busy time is a lower
bound on the makespan of any order of the same stages on the same ranks, so
``busy(r*) / makespan`` says how much of the step that rank's work alone explains. The rank
*bounds the step* when it does at least ``IMBALANCE`` times the mean rank's work: the others then
idle because of it. Otherwise the ranks are balanced and the step is set by the critical path
(fill, drain, dependencies, communication): the report says that instead. The stages on r* are
described by their module names when the profile has them (per-unit profiles, ``Profile.merge``),
or as the embedding / LM head of a ``transformer_profile``.

Cost: O(actions) (one pass over the simulation's per-rank busy times and orders).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from schedc.core.costs import Profile
from schedc.core.simulate import SimResult

__all__ = ["IMBALANCE", "Limiter", "limiter", "same_hand_made"]

# The busiest rank "bounds the step" when it does this many times the mean rank's work.
IMBALANCE = 1.1


@dataclass(frozen=True)
class Limiter:
    """What bounds a schedule's step (see the module docstring)."""

    kind: Literal["rank", "critical-path"]  # one rank's work, or fill/drain + dependencies
    rank: int  # the busiest rank
    busy_fraction: float  # its compute time / makespan
    imbalance: float  # its compute time / the mean rank's compute time
    stages: tuple[int, ...]  # the stages it runs
    carries: str  # what those stages hold ("the LM head", module names), '' if unknown
    message: str  # one sentence for people

    def as_dict(self) -> dict:
        out = asdict(self)
        out["stages"] = list(self.stages)
        return out


def limiter(sim: SimResult, profile: Profile) -> Limiter:
    """What bounds the step of the simulated schedule `sim` with costs `profile` (its stages'
    module names or model name describe the busiest rank's stages)."""
    busy = list(sim.busy)
    rank = max(range(len(busy)), key=lambda r: (busy[r], -r))
    mean = sum(busy) / len(busy) if busy else 0.0
    fraction = busy[rank] / sim.makespan if sim.makespan else 0.0
    imbalance = busy[rank] / mean if mean else 1.0
    stages = tuple(sorted({a.stage for a in sim.order[rank]}))
    carries = _carries(profile, stages)
    if imbalance >= IMBALANCE and len(busy) > 1:
        what = f"its stage{'s' if len(stages) > 1 else ''} {', '.join(map(str, stages))}"
        what += f" carr{'y' if len(stages) > 1 else 'ies'} {carries}" if carries else ""
        message = (f"rank {rank} bounds the step: busy {100 * fraction:.0f}% of it, {imbalance:.2f}x the mean "
                   f"rank's work ({what}); no order of this partition is shorter than its work; "
                   "`schedc plan` can move layers off it")
        return Limiter("rank", rank, fraction, imbalance, stages, carries, message)
    idle = 1 - fraction
    message = (f"the ranks' work is balanced (the busiest, rank {rank}, is busy {100 * fraction:.0f}% of the step, "
               f"{imbalance:.2f}x the mean); the step is set by the critical path: its {100 * idle:.0f}% idle is "
               "pipeline fill and drain and waiting on dependencies and communication (more microbatches "
               "amortize it)")
    return Limiter("critical-path", rank, fraction, imbalance, stages, carries, message)


def _carries(profile: Profile, stages: tuple[int, ...]) -> str:
    names = [m for s in stages if s < profile.n_stages for m in (profile.stages[s].modules or [])]
    if names:
        heads = [m for m in names if "head" in m.lower() or m in ("output", "lm_head")]
        embeds = [m for m in names if "embed" in m.lower() or m in ("wte", "tok_embeddings")]
        parts = (["the LM head"] if heads else []) + (["the embedding"] if embeds else [])
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        return " and ".join(parts) + f" ({shown})" if parts else shown
    if (profile.model or "").startswith("transformer"):  # schedc.library.transformer_profile
        parts = (["the LM head and loss"] if profile.n_stages - 1 in stages else []) + (
            ["the embedding"] if 0 in stages else [])
        return " and ".join(parts)
    return ""


def same_hand_made(schedule, candidates) -> str:
    """The name of the first (name, Schedule, ...) candidate whose per-rank action order is
    exactly `schedule`'s, '' if none: a compiled schedule that *is* a hand-made one says so."""
    rows = [schedule.actions(r) for r in range(schedule.n_ranks)]
    for name, other, *_ in candidates:
        if other.n_ranks == schedule.n_ranks and [other.actions(r) for r in range(other.n_ranks)] == rows:
            return name
    return ""
