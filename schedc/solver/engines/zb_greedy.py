"""zb-greedy: the zero-bubble paper's simulation-driven greedy, under schedc's cost and memory model.

Problem: order every F, I and W of a pipeline with one stage per rank (any stage -> rank map that
gives each rank exactly one stage; loop placement is the usual one) so that the step is short and
no rank holds more than its memory cap. This is the heuristic of Qi et al., "Zero Bubble Pipeline
Parallelism" (ICLR 2024, section 3.1), re-derived here from the paper's description; it is a
peer schedule the compiler must never be behind, and one of its warm starts.

Method: an event simulation in time order. A rank that becomes free at time t looks at what it
knows then (the end of every action already started, hence when each pending input arrives) and
picks its next action:

* Warm-up (before the rank's first I): as many F's as the memory cap allows. When the next F's
  input arrives too late to finish before the first I could start (estimated from the
  dependency chain when the downstream I is not started yet), flag ``allow_bubble_before_first_b``
  leaves that gap idle instead of delaying the I with one more F.
* Steady state: F and I alternate (1F1B), I first when both are ready. Stage s keeps at least one
  more F than stage s+1 by construction; when it is ahead by more than one, flag ``prioritize_b``
  runs a ready I instead of the F.
* W's fill the rest: when nothing else is ready, when the memory cap blocks the next F
  (W's recycle memory), and at the end. With no F/I ready, a W that would delay the next known
  arrival runs only under ``no_bubble_greedy`` and, as the paper puts it, only if waiting would
  make this rank's accumulated idle time the largest of all ranks; without the flag a W runs
  only when it fits in the gap (or the next arrival is unknown).

All eight flag combinations are built (``greedy_family``); ``zb_greedy`` keeps the best under the
problem's objective by exact re-simulation (schedc.simulate) that fits the memory caps. Costs and
memory deltas are read from ``problem.profile`` / ``problem.duration``, i.e. as the problem's
runtime executes them (torch's stage-0 rule included).

Supports: one stage per rank (any microbatch count, any costs, comm per boundary, any cap that
holds one microbatch per rank). Deadlock-free: the last stage can always run F then I, and a rank
whose cap blocks F still has I's or W's coming, by induction from the last stage.

Cost: O(A log A) per construction for A = 3 x stages x microbatches actions; 8 constructions.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Union

from schedc.core.cost_model import fits_room
from schedc.core.ir import Action, Kind, Schedule
from schedc.core.simulate import SimResult, simulate
from schedc.core.tolerances import REL
from schedc.errors import SchedcError
from schedc.solver.deadline import CHECK_EVERY, Deadline
from schedc.solver.engine import Incumbent, Result, found
from schedc.solver.graph import Graph, graph_of
from schedc.solver.problem import Problem

EPS = REL
NAME = "zb-greedy"


@dataclass(frozen=True)
class Flags:
    allow_bubble_before_first_b: bool
    prioritize_b: bool
    no_bubble_greedy: bool

    def describe(self) -> str:
        return "".join(("b" if self.allow_bubble_before_first_b else "-", "p" if self.prioritize_b else "-",
                        "g" if self.no_bubble_greedy else "-"))


ALL_FLAGS = tuple(Flags(*bits) for bits in itertools.product((False, True), repeat=3))


def supports(problem: Union[Problem, Graph]) -> bool:
    """One stage per rank."""
    if isinstance(problem, Graph):
        return problem.S == problem.R
    return problem.n_stages == problem.n_ranks


class _State:
    """What the simulation knows: end times of started actions, counters, memory per stage."""

    def __init__(self, g: Graph):
        self.g = g
        self.S, self.M = g.S, g.M
        self.rank = g.stage_rank
        self.d, self.mem, self.comm = g.d, g.mem, g.comm
        self.room = [g.room[r] for r in g.stage_rank]
        self.end = {k: [[math.inf] * self.M for _ in range(self.S)] for k in "FI"}
        self.n = {k: [0] * self.S for k in "FIW"}
        self.held = [0.0] * self.S
        self.idle = [0.0] * self.S
        self.free_at = [0.0] * self.S
        self.last_fi = [""] * self.S  # kind of the stage's last F or I

    def arrival(self, kind: str, s: int) -> float:
        """When the inputs of stage s's next `kind` are there (inf: not known yet, or none left)."""
        m = self.n[kind][s]
        if m >= self.M:
            return math.inf
        return self.g.input_time(kind, s, m, self.end[Kind.F], self.end[Kind.I])

    def first_i_estimate(self, s: int) -> float:
        """Earliest stage s's first I can start: known if stage s+1's first I started, else the
        dependency chain from stage s's first F through the later stages and back."""
        known = self.arrival(Kind.I, s)
        if known < math.inf or self.end[Kind.F][s][0] == math.inf:
            return known
        t = self.end[Kind.F][s][0]
        for j in range(s + 1, self.S):
            t = max(t + self.comm[j - 1], self.end[Kind.F][j][0]) + (self.d[Kind.F][j] if self.end[Kind.F][j][0] == math.inf else 0)
        for j in range(self.S - 1, s, -1):
            t += self.d[Kind.I][j] + self.comm[j - 1]
        return t

    def f_fits(self, s: int) -> bool:
        return fits_room(self.held[s] + self.mem[Kind.F][s], self.room[s])


