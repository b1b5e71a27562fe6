"""Step 4 of the plan: the certificate, a bound over every partition tightened one by one.

Problem: say how far the plan's step can be from the best step over every partition and schedule.
Method: ``schedc.core.partition.partitions_below`` lists the partitions whose relaxed terms stay below
the best step found (no other can beat it); each gets its own bound in the order of the relaxed
values, and the one whose bound is the least gets more relaxation steps (under a tight cap the
block relaxation of schedc.solver.bounds.blocks first, then the two-rank relaxations of
schedc.solver.bounds.pair) until it reaches the best step or is final. The bound over partitions
is the least left. Cost: ``CERTIFY_SHARE`` of the time limit at most (``TIGHT_CERTIFY_SHARE`` under a
tight cap); one ``own_bound`` per partition reached, a CP-SAT solve per relaxation step.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Iterator, Optional

from schedc.core.partition import partitions_below
from schedc.core.tolerances import REL
from schedc.planning.clock import bounded_program, charge_work, clock_now, stop_requested, work_budget_on
from schedc.planning.problem import own_bound, problem_for
from schedc.solver.interrupt import Cut

CERTIFY_SHARE = 0.3  # of the time limit, for bounding the partitions that could beat the answer one by one
TIGHT_CERTIFY_SHARE = 0.4  # ... under a tight cap at least this (the block relaxation, one solve a partition)
TIGHT_CERTIFY_END = 0.75  # ... but no later than this, which leaves step 4b a compile
PAIR_SHARE = 0.05  # of the time limit, for two-rank relaxations while the final compile still has work
CERTIFY_BLOCKS = (3, 4)  # block sizes of the block relaxation in the certificate (schedc.solver.bounds.blocks)
CERTIFY_LIMIT = 20000  # partitions listed at most per placement (else the threshold is lowered)
LISTING_WORK = 2e-5  # ... per partition listed below a threshold (schedc.core.partition.partitions_below)
# how far step 4 has taken a partition's bound: only as far as the least then needed (own_bound's
# `enough`), its own bound in full, one or more relaxation steps, final
OWN_SO_FAR, OWN, RELAXED, FINAL = 0, 1, 2, 3


def certified_bounds(profile, searches, ranks, microbatches, limit, cap, objective, theta, proven, time_limit,
                      paired, tight, say, t0, scored=None, end=0.9):
    """Step 4, per placement: the bound over partitions tightened partition by partition.

    ``schedc.core.partition.partitions_below`` lists every partition whose relaxed terms stay below
    `theta` (the best step found: no other partition can beat it), by relaxed value (or below a
    lower threshold, with too many). The bound is the least of the relaxed value of the first
    partition not reached and the bounds of those reached; each step raises the least of them
    (``_tighten``): the next listed partition gets its own bound while its relaxed value is the
    least, else the partition whose bound is the least gets one more relaxation step
    (``_relax_least``).

    For ``CERTIFY_SHARE`` of the time (under a tight cap at least ``TIGHT_CERTIFY_SHARE``, until
    ``TIGHT_CERTIFY_END`` of it at the latest), the two-rank relaxations for ``PAIR_SHARE`` of it;
    when the best partition's compile is proven optimal (`proven`) the final compile has nothing
    to do, and both go on until `end` of the time. `paired`: the two-rank bounds step 3 already
    found. `scored`: per placement, the least own bound step 2 found; where it is the dynamic
    program's bound already, no partition can raise the bound over partitions and step 4 gives its
    time to the compiles.

    Returns ({placement: bound}, {placement: partitions bounded one by one}, [(bound, placement,
    counts)]: per placement the partition to compile in step 4b, the least bound among those the
    block relaxation ranked in full, else the least, {(placement, counts): the bound reached})."""
    from schedc.solver.deadline import Deadline

    # with the best partition proven optimal the final compile has nothing to do: the bound gets its time
    deadline = t0 + end * time_limit if proven else min(t0 + 0.8 * time_limit,
                                                           clock_now() + CERTIFY_SHARE * time_limit)
    if tight:
        # the block relaxation ranks the partitions: its share comes from the compiles after it
        deadline = max(deadline, min(t0 + TIGHT_CERTIFY_END * time_limit,
                                     clock_now() + TIGHT_CERTIFY_SHARE * time_limit))
    bounds, certified, setters, reached = {}, {}, [], {}
    for k, (pl, pb) in enumerate(searches):
        if scored is not None and scored.get(pl, math.inf) <= pb.value * (1 + REL):
            bounds[pl], certified[pl] = pb.value, 0
            say(f"[{clock_now() - t0:6.1f}s] {pl}: bound over partitions {pb.value:.6g} (a partition's own "
                f"bound meets it: none can raise it)")
            continue
        ends = Deadline(clock_now() + (deadline - clock_now()) / (len(searches) - k))  # a share each
        if ends.expired():  # no time to list the partitions (a fraction of a second on a V of 8 ranks)
            bounds[pl], certified[pl] = pb.value, 0
            continue
        pairs_end = ends if proven else Deadline(min(ends.at, clock_now() + PAIR_SHARE * time_limit
                                                     / len(searches)))
        try:
            with bounded_program(pl, profile.n_stages, ranks, ends.at):  # the V's listing reads no clock
                threshold, found = partitions_below(profile, ranks, microbatches, cap, pl, objective, theta,
                                                    CERTIFY_LIMIT)
        except Cut:  # the dynamic program's bound stands
            bounds[pl], certified[pl] = pb.value, 0
            continue
        charge_work(LISTING_WORK * max(1, len(found)))

        def problem_of(counts, pl=pl):
            return problem_for(profile, counts, pl, ranks, microbatches, limit, objective)

        state = _Tightening(listing=iter(found), threshold=threshold)
        _tighten(state, problem_of, pl, paired, theta, tight, ends, pairs_end)
        heap = state.heap
        bound = min(state.waiting, threshold, heap[0][0] if heap else math.inf)
        bounds[pl], certified[pl] = max(pb.value, bound), state.done
        # the partition to compile: the least bound, among those the block relaxation ranked when
        # it ran (out of time, the least may be one it has not reached, whose bound says little);
        # among equal bounds one bounded in full, then the fewest units on the first stages (in a
        # V the first microbatch's climb through them is the warm-up's critical path)
        chosen = min((e for e in heap if e[2] in state.ranked), default=None, key=_setter_key) \
            or min(heap, default=None, key=_setter_key)
        if chosen is not None:
            setters.append((chosen[0], pl, chosen[2]))
        reached.update(((pl, counts), value) for value, _, counts in heap)
        say(f"[{clock_now() - t0:6.1f}s] {pl}: bound over partitions {bounds[pl]:.6g} ({state.done} of the "
            f"{len(found)} partitions whose relaxed bound is below {threshold:.6g} bounded one by one"
            + (f", {state.n_blocks} with blocks of microbatches" if state.n_blocks else "")
            + (f", {state.two_rank} with two ranks together)" if state.two_rank else ")"))
    return bounds, certified, setters, reached


@dataclass
class _Tightening:
    """One placement's partitions in step 4: the listing by relaxed value and the first partition
    not reached (``upcoming``: relaxed value, counts), the partitions reached (``heap``: bound, how
    far, counts), the relaxations under way (``blocks`` under a tight cap first, then ``pairs``:
    two ranks together), ``ranked`` (those whose block steps are all taken), and how many were
    bounded one by one, with blocks and with two ranks."""

    listing: Iterator
    threshold: float
    upcoming: Optional[tuple] = None
    heap: list = field(default_factory=list)
    blocks: dict = field(default_factory=dict)
    ranked: set = field(default_factory=set)
    pairs: dict = field(default_factory=dict)
    done: int = 0
    n_blocks: int = 0
    two_rank: int = 0

    def __post_init__(self):
        self.upcoming = next(self.listing, None)

    @property
    def waiting(self) -> float:
        """The relaxed value of the first partition not reached: no partition left is below it."""
        return self.upcoming[0] if self.upcoming is not None else self.threshold


def _tighten(state: _Tightening, problem_of, pl, paired, theta, tight, ends, pairs_end) -> None:
    """Raise the least bound of `state` step by step until nothing left could lower it below
    `theta`, the least is final, or `ends` passes: the next listed partition gets its own bound
    (``own_bound``, at first with the current least as `enough`: it may stop early at a value that
    cannot lower it) while its relaxed value is the least; else the least takes one relaxation step
    (``_relax_least``). Cost: one ``own_bound`` per partition reached, one relaxation step each
    round after."""
    heap = state.heap
    while not stop_requested():
        waiting = state.waiting
        least = heap[0][0] if heap else math.inf
        if min(waiting, least) >= theta * (1 - REL) or (heap and heap[0][1] == FINAL and least <= waiting):
            break  # nothing left that could lower the bound, or the least is final
        if ends.expired():
            if state.upcoming is not None and waiting < least:
                # out of time: the partition the bound stops at is the next to compile when
                # its own bound is the least seen (one more bound, milliseconds)
                own = own_bound(problem_of(state.upcoming[1]), min(least, state.threshold))
                heapq.heappush(heap, (own, OWN if own < min(least, state.threshold) else OWN_SO_FAR,
                                      state.upcoming[1]))
            break
        if state.upcoming is not None and waiting <= least:
            enough = min(least, state.threshold)  # nothing at or above the threshold can lower the bound
            own = own_bound(problem_of(state.upcoming[1]), enough)
            heapq.heappush(heap, (own, OWN if own < enough else OWN_SO_FAR, state.upcoming[1]))
            state.done += 1
            state.upcoming = next(state.listing, None)
            continue
        _relax_least(state, problem_of, pl, paired, theta, tight, ends, pairs_end)


def _relax_least(state: _Tightening, problem_of, pl, paired, theta, tight, ends, pairs_end) -> None:
    """One step on the partition whose bound is the least, with `theta` as its target: its own
    bound in full where it stopped early; a two-rank bound step 3 found (`paired`); under a tight
    cap (`tight`) the block relaxation's next block size (schedc.solver.bounds.blocks: the whole problem on
    a few microbatches, CP-SAT, by `ends`), then the two-rank relaxation's next pair of ranks
    (schedc.solver.bounds.pair, CP-SAT, by `pairs_end`). Once it reaches `theta` or has nothing
    left to try its bound is final. Cost: one relaxation step (a fraction of a second)."""
    from schedc.solver.bounds.blocks import BlockRelaxation
    from schedc.solver.bounds.pair import PairRelaxation

    heap = state.heap
    value, how_far, counts = heapq.heappop(heap)
    if how_far == OWN_SO_FAR:
        heapq.heappush(heap, (max(value, own_bound(problem_of(counts))), OWN, counts))
        return
    if (pl, counts) in paired and paired[(pl, counts)] >= theta * (1 - REL):
        heapq.heappush(heap, (max(value, paired[(pl, counts)]), FINAL, counts))
        return
    if how_far == OWN and tight and not work_budget_on():
        # the whole problem on a few microbatches: near the partition's optimum where the
        # cap is tight, so the least bound left is the partition to compile (step 4b)
        state.blocks[counts] = BlockRelaxation(problem_of(counts), theta, CERTIFY_BLOCKS)
        state.n_blocks += 1
    if counts in state.blocks:
        relaxation = state.blocks[counts]
        if not relaxation.settled and value < theta * (1 - REL):
            value = max(value, relaxation.next(ends))  # one step, then the least is weighed again
            if relaxation.settled and relaxation.solved:
                state.ranked.add(counts)
            heapq.heappush(heap, (value, FINAL if value >= theta * (1 - REL) else RELAXED, counts))
            return
        del state.blocks[counts]
    if value >= theta * (1 - REL) or pairs_end.expired() or work_budget_on():
        # no time for two ranks together: the bound so far is final
        heapq.heappush(heap, (value, FINAL, counts))
        return
    if counts not in state.pairs:
        state.pairs[counts] = PairRelaxation(problem_of(counts), theta)
        state.two_rank += 1
    relaxation = state.pairs[counts]
    value = max(value, relaxation.next(pairs_end))  # one pair, then the least is weighed again
    heapq.heappush(heap, (value, FINAL if relaxation.settled else RELAXED, counts))
    if relaxation.settled:
        del state.pairs[counts]


def _setter_key(entry: tuple[float, int, tuple[int, ...]]):
    value, how_far, counts = entry
    return value, how_far == OWN_SO_FAR, counts
