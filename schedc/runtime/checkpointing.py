"""Activation checkpointing of a pipeline stage's blocks: none, light, selective or full, per stage or
per block.

Problem: a plan may choose, stage by stage, to trade compute for memory: a checkpointed block
keeps less after F (its input, and what a per-op mode saves) and runs its forward again inside
the backward (in I under the split backward). schedc's own runtime must apply exactly the
choice the plan made, and the loss and gradients must not change.

Method: each block of a stage (the ``blocks`` container :func:`schedc.runtime.split.split_model`
keeps) gets its ``forward`` replaced, on the instance, by ``torch.utils.checkpoint.checkpoint``
(non-reentrant) around the original, so parameter names and hooks stay as they were.

- ``"full"``: every block recomputes its whole forward (torchtitan's ``FullAC``).
- ``"selective"``: per-op selective checkpointing with torch's
  ``create_selective_checkpoint_contexts``, the policy of torchtitan 0.3.0's ``SelectiveAC``
  ("op" SAC): attention kernels, ``addmm`` (a linear with a bias), ``bmm`` and float8 matmuls
  always saved, plain ``mm`` / ``linear`` saved every other one, everything else (norms,
  activations, elementwise ops) recomputed. One difference: top-k is recomputed here (torchtitan
  saves it), as under light, for Hugging Face's routers (below).
- ``"light"``: per-op selective checkpointing that saves the output of every matmul (grouped
  and float8 ones included) and attention kernel and recomputes only the memory-bound ops between
  them (norms, activations, rotary embeddings, residual adds, an MoE router's softmax and top-k,
  which its saved logits route as in F): less memory than none, no matmul or attention run again.
  torchtitan and NeMo have no such mode; schedc's runtime applies it.
- ``"none"``: the block as it was.

Under torch's split backward (a stage the schedule runs as I and W) the checkpointed region is
backpropagated twice: torch 2.14 refuses that for per-op checkpointing ("Trying to backward an
extra time"), so :func:`check_split_backward` refuses "light" and "selective" on such stages
before anything runs; full checkpointing runs, and re-runs the block's forward in I and again in
W (once per weight group ``stage_backward_weight`` differentiates), not once as with a full
backward B. Stage 0 is the exception torch makes: its I runs nothing and its W the whole
backward in one pass, so every mode runs there and recomputes once.

Cost: none at construction; at run time what each mode recomputes.
"""

from __future__ import annotations

import os
import re
from functools import partial
from typing import Optional, Sequence, Union

import torch
import torch.nn as nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from schedc.core.costs import AC_MODES, PER_OP_AC, block_modes
from schedc.errors import ParameterError, SchedcError, literal, printable, shown

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
# torchtitan's SelectiveAC saves torch's compute-intensive ops (torch._functorch.partitioners) and its
# own additions (top-k aside: below), of which only mm and linear alternate (every second one
# recomputed). Not CPU's flash attention: it is not on torch's list.
_ALTERNATE = _ops(["mm", "linear"])
_SELECTIVE_ALWAYS = _ops(["_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                          "_flash_attention_forward", "_efficient_attention_forward",
                          "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
                          "_scaled_dot_product_fused_attention_overrideable", "addmm", "bmm", "_scaled_mm",
                          "convolution", "max"]) | {
    op for op in [getattr(torch._higher_order_ops, "flex_attention", None)] if op is not None}
# what light checkpointing also saves: MoE experts' grouped matmuls and float8 matmuls. Not the
# router's top-k (torchtitan's op SAC saves it): Hugging Face's routers (Mixtral, Qwen2/3-MoE with
# norm_topk_prob) normalize its output in place, which torch refuses on a tensor SAC cached ("Tensor
# cached during selective activation checkpoint has been mutated"); recomputed from the router's
# saved logits (a matmul's output) by the same softmax and top-k, it routes every token as in F.
_LIGHT_SAVED = _MATMUL | _ATTENTION | _ops(["_grouped_mm", "_scaled_mm", "_scaled_grouped_mm"]) | {
    op for op in [getattr(torch._higher_order_ops, "flex_attention", None)] if op is not None}


def _selective_policy():
    """torchtitan's op-SAC rule: save attention, biased and batched matmuls and every other plain
    one, recompute the rest. The plain matmuls are counted apart in the forward and in the
    recompute, so both pick the same ones."""
    count = {False: 0, True: 0}

    def policy(ctx, func, *args, **kwargs):
        if func in _ALTERNATE:
            count[ctx.is_recompute] += 1
            return CheckpointPolicy.PREFER_RECOMPUTE if count[ctx.is_recompute] % 2 == 0 \
                else CheckpointPolicy.MUST_SAVE
        if func in _SELECTIVE_ALWAYS:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _light_policy(ctx, func, *args, **kwargs):
    """Save what costs FLOPs to recompute, recompute what only moves memory."""
    return CheckpointPolicy.MUST_SAVE if func in _LIGHT_SAVED else CheckpointPolicy.PREFER_RECOMPUTE


