"""The engine protocol: what every search of schedc.solver takes and returns.

Problem: the compiler runs several engines one after another -- the list heuristic, the two
zero-bubble greedies, CP-SAT, the integer program, the window search -- each handing its best to
the next, under one deadline. With a signature of its own for each, the driver would have to know
every engine's calling convention.

Method: an engine is an object with a ``name`` and ``run(graph, incumbent, deadline)``:

* ``graph``: the problem lowered once (schedc.solver.graph.Graph), shared by every engine;
* ``incumbent``: the best schedule so far and its simulation (:class:`Incumbent`; its action
  orders in the graph's ids when an engine works on those), or None;
* ``deadline``: a schedc.solver.deadline.Deadline; an engine returns by then (Ctrl-C included);

and it returns a :class:`Result`: a schedule and its simulation (or None), the orders behind it
in the graph's ids (engines that reason on actions), a lower bound valid for every schedule (or
None) with where it comes from, and a status: ``optimal`` (the engine proved its answer),
``feasible`` (an answer), ``none``. The driver (schedc.solver.compile) runs them as rows of its
phase tables (START, PHASES) and keeps what they return by one rule (``_Compilation.take``, as
the row's adoption policy says); only simulated values count.

Engines, one module each under schedc.solver.engines: ``warm.WarmStart``,
``heuristic.ListHeuristic``, ``zb_greedy.ZbGreedy``, ``zb_rounds.ZbRounds``,
``periodic.PeriodicEngine``, ``cpsat.CpsatEngine``, ``mip.MipEngine``, ``windows.WindowSearch``.

Cost: nothing of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

from schedc.choices import Status
from schedc.core.ir import Schedule
from schedc.core.simulate import SimResult, simulate
from schedc.core.tolerances import PROVEN
from schedc.errors import SchedcError
from schedc.solver.deadline import Deadline
from schedc.solver.graph import Graph, schedule_from_orders
from schedc.solver.problem import Problem

STATUSES = (Status.OPTIMAL, Status.FEASIBLE, Status.NONE)  # what an engine's Result may say


@dataclass
class Incumbent:
    """The schedule to beat: its simulation, where it came from, and (when known) its per-rank
    orders in the graph's action ids, kinds in microbatch order."""

    schedule: Schedule
    sim: SimResult
    source: str = ""
    orders: Optional[list[list[int]]] = None

    def value(self, objective: str) -> float:
        return self.sim.objective(objective)


@dataclass
class Result:
    """What an engine returns (module docstring)."""

    schedule: Optional[Schedule] = None
    sim: Optional[SimResult] = None
    orders: Optional[list[list[int]]] = None  # per rank, graph action ids (engines on actions)
    bound: Optional[float] = None  # a lower bound on the objective of every schedule
    bound_source: str = ""
    status: Status = Status.NONE  # OPTIMAL | FEASIBLE | NONE
    proven: bool = False  # the engine's own model was solved to optimality
    source: str = ""  # which of its families found the answer, where an engine has several (the warm start)

    @property
    def answered(self) -> bool:
        return self.status != Status.NONE


class Engine(Protocol):
    name: str

    def run(self, graph: Graph, incumbent: Optional[Incumbent], deadline: Deadline) -> Result:
        ...


def close(a: float, b: float) -> bool:
    """`a` is no more than `b` up to the solvers' tolerance (MIP gaps, float sums): a value this
    close to a lower bound is proven."""
    return a <= b * (1 + PROVEN) + PROVEN


def found(schedule: Optional[Schedule], sim: Optional[SimResult]) -> Result:
    """The Result of a constructive engine: its schedule, or none."""
    if schedule is None or sim is None:
        return Result()
    return Result(schedule=schedule, sim=sim, status=Status.FEASIBLE)


def materialize(g: Graph, orders: Sequence[Sequence[int]], problem: Optional[Problem] = None) \
        -> tuple[Schedule, Optional[SimResult]]:
    """Orders (graph ids) as a schedule and its simulation under `problem`'s costs and caps (the
    graph's problem by default); the simulation is None when the orders deadlock."""
    problem = problem or g.problem
    sched = schedule_from_orders(g, orders)
    try:
        sim = simulate(sched, problem.profile, problem.memory)
    except SchedcError:
        return sched, None
    return sched, sim
