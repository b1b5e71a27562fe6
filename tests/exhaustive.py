"""Exact optimum of tiny problems by exhaustive branch and bound: the ground truth for tests.

Problem: among ALL per-rank action orders that are deadlock-free and respect the memory caps
(schedc.core.cost_model's rule: an action may run when what its rank holds plus its allocation and
transient fits the room), find one whose simulate() value (earliest starts; makespan or span) is smallest. Used to check
that lower bounds never exceed the optimum, that heuristics and the integer program never beat
it, and that the integer program's "optimal" claims are true.

Method: every deadlock-free tuple of per-rank orders has a global topological order, and
conversely; so we enumerate global topological orders by depth-first search, appending one
available action (its producers already placed) to one rank's order at a time. Appending fixes
that action's earliest start exactly as simulate() computes it (rank predecessor and producers
are all placed), so partial states carry exact times. The search is exhaustive up to:

* relabelling microbatches (all microbatches cost the same, so any schedule can be relabelled
  so that stage 0 runs its forwards in microbatch order 0, 1, 2, ...); nothing else is fixed:
  every other stage may run F, I, W of any microbatch in any order;
* W's of one stage run in the order of that stage's I's: two W's of a stage cost the same, hold
  the same bytes and feed nothing, so exchanging them (both I's already done) changes no time;
* dominance: two partial states with the same placed actions hold the same memory and allow the
  same completions; if one has every rank free no later and every placed action that still
  feeds an unplaced one finished no later, its best completion is no worse (longest-path times
  are monotone). For ``span`` this also needs each rank's first start no earlier, and is used
  only once every rank has started (an earlier producer could otherwise start an idle rank
  earlier and lengthen its span), falling back to exact duplicates before that;
* bounds: a state is cut when max over ranks of (free time + remaining work) (for span: minus
  the rank's first start; before a rank starts, its span bound from schedc.solver.bounds.chains)
  already reaches the incumbent, which starts as the heuristic's value (the search is skipped
  when that meets schedc.solver.bounds.chains.lower_bound). ``use_bounds=False`` leaves
  schedc.solver.bounds.chains out (a rank not yet started is bounded by its total work), so the optimum
  it returns can check those bounds without taking them on trust.

``merge_backward=True`` also branches on B (I and W fused) for every backward; splitting never
loses (I ends earlier, W ends when B would, memory drops no later), so both settings give the
same optimum; the option exists to check exactly that.

Cost: exponential; meant for up to ~24 actions (3 stages x 3 microbatches, V with 2 ranks x 2
microbatches). ``max_nodes`` caps the search; exceeding it raises SchedcError rather than
returning an unproven answer.
"""

from __future__ import annotations

from typing import Optional

from schedc.core.ir import Action, Schedule
from schedc.core.simulate import simulate
from schedc.core.tolerances import REL
from schedc.errors import SchedcError
from schedc.solver.bounds.chains import lower_bound, rank_span_bounds
from schedc.solver.engines.heuristic import check_memory_feasible, heuristic_schedule
from schedc.solver.problem import Problem

EPS = REL
KINDS = ("F", "I", "W", "B")


def exact_optimum(
    problem: Problem, max_nodes: int = 2_000_000, merge_backward: bool = False, use_heuristic: bool = True,
    use_bounds: bool = True,
) -> tuple[float, Schedule]:
    """(optimal objective value, a schedule attaining it) for a tiny `problem`.

    `use_heuristic=False` starts from no incumbent (slower; for testing the search itself);
    `use_bounds=False` does not rely on schedc.solver.bounds.chains (for testing those bounds)."""
    check_memory_feasible(problem)
    objective = problem.objective
    if use_heuristic:
        inc_sched = heuristic_schedule(problem, time_budget=0.1)
        inc_val = simulate(inc_sched, problem.profile, problem.memory).objective(objective)
        if use_bounds and inc_val <= lower_bound(problem) + EPS:
            inc_sched.meta = dict(inc_sched.meta, source="exhaustive (heuristic meets the lower bound)", nodes=0)
            return inc_val, inc_sched
    else:
        inc_sched, inc_val = None, float("inf")
    search = _Search(problem, inc_val, max_nodes, merge_backward, use_bounds)
    search.dfs()
    if search.best_orders is None:
        # Nothing beat the heuristic: it is optimal.
        inc_sched.meta = dict(inc_sched.meta, source="exhaustive (heuristic proven optimal)", nodes=search.nodes)
        return search.best_val, inc_sched
    rows = [[Action(s, k, m) for s, k, m in row] for row in search.best_orders]
    sched = Schedule(rows=rows, placement=tuple(problem.placement), n_microbatches=problem.n_microbatches,
                     name="exhaustive-optimum", meta={"source": "exhaustive", "nodes": search.nodes})
    val = simulate(sched, problem.profile, problem.memory).objective(objective)
    return val, sched


