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

import bisect
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Optional, Protocol

from schedc.core import cost_model
from schedc.core.cost_model import CostModel, fits
from schedc.core.costs import MemoryLimit, Profile, StageCost
from schedc.core.host_link import HostLink, offload_bytes
from schedc.core.ir import KIND_TABLE, Action, Kind, Schedule, kinds, senders
from schedc.core.memory_actions import MemoryAction, check_memory_actions
from schedc.errors import SchedcError


def producers(action: Action, n_stages: int, backward_kind: dict[tuple[int, int], str]) -> list[tuple[Action, int]]:
    """The actions `action` waits for, each with the stage boundary crossed (or -1 for none).

    ``backward_kind[(stage, mb)]`` says whether that stage's backward is split (``"I"``) or
    merged (``"B"``), so that I(s, m) waits on whichever the next stage uses.
    """
    return [(Action(*key), b) for key, b in producer_keys(action.stage, action.kind, action.microbatch,
                                                           n_stages, backward_kind)]


class BackwardKinds(Protocol):
    """(stage, microbatch) -> "I" or "B": a dict, or schedc.solver.graph's one entry per stage."""

    def get(self, key: tuple[int, int], default: str, /) -> str: ...


def producer_keys(s: int, kind: str, m: int, n_stages: int,
                   backward_kind: BackwardKinds) -> list[tuple[tuple[int, str, int], int]]:
    """:func:`producers` as (stage, kind, microbatch) tuples, which hash far faster than Actions.
    The rules are the kind's row of schedc.core.ir.KIND_TABLE: the kinds of its own stage and
    microbatch it comes after, then what it receives from a neighbour (an activation from the
    previous stage's F, a gradient from the next stage's I or B, whichever that stage runs)."""
    info = KIND_TABLE[kind]
    after, receives = info.after, info.receives
    # called once per action of a walk: no comprehension for the usual zero or one local input
    found = [] if not after else [((s, after[0], m), -1)] if len(after) == 1 else [((s, k, m), -1) for k in after]
    if receives == "activation":
        if s > 0:
            found.append(((s - 1, _ACTIVATION_SENDER, m), s - 1))
    elif receives == "gradient" and s + 1 < n_stages:
        found.append(((s + 1, backward_kind.get((s + 1, m), _GRADIENT_SENDER), m), s))
    return found


def backward_kinds(keys) -> dict[tuple[int, int], str]:
    """(stage, microbatch) -> the kind that sends its input gradient (I or B), from
    (stage, kind, microbatch) keys; where a schedule has both, the later one."""
    sending = frozenset(senders("gradient"))
    return {(s, m): k for s, k, m in keys if k in sending}


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
    runtime: Optional[str] = "torch"  # the runtime model the costs were executed with (None: the profile names none)
    # with memory actions: every transfer on the copy streams, and per node the pinned host
    # memory they held at most against its cap
    copies: list["Copy"] = field(default_factory=list)
    host_peak: list[float] = field(default_factory=list)
    host_memory: float = math.inf

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
        return not self.ranks_over and not self.nodes_over

    @property
    def nodes_over(self) -> list[int]:
        """The nodes whose offloaded microbatches held more pinned host memory than its cap."""
        return [n for n, p in enumerate(self.host_peak) if not fits(p, self.host_memory)]

    def link_busy(self, rank: int, direction: str) -> float:
        """The fraction of the step `rank`'s copy stream in `direction` ("out" or "in") moved data."""
        busy = sum(c.end - c.start for c in self.copies if c.rank == rank and c.direction == direction)
        return busy / self.makespan if self.makespan else 0.0

    @property
    def ranks_over(self) -> list[int]:
        """The ranks whose peak exceeds their cap (schedc.core.cost_model.fits, the one tolerance)."""
        return [r for r, (p, lim) in enumerate(zip(self.peak_memory, self.memory_limit)) if not fits(p, lim)]


