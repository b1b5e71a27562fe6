"""Contiguous partitions of a per-unit profile into pipeline stages, and bounds over all of them.

Problem: a per-unit profile lists the model's units in order (embedding, each layer, norm + head +
loss). A partition gives each of S stages a run of consecutive units (at least one each); the
placement puts stage k on a rank (``loop``: rank k, one stage per rank; ``v``: ranks r and
2R-1-r share rank r). For a memory cap in bytes (everything the cost model counts per rank
included: static bytes, receive buffers and held sends, reserve) and M microbatches we
need (1) the smallest cap under which some partition fits at all, (2) splits to compare with
(compute-balanced, torchtitan's default, even), and (3) a lower bound on the step time of EVERY
partition and every schedule of it under the cap: "the bound over partitions".

Method: each question is a min over partitions of a max over ranks of a term that depends only on
that rank's units and on the units before and after them (prefix and suffix sums), so a dynamic
program over stage boundaries solves it exactly:

- loop: dp[k][j] = min over i of max(dp[k-1][i], term_k(units i..j-1)), O(S U^2);
- v: rank r holds the r-th segment from the front and from the back, so the program peels ranks
  from the outside in over states (i, j) = units still to place, O(R U^4) (numpy over the three
  inner boundaries).

The step-time term is a relaxation of ``schedc.solver.bounds.chains``'s per-rank terms evaluated for the
stage(s) of that rank (torch's runtime: stage 0's backward all in W): ``work_after_head``,
``backward_after_head``, ``last_backward``, ``last_forward``, and with a finite cap
``memory_warmup``, ``memory_slots_makespan``, ``memory_area_makespan`` (for ``span`` their span
forms), plus the cycles of the memory orders (schedc.solver.graph.memory_arcs: W(lo, j-L-1)
before F(s, j), also across the two stages of a V rank, whose room they share). Each is written
with quantities that are exact for the rank's own stages and lower bounds for the rest, so it
never exceeds the bound of the partition actually chosen: communication counts the cheapest
boundary once per rank crossing, and the gradient chain down to stage 0 counts stage 0's weight
gradient as that of unit 0 only (stage 0's other units' backward is counted as their
I's). A rank's memory is the cost model's, exact for its own stages: its room is the cap less
its static bytes, reserve and the receive buffers of the boundaries its stages touch
(schedc.core.cost_model.boundary_buffers), and a rank whose least cap
(schedc.core.cost_model.segments_need, over cost_model.Segments) does not fit makes the
partition's term inf. The one-microbatch chain (all F's, I's and unit 0's W, with the fewest
crossings) is added as a partition-free term. Every term is monotone in those lower-bounded quantities, so the min
over partitions of the max over ranks, maxed with the chain, is a valid bound for all partitions;
``tests/test_plan.py`` checks it against exhaustive search on tiny instances.

Cost: loop O(S U^2 M) (the cool-down knapsack tries every count of open microbatches; given the
caller's deadline it stops there, with a looser bound that says so), v O(R U^4) numpy work.
"""

from __future__ import annotations

import math
import re
import time
import unicodedata
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import numpy as np

from schedc.core.cost_model import CostModel, Segments, fits, microbatch_need, segments_need
from schedc.core.costs import Profile
from schedc.core.formatting import format_bytes
from schedc.core.tolerances import REL, TIE
from schedc.errors import SchedcError

_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")  # no module path holds one

PLACEMENTS = ("loop", "v")
INF = math.inf


def n_stages_for(placement: str, n_ranks: int) -> int:
    return n_ranks * (2 if placement == "v" else 1)


@dataclass(frozen=True)
class Units:
    """Prefix sums over a per-unit profile as torch's runtime executes it (unit 0's I is in its W)."""

    n: int
    F: np.ndarray  # F[u] = sum of forward of units < u (length n + 1)
    I: np.ndarray
    W: np.ndarray
    act: np.ndarray
    wg: np.ndarray
    static: np.ndarray
    w0: float  # unit 0's W (its whole backward under torch's runtime)
    comm: float  # the cheapest unit boundary: every crossing costs at least this
    # the cost model's bytes per run of units (schedc.core.cost_model.Segments) when the profile
    # has terms beyond the ZB accounting (rises at I, transients, a reserve, receive buffers);
    # None otherwise (``wg`` above is then exact; with them it is cut to the activation, the
    # bounds' relaxed view)
    extra: Optional[Segments] = None
    # the microbatches the receive buffers are counted for when a caller gives none
    n_microbatches: Optional[int] = None

    @classmethod
    def of(cls, profile: Profile, n_microbatches: Optional[int] = None) -> "Units":
        p = profile.executed("torch")
        st = p.stages
        # bytes from the one cost model; one unit per rank, so a rank's static bytes are its unit's
        cm = CostModel.build(p, range(len(st)), 1)
        act = [cm.activation(k) for k in range(len(st))]
        true_wg = [cm.weight_grad(k) for k in range(len(st))]

        def prefix(values):
            return np.concatenate([[0.0], np.cumsum(np.asarray(values, dtype=float))])

        comm = min(p.comm) if isinstance(p.comm, list) and p.comm else (0.0 if isinstance(p.comm, list) else float(p.comm))
        extra = Segments.of(profile) if (cm.new_terms or cm.reserve or p.boundary_bytes is not None) else None
        # the bounds read wg: cut to the activation (a relaxation, schedc.solver.graph.Graph.relaxed)
        wg = [min(w, a) for w, a in zip(true_wg, act)] if extra else true_wg
        return cls(n=len(st), F=prefix([u.forward for u in st]), I=prefix([u.backward_input for u in st]),
                   W=prefix([u.backward_weight for u in st]), act=prefix(act),
                   wg=prefix(wg), static=prefix(cm.static),
                   w0=st[0].backward_weight, comm=comm, extra=extra, n_microbatches=n_microbatches)

    @property
    def reserve(self) -> float:
        return self.extra.reserve if self.extra else 0.0

    def seg(self, arr: np.ndarray, i, j):
        return arr[j] - arr[i]

    def unit_work(self) -> np.ndarray:
        """F + I + W of each unit (wherever torch runs unit 0's I)."""
        return np.diff(self.F) + np.diff(self.I) + np.diff(self.W)

    def seg_i(self, i, j):
        """I of the stage made of units [i, j): 0 for stage 0 (torch runs its backward in W)."""
        return np.where(i == 0, 0.0, self.I[j] - self.I[i])

    def seg_w(self, i, j):
        return np.where(i == 0, self.I[j] + self.W[j], self.W[j] - self.W[i])

    def microbatches(self, n_microbatches: Optional[int]) -> int:
        """The microbatches to count receive buffers for: `n_microbatches`, else the ones these
        units were built with; an error where the profile has buffers and neither is known."""
        m = n_microbatches if n_microbatches is not None else self.n_microbatches
        if m is None and self.extra is not None and self.extra.has_buffers:
            raise SchedcError("the receive buffers of a profile with boundary_bytes depend on the number of "
                              "microbatches: pass n_microbatches (or build Units.of(profile, n_microbatches))")
        return m if m is not None else 1


