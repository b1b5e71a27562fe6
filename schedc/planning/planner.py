"""The plan's steps in order: :func:`plan` (the package's docstring says what each step does).

Problem, method and cost: :func:`plan`. The steps live in their own modules (schedc.planning.search,
.compiles, .certificate, .least_memory, .comparisons, .limiter, .report); this one passes the
request and the best answer so far between them.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Optional, Union

from schedc.core.costs import MemoryLimit, Profile
from schedc.errors import ParameterError, literal, python_spelling
from schedc.planning.certificate import certified_bounds
from schedc.planning.clock import Phases, clock_now, stop_requested, work_budget_on
from schedc.planning.comparisons import compare_splits, torchtitan_rows
from schedc.planning.compiles import adopt_faster_row, compile_bound_setter, final_compile, short_compiles
from schedc.planning.least_memory import MEMORY_TRY_SHARE, least_memory_at_step, with_schedule
from schedc.planning.limiter import plan_limiter
from schedc.planning.problem import INTERLEAVED, is_tight, no_partition_holds
from schedc.planning.report import build_plan_report
from schedc.planning.request import PlanRequest, check_types
from schedc.planning.result import PlanResult
from schedc.planning.search import (
    SEARCH_END,
    SEARCH_SHARE,
    bounds_over_partitions,
    busiest_rank_work_bound,
    interleaved_bound,
    screened_candidates,
)

FINAL_END = 0.9  # of the time limit: the final compile ends here when the least-memory pass follows it
TAIL_SHARE = 0.03  # of the time limit, kept for the comparisons and the report


@python_spelling
def plan(*, profile: Profile, ranks: int, microbatches: int, memory: Union[str, MemoryLimit] = "80GiB",
         placement: str = "auto", objective: str = "makespan", time_limit: float = 60.0,
         progress: Optional[Callable[[str], None]] = None, seed: int = 0, source: str = "profile",
         least_memory: bool = True, budget: str = "time") -> PlanResult:
    """The best partition + placement + schedule found in `time_limit` seconds (module docstring).

    Parameters
    ----------
    profile : Profile
        A per-unit profile: one entry per unit of the model in model order (embedding, each
        layer, norm + head + loss), ideally each with ``modules`` (the names handed to the
        frameworks); ``schedc profile --units`` or :func:`schedc.model_costs.unit_profile` make one.
    ranks, microbatches : int
        Pipeline ranks R and microbatches per step M.
    memory : str or MemoryLimit
        The per-rank cap in bytes, static bytes included (``"80GiB"``), or ``"none"``; ``Kp`` is
        refused (it is relative to one partition's 1F1B).
    placement : "loop", "v" or "auto"
        One stage per rank, two in a V, or both tried and the better kept.
    objective : "makespan" or "span"
    time_limit : float
        Seconds for the whole search, compiles included.
    progress : callable, optional
        Called with one line per step of the search.
    budget : "time" or "work"
        What `time_limit` counts: wall-clock seconds, or work units (schedc.solver.deadline: the
        solvers' deterministic time and counted constructions, and here a fixed charge per
        partition bounded, listed or screened), so that the same inputs give the same plan on any
        machine; the two-rank and block relaxations, which run on the wall clock, are left out.
    least_memory : bool
        After the search, look for a schedule of the chosen partition with the same step and a
        lower peak (``least_memory_at_step``, the last 10% of the time) and report the margin.

    Returns
    -------
    PlanResult
        ``counts`` (units per stage), ``partition`` (module names per stage), ``placement``,
        ``schedule``, ``value``, ``profile`` (the merged per-stage profile), ``bound`` (over
        every partition and schedule under the cap), ``gap``, ``comparisons``, ``report``.

    Raises
    ------
    SchedcError
        A bad argument, a unit that alone exceeds the cap, or a cap no partition fits (each
        names the smallest cap that works).

    Examples
    --------
    >>> import schedc
    >>> from schedc.library import transformer_profile
    >>> units = transformer_profile(6, layers=6, hidden=256, vocab=32000, seq=256)  # one unit per layer
    >>> res = schedc.plan(profile=units, ranks=2, microbatches=4, memory="80GiB", placement="loop",
    ...                   time_limit=4)
    >>> sum(res.counts), len(res.counts), res.value >= res.bound
    (6, 2, True)
    """
    if budget not in ("time", "work"):
        raise ParameterError("budget", f"{{param}} must be time or work, got {literal(repr(budget))}")
    check_types(profile, ranks, microbatches, time_limit, progress)
    if budget == "work" and not work_budget_on():
        return on_work_clock(plan, time_limit, profile=profile, ranks=ranks, microbatches=microbatches,
                              memory=memory, placement=placement, objective=objective, progress=progress, seed=seed,
                              source=source, least_memory=least_memory, budget="work")
    t0 = clock_now()
    say = progress or (lambda line: None)
    phase = Phases()
    with phase("request"):
        req = PlanRequest.build(profile=profile, ranks=ranks, microbatches=microbatches, memory=memory,
                                placement=placement, objective=objective, time_limit=time_limit, source=source)
    units, limit, cap, placements, notes = req.units, req.limit, req.cap, req.placements, req.notes

    with phase("bounds"):
        searches, bounds = bounds_over_partitions(profile, units, ranks, microbatches, limit, cap, objective,
                                                   placements, notes, say, t0, time_limit)
        starts = [(pl, pb.counts) for pl, pb in searches]
        interleaved = math.inf
        if placement == "auto" and ranks > 1 and 2 * ranks <= profile.n_stages and not stop_requested():
            interleaved = interleaved_bound(profile, units, ranks, microbatches, cap, objective)
            if math.isfinite(interleaved):
                bounds[INTERLEAVED] = interleaved
                starts.append((INTERLEAVED, None))
                say(f"[{clock_now() - t0:6.1f}s] {INTERLEAVED}: bound over partitions {interleaved:.6g}")
    pools: dict = {}
    forced: dict = {}
    # (placement, counts) -> best_hand_made's (name, step) of that split, filled by the screening
    memo: dict[tuple[str, tuple[int, ...]], tuple[Optional[str], Optional[float]]] = {}
    with phase("search"):
        for pl, start in starts:
            pools[pl], forced[pl] = screened_candidates(profile, units, pl, start, ranks, microbatches, limit, cap,
                                                         objective, SEARCH_SHARE * time_limit / len(starts), say, t0,
                                                         hard=t0 + SEARCH_END * time_limit, memo=memo)
    if not any(pools.values()):
        raise no_partition_holds(profile, searches, ranks, microbatches, limit, objective)
    paired: dict = {}  # (placement, counts) -> a two-rank bound at least the best step when it was found
    with phase("short compiles"):
        best, candidates, results = short_compiles(profile, pools, forced, ranks, microbatches, limit, objective,
                                                    time_limit, seed, paired, say, t0)
    theta = best[0] if best[1] is not None else math.inf
    proven = best[1] is not None and best[1].status == "optimal"  # for its partition: the final compile is done
    scored = {pl: min(c[0] for c in pool) for pl, pool in pools.items() if pool}  # the least own bound seen
    with phase("certificate"):
        bounds, certified, setters, reached = certified_bounds(profile, searches, ranks, microbatches, limit, cap,
                                                                objective, theta, proven, time_limit, paired,
                                                                is_tight(best), say, t0, scored,
                                                                end=FINAL_END if least_memory else 0.9)
    if math.isfinite(interleaved):  # no dynamic program lists its partitions: its bound stays the relaxations'
        bounds[INTERLEAVED] = interleaved
    final_share = FINAL_END if least_memory else 1.0
    with phase("final compiles"):
        best = compile_bound_setter(profile, best, setters, candidates, results, ranks, microbatches, limit,
                                     objective, final_share * time_limit, seed, say, t0, reached)
        res, pl, counts = final_compile(profile, best, ranks, microbatches, limit, objective,
                                         final_share * time_limit, seed, say, t0)
    with phase("comparisons"):
        compared = list(pools)  # the placements searched: a V cut in step 1 gets no new program here
        comparisons = compare_splits(profile, units, ranks, microbatches, limit, cap, objective, compared, memo)
        comparisons += torchtitan_rows(profile, ranks, microbatches, limit, objective)
        res, pl, counts = adopt_faster_row(profile, res, pl, counts, comparisons, ranks, microbatches, limit,
                                            objective, seed, **({} if placement == "auto" else {"placements": compared}))
        if pl not in bounds:  # a row of a placement the search left out (or was stopped in) won
            bounds[pl] = busiest_rank_work_bound(units, ranks, microbatches)
            notes.append(f"placement {pl}: not searched; a row of it won, bounded by the busiest rank's work only")
    lowered = None
    with phase("least memory"):
        if least_memory and not stop_requested():
            lowered = least_memory_at_step(res, t0 + (1 - TAIL_SHARE) * time_limit, seed, say, t0,
                                           per_try=max(0.5, MEMORY_TRY_SHARE * time_limit))
            res = with_schedule(res, lowered.compiled)
    out = PlanResult(compiled=res, units=profile, counts=list(counts), placement=pl,
                     bound=min(min(bounds.values()), res.value), bounds=bounds, certified=certified,
                     comparisons=comparisons, candidates=candidates, notes=notes, solve_time=clock_now() - t0,
                     interrupted=stop_requested(), least_memory=lowered)
    with phase("limiter, report"):
        out = replace(out, limiter=plan_limiter(out))
        out = replace(out, report=build_plan_report(out))
    say(phase.line(work_budget_on()))
    return out


def on_work_clock(fn, time_limit: float, **kwargs) -> PlanResult:
    """`fn` (plan or plan_ac) run on one work clock for `time_limit` work units
    (schedc.solver.deadline.counting_work); the result says so, and whether the wall-clock
    safety net cut it."""
    from schedc.solver.deadline import counting_work

    _load_solvers()
    with counting_work(time_limit) as clock:
        out = fn(time_limit=time_limit, **kwargs)
    out = replace(out, budget="work", cut_by_wall=clock.cut_by_wall)
    return replace(out, report=build_plan_report(out))


def _load_solvers() -> None:
    """Import the compiler and CP-SAT before a work clock starts: loading them (about 2 s of wall
    clock, more on a busy machine) is no work of the plan's, and on the work clock's wall it would
    put the wall 2 s ahead of the work charged, where the wall takes over (schedc.planning.clock)."""
    import importlib

    import schedc.solver.compile  # noqa: F401

    try:
        importlib.import_module("ortools.sat.python.cp_model")
    except ImportError:  # CP-SAT is optional: the compiler runs without it
        pass
