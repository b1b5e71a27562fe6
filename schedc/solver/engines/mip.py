"""The integer program: order every F, I, W (or B) on every rank, minimizing makespan or span.

Problem. Given a :class:`~schedc.solver.problem.Problem` (per-stage costs, placement, microbatch
count, per-rank memory caps, objective) choose, for every rank, the order of its actions so that
the simulated step time (``schedc.core.simulate``: every action as early as its rank and its producers
allow) is as small as possible and no rank's running memory sum exceeds its cap.

Formulation (disjunctive, continuous time). Each family of constraints is one function below,
named as here (``add_<family>``); the rows carry the family's name.

  Sets and data
    A, A_r       actions (F, I, W per stage and microbatch; B for a stage whose W costs 0), those
                 of rank r; d_a duration, mu_a memory delta (docs/design.md), cap_r, static_r
    P            dependencies (a, b, lag): b starts after a ends + lag (comm across ranks), with
                 kinds in microbatch order and the memory-forced orders (below)
    anc(b)       everything P forces before b (transitive closure)
    [est_a, lst_a]  time windows: longest paths (+ same-rank work forced before / after a),
                 horizon H = the incumbent's value; late start: relative to s_r
    first_r      rank r's first action (F of its lowest stage, microbatch 0); head_r its chain
                 head: the longest dependency path to it; s_r = start_{first_r}
    O_r          the free pairs: {a, b} in A_r ordered neither by anc nor by the windows
    [b <| a]     "b runs before a": 1 or 0 when anc or the windows decide, else before_ba
                 (or 1 - before_ab)
  Variables (add_start_times)
    start_a in [est_a, lst_a]; T in [combinatorial bound, H], T = makespan or span;
    before_ab in {0, 1} for {a, b} in O_r (1: a runs before b)
  minimize T subject to
    precedence     start_b >= start_a + d_a + lag                          (a, b, lag) in P
    machine_order  start_b >= start_a + d_a - M_ab (1 - before_ab),
                   start_a >= start_b + d_b - M_ba before_ab                {a, b} in O_r
                   (M_ab = lst_a + d_a - est_b); forced_order: start_b >= start_a + d_a for a
                   pair whose windows fit only a first
    memory_cap     static_r + mu_a + sum_{b in A_r - a} mu_b [b <| a] <= cap_r    a in A_r, mu_a > 0
    objective      makespan: T >= start_a + d_a + after_a                           a in A
                   span:     T >= start_a + d_a + after_a - s_r,  s_r = head_r (pinned), or
                             late start: s_r free, s_r = 0 on the rank of stage 0
                   (after_a: work of a's rank that P forces after a)
    one_machine    start_a >= min_{b in A_r} est_b (late start: s_r) + sum_{b in A_r - a} d_b [b <| a]
    (valid ineq.)  T >= start_a + d_a + sum_{b in A_r - a} d_b (1 - [b <| a])  (- s_r)
  mip_start        the incumbent's simulated times, its orders and its value

Assumptions and what makes it small and tight (numbers below; the table is
benchmarks/compile_quality.py):

* Kinds in order (symmetry breaking): on every stage the F's run in microbatch order, likewise
  the I's, the W's (and B's). This is an assumption of the model. For makespan it is exact:
  microbatches cost the same, so in any feasible schedule the i-th F (I, W) on a stage can be
  relabelled to microbatch i with the same times -- when the i-th F on stage s starts, i
  distinct microbatches have left stage s-1, so the i-th F of s-1 has ended; the same counting
  holds for I (needs F of the stage and I of the next) and W; memory only depends on counts --
  and earliest-start times only get earlier. tests/test_model.py checks the model's optimum
  against exhaustive search over *all* orders on tiny instances, both objectives. Memory caps
  also force precedences (I(s, j-K) and W(s, j-L-1) before F(s, j), see
  schedc.solver.graph.memory_precedences), added to P.
* Span: pinned or late start. In the simulator an in-order schedule's rank r starts with
  F(lo_r, 0), whose input chain F(0..lo_r-1, 0) are first actions of their ranks, so it starts
  exactly at head_r: the pinned model (s_r = head_r; the windows use it) is exact for in-order
  schedules, but not a relaxation of all of them: an out-of-order schedule can make a rank's
  first action wait for a later microbatch, starting the rank later and shortening its span.
  The late-start model (``late_start=True``, full model only) makes s_r a variable and is a
  relaxation of EVERY schedule: take any schedule with its simulated times and relabel the
  microbatches so that each kind runs in microbatch order on each stage, keeping every start
  time. The counting argument above holds for any start times, so precedence, machine order
  and memory (counts) still hold; rank r's earliest action is an F of lo_r (every other action
  needs one first), now labelled F(lo_r, 0) = first_r; spans are unchanged. Shifting all times
  by the start of F(0, 0), the root of every action, pins s_r = 0 on the rank of stage 0 and
  keeps the absolute est (longest paths from 0). So the relabelled schedule is a point of the
  model with T = its span, and the solver's dual bound is a lower bound on every schedule's
  span: the span certificate. Windows there are relative to s_r (``late_start_windows``). Its
  solutions are re-simulated with earliest starts (a rank may start earlier than the model
  let it, lengthening its span); ``optimal`` needs the simulated span to reach the bound.
* Order fixing: the transitive closure of "dependencies + in-order kinds" fixes every pair one of
  which must precede the other (no binary); time windows, the incumbent's value as horizon, and
  the per-rank work that must precede / follow an action fix further pairs (``est_b + d_b >
  lst_a`` forces a before b) and give each remaining pair its own tight big-M.
* Valid inequalities (one_machine) link the order binaries to time far more tightly than the
  big-M rows (measured: docs/design.md, "Integer program"); the
  combinatorial lower bound (schedc.solver.bounds.chains) bounds T.
* B: a split I then W is never worse than B under the simulator's rules (I releases memory and
  unblocks the previous stage earlier), so the model splits every backward; stages whose W costs
  0 (no parameters) use one B action instead of an empty W. A merge binary would only add
  symmetric choices.

Decomposition (large instances). The number of free pairs grows with (actions per rank)^2
(heterogeneous 4x16: 1440, 8x24: 6624, 16x48: 54144 before time-window fixing); above
``FULL_MODEL_PAIRS`` the driver does a rolling-horizon large-neighbourhood search instead: keep
the incumbent order, free the actions of every rank whose simulated start falls in a time
window, fix everything else in its incumbent order (prefix -> window -> suffix chains, added to
P), solve, re-simulate, keep if better, slide the window by half its length, widen it (8, 14, 22
actions per rank) after a fruitless sweep, sweeping alternately from the end (where the
objective is decided) and from the start. A window's prefix is closed under dependencies, so its
times are pinned as constants (no variables, no rows): a window costs what its free pairs cost,
not the whole instance. Only the full model gives a proof; a window never claims optimality.
Measured proof times and window gains: docs/design.md, "Integer program".

Warm start. The incumbent is handed to the solver as a MIP start (``mip_start``): HiGHS via
``Highs.setSolution`` (PuLP 3's HiGHS class does not pass ``warmStart`` on), CBC via pulp's
``warmStart=True``. Extracted orders are always re-simulated; the driver never returns anything
worse than the incumbent.

Cost: building is O(pairs) PuLP terms; solving is exponential in the worst case, bounded by the
time limit.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import pulp

from schedc.choices import Status
from schedc.core.simulate import simulate
from schedc.core.tolerances import MODEL, PROVEN, REL
from schedc.solver.deadline import Deadline, charge, counting_work_on, now, wall_cut, wall_left
from schedc.solver.engine import Incumbent, Result, materialize
from schedc.solver.graph import Graph, ancestors, canonical_orders, schedule_from_orders, successors, topological
from schedc.solver.interrupt import requested as stop_requested
from schedc.solver.pulp_compat import cbc_executable, cbc_solver, highs_available, solve_status, solver_columns

FULL_MODEL_PAIRS = 6000  # free order pairs above which the driver switches to windows
# under a work budget: branch-and-bound nodes per work unit, and the least a solve gets (the root
# and a few dives), so that a short share still tries its incumbent
NODES_PER_UNIT, MIN_NODES = 50, 10
# and HiGHS's at a count of its interrupt checks (_WarmHiGHS.call_limit)
CHECKS_PER_UNIT, MIN_CHECKS = 4, 2
# under a work budget, what a model costs before its node and check limits mean anything: building
# it in PuLP and HiGHS's presolve and root, charged per binary (CP-SAT's set-up is charged by
# model size too: schedc.solver.engines.cpsat, SETUP_WORK_PER_SIZE). Measured 200-830 CPU microseconds per binary for models of
# 1,200-4,200 binaries (Llama-3-8B and Qwen2.5-7B --ac auto plans, uniform 4 x 8 to 8 x 32), less
# the 0.5-unit share they ran for, at most 630; at a work unit's 2/3 of a CPU second
# (benchmarks/work_charges.py). Uncharged, a compile's model ran seconds past the wall-clock cap of
# its share on a busy machine, and the plan was cut by the wall clock (not reproducible). The
# binaries are known once the machine order is built (about 55 microseconds each, charged
# whether the model goes on or not); the rest of the set-up is charged only where the model goes on.
ORDER_WORK_PER_BINARY = 8e-5
SETUP_WORK_PER_BINARY = 1e-3 - ORDER_WORK_PER_BINARY
MIN_SOLVE_WORK = 0.2  # work units a solve gets at least after its set-up, else it is not built
_EPS = MODEL


# ---------------------------------------------------------------- windows and closure


@dataclass
class Windows:
    est: list[float]  # earliest start of a (relative to its rank's start when `earliest` is set)
    lst: list[float]  # latest start of a in a schedule no worse than the horizon (same origin)
    anc: list[int]
    work_before: list[float]  # same-rank work that must precede a
    work_after: list[float]  # same-rank work that must follow a (a excluded)
    earliest: Optional[list[float]] = None  # late-start model: absolute earliest starts


def time_windows(inst: Graph, preds, topo, objective: str, horizon: float, first_start: list[float]) -> Windows:
    n = inst.n
    anc = ancestors(inst.n, preds, topo)
    # same-rank work before / after each action, by popcount over (stage, kind) groups
    groups: list[list[tuple[int, float]]] = [[] for _ in inst.by_rank]
    masks: dict[tuple[int, str], int] = {}
    for i in range(n):
        key = (inst.actions[i].stage, inst.actions[i].kind)
        masks[key] = masks.get(key, 0) | (1 << i)
    for (stage, kind), mask in masks.items():
        groups[inst.problem.placement[stage]].append((mask, inst.problem.duration(stage, kind)))
    succs = successors(n, preds)
    desc = [0] * n
    for a in reversed(topo):
        bits = 0
        for b, _ in succs[a]:
            bits |= desc[b] | (1 << b)
        desc[a] = bits
    work_before = [0.0] * n
    work_after = [0.0] * n
    for i in range(n):
        g = groups[inst.rank[i]]
        work_before[i] = sum((anc[i] & mask).bit_count() * d for mask, d in g)
        work_after[i] = sum((desc[i] & mask).bit_count() * d for mask, d in g)
    est = [0.0] * n
    for b in topo:
        t = work_before[b]
        for a, lag in preds[b]:
            t = max(t, est[a] + inst.dur[a] + lag)
        est[b] = t
    lst = [0.0] * n
    for a in reversed(topo):
        if objective == "span":
            cap_end = first_start[inst.rank[a]] + horizon
        else:
            cap_end = horizon
        t = cap_end - inst.dur[a] - work_after[a]
        for b, lag in succs[a]:
            t = min(t, lst[b] - lag - inst.dur[a])
        lst[a] = t
    return Windows(est, lst, anc, work_before, work_after)


def late_start_windows(inst: Graph, preds, topo, horizon: float) -> Windows:
    """Time windows for the late-start span model, relative to each rank's own start s_r: every
    action of rank r descends from first_r, so start_a - s_r >= the longest path first_r -> a
    (and >= the rank's work forced before a); a schedule of span <= horizon has start_a - s_r <=
    horizon - d_a - after_a, and a predecessor x of such an a (any rank) start_x - s_r <=
    (that bound) - lag - d_x. O(R x (actions + dependencies))."""
    n = inst.n
    w = time_windows(inst, preds, topo, "makespan", math.inf, [0.0] * len(inst.by_rank))
    succs = successors(n, preds)
    rel_est, rel_lst = [0.0] * n, [0.0] * n
    for r, acts in enumerate(inst.by_rank):
        dist = [-math.inf] * n
        dist[inst.first[r]] = 0.0
        for x in topo:
            t = dist[x]
            for a, lag in preds[x]:
                t = max(t, dist[a] + inst.dur[a] + lag)
            dist[x] = max(t, w.work_before[x]) if inst.rank[x] == r else t
        late = [math.inf] * n
        for x in reversed(topo):
            t = horizon - inst.dur[x] - w.work_after[x] if inst.rank[x] == r else math.inf
            for y, lag in succs[x]:
                t = min(t, late[y] - lag - inst.dur[x])
            late[x] = t
        for a in acts:
            rel_est[a], rel_lst[a] = dist[a], late[a]
    return Windows(rel_est, rel_lst, w.anc, w.work_before, w.work_after, earliest=w.est)


# ---------------------------------------------------------------- the order model


@dataclass
class SolveOutcome:
    orders: Optional[list[list[int]]]  # per rank, by start time; None when no solution
    proven: bool  # the solver proved optimality of this (full or window) model
    objective: Optional[float]
    dual_bound: Optional[float]  # the solver's bound on this model's objective
    solve_time: float
    n_binaries: int = 0
    n_rows: int = 0
    solver: str = ""
    message: str = ""


@dataclass
class OrderModel:
    """The PuLP model being built, and what its families of constraints read (module docstring)."""

    inst: Graph
    objective: str
    prob: pulp.LpProblem
    win: Windows  # est, lst, ancestors, same-rank work before / after, under the window's chains
    preds: list[list[tuple[int, float]]]  # dependencies plus the window's fixed chains
    window: Optional[list[set[int]]]  # per rank, the actions a window frees (None: full model)
    pinned: list[bool]  # a window's prefix: start times are the incumbent's constants
    incumbent_start: list[float]  # the incumbent's simulated start times
    incumbent_pos: dict[int, int]  # action -> position in its rank's incumbent order
    chain_head: list[float]  # per rank: where its first action starts in the simulator
    start: dict = field(default_factory=dict)  # action -> LpVariable (a float when pinned)
    step: Optional[pulp.LpVariable] = None  # T: the makespan or the span
    before: dict[tuple[int, int], pulp.LpVariable] = field(default_factory=dict)  # (a, b), a < b
    forced: set[tuple[int, int]] = field(default_factory=set)  # (a, b): the windows force a first

    def is_free(self, a: int) -> bool:
        """a's order is decided by this model (everything in the full model; a window's actions)."""
        return self.window is None or a in self.window[self.inst.rank[a]]

    def runs_before(self, a: int, b: int):
        """[a before b] for two actions of one rank: 1, 0, or the binary expression."""
        anc = self.win.anc
        if (anc[b] >> a) & 1 or (a, b) in self.forced:
            return 1
        if (anc[a] >> b) & 1 or (b, a) in self.forced:
            return 0
        if (a, b) in self.before:
            return self.before[(a, b)]
        if (b, a) in self.before:
            return 1 - self.before[(b, a)]
        # both fixed outside a window: the incumbent order decides
        return 1 if self.incumbent_pos[a] < self.incumbent_pos[b] else 0


def solve_model(
    inst: Graph,
    incumbent: Sequence[Sequence[int]],
    incumbent_value: float,
    objective: str,
    time_limit: float,
    solver: str = "highs",
    free: Optional[Sequence[tuple[int, int]]] = None,
    lower_bound: float = 0.0,
    progress: Optional[Callable[[float, float], None]] = None,
    late_start: bool = False,
    seed: int = 0,
) -> SolveOutcome:
    """Build and solve the order model around `incumbent` (per-rank orders of action ids).

    ``free[r] = (lo, hi)`` frees the incumbent positions lo..hi-1 of rank r and keeps the rest
    in incumbent order (a window); ``free=None`` is the full model. The horizon is the
    incumbent's value, so the incumbent is always a feasible point of the model.
    ``late_start`` (span, full model only): each rank's start is a variable (module docstring),
    so the model relaxes every schedule and its dual bound certifies the span.
    """
    if late_start and (objective != "span" or free is not None):
        raise ValueError("late_start is the full span model's option")
    t0 = now()
    m = _frame(inst, incumbent, incumbent_value, objective, free, late_start)
    failure = add_start_times(m, incumbent_value, lower_bound)
    if not failure:
        add_precedence(m)
        failure = add_machine_order(m)
    if failure:
        return SolveOutcome(None, False, None, None, now() - t0, message=failure)
    if counting_work_on():  # the binaries are known: the set-up's charge, the same on any machine
        built, setup = ORDER_WORK_PER_BINARY * len(m.before), SETUP_WORK_PER_BINARY * len(m.before)
        charge(built)
        if built + setup + MIN_SOLVE_WORK > time_limit:
            return SolveOutcome(None, False, None, None, now() - t0, len(m.before),
                                message="its set-up takes more than its share of the work budget")
        charge(setup)
    add_memory_cap(m)
    add_objective(m)
    add_one_machine_cuts(m)
    values = mip_start(m, incumbent_value)
    remaining = max(0.5, time_limit - (now() - t0))
    return _solve(m, values, solver, remaining, progress, seed, t0)


@dataclass
class MipEngine:
    """The integer program as an engine (schedc.solver.engine): the full model around the
    incumbent's orders (``late_start``: the span model that certifies, module docstring) with
    `solver` (highs | cbc) until the deadline. Its answer comes back in microbatch order and
    simulated; its dual bound is a certificate."""

    solver: str
    lower_bound: float = 0.0
    progress: Optional[Callable[[float, float], None]] = None
    late_start: bool = False
    seed: int = 0
    name: str = "mip"

    def run(self, graph: Graph, incumbent: Optional[Incumbent], deadline: Deadline) -> Result:
        if incumbent is None or incumbent.orders is None:
            return Result()
        obj = graph.problem.objective
        out = solve_model(graph, incumbent.orders, incumbent.value(obj), obj, deadline.left(), self.solver,
                          lower_bound=self.lower_bound, progress=self.progress, late_start=self.late_start,
                          seed=self.seed)
        res = Result(bound=out.dual_bound, proven=out.proven,
                     bound_source=f"{self.solver} (proven optimal)" if out.proven else f"{self.solver} dual bound")
        if out.orders is not None:
            res.orders = canonical_orders(graph, out.orders)
            res.schedule, res.sim = materialize(graph, res.orders)
            res.status = Status.OPTIMAL if out.proven else Status.FEASIBLE
        return res


def _frame(inst: Graph, incumbent, incumbent_value: float, objective: str, free, late_start: bool) -> OrderModel:
    """The model's data before any variable: the window's chains, time windows, the incumbent's
    times, and an empty PuLP problem."""
    preds, window = _window_chains(inst, incumbent, free)
    topo = topological(inst.n, preds)
    chain_head = _chain_heads(inst, preds, topo)
    if late_start:
        win = late_start_windows(inst, preds, topo, incumbent_value + REL)
    else:
        win = time_windows(inst, preds, topo, objective, incumbent_value + REL, chain_head)
    sim = simulate(schedule_from_orders(inst, incumbent), inst.problem.profile)
    pinned = [False] * inst.n
    if free is not None:
        # a window's prefix (actions before it on their rank) is closed under dependencies, so
        # its times are the incumbent's: constants, not variables
        for r, row in enumerate(incumbent):
            for i in row[: max(0, free[r][0])]:
                pinned[i] = True
    return OrderModel(
        inst=inst, objective=objective, prob=pulp.LpProblem("schedule", pulp.LpMinimize), win=win,
        preds=preds, window=window, pinned=pinned,
        incumbent_start=[sim.timings[a].start for a in inst.actions],
        incumbent_pos={i: k for row in incumbent for k, i in enumerate(row)}, chain_head=chain_head,
    )


def _window_chains(inst: Graph, incumbent, free) -> tuple[list, Optional[list[set[int]]]]:
    """The dependencies plus, for a window, the chains that keep the fixed prefix and suffix of
    every rank in incumbent order around it; one (strongest) lag per (producer, consumer)."""
    preds = [list(p) for p in inst.preds]
    window: Optional[list[set[int]]] = None
    if free is not None:
        window = []
        for r, row in enumerate(incumbent):
            lo, hi = max(0, free[r][0]), min(len(row), free[r][1])
            inside = row[lo:hi]
            window.append(set(inside))
            for k in range(1, len(row)):
                if not (lo <= k - 1 < hi) and not (lo <= k < hi):
                    preds[row[k]].append((row[k - 1], 0.0))
            if hi > lo:
                if lo > 0:
                    for b in inside:
                        preds[b].append((row[lo - 1], 0.0))
                if hi < len(row):
                    for a in inside:
                        preds[row[hi]].append((a, 0.0))
    dedup = []
    for b in range(inst.n):
        lags: dict[int, float] = {}
        for a, lag in preds[b]:
            lags[a] = max(lag, lags.get(a, lag))
        dedup.append(list(lags.items()))
    return dedup, window


def _chain_heads(inst: Graph, preds, topo: list[int]) -> list[float]:
    """Per rank, the longest dependency path to its first action: where the simulator starts it
    (loop and V placement: exact)."""
    head = [0.0] * inst.n
    for b in topo:
        t = 0.0
        for a, lag in preds[b]:
            t = max(t, head[a] + inst.dur[a] + lag)
        head[b] = t
    return [head[f] for f in inst.first]


def add_start_times(m: OrderModel, incumbent_value: float, lower_bound: float) -> str:
    """start_a in [est_a, lst_a] (a constant when pinned) and T in [lower bound, incumbent];
    minimize T. Returns a failure message when some window is empty."""
    new_var = getattr(m.prob, "add_variable", None) or pulp.LpVariable  # PuLP >= 3.3 prefers add_variable
    for i in range(m.inst.n):
        lo, hi = m.win.est[i], m.win.lst[i]
        if hi < lo - REL:
            return "empty time window"
        if m.pinned[i]:
            m.start[i] = m.incumbent_start[i]
        elif m.win.earliest is not None:  # late start: the window is relative to the rank's start
            m.start[i] = new_var(f"start_{m.inst.actions[i]}", lowBound=m.win.earliest[i])
        else:
            m.start[i] = new_var(f"start_{m.inst.actions[i]}", lowBound=lo, upBound=max(lo, hi))
    m.step = new_var(m.objective, lowBound=max(lower_bound, 0.0), upBound=incumbent_value + REL)
    m.prob += m.step
    return ""


def add_precedence(m: OrderModel) -> None:
    """precedence: start_b >= start_a + d_a + lag for every dependency (a, b, lag)."""
    inst = m.inst
    for b in range(inst.n):
        if m.pinned[b]:
            continue
        for a, lag in m.preds[b]:
            m.prob += m.start[b] >= m.start[a] + inst.dur[a] + lag, f"precedence_{inst.actions[a]}_{inst.actions[b]}"


def add_machine_order(m: OrderModel) -> str:
    """machine_order: two actions of one rank do not overlap. A pair ordered by the closure needs
    nothing; a pair whose time windows allow one order gets that order as a row (forced_order);
    every other pair gets a binary before_ab and two big-M rows (order), each M as small as the
    windows allow. Returns a failure message when some pair fits in neither order."""
    inst, win, new_var = m.inst, m.win, getattr(m.prob, "add_variable", None) or pulp.LpVariable
    for acts in inst.by_rank:
        cand = sorted(a for a in acts if m.is_free(a))
        for x, a in enumerate(cand):
            for b in cand[x + 1:]:
                if (win.anc[b] >> a) & 1 or (win.anc[a] >> b) & 1:
                    continue
                a_first_ok = win.est[a] + inst.dur[a] <= win.lst[b] + REL
                b_first_ok = win.est[b] + inst.dur[b] <= win.lst[a] + REL
                if not a_first_ok and not b_first_ok:
                    return "no order fits"
                if a_first_ok != b_first_ok:
                    first, second = (a, b) if a_first_ok else (b, a)
                    m.prob += (m.start[second] >= m.start[first] + inst.dur[first],
                               f"forced_order_{inst.actions[first]}_{inst.actions[second]}")
                    m.forced.add((first, second))
                    continue
                v = new_var(f"before_{inst.actions[a]}_{inst.actions[b]}", 0, 1, cat=pulp.LpBinary)
                m.before[(a, b)] = v
                big_ab = win.lst[a] + inst.dur[a] - win.est[b]
                big_ba = win.lst[b] + inst.dur[b] - win.est[a]
                m.prob += m.start[b] >= m.start[a] + inst.dur[a] - big_ab * (1 - v), f"order_{inst.actions[a]}_{inst.actions[b]}"
                m.prob += m.start[a] >= m.start[b] + inst.dur[b] - big_ba * v, f"order_{inst.actions[b]}_{inst.actions[a]}"
    return ""


def add_memory_cap(m: OrderModel) -> None:
    """memory_cap: while an action a runs that allocates at its start or has transient bytes (an
    F, an I that rises), its rank holds its fixed bytes + the extra bytes of a (allocation plus
    transient, schedc.core.cost_model.over) + sum of mu_b over the rank's actions b before a; at most
    the cap. Rows that cannot bind (every freeing action counted as not yet run) are left out;
    so are a window's fixed actions (their prefix is the incumbent's, which fits)."""
    inst = m.inst
    extra = inst.extra
    for r, acts in enumerate(inst.by_rank):
        cap = inst.caps[r]
        if math.isinf(cap):
            continue
        for a in acts:
            if extra[a] <= 0 or not m.is_free(a):
                continue
            const = worst = inst.static[r] + extra[a]
            terms = []
            for b in acts:
                if b == a or inst.delta[b] == 0:
                    continue
                v = m.runs_before(b, a)
                if isinstance(v, int):
                    const += inst.delta[b] * v
                    worst += inst.delta[b] * v
                else:
                    terms.append((inst.delta[b], v))
                    worst += max(inst.delta[b], 0.0)
            if worst <= cap * (1 + REL) + REL:
                continue
            m.prob += pulp.lpSum(d * v for d, v in terms) + const <= cap, f"memory_cap_{inst.actions[a]}"


def add_objective(m: OrderModel) -> None:
    """objective: T >= end of a + the work that must follow a on its rank, minus (span) the
    rank's start s_r = start of its first action: pinned at its chain head, or (late start)
    free, except on the rank of stage 0, whose start is the origin of time (module docstring)."""
    inst, win = m.inst, m.win
    if m.objective == "makespan":
        for a in range(inst.n):
            if not m.pinned[a]:
                m.prob += m.step >= m.start[a] + inst.dur[a] + win.work_after[a], f"objective_after_{inst.actions[a]}"
        return
    for r, acts in enumerate(inst.by_rank):
        f = inst.first[r]
        late = m.win.earliest is not None
        if not m.pinned[f] and (not late or inst.problem.placement[0] == r):
            m.prob += m.start[f] == m.chain_head[r], f"first_start_r{r}"
        for a in acts:
            if not m.pinned[a]:
                m.prob += (m.step >= m.start[a] + inst.dur[a] + win.work_after[a] - m.start[f],
                           f"objective_after_{inst.actions[a]}")


def add_one_machine_cuts(m: OrderModel) -> None:
    """one_machine (valid inequalities): a rank runs one action at a time, so a starts after
    the rank's release plus everything ordered before it, and T covers a's end plus everything
    ordered after it. These link the order binaries to time far more tightly than big-M rows."""
    inst = m.inst
    for r, acts in enumerate(inst.by_rank):
        release = min(m.win.est[i] for i in acts)
        if m.win.earliest is not None:  # late start: the rank's own start is the release
            release = m.start[inst.first[r]]
        first_start = m.start[inst.first[r]] if m.objective == "span" else 0
        for a in acts:
            if not m.is_free(a):
                continue
            pre_const, pre_terms, post_const, post_terms = 0.0, [], 0.0, []
            for b in acts:
                if b == a:
                    continue
                v = m.runs_before(b, a)
                if isinstance(v, int):
                    pre_const += inst.dur[b] * v
                    post_const += inst.dur[b] * (1 - v)
                else:
                    pre_terms.append(inst.dur[b] * v)
                    post_terms.append(inst.dur[b] * (1 - v))
            if not pre_terms:
                continue
            m.prob += m.start[a] >= release + pre_const + pulp.lpSum(pre_terms), f"one_machine_before_{inst.actions[a]}"
            tail = m.start[a] + inst.dur[a] + post_const + pulp.lpSum(post_terms)
            m.prob += m.step >= tail - first_start, f"one_machine_after_{inst.actions[a]}"


def mip_start(m: OrderModel, incumbent_value: float) -> dict[str, float]:
    """The incumbent as a MIP start: its simulated times (clipped into the windows), its orders
    and its value; also set as the variables' initial values (CBC's warmStart reads those)."""
    values = {}
    for i in range(m.inst.n):
        if m.pinned[i]:
            continue
        if m.win.earliest is not None:
            values[m.start[i].name] = max(m.incumbent_start[i], m.win.earliest[i])
        else:
            values[m.start[i].name] = min(max(m.incumbent_start[i], m.win.est[i]), m.win.lst[i])
    for (a, b), v in m.before.items():
        values[v.name] = 1.0 if m.incumbent_pos[a] < m.incumbent_pos[b] else 0.0
    assert m.step is not None, "the model is built before its incumbent is set"
    values[m.step.name] = incumbent_value
    for var in m.prob.variables():
        if var.name in values:
            # a bound computed by another route can sit an ulp above the incumbent it equals
            v = values[var.name]
            v = v if var.lowBound is None else max(v, var.lowBound)
            values[var.name] = v if var.upBound is None else min(v, var.upBound)
            var.setInitialValue(values[var.name])
    return values


# ---------------------------------------------------------------- solvers


def available_solver(name: Optional[str] = None) -> str:
    """'highs' when highspy is importable (or asked for), else 'cbc' (COIN_CMD on the binary
    schedc.solver.pulp_compat finds: PuLP 4 bundles none)."""
    from schedc.errors import ParameterError, SchedcError

    if name not in (None, "highs", "cbc"):
        raise ValueError(f"solver must be 'highs' or 'cbc', got {name!r}")
    highs_ok = highs_available()
    if name == "highs" and not highs_ok:
        raise ParameterError("solver", "{name}highs: highspy is not installed (pip install highspy), or use {name}cbc")
    if name == "highs" or (name is None and highs_ok):
        return "highs"
    if cbc_executable() is None:
        detail = "no MIP solver found: pip install highspy (or 'pulp[cbc]' for CBC)"
        if name == "cbc":
            raise ParameterError("solver", "{name}cbc: " + detail)
        raise SchedcError(f"the integer program: {detail}")
    return "cbc"


_HIGHS_BANNER_SHOWN = False


def _without_highs_banner() -> None:
    """Create the process's first HiGHS instance with stdout closed to it.

    HiGHS prints its name and licence to the C-level stdout when the first instance of a process
    is created, whatever ``output_flag`` says (highspy 1.16): that line would land in a user's
    ``schedc compile ... > log`` or between a report's lines. Later instances print nothing."""
    global _HIGHS_BANNER_SHOWN
    if _HIGHS_BANNER_SHOWN:
        return
    import highspy

    _HIGHS_BANNER_SHOWN = True
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no stdout to protect
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(devnull)
    finally:
        os.close(saved)


