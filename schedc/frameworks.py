"""What torchtitan 0.3.0 and NeMo AutoModel 0.7.0 build from their settings, and whether a CSV fits.

Problem: both frameworks take a schedule CSV (``pipeline_parallel_schedule_csv``) but build the
pipeline stages from the schedule *name* and a few settings, never from the CSV. When the CSV's
stage count, placement or microbatch count differs from what they built, torch's runtime loads
it without complaint and then hangs or crashes on the first step (e.g. a V CSV run under
``Interleaved1F1B``). Neither checks.

Method: re-state each framework's rules as pure functions of its settings (no torch import),
then compare the result with the CSV and, on a mismatch, search the framework's schedule names
and the one setting at fault for a value that would fit. The rules, as read from the installed
sources (``site-packages/...``, line numbers of those releases):

torch 2.13 (both frameworks resolve names with it)
  - ``torch/distributed/pipelining/schedules.py`` L3620-3644 ``get_schedule_class``: the nine
    names below, matched case-insensitively; GPipe, 1F1B and PipelineScheduleSingle are
    single-stage classes (L686, L872, L995), the rest multi-stage (L1749, L2216-3393).
  - L1729-1733 ``_validate_schedule``: every stage must run F for exactly ``n_microbatches``
    microbatches, where ``n_microbatches`` is what the framework computed, not the CSV's.

torchtitan 0.3.0, ``torchtitan/distributed/pipeline_parallel.py``
  - L205-206: single-stage names build 1 stage per rank, the others 2 (L258-263) unless
    ``pipeline_parallel_layers_per_stage`` K is set: then stages = ceil((layers +
    first_stage_less_layers + last_stage_less_layers) / K) (L219-225), which must be a multiple
    of the PP degree (L233-240), exactly 1 per rank for single-stage names (L244-250) and at
    least 2 for multi-stage names (L252-257).
  - L390-428 ``_generate_llm_fqn_per_model_part``: stages <= layers + first_less + last_less,
    and neither "less" weight may exceed floor((layers + first_less + last_less) / stages).
  - L559-576 ``_get_pp_rank_to_stage_indices_mapping``: V placement for ZBVZeroBubble and
    DualPipeV (exactly 2 stages per rank, L570-572), loop placement for every other name.
  - L303-311 ``_build_pipeline_schedule``: ``training.local_batch_size`` must be divisible by
    ``pipeline_parallel_microbatch_size``; microbatches = their quotient.
  - ``torchtitan/config/configs.py`` L191-226: defaults first/last less = 1, microbatch size 1.

NeMo AutoModel 0.7.0, ``nemo_automodel/components/distributed/pipelining/functional.py``
  - L182-247 ``calculate_virtual_stages``: 1 or 2 stages per rank by the same single/multi
    split (L240-245), or with ``layers_per_stage`` K: stages = ceil(layers / K) (L194; embedding
    and head carry no weight), rounded to a multiple of ``pp_size`` by
    ``round_virtual_stages_to_pp_multiple`` "up"/"down" (L201-209) or else an error (L214-220),
    exactly 1 per rank for single-stage names (L225-231), at least 2 otherwise (L233-239).
  - L132-136: stages <= layers.
  - L822-830 and L86-95 ``stage_ids_this_rank``: V placement only for ZBVZeroBubble (DualPipeV
    builds *loop* stages), exactly 2 stages per rank.
  - ``autopipeline.py`` L96-97 and functional.py L876-882: ``pp_batch_size`` divisible by
    ``pp_microbatch_size``; microbatches = their quotient.
  - ``recipes/llm/train_ft.py`` L670-677: the recipe sets ``pp_batch_size`` from
    ``step_scheduler.local_batch_size`` and ``pp_microbatch_size`` from
    ``distributed.pipeline.pp_microbatch_size``, and asserts microbatches >= pp_size.

Cost: constant per name; the search for a fitting setting tries at most ``layers`` values.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from schedc.errors import SchedcError
from schedc.ir import Schedule, placement_name

# torch's get_schedule_class map, in its order; True = a PipelineScheduleSingle subclass
SCHEDULE_NAMES: dict[str, bool] = {
    "1F1B": True,
    "Interleaved1F1B": False,
    "GPipe": True,
    "LoopedBFS": False,
    "InterleavedZeroBubble": False,
    "PipelineScheduleSingle": True,
    "PipelineScheduleMulti": False,
    "ZBVZeroBubble": False,
    "DualPipeV": False,
}
FRAMEWORKS = {"torchtitan": "torchtitan 0.3.0", "nemo": "NeMo AutoModel 0.7.0"}
V_NAMES = {"torchtitan": ("ZBVZeroBubble", "DualPipeV"), "nemo": ("ZBVZeroBubble",)}
# the setting names a user of each framework edits, for messages
_FIELD = {
    "torchtitan": {
        "schedule": "--parallelism.pipeline_parallel_schedule",
        "layers_per_stage": "--parallelism.pipeline_parallel_layers_per_stage",
        "local_batch_size": "--training.local_batch_size",
        "microbatch_size": "--parallelism.pipeline_parallel_microbatch_size",
        "ranks": "--parallelism.pipeline_parallel_degree",
        "partition": "parallelism.module_fqns_per_model_part",
    },
    "nemo": {
        "schedule": "distributed.pipeline.pp_schedule",
        "layers_per_stage": "distributed.pipeline.layers_per_stage",
        "local_batch_size": "step_scheduler.local_batch_size",
        "microbatch_size": "distributed.pipeline.pp_microbatch_size",
        "ranks": "distributed.pp_size",
        "partition": "distributed.pipeline.module_fqns_per_model_part",
    },
}


@dataclass(frozen=True)
class Build:
    """What a framework builds: ``n_stages`` stages, ``placement`` 'loop' or 'v', and (when the
    batch settings were given) ``n_microbatches``."""

    framework: str
    schedule: str  # torch's spelling of the name
    n_ranks: int
    n_stages: int
    placement: str
    n_microbatches: Optional[int]

    @property
    def stages_per_rank(self) -> int:
        return self.n_stages // self.n_ranks

    def describe(self) -> str:
        mb = "" if self.n_microbatches is None else f", {self.n_microbatches} microbatches"
        return (f"{self.n_stages} stages ({self.placement}, {self.stages_per_rank} per rank) on "
                f"{self.n_ranks} ranks{mb}")


@dataclass(frozen=True)
class FitReport:
    """``ok``: the CSV fits what the framework builds; ``message``: one line saying so, or what
    differs and which schedule name or setting would fit."""

    ok: bool
    message: str
    build: Optional[Build] = None

    def raise_unless_ok(self) -> None:
        if not self.ok:
            raise SchedcError(self.message)


def schedule_name(name: str) -> str:
    """torch's spelling of a schedule name; matched case-insensitively, as get_schedule_class does."""
    by_lower = {n.lower(): n for n in SCHEDULE_NAMES}
    try:
        return by_lower[name.strip().lower()]
    except KeyError:
        raise SchedcError(f"unknown schedule name {name!r}; torch knows {', '.join(SCHEDULE_NAMES)} "
                          "(case does not matter)") from None


