"""Warm starts: the hand-made schedules, the two zero-bubble greedies, v-list and the list heuristic, best of.

Problem: before any engine searches, find a good schedule that fits the memory caps quickly,
under the compile's deadline, and keep every peer schedule (the hand-made ones of
schedc.core.baselines and zb-greedy) with its simulation: the report lists them, the plot draws the
best, and the compiler must never return anything worse.

Method: :func:`matching_baselines` builds the hand-made schedules that exist for the problem's
placement (cheapest and most often best first) and zb-greedy (schedc.solver.engines.zb_greedy), simulates
each, and keeps them in the graph's ``memo`` (schedc.solver.graph): one Graph passed from the
warm start to the report builds each once. :func:`warm_start` then runs, for a V with two
stages per rank, schedc.solver.engines.v_list's order, the list heuristic (schedc.solver.engines.heuristic) and
zb-rounds (schedc.solver.engines.zb_rounds), and returns the best under
the problem's objective (a hand-made schedule on a tie), polished by the heuristic's local search
when a hand-made one wins. :class:`WarmStart` is the same as an engine of schedc.solver.engine
(the compiler's row "warm start").

Cost: one simulation per hand-made schedule, eight constructions and simulations per greedy,
and the heuristic's time budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, Union

from schedc.choices import Status
from schedc.core import baselines
from schedc.core.ir import Schedule, v_placement
from schedc.core.simulate import SimResult, simulate
from schedc.core.tolerances import REL
from schedc.errors import ParameterError, SchedcError
from schedc.solver import interrupt
from schedc.solver.bounds.chains import lower_bound
from schedc.solver.deadline import NEVER, Deadline, n_actions, now, observe
from schedc.solver.engine import Incumbent, Result
from schedc.solver.engines import cooldown, heuristic, v_list, zb_greedy, zb_rounds
from schedc.solver.graph import Graph, graph_of
from schedc.solver.problem import Problem

EPS = REL

# the hand-made schedules in the order a warm start under a deadline builds them: those that
# most often win first (ZB-H1 is optimal for makespan at 1p on identical stages)
_BASELINE_ORDER = ("zb-h1", "zb-v", "1f1b", "zb-h2", "v-half", "v-min", "interleaved-zb", "interleaved-1f1b",
                   "dualpipev", "gpipe", "looped-bfs")


@dataclass
class _Built:
    """The baselines built so far for one problem, and whether every one has been tried."""

    items: list
    tried: set
    complete: bool = False


# below this many actions one list construction ends well within a second, Ctrl-C or not
QUICK_ACTIONS = 100_000


def matching_baselines(problem: Union[Problem, Graph], deadline: Optional[Deadline] = None,
                       with_greedy: bool = True) -> list[tuple[str, Schedule, SimResult]]:
    """The hand-made schedules (schedc.core.baselines) that exist for this problem's stages, ranks,
    placement and microbatches, and zb-greedy, each with its simulation (fitting the memory caps
    or not). Built once per graph (kept in its ``memo``): the warm start, the report and the plot
    all ask for them, so pass the same Graph (a Problem gets a graph, and baselines, of its own).
    Under a `deadline` only those built before it passes (a later call builds the rest);
    ``with_greedy=False`` leaves zb-greedy (eight simulations) for a later call."""
    g = graph_of(problem)
    built = g.memo.setdefault("baselines", _Built([], set()))
    if not built.complete:
        built.complete = _build_baselines(g, built, deadline or NEVER, with_greedy)
    return [b for name in _names() for b in built.items if b[0] == name]


def _names() -> list[str]:
    """Every peer schedule's name, in the order the report lists them."""
    return list(baselines.BASELINE_NAMES) + [zb_greedy.NAME]


def build_baselines(problem: Union[Problem, Graph]) -> list[tuple[str, Schedule, SimResult]]:
    """What :func:`matching_baselines` returns, built and simulated afresh."""
    built = _Built([], set())
    _build_baselines(graph_of(problem), built, NEVER)
    return [b for name in _names() for b in built.items if b[0] == name]