class _WarmHiGHS(pulp.HiGHS):
    """pulp's HiGHS (highspy) plus a MIP start, a progress callback and the dual bound."""

    def __init__(self, start_values: dict, on_progress=None, deadline: Optional[float] = None, **kw):
        super().__init__(**kw)
        self.start_values = start_values
        self.on_progress = on_progress
        self.deadline = deadline
        self.dual_bound: Optional[float] = None
        self.primal: Optional[float] = None
        self.start_accepted: Optional[bool] = None
        self._last = 0.0
        # under a work budget: the search stops after this many of its interrupt checks, which a
        # single-threaded HiGHS reaches at the same points on any machine (the root's cut rounds
        # among them; the node limit alone lets the root run on)
        self.call_limit: Optional[int] = None
        self.calls = 0

    def _set_start(self, h, lp) -> None:
        # pulp's HiGHS class does not pass warmStart on: hand the values to highspy directly
        import highspy

        # the solver's own column numbers (PuLP 4 has no LpVariable.index; pulp_compat)
        columns = solver_columns(lp)
        idx = [j for j, v in enumerate(columns) if v.name in self.start_values]
        vals = [float(self.start_values[columns[j].name]) for j in idx]
        if not hasattr(h, "setSolution"):
            return
        try:
            status = h.setSolution(len(idx), idx, vals)
        except TypeError:  # older highspy: a full HighsSolution
            sol = highspy.HighsSolution()
            full = [0.0] * len(columns)
            for i, v in zip(idx, vals):
                full[i] = v
            sol.col_value = full
            sol.value_valid = True
            status = h.setSolution(sol)
        self.start_accepted = status == highspy.HighsStatus.kOk

    def callSolver(self, lp):
        import highspy

        h = lp.solverModel
        if self.start_values:
            self._set_start(h, lp)

        def interrupt(e):
            out = e.data_out
            now = time.monotonic()
            if (self.deadline is not None and now > self.deadline) or stop_requested():
                e.interrupt()
            self.calls += 1
            if self.call_limit is not None and self.calls > self.call_limit:
                e.interrupt()  # a work budget's limit: the same point of the search on any machine
            if self.on_progress is not None and now - self._last >= 1.0:
                self._last = now
                self.on_progress(out.mip_primal_bound, out.mip_dual_bound)

        h.cbMipInterrupt.subscribe(interrupt)
        if h.run() == highspy.HighsStatus.kError and h.getModelStatus() == highspy.HighsModelStatus.kNotset:
            # HiGHS refuses threads=1 once an earlier solve in this process (pulp.HiGHS() with its
            # defaults, a user's own model) started its global scheduler with more threads: the
            # run stops before solving. Replace the idle scheduler and run once more.
            highspy.Highs.resetGlobalScheduler(True)
            h.run()
        info = h.getInfo()
        self.dual_bound = info.mip_dual_bound
        self.primal = info.objective_function_value
        self.model_status = h.getModelStatus()