def _decide(st: _State, s: int, t: float, flags: Flags) -> tuple[Optional[str], float]:
    """(kind to run now, or None and the time to look again)."""
    tf, ti = st.arrival(Kind.F, s), st.arrival(Kind.I, s)
    f_ready, i_ready = tf <= t + EPS and st.f_fits(s), ti <= t + EPS
    w_pending = st.n[Kind.W][s] < st.n[Kind.I][s]
    if st.n[Kind.I][s] == 0 and st.n[Kind.F][s] < st.M and st.f_fits(s):
        # warm-up: F's until the first I; the last F before it may cost a bubble (flag)
        est = st.first_i_estimate(s) if not i_ready else t
        if not i_ready and tf <= t + EPS:
            if t + st.d[Kind.F][s] <= est + EPS or est <= t + EPS or not flags.allow_bubble_before_first_b:
                return Kind.F, t
            return None, est
    if i_ready and f_ready:
        ahead = s + 1 < st.S and st.n[Kind.F][s] - st.n[Kind.F][s + 1] > 1
        if flags.prioritize_b and ahead:
            return Kind.I, t
        return (Kind.F if st.last_fi[s] == Kind.I else Kind.I), t
    if i_ready:
        return Kind.I, t
    if f_ready:
        return Kind.F, t
    nxt = min(ti, tf if st.f_fits(s) else math.inf)
    if w_pending:
        blocked = tf < math.inf and not st.f_fits(s)
        gap = nxt - t
        if blocked or gap == math.inf or gap >= st.d[Kind.W][s] - EPS:
            return Kind.W, t
        if flags.no_bubble_greedy and st.idle[s] + gap > max(st.idle) + EPS:
            return Kind.W, t
    return None, nxt


def _construct(g: Graph, flags: Flags, expired: Callable[[], bool] = lambda: False) \
        -> Optional[list[list[Action]]]:
    """Per-rank rows, or None when `expired()` turns true first."""
    st = _State(g)
    rows: list[list[Action]] = [[] for _ in range(g.R)]
    heap = [(0.0, s) for s in range(st.S)]
    waiting_since = [0.0] * st.S
    left = 3 * st.S * st.M
    moments = Moments(heap, st.free_at, expired)
    for t, s in moments:
        kind, again = _decide(st, s, t, flags)
        if kind is None:
            if again < math.inf:
                heapq.heappush(heap, (again, s))
            continue  # otherwise woken when a neighbour finishes something it needs
        st.idle[s] += max(0.0, t - waiting_since[s])
        m = st.n[kind][s] if kind != Kind.W else st.n[Kind.W][s]
        end = t + st.d[kind][s]
        if kind in "FI":
            st.end[kind][s][m] = end
            st.last_fi[s] = kind
        st.n[kind][s] += 1
        st.held[s] += st.mem[kind][s]
        st.free_at[s] = waiting_since[s] = end
        rows[st.rank[s]].append(Action(s, kind, m))
        left -= 1
        heapq.heappush(heap, (end, s))
        for nb in (s - 1, s + 1):  # a neighbour may be waiting for this action's output
            if 0 <= nb < st.S:
                heapq.heappush(heap, (end + st.comm[min(s, nb)], nb))
    if moments.expired:
        return None
    if left:
        raise SchedcError(f"internal error: {NAME} stopped with {left} actions unscheduled; please report it")
    return rows