def simulate(schedule: Schedule, profile: Profile, memory: Optional[MemoryLimit] = None,
             runtime: Optional[str] = None, *, memory_actions=None, link: Optional[HostLink] = None,
             recompute: Optional[Profile] = None) -> SimResult:
    """Simulate `schedule` with `profile`'s costs as `runtime` executes them (None: the runtime the
    profile already follows, else torch's); `memory` (default none) sets the caps reported.

    ``memory_actions`` (schedc.core.memory_actions: parsed, or their JSON list) offload or
    recompute chosen microbatches: an offload's copies run on the rank's copy streams over `link`
    (default :class:`~schedc.core.host_link.HostLink`), its backward waits for its fetch, the F
    its ``room_for`` names waits for its copy out, and its bytes are off the device from the end
    of its copy out to the start of its fetch; a recompute runs with `recompute`'s costs for that
    stage (the profile as the stages run checkpointed, e.g. ``--ac full``'s), which it then
    needs (default: the ``recompute`` of a PlannedActions read from a plan that records them)."""
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
    if recompute is None:  # the checkpointed costs a plan file recorded with its actions
        recompute = getattr(memory_actions, "recompute", None)
    moves = _MemoryActionTimes.of(schedule, profile, memory_actions, link, recompute) if memory_actions else None
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
        if moves is None:
            start[i], end[i] = ready, ready + dur[a.stage, a.kind]
        else:
            ready = moves.ready(a, ready)
            start[i], end[i] = ready, ready + moves.duration(a, dur[a.stage, a.kind])
            moves.placed(i, a, r, start[i], end[i])
        rank_free[r] = end[i]
    timings = {a: Timing(rank_of[i], start[i], end[i]) for i, a in enumerate(actions)}
    model = CostModel.build(profile, schedule.placement, schedule.n_microbatches, memory)
    if moves is None:
        curves, peaks = memory_curves(schedule, model, start, end)
    else:
        curves, peaks = memory_curves(schedule, model, start, end, moves.recomputed, moves.device_events())
    busy, i = [], 0
    for row in order:
        busy.append(sum(end[j] - start[j] for j in range(i, i + len(row))))
        i += len(row)
    makespan = max(end, default=0.0)
    result = SimResult(timings, order, makespan, busy, peaks, curves, list(model.caps), profile.runtime)
    if moves is not None:
        result.copies = moves.copies
        result.host_peak = moves.host_peaks()
        result.host_memory = moves.link.host_memory
    return result


@dataclass(frozen=True, slots=True)
class Copy:
    """One transfer on a rank's copy stream: an offloaded microbatch's activations going to host
    memory after its F or I (``"out"``) or coming back from its fetch point (``"in"``)."""

    rank: int
    stage: int
    microbatch: int
    direction: str  # "out" (device to host) or "in" (host to device)
    start: float
    end: float
    nbytes: float
    after: str = "F"  # the bytes between F and I (or B), or between I and W


