"""Event simulation of a schedule: when every action starts and ends, and what memory it holds.

Problem: given a schedule (each rank's actions in order) and costs, find the earliest start of
every action such that each rank runs one action at a time in its given order and every data
dependency (docs/design.md) has finished, plus the boundary's communication time when producer and
consumer sit on different ranks. All ranks start the step at time 0.

Method: the earliest-start times are a longest-path computation over the graph "rank order +
data dependencies". We walk it rank by rank: a rank's next action is placed as soon as all its
producers are placed; if no rank can place its next action the schedule deadlocks (a cycle) and
we say which actions wait on which. Memory on a rank changes only through its own actions, so
its curve is the running sum of the ZB paper's deltas in the rank's order: F allocates at its
start, I/W/B release at their end. An overlapped cell (torch's OVERLAP_F_B) starts when the
inputs of all its parts are there, as torch's runtime receives them all first, and its parts
run back to back. Costs are those of the chosen runtime model (``Profile.executed``; torch's by
default: stage 0's I is empty and its W runs the whole backward).

Cost: linear in the actions (a worklist of ranks woken by the actions they wait for).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from schedc.costs import MemoryLimit, Profile
from schedc.errors import SchedcError
from schedc.ir import KINDS, Action, Schedule
from schedc.tolerances import REL


def producers(action: Action, n_stages: int, backward_kind: dict[tuple[int, int], str]) -> list[tuple[Action, int]]:
    """The actions `action` waits for, each with the stage boundary crossed (or -1 for none).

    ``backward_kind[(stage, mb)]`` says whether that stage's backward is split (``"I"``) or
    merged (``"B"``), so that I(s, m) waits on whichever the next stage uses.
    """
    s, m = action.stage, action.microbatch
    if action.kind == "F":
        return [(Action(s - 1, "F", m), s - 1)] if s > 0 else []
    if action.kind in ("I", "B"):
        deps = [(Action(s, "F", m), -1)]
        if s + 1 < n_stages:
            deps.append((Action(s + 1, backward_kind.get((s + 1, m), "I"), m), s))
        return deps
    return [(Action(s, "I", m), -1)]  # W


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
        return all(p <= lim * (1 + REL) + REL for p, lim in zip(self.peak_memory, self.memory_limit))


def simulate(schedule: Schedule, profile: Profile, memory: Optional[MemoryLimit] = None,
             runtime: Optional[str] = None) -> SimResult:
    """Simulate `schedule` with `profile`'s costs as `runtime` executes them (None: the runtime the
    profile already follows, else torch's); `memory` (default none) sets the caps reported."""
    profile = profile.executed(runtime)
    if profile.n_stages != schedule.n_stages:
        raise SchedcError(
            f"the profile describes {profile.n_stages} stages but the schedule has {schedule.n_stages}"
        )
    order = [schedule.actions(r) for r in range(schedule.n_ranks)]
    backward_kind = {(a.stage, a.microbatch): a.kind for row in order for a in row if a.kind in ("I", "B")}
    # actions as plain tuples from here on: they hash in C, where Action's hash runs Python code
    keys = [[(a.stage, a.kind, a.microbatch) for a in row] for row in order]
    where = {k: r for r, row in enumerate(keys) for k in row}
    n_stages = schedule.n_stages
    duration = {(s, k): profile.duration(s, k) for s in range(n_stages) for k in KINDS}
    comm = [profile.comm_after(b) for b in range(n_stages - 1)]

    # torch issues an OVERLAP_F_B cell as one step whose receives all come first, so the cell's
    # first part also waits for what its cell-mates need from outside the cell; the parts then
    # run back to back
    cell_mates: list[dict[int, tuple[tuple, ...]]] = []
    for row in schedule.rows:
        mates, k = {}, 0
        for cell in row:
            if cell is not None:
                if len(cell.parts) > 1:
                    mates[k] = tuple((p.stage, p.kind, p.microbatch) for p in cell.parts)
                k += len(cell.parts)
        cell_mates.append(mates)

    def deps_of(key: tuple) -> list[tuple[tuple, int]]:
        s, kind, m = key
        if kind == "F":
            return [((s - 1, "F", m), s - 1)] if s > 0 else []
        if kind in ("I", "B"):
            if s + 1 < n_stages:
                return [((s, "F", m), -1), ((s + 1, backward_kind.get((s + 1, m), "I"), m), s)]
            return [((s, "F", m), -1)]
        return [((s, "I", m), -1)]  # W

    def consumers_of(key: tuple) -> tuple:
        s, kind, m = key
        if kind == "F":
            return ((s + 1, "F", m), (s, "I", m), (s, "B", m))
        if kind in ("I", "B"):
            return ((s - 1, "I", m), (s - 1, "B", m), (s, "W", m))
        return ()

    # ranks advance as far as their inputs allow; a rank that places an action wakes the ranks
    # that consume it (a worklist: the backward wave of a deep loop pipeline would otherwise take
    # one sweep over all ranks per rank)
    start_of: dict[tuple, float] = {}
    end_of: dict[tuple, float] = {}
    next_index = [0] * schedule.n_ranks
    rank_free = [0.0] * schedule.n_ranks
    remaining = sum(len(row) for row in order)
    queue = deque(range(schedule.n_ranks))
    queued = [True] * schedule.n_ranks
    while queue:
        r = queue.popleft()
        queued[r] = False
        row = keys[r]
        i = next_index[r]
        mates = cell_mates[r]
        while i < len(row):
            key = row[i]
            ready = rank_free[r]
            blocked = False
            cell = mates.get(i) if mates else None
            deps = deps_of(key) if not cell else \
                [(d, b) for part in cell for d, b in deps_of(part) if d not in cell]
            for dep, boundary in deps:
                t = end_of.get(dep)
                if t is None:
                    if dep not in where:
                        raise SchedcError(f"rank {r}: {order[r][i]} needs {Action(*dep)}, which no rank runs")
                    blocked = True
                    break
                crossing = boundary >= 0 and where[dep] != r
                ready = max(ready, t + (comm[boundary] if crossing else 0.0))
            if blocked:
                break
            end = ready + duration[key[0], key[1]]
            start_of[key] = ready
            end_of[key] = end
            rank_free[r] = end
            i += 1
            remaining -= 1
            for c in consumers_of(key):
                q = where.get(c)
                if q is not None and q != r and not queued[q]:
                    queued[q] = True
                    queue.append(q)
        next_index[r] = i
    if remaining:
        raise SchedcError("the schedule deadlocks: " + _describe_wait(order, next_index, where_actions(order),
                                                                      schedule, backward_kind))
    timings = {a: Timing(r, start_of[k], end_of[k]) for r, (row, krow) in enumerate(zip(order, keys))
               for a, k in zip(row, krow)}

    static = [sum(profile.stages[s].static_bytes for s in schedule.stages_of(r)) for r in range(schedule.n_ranks)]
    delta_of = {(s, k): profile.memory_delta(s, k) for s in range(n_stages) for k in KINDS}
    curves, peaks = [], []
    for r, row in enumerate(keys):
        held = static[r]
        curve = [(0.0, held)]
        peak = held
        for key in row:
            delta = delta_of[key[0], key[1]]
            held += delta
            curve.append((start_of[key] if delta > 0 else end_of[key], held))
            peak = max(peak, held)
        curves.append(curve)
        peaks.append(peak)

    limit = (memory or MemoryLimit(kind="none")).per_rank(profile, schedule.placement)
    makespan = max(end_of.values(), default=0.0)
    busy = [sum(end_of[k] - start_of[k] for k in row) for row in keys]
    return SimResult(timings, order, makespan, busy, peaks, curves, limit, profile.runtime)


def where_actions(order: list[list[Action]]) -> dict[Action, int]:
    return {a: r for r, row in enumerate(order) for a in row}


def _describe_wait(order, next_index, where, schedule, backward_kind) -> str:
    parts = []
    for r, row in enumerate(order):
        if next_index[r] < len(row):
            a = row[next_index[r]]
            deps = [str(d) for d, _ in producers(a, schedule.n_stages, backward_kind)]
            parts.append(f"rank {r} waits at {a} (needs {', '.join(deps)})")
        if len(parts) >= 4:
            break
    return "; ".join(parts)


def peak_activation_units(schedule: Schedule, profile: Profile, runtime: Optional[str] = None) -> list[float]:
    """Peak held bytes per rank without static bytes, in multiples of one microbatch of the
    rank's own stages (so 1F1B's rank 0 reads R)."""
    res = simulate(schedule, profile, runtime=runtime)
    out = []
    for r in range(schedule.n_ranks):
        own = schedule.stages_of(r)
        unit = sum(profile.stages[s].activation_bytes for s in own)
        static = sum(profile.stages[s].static_bytes for s in own)
        out.append((res.peak_memory[r] - static) / unit if unit else math.nan)
    return out
