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
else waits for the next input. Measured against two other rules at V 4-64 ranks (1p, comm
0.25F): the highest stage's ready I first gave the same step times, and waiting for an I that
arrives within one W instead of starting the W was worse everywhere (0.5 above the given order).

Memory: after a rank's last F its held bytes only fall when each I frees at least what its
weight gradient holds (the usual case); the result is re-simulated and dropped when it does not
fit the caps, so the caps always hold.

Measured (benchmarks/compile_quality.py --only s, V placement, 1p, communication 0.25F, identical
stages): ZB-V leaves 1.8% (32 ranks x 128) to 3.4% (64 x 128) above the lower bound; see the
README's scale table for what the re-listed cool-down reaches.

Cost: O(A log A) for A actions, and one simulation; memory O(A).
"""

from __future__ import annotations

import heapq
import math
from typing import Callable, Optional

from schedc.errors import SchedcError
from schedc.ir import Action, Schedule
from schedc.simulate import SimResult, simulate
from schedc.solver.deadline import CHECK_EVERY
from schedc.solver.problem import Problem
from schedc.tolerances import REL

EPS = REL
NAME = "cooldown"


def _relist(problem: Problem, sched: Schedule, expired: Callable[[], bool]) -> Optional[list[list[Action]]]:
    """Per-rank rows with each rank's cool-down re-listed, or None when `expired()` turns true
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
    out: list[list[Action]] = [[] for _ in range(R)]
    heap = [(0.0, r) for r in range(R)]
    left = sum(len(row) for row in rows)
    rank_of = problem.placement

    def run(r: int, a: Action, t: float) -> None:
        nonlocal left
        e = t + d[a.stage, a.kind]
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

    steps = 0
    while heap:
        steps += 1
        if steps % CHECK_EVERY == 0 and expired():
            return None
        t, r = heapq.heappop(heap)
        if t < free_at[r] - EPS:
            continue
        t = max(t, free_at[r])
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
        nxt, pick = math.inf, None
        for j, a in enumerate(back[r]):
            at = ready(a)
            if at is None:
                continue
            if at <= t + EPS:
                pick = j
                break
            nxt = min(nxt, at)
        if pick is not None:
            run(r, back[r].pop(pick), t)
            continue
        w = next((j for j, a in enumerate(wq[r]) if end.get((a.stage, "I", a.microbatch), math.inf) <= t + EPS), None)
        if w is not None:
            run(r, wq[r].pop(w), t)
            continue
        if nxt < math.inf:
            heapq.heappush(heap, (nxt, r))
    if left:
        return None
    return out


def relist_cooldown(problem: Problem, sched: Schedule, expired: Callable[[], bool] = lambda: False) \
        -> Optional[tuple[Schedule, SimResult]]:
    """`sched` with every rank's cool-down re-listed (see the module docstring), as (schedule,
    simulation) when it fits the memory caps; None when it does not or `expired()` turned true."""
    rows = _relist(problem, sched, expired)
    if rows is None:
        return None
    new = Schedule(rows=rows, placement=tuple(problem.placement), n_microbatches=problem.n_microbatches,
                   name=f"{sched.name}+cooldown", meta={"source": NAME, "start": sched.name})
    try:
        sim = simulate(new, problem.profile, problem.memory)
    except SchedcError:
        return None
    return (new, sim) if sim.fits else None