def _segments(u: Units) -> Segments:
    """The unit runs' byte fields, which Units.of builds where the cost model needs more than
    act and wg (new terms, a reserve, boundary bytes): the callers below check ``u.extra``."""
    assert u.extra is not None, "Units.of built no Segments for this profile"
    return u.extra


def one_microbatch_need(u: Units, segments):
    """The least running-sum peak of a rank holding the stages made of `segments` ((i, j)
    boundary arrays, in stage order): schedc.core.cost_model.microbatch_need, elementwise."""
    return microbatch_need([_segments(u).stage(i, j) for i, j in segments])


def loop_least_need(u: Units, M: int, i, j):
    """The least cap of a loop rank holding units [i, j) as its one stage, M microbatches
    (schedc.core.cost_model.least_need with the buffers of its two boundaries; the pipeline's
    ends have none)."""
    return segments_need(_segments(u), [(i, j)], loop_buffers(u, M, i, j))


def v_least_need(u: Units, M: int, n_ranks: int, r: int, i, a, b, j):
    """The same for rank r of a V holding units [i, a) and [b, j): the middle rank's two stages
    meet on it (a == b), the other ranks' four boundaries cross to their neighbours."""
    return segments_need(_segments(u), [(i, a), (b, j)], v_buffers(u, M, n_ranks, r, i, a, b, j))


def loop_buffers(u: Units, M: int, i, j):
    """The receive buffers and held sends of a loop rank holding units [i, j)
    (schedc.core.cost_model.boundary_buffers of its two boundaries; 0 without boundary bytes)."""
    x = u.extra
    if x is None or not x.has_buffers:
        return 0.0
    return x.buffers(i, M, into_last=np.asarray(j) == u.n) + x.buffers(j, M)


def v_buffers(u: Units, M: int, n_ranks: int, r: int, i, a, b, j):
    """The same for rank r of a V: the middle rank's two stages meet on it (a == b)."""
    x = u.extra
    if x is None or not x.has_buffers:
        return 0.0
    if r == n_ranks - 1:
        return x.buffers(i, M) + x.buffers(a, M, same_rank=True) + x.buffers(j, M)
    into_last = np.asarray(j) == u.n  # stage 2R-1-r is the last (rank 0's upper stage)
    return x.buffers(i, M) + x.buffers(a, M) + x.buffers(b, M, into_last=into_last) + x.buffers(j, M)


# ---------------------------------------------------------------- the min-max dynamic programs

def minmax_loop(u: Units, n_stages: int, term: Callable[[int, np.ndarray, np.ndarray], np.ndarray]):
    """(value, units per stage) minimizing max over stages k of term(k, i, j) over contiguous
    partitions; term gets broadcastable arrays i (column) and j (row) of boundaries."""
    U, S = u.n, n_stages
    if S > U:
        return INF, None
    idx = np.arange(U + 1)
    i, j = idx[:, None], idx[None, :]
    prev = np.full(U + 1, INF)
    prev[0] = -INF
    choice = []
    for k in range(S):
        t = np.asarray(term(k, i, j), dtype=float) * np.ones((U + 1, U + 1))
        valid = (j > i) & (i >= k) & (j <= U - (S - 1 - k))
        t = np.where(valid, t, INF)
        comb = np.maximum(prev[:, None], t)
        best_i = np.argmin(comb, axis=0)
        prev = comb[best_i, idx]
        choice.append(best_i)
    value = float(prev[U])
    if not math.isfinite(value):
        return value, None
    counts, end = [], U
    for k in range(S - 1, -1, -1):
        i0 = int(choice[k][end])
        counts.append(end - i0)
        end = i0
    return value, counts[::-1]


# The planner's bounds and caps over V partitions run minmax_v some tens of times, each O(R U^4)
# in numpy: about this many (rank x unit^4) per second in all (docs/design.md, "Deep models")
V_BOUND_TERMS_PER_SECOND = 2e7


def v_bound_seconds(n_units: int, n_ranks: int) -> float:
    """About how long the planner's bounds over V partitions take for `n_units` units on
    `n_ranks` ranks (their dynamic programs grow as R U^4 and check no deadline)."""
    return n_ranks * float(n_units) ** 4 / V_BOUND_TERMS_PER_SECOND


