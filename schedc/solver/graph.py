"""The problem graph: one lowering of a Problem that every engine reads.

Problem: the list heuristic, the two zero-bubble greedies, the lower bounds, the integer
program, CP-SAT and the window search all need the same numbers -- per-stage costs and memory
deltas as the runtime executes them, which stages sit on which rank, the communication lag of
each boundary, each rank's room for activations -- and the engines that reason on single
actions need the action graph: every F, I, W (or B) numbered, its duration, rank and memory
delta, its producers with their lags, a topological order. Lowered by each engine itself, the
dependency rule and "the stages of rank r" would exist once per engine.

Method: :func:`graph_of` builds a :class:`Graph` once per problem, and engines take it.

* Stage level (built at once, O(stages + ranks)): ``dF``, ``dI``, ``dW``, ``dB`` and ``d[kind]``
  per stage; ``mem[kind]`` the memory deltas, ``act`` and ``wg`` the bytes a microbatch holds
  after its F and after its I (all from ``Problem.costs``, schedc.core.cost_model); ``comm[s]``
  the lag across s -> s+1 (0 on one rank, and 0 after the last stage); ``stage_rank``,
  ``stages[r]`` (ascending), ``room[r]`` = cap - static bytes, ``backward[s]``: "I" (split) or
  "B" (a stage whose W costs 0 runs one merged backward).
* Action level (built on first use, O(actions + dependencies)): action ids in (stage, kind,
  microbatch) order, so :meth:`Graph.id` is arithmetic, not a dictionary; ``actions``, ``rank``,
  ``dur``, ``delta``, ``by_rank``, ``first`` (per rank: F of its lowest stage, microbatch 0),
  ``preds`` (producer, lag), ``topo``.

The rules are stated once, here:

* Dependencies: schedc.core.simulate.producer_keys (the simulator's own rule: F after the previous
  stage's F, I or B after its F and the next stage's backward, W after its I), with the
  boundary's comm as the lag when the two stages sit on different ranks. On top of them the
  action graph orders each kind by microbatch on every stage (exact symmetry breaking, see
  schedc.solver.engines.mip) and adds the orders a memory cap forces (:func:`memory_arcs`, per stage;
  :func:`memory_precedences`, per action).
  The event-driven constructions (list heuristic, zb-greedy) ask :meth:`Graph.input_time`, the
  same rule on per-stage end times.
* Memory: schedc.core.cost_model's rule, read once (``Problem.costs``): ``mem`` the change of held
  bytes per kind (an F holds its activation bytes from its start, an I moves them to the
  weight-gradient bytes, a W frees the rest, a B everything), ``over`` the bytes above them while
  an action runs (its allocation at start and its transient), ``room`` the cap minus what the
  rank holds all step; a rank never holds more than ``room``. :meth:`Graph.safe` and
  :meth:`Graph.relaxed` are the plain-accounting views the constructions and the bounds read
  when an I rises or an action has transient bytes.

Helpers more than one engine uses: orders <-> schedules in the graph's vocabulary
(:func:`orders_from_schedule`, :func:`canonical_orders`, :func:`schedule_from_orders`),
:func:`successors`, :func:`topological`, :func:`ancestors` (bitsets) and
:func:`count_free_pairs`, the size measure that picks the full integer program or windows.

A graph also carries ``memo``, a dictionary where engines keep what they built for this problem
and share (the hand-made schedules and greedies, schedc.solver.warm_start): pass the graph
around and nothing is built twice; nothing is cached per ``id(problem)``.

Cost: the stage level O(S + R); the action level O(A) time and memory for A = 3 x S x M actions
(lists of floats and ints: the engines walk them from Python, where lists index faster than
numpy arrays).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional, Sequence, Union

from schedc.core.ir import TORCH_KINDS, Action, Kind, Schedule
from schedc.core.simulate import producer_keys
from schedc.core.tolerances import REL
from schedc.solver.problem import Problem

# a stage's kinds when its backward is split, and when its W costs nothing (no parameters)
SPLIT = (Kind.F,) + tuple(k for k in TORCH_KINDS if k.info.backward == "split")
MERGED = (Kind.F,) + tuple(k for k in TORCH_KINDS if k.info.backward == "merged")


def _present(i: Optional[int]) -> int:
    """An id of a kind that the caller checked the stage runs (split stages run I and W, merged B)."""
    assert i is not None, "the stage runs this kind"
    return i


class _StageBackward:
    """producer_keys' ``backward_kind`` lookup, (stage, microbatch) -> "I" or "B", from one
    entry per stage."""

    __slots__ = ("backward",)

    def __init__(self, backward: list[str]):
        self.backward = backward

    def get(self, key: tuple[int, int], default: str = Kind.I) -> str:
        return self.backward[key[0]]


@dataclass(eq=False)
class Graph:
    """A problem lowered once (module docstring). Stage-level fields are plain lists; the
    action-level ones are computed on first access."""

    problem: Problem
    S: int
    M: int
    R: int
    stage_rank: list[int]  # placement: stage -> rank
    stages: list[list[int]]  # per rank, its stages ascending
    multi: bool  # some rank holds several stages
    d: dict[str, list[float]]  # kind -> per-stage duration (F, I, W, B)
    mem: dict[str, list[float]]  # kind -> per-stage memory delta
    act: list[float]  # per stage: activation bytes
    wg: list[float]  # per stage: weight-gradient bytes
    comm: list[float]  # comm[s]: lag across s -> s+1 (0 on one rank; comm[S-1] = 0)
    static: list[float]  # per rank: bytes held all step (static, buffers, reserve)
    caps: list[float]  # per rank: byte cap, everything included (inf: none)
    room: list[float]  # per rank: cap - static (inf: none)
    backward: list[str]  # per stage: "I" (split) or "B" (merged: W costs 0)
    base: list[int]  # per stage: id of F(s, 0)
    # kind -> per stage: bytes above the held bytes while the action runs (allocation + transient)
    over: dict[str, list[float]] = field(default_factory=dict)
    trans: dict[str, list[float]] = field(default_factory=dict)  # kind -> per stage: transient bytes
    new_terms: bool = False  # some I rises or some action has transient bytes
    memo: dict = field(default_factory=dict, repr=False)  # what engines built for this problem

    @classmethod
    def build(cls, problem: Problem) -> "Graph":
        S, M, R = problem.n_stages, problem.n_microbatches, problem.n_ranks
        stage_rank = list(problem.placement)
        stages: list[list[int]] = [[] for _ in range(R)]
        for s, r in enumerate(stage_rank):
            stages[r].append(s)
        costs = problem.costs
        d: dict[str, list[float]] = {k: [costs.duration(s, k) for s in range(S)] for k in TORCH_KINDS}
        mem: dict[str, list[float]] = {k: [costs.held(s, k) for s in range(S)] for k in TORCH_KINDS}
        over: dict[str, list[float]] = {k: [costs.over(s, k) for s in range(S)] for k in TORCH_KINDS}
        trans: dict[str, list[float]] = {k: [costs.transient(s, k) for s in range(S)] for k in TORCH_KINDS}
        backward: list[str] = [Kind.B if d[Kind.W][s] <= 0 else Kind.I for s in range(S)]
        base, n = [], 0
        for s in range(S):
            base.append(n)
            n += (len(MERGED) if backward[s] == Kind.B else len(SPLIT)) * M
        return cls(
            problem=problem, S=S, M=M, R=R, stage_rank=stage_rank, stages=stages,
            multi=any(len(x) > 1 for x in stages), d=d, mem=mem,
            act=[costs.activation(s) for s in range(S)], wg=[costs.weight_grad(s) for s in range(S)],
            comm=[problem.comm(s) for s in range(S - 1)] + [0.0],
            static=list(costs.fixed), caps=list(costs.caps),
            room=list(costs.room), backward=backward, base=base, over=over, trans=trans,
            new_terms=costs.new_terms,
        )

    def safe(self) -> "Graph":
        """A view whose plain accounting (F allocates ``act``, I frees ``act - wg``, W ``wg``,
        only F checked against ``room``) keeps the true peak, rises and transients included,
        under the cap: each F holds max(act, wg) until its I, and each rank's room leaves the
        largest rise-or-transient of its stages free. The constructive engines (list heuristic,
        zb-greedy, zb-rounds, periodic) build on it; their schedules are judged by the simulator.
        The graph itself when nothing rises and nothing is transient."""
        if not self.new_terms:
            return self
        if "safe" not in self.memo:
            act = [max(a, w) for a, w in zip(self.act, self.wg)]
            costs = self.problem.costs
            head = [max([costs.transient(s, k) for s in own for k in TORCH_KINDS]
                        + [self.over[Kind.I][s] for s in own], default=0.0) for own in self.stages]
            self.memo["safe"] = self._view(act, list(self.wg), [rm - h for rm, h in zip(self.room, head)])
        return self.memo["safe"]

    def safe_net(self) -> "Graph":
        """The safe view with less room kept free: its raised activations already count each
        microbatch's rise at I (act' = max(act, wg) from F on), so the room leaves free only what
        runs above them: an F's transient less its rise (the check counts act' for it), an I's or
        a B's rise and transient less the rise, a W's bytes above what it holds. The plain
        accounting still keeps the true peak under the cap: while an action of stage s runs, the
        view's held bytes are at least the true ones plus s's rise wherever the true peak adds
        that rise. On a stage whose I rises (a loss and head whose graph outgrows its saved
        activations) safe() keeps the rise twice, and may leave too little room for one
        microbatch where the simulator fits several. The graph itself when nothing rises and
        nothing is transient."""
        if not self.new_terms:
            return self
        if "safe_net" not in self.memo:
            act = [max(a, w) for a, w in zip(self.act, self.wg)]
            rise = [x - a for x, a in zip(act, self.act)]

            def above(s: int) -> float:
                over = self.over
                return max(0.0, over[Kind.F][s] - act[s], over[Kind.I][s] - rise[s], over[Kind.B][s] - rise[s],
                           *(over[k][s] for k in TORCH_KINDS if k not in (Kind.F, Kind.I, Kind.B)))
            head = [max((above(s) for s in own), default=0.0) for own in self.stages]
            self.memo["safe_net"] = self._view(act, list(self.wg), [rm - h for rm, h in zip(self.room, head)])
        return self.memo["safe_net"]

    def relaxed(self) -> "Graph":
        """A view for the lower bounds: the ZB accounting with weight_grad_bytes cut to
        activation_bytes and no transients, the true room. A microbatch holds no more under it
        than under the true rule at any moment, so every schedule that fits the true rule fits
        it: a bound of the view is a bound of the problem. The graph itself when nothing rises
        and nothing is transient."""
        if not self.new_terms:
            return self
        if "relaxed" not in self.memo:
            self.memo["relaxed"] = self._view(list(self.act), [min(a, w) for a, w in zip(self.act, self.wg)],
                                              list(self.room))
        return self.memo["relaxed"]

    def _view(self, act: list[float], wg: list[float], room: list[float]) -> "Graph":
        """This graph with the plain accounting of `act` and `wg` (no rise, no transient) and `room`."""
        mem: dict[str, list[float]] = {Kind.F: act, Kind.I: [-(a - w) for a, w in zip(act, wg)], Kind.W: [-w for w in wg], Kind.B: [-a for a in act]}
        zero = [0.0] * self.S
        return Graph(
            problem=self.problem, S=self.S, M=self.M, R=self.R, stage_rank=self.stage_rank, stages=self.stages,
            multi=self.multi, d=self.d, mem=mem, act=act, wg=wg, comm=self.comm,
            static=list(self.static), caps=self.caps, room=room,
            backward=self.backward, base=self.base, over={Kind.F: act, Kind.I: zero, Kind.W: zero, Kind.B: zero},
            trans={Kind.F: zero, Kind.I: zero, Kind.W: zero, Kind.B: zero})

    # ------------------------------------------------------------ stage level

    @property
    def dF(self) -> list[float]:
        return self.d[Kind.F]

    @property
    def dI(self) -> list[float]:
        return self.d[Kind.I]

    @property
    def dW(self) -> list[float]:
        return self.d[Kind.W]

    def kinds(self, s: int) -> tuple[str, ...]:
        return MERGED if self.backward[s] == Kind.B else SPLIT

    def busiest_work(self) -> float:
        """Seconds of work one microbatch brings the busiest rank: every kind of every stage it holds."""
        return max(sum(self.d[k][s] for s in self.stages[r] for k in self.kinds(s)) for r in range(self.R))

    def held(self, s: int) -> list[tuple[str, float]]:
        """(kind, bytes): a microbatch of stage s holds these bytes from its F's start until that
        kind ends (the I's or B's share, then the W's); kinds that free nothing are left out."""
        return [(k, -self.mem[k][s]) for k in self.kinds(s) if k != Kind.F and -self.mem[k][s] > 0]

    def input_time(self, kind: str, s: int, m: int, end_f, end_i) -> float:
        """When every input of (s, kind, m) is there, from the ends of the F's and of the I's (or
        B's) run so far, ``end_f[s][m]`` and ``end_i[s][m]``: the dependency rule at stage level,
        for the engines that build a schedule event by event (an end not known yet reads as inf,
        or the caller checks it first)."""
        if kind == Kind.F:
            return 0.0 if s == 0 else end_f[s - 1][m] + self.comm[s - 1]
        if kind == Kind.W:
            return end_i[s][m]
        if s == self.S - 1:
            return end_f[s][m]
        return max(end_f[s][m], end_i[s + 1][m] + self.comm[s])

    # ------------------------------------------------------------ action level

    @property
    def n(self) -> int:
        """Number of actions."""
        last = self.S - 1
        return self.base[last] + len(self.kinds(last)) * self.M

    def id(self, s: int, kind: str, m: int) -> Optional[int]:
        """The id of action (s, kind, m); None when stage s has no such kind."""
        kinds = self.kinds(s)
        if kind not in kinds:
            return None
        return self.base[s] + kinds.index(kind) * self.M + m

    def id_of(self, a: Action) -> int:
        i = self.id(a.stage, a.kind, a.microbatch)
        if i is None:
            raise KeyError(a)
        return i

    def blocks(self) -> list[tuple[int, str]]:
        """(stage, kind) of each block of M consecutive ids, in id order."""
        return [(s, k) for s in range(self.S) for k in self.kinds(s)]

    @cached_property
    def actions(self) -> list[Action]:
        mbs = range(self.M)
        return [Action(s, k, m) for s, k in self.blocks() for m in mbs]

    def _per_block(self, value) -> list:
        out: list = []
        for s, k in self.blocks():
            out += [value(s, k)] * self.M
        return out

    @cached_property
    def rank(self) -> list[int]:
        return self._per_block(lambda s, k: self.stage_rank[s])

    @cached_property
    def dur(self) -> list[float]:
        return self._per_block(lambda s, k: self.d[k][s])

    @cached_property
    def delta(self) -> list[float]:
        return self._per_block(lambda s, k: self.mem[k][s])

    @cached_property
    def extra(self) -> list[float]:
        """Per action: bytes above its rank's held bytes while it runs (its allocation at start
        plus its transient; schedc.core.cost_model.over)."""
        return self._per_block(lambda s, k: self.over[k][s])

    @cached_property
    def by_rank(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.R)]
        for i, r in enumerate(self.rank):
            out[r].append(i)
        return out

    @cached_property
    def first(self) -> list[int]:
        """Per rank: the action that is necessarily first (F of its lowest stage, microbatch 0)."""
        return [self.base[st[0]] for st in self.stages]

    @cached_property
    def preds(self) -> list[list[tuple[int, float]]]:
        """(producer, lag) per action: start >= end of producer + lag. The dependencies, kinds
        in microbatch order on each stage, and the orders the memory cap forces."""
        S, M, base, comm = self.S, self.M, self.base, self.comm
        bk = _StageBackward(self.backward)
        offset = {s: {k: base[s] + j * M for j, k in enumerate(self.kinds(s))} for s in range(S)}
        preds: list[list[tuple[int, float]]] = []
        for s, k in self.blocks():
            own = offset[s][k]
            for m in range(M):
                row = [(offset[ps][pk] + pm, comm[b] if b >= 0 else 0.0)
                       for (ps, pk, pm), b in producer_keys(s, k, m, S, bk)]
                if m > 0:  # kinds in microbatch order on a stage (exact symmetry breaking, see model)
                    row.append((own + m - 1, 0.0))
                preds.append(row)
        for f, p in memory_precedences(self):
            preds[f].append((p, 0.0))
        return preds

    @cached_property
    def topo(self) -> list[int]:
        return topological(self.n, self.preds)

    def lower(self) -> "Graph":
        """Build the action level now (engines that reason on actions call it once, where the
        deadline allows: schedc.solver.compile)."""
        for _ in (self.actions, self.rank, self.dur, self.delta, self.by_rank, self.preds, self.topo):
            pass
        return self

    def release(self) -> None:
        """Drop the action level (built again on next use); the stage level and ``memo`` stay.
        A compile's result keeps its graph for the baselines, not for 3 x S x M actions."""
        for name in _ACTION_LEVEL:
            self.__dict__.pop(name, None)
        for view in (self.memo.get("safe"), self.memo.get("relaxed")):
            if view is not None and view is not self:
                view.release()