def _build_baselines(g: Graph, built: _Built, deadline: Deadline, with_greedy: bool = True) -> bool:
    """Add to `built` what is missing, until `deadline`; True when every one has been tried."""
    problem = g.problem
    pname = problem.placement_name
    names = [n for n in _BASELINE_ORDER if n in baselines.BASELINE_NAMES]
    names += [n for n in baselines.BASELINE_NAMES if n not in names]
    for name in names + ([zb_greedy.NAME] if with_greedy else []):
        if name in built.tried:
            continue
        if any(sim.fits for _, _, sim in built.items) or interrupt.requested():
            # one pass for a hand-made schedule; zb-greedy builds and simulates eight
            passes = 2 * len(zb_greedy.ALL_FLAGS) if name == zb_greedy.NAME else 1
            if not deadline.allows(n_actions(problem.n_stages, problem.n_microbatches), passes):
                return False  # would not end in time
        # else: past the deadline too, until one hand-made schedule that fits is there (the
        # answer of last resort; cheap ones come first)
        if name == zb_greedy.NAME:
            # the zero-bubble paper's greedy: a peer, so a baseline too
            res = zb_greedy.ZbGreedy().run(g, None, deadline)
            if not res.answered and zb_greedy.supports(g) and deadline.expired():
                return False
            built.tried.add(name)
            if res.answered:
                built.items.append((zb_greedy.NAME, res.schedule, res.sim))
            continue
        built.tried.add(name)
        try:
            sched = baselines.make_baseline(
                name, problem.n_stages, problem.n_microbatches, n_ranks=problem.n_ranks,
                placement=pname if pname in ("loop", "v") else None,
            )
        except (SchedcError, ValueError, TypeError):
            continue
        if tuple(sched.placement) != tuple(problem.placement) or sched.n_microbatches != problem.n_microbatches:
            continue
        try:
            t = time.perf_counter()
            sim = simulate(sched, problem.profile, problem.memory)
            observe(time.perf_counter() - t, n_actions(problem.n_stages, problem.n_microbatches))
        except SchedcError:
            continue
        built.items.append((name, sched, sim))
    return with_greedy


def feasible_baselines(problem: Union[Problem, Graph], deadline: Optional[Deadline] = None,
                       with_greedy: bool = True) -> list[tuple[str, Schedule, SimResult]]:
    """The matching hand-made schedules that fit the problem's memory caps."""
    return [(name, sched, sim) for name, sched, sim in matching_baselines(problem, deadline, with_greedy) if sim.fits]


def warm_start(problem: Union[Problem, Graph], time_budget: float = 1.0, deadline: Optional[Deadline] = None,
               on_candidate: Optional[Callable[[str, float], None]] = None) -> tuple[Schedule, SimResult, str]:
    """The best of the heuristic, the zero-bubble authors' round greedy (schedc.solver.engines.zb_rounds)
    and the feasible hand-made schedules under problem.objective (a hand-made one on a tie):
    (schedule, its simulation, source). When a hand-made schedule wins, its backwards are split
    into I + W (never worse: I ends earlier, W ends when B did, memory drops no later) and the
    local search polishes it with what is left of `time_budget`; the source then reads e.g.
    'zb-h1+local-search' if that helped, else the baseline's name (the original is returned).
    Before that, unless the best is proven, its cool-down is re-listed (schedc.solver.engines.cooldown)
    and kept when shorter: the source then ends in '+cooldown' (e.g. 'zb-v+cooldown').

    Under a `deadline` (schedc.solver.deadline) the hand-made schedules come first, then the
    greedy families and the heuristic, each abandoned when the deadline passes; what finished
    is compared. When nothing that fits finished, SchedcError says so in one line.
    `on_candidate(source, value)` hears of each family's best as it finishes (progress lines)."""
    t_start = now()
    g = graph_of(problem)
    hard = deadline or NEVER
    heuristic.check_memory_feasible(g.problem)
    tell = on_candidate or (lambda source, value: None)
    bound = lower_bound(g)
    best, proven = _best_of_families(g, hard, time_budget, tell, bound)
    if proven:
        return best
    best = _relisted_cooldown(g, best, hard, bound, tell)
    if best[2] in ("heuristic", zb_rounds.NAME) or best[2].startswith(("heuristic+", zb_rounds.NAME + "+")):
        return best
    end = t_start + time_budget if deadline is None else min(t_start + time_budget, now() + hard.left())
    return _polished(g, best, end, hard)


