"""Cool-down re-listing: keep a schedule's order up to each rank's last F, then run the rest greedily.

Problem: a hand-made schedule (ZB-V above all) fixes the order of every rank's cool-down, the
I's and W's it still owes after its last F, in the pattern of its steady state (I then W).
On slow links that pattern makes the ranks that finish last wait: the backward chain of the
last microbatches reaches them late, because every rank before them spends time on W's that
could wait while the I that the next rank needs is ready.

Method: an event simulation in time order (as :mod:`schedc.solver.greedy`). Each rank runs its
given order up to and including its last F (each action starting when its inputs are there);
after that, whenever it is free, it runs a ready backward (I or B, the first in its given
order), else a W it owes (the first in its given order: a W delays nothing but its own rank),
else waits for the next input. One parameter, ``last``: a rank that could start a W waits
instead when the input of an I of one of the last ``last`` microbatches arrives within one W
(their chain back to stage 0 decides the step's end; the W runs later, in the rank's own idle
tail). The family tries ``last`` in LAST_MICROBATCHES and keeps the best; at V 8-64 ranks (1p,
comm 0.25F) the best ``last`` grew with the ranks (1 at 8, 8 at 32, 12-16 at 64). Also measured
and dropped: the highest stage's ready I first (same step times), waiting for any I that
arrives within one W (0.5 worse), and re-listing from an earlier F on (worse: F's delayed).

Memory: after a rank's last F its held bytes only fall when each I frees at least what its
weight gradient holds (the usual case); the result is re-simulated and dropped when it does not
fit the caps, so the caps always hold.

Measured (V placement, 1p, communication 0.25F, identical stages, makespan): ZB-V is 0.9-3.4%
above the lower bound at 32-64 ranks x 128-256 microbatches; the family's best is 0.2-0.85% above
it (32x128: 837.25 -> 825.75, bound 822.25; 64x128: 909.25 -> 885.75, bound 878.25), and at 8 x 32
it meets the bound (the README's scale table, benchmarks/compile_quality.py --only s).

Cost: O(A log A) for A actions per member (one construction), up to len(LAST_MICROBATCHES)
members, then one simulation (more only when the best is over the caps); memory O(A) per member
(each keeps its rows of references to the given actions until the best is chosen).
"""

from __future__ import annotations

import heapq
import math
from typing import Callable, Optional

from schedc.errors import SchedcError
from schedc.ir import Action, Schedule
from schedc.simulate import SimResult, simulate
from schedc.solver.greedy import Moments
from schedc.solver.problem import Problem
from schedc.tolerances import REL

EPS = REL
NAME = "cooldown"
# the family's parameter, tried in this order until two in a row do no better than the best:
# how many of the last microbatches have I's that a W gives way to
LAST_MICROBATCHES = (0, 1, 2, 4, 8, 12, 16, 24, 32, 48, 64)