def parse_spec(spec: str) -> tuple[str, str]:
    """'torchtitan:Interleaved1F1B' -> ('torchtitan', 'Interleaved1F1B')."""
    framework, sep, name = spec.partition(":")
    framework = framework.strip().lower().replace("-", "").replace("_", "")
    framework = {"nemoautomodel": "nemo", "automodel": "nemo"}.get(framework, framework)
    if not sep or framework not in FRAMEWORKS or not name.strip():
        raise SchedcError(f"--for {spec!r}: expected torchtitan:NAME or nemo:NAME, e.g. torchtitan:ZBVZeroBubble")
    return framework, schedule_name(name)


def torchtitan_build(
    schedule: str,
    n_ranks: int,
    layers: Optional[int] = None,
    layers_per_stage: Optional[int] = None,
    first_less: int = 1,
    last_less: int = 1,
    local_batch_size: Optional[int] = None,
    microbatch_size: int = 1,
    partition: Optional[int] = None,
) -> Build:
    """What torchtitan 0.3.0's ``pipeline_llm`` builds; its start-up errors as SchedcError.
    ``partition``: the number of parts of an explicit ``module_fqns_per_model_part`` (e.g. from
    ``schedc plan``), which then sets the stage count (pipeline_parallel.py L88-92, L621)."""
    name = schedule_name(schedule)
    single = SCHEDULE_NAMES[name]
    field = _FIELD["torchtitan"]
    if partition is not None:
        n_stages = partition
        _check_per_rank("torchtitan", name, single, n_stages, n_ranks,
                        f"{field['partition']} with {n_stages} parts")
        layers = None  # the explicit list replaces the default split and its checks
    elif layers_per_stage is not None:
        if layers is None:
            raise SchedcError("torchtitan: with layers_per_stage the stage count depends on the model; give --layers")
        n_stages = math.ceil((layers + first_less + last_less) / layers_per_stage)
        _check_per_rank("torchtitan", name, single, n_stages, n_ranks,
                        f"{layers} layers + first_less {first_less} + last_less {last_less} over "
                        f"{field['layers_per_stage']} {layers_per_stage}")
    else:
        n_stages = n_ranks * (1 if single else 2)
    if layers is not None and n_stages > 1:
        effective = layers + first_less + last_less
        if n_stages > effective:
            raise SchedcError(f"torchtitan: {n_stages} stages exceed {layers} layers + first_less {first_less} "
                              f"+ last_less {last_less} = {effective}")
        if max(first_less, last_less) > effective // n_stages:
            raise SchedcError(f"torchtitan: first_less {first_less} / last_less {last_less} exceed the "
                              f"{effective // n_stages} layers each of {n_stages} stages gets")
    placement = "v" if name in V_NAMES["torchtitan"] else "loop"
    _check_v("torchtitan", name, placement, n_stages, n_ranks)
    return Build("torchtitan", name, n_ranks, n_stages, placement,
                 _microbatches("torchtitan", local_batch_size, microbatch_size))


