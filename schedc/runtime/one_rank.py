"""Run a one-rank schedule of a pipeline's stages inside torch's runtime, in this process.

Problem: a profile's F, I and W should be what torch's ``_PipelineScheduleRuntime`` executes, and a
few checks (activation checkpointing leaves the loss and gradients unchanged; the runtime's
own action times match the profile's) need the runtime itself without launching ranks.

Method: a process group of one rank (gloo, or NCCL on CUDA, over an in-memory store) holds every
stage; a one-rank schedule (every stage on rank 0: a V or a loop on one rank) passes activations
between stages locally, with no communication. :func:`run_steps` builds the stages with
:func:`schedc.runtime.pipeline.build_schedule`, runs ``steps`` steps and returns the losses, the
gradients and, per (stage, kind), the seconds torch's runtime spent in each action
(:class:`schedc.runtime.profiling.spans.timed_actions`: the ``PP:`` spans it wraps every action in).

Cost: ``steps`` training steps of the whole model on one process.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterator, Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn

from schedc.core.ir import Schedule
from schedc.runtime.allocator import live_bytes_peak
from schedc.runtime.profiling.spans import COMPUTE_LABEL, timed_actions


@contextmanager
def one_rank_group(device: torch.device) -> Iterator[None]:
    """A process group of this process alone (none may be initialized already)."""
    import sys

    device = torch.device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs: dict[str, Any] = {}
    if backend == "nccl":  # NCCL binds the group to one GPU: name it, with its index
        index = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.set_device(index)
        kwargs["device_id"] = torch.device("cuda", index)
    hook = sys.excepthook  # torch prefixes every later traceback with "[rank0]:" otherwise
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, **kwargs)
    try:
        yield
    finally:
        dist.destroy_process_group()
        sys.excepthook = hook


@dataclass
class RunResult:
    losses: list[float]  # per step, the mean over microbatches
    grads: dict[str, torch.Tensor]  # parameter name (stage.index.name) -> gradient after the last step
    action_seconds: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    peak_bytes: Optional[int] = None  # the allocator's highest level over a step (``trace_memory``)


def run_steps(schedule: Schedule, stage_modules: Sequence[nn.Module], inputs: tuple, target,
              loss_fn: Callable, device="cpu", steps: int = 1, trace_memory: bool = False,
              warmup: int = 0) -> RunResult:
    """`steps` steps of a one-rank `schedule` over `stage_modules` (all of them, stage order), in
    torch's runtime, after `warmup` untimed steps; ``inputs`` and ``target`` are the whole batch.
    The process group must be one rank (:func:`one_rank_group`)."""
    from torch.distributed.pipelining import PipelineStage

    from schedc.runtime.pipeline import Pipeline, build_schedule

    dev = torch.device(device)
    n = len(stage_modules)
    modules = {s: m.to(dev) for s, m in enumerate(stage_modules)}
    stages = [PipelineStage(modules[s], s, n, dev) for s in range(n)]
    pipe = Pipeline(build_schedule(schedule, stages, loss_fn=loss_fn), stages, modules)
    result = RunResult(losses=[], grads={})
    for k in range(warmup + steps):
        for p in pipe.parameters():
            p.grad = None
        losses: list = []
        with timed_actions(cuda=dev.type == "cuda") as rec:
            start = rec.event() if rec.cuda else None
            t0 = time.perf_counter()
            if trace_memory:
                _, peak = live_bytes_peak(dev, lambda: pipe.step(inputs, target=target, losses=losses))  # noqa: B023 (called at once)
                result.peak_bytes = max(result.peak_bytes or 0, peak)
            else:
                pipe.step(inputs, target=target, losses=losses)
            if rec.cuda:
                torch.cuda.synchronize(dev)
                rec.resolve(t0, start)
        if k < warmup:
            continue
        result.losses.append(float(torch.stack([l.detach().double() for l in losses]).mean()))
        for label, enter, wait, exit_ in rec.events:
            m = COMPUTE_LABEL.match(label)
            if m:
                key = (int(m.group(1)), m.group(2))
                result.action_seconds.setdefault(key, []).append(max(0.0, exit_ - enter - wait))
    result.grads = {f"{s}.{name}": p.grad.detach().clone() for s, mod in modules.items()
                    for name, p in mod.named_parameters() if p.grad is not None}
    return result


def loop_schedule(n_stages: int, n_microbatches: int, full_backward: bool = False,
                  whole: Collection[int] = ()) -> Schedule:
    """Every stage on one rank; microbatch by microbatch, F through all stages, then I and W of
    each stage from the last to the first: each action runs as it does in a zero-bubble
    schedule (W right after its I), one microbatch's activations live at a time. With
    ``full_backward`` every odd microbatch runs B instead of I and W (the two kinds interleaved, so
    that a change of machine load hits both alike); the stages in ``whole`` run B on every
    microbatch (a stage checkpointed per op, which torch's split backward cannot run)."""
    from schedc.io.csvio import parse_csv_text

    row = []
    for m in range(n_microbatches):
        row += [f"{s}F{m}" for s in range(n_stages)]
        for s in reversed(range(n_stages)):
            row += [f"{s}B{m}"] if s in whole or full_backward and m % 2 else [f"{s}I{m}", f"{s}W{m}"]
    return parse_csv_text(",".join(row) + "\n")


def runtime_action_times(stage_modules: Sequence[nn.Module], sample: tuple, loss_fn: Callable, target,
                         device, warmup: int, repeats: int,
                         whole: Collection[int] = ()) -> Optional[dict[tuple[int, str], list[float]]]:
    """Per (stage, 'F'|'I'|'W'|'B'), `repeats` seconds of that action as torch's runtime runs it
    (:func:`loop_schedule` with ``2 x repeats`` microbatches, I and W on the even ones, B on the odd
    ones and on every one of the stages in `whole`, after `warmup` untimed steps, in a one-rank
    group of this process); None where that cannot run here: a process group already exists
    (under torchrun), or the sample is not tensors that split along the batch."""
    if dist.is_initialized() or not all(isinstance(x, torch.Tensor) for x in sample):
        return None
    m = 2 * max(1, repeats)
    inputs = tuple(torch.cat([x] * m) for x in sample)
    whole_target = torch.cat([target] * m) if isinstance(target, torch.Tensor) else torch.zeros(m)
    if loss_fn is None:
        def loss_fn(out, _target):  # the last stage's output is the loss already
            return out
    with one_rank_group(device):
        result = run_steps(loop_schedule(len(stage_modules), m, full_backward=True, whole=whole), stage_modules, inputs,
                           whole_target, loss_fn,
                           device, steps=1, warmup=max(1, warmup))
    return result.action_seconds
