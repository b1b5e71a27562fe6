"""Activation checkpointing as a choice of the plan (``schedc plan --ac auto``).

Problem: checkpointing trades recompute (each checkpointed layer's forward again inside I) for
memory; under a tight cap the fastest plan may checkpoint some stages and not others. Method and
cost: :func:`plan_ac`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence, Union

from schedc.core.costs import Profile
from schedc.errors import SchedcError
from schedc.core.partition import PLACEMENTS, n_stages_for, partition_bound
from schedc.plan.clock import _counting_work, _now, stop_requested
from schedc.plan.comparisons import torchtitan_rows
from schedc.plan.limiter import plan_limiter
from schedc.plan.planner import _on_work_clock, plan
from schedc.plan.problem import problem_for
from schedc.plan.report import build_plan_report
from schedc.plan.request import parse_cap
from schedc.plan.result import PlanResult
from schedc.core.tolerances import REL


AC_MODES = ("none", "selective", "full")  # fastest first: each keeps less and recomputes more inside I
AC_SHARE = 0.75  # of the time limit, for one plan per global mode; the rest for the per-stage choice
TORCHTITAN_AC = "selective"  # what torchtitan 0.3.0's llama3 configs launch with


@dataclass(frozen=True)
class ACChoice:
    """The checkpointing the plan chose: ``chosen`` (one mode for the whole model, or one per
    stage), the best step of each global mode (None: nothing fits), and the per-stage choice on
    the best global plan's partition (``per_stage``: modes and step; None when no mix was tried)."""

    chosen: Union[str, list]
    global_steps: dict
    per_stage: Optional[dict] = None

    def as_dict(self) -> dict:
        return {"chosen": self.chosen, "global": self.global_steps, "per_stage": self.per_stage}


def plan_ac(profiles: dict, *, time_limit: float = 60.0, progress: Optional[Callable[[str], None]] = None,
            **kwargs) -> PlanResult:
    """The plan with the activation checkpointing that gives the shortest step under the cap.

    Problem: checkpointing trades recompute (each checkpointed layer's forward again inside I) for
    memory; under a tight cap the fastest plan may checkpoint some stages and not others.
    `profiles` maps modes (``none``, ``selective``, ``full``) to per-unit profiles of the same
    units. Method: one :func:`plan` per mode (``AC_SHARE`` of the time, shared), then, on the
    partition of the best of them, a greedy per-stage choice: each stage in turn, those on ranks
    with the most room first, is moved to a faster mode when a heuristic schedule
    (schedc.solver.engines.warm.warm_start) of the mixed profile fits and is shorter; the best mix is
    compiled with the time left and kept when it beats the best global mode. torchtitan and NeMo
    launch one mode for the whole model; schedc's runtime applies one per stage. Cost: the time
    limit; the greedy step takes one heuristic run per stage and faster mode."""
    if kwargs.get("budget") == "work" and not _counting_work():
        return _on_work_clock(plan_ac, time_limit, profiles=profiles, progress=progress, **kwargs)
    say = progress or (lambda line: None)
    modes = [m for m in AC_MODES if m in profiles]
    if not modes:
        raise SchedcError(f"--ac auto needs a profile per mode ({', '.join(AC_MODES)}); got {', '.join(profiles)}")
    t0 = _now()
    results, errors = {}, {}
    for k, mode in enumerate(modes):
        share = (t0 + AC_SHARE * time_limit - _now()) / (len(modes) - k)
        floor = _mode_floor(profiles[mode], kwargs)
        best_so_far = min((r.value for r in results.values()), default=math.inf)
        if floor >= best_so_far * (1 - REL):  # no plan in this mode can be shorter: its time goes to the rest
            errors[mode] = f"cannot beat {best_so_far:.6g} s (its bound over partitions is {floor:.6g} s)"
            say(f"[{_now() - t0:6.1f}s] activation checkpointing {mode}: {errors[mode]}")
            continue
        say(f"[{_now() - t0:6.1f}s] activation checkpointing {mode}: {share:.1f}s")
        try:
            results[mode] = plan(profile=profiles[mode], time_limit=max(share, 0.5), progress=progress, **kwargs)
        except SchedcError as e:
            errors[mode] = str(e)
    if not results:
        raise SchedcError(next(reversed(errors.values())))
    best_mode = min(results, key=lambda m: results[m].value)
    best = results[best_mode]
    steps = {m: (results[m].value if m in results else None) for m in modes}
    per_stage = None
    if len(modes) > 1 and not stop_requested():
        per_stage = _per_stage_choice(best, best_mode, profiles, modes, t0 + time_limit, say, t0)
    notes = list(best.notes) + [f"activation checkpointing {m}: {e}" for m, e in errors.items()]
    if per_stage is not None and per_stage[0].value < best.value * (1 - REL):
        compiled, units, stage_modes = per_stage
        choice = ACChoice(stage_modes, steps, {"modes": stage_modes, "step": compiled.value})
        out = replace(best, compiled=compiled, units=units, least_memory=None, notes=notes)
    else:
        mix = None if per_stage is None else {"modes": per_stage[2], "step": per_stage[0].value}
        choice = ACChoice(best_mode, steps, mix)
        out = replace(best, notes=notes)
    rows = list(out.comparisons)
    if TORCHTITAN_AC in profiles and TORCHTITAN_AC != best_mode:
        for row in torchtitan_rows(profiles[TORCHTITAN_AC], out.compiled.problem.n_ranks,
                                   out.compiled.problem.n_microbatches, out.compiled.problem.memory,
                                   out.compiled.problem.objective):
            rows.append(replace(row, split=f"torchtitan default, {TORCHTITAN_AC} AC"))
    out = replace(out, comparisons=rows, ac=choice, solve_time=_now() - t0,
                  assumes={**out.assumes, "activation_checkpoint": choice.chosen})
    out = replace(out, limiter=plan_limiter(out, max(out.compiled.sim.memory_limit)))
    return replace(out, report=build_plan_report(out))


