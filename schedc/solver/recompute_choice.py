"""Recompute chosen per microbatch: which microbatches of a fixed order run their stage's
forward again inside the backward, so that every rank fits its cap (alone, or with offload).

Problem: a short order over the cap (the uncapped optimum, a discounted compile) holds many
microbatches on its early ranks, and its first forwards make bytes faster than a host link moves
them (schedc.solver.offload_fractions: on 7-8B decoders at 4096 tokens a 50 GB/s copy of one
microbatch takes about as long as its F, I and W together). Checkpointing a whole stage
(``--ac``) pays the recompute on every microbatch; Megatron-core's
``num_microbatches_with_partial_activation_checkpoints`` pays it on a count of them, one count
for every rank. Which ones, and how many on each rank, decides what it costs: a microbatch held
across a rank's peak frees its bytes there, one held elsewhere frees nothing.

Method (:func:`choose_recompute`), one simulation per round (schedc.core.simulate with the
recomputed microbatches as ``"recompute"`` memory actions and the checkpointed costs): on each
rank over its cap, at the moment of its peak, of the microbatches of its stages held then (F
ended, its last backward action not started: the last stage's bytes wait for a deferred W) the
one held longest is recomputed. Its backward then runs whole as B at its I's place (its W dropped):
torch's split backward of a checkpointed graph recomputes the forward in I and again in W, which
:mod:`schedc.core.memory_actions` refuses. It costs the checkpointed stage's B instead of I + W
(one more forward) and holds what the checkpointed stage keeps (its input). A pick that raises
the rank's peak is undone and not tried again. It stops when every rank fits or no rank over its
cap holds a candidate at its peak.

:func:`recompute_then_offload` mixes the two levers: the recomputes that alone make the order fit,
in the order chosen, are cut to their first 1/4, 1/2 and 3/4 and the rest of the excess is left
to offload (schedc.solver.offload_fractions' shares chooser with those recomputes fixed); the
shortest fitting mix wins, the recomputes alone included (offload alone is the shares chooser's
own answer, which schedc.solver.offload.best_offload runs first). Recompute costs compute where the link
is too slow (a rank's first forwards), offload costs nothing where it keeps up.

The checkpointed costs are per stage (``checkpointed``, schedc.planning.ac.checkpointed_form of
the ``--ac full`` units): the runtime (schedc.runtime.offload) checkpoints the whole stage module
for such a microbatch and keeps only its input, which is no more than full checkpointing's block
inputs, so the memory is counted on the safe side.

Cost: at most S x M rounds of one simulation each, O(A + copies) for A actions, usually a few per
rank over its cap (one pick per such rank per round), each charged a pass under a work budget
(schedc.solver.deadline); :func:`recompute_then_offload` adds three runs of the shares chooser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from schedc.core.costs import MemoryLimit, Profile
from schedc.core.host_link import HostLink
from schedc.core.ir import Action, Cell, Kind, Overlap, Schedule
from schedc.core.memory_actions import MemoryAction, to_json
from schedc.core.simulate import SimResult, simulate
from schedc.solver.deadline import NEVER, Deadline, charge_passes
from schedc.solver.offload_fractions import choose_fractions, peak_time

MIX_SHARES = (0.25, 0.5, 0.75)  # of the recomputes that alone fit, kept when offload takes the rest


@dataclass(frozen=True)
class RecomputeChoice:
    """The order with the recomputed microbatches' backwards whole (``schedule``), its memory
    actions (the recomputes, then any offloads), the simulation with them, whether it fits and,
    when it does not, why not."""

    schedule: Schedule
    actions: tuple[MemoryAction, ...]
    sim: SimResult
    fits: bool
    why: str = ""

    @property
    def recomputed(self) -> list[tuple[int, int]]:
        return [(a.stage, a.microbatch) for a in self.actions if a.action == "recompute"]

    def to_json(self) -> list[dict]:
        return to_json(self.actions)


def run_as_b(schedule: Schedule, keys) -> Schedule:
    """`schedule` with the backward of every (stage, microbatch) in `keys` whole: B at its I's
    place, its W dropped (a B stays as it is)."""
    keys = set(keys)
    if not keys:
        return schedule

    def part(a: Action) -> Optional[Action]:
        if (a.stage, a.microbatch) not in keys:
            return a
        if a.kind == Kind.I:
            return Action(a.stage, Kind.B, a.microbatch)
        return None if a.kind == Kind.W else a

    rows = []
    for row in schedule.rows:
        out: list[Cell] = []
        for cell in row:
            if cell is None:
                out.append(None)
                continue
            parts = tuple(p for p in map(part, cell.parts) if p is not None)
            if len(parts) > 1:
                out.append(Overlap(parts, cell.label) if isinstance(cell, Overlap) else Overlap(parts))
            elif parts:
                out.append(parts[0])
        rows.append(out)
    return Schedule(rows=rows, placement=schedule.placement, n_microbatches=schedule.n_microbatches,
                    name=schedule.name, meta=dict(schedule.meta))


def _held_longest(schedule: Schedule, sim: SimResult, rank: int, skip: set) -> Optional[tuple[int, int]]:
    """Of `rank`'s microbatches whose bytes are held at its peak in `sim` (F ended, its last
    backward action, W where the backward is split, not started), the one held longest; None
    when none is."""
    t_peak = peak_time(sim, rank)
    row = schedule.actions(rank)
    released = {(a.stage, a.microbatch): a for a in row if a.kind in (Kind.I, Kind.B, Kind.W)}  # the last of them
    best, held = None, -math.inf
    for a in row:
        key = (a.stage, a.microbatch)
        if a.kind != Kind.F or key in skip or key not in released:
            continue
        f_end, until = sim.timings[a].end, sim.timings[released[key]].start
        if f_end <= t_peak < until and until - f_end > held:
            best, held = key, until - f_end
    return best


def choose_recompute(schedule: Schedule, profile: Profile, checkpointed: Profile, memory: Optional[MemoryLimit],
                     runtime: Optional[str] = None, deadline: Deadline = NEVER) -> RecomputeChoice:
    """The microbatches of `schedule` to recompute so that it fits `memory` (module docstring);
    `profile` the stages' costs as they run without checkpointing, `checkpointed` as they run
    checkpointed (the same stages), `runtime` as :func:`schedc.core.simulate.simulate` takes them.
    Stops at `deadline` with what it chose so far (then it fits only if that is enough)."""
    size = sum(len(schedule.actions(r)) for r in range(schedule.n_ranks))
    chosen: list[tuple[int, int]] = []
    refused: set[tuple[int, int]] = set()

    def run(keys: Sequence[tuple[int, int]]) -> tuple[Schedule, SimResult]:
        merged = run_as_b(schedule, keys)
        charge_passes(size)
        actions = [MemoryAction(s, m, "recompute") for s, m in keys]
        return merged, simulate(merged, profile, memory, runtime, memory_actions=actions or None,
                                recompute=checkpointed)

    merged, sim = run(chosen)
    for _ in range(schedule.n_stages * schedule.n_microbatches + 1):
        if sim.fits or deadline.expired():
            break
        picks = [k for r in sim.ranks_over if (k := _held_longest(merged, sim, r, set(chosen) | refused)) is not None]
        if not picks:
            break
        tried_merged, tried = run(chosen + picks)
        worse = [k for k in picks if tried.peak_memory[schedule.placement[k[0]]] > sim.peak_memory[schedule.placement[k[0]]]]
        refused.update(worse)
        kept = [k for k in picks if k not in worse]
        if not kept:
            continue
        chosen += kept
        merged, sim = (tried_merged, tried) if not worse else run(chosen)
    actions = tuple(MemoryAction(s, m, "recompute") for s, m in chosen)
    why = "" if sim.fits else (
        "the time limit ended the search" if deadline.expired() else
        f"rank(s) {', '.join(map(str, sim.ranks_over))} stay over the cap with every microbatch held at their "
        f"peak recomputed")
    return RecomputeChoice(merged, actions, sim, sim.fits, why)


def recompute_then_offload(schedule: Schedule, profile: Profile, checkpointed: Profile,
                           memory: Optional[MemoryLimit], link: HostLink, runtime: Optional[str] = None,
                           objective: str = "makespan", deadline: Deadline = NEVER) -> Optional[RecomputeChoice]:
    """The shortest fitting mix of recompute and offload for `schedule` (module docstring), or
    None when not even recomputing fits."""
    alone = choose_recompute(schedule, profile, checkpointed, memory, runtime, deadline)
    if not alone.fits:
        return None
    best = alone
    keys = alone.recomputed
    for share in MIX_SHARES:
        if deadline.expired():
            break
        kept = keys[:int(share * len(keys))]
        fixed = tuple(MemoryAction(s, m, "recompute") for s, m in kept)
        merged = run_as_b(schedule, kept)
        shares = choose_fractions(merged, profile, memory, link, runtime, deadline, fixed=fixed,
                                  recompute=checkpointed)
        if shares.sim.fits and shares.sim.objective(objective) < best.sim.objective(objective):
            best = RecomputeChoice(merged, fixed + shares.actions, shares.sim, True)
    return best
