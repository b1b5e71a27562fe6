"""Steps 1 and 2 of the plan: the bound over partitions and the search for candidates.

Problem: find, per placement, the partitions worth compiling among the compositions of the units
into stages. Method: step 1 takes the smallest cap any partition fits and the bound over
partitions from schedc.core.partition's dynamic program; step 2 scores partitions best-first by their
own lower bound (``own_bound``) from the dynamic program's partition and the comparison splits,
moving one unit from one stage to another, and screens the best by their best hand-made schedule
that fits. Cost: one ``own_bound`` per partition scored (at most ``SEARCH_EVALUATIONS``, within
``SEARCH_SHARE`` of the time), one simulation per hand-made schedule screened.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from schedc.core.cost_model import fits
from schedc.core.formatting import format_bytes
from schedc.core.partition import (
    even_counts,
    min_cap,
    partition_bound,
    torchtitan_default_counts,
    v_bound_seconds,
    why_nothing_fits,
)
from schedc.errors import ParameterError
from schedc.planning.clock import bounded_program, clock_now, raise_stopped, stop_requested
from schedc.planning.handmade import balanced_split, best_hand_made, hand_made_shapes
from schedc.planning.problem import holds_one_microbatch, own_bound, problem_for, stages_for, tight_problem
from schedc.planning.request import V_SHARE
from schedc.solver.interrupt import Cut

SEARCH_SHARE = 0.1  # of the time limit, for the bound-guided search over partitions
SEARCH_EVALUATIONS = 1000  # partitions scored by their lower bound, at most, per placement
SCREEN = 12  # partitions per placement (the best by lower bound) screened by their hand-made schedules
SEARCH_END = 0.4  # of the time limit: the search over partitions never runs past it
BOUND_SHARE = SEARCH_SHARE  # of the time limit, for step 1's bounds (their O(M) knapsack stops at it)


def bounds_over_partitions(profile, units, ranks, microbatches, limit, cap, objective, placements, notes, say, t0,
                            time_limit=math.inf):
    """Step 1, per placement: the smallest cap any partition fits (a placement none fits is noted,
    or the error when none fits at all) and the bound over partitions, whose knapsack stops at
    ``BOUND_SHARE`` of `time_limit` (or Ctrl-C) with a looser bound, noted. Returns ([(placement,
    PartitionBound)], {placement: bound})."""
    searches, bounds = [], {}
    deadline = t0 + BOUND_SHARE * time_limit
    v_end = t0 + V_SHARE * time_limit  # the V's programs check no clock: cut there (or at a stop)

    def stop() -> bool:
        return clock_now() >= deadline or stop_requested()
    for pl in placements:
        try:
            with bounded_program(pl, units.n, ranks, v_end):
                need, _ = min_cap(units, pl, ranks)
                pb = partition_bound(profile, ranks, microbatches, cap, pl, objective, stop=stop) \
                    if fits(need, cap) else None
        except Cut:
            if len(placements) > 1 and not stop_requested():
                notes.append(f"placement {pl}: bounding its partitions of {units.n} units on {ranks} ranks took over "
                             f"{V_SHARE:.0%} of the time limit and was cut; the plan is without it (--placement "
                             f"{pl} with a larger --time-limit plans it)")
                continue
            if stop_requested():
                notes.append(f"placement {pl}: stopped while bounding its partitions")
                continue
            need = math.ceil(max(2 * time_limit, 4 * v_bound_seconds(units.n, ranks)))  # twice ~2x the estimate
            raise ParameterError("time_limit", f"bounding the V's partitions of {units.n} units on {ranks} ranks did "
                                               f"not end in {V_SHARE:.0%} of {{name}}{time_limit:g}; give {{name}}"
                                               f"{need} or more, or --placement loop") from None
        if not fits(need, cap):
            if len(placements) == 1 or pl == placements[-1] and not searches:
                caps = {p: min_cap(units, p, ranks)[0] for p in placements}
                best = min(caps, key=caps.get)
                raise ParameterError("memory", f"{{name}}{limit}: no partition of the {profile.n_stages} units onto "
                                               f"{ranks} ranks ({' or '.join(placements)}) fits; the smallest cap "
                                               f"that does is {{name}}{format_bytes(caps[best], round_up=True)} ({best})"
                                     + why_nothing_fits(profile, units, best, ranks, cap))
            notes.append(f"placement {pl}: no partition fits under {limit} (needs {format_bytes(need)})")
            continue
        bounds[pl] = pb.value
        if pb.cut:
            notes.append(f"placement {pl}: the bound over partitions stopped counting the cool-down of "
                         f"{microbatches} microbatches at {BOUND_SHARE:.0%} of the time limit; it may be looser "
                         "than in full (a larger --time-limit gives the full one)")
        say(f"[{clock_now() - t0:6.1f}s] {pl}: bound over partitions {pb.value:.6g}, search starts at "
            f"{pb.counts}")
        searches.append((pl, pb))
    if not searches and stop_requested():
        raise_stopped()
    if not searches:
        raise ParameterError("memory", f"{{name}}{limit}: no placement fits")
    return searches, bounds


def mean_work_bound(units, ranks: int, microbatches: int) -> float:
    """A bound over every partition, placement and schedule: the busiest of R ranks computes at
    least the mean rank's work, M times every unit's F + I + W over R."""
    return microbatches * float(units.F[units.n] + units.I[units.n] + units.W[units.n]) / ranks


def busiest_rank_work_bound(units, ranks: int, microbatches: int) -> float:
    """A bound over every partition, placement and schedule: the busiest of R ranks computes at
    least M times the work (F + I + W) of the units it holds. However the units are dealt to the
    ranks, some rank holds k + 1 of the kR + 1 heaviest (pigeonhole), so at least the k + 1
    lightest of those; with the mean rank's (:func:`mean_work_bound`), the largest such term. For
    L identical layers it is ceil(L / R) layers' work, where the mean gives L / R of them.
    Cost: O(U log U)."""
    work = np.sort(units.unit_work())[::-1]
    most = mean_work_bound(units, ranks, microbatches) / microbatches
    k = 1
    while k * ranks < len(work):
        most = max(most, float(work[k * ranks - k:k * ranks + 1].sum()))
        k += 1
    return microbatches * most


def interleaved_bound(profile, units, ranks, microbatches, cap, objective, stop=None) -> float:
    """A bound over every partition into 2R stages interleaved on R ranks (stage s on rank s mod R)
    and every schedule under the cap: the larger of two relaxations. The busiest rank computes at
    least the work of the units it holds, however they are dealt (:func:`busiest_rank_work_bound`);
    and each stage on a rank of its own is a loop of 2R ranks (schedc.core.partition.partition_bound),
    where any interleaved schedule runs unchanged: every boundary crosses ranks in both, and a rank
    holds one stage's bytes instead of two. inf when no stage alone fits. Cost: the loop's dynamic
    program."""
    busiest = busiest_rank_work_bound(units, ranks, microbatches)
    own_ranks = partition_bound(profile, 2 * ranks, microbatches, cap, "loop", objective, stop=stop).value
    return max(busiest, own_ranks) if math.isfinite(own_ranks) else math.inf


def screened_candidates(profile, units, pl, start, ranks, microbatches, limit, cap, objective, seconds, say, t0,
                         hard=math.inf, memo=None):
    """Step 2 for one placement: the partitions best by their own lower bound and the comparison
    splits, each screened by its best hand-made schedule that fits (an upper bound, milliseconds to
    simulate); `start`: the dynamic program's partition (None for the interleaved loop, which has
    no program). Returns (pool of (lower bound, hand-made step, counts), [the balanced split's entry])."""
    S = stages_for(pl, ranks)
    splits = [start, balanced_split(units, pl, ranks, cap, end=hard), torchtitan_default_counts(profile.n_stages, S),
              even_counts(profile.n_stages, S)]
    # under a tight cap the own bound ranks partitions poorly (step 4's block relaxation ranks them),
    # and a search that follows it far from the dynamic program's partition finds partitions that
    # compile worse (docs/design.md, "The plan", step 2)
    tight = bool(start) and tight_problem(problem_for(profile, start, pl, ranks, microbatches, limit, objective))
    scores = _best_first(profile, pl, ranks, microbatches, limit, objective,
                         [s for s in splits if s], clock_now() + seconds, far=not tight, hard=hard)
    by_lb = sorted(scores, key=scores.get)[:SCREEN]
    shapes = None
    pool = []
    kept = {tuple(s) for s in splits if s and tuple(s) in scores}
    for counts in dict.fromkeys(by_lb + [tuple(s) for s in splits if s and tuple(s) in scores]):
        if counts not in kept and clock_now() >= hard:
            continue  # the comparison splits are screened; the rest only while the search may run
        problem = problem_for(profile, counts, pl, ranks, microbatches, limit, objective)
        shapes = shapes if shapes is not None else hand_made_shapes(problem)
        found = best_hand_made(problem, shapes)
        if memo is not None:
            memo[(pl, tuple(counts))] = found
        ub = found[1]
        pool.append((scores[counts], math.inf if ub is None else ub, counts))
    # the compute-balanced split is always compiled: where the bounds are loose (tight memory, V)
    # neither the bound nor the hand-made step ranks partitions well, and a plan must not lose to
    # compiling the obvious split
    forced = [c for c in pool if list(c[2]) == list(splits[1] or [])][:1]
    say(f"[{clock_now() - t0:6.1f}s] {pl}: scored {len(scores)} partitions by their lower bound, screened "
        f"{len(pool)} by hand-made schedules")
    return pool, forced


def _best_first(profile, placement, ranks, microbatches, limit, objective, starts, deadline,
                far: bool = True, hard: float = math.inf) -> dict:
    """Partitions (units per stage) -> their lower bound, exploring from `starts` the neighbours
    of the best-scored partition first: one unit moved from one stage to another, the stages
    between keeping their counts (every boundary between them moves by one), nearest first; with
    `far` False only to the next stage (one boundary moved).

    Why not only adjacent boundaries: the bound is a maximum over ranks, and in a V a layer moved
    from the middle of the pipeline to rank 0 crosses ranks whose terms would rise on the way, so
    a search by single boundary moves stops short (docs/design.md, "The plan", step 2). Cost: S (S - 1) partitions scored per expansion (2 (S - 1)
    without `far`), one ``own_bound`` each, until `deadline` or SEARCH_EVALUATIONS; never past
    `hard` (the plan's own time limit would not hold otherwise)."""
    scores: dict[tuple[int, ...], float] = {}
    heap: list[tuple[float, tuple[int, ...]]] = []

    def score(counts: tuple[int, ...]) -> None:
        if counts in scores or min(counts) < 1:
            return
        problem = problem_for(profile, counts, placement, ranks, microbatches, limit, objective)
        if not holds_one_microbatch(problem):
            return
        scores[counts] = own_bound(problem)
        heapq.heappush(heap, (scores[counts], counts))

    for s in starts:
        score(tuple(s))
    expanded = set()
    S = len(starts[0]) if starts else 0
    moves = sorted(((a, b) for a in range(S) for b in range(S) if a != b and (far or abs(a - b) == 1)),
                   key=lambda ab: abs(ab[0] - ab[1]))
    least = min(SEARCH_EVALUATIONS, 6 * S)  # at least this many (the nearest moves first), however busy the machine

    def finished() -> bool:  # SEARCH_EVALUATIONS scored, or past the deadline with at least `least`
        now = clock_now()
        return len(scores) >= SEARCH_EVALUATIONS or (now >= deadline and len(scores) >= least) or now >= hard \
            or stop_requested()

    while heap and not finished():
        _, counts = heapq.heappop(heap)
        if counts in expanded:
            continue
        expanded.add(counts)
        for a, b in moves:
            if finished():  # one expansion scores S (S - 1) partitions: 992 for a V of 16 ranks
                break
            c = list(counts)
            c[a] -= 1
            c[b] += 1
            score(tuple(c))
    return scores