def minmax_v(u: Units, n_ranks: int, term: Callable[[int, int, np.ndarray, np.ndarray, np.ndarray], np.ndarray]):
    """(value, units per stage) minimizing max over ranks r of term(r, i, a, b, j) over
    contiguous partitions into 2R stages placed in a V: rank r's stages are units [i, a) (stage r)
    and [b, j) (stage 2R-1-r). term gets the scalar i and broadcastable arrays a, b, j."""
    U, R = u.n, n_ranks
    if 2 * R > U:
        return INF, None
    idx = np.arange(U + 1)
    nxt = np.where(idx[:, None] == idx[None, :], -INF, INF)  # level R: nothing may remain
    choices = []
    for r in range(R - 1, -1, -1):
        dp = np.full((U + 1, U + 1), INF)
        arg = np.zeros((U + 1, U + 1), dtype=np.int64)
        for i in range(r, U):
            rest = idx[i + 1:]  # a, b and j all lie after i
            n = len(rest)
            a, b, j = rest[:, None, None], rest[None, :, None], rest[None, None, :]
            valid = (b >= a) & (j > b) & (j <= U - r)
            if r == R - 1:
                valid = valid & (a == b)
            t = np.where(valid, np.asarray(term(r, i, a, b, j), dtype=float), INF)
            comb = np.maximum(t, nxt[i + 1:, i + 1:, None]).reshape(n * n, n)
            best = np.argmin(comb, axis=0)
            dp[i, i + 1:] = comb[best, np.arange(n)]
            a0, b0 = np.divmod(best, n)
            arg[i, i + 1:] = (a0 + i + 1) * (U + 1) + (b0 + i + 1)
        nxt = dp
        choices.append(arg)
    value = float(nxt[0, U])
    if not math.isfinite(value):
        return value, None
    front, back, lo, hi = [], [], 0, U
    for arg in reversed(choices):  # r = 0 first
        flat = int(arg[lo, hi])
        a0, b0 = divmod(flat, U + 1)
        front.append(a0 - lo)
        back.append(hi - b0)
        lo, hi = a0, b0
    return value, front + back[::-1]


def minmax(u: Units, placement: str, n_ranks: int, loop_term, v_term):
    if placement == "loop":
        return minmax_loop(u, n_ranks, loop_term)
    return minmax_v(u, n_ranks, v_term)


# ---------------------------------------------------------------- what each rank needs / does

def min_cap(u: Units, placement: str, n_ranks: int, n_microbatches: Optional[int] = None):
    """(bytes, units per stage): the smallest per-rank cap (everything included) under which some
    partition holds one microbatch in flight on every rank (the cost model's least cap, receive
    buffers for `n_microbatches` included: :meth:`Units.microbatches`), and that partition."""
    loop_need, v_need = _least_needs(u, n_ranks, n_microbatches)
    return minmax(u, placement, n_ranks, loop_need, v_need)


def _least_needs(u: Units, n_ranks: int, n_microbatches: Optional[int]):
    """(loop term, v term): each rank's least cap (:func:`loop_least_need`,
    :func:`v_least_need`); without terms beyond the ZB accounting, static bytes plus one
    microbatch's activations."""
    if u.extra:
        M = u.microbatches(n_microbatches)
        return (lambda k, i, j: loop_least_need(u, M, i, j),
                lambda r, i, a, b, j: v_least_need(u, M, n_ranks, r, i, a, b, j))
    return (lambda k, i, j: u.seg(u.static, i, j) + u.seg(u.act, i, j),
            lambda r, i, a, b, j: (u.seg(u.static, i, a) + u.seg(u.act, i, a)
                                   + u.seg(u.static, b, j) + u.seg(u.act, b, j)))


def balanced(u: Units, placement: str, n_ranks: int, cap: float = INF, n_microbatches: Optional[int] = None):
    """(seconds per microbatch, units per stage): the partition whose busiest rank does the least
    compute (F + I + W) among those that hold one microbatch under `cap` (:func:`min_cap`'s
    least caps)."""
    loop_need, v_need = _least_needs(u, n_ranks, n_microbatches)
    held = (lambda need: fits(need, cap)) if u.extra else (lambda need: need <= cap)

    def loop_term(k, i, j):
        return np.where(held(loop_need(k, i, j)), u.seg(u.F, i, j) + u.seg_i(i, j) + u.seg_w(i, j), INF)

    def v_term(r, i, a, b, j):
        w = (u.seg(u.F, i, a) + u.seg_i(i, a) + u.seg_w(i, a)
             + u.seg(u.F, b, j) + u.seg(u.I, b, j) + u.seg(u.W, b, j))
        return np.where(held(v_need(r, i, a, b, j)), w, INF)

    return minmax(u, placement, n_ranks, loop_term, v_term)


STOP_EVERY = 32  # knapsack steps between looks at the caller's clock (a look costs far less than a step)


def _knapsack(M: int, room, act, wg, i_, w_, stop: Optional[Callable[[], bool]] = None):
    """Most I/W-seconds a one-stage rank can owe at its last F (bounds._backward_work_in_memory):
    (that, whether `stop` cut the count short). One step per count of open microbatches, O(M);
    cut short, the most the rank can owe at all (M x (I + W)) stands in: a larger owing only
    weakens the bound, so it stays a bound."""
    best = np.zeros(np.broadcast(room, act, wg, i_, w_).shape)
    for n_open in range(1, M + 1):
        if stop is not None and n_open % STOP_EVERY == 0 and stop():
            return np.maximum(best, M * (i_ + w_)), True
        left = room - n_open * act
        ok = left >= -REL * act
        more = np.minimum(M - n_open, np.floor(np.maximum(left, 0.0) / np.where(wg > 0, wg, 1.0) + REL))
        more = np.where(wg > 0, more, M - n_open)
        best = np.where(ok, np.maximum(best, n_open * (i_ + w_) + more * w_), best)
    return best, False


