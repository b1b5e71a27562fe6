"""zb-rounds: the zero-bubble authors' own greedy (their ``auto_schedule``), under schedc's costs and memory.

Problem: as :mod:`schedc.solver.engines.zb_greedy`: order every F, I and W of a pipeline with one stage per
rank so that the step is short and no rank holds more than its memory cap.

Method: the construction the zero-bubble repository uses as its ILP's initial solution
(sail-sg/zero-bubble-pipeline-parallelism, ``megatron/core/pipeline_parallel/auto_schedule.py``,
``Graph.manual_order`` and ``initial_solution``), re-derived for per-stage costs, per-boundary
communication and schedc's memory deltas. Where :mod:`schedc.solver.engines.zb_greedy` is an event
simulation that decides rank by rank as time passes, this one proceeds in rounds, one per
microbatch, and decides for all stages at once:

* Round 0: F(0) on every stage; then, from the last stage up, how many more F's stage j can run
  before the I of microbatch 0 arrives from stage j+1 (memory permitting). With
  ``allow_bubble_before_first_b`` an F that would end after that arrival is not run (the rank
  idles instead); without it F's run until the arrival is reached. The counts are then made
  strictly decreasing along the pipeline (1F1B's shape), the F's are placed, and I(0) runs from
  the last stage to the first.
* Round i > 0: each stage that still has F's runs one more, unless (``prioritize_b``) it is two or
  more F's ahead of the next stage and its F would delay the I coming back from there by more
  than the idle time it can still afford (every rank's accumulated idle time is kept; a rank may
  idle up to the most idle rank's total). A stage that skips its F makes every earlier stage skip
  too. Then I(i) runs from the last stage to the first.
* W's are placed only in front of an F or an I: as many as finish before that action's input
  arrives, those the memory cap forces out first, and one more that overruns the arrival when
  waiting would make this rank the idlest (always with ``no_bubble_greedy``, never without it
  when it would not). The rest run at the end.

All eight flag combinations are built; :func:`paper_greedy` keeps the best under the problem's
objective by exact re-simulation (schedc.simulate) that fits the memory caps. A combination whose
memory rule cannot place an F or I (the cap leaves no W to free) is dropped, as the original
raises there.

How it compares with :mod:`schedc.solver.engines.zb_greedy` and the combinatorial lower bound
(tests/test_paper_greedy.py pins one case; benchmarks/compile_quality.py --paper): measured in
docs/design.md, "Warm-start families".

Cost: O(S x M) per construction (the idlest rank's idle time is a running maximum), 8
constructions; memory O(S x M).
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Iterator, Optional, Union

from schedc.core.cost_model import fits_room
from schedc.core.ir import Action, Kind, Schedule
from schedc.core.simulate import SimResult, simulate
from schedc.core.tolerances import REL
from schedc.errors import SchedcError
from schedc.solver.deadline import Deadline
from schedc.solver.engine import Incumbent, Result, found
from schedc.solver.engines.zb_greedy import Flags, supports, to_schedule
from schedc.solver.graph import Graph, graph_of
from schedc.solver.problem import Problem

NAME = "zb-rounds"
EPS = REL

ALL_FLAGS = tuple(Flags(*bits) for bits in itertools.product((True, False), repeat=3))


class _Stuck(Exception):
    """The memory cap leaves no W to free before an F or I (this flag combination fails)."""


class _Rounds:
    def __init__(self, g: Graph, flags: Flags, expired: Callable[[], bool]):
        S, M = g.S, g.M
        self.S, self.M, self.flags, self.expired = S, M, flags, expired
        self.d, self.mem, self.comm = g.d, g.mem, g.comm
        self.room = [g.room[r] for r in g.stage_rank]
        self.n = {k: [0] * S for k in "FIW"}
        self.end_f = [[math.nan] * M for _ in range(S)]
        self.end_i = [[math.nan] * M for _ in range(S)]
        self.free_at = [0.0] * S
        self.held = [0.0] * S
        self.idle = [0.0] * S
        self.max_idle = 0.0
        self.rows: list[list[Action]] = [[] for _ in range(S)]

    def fits(self, s: int, kind: str, extra: float = 0.0) -> bool:
        room = self.room[s]
        return fits_room(self.held[s] + extra + self.mem[kind][s], room)

    def put(self, s: int, kind: str) -> None:
        m = self.n[kind][s]
        if not self.fits(s, kind):
            raise _Stuck
        start = self.free_at[s]
        if kind == Kind.F and s > 0:
            start = max(start, self.end_f[s - 1][m] + self.comm[s - 1])
        elif kind == Kind.I and s + 1 < self.S:
            start = max(start, self.end_i[s + 1][m] + self.comm[s])
        if math.isnan(start):
            raise _Stuck  # an input not produced yet: this combination's order cannot run
        if self.n[Kind.F][s] > 0:
            self.idle[s] += start - self.free_at[s]
            self.max_idle = max(self.max_idle, self.idle[s])
        end = start + self.d[kind][s]
        if kind == Kind.F:
            self.end_f[s][m] = end
        elif kind == Kind.I:
            self.end_i[s][m] = end
        self.free_at[s] = end
        self.held[s] += self.mem[kind][s]
        self.n[kind][s] += 1
        self.rows[s].append(Action(s, kind, m))

    def owes_w(self, s: int) -> bool:
        return self.n[Kind.W][s] < self.n[Kind.I][s]

    def fill_before(self, s: int, kind: str, arrival: Optional[float]) -> None:
        """W's in front of stage s's next `kind`: those memory forces, those that end before its
        input arrives, and one that overruns the arrival when the rank can afford the idle time
        only under ``no_bubble_greedy`` (or cannot afford it at all)."""
        while not self.fits(s, kind):
            if not self.owes_w(s):
                raise _Stuck
            self.put(s, Kind.W)
        if arrival is None:
            return
        while self.owes_w(s) and self.free_at[s] + self.d[Kind.W][s] <= arrival + EPS:
            self.put(s, Kind.W)
        if self.owes_w(s) and self.free_at[s] < arrival - EPS:
            affordable = arrival - self.free_at[s] <= self.max_idle - self.idle[s] + EPS
            if self.flags.no_bubble_greedy or not affordable:
                self.put(s, Kind.W)

    def warmup_counts(self) -> list[int]:
        """Round 0: extra F's per stage before the first I (see the module docstring)."""
        S, d, comm = self.S, self.d, self.comm
        extra = [0] * S
        last = self.end_f[S - 1][0] + d[Kind.I][S - 1]
        for j in range(S - 2, -1, -1):
            held, t = self.held[j], self.free_at[j]
            arrival = last + comm[j]
            while self.n[Kind.F][j] + extra[j] < self.M and \
                    fits_room(held + self.mem[Kind.F][j], self.room[j]):
                if self.flags.allow_bubble_before_first_b:
                    if t + d[Kind.F][j] > arrival + EPS:
                        break
                elif t >= arrival - EPS:
                    break
                held += self.mem[Kind.F][j]
                t += d[Kind.F][j]
                extra[j] += 1
            last = max(t, arrival) + d[Kind.I][j]
        for j in range(1, S):  # strictly fewer than the stage before (1F1B's shape)
            while extra[j] > 0 and extra[j] >= extra[j - 1] and self.n[Kind.F][j] + extra[j] < self.M:
                extra[j] -= 1
        return extra

    def wants_f(self, j: int) -> bool:
        """Round i > 0: whether stage j runs one more F this round."""
        if self.n[Kind.F][j] >= self.M:
            return False
        if not (self.flags.prioritize_b and j + 1 < self.S and self.n[Kind.F][j] >= self.n[Kind.F][j + 1] + 2):
            return True
        d, nxt = self.d, j + 1
        back = self.free_at[nxt] + d[Kind.F][nxt] + d[Kind.I][nxt] + self.comm[j]  # when the next I could come back
        if self.free_at[j] >= back:
            return False
        w_cost, owed, freed = 0.0, self.n[Kind.I][j] - self.n[Kind.W][j], 0.0
        k = 0
        while not self.fits(j, Kind.F, freed) and k < owed:  # W's the F would need first
            w_cost += d[Kind.W][j]
            freed += self.mem[Kind.W][j]
            k += 1
        if self.free_at[j] + d[Kind.F][j] + w_cost <= back + EPS:
            return True
        return not back - self.free_at[j] <= self.max_idle - self.idle[j] + EPS

    def run(self) -> Optional[list[list[Action]]]:
        S, M = self.S, self.M
        try:
            for i in range(M):
                if self.expired():
                    return None
                if i == 0:
                    for j in range(S):
                        self.put(j, Kind.F)
                    extra = self.warmup_counts()
                    for j in range(S):
                        for _ in range(extra[j]):
                            self.put(j, Kind.F)
                else:
                    want = [self.wants_f(j) for j in range(S)]
                    for j in range(S - 2, -1, -1):
                        want[j] = want[j] and want[j + 1]
                    for j in range(S):
                        if want[j]:
                            self.fill_before(j, Kind.F, None if j == 0 else
                                             self.end_f[j - 1][self.n[Kind.F][j]] + self.comm[j - 1])
                            self.put(j, Kind.F)
                for j in range(S - 1, -1, -1):
                    self.fill_before(j, Kind.I, None if j == S - 1 else self.end_i[j + 1][i] + self.comm[j])
                    if j == 0 and self.n[Kind.F][0] == M:
                        while self.owes_w(0):
                            self.put(0, Kind.W)
                    self.put(j, Kind.I)
            for j in range(S):
                while self.n[Kind.W][j] < M:
                    self.put(j, Kind.W)
        except _Stuck:
            return None
        return self.rows


