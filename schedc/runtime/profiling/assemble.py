"""Measurements into a ``schedc.profile/v1`` Profile: the public profiling entry points.

Problem: a profile is more than the medians: each boundary's bytes and seconds, the run's
static bytes per parameter, the reserve outside the allocator, notes with the spreads and what
was assumed. Method: :func:`profile_stages` (a pipeline's stage modules) and
:func:`profile_units` (a model's units) measure (:mod:`.stages`, :mod:`.units`) and
:func:`assemble` adds communication (:mod:`.comm`), static bytes per :class:`RunSettings`, the
reserve and ``assumes``; :func:`to_profile` writes the fields. Cost: the measurement's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Literal, Optional, Sequence, SupportsFloat, Union, cast

import torch
import torch.nn as nn

from schedc.core.costs import PER_OP_AC, Profile, StageCost, block_modes
from schedc.core.formatting import format_bytes
from schedc.core.settings import RunSettings
from schedc.errors import SchedcError, python_spelling
from schedc.runtime.profiling.comm import comm_seconds, measure_p2p_seconds
from schedc.runtime.profiling.device import device_label, dtype_of, resolve_device
from schedc.runtime.profiling.measurement import Measurement, split_options
from schedc.runtime.profiling.memory import reserve_bytes_of
from schedc.runtime.profiling.noise import contention_note, timing_warning
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
            # keyed by action kind as the measurement names them; StageCost's validation checks each key
            transient_bytes=cast("dict[Literal['F', 'I', 'W', 'B'], float]",
                                 {k: float(v) for k, v in m.transient.items()}) or None,
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
    comm_value = float(comm) if isinstance(comm, SupportsFloat) else [float(c) for c in comm]
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
    *,
    settings: Optional[RunSettings] = None,
    measurement: Optional[Measurement] = None,
    model: Optional[str] = None,
    progress: Optional[ProgressFn] = None,
    **options,
) -> Profile:
    """Profile a pipeline given as its stage modules, in order; returns a ``schedc.profile/v1`` Profile.

    ``sample_input`` is one microbatch for stage 0 (a tensor or tuple); ``loss_fn(output, target)``
    turns the last stage's output into the loss (without it the last output must be a scalar).
    ``settings`` (:class:`schedc.core.settings.RunSettings`) is the run the numbers are for: its
    ``optimizer`` (whose state counts in static bytes; ``"none"`` for none), ``dtype`` (default: the
    modules'), ``microbatch_size`` (recorded; the sample decides what runs, so it is left out when
    neither it nor ``settings`` is given), the bytes per parameter and ``reserve_bytes``;
    ``assumes`` records it. Stage modules are measured as given, so checkpoint them first
    (:func:`checkpoint_blocks`). ``measurement`` (:class:`Measurement`) is where and how: device,
    warm-up and timed runs, communication. ``options``: fields of either object, over it
    (``device="cuda", repeats=7, optimizer="sgd"``).
    """
    run, how = split_options("profile_stages", settings, measurement, options)
    labelled = settings is not None or options.get("microbatch_size") is not None
    return _profile(stage_modules, sample_input, loss_fn, target, run, how, model, progress, labelled)


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
    a note records them, since a framework's split must give them to every stage. The settings'
    ``activation_checkpoint`` (one mode) is applied to the layer units (:func:`measure_units_ac`).
    ``options`` are :func:`profile_stages`'s (settings, measurement, model, progress and their
    fields)."""
    settings, measurement = options.pop("settings", None), options.pop("measurement", None)
    model, progress = options.pop("model", None), options.pop("progress", None)
    run, how = split_options("profile_units", settings, measurement, options)
    labelled = settings is not None or options.get("microbatch_size") is not None
    units = Units(unit_names, reuse_layers, tuple(shared))
    return _profile(unit_modules, sample_input, loss_fn, target, run, how, model, progress, labelled, units)


@dataclass(frozen=True)
class Units:
    """What makes a measurement per unit: each module's names, whether identical layers are
    measured once, the modules every unit also kept."""

    names: Sequence[Sequence[str]]
    reuse_layers: bool = True
    shared: tuple[str, ...] = ()