def _max_of(arrays):
    """Elementwise max of arrays that broadcast together (np.maximum.reduce needs one shape)."""
    out = arrays[0]
    for x in arrays[1:]:
        out = np.maximum(out, x)
    return out


def _ratio(num, den):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), INF)


@dataclass(frozen=True)
class _Case:
    """What every rank's step-time term shares: the units, R ranks, M microbatches, the byte cap
    and the objective."""

    u: Units
    n_ranks: int
    M: int
    cap: float
    makespan: bool
    stop: Optional[Callable[[], bool]] = None  # the caller's deadline, looked at by the knapsack
    cut: list = field(default_factory=list)  # True once the knapsack stopped at it

    @property
    def capped(self) -> bool:
        return math.isfinite(self.cap)


@dataclass(frozen=True)
class _Rank:
    """One rank's quantities in its step-time terms (arrays over the boundaries; "lo"/"hi": the
    rank's lowest and highest stage, one and the same on a loop rank). Times are lower bounds
    wherever they depend on other ranks' units (module docstring)."""

    work: np.ndarray  # the rank's F + I + W over all microbatches (f_r + i_r + w_r)
    f_r: np.ndarray
    i_r: np.ndarray
    w_r: np.ndarray
    head: np.ndarray  # before its first F can start: the forward of the units below
    head_i: np.ndarray  # before its first backward can start
    fi_chain: np.ndarray  # from its first F to its first backward (one microbatch there and back)
    i_chain: np.ndarray  # one microbatch's backward from its highest stage's I down to its lowest's
    after_hi: np.ndarray  # forward and backward of the units above its highest stage
    tail_i_lo: np.ndarray  # after its lowest stage's last I: the backward below it, unit 0's W
    tail_f_hi: np.ndarray  # after its highest stage's last F
    w_lo: np.ndarray  # one W of its lowest stage
    # per stage, lowest first: the least time from one microbatch's F start to its I end
    cycles: tuple
    room: np.ndarray  # bytes for microbatches: the cap less static bytes, receive buffers and the reserve
    holds: Union[np.ndarray, bool]  # whether some schedule fits the cap (the cost model's least cap)
    # read under a finite cap only: the most F-seconds it can run before its first backward, the
    # most I/W-seconds it can owe at its last F, the memory orders' and slots' cycle terms, and
    # the byte-seconds it holds over the step
    x: np.ndarray
    y: np.ndarray
    slots: Union[np.ndarray, float]
    area: np.ndarray


def _free_term(case: _Case, q: _Rank):
    """The rank's bound without a cap: its work after its head, its backward after its first one,
    and its last backward and last forward with what must follow them."""
    if case.makespan:
        return _max_of([
            q.head + q.work, q.head_i + q.i_r + q.w_r, q.head + q.f_r + q.i_r + np.maximum(q.w_lo, q.tail_i_lo),
            q.head + q.f_r + q.tail_f_hi])
    return _max_of([q.work, q.fi_chain + q.i_r + q.w_r,
                    np.maximum(q.f_r + q.after_hi, q.fi_chain) + q.i_chain + q.w_lo])


def _capped_term(case: _Case, q: _Rank):
    """The rank's bound under the cap (inf where one microbatch of each stage does not fit): the
    free bound, the idle a capped warm-up and cool-down force, the byte-seconds over the room,
    and the cycle terms."""
    span_tail = q.after_hi + q.i_chain + q.w_lo
    warm = q.x < q.f_r - TIE
    if case.makespan:
        mw = q.work + np.maximum(q.head, q.head_i - q.x) + np.maximum(0.0, np.maximum(span_tail, q.tail_f_hi) - q.y)
        area_t = q.head + q.area / np.where(q.room > 0, q.room, 1.0)
    else:
        mw = q.work + np.maximum(0.0, q.fi_chain - q.x) + np.maximum(0.0, span_tail - q.y)
        area_t = q.area / np.where(q.room > 0, q.room, 1.0)
    out = _max_of([_free_term(case, q), np.where(warm, mw, 0.0), area_t, q.slots])
    return np.where(q.holds, out, INF)


def _rank_term(case: _Case, q: _Rank):
    return _capped_term(case, q) if case.capped else _free_term(case, q)


def _slot(case: _Case, head_s, cycle, act_s, room, tail):
    """k = room / act microbatches of a stage in flight, each taking `cycle` from its F to its I:
    M microbatches take M / k cycles (when k < M)."""
    k = np.floor(room / np.where(act_s > 0, act_s, 1.0) + REL)
    use = (act_s > 0) & (k >= 1) & (k < case.M)
    val = (head_s if case.makespan else 0.0) + case.M * cycle / np.maximum(k, 1.0) + (tail if case.makespan else 0.0)
    return np.where(use, val, 0.0)


def _w_cycle(case: _Case, head_s, cycle, held, wg, room):
    """The memory orders' cycle (schedc.solver.graph.memory_arcs): W(lo, j - L - 1) ends
    before F(s, j) starts, L = floor((room - held) / wg(lo)), and F(s, j) -> ... -> W(lo, j)
    takes `cycle`, so F(s, m) starts >= head + floor(m / (L + 1)) cycles and the step lasts
    >= head + ceil(M / (L + 1)) cycles (makespan; a span starts no earlier than head)."""
    per = np.floor(np.maximum(room - held, 0.0) / np.where(wg > 0, wg, 1.0) + REL) + 1
    use = (wg > 0) & (room >= held * (1 - REL))
    return np.where(use, (head_s if case.makespan else 0.0) + np.ceil(case.M / per - REL) * cycle, 0.0)


