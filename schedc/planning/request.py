"""The plan's request: its inputs checked once, each bad one refused with a one-line error.

Problem: ``plan`` takes a per-unit profile, ranks, microbatches, a memory cap, a placement, an
objective and a time limit from the CLI, the API and ``plan_ac``; each must be checked the same
way, before any search, with an error naming the flag and the value that works. Method:
:class:`PlanRequest` (frozen) is built by :meth:`PlanRequest.build` from the raw arguments: the cap
parsed (``Kp`` refused: it is relative to one partition's 1F1B), the counts and names checked, the
units checked and lowered once (``schedc.core.partition.Units``), the placements that can be filled
listed, and a unit that alone exceeds the cap (schedc.core.cost_model.least_need) refused with the
least cap it fits. Cost: linear in the units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from schedc.core import limits
from schedc.core.cost_model import fits, least_need, one_microbatch_need
from schedc.core.costs import MemoryLimit, Profile
from schedc.core.formatting import format_bytes
from schedc.core.partition import PLACEMENTS, Units, check_units, n_stages_for, v_bound_seconds
from schedc.errors import ParameterError, SchedcError, literal
from schedc.solver.deadline import check_size, check_time_limit, n_actions

PLAN_PLACEMENTS = PLACEMENTS + ("auto",)


def parse_cap(memory: Union[str, MemoryLimit]) -> MemoryLimit:
    """A byte size or none; ``Kp`` is relative to one partition's 1F1B and means nothing here."""
    limit = memory if isinstance(memory, MemoryLimit) else MemoryLimit.parse(memory)
    if limit.kind == "relative":
        raise ParameterError("memory", f"{{name}}{limit}: Kp is relative to 1F1B on a fixed partition, and plan "
                                       "moves the partition; give the GPU's memory in bytes, e.g. {name}80GiB")
    return limit


def check_types(profile: object, ranks: object, microbatches: object, time_limit: object,
                progress: object = None) -> None:
    """The arguments' types, before anything compares or reads them (a TypeError or
    AttributeError from deep inside names none of them)."""
    if not isinstance(profile, Profile):
        raise ParameterError("profile", "expected a schedc.Profile (schedc.Profile.load(PATH), "
                                        f"schedc.count_profile(...)); got {type(profile).__name__}")
    for param, value in (("ranks", ranks), ("microbatches", microbatches)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParameterError(param, f"must be an integer >= 1, got {literal(repr(value))}")
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)):
        raise ParameterError("time_limit", f"must be a finite number of seconds > 0, got {literal(repr(time_limit))}")
    if progress is not None and not callable(progress):
        raise ParameterError("progress", f"must be a function (called with each line) or None, got "
                                         f"{type(progress).__name__}")


def _check_arguments(ranks: int, microbatches: int, placement: str, objective: str, time_limit: float) -> None:
    for ok, param, message in ((ranks >= 1, "ranks", f"{{param}} must be >= 1, got {ranks}"),
                               (microbatches >= 1, "microbatches", f"{{param}} must be >= 1, got {microbatches}"),
                               (placement in PLAN_PLACEMENTS, "placement",
                                f"{{param}} must be one of {', '.join(PLAN_PLACEMENTS)}, got {literal(repr(placement))}"),
                               (objective in ("makespan", "span"), "objective",
                                f"{{param}} must be makespan or span, got {literal(repr(objective))}")):
        if not ok:
            raise ParameterError(param, message)
    if not time_limit or not 0 < time_limit < math.inf:
        raise ParameterError("time_limit", f"{{param}} must be a finite number of seconds > 0, got {time_limit}")
    if time_limit < limits.MIN_TIME_LIMIT:
        raise ParameterError("time_limit", f"{{name}}{time_limit:g} is shorter than any plan takes; give "
                                           f"{{name}}{limits.MIN_TIME_LIMIT:g} or more (5 for a quick answer)")
    # refused before the partition bounds, whose knapsack is linear in the microbatches (minutes
    # at 10**6); auto tries the V's 2R stages too, and the search refuses a size once any is too large
    check_size(max(n_stages_for(pl, ranks) for pl in (PLACEMENTS if placement == "auto" else (placement,))),
               microbatches)
    check_time_limit(n_actions(ranks, microbatches), time_limit)  # the least plan: one stage per rank


V_SHARE = 0.5  # of the time limit the V's bounds may take before auto leaves the V out


