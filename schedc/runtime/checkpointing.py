"""Activation checkpointing of a pipeline stage's blocks: none, full or selective, per stage or per block.

Problem: a plan may choose, stage by stage, to trade compute for memory: a checkpointed block
keeps only its input after F and runs its forward again inside the backward (in I under the
split backward). schedc's own runtime must apply exactly the choice the plan made, and the loss
and gradients must not change.

Method: each block of a stage (the ``blocks`` container :func:`schedc.runtime.split.split_model`
keeps) gets its ``forward`` replaced, on the instance, by ``torch.utils.checkpoint.checkpoint``
(non-reentrant) around the original, so parameter names and hooks stay as they were.

- ``"full"``: every block recomputes its whole forward (torchtitan's ``FullAC``).
- ``"selective"``: per-op selective checkpointing with torch's
  ``create_selective_checkpoint_contexts``, the policy of torchtitan 0.3.0's ``SelectiveAC``
  ("op" SAC): the outputs of attention kernels and of every other matmul are saved, everything
  else (norms, activations, elementwise ops, the other matmuls) is recomputed. One difference:
  ``addmm`` (a linear layer with a bias, which torchtitan's models do not have) counts as a
  matmul here.
- ``"none"``: the block as it was.

Under torch's split backward (a stage the schedule runs as I and W) the checkpointed region is
backpropagated twice: torch 2.14 refuses that for selective checkpointing ("Trying to backward an
extra time"), so :func:`check_split_backward` refuses "selective" on such stages before anything
runs; full checkpointing runs, and re-runs the block's forward in I and again in W (once per
weight group ``stage_backward_weight`` differentiates), not once as with a full backward B.
Stage 0 is the exception torch makes: its I runs nothing and its W the whole backward in one
pass, so either mode recomputes once there.

Cost: none at construction; at run time what each mode recomputes.
"""

from __future__ import annotations

import os
import re
from functools import partial
from pathlib import Path
from typing import Sequence, Union

import torch
import torch.nn as nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from schedc.errors import SchedcError

AC_MODES = ("none", "full", "selective")
ACChoice = Union[str, Sequence[str]]


def _ops(names: Sequence[str]) -> set:
    found = set()
    for name in names:
        packet = getattr(torch.ops.aten, name, None)
        if packet is not None and hasattr(packet, "default"):
            found.add(packet.default)
    return found


_ATTENTION = _ops(["_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                   "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
                   "_scaled_dot_product_flash_attention_for_cpu",
                   "_scaled_dot_product_fused_attention_overrideable"])
_MATMUL = _ops(["mm", "addmm", "linear", "bmm"])