def _best_of_families(g: Graph, hard: Deadline, time_budget: float, tell: Callable[[str, float], None],
                      bound: float) -> tuple[tuple[Schedule, SimResult, str], bool]:
    """The best that fits of every family that finished before `hard` (:func:`warm_start`), and
    whether `bound` proves it (then the families after it are not built)."""
    obj = g.problem.objective
    # the cheap ones first (under a deadline, what gets built in time), zb-greedy's eight last
    fitting = feasible_baselines(g, hard, with_greedy=False)
    if fitting:
        name, first, sim = fitting[0]
        for b in fitting[1:]:  # the first of equals, as the comparison below picks it
            if b[2].objective(obj) < sim.objective(obj) - EPS:
                name, first, sim = b
        tell(name, sim.objective(obj))
        if sim.objective(obj) <= bound + EPS * max(1.0, bound):
            return (first, sim, name), True  # proven optimal: nothing can beat it (and ties go to it anyway)
    listed = _v_list(g, hard)
    if listed is not None:
        tell(v_list.NAME, listed[1].objective(obj))
        if listed[1].objective(obj) <= bound + EPS * max(1.0, bound):
            return (*listed, v_list.NAME), True  # proven optimal (a hand-made one there would have returned)
    found = _found(heuristic.ListHeuristic(time_budget=time_budget * 0.6).run(g, None, hard))
    best = (*found, "heuristic") if found is not None else None
    if best is not None:
        tell("heuristic", best[1].objective(obj))
    rounds = _found(zb_rounds.ZbRounds().run(g, None, hard))
    if rounds is not None:
        tell(zb_rounds.NAME, rounds[1].objective(obj))
    greedy_best = [b for b in feasible_baselines(g, hard) if b[0] not in {f[0] for f in fitting}]
    if greedy_best:
        tell(greedy_best[0][0], greedy_best[0][2].objective(obj))
    if rounds is not None and (best is None or rounds[1].objective(obj) < best[1].objective(obj) - EPS):
        best = (*rounds, zb_rounds.NAME)
    if listed is not None:
        if best is None or listed[1].objective(obj) < best[1].objective(obj) - EPS:
            best = (*listed, v_list.NAME)
    for name, s, sim in feasible_baselines(g, hard):
        # a tie goes to the hand-made schedule: in torch's runtime its regular order pays no
        # more per-action overhead and transfer waiting than a list schedule of the same value
        margin = EPS if best is not None and best[2] in ("heuristic", zb_rounds.NAME, v_list.NAME) else -EPS
        if best is None or sim.objective(obj) < best[1].objective(obj) + margin:
            best = (s, sim, name)
    return _or_last_resort(g, best), False


def _found(res: Result) -> Optional[tuple[Schedule, SimResult]]:
    """The schedule and its simulation of an engine that answered, else None."""
    if not res.answered:
        return None
    assert res.schedule is not None and res.sim is not None, "an engine that answers gives both"
    return res.schedule, res.sim