class _MemoryActionTimes:
    """The copy streams of :func:`simulate` with memory actions (schedc.core.host_link's rules).

    The walk places actions in an order that runs each after its producers and its rank's earlier
    actions; the copies follow from what is placed: an offloaded F's end (an I's, for an offload
    after I) issues its copy out (the rank's device-to-host stream, first in first out), the start
    of a fetch point issues its fetches (host-to-device, first in first out, each after its own
    copy out; several at one point in the order their backwards run), the backward (the W, after
    I) waits for its fetch, and an F named as an offload's ``room_for`` for that copy out. Linear
    in the actions plus the copies."""

    def __init__(self, schedule: Schedule, profile: Profile, chosen: dict[tuple[int, int], MemoryAction],
                 link: HostLink, recomputed: dict[tuple[int, int], StageCost]):
        self.link = link
        self.placement = schedule.placement
        self.recomputed = recomputed
        self.offloaded = {key: ma for key, ma in chosen.items() if ma.action == "offload"}
        # each move of an offload: (stage, microbatch, phase), phase "F" from F to I (or B), "I"
        # from I to W (an offload after I, or the second move of one with a refetch) -> the action
        # whose end issues the copy out, the fetch point, and the action that waits for the fetch
        self.moves: dict[tuple[int, int, str], tuple[Action, Action, Action]] = {}
        position = {a: k for rank in range(schedule.n_ranks) for k, a in enumerate(schedule.actions(rank))}
        for (s, m), ma in self.offloaded.items():
            assert ma.fetch_at is not None, "check_memory_actions fills every offload's fetch_at"
            grads, weights = Action(s, Kind.I, m), Action(s, Kind.W, m)
            if ma.after == "I":
                self.moves[(s, m, "I")] = (grads, ma.fetch_at, weights)
                continue
            backward = grads if grads in position else Action(s, Kind.B, m)
            self.moves[(s, m, "F")] = (Action(s, Kind.F, m), ma.fetch_at, backward)
            if ma.refetch_at is not None:
                self.moves[(s, m, "I")] = (grads, ma.refetch_at, weights)
        self.nbytes = {move: self.offloaded[move[:2]].fraction * offload_bytes(profile, move[0])
                       for move in self.moves}
        self.issues = {after: move for move, (after, _, _) in self.moves.items()}  # an action -> the copy it issues
        self.fetched_for = {waiter: move for move, (_, _, waiter) in self.moves.items()}
        self.fetches_at: dict[Action, list[tuple[int, int, str]]] = {}
        for move, (_, fetch, _) in self.moves.items():
            self.fetches_at.setdefault(fetch, []).append(move)
        for moves in self.fetches_at.values():
            moves.sort(key=lambda move: position[self.moves[move][2]])  # in the order their waiters run
        self.waits: dict[Action, list[tuple[int, int, str]]] = {}  # an F -> the copies out it waits for
        for (s, m), ma in self.offloaded.items():
            if ma.room_for is not None:
                self.waits.setdefault(ma.room_for, []).append((s, m, "F"))
        self.out_index: dict[tuple[int, int, str], int] = {}  # a move -> its copy out's index
        self.out_free = [0.0] * schedule.n_ranks
        self.in_free = [0.0] * schedule.n_ranks
        self.out_end: dict[tuple[int, int, str], float] = {}
        self.in_end: dict[tuple[int, int, str], float] = {}
        self.copies: list[Copy] = []
        # a fetch that starts with its fetch point, or a copy out an F waited for: copy's index ->
        # the action's walk number
        self.issued_with: dict[int, int] = {}

    @classmethod
    def of(cls, schedule: Schedule, profile: Profile, memory_actions, link: Optional[HostLink],
           recompute: Optional[Profile]) -> "_MemoryActionTimes":
        chosen = check_memory_actions(memory_actions, schedule)
        recomputed: dict[tuple[int, int], StageCost] = {}
        keys = [key for key, ma in chosen.items() if ma.action == "recompute"]
        if keys:
            if recompute is None:
                raise SchedcError("memory actions recompute some microbatches, but no costs of the stages "
                                  "checkpointed were given: give the plan that chose them (it records them in "
                                  "\"offload\".\"recompute_profile\"), or from Python recompute= the profile as "
                                  "the stages run checkpointed (e.g. --ac full's)")
            recompute = recompute.executed(profile.runtime)
            if recompute.n_stages != profile.n_stages:
                raise SchedcError(f"the recompute profile describes {recompute.n_stages} stages but the schedule "
                                  f"has {profile.n_stages}")
            recomputed = {key: recompute.stages[key[0]] for key in keys}
        return cls(schedule, profile, chosen, link or HostLink(), recomputed)

    def duration(self, a: Action, default: float) -> float:
        c = self.recomputed.get((a.stage, a.microbatch))
        return default if c is None else KIND_TABLE[a.kind].seconds(c)

    def ready(self, a: Action, ready: float) -> float:
        if a.kind == Kind.F and a in self.waits:
            return max([ready] + [self.out_end[key] for key in self.waits[a]])
        move = self.fetched_for.get(a)
        if move is not None:
            fetched = self.in_end.get(move)
            if fetched is not None and fetched > ready:
                return fetched
        return ready

    def placed(self, number: int, a: Action, rank: int, start: float, end: float) -> None:
        for key in self.fetches_at.get(a, ()):
            begin = max(start, self.in_free[rank], self.out_end[key])
            self._copy(rank, key, "in", begin)
            self.in_end[key] = self.in_free[rank]
            if begin == start:
                self.issued_with[len(self.copies) - 1] = number
        for key in self.waits.get(a, ()):
            if self.out_end[key] == start:  # it waited for this copy: its bytes leave before the F's rise
                self.issued_with[self.out_index[key]] = number
        move = self.issues.get(a)
        if move is not None:
            self._copy(rank, move, "out", max(end, self.out_free[rank]))
            self.out_end[move] = self.out_free[rank]
            self.out_index[move] = len(self.copies) - 1

    def _copy(self, rank: int, move: tuple[int, int, str], direction: str, begin: float) -> None:
        n = self.nbytes[move]
        finish = begin + self.link.seconds(n)
        self.copies.append(Copy(rank, move[0], move[1], direction, begin, finish, n, move[2]))
        if direction == "out":
            self.out_free[rank] = finish
        else:
            self.in_free[rank] = finish

    def device_events(self) -> list[list[tuple[float, float, Optional[int]]]]:
        """Per rank, (time, change of held bytes, the walk number of the action it starts with
        or None) of the copies: the bytes leave the device when the copy out ends (before the F
        that waited for it), and are back when the fetch starts."""
        out: list[list[tuple[float, float, Optional[int]]]] = [[] for _ in self.out_free]
        for k, c in enumerate(self.copies):
            if c.direction == "out":
                out[c.rank].append((c.end, -c.nbytes, self.issued_with.get(k)))
            else:
                out[c.rank].append((c.start, c.nbytes, self.issued_with.get(k)))
        return out

    def host_peaks(self) -> list[float]:
        """Per node, the most pinned host memory the copies held: each from its copy out's start
        to its fetch's end."""
        n_nodes = self.link.node_of(len(self.out_free) - 1) + 1
        events: list[list[tuple[float, int, float]]] = [[] for _ in range(n_nodes)]
        for c in self.copies:
            node = self.link.node_of(c.rank)
            if c.direction == "out":
                events[node].append((c.start, 0, c.nbytes))
            else:
                events[node].append((c.end, 1, -c.nbytes))
        peaks = []
        for node_events in events:
            held = peak = 0.0
            for _, _, change in sorted(node_events):
                held += change
                peak = max(peak, held)
            peaks.append(peak)
        return peaks


