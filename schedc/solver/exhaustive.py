"""Exact optimum of tiny problems by exhaustive branch and bound: the ground truth for tests.

Problem: among ALL per-rank action orders that are deadlock-free and respect the memory caps,
find one whose simulate() value (earliest starts; makespan or span) is smallest. Used to check
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
  the rank's first start) already reaches the incumbent, which starts as the heuristic's value.

``merge_backward=True`` also branches on B (I and W fused) for every backward; splitting never
loses (I ends earlier, W ends when B would, memory drops no later), so both settings give the
same optimum; the option exists to check exactly that.

Cost: exponential; meant for up to ~24 actions (3 stages x 3 microbatches, V with 2 ranks x 2
microbatches). ``max_nodes`` caps the search; exceeding it raises SchedcError rather than
returning an unproven answer.
"""

from __future__ import annotations

from schedc.errors import SchedcError
from schedc.ir import Action, Schedule
from schedc.simulate import simulate
from schedc.solver.bounds import lower_bound, rank_span_bounds
from schedc.solver.heuristic import check_memory_feasible, heuristic_schedule
from schedc.solver.problem import Problem

EPS = 1e-9
KINDS = ("F", "I", "W", "B")


def exact_optimum(
    problem: Problem, max_nodes: int = 2_000_000, merge_backward: bool = False, use_heuristic: bool = True
) -> tuple[float, Schedule]:
    """(optimal objective value, a schedule attaining it) for a tiny `problem`.

    `use_heuristic=False` starts from no incumbent (slower; for testing the search itself)."""
    check_memory_feasible(problem)
    S, M, R = problem.n_stages, problem.n_microbatches, problem.n_ranks
    prof = problem.profile
    objective = problem.objective
    rank_of = list(problem.placement)
    dur = {}
    delta = {}
    for s in range(S):
        for k in KINDS:
            dur[(s, k)] = problem.duration(s, k)
            delta[(s, k)] = prof.memory_delta(s, k)
    comm = [problem.comm(b) for b in range(S - 1)] + [0.0]
    room = [x + EPS * max(1.0, abs(x)) if x != float("inf") else x for x in problem.activation_room]

    def aid(s: int, k: str, m: int) -> int:
        return ((s * M) + m) * 4 + KINDS.index(k)

    # incumbent
    if use_heuristic:
        inc_sched = heuristic_schedule(problem, time_budget=0.1)
        inc_val = simulate(inc_sched, prof, problem.memory).objective(objective)
        if inc_val <= lower_bound(problem) + EPS:
            inc_sched.meta = dict(inc_sched.meta, source="exhaustive (heuristic meets the lower bound)", nodes=0)
            return inc_val, inc_sched
    else:
        inc_sched, inc_val = None, float("inf")
    best = {"val": inc_val, "orders": None}

    rank_lb = rank_span_bounds(problem)
    work_left = [0.0] * R
    for s in range(S):
        work_left[rank_of[s]] += M * (dur[(s, "F")] + dur[(s, "I")] + dur[(s, "W")])
    total_actions = S * M * 3  # B counts as two placements (its I and W slots)

    end: dict[int, float] = {}
    bkind: dict[tuple[int, int], str] = {}  # (s, m) -> 'I' or 'B' once placed
    rank_free = [0.0] * R
    rank_start = [None] * R
    held = [0.0] * R
    orders: list[list[tuple[int, str, int]]] = [[] for _ in range(R)]
    nextF0 = [0]
    i_order: list[list[int]] = [[] for _ in range(S)]  # per stage: microbatches in the order their I ran
    w_done = [0] * S
    placed_mask = [0]
    nodes = [0]
    memo: dict[int, list[tuple]] = {}
    done_slots = [0]

    def frontier_vector() -> tuple:
        vec = list(rank_free)
        for key in sorted(end):
            s, kidx, m = key // 4 // M, key % 4, (key // 4) % M
            k = KINDS[kidx]
            if _feeds_unplaced(s, k, m):
                vec.append(end[key])
        return tuple(vec)

    def _feeds_unplaced(s: int, k: str, m: int) -> bool:
        mask = placed_mask[0]
        if k == "F":
            if s + 1 < S and not mask >> aid(s + 1, "F", m) & 1:
                return True
            return (s, m) not in bkind
        if k == "I":
            if not mask >> aid(s, "W", m) & 1:
                return True
            return s > 0 and (s - 1, m) not in bkind
        if k == "B":
            return s > 0 and (s - 1, m) not in bkind
        return False

    def dominated() -> bool:
        key = placed_mask[0]
        vec = frontier_vector()
        if objective == "span":
            if all(st is not None for st in rank_start):
                vec = vec + tuple(-st for st in rank_start)
                exact = False
            else:
                vec = vec + tuple(-(st if st is not None else -1.0) for st in rank_start)
                exact = True
        else:
            exact = False
        lst = memo.setdefault(key, [])
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

    def lower() -> float:
        lb = 0.0
        for r in range(R):
            if objective == "makespan":
                lb = max(lb, rank_free[r] + work_left[r])
            else:
                st = rank_start[r]
                if st is None:
                    lb = max(lb, rank_lb[r])  # the rank's whole span is still ahead
                else:
                    lb = max(lb, rank_free[r] - st + work_left[r])
        return lb

    def available(r: int):
        mask = placed_mask[0]
        out = []
        for s in problem.stages_of(r):
            for m in range(M):
                f = aid(s, "F", m)
                if not mask >> f & 1:
                    if s == 0:
                        if m != nextF0[0]:
                            continue
                        rt = 0.0
                    else:
                        pf = aid(s - 1, "F", m)
                        if not mask >> pf & 1:
                            continue
                        rt = end[pf] + comm[s - 1]
                    if held[r] + delta[(s, "F")] <= room[r]:
                        out.append((s, "F", m, rt))
                    continue
                if (s, m) not in bkind:
                    rt = end[f]
                    if s + 1 < S:
                        nk = bkind.get((s + 1, m))
                        if nk is None:
                            continue
                        rt = max(rt, end[aid(s + 1, nk, m)] + comm[s])
                    out.append((s, "I", m, rt))
                    if merge_backward:
                        out.append((s, "B", m, rt))
                    continue
            # W's of a stage follow the order of its I's (see module docstring)
            q = i_order[s]
            if w_done[s] < len(q):
                m = q[w_done[s]]
                out.append((s, "W", m, end[aid(s, "I", m)]))
        return out

    def value_now() -> float:
        if objective == "makespan":
            return max(rank_free)
        return max(rank_free[r] - rank_start[r] for r in range(R) if rank_start[r] is not None)

    def dfs() -> None:
        nodes[0] += 1
        if nodes[0] > max_nodes:
            raise SchedcError(
                f"exhaustive search exceeded {max_nodes} nodes; the instance is too large for exact_optimum"
            )
        if done_slots[0] == total_actions:
            v = value_now()
            if v < best["val"] - EPS:
                best["val"] = v
                best["orders"] = [list(o) for o in orders]
            return
        if lower() >= best["val"] - EPS:
            return  # cannot beat the incumbent (which is kept)
        if dominated():
            return
        moves = []
        for r in range(R):
            for s, k, m, rt in available(r):
                st = max(rank_free[r], rt)
                moves.append((st, r, s, k, m))
        moves.sort()
        for st, r, s, k, m in moves:
            a = aid(s, k, m)
            d = dur[(s, k)]
            saved = (rank_free[r], rank_start[r], held[r], work_left[r])
            end[a] = st + d
            placed_mask[0] |= 1 << a
            rank_free[r] = st + d
            if rank_start[r] is None:
                rank_start[r] = st
            held[r] += delta[(s, k)]
            work_left[r] -= d
            slots = 2 if k == "B" else 1
            done_slots[0] += slots
            if k in ("I", "B"):
                bkind[(s, m)] = k
            if k == "I":
                i_order[s].append(m)
            elif k == "W":
                w_done[s] += 1
            if k == "F" and s == 0:
                nextF0[0] += 1
            orders[r].append((s, k, m))
            dfs()
            orders[r].pop()
            if k == "F" and s == 0:
                nextF0[0] -= 1
            if k in ("I", "B"):
                del bkind[(s, m)]
            if k == "I":
                i_order[s].pop()
            elif k == "W":
                w_done[s] -= 1
            done_slots[0] -= slots
            rank_free[r], rank_start[r], held[r], work_left[r] = saved
            placed_mask[0] &= ~(1 << a)
            del end[a]

    dfs()
    if best["orders"] is None:
        # Nothing beat the heuristic: it is optimal.
        sched = inc_sched
        sched.meta = dict(sched.meta, source="exhaustive (heuristic proven optimal)", nodes=nodes[0])
        return best["val"], sched
    rows = [[Action(s, k, m) for s, k, m in row] for row in best["orders"]]
    sched = Schedule(rows=rows, placement=tuple(problem.placement), n_microbatches=M,
                     name="exhaustive-optimum", meta={"source": "exhaustive", "nodes": nodes[0]})
    val = simulate(sched, prof, problem.memory).objective(objective)
    return val, sched
