"""Does a CSV fit what a framework builds, and is it launched on its plan's partition?

Problem: both frameworks take a schedule CSV (``pipeline_parallel_schedule_csv``) but build the
pipeline stages from the schedule *name* and a few settings, never from the CSV. When the CSV's
stage count, placement or microbatch count differs from what they built, torch's runtime loads
it without complaint and then hangs or crashes on the first step (e.g. a V CSV run under
``Interleaved1F1B``); a CSV planned for one partition and launched on another runs with other
stage costs (slower, or out of memory). Neither framework checks.

Method: each framework module states its rules as a pure function of its settings (no torch
import); the result is compared with the CSV and, on a mismatch, the framework's schedule names and
the one setting at fault are searched for a value that would fit. A plan report beside the CSV (or
given with ``--partition``) names the partition the CSV was planned for.

Cost: constant per name; the search for a fitting setting tries at most ``layers`` values.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Optional, Union

from schedc.core.ir import Schedule, placement_name
from schedc.errors import ParameterError, SchedcError, literal, python_spelling
from schedc.frameworks._base import SCHEDULE_NAMES, Build, FitReport, schedule_name
from schedc.frameworks._registry import REGISTRY


@python_spelling
def parse_spec(spec: str) -> tuple[str, str]:
    """'torchtitan:Interleaved1F1B' -> ('torchtitan', 'Interleaved1F1B')."""
    framework, sep, name = spec.partition(":")
    framework = framework.strip().lower().replace("-", "").replace("_", "")
    framework = {"nemoautomodel": "nemo", "automodel": "nemo"}.get(framework, framework)
    if not sep or framework not in REGISTRY or not name.strip():
        examples = " or ".join(f"{f}:NAME" for f in REGISTRY)
        raise ParameterError("spec", f"{{name}}{literal(repr(spec))}: expected {examples}, e.g. torchtitan:ZBVZeroBubble",
                             flag="--for")
    return framework, schedule_name(name)


@python_spelling
def framework_build(framework: str, schedule: str, n_ranks: int, **settings) -> Build:
    """What ``framework`` builds (its module's ``build``); unknown settings are errors."""
    fn = REGISTRY[framework].build
    settings = {k: v for k, v in settings.items() if v is not None}
    unknown = set(settings) - set(list(inspect.signature(fn).parameters)[2:])
    if unknown:
        raise SchedcError(f"{framework} has no setting {', '.join(sorted(unknown))}; drop it")
    return fn(schedule, n_ranks, **settings)


# ---------------------------------------------------------------- does a CSV fit


@python_spelling
def check_csv_for(csv: Union[str, Path, Schedule], spec: str, ranks: Optional[int] = None, **settings) -> FitReport:
    """Does the CSV (a path or a Schedule) fit what ``spec`` ('torchtitan:NAME' or 'nemo:NAME')
    builds from ``settings`` (layers, layers_per_stage, first_less, last_less,
    round_virtual_stages, local_batch_size, microbatch_size)? ``ranks`` defaults to the CSV's.

    Call it at start-up, before the framework builds anything::

        check_csv_for(cfg.parallelism.pipeline_parallel_schedule_csv, "torchtitan:ZBVZeroBubble",
                      local_batch_size=8, microbatch_size=1).raise_unless_ok()
    """
    _check_types(spec, ranks, settings)
    framework, name = parse_spec(spec)
    try:
        schedule, source = _read(csv)
    except SchedcError as e:
        return FitReport(False, str(e))
    n_ranks = ranks if ranks is not None else schedule.n_ranks
    where = f"{source}: " if source else ""
    label = f"{framework}:{name}"
    try:
        build = framework_build(framework, name, n_ranks, **settings)
    except SchedcError as e:
        fix = _suggest(schedule, framework, name, n_ranks, settings, "")
        return _not_started(f"{where}{label} does not start: ", e, f"{'; ' + fix if fix else ''}")
    mismatch = _mismatch(schedule, build)
    if not mismatch:
        hint = ""
        if build.n_microbatches is None:
            mbs = settings.get("microbatch_size") or 1
            hint = (f"; set {REGISTRY[framework].fields['local_batch_size']} to {schedule.n_microbatches * mbs} "
                    f"({schedule.n_microbatches} microbatches of {mbs})")
        return FitReport(True, f"{where}fits {label}: {build.describe()}{hint}", build)
    fix = _suggest(schedule, framework, name, n_ranks, settings, mismatch)
    return FitReport(False, f"{where}does not fit {label}: {mismatch}{'; ' + fix if fix else ''}", build)


_COUNTS = ("layers", "layers_per_stage", "first_less", "last_less", "local_batch_size", "microbatch_size")


def _check_types(spec: object, ranks: object, settings: dict) -> None:
    """The spec and the counting settings' types: a value read from a config as text ('4') was a
    comparison's TypeError, or read "the CSV has 2 ranks, the framework runs 2"."""
    if not isinstance(spec, str):
        raise ParameterError("spec", f"expected torchtitan:NAME or nemo:NAME, got {type(spec).__name__}", python=True)
    for key, value in {"ranks": ranks, **{k: settings.get(k) for k in _COUNTS}}.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ParameterError(key, f"must be an integer, got {literal(repr(value)[:40])}", python=True)


def _not_started(head: str, e: SchedcError, tail: str) -> FitReport:
    """The report of a build that failed: a setting's error (``layers``) keeps its parameter, so
    that each front door spells it (``give layers`` / ``give --layers``)."""
    if not isinstance(e, ParameterError):
        return FitReport(False, f"{head}{e}{tail}")
    error = e.around(head, tail).for_python()
    return FitReport(False, str(error), error=error)


def _read(csv) -> tuple[Schedule, str]:
    from schedc.core.validate import validate
    from schedc.io import csvio

    if isinstance(csv, Schedule):
        schedule, source = csv, csv.meta.get("source", "")
    else:
        source = str(csv)
        schedule = csvio.read_csv(csv)  # refuses a BOM as torch's reader would
    validate(schedule, source=source)
    return schedule, source


def _mismatch(schedule: Schedule, build: Build) -> str:
    """'' when the schedule matches the build, else what differs (one clause)."""
    if schedule.n_ranks != build.n_ranks:
        return f"the CSV has {schedule.n_ranks} ranks, the framework runs {build.n_ranks}"
    if schedule.n_stages != build.n_stages:
        return (f"the CSV has {schedule.n_stages} stages, {build.framework} builds {build.n_stages} for "
                f"{build.schedule} ({build.stages_per_rank} per rank)")
    csv_placement = placement_name(schedule.placement)
    if csv_placement != build.placement:
        return (f"the CSV places its {schedule.n_stages} stages {_in(csv_placement)}, {build.framework} builds "
                f"{build.schedule}'s {_in(build.placement)}")
    if build.n_microbatches is not None and schedule.n_microbatches != build.n_microbatches:
        f = REGISTRY[build.framework].fields
        return (f"the CSV has {schedule.n_microbatches} microbatches, {f['local_batch_size']} / "
                f"{f['microbatch_size']} give {build.n_microbatches}")
    return ""


def _in(placement: str) -> str:
    return {"loop": "in a loop", "v": "in a V"}.get(placement, "in an explicit order")


def _suggest(schedule: Schedule, framework: str, asked: str, n_ranks: int, settings: dict, mismatch: str) -> str:
    """A schedule name, or a value of the one setting at fault, under which the CSV fits."""
    field = REGISTRY[framework].fields
    if schedule.n_ranks != n_ranks:
        return f"set {field['ranks']} to {schedule.n_ranks} or compile for {n_ranks} ranks"
    names = [n for n in SCHEDULE_NAMES if _fits(schedule, framework, n, n_ranks, settings)]
    if names:
        return f"use {field['schedule']} {' or '.join(names[:2])}"
    if "microbatches" in mismatch:
        mbs = settings.get("microbatch_size") or 1
        return f"set {field['local_batch_size']} to {schedule.n_microbatches * mbs}"
    layers = settings.get("layers")
    if layers:
        for k in range(1, layers + 3):
            for n in [asked] + [n for n in SCHEDULE_NAMES if n != asked]:
                if _fits(schedule, framework, n, n_ranks, {**settings, "layers_per_stage": k}):
                    use = "" if n == asked else f"{field['schedule']} {n} with "
                    return f"use {use}{field['layers_per_stage']} {k}"
    if placement_name(schedule.placement) == "explicit":
        return "neither framework builds this explicit placement; compile it for a loop or V placement"
    return ""


def _fits(schedule: Schedule, framework: str, name: str, n_ranks: int, settings: dict) -> bool:
    if name.startswith("PipelineSchedule"):  # abstract classes: never the name to suggest
        return False
    try:
        return not _mismatch(schedule, framework_build(framework, name, n_ranks, **settings))
    except SchedcError:
        return False


@python_spelling
def read_partition(path: Union[str, Path]) -> list[list[str]]:
    """``module_fqns_per_model_part`` from a plan report (its ``"partition"``), per-stage costs whose
    every stage names its modules (``plan.profile.json``), or a JSON list of lists."""
    return partition_in(path, "path")


def partition_in(path: Union[str, Path], param: str) -> list[list[str]]:
    """:func:`read_partition` for a function that takes the file as `param` (``--partition``)."""
    from schedc.io.fileio import read_json

    try:
        data = read_json(path, "a partition (a plan report or a JSON list of lists)")
    except SchedcError as e:
        raise ParameterError(param, f"{{name}}{literal(e)}", flag="--partition") from None
    if isinstance(data, dict):
        stages = data.get("stages")
        data = data.get("partition") or ([s.get("modules") for s in stages] if isinstance(stages, list) and all(
            isinstance(s, dict) for s in stages) else None)
    if not (isinstance(data, list) and data and all(isinstance(p, list) and p and all(isinstance(m, str) for m in p)
                                                    for p in data)):
        raise ParameterError(param, f"{{name}}{literal(path)}: expected a plan report with 'partition', per-stage costs "
                             "naming each stage's modules, or a JSON list of non-empty lists of module names",
                             flag="--partition")
    return data
