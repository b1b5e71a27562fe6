"""Per-unit measurement: each unit of a model (embedding, each layer, head) as its own stage.

Problem: ``schedc plan`` merges units into any contiguous partition, so each unit's costs are
needed once, and a decoder's identical layers need not be measured again. Method: every unit is a
stage of :func:`schedc.runtime.profiling.stages.measure_stages`; a layer whose
:func:`unit_signature` equals an earlier one's reuses its measurement (``reuse_layers``;
``benchmarks/unit_reuse.py`` compares). With an activation-checkpointing mode the layer units are
checkpointed with the runtime's code (:func:`measure_units_ac`); under a per-op mode (light,
selective), which torch's split backward cannot run, a layer's F and whole backward B are measured
and recorded as I = B - W with W the layer's own without checkpointing. Cost: one stage
measurement per distinct unit, and for a per-op mode once more F and B of the layer units.
"""

from __future__ import annotations

import re
from typing import Callable, Optional, Sequence

import torch.nn as nn

from schedc.core.costs import PER_OP_AC
from schedc.core.formatting import format_bytes
from schedc.core.settings import RunSettings
from schedc.errors import ParameterError, SchedcError, literal
from schedc.runtime.checkpointing import check_mode, checkpoint_block
from schedc.runtime.one_rank import runtime_action_times
from schedc.runtime.profiling.device import resolve_device
from schedc.runtime.profiling.runner import StageRunner, stage_samples
from schedc.runtime.profiling.stage_memory import BMemory, memory_b
from schedc.runtime.profiling.stages import ProgressFn, StageMeasurement, measure_stages
from schedc.runtime.profiling.timing import Stat, time_b


def unit_signature(module: nn.Module) -> tuple:
    """What makes two units cost the same: their module tree (classes), parameters and buffers
    (shapes, dtypes, requires_grad) and every public str/int/float/bool/None attribute of their
    submodules except indices (names with 'idx' or 'index'), e.g. a Hugging Face layer's
    ``layer_type`` and ``sliding_window``, which change what its forward computes."""
    tree = []
    for _, sub in module.named_modules():
        attrs = tuple(sorted(
            (k, v) for k, v in vars(sub).items()
            if not k.startswith("_") and "idx" not in k and "index" not in k
            and (v is None or isinstance(v, (str, int, float, bool)))
        ))
        tree.append((type(sub).__qualname__, attrs))
    params = tuple((tuple(p.shape), p.dtype, p.requires_grad) for p in module.parameters())
    buffers = tuple((tuple(b.shape), b.dtype) for b in module.buffers())
    return tuple(tree), params, buffers


def _unit_sources(unit_modules: Sequence[nn.Module], reuse_layers: bool) -> list[int]:
    """For each unit, the unit whose measurement it takes: itself, or with `reuse_layers` the
    first with the same :func:`unit_signature` (never the first or the last unit)."""
    n = len(unit_modules)
    source: list[int] = []
    first_of: dict[tuple, int] = {}
    for i, module in enumerate(unit_modules):
        edge = i in (0, n - 1)  # the first and last stage run differently (no I; the loss)
        key = (i,) if edge or not reuse_layers or not isinstance(module, nn.Module) else unit_signature(module)
        source.append(first_of.setdefault(key, i))
    return source


def measure_units(
    unit_modules: Sequence[nn.Module],
    sample_input,
    loss_fn: Optional[Callable] = None,
    target=None,
    *,
    reuse_layers: bool = True,
    activation_checkpoint: str = "none",
    unit_names: Optional[Sequence[Sequence[str]]] = None,
    **options,
) -> list[StageMeasurement]:
    """Measure every unit of a model as its own pipeline stage (:func:`measure_stages`, whose
    ``device``, ``warmup``, ``repeats``, ``optimizer`` and ``progress`` go in ``options``).

    With ``reuse_layers`` a unit whose :func:`unit_signature` equals an earlier one's (the layers
    of a decoder, but never the first or the last unit) is not measured again: it gets the earlier
    unit's measurement, and a note says so. ``benchmarks/unit_reuse.py`` measures what that costs
    against measuring every unit; ``reuse_layers=False`` measures every unit.

    ``activation_checkpoint`` (one mode) checkpoints every layer unit as the runtime would
    (:func:`measure_units_ac`, which needs ``unit_names`` to find a unit's blocks)."""
    if activation_checkpoint != "none":
        return measure_units_ac(unit_modules, sample_input, loss_fn, target, activation_checkpoint,
                                unit_names=unit_names, reuse_layers=reuse_layers, **options)[activation_checkpoint]
    source = _unit_sources(unit_modules, reuse_layers)
    distinct = sorted(set(source))
    measured = {m.index: m for m in measure_stages(unit_modules, sample_input, loss_fn, target, only=distinct,
                                                   **options)}
    out = []
    for i, src in enumerate(source):
        m = measured[src]
        if src != i:
            m = StageMeasurement.from_dict({**m.to_dict(), "index": i, "notes": [
                f"stage {i}: identical to stage {src} (same modules, shapes and settings): its measurement is "
                f"reused (measure every unit to time it apart)"]})
        out.append(m)
    return out