_ACTION_LEVEL = ("actions", "rank", "dur", "delta", "extra", "by_rank", "first", "preds", "topo")


def graph_of(problem: Union[Problem, Graph]) -> Graph:
    """The graph of `problem` (built here; a Graph is returned as it is)."""
    return problem if isinstance(problem, Graph) else Graph.build(problem)


def memory_arcs(g: Graph) -> Optional[list[tuple[str, int, int, int]]]:
    """The orders a memory cap forces, per stage: arcs (kind, t, s, k) meaning that the action of
    `kind` ("B": the backward, I or B; "W"; "F") on stage t of microbatch j - k ends before F(s, j)
    starts, for every j >= k. None when some rank cannot hold one microbatch of its stages.

    Kinds run in microbatch order on every stage, and a microbatch open on a rank's stage s (F
    started, backward not ended) is also open on the rank's stages t < s: it passed them on the
    way in and returns to them on the way out (a V). So when F(s, j) starts, microbatch j holds
    A(s), the activations of the rank's stages up to s, and the other microbatches share
    C = room - A(s); one that still owes stage t its backward holds act(t), one that owes only
    W holds wg(t) <= act(t), one open on s holds A(s). Hence (floors with the REL tolerance):

    * the backward of (s, j - K) has ended, K = floor(room / A(s)) (open on s, j included);
    * W(t, j - L - 1) has ended, L = floor(C / wg(t)), for t <= s (each owes t its bytes);
    * for t < s, the backward of (t, j - N - 1) has ended, and F(t, j + N + 1) starts only after
      F(s, j) (microbatches after j that entered t are open there), N = floor(C / act(t)).

    With one stage per rank these are the two rules of a stage's own bytes; with two stages on a
    rank (V) they add what the shared room forces: where a rank's room holds one microbatch of
    its early stage beside its late stage's, W(early, j-1) precedes F(late, j), which raises
    the one-rank bound a lot (measured: docs/design.md, "The compiler").
    """
    arcs: list[tuple[str, int, int, int]] = []
    for r, own in enumerate(g.stages):
        if math.isinf(g.caps[r]):
            continue
        room = g.room[r]
        held = 0.0  # A(s)
        for s in own:
            held += g.act[s]
            if g.act[s] <= 0:
                continue
            left = max(room - held, 0.0)
            if room < held * (1 - REL):
                return None
            arcs.append((Kind.B, s, s, int(math.floor(room / held + REL))))
            for t in own:
                if t > s:
                    break
                # a microbatch that owes W(t) holds act(t) before its I, wg(t) after: at least the less
                held_w = min(g.wg[t], g.act[t])
                if g.backward[t] == Kind.I and held_w > 0:
                    arcs.append((Kind.W, t, s, int(math.floor(left / held_w + REL)) + 1))
                if t < s and g.act[t] > 0:
                    n = int(math.floor(left / g.act[t] + REL)) + 1
                    arcs.append((Kind.B, t, s, n))
                    arcs.append((Kind.F, s, t, n))  # F(s, j) before F(t, j + n)
    if any(k < 1 for *_, k in arcs):
        return None
    return arcs