def _loop_rank(case: _Case, k, i, j) -> _Rank:
    """Rank k of a loop holding units [i, j) as stage k."""
    u, M, c, capped = case.u, case.M, case.u.comm, case.capped
    F, I, W = u.seg(u.F, i, j), u.seg_i(i, j), u.seg_w(i, j)
    act, wg = u.seg(u.act, i, j), u.seg(u.wg, i, j)
    head = u.F[i] + k * c
    after = (u.F[-1] - u.F[j]) + (u.I[-1] - u.I[j]) + 2 * c * (case.n_ranks - 1 - k)
    tail_i = W if k == 0 else u.I[i] + u.w0 + k * c
    room = case.cap - u.seg(u.static, i, j) - u.reserve - loop_buffers(u, M, i, j)
    holds = fits(loop_least_need(u, M, i, j), case.cap) if u.extra and capped else act <= room
    f_r, i_r, w_r = M * F, M * I, M * W
    x = np.minimum(f_r, np.floor(room / np.where(act > 0, act, 1.0) + REL) * F) if capped else f_r
    x = np.where(act > 0, x, f_r)
    if capped:
        y, cut = _knapsack(M, room, act, wg, I, W, case.stop)
        if cut:
            case.cut.append(True)
    else:
        y = i_r + w_r
    y = np.where((act > 0) & (wg > 0), np.minimum(y, i_r + w_r), i_r + w_r)
    cycle = F + after + I
    slots = np.maximum(_slot(case, head, cycle, act, room, 0.0 if k == 0 else tail_i),
                       _w_cycle(case, head, cycle + W, act, wg, room)) if capped else 0.0
    return _Rank(work=f_r + i_r + w_r, f_r=f_r, i_r=i_r, w_r=w_r, head=head, head_i=head + F + after,
                 fi_chain=F + after, i_chain=I, after_hi=after, tail_i_lo=tail_i, tail_f_hi=after + I + tail_i,
                 w_lo=W, cycles=(cycle,), room=room, holds=holds, x=x, y=y, slots=slots,
                 area=M * (act * cycle + wg * W))


def _v_rank(case: _Case, r, i, a, b, j) -> _Rank:
    """Rank r of a V holding units [i, a) as stage r and [b, j) as stage 2R-1-r."""
    u, M, c, R = case.u, case.M, case.u.comm, case.n_ranks
    cross_in = 2 * R - 2 - r  # rank crossings before stage 2R-1-r (stages R-1 and R share a rank)
    FA, IA, WA = u.seg(u.F, i, a), u.seg_i(i, a), u.seg_w(i, a)
    FB, IB, WB = u.seg(u.F, b, j), u.seg(u.I, b, j), u.seg(u.W, b, j)
    actA, actB = u.seg(u.act, i, a), u.seg(u.act, b, j)
    wgA, wgB = u.seg(u.wg, i, a), u.seg(u.wg, b, j)
    head_lo = u.F[i] + r * c
    head_hi = u.F[b] + cross_in * c
    after_hi = (u.F[-1] - u.F[j]) + (u.I[-1] - u.I[j]) + 2 * r * c
    after_lo = (u.F[-1] - u.F[a]) + (u.I[-1] - u.I[a]) + 2 * cross_in * c
    tail_i_lo = WA if r == 0 else u.I[i] + u.w0 + r * c
    tail_i_hi = u.I[b] + u.w0 + cross_in * c
    f_r, i_r, w_r = M * (FA + FB), M * (IA + IB), M * (WA + WB)
    i_chain = IA + (u.I[j] - u.I[a]) + (2 * R - 2 - 2 * r) * c
    fi_chain = (u.F[b] - u.F[i]) + (2 * R - 2 - 2 * r) * c + FB + after_hi
    room = case.cap - u.seg(u.static, i, a) - u.seg(u.static, b, j) - u.reserve - v_buffers(u, M, R, r, i, a, b, j)
    if u.extra and case.capped:
        holds = fits(v_least_need(u, M, R, r, i, a, b, j), case.cap)
    else:
        holds = actA + actB <= room
    cycA, cycB = FA + after_lo + IA, FB + after_hi + IB
    if case.capped:
        x = np.minimum(f_r, room * np.maximum(_ratio(FA, actA), _ratio(FB, actB)))
        y = np.minimum(i_r + w_r, room * _max_of([
            _ratio(IA + WA, actA), _ratio(WA, wgA), _ratio(IB + WB, actB), _ratio(WB, wgB)]))
        # W(lo) before F(hi) with the room both stages share: F(hi, j), forward to the end and
        # back down to I(lo, j), then W(lo, j)
        cycle_shared = FB + after_hi + i_chain + WA
        slots = _max_of([_w_cycle(case, head_lo, cycA + WA, actA, wgA, room),
                         _w_cycle(case, head_hi, cycle_shared, actA + actB, wgA, room),
                         _w_cycle(case, head_hi, cycB + WB, actA + actB, wgB, room),
                         _slot(case, head_lo, cycA, actA, room, 0.0 if r == 0 else tail_i_lo),
                         _slot(case, head_hi, cycB, actB, room, tail_i_hi)])
        area = M * (actA * cycA + wgA * WA + actB * cycB + wgB * WB)
    else:
        x = y = slots = area = 0.0
    return _Rank(work=f_r + i_r + w_r, f_r=f_r, i_r=i_r, w_r=w_r, head=head_lo, head_i=head_hi + FB + after_hi,
                 fi_chain=fi_chain, i_chain=i_chain, after_hi=after_hi, tail_i_lo=tail_i_lo,
                 tail_f_hi=after_hi + IB + tail_i_hi, w_lo=WA, cycles=(cycA, cycB), room=room, holds=holds,
                 x=x, y=y, slots=slots, area=area)


