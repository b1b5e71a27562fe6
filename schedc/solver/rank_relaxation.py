"""The one-rank relaxation: a lower bound on the makespan from each rank alone, every other rank free.

Problem: a number L such that every schedule of a problem (per-rank orders of its actions under
the dependency and memory rules of docs/design.md, earliest starts) has makespan >= L. The
closed-form terms of ``schedc.solver.bounds`` add up a few chains per rank; they miss how a
rank's work is spread in time when its stages are far apart (V placement: stage r and stage
2R-1-r wait on very different chains) or when the memory cap makes microbatches wait on each
other, and there the gap they report is the bound's, not the schedule's.

Method (the head-body-tail relaxation of shop scheduling, e.g. Carlier 1982, "The one-machine
sequencing problem", EJOR 11):

1. head(a): the longest dependency path to the start of action a, every other rank's work
   treated as if it had its own machine (communication lags included);
   tail(a): the longest path from the end of a to the end of the step.
   Dependencies are the action graph of ``schedc.solver.model.build_instance``: producers,
   kinds in microbatch order on each stage, and the orders the memory cap forces (I(s, j-K) and
   W(s, j-L-1) before F(s, j)). Kinds in order lose nothing for makespan (model.py's relabelling
   argument), so neither do the orders derived under it.
2. For each rank r alone, with heads as release times and tails as delivery times, Jackson's
   preemptive schedule (at every moment run the released action with the longest tail) gives
   the optimum of the preemptive one-machine problem: max over subsets J of r's actions of
   min head + sum of durations + min tail. Every real schedule restricted to rank r is a
   (non-preemptive) schedule of that one-machine problem, and its makespan is at least
   max over a of (end(a) + tail(a)), so the preemptive optimum is a valid lower bound.
3. L = the maximum over ranks.

Only for ``makespan``: with ``span`` ranks may start late and the heads measured from time 0 do
not bound a rank's own span.

Cost: O(A + D) for the two longest-path passes (A actions, D dependencies) and O(A log A) for the
preemptive schedules, after the O(A + D) graph build: milliseconds for a plan's candidates
(1,536 actions: ~15 ms here), about a second at 10^5 actions.
"""

from __future__ import annotations

import heapq
import math
from typing import Optional

from schedc.solver.problem import Problem


def heads_and_tails(inst) -> tuple[list[float], list[float]]:
    """(head, tail) of every action of ``inst`` (a schedc.solver.model.Instance)."""
    n = inst.n
    dur = inst.dur
    head = [0.0] * n
    succs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for b in inst.topo:
        t = 0.0
        for a, lag in inst.preds[b]:
            t = max(t, head[a] + dur[a] + lag)
            succs[a].append((b, lag))
        head[b] = t
    tail = [0.0] * n
    for a in reversed(inst.topo):
        t = 0.0
        for b, lag in succs[a]:
            t = max(t, lag + dur[b] + tail[b])
        tail[a] = t
    return head, tail


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


def rank_relaxation_bound(problem: Problem, inst=None) -> Optional[float]:
    """The one-rank relaxation's bound on problem's makespan (module docstring); None for span.
    ``inst``: the problem's action graph when the caller has built it already."""
    if problem.objective != "makespan":
        return None
    if inst is None:
        from schedc.solver.model import build_instance

        inst = build_instance(problem)
    head, tail = heads_and_tails(inst)
    return max(preemptive_one_machine([(head[a], inst.dur[a], tail[a]) for a in acts])
               for acts in inst.by_rank if acts)