def _solve(m: OrderModel, values: dict, solver: str, seconds: float, progress, seed: int, t0: float) -> SolveOutcome:
    """Run HiGHS (with the MIP start) or CBC on the built model; read back orders and bounds."""
    prob, n_bin = m.prob, len(m.before)
    # under a work budget (schedc.solver.deadline) the search stops at a node count, the same on
    # any machine; the wall-clock limit is then only the safety net
    work = counting_work_on()
    nodes = {"maxNodes": max(MIN_NODES, int(seconds * NODES_PER_UNIT))} if work else {}
    wall = max(0.5, wall_left()) if work else seconds
    charge(seconds)
    if solver == "highs":
        _without_highs_banner()
        limits = {"mip_max_nodes": nodes["maxNodes"]} if work else {}
        s = _WarmHiGHS(values, on_progress=progress, deadline=time.monotonic() + wall,
                       msg=False, timeLimit=wall, threads=1, mip_rel_gap=PROVEN, mip_abs_gap=PROVEN,
                       random_seed=int(seed), **limits)
        if work:
            s.call_limit = max(MIN_CHECKS, int(seconds * CHECKS_PER_UNIT))
    else:
        try:
            s = cbc_solver(msg=False, timeLimit=max(1, int(math.ceil(wall))), warmStart=True, threads=1,
                           gapRel=PROVEN, gapAbs=PROVEN, **nodes)
        except pulp.PulpSolverError as e:
            return SolveOutcome(None, False, None, None, now() - t0, n_bin, prob.numConstraints(), solver,
                                str(e))
    try:
        returned = _solve_in_private_dir(prob, s)
    except pulp.PulpSolverError as e:
        return SolveOutcome(None, False, None, None, now() - t0, n_bin, prob.numConstraints(), solver, str(e))
    elapsed = now() - t0
    if work:
        wall_cut()  # a solve stopped by the safety net is recorded as such
    dual = None
    if solver == "highs":
        import highspy

        ms = getattr(s, "model_status", None)
        proven = ms == highspy.HighsModelStatus.kOptimal
        if s.dual_bound is not None and math.isfinite(s.dual_bound):
            dual = s.dual_bound
        if ms == highspy.HighsModelStatus.kInfeasible:
            return SolveOutcome(None, False, None, None, elapsed, n_bin, prob.numConstraints(), solver, "infeasible")
    else:
        proven = solve_status(prob, returned).optimal
    if proven and dual is None:
        dual = pulp.value(prob.objective)
    orders = _solution_orders(m)
    if orders is None:
        return SolveOutcome(None, False, None, dual, elapsed, n_bin, prob.numConstraints(), solver, "no solution")
    return SolveOutcome(orders, proven, pulp.value(prob.objective), dual, elapsed, n_bin, prob.numConstraints(), solver)


