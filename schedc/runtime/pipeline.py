"""Run a CSV schedule with torch.distributed.pipelining, checked before any collective.

Problem: torch's ``_PipelineScheduleRuntime._load_csv`` runs any CSV, but frameworks guess which
stages a rank builds from a schedule *name*; when the guess disagrees with the CSV, or the world
size or microbatch count differ, the job fails deep inside a step or hangs in a send/recv.
Method: read the CSV with schedc's strict reader (:func:`schedc.io.csvio.read_csv`), derive each
rank's stage indices from it, and before constructing anything that communicates compare world
size, microbatch count, the local stages' indices and the total stage count with the CSV. Every
rank reads the same file, so every rank detects a mismatch locally and raises the same
:class:`~schedc.errors.SchedcError`; no collective is needed, so nothing can hang. The schedule
also passes :func:`schedc.core.validate.validate` (completeness, dependency order and cross-rank
deadlock cycles, which torch does not check and which would otherwise hang in recv). The parsed
actions are then handed to torch's runtime (``_prepare_schedule_with_comms``, the lowering
``_load_csv`` runs after parsing), which adds the send/recv actions and executes the step.
Cost: about linear in the number of actions to read and check; the step itself is torch's.

Public API: :func:`stages_for_rank`, :func:`build_schedule`, :func:`csv_schedule_factory`,
:func:`load_pipeline` (split a blocks model, build the ``PipelineStage``s and the schedule in one
call) and :func:`load_torch_pipeline` (the same split run by one of torch's schedule classes,
for comparisons).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (
    PipelineScheduleSingle,
    ScheduleDualPipeV,
    ScheduleZBVZeroBubble,
    _PipelineSchedule,
    _PipelineScheduleRuntime,
    get_schedule_class,
)
from torch.distributed.pipelining.stage import _PipelineStageBase

from schedc.core.ir import Schedule
from schedc.core.memory_actions import MemoryAction, check_memory_actions
from schedc.errors import ParameterError, SchedcError, literal, shown
from schedc.runtime.checkpointing import apply_to_stage, check_split_backward, check_split_stages, stage_modes
from schedc.runtime.torch_check import to_torch_order

if TYPE_CHECKING:
    from schedc.runtime.offload import MemoryRunner


def read_schedule(csv_path: str | os.PathLike) -> Schedule:
    """The CSV as a :class:`~schedc.core.ir.Schedule` (strict parse; SchedcError names row/column)."""
    from schedc.io.csvio import read_csv

    return read_csv(csv_path)


def _as_schedule(csv: str | os.PathLike | Schedule) -> tuple[Schedule, str]:
    if isinstance(csv, Schedule):
        return csv, str(csv.meta.get("source") or csv.name or "<schedule>")
    if not isinstance(csv, (str, os.PathLike)):
        raise SchedcError(f"csv: expected the path of a CSV schedule or a schedc.Schedule, got {type(csv).__name__}")
    return read_schedule(csv), str(csv)


def stages_for_rank(
    csv: str | os.PathLike | Schedule, rank: int, n_ranks: int | None = None
) -> list[int]:
    """The stage indices rank ``rank`` must build, in increasing order, read from the CSV.

    With ``n_ranks`` (the pipeline group size) the CSV's rank count is checked too.
    """
    schedule, where = _as_schedule(csv)
    # os.environ["RANK"] is text: said here, not as a comparison's TypeError or "2 ranks but 2 ranks"
    for param, value in (("rank", rank), ("n_ranks", n_ranks)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ParameterError(param, f"must be an integer (e.g. int(os.environ['RANK'])), got "
                                        f"{literal(repr(value)[:40])}", python=True)
    if n_ranks is not None and n_ranks != schedule.n_ranks:
        raise SchedcError(_world_size_message(where, schedule, n_ranks))
    if not 0 <= rank < schedule.n_ranks:
        raise SchedcError(
            f"{where}: rank {rank} is outside the CSV's {schedule.n_ranks} ranks (rows); "
            f"launch with --nproc-per-node {schedule.n_ranks} or compile for more ranks"
        )
    return schedule.stages_of(rank)


def _world_size_message(where: str, schedule: Schedule, world: int) -> str:
    return (
        f"{where}: the CSV has {schedule.n_ranks} rows (ranks) but the pipeline group has "
        f"{world} ranks; launch with --nproc-per-node {schedule.n_ranks} or compile the "
        f"schedule for {world} ranks"
    )


def check_stages(
    schedule: Schedule,
    stages: Sequence[_PipelineStageBase],
    n_microbatches: int,
    where: str = "<schedule>",
) -> None:
    """Raise SchedcError unless the local stages, group size and microbatch count match."""
    if not stages:
        raise SchedcError(f"{where}: no pipeline stages given; build the stages stages_for_rank() names")
    for stage in stages:
        if not isinstance(stage, _PipelineStageBase):
            raise SchedcError(
                f"{where}: expected torch.distributed.pipelining PipelineStage objects, got "
                f"{type(stage).__name__}"
            )
    if isinstance(n_microbatches, bool) or not isinstance(n_microbatches, int):
        raise ParameterError("n_microbatches", f"must be an integer (the CSV's {schedule.n_microbatches}) or None, "
                             f"got {literal(repr(n_microbatches)[:40])}", python=True)
    world = stages[0].group_size
    rank = stages[0].group_rank
    if world != schedule.n_ranks:
        raise SchedcError(_world_size_message(where, schedule, world))
    if n_microbatches != schedule.n_microbatches:
        raise SchedcError(
            f"{where}: the CSV runs {schedule.n_microbatches} microbatches but the schedule was "
            f"asked for {n_microbatches}; pass n_microbatches={schedule.n_microbatches} (or "
            f"compile the schedule for {n_microbatches} microbatches)"
        )
    counts = {s.num_stages for s in stages}
    if counts != {schedule.n_stages}:
        raise SchedcError(
            f"{where}: the stages were built with num_stages={sorted(counts)} but the CSV has "
            f"{schedule.n_stages} stages; build PipelineStage(..., num_stages={schedule.n_stages})"
        )
    local = sorted(s.stage_index for s in stages)
    expected = schedule.stages_of(rank)
    if local != expected:
        raise SchedcError(
            f"{where}: rank {rank} holds stages {local} but the CSV puts stages {expected} on "
            f"rank {rank} (placement {list(schedule.placement)}); build the stages "
            f"stages_for_rank(csv, {rank}) returns"
        )


class CsvSchedule(_PipelineScheduleRuntime):
    """torch's ``_PipelineScheduleRuntime`` loaded from a checked CSV.

    ``.schedule`` is the parsed :class:`~schedc.core.ir.Schedule`; ``.csv_path`` where it came from.
    ``step()`` is torch's, unchanged; with memory actions, ``.memory`` is the
    :class:`~schedc.runtime.offload.MemoryRunner` that runs them (``.memory.stats`` counts the
    last step's, ``.memory.live()`` what it holds now), and every step starts and ends with
    nothing held.
    """

    schedule: Schedule
    csv_path: str
    memory: Optional[MemoryRunner] = None

    def _step_microbatches(self, *args, **kwargs):
        if self.memory is None:
            return super()._step_microbatches(*args, **kwargs)
        self.memory.begin_step()
        try:
            return super()._step_microbatches(*args, **kwargs)
        finally:
            self.memory.end_step()


def build_schedule(
    csv: str | os.PathLike | Schedule,
    stages: _PipelineStageBase | Sequence[_PipelineStageBase],
    n_microbatches: int | None = None,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    scale_grads: bool = True,
    *,
    memory_actions: Sequence[MemoryAction | dict] | None = None,
    **kwargs: Any,
) -> CsvSchedule:
    """A ready ``_PipelineScheduleRuntime`` running the CSV on this rank's ``stages``.

    ``n_microbatches=None`` takes the CSV's count. ``memory_actions``: offloads and per-microbatch
    recomputes to run (:mod:`schedc.core.memory_actions`, the JSON list or parsed entries). Extra
    keyword arguments go to torch's constructor (``args_chunk_spec``, ``output_merge_spec``,
    ...). Raises SchedcError, before any communication, when the group size, microbatch count,
    local stage indices or total stage count disagree with the CSV, when the CSV has backward
    actions and no ``loss_fn``, or when a memory action does not fit the CSV.
    """
    schedule, where = _as_schedule(csv)
    checked = _memory_actions(memory_actions, schedule, where)
    return _build(schedule, where, stages, n_microbatches, loss_fn, scale_grads, memory=checked, **kwargs)


def _memory_actions(memory_actions, schedule: Schedule, where: str) -> dict | None:
    """The memory actions checked against the CSV (None for none), before anything is built."""
    if memory_actions is None:
        return None
    return check_memory_actions(memory_actions, schedule, where) or None


def _build(
    schedule: Schedule,
    where: str,
    stages: _PipelineStageBase | Sequence[_PipelineStageBase],
    n_microbatches: int | None,
    loss_fn: Callable[..., torch.Tensor] | None,
    scale_grads: bool,
    memory: dict | None = None,
    **kwargs: Any,
) -> CsvSchedule:
    stage_list = [stages] if isinstance(stages, _PipelineStageBase) else list(stages)
    if n_microbatches is None:
        n_microbatches = schedule.n_microbatches
    check_stages(schedule, stage_list, n_microbatches, where)
    has_backward = any(a.kind != "F" for _, a in schedule.all_actions())
    if has_backward and loss_fn is None:
        raise SchedcError(
            f"{where}: the CSV has backward actions but no loss_fn was given; pass loss_fn="
        )
    # Structure, dependency order and cross-rank deadlocks: torch checks the first two only
    # per rank, and a deadlocking order would hang in send/recv instead of failing.
    from schedc.core.validate import validate

    validate(schedule, source=where)
    stage_list.sort(key=lambda s: s.stage_index)
    runtime = CsvSchedule(
        stage_list, n_microbatches, loss_fn=loss_fn, scale_grads=scale_grads, **kwargs
    )
    runtime.schedule = schedule
    runtime.csv_path = where
    if memory:
        from schedc.runtime.offload import MemoryRunner

        runtime.memory = MemoryRunner(memory, stage_list).install()
    # Our cells print in torch's notation (that is the CSV format), so torch's own parser turns
    # each checked cell into its _Action, OVERLAP_F_B cells included.
    actions = to_torch_order(schedule)
    try:
        # What _load_csv does after parsing: keep the compute order, then lower it to
        # compute + send/recv. torch re-validates the order here; its complaint becomes ours.
        runtime.pipeline_order = actions
        runtime._prepare_schedule_with_comms(actions)
    except (AssertionError, RuntimeError, ValueError) as e:
        msg = " ".join(str(e).split("\n\n")[0].split())
        raise SchedcError(f"{where}: torch's pipeline runtime rejected the schedule: {msg}") from e
    return runtime


def csv_schedule_factory(csv: str | os.PathLike | Schedule) -> Callable[..., CsvSchedule]:
    """A schedule "class" bound to one CSV, for trainers that take ``pipe_schedule_factory``.

    ``factory(stages, n_microbatches, loss_fn=None, scale_grads=True, **kw)`` accepts one stage
    or a list of stages, like torch's schedule classes. The CSV is parsed once, here.
    """
    schedule, where = _as_schedule(csv)

    def factory(
        stages: _PipelineStageBase | Sequence[_PipelineStageBase],
        n_microbatches: int,
        loss_fn: Callable[..., torch.Tensor] | None = None,
        scale_grads: bool = True,
        **kwargs: Any,
    ) -> CsvSchedule:
        return _build(schedule, where, stages, n_microbatches, loss_fn, scale_grads, **kwargs)

    factory.__name__ = factory.__qualname__ = f"csv_schedule[{where}]"
    factory.schedule = schedule  # type: ignore[attr-defined]
    return factory


@dataclass
class Pipeline:
    """What :func:`load_pipeline` (or :func:`load_torch_pipeline`) builds on one rank."""

    schedule: _PipelineSchedule
    stages: list[PipelineStage]
    modules: dict[int, nn.Module] = field(default_factory=dict)  # stage index -> module

    @property
    def is_first(self) -> bool:
        return any(s.is_first for s in self.stages)

    @property
    def is_last(self) -> bool:
        return any(s.is_last for s in self.stages)

    def parameters(self):
        seen: set[int] = set()
        for module in self.modules.values():
            for p in module.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield p

    def step(self, inputs, target=None, losses: list | None = None, return_outputs: bool = False,
             **kwargs):
        """One training step: ranks with the first stage pass ``inputs`` (a tensor or a tuple),
        ranks with the last stage pass ``target`` (and get per-microbatch losses in ``losses``).

        The last stage's outputs are kept and returned only with ``return_outputs=True``: torch's
        ``step`` keeps every microbatch's output until the step ends by default (on a language
        model, the logits of the whole batch), memory nobody asked for. Torch versions whose
        ``step`` has no such parameter keep them regardless."""
        args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        _check_batch(self.schedule, args if self.is_first else (), target if self.is_last else None)
        if _takes_return_outputs(self.schedule):
            kwargs["return_outputs"] = return_outputs
        return self.schedule.step(
            *(args if self.is_first else ()), target=target if self.is_last else None, losses=losses,
            **kwargs
        )


def _check_batch(schedule: _PipelineSchedule, args: tuple, target: Any) -> None:
    """A batch that the microbatches do not divide, refused before the step communicates: torch's
    stages size their receive buffers by the first microbatch, so an uneven split fails on another
    rank mid-step (or leaves this one waiting in recv). Only torch's default split (dim 0)."""
    n = getattr(schedule, "_n_microbatches", None)
    if not isinstance(n, int) or getattr(schedule, "_args_chunk_spec", None) is not None:
        return
    named = [(f"inputs[{i}]", a) for i, a in enumerate(args)] + [("target", target)]
    for what, value in named:
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] % n:
            raise SchedcError(f"step: {what} has {value.shape[0]} rows (dimension 0) but the schedule runs {n} "
                              f"microbatches; give a batch that is a multiple of {n} (torch splits it into "
                              f"equal microbatches)")


