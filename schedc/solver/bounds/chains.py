"""Lower bounds on the step time of every schedule of a problem: the certificate behind "gap".

Problem: a number L such that EVERY schedule of the problem (any per-rank order of its F, I, W or
B actions, under the dependency rules of docs/design.md, timed with earliest starts as simulate()
does, or indeed with any later starts) has objective >= L. The bound must hold for the
objective chosen: ``makespan`` (all ranks start at 0, the step ends at the last end) or ``span``
(max over ranks of last end - first start).

Method: combinatorial terms, each a chain of work that must run one after another. Notation for
a rank r: F_r, I_r, W_r = summed durations of all its F, I, W actions (a B counts as its I + W);
``c(b)`` = communication across boundary b when it crosses ranks (else 0). Facts used:

(a) a rank runs one action at a time, so any set of its actions that must all happen inside an
    interval needs an interval at least as long as their summed durations;
(b) a rank's first action is an F (an I/B needs the F of its stage and microbatch first, a W its
    I), and F(s, m) cannot start before ``head(s) = sum_{s'<s} (F(s') + c(s'))`` (its microbatch
    must traverse every earlier stage);
(c) every I (or B) of a stage s needs, after the F(s, m) of the same microbatch on this rank,
    the chain F(s+1..S-1), I(S-1..s+1) with communications; after I(s, m) (or B) the chain
    I(s-1..0) (or B) and W(0, m) must still run (stage 0's weights always need their gradient).
    A B contains its W, so every chain below is also a lower bound when B replaces I/W;
(d) with lo(r) / hi(r) the smallest / largest stage on rank r: r's first F and last I are on
    lo, its first I and last F are on hi (an I(s, m) with s < hi needs I(hi, m), also on r, first;
    an F(s, m) with s < hi is followed by F(hi, m) on r).

Chains of one microbatch: fiChain(r) from the start of F(lo, m) to the start of I(hi, m)
(forward lo..hi, then afterF(hi) = forward to the last stage and backward up to hi+1, with
communications); iChain(r) from the start of I(hi, m) to the end of I(lo, m); headI(s), tailI(s)
= sum_{s'<s}(c(s') + I(s')) + W(0) (W(0) itself when s = 0), tailF(s) = from the end of F(s, m)
to the end of W(0, m).

Makespan terms (each valid because makespan >= every end time):
  work      max_r  head(lo) + F_r + I_r + W_r         (b) then (a)
  backward  max_r  headI(hi) + I_r + W_r: every I/W of r comes after r's first I, on hi (d)
  last-I    max_r  head(lo) + F_r + I_r + max(W(lo), tailI(lo)): all F's and I's of r end by
            r's last I, I(lo, m); then W(lo, m) still runs on r and I(lo-1..0, m) + W(0, m)
            downstream
  last-F    max_r  head(lo) + F_r + tailF(hi): after r's last F, F(hi, m), the rest of m's chain
  chain     one microbatch's full chain: all F, all I, W(0), communications both ways
  and every span term below (makespan >= span for any schedule).

Span terms (valid for span; ranks may start late, so no head term): for rank r with first
action at time a_r,
  work      max_r  F_r + I_r + W_r                   (a)
  backward  max_r  fiChain(r) + I_r + W_r: r's first I, I(hi, m), needs F(lo, m) on r (>= a_r)
            then the chain; all of r's I/W follow
  last-F    max_r  max(F_r + afterF(hi), fiChain(r)) + iChain(r) + W(lo): all of r's F's run
            between a_r and the end of its last F, F(hi, m), (or: m's own chain from F(lo, m));
            then m's chain down to I(lo, m) and W(lo, m) on r

Memory-aware terms (only with a finite cap): take a stage s on rank r, room = cap - static bytes,
K = floor(room / activation(s)). Call microbatch m "open" on s from the start of F(s, m) to the
end of its I(s, m) (or B). At any instant at most K microbatches are open: all their F's precede,
in r's order, every I that ends later, so right after the latest of those F's the running sum
(which the cap bounds) holds all of their activations. Each open interval lasts at least
cycle(s) = F(s) + afterF(s) + I(s), so the hull of the M intervals is >= M * cycle(s) / K
(K parallel "slots"). The hull lies inside r's span (span term ``memory_slots``); for makespan
it starts no earlier than head(s) and, when s > 0, the microbatch that closes it still needs
I(s-1..0) and W(0): ``memory_slots_makespan`` = head(s) + M * cycle(s) / K + tailI(s) (s > 0).

Memory area (only with a finite cap): the bytes a rank holds at any instant are one of the running
sums simulate() checks (F's count from their start, I/W frees from their end), so they never
exceed room_r; over r's span their time integral is at most room_r * span_r. Each microbatch
holds act(s) from the start of F(s, m) to the end of I(s, m) (>= cycle(s)) and weight_grad(s)
from then to the end of W(s, m) (>= W(s)), all inside r's span. Hence ``memory_area``:
span_r >= M * sum_{s on r} (act(s) cycle(s) + wg(s) W(s)) / room_r, and for makespan the span
starts no earlier than head(lo) (``memory_area_makespan``).

Memory-limited warm-up (only with a finite cap): before rank r's first I (or B) it can run only
F's (a W needs its I), and none of those microbatches has been I'd yet, so all their activations
are held at once: the F-seconds done before r's first I are at most X_r = min(F_r,
room_r * max_{s on r} F(s) / act(s)) (with one stage: K * F(s), K = floor(room / act)). Every other
second of r's work comes after that first I.

Memory-limited cool-down, the mirror image: after the end of r's last F, F(hi, m*), r runs only
I's and W's of microbatches it has already started, and at the start of that F every one of them
still holds bytes (its activation while it owes I + W, its weight-gradient bytes while it owes
only W), all within room_r. So the I/W-seconds left after r's last F are at most Y_r, the best
such knapsack (one stage: a microbatches owing I + W and b owing W, a >= 1, a + b <= M; several
stages: room_r times the best seconds-per-byte ratio). Yet that window lasts at least the chain
of m*: tailSpan(r) = afterF(hi) + iChain(r) + W(lo) on r, tailF(hi) to the step's end.
When X_r < F_r the two windows are disjoint (r cannot hold all its activations, so an F runs after
its first I) and their idle times add up. Hence
  span:     span_r >= work_r + max(0, fiChain(r) - X_r) + max(0, tailSpan(r) - Y_r)
            (``span_memory_warmup``: the first I starts >= a_r + fiChain, at most X_r of that wait
            is useful work; likewise at the end)
  makespan: makespan >= work_r + max(head(lo), headI(hi) - X_r)
                       + max(0, max(tailSpan(r), tailF(hi)) - Y_r)          (``memory_warmup``)
  e.g. 8 identical stages, comm 0.5F, 24 microbatches, 1.25p: rank 0 idles >= 22 - 10 at the
  start and >= 23 - 20 at the end, so makespan >= 72 + 12 + 3 = 87, which zb-greedy reaches.

The first rank seen from another rank (valid for both objectives): let r0 hold stage 0 and a0
be r0's first start. Every F(s, m) waits for F(0, m), on r0, so it starts >= a0 + head(s), and
every action of a rank r starts >= a0 + head(lo). Take r's last I, I(lo, m*) (d): all of r's
F's and I's end by its end, and so do the W's r no longer owes then. Right after that I, r holds
exactly the weight-gradient bytes of the W's it still owes (every I is done), no more than after
its last F (I's and W's only free bytes), so within room_r: they are at most Z_r W-seconds (one
stage: floor(room / weight_grad) W's; several: room_r times the best W-seconds-per-byte). Then
m*'s backward still runs down to W(0, m*) on r0. Likewise r's last F, F(hi, m*), ends after all
of r's F's and all but Y_r of its I/W-seconds, then m*'s chain runs to W(0, m*). When X_r < F_r
the F's before either of those ends can also be counted from r's first I, which starts
>= a0 + headI(hi), with at most X_r F-seconds before it (the warm-up argument):
Fdone_r = max(head(lo) + F_r, headI(hi) + F_r - X_r) (the first form alone when X_r >= F_r).
Hence, for every rank r, the span of r0 (and so both objectives):
  span_r0 >= Fdone_r + I_r + max(0, W_r - Z_r) + tailI(lo)       (``first_rank_last_backward``)
  span_r0 >= Fdone_r + max(0, I_r + W_r - Y_r) + tailF(hi)       (``first_rank_last_forward``)
  (a worked case, where zb-greedy reaches this term: docs/design.md, "Lower bound"). With memory
  below 1p the warm-up form proves V-Min and V-Half optimal for span.

Cost: O(S x R + R x M) (one pass over each rank's stages after O(S) prefix sums; the one-stage
knapsack tries each a = 1..M).
"""

