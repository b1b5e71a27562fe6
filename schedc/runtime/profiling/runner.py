"""One pipeline stage run as torch's runtime runs it: F, I, W and B on a received input.

Problem: a stage's costs must be those of ``PipelineStage``'s own calls, on an input shaped like
a received activation. Method: :class:`StageRunner` calls
``torch.distributed.pipelining._backward``'s ``stage_backward_input`` (I), ``stage_backward_weight``
(W) and ``stage_backward`` (B) as the runtime does; :func:`stage_samples` runs the stages once to
get each one's input (the previous stage's output). Cost: one forward of every stage for the
samples.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
import torch.nn as nn
from torch.distributed.pipelining._backward import (
    stage_backward,
    stage_backward_input,
    stage_backward_weight,
)

from schedc.errors import SchedcError


def as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def check_outputs(stage: int, out) -> tuple[torch.Tensor, ...]:
    outs = as_tuple(out)
    bad = [type(o).__name__ for o in outs if not isinstance(o, torch.Tensor)]
    if bad or not outs:
        raise SchedcError(
            f"stage {stage}: forward returned {type(out).__name__}"
            f"{' containing ' + ', '.join(bad) if bad and isinstance(out, (tuple, list)) else ''}; "
            f"a pipeline stage must return a tensor (or a tuple of tensors) that the next stage takes"
        )
    return outs


def fresh_inputs(sample: tuple, needs_grad: bool) -> list:
    """A received activation: a new leaf that requires grad (floating point only), like the runtime's recv buffer."""
    out = []
    for x in sample:
        if isinstance(x, torch.Tensor):
            x = x.detach().clone()
            if needs_grad and x.is_floating_point():
                x.requires_grad_(True)
        out.append(x)
    return out


class StageRunner:
    """One stage run the way torch's runtime runs it: F (with the loss on the last stage), I, W and B.

    Like the runtime (``PipelineStage.backward_one_chunk``), the first stage skips I (its input
    needs no gradient) and runs the whole backward as W; the last stage's backward starts from
    its loss, the others' from fixed random output gradients (drawn once, seeded by the index)."""

    def __init__(self, index: int, module: nn.Module, is_first: bool, is_last: bool,
                 loss_fn: Optional[Callable], target, device: torch.device):
        self.index, self.module, self.is_first, self.is_last = index, module, is_first, is_last
        self.loss_fn, self.target, self.device = loss_fn, target, device
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.has_params = bool(self.params)
        self.param_ptrs = {p.untyped_storage().data_ptr() for p in module.parameters()}
        self.output_grads: Optional[list[Optional[torch.Tensor]]] = None  # None: an output without a gradient
        self.gen = torch.Generator(device="cpu").manual_seed(1234 + index)

    def inputs(self, sample: tuple) -> list:
        return fresh_inputs(sample, needs_grad=not self.is_first)

    def forward(self, inputs) -> tuple[tuple[torch.Tensor, ...], list[torch.Tensor]]:
        """(the stage's outputs, the roots its backward starts from: the loss on the last stage)."""
        out = self.module(*inputs)
        outs = check_outputs(self.index, out)
        if not self.is_last:
            return outs, list(outs)
        loss = self.loss_fn(out, self.target) if self.loss_fn is not None else out
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise SchedcError(
                f"stage {self.index} (last): the loss must be a one-element tensor; "
                f"give loss_fn (and target) that reduce the stage's output to a scalar"
            )
        return outs, [loss]

    def grads_for(self, outs) -> Optional[list[Optional[torch.Tensor]]]:
        if self.is_last:
            return None
        if self.output_grads is None:
            self.output_grads = [
                torch.randn(o.shape, generator=self.gen, dtype=torch.float32).to(device=self.device, dtype=o.dtype)
                if o.is_floating_point() else None
                for o in outs
            ]
        return self.output_grads

    def run_input(self, roots, inputs):
        if self.is_first:
            return None
        _, param_groups = stage_backward_input(roots, self.grads_for(roots), inputs, iter(self.params))
        return param_groups

    def run_full(self, roots, inputs) -> None:
        # as the runtime calls it: the last stage passes its loss tensor with no output grads
        if self.is_last:
            stage_backward(roots[0], None, inputs)
        else:
            stage_backward(roots, self.grads_for(roots), inputs)

    def run_weight(self, roots, inputs, param_groups) -> None:
        if self.is_first:
            self.run_full(roots, inputs)
        elif self.has_params:
            stage_backward_weight(iter(self.params), param_groups)

    def detach_last(self, outs) -> None:
        # the runtime detaches a last stage's outputs after its backward (only the loss was used)
        if self.is_last:
            for o in outs:
                if not o._is_view():
                    o.detach_()



def stage_samples(stage_modules: Sequence[nn.Module], sample_input, dev: torch.device) -> list[tuple]:
    """Each stage's sample input: the previous stage's output, as the runtime would receive it."""
    samples = []
    x = tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in as_tuple(sample_input))
    with torch.no_grad():
        for i, m in enumerate(stage_modules):
            samples.append(x)
            try:
                out = m(*x)
            except SchedcError:
                raise
            except Exception as e:  # the user's code: one line here, the traceback with --debug
                raise SchedcError(f"stage {i}: forward raised {type(e).__name__}: {e}") from e
            x = tuple(t.detach() for t in check_outputs(i, out))
    return samples