def _takes_return_outputs(schedule: _PipelineSchedule) -> bool:
    import inspect

    try:
        return "return_outputs" in inspect.signature(schedule.step).parameters
    except (TypeError, ValueError):
        return False


def load_pipeline(
    csv: str | os.PathLike | Schedule,
    model: nn.Module,
    loss_fn: Callable[..., torch.Tensor] | None,
    device: torch.device | str = "cpu",
    *,
    group: dist.ProcessGroup | None = None,
    n_microbatches: int | None = None,
    layers_per_stage: Sequence[int] | None = None,
    scale_grads: bool = True,
    split_kwargs: dict | None = None,
    activation_checkpoint: str | Sequence[str] = "none",
    memory_actions: Sequence[MemoryAction | dict] | None = None,
    **kwargs: Any,
) -> Pipeline:
    """Split ``model`` for this rank's CSV stages, wrap them as ``PipelineStage``s, build the
    schedule. ``model`` is an "embedding + blocks + head" model (see
    :func:`schedc.runtime.split.split_model`; ``split_kwargs`` passes its attribute names).
    ``activation_checkpoint``: "none", "light", "selective" or "full" for every stage, or a list
    with one per stage of the CSV, each a mode or a list with one per block of that stage
    (:mod:`schedc.runtime.checkpointing`; ``plan_settings("plan.json")`` gives a plan's), applied
    to each stage's blocks; a wrong type, mode or count is a ParameterError naming it, and
    "light" or "selective" on a stage other than 0 that the CSV runs as I and W is a SchedcError
    naming the stage (torch's split backward cannot go twice through a per-op checkpoint).
    ``memory_actions``: per (stage, microbatch) offloads to host memory and recomputes
    (:mod:`schedc.core.memory_actions`; a plan's come with ``plan_settings``), run by
    :mod:`schedc.runtime.offload`; one that does not fit the CSV is a SchedcError naming the entry.
    The process group must be initialized; the checks run before any communication.
    """
    schedule, where = _as_schedule(csv)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    stage_ids = stages_for_rank(schedule, rank, n_ranks=world)
    if n_microbatches is not None and (isinstance(n_microbatches, bool) or not isinstance(n_microbatches, int)):
        raise ParameterError("n_microbatches", f"must be an integer (the CSV's {schedule.n_microbatches}) or None, "
                             f"got {literal(repr(n_microbatches)[:40])}", python=True)
    if n_microbatches is not None and n_microbatches != schedule.n_microbatches:
        raise SchedcError(
            f"{where}: the CSV runs {schedule.n_microbatches} microbatches but "
            f"n_microbatches={n_microbatches} was asked for; pass the CSV's count"
        )
    modes = stage_modes(activation_checkpoint, schedule.n_stages, _blocks_given(layers_per_stage, schedule.n_stages))
    check_split_backward(modes, schedule, where)
    memory = _memory_actions(memory_actions, schedule, where)
    modules, stages = _make_stages(
        model, stage_ids, schedule.n_stages, device, group, layers_per_stage, split_kwargs
    )
    _checkpoint_stages(modules, modes, split_kwargs)
    runtime = _build(schedule, where, stages, n_microbatches, loss_fn, scale_grads, memory=memory, **kwargs)
    return Pipeline(runtime, stages, modules)


