"""Measurements into a ``schedc.profile/v1`` Profile: the public profiling entry points.

Problem: a profile is more than the medians: each boundary's bytes and seconds, the run's
static bytes per parameter, the reserve outside the allocator, notes with the spreads and what
was assumed. Method: :func:`profile_stages` (a pipeline's stage modules) and
:func:`profile_units` (a model's units) measure (:mod:`.stages`, :mod:`.units`) and
:func:`assemble` adds communication (:mod:`.comm`), static bytes per :class:`RunSettings`, the
reserve and ``assumes``; :func:`to_profile` writes the fields. Cost: the measurement's.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable, Optional, Sequence, Union

import torch
import torch.nn as nn

from schedc.core.costs import PER_OP_AC, Profile, StageCost, block_modes, format_bytes
from schedc.errors import SchedcError, python_spelling
from schedc.runtime.profiling.comm import comm_seconds, measure_p2p_seconds
from schedc.runtime.profiling.device import device_label, dtype_of, resolve_device
from schedc.runtime.profiling.memory import reserve_bytes_of
from schedc.runtime.profiling.noise import contention_note, timing_warning
from schedc.runtime.profiling.settings import RunSettings
from schedc.runtime.profiling.stages import ProgressFn, StageMeasurement, measure_stages
from schedc.runtime.profiling.units import measure_units, unit_mode


def to_profile(
    measured: Sequence[StageMeasurement],
    comm: Union[float, Sequence[float]] = 0.0,
    device: Optional[str] = None,
    model: Optional[str] = None,
    microbatch_size: Optional[int] = None,
    dtype: Optional[str] = None,
    extra_notes: Sequence[str] = (),
    assumes: Optional[dict] = None,
    reserve_bytes: Optional[float] = None,
) -> Profile:
    """The profile of `measured` stages: median times, the allocator's bytes, each boundary's
    bytes (the output of every stage but the last), notes with the spreads."""
    stages = [
        StageCost(
            forward=m.forward.median,
            backward_input=m.backward_input.median,
            backward_weight=m.backward_weight.median,
            activation_bytes=m.activation_bytes,
            weight_grad_bytes=m.weight_grad_bytes,
            static_bytes=m.static_bytes,
            transient_bytes={k: float(v) for k, v in m.transient.items()} or None,
        )
        for m in measured
    ]
    notes = list(extra_notes)
    warning = timing_warning(measured)
    if warning:
        notes.append(warning)
    for m in measured:
        iw = m.backward_input.median + m.backward_weight.median
        b = m.backward_full.median
        line = (
            f"stage {m.index}: F {m.forward}, I {m.backward_input}, W {m.backward_weight}, "
            f"B {m.backward_full} (I+W = {iw / b:.2f} x B), {m.n_params} params, "
            f"activation {format_bytes(m.activation_bytes)}, held I..W {format_bytes(m.weight_grad_bytes)}, "
            f"output {format_bytes(m.output_bytes)}"
        )
        if m.transient:
            line += ", transient " + ", ".join(f"{k} {format_bytes(v)}" for k, v in m.transient.items())
        if m.cuda_after_forward is not None:
            line += (
                f"; cuda allocator after F +{format_bytes(m.cuda_after_forward)}, "
                f"after I +{format_bytes(m.cuda_after_input or 0)}"
            )
        notes.append(line)
        notes.extend(m.notes)
    comm_value: Union[float, list[float]]
    comm_value = [float(c) for c in comm] if isinstance(comm, (list, tuple)) else float(comm)
    if isinstance(comm_value, list) and len(measured) == 1:
        comm_value = 0.0
    return Profile(
        stages=stages,
        comm=comm_value,
        device=device,
        model=model,
        microbatch_size=microbatch_size,
        dtype=dtype,
        torch_version=torch.__version__,
        created=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        notes=notes,
        runtime="torch",  # measured with torch's split backward: stage 0's I is empty, its W the whole backward
        boundary_bytes=[float(m.output_bytes) for m in measured[:-1]] if len(measured) > 1 else None,
        assumes=assumes,
        reserve_bytes=reserve_bytes,
    )


@python_spelling
def profile_stages(
    stage_modules: Sequence[nn.Module],
    sample_input,
    loss_fn: Optional[Callable] = None,
    target=None,
    device: Union[str, torch.device, None] = "cpu",
    warmup: int = 2,
    repeats: int = 5,
    optimizer: Optional[str] = "adamw",
    comm: Union[None, float, Sequence[float], str] = None,
    comm_bandwidth: Optional[float] = None,
    comm_latency: float = 0.0,
    model: Optional[str] = None,
    microbatch_size: Optional[int] = None,
    dtype: Optional[str] = None,
    progress: Optional[ProgressFn] = None,
    *,
    unit_names: Optional[Sequence[Sequence[str]]] = None,
    reuse_layers: bool = True,
    shared: Sequence[str] = (),
    settings: Optional[RunSettings] = None,
) -> Profile:
    """Profile a pipeline given as its stage modules, in order; returns a ``schedc.profile/v1`` Profile.

    ``sample_input`` is one microbatch for stage 0 (a tensor or tuple); ``loss_fn(output, target)``
    turns the last stage's output into the loss (without it the last output must be a scalar).
    ``comm``: seconds per boundary (a number or one per boundary), ``"measure"`` for a ping-pong
    between ranks 0 and 1 (every rank must call, under torchrun), or None to compute
    ``comm_latency + bytes / comm_bandwidth`` from each boundary's activation (0 without either).
    With ``unit_names`` (one list of module names per module) the modules are a model's units
    and the result a per-unit profile (:func:`profile_units`). ``settings`` (:class:`RunSettings`)
    states what the run holds per parameter and outside the allocator; ``assumes`` records it. Its
    ``activation_checkpoint`` is applied to a per-unit profile's layers (:func:`measure_units_ac`);
    stage modules are measured as given, so checkpoint them first (:func:`checkpoint_blocks`).
    """
    dev = resolve_device(device)
    notes = contention_note(dev, 1)
    if unit_names is None:
        measured = measure_stages(stage_modules, sample_input, loss_fn, target, dev, warmup, repeats, optimizer,
                                  progress)
    else:
        if len(unit_names) != len(stage_modules):
            raise SchedcError(f"profile_units: {len(stage_modules)} unit modules but {len(unit_names)} name lists")
        measured = measure_units(stage_modules, sample_input, loss_fn, target, reuse_layers=reuse_layers, device=dev,
                                 warmup=warmup, repeats=repeats, optimizer=optimizer, progress=progress,
                                 activation_checkpoint=unit_mode(settings), unit_names=unit_names)
        if shared:
            notes.append(f"every unit also kept {', '.join(shared)} (modules every stage needs; not listed in "
                         f"'modules')")
        notes.append(f"per-unit profile: {len(stage_modules)} units, each measured as its own pipeline stage"
                     + ("; identical layers measured once" if reuse_layers else "; every unit measured"))
    profile = assemble(measured, dev, comm, comm_bandwidth, comm_latency, model, microbatch_size,
                        dtype or dtype_of(stage_modules), notes=notes, optimizer=optimizer, settings=settings)
    return profile if unit_names is None else with_modules(profile, unit_names)


@python_spelling
def profile_units(
    unit_modules: Sequence[nn.Module],
    unit_names: Sequence[Sequence[str]],
    sample_input,
    loss_fn: Optional[Callable] = None,
    target=None,
    *,
    reuse_layers: bool = True,
    shared: Sequence[str] = (),
    **options,
) -> Profile:
    """A per-unit profile: each unit (embedding, each layer, final norm + head + loss, in model
    order) measured as its own stage (:func:`measure_units`), with ``modules`` = ``unit_names[i]``,
    so that ``Profile.merge(counts)`` gives the profile of any contiguous partition. ``shared``
    names modules every unit kept besides its own (e.g. a Hugging Face model's ``rotary_emb``);
    a note records them, since a framework's split must give them to every stage. ``options``
    are :func:`profile_stages`'s (device, warmup, repeats, comm, ...)."""
    return profile_stages(unit_modules, sample_input, loss_fn, target, unit_names=unit_names,
                          reuse_layers=reuse_layers, shared=shared, **options)


def with_modules(profile: Profile, unit_names: Sequence[Sequence[str]]) -> Profile:
    """The profile with ``modules`` set on every stage (unit) from ``unit_names``."""
    stages = [st.model_copy(update={"modules": list(names)}) for st, names in zip(profile.stages, unit_names)]
    return profile.model_copy(update={"stages": stages})


def assemble(measured, dev, comm, comm_bandwidth, comm_latency, model, microbatch_size, dtype,
              notes: Sequence[str] = (), optimizer: Optional[str] = "adamw",
              settings: Optional[RunSettings] = None) -> Profile:
    settings = settings or RunSettings()
    measured = [_with_param_cost(m, settings) for m in measured]
    boundary_bytes = [m.output_bytes for m in measured[:-1]]
    notes = list(notes)
    if isinstance(comm, str):
        if comm != "measure":
            raise SchedcError(f"comm must be seconds, a list of seconds or 'measure', got {comm!r}")
        comm_value: Union[float, list[float]] = measure_p2p_seconds(boundary_bytes, dev)
        notes.append("comm: measured send/recv between ranks 0 and 1 (half a ping-pong, median)")
    elif comm is not None:
        comm_value = list(comm) if isinstance(comm, (list, tuple)) else float(comm)
    else:
        comm_value = comm_seconds(boundary_bytes, comm_bandwidth, comm_latency)
        if comm_bandwidth is None and comm_latency == 0:
            notes.append("comm: no bandwidth or latency given; communication is taken as free (0 s)")
        else:
            notes.append(
                f"comm: latency {comm_latency:g}s + activation bytes / "
                f"{'inf' if comm_bandwidth is None else f'{comm_bandwidth:g}'} B/s"
            )
    if dev.type == "cpu":
        notes.append(f"cpu threads: {torch.get_num_threads()}")
    reserve, reserve_note = reserve_bytes_of(dev, settings.reserve_bytes)
    if reserve_note:
        notes.append(reserve_note)
    return to_profile(
        measured,
        comm=comm_value,
        device=device_label(dev),
        model=model,
        microbatch_size=microbatch_size,
        dtype=dtype,
        extra_notes=notes,
        assumes=_assumes(measured, dtype, optimizer, microbatch_size, settings, reserve),
        reserve_bytes=reserve,
    )


def _with_param_cost(m: StageMeasurement, settings: RunSettings) -> StageMeasurement:
    """`m` with static bytes per `settings`: the weight as measured, then the gradient and optimizer
    bytes per parameter the run holds where given (the counted route's rule)."""
    if settings.grad_bytes_per_param is None and settings.optimizer_bytes_per_param is None:
        return m
    grad_state = m.static_bytes - m.param_bytes  # as the modules hold them: gradient + optimizer state
    per_param = m.param_bytes / m.n_params if m.n_params else 0.0
    grad = settings.grad_bytes_per_param if settings.grad_bytes_per_param is not None else per_param
    if settings.optimizer_bytes_per_param is not None:
        state = settings.optimizer_bytes_per_param * m.n_params
    else:
        state = grad_state - per_param * m.n_params
    out = StageMeasurement.from_dict(m.to_dict())
    out.static_bytes = int(round(m.param_bytes + grad * m.n_params + state))
    return out


def _static_per_param(measured: Sequence[StageMeasurement]) -> Optional[float]:
    n = sum(m.n_params for m in measured)
    return round(sum(m.static_bytes for m in measured) / n, 3) if n else None


def _assumes(measured, dtype, optimizer, microbatch_size, settings: RunSettings, reserve) -> dict:
    """What the numbers took about the run (the plan report's ``assumes``)."""
    out = {"dtype": dtype, "optimizer": optimizer or "none", "microbatch_size": microbatch_size,
           "static_bytes_per_param": _static_per_param(measured),
           "grad_bytes_per_param": settings.grad_bytes_per_param,
           "optimizer_bytes_per_param": settings.optimizer_bytes_per_param,
           "activation_checkpoint": settings.activation_checkpoint,
           # as schedc.model_costs' unit_profile records it: torch refuses W after I through a per-op
           # checkpoint, so such layers run (and were measured as) one whole backward B
           "split_backward": not _per_op(settings.activation_checkpoint), "dp_shard": 1, "tp": 1,
           "torch": torch.__version__.split("+")[0], "reserve_bytes": reserve}
    if settings.seq_len is not None:
        out["seq_len"] = settings.seq_len
    return {k: v for k, v in out.items() if v is not None}


def _per_op(choice) -> bool:
    """Whether an activation-checkpointing choice (a mode, or one per stage or block) has a per-op mode."""

    return any(b in PER_OP_AC for b in block_modes(choice or ()))