def rounds_family(problem: Union[Problem, Graph], expired: Callable[[], bool] = lambda: False) \
        -> list[tuple[Flags, Schedule, SimResult]]:
    """Each flag combination that completes (before `expired()` turns true), simulated under the
    problem's costs, runtime and caps."""
    return list(_family(graph_of(problem), expired))


def _family(g: Graph, expired: Callable[[], bool]) -> Iterator[tuple[Flags, Schedule, SimResult]]:
    problem = g.problem
    g = g.safe()  # rounds check each action against the room: rises and transients kept free
    for flags in ALL_FLAGS:
        if expired():
            break
        per_stage = _Rounds(g, flags, expired).run()
        if expired():
            return
        if per_stage is None:
            continue
        rows: list[list[Action]] = [[] for _ in range(problem.n_ranks)]
        for s, row in enumerate(per_stage):
            rows[problem.placement[s]] = row
        sched = to_schedule(problem, rows, flags, NAME)
        try:
            sim = simulate(sched, problem.profile, problem.memory)
        except SchedcError:  # a construction that left an action out (seen on uneven stages at 1.5p)
            continue
        yield flags, sched, sim


def paper_greedy(problem: Union[Problem, Graph], objective: Optional[str] = None,
                 expired: Callable[[], bool] = lambda: False) -> Optional[tuple[Schedule, SimResult]]:
    """The best completed member of the family under `objective` (default the problem's) that
    fits the memory caps; None when the problem is not one stage per rank or none fits."""
    g = graph_of(problem)
    if not supports(g):
        return None
    obj = objective or g.problem.objective
    best = None
    for _, sched, sim in _family(g, expired):
        if sim.fits and (best is None or sim.objective(obj) < best[1].objective(obj)):
            best = (sched, sim)
    return best


class ZbRounds:
    """zb-rounds as an engine (schedc.solver.engine): its best fitting member, or none."""

    name = NAME

    def run(self, graph: Graph, incumbent: Optional[Incumbent], deadline: Deadline) -> Result:
        best = paper_greedy(graph, expired=deadline.expired)
        return found(*best) if best is not None else Result()