def _selective_policy():
    """torchtitan's op-SAC rule: save attention and every other matmul, recompute the rest. The
    matmuls are counted apart in the forward and in the recompute, so both pick the same ones."""
    count = {False: 0, True: 0}

    def policy(ctx, func, *args, **kwargs):
        if func in _MATMUL:
            count[ctx.is_recompute] += 1
            return CheckpointPolicy.PREFER_RECOMPUTE if count[ctx.is_recompute] % 2 == 0 \
                else CheckpointPolicy.MUST_SAVE
        if func in _ATTENTION:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _checkpointed(forward, mode: str, *args, **kwargs):
    if mode == "selective":
        return checkpoint(forward, *args, use_reentrant=False,
                          context_fn=lambda: create_selective_checkpoint_contexts(_selective_policy()), **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def checkpoint_block(block: nn.Module, mode: str) -> nn.Module:
    """`block` with its forward checkpointed as `mode` (in place; returns it)."""
    mode = check_mode(mode)
    if getattr(block, "_schedc_ac", "none") != "none":
        raise SchedcError(f"{type(block).__name__}: activation checkpointing is already applied")
    if mode != "none":
        block.forward = partial(_checkpointed, block.forward, mode)
    block._schedc_ac = mode
    return block


def check_mode(mode: str, where: str = "activation_checkpoint") -> str:
    if mode not in AC_MODES:
        raise SchedcError(f"{where}: {mode!r} is not one of {', '.join(AC_MODES)}")
    return mode


def stage_modes(choice: ACChoice, n_stages: int) -> list:
    """One mode per stage from a single mode or a list with one per stage; a stage's entry may
    itself be a list, one mode per block of that stage (a plan that checkpoints some of them)."""
    if isinstance(choice, str):
        return [check_mode(choice)] * n_stages
    modes = list(choice)
    if len(modes) != n_stages:
        raise SchedcError(f"activation_checkpoint: {len(modes)} modes given for {n_stages} stages; give one per "
                          f"stage or one for all")
    return [check_mode(m, f"activation_checkpoint[{s}]") if isinstance(m, str) else
            [check_mode(b, f"activation_checkpoint[{s}][{k}]") for k, b in enumerate(m)] for s, m in enumerate(modes)]


def check_split_backward(modes: Sequence[str], split_stages: set, where: str = "the schedule") -> None:
    """SchedcError when a stage the schedule splits into I and W is to be checkpointed selectively.
    Stage 0 is exempt: torch's first stage runs nothing in I and its whole backward in W."""
    bad = [s for s, m in enumerate(modes)
           if (m == "selective" or not isinstance(m, str) and "selective" in m) and s in split_stages and s != 0]
    if bad:
        raise SchedcError(f"{where}: stage {bad[0]} runs I and W apart, and torch's split backward cannot go twice "
                          f"through a selectively checkpointed region; use 'full' or 'none' there, or a schedule "
                          f"that runs that stage's backward as B")


def apply_to_stage(stage: nn.Module, mode: Union[str, Sequence[str]], blocks: str = "blocks") -> nn.Module:
    """Checkpoint every block of a stage module (its ``blocks`` container) as `mode`, or block k
    as ``mode[k]`` (one mode per block, in the container's order)."""
    if isinstance(mode, str) and check_mode(mode) == "none":
        return stage
    container = getattr(stage, blocks, None)
    if not isinstance(container, (nn.ModuleList, nn.Sequential, nn.ModuleDict)):
        raise SchedcError(f"activation_checkpoint {mode!r}: {type(stage).__name__}.{blocks} is not a container of "
                          f"blocks; pass split_kwargs={{'blocks': NAME}}")
    members = list(container.values() if isinstance(container, nn.ModuleDict) else container)
    per_block = [mode] * len(members) if isinstance(mode, str) else list(mode)
    if len(per_block) != len(members):
        raise SchedcError(f"activation_checkpoint: {len(per_block)} modes given for a stage of {len(members)} blocks; "
                          f"give one per block")
    for block, m in zip(members, per_block):
        checkpoint_block(block, m)
    return stage


_BLOCK_NAME = re.compile(r"(^|\.)\w+\.\d+$")  # "layers.3", "model.layers.3", "blocks.0": one block


def plan_settings(plan: Union[str, os.PathLike, dict]) -> dict:
    """``load_pipeline`` keywords that run a ``schedc plan`` report (``plan.json``) as planned:
    ``activation_checkpoint`` (one mode per stage, from its ``"assumes"``, which records the
    per-stage choice of ``--ac auto``) and ``layers_per_stage`` (the blocks of each stage of its
    ``"partition"``: module names that end in an index, e.g. ``layers.3``; the embedding and the
    head are the split's first and last modules). SchedcError naming the file and field when one
    is missing or malformed. Cost: reading the file.

        pipe = load_pipeline("plan.csv", model, loss_fn, device, **plan_settings("plan.json"))
    """
    import json

    where = "the plan report" if isinstance(plan, dict) else str(plan)
    if not isinstance(plan, dict):
        try:
            plan = json.loads(Path(plan).read_text())
        except (OSError, ValueError) as e:
            raise SchedcError(f"{where}: cannot read a plan report ({e}); give the plan.json `schedc plan` wrote")
    partition = plan.get("partition") if isinstance(plan, dict) else None
    if not isinstance(partition, list) or not all(isinstance(p, list) for p in partition):
        raise SchedcError(f"{where}: no \"partition\" (module names per stage); give the plan.json `schedc plan` "
                          f"wrote")
    choice = (plan.get("assumes") or {}).get("activation_checkpoint", "none")
    modes = stage_modes(choice, len(partition))
    blocks = [sum(1 for name in stage if _BLOCK_NAME.search(str(name))) for stage in partition]
    return {"activation_checkpoint": modes, "layers_per_stage": blocks}