_BLOCK_NAME = re.compile(r"(^|\.)\w+\.\d+$")  # "layers.3", "model.layers.3", "blocks.0": one block


def unit_mode(settings: Optional[RunSettings]) -> str:
    """The one activation-checkpointing mode of a per-unit measurement (``RunSettings``)."""

    mode = (settings or RunSettings()).activation_checkpoint
    if not isinstance(mode, str):
        raise ParameterError("activation_checkpoint", "{param}: a measured per-unit profile takes one mode for every "
                             "layer unit; measure each mode apart and plan with --ac auto", flag="--ac", python=True)
    return check_mode(mode)


def unit_blocks(module: nn.Module, names: Sequence[str]) -> list[nn.Module]:
    """The blocks of a unit (or stage) module: the members of its ``blocks`` container (what
    :func:`schedc.runtime.split.split_model` keeps, and ``load_pipeline`` checkpoints), else its
    modules whose names end in an index (``layers.3``, ``model.layers.3``)."""
    container = getattr(module, "blocks", None)
    if isinstance(container, (nn.ModuleList, nn.Sequential, nn.ModuleDict)):
        return list(container.values() if isinstance(container, nn.ModuleDict) else container)
    found = []
    for name in names:
        if _BLOCK_NAME.search(name):
            try:
                found.append(module.get_submodule(name))
            except AttributeError:
                continue
    return found


def checkpoint_blocks(modules: Sequence[nn.Module], names: Sequence[Sequence[str]], mode: str,
                      which: Sequence[int]) -> None:
    """Checkpoint the blocks of ``modules[i]`` for each i in `which` as `mode` with
    :func:`schedc.runtime.checkpointing.checkpoint_block`, the code ``load_pipeline`` applies; a
    ParameterError naming ``activation_checkpoint`` when one of them holds no block."""

    for i in which:
        blocks = unit_blocks(modules[i], names[i])
        if not blocks:
            raise ParameterError("activation_checkpoint", f"{{param}} {literal(repr(mode))}: unit {i} "
                                 f"({literal(', '.join(names[i]))}) holds no block (a module named like layers.N) "
                                 f"to checkpoint", flag="--ac", python=True)
        for block in blocks:
            checkpoint_block(block, mode)


def measure_units_ac(
    unit_modules: Sequence[nn.Module],
    sample_input,
    loss_fn: Optional[Callable],
    target,
    mode: str,
    *,
    unit_names: Optional[Sequence[Sequence[str]]],
    reuse_layers: bool = True,
    **options,
) -> dict[str, list[StageMeasurement]]:
    """Every unit measured with its layer units (all but the first and the last) checkpointed as
    `mode`, applied in place with ``checkpoint_block`` (the runtime's code, so the times and bytes
    are the runtime's); returns ``{mode: measurements}``, with ``"none"`` too for a per-op mode.

    ``full`` runs torch's split backward: the units are measured as :func:`measure_units` measures
    them. ``light`` and ``selective`` cannot (torch refuses W after I through a per-op checkpoint),
    so the units are first measured without checkpointing (``"none"``), then each checkpointed
    layer unit's F and whole backward B (:func:`_measure_per_op`): its W is the unit's W without
    checkpointing (a per-op mode recomputes forward ops only; the weight-gradient matmuls are the
    same) and I = B - W, never below 0, so the profile's I + W is the measured B. The embedding
    and the head units are never checkpointed: theirs are the ``"none"`` measurements.
    Cost: :func:`measure_units`' once, and for a per-op mode once more for the layer units' F and B."""
    mode = check_mode(mode)
    n = len(unit_modules)
    if unit_names is None or len(unit_names) != n:
        raise SchedcError("measure_units_ac: give unit_names, one list of module names per unit module")
    if mode == "none":
        return {"none": measure_units(unit_modules, sample_input, loss_fn, target, reuse_layers=reuse_layers,
                                      **options)}
    layers = range(1, n - 1)
    if mode not in PER_OP_AC:
        checkpoint_blocks(unit_modules, unit_names, mode, layers)
        return {mode: measure_units(unit_modules, sample_input, loss_fn, target, reuse_layers=reuse_layers,
                                    **options)}
    none = measure_units(unit_modules, sample_input, loss_fn, target, reuse_layers=reuse_layers, **options)
    source = _unit_sources(unit_modules, reuse_layers)  # before checkpointing, as measure_units saw them
    checkpoint_blocks(unit_modules, unit_names, mode, layers)
    per_op = _measure_per_op(unit_modules, sample_input, loss_fn, target, none, source, mode, **options)
    return {"none": none, mode: [per_op.get(m.index, m) for m in none]}