def step_bound_terms(u: Units, n_ranks: int, n_microbatches: int, cap: float, objective: str = "makespan",
                     stop: Optional[Callable[[], bool]] = None, cut: Optional[list] = None):
    """(loop_term, v_term): per-rank lower bounds on the step time, for the min-max programs.

    Problem: a term per rank, from that rank's units and the prefix and suffix sums around them
    alone, that no schedule of any partition placing those units on that rank beats.

    Method: the rank's quantities (:class:`_Rank`: its work, the chains before and after it, its
    room and what the cap lets it hold) go into the terms of the module docstring: the free
    terms, and under a finite cap the capped warm-up and cool-down, the byte-seconds over the
    room and the memory cycles; inf where one microbatch of each of its stages does not fit.

    Cost: O(1) numpy operations per call over the boundary arrays given, O(M) for a loop rank
    under a cap (the cool-down knapsack), which stops once `stop()` says so (a looser term, still a
    bound) and then appends True to `cut`."""
    case = _Case(u, n_ranks, n_microbatches, cap, objective == "makespan", stop, cut if cut is not None else [])

    def loop_term(k, i, j):
        return _rank_term(case, _loop_rank(case, k, i, j))

    def v_term(r, i, a, b, j):
        return _rank_term(case, _v_rank(case, r, i, a, b, j))

    return loop_term, v_term


def chain_bound(u: Units, placement: str, n_ranks: int) -> float:
    """One microbatch's forward and backward through every unit with the fewest rank crossings."""
    S = n_stages_for(placement, n_ranks)
    crossings = S - 1 - (1 if placement == "v" else 0)
    return float(u.F[-1] + u.I[-1] + u.w0 + 2 * crossings * u.comm)


@dataclass(frozen=True)
class PartitionBound:
    """A lower bound on the step of every partition (and schedule) under the cap, for one placement;
    ``counts``: the partition whose relaxed terms reach it (a good place to start searching)."""

    placement: str
    value: float
    per_rank: float  # the min-max over partitions of the per-rank terms
    chain: float
    counts: Optional[list[int]]
    cut: bool = False  # the knapsack stopped at the caller's deadline: a looser bound than in full


def partition_bound(profile: Profile, n_ranks: int, n_microbatches: int, cap: float = INF,
                    placement: str = "loop", objective: str = "makespan",
                    stop: Optional[Callable[[], bool]] = None) -> PartitionBound:
    """A value no partition of `profile`'s units into stages placed by `placement` on `n_ranks`
    ranks, with any schedule of `n_microbatches` microbatches under the per-rank byte cap `cap`
    (static bytes included), beats under `objective` (module docstring). inf when no partition
    fits the cap. `stop` (the caller's deadline) cuts the loop's O(M) knapsack short: the result
    is then still a bound, a looser one, and says so (``cut``)."""
    if placement not in PLACEMENTS:
        raise SchedcError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    u = Units.of(profile)
    cut: list = []
    loop_term, v_term = step_bound_terms(u, n_ranks, n_microbatches, cap, objective, stop, cut)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        value, counts = minmax(u, placement, n_ranks, loop_term, v_term)
    chain = chain_bound(u, placement, n_ranks) if objective == "makespan" else 0.0
    return PartitionBound(placement, max(value, chain) if math.isfinite(value) else INF, value, chain, counts,
                          cut=bool(cut))


def partitions_below(profile: Profile, n_ranks: int, n_microbatches: int, cap: float, placement: str,
                     objective: str, theta: float, limit: int) -> tuple[float, list[tuple[float, tuple[int, ...]]]]:
    """(threshold, partitions): every partition whose relaxed per-rank terms (``step_bound_terms``)
    all stay below the threshold, as (relaxed value, units per stage) sorted by value. The
    threshold is `theta`, or lower (bisected towards the dynamic program's bound) where more than
    `limit` partitions are below `theta`.

    Any partition left out has a relaxed value, hence a bound, of at least the threshold: so the
    minimum over the returned partitions of any valid per-partition bound, capped at the
    threshold, is a bound over every partition. Method: the dynamic program's transitions (one
    stage, or one rank's two stages in a V) whose term stays below `theta`, kept once; for a
    threshold, the number of partitions below it by counting paths over them (so the bisection
    needs no new terms), then a depth-first walk over the states those counts say can finish.
    Cost: the dynamic program's O(S U^2) / O(R U^4), O(transitions) per count, O(limit x S) for the walk."""
    u = Units.of(profile)
    loop_term, v_term = step_bound_terms(u, n_ranks, n_microbatches, cap, objective)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        steps = (_loop_transitions(u, n_ranks, loop_term, theta) if placement == "loop"
                 else _v_transitions(u, n_ranks, v_term, theta))
    chain = chain_bound(u, placement, n_ranks) if objective == "makespan" else 0.0
    values = [v for level in steps for tr in level.values() for v in tr[3]]
    # a threshold above every term (theta = inf) lists every partition; bisect from there
    low, high = -INF, theta if math.isfinite(theta) or not values else np.nextafter(max(values), INF)
    if _completions(steps, u.n, high)[0][0, u.n] > limit:
        low = min(values)  # no partition is below its smallest term
        for _ in range(40):  # bisect for the largest threshold with at most `limit` partitions below
            mid = (low + high) / 2
            if _completions(steps, u.n, mid)[0][0, u.n] > limit:
                high = mid
            else:
                low = mid
        high = low
    found = _walk(steps, u.n, high)
    return max(high, chain), sorted((max(value, chain), counts) for value, counts in found)


