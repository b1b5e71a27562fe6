"""Event simulation of a schedule: when every action starts and ends, and what memory it holds.

Problem: given a schedule (each rank's actions in order) and costs, find the earliest start of
every action such that each rank runs one action at a time in its given order and every data
dependency (docs/design.md) has finished, plus the boundary's communication time when producer and
consumer sit on different ranks. All ranks start the step at time 0.

Method: the earliest-start times are a longest-path computation over the graph "rank order +
data dependencies". We walk it rank by rank: a rank's next action is placed as soon as all its
producers are placed, and a rank that waits for a producer is woken when that one is placed; if
no rank can place its next action the schedule deadlocks (a cycle) and we say which actions wait
on which. Memory on a rank changes only through its own actions, so
its curve is the running sum of schedc.core.cost_model's rule in the rank's order: the bytes held all
step, F (and an I that rises) allocates at its start, I/W/B release at their end, transients are
live while their action runs, and an overlap cell counts all its parts' allocations before any
part frees. An overlapped cell (torch's OVERLAP_F_B) starts when the
inputs of all its parts are there, as torch's runtime receives them all first, and its parts
run back to back. Costs are those of the chosen runtime model (``Profile.executed``; torch's by
default: stage 0's I is empty and its W runs the whole backward).

Cost: linear in the number of actions (:func:`walk`: a worklist of ranks woken by the actions
they wait for).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from schedc.core.cost_model import CostModel, fits
from schedc.core.costs import MemoryLimit, Profile
from schedc.errors import SchedcError
from schedc.core.ir import KIND_TABLE, Action, Kind, Schedule, kinds, senders


def producers(action: Action, n_stages: int, backward_kind: dict[tuple[int, int], str]) -> list[tuple[Action, int]]:
    """The actions `action` waits for, each with the stage boundary crossed (or -1 for none).

    ``backward_kind[(stage, mb)]`` says whether that stage's backward is split (``"I"``) or
    merged (``"B"``), so that I(s, m) waits on whichever the next stage uses.
    """
    return [(Action(*key), b) for key, b in producer_keys(action.stage, action.kind, action.microbatch,
                                                           n_stages, backward_kind)]


def producer_keys(s: int, kind: str, m: int, n_stages: int,
                   backward_kind: dict[tuple[int, int], str]) -> list[tuple[tuple[int, str, int], int]]:
    """:func:`producers` as (stage, kind, microbatch) tuples, which hash far faster than Actions.
    The rules are the kind's row of schedc.core.ir.KIND_TABLE: the kinds of its own stage and
    microbatch it comes after, then what it receives from a neighbour (an activation from the
    previous stage's F, a gradient from the next stage's I or B, whichever that stage runs)."""
    info = KIND_TABLE[kind]
    found = [((s, k, m), -1) for k in info.after]
    if info.receives == "activation":
        if s > 0:
            found.append(((s - 1, _ACTIVATION_SENDER, m), s - 1))
    elif info.receives == "gradient" and s + 1 < n_stages:
        found.append(((s + 1, backward_kind.get((s + 1, m), _GRADIENT_SENDER), m), s))
    return found


def backward_kinds(keys) -> dict[tuple[int, int], str]:
    """(stage, microbatch) -> the kind that sends its input gradient (I or B), from
    (stage, kind, microbatch) keys; the first one wins."""
    sending = set(senders("gradient"))
    out: dict[tuple[int, int], str] = {}
    for s, k, m in keys:
        if k in sending:
            out.setdefault((s, m), k)
    return out


# the kinds a receiver waits for when the sender's stage does not say: a forward, a split backward
_ACTIVATION_SENDER = Kind.F
_GRADIENT_SENDER = Kind.I


@dataclass(slots=True)
class Timing:
    rank: int
    start: float
    end: float


@dataclass
class SimResult:
    timings: dict[Action, Timing]
    order: list[list[Action]]  # per rank, execution order
    makespan: float
    busy: list[float]  # per rank: seconds of compute
    peak_memory: list[float]  # per rank, static bytes included
    memory_curve: list[list[tuple[float, float]]]  # per rank: (time, bytes held) steps
    memory_limit: list[float] = field(default_factory=list)  # per rank; inf when uncapped
    runtime: str = "torch"  # the runtime model the costs were executed with

    @property
    def n_ranks(self) -> int:
        return len(self.order)

    @property
    def span_per_rank(self) -> list[float]:
        """Each rank's first-start to last-end (the ZB paper's per-stage time)."""
        spans = []
        for actions in self.order:
            if actions:
                spans.append(self.timings[actions[-1]].end - self.timings[actions[0]].start)
            else:
                spans.append(0.0)
        return spans

    @property
    def span(self) -> float:
        return max(self.span_per_rank)

    @property
    def bubble_per_rank(self) -> list[float]:
        """Idle fraction of each rank over the whole step (makespan)."""
        return [1 - b / self.makespan if self.makespan else 0.0 for b in self.busy]

    @property
    def bubble(self) -> float:
        """Idle fraction of all ranks over the whole step."""
        if not self.makespan:
            return 0.0
        return 1 - sum(self.busy) / (self.n_ranks * self.makespan)

    @property
    def span_bubble(self) -> float:
        """The ZB paper's measure: idle time inside the longest per-rank span, as a fraction."""
        if not self.span:
            return 0.0
        return 1 - sum(self.busy) / (self.n_ranks * self.span)

    def objective(self, name: str) -> float:
        if name == "makespan":
            return self.makespan
        if name == "span":
            return self.span
        raise ValueError(f"objective must be 'makespan' or 'span', got {name!r}")

    @property
    def fits(self) -> bool:
        return not self.ranks_over

    @property
    def ranks_over(self) -> list[int]:
        """The ranks whose peak exceeds their cap (schedc.core.cost_model.fits, the one tolerance)."""
        return [r for r, (p, lim) in enumerate(zip(self.peak_memory, self.memory_limit)) if not fits(p, lim)]


