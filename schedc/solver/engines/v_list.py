"""v-list: a V order within V-Half's memory, built as a unit-time list schedule (a warm start).

Problem: with two stages per rank in a V and at most (R+2)//2 microbatches of a rank's two
stages held (V-Half's memory), find an order that loses little time in warm-up and cool-down.
The authors' V-Half (schedc.core.baselines) fixes its order for the paper's runtime; under torch's
(stage 0's backward all in W) another order can be shorter, so the warm start tries this one too.

Method: a unit-time list schedule (F = I = W = 1). At every time step each rank runs, among its
ready passes, the first by (I before F before W, oldest microbatch, first stage of the V before
the second): I's are on the critical path back down the V; W's fill the time nothing else can
use. A forward runs only while the rank stays within the memory bound, and the first stage's
forwards leave room for the second stage's microbatches in flight: ceil((r+1)/2) on rank r, the
lifespan of the V-Half building block's second-stage pass there (3(r+1) units: r forward hops of
2, the backward hops of 1, I and W) over its period of 6, so the V's turn is never starved.
Memory depends only on each rank's order (F allocates, W frees), so the bound holds under any
costs and runtime; the order comes from a valid unit-time execution, so it cannot deadlock.

Cost: O((6M + R) x R) steps of at most 6 candidates each.
"""

from __future__ import annotations

from schedc.core.ir import Action, Cell, Kind, Schedule, v_placement
from schedc.errors import SchedcError

NAME = "v-list"


def v_list_schedule(n_ranks: int, n_microbatches: int) -> Schedule:
    """The order for 2 x `n_ranks` stages in a V and `n_microbatches` microbatches."""
    p, m = int(n_ranks), int(n_microbatches)
    rows = _rows(p, m)
    return Schedule(rows=rows, placement=v_placement(2 * p, p), n_microbatches=m, name=NAME)


def _rows(p: int, m: int) -> list[list[Cell]]:
    n = 2 * p
    cap = 2 * ((p + 2) // 2)  # stage activations = (R+2)//2 microbatches of both stages
    done: dict[tuple[str, int], int] = {}  # (kind, stage) -> microbatches finished
    ends: dict[Action, int] = {}
    held = [[0, 0] for _ in range(p)]  # per rank: activations of its first / second stage
    rows: list[list[Cell]] = [[] for _ in range(p)]
    t, total = 0, 3 * n * m
    while len(ends) < total:
        if t > 6 * m * n + 4 * n:  # a unit-time order finishes well before this
            raise SchedcError(f"{NAME}: no order found for {p} ranks and {m} microbatches")
        for r in range(p):
            ready = [a for a in _candidates(r, n, m, done) if _ready(a, n, ends, t)]
            ready = [a for a in ready if a.kind != Kind.F or _fits(a, r, held[r], cap)]
            if not ready:
                continue
            a = min(ready, key=lambda a: ("IFW".index(a.kind), a.microbatch, a.stage != r))
            rows[r].append(a)
            ends[a] = t + 1
            done[(a.kind, a.stage)] = a.microbatch + 1
            held[r][a.stage != r] += {Kind.F: 1, Kind.I: 0, Kind.W: -1}[a.kind]
        t += 1
    return rows


def _candidates(r: int, n: int, m: int, done: dict[tuple[str, int], int]) -> list[Action]:
    """The next F, I and W of each of rank r's stages (each kind runs microbatches in order)."""
    out = []
    for s in (r, n - 1 - r):
        for kind in "FIW":
            k = done.get((kind, s), 0)
            if k < m:
                out.append(Action(s, kind, k))
    return out


def _ready(a: Action, n: int, ends: dict[Action, int], t: int) -> bool:
    s, k = a.stage, a.microbatch
    if a.kind == Kind.F:
        deps = [Action(s - 1, Kind.F, k)] if s else []
    elif a.kind == Kind.I:
        deps = [Action(s, Kind.F, k)] + ([Action(s + 1, Kind.I, k)] if s < n - 1 else [])
    else:
        deps = [Action(s, Kind.I, k)]
    return all(ends.get(d, t + 1) <= t for d in deps)


def _fits(a: Action, r: int, held: list[int], cap: int) -> bool:
    if held[0] + held[1] + 1 > cap:
        return False
    reserve = (r + 2) // 2  # ceil((r+1)/2): the second stage's in-flight microbatches
    return a.stage != r or held[0] + 1 <= cap - reserve
