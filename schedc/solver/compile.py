"""The compiler driver: the rows of two phase tables, from the bound and the warm start to a certified result.

Problem: return the schedule with the smallest simulated step time (``problem.objective``) that
fits the memory caps, within a time limit, together with a certificate: a lower bound valid for
every schedule under the same rules, the gap to it, and a status that says ``optimal`` only
when the bound proves it.

Method: the problem is lowered once into its graph (schedc.solver.graph), which every phase
reads. Every phase of a compile is a row (a :class:`Phase`) of ``START`` (steps 1-4) or
``PHASES`` (steps 5-9): how it runs (for an engine, schedc.solver.engine's
``run(graph, incumbent, deadline)`` -> schedule, bound, status), its share of the time, when it
runs, whether its bound certifies, and how its answer is adopted (``FIRST``, ``RELABELLED``,
``IN_ORDER``, ``NO_WORSE``, or ``NONE`` for a bound alone). One loop (``_Compilation.run``) runs
both tables, and one rule (``_Compilation.ready``) says whether a row runs: its predicate holds,
it reads nothing not yet built (the action graph of step 4), the best so far is not yet proven
(a bound that meets the best ends the compile: a warm start the bound meets is returned without
building the action graph), and its time gate passes. Every answer enters through
``_Compilation.take`` and every bound through ``_Compilation.raise_bound``. The ``solver=``
values are the rows of ``SOLVERS``. A new engine is its module and a row of PHASES
(:func:`engine_phase` builds the row of an engine that needs nothing of its own, as periodic's
is; CP-SAT, the integer program and windows have rows of their own for their extra steps) and,
for a new ``solver=`` value, a row of SOLVERS (and its name in schedc.choices.Solver, which type
checkers read).

Before the tables, the inputs are checked: the size and the time limit (schedc.solver.deadline),
the solver, and a cap that cannot hold one microbatch per stage fails with the smallest limit
that works (schedc.solver.engines.heuristic.check_memory_feasible).

START:
1. Lower bound: schedc.solver.bounds.chains.lower_bound, with its terms in the report's details.
2. Warm start: the best of the heuristic, the zero-bubble authors' round greedy (zb-rounds,
   schedc.solver.engines.zb_rounds), zb-greedy and the hand-made schedules that fit
   (schedc.solver.engines.warm.WarmStart), with a tenth of the time limit (at most a second) for
   its list heuristic and polish; or the ``warm`` given to :func:`compile_problem`. The best so
   far from here on.
3. One-rank relaxation (schedc.solver.bounds.rank, makespan): raises the combinatorial bound,
   where the deadline allows RELAXATION_PASSES. It reads only the stage level, so a warm start it
   proves needs no action graph.
4. Action graph: built where the deadline allows GRAPH_PASSES, with the model's incumbent, the
   warm start relabelled so each kind runs in microbatch order (never slower for makespan; for
   span an earlier first start can lengthen a rank's span, so the warm start itself stays the
   answer to beat). Without it no row of PHASES runs: the warm start is the answer.
PHASES:
5. Periodic (schedc.solver.engines.periodic, when OR-Tools is installed and the cap leaves some
   rank room for fewer than two microbatches of each of its stages): one microbatch's timetable
   repeated every P, 25% of the time (at least 3 s where the time allows). Under such a cap the
   steady state decides the step (benchmarks/periodic.py; docs/design.md).
6. Tight-cap relaxations (under the same cap): two bounds for 15% of the time left, the anchored
   relaxation (schedc.solver.bounds.anchored), every rank's memory at once with each
   microbatch's windows pinned to its last-stage forward, then the block relaxation
   (schedc.solver.bounds.blocks), the whole problem on blocks of 4, 6 and 8 microbatches while
   the time lasts (docs/design.md has what each gives).
7. CP-SAT (schedc.solver.engines.cpsat, when OR-Tools is installed): polishing for 40% of the
   time, hinted with the best so far; its bound is a certificate too. On slow links it finds orders
   that the integer program misses (benchmarks/compile_quality.py, group e); it stops early when
   it proves its answer, and, on instances too large for step 8, after a quarter of its time
   without a better solution.
8. Integer program (schedc.solver.engines.mip): instances whose free order pairs stay under
   ``mip.FULL_MODEL_PAIRS`` get the full model for 70% of the time left (its dual bound is a
   certificate: for makespan the model is exact; for span the driver solves the late-start
   model, where each rank's start is a variable, a relaxation of every schedule).
9. Windows: what is still unproven gets a rolling-horizon window search over the incumbent's
   timeline (schedc.solver.engines.windows): CP-SAT windows (cpsat.solve_window) when OR-Tools is
   installed, else windows of the integer program, until time runs out or no window size finds
   anything. For span, half of that time goes to makespan windows first, as in step 7. A CP-SAT
   window stops after WINDOW_STALE_SECONDS without a new solution; once windows have improved,
   the search stays on the part of the timeline where they did until it is exhausted there.
   CP-SAT's windows come closer to the bound than the integer program's
   (benchmarks/compile_quality.py, group e; CP-SAT's two workers make runs differ).

Result: every candidate is re-simulated; only simulated numbers are reported, and the result is
never worse than the warm start nor over the memory caps.

``solver="highs"`` / ``"cbc"`` runs steps 8 and 9 with that MIP solver and no CP-SAT;
``solver="cpsat"`` runs step 7 with all the time (then CP-SAT windows, if it stops early).

Status: ``optimal`` when the simulated objective equals the certified bound; otherwise
``feasible`` when a solver returned a solution (full model, CP-SAT or a window), else
``heuristic`` (the warm start, with no solver answer).

Deadline: every phase shares one deadline (schedc.solver.deadline): the warm start's families
are abandoned when it passes (the hand-made schedules come first, and are built past it until one
fits), the action graph, CP-SAT's model and each window are skipped when the time left is below
their estimated cost, and a reserve for the report and the CSV grows with the actions. Sizes
above deadline.MAX_ACTIONS are refused before anything is built, and so is a time limit shorter
than the least a compile of that size does here (deadline.check_time_limit).

Budget: ``budget="work"`` runs every phase above on schedc.solver.deadline's work clock (CP-SAT's
deterministic time on one worker, node and check limits for the integer program, counted
heuristic passes), so the same inputs give the same result on any machine; the report's
``budget`` says which clock ran, and a wall-clock cap stays as a safety net.

Cost: the time limit; memory linear in the actions (the full model's pair count does not build
the transitive closure; the integer program's windows, which do, stop at MIP_WINDOW_MAX_ACTIONS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Optional, Sequence, Union, get_args

from schedc._version import __version__
from schedc.choices import Budget, Solver, Status
from schedc.core.costs import DEFAULT_RUNTIME, MemoryLimit, Profile
from schedc.core.diagnose import limiter, same_hand_made
from schedc.core.ir import Schedule
from schedc.core.simulate import SimResult
from schedc.core.tolerances import PROVEN, TIE
from schedc.errors import ParameterError, SchedcError
from schedc.solver import interrupt
from schedc.solver.deadline import (
    BUDGETS,
    Deadline,
    check_size,
    check_time_limit,
    counting_work,
    n_actions,
    now,
    seconds_per_action,
    work_clock,
)
from schedc.solver.engine import Engine, Incumbent, Result, close, materialize
from schedc.solver.engines import heuristic, periodic
from schedc.solver.engines import mip as integer_program
from schedc.solver.engines.warm import WarmStart, matching_baselines
from schedc.solver.engines.windows import WindowSearch
from schedc.solver.graph import Graph, canonical_orders, count_free_pairs, graph_of, orders_from_schedule
from schedc.solver.problem import Problem

_TOL = PROVEN  # relative: values this close count as equal (MIP gaps, float sums)
# of the time limit, for the warm start's list heuristic and polish, at most WARM_MAX_SECONDS: the
# engines get the rest
WARM_SHARE, WARM_MAX_SECONDS = 0.1, 1.0
FULL_MODEL_SHARE = 0.7  # of the time left, for the full model when it is small enough
CPSAT_SHARE = 0.4  # of the time, for CP-SAT polishing first (the rest: the integer program)
# of the time, for periodic schedules where the memory cap is tight; at least PERIODIC_MIN_SECONDS
# where the time allows: the search over periods needs seconds for its first timetable
# (measured: docs/design.md, "Periodic schedules")
PERIODIC_SHARE, PERIODIC_MIN_SECONDS = 0.25, 3.0
# of the time, for the anchored and the block relaxations' bounds under the same cap, half each
# (each keeps CP-SAT's proven bound when time runs out)
TIGHT_BOUND_SHARE = 0.15
CPSAT_STALE_SHARE, CPSAT_STALE_MIN = 0.25, 5.0  # on large instances: stop CP-SAT after this long without news
# passes over the action graph (deadline.SECONDS_PER_ACTION each) that one phase costs
# (benchmarks/where_time_goes.py measures them): a phase that cannot finish before the deadline is
# skipped rather than started
GRAPH_PASSES = 4  # the action graph and the incumbent's re-simulation
CPSAT_PASSES = 25  # building the whole CP-SAT model
RELAXATION_PASSES = 3  # heads, tails and the one-rank preemptive schedules (schedc.solver.bounds.rank)


@dataclass
class CompileResult:
    schedule: Schedule
    sim: SimResult
    problem: Problem
    status: Status  # OPTIMAL | FEASIBLE | HEURISTIC (a str enum: reports write "optimal", ...)
    lower_bound: float
    gap: float  # (value - lower_bound) / value
    solve_time: float
    baselines: dict[str, dict] = field(default_factory=dict)
    warm_start_source: str = ""
    interrupted: bool = False  # Ctrl-C ended the search early (schedc.solver.interrupt)
    budget: Budget = "time"  # what time_limit counted: wall-clock seconds or work units (compile_problem)
    report: dict = field(default_factory=dict)
    # the problem's graph (schedc.solver.graph), with the baselines built during the compile
    graph: Optional[Graph] = field(default=None, repr=False, compare=False)

    @property
    def value(self) -> float:
        return self.sim.objective(self.problem.objective)


def compile_schedule(
    n_stages: int,
    n_microbatches: int,
    n_ranks: Optional[int] = None,
    placement: Union[str, Sequence[int]] = "loop",
    profile: Optional[Profile] = None,
    memory: Union[str, MemoryLimit] = "1p",
    objective: str = "makespan",
    time_limit: float = 60.0,
    solver: Optional[str] = None,
    progress: Optional[Callable[[dict], None]] = None,
    seed: int = 0,
    runtime: str = DEFAULT_RUNTIME,
    budget: str = "time",
) -> CompileResult:
    """Compile the fastest schedule under the memory limit (see the module docstring), timed as
    `runtime` executes it (torch's runtime by default); `budget` as in :func:`compile_problem`.
    With offload to host memory allowed: schedc.solver.offload.compile_schedule_offloading."""
    problem = Problem.build(n_stages, n_microbatches, n_ranks=n_ranks, placement=placement, profile=profile,
                            memory=memory, objective=objective, runtime=runtime)
    return compile_problem(problem, time_limit=time_limit, solver=solver, progress=progress, seed=seed, budget=budget)


def all_baselines(problem: Union[Problem, Graph], deadline: Optional[Deadline] = None) -> dict[str, dict]:
    """Every hand-made schedule that exists for this problem, simulated under its costs:
    name -> {makespan, span, peak_memory, fits} (under a `deadline`, those built before it;
    pass the compile's Graph to reuse what its warm start built)."""
    return {
        name: {"makespan": sim.makespan, "span": sim.span, "peak_memory": list(sim.peak_memory), "fits": bool(sim.fits)}
        for name, _, sim in matching_baselines(problem, deadline)
    }


def compile_problem(
    problem: Union[Problem, Graph],
    time_limit: float = 60.0,
    solver: Optional[str] = None,
    progress: Optional[Callable[[dict], None]] = None,
    seed: int = 0,
    warm: Optional[tuple[Schedule, SimResult, str]] = None,
    budget: str = "time",
) -> CompileResult:
    """Compile `problem`; `warm` overrides the warm start (schedule, simulation, source name).
    `solver`: None = the integer program (HiGHS, else CBC) plus CP-SAT polishing when OR-Tools
    is installed; "highs" / "cbc" = that MIP solver alone; "cpsat" = CP-SAT alone. A Graph
    (schedc.solver.graph) for `problem` reuses the baselines already built on it.

    `budget`: "time" (default) counts `time_limit` in wall-clock seconds; "work" counts it in
    work units (schedc.solver.deadline: CP-SAT's deterministic time, node limits, counted
    constructions; about a second each on an idle machine) so that the same inputs give the
    same schedule, value and bound on any machine, with a wall-clock safety net of
    deadline.WORK_WALL_FACTOR x `time_limit` (+ deadline.WORK_WALL_MARGIN s)."""
    if budget not in BUDGETS:
        raise SchedcError(f"budget must be one of {', '.join(BUDGETS)}; got {budget!r}")
    if budget == "work":
        with counting_work(time_limit):
            return _compile(problem, time_limit, solver, progress, seed, warm)
    return _compile(problem, time_limit, solver, progress, seed, warm)


def _compile(problem, time_limit, solver, progress, seed, warm) -> CompileResult:
    t0 = now()
    graph = graph_of(problem)
    problem = graph.problem
    if not time_limit or time_limit <= 0:
        raise ParameterError("time_limit", f"{{param}} must be > 0 seconds, got {time_limit}")
    check_size(problem.n_stages, problem.n_microbatches)
    n = n_actions(problem.n_stages, problem.n_microbatches)
    check_time_limit(n, time_limit)
    # keep a reserve for the report (and a window's overrun), and for writing the CSV, which
    # grows with the actions (about a quarter of a pass over them)
    deadline = t0 + time_limit - min(0.05 * time_limit, 5.0) - 0.25 * n * seconds_per_action()
    mip, use_cpsat = _engines(solver)
    heuristic.check_memory_feasible(problem)
    c = _Compilation(graph, mip, use_cpsat, seed, t0, deadline, time_limit, progress, given_warm=warm)
    c.run(START)
    c.emit("warm start (" + c.warm_source + ")", c.best_val, c.bound)  # the report's first line
    c.run(PHASES)
    return c.result()


@dataclass(frozen=True)
class SolverChoice:
    """What one ``solver=`` value runs: the integer program (with the MIP solver of that name, or
    HiGHS else CBC for ``auto``) and CP-SAT (always, never, or when OR-Tools is installed)."""

    mip: bool
    cpsat: Optional[bool]  # None: when installed


# the solver= values (choices.Solver, the CLI's --solver): a new engine family is a row here and a
# row of PHASES below
SOLVERS: dict[str, SolverChoice] = {
    "auto": SolverChoice(mip=True, cpsat=None),
    "highs": SolverChoice(mip=True, cpsat=False),
    "cbc": SolverChoice(mip=True, cpsat=False),
    "cpsat": SolverChoice(mip=False, cpsat=True),
}
if tuple(SOLVERS) != get_args(Solver):  # the Literal is what type checkers see of this table
    raise ImportError(f"schedc.choices.Solver {get_args(Solver)} must list SOLVERS {tuple(SOLVERS)}")


def _engines(solver: Optional[str]) -> tuple[Optional[str], bool]:
    """(MIP solver name or None, whether CP-SAT runs) for the `solver` argument (None: auto)."""
    name = "auto" if solver is None else solver
    choice = SOLVERS.get(name)
    if choice is None:
        integer_program.available_solver(solver)  # its one-line error for a name that is not a MIP solver
        raise SchedcError(f"solver must be one of {', '.join(SOLVERS)}; got {solver!r}")
    if choice.cpsat is True:
        from schedc.solver.engines.cpsat import import_cp_model

        import_cp_model()  # a one-line error when OR-Tools is missing or broken
    mip = integer_program.available_solver(None if name == "auto" else name) if choice.mip else None
    if choice.cpsat is not None:
        return mip, choice.cpsat
    from schedc.solver.engines.cpsat import cpsat_available

    return mip, cpsat_available()


# how a row's answer is adopted (_Compilation.take)
FIRST = "first"  # the compile's first answer (the warm start): the best so far, no solver's answer
RELABELLED = "relabelled"  # the best so far in microbatch order: the model's incumbent
IN_ORDER = "in order"  # an engine that starts from the best: its orders in microbatch order, when strictly faster
NO_WORSE = "no worse"  # an engine that searches from the incumbent's orders: its own, when no slower
NONE = "none"  # a bound alone: no answer to adopt
COMBINATORIAL = "combinatorial"  # the source of the bounds of steps 1 and 3


@dataclass
class _Compilation:
    """One compile run, the state its rows share: the best schedule so far, the model's
    incumbent, the certified bound, the report's log."""

    graph: Graph
    mip: Optional[str]  # highs | cbc, None when CP-SAT runs alone
    use_cpsat: bool
    seed: int
    t0: float
    deadline: float
    time_limit: float
    progress: Optional[Callable[[dict], None]] = None
    given_warm: Optional[tuple[Schedule, SimResult, str]] = None  # compile_problem's `warm` (step 2)
    inst: Optional[Graph] = None  # the action graph once step 4 built it; None: no engine runs
    warm_source: str = ""
    best_sched: Optional[Schedule] = None
    best_sim: Optional[SimResult] = None
    inc_orders: Optional[list[list[int]]] = None  # the model's incumbent: in-order, re-simulated
    inc_sched: Optional[Schedule] = None
    inc_sim: Optional[SimResult] = None
    lb: float = 0.0  # the combinatorial bound (steps 1 and 3), which the integer program and windows get
    lb_details: dict = field(default_factory=dict)
    bound: float = 0.0  # the best certified bound
    bound_source: str = COMBINATORIAL
    solver_answered: bool = False
    log: list[dict] = field(default_factory=list)

    @property
    def problem(self) -> Problem:
        return self.graph.problem

    @property
    def n(self) -> int:
        return n_actions(self.problem.n_stages, self.problem.n_microbatches)

    @property
    def action_graph(self) -> Graph:
        """The action graph (``inst``): rows that read it are ``on_graph``, which :meth:`ready`
        runs only once step 4 has built it."""
        assert self.inst is not None, "the action graph is read before step 4 built it"
        return self.inst

    @property
    def best_val(self) -> float:
        return math.inf if self.best_sim is None else self.best_sim.objective(self.problem.objective)

    @cached_property
    def too_large_for_full_model(self) -> bool:
        """More free order pairs than the full integer program takes: windows instead (step 8)."""
        return count_free_pairs(self.action_graph, limit=integer_program.FULL_MODEL_PAIRS) > \
            integer_program.FULL_MODEL_PAIRS

    @cached_property
    def tight(self) -> bool:
        """The gate of steps 5 and 6: CP-SAT runs and the cap leaves some rank room for under two
        microbatches (periodic.worth_trying), read once."""
        return self.use_cpsat and periodic.worth_trying(self.graph)

    @property
    def engines(self) -> str:
        return "+".join(name for name in (self.mip, "cpsat" if self.use_cpsat else None) if name)

    def run(self, rows: Sequence["Phase"]) -> None:
        """The driver's one loop: the rows in order, each where :meth:`ready` lets it."""
        for phase in rows:
            if self.ready(phase):
                phase.run(self, phase)

    def ready(self, phase: "Phase") -> bool:
        """The one rule for whether a row runs now: it reads nothing not yet built (``on_graph``:
        the action graph), its predicate holds, the best so far is not proven (a bound that meets
        it ends the compile), and its time gate passes: more than ``margin`` seconds left (None:
        whatever is left), the deadline allows ``passes`` passes over the actions, and
        ``size_ok`` (a test that may cost a pass over the graph, so it comes last)."""
        if (phase.on_graph and self.inst is None) or not phase.when(self):
            return False
        if close(self.best_val, self.bound) if phase.margin is None else not self.unfinished(phase.margin):
            return False
        if phase.passes and not Deadline(self.deadline).allows(self.n, phase.passes):
            return False
        return phase.size_ok(self)

    def unfinished(self, margin: float) -> bool:
        """Not proven, more than `margin` seconds left, no Ctrl-C: worth another phase."""
        return not close(self.best_val, self.bound) and not Deadline(self.deadline - margin).expired()

    def emit(self, phase: str, best: float, bnd: float, keep: bool = True) -> None:
        """Tell the progress callback; `keep` also records it in the report's log."""
        entry = {"elapsed": now() - self.t0, "best": best, "bound": bnd,
                 "gap": relative_gap(best, bnd) if math.isfinite(best) else 1.0, "phase": phase}
        if keep:
            self.log.append(entry)
        if self.progress is not None:
            self.progress(entry)

    def consider(self, sched: Schedule, sim: Optional[SimResult]) -> None:
        """Keep (sched, sim) when it fits and beats the best so far."""
        best = self.best_val
        if sim is not None and sim.fits and sim.objective(self.problem.objective) < best - TIE * max(1.0, best):
            self.best_sched, self.best_sim = sched, sim

    def take(self, out: Result, phase: "Phase", surrogate: bool = False) -> None:
        """The one rule by which an answer enters the compile, as its row's ``incumbent`` says:
        ``FIRST`` (the warm start) becomes the best so far; ``RELABELLED`` (the best in microbatch
        order, step 4) becomes the model's incumbent, and the best when faster by more than
        PROVEN; an engine's fitting answer is kept when it beats the best so far and becomes the
        model's incumbent: ``IN_ORDER`` (an engine that starts from the best schedule) hands over
        its orders, kinds in microbatch order, which replace the incumbent when strictly faster;
        ``NO_WORSE`` (an engine that searches from the incumbent's own orders) replaces it when no
        slower. A certifying row's bound enters through :meth:`raise_bound`, except from a round on
        a `surrogate` objective (makespan rounds of a span compile)."""
        sim = out.sim
        fits = sim is not None and sim.fits
        if phase.incumbent == FIRST:
            if not fits:
                raise SchedcError("the warm start does not fit the memory limit (internal error)")
            self.best_sched, self.best_sim, self.inc_sched, self.warm_source = out.schedule, sim, out.schedule, out.source
        elif phase.incumbent == RELABELLED:
            self._adopt_relabelled(out, fits)
        elif phase.incumbent in (IN_ORDER, NO_WORSE):
            # a solver answered: for IN_ORDER phases only a fitting answer counts
            self.solver_answered = self.solver_answered or (fits if phase.incumbent == IN_ORDER else out.answered)
            if fits:
                self._adopt_answer(out, phase.incumbent)
        if phase.certifies and not surrogate:
            self.raise_bound(out.bound, out.bound_source)

    def _adopt_relabelled(self, out: Result, fits: bool) -> None:
        """The model's incumbent is the relabelled best (without orders when it does not fit: no
        engine then searches from it); it replaces the best when faster by more than PROVEN."""
        self.inc_sched, self.inc_sim = out.schedule, out.sim
        self.inc_orders = out.orders if fits else None
        best, sim = self.best_val, out.sim
        if fits and sim is not None and sim.objective(self.problem.objective) <= best - _TOL * best:
            self.best_sched, self.best_sim = out.schedule, sim

    def _adopt_answer(self, out: Result, policy: str) -> None:
        """An engine's fitting answer: the best when it beats it, the incumbent as `policy` says."""
        sim, obj = out.sim, self.problem.objective
        assert out.schedule is not None and sim is not None  # take adopts only a fitting answer
        self.consider(out.schedule, sim)
        if policy == IN_ORDER:
            inst = self.action_graph
            orders = out.orders if out.orders is not None else \
                canonical_orders(inst, orders_from_schedule(inst, out.schedule))
            in_order, in_order_sim = materialize(inst, orders, self.problem)
            if in_order_sim is not None and in_order_sim.fits and \
                    (self.inc_orders is None or in_order_sim.objective(obj) < self._incumbent_sim().objective(obj)):
                self.inc_orders, self.inc_sched, self.inc_sim = orders, in_order, in_order_sim
                self.consider(in_order, in_order_sim)
        elif out.orders is not None:
            inc_val = self._incumbent_sim().objective(obj)
            if sim.objective(obj) <= inc_val + TIE * max(1.0, inc_val):
                self.inc_orders, self.inc_sched, self.inc_sim = out.orders, out.schedule, sim

    def raise_bound(self, value: Optional[float], source: str, key: str = "") -> bool:
        """The one rule for bounds: `value`, valid for every schedule and found by `source`, replaces
        the bound where it is higher; None or 0 is no bound. A relaxation's value is also kept in
        the details under `key` (whether or not it wins). Returns whether `value` was a bound."""
        if value is None or value <= 0.0:
            return False
        if key:
            self.lb_details = dict(self.lb_details, **{key: value})
        if value > self.bound:
            self.bound, self.bound_source = value, source
            if key:
                self.lb_details["lower_bound"] = max(self.lb_details.get("lower_bound", 0.0), value)
        return True

    def _incumbent_sim(self) -> SimResult:
        # read where the incumbent has orders, which step 4 (or an engine) gives only with a
        # fitting simulation
        assert self.inc_sim is not None, "the model's incumbent is read before step 4 made it"
        return self.inc_sim

    def incumbent(self) -> Incumbent:
        """The model's incumbent, as engines take it."""
        assert self.inc_sched is not None, "the model's incumbent is read before step 4 made it"
        return Incumbent(self.inc_sched, self._incumbent_sim(), "incumbent", self.inc_orders)

    def _best_schedule(self) -> tuple[Schedule, SimResult]:
        # the warm start (step 2) is the first best so far: every later row finds one
        assert self.best_sched is not None and self.best_sim is not None, "no best schedule before the warm start"
        return self.best_sched, self.best_sim

    def best(self) -> Incumbent:
        """The best schedule so far, as engines take it."""
        return Incumbent(*self._best_schedule(), "best so far")

    def bound_chains(self, phase: "Phase") -> None:
        """Step 1: the combinatorial chains (schedc.solver.bounds.chains); their terms are the
        report's bound details."""
        from schedc.solver.bounds import chains

        details = dict(chains.lower_bound_details(self.graph))
        self.lb, self.lb_details = float(details["lower_bound"]), details
        self.raise_bound(self.lb, COMBINATORIAL)

    def start_warm(self, phase: "Phase") -> None:
        """Step 2: the warm start (schedc.solver.engines.warm.WarmStart) with the phase's share of
        the time limit (at most WARM_MAX_SECONDS) for its list heuristic and polish, under the
        compile's deadline; or compile_problem's `warm`. Its families' results are progress
        lines (not the report's: they come before its first)."""
        self.emit(f"start ({self.n:,} actions)", math.inf, self.bound, keep=False)
        if self.given_warm is None:
            engine = WarmStart(min(WARM_MAX_SECONDS, phase.time_share(self) * self.time_limit),
                               lambda name, v: self.emit(f"warm start: {name}", v, self.bound, keep=False))
            out = engine.run(self.graph, None, Deadline(self.deadline))
        else:
            sched, sim, source = self.given_warm
            out = Result(schedule=sched, sim=sim, status=Status.FEASIBLE, source=source)
        self.take(out, phase)

    def bound_one_rank(self, phase: "Phase") -> None:
        """Step 3: the one-rank relaxation (schedc.solver.bounds.rank) raises the combinatorial
        bound; its value is kept in the details as ``one_rank_relaxation``."""
        from schedc.solver.bounds.rank import rank_relaxation_bound

        value = rank_relaxation_bound(self.graph)
        if value is not None and self.raise_bound(value, COMBINATORIAL, "one_rank_relaxation"):
            self.lb = max(self.lb, value)

    def build_action_graph(self, phase: "Phase") -> None:
        """Step 4: the action graph, and the best so far relabelled so each kind runs in
        microbatch order, the model's incumbent."""
        self.inst = inst = self.graph.lower()
        orders = canonical_orders(inst, orders_from_schedule(inst, self._best_schedule()[0]))
        sched, sim = materialize(inst, orders, self.problem)
        self.take(Result(schedule=sched, sim=sim, orders=orders, status=Status.FEASIBLE), phase)

    def solve_full_model(self, phase: "Phase") -> None:
        """Most of the time to the full model (the only one that can prove); the rest is left
        to windows around its best answer. For span it is the late-start model (each rank's
        start a variable), a relaxation of every schedule, so its dual bound certifies both
        objectives."""
        obj = self.problem.objective
        remaining = phase.time_share(self) * (self.deadline - now())

        def on_progress(primal, dual):
            p = min(self.best_val, primal) if primal is not None and math.isfinite(primal) else self.best_val
            d = max(self.bound, dual) if dual is not None and math.isfinite(dual) else self.bound
            # the solver calls this on the wall clock: a work budget's report leaves it out
            self.emit("full model", p, d, keep=work_clock() is None)

        assert self.mip is not None  # the row runs only with a MIP solver (its `when`)
        engine = integer_program.MipEngine(self.mip, lower_bound=self.lb, progress=on_progress, late_start=obj == "span",
                                 seed=self.seed)
        self.take(engine.run(self.action_graph, self.incumbent(), Deadline.after(remaining)), phase)
        self.emit("full model done", self.best_val, self.bound)

    def polish_with_cpsat(self, phase: "Phase") -> None:
        """CP-SAT (schedc.solver.engines.cpsat) for its share of the time left, hinted with the best schedule
        so far. It reasons on orders and intervals without pairwise binaries and finds, on slow
        links, orders the integer program misses; its converted bound is a certificate too, and
        the higher bound wins. Its answer becomes the integer program's incumbent.

        For span, half of that time first goes to the makespan model: CP-SAT's span model (free
        first starts, a far horizon) propagates weakly and rarely leaves its hint, while a
        makespan optimum is a good span schedule (span <= makespan) and a better hint."""
        seconds = phase.time_share(self) * (self.deadline - now())
        end = now() + seconds
        if not Deadline(end).allows(self.action_graph.n, CPSAT_PASSES):
            return  # the whole model would not even be built in its share: windows instead
        # too large for the full integer program: windows come next and do better there than a
        # whole model that has stopped improving
        large = self.too_large_for_full_model
        if self.problem.objective == "span":
            self._cpsat_round(phase, "makespan", seconds / 2, large=large)
        if self.unfinished(0.2):
            self._cpsat_round(phase, self.problem.objective, max(0.1, end - now()), large=large)
        self.emit("cp-sat done", self.best_val, self.bound)

    def _cpsat_round(self, phase: "Phase", objective: str, seconds: float, large: bool) -> None:
        from schedc.solver.engines import cpsat

        stale = max(CPSAT_STALE_MIN, CPSAT_STALE_SHARE * seconds) if large else None
        engine = cpsat.CpsatEngine(workers=cpsat.WORKERS, seed=self.seed, stale_seconds=stale, objective=objective)
        out = engine.run(self.action_graph, self.best(), Deadline.after(seconds))
        self.take(out, phase, surrogate=objective != self.problem.objective)

    def raise_bound_tight(self, phase: "Phase") -> None:
        """Under a tight cap the ranks' memory together bounds the step well above what each rank
        alone shows: the anchored relaxation (schedc.solver.bounds.anchored) for half of the phase's share
        of the time left, then the block relaxation (schedc.solver.bounds.blocks) until its end. Kept in
        the details as ``anchored_relaxation`` and ``block_relaxation``."""
        from schedc.solver.bounds.anchored import anchored_bound
        from schedc.solver.bounds.blocks import SIZES, block_bound

        end = now() + phase.time_share(self) * (self.deadline - now())
        if self.raise_bound(anchored_bound(self.graph, Deadline((now() + end) / 2)), "anchored relaxation",
                            "anchored_relaxation"):
            self.emit("anchored relaxation", self.best_val, self.bound)
        if self.raise_bound(block_bound(self.graph, Deadline(end), SIZES), "block relaxation", "block_relaxation"):
            self.emit("block relaxation", self.best_val, self.bound)

    def search_windows(self, phase: "Phase") -> None:
        """Windows over the model's incumbent (schedc.solver.engines.windows) until the deadline: with
        CP-SAT when it runs (it solves windows several times wider than the integer program can),
        else with the MIP solver. For span, as in polish_with_cpsat, half of that time first goes
        to makespan windows (span <= makespan)."""
        engine = "cpsat" if self.use_cpsat else self.mip
        assert engine is not None  # _engines gives CP-SAT or a MIP solver, never neither
        if self.problem.objective == "span":
            half = now() + (self.deadline - now()) / 2
            self._windows(phase, "makespan", engine, half)
        if self.unfinished(0.5):
            self._windows(phase, self.problem.objective, engine, self.deadline)

    def _windows(self, phase: "Phase", objective: str, engine: str, deadline: float) -> None:
        search = WindowSearch(engine, self.lb, lambda b, what: self.emit(what, min(b, self.best_val), self.bound),
                              self.seed, objective)
        self.take(search.run(self.action_graph, self.incumbent(), Deadline(deadline)), phase,
                  surrogate=objective != self.problem.objective)

    def result(self) -> CompileResult:
        """Status (``optimal`` only when the bound is met), baselines and the report."""
        best_val, bound = self.best_val, self.bound
        if close(best_val, bound):
            status = Status.OPTIMAL
            bound = min(bound, best_val)
        elif self.solver_answered:
            status = Status.FEASIBLE
        else:
            status = Status.HEURISTIC
        solve_time = now() - self.t0
        best_sched, best_sim = self._best_schedule()
        result = CompileResult(
            schedule=best_sched, sim=best_sim, problem=self.problem, status=status, lower_bound=bound,
            gap=0.0 if status == Status.OPTIMAL else relative_gap(best_val, bound), solve_time=solve_time,
            baselines=all_baselines(self.graph, Deadline(self.deadline)), warm_start_source=self.warm_source,
            interrupted=interrupt.requested(), graph=self.graph, budget="time" if work_clock() is None else "work",
        )
        result.report = build_report(result, lb_details=self.lb_details, bound_source=self.bound_source,
                                     solver=self.engines, time_limit=self.time_limit, log=self.log)
        self.graph.release()
        self.emit("done", best_val, bound)
        return result


@dataclass(frozen=True)
class Phase:
    """One phase of a compile: a row of START or PHASES (module docstring). `run` does its work,
    hands its answer to ``_Compilation.take`` and its bounds to ``_Compilation.raise_bound``; the
    driver runs it where ``_Compilation.ready`` says."""

    name: str
    run: Callable[["_Compilation", "Phase"], None]  # how it runs: builds its engine, hands answers to take
    # its share of the time left when it starts (the warm start's: of the time limit); None: not
    # time-boxed, it runs to its end (its cost is its `passes`)
    share: Optional[Callable[["_Compilation"], float]]
    when: Callable[["_Compilation"], bool]  # whether it runs for this problem and these options
    certifies: bool  # its bound is valid for every schedule: it may raise the compile's bound
    incumbent: str = NONE  # how its answer is adopted: FIRST | RELABELLED | IN_ORDER | NO_WORSE | NONE (take)
    margin: Optional[float] = 0.5  # seconds: with fewer left it is not started; None: whatever is left
    passes: float = 0.0  # passes over the actions it costs first: not started where the deadline does not allow them
    on_graph: bool = True  # it reads the action graph: it runs only once step 4 has built it
    size_ok: Callable[["_Compilation"], bool] = lambda c: True

    def time_share(self, c: "_Compilation") -> float:
        """`share` for `c`; read only by the rows that are time-boxed (a share given)."""
        assert self.share is not None, f"{self.name}: not time-boxed, it has no share of the time"
        return self.share(c)


def _always(c: _Compilation) -> bool:
    return True


# the phases up to the action graph, in the order they run (module docstring, steps 1-4): the
# bound and the warm start run whatever the time (nothing can be returned without them)
START: tuple[Phase, ...] = (
    Phase("lower bound", _Compilation.bound_chains, None, _always, certifies=True, margin=None, on_graph=False),
    Phase("warm start", _Compilation.start_warm, lambda c: WARM_SHARE, _always, certifies=False, incumbent=FIRST,
          margin=None, on_graph=False),
    Phase("one-rank relaxation", _Compilation.bound_one_rank, None, _always, certifies=True, margin=0.0,
          passes=RELAXATION_PASSES, on_graph=False),
    Phase("action graph", _Compilation.build_action_graph, None, _always, certifies=False, incumbent=RELABELLED,
          margin=0.0, passes=GRAPH_PASSES, on_graph=False),
)

def engine_phase(name: str, build: Callable[[_Compilation], Engine], share: Callable[[_Compilation], float],
                 when: Callable[[_Compilation], bool] = _always, certifies: bool = False, incumbent: str = IN_ORDER,
                 hinted: bool = True, on_action_graph: bool = True,
                 seconds: Optional[Callable[[_Compilation, float], float]] = None, **gates) -> Phase:
    """The row of an engine (schedc.solver.engine) that needs nothing of its own: `build(c)` makes
    it; it runs for its share of the time left (`seconds(c, share_seconds)` where it asks for
    another amount), on the action graph (or, with ``on_action_graph=False``, the stage-level
    graph), from the best so far (``IN_ORDER``) or the model's incumbent (``NO_WORSE``), or from
    nothing (``hinted=False``); its Result enters through take, and a progress line with its name
    follows. `gates`: the other fields of :class:`Phase` (margin, passes, size_ok)."""

    def run(c: _Compilation, phase: Phase) -> None:
        given = phase.time_share(c) * (c.deadline - now())
        start = None if not hinted else c.best() if phase.incumbent == IN_ORDER else c.incumbent()
        graph = c.action_graph if on_action_graph else c.graph
        c.take(build(c).run(graph, start, Deadline.after(given if seconds is None else seconds(c, given))), phase)
        c.emit(phase.name, c.best_val, c.bound)

    return Phase(name, run, share, when, certifies, incumbent, **gates)


def _periodic_seconds(c: _Compilation, given: float) -> float:
    """At least PERIODIC_MIN_SECONDS where the time allows (0.6 of what is left): under a tight
    cap the steady state decides the step, and a repeated timetable finds it where the engines
    that decide action by action do not."""
    return max(given, min(PERIODIC_MIN_SECONDS, 0.6 * (c.deadline - now())))


# the phases on the action graph, in the order they run (module docstring, steps 5-9)
PHASES: tuple[Phase, ...] = (
    engine_phase("periodic", lambda c: periodic.PeriodicEngine(seed=c.seed), lambda c: PERIODIC_SHARE,
                 lambda c: c.tight, incumbent=IN_ORDER, hinted=False, on_action_graph=False, seconds=_periodic_seconds),
    Phase("tight-cap relaxations", _Compilation.raise_bound_tight, lambda c: TIGHT_BOUND_SHARE, lambda c: c.tight,
          certifies=True),
    Phase("cp-sat", _Compilation.polish_with_cpsat, lambda c: CPSAT_SHARE if c.mip else 1.0,
          lambda c: c.use_cpsat, certifies=True, incumbent=IN_ORDER),
    Phase("integer program", _Compilation.solve_full_model, lambda c: FULL_MODEL_SHARE,
          lambda c: bool(c.mip) and c.inc_orders is not None, certifies=True, incumbent=NO_WORSE, margin=0.2,
          size_ok=lambda c: not c.too_large_for_full_model),
    Phase("windows", _Compilation.search_windows, lambda c: 1.0, lambda c: c.inc_orders is not None,
          certifies=False, incumbent=NO_WORSE),
)


def relative_gap(value: float, bound: float) -> float:
    if value <= 0:
        return 0.0
    return max(0.0, (value - bound) / value)


def build_report(result: CompileResult, lb_details: dict, bound_source: str, solver: str, time_limit: float,
                 log: list) -> dict:
    """The JSON report beside the CSV (docs/design.md, "Compiler output")."""
    p, sim = result.problem, result.sim
    caps = [None if math.isinf(c) else c for c in p.memory_caps]
    return {
        "format": "schedc.report/v1",
        "schedc_version": __version__,
        "inputs": {
            "stages": p.n_stages,
            "ranks": p.n_ranks,
            "placement": p.placement_name,
            "stage_to_rank": list(p.placement),
            "microbatches": p.n_microbatches,
            "costs": p.given_profile.model_dump(mode="json", exclude_none=True),
            "runtime": p.runtime,
            "memory_limit": str(p.memory),
            "objective": p.objective,
            "solver": solver,
            "time_limit": time_limit,
        },
        "predicted": {
            "makespan": sim.makespan,
            "span": sim.span,
            "bubble": sim.bubble,
            "span_bubble": sim.span_bubble,
            "bubble_per_rank": list(sim.bubble_per_rank),
            "peak_memory_per_rank": list(sim.peak_memory),
            "memory_limit_per_rank": caps,
            "fits_memory": bool(sim.fits),
        },
        "limiter": limiter(sim, p.profile).as_dict(),
        # the baselines built during the compile (kept on its graph); none are built anew here
        "same_as_baseline": same_hand_made(result.schedule, matching_baselines(result.graph or p, Deadline(0.0)))
        or None,
        "baselines": result.baselines,
        "lower_bound": result.lower_bound,
        "lower_bound_source": bound_source,
        "lower_bound_details": _jsonable(lb_details),
        "gap": result.gap,
        "status": result.status,
        "solve_time": result.solve_time,
        "warm_start": result.warm_start_source,
        "interrupted": result.interrupted,
        "progress": [{k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in e.items()}
                     for e in log],
        **_budget_fields(result.budget),  # last: a report read back lists its extra fields last
    }


def _budget_fields(budget: str) -> dict:
    """Which budget ran; in work mode the work spent and whether the wall-clock safety net cut it
    (then the result is not reproducible)."""
    clock = work_clock()
    if budget != "work" or clock is None:
        return {"budget": budget}
    return {"budget": "work", "work_spent": round(clock.spent, 6), "cut_by_wall_clock": clock.cut_by_wall}


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (int, float, str, bool)) or x is None:
        return x
    return str(x)