def nemo_build(
    schedule: str,
    n_ranks: int,
    layers: Optional[int] = None,
    layers_per_stage: Optional[int] = None,
    round_virtual_stages: Optional[str] = None,
    local_batch_size: Optional[int] = None,
    microbatch_size: int = 1,
    partition: Optional[int] = None,
) -> Build:
    """What NeMo AutoModel 0.7.0's ``AutoPipeline`` builds in the LLM recipe; its errors as SchedcError.
    ``partition``: the number of parts of an explicit ``module_fqns_per_model_part``, which then
    sets the stage count (functional.py L822-826)."""
    name = schedule_name(schedule)
    single = SCHEDULE_NAMES[name]
    if partition is not None:
        n_stages = partition
        _check_per_rank("nemo", name, single, n_stages, n_ranks,
                        f"{_FIELD['nemo']['partition']} with {n_stages} parts")
        layers = None
    elif layers_per_stage is not None:
        if layers is None:
            raise SchedcError("nemo: with layers_per_stage the stage count depends on the model; give --layers")
        n_stages = math.ceil(layers / layers_per_stage)
        if n_stages % n_ranks and round_virtual_stages is not None:
            if round_virtual_stages not in ("up", "down"):
                raise SchedcError(f"nemo: round_virtual_stages_to_pp_multiple must be up or down, "
                                  f"got {round_virtual_stages!r}")
            n_stages = (n_stages // n_ranks + (round_virtual_stages == "up")) * n_ranks
        _check_per_rank("nemo", name, single, n_stages, n_ranks,
                        f"{layers} layers over {_FIELD['nemo']['layers_per_stage']} {layers_per_stage}")
    else:
        n_stages = n_ranks * (1 if single else 2)
    if layers is not None and n_stages > layers:
        raise SchedcError(f"nemo: {n_stages} stages exceed the model's {layers} layers")
    placement = "v" if name in V_NAMES["nemo"] else "loop"
    _check_v("nemo", name, placement, n_stages, n_ranks)
    n_microbatches = _microbatches("nemo", local_batch_size, microbatch_size)
    if n_microbatches is not None and n_microbatches < n_ranks:
        raise SchedcError(f"nemo: {n_microbatches} microbatches are fewer than pp_size {n_ranks}; the LLM recipe "
                          f"asserts local_batch_size // pp_microbatch_size >= pp_size")
    return Build("nemo", name, n_ranks, n_stages, placement, n_microbatches)


def _check_per_rank(fw: str, name: str, single: bool, n_stages: int, n_ranks: int, why: str) -> None:
    if n_stages < 1 or n_stages % n_ranks:
        raise SchedcError(f"{fw}: {why} gives {n_stages} stages, not a multiple of the {n_ranks} PP ranks")
    per_rank = n_stages // n_ranks
    if single and per_rank != 1:
        raise SchedcError(f"{fw}: {name} needs exactly 1 stage per rank but {why} gives {per_rank}")
    if not single and per_rank < 2:
        raise SchedcError(f"{fw}: {name} needs at least 2 stages per rank but {why} gives {per_rank}")


def _check_v(fw: str, name: str, placement: str, n_stages: int, n_ranks: int) -> None:
    if placement == "v" and n_stages != 2 * n_ranks:
        raise SchedcError(f"{fw}: {name} builds V stages, exactly 2 per rank, not {n_stages} on {n_ranks} ranks")


def _microbatches(fw: str, local_batch_size: Optional[int], microbatch_size: int) -> Optional[int]:
    if microbatch_size < 1:
        raise SchedcError(f"{fw}: microbatch size must be >= 1, got {microbatch_size}")
    if local_batch_size is None:
        return None
    if local_batch_size % microbatch_size:
        f = _FIELD[fw]
        raise SchedcError(f"{fw}: {f['local_batch_size']} {local_batch_size} is not divisible by "
                          f"{f['microbatch_size']} {microbatch_size}")
    return local_batch_size // microbatch_size


def framework_build(framework: str, schedule: str, n_ranks: int, **settings) -> Build:
    """Dispatch to :func:`torchtitan_build` or :func:`nemo_build`; unknown settings are errors."""
    fn = {"torchtitan": torchtitan_build, "nemo": nemo_build}[framework]
    settings = {k: v for k, v in settings.items() if v is not None}
    unknown = set(settings) - set(list(inspect.signature(fn).parameters)[2:])
    if unknown:
        raise SchedcError(f"{framework} has no setting {', '.join(sorted(unknown))}; drop it")
    return fn(schedule, n_ranks, **settings)


# ---------------------------------------------------------------- does a CSV fit


def check_csv_for(csv: Union[str, Path, Schedule], spec: str, ranks: Optional[int] = None, **settings) -> FitReport:
    """Does the CSV (a path or a Schedule) fit what ``spec`` ('torchtitan:NAME' or 'nemo:NAME')
    builds from ``settings`` (layers, layers_per_stage, first_less, last_less,
    round_virtual_stages, local_batch_size, microbatch_size)? ``ranks`` defaults to the CSV's.

    Call it at start-up, before the framework builds anything::

        check_csv_for(cfg.parallelism.pipeline_parallel_schedule_csv, "torchtitan:ZBVZeroBubble",
                      local_batch_size=8, microbatch_size=1).raise_unless_ok()
    """
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
        return FitReport(False, f"{where}{label} does not start: {e}{'; ' + fix if fix else ''}")
    mismatch = _mismatch(schedule, build)
    if not mismatch:
        hint = ""
        if build.n_microbatches is None:
            mbs = settings.get("microbatch_size") or 1
            hint = (f"; set {_FIELD[framework]['local_batch_size']} to {schedule.n_microbatches * mbs} "
                    f"({schedule.n_microbatches} microbatches of {mbs})")
        return FitReport(True, f"{where}fits {label}: {build.describe()}{hint}", build)
    fix = _suggest(schedule, framework, name, n_ranks, settings, mismatch)
    return FitReport(False, f"{where}does not fit {label}: {mismatch}{'; ' + fix if fix else ''}", build)


def _read(csv) -> tuple[Schedule, str]:
    from schedc import csvio
    from schedc.validate import validate

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
        f = _FIELD[build.framework]
        return (f"the CSV has {schedule.n_microbatches} microbatches, {f['local_batch_size']} / "
                f"{f['microbatch_size']} give {build.n_microbatches}")
    return ""


def _in(placement: str) -> str:
    return {"loop": "in a loop", "v": "in a V"}.get(placement, "in an explicit order")


def _suggest(schedule: Schedule, framework: str, asked: str, n_ranks: int, settings: dict, mismatch: str) -> str:
    """A schedule name, or a value of the one setting at fault, under which the CSV fits."""
    field = _FIELD[framework]
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
        return "neither framework builds this explicit placement; compile with --placement loop or v"
    return ""


def _fits(schedule: Schedule, framework: str, name: str, n_ranks: int, settings: dict) -> bool:
    if name.startswith("PipelineSchedule"):  # abstract classes: never the name to suggest
        return False
    try:
        return not _mismatch(schedule, framework_build(framework, name, n_ranks, **settings))
    except SchedcError:
        return False


def read_partition(path: Union[str, Path]) -> list[list[str]]:
    """``module_fqns_per_model_part`` from a plan report (its ``"partition"``) or a JSON list of lists."""
    import json

    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SchedcError(f"--partition {path}: file not found") from None
    except json.JSONDecodeError as e:
        raise SchedcError(f"--partition {path}: line {e.lineno} column {e.colno}: not valid JSON ({e.msg})") from None
    if isinstance(data, dict):
        data = data.get("partition")
    if not (isinstance(data, list) and data and all(isinstance(p, list) and p and all(isinstance(m, str) for m in p)
                                                    for p in data)):
        raise SchedcError(f"--partition {path}: expected a plan report with 'partition' or a JSON list of non-empty "
                          "lists of module names")
    return data