from __future__ import annotations

import math
from typing import Union

from schedc.core.ir import Kind
from schedc.core.tolerances import REL
from schedc.solver.graph import Graph, graph_of
from schedc.solver.problem import Problem


def chains(g: Graph) -> dict:
    """One microbatch's chains of the module docstring, per stage: head, after_f, head_i, tail_i,
    tail_f (and F, I, W, c, chain); schedc.solver.bounds.anchored pins its windows with them."""
    S = g.S
    F, I, W = g.dF, g.dI, g.dW
    c = g.comm[: S - 1]
    head = [0.0] * S  # earliest start of F(s, m)
    for s in range(1, S):
        head[s] = head[s - 1] + F[s - 1] + c[s - 1]
    fwd_total = head[S - 1] + F[S - 1]  # end of the forward chain at the last stage
    # after_f[s]: from the end of F(s, m) to the earliest start of I(s, m)
    after_f = [0.0] * S
    for s in range(S - 2, -1, -1):
        after_f[s] = c[s] + F[s + 1] + after_f[s + 1] + I[s + 1] + c[s]
    # head_i[s]: earliest start of I(s, m) from time 0
    head_i = [head[s] + F[s] + after_f[s] for s in range(S)]
    # tail_i[s]: from the end of I(s, m) to the earliest end of W(0, m)
    tail_i = [0.0] * S
    tail_i[0] = W[0]
    for s in range(1, S):
        tail_i[s] = c[s - 1] + I[s - 1] + tail_i[s - 1]
    # tail_f[s]: from the end of F(s, m) to the earliest end of W(0, m)
    tail_f = [after_f[s] + I[s] + tail_i[s] for s in range(S)]
    chain = fwd_total + after_f[S - 1] + I[S - 1] + tail_i[S - 1]
    return dict(F=F, I=I, W=W, c=c, head=head, after_f=after_f, head_i=head_i, tail_i=tail_i,
                tail_f=tail_f, chain=chain)


