"""The one-rank relaxation: a lower bound on the makespan from each rank alone, every other rank free.

Problem: a number L such that every schedule of a problem (per-rank orders of its actions under
the dependency and memory rules of docs/design.md, earliest starts) has makespan >= L. The
closed-form terms of ``schedc.solver.bounds`` add up a few chains per rank; they miss how a
rank's work is spread in time when its stages are far apart (V placement: stage r and stage
2R-1-r wait on very different chains) or when the memory cap makes microbatches wait on each
other, and there the gap they report is the bound's, not the schedule's.

Method (the head-body-tail relaxation of shop scheduling: Carlier 1982, "The one-machine
sequencing problem", EJOR 11):

1. head(a): the longest dependency path to the start of action a, every other rank's work
   treated as if it had its own machine (communication lags included); tail(a): the longest
   path from the end of a to the end of the step. The dependencies are those of the action
   graph (``schedc.solver.model.build_instance``): producers, kinds in microbatch order on each
   stage, and the orders the memory cap forces (the backward of (s, j-K) and W(s, j-L-1) before
   F(s, j)). Kinds in order lose nothing for makespan (model.py's relabelling argument), so
   neither do the orders derived under it.
2. For each rank alone, with heads as release times and tails as delivery times, Jackson's
   preemptive schedule (at every moment run the released action with the longest tail) is optimal
   for the preemptive one-machine problem: its value is max over subsets J of the rank's actions
   of min head + total duration + min tail. The rank's part of any real schedule is a
   non-preemptive schedule of that problem whose makespan is at least max over a of (end(a) +
   tail(a)), so that value bounds it.
3. L = the maximum over ranks.

Heads and tails come from recurrences over microbatches with numpy over stages instead of a walk
over the action graph: along the stages each is a running maximum of (value - prefix sum of the
chain's durations), so one microbatch costs a few vector operations. ``tests/test_bounds.py``
checks them against longest paths over ``build_instance``'s graph, and the bound against
exhaustive search on tiny instances.

Only for ``makespan``: with ``span`` ranks may start late, and heads measured from time 0 do not
bound a rank's own span.

Cost: O(M) vector operations over S stages for heads and tails, then O(A log A) for the preemptive
schedules (A actions): about 2 ms for a plan's candidate of 16 stages x 16 microbatches, about a
second at 10^5 actions.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from schedc.solver.problem import Problem
from schedc.tolerances import REL


@dataclass
class HeadsTails:
    """Per stage s and microbatch m (arrays S x M): heads and tails of F, of the backward (I, or B
    on a stage whose W costs 0) and of W (zero duration, no action, on a B stage)."""

    head_f: np.ndarray
    head_b: np.ndarray
    head_w: np.ndarray
    tail_f: np.ndarray
    tail_b: np.ndarray
    tail_w: np.ndarray
    dur_f: np.ndarray  # per stage
    dur_b: np.ndarray
    dur_w: np.ndarray
    split: np.ndarray  # per stage: the backward is I then W (else one B)


def _memory_lags(problem: Problem, split: np.ndarray) -> Optional[tuple[list, list]]:
    """Per stage: K (the backward of (s, j-K) precedes F(s, j)) and L (W(s, j-L-1) precedes
    F(s, j)), None when unbounded; None overall when a stage cannot hold one microbatch. The
    same rule as schedc.solver.model._add_memory_precedences."""
    prof = problem.profile
    ks, ls = [], []
    for s in range(problem.n_stages):
        r = problem.placement[s]
        act, wg = prof.stages[s].activation_bytes, prof.stages[s].weight_grad_bytes
        if math.isinf(problem.memory_caps[r]) or act <= 0:
            ks.append(None)
            ls.append(None)
            continue
        room = problem.activation_room[r]
        k = int(math.floor(room / act + REL))
        lim = int(math.floor((room - act) / wg + REL)) if split[s] and wg > 0 else None
        if k < 1 or (lim is not None and lim < 0):
            return None
        ks.append(k)
        ls.append(lim)
    return ks, ls


def heads_and_tails(problem: Problem) -> Optional[HeadsTails]:
    """Heads and tails of every action (module docstring); None when a stage cannot hold one
    microbatch under the cap (no schedule exists)."""
    S, M = problem.n_stages, problem.n_microbatches
    prof = problem.profile
    split = np.array([prof.duration(s, "W") > 0 for s in range(S)])
    F = np.array([prof.duration(s, "F") for s in range(S)], dtype=float)
    Bk = np.array([prof.duration(s, "I" if split[s] else "B") for s in range(S)], dtype=float)
    W = np.where(split, [prof.duration(s, "W") for s in range(S)], 0.0)
    c = np.array([problem.comm(b) for b in range(S - 1)], dtype=float)
    lags = _memory_lags(problem, split)
    if lags is None:
        return None
    ks, ls = lags
    # F(s) -> F(s+1): F + comm; backward(s+1) -> backward(s): backward + comm
    fwd = np.concatenate([[0.0], np.cumsum(F[:-1] + c)])  # fwd[s]: forward chain 0 -> s
    bwd_up = np.concatenate([np.cumsum((Bk[1:] + c)[::-1])[::-1], [0.0]])  # bwd_up[s]: backward chain S-1 -> s
    bwd = np.concatenate([[0.0], np.cumsum(c + Bk[:-1])])  # bwd[s]: from the end of s-side backward down
    fwd_tail = np.concatenate([np.cumsum((c + F[1:])[::-1])[::-1], [0.0]])  # F chain s -> S-1 after F(s)
    hF, hB, hW = np.zeros((S, M)), np.zeros((S, M)), np.zeros((S, M))
    for m in range(M):
        x = np.zeros(S)
        if m > 0:
            x = np.maximum(x, hF[:, m - 1] + F)
        for s in range(S):
            if ks[s] is not None and m - ks[s] >= 0:
                x[s] = max(x[s], hB[s, m - ks[s]] + Bk[s])
            if ls[s] is not None and m - ls[s] - 1 >= 0:
                x[s] = max(x[s], hW[s, m - ls[s] - 1] + W[s])
        hF[:, m] = fwd + np.maximum.accumulate(x - fwd)
        y = hF[:, m] + F
        if m > 0:
            y = np.maximum(y, hB[:, m - 1] + Bk)
        hB[:, m] = bwd_up + np.maximum.accumulate((y - bwd_up)[::-1])[::-1]
        hW[:, m] = hB[:, m] + Bk
        if m > 0:
            hW[:, m] = np.maximum(hW[:, m], hW[:, m - 1] + W)
    tF, tB, tW = np.zeros((S, M)), np.zeros((S, M)), np.zeros((S, M))
    for m in range(M - 1, -1, -1):
        w = np.zeros(S)
        if m + 1 < M:
            w = np.maximum(w, W + tW[:, m + 1])
        for s in range(S):
            if ls[s] is not None and m + ls[s] + 1 < M:
                w[s] = max(w[s], F[s] + tF[s, m + ls[s] + 1])
        tW[:, m] = np.where(split, w, 0.0)
        v = np.where(split, W + tW[:, m], 0.0)
        if m + 1 < M:
            v = np.maximum(v, Bk + tB[:, m + 1])
        for s in range(S):
            if ks[s] is not None and m + ks[s] < M:
                v[s] = max(v[s], F[s] + tF[s, m + ks[s]])
        tB[:, m] = bwd + np.maximum.accumulate(v - bwd)
        z = Bk + tB[:, m]
        if m + 1 < M:
            z = np.maximum(z, F + tF[:, m + 1])
        tF[:, m] = fwd_tail + np.maximum.accumulate((z - fwd_tail)[::-1])[::-1]
    return HeadsTails(hF, hB, hW, tF, tB, tW, F, Bk, W, split)


def preemptive_one_machine(jobs: list[tuple[float, float, float]]) -> float:
    """max over jobs of (end + tail) in Jackson's preemptive schedule of (head, duration, tail)
    jobs on one machine: the optimum of the preemptive problem."""
    jobs = sorted(jobs)
    waiting: list[tuple[float, int]] = []  # (-tail, index) of released, unfinished jobs
    left = [d for _, d, _ in jobs]
    t, k, best = 0.0, 0, 0.0
    while k < len(jobs) or waiting:
        if not waiting:
            t = max(t, jobs[k][0])
        while k < len(jobs) and jobs[k][0] <= t:
            heapq.heappush(waiting, (-jobs[k][2], k))
            k += 1
        neg_tail, j = waiting[0]
        release = jobs[k][0] if k < len(jobs) else math.inf
        if t + left[j] <= release:  # finishes before the next release can preempt it
            t += left[j]
            heapq.heappop(waiting)
            best = max(best, t - neg_tail)
        else:
            left[j] -= release - t
            t = release
    return best


def rank_relaxation_bound(problem: Problem) -> Optional[float]:
    """The one-rank relaxation's bound on problem's makespan (module docstring); None for span,
    inf when a stage cannot hold one microbatch under the cap."""
    if problem.objective != "makespan":
        return None
    ht = heads_and_tails(problem)
    if ht is None:
        return math.inf
    best = 0.0
    for r in range(problem.n_ranks):
        jobs: list[tuple[float, float, float]] = []
        for s in problem.stages_of(r):
            for head, dur, tail in ((ht.head_f, ht.dur_f, ht.tail_f), (ht.head_b, ht.dur_b, ht.tail_b),
                                    (ht.head_w, ht.dur_w, ht.tail_w)):
                if head is ht.head_w and not ht.split[s]:
                    continue
                d = float(dur[s])
                jobs.extend((h, d, q) for h, q in zip(head[s].tolist(), tail[s].tolist()))
        if jobs:
            best = max(best, preemptive_one_machine(jobs))
    return best