def _solve_in_private_dir(prob: pulp.LpProblem, s):
    """``prob.solve(s)`` (a status code in PuLP 3, an LpSolveStats in PuLP 4); a file-based solver (CBC) writes its model, MIP start and solution
    files (``*-pulp.mps``, ``*.mst``, ``*.sol``) into a directory of its own, removed on every
    way out: pulp deletes them only after a successful solve, not when CBC fails or the solve
    is interrupted."""
    if not hasattr(s, "tmpDir"):
        return prob.solve(s)
    with tempfile.TemporaryDirectory(prefix="schedc-cbc-") as tmp:
        s.tmpDir = tmp
        return prob.solve(s)


def _solution_orders(m: OrderModel) -> Optional[list[list[int]]]:
    """Per rank, its actions by the solution's start times (None when the solver has none)."""
    def value(i: int) -> Optional[float]:
        return m.start[i] if m.pinned[i] else m.start[i].varValue

    assert m.step is not None, "a solved model has its step variable"
    if m.step.varValue is None:
        return None
    starts: list[float] = []
    for i in range(m.inst.n):
        v = value(i)
        if v is None:
            return None
        starts.append(v)
    # by start, then end: a zero-length action (stage 0's I under torch's runtime) that starts
    # with another one ran first
    dur = m.inst.dur
    return [sorted(acts, key=lambda i: (round(starts[i], 6), round(starts[i] + dur[i], 6), m.win.est[i], i))
            for acts in m.inst.by_rank]