def _checkpointed(forward, mode: str, *args, **kwargs):
    if mode in PER_OP_AC:
        policy = _selective_policy() if mode == "selective" else _light_policy
        return checkpoint(forward, *args, use_reentrant=False,
                          context_fn=lambda: create_selective_checkpoint_contexts(policy), **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def checkpoint_block(block: nn.Module, mode: str) -> nn.Module:
    """`block` with its forward checkpointed as `mode` (in place; returns it)."""
    mode = check_mode(mode)
    if getattr(block, "_schedc_ac", "none") != "none":
        raise SchedcError(f"{type(block).__name__}: activation checkpointing is already applied")
    if mode != "none":
        block.forward = partial(_checkpointed, block.forward, mode)
    # torch annotates Module.__setattr__ for tensors and modules, yet a plain attribute is kept as one
    block._schedc_ac = mode  # type: ignore[assignment]
    return block


def check_mode(mode, where: str = "activation_checkpoint") -> str:
    """`mode` when it is one of :data:`AC_MODES`, else SchedcError naming `where`."""
    if isinstance(mode, str) and mode in AC_MODES:
        return mode
    raise SchedcError(f"{where}: {_what(mode)} is not one of {', '.join(AC_MODES)}")


class _BadModes(ValueError):
    """Where in an activation-checkpointing choice (``""``, ``"[1]"``, ``"[1][2]"``), what is wrong,
    and what a caller passing the choice itself should give instead."""

    def __init__(self, at: str, detail: str, fix: str):
        super().__init__(at, detail)
        self.at, self.detail, self.fix = at, detail, fix


def _what(value) -> str:
    """A value for a message: a string quoted and cut (:func:`schedc.errors.shown`), else its type too."""
    return shown(value) if isinstance(value, str) else f"{type(value).__name__} {shown(value)[1:-1]}"


def _mode_at(mode, at: str) -> str:
    if isinstance(mode, str) and mode in AC_MODES:
        return mode
    raise _BadModes(at, f"{_what(mode)} is not one of {', '.join(AC_MODES)}", "give one of them")


def _modes(choice, n_stages: int, blocks: Optional[Sequence[int]]) -> list:
    """One mode, or one per block, per stage; _BadModes on the first entry that is wrong."""
    if isinstance(choice, str):
        return [_mode_at(choice, "")] * n_stages
    if not isinstance(choice, (list, tuple)):
        raise _BadModes("", f"{_what(choice)} is neither a mode ({', '.join(AC_MODES)}) nor a list", "give a mode, "
                        "or a list with one per stage")
    if len(choice) != n_stages:
        raise _BadModes("", f"{len(choice)} modes given for {n_stages} stages", "give one per stage or one for all")
    out: list[Union[str, list[str]]] = []
    for s, entry in enumerate(choice):
        if isinstance(entry, str):
            out.append(_mode_at(entry, f"[{s}]"))
            continue
        if not isinstance(entry, (list, tuple)):
            raise _BadModes(f"[{s}]", f"{_what(entry)} is neither a mode ({', '.join(AC_MODES)}) nor a list",
                            f"give a mode, or a list with one per block of stage {s}")
        if blocks is not None and len(entry) != blocks[s]:
            raise _BadModes(f"[{s}]", f"{len(entry)} modes given for the {blocks[s]} blocks of stage {s}",
                            "give one per block")
        out.append([_mode_at(m, f"[{s}][{k}]") for k, m in enumerate(entry)])
    return out


def stage_modes(choice: ACChoice, n_stages: int, blocks: Optional[Sequence[int]] = None) -> list:
    """One mode per stage from a single mode or a list with one per stage; a stage's entry may
    itself be a list, one mode per block of that stage (a plan that checkpoints some of them),
    as many as ``blocks[s]`` when `blocks` is given. A wrong type, mode or length is a
    ParameterError naming ``activation_checkpoint`` and the entry (``--ac`` on a command line)."""
    try:
        return _modes(choice, n_stages, blocks)
    except _BadModes as e:
        raise ParameterError("activation_checkpoint", "{param}" + literal(f"{e.at}: {e.detail}; {e.fix}"), flag="--ac",
                             python=True) from None


def check_split_backward(modes: Sequence[str], schedule, where: str = "the schedule") -> None:
    """SchedcError when a stage `schedule` splits into I and W is to be checkpointed per op (light
    or selective). Stage 0 is exempt: torch's first stage runs nothing in I and its whole backward
    in W."""
    check_split_stages(modes, {a.stage for _, a in schedule.all_actions() if a.kind in ("I", "W")}, where)


def check_split_stages(modes: Sequence[str], split_stages: set, where: str) -> None:
    """:func:`check_split_backward` for a schedule given as the stages it runs as I and W."""
    bad = [(s, next(b for b in block_modes(m) if b in PER_OP_AC)) for s, m in enumerate(modes)
           if any(b in PER_OP_AC for b in block_modes(m)) and s in split_stages and s != 0]
    if bad:
        raise SchedcError(f"{where}: stage {bad[0][0]} runs I and W apart, and torch's split backward cannot go twice "
                          f"through a region checkpointed per op ({bad[0][1]!r}); use 'full' or 'none' there, or a "
                          f"schedule that runs that stage's backward as B")


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
        raise ParameterError("activation_checkpoint", f"{len(per_block)} modes given for a stage of {len(members)} "
                             f"blocks; give one per block", flag="--ac", python=True)
    for block, m in zip(members, per_block):
        checkpoint_block(block, m)
    return stage


_BLOCK_NAME = re.compile(r"(^|\.)\w+\.\d+$")  # "layers.3", "model.layers.3", "blocks.0": one block


def plan_settings(plan: Union[str, os.PathLike, dict]) -> dict:
    """``load_pipeline`` keywords that run a ``schedc plan`` report (``plan.json``) as planned:
    ``activation_checkpoint`` (one mode per stage, from its ``"assumes"``, which records the
    per-stage choice of ``--ac auto``) and ``layers_per_stage`` (the blocks of each stage of its
    ``"partition"``: module names that end in an index, e.g. ``layers.3``; the embedding and the
    head are the split's first and last modules), and ``memory_actions`` when the plan has them
    (its ``"memory_actions"``, :mod:`schedc.core.memory_actions`; ``load_pipeline`` checks them
    against the CSV). SchedcError naming the file and field when one is missing or malformed (a
    per-block list must have one mode per block of its stage). Cost: reading the file.

        pipe = load_pipeline("plan.csv", model, loss_fn, device, **plan_settings("plan.json"))
    """
    where, report = _plan_report(plan)
    blocks = _blocks(where, report)
    if not any(blocks):
        raise SchedcError(f"{where}: \"partition\" names no blocks (module names ending in an index, such as "
                          f"layers.3); plan from a profile whose units name their modules, or pass layers_per_stage "
                          f"yourself")
    empty = [s for s in range(1, len(blocks) - 1) if not blocks[s]]
    if empty:
        raise SchedcError(f"{where}: \"partition\": stage {empty[0]} holds no block (module names ending in an "
                          f"index); every stage but the first and the last holds one; {_REDO}")
    settings = {"activation_checkpoint": _assumed_modes(where, report, blocks), "layers_per_stage": blocks}
    if "memory_actions" in report:
        from schedc.core.memory_actions import PlannedActions, parse_memory_actions

        settings["memory_actions"] = PlannedActions(parse_memory_actions(report["memory_actions"], where), where)
    return settings


def planned_modes(plan: Union[str, os.PathLike, dict]) -> list:
    """The activation checkpointing a plan report assumed, one mode (or one per block) per stage of
    its partition, checked as :func:`plan_settings` checks it; SchedcError naming the file and
    field. For a launch check that is not schedc's runtime (``schedc validate --partition``)."""
    where, report = _plan_report(plan)
    return _assumed_modes(where, report, _blocks(where, report))


_REDO = "give the plan.json `schedc plan` wrote, or plan again"


def _blocks(where: str, report: dict) -> list[int]:
    """The blocks (module names ending in an index) of each stage of the report's partition."""
    partition = report.get("partition")
    if partition is None:
        raise SchedcError(f"{where}: no \"partition\" (module names per stage); {_REDO}")
    if not (isinstance(partition, list) and partition and all(
            isinstance(stage, list) and stage and all(isinstance(m, str) for m in stage) for stage in partition)):
        raise SchedcError(f"{where}: \"partition\" is not a list of non-empty lists of module names (one per "
                          f"stage); {_REDO}")
    return [sum(1 for name in stage if _BLOCK_NAME.search(name)) for stage in partition]


def _assumed_modes(where: str, report: dict, blocks: list[int]) -> list:
    assumes = report.get("assumes")
    if not isinstance(assumes, dict):
        raise SchedcError(f"{where}: " + ("no \"assumes\"" if assumes is None else "\"assumes\" is not an object")
                          + f" (what the plan assumed, its activation checkpointing among it); {_REDO}")
    choice = assumes.get("activation_checkpoint")
    try:
        return _modes("none" if choice is None else choice, len(blocks), blocks)
    except _BadModes as e:
        raise SchedcError(f"{where}: assumes.activation_checkpoint{e.at}: {e.detail}; {_REDO}") from None


def _plan_report(plan) -> tuple[str, dict]:
    """(the name messages use, the report as a dict) from a path or an already read report."""
    if isinstance(plan, (str, os.PathLike)):
        from schedc.io.fileio import read_json

        where = printable(os.fspath(plan))
        plan = read_json(plan, "a plan report (the plan.json `schedc plan` wrote)")
    else:
        where = "the plan report"
    if not isinstance(plan, dict):
        raise SchedcError(f"{where}: expected a JSON object (the plan.json `schedc plan` wrote), got "
                          f"{'null' if plan is None else type(plan).__name__}")
    return where, plan
