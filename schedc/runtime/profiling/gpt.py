"""Profiling schedc's built-in GPT (:mod:`schedc.runtime.models`) as stages or units.

Problem: ``schedc profile`` and the benchmarks need a model that runs anywhere torch does.
Method: the GPT split with :func:`schedc.runtime.split.split_gpt` into stages
(:func:`gpt_stages`) or units (:func:`gpt_units`), checkpointed as the run settings say and
measured here (:func:`profile_gpt`) or, ``concurrent=N`` on a CPU host, in N processes at once
(:mod:`.concurrent`). Cost: the measurement's.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

import torch
import torch.nn as nn

from schedc.core.costs import PER_OP_AC, Profile, block_modes
from schedc.core.formatting import format_bytes
from schedc.core.settings import RunSettings
from schedc.errors import ParameterError, SchedcError, literal, python_spelling
from schedc.runtime.checkpointing import apply_to_stage, stage_modes
from schedc.runtime.models import GPT, GPTConfig, lm_loss, make_batch, parse_dtype
from schedc.runtime.profiling.assemble import assemble, profile_stages, profile_units, with_modules
from schedc.runtime.profiling.concurrent import measure_concurrently
from schedc.runtime.profiling.device import resolve_device
from schedc.runtime.profiling.measurement import Measurement, split_options
from schedc.runtime.profiling.memory import optimizer_factor
from schedc.runtime.profiling.noise import contention_note
from schedc.runtime.profiling.stages import ProgressFn
from schedc.runtime.split import split_gpt


def gpt_stages(config, n_stages: int) -> list[nn.Module]:
    """The built-in GPT (schedc.runtime.models) split into `n_stages` contiguous stages."""

    if n_stages < 1:
        raise ParameterError("n_stages", f"{{param}} must be >= 1, got {literal(n_stages)}", flag="--stages")
    stages = split_gpt(GPT(config), range(n_stages), n_stages)
    return [stages[s] for s in range(n_stages)]


def gpt_units(config) -> tuple[list[nn.Module], list[list[str]]]:
    """The built-in GPT as units (its ``embed``, each of its ``blocks``, ``norm`` + ``head``): one
    stage module per unit and the module names each holds."""

    n = config.layers + 2
    stages = split_gpt(GPT(config), range(n), n, layers_per_stage=[0] + [1] * config.layers + [0])
    names = [["embed"]] + [[f"blocks.{i}"] for i in range(config.layers)] + [["norm", "head"]]
    return [stages[s] for s in range(n)], names


def gpt_label(config, n_stages: int, parts: str = "stages") -> str:
    """The profile's ``model`` field for the built-in GPT, e.g. 'gpt(layers=4, ...)/2 stages'."""
    return (
        f"gpt(layers={config.layers}, hidden={config.hidden}, heads={config.heads}, seq={config.seq_len}, "
        f"vocab={config.vocab_size})/{n_stages} {parts}"
    )


