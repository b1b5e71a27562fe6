"""Fast feasible schedules: event-driven list scheduling under a memory cap, plus local search.

Problem: order every F, I and W of every stage on its rank so that the step time (makespan or the
zero-bubble paper's per-rank span, as ``schedc.core.simulate`` measures it) is small, each rank's held
activation memory never exceeds its cap, and the order never deadlocks.

Method: a list scheduler in the spirit of the zero-bubble paper's greedy, run with several
priority rules, keeping the best by exact re-timing:

* Events are processed in time order. A rank that is free at time t picks among the actions that
  are ready at t (dependencies and communication done): a backward-for-inputs I (the critical
  chain; the deepest stage first), else a forward F if memory allows, the rank's warm-up limit
  allows and a banker's-algorithm check says the in-flight microbatches can still all finish
  one at a time in index order (needed only when a rank holds several stages: V / interleaved
  placements can otherwise fill a rank with early-stage activations and starve its later stage;
  the check is O(in-flight microbatches) per F), else a weight-gradient W (the filler).
  Forwards and backwards of a stage run in microbatch order.
* Rule parameters varied across constructions: warm-up limit per rank (how many microbatches a
  rank admits before it waits for backwards; 1F1B's, scaled, or memory-only), F-before-I while
  under that limit, a cap on pending W's per rank (0 = W right after its I as in 1F1B; about r on
  rank r as in ZB-H1), whether a W may delay an I that becomes ready during it, and
  (multi-stage ranks) which stage's F goes first and whether the rank keeps itself free for
  the F of a deeper stage whose input arrives before the F or W it would start ends (in a V the
  first microbatches' climb to the last stage and back is the critical path; a rank busy with its
  lower stage's next F when microbatch 0 reaches its upper stage delays every rank after it).
  Families are tried round-robin, the order depending on the objective, then random
  perturbations of the best rule while time remains.
  Construction stops early when it meets schedc.solver.bounds.chains.lower_bound (proven optimal).
* On small instances a local search then moves single actions on a rank (mostly W's) and keeps
  moves that do not worsen the objective, re-timing the whole schedule each time.

Never returns an infeasible schedule: memory is checked on every F, the banker's check rules out
deadlock, and every candidate is re-timed exactly (simulate()'s rules, memory included) before it
can be kept. A request whose cap cannot hold one microbatch of every stage on some rank raises
SchedcError naming the smallest limit that works (min_memory_limit). Microbatch count and
placement impose nothing else on this scheduler (any M >= 1, any stage -> rank map).

Cost: one construction is O(A log A) for A actions (times the in-flight count for F's on
multi-stage ranks under a cap); timings: docs/design.md, "Warm start".
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, replace
from typing import Optional, Union

from schedc.core.cost_model import fits, fits_room
from schedc.core.costs import format_amount, p_needed
from schedc.core.formatting import format_bytes
from schedc.core.ir import Action, Kind, Schedule
from schedc.core.simulate import simulate
from schedc.core.tolerances import REL
from schedc.errors import ParameterError, SchedcError
from schedc.solver.bounds.chains import lower_bound
from schedc.solver.deadline import CHECK_EVERY, NEVER, Deadline, charge_passes, now
from schedc.solver.engine import Incumbent, Result, found
from schedc.solver.graph import Graph, graph_of
from schedc.solver.problem import Problem

EPS = REL
INF = math.inf


# ---------------------------------------------------------------- memory feasibility

def min_memory_need(problem: Problem) -> list[float]:
    """Per rank, the bytes (everything it holds all step included) that one microbatch in flight
    needs: it runs the forward of every stage on the rank before any of their backwards, so it
    holds all of them, with each action's rise and transient on top while it runs
    (schedc.core.cost_model.CostModel.least_caps)."""
    return list(problem.costs.least_caps)


def min_memory_limit(problem: Problem) -> str:
    """The smallest ``--memory`` value (in the request's own unit) under which a schedule exists:
    one microbatch in flight on every rank. ``Kp`` requests get the smallest K, byte requests
    the bytes, ``none`` gets 'none'."""
    kind = problem.memory.kind
    if kind == "none":
        return "none"
    if kind == "bytes":
        return format_bytes(max(min_memory_need(problem)), round_up=True)
    # Kp is one cap for every rank (MemoryLimit.per_rank); the largest one-microbatch need must fit
    return f"{_round_up(p_needed(max(min_memory_need(problem)), problem.profile, problem.placement, problem.n_microbatches))}p"


def _round_up(k: float) -> str:
    for digits in range(2, 7):
        v = math.ceil(k * 10**digits - REL) / 10**digits
        if abs(v - k) < 0.01 * k or digits == 6:
            return f"{v:.{digits}f}".rstrip("0").rstrip(".")
    return f"{k:g}"


def check_memory_feasible(problem: Problem) -> None:
    """Raise SchedcError when some rank cannot hold even one microbatch of all its stages."""
    caps = problem.memory_caps
    need = min_memory_need(problem)
    room = problem.activation_room
    # the engines test held bytes against the room, relative to the room: so does this, else huge
    # static bytes would pass a cap whose room is too small for one microbatch (and no engine
    # could schedule anything under it)
    running = [n - fx for n, fx in zip(need, problem.fixed_bytes)]
    short = [r for r, (cap, n) in enumerate(zip(caps, need))
             if not fits(n, cap) or not fits_room(running[r], room[r])]
    if short:
        # name the rank furthest over its cap: the one whose need sets the smallest limit that works
        r = max(short, key=lambda q: need[q] / caps[q] if caps[q] > 0 else math.inf)
        def amount(x: float) -> str:  # bytes when asked in bytes; --costs memory has no bytes
            return format_bytes(x) if problem.memory.kind == "bytes" else format_amount(x, problem.profile)

        raise ParameterError(
            "memory", f"{{name}}{problem.memory}: rank {r} needs {amount(need[r])} to hold one microbatch "
            f"of its stages {problem.stages_of(r)} but the cap is {amount(caps[r])}; "
            f"the smallest limit that works is {{name}}{min_memory_limit(problem)}"
        )


# ---------------------------------------------------------------- list scheduler

@dataclass(frozen=True)
class Rule:
    """One priority rule for the list scheduler."""

    warmup: tuple[float, ...]  # per rank: most microbatches admitted (F on its first stage) and not yet I'd there
    f_first: bool = False  # a ready F under the warm-up limit goes before a ready I
    # most pending W's on a rank (one value, or one per rank) before a W is forced (0: W right after its I)
    w_limit: float | tuple[float, ...] = INF
    protect_i: bool = False  # do not start a W that would delay an I becoming ready during it
    deep_f: bool = True  # multi-stage ranks: F of the deepest ready stage first
    depth_first: bool = False  # multi-stage ranks: a ready F of a deeper stage beats a ready I
    group: int = 0  # multi-stage ranks: >0 runs microbatches in groups of this size per stage (Megatron's interleaving)
    # multi-stage ranks: do not start an F or a W that would delay the F of a deeper stage whose
    # input arrives during it (in a V the first microbatches' climb is the critical path)
    protect_f: bool = False

    def describe(self) -> str:
        w = "inf" if self.warmup[0] == INF else ",".join(f"{x:g}" for x in self.warmup)
        wl = ",".join(f"{x:g}" for x in self.w_limit) if isinstance(self.w_limit, tuple) else f"{self.w_limit:g}"
        return (f"warmup={w} f_first={self.f_first} w_limit={wl} "
                f"protect_i={self.protect_i} deep_f={self.deep_f} depth_first={self.depth_first} group={self.group}"
                + (" protect_f=True" if self.protect_f else ""))


def _list_schedule(a: Graph, rule: Rule, deadline: Deadline = NEVER) -> Optional[list[list[tuple[int, str, int]]]]:
    """Per-rank orders of (stage, kind, microbatch), or None if this rule gets stuck (or the
    deadline passes first)."""
    return ListScheduler(a, rule).run(deadline)


class ListScheduler:
    """One construction: events in time order; a rank that comes free picks an action by the
    rule (module docstring): a forced W, an I, an admissible F, or a W as filler."""

    def __init__(self, a: Graph, rule: Rule):
        S, M, R = a.S, a.M, a.R
        self.a, self.rule = a, rule
        self.endF = [[-1.0] * M for _ in range(S)]
        self.endI = [[-1.0] * M for _ in range(S)]
        self.nextF = [0] * S
        self.nextI = [0] * S
        self.pendW: list[list[tuple[int, int]]] = [[] for _ in range(R)]  # per rank, W's in I order
        self.wpos = [0] * R  # per rank: W's of pendW already run
        self.rank_free = [0.0] * R
        self.held = [0.0] * R
        self.admitted = [0] * R  # microbatches past F but not yet I on the rank's first stage
        self.first = [st[0] for st in a.stages]
        self.orders: list[list[tuple[int, str, int]]] = [[] for _ in range(R)]
        self.use_banker = a.multi and any(f < INF for f in a.room)
        if self.use_banker:
            self.mb_held = [[0.0] * R for _ in range(M)]  # per microbatch, per rank: bytes held
            self.mb_rem = [[0.0] * R for _ in range(M)]  # per microbatch, per rank: forward bytes still to come
            for m in range(M):
                for s in range(S):
                    self.mb_rem[m][a.stage_rank[s]] += a.act[s]
            self.started = [False] * M
            self.live: list[int] = []  # started microbatches in index order (finished ones pruned lazily)
        self.remaining = sum(len(st) for st in a.stages) * M * 3
        self.heap = [(0.0, r) for r in range(R)]
        heapq.heapify(self.heap)
        self.stages_desc = [list(reversed(st)) for st in a.stages]
        self.w_lim = rule.w_limit if isinstance(rule.w_limit, tuple) else (rule.w_limit,) * R

    def run(self, deadline: Deadline = NEVER) -> Optional[list[list[tuple[int, str, int]]]]:
        heap, rank_free = self.heap, self.rank_free
        steps = 0
        while heap:
            steps += 1
            if steps % CHECK_EVERY == 0 and deadline.expired():
                return None
            t0, r = heapq.heappop(heap)
            t = max(t0, rank_free[r])
            if t0 < rank_free[r] - EPS:
                continue  # stale event: the rank was busy
            choice = self.choose(r, t)
            if choice is None:
                continue  # idle: woken again by the next event that can make something ready
            s, kind, m = choice
            if kind == "wait":
                heapq.heappush(heap, (s, r))  # protect_i: back when the I is ready
            elif kind == Kind.F:
                self.run_F(r, s, m, t)
            elif kind == Kind.I:
                self.run_I(r, s, m, t)
            else:
                self.wpos[r] += 1
                self.run_W(r, s, m, t)
        return None if self.remaining else self.orders

    def choose(self, r: int, t: float) -> Optional[tuple]:
        """(stage, kind, microbatch) rank r runs at t; (time, "wait", None) to wait for an I;
        None when nothing is ready."""
        rule = self.rule
        best_I, soon_I = self.ready_backward(r, t)
        cand_F, f_blocked_by_memory, soon_deep_F = self.admissible_forward(r, t)
        n_pend = len(self.pendW[r]) - self.wpos[r]
        have_W = n_pend > 0
        if have_W and n_pend > self.w_lim[r]:
            return self.next_W(r)
        if rule.depth_first and best_I is not None and cand_F is not None:
            # deeper stage first, as ZB-V does
            return (cand_F[0], Kind.F, cand_F[1]) if cand_F[0] > best_I[0] else (best_I[0], Kind.I, best_I[1])
        if best_I is not None and not (rule.f_first and cand_F is not None):
            return best_I[0], Kind.I, best_I[1]
        if cand_F is not None:
            if rule.protect_f and soon_deep_F < t + self.a.dF[cand_F[0]] - EPS:
                return soon_deep_F, "wait", None
            return cand_F[0], Kind.F, cand_F[1]
        if best_I is not None:
            return best_I[0], Kind.I, best_I[1]
        if have_W:
            s, _, m = self.next_W(r)
            if rule.protect_i and not f_blocked_by_memory and soon_I < t + self.a.dW[s] - EPS:
                return soon_I, "wait", None
            if rule.protect_f and soon_deep_F < t + self.a.dW[s] - EPS:
                return soon_deep_F, "wait", None
            return s, Kind.W, m
        return None

    def next_W(self, r: int) -> tuple[int, str, int]:
        s, m = self.pendW[r][self.wpos[r]]
        return s, Kind.W, m

    def ready_backward(self, r: int, t: float) -> tuple[Optional[tuple[int, int]], float]:
        """The I rank r should run at t (deepest stage first; by microbatch group under
        rule.group), or None; and the earliest time an I not yet ready becomes ready."""
        group, M, S, input_time = self.rule.group, self.a.M, self.a.S, self.a.input_time
        endF, endI, nextI = self.endF, self.endI, self.nextI
        best_I, soon_I = None, INF
        best_key: tuple[int, ...] = ()  # read only once best_I is set
        for s in self.stages_desc[r]:
            m = nextI[s]
            if m >= M or endF[s][m] < 0 or (s + 1 < S and endI[s + 1][m] < 0):
                continue
            rt = self.backward_ready_at(s, m, input_time(Kind.I, s, m, endF, endI))
            if rt is None:
                continue
            if rt <= t + EPS:
                key = (m // group, -s, m) if group else (-s, m)
                if best_I is None or key < best_key:
                    best_I, best_key = (s, m), key
            else:
                soon_I = min(soon_I, rt)
        return best_I, soon_I

    def admissible_forward(self, r: int, t: float) -> tuple[Optional[tuple[int, int]], bool, float]:
        """The F rank r may run at t (ready, under the warm-up limit, within memory, banker-safe),
        or None; whether memory (not readiness) blocked one; and, under rule.protect_f, the
        earliest time the input of an F on a deeper stage than that one (any stage, when there
        is none) arrives (INF when none is on its way)."""
        a, rule, nextF, endF = self.a, self.rule, self.nextF, self.endF
        order_f = self.stages_desc[r] if rule.deep_f else a.stages[r]
        if rule.group and len(order_f) > 1:
            order_f = sorted(order_f, key=lambda s: (nextF[s] // rule.group, s))
        blocked = False
        for s in order_f:
            m = nextF[s]
            if m >= a.M or (s > 0 and (endF[s - 1][m] < 0 or endF[s - 1][m] + a.comm[s - 1] > t + EPS)):
                continue  # all done, or its input is not there yet
            if s == self.first[r] and self.admitted[r] >= rule.warmup[r]:
                continue
            if not self.forward_fits(r, s, m):
                blocked = True
                continue
            if self.use_banker and not self.banker_ok(s, m):
                blocked = True
                continue
            return (s, m), blocked, self.deeper_input(r, s, t)
        return None, blocked, self.deeper_input(r, -1, t)

    def backward_ready_at(self, s: int, m: int, inputs_at: float) -> Optional[float]:
        """When I(s, m), whose inputs arrive at `inputs_at`, can start; None when it cannot be
        chosen now (a subclass may hold its activations elsewhere)."""
        return inputs_at

    def forward_fits(self, r: int, s: int, m: int) -> bool:
        """Whether F(s, m) fits rank r's room now (a subclass may make room first)."""
        return fits_room(self.held[r] + self.a.act[s], self.a.room[r])

    def deeper_input(self, r: int, s: int, t: float) -> float:
        """Under rule.protect_f, the earliest arrival after t of the input of the next F of a stage
        of rank r deeper than s; INF otherwise."""
        if not self.rule.protect_f:
            return INF
        a, nextF, endF = self.a, self.nextF, self.endF
        soon = INF
        for d in self.stages_desc[r]:
            if d <= s:
                break
            m = nextF[d]
            if d == self.first[r] and self.admitted[r] >= self.rule.warmup[r]:
                continue  # it could not run on arrival
            if d > 0 and m < a.M and endF[d - 1][m] >= 0 and endF[d - 1][m] + a.comm[d - 1] > t + EPS:
                soon = min(soon, endF[d - 1][m] + a.comm[d - 1])
        return soon

    def banker_ok(self, s: int, m: int) -> bool:
        # Safe state (by induction): the in-flight microbatches can finish one at a time in index
        # order, x needing free[q] + (bytes of older ones) >= its remaining forward bytes rem[x][q]
        # on every rank q. F(s, m) on rank r lowers free[r] by act(s) and changes nothing for m
        # itself or younger microbatches (m's held rises by what free loses), so it stays safe iff
        # every older in-flight microbatch keeps a slack of act(s) on r. A new microbatch's own
        # condition is room[q] >= its whole demand, which check_memory_feasible guarantees.
        a = self.a
        r = a.stage_rank[s]
        need = a.act[s]
        free = a.room[r] - self.held[r]
        if free - need < -EPS:
            return False
        cum = 0.0
        for x in self.live:
            if x >= m:
                break
            if not self.started[x]:
                continue
            if free + cum - self.mb_rem[x][r] < need - EPS:
                return False
            cum += self.mb_held[x][r]
        return True

    def run_F(self, r: int, s: int, m: int, start: float) -> None:
        a = self.a
        end = start + a.dF[s]
        self.endF[s][m] = end
        self.nextF[s] += 1
        self.held[r] += a.act[s]
        if s == self.first[r]:
            self.admitted[r] += 1
        if self.use_banker:
            if not self.started[m]:
                self.started[m] = True
                self.live.append(m)
            self.mb_held[m][r] += a.act[s]
            self.mb_rem[m][r] -= a.act[s]
        # wake the rank of F(s+1, m); same-rank consumers are woken by the rank's own end event
        if s + 1 < a.S and a.stage_rank[s + 1] != r:
            heapq.heappush(self.heap, (end + a.comm[s], a.stage_rank[s + 1]))
        self._done(r, s, Kind.F, m, end)

    def run_I(self, r: int, s: int, m: int, start: float) -> None:
        a = self.a
        end = start + a.dI[s]
        self.endI[s][m] = end
        self.nextI[s] += 1
        freed = a.act[s] - a.wg[s]
        self.held[r] -= freed
        if s == self.first[r]:
            self.admitted[r] -= 1
        if self.use_banker:
            self.mb_held[m][r] -= freed
        self.pendW[r].append((s, m))
        if s > 0 and a.stage_rank[s - 1] != r:
            heapq.heappush(self.heap, (end + a.comm[s - 1], a.stage_rank[s - 1]))
        self._done(r, s, Kind.I, m, end)

    def run_W(self, r: int, s: int, m: int, start: float) -> None:
        a = self.a
        end = start + a.dW[s]
        self.held[r] -= a.wg[s]
        if self.use_banker:
            self.mb_held[m][r] -= a.wg[s]
            if all(v <= EPS for v in self.mb_held[m]) and all(v <= EPS for v in self.mb_rem[m]):
                self.started[m] = False
                if len(self.live) > 2 * a.R + 8:
                    self.live[:] = [x for x in self.live if self.started[x]]
        self._done(r, s, Kind.W, m, end)

    def _done(self, r: int, s: int, kind: str, m: int, end: float) -> None:
        self.rank_free[r] = end
        self.orders[r].append((s, kind, m))
        self.remaining -= 1
        heapq.heappush(self.heap, (end, r))


# ---------------------------------------------------------------- fast exact re-timing

def _retime(a: Graph, orders: list[list[tuple[int, str, int]]]) -> Optional[tuple]:
    """(makespan, span, fits, sum of rank ends, sum of rank spans) of per-rank orders with
    earliest starts, as simulate() computes them for an all-split (I/W) schedule; None on
    deadlock or missing actions."""
    times = _earliest_times(a, orders)
    if times is None:
        return None
    free, first_start = times
    spans = [free[r] - first_start[r] for r in range(a.R) if orders[r]]
    # trailing sums: tie-breakers that give the local search a slope on plateaus of the max
    return max(free), max(spans), _fits_memory(a, orders), sum(free), sum(spans)


def _fits_memory(a: Graph, orders) -> bool:
    """Every rank's running sum of held bytes, with each action's rise and transient on top while
    it runs (schedc.core.cost_model), stays within its room."""
    over, mem = a.over, a.mem
    for r in range(a.R):
        held, cap = 0.0, a.room[r] + EPS * max(1.0, abs(a.room[r]) if a.room[r] < INF else 1.0)
        for s, k, _m in orders[r]:
            if held + over[k][s] > cap:
                return False
            held += mem[k][s]
    return True


def serial_orders(a: Graph) -> list[list[tuple[int, str, int]]]:
    """One microbatch in the whole pipeline at a time (its forwards, then its backwards from the
    last stage down, each I followed by its W): no rank ever holds more than one microbatch, so
    it fits whenever check_memory_feasible passes. The last resort of the constructions."""
    orders: list[list[tuple[int, str, int]]] = [[] for _ in range(a.R)]
    for m in range(a.M):
        for s in range(a.S):
            orders[a.stage_rank[s]].append((s, Kind.F, m))
        for s in reversed(range(a.S)):  # the heuristic's orders are all split (to_schedule merges)
            orders[a.stage_rank[s]] += [(s, Kind.I, m), (s, Kind.W, m)]
    return orders


def _earliest_times(a: Graph, orders) -> Optional[tuple[list[float], list[float]]]:
    """(end of each rank's last action, start of its first): every rank advances through its
    order as far as its inputs allow, round after round; None when a round makes no progress.
    The dependency rule (Graph.input_time) is written out inline here: the local search re-times
    the whole schedule at every move, and this loop is its cost."""
    S, M, R = a.S, a.M, a.R
    endF = [[-1.0] * M for _ in range(S)]
    endI = [[-1.0] * M for _ in range(S)]
    idx, free, first_start = [0] * R, [0.0] * R, [INF] * R
    left = sum(len(o) for o in orders)
    while left:
        progressed = False
        for r in range(R):
            row, i, t = orders[r], idx[r], free[r]
            while i < len(row):
                s, k, m = row[i]
                if k == Kind.F:
                    rt = 0.0
                    if s > 0:
                        e = endF[s - 1][m]
                        if e < 0:
                            break
                        rt = e + a.comm[s - 1]
                    st = t if t > rt else rt
                    t = endF[s][m] = st + a.dF[s]
                elif k == Kind.I:
                    e = endF[s][m]
                    if e < 0:
                        break
                    if s + 1 < S:
                        e2 = endI[s + 1][m]
                        if e2 < 0:
                            break
                        e = max(e, e2 + a.comm[s])
                    st = t if t > e else e
                    t = endI[s][m] = st + a.dI[s]
                else:
                    e = endI[s][m]
                    if e < 0:
                        break
                    st = t if t > e else e
                    t = st + a.dW[s]
                if i == 0:
                    first_start[r] = st
                i += 1
            if i != idx[r]:
                left -= i - idx[r]
                idx[r], free[r] = i, t
                progressed = True
        if not progressed:
            return None
    return free, first_start


# ---------------------------------------------------------------- rules and search

def list_rules(a: Graph, objective: str) -> list[Rule]:
    """Deterministic priority rules, most promising first for `objective` (so a tight time
    budget still tries the good ones); each rule once."""
    base = one_f_one_b_warmup(a)
    unlimited = Rule(tuple([INF] * a.R))
    v_family = _zb_v_like(a) if a.multi else []
    if objective == "span":
        first = _interleave(_scaled(base, (1.5, 2.0, 1.25, 1.75, 1.0)),
                            _zb_h1_like(a, base, 0) + _zb_h1_like(a, base, 1), [unlimited], v_family)
    else:
        first = _interleave(_zb_h1_like(a, base, 0) + _zb_h1_like(a, base, 1), [unlimited], v_family,
                            _scaled(base, (1.5, 2.0)))
    last = _interleave(_zb_h1_like(a, base, 1, f_first=False), _zb_h1_like(a, base, 0, f_first=False),
                       _scaled(base, (0.5, 1.25, 1.75)))
    rules = list(dict.fromkeys(first + _warmup_grid(a, base) + last))
    if a.multi:
        rules = list(dict.fromkeys(rules + [replace(r, deep_f=False) for r in rules]))
        rules = list(dict.fromkeys(rules + [replace(r, group=a.R) for r in rules[: len(rules) // 2]]))
        # each rule also with its F's of deeper stages protected, the protected twin first: on the
        # V rows of benchmarks/plan_quality.py it is usually the better one. The first MIN_RULES
        # rules keep their places (the second proves V rows at 2p on slow links where its twin
        # does not; measured: docs/design.md, "Warm start")
        head = rules[:MIN_RULES]
        rules = head + [replace(r, protect_f=True) for r in head] + \
            [twin for r in rules[MIN_RULES:] for twin in (replace(r, protect_f=True), r)]
    return rules


def one_f_one_b_warmup(a: Graph) -> list[int]:
    """Per rank, 1F1B's warm-up: how many stage-visits lie at or below the rank's first stage."""
    spr = max(1, a.S // a.R)
    return [math.ceil((a.S - a.stages[r][0]) / spr) for r in range(a.R)]


def _interleave(*families: list[Rule]) -> list[Rule]:
    """Round-robin over rule families, so a short budget samples each of them."""
    out = []
    for i in range(max(len(f) for f in families)):
        for f in families:
            if i < len(f):
                out.append(f[i])
    return out


def _zb_h1_like(a: Graph, base: list[int], k: int, f_first: bool = True) -> list[Rule]:
    """1F1B's warm-up + k; rank r keeps about r W's pending (they fill its tail), as ZB-H1."""
    out = []
    for mult in (2.0, 1.0, 0.5):
        wl = tuple(float(math.floor(mult * r)) for r in range(a.R))
        out.append(Rule(tuple(float(b + k) for b in base), f_first=f_first, w_limit=wl))
    return out


def _scaled(base: list[int], fracs) -> list[Rule]:
    """Warm-up proportional to 1F1B's: what a memory of K x 1F1B's lets a span schedule use."""
    out = []
    for frac in fracs:
        for f_first in (True, False):
            out.append(Rule(tuple(float(max(1, round(b * frac))) for b in base), f_first=f_first))
    return out


def _zb_v_like(a: Graph) -> list[Rule]:
    """ZB-V's shape on multi-stage ranks: rank r admits about spr * R - r microbatches before its
    first-stage backward; W's fill gaps, run right after their I, or stay pending as in ZB-H1."""
    R = a.R
    out = []
    for k in (-1, 0, -2, 1):
        warm = tuple(float(max(1, len(a.stages[r]) * R - r + k)) for r in range(R))
        for wl in (INF, 0.0, tuple(float(r) for r in range(R))):
            out.append(Rule(warm, f_first=True, w_limit=wl, depth_first=True))
            out.append(Rule(warm, f_first=True, w_limit=wl))
    return out


def _warmup_grid(a: Graph, base: list[int]) -> list[Rule]:
    """Warm-ups around 1F1B's crossed with the flags, then longer warm-ups and W limits."""
    unlimited = tuple([INF] * a.R)
    out = []
    for protect in (False, True):
        out.append(Rule(unlimited, protect_i=protect))
        for k in (0, 1):
            out.append(Rule(tuple(float(b + k) for b in base), f_first=True, protect_i=protect))
    for k in (0, 1, 2, 3, -1):
        for f_first in (True, False):
            for w_limit in (INF, 0.0):
                for protect in (False, True):
                    w = tuple(float(max(1, b + k)) for b in base)
                    out.append(Rule(w, f_first=f_first, w_limit=w_limit, protect_i=protect))
    for k in range(2, 2 * a.R + 2, max(1, a.R // 4)):
        out.append(Rule(tuple(float(max(1, b + k)) for b in base), f_first=True))
    for w_limit in (1.0, 2.0, float(a.R)):
        out.append(Rule(unlimited, w_limit=w_limit))
    return out


def _dedupe_by_memory(a: Graph, rules: list[Rule]) -> list[Rule]:
    """Cap each warm-up at what the rank's memory admits anyway, then drop repeated rules (at 1p
    many warm-up variants are the same schedule)."""
    cap = []
    for r in range(a.R):
        act = a.act[a.stages[r][0]]
        cap.append(float(math.floor(a.room[r] / act + REL)) if act > 0 and a.room[r] < INF else INF)
    out, seen = [], set()
    for rule in rules:
        warm = tuple(min(w, c) if c < INF else w for w, c in zip(rule.warmup, cap))
        if all(w >= c for w, c in zip(warm, cap)):
            warm = tuple([INF] * a.R)
        rule = replace(rule, warmup=warm)
        if rule not in seen:
            seen.add(rule)
            out.append(rule)
    return out


def _random_rule(a: Graph, rng: random.Random, around: Rule) -> Rule:
    """A perturbation of `around`: per-rank warm-up and W limits nudged, flags flipped."""
    R = a.R
    warm = []
    for r in range(R):
        w = around.warmup[r]
        if w == INF:
            w = float(rng.choice([INF, len(a.stages[r]) * (R - r) + rng.randint(0, R)]))
        else:
            w = float(max(1, w + rng.choice((-1, 0, 0, 1, 1, 2))))
        warm.append(w)
    wl0 = around.w_limit if isinstance(around.w_limit, tuple) else (around.w_limit,) * R
    wl = []
    for r in range(R):
        x = wl0[r]
        if rng.random() < 0.3:
            x = rng.choice((0.0, float(r), float(2 * r), INF))
        elif x != INF and rng.random() < 0.5:
            x = float(max(0, x + rng.choice((-1, 1))))
        wl.append(x)
    return Rule(
        tuple(warm),
        f_first=around.f_first if rng.random() < 0.8 else not around.f_first,
        w_limit=tuple(wl),
        protect_i=around.protect_i if rng.random() < 0.8 else not around.protect_i,
        deep_f=around.deep_f if rng.random() < 0.9 else not around.deep_f,
        depth_first=around.depth_first if rng.random() < 0.9 or not a.multi else not around.depth_first,
        group=around.group if rng.random() < 0.9 or not a.multi else rng.choice((0, R)),
        protect_f=around.protect_f if rng.random() < 0.9 or not a.multi else not around.protect_f,
    )


def _value(res: tuple, objective: str) -> float:
    return res[0] if objective == "makespan" else res[1]


def _search_key(res: tuple, objective: str) -> tuple[float, float]:
    """(objective, its sum over ranks) of a _retime result: the local search's comparison key."""
    return (_value(res, objective), res[3] if objective == "makespan" else res[4])


def to_schedule(a: Graph, orders, name: str, meta: dict) -> Schedule:
    rows = []
    for r in range(a.R):
        row = []
        for s, k, m in orders[r]:
            if a.dW[s] == 0 and a.wg[s] == 0 and k in (Kind.I, Kind.W):
                # A stage without weights: its backward is one B (W would be an empty call).
                if k == Kind.I:
                    row.append(Action(s, Kind.B, m))
                continue
            row.append(Action(s, k, m))
        rows.append(row)
    return Schedule(rows=rows, placement=tuple(a.problem.placement), n_microbatches=a.M, name=name, meta=meta)


def heuristic_schedule(problem: Union[Problem, Graph], time_budget: float = 1.0, seed: int = 0,
                       deadline: Optional[Deadline] = None) -> Optional[Schedule]:
    """The best schedule found by the list scheduler's rules (and local search, while
    `time_budget` seconds last) for `problem.objective`. Always feasible under the memory caps;
    raises SchedcError when no schedule can fit. With a `deadline`, returns None when it passes
    before the first construction is done (on very large problems)."""
    a = graph_of(problem)
    problem = a.problem
    check_memory_feasible(problem)
    t_start = now()
    bound = lower_bound(a)
    # Local search pays off on small instances (cheap re-timing); large ones get more rules.
    rule_share = 0.4 if a.S * a.M < 1000 else 0.8
    found = _safe_construction(a, problem.objective, bound, t_start + time_budget * rule_share, seed,
                               deadline or NEVER)
    if found is None:
        return None
    best, best_val, best_rule, tried = found
    constructed_val = best_val
    moves = 0
    if best_val > bound + EPS * max(1.0, bound):
        end = t_start + time_budget if deadline is None else min(t_start + time_budget, now() + deadline.left())
        best, best_val, moves = _local_search(a, best, best_val, problem.objective, end, seed)
    meta = {
        "source": "heuristic",
        "rule": best_rule.describe() if best_rule else "",
        "rules_tried": tried,
        "constructed": constructed_val,
        "local_search_moves": moves,
    }
    final = _retime(a, best)
    if final is None or not final[2]:  # every candidate was checked; this guards the guarantee
        raise SchedcError("internal error: the heuristic's schedule deadlocks or exceeds the memory cap; please report it")
    return to_schedule(a, best, "schedc-heuristic", meta)


@dataclass
class ListHeuristic:
    """The list heuristic as an engine (schedc.solver.engine): constructions and local search
    for `time_budget` seconds (less when the deadline comes first); no incumbent, no bound."""

    time_budget: float = 1.0
    seed: int = 0
    name: str = "heuristic"

    def run(self, graph: Graph, incumbent: Optional[Incumbent], deadline: Deadline) -> Result:
        sched = heuristic_schedule(graph, time_budget=self.time_budget, seed=self.seed, deadline=deadline)
        if sched is None:
            return Result()
        return found(sched, simulate(sched, graph.problem.profile, graph.problem.memory))


def polish(g: Graph, schedule: Schedule, source: str, end: float, deadline: Deadline = NEVER) \
        -> Optional[tuple[Schedule, float]]:
    """The local search (until ``now()`` reaches `end`) started from `schedule`,
    its backwards split into I + W: (schedule named ``schedc-<source>+ls``, its value), or None
    when `deadline` has passed or the split schedule does not re-time within the caps."""
    obj = g.problem.objective
    orders: list[list[tuple[int, str, int]]] = [
        [(x.stage, k, x.microbatch) for x in schedule.actions(r) for k in ((Kind.I, Kind.W) if x.kind == Kind.B else (x.kind,))]
        for r in range(g.R)]
    if deadline.expired():
        return None
    res = _retime(g, orders)
    if res is None or not res[2]:
        return None
    orders, val, moves = _local_search(g, orders, _value(res, obj), obj, end, 0)
    sched = to_schedule(g, orders, f"schedc-{source}+ls", {"source": "heuristic", "start": source,
                                                            "local_search_moves": moves})
    return sched, val


# deterministic rules tried whatever the soft budget says (the hard deadline still stops them):
# on large V's at 2p on slow links the second rule meets the bound where the first does not, and
# one construction there can take longer than the warm-start budget (docs/design.md, "Warm start")
MIN_RULES = 2
# passes over the graph a list construction and its re-timing count for under a work budget
# (schedc.solver.deadline), and a local-search move: 3.2-5.8 and 0.2-1.1 CPU seconds per unit
# charged at 3 and 1 passes (benchmarks/work_charges.py), times 1.5 for a work unit's wall clock
CONSTRUCTION_PASSES = 14
MOVE_PASSES = 0.5


def _safe_construction(a: Graph, objective: str, bound: float, deadline: float, seed: int,
                       hard: Deadline = NEVER):
    """_best_construction on the graph's safe accounting (Graph.safe: the rules only check F's,
    so rises and transients are kept free), its orders valued on the true graph; when the safe
    accounting leaves no room for one microbatch, the rules on the true graph (each construction
    kept only where the exact check passes), and the serial orders when none does."""
    safe = a.safe()
    if safe is a:
        return _best_construction(a, objective, bound, deadline, seed, hard)
    need = [sum(safe.act[s] for s in own) for own in safe.stages]
    if all(fits_room(n, rm) for n, rm in zip(need, safe.room)):
        try:
            found = _best_construction(safe, objective, bound, deadline, seed, hard)
        except SchedcError:
            found = None
        if found is not None:
            res = _retime(a, found[0])
            if res is not None and res[2]:
                return found[0], _value(res, objective), found[2], found[3]
    if hard.expired():
        return None
    try:  # the rules on the true graph, which check F's only: kept where the exact check passes
        return _best_construction(a, objective, bound, deadline, seed, hard)
    except SchedcError:
        pass
    orders = serial_orders(a)
    res = _retime(a, orders)
    assert res is not None, "a serial order neither deadlocks nor misses an action"
    return orders, _value(res, objective), None, 1


def _best_construction(a: Graph, objective: str, bound: float, deadline: float, seed: int,
                       hard: Deadline = NEVER):
    """(orders, value, rule, rules tried) of the best list schedule: the deterministic rules in
    turn, then perturbations of the best one, until the deadline (at least one rule) or the
    lower bound is met; None when `hard` passes before any construction is done."""
    best, best_val, best_rule, tried = None, INF, None, 0
    rng = random.Random(seed)
    rules = _dedupe_by_memory(a, list_rules(a, objective))
    while not tried or ((tried < MIN_RULES or now() <= deadline)
                        and best_val > bound + EPS * max(1.0, bound)):
        if hard.expired():
            if best is None:
                return None
            break
        if tried < len(rules):
            rule = rules[tried]
        else:
            rule = _random_rule(a, rng, best_rule or rules[0])  # perturb the best rule so far
        tried += 1
        orders = _list_schedule(a, rule, hard)
        charge_passes(a.n, CONSTRUCTION_PASSES)  # what the work clock counts for it (work budgets)
        if orders is None:
            continue
        res = _retime(a, orders)
        if res is None or not res[2]:
            continue
        v = _value(res, objective)
        if v < best_val - EPS:
            best, best_val, best_rule = orders, v, rule
    if best is None and hard.expired():
        return None
    if best is None:
        # Memory-only rule is provably deadlock-free; reaching here is a bug, not a user error.
        raise SchedcError("internal error: the heuristic found no feasible schedule; please report it")
    return best, best_val, best_rule, tried


def _local_search(a: Graph, orders, val: float, objective: str, deadline: float, seed: int):
    """Move one action a few places earlier or later on its rank; keep moves that do not worsen
    (objective, sum over ranks of the same measure): the sum gives a slope where the max is
    flat, and equal moves let the search drift across plateaus. Stops at the deadline."""
    rng = random.Random(seed)
    orders = [list(o) for o in orders]
    moves = 0
    n_ranks = len(orders)
    if now() >= deadline:
        return orders, val, moves
    res = _retime(a, orders)
    assert res is not None, "the search starts from a construction that re-timed"
    key = _search_key(res, objective)
    stale = 0
    while now() < deadline and stale < 20000:
        r = rng.randrange(n_ranks)
        row = orders[r]
        if len(row) < 2:
            stale += 1
            continue
        i = rng.randrange(len(row))
        # W's are the flexible fillers; other kinds move too but less often.
        if row[i][1] != Kind.W and rng.random() < 0.5:
            stale += 1
            continue
        j = max(0, min(len(row) - 1, i + rng.choice((-6, -3, -2, -1, 1, 2, 3, 6))))
        if j == i:
            stale += 1
            continue
        item = row.pop(i)
        row.insert(j, item)
        res = _retime(a, orders)
        charge_passes(a.n, MOVE_PASSES)
        if res is not None and res[2]:
            new = _search_key(res, objective)
            if new[0] < key[0] - EPS or (new[0] <= key[0] + EPS and new[1] <= key[1] + EPS):
                if new[0] < key[0] - EPS:
                    moves += 1
                stale = 0 if new[1] < key[1] - EPS or new[0] < key[0] - EPS else stale + 1
                key = new
                continue
        row.pop(j)
        row.insert(i, item)
        stale += 1
    return orders, key[0], moves