# Transitions: steps[level][i] = (a, b, j, value): from state (i, j) a level places units [i, a)
# (and, in a V, [b, j)) on its stage(s) with that term, leaving state (a, b). A loop's state is
# (i, U) throughout, its b = j = U.


def _loop_transitions(u: Units, S: int, term, theta: float):
    U = u.n
    idx = np.arange(U + 1)
    i, j = idx[:, None], idx[None, :]
    steps = []
    for k in range(S):
        t = np.asarray(term(k, i, j), dtype=float) * np.ones((U + 1, U + 1))
        valid = (j > i) & (i >= k) & (j <= U - (S - 1 - k)) & (t < theta)
        level = {}
        for start in range(U + 1):
            ends = np.nonzero(valid[start])[0]
            if len(ends):
                level[start] = (ends, np.full(len(ends), U), np.full(len(ends), U), t[start, ends])
        steps.append(level)
    return steps


def _v_transitions(u: Units, R: int, term, theta: float):
    U = u.n
    idx = np.arange(U + 1)
    steps: list[dict] = [dict() for _ in range(R)]
    live = idx[:, None] == idx[None, :]  # states the inner ranks can finish from (with terms < theta)
    for r in range(R - 1, -1, -1):
        now = np.zeros((U + 1, U + 1), dtype=bool)
        for i in range(r, U):
            rest = idx[i + 1:]
            a, b, j = rest[:, None, None], rest[None, :, None], rest[None, None, :]
            valid = (b >= a) & (j > b) & (j <= U - r)
            if r == R - 1:
                valid = valid & (a == b)
            t = np.where(valid, np.asarray(term(r, i, a, b, j), dtype=float), INF)
            keep = (t < theta) & live[i + 1:, i + 1:, None]
            ia, ib, ij = np.nonzero(keep)
            if len(ia):
                steps[r][i] = (ia + i + 1, ib + i + 1, ij + i + 1, t[ia, ib, ij])
                now[i, np.unique(ij + i + 1)] = True
        live = now
    return steps


def _completions(steps, U: int, theta: float) -> list[np.ndarray]:
    """counts[k][i, j]: the ways to place units [i, j) on levels k.. with every transition value
    below theta (float: counts can be huge); counts[len(steps)] = every unit placed."""
    counts = [np.eye(U + 1)]  # state (x, x): nothing left
    for level in reversed(steps):
        now = np.zeros((U + 1, U + 1))
        for i, (a, b, j, value) in level.items():
            w = np.where(value < theta, counts[-1][a, b], 0.0)
            now[i] += np.bincount(j, weights=w, minlength=U + 1)
        counts.append(now)
    return counts[::-1]


def _walk(steps, U: int, theta: float) -> list[tuple[float, tuple[int, ...]]]:
    """Every partition whose transitions all stay below theta, depth first through the states
    that have a completion."""
    counts = _completions(steps, U, theta)
    out = []

    def walk(k: int, i: int, j: int, front: list[int], back: list[int], worst: float) -> None:
        if k == len(steps):
            out.append((worst, tuple(front + back[::-1])))
            return
        if i not in steps[k]:
            return
        a, b, jj, value = steps[k][i]
        for a0, b0, v in zip(a[jj == j], b[jj == j], value[jj == j]):
            a0, b0 = int(a0), int(b0)
            if v < theta and counts[k + 1][a0, b0] > 0:
                walk(k + 1, a0, b0, front + [a0 - i], back + [j - b0] if b0 < j else back, max(worst, float(v)))

    if counts[0][0, U] > 0:
        walk(0, 0, U, [], [], -INF)
    return out


# ---------------------------------------------------------------- splits to compare with

def torchtitan_default_counts(n_units: int, n_stages: int) -> list[int]:
    """torchtitan 0.3.0's default split (``_generate_llm_fqn_per_model_part`` with
    first/last_stage_less_layers = 1) in units, for units [embedding, layers..., head]: the
    embedding and the head each weigh one layer, so the L + 2 units are split as evenly as
    possible, the first stages taking the remainder."""
    base, extra = divmod(n_units, n_stages)
    return [base + (1 if s < extra else 0) for s in range(n_stages)]


def even_counts(n_units: int, n_stages: int) -> list[int]:
    """The layers split as evenly as possible (first stages take the remainder), the embedding
    added to the first stage and the head to the last (units [embedding, layers..., head])."""
    layers = n_units - 2
    if layers < n_stages:
        return torchtitan_default_counts(n_units, n_stages)
    base, extra = divmod(layers, n_stages)
    counts = [base + (1 if s < extra else 0) for s in range(n_stages)]
    counts[0] += 1
    counts[-1] += 1
    return counts


def stage_modules(profile: Profile, counts: Sequence[int]) -> list[list[str]]:
    """Module names per stage; a unit without names is called ``unit<i>``."""
    out, start = [], 0
    for n in counts:
        names = []
        for k in range(start, start + n):
            names.extend(profile.stages[k].modules or [f"unit{k}"])
        out.append(names)
        start += n
    return out