def _profile(modules, sample_input, loss_fn, target, run: RunSettings, how: Measurement, model, progress,
             labelled: bool, units: Optional[Units] = None) -> Profile:
    dev = resolve_device(how.device)
    notes = contention_note(dev, 1)
    if units is None:
        measured = measure_stages(modules, sample_input, loss_fn, target, dev, how.warmup, how.repeats, run.optimizer,
                                  progress)
    else:
        if len(units.names) != len(modules):
            raise SchedcError(f"profile_units: {len(modules)} unit modules but {len(units.names)} name lists")
        measured = measure_units(modules, sample_input, loss_fn, target, reuse_layers=units.reuse_layers, device=dev,
                                 warmup=how.warmup, repeats=how.repeats, optimizer=run.optimizer, progress=progress,
                                 activation_checkpoint=unit_mode(run), unit_names=units.names)
        if units.shared:
            notes.append(f"every unit also kept {', '.join(units.shared)} (modules every stage needs; not listed in "
                         f"'modules')")
        notes.append(f"per-unit profile: {len(modules)} units, each measured as its own pipeline stage"
                     + ("; identical layers measured once" if units.reuse_layers else "; every unit measured"))
    run = run.but(dtype=run.dtype or dtype_of(modules))
    profile = assemble(measured, dev, model, run, how, notes=notes, labelled=labelled)
    return profile if units is None else with_modules(profile, units.names)


def with_modules(profile: Profile, unit_names: Sequence[Sequence[str]]) -> Profile:
    """The profile with ``modules`` set on every stage (unit) from ``unit_names``."""
    stages = [st.model_copy(update={"modules": list(names)}) for st, names in zip(profile.stages, unit_names)]
    return profile.model_copy(update={"stages": stages})


def assemble(measured, dev, model, run: RunSettings, how: Measurement, notes: Sequence[str] = (),
             labelled: bool = True) -> Profile:
    """The profile of `measured` for the run `run`, measured on `dev` as `how` says: communication,
    static bytes per parameter, the reserve, ``assumes``; ``labelled``: whether the run's
    microbatch size is recorded (it is not where only the sample said it)."""
    measured = [_with_param_cost(m, run) for m in measured]
    boundary_bytes = [m.output_bytes for m in measured[:-1]]
    notes = list(notes)
    comm, bandwidth, latency = how.comm, how.comm_bandwidth, how.comm_latency
    if isinstance(comm, str):
        if comm != "measure":
            raise SchedcError(f"comm must be seconds, a list of seconds or 'measure', got {comm!r}")
        comm_value: Union[float, list[float]] = measure_p2p_seconds(boundary_bytes, dev)
        notes.append("comm: measured send/recv between ranks 0 and 1 (half a ping-pong, median)")
    elif comm is not None:
        comm_value = float(comm) if isinstance(comm, SupportsFloat) else list(comm)
    else:
        comm_value = comm_seconds(boundary_bytes, bandwidth, latency)
        if bandwidth is None and latency == 0:
            notes.append("comm: no bandwidth or latency given; communication is taken as free (0 s)")
        else:
            notes.append(
                f"comm: latency {latency:g}s + activation bytes / "
                f"{'inf' if bandwidth is None else f'{bandwidth:g}'} B/s"
            )
    if dev.type == "cpu":
        notes.append(f"cpu threads: {torch.get_num_threads()}")
    reserve, reserve_note = reserve_bytes_of(dev, run.reserve_bytes)
    if reserve_note:
        notes.append(reserve_note)
    mbs = run.microbatch_size if labelled else None
    return to_profile(
        measured,
        comm=comm_value,
        device=device_label(dev),
        model=model,
        microbatch_size=mbs,
        dtype=run.dtype,
        extra_notes=notes,
        assumes=_assumes(measured, mbs, run, reserve),
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


def _assumes(measured, microbatch_size, settings: RunSettings, reserve) -> dict:
    """What the numbers took about the run (the plan report's ``assumes``), from the one settings object."""
    out = {"dtype": settings.dtype, "optimizer": settings.optimizer, "microbatch_size": microbatch_size,
           "static_bytes_per_param": _static_per_param(measured),
           "grad_bytes_per_param": settings.grad_bytes_per_param,
           "optimizer_bytes_per_param": settings.optimizer_bytes_per_param,
           "activation_checkpoint": settings.activation_checkpoint,
           # as schedc.model_costs' unit_profile records it: torch refuses W after I through a per-op
           # checkpoint, so such layers run (and were measured as) one whole backward B
           "split_backward": not _per_op(settings.activation_checkpoint), "dp_shard": 1, "tp": 1,
           "torch": torch.__version__.split("+")[0], "reserve_bytes": reserve}
    if settings.seq is not None:
        out["seq_len"] = settings.seq
    return {k: v for k, v in out.items() if v is not None}


def _per_op(choice) -> bool:
    """Whether an activation-checkpointing choice (a mode, or one per stage or block) has a per-op mode."""

    return any(b in PER_OP_AC for b in block_modes(choice or ()))

