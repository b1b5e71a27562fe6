"""The compiler driver: warm start -> CP-SAT -> integer program (full or by windows) -> certified result.

Problem: return the schedule with the smallest simulated step time (``problem.objective``) that
fits the memory caps, within a time limit, together with a certificate: a lower bound valid for
every schedule under the same rules, the gap to it, and a status that says ``optimal`` only
when the bound proves it.

Method:
1. Feasibility: a cap that cannot hold one microbatch per stage fails with the smallest limit
   that works (schedc.solver.heuristic.check_memory_feasible).
2. Warm start: the best of the heuristic, the zero-bubble authors' round greedy (zb-rounds,
   schedc.solver.paper_greedy), zb-greedy and the hand-made schedules that fit, its cool-down
   re-listed when that is shorter (schedc.solver.cooldown; schedc.solver.heuristic.warm_start),
   relabelled so each kind runs in microbatch order.
3. Lower bound: schedc.solver.bounds.lower_bound. If the warm start meets it, stop: proven.
4. CP-SAT polishing (schedc.solver.cpsat, when OR-Tools is installed): 40% of the time, hinted
   with the warm start; its bound is a certificate too. Measured on slow links
   (benchmarks/compile_quality.py, group e) it finds in seconds orders that the integer program
   does not find in a minute; it stops early when it proves its answer, and, on instances too
   large for step 5, after a quarter of its time without a better solution.
5. Integer program (schedc.solver.model): instances whose free order pairs stay under
   ``model.FULL_MODEL_PAIRS`` get the full model for 70% of the time left (its dual bound is a
   certificate: for makespan the model is exact; for span the driver solves the late-start
   model, where each rank's start is a variable, a relaxation of every schedule).
6. What is still unproven gets a rolling-horizon window search over the incumbent's timeline
   (``_window_search``): CP-SAT windows (cpsat.solve_window) when OR-Tools is installed, else
   windows of the integer program, until time runs out or no window size finds anything. For
   span, half of that time goes to makespan windows first, as in step 4. A CP-SAT window stops
   after WINDOW_STALE_SECONDS without a new solution; once windows have improved, the search
   stays on the part of the timeline where they did until it is exhausted there. Measured at
   16x48, comm 0.25F, 1.25p (120 s): the integer program's windows left 168 (3.1% above the
   bound); CP-SAT's reach 163.25-164.5 (0.3-1.1%; CP-SAT's two workers make runs differ).
7. Every candidate is re-simulated; only simulated numbers are reported, and the result is never
   worse than the warm start nor over the memory caps.

``solver="highs"`` / ``"cbc"`` runs steps 5 and 6 with that MIP solver and no CP-SAT;
``solver="cpsat"`` runs step 4 with all the time (then CP-SAT windows, if it stops early).

Status: ``optimal`` when the simulated objective equals the certified bound; otherwise
``feasible`` when a solver returned a solution (full model, CP-SAT or a window), else
``heuristic`` (the warm start, with no solver answer).

Deadline: every phase shares one deadline (schedc.solver.deadline): the warm start's families
are abandoned when it passes (the hand-made schedules come first, and are built past it until one
fits), the action graph, CP-SAT's model and each window are skipped when the time left is below
their estimated cost, and a reserve for the report and the CSV grows with the actions. Sizes
above deadline.MAX_ACTIONS are refused before anything is built.

Cost: the time limit; memory linear in the actions (the full model's pair count no longer builds
the transitive closure; the integer program's windows, which do, stop at MIP_WINDOW_MAX_ACTIONS).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, Optional, Sequence, Union

from schedc import __version__
from schedc.costs import DEFAULT_RUNTIME, MemoryLimit, Profile
from schedc.diagnose import limiter, same_hand_made
from schedc.errors import SchedcError
from schedc.ir import Schedule
from schedc.simulate import SimResult, simulate
from schedc.solver import interrupt, model
from schedc.solver.deadline import Deadline, check_size, n_actions, seconds_per_action
from schedc.solver.heuristic import matching_baselines
from schedc.solver.problem import Problem
from schedc.tolerances import PROVEN, REL, TIE

_TOL = PROVEN  # relative: values this close count as equal (MIP gaps, float sums)
WINDOW_SOLVE_LIMIT = 6.0  # seconds per window model
# a CP-SAT window that has found nothing new for this long rarely finds more: at 16x48 (comm
# 0.25F, 1.25p) the 48-per-rank windows that ran their full 6 s returned the same step time
# after 1.4-2 s with this rule
WINDOW_STALE_SECONDS = 1.0
FULL_MODEL_SHARE = 0.7  # of the time left, for the full model when it is small enough
CPSAT_SHARE = 0.4  # of the time, for CP-SAT polishing first (the rest: the integer program)
CPSAT_STALE_SHARE, CPSAT_STALE_MIN = 0.25, 5.0  # on large instances: stop CP-SAT after this long without news
CPSAT_WORKERS = 2  # CP-SAT's parallel search is its strength; one worker finds much less
# passes over the action graph (deadline.SECONDS_PER_ACTION each) that one phase costs, measured
# at 8x8192 and 128x512 (benchmarks/where_time_goes.py): a phase that cannot finish before the
# deadline is skipped rather than started
GRAPH_PASSES = 4  # the action graph and the incumbent's re-simulation
CPSAT_PASSES = 25  # building the whole CP-SAT model
WINDOW_PASSES = 4  # one window: CP-SAT's model keeps every action, most of them as constants
# an integer-program window computes the transitive closure of the whole graph (bitsets,
# quadratic memory: 30k actions ~ 110 MB); above this, --solver highs/cbc keep the warm start
MIP_WINDOW_MAX_ACTIONS = 30_000


@dataclass
class CompileResult:
    schedule: Schedule
    sim: SimResult
    problem: Problem
    status: str  # optimal | feasible | heuristic
    lower_bound: float
    gap: float  # (value - lower_bound) / value
    solve_time: float
    baselines: dict[str, dict] = field(default_factory=dict)
    warm_start_source: str = ""
    interrupted: bool = False  # Ctrl-C ended the search early (schedc.solver.interrupt)
    report: dict = field(default_factory=dict)

    @property
    def value(self) -> float:
        return self.sim.objective(self.problem.objective)


def _close(a: float, b: float) -> bool:
    return a <= b * (1 + _TOL) + _TOL


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
) -> CompileResult:
    """Compile the fastest schedule under the memory limit (see the module docstring), timed as
    `runtime` executes it (torch's runtime by default)."""
    problem = Problem.build(n_stages, n_microbatches, n_ranks=n_ranks, placement=placement, profile=profile,
                            memory=memory, objective=objective, runtime=runtime)
    return compile_problem(problem, time_limit=time_limit, solver=solver, progress=progress, seed=seed)


def all_baselines(problem: Problem, deadline: Optional[Deadline] = None) -> dict[str, dict]:
    """Every hand-made schedule that exists for this problem, simulated under its costs:
    name -> {makespan, span, peak_memory, fits} (under a `deadline`, those built before it)."""
    from schedc.solver.heuristic import matching_baselines

    return {
        name: {"makespan": sim.makespan, "span": sim.span, "peak_memory": list(sim.peak_memory), "fits": bool(sim.fits)}
        for name, _, sim in matching_baselines(problem, deadline)
    }


def compile_problem(
    problem: Problem,
    time_limit: float = 60.0,
    solver: Optional[str] = None,
    progress: Optional[Callable[[dict], None]] = None,
    seed: int = 0,
    warm: Optional[tuple[Schedule, SimResult, str]] = None,
) -> CompileResult:
    """Compile `problem`; `warm` overrides the warm start (schedule, simulation, source name).
    `solver`: None = the integer program (HiGHS, else CBC) plus CP-SAT polishing when OR-Tools
    is installed; "highs" / "cbc" = that MIP solver alone; "cpsat" = CP-SAT alone."""
    from schedc.solver import heuristic

    t0 = time.monotonic()
    if not time_limit or time_limit <= 0:
        raise SchedcError(f"--time-limit must be > 0 seconds, got {time_limit}")
    check_size(problem.n_stages, problem.n_microbatches)
    n = n_actions(problem.n_stages, problem.n_microbatches)
    # keep a reserve for the report (and a window's overrun), and for writing the CSV, which
    # grows with the actions (about a quarter of a pass over them)
    deadline = t0 + time_limit - min(0.05 * time_limit, 5.0) - 0.25 * n * seconds_per_action()
    mip, use_cpsat = _engines(solver)
    heuristic.check_memory_feasible(problem)
    lb, lb_details = _lower_bound(problem)

    def early(phase: str, best: float = math.inf) -> None:
        if progress is not None:
            progress({"elapsed": time.monotonic() - t0, "best": best, "bound": lb,
                      "gap": _gap(best, lb) if math.isfinite(best) else 1.0, "phase": phase})

    early(f"start ({n:,} actions)")
    if warm is None:
        warm = heuristic.warm_start(problem, time_budget=min(1.0, 0.1 * time_limit), deadline=Deadline(deadline),
                                    on_candidate=lambda name, v: early(f"warm start: {name}", v))
    if not warm[1].fits:
        raise SchedcError("the warm start does not fit the memory limit (internal error)")
    c = _Compilation.begin(problem, warm, mip, use_cpsat, seed, t0, deadline, progress, (lb, lb_details))
    c.emit("warm start (" + warm[2] + ")", c.best_val, c.bound)
    if c.inst is None:
        return c.result(time_limit)
    if use_cpsat and c.unfinished(0.5):
        c.polish_with_cpsat(CPSAT_SHARE if mip else 1.0)
    if mip and c.inc_orders is not None and c.unfinished(0.2) and not c.too_large_for_full_model:
        c.solve_full_model()
    if c.inc_orders is not None and c.unfinished(0.5):
        c.search_windows()
    return c.result(time_limit)


def _engines(solver: Optional[str]) -> tuple[Optional[str], bool]:
    """(MIP solver name or None, whether CP-SAT runs) for the `solver` argument."""
    if solver == "cpsat":
        from schedc.solver.cpsat import import_cp_model

        import_cp_model()  # a one-line error when OR-Tools is missing or broken
        return None, True
    mip = model.available_solver(solver)
    if solver is not None:
        return mip, False
    from schedc.solver.cpsat import cpsat_available

    return mip, cpsat_available()


@dataclass
class _Compilation:
    """One compile run: the best schedule so far, the model's incumbent, the certified bound."""

    problem: Problem
    inst: Optional[model.Instance]  # None: no engine runs (proven at the warm start, or no time)
    mip: Optional[str]  # highs | cbc, None when CP-SAT runs alone
    use_cpsat: bool
    seed: int
    t0: float
    deadline: float
    progress: Optional[Callable[[dict], None]]
    warm_source: str
    best_sched: Schedule
    best_sim: SimResult
    inc_orders: Optional[list[list[int]]]  # the model's incumbent: in-order, re-simulated
    inc_sched: Schedule
    inc_sim: Optional[SimResult]
    lb: float  # the combinatorial bound
    lb_details: dict
    bound: float  # the best certified bound
    bound_source: str = "combinatorial"
    solver_answered: bool = False
    log: list[dict] = field(default_factory=list)

    @classmethod
    def begin(cls, problem, warm, mip, use_cpsat, seed, t0, deadline, progress, lb=None) -> "_Compilation":
        """The warm start, and the model's incumbent: the warm start relabelled so each kind
        runs in microbatch order (never slower for makespan; for span an earlier first start
        can lengthen a rank's span, so the warm start itself stays the answer to beat). When the
        action graph cannot be built before the deadline (or the warm start is proven), no
        engine runs: ``inst`` is None and the warm start is the answer."""
        warm_sched, warm_sim, warm_source = warm
        lb, lb_details = lb if lb is not None else _lower_bound(problem)
        obj = problem.objective
        n = n_actions(problem.n_stages, problem.n_microbatches)
        if _close(warm_sim.objective(obj), lb) or not Deadline(deadline).allows(n, GRAPH_PASSES):
            return cls(problem, None, mip, use_cpsat, seed, t0, deadline, progress, warm_source, warm_sched,
                       warm_sim, None, warm_sched, None, lb, lb_details, lb)
        inst = model.build_instance(problem)
        inc_orders = model.canonical_orders(inst, model.orders_from_schedule(inst, warm_sched))
        inc_sched, inc_sim = _materialize(inst, inc_orders, problem)
        if inc_sim is None or not inc_sim.fits:
            inc_orders = None
        c = cls(problem, inst, mip, use_cpsat, seed, t0, deadline, progress, warm_source, warm_sched, warm_sim,
                inc_orders, inc_sched, inc_sim, lb, lb_details, lb)
        if inc_orders is not None and inc_sim.objective(obj) <= warm_sim.objective(obj) - _TOL * warm_sim.objective(obj):
            c.best_sched, c.best_sim = inc_sched, inc_sim
        return c

    @property
    def best_val(self) -> float:
        return self.best_sim.objective(self.problem.objective)

    @cached_property
    def too_large_for_full_model(self) -> bool:
        """More free order pairs than the full integer program takes: windows instead (step 5)."""
        return model.count_free_pairs(self.inst, limit=model.FULL_MODEL_PAIRS) > model.FULL_MODEL_PAIRS

    @property
    def engines(self) -> str:
        return "+".join(name for name in (self.mip, "cpsat" if self.use_cpsat else None) if name)

    def unfinished(self, margin: float) -> bool:
        """Not proven, more than `margin` seconds left, no Ctrl-C: worth another phase."""
        return not _close(self.best_val, self.bound) and time.monotonic() < self.deadline - margin \
            and not interrupt.requested()

    def emit(self, phase: str, best: float, bnd: float) -> None:
        entry = {"elapsed": time.monotonic() - self.t0, "best": best, "bound": bnd,
                 "gap": _gap(best, bnd), "phase": phase}
        self.log.append(entry)
        if self.progress is not None:
            self.progress(entry)

    def consider(self, sched: Schedule, sim: Optional[SimResult]) -> None:
        """Keep (sched, sim) when it fits and beats the best so far."""
        best = self.best_val
        if sim is not None and sim.fits and sim.objective(self.problem.objective) < best - TIE * max(1.0, best):
            self.best_sched, self.best_sim = sched, sim

    def solve_full_model(self) -> None:
        """Most of the time to the full model (the only one that can prove); the rest is left
        to windows around its best answer. For span it is the late-start model (each rank's
        start a variable), a relaxation of every schedule, so its dual bound certifies both
        objectives."""
        obj = self.problem.objective
        inc_val = self.inc_sim.objective(obj)
        remaining = FULL_MODEL_SHARE * (self.deadline - time.monotonic())

        def on_progress(primal, dual):
            p = min(self.best_val, primal) if primal is not None and math.isfinite(primal) else self.best_val
            d = max(self.bound, dual) if dual is not None and math.isfinite(dual) else self.bound
            self.emit("full model", p, d)

        out = model.solve_model(self.inst, self.inc_orders, inc_val, obj, remaining, self.mip,
                                lower_bound=self.lb, progress=on_progress, late_start=obj == "span", seed=self.seed)
        if out.orders is not None:
            self.solver_answered = True
            cand_orders = model.canonical_orders(self.inst, out.orders)
            sched, sim = _materialize(self.inst, cand_orders, self.problem)
            if sim is not None and sim.fits and sim.objective(obj) <= inc_val + TIE * max(1.0, inc_val):
                self.inc_orders, self.inc_sched, self.inc_sim = cand_orders, sched, sim
                self.consider(sched, sim)
        if out.dual_bound is not None and out.dual_bound > self.bound:
            self.bound, self.bound_source = out.dual_bound, f"{self.mip} dual bound"
            if out.proven:
                self.bound_source = f"{self.mip} (proven optimal)"
        self.emit("full model done", self.best_val, self.bound)

    def polish_with_cpsat(self, share: float) -> None:
        """CP-SAT (schedc.solver.cpsat) for `share` of the time left, hinted with the best schedule
        so far. It reasons on orders and intervals without pairwise binaries and finds, on slow
        links, orders the integer program misses; its converted bound is a certificate too, and
        the higher bound wins. Its answer becomes the integer program's incumbent.

        For span, half of that time first goes to the makespan model: CP-SAT's span model (free
        first starts, a far horizon) propagates weakly and rarely leaves its hint, while a
        makespan optimum is a good span schedule (span <= makespan) and a better hint."""
        seconds = share * (self.deadline - time.monotonic())
        end = time.monotonic() + seconds
        if not Deadline(end).allows(self.inst.n, CPSAT_PASSES):
            return  # the whole model would not even be built in its share: windows instead
        # too large for the full integer program: windows come next and do better there than a
        # whole model that has stopped improving (16x48, comm 0.25F, 1.25p: 168 after 46 s)
        large = self.too_large_for_full_model
        if self.problem.objective == "span":
            self._cpsat_round(replace(self.problem, objective="makespan"), seconds / 2, certifies=False, large=large)
        if self.unfinished(0.2):
            self._cpsat_round(self.problem, max(0.1, end - time.monotonic()), certifies=True, large=large)
        self.emit("cp-sat done", self.best_val, self.bound)

    def _cpsat_round(self, problem: Problem, seconds: float, certifies: bool, large: bool) -> None:
        from schedc.solver import cpsat

        stale = max(CPSAT_STALE_MIN, CPSAT_STALE_SHARE * seconds) if large else None
        out = cpsat.solve_cpsat(problem, time_limit=seconds, warm=(self.best_sched, self.best_sim, "best so far"),
                                workers=CPSAT_WORKERS, seed=self.seed, stale_seconds=stale, inst=self.inst)
        if out.cp_sim is not None and out.cp_sim.fits:
            self.solver_answered = True
            self.consider(out.cp_schedule, out.cp_sim)
            orders = model.canonical_orders(self.inst, model.orders_from_schedule(self.inst, out.cp_schedule))
            sched, sim = _materialize(self.inst, orders, self.problem)
            obj = self.problem.objective
            if sim is not None and sim.fits and (self.inc_orders is None or sim.objective(obj) < self.inc_sim.objective(obj)):
                self.inc_orders, self.inc_sched, self.inc_sim = orders, sched, sim
        if certifies and out.cp_bound is not None and out.cp_bound > self.bound:
            self.bound = out.cp_bound
            self.bound_source = "cp-sat (proven optimal)" if out.proven else "cp-sat bound"

    def search_windows(self) -> None:
        """Windows over the model's incumbent: with CP-SAT when it runs (it solves windows several
        times wider than the integer program can), else with the MIP solver. For span, as in
        polish_with_cpsat, half of the time first goes to makespan windows (span <= makespan)."""
        engine = "cpsat" if self.use_cpsat else self.mip
        if self.problem.objective == "span":
            half = time.monotonic() + (self.deadline - time.monotonic()) / 2
            self._windows(replace(self.problem, objective="makespan"), engine, half)
        if self.unfinished(0.5):
            self._windows(self.problem, engine, self.deadline)

    def _windows(self, problem: Problem, engine: str, deadline: float) -> None:
        orders, sched, sim, used = _window_search(
            self.inst, problem, self.inc_orders, self.inc_sched, self.inc_sim, deadline, engine,
            self.lb, lambda b, what: self.emit(what, min(b, self.best_val), self.bound), self.seed)
        self.solver_answered = self.solver_answered or used
        obj = self.problem.objective
        if sim.objective(obj) <= self.inc_sim.objective(obj) + TIE * max(1.0, self.inc_sim.objective(obj)):
            self.inc_orders, self.inc_sched, self.inc_sim = orders, sched, sim
        self.consider(sched, sim)

    def result(self, time_limit: float) -> CompileResult:
        """Status (``optimal`` only when the bound is met), baselines and the report."""
        best_val, bound = self.best_val, self.bound
        if _close(best_val, bound):
            status = "optimal"
            bound = min(bound, best_val)
        elif self.solver_answered:
            status = "feasible"
        else:
            status = "heuristic"
        solve_time = time.monotonic() - self.t0
        result = CompileResult(
            schedule=self.best_sched, sim=self.best_sim, problem=self.problem, status=status, lower_bound=bound,
            gap=0.0 if status == "optimal" else _gap(best_val, bound), solve_time=solve_time,
            baselines=all_baselines(self.problem, Deadline(self.deadline)), warm_start_source=self.warm_source,
            interrupted=interrupt.requested(),
        )
        result.report = build_report(result, lb_details=self.lb_details, bound_source=self.bound_source,
                                     solver=self.engines, time_limit=time_limit, log=self.log)
        self.emit("done", best_val, bound)
        return result


def _gap(value: float, bound: float) -> float:
    if value <= 0:
        return 0.0
    return max(0.0, (value - bound) / value)


def _lower_bound(problem: Problem) -> tuple[float, dict]:
    from schedc.solver import bounds

    details = dict(bounds.lower_bound_details(problem))
    return float(details["lower_bound"]), details


def _materialize(inst, orders, problem: Problem):
    sched = model.schedule_from_orders(inst, orders)
    try:
        sim = simulate(sched, problem.profile, problem.memory)
    except SchedcError:
        return sched, None
    return sched, sim


# Window sizes, in actions per rank, tried smallest first. A CP-SAT window of 48 per rank of a
# 16x48 pipeline takes 1-2 s (NoOverlap and the cumulative reason on orders directly);
# the integer program's pairwise order binaries grow with the square of the window.
WINDOW_SIZES = {"cpsat": (24, 48, 72), "mip": (8, 14, 22)}
WINDOW_OFFSETS = (0.0, 0.5, 0.25, 0.75)  # of a step: where each round of sweeps puts its window edges
# how far a window's edges move from one rank to the next, in forward hops, once upright windows
# stop finding anything: a window that follows the forward wave (or runs against it) re-times a
# microbatch's passage through all ranks at once, where an upright one cuts it (16x48, comm
# 0.25F, 1.25p: from a 165 that upright windows left unchanged for 60 s on three seeds, the
# search with slanted windows reached 164.5 on both seeds tried)
WINDOW_SHEARS = (0.0, 1.0, -1.0)


def _window_search(inst, problem, orders, sched, sim, deadline, engine, lb, report, seed):
    """Rolling horizon (a variable-neighbourhood search over time windows): free the actions
    starting inside a time window on every rank, keep the rest in order, re-solve with `engine`
    (``cpsat`` or a MIP solver name), keep the answer when it is no worse (so the incumbent can
    drift across plateaus), slide by half a window (alternately from the end and from the
    start). After a sweep that improved, start again from the smallest upright windows; after a
    fruitless one, try the next size; after a whole round of sizes has found nothing, slant the
    windows along the forward wave, then against it (WINDOW_SHEARS). Each sweep shifts the
    window edges by a quarter or half step (WINDOW_OFFSETS).

    Focus: once a window has improved, sweeps skip the windows that lie wholly before the
    earliest window that has improved, until every size at every offset has found nothing in a
    row there; then they cover the whole timeline again. The search stops when that happens
    with no focus, or at the deadline. Why: the step time is decided where gains are found (at
    16x48, comm 0.25F, 1.25p, every gain of several runs started in the last 35% of the
    timeline, while two thirds of the window time went to windows starting in the first 55%);
    from the same 168.5 start, 90 s of focused windows reached 163.75, 163.5, 163.5 (seeds 0-2)
    where unfocused ones reached 163.75, 164, 164."""
    obj_name = problem.objective
    best_val = sim.objective(obj_name)
    used = False
    if orders is None or (engine != "cpsat" and inst.n > MIP_WINDOW_MAX_ACTIONS):
        return orders, sched, sim, used
    solve = _window_solver(inst, problem, engine, lb)
    sizes = WINDOW_SIZES["cpsat" if engine == "cpsat" else "mip"]
    per_rank = max(len(r) for r in orders)
    hop = _forward_hop(problem)
    size_i = 0
    n_windows = 0
    n_sweeps = 0
    fruitless = 0  # sweeps in a row that found nothing better
    focus_from = None  # share of the step time before which no window has improved yet
    last_report = time.monotonic()
    while time.monotonic() < deadline - 0.5 and Deadline(deadline).allows(inst.n, WINDOW_PASSES):
        if fruitless >= len(sizes) * len(WINDOW_OFFSETS):
            if focus_from is None:
                break
            focus_from, fruitless = None, 0  # the focus is exhausted: sweep all of the timeline again
        k = sizes[size_i]
        improved_sweep = False
        length = sim.makespan * min(1.0, k / max(1, per_rank))
        # upright windows until a whole round of sizes has found nothing, then slanted ones
        shear = hop * WINDOW_SHEARS[(fruitless // len(sizes)) % len(WINDOW_SHEARS)]
        reach = abs(shear) * (len(orders) - 1) / 2
        positions = _sweep(sim.makespan, length, n_sweeps, reach, focus_from)
        n_sweeps += 1
        for t in positions:
            if time.monotonic() >= deadline - 0.5 or not Deadline(deadline).allows(inst.n, WINDOW_PASSES):
                break
            free = _window_at(inst, orders, sim, t, length, shear)
            if sum(hi - lo for lo, hi in free) < 2:
                continue
            seconds = min(WINDOW_SOLVE_LIMIT, deadline - time.monotonic())
            answer = solve(orders, sim, best_val, free, seconds, seed + n_windows)
            n_windows += 1
            if time.monotonic() - last_report >= 2.0:
                last_report = time.monotonic()
                report(best_val, f"window {n_windows} ({k}/rank) t={max(t, 0.0):.4g}")
            if answer is None:
                continue
            used = True
            cand = model.canonical_orders(inst, answer)
            cs, csim = _materialize(inst, cand, problem)
            tol = REL * max(1.0, best_val)
            if csim is None or not csim.fits or csim.objective(obj_name) > best_val + tol:
                continue
            orders, sched, sim = cand, cs, csim
            if sim.objective(obj_name) < best_val - tol:
                best_val = sim.objective(obj_name)
                improved_sweep = True
                gained_from = (t - length - reach) / sim.makespan
                focus_from = gained_from if focus_from is None else min(focus_from, gained_from)
                report(best_val, f"window {n_windows} ({k}/rank) t={max(t, 0.0):.4g} improved")
                if _close(best_val, lb):
                    return orders, sched, sim, used
        report(best_val, f"windows of {k}/rank swept")
        size_i = 0 if improved_sweep else (size_i + 1) % len(sizes)
        fruitless = 0 if improved_sweep else fruitless + 1
    return orders, sched, sim, used


def _sweep(end: float, length: float, n_sweeps: int, reach: float = 0.0,
           focus_from: Optional[float] = None) -> list[float]:
    """Window starts every half window over [-reach, end + reach) (a slanted window's middle
    rank must go that far for its outer ranks to reach both ends), edges shifted by this sweep's
    offset, and none before ``focus_from * end`` when focused; every other sweep runs from the
    end (the cool-down first: the objective is decided there)."""
    step = length / 2
    offset = step * WINDOW_OFFSETS[n_sweeps % len(WINDOW_OFFSETS)]
    first = (offset - step if offset > 0 else 0.0) - reach
    positions = [first + i * step for i in range(int(math.ceil((end + reach - first) / step)))]
    if focus_from is not None:
        positions = [t for t in positions if t >= focus_from * end]
    return positions[::-1] if n_sweeps % 2 == 0 else positions


def _forward_hop(problem: Problem) -> float:
    """A microbatch's forward time per rank: all its F's and comms but the last stage's,
    spread over the ranks (with one stage per rank, the mean of F + the comm after it)."""
    hops = [problem.duration(s, "F") + problem.comm(s) for s in range(problem.n_stages - 1)]
    return sum(hops) / max(1, problem.n_ranks - 1)


def _window_solver(inst, problem: Problem, engine: str, lower_bound: float):
    """solve(orders, sim, value, free, seconds, seed) -> new orders or None, for one window."""
    if engine == "cpsat":
        from schedc.solver import cpsat

        def solve(orders, sim, value, free, seconds, seed):
            return cpsat.solve_window(problem, inst, orders, sim, free, seconds, workers=CPSAT_WORKERS, seed=seed,
                                      stale_seconds=WINDOW_STALE_SECONDS)
    else:
        def solve(orders, sim, value, free, seconds, seed):
            return model.solve_model(inst, orders, value, problem.objective, seconds, engine, free=free,
                                     lower_bound=lower_bound, seed=seed).orders
    return solve


def _window_at(inst, orders, sim, t: float, length: float, shear: float = 0.0) -> list[tuple[int, int]]:
    """Per rank r, the positions (lo, hi) of its actions whose simulated start lies in
    [t_r, t_r + length), t_r = t + shear * (r - middle rank)."""
    free = []
    middle = (len(orders) - 1) / 2
    for r, row in enumerate(orders):
        t_r = t + shear * (r - middle)
        starts = [sim.timings[inst.actions[i]].start for i in row]
        lo = next((j for j, s in enumerate(starts) if s >= t_r - TIE), len(row))
        hi = next((j for j, s in enumerate(starts) if s >= t_r + length - TIE), len(row))
        free.append((lo, hi))
    return free


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
        # the baselines built during the compile (cached per problem); none are built anew here
        "same_as_baseline": same_hand_made(result.schedule, matching_baselines(p, Deadline(0.0))) or None,
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
    }


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