def to_schedule(problem: Problem, rows: list[list[Action]], flags: Flags, name: str = NAME) -> Schedule:
    """Per-rank rows as a Schedule; a stage without weights runs one B instead of I + W."""
    costs = problem.costs
    out = []
    for row in rows:
        new = []
        for a in row:
            # one B holds what I + W hold only when the I leaves nothing held for the W
            if costs.duration(a.stage, Kind.W) == 0 and costs.weight_grad(a.stage) == 0 and a.kind in "IW":
                if a.kind == Kind.I:  # a stage without weights: its backward is one B
                    new.append(Action(a.stage, Kind.B, a.microbatch))
                continue
            new.append(a)
        out.append(new)
    sched = Schedule(rows=out, placement=tuple(problem.placement), n_microbatches=problem.n_microbatches,
                     name=name, meta={"source": name, "flags": flags.describe()})
    return sched


def greedy_family(problem: Union[Problem, Graph]) -> list[tuple[Flags, Schedule, SimResult]]:
    """All eight flag combinations, each simulated under the problem's costs, runtime and caps."""
    g = graph_of(problem)
    if not supports(g):
        raise SchedcError(f"{NAME} needs one stage per rank; got {g.S} stages on {g.R} ranks")
    return list(_family(g, lambda: False))


def _family(g: Graph, expired: Callable[[], bool]) -> Iterator[tuple[Flags, Schedule, SimResult]]:
    problem = g.problem
    safe = g.safe()  # the greedy checks F's only: rises and transients are kept free (Graph.safe)
    room = [safe.room[r] for r in safe.stage_rank]
    if not all(fits_room(safe.act[s], room[s]) for s in range(safe.S)):
        return  # no room for one microbatch (under the safe accounting): nothing to build
    for flags in ALL_FLAGS:
        rows = _construct(safe, flags, expired)
        if rows is None or expired():
            return
        sched = to_schedule(problem, rows, flags)
        yield flags, sched, simulate(sched, problem.profile, problem.memory)


def zb_greedy(problem: Union[Problem, Graph], objective: Optional[str] = None,
              expired: Callable[[], bool] = lambda: False) -> Optional[tuple[Schedule, SimResult]]:
    """The best member of the family under `objective` (default the problem's) that fits the
    memory caps, or None when the problem is not one stage per rank (or `expired()` turned true
    before all eight were built). Keeps one simulation at a time: memory stays linear."""
    g = graph_of(problem)
    if not supports(g):
        return None
    obj = objective or g.problem.objective
    best = None
    n = 0
    for _, sched, sim in _family(g, expired):
        n += 1
        if sim.fits and (best is None or sim.objective(obj) < best[1].objective(obj)):
            best = (sched, sim)
    return best if n == len(ALL_FLAGS) else None


class ZbGreedy:
    """zb-greedy as an engine (schedc.solver.engine): its best fitting member, or none (not one
    stage per rank, or the deadline passed before all eight were built)."""

    name = NAME

    def run(self, graph: Graph, incumbent: Optional[Incumbent], deadline: Deadline) -> Result:
        best = zb_greedy(graph, expired=deadline.expired)
        return found(*best) if best is not None else Result()


class Moments:
    """The moments of an event simulation, in time order: iterating pops (t, who) from `heap`
    (wake-up times pushed by the caller, several per `who` allowed), skips a wake-up before
    ``free_at[who]`` (`who` is busy then) and yields t raised to ``free_at[who]``. Stops when
    the heap is empty, or early with ``expired`` set when `expired()` turns true (checked every
    CHECK_EVERY pops)."""

    def __init__(self, heap: list, free_at: list[float], expired: Callable[[], bool]):
        self.heap, self.free_at, self.check = heap, free_at, expired
        self.expired = False

    def __iter__(self) -> Iterator[tuple[float, int]]:
        steps = 0
        while self.heap:
            steps += 1
            if steps % CHECK_EVERY == 0 and self.check():
                self.expired = True
                return
            t, who = heapq.heappop(self.heap)
            if t < self.free_at[who] - EPS:
                continue
            yield max(t, self.free_at[who]), who