def memory_precedences(g: Graph) -> list[tuple[int, int]]:
    """(F, producer) pairs of action ids: :func:`memory_arcs` for every microbatch."""
    arcs = memory_arcs(g)
    if arcs is None:
        raise ValueError("a rank cannot hold one microbatch of its stages under the memory cap")
    out = []
    for kind, t, s, k in arcs:
        src = _present(g.id(t, g.backward[t] if kind == Kind.B else kind, 0))
        for j in range(k, g.M):
            out.append((g.base[s] + j, src + j - k))
    return out


def successors(n: int, preds: Sequence[Sequence[tuple[int, float]]]) -> list[list[tuple[int, float]]]:
    """(consumer, lag) per action, from (producer, lag) per action."""
    succs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for b in range(n):
        for a, lag in preds[b]:
            succs[a].append((b, lag))
    return succs


def topological(n: int, preds: Sequence[Sequence[tuple[int, float]]]) -> list[int]:
    """Kahn's order of the actions (producers first); ValueError on a cycle."""
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for b in range(n):
        for a, _ in preds[b]:
            succs[a].append(b)
            indeg[b] += 1
    order = [i for i in range(n) if indeg[i] == 0]
    head = 0
    while head < len(order):
        a = order[head]
        head += 1
        for b in succs[a]:
            indeg[b] -= 1
            if indeg[b] == 0:
                order.append(b)
    if len(order) != n:
        raise ValueError("dependency graph has a cycle")
    return order


