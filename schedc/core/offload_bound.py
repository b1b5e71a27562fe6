"""A bound over partitions that still holds when schedules may offload and recompute.

Problem: a lower bound on the step of every partition of a per-unit profile onto R ranks, every
schedule, with any activation offload (schedc.core.memory_actions) and any checkpointing per unit
and microbatch among some given modes, under a per-rank byte cap. The capped bound of
schedc.core.partition does not hold there: offload relaxes its memory terms (a wait for a copy
takes the place of the memory a microbatch would hold). The bound without a cap does hold, but
says nothing about the cap.

What offload cannot relax: a microbatch's forward makes its activations on the device, and its
copy out starts only when the forward ends. So at the end of every F of stage s the rank holds
at least its static bytes, its reserve, its receive buffers and that microbatch's activations of
stage s. Where those exceed the cap the stage cannot keep its activations for any microbatch:
each of its M microbatches must drop bytes by checkpointing units (a mode that keeps less after F
and recomputes in the backward). On a rank of a V the rule holds per stage (the other stage's
microbatches may wait in host memory).

What the cap still bounds: a byte a microbatch keeps is on the device from its F's start to its
I's end; a byte it moves is on the device during its F, its copy out, its fetch and its I. So
the cap, less the static bytes, limits the byte-seconds all microbatches spend there, and a
rank's step after its head is at least those byte-seconds over its room (the W of units that
keep weight gradients adds its own).

Method: per unit and mode, the price of the bytes a mode saves is (its F + I + W less the same
unit's without checkpointing) / (its activations less the mode's). For a stage of units [i, j)
that must drop D > 0 bytes per microbatch, any choice of modes per unit costs at least D times
the least price over the stage's units (the fractional multiple-choice knapsack's bound), and no
choice exists where D is more than what the stage's units can drop at most (the term is inf).
Each microbatch's byte-seconds are least when a share psi of its bytes moves (closed form,
:func:`on_device_seconds`); recomputing K seconds per microbatch adds M K to the rank's work and
backward and saves at most K x cycle / price byte-seconds, and the per-rank term is the min over
K of the larger of the work term and the byte-seconds term, both linear in K on each side of
their kinks, so the min is in closed form. The terms without a cap are schedc.core.partition's
``_free_term`` with the rank's own costs and the chains of the profile without checkpointing
(which lower-bound every mode's); the same dynamic programs take the min over partitions. Each
term stays at or below what a schedule of that partition needs, so the bound is valid:
`tests/test_offload_bound.py` checks it against the exact optimum on tiny instances and
against schedules found with offload and recompute.

What it assumes: the copy out of a microbatch starts when its F ends and its fetch ends before
its I starts (the simulator's rules); checkpointing F's times equal no checkpointing's (only the
backward recomputes); a mode keeps no more after F than no checkpointing. It ignores transients
and the order of microbatches, so it is loose where the cap binds by less than one microbatch's
worth or the link is fast.

Cost: O(U^2) per mode for the prices, then the dynamic programs of schedc.core.partition
without their knapsack: O(S U^2) for a loop, O(R U^4) for a V.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence, Union

import numpy as np

from schedc.core.costs import Profile
from schedc.core.partition import (
    INF,
    PLACEMENTS,
    PartitionBound,
    Units,
    _Case,
    _free_term,
    _loop_rank,
    _max_of,
    _v_rank,
    chain_bound,
    loop_buffers,
    minmax,
    v_buffers,
)
from schedc.core.tolerances import REL
from schedc.errors import SchedcError


def _per_unit(u: Units):
    """(activations, F + I + W) of each unit."""
    return np.diff(u.act), u.unit_work()


def drop_prices(none: Units, modes: Sequence[Units]) -> tuple[np.ndarray, np.ndarray]:
    """(price, droppable): price[i, j] the least seconds per byte dropped by any mode on any unit
    of [i, j) (inf where none drops any); droppable the prefix sums of the most each unit can drop."""
    act0, work0 = _per_unit(none)
    unit_price = np.full(none.n, INF)
    most = np.zeros(none.n)
    for m in modes:
        if m.n != none.n:
            raise SchedcError(f"a checkpointing mode's profile has {m.n} units, the profile without "
                              f"checkpointing {none.n}: give per-unit profiles of the same model")
        act, work = _per_unit(m)
        saved = act0 - act
        drops = saved > REL * np.maximum(act0, 1.0)
        price = np.maximum(work - work0, 0.0) / np.where(drops, saved, 1.0)
        unit_price = np.where(drops, np.minimum(unit_price, price), unit_price)
        most = np.maximum(most, np.where(drops, saved, 0.0))
    U = none.n
    price = np.full((U + 1, U + 1), INF)
    for i in range(U):
        price[i, i + 1:] = np.minimum.accumulate(unit_price[i:])
    return price, np.concatenate([[0.0], np.cumsum(most)])


def _forced(drop, droppable):
    """Bytes each microbatch must drop (elementwise): 0 where it keeps all, inf where it cannot
    drop enough."""
    must = drop > REL * np.maximum(np.abs(droppable), 1.0)
    return np.where(must & (drop > droppable * (1 + REL)), INF, np.where(must, drop, 0.0))


def on_device_seconds(held, cycle, own, bandwidth: float):
    """The least byte-seconds one microbatch's `held` bytes spend on the device between its F's
    start and its backward's end, `cycle` the least time between those and `own` its F + I: a
    share psi of them may be away from the end of the F's copy out to the start of the fetch,
    each copy taking psi x held / bandwidth. Kept, they stay `cycle`; moved, F + copy out + fetch
    + I, at most `cycle`. Over psi the least of held x ((1 - psi) cycle + psi min(cycle, own + 2
    psi held / bandwidth)) is at psi = (cycle - own) bandwidth / (4 held), at most 1. Convex in
    `held`, with slope at most `cycle`."""
    gain = np.maximum(cycle - own, 0.0)
    x = np.where(held > 0, held, 1.0)
    psi = np.clip(gain * bandwidth / (4 * x), 0.0, 1.0) if math.isfinite(bandwidth) else np.ones_like(x)
    copies = 2 * psi * psi * x / bandwidth if math.isfinite(bandwidth) else 0.0
    return np.where(held > 0, held * np.minimum(cycle, cycle - psi * gain + copies), 0.0)


def offload_partition_bound(none: Profile, modes: Sequence[Profile], n_ranks: int, n_microbatches: int,
                            cap: Union[float, Sequence[float]], placement: str = "loop",
                            objective: str = "makespan", bandwidth: float = INF) -> PartitionBound:
    """A value no partition of `none`'s units (the profile without checkpointing) placed by
    `placement` on `n_ranks` ranks beats with any schedule of `n_microbatches` microbatches under
    the per-rank cap `cap` (bytes; or one per rank), any offload over a link of `bandwidth` bytes per second each
    way (per GPU, after sharing) and any per-unit, per-microbatch choice among `modes` (per-unit
    profiles of the same units as torch runs them checkpointed,
    schedc.planning.ac.checkpointed_form); inf when no partition lets every stage's forward keep
    one microbatch (module docstring)."""
    if placement not in PLACEMENTS:
        raise SchedcError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    M = n_microbatches
    u = Units.of(none, M)
    price, droppable = drop_prices(u, [Units.of(m, M) for m in modes])
    case = _Case(u, n_ranks, M, INF, objective == "makespan")
    makespan = objective == "makespan"
    caps = [float(cap)] * n_ranks if isinstance(cap, (int, float)) else [float(c) for c in cap]
    if len(caps) != n_ranks:
        raise SchedcError(f"{len(caps)} caps for {n_ranks} ranks: give one cap, or one per rank")

    def stage(i, j, room, cycle, own):
        """One stage's (bytes each microbatch must drop, price per byte dropped, byte-seconds as
        kept, byte-seconds with the most dropped, byte-seconds saved per second of recompute)."""
        act, most, p = u.seg(u.act, i, j), u.seg(droppable, i, j), price[i, j]
        forced = _forced(act - room, most)
        free_drop = (most > 0) & (p <= 0)  # a mode drops bytes at no cost: kept as if dropped
        least = on_device_seconds(np.maximum(act - most, 0.0), cycle, own, bandwidth)
        kept = np.where(free_drop, least, on_device_seconds(act, cycle, own, bandwidth))
        p = np.where((most > 0) & ~free_drop, p, 0.0)
        # a byte dropped saves at most its cycle of byte-seconds (on_device_seconds' slope)
        rate = np.where(p > 0, cycle / np.where(p > 0, p, 1.0), 0.0)
        return np.where(np.isinf(forced), INF, p * np.where(np.isinf(forced), 0.0, forced)), p * most, \
            kept, least, rate

    def term(q, room, stages, held_for_w):
        """min over the seconds K >= the forced ones that each microbatch recomputes of max(the
        free term with M K more backward, the byte-seconds over the room) (module docstring)."""
        lo = sum(s[0] for s in stages)
        kept = sum(s[2] for s in stages)
        least = sum(s[3] for s in stages)
        rate = _max_of([s[4] for s in stages])
        ok = (room > 0) & np.isfinite(lo)
        r = np.where(room > 0, room, 1.0)
        lo = np.where(ok, lo, 0.0)

        def free(k):
            return _free_term(case, replace(q, work=q.work + M * k, i_r=q.i_r + M * k))

        # the free term is max(its value at 0, rising + M K): evaluated at 0 and past the kink
        at0 = free(0.0)
        rising = free(at0 / M) - at0
        # the byte-seconds term is max(start - fall K, floor)
        head = q.head if makespan else 0.0
        start, fall, floor = head + (M * kept + held_for_w) / r, M * rate / r, head + (M * least + held_for_w) / r
        k = np.maximum(lo, (start - rising) / (M + fall))
        out = _max_of([at0, floor, rising + M * k, start - fall * k])
        return np.where(ok, out, INF)

    def loop_term(k, i, j):
        q = _loop_rank(case, k, i, j)
        room = caps[k] - u.reserve - u.seg(u.static, i, j) - loop_buffers(u, M, i, j)
        wait_w = M * u.seg(u.wg, i, j) * q.w_lo
        s = stage(i, j, room, q.cycles[0], u.seg(u.F, i, j) + u.seg_i(i, j))
        return term(q, room, [s], np.where(u.seg(droppable, i, j) > 0, 0.0, wait_w))

    def v_term(r, i, a, b, j):
        q = _v_rank(case, r, i, a, b, j)
        room = caps[r] - u.reserve - u.seg(u.static, i, a) - u.seg(u.static, b, j) - \
            v_buffers(u, M, n_ranks, r, i, a, b, j)
        sa = stage(i, a, room, q.cycles[0], u.seg(u.F, i, a) + u.seg_i(i, a))
        sb = stage(b, j, room, q.cycles[1], u.seg(u.F, b, j) + u.seg(u.I, b, j))
        wait_w = M * (np.where(u.seg(droppable, i, a) > 0, 0.0, u.seg(u.wg, i, a) * u.seg_w(i, a)) +
                      np.where(u.seg(droppable, b, j) > 0, 0.0, u.seg(u.wg, b, j) * u.seg(u.W, b, j)))
        return term(q, room, [sa, sb], wait_w)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        value, counts = minmax(u, placement, n_ranks, loop_term, v_term)
    chain = chain_bound(u, placement, n_ranks) if makespan else 0.0
    return PartitionBound(placement, max(value, chain) if math.isfinite(value) else INF, value, chain, counts)