def _measure_per_op(unit_modules, sample_input, loss_fn, target, none: list[StageMeasurement], source: list[int],
                    mode: str,
                    device=None, warmup: int = 2, repeats: int = 5, optimizer: Optional[str] = "adamw",
                    progress: Optional[ProgressFn] = None) -> dict[int, StageMeasurement]:
    """The per-op checkpointed layer units measured (those `none` measured itself, not reused):
    memory from one F, B traced by the allocator, times of F and B inside torch's runtime (a
    one-rank schedule that runs these units' backward whole, :func:`_runtime_times`), else back
    to back; a reused unit gets its source's, with `none`'s note."""
    dev = resolve_device(device)
    samples = stage_samples(unit_modules, sample_input, dev)
    n = len(unit_modules)
    own = [i for i in range(1, n - 1) if source[i] == i]
    out: dict[int, StageMeasurement] = {}
    for k, i in enumerate(own):
        if progress:
            progress(f"profiling unit {i} checkpointed ({mode}) {k + 1}/{len(own)} on {dev}: F and B")
        run = StageRunner(i, unit_modules[i], False, False, loss_fn, target, dev)
        memory = memory_b(run, samples[i])
        times = time_b(run, samples[i], warmup, repeats)
        out[i] = _per_op_measurement(none[i], memory, times, mode)
    timed = _runtime_times(unit_modules, samples[0], loss_fn, target, dev, warmup, repeats, set(range(1, n - 1)),
                           progress)
    for i, m in out.items():
        if timed and timed.get((i, "F")) and timed.get((i, "B")):
            _set_b(m, Stat(timed[(i, "F")]), Stat(timed[(i, "B")]))
            m.notes.append(f"stage {i}: F and B are torch's runtime's own action times (a one-rank schedule of all "
                           f"units, this one's backward whole)")
        else:
            m.notes.append(f"stage {i}: F and B timed back to back outside torch's runtime")
    for i in range(1, n - 1):
        if source[i] != i:  # a reused layer: its source's measurement, with measure_units' note
            out[i] = StageMeasurement.from_dict({**out[source[i]].to_dict(), "index": i, "notes": list(none[i].notes)})
    return out


def _set_b(m: StageMeasurement, forward: Stat, backward: Stat) -> None:
    """F and B of a per-op checkpointed unit; I = B - W (W the unit's without checkpointing)."""
    w = m.backward_weight.median
    m.forward, m.backward_full = forward, backward
    m.backward_input = Stat([max(b - w, 1e-7) for b in backward.samples])  # the file wants I > 0



def _per_op_measurement(none: StageMeasurement, memory: BMemory, times: dict, mode: str) -> StageMeasurement:
    """A per-op checkpointed unit as the profile records it, comparable with the counted route
    (``schedc.model_costs``), which counts per-op modes as held from I until W = kept + the output
    gradients W consumes + dx, and I's transient above that: here held = what F left + what the
    split backward adds at I to the same unit without checkpointing (`none`'s held less its
    activation: those gradients and dx), and I's transient = B's measured peak above that (0 when
    below). ``checkpointed_form`` (schedc.planning.ac) adds the two back: B's peak is the measured one
    unless it lies below held (then held). W's time is `none`'s, I = B - W (:func:`_set_b`)."""
    rise = max(0, none.weight_grad_bytes - none.activation_bytes)
    i_transient = max(0, memory.peak_above - rise)
    m = StageMeasurement.from_dict({**none.to_dict(), "notes": []})
    m.activation_bytes, m.weight_grad_bytes = memory.activation, memory.activation + rise
    m.cuda_after_forward = m.cuda_after_input = None
    m.transient = {"F": memory.transient_f, "I": i_transient, "B": memory.peak_above}
    _set_b(m, Stat(times["F"]), Stat(times["B"]))
    m.notes = [f"stage {m.index}: checkpointed {mode} (per op): torch cannot run its W after I, so F and the whole "
               f"backward B were measured; W is this unit's without checkpointing ({m.backward_weight}), I = B - W; "
               f"B peaks {format_bytes(memory.peak_above)} above what F left and leaves {format_bytes(memory.end)}; "
               f"held I..W = F's + the {format_bytes(rise)} the split backward adds without checkpointing"]
    return m


def _runtime_times(stage_modules, sample, loss_fn, target, dev, warmup, repeats, whole: set,
                   progress) -> Optional[dict[tuple[int, str], list[float]]]:
    """Per (stage, kind), torch's runtime's own action times in a one-rank schedule of all
    `stage_modules` whose stages in `whole` run their backward whole (B) on every microbatch
    (:func:`schedc.runtime.one_rank.runtime_action_times`); None where that cannot run here."""

    if progress:
        progress(f"timing F and B of {len(whole)} checkpointed units inside torch's runtime "
                 f"({2 * max(1, repeats)} microbatches)")
    try:
        return runtime_action_times(stage_modules, sample, loss_fn, target, dev, warmup, repeats, whole=whole)
    except Exception:  # noqa: BLE001 - the back-to-back timings stand; the note says so
        return None
    finally:
        for module in stage_modules:
            for p in module.parameters():
                p.grad = None