def ancestors(n: int, preds, topo: Sequence[int]) -> list[int]:
    """anc[b]: bitset of all actions that must run before b (quadratic memory: small graphs)."""
    anc = [0] * n
    for b in topo:
        bits = 0
        for a, _ in preds[b]:
            bits |= anc[a] | (1 << a)
        anc[b] = bits
    return anc


# ---------------------------------------------------------------- orders <-> schedules


def orders_from_schedule(g: Graph, schedule: Schedule) -> list[list[int]]:
    """The schedule's per-rank orders as action ids: a B on a split stage becomes I then W in
    its place; an I on a merged stage becomes B and its W is dropped."""
    orders = []
    for r in range(schedule.n_ranks):
        row = []
        for a in schedule.actions(r):
            s, m = a.stage, a.microbatch
            if g.backward[s] == Kind.I and a.kind == Kind.B:
                row += [_present(g.id(s, Kind.I, m)), _present(g.id(s, Kind.W, m))]
            elif g.backward[s] == Kind.B and a.kind in (Kind.I, Kind.W):
                if a.kind == Kind.I:
                    row.append(_present(g.id(s, Kind.B, m)))
            else:
                row.append(g.id_of(a))
        orders.append(row)
    return orders


def schedule_from_orders(g: Graph, orders: Sequence[Sequence[int]], name: str = "schedc") -> Schedule:
    actions = g.actions
    p = g.problem
    return Schedule(rows=[[actions[i] for i in row] for row in orders], placement=p.placement,
                    n_microbatches=p.n_microbatches, name=name)


