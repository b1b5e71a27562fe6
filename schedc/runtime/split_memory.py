"""What torch's split backward frees at I and at W: the evidence behind ``weight_grad_bytes``.

Problem: the schedule's memory model says F allocates a microbatch's activation, I frees all of
it except what W still needs, and W frees the rest. How much I really frees depends on torch:
``torch.distributed.pipelining._backward.stage_backward_input`` runs ``autograd.grad`` with
``retain_graph=True`` and keeps the graph nodes where weights meet the input path for
``stage_backward_weight``, then ``detach_()``es the stage's outputs (or loss).

Method: run one stage the way ``PipelineStage`` does (F as ``module(*inputs)`` on a received,
grad-requiring input, plus ``loss_fn`` on a last stage; I and W as the two functions above with an
output gradient, or with the loss on a last stage) and count bytes after F, after I and after W
two independent ways:

- saved-tensor accounting (the profiler's own ``SavedTensorTracker``): the storages autograd
  still holds, plus the stage's inputs and outputs, which the runtime keeps until W
  (``backward_state``); gradients that I computes and leaves for W (``param_groups[..]["grads"]``)
  and the input gradients it stores in ``input.grad`` are reported separately;
- live storages: a dispatch mode records every storage any op creates (forward and backward)
  and counts those still alive, whoever holds them. It is the CPU stand-in for
  ``torch.cuda.memory_allocated``, which is also read on CUDA.

Parameters and their ``.grad`` never count: they are static memory. Cost: one forward, one
split backward, no timing.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn as nn
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from schedc.runtime.profiling.memory import SavedTensorTracker, add_storages, storage_key, unique_bytes
from schedc.runtime.profiling.runner import as_tuple, check_outputs, fresh_inputs


class LiveStorages(TorchDispatchMode):
    """Weak references to every storage an op creates while active; ``bytes()`` sums the live ones."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[int, tuple[int, int]] = {}  # data_ptr -> (storage weak ref, nbytes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and storage_key(t):
                st = t.untyped_storage()
                old = self.refs.get(st.data_ptr())
                if old is None or torch.UntypedStorage._expired(old[0]):
                    if old is not None:
                        torch.UntypedStorage._free_weak_ref(old[0])
                    self.refs[st.data_ptr()] = (st._weak_ref(), st.nbytes())
        return out

    def bytes(self, exclude: set[int]) -> int:
        gc.collect()
        return sum(n for ptr, (ref, n) in self.refs.items()
                   if ptr not in exclude and not torch.UntypedStorage._expired(ref))

    def close(self) -> None:
        for ref, _ in self.refs.values():
            torch.UntypedStorage._free_weak_ref(ref)
        self.refs.clear()


@dataclass
class SplitMemory:
    """Bytes one microbatch of one stage holds (parameters and their grads excluded).

    ``after_forward``: saved tensors + inputs + outputs (+ loss), the profiler's activation_bytes.
    ``after_input``: what is still held once I ran (same accounting); ``after_weight``: after W.
    ``grads_for_weight``: gradients I computes and keeps for W; ``input_grads``: what I stores in
    the inputs' ``.grad`` (sent to the previous stage; the runtime keeps it until the next step).
    ``live_*``: the live-storage count at the same three points (inputs included);
    ``cuda_*``: the CUDA allocator's count at the same points (inputs included, parameter grads
    not), on CUDA only. Both live counts include ``grads_for_weight`` and ``input_grads``.
    """

    after_forward: int
    after_input: int
    after_weight: int
    grads_for_weight: int
    input_grads: int
    live_forward: int
    live_input: int
    live_weight: int
    cuda_forward: Optional[int] = None
    cuda_input: Optional[int] = None
    cuda_weight: Optional[int] = None

    @property
    def held_fraction(self) -> float:
        """Share of the activation still held between I and W (1.0: I frees nothing)."""
        return self.after_input / self.after_forward

    @property
    def freed_at_weight(self) -> int:
        return self.after_input - self.after_weight


def measure_split_backward(
    module: nn.Module,
    sample,
    is_last: bool = False,
    loss_fn: Optional[Callable] = None,
    target=None,
) -> SplitMemory:
    """Run F, I, W of a middle stage (``is_last=False``: I gets a random output gradient) or of
    the last stage (I starts from ``loss_fn(output, target)``) on a copy of ``sample`` that
    requires grad, as ``PipelineStage`` does, and count what each step leaves held."""
    params = [p for p in module.parameters() if p.requires_grad]
    static = {p.untyped_storage().data_ptr() for p in module.parameters()}
    dev = next(module.parameters()).device
    cuda = dev.type == "cuda"
    tracker, live = SavedTensorTracker(), LiveStorages()
    inputs = fresh_inputs(as_tuple(sample), needs_grad=True)
    in_bytes = unique_bytes(inputs, static)
    # torch's I makes views of the inputs and the tracker detaches what it saves: storages made
    # before F would show up as new; inputs are added once, the caller's target not at all
    in_ptrs = set(add_storages({}, [*inputs, *tree_leaves(target)], set()))
    base = _cuda_allocated(dev) if cuda else 0
    try:
        with tracker.hooks(), live:
            outs = check_outputs(0, module(*inputs))
            if is_last:
                assert loss_fn is not None, "measure_split_backward: the last stage's I starts from loss_fn"
                roots = [loss_fn(outs[0] if len(outs) == 1 else outs, target)]
            else:
                roots = list(outs)

            def held() -> int:
                kept = [*outs, *roots, *inputs]  # the runtime's backward_state (and fwd_cache)
                return sum(add_storages(tracker.alive_storages(static), kept, static).values())

            after_f, live_f = held(), live.bytes(static | in_ptrs) + in_bytes
            cuda_f = _cuda_allocated(dev) - base + in_bytes if cuda else None

            grads = None if is_last else [torch.randn_like(o) for o in outs]
            _, param_groups = stage_backward_input(roots, grads, inputs, iter(params))
            if is_last:  # PipelineStage.backward_one_chunk detaches a last stage's outputs
                for o in outs:
                    if not o._is_view():
                        o.detach_()
            grads = None  # the runtime's received gradient buffer is not the stage's activation
            after_i, live_i = held(), live.bytes(static | in_ptrs) + in_bytes
            cuda_i = _cuda_allocated(dev) - base + in_bytes if cuda else None
            for_w = [g for pg in param_groups for gs in pg.get("grads") or () for g in gs or () if g is not None]
            w_bytes = unique_bytes(for_w, static | set(add_storages({}, [*outs, *inputs], set())))
            in_grads = unique_bytes([x.grad for x in inputs if isinstance(x, torch.Tensor)], static)

            stage_backward_weight(iter(params), param_groups)
            del param_groups, for_w
            p_grads = [p.grad for p in params if p.grad is not None]
            static |= set(add_storages({}, p_grads, set()))
            after_w, live_w = held(), live.bytes(static | in_ptrs) + in_bytes
            cuda_w = _cuda_allocated(dev) - base + in_bytes - unique_bytes(p_grads, set()) if cuda else None
    finally:
        live.close()
        for p in params:
            p.grad = None
    return SplitMemory(after_f, after_i, after_w, w_bytes, in_grads, live_f, live_i, live_w, cuda_f, cuda_i, cuda_w)


def _cuda_allocated(dev: torch.device) -> int:
    torch.cuda.synchronize(dev)
    return torch.cuda.memory_allocated(dev)
