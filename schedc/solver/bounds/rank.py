"""The one-rank relaxation: a lower bound on the makespan from each rank alone, every other rank free.

Problem: a number L such that every schedule of a problem (per-rank orders of its actions under
the dependency and memory rules of docs/design.md, earliest starts) has makespan >= L. The
closed-form terms of ``schedc.solver.bounds.chains`` add up a few chains per rank; they miss how a
rank's work is spread in time when its stages are far apart (V placement: stage r and stage
2R-1-r wait on very different chains) or when the memory cap makes microbatches wait on each
other, and there the gap they report is the bound's, not the schedule's.

Method (the head-body-tail relaxation of shop scheduling: Carlier 1982, "The one-machine
sequencing problem", EJOR 11):

1. head(a): the longest dependency path to the start of action a, every other rank's work
   treated as if it had its own machine (communication lags included); tail(a): the longest
   path from the end of a to the end of the step. The dependencies are those of the action
   graph (``schedc.solver.graph``): producers and kinds in microbatch order on each stage, and
   the orders the memory cap forces (``graph.memory_arcs``, including what the room a rank's
   stages share forces). Kinds in order lose nothing for makespan (model.py's relabelling argument), so
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
checks them against longest paths over the action graph, and the bound against exhaustive search on tiny instances (V, two stages on a rank, caps down to 0.3p).

Only for ``makespan``: with ``span`` ranks may start late, and heads measured from time 0 do not
bound a rank's own span.

Cost: O(M) vector operations over S stages for heads and tails, then O(A log A) for the preemptive
schedules (A actions); timings: docs/design.md, "Lower bound".
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from schedc.core.ir import Kind
from schedc.solver.graph import Graph, graph_of, memory_arcs
from schedc.solver.problem import Problem


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


def heads_and_tails(problem: Union[Problem, Graph]) -> Optional[HeadsTails]:
    """Heads and tails of every action (module docstring); None when a rank cannot hold one
    microbatch of its stages under the cap (no schedule exists)."""
    g = graph_of(problem).relaxed()  # valid whatever rises or is transient (Graph.relaxed)
    S, M = g.S, g.M
    split = np.array([b == Kind.I for b in g.backward])
    F = np.array(g.dF, dtype=float)
    Bk = np.array([g.d[g.backward[s]][s] for s in range(S)], dtype=float)  # the backward: I, or B
    W = np.where(split, g.dW, 0.0)
    c = np.array(g.comm[:-1], dtype=float)
    arcs = memory_arcs(g)
    if arcs is None:
        return None
    # F(s) -> F(s+1): F + comm; backward(s+1) -> backward(s): backward + comm
    fwd = np.concatenate([[0.0], np.cumsum(F[:-1] + c)])  # fwd[s]: forward chain 0 -> s
    bwd_up = np.concatenate([np.cumsum((Bk[1:] + c)[::-1])[::-1], [0.0]])  # backward chain S-1 -> s
    bwd = np.concatenate([[0.0], np.cumsum(c + Bk[:-1])])  # backward chain from s down to 0
    fwd_tail = np.concatenate([np.cumsum((c + F[1:])[::-1])[::-1], [0.0]])  # forward chain s -> S-1
    hF, hB, hW = np.zeros((S, M)), np.zeros((S, M)), np.zeros((S, M))
    head_of: dict[str, np.ndarray] = {Kind.F: hF, Kind.B: hB, Kind.W: hW}
    dur_of: dict[str, np.ndarray] = {Kind.F: F, Kind.B: Bk, Kind.W: W}
    for m in range(M):
        x = np.zeros(S)
        if m > 0:
            x = np.maximum(x, hF[:, m - 1] + F)
        for kind, t, s, k in arcs:  # the memory orders into F(s, m)
            if m - k >= 0:
                x[s] = max(x[s], head_of[kind][t, m - k] + dur_of[kind][t])
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
        out: dict[str, np.ndarray] = {Kind.F: np.zeros(S), Kind.B: np.zeros(S), Kind.W: np.zeros(S)}  # via the memory orders out of (., m)
        for kind, t, s, k in arcs:
            if m + k < M:
                out[kind][t] = max(out[kind][t], F[s] + tF[s, m + k])
        w = out[Kind.W]
        if m + 1 < M:
            w = np.maximum(w, W + tW[:, m + 1])
        tW[:, m] = np.where(split, w, 0.0)
        v = np.maximum(out[Kind.B], np.where(split, W + tW[:, m], 0.0))
        if m + 1 < M:
            v = np.maximum(v, Bk + tB[:, m + 1])
        tB[:, m] = bwd + np.maximum.accumulate(v - bwd)
        z = np.maximum(out[Kind.F], Bk + tB[:, m])
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


def rank_relaxation_bound(problem: Union[Problem, Graph], enough: float = math.inf) -> Optional[float]:
    """The one-rank relaxation's bound on the problem's makespan (module docstring); None for
    span, inf when a rank cannot hold one microbatch of its stages under the cap. With `enough`,
    it may stop at the first rank whose bound reaches it (a value >= enough, still a bound): the
    busiest ranks go first, so a caller that only asks "is it below `enough`?" (plan's
    certificate) usually solves one rank instead of all."""
    values = rank_relaxation_values(problem, enough)
    return None if values is None else max(values)


def rank_relaxation_values(problem: Union[Problem, Graph], enough: float = math.inf) -> Optional[list[float]]:
    """Per rank, its one-rank relaxation's bound (module docstring); None for span, [inf] when a
    rank cannot hold one microbatch of its stages under the cap. With `enough`, ranks after the
    first whose bound reaches it (busiest first) are left at 0."""
    g = graph_of(problem).relaxed()  # valid whatever rises or is transient (Graph.relaxed)
    if g.problem.objective != "makespan":
        return None
    ht = heads_and_tails(g)
    if ht is None:
        return [math.inf]
    values, best = [0.0] * len(g.stages), 0.0
    work = [sum(float(ht.dur_f[s] + ht.dur_b[s] + ht.dur_w[s]) for s in own) for own in g.stages]
    for r in sorted(range(len(g.stages)), key=lambda r: -work[r]):
        if best >= enough:
            break
        jobs: list[tuple[float, float, float]] = []
        for s in g.stages[r]:
            for head, dur, tail in ((ht.head_f, ht.dur_f, ht.tail_f), (ht.head_b, ht.dur_b, ht.tail_b),
                                    (ht.head_w, ht.dur_w, ht.tail_w)):
                if head is ht.head_w and not ht.split[s]:
                    continue
                d = float(dur[s])
                jobs.extend((h, d, q) for h, q in zip(head[s].tolist(), tail[s].tolist()))
        if jobs:
            values[r] = preemptive_one_machine(jobs)
            best = max(best, values[r])
    return values