def module_name_problem(name: str) -> str:
    """'' for a name every framework's parser reads back as one module, else why not (torchtitan's
    comma-separated ``list[str]`` flag, a shell or a YAML list would read it as something else)."""
    if not name:
        return "is empty; name every module"
    if "," in name:
        return ("contains a comma, which torchtitan's --parallelism.module_fqns_per_model_part reads as two "
                "modules; rename the module")
    if name.startswith("-"):
        return "starts with '-', which a command line reads as a flag; rename the module"
    if _CONTROL.search(name) or any(unicodedata.category(c)[0] in "CZ" for c in name):
        return "contains a space or control character, which no module path holds; rename the module"
    return ""


def check_units(profile: Profile, source: str = "profile") -> list[str]:
    """Notes on a per-unit profile (units without module names); duplicate names are an error."""
    seen: dict[str, int] = {}
    for k, unit in enumerate(profile.stages):
        for name in unit.modules or []:
            problem = module_name_problem(name)
            if problem:  # before the search: the partition could not be handed over
                raise SchedcError(f"{source}: stages[{k}].modules: {ascii(name)[:80]} {problem}")
            if name in seen:
                raise SchedcError(f"{source}: stages[{k}].modules: {name!r} is already in unit {seen[name]}; "
                                  "each module belongs to exactly one unit")
            seen[name] = k
    missing = [k for k, unit in enumerate(profile.stages) if not unit.modules]
    if missing:
        return [f"{len(missing)} of {profile.n_stages} units have no 'modules'; they are named unit<index> "
                f"(e.g. unit{missing[0]}): add module names to hand the partition to torchtitan or NeMo"]
    return []


# ---------------------------------------------------------------- why nothing fits

WHY_RANKS_SECONDS = 2.0  # the most the search for a pipeline degree that fits may take


def why_nothing_fits(profile: Profile, u: Units, placement: str, n_ranks: int, cap: float,
                     n_microbatches: Optional[int] = None, least=None) -> str:
    """Why no partition onto `n_ranks` fits `cap`, and what would: text for a
    :class:`~schedc.errors.ParameterError`'s detail (placeholders ``{name:P}`` name flags).

    Problem: "the smallest cap is 159.65GiB" tells a user that the plan failed, not whether
    checkpointing, tensor parallelism or more ranks would rescue it. Method: the split of
    :func:`min_cap` (the one that needs least) and its fullest rank's static bytes plus reserve,
    the part no schedule and no checkpointing changes, with the share FSDP2 holds unsharded under
    torch's pipelining where the profile's ``assumes`` counts it
    (:func:`schedc.model_costs.fsdp_held`); then the remedies with numbers: checkpointing only
    when the static part fits, the tensor-parallel degree whose counted bytes (everything but the
    reserve is divided by the degree in a counted profile) fit, and the least pipeline degree up
    to the unit count whose own least split fits one stage per rank. `least`: :func:`min_cap`'s
    (bytes, units per stage) for `placement`, where the caller has it. Cost: that
    :func:`min_cap` when not given (a V's is O(R U^4): seconds at 80 layers), and one loop
    :func:`min_cap` per degree tried, within ``WHY_RANKS_SECONDS``.
    """
    need, counts = least if least is not None else min_cap(u, placement, n_ranks, n_microbatches)
    edges = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    stage_static = [u.seg(u.static, edges[k], edges[k + 1]) for k in range(len(counts))]
    if placement == "v":
        per_rank = [stage_static[r] + stage_static[len(counts) - 1 - r] for r in range(n_ranks)]
    else:
        per_rank = stage_static
    static = float(max(per_rank)) + u.reserve
    assumes = profile.assumes or {}
    unsharded = assumes.get("fsdp_unsharded_bytes_per_param") or 0.0
    sharded = (assumes.get("static_bytes_per_param") or 0.0) / (assumes.get("dp_shard") or 1)
    held = ""
    if unsharded and sharded + unsharded:
        share = unsharded / (sharded + unsharded) * (static - u.reserve)
        held = (f" ({format_bytes(share)} of it the weights and gradients each rank holds unsharded under "
                f"torch's pipelining with FSDP2 at dp_shard {assumes.get('dp_shard')}: a larger {{param:dp_shard}} "
                f"divides only the other {format_bytes(static - u.reserve - share)})")
    text = (f"; its least split ({'/'.join(str(int(c)) for c in counts)} units per stage) holds "
            f"{format_bytes(static)} on its fullest rank before any activation: weights, gradients, optimizer "
            f"states" + (" and the reserve" if u.reserve else "") + held)
    would = []
    if fits(static, cap):
        would.append("activation checkpointing ({name:ac}full, or {name:ac}auto) for the "
                     f"{format_bytes(need - static)} of activations and buffers")
    else:
        text += "; activation checkpointing cannot help: this part alone is over the cap"
    tp = assumes.get("tp")
    if isinstance(tp, int) and not isinstance(tp, bool):
        for more in (2, 4, 8):
            tp_need = u.reserve + (need - u.reserve) / more
            if fits(tp_need, cap):
                would.append(f"{{name:tp}}{tp * more} (about {format_bytes(tp_need)})")
                break
    # one stage per rank: the loop's program is O(S U^2), the V's O(R U^4) (tens of seconds at 80 layers)
    deadline = time.monotonic() + WHY_RANKS_SECONDS
    for ranks in range(n_ranks + 1, u.n + 1):
        if time.monotonic() > deadline:
            break
        more_need = min_cap(u, "loop", ranks, n_microbatches)[0]
        if fits(more_need, cap):
            would.append(f"{{name:ranks}}{ranks} (loop, needs {format_bytes(more_need)})")
            break
    return text + ("; would fit: " + ", ".join(would) if would else "; no remedy tried fits")