def simulate(schedule: Schedule, profile: Profile, memory: Optional[MemoryLimit] = None,
             runtime: Optional[str] = None) -> SimResult:
    """Simulate `schedule` with `profile`'s costs as `runtime` executes them (None: the runtime the
    profile already follows, else torch's); `memory` (default none) sets the caps reported."""
    profile = profile.executed(runtime)
    if profile.n_stages != schedule.n_stages:
        raise SchedcError(
            f"the profile describes {profile.n_stages} stages but the schedule has {schedule.n_stages}"
        )
    profile.check_step_total(schedule.n_microbatches)
    w = walk(schedule)
    order, actions, rank_of, deps = w.order, w.actions, w.rank_of, w.deps
    dur = {(s, k): profile.duration(s, k) for s in range(profile.n_stages) for k in kinds()}
    comm = [profile.comm_after(b) for b in range(profile.n_stages - 1)]
    start, end = [0.0] * len(actions), [0.0] * len(actions)
    rank_free = [0.0] * schedule.n_ranks
    for i in w.topo:
        r = rank_of[i]
        ready = rank_free[r]
        for d, b in deps[i]:
            t = end[d] + comm[b] if b >= 0 and rank_of[d] != r else end[d]
            if t > ready:
                ready = t
        a = actions[i]
        start[i], end[i] = ready, ready + dur[a.stage, a.kind]
        rank_free[r] = end[i]
    timings = {a: Timing(rank_of[i], start[i], end[i]) for i, a in enumerate(actions)}
    model = CostModel.build(profile, schedule.placement, schedule.n_microbatches, memory)
    curves, peaks = memory_curves(schedule, model, start, end)
    busy, i = [], 0
    for row in order:
        busy.append(sum(end[j] - start[j] for j in range(i, i + len(row))))
        i += len(row)
    makespan = max(end, default=0.0)
    return SimResult(timings, order, makespan, busy, peaks, curves, list(model.caps), profile.runtime)


def memory_curves(schedule: Schedule, model: CostModel, start: list[float],
                  end: list[float]) -> tuple[list[list[tuple[float, float]]], list[float]]:
    """Per rank, the (time, bytes) steps of its memory and its peak, from the actions' start and
    end times (numbered rank by rank, as :func:`walk` numbers them), by schedc.core.cost_model's rule:
    the bytes held all step, then each cell's allocations from its start with its transient on
    top while it runs, its frees at its end."""
    delta = {(s, k): model.held(s, k) for s in range(len(model.placement)) for k in kinds()}
    over_of = {(s, k): model.over(s, k) for s in range(len(model.placement)) for k in kinds()}
    curves, peaks = [], []
    i = 0
    for r, row in enumerate(schedule.rows):
        held = model.fixed[r]
        curve = [(0.0, held)]
        peak = held
        for cell in row:
            if cell is None:
                continue
            parts = cell.parts
            first, last = i, i + len(parts) - 1
            i += len(parts)
            if len(parts) == 1:
                key = (parts[0].stage, parts[0].kind)
                d, top = delta[key], held + over_of[key]
                plain = top == held + max(0.0, d)  # no transient: one step, as the ZB accounting draws it
            else:
                d = sum(delta[a.stage, a.kind] for a in parts)
                top = held + model.cell_over([(a.stage, a.kind) for a in parts])
                plain = top <= max(held, held + d)
            if plain:
                held += d
                curve.append((start[first] if d > 0 else end[last], held))
            else:
                curve.append((start[first], top))
                held += d
                curve.append((end[last], held))
            if top > peak:
                peak = top
            if held > peak:
                peak = held
        curves.append(curve)
        peaks.append(peak)
    return curves, peaks