def _forward_work_in_memory(g: Graph, own: list[int], room: float, F: list[float], M: int) -> float:
    """Most F-seconds rank r can run while holding every activation at once (see docstring)."""
    total = M * sum(F[s] for s in own)
    if len(own) == 1:
        act = g.act[own[0]]
        if act <= 0:
            return total
        return min(total, math.floor(room / act + REL) * F[own[0]])
    ratios = []
    for s in own:
        act = g.act[s]
        if act <= 0:
            return total
        ratios.append(F[s] / act)
    return min(total, room * max(ratios))


def _backward_work_in_memory(g: Graph, own: list[int], room: float, M: int) -> float:
    """Most I/W-seconds rank r can still owe when it starts its last F (see docstring): a
    microbatch owing I + W holds its activation, one owing only W its weight-gradient bytes."""
    owed_total = M * sum(g.dI[s] + g.dW[s] for s in own)
    if len(own) == 1:
        s = own[0]
        act, wg = g.act[s], g.wg[s]
        i, w = g.dI[s], g.dW[s]
        if act <= 0 or wg <= 0:
            return owed_total
        best = 0.0
        for a in range(1, M + 1):  # a microbatches owe I + W (the last F's one among them)
            left = room - a * act
            if left < -REL * act:
                break
            b = min(M - a, math.floor(max(left, 0.0) / wg + REL))  # the rest owe only W
            best = max(best, a * (i + w) + b * w)
        return min(owed_total, best)
    ratios = []
    for s in own:
        act, wg = g.act[s], g.wg[s]
        if act <= 0 or wg <= 0:
            return owed_total
        i, w = g.dI[s], g.dW[s]
        ratios.append(max((i + w) / act, w / wg))
    return min(owed_total, room * max(ratios))


def _pending_weight_work(g: Graph, own: list[int], room: float, M: int) -> float:
    """Most W-seconds rank r can owe right after its last I: each owed W holds its stage's
    weight-gradient bytes, all within `room` (see docstring)."""
    w = [g.dW[s] for s in own]
    wg = [g.wg[s] for s in own]
    owed_total = M * sum(w)
    if min(wg) <= 0:
        return owed_total
    if len(own) == 1:
        return min(owed_total, math.floor(room / wg[0] + REL) * w[0])
    return min(owed_total, room * max(x / y for x, y in zip(w, wg)))


def lower_bound_details(problem: Union[Problem, Graph]) -> dict[str, float]:
    """Each named lower-bound term (see the module docstring for why each is valid) and
    ``lower_bound``, their maximum, for problem.objective."""
    return _details(problem)[0]


def rank_span_bounds(problem: Union[Problem, Graph]) -> list[float]:
    """Per rank r, a lower bound on r's own span (last end - first start) in every schedule:
    the maximum of the span terms of the module docstring evaluated for r alone."""
    return _details(problem)[1]


SPAN_TERMS = ("span_work", "span_backward", "span_last_forward", "memory_slots", "span_memory_warmup",
              "memory_area")
MAKESPAN_TERMS = ("work_after_head", "backward_after_head", "last_backward", "last_forward",
                  "memory_slots_makespan", "memory_warmup", "memory_area_makespan")
# bounds on the span of the rank holding stage 0, evaluated through each rank r (docstring)
FIRST_RANK_TERMS = ("first_rank_last_backward", "first_rank_last_forward")


