"""The plan's report (``plan.json``) and its hand-off to the frameworks.

Problem: one dictionary holds what the plan chose, how far it is from the bound over partitions,
the comparisons, the run it assumes and each framework's settings. Method: the chosen partition's
compile report plus the plan's own fields (docs/design.md, "The plan"); the frameworks' settings
come from schedc.frameworks' registry. Cost: linear in the report.
"""

from __future__ import annotations

import math
from typing import Optional

from schedc.planning.result import PlanResult


def framework_settings(result: PlanResult, csv: str = "plan.csv", assumes: Optional[dict] = None) -> dict:
    """What to give each framework (schedc.frameworks.REGISTRY) to launch the plan."""
    from schedc.frameworks import framework_settings as settings_of

    return settings_of(result, csv, assumes)


def nemo_yaml(settings: dict) -> str:
    """NeMo's block of :func:`framework_settings` as YAML text."""
    from schedc.frameworks import nemo_yaml as yaml_of

    return yaml_of(settings)


def build_plan_report(result: PlanResult, csv: str = "plan.csv") -> dict:
    """The compile report of the chosen partition plus the plan's own fields (docs/design.md, "The plan")."""
    report = dict(result.compiled.report)
    steps = [c.value for c in result.comparisons if c.value is not None]
    best = min(steps, default=None)  # the fastest comparison row's step
    report["plan"] = {
        "placement": result.placement,
        "units_per_stage": result.counts,
        "step": result.value,
        "bound_over_partitions": result.bound,
        "bound_per_placement": result.bounds,
        "partitions_bounded_one_by_one": result.certified,
        "gap_over_partitions": result.gap,
        "comparisons": [c.as_dict() for c in result.comparisons],
        "margin_over_best_comparison": (None if best is None else (best - result.value) / best),
        "candidates": result.candidates,
        "notes": result.notes,
        "solve_time": result.solve_time,
        "status": plan_status(result),
        "budget": {"mode": result.budget, "cut_by_wall_clock": result.cut_by_wall,
                   "reproducible": result.budget == "work" and not result.cut_by_wall},
        "limiter": None if result.limiter is None else result.limiter.as_dict(),
        "least_memory": _least_memory_dict(result),
        "activation_checkpoint": None if result.ac is None else result.ac.as_dict(),
        "step_with_optimizer_and_collectives": step_outside(result),
    }
    if result.offload is not None:  # --offload auto (schedc.planning.offload); absent otherwise
        report["memory_actions"] = list(report.get("memory_actions", []))
        report["offload"] = result.offload
        report["plan"]["bound_assumes"] = result.offload["lower_bound_assumes"]
    report["assumes"] = plan_assumes(result)
    report["partition"] = result.partition
    report["profile"] = result.profile.model_dump(mode="json", exclude_none=True)
    report["frameworks"] = framework_settings(result, csv)
    return report


def step_outside(result: PlanResult) -> Optional[dict]:
    """The plan's step plus the largest rank's optimizer and exposed FSDP2 collectives, counted
    from the unit profile's ``assumes["step_outside_actions"]`` (:func:`schedc.model_costs.step.step_with_extras`);
    None for a profile that has none (a measured one)."""
    from schedc.model_costs.step import step_with_extras

    schedule = result.schedule
    order = [[a.stage for a in schedule.actions(r)] for r in range(schedule.n_ranks)]
    return step_with_extras(result.value, result.units.assumes, result.counts, order)


def plan_status(result: PlanResult) -> str:
    """'optimal' only when no partition and schedule can be shorter (the gap over partitions
    within the compiler's own tolerance, ``schedc.core.tolerances.PROVEN``); else what the chosen
    partition's compile proved. A per-stage checkpointing choice is bounded on its own partition
    only, so it is at most 'optimal for its partition and checkpointing'."""
    from schedc.core.tolerances import PROVEN

    if result.ac is not None and not isinstance(result.ac.chosen, str):  # its bound covers one partition
        return "optimal for its partition and checkpointing" if result.compiled.status == "optimal" \
            else result.compiled.status
    if result.gap <= PROVEN:
        return "optimal"
    if result.compiled.status == "optimal":
        return "optimal for its partition"
    return result.compiled.status


def _least_memory_dict(result: PlanResult) -> Optional[dict]:
    lm = result.least_memory
    if lm is None:
        return None
    caps = result.compiled.sim.memory_limit
    cap = max(caps) if caps else math.inf
    return {"peak": lm.peak, "found_peak": lm.found_peak, "tries": lm.tries,
            "margin_to_cap": None if math.isinf(cap) else cap - lm.peak}


def plan_assumes(result: PlanResult) -> dict:
    """The profile's ``assumes`` (what its numbers took about the run) merged with the plan's own
    choices (microbatches, placement, activation checkpointing where the plan chose it)."""
    out = dict(result.units.assumes or {})
    if result.units.microbatch_size and "microbatch_size" not in out:
        out["microbatch_size"] = result.units.microbatch_size
    out.update(result.assumes)
    out["pipeline_parallel_degree"] = result.compiled.problem.n_ranks
    out["microbatches"] = result.compiled.problem.n_microbatches
    out["placement"] = result.placement
    return out
