"""The plan's step under a lower peak: the least-memory pass after the search.

Problem: the search minimises the step only, so its schedule sits at whatever peak it found. Method
and cost: :func:`least_memory_at_step` (a bisection on the cap, at most ``MEMORY_TRIES`` compiles);
:func:`with_schedule` reports the schedule found under the user's cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from schedc.core.costs import MemoryLimit
from schedc.core.formatting import format_bytes
from schedc.core.tolerances import REL
from schedc.errors import SchedcError
from schedc.planning.clock import clock_now, compile_within, stop_requested

MEMORY_TRIES = 3  # compiles under a lowered cap in the least-memory pass, at most
MEMORY_TRY_SHARE = 0.025  # of the time limit, for each of them at most


@dataclass(frozen=True)
class LeastMemory:
    """The plan's step under the lowest peak found: ``peak`` (the largest per-rank peak, static bytes
    included), ``found_peak`` (that of the schedule the search ended with), ``compiled`` (the
    compile result that reaches the step at ``peak``; None when the first schedule was kept)."""

    peak: float
    found_peak: float
    compiled: object = field(default=None, repr=False)
    tries: int = 0


def least_memory_at_step(res, end: float, seed: int = 0, say=None, t0: float = 0.0,
                         per_try: float = math.inf) -> LeastMemory:
    """Among schedules of the chosen partition with the plan's step, one with a lower peak.

    Problem: the search minimises the step only, so its schedule sits at whatever peak it found,
    often at the cap, although the same step may fit in much less. Method: the cap is lowered
    from the found peak by one microbatch of the largest stage on the peak rank, and each probe
    compiles the partition under it: an answer with the plan's step (within ``REL``) is kept and
    the next decrement doubles; otherwise the cap it tried becomes the floor and the decrement
    halves. The floor starts at the least any schedule of the partition needs (the cost model's
    least caps: static bytes, buffers, reserve and one microbatch through each rank's stages).
    Cost: at most ``MEMORY_TRIES`` compiles of at most `per_try` seconds each, all before `end`
    (the plan's clock)."""
    problem = res.problem
    found = max(res.sim.peak_memory)
    best = LeastMemory(peak=found, found_peak=found)
    if not math.isfinite(found) or not res.sim.fits:
        return best
    profile = problem.given_profile
    lo, step_down = _memory_floor(problem)
    hi, tries = found, 0
    while tries < MEMORY_TRIES and not stop_requested():
        left = end - clock_now()
        seconds = min(per_try, left / (MEMORY_TRIES - tries) if left / (MEMORY_TRIES - tries) >= 0.3 else left)
        probe = max(lo, hi - step_down)
        if seconds < 0.2 or hi - probe <= 0.001 * hi:
            break
        tries += 1
        again = _compile_under(problem, profile, probe, seconds, seed)
        if again is not None and again.sim.fits and again.value <= res.value * (1 + REL):
            hi, step_down = max(again.sim.peak_memory), 2 * step_down
            best = LeastMemory(peak=hi, found_peak=found, compiled=again)
        else:
            lo, step_down = probe, step_down / 2
        if say:
            say(f"[{clock_now() - t0:6.1f}s] least memory: under {format_bytes(probe)} "
                + ("the same step" if best.compiled is again and again is not None else "a longer step or none"))
        if seconds >= left:
            break
    return replace(best, tries=tries)


def _memory_floor(problem) -> tuple[float, float]:
    """(the least cap any schedule of the problem fits: the largest of the cost model's per-rank
    least caps; one microbatch of the largest stage on that rank)."""
    costs = problem.costs
    need = costs.least_caps
    r = max(range(problem.n_ranks), key=lambda k: need[k])
    return need[r], max(costs.activation(s) for s in costs.stages_of(r))


def _compile_under(problem, profile, cap: float, seconds: float, seed: int):
    """The compile of `problem` under a per-rank cap of `cap` bytes; None when nothing fits."""
    from schedc.solver.problem import Problem

    lowered = Problem.build(problem.n_stages, problem.n_microbatches, n_ranks=problem.n_ranks,
                            placement=problem.placement_name, profile=profile,
                            memory=MemoryLimit(kind="bytes", value=cap), objective=problem.objective)
    try:
        return compile_within(lowered, time_limit=seconds, seed=seed)
    except SchedcError:
        return None


def with_schedule(res, lowered):
    """The chosen partition's compile result with the schedule of `lowered` (the same step under a
    lower cap), simulated and reported under the user's cap; `res` itself when `lowered` is None.
    The status, bound and gap stay: they are about the step, which is the same."""
    from schedc.core.diagnose import limiter
    from schedc.core.simulate import simulate

    if lowered is None:
        return res
    sim = simulate(lowered.schedule, res.problem.profile, res.problem.memory)
    report = dict(res.report)
    predicted = dict(report.get("predicted", {}))
    predicted.update({"makespan": sim.makespan, "span": sim.span, "bubble": sim.bubble,
                      "span_bubble": sim.span_bubble, "bubble_per_rank": list(sim.bubble_per_rank),
                      "peak_memory_per_rank": list(sim.peak_memory), "fits_memory": bool(sim.fits)})
    report["predicted"] = predicted
    report["limiter"] = limiter(sim, res.problem.profile).as_dict()
    report["same_as_baseline"] = None
    return replace(res, schedule=lowered.schedule, sim=sim, report=report)