def memory_curves(schedule: Schedule, model: CostModel, start: list[float], end: list[float],
                  recomputed: Optional[dict[tuple[int, int], StageCost]] = None,
                  copy_events: Optional[list[list[tuple[float, float, Optional[int]]]]] = None,
                  ) -> tuple[list[list[tuple[float, float]]], list[float]]:
    """Per rank, the (time, bytes) steps of its memory and its peak, from the actions' start and
    end times (numbered rank by rank, as :func:`walk` numbers them), by schedc.core.cost_model's rule:
    the bytes held all step, then each cell's allocations from its start with its transient on
    top while it runs, its frees at its end. ``recomputed`` gives the costs of the (stage,
    microbatch) pairs that run checkpointed; ``copy_events`` per rank the (time, change, walk
    number of the action a fetch starts with) of the copy streams, merged in on the safe side: a
    fetch's bytes count before what the actions do at the same moment (a fetch issued with its
    fetch point: just before that action's step, after what ended before it), a copy out's leave
    after it."""
    delta = {(s, k): model.held(s, k) for s in range(len(model.placement)) for k in kinds()}
    over_of = {(s, k): model.over(s, k) for s in range(len(model.placement)) for k in kinds()}
    recomputed = recomputed or {}
    curves, peaks = [], []
    entry: dict[int, int] = {}  # with copies: a cell's first action's number -> its first step's index
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
            if copy_events:
                for k in range(first, last + 1):
                    entry[k] = len(curve)
            if recomputed and any((a.stage, a.microbatch) in recomputed for a in parts):
                costs = [(recomputed.get((a.stage, a.microbatch), model.profile.stages[a.stage]), a.kind)
                         for a in parts]
                d = sum(cost_model.held_delta(c, k) for c, k in costs)
                top = held + (cost_model.over(*costs[0]) if len(costs) == 1 else cost_model.cell_over(costs))
                plain = top == held + max(0.0, d) if len(costs) == 1 else top <= max(held, held + d)
            elif len(parts) == 1:
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
        if copy_events and copy_events[r]:
            curve, peak = _merge_copies(curve, copy_events[r], entry)
        curves.append(curve)
        peaks.append(peak)
    return curves, peaks