def obeys_kind_order(g: Graph, orders: Sequence[Sequence[int]]) -> bool:
    """True when every stage runs each kind in microbatch order (the model's assumption)."""
    actions = g.actions
    for row in orders:
        last: dict[tuple[int, str], int] = {}
        for i in row:
            a = actions[i]
            key = (a.stage, a.kind)
            if last.get(key, -1) != a.microbatch - 1:
                return False
            last[key] = a.microbatch
    return True


def canonical_orders(g: Graph, orders: Sequence[Sequence[int]]) -> list[list[int]]:
    """Relabel microbatches so that each kind runs in microbatch order on each stage (the
    exchange argument in schedc.solver.engines.mip: never slower, same memory)."""
    actions = g.actions
    out = []
    for row in orders:
        count: dict[tuple[int, str], int] = {}
        new = []
        for i in row:
            a = actions[i]
            key = (a.stage, a.kind)
            m = count.get(key, 0)
            count[key] = m + 1
            new.append(i - a.microbatch + m)  # same stage and kind, the m-th microbatch
        out.append(new)
    return out


def count_free_pairs(g: Graph, limit: Optional[int] = None) -> int:
    """Pairs on a rank not ordered by dependencies + kind order (the full model's binaries, before
    time-window fixing): the size measure that picks full model vs windows. With `limit`, the
    count stops once it exceeds `limit` (the value returned is then only known to be larger).

    Each (stage, kind) is a chain m-1 -> m, so the ancestors of an action within any such group
    are a prefix of its microbatches: |anc(b) on rank r| is the sum over r's groups of a prefix
    length, propagated in topological order as one small vector per action (the same count as
    the transitive closure's bitsets, in memory linear in the actions, not quadratic)."""
    total = 0
    actions = g.actions
    mb = [a.microbatch for a in actions]
    for acts in g.by_rank:
        k = len(acts)
        if not k:
            continue
        group: dict[tuple[int, str], int] = {}
        for i in acts:
            group.setdefault((actions[i].stage, actions[i].kind), len(group))
        own = [group.get((a.stage, a.kind), -1) for a in actions]
        zero = (0,) * len(group)
        prefix: list = [zero] * g.n
        for b in g.topo:
            v = None
            for a, _ in g.preds[b]:
                pa = prefix[a]
                v = list(pa) if v is None else [x if x >= y else y for x, y in zip(v, pa)]
                gi = own[a]
                if gi >= 0 and v[gi] < mb[a] + 1:
                    v[gi] = mb[a] + 1
            prefix[b] = zero if v is None else tuple(v)
        ordered = sum(sum(prefix[b]) for b in acts)
        total += k * (k - 1) // 2 - ordered
        if limit is not None and total > limit:
            return total
    return total