@python_spelling
def profile_gpt(
    config,
    n_stages: int,
    microbatch_size: int,
    *,
    settings: Optional[RunSettings] = None,
    measurement: Optional[Measurement] = None,
    progress: Optional[ProgressFn] = None,
    units: bool = False,
    reuse_layers: bool = True,
    **options,
) -> Profile:
    """Profile schedc's built-in GPT (``GPTConfig``) split into `n_stages`, one microbatch of
    `microbatch_size` sequences, for the run `settings` (:class:`schedc.core.settings.RunSettings`:
    its ``dtype`` overrides ``config.dtype``, its ``seq`` is the config's ``seq_len``), measured as
    `measurement` says (:class:`Measurement`); ``options`` are fields of either, over it.

    ``concurrent=N`` (CPU only) measures in N processes at once, each timing every stage, and
    pools their samples: N ranks on one host share its cores and memory bandwidth, so this is
    what each of them will see when they run the pipeline together.

    ``units=True`` ignores `n_stages` and writes a per-unit profile (:func:`gpt_units`,
    :func:`measure_units`; ``reuse_layers`` as there)."""
    if not isinstance(config, GPTConfig):
        raise ParameterError("config", f"{{param}} must be a schedc.runtime.GPTConfig, got {type(config).__name__}")
    run, how = split_options("profile_gpt", settings, measurement, options)
    concurrent = how.concurrent
    for param, value, flag in (("n_stages", n_stages, "--stages"), ("microbatch_size", microbatch_size, "--mbs"),
                               ("concurrent", concurrent, "")):
        if isinstance(value, bool) or not isinstance(value, int):  # before a comparison's TypeError
            raise ParameterError(param, f"{{param}} must be an integer, got {literal(repr(value)[:40])}", flag=flag)
    if microbatch_size < 1:
        raise ParameterError("microbatch_size", f"{{param}} must be >= 1, got {literal(microbatch_size)}", flag="--mbs")
    try:
        if run.dtype is not None:
            config = dataclasses.replace(config, dtype=run.dtype)
        parse_dtype(config.dtype)
    except ValueError as e:
        raise ParameterError("dtype", literal(e)) from None
    dev = resolve_device(how.device)
    check_fits(config, dev, run.optimizer, max(1, concurrent))
    run = run.but(seq=config.seq_len, microbatch_size=microbatch_size, dtype=config.dtype)
    try:
        stages, names = gpt_units(config) if units else (gpt_stages(config, n_stages), None)
    except ValueError as e:
        raise ParameterError("n_stages", f"{{name}}{literal(n_stages)}: {literal(e)}", flag="--stages") from None
    if units:  # the layer units, as measure_units_ac checkpoints them
        if concurrent > 1 and run.activation_checkpoint != "none":
            raise ParameterError("concurrent", "{param} measures without activation checkpointing; drop one of them")
    else:
        _checkpoint(stages, run.activation_checkpoint, concurrent)
    tokens, targets = make_batch(config, microbatch_size, seed=0)
    model = gpt_label(config, len(stages), "units" if units else "stages")
    if concurrent < 1:
        raise ParameterError("concurrent", f"{{param}} must be >= 1, got {literal(concurrent)}")
    if concurrent > 1:
        if dev.type != "cpu":
            raise ParameterError("concurrent", "{param} is for CPU hosts whose ranks share cores; a GPU rank has its "
                                               "own device")
        if isinstance(how.comm, str):
            raise ParameterError("concurrent", "{param} and measuring comm do not mix; measure comm separately under "
                                               "torchrun")
        if progress:
            progress(f"profiling {len(stages)} {'units' if units else 'stages'} in {concurrent} processes at once "
                     f"({how.warmup} warm-up + {how.repeats} runs each)")
        busy = contention_note(dev, concurrent)
        measured = measure_concurrently(config, n_stages, run, how, units, reuse_layers)
        profile = assemble(measured, dev, model, run, how,
                           notes=busy + [f"measured in {concurrent} concurrent processes (ranks sharing this "
                                         f"host), samples pooled"])
        if not units:
            return profile
        assert names is not None  # gpt_units names what each unit holds
        return with_modules(profile, names)
    common = dict(loss_fn=lm_loss, target=targets, settings=run, measurement=how.but(device=dev), model=model,
                  progress=progress)
    if units:
        return profile_units(stages, names, tokens, reuse_layers=reuse_layers, **common)
    return profile_stages(stages, tokens, **common)


def check_fits(config: GPTConfig, dev: torch.device, optimizer: Optional[str], processes: int = 1) -> None:
    """A SchedcError naming the shape when the GPT's parameters, gradients and optimizer state
    alone exceed the device's memory (this host's, on a CPU, for `processes` copies): torch would
    fail to allocate with a traceback, or the kernel kill the process once the weights are
    written. Method: the model built on the meta device (no storage), its parameters counted.
    Cost: building the modules without memory, milliseconds for a model that fits."""
    with torch.device("meta"):
        n_params = sum(p.numel() for p in GPT(config, seed=None).parameters())
    per_param = config.torch_dtype.itemsize * (2 + optimizer_factor(optimizer))
    need = n_params * per_param * processes
    if dev.type == "cuda":
        have, where = torch.cuda.get_device_properties(dev).total_memory, f"{dev}'s"
    else:
        have, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this host's"
    if need > have:
        copies = f" in {processes} processes" if processes > 1 else ""
        raise SchedcError(f"model: the GPT's {n_params:,} parameters hold {format_bytes(need)} with their gradients "
                          f"and optimizer state{copies}, more than {where} {format_bytes(have)}; give a smaller hidden, "
                          f"layers or vocab size (--hidden, --layers, --vocab)")


def _checkpoint(stages: Sequence[nn.Module], choice, concurrent: int) -> None:
    """Apply ``RunSettings.activation_checkpoint`` (one mode, or one per stage) to the GPT's
    stages' blocks. The per-op modes (light, selective) cannot run under the split backward the
    stage route times, in a stage's own mode or in any of its blocks' (the unit route measures
    them: :func:`measure_units_ac`)."""

    modes = stage_modes(choice, len(stages))
    if all(m == "none" for m in modes):
        return
    per_op = next((b for b in block_modes(modes) if b in PER_OP_AC), None)
    if per_op is not None:
        raise ParameterError("activation_checkpoint", f"{{param}} {literal(repr(per_op))}: torch's split backward (I, "
                             "then W) cannot go twice through a region checkpointed per op, so a stage cannot be "
                             "profiled as I and W; measure per-unit profiles (units=True, --units), which time such "
                             "layers' whole backward, or use full", flag="--ac", python=True)
    if concurrent > 1:
        raise ParameterError("concurrent", "{param} measures without activation checkpointing; drop one of them")
    for stage, mode in zip(stages, modes):
        apply_to_stage(stage, mode)