def _rank_terms(g: Graph, ch: dict, r: int) -> dict[str, float]:
    """Every per-rank term of the module docstring for rank r (0 where a term does not apply)."""
    F, I, W = ch[Kind.F], ch[Kind.I], ch[Kind.W]
    M = g.M
    own = g.stages[r]
    Fr = M * sum(F[s] for s in own)
    Ir = M * sum(I[s] for s in own)
    Wr = M * sum(W[s] for s in own)
    work = Fr + Ir + Wr
    lo, hi = own[0], own[-1]  # r's first F and last I are on lo, its first I and last F on hi
    head_r = ch["head"][lo]
    # from the start of F(lo, m) to the start of I(hi, m): forward lo..hi, then down and back up
    fi_chain = ch["head"][hi] - ch["head"][lo] + F[hi] + ch["after_f"][hi]
    # from the start of I(hi, m) to the end of I(lo, m)
    i_chain = ch["head_i"][lo] - ch["head_i"][hi] + I[lo]
    out = dict.fromkeys(SPAN_TERMS + MAKESPAN_TERMS + FIRST_RANK_TERMS, 0.0)
    out["span_work"] = work
    out["span_backward"] = fi_chain + Ir + Wr
    out["span_last_forward"] = max(Fr + ch["after_f"][hi], fi_chain) + i_chain + W[lo]
    out["work_after_head"] = head_r + work
    out["backward_after_head"] = ch["head_i"][hi] + Ir + Wr
    out["last_backward"] = head_r + Fr + Ir + max(W[lo], ch["tail_i"][lo])
    out["last_forward"] = head_r + Fr + ch["tail_f"][hi]
    # without a cap r may owe all its W's after its last I, all its I/W's after its last F
    out["first_rank_last_backward"] = head_r + Fr + Ir + ch["tail_i"][lo]
    out["first_rank_last_forward"] = head_r + Fr + ch["tail_f"][hi]
    cap = g.caps[r]
    room = g.room[r]
    if not math.isfinite(cap) or room <= 0:
        return out
    x = _forward_work_in_memory(g, own, room, F, M)
    y = _backward_work_in_memory(g, own, room, M)
    forwards_done = head_r + Fr
    if x < Fr:
        # r cannot hold every activation at once, so its first I starts before its last F ends:
        # the warm-up and cool-down windows are disjoint and their idle times add up
        span_tail = ch["after_f"][hi] + i_chain + W[lo]
        out["span_memory_warmup"] = work + max(0.0, fi_chain - x) + max(0.0, span_tail - y)
        out["memory_warmup"] = (work + max(head_r, ch["head_i"][hi] - x)
                                + max(0.0, max(span_tail, ch["tail_f"][hi]) - y))
        # the F's r still runs after its first I, which starts >= headI(hi)
        forwards_done = max(forwards_done, ch["head_i"][hi] + Fr - x)
    z = _pending_weight_work(g, own, room, M)
    out["first_rank_last_backward"] = forwards_done + Ir + max(0.0, Wr - z) + ch["tail_i"][lo]
    out["first_rank_last_forward"] = forwards_done + max(0.0, Ir + Wr - y) + ch["tail_f"][hi]
    area = M * sum(g.act[s] * (F[s] + ch["after_f"][s] + I[s]) + g.wg[s] * W[s] for s in own)
    out["memory_area"] = area / room
    out["memory_area_makespan"] = head_r + area / room
    for s in own:
        act = g.act[s]
        if act <= 0:
            continue
        k = math.floor(room / act + REL)
        if 1 <= k < M:
            cycle = F[s] + ch["after_f"][s] + I[s]
            out["memory_slots"] = max(out["memory_slots"], M * cycle / k)
            tail = ch["tail_i"][s] if s > 0 else 0.0
            out["memory_slots_makespan"] = max(out["memory_slots_makespan"], ch["head"][s] + M * cycle / k + tail)
    return out


def _details(problem: Union[Problem, Graph]) -> tuple[dict[str, float], list[float]]:
    g = graph_of(problem).relaxed()  # valid whatever rises or is transient (Graph.relaxed)
    problem = g.problem
    ch = chains(g)
    per_rank_terms = [_rank_terms(g, ch, r) for r in range(g.R)]
    names = SPAN_TERMS + (MAKESPAN_TERMS if problem.objective == "makespan" else ())
    out = {name: max(t[name] for t in per_rank_terms) for name in names}
    if problem.objective == "makespan":
        out["one_microbatch_chain"] = ch["chain"]
    out.update({name: max(t[name] for t in per_rank_terms) for name in FIRST_RANK_TERMS})
    out["lower_bound"] = max(out.values())
    per_rank = [max(t[name] for name in SPAN_TERMS) for t in per_rank_terms]
    r0 = problem.placement[0]
    per_rank[r0] = max(per_rank[r0], *(out[name] for name in FIRST_RANK_TERMS))
    return out, per_rank


def lower_bound(problem: Union[Problem, Graph]) -> float:
    """A value no schedule of `problem` beats under problem.objective (see module docstring)."""
    return lower_bound_details(problem)["lower_bound"]