def _merge_copies(curve: list[tuple[float, float]], events: list[tuple[float, float, Optional[int]]],
                  entry: dict[int, int]) -> tuple[list[tuple[float, float]], float]:
    """A rank's curve with the copy streams' changes merged in by time (:func:`memory_curves`):
    steps sort by (time, group, position); the actions' steps are group 0 in their order, a fetch
    issued with its fetch point sits just before that action's first step, another fetch before
    every step at its time (group -1), a copy out's end after them (group 1), but one an F waited
    for, which sits just before that F's first step."""
    steps = [(t, 0, float(k), level - curve[k - 1][1] if k else level) for k, (t, level) in enumerate(curve)]
    for t, change, number in events:
        if change < 0 and number is None:
            steps.append((t, 1, 0.0, change))
        elif number is not None:
            steps.append((t, 0, entry[number] - 0.5, change))
        else:
            steps.append((t, -1, 0.0, change))
    steps.sort(key=lambda step: step[:3])
    held, merged = 0.0, []
    for t, _, _, change in steps:
        held += change
        merged.append((t, held))
    return merged, max(level for _, level in merged)


class Deadlock(SchedcError):
    """The schedule deadlocks; ``unplaced`` holds the actions that could never start, ``stuck``
    the part of them a cycle lies in (:func:`walk`)."""

    def __init__(self, message: str, unplaced: set, stuck: Optional[set] = None):
        super().__init__(message)
        self.unplaced = unplaced
        self.stuck = unplaced if stuck is None else stuck


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
    keys: list[tuple[int, str, int]] = [(a.stage, a.kind, a.microbatch) for a in actions]
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
    for acts in order:
        first.append(first[-1] + len(acts))
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
                       {a for i, a in enumerate(actions) if not done[i]}, _stuck(actions, first, position, deps, done))
    return Walk(order, actions, rank_of, deps, topo)


def _stuck(actions, first, position, deps, done) -> set:
    """Where a deadlock's cycle lies, far fewer actions than all that never start: on every rank
    its next action up to the last one some rank's next action waits for. Every rank left waits
    at its next action for a producer at or after another rank's next action; following those
    waits from rank to rank must come back to a rank already seen, and each step of that circle
    is a run of one rank's actions (all inside the set) ended by the data edge to the next.
    Cost: O(ranks + the set)."""
    n_ranks = len(first) - 1
    last = [position[r] for r in range(n_ranks)]
    for r in range(n_ranks):
        if position[r] < first[r + 1]:
            missing = next(d for d, _ in deps[position[r]] if not done[d])
            q = bisect.bisect_right(first, missing) - 1  # the rank whose numbers hold it
            last[q] = max(last[q], missing)
    return {actions[i] for r in range(n_ranks) if position[r] < first[r + 1] for i in range(position[r], last[r] + 1)}


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