def _heuristic_step(profiles, counts, stage_modes, problem, end):
    """(step, warm start) of the heuristic warm start on the mixed profile; None if none fits."""
    from schedc.solver.engines.warm import warm_start

    p = problem_for(mixed_units(profiles, counts, stage_modes), counts, problem.placement_name, problem.n_ranks,
                 problem.n_microbatches, problem.memory, problem.objective)
    try:
        warm = warm_start(p, time_budget=min(0.3, max(0.05, end - _now())))
    except SchedcError:
        return None
    return (warm[1].objective(problem.objective), warm) if warm[1].fits else None


def _mode_floor(profile: Profile, kwargs: dict) -> float:
    """The least step any plan with this mode's profile can reach (schedc.core.partition's bound over
    partitions, per placement tried); inf when no partition fits, 0 when it cannot be told."""
    try:
        limit = parse_cap(kwargs.get("memory", "80GiB"))
        cap = math.inf if limit.kind == "none" else limit.value
        ranks, M = kwargs["ranks"], kwargs["microbatches"]
        wanted = list(PLACEMENTS) if kwargs.get("placement", "auto") == "auto" else [kwargs["placement"]]
        return min(partition_bound(profile, ranks, M, cap, pl, kwargs.get("objective", "makespan")).value
                   for pl in wanted if n_stages_for(pl, ranks) <= profile.n_stages)
    except (SchedcError, KeyError, ValueError):
        return 0.0  # plan itself says what is wrong


def mixed_units(profiles: dict, counts: Sequence[int], stage_modes: Sequence[str]) -> Profile:
    """The per-unit profile whose units in stage s come from ``profiles[stage_modes[s]]``."""
    base = next(iter(profiles.values()))
    stages, start = [], 0
    for n, mode in zip(counts, stage_modes):
        stages += profiles[mode].stages[start:start + n]
        start += n
    return base.model_copy(update={"stages": stages,
                                   "assumes": {**(base.assumes or {}), "activation_checkpoint": list(stage_modes)}})


def _per_stage_choice(best: PlanResult, best_mode: str, profiles: dict, modes: list, end: float, say, t0):
    """(compile result, mixed per-unit profile, modes per stage) of the greedy per-stage choice on
    `best`'s partition (plan_ac): moves are judged by the heuristic warm start's step
    (schedc.solver.engines.warm), each against the heuristic step of the mix so far, and the final mix is
    compiled; None when no move helped or no time is left."""
    from schedc.solver.compile import compile_problem

    problem = best.compiled.problem
    counts, pl = best.counts, best.placement
    room = [lim - pk for pk, lim in zip(best.compiled.sim.peak_memory, best.compiled.sim.memory_limit)]
    # faster modes where a rank has room, first on the roomiest ranks; where it has none, stages on
    # the tightest ranks checkpoint more, which can free room for more microbatches in flight
    k = modes.index(best_mode)
    moves = [(s, m) for s in sorted(range(len(counts)), key=lambda s: -room[problem.placement[s]]) for m in modes[:k]]
    moves += [(s, m) for s in sorted(range(len(counts)), key=lambda s: room[problem.placement[s]])
              for m in modes[k + 1:]]
    stage_modes = [best_mode] * len(counts)
    current = _heuristic_step(profiles, counts, stage_modes, problem, end)
    if current is None:
        return None
    for s, mode in moves:
        if _now() > t0 + (end - t0) * 0.9 or stop_requested():
            break
        if stage_modes[s] != best_mode:
            continue
        trial = stage_modes[:s] + [mode] + stage_modes[s + 1:]
        found = _heuristic_step(profiles, counts, trial, problem, end)
        if found is not None and found[0] < current[0] * (1 - REL):
            stage_modes, current = trial, found
            say(f"[{_now() - t0:6.1f}s] stage {s} with activation checkpointing {mode}: heuristic step "
                f"{found[0]:.6g}")
    if stage_modes == [best_mode] * len(counts):
        return None
    units = mixed_units(profiles, counts, stage_modes)
    p = problem_for(units, counts, pl, problem.n_ranks, problem.n_microbatches, problem.memory, problem.objective)
    compiled = compile_problem(p, time_limit=max(0.5, end - _now()), warm=current[1])
    return compiled, units, stage_modes