def _blocks_given(layers_per_stage, n_stages: int):
    """The blocks per stage when given for every stage (a per-block mode list is checked against
    them before anything is built; split_model names a wrong layers_per_stage itself)."""
    if layers_per_stage is None or len(layers_per_stage) != n_stages:
        return None
    return list(layers_per_stage)


def _checkpoint_stages(modules: dict[int, nn.Module], modes: list[str], split_kwargs: dict | None) -> None:
    blocks = (split_kwargs or {}).get("blocks", "blocks")
    for s, module in modules.items():
        apply_to_stage(module, modes[s], blocks=blocks)


def _make_stages(model, stage_ids, n_stages, device, group, layers_per_stage, split_kwargs):
    from schedc.runtime.split import split_model

    try:
        torch.device(device)
    except (RuntimeError, TypeError):
        raise ParameterError("device", f"{literal(shown(device))} is not a torch device; give e.g. 'cpu', 'cuda' or "
                             f"'cuda:0'", python=True) from None
    modules = split_model(
        model, stage_ids, n_stages, layers_per_stage=layers_per_stage, **(split_kwargs or {})
    )
    for module in modules.values():
        module.to(device)
    stages = [
        PipelineStage(modules[s], s, n_stages, torch.device(device), group=group)
        for s in stage_ids
    ]
    return modules, stages