def _or_last_resort(g: Graph, best: Optional[tuple[Schedule, SimResult, str]]) -> tuple[Schedule, SimResult, str]:
    """`best`; where nothing that fits finished: after Ctrl-C, one quick construction (or
    KeyboardInterrupt), else SchedcError in one line."""
    problem = g.problem
    if best is None and interrupt.requested() and n_actions(problem.n_stages, problem.n_microbatches) <= QUICK_ACTIONS:
        # Ctrl-C before anything that fits was found: one construction takes well under a second
        # here, and a schedule to write beats none
        sched = heuristic.heuristic_schedule(g, time_budget=0.0)
        assert sched is not None, "without a deadline the heuristic finishes its construction"
        best = (sched, simulate(sched, problem.profile, problem.memory), "heuristic")
    if best is None and interrupt.requested():
        raise KeyboardInterrupt
    if best is None:
        raise ParameterError(
            "time_limit", f"no schedule that fits {{name:memory}}{problem.memory} was found before the time limit ("
            f"{problem.n_stages} stages x {problem.n_microbatches} microbatches; no hand-made schedule fits): "
            f"give a longer {{param}}")
    return best


def _relisted_cooldown(g: Graph, best: tuple[Schedule, SimResult, str], hard: Deadline, bound: float,
                       tell: Callable[[str, float], None]) -> tuple[Schedule, SimResult, str]:
    """`best` with its cool-down re-listed (one construction and one simulation) where that is
    shorter and `bound` does not prove it already: on slow links it is where ZB-V loses most
    (schedc.solver.engines.cooldown)."""
    problem, obj = g.problem, g.problem.objective
    if best[1].objective(obj) > bound + EPS * max(1.0, bound) and \
            hard.allows(n_actions(problem.n_stages, problem.n_microbatches), 3):
        cooled = cooldown.relist_cooldown(g, best[0], hard.expired, bound)
        if cooled is not None and cooled[1].objective(obj) < best[1].objective(obj) - EPS:
            best = (*cooled, f"{best[2]}+{cooldown.NAME}")
            tell(best[2], best[1].objective(obj))
    return best


def _polished(g: Graph, best: tuple[Schedule, SimResult, str], end: float,
              hard: Deadline) -> tuple[Schedule, SimResult, str]:
    """`best` (a hand-made schedule) split and polished by the heuristic's local search until
    `end`, where that is shorter and fits; else `best` itself."""
    problem, obj = g.problem, g.problem.objective
    polished = heuristic.polish(g, best[0], best[2], end, hard)
    if polished is not None and polished[1] < best[1].objective(obj) - EPS:
        sched = polished[0]
        sim = simulate(sched, problem.profile, problem.memory)
        if sim.fits and sim.objective(obj) < best[1].objective(obj) - EPS:
            return sched, sim, f"{best[2]}+local-search"
    return best


@dataclass
class WarmStart:
    """:func:`warm_start` as an engine (schedc.solver.engine): its answer, always one that fits
    (else SchedcError, as there), with the family that found it as the Result's ``source``. It
    starts from nothing: the incumbent is ignored."""

    time_budget: float = 1.0
    on_candidate: Optional[Callable[[str, float], None]] = None
    name: str = "warm start"

    def run(self, graph: Graph, incumbent: Optional[Incumbent], deadline: Deadline) -> Result:
        sched, sim, source = warm_start(graph, self.time_budget, deadline, self.on_candidate)
        return Result(schedule=sched, sim=sim, status=Status.FEASIBLE, source=source)


def _v_list(g: Graph, deadline: Deadline) -> Optional[tuple[Schedule, SimResult]]:
    """schedc.solver.engines.v_list's order with its simulation, where the problem is a V with two
    stages per rank and the order fits the caps (None otherwise or past the deadline)."""
    problem = g.problem
    r, n, m = problem.n_ranks, problem.n_stages, problem.n_microbatches
    if n != 2 * r or tuple(problem.placement) != tuple(v_placement(n, r)) or not deadline.allows(n_actions(n, m), 2):
        return None
    sched = v_list.v_list_schedule(r, m)
    sim = simulate(sched, problem.profile, problem.memory)
    return (sched, sim) if sim.fits else None