def _relist(problem: Problem, sched: Schedule, expired: Callable[[], bool], last: int) \
        -> Optional[tuple[list[list[Action]], float]]:
    """(per-rank rows with each rank's cool-down re-listed, a W giving way to the I's of the
    `last` microbatches; their objective, timed as simulate() times those rows: every action
    starts when its rank is free and its inputs are there), or None when `expired()` turns true
    first or the given order deadlocks."""
    R = problem.n_ranks
    rows = [list(sched.actions(r)) for r in range(R)]
    d = {(s, k): problem.duration(s, k) for s in range(problem.n_stages) for k in "FIWB"}
    comm = [problem.comm(b) for b in range(problem.n_stages - 1)]
    last_f = [max((i for i, a in enumerate(row) if a.kind == "F"), default=-1) for row in rows]
    prefix = [row[: lf + 1] for row, lf in zip(rows, last_f)]
    back = [[a for a in row[lf + 1:] if a.kind in "IB"] for row, lf in zip(rows, last_f)]
    wq = [[a for a in row[lf + 1:] if a.kind == "W"] for row, lf in zip(rows, last_f)]
    end: dict[tuple[int, str, int], float] = {}
    S = problem.n_stages
    first_last = problem.n_microbatches - last

    def ready(a: Action) -> Optional[float]:
        """When a's inputs are there (None: a producer has not started yet)."""
        s, m = a.stage, a.microbatch
        if a.kind == "F":
            if s == 0:
                return 0.0
            e = end.get((s - 1, "F", m))
            return None if e is None else e + comm[s - 1]
        if a.kind == "W":
            return end.get((s, "I", m))
        own = end.get((s, "F", m))
        if own is None:
            return None
        if s == S - 1:
            return own
        e = end.get((s + 1, "B", m), end.get((s + 1, "I", m)))
        return None if e is None else max(own, e + comm[s])

    pos = [0] * R
    free_at = [0.0] * R
    first_start = [math.inf] * R
    out: list[list[Action]] = [[] for _ in range(R)]
    heap = [(0.0, r) for r in range(R)]
    left = sum(len(row) for row in rows)
    rank_of = problem.placement

    def run(r: int, a: Action, t: float) -> None:
        nonlocal left
        e = t + d[a.stage, a.kind]
        first_start[r] = min(first_start[r], t)
        end[a.stage, a.kind, a.microbatch] = e
        if a.kind == "B":
            end[a.stage, "I", a.microbatch] = e
        free_at[r] = e
        out[r].append(a)
        left -= 1
        heapq.heappush(heap, (e, r))
        for nb in (a.stage - 1, a.stage + 1):  # the neighbour stage may wait for this output
            if 0 <= nb < S and rank_of[nb] != r:
                heapq.heappush(heap, (e + comm[min(a.stage, nb)], rank_of[nb]))

    moments = Moments(heap, free_at, expired)
    for t, r in moments:
        if pos[r] < len(prefix[r]):
            a = prefix[r][pos[r]]
            at = ready(a)
            if at is None:
                continue  # woken when the producer runs
            if at > t + EPS:
                heapq.heappush(heap, (at, r))
                continue
            pos[r] += 1
            run(r, a, t)
            continue
        nxt, pick, nxt_last = math.inf, None, math.inf
        for j, a in enumerate(back[r]):
            at = ready(a)
            if at is None:
                continue
            if at <= t + EPS:
                pick = j
                break
            nxt = min(nxt, at)
            if a.microbatch >= first_last:
                nxt_last = min(nxt_last, at)
        if pick is not None:
            run(r, back[r].pop(pick), t)
            continue
        w = next((j for j, a in enumerate(wq[r]) if end.get((a.stage, "I", a.microbatch), math.inf) <= t + EPS), None)
        if w is not None and nxt_last - t < d[wq[r][w].stage, "W"] - EPS:
            heapq.heappush(heap, (nxt_last, r))  # the W would delay an I of the last microbatches
            continue
        if w is not None:
            run(r, wq[r].pop(w), t)
            continue
        if nxt < math.inf:
            heapq.heappush(heap, (nxt, r))
    if moments.expired or left:
        return None
    if problem.objective == "span":
        return out, max(f - s0 for f, s0 in zip(free_at, first_start) if s0 < math.inf)
    return out, max(free_at)


def relist_cooldown(problem: Problem, sched: Schedule, expired: Callable[[], bool] = lambda: False) \
        -> Optional[tuple[Schedule, SimResult]]:
    """The best of the family (see the module docstring) applied to `sched`, as (schedule,
    simulation), among the members that fit the memory caps; None when none does or `expired()`
    turned true before the first was done. Each member is one construction; the best is then
    simulated (the next best when it is over the caps)."""
    obj = problem.objective
    members, best, worse = [], math.inf, 0
    for last in LAST_MICROBATCHES:
        if last > problem.n_microbatches or worse >= 2 or (members and expired()):
            break
        out = _relist(problem, sched, expired, last)
        if out is None:
            break
        members.append((out[1], last, out[0]))
        if not members[:-1] or out[1] < best - EPS * max(1.0, best):
            best, worse = out[1], 0
        else:
            worse += 1
    # simulate the best first; a member over the caps gives way to the next
    for _, last, rows in sorted(members, key=lambda x: x[:2]):
        new = Schedule(rows=rows, placement=tuple(problem.placement), n_microbatches=problem.n_microbatches,
                       name=f"{sched.name}+cooldown", meta={"source": NAME, "start": sched.name, "last": last})
        try:
            sim = simulate(new, problem.profile, problem.memory)
        except SchedcError:
            continue
        if sim.fits:
            return new, sim
        if expired():
            break
    return None
