"""Split an "embedding + blocks + head" model into pipeline stages.

Problem: a CSV schedule says which stage indices a rank runs; a user without their own splitter
needs those stages as modules. Method: the model is a sequence of blocks (an ``nn.ModuleList``,
``nn.Sequential`` or ``nn.ModuleDict`` attribute) with some modules before them (the embedding)
and some after (final norm, LM head). Stage ``s`` of ``n_stages`` becomes a shallow copy of the
model that keeps a contiguous slice of the blocks; the first stage also keeps the "first"
modules, the last stage the "last" modules, and every part a stage does not own is set to
``None``. This is torchtitan's convention: the model's ``forward`` must skip parts that are
``None`` (:class:`schedc.runtime.models.GPT` does). Parameters are shared with the original
model, not copied, so building the full model once and splitting it costs no extra memory and
``model.named_parameters()`` still names every parameter a rank holds. An ``nn.ModuleDict``
keeps its keys, so a stage's parameter names equal the full model's (torchtitan's layout); an
``nn.ModuleList`` / ``nn.Sequential`` slice is renumbered from 0, so map names through the full
model when saving per-stage checkpoints. Cost: O(layers).

Rule for dividing ``L`` blocks into ``S`` stages when ``layers_per_stage`` is not given: every
stage gets ``L // S`` blocks and the first ``L % S`` stages get one more (``torch.tensor_split``'s
rule), so stage sizes differ by at most one block. Pass ``layers_per_stage`` to choose another
split (e.g. fewer blocks on the last stage, which also runs the LM head).
"""

from __future__ import annotations

import copy
import numbers
from typing import Iterable, Sequence

import torch.nn as nn

from schedc.errors import SchedcError, shown


def layers_per_stage_even(n_layers: int, n_stages: int) -> list[int]:
    """``n_layers`` blocks over ``n_stages`` stages, sizes differing by at most one, larger first."""
    if n_stages < 1:
        raise SchedcError(f"n_stages must be >= 1, got {n_stages}")
    base, extra = divmod(n_layers, n_stages)
    return [base + (1 if s < extra else 0) for s in range(n_stages)]


def stage_layer_ranges(
    n_layers: int, n_stages: int, layers_per_stage: Sequence[int] | None = None
) -> list[range]:
    """The block indices of every stage: ``ranges[s]`` is stage s's contiguous slice."""
    if layers_per_stage is None:
        sizes = layers_per_stage_even(n_layers, n_stages)
    else:
        if isinstance(layers_per_stage, (str, bytes)) or not all(
                isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in layers_per_stage):
            raise SchedcError(f"layers_per_stage must be a list of block counts (integers), one per stage, got "
                              f"{shown(layers_per_stage)}")
        sizes = list(layers_per_stage)
        if len(sizes) != n_stages:
            raise SchedcError(
                f"layers_per_stage has {len(sizes)} entries but there are {n_stages} stages; "
                "give one block count per stage"
            )
        if any(n < 0 for n in sizes) or sum(sizes) != n_layers:
            raise SchedcError(
                f"layers_per_stage {sizes} must be non-negative and sum to the model's "
                f"{n_layers} blocks"
            )
    ranges, start = [], 0
    for n in sizes:
        ranges.append(range(start, start + n))
        start += n
    return ranges


def split_model(
    model: nn.Module,
    stage_indices: Iterable[int],
    n_stages: int,
    *,
    layers_per_stage: Sequence[int] | None = None,
    blocks: str = "blocks",
    first: Sequence[str] = ("embed",),
    last: Sequence[str] = ("norm", "head"),
) -> dict[int, nn.Module]:
    """Stage modules ``{stage_index: module}`` for the given stage indices.

    ``blocks`` names the container of blocks; ``first`` the modules only stage 0 keeps;
    ``last`` the modules only stage ``n_stages - 1`` keeps. Attributes not named anywhere (and
    the model's own parameters and buffers) stay on every stage.
    """
    if not isinstance(model, nn.Module):
        raise SchedcError(f"model: expected an nn.Module (embedding + blocks + head), got {type(model).__name__}")
    container = getattr(model, blocks, None)
    if not isinstance(container, (nn.ModuleList, nn.Sequential, nn.ModuleDict)):
        raise SchedcError(
            f"{type(model).__name__}.{blocks} must be an nn.ModuleList, nn.Sequential or "
            f"nn.ModuleDict of blocks, got {type(container).__name__}; pass blocks=NAME"
        )
    for name in (*first, *last):
        if not hasattr(model, name):
            raise SchedcError(
                f"{type(model).__name__} has no attribute {name!r}; pass first=/last= with the "
                "names of the modules before and after the blocks"
            )
    n_layers = len(container)
    ranges = stage_layer_ranges(n_layers, n_stages, layers_per_stage)
    # every stage checked, not only this rank's: every rank refuses, none goes on to wait in recv
    empty = next((s for s in range(1, n_stages - 1) if not ranges[s]), None)
    if empty is not None:
        raise SchedcError(
            f"stage {empty} would hold no blocks ({n_layers} blocks over {n_stages} stages); "
            "use fewer stages or a layers_per_stage list that gives every middle stage a block"
        )

    out: dict[int, nn.Module] = {}
    for s in stage_indices:
        if not 0 <= s < n_stages:
            raise SchedcError(f"stage index {s} is outside 0..{n_stages - 1}")
        owned = ranges[s]
        stage = _shallow_copy(model)
        part: nn.Module
        if isinstance(container, nn.ModuleDict):
            keys = list(container.keys())
            part = nn.ModuleDict({keys[i]: container[keys[i]] for i in owned})
        elif isinstance(container, nn.Sequential):
            part = nn.Sequential(*[container[i] for i in owned])
        else:
            part = nn.ModuleList(container[i] for i in owned)
        setattr(stage, blocks, part)
        if s != 0:
            for name in first:
                setattr(stage, name, None)
        if s != n_stages - 1:
            for name in last:
                setattr(stage, name, None)
        out[s] = stage
    return out


def split_gpt(
    model: nn.Module,
    stage_indices: Iterable[int],
    n_stages: int,
    layers_per_stage: Sequence[int] | None = None,
) -> dict[int, nn.Module]:
    """:func:`split_model` for :class:`schedc.runtime.models.GPT` (embed | blocks | norm, head)."""
    return split_model(
        model, stage_indices, n_stages, layers_per_stage=layers_per_stage,
        blocks="blocks", first=("embed",), last=("norm", "head"),
    )


def _shallow_copy(model: nn.Module) -> nn.Module:
    # copy.copy shares nn.Module's registries (_modules, _parameters, ...); give the copy its
    # own registries so setting a part to None on one stage does not touch the model or other
    # stages, while the submodules and parameters themselves stay shared.
    stage = copy.copy(model)
    for registry in ("_modules", "_parameters", "_buffers", "_non_persistent_buffers_set"):
        if registry in model.__dict__:
            stage.__dict__[registry] = copy.copy(model.__dict__[registry])
    return stage