def _torch_schedule_class(name: str) -> type:
    """torch's schedule class called `name` (``get_schedule_class``), refusing its abstract bases."""
    import inspect

    if not isinstance(name, str):
        raise ParameterError("name", f"{{param}}: expected a schedule name such as '1F1B', got "
                             f"{type(name).__name__} {literal(shown(name))}", python=True)
    try:
        cls = get_schedule_class(name)
    except ValueError as e:
        raise ParameterError("name", "{param}: " + literal(" ".join(str(e).split())), python=True) from None
    if inspect.isabstract(cls):
        raise ParameterError("name", f"{{param}}: {literal(repr(name))} is one of torch's abstract base classes; give "
                             f"a schedule class such as 1F1B, Interleaved1F1B or ZBVZeroBubble", python=True)
    return cls


def load_torch_pipeline(
    name: str,
    model: nn.Module,
    loss_fn: Callable[..., torch.Tensor] | None,
    n_microbatches: int,
    device: torch.device | str = "cpu",
    *,
    group: dist.ProcessGroup | None = None,
    stages_per_rank: int | None = None,
    layers_per_stage: Sequence[int] | None = None,
    scale_grads: bool = True,
    split_kwargs: dict | None = None,
    activation_checkpoint: str | Sequence[str] = "none",
    **kwargs: Any,
) -> Pipeline:
    """The same split, run by one of torch's built-in schedule classes (``"1F1B"``,
    ``"Interleaved1F1B"``, ``"ZBVZeroBubble"``, ... as ``get_schedule_class`` names them), for
    comparing a CSV with what torch ships. Stages per rank: 1 for single-stage classes, else
    ``stages_per_rank`` (default 2); placement as torchtitan builds it (V for ZBVZeroBubble and
    DualPipeV, loop otherwise). A name torch does not know, or one of its abstract base classes,
    is a ParameterError naming ``name`` (a script respells it as its own flag, as
    ``examples/train.py`` does with ``--torch-schedule``). ``activation_checkpoint`` as in
    :func:`load_pipeline`; "light" or "selective" on a stage the class runs as I and W (its
    zero-bubble classes; stage 0 aside) is a SchedcError before any communication.
    """
    cls = _torch_schedule_class(name)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    single = issubclass(cls, PipelineScheduleSingle)
    if stages_per_rank is not None and (isinstance(stages_per_rank, bool) or not isinstance(stages_per_rank, int)
                                        or stages_per_rank < 1 or (single and stages_per_rank != 1)):
        # a single-stage class would silently build one stage per rank instead
        raise ParameterError("stages_per_rank", f"{{param}}: {cls.__name__} runs "
                             f"{'one stage' if single else 'an integer >= 1 of stages'} per rank, got "
                             f"{literal(repr(stages_per_rank)[:40])}", python=True)
    per_rank = 1 if single else (stages_per_rank or 2)
    n_stages = world * per_rank
    placement_kind = "v" if issubclass(cls, (ScheduleZBVZeroBubble, ScheduleDualPipeV)) else "loop"
    from schedc.core.ir import make_placement

    placement = make_placement(placement_kind, n_stages, world)
    stage_ids = [s for s, r in enumerate(placement) if r == rank]
    modes = stage_modes(activation_checkpoint, n_stages, _blocks_given(layers_per_stage, n_stages))
    modules, stages = _make_stages(
        model, stage_ids, n_stages, device, group, layers_per_stage, split_kwargs
    )
    _checkpoint_stages(modules, modes, split_kwargs)
    runtime = cls(
        stages[0] if single else stages, n_microbatches, loss_fn=loss_fn,
        scale_grads=scale_grads, **kwargs,
    )
    # torch's zero-bubble classes split the backward; their order exists before any communication
    order = getattr(runtime, "pipeline_order", None) or {}
    check_split_stages(modes, {a.stage_index for acts in order.values() for a in _with_subactions(acts)
                               if a.computation_type.value in ("I", "W")}, f"torch's {cls.__name__}")
    return Pipeline(runtime, stages, modules)


def _with_subactions(actions):
    for a in actions:
        if a is not None:
            yield a
            yield from _with_subactions(a.sub_actions or ())
