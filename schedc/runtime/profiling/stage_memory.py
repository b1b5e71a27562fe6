"""What one stage holds after F, from I until W, and at each action's peak.

Problem: ``activation_bytes`` and ``weight_grad_bytes`` must be what the allocator holds in the
runtime, without the boundary's buffers (received inputs, gradients sent back), which are
counted per boundary. Method: one untimed F, I, W and F, B traced by the allocator
(:mod:`schedc.runtime.allocator`), with saved-tensor hooks counting the same pass as a
cross-check (:func:`measure_memory`); a unit checkpointed per op runs F, B only
(:func:`memory_b`). Cost: one untimed round per stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from schedc.core.formatting import format_bytes
from schedc.errors import SchedcError
from schedc.runtime.allocator import AllocatorTrace, nbytes_of
from schedc.runtime.profiling.memory import SavedTensorTracker, add_storages, unique_bytes
from schedc.runtime.profiling.runner import StageRunner, as_tuple


@dataclass
class MemoryCount:
    activation: int
    weight_grad: int
    output_bytes: int
    cuda_after_forward: Optional[int]
    cuda_after_input: Optional[int]
    notes: list[str]
    transient: dict[str, int] = field(default_factory=dict)


def _hook_counts(run: StageRunner, tracker: "SavedTensorTracker", held_tensors, grads, param_groups) -> int:
    """What the saved-tensor hooks say I leaves for W: live saved tensors plus the gradients I made for W."""
    i_storages = add_storages(tracker.alive_storages(run.param_ptrs), held_tensors, run.param_ptrs)
    left_for_w = [
        g for pg in (param_groups or []) for gs in (pg.get("grads") or []) for g in (gs or ()) if g is not None
    ]
    extra = unique_bytes(left_for_w, run.param_ptrs | set(i_storages) | set(add_storages({}, grads, set())))
    return sum(i_storages.values()) + extra


def measure_memory(run: StageRunner, sample: tuple) -> MemoryCount:
    """One untimed F, I, W and one F, B, traced by the allocator (:mod:`schedc.runtime.allocator`):
    held after F, held from I until W (may exceed F's: torch's split backward keeps the graph and
    adds the gradients W needs), each action's transient peak. The stage's received inputs, the
    gradients I sends back and the output gradients it receives are the boundary's buffers
    (``boundary_bytes``), not the stage's; on the last stage the logits go at I, as in the runtime. Saved-tensor hooks count the
    same pass as a cross-check (a note when the two disagree)."""

    index, param_ptrs = run.index, run.param_ptrs
    tracker = SavedTensorTracker()
    inputs = run.inputs(sample)
    input_bytes = 0 if run.is_first else unique_bytes(inputs, param_ptrs)
    for p in run.params:  # gradients are static bytes: W accumulates into them in place
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    with torch.no_grad():
        probe = as_tuple(run.module(*run.inputs(sample)))
    grads = run.grads_for(probe)  # received before I: the boundary's buffer, not the stage's bytes
    output_bytes = sum(o.numel() * o.element_size() for o in probe)
    del probe
    with AllocatorTrace(run.device) as trace:
        with trace.action("F"), tracker.hooks():
            outs, roots = run.forward(inputs)
        if not any(o.requires_grad for o in roots):
            raise SchedcError(
                f"stage {index}: its output does not require grad (no parameters and no differentiable input); "
                f"nothing to backpropagate"
            )
        held_tensors = [*outs, *roots, *(inputs if not run.is_first else ())]
        hooked_f = sum(add_storages(tracker.alive_storages(param_ptrs), held_tensors, param_ptrs).values())
        with trace.action("I"):
            param_groups = run.run_input(roots, inputs)
            if run.is_last:  # the runtime lets go of the last stage's output (the logits) here
                run.detach_last(outs)
                outs, held_tensors = (), [*roots, *inputs]
        sent_back = 0 if run.is_first else nbytes_of([x.grad for x in inputs if isinstance(x, torch.Tensor)])
        hooked_i = hooked_f if run.is_first else _hook_counts(run, tracker, held_tensors, grads, param_groups)
        with trace.action("W"):
            run.run_weight(roots, inputs, param_groups)
        del outs, roots, param_groups, held_tensors
        inputs2 = run.inputs(sample)
        with trace.action("F2"):
            outs2, roots2 = run.forward(inputs2)
        with trace.action("B"):
            run.run_full(roots2, inputs2)
        del outs2, roots2, inputs2
    lv = trace.levels
    # the received input is not the stage's: torch's receive buffer (counted per boundary from
    # boundary_bytes), or the output of the stage before it on the same rank (counted there)
    activation = lv["F"].end
    weight_grad = activation if run.is_first else lv["I"].end - sent_back
    if not run.has_params:
        weight_grad = 0
    transient = {k: lv[k].transient for k in ("F", "I", "W", "B")}
    if run.is_first:
        transient["I"] = 0
    notes = _memory_notes(index, activation, weight_grad, hooked_f - input_bytes, hooked_i - input_bytes, run)
    cuda = run.device.type == "cuda"
    return MemoryCount(activation, max(0, weight_grad), output_bytes, lv["F"].end if cuda else None,
                        lv["I"].end if cuda else None, notes, transient)


def _memory_notes(index: int, activation: int, weight_grad: int, hooked_f: int, hooked_i: int,
                  run: StageRunner) -> list[str]:
    notes: list[str] = []
    # far from the allocator means the hooks miss something (buffers kept outside autograd) or
    # the allocator sees more than autograd keeps (a cache of the module's)
    if hooked_f > 0 and not 0.75 <= activation / hooked_f <= 1.33:
        notes.append(f"stage {index}: the allocator holds {format_bytes(activation)} after F but saved-tensor hooks "
                     f"count {format_bytes(hooked_f)} (outside the 0.75-1.33 band); activation_bytes is the "
                     f"allocator's")
    if run.has_params and weight_grad > activation:
        notes.append(f"stage {index}: memory rises at I: {format_bytes(weight_grad)} held from I until W against "
                     f"{format_bytes(activation)} after F (torch's split backward keeps the graph and adds the "
                     f"gradients W needs; hooks count {format_bytes(hooked_i)})")
    return notes



@dataclass
class BMemory:
    activation: int
    transient_f: int
    peak_above: int  # B's peak above what F left, less the input gradient it sends back
    end: int         # what B leaves allocated, less the input gradient


def memory_b(run: StageRunner, sample: tuple) -> BMemory:
    """One untimed F, B of a checkpointed unit traced by the allocator: what F leaves (its output
    included), F's transient, B's peak above that and what B leaves (received inputs and the
    gradients sent back are the boundary's, as in :func:`measure_memory`)."""

    inputs = run.inputs(sample)
    for p in run.params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    with torch.no_grad():
        probe = as_tuple(run.module(*run.inputs(sample)))
    run.grads_for(probe)
    del probe
    with AllocatorTrace(run.device) as trace:
        with trace.action("F"):
            outs, roots = run.forward(inputs)
        with trace.action("B"):
            run.run_full(roots, inputs)
        sent_back = nbytes_of([x.grad for x in inputs if isinstance(x, torch.Tensor)])
        del outs, roots
    for p in run.module.parameters():
        p.grad = None
    f, b = trace.levels["F"], trace.levels["B"]
    return BMemory(f.end, f.transient, max(0, b.peak - sent_back - f.end), max(0, b.end - sent_back))