class Deadlock(SchedcError):
    """The schedule deadlocks; ``unplaced`` holds the actions that could never start."""

    def __init__(self, message: str, unplaced: set):
        super().__init__(message)
        self.unplaced = unplaced


@dataclass
class Walk:
    """A schedule's actions numbered 0..n-1 rank by rank, with what each waits for, in an order
    that runs each after its producers (:func:`walk`)."""

    order: list[list[Action]]  # per rank, the actions in execution order
    actions: list[Action]  # by number: rank 0's in order, then rank 1's, ...
    rank_of: list[int]  # by number
    deps: list[list[tuple[int, int]]]  # by number: (producer's number, boundary crossed or -1)
    topo: list[int]  # every number once, each after its producers and its rank's earlier actions


def walk(schedule: Schedule) -> Walk:
    """Number the actions, find each one's producers (an OVERLAP_F_B cell's first part waits for
    what all its parts need from outside the cell, as torch receives it all first) and walk the
    ranks: a rank runs its next action once its producers have run, and a rank that waits for a
    producer is woken when that one runs, so each action is looked at a bounded number of times:
    linear in the number of actions. Raises :class:`Deadlock` when some actions can never run."""
    order = [schedule.actions(r) for r in range(schedule.n_ranks)]
    actions = [a for row in order for a in row]
    rank_of = [r for r, row in enumerate(order) for _ in row]
    keys = [(a.stage, a.kind, a.microbatch) for a in actions]
    number: dict[tuple[int, str, int], int] = {}
    for i, key in enumerate(keys):
        number.setdefault(key, i)
    backward_kind = backward_kinds(keys)
    n_stages = schedule.n_stages

    deps: list[list[tuple[int, int]]] = []
    for r, row in enumerate(schedule.rows):
        for cell in row:
            if cell is None:
                continue
            parts = cell.parts
            for n, a in enumerate(parts):
                found = producer_keys(a.stage, a.kind, a.microbatch, n_stages, backward_kind)
                if n == 0 and len(parts) > 1:
                    inside = {(p.stage, p.kind, p.microbatch) for p in parts}
                    found = [(key, b) for p in parts
                             for key, b in producer_keys(p.stage, p.kind, p.microbatch, n_stages, backward_kind)
                             if key not in inside]
                ids = []
                for key, b in found:
                    d = number.get(key)
                    if d is None:
                        raise SchedcError(f"rank {r}: {a} needs {Action(*key)}, which no rank runs")
                    ids.append((d, b))
                deps.append(ids)

    first = [0]
    for row in order:
        first.append(first[-1] + len(row))
    done = bytearray(len(actions))
    topo: list[int] = []
    position = first[:-1]  # per rank, the number of its next action
    waiting: dict[int, list[int]] = {}  # an action's number -> ranks whose next action needs it
    queue = deque(range(len(order)))
    while queue:
        r = queue.popleft()
        i, stop = position[r], first[r + 1]
        while i < stop:
            missing = next((d for d, _ in deps[i] if not done[d]), -1)
            if missing >= 0:
                waiting.setdefault(missing, []).append(r)
                break
            done[i] = 1
            topo.append(i)
            woken = waiting.pop(i, None)
            if woken:
                queue.extend(woken)
            i += 1
        position[r] = i
    if len(topo) < len(actions):
        next_index = [position[r] - first[r] for r in range(len(order))]
        raise Deadlock("the schedule deadlocks: " + _describe_wait(order, next_index, n_stages, backward_kind),
                       {a for i, a in enumerate(actions) if not done[i]})
    return Walk(order, actions, rank_of, deps, topo)


def _describe_wait(order, next_index, n_stages, backward_kind) -> str:
    parts = []
    for r, row in enumerate(order):
        if next_index[r] < len(row):
            a = row[next_index[r]]
            deps = [str(d) for d, _ in producers(a, n_stages, backward_kind)]
            parts.append(f"rank {r} waits at {a} (needs {', '.join(deps)})")
        if len(parts) >= 4:
            break
    return "; ".join(parts)


def peak_activation_units(schedule: Schedule, profile: Profile, runtime: Optional[str] = None) -> list[float]:
    """Peak held bytes per rank without static bytes, in multiples of one microbatch of the
    rank's own stages (so 1F1B's rank 0 reads R)."""
    res = simulate(schedule, profile, runtime=runtime)
    model = CostModel.build(profile.executed(runtime), schedule.placement, schedule.n_microbatches)
    out = []
    for r, fixed in enumerate(model.fixed):
        unit = sum(model.activation(s) for s in model.stages_of(r))
        out.append((res.peak_memory[r] - fixed) / unit if unit else math.nan)
    return out
