"""Cool-down re-listing: keep a schedule's order up to each rank's last F, then run the rest greedily.

Problem: a hand-made schedule (ZB-V above all) fixes the order of every rank's cool-down, the
I's and W's it still owes after its last F, in the pattern of its steady state (I then W).
On slow links that pattern makes the ranks that finish last wait: the backward chain of the
last microbatches reaches them late, because every rank before them spends time on W's that
could wait while the I that the next rank needs is ready.

Method: an event simulation in time order (as :mod:`schedc.solver.engines.zb_greedy`). Each rank runs its
given order up to and including its last F (each action starting when its inputs are there);
after that, whenever it is free, it runs a ready backward (I or B, the first in its given
order), else a W it owes (the first in its given order: a W delays nothing but its own rank),
else waits for the next input. One parameter, ``last``: a rank that could start a W waits
instead when the input of an I of one of the last ``last`` microbatches arrives within one W
(their chain back to stage 0 decides the step's end; the W runs later, in the rank's own idle
tail). The family tries ``last`` in LAST_MICROBATCHES and keeps the best; the best ``last`` grows
with the ranks. Also tried and dropped: the highest stage's ready I first, waiting for any I
that arrives within one W, and re-listing from an earlier F on with this family's W rule alone
(F's delayed; with the two rules below it is the second family). Measured: docs/design.md,
"Cool-down re-listing".

A second family re-lists more (``from_lowest``), and is what closes the gap at scale. With
communication, the descending stream of I's (stage S-1 down to the middle rank) and the
ascending one (back to stage 0) cross on every rank; in ZB-V's order the last microbatches' I's
leave each rank in lock-step pairs, one round trip to the neighbour per microbatch (2 I's +
2 transfers = 2.5 at comm 0.25F instead of 2), so the middle rank, the one with the lower bound's
warm-up idle and no slack left, idles 0.5 per microbatch at the end. The second family keeps each rank's order only up to its last F of its
LOWEST stage; the later F's (of its higher stage, which feed the descending stream) join the
re-listed backwards, first ready in the given order first. And a W gives way to an I of the last
microbatches only while the rank can afford the wait: when the wait still leaves the rank's
remaining work ending by the lower bound (``target``); the ranks near the middle, which cannot,
run the W. The third family is the second with a reserve: a rank waits only while its remaining
work still ends one round trip to a neighbour (2 x the largest transfer) before the bound (tried
from the second family's best ``last`` on; skipped without communication). The schedule, not the
bound, was the loose side: CP-SAT proves the lower bound optimal on a small V. Each family's
gap to the bound, measured: docs/design.md, "Cool-down re-listing".

Memory: after a rank's last F its held bytes only fall when each I frees at least what its
weight gradient holds (the usual case). The second family moves F's: each rank's running sum
of bytes (as simulate() counts it, in row order) is kept, an F that would pass the rank's room
waits, and a W the rank owes runs first to free the bytes (ZB-V sits at the cap at 1p, so
without this the moved F's go over it). Every result is re-simulated and dropped when it does
not fit the caps, so the caps always hold.

Cost: O(A log A) for A actions per member (one construction; a rank scans its re-listed
actions at each of its moments, so the second family's longer lists cost more), up to len(LAST_MICROBATCHES) members per family (each family
stops after two members in a row no better than its best, and all once one meets the lower
bound), then one simulation (more only when the best is over the caps); memory O(A) per member
(each keeps its rows of references to the given actions until the best is chosen).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from schedc.core.cost_model import fits_room
from schedc.core.ir import Action, Kind, Schedule
from schedc.core.simulate import SimResult, simulate
from schedc.core.tolerances import REL
from schedc.errors import SchedcError
from schedc.solver.bounds.chains import lower_bound
from schedc.solver.engines.zb_greedy import Moments
from schedc.solver.graph import Graph, graph_of
from schedc.solver.problem import Problem

EPS = REL
NAME = "cooldown"
# the family's parameter, tried in this order until two in a row do no better than the best:
# how many of the last microbatches have I's that a W gives way to
LAST_MICROBATCHES = (0, 1, 2, 4, 8, 12, 16, 24, 32, 48, 64)


@dataclass
class _Relisting:
    """The event simulation of :func:`_relist`: per rank its given order up to the re-listing
    point (``prefix``, run as given), the backwards after it (``back``: I's and B's, and the moved
    F's of the second family) and the W's it owes (``wq``), and what the simulation has run so far."""

    g: Graph
    prefix: list[list[Action]]
    back: list[list[Action]]
    wq: list[list[Action]]
    first_last: int  # the first of the last microbatches, whose I's a W gives way to
    target: float
    left_work: list[float]  # seconds each rank still has to run
    left: int  # actions not run yet, all ranks
    d: dict = field(init=False)
    delta: dict = field(init=False)
    over: dict = field(init=False)  # rise + transient while it runs
    end_f: list[list[float]] = field(init=False)  # ends of the F's run so far (inf: not yet)
    end_i: list[list[float]] = field(init=False)  # ... of the I's or B's
    held: list[float] = field(init=False)  # each rank's running sum of bytes, as simulate() counts it in row order
    pos: list[int] = field(init=False)  # how much of its prefix each rank has run
    free_at: list[float] = field(init=False)
    first_start: list[float] = field(init=False)
    out: list[list[Action]] = field(init=False)
    heap: list = field(init=False)  # wake-ups (time, rank)

    def __post_init__(self) -> None:
        g = self.g
        R, S, M = g.R, g.S, g.M
        self.d = {(s, k): g.problem.duration(s, k) for s in range(S) for k in "FIWB"}
        self.delta = {(s, k): g.mem[k][s] for s in range(S) for k in "FIWB"}
        self.over = {(s, k): g.over[k][s] for s in range(S) for k in "FIWB"}
        self.end_f = [[math.inf] * M for _ in range(S)]
        self.end_i = [[math.inf] * M for _ in range(S)]
        self.held = [0.0] * R
        self.pos = [0] * R
        self.free_at = [0.0] * R
        self.first_start = [math.inf] * R
        self.out = [[] for _ in range(R)]
        self.heap = [(0.0, r) for r in range(R)]

    @classmethod
    def of(cls, g: Graph, sched: Schedule, last: int, from_lowest: bool, target: float) -> "_Relisting":
        """Each rank's given order cut after its last F (of its lowest stage: `from_lowest`)."""
        rows = [list(sched.actions(r)) for r in range(g.R)]
        lowest = [min((a.stage for a in row), default=-1) for row in rows]
        last_f = [max((i for i, a in enumerate(row) if a.kind == Kind.F and (a.stage == lo or not from_lowest)),
                      default=-1) for row, lo in zip(rows, lowest)]
        d = g.problem.duration
        return cls(g=g, prefix=[row[: lf + 1] for row, lf in zip(rows, last_f)],
                   back=[[a for a in row[lf + 1:] if a.kind != Kind.W] for row, lf in zip(rows, last_f)],
                   wq=[[a for a in row[lf + 1:] if a.kind == Kind.W] for row, lf in zip(rows, last_f)],
                   first_last=g.M - last, target=target,
                   left_work=[sum(d(a.stage, a.kind) for a in row) for row in rows],
                   left=sum(len(row) for row in rows))

    def ready(self, a: Action) -> Optional[float]:
        """When a's inputs are there (None: a producer has not run yet)."""
        at = self.g.input_time(a.kind, a.stage, a.microbatch, self.end_f, self.end_i)
        return None if at == math.inf else at

    def over_cap(self, r: int, a: Action) -> bool:
        grow = self.over[a.stage, a.kind]
        return grow > 0 and not fits_room(self.held[r] + grow, self.g.room[r])

    def ready_w(self, r: int, t: float) -> Optional[int]:
        end_i = self.end_i
        return next((j for j, a in enumerate(self.wq[r]) if end_i[a.stage][a.microbatch] <= t + EPS), None)

    def run(self, r: int, a: Action, t: float) -> None:
        """Rank r runs `a` from `t`, and wakes at its end with the neighbour stages' ranks."""
        s, k, g, heap = a.stage, a.kind, self.g, self.heap
        took = self.d[s, k]
        e = t + took
        self.first_start[r] = min(self.first_start[r], t)
        if k != Kind.W:
            (self.end_f if k == Kind.F else self.end_i)[s][a.microbatch] = e
        self.free_at[r] = e
        self.held[r] += self.delta[s, k]
        self.left_work[r] -= took
        self.out[r].append(a)
        self.left -= 1
        heapq.heappush(heap, (e, r))
        rank_of = g.stage_rank
        for nb in (s - 1, s + 1):  # the neighbour stage may wait for this output
            if 0 <= nb < g.S and rank_of[nb] != r:
                heapq.heappush(heap, (e + g.comm[min(s, nb)], rank_of[nb]))

    def run_prefix(self, r: int, t: float) -> None:
        """Rank r's next action of its given order, when its inputs are there."""
        a = self.prefix[r][self.pos[r]]
        at = self.ready(a)
        if at is None:
            return  # woken when the producer runs
        if at > t + EPS:
            heapq.heappush(self.heap, (at, r))
            return
        self.pos[r] += 1
        self.run(r, a, t)

    def scan_back(self, r: int, t: float) -> tuple[Optional[int], float, float, bool]:
        """(the first ready backward that fits, the next input's arrival, the next arrival of
        one of the last microbatches' inputs, whether a ready one is blocked by the cap)."""
        nxt, nxt_last, blocked = math.inf, math.inf, False
        input_time, end_f, end_i = self.g.input_time, self.end_f, self.end_i  # the hot loop of a re-listing
        for j, a in enumerate(self.back[r]):
            at = input_time(a.kind, a.stage, a.microbatch, end_f, end_i)
            if at == math.inf:
                continue  # a producer has not run yet
            if at <= t + EPS:
                if not self.over_cap(r, a):
                    return j, nxt, nxt_last, blocked
                blocked = True  # an F over the cap: a W frees its bytes first (run_relisted)
                continue
            nxt = min(nxt, at)
            if a.microbatch >= self.first_last:
                nxt_last = min(nxt_last, at)
        return None, nxt, nxt_last, blocked

    def run_relisted(self, r: int, t: float) -> None:
        """Rank r after its prefix: a W that frees room for a blocked F, else a ready backward,
        else a W unless an I of the last microbatches arrives within it and the rank can afford
        to wait, else wait for the next input."""
        pick, nxt, nxt_last, blocked = self.scan_back(r, t)
        w = self.ready_w(r, t)
        if blocked and w is not None:
            self.run(r, self.wq[r].pop(w), t)
        elif pick is not None:
            self.run(r, self.back[r].pop(pick), t)
        elif w is not None and nxt_last - t < self.d[self.wq[r][w].stage, Kind.W] - EPS and \
                nxt_last - t <= self.target - t - self.left_work[r] + EPS * max(1.0, self.target):
            heapq.heappush(self.heap, (nxt_last, r))  # the W would delay an I of the last microbatches
        elif w is not None:
            self.run(r, self.wq[r].pop(w), t)
        elif nxt < math.inf:
            heapq.heappush(self.heap, (nxt, r))


def _relist(problem: Union[Problem, Graph], sched: Schedule, expired: Callable[[], bool], last: int,
            from_lowest: bool = False, target: float = math.inf) -> Optional[tuple[list[list[Action]], float]]:
    """(per-rank rows with each rank's cool-down re-listed, a W giving way to the I's of the
    `last` microbatches while the rank can afford to wait (its remaining work still ends by
    `target`); their objective, timed as simulate() times those rows: every action starts when
    its rank is free and its inputs are there), or None when `expired()` turns true first or the
    given order deadlocks. `from_lowest`: re-list from the rank's last F of its lowest stage on,
    the later F's among the backwards (see the module docstring)."""
    g = graph_of(problem)
    sim = _Relisting.of(g, sched, last, from_lowest, target)
    moments = Moments(sim.heap, sim.free_at, expired)
    for t, r in moments:
        if sim.pos[r] < len(sim.prefix[r]):
            sim.run_prefix(r, t)
        else:
            sim.run_relisted(r, t)
    if moments.expired or sim.left:
        return None
    if g.problem.objective == "span":
        return sim.out, max(f - s0 for f, s0 in zip(sim.free_at, sim.first_start) if s0 < math.inf)
    return sim.out, max(sim.free_at)


def relist_cooldown(problem: Union[Problem, Graph], sched: Schedule, expired: Callable[[], bool] = lambda: False,
                    bound: Optional[float] = None) -> Optional[tuple[Schedule, SimResult]]:
    """The best of the families (see the module docstring) applied to `sched`, as (schedule,
    simulation), among the members that fit the memory caps; None when none does or `expired()`
    turned true before the first was done. Each member is one construction; the best is then
    simulated (the next best when it is over the caps). `bound`: the problem's lower bound
    (schedc.solver.bounds.chains), the target of the second and third families (computed when not
    given); meta["family"] says which family the answer comes from (1-3)."""
    g = graph_of(problem)
    problem = g.problem
    members: list[tuple[float, int, int, bool, list[list[Action]]]] = []
    bound = lower_bound(g) if bound is None else bound
    # the third family keeps a round trip to a neighbour in reserve before a rank waits
    round_trip = 2 * max((problem.comm(b) for b in range(problem.n_stages - 1)), default=0.0)
    families = [(False, math.inf), (True, bound)] + ([(True, bound - round_trip)] if round_trip > 0 else [])
    best_last = 0
    for family, (from_lowest, target) in enumerate(families, 1):
        best, worse = math.inf, 0
        # the third family is the second with a reserve: it starts at the second's best `last`
        for last in LAST_MICROBATCHES[LAST_MICROBATCHES.index(best_last) if family == 3 else 0:]:
            if last > problem.n_microbatches or worse >= 2 or (members and expired()) or \
                    any(x[0] <= bound + EPS * max(1.0, bound) for x in members):
                break
            out = _relist(g, sched, expired, last, from_lowest, target)
            if out is None:
                break
            members.append((out[1], last, family, from_lowest, out[0]))
            if best == math.inf or out[1] < best - EPS * max(1.0, best):
                best, worse, best_last = out[1], 0, last
            else:
                worse += 1
    # simulate the best first; a member over the caps gives way to the next
    for _, last, family, from_lowest, rows in sorted(members, key=lambda x: x[:3]):
        new = Schedule(rows=rows, placement=tuple(problem.placement), n_microbatches=problem.n_microbatches,
                       name=f"{sched.name}+cooldown", meta={"source": NAME, "start": sched.name, "last": last,
                                                            "family": family, "from_lowest": from_lowest})
        try:
            sim = simulate(new, problem.profile, problem.memory)
        except SchedcError:
            continue
        if sim.fits:
            return new, sim
        if expired():
            break
    return None