class _Search:
    """Depth-first search over global topological orders (module docstring); a partial state
    is the placed actions with their exact end times, per-rank free / first-start times and
    held memory."""

    def __init__(self, problem: Problem, incumbent: float, max_nodes: int, merge_backward: bool, use_bounds: bool):
        S, M, R = problem.n_stages, problem.n_microbatches, problem.n_ranks
        self.problem, self.S, self.M, self.R = problem, S, M, R
        self.objective, self.max_nodes, self.merge_backward = problem.objective, max_nodes, merge_backward
        self.rank_of = list(problem.placement)
        self.dur = {(s, k): problem.duration(s, k) for s in range(S) for k in KINDS}
        self.delta = {(s, k): problem.costs.held(s, k) for s in range(S) for k in KINDS}
        # bytes above the held bytes while the action runs: its allocation and its transient
        self.over = {(s, k): problem.costs.over(s, k) for s in range(S) for k in KINDS}
        self.comm = [problem.comm(b) for b in range(S - 1)] + [0.0]
        self.room = [x + EPS * max(1.0, abs(x)) if x != float("inf") else x for x in problem.activation_room]
        self.work_left = [0.0] * R
        for s in range(S):
            self.work_left[self.rank_of[s]] += M * (self.dur[(s, "F")] + self.dur[(s, "I")] + self.dur[(s, "W")])
        self.rank_lb = rank_span_bounds(problem) if use_bounds else list(self.work_left)
        self.total_actions = S * M * 3  # B counts as two placements (its I and W slots)
        self.best_val, self.best_orders = incumbent, None
        self.end: dict[int, float] = {}  # placed action id -> end time
        self.bkind: dict[tuple[int, int], str] = {}  # (s, m) -> 'I' or 'B' once placed
        self.rank_free = [0.0] * R
        self.rank_start: list[Optional[float]] = [None] * R
        self.held = [0.0] * R
        self.orders: list[list[tuple[int, str, int]]] = [[] for _ in range(R)]
        self.next_f0 = 0  # stage 0 runs its forwards in microbatch order
        self.i_order: list[list[int]] = [[] for _ in range(S)]  # per stage: microbatches in the order their I ran
        self.w_done = [0] * S
        self.placed_mask = 0
        self.nodes = 0
        self.memo: dict[int, list[tuple]] = {}
        self.done_slots = 0

    def aid(self, s: int, k: str, m: int) -> int:
        return ((s * self.M) + m) * 4 + KINDS.index(k)

    def dfs(self) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise SchedcError(
                f"exhaustive search exceeded {self.max_nodes} nodes; the instance is too large for exact_optimum"
            )
        if self.done_slots == self.total_actions:
            v = self.value_now()
            if v < self.best_val - EPS:
                self.best_val = v
                self.best_orders = [list(o) for o in self.orders]
            return
        if self.lower() >= self.best_val - EPS:
            return  # cannot beat the incumbent (which is kept)
        if self.dominated():
            return
        moves = []
        for r in range(self.R):
            for s, k, m, rt in self.available(r):
                moves.append((max(self.rank_free[r], rt), r, s, k, m))
        moves.sort()
        for st, r, s, k, m in moves:
            saved = self.place(st, r, s, k, m)
            self.dfs()
            self.unplace(saved, r, s, k, m)

    def place(self, st: float, r: int, s: int, k: str, m: int) -> tuple:
        """Append (s, k, m) to rank r's order, starting at st; returns what unplace restores."""
        d = self.dur[(s, k)]
        saved = (self.rank_free[r], self.rank_start[r], self.held[r], self.work_left[r])
        a = self.aid(s, k, m)
        self.end[a] = st + d
        self.placed_mask |= 1 << a
        self.rank_free[r] = st + d
        if self.rank_start[r] is None:
            self.rank_start[r] = st
        self.held[r] += self.delta[(s, k)]
        self.work_left[r] -= d
        self.done_slots += 2 if k == "B" else 1
        if k in ("I", "B"):
            self.bkind[(s, m)] = k
        if k == "I":
            self.i_order[s].append(m)
        elif k == "W":
            self.w_done[s] += 1
        if k == "F" and s == 0:
            self.next_f0 += 1
        self.orders[r].append((s, k, m))
        return saved

    def unplace(self, saved: tuple, r: int, s: int, k: str, m: int) -> None:
        self.orders[r].pop()
        if k == "F" and s == 0:
            self.next_f0 -= 1
        if k in ("I", "B"):
            del self.bkind[(s, m)]
        if k == "I":
            self.i_order[s].pop()
        elif k == "W":
            self.w_done[s] -= 1
        self.done_slots -= 2 if k == "B" else 1
        self.rank_free[r], self.rank_start[r], self.held[r], self.work_left[r] = saved
        a = self.aid(s, k, m)
        self.placed_mask &= ~(1 << a)
        del self.end[a]

    def available(self, r: int) -> list[tuple[int, str, int, float]]:
        """(stage, kind, microbatch, ready time) of every action rank r may append now."""
        out = []
        for s in self.problem.stages_of(r):
            for m in range(self.M):
                f = self.aid(s, "F", m)
                if not self.placed_mask >> f & 1:
                    rt = self.forward_ready(s, m)
                    if rt is not None and self.fits(r, s, "F"):
                        out.append((s, "F", m, rt))
                elif (s, m) not in self.bkind:
                    rt = self.backward_ready(s, m)
                    if rt is not None:
                        if self.fits(r, s, "I"):
                            out.append((s, "I", m, rt))
                        if self.merge_backward and self.fits(r, s, "B"):
                            out.append((s, "B", m, rt))
            # W's of a stage follow the order of its I's (see module docstring)
            q = self.i_order[s]
            if self.w_done[s] < len(q) and self.fits(r, s, "W"):
                m = q[self.w_done[s]]
                out.append((s, "W", m, self.end[self.aid(s, "I", m)]))
        return out

    def fits(self, r: int, s: int, k: str) -> bool:
        """Rank r may run (s, k) now: what it holds plus the action's extra bytes fit its room."""
        return self.held[r] + self.over[(s, k)] <= self.room[r]

    def forward_ready(self, s: int, m: int) -> Optional[float]:
        """When F(s, m) may start (its input's arrival), or None while it cannot."""
        if s == 0:
            return 0.0 if m == self.next_f0 else None
        pf = self.aid(s - 1, "F", m)
        if not self.placed_mask >> pf & 1:
            return None
        return self.end[pf] + self.comm[s - 1]

    def backward_ready(self, s: int, m: int) -> Optional[float]:
        """When I(s, m) (or B) may start, F(s, m) placed: None while the next stage's backward is not."""
        rt = self.end[self.aid(s, "F", m)]
        if s + 1 < self.S:
            nk = self.bkind.get((s + 1, m))
            if nk is None:
                return None
            rt = max(rt, self.end[self.aid(s + 1, nk, m)] + self.comm[s])
        return rt

    def lower(self) -> float:
        """A bound on every completion of this state: a rank's free time plus its remaining work
        (for span: minus its first start, or its whole span bound before it starts)."""
        lb = 0.0
        for r in range(self.R):
            if self.objective == "makespan":
                lb = max(lb, self.rank_free[r] + self.work_left[r])
            else:
                st = self.rank_start[r]
                if st is None:
                    lb = max(lb, self.rank_lb[r])  # the rank's whole span is still ahead
                else:
                    lb = max(lb, self.rank_free[r] - st + self.work_left[r])
        return lb

    def value_now(self) -> float:
        if self.objective == "makespan":
            return max(self.rank_free)
        return max(self.rank_free[r] - self.rank_start[r] for r in range(self.R) if self.rank_start[r] is not None)

    def dominated(self) -> bool:
        """True when a recorded state with the same placed actions is no worse (module
        docstring); otherwise records this one."""
        vec = self.frontier_vector()
        exact = False
        if self.objective == "span":
            if all(st is not None for st in self.rank_start):
                vec = vec + tuple(-st for st in self.rank_start)
            else:
                vec = vec + tuple(-(st if st is not None else -1.0) for st in self.rank_start)
                exact = True
        lst = self.memo.setdefault(self.placed_mask, [])
        for old in lst:
            if exact:
                if old == vec:
                    return True
            elif all(o <= v + EPS for o, v in zip(old, vec)):
                return True
        if not exact:
            lst[:] = [o for o in lst if not all(v <= w + EPS for w, v in zip(o, vec))]
        lst.append(vec)
        return False

    def frontier_vector(self) -> tuple:
        """Rank free times, then the end times of placed actions that still feed an unplaced one."""
        vec = list(self.rank_free)
        M = self.M
        for key in sorted(self.end):
            s, kidx, m = key // 4 // M, key % 4, (key // 4) % M
            if self.feeds_unplaced(s, KINDS[kidx], m):
                vec.append(self.end[key])
        return tuple(vec)

    def feeds_unplaced(self, s: int, k: str, m: int) -> bool:
        mask = self.placed_mask
        if k == "F":
            if s + 1 < self.S and not mask >> self.aid(s + 1, "F", m) & 1:
                return True
            return (s, m) not in self.bkind
        if k == "I":
            if not mask >> self.aid(s, "W", m) & 1:
                return True
            return s > 0 and (s - 1, m) not in self.bkind
        if k == "B":
            return s > 0 and (s - 1, m) not in self.bkind
        return False


def tiny_optimum(n_stages: int, n_mb: int, placement: str, n_ranks: Optional[int], memory: str,
                 costs: Optional[tuple]) -> Optional[tuple[Problem, float]]:
    """(problem, exact optimum) of a tiny instance: `costs` (F, I, W, comm) of every stage, or
    None for heavy end stages; None where the cap holds no microbatch of some stage (no schedule
    to compare with)."""
    from schedc.core.costs import Profile

    prof = Profile.edge_heavy(n_stages) if costs is None else Profile.uniform(n_stages, *costs[:3], comm=costs[3])
    try:
        p = Problem.build(n_stages, n_mb, n_ranks=n_ranks, placement=placement, profile=prof, memory=memory)
        return p, exact_optimum(p, use_bounds=False)[0]
    except SchedcError:
        return None