def placements_tried(placement: str, ranks: int, n_units: int, time_limit: float) -> list[str]:
    """The placements `placement` tries: both for auto, but the V only while its partition bounds
    (R U^4, no deadline: :func:`schedc.core.partition.v_bound_seconds`) take at most V_SHARE of
    the time limit."""
    if placement != "auto":
        return [placement]
    deep = v_bound_seconds(n_units, ranks) > V_SHARE * time_limit
    return ["loop"] if deep else list(PLACEMENTS)


def _placements(placement: str, ranks: int, n_units: int, source: str, time_limit: float,
                notes: list[str]) -> list[str]:
    wanted = list(PLACEMENTS) if placement == "auto" else [placement]
    ok = [pl for pl in wanted if n_stages_for(pl, ranks) <= n_units]
    if not ok:
        pl = wanted[0]
        raise SchedcError(f"{source}: {n_units} units cannot fill {n_stages_for(pl, ranks)} stages ({pl} on {ranks} "
                          f"ranks); every stage needs at least one unit: use fewer ranks or split the model finer")
    # the V's partition bounds check no deadline and grow as R U^4: on a deep model they alone
    # would outlast the time limit, so auto leaves the V out and says so; asked for, it is planned
    seconds = v_bound_seconds(n_units, ranks)
    shown_s = f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"  # not "0 s" for a short plan's limit
    bounding = f"bounding the V's partitions of {n_units} units on {ranks} ranks takes about {shown_s} s"
    if "v" in ok and "v" not in placements_tried(placement, ranks, n_units, time_limit):
        ok.remove("v")
        notes.append(f"placement auto left the V out: {bounding}, over half of the time limit; "
                     f"give --placement v to plan the V (it takes that long whatever the limit)")
    elif ok == ["v"] and seconds > time_limit:
        notes.append(f"{bounding}, beyond the time limit")
    return ok


def _check_units_fit(profile: Profile, cap: float, limit: MemoryLimit, source: str) -> None:
    """A unit whose stage alone exceeds the cap: no partition can fit. Its need is the cost
    model's least need of a rank holding only that unit (schedc.core.cost_model.least_need: static
    bytes, reserve, one microbatch through it with its rise and transients) as torch's runtime runs
    it; a stage of more units, more stages on the rank and its receive buffers only add to it."""
    executed = profile.executed("torch")
    for k, unit in enumerate(profile.stages):
        need = least_need(executed, [k])
        if not fits(need, cap):
            names = ", ".join(unit.modules) if unit.modules else "no module names"
            static = executed.stages[k].static_bytes
            reserve = f" + reserve {format_bytes(executed.reserve_bytes)}" if executed.reserve_bytes else ""
            raise ParameterError("memory", f"{literal(source)}: unit {k} ({literal(names)}) alone needs {format_bytes(need)} (static "
                                           f"{format_bytes(static)}{reserve} + one microbatch "
                                           f"{format_bytes(one_microbatch_need(executed, [k]))}) but {{param}} is "
                                           f"{limit}; the smallest cap it fits is {{name}}{format_bytes(need, round_up=True)}")


@dataclass(frozen=True)
class PlanRequest:
    """One plan's inputs, checked: the per-unit profile and its lowering (``units``), ranks,
    microbatches, the cap (``limit``; ``cap`` in bytes, inf with none), the placements that can be
    filled, the objective and the time limit; ``notes`` collects what the checks and the steps
    note for the report."""

    profile: Profile
    units: Units
    ranks: int
    microbatches: int
    limit: MemoryLimit
    cap: float
    placements: list[str]
    objective: str
    time_limit: float
    notes: list[str]

    @classmethod
    def build(cls, *, profile: Profile, ranks: int, microbatches: int, memory: Union[str, MemoryLimit],
              placement: str, objective: str, time_limit: float, source: str) -> "PlanRequest":
        """The request, or a SchedcError naming the first bad input (the cap, then the counts and
        names, then the units) and what works; `source` names the profile in the errors."""
        check_types(profile, ranks, microbatches, time_limit)
        limit = parse_cap(memory)
        cap = math.inf if limit.kind == "none" else limit.value
        _check_arguments(ranks, microbatches, placement, objective, time_limit)
        notes = check_units(profile, source)
        units = Units.of(profile, microbatches)
        placements = _placements(placement, ranks, profile.n_stages, source, time_limit, notes)
        _check_units_fit(profile, cap, limit, source)
        return cls(profile=profile, units=units, ranks=ranks, microbatches=microbatches, limit=limit, cap=cap,
                   placements=placements, objective=objective, time_limit=time_limit, notes=notes)
