"""Measure what each pipeline stage costs on a real device: the numbers behind a profile file.

Problem: the compiler and the simulator need, per stage, the seconds of F (forward), I (backward
for inputs) and W (backward for weights), the bytes one microbatch holds after F and the bytes
still held between I and W, the static bytes (parameters, gradients, optimizer state) and the
communication time of each stage boundary. The numbers must describe what torch's
``_PipelineScheduleRuntime`` will actually execute, or the compiled order is optimized for a
different machine.

Method: every stage runs on its own sample input (the previous stage's output, detached and
requiring grad, exactly what a received activation is) and is timed the way the runtime runs it:
F is ``module(*inputs)`` (plus ``loss_fn`` on the last stage), I is
``torch.distributed.pipelining._backward.stage_backward_input`` and W is ``stage_backward_weight``,
the two halves the zero-bubble schedules call; B (the full backward, ``stage_backward``) is timed
as well to check I + W ~ B. Like the runtime (``PipelineStage.backward_one_chunk``), the first
stage skips I (its input needs no gradient) and runs the whole backward in W. F, I and W are then
timed inside torch's ``_PipelineScheduleRuntime`` itself: all stages on a one-rank process group of
this process run a schedule of ``2 x repeats`` microbatches (F through every stage, then I and W of
each from the last; B instead on every other microbatch), and each action's ``PP:`` span is its sample
(:func:`schedc.runtime.one_rank.runtime_action_times`), so the runtime's bookkeeping and stream
behaviour are in the numbers. Where that cannot run (a process group already exists, under
torchrun), each timed round runs F, I, W of one microbatch back to back on the device's stream
with no synchronize between the actions, as the runtime does (timing each action between
synchronizes would add the launch latency to every action: on a GPU most of a short W); a note
says which. Memory comes from one untimed F, I, W and F, B traced
by the allocator (:mod:`schedc.runtime.allocator`: ``memory_allocated`` / ``max_memory_allocated``
on CUDA, ``torch.profiler``'s memory events on CPU): ``activation_bytes`` is what F leaves
allocated (its output included: the runtime keeps it until the backward), ``weight_grad_bytes`` what is still allocated after I (with
torch's split backward this is more than after F: I keeps the graph for W and adds the gradients
W consumes), and ``transient_bytes`` each action's peak above what it started and ended with (the
last stage's fp32 logits in the loss). Received inputs, gradients sent back and output gradients
received are the boundary's (``boundary_bytes``: each stage's output), parameter gradients are static bytes.
Saved-tensor hooks count the same pass as a cross-check (a weak-referenceable box per saved
tensor; a note when they disagree with the allocator by more than a third). Times are medians over ``repeats`` runs after
``warmup`` runs, measured with CUDA events on GPU and ``perf_counter`` on CPU; the spread of
each of F, I and W (W's matters most: it is the shortest) goes to the profile's notes. The median, not the minimum: the ranks will run under the
same conditions as the profile (shared cores, other processes), and a minimum would hide that
interference rather than measure it; repeats are not extended adaptively either, because on a
loaded machine more samples mostly lengthen the wait. Instead a spread above ``NOISY_SPREAD``
in any F, I or W that matters (>= 5% of its stage's time) adds a ``warning:`` note, which
``schedc profile`` prints on stderr with what to do (:func:`profile_warnings`). Communication is ``latency + bytes / bandwidth`` of each
boundary's activation, or measured by a send/recv ping-pong between ranks 0 and 1 under torchrun
(:func:`measure_p2p_seconds`). On a CPU host whose ranks share the cores, ``concurrent=N``
(:func:`profile_gpt`) measures in N processes at once, which is what each rank will see; a host
whose cores are oversubscribed (by this profile's threads or by a load present before it starts)
makes every timing consistently slow, which the spread does not show, so
:func:`cpu_contention` says so in a warning.

Per-unit profiles (the input of ``schedc plan``): :func:`profile_units` measures each unit of a
model (embedding, each layer, final norm + head + loss) as its own stage and records the module
names each holds in ``modules``; a layer whose :func:`unit_signature` equals an earlier one's
reuses that measurement unless ``reuse_layers=False`` (``benchmarks/unit_reuse.py`` compares).
With an activation-checkpointing mode (``RunSettings.activation_checkpoint``, one for every layer
unit) :func:`measure_units_ac` checkpoints the layer units with the runtime's own code; under a
per-op mode (light, selective), which torch's split backward cannot run, a layer's F and whole
backward B are measured and recorded as I = B - W with W the layer's own without checkpointing.

Cost: (1 + warmup + repeats) x (2 forwards + 1 split backward + 1 full backward) per stage, plus
(1 + repeats) microbatches of the whole pipeline in the runtime.
"""

from __future__ import annotations

import gc
import math
import re
import statistics
import sys
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Optional, Sequence, Union

import torch
import torch.nn as nn
from torch.distributed.pipelining._backward import (
    stage_backward,
    stage_backward_input,
    stage_backward_weight,
)

from schedc.core.costs import Profile, StageCost, format_bytes, format_seconds
from schedc.errors import ParameterError, SchedcError, literal, python_spelling
from schedc.model_costs.profile import CUDA_RESERVE_BYTES

OPTIMIZER_STATE_FACTOR = {
    # state tensors per parameter, each the parameter's size: Adam(W) keeps exp_avg and
    # exp_avg_sq; plain SGD keeps nothing, SGD with momentum one buffer.
    "adamw": 2,
    "adam": 2,
    "sgd": 0,
    "sgd-momentum": 1,
    "none": 0,
}

ProgressFn = Callable[[str], None]

# What a CUDA process holds outside torch's allocator that a single-process profile cannot see
# (the context, cuBLAS/cuDNN workspaces and one NCCL group): a CUDA profile records the larger of
# the count's reserve and what it measures
CUDA_RESERVE_DEFAULT = int(CUDA_RESERVE_BYTES)


@dataclass
class RunSettings:
    """What the run holds per parameter and outside the allocator, as the counted route
    (``schedc.model_costs``) takes it: ``None`` means what the measured modules hold (the
    gradient in the parameter's dtype, the optimizer's state tensors in it too).
    ``grad_bytes_per_param`` / ``optimizer_bytes_per_param`` describe a mixed-precision run
    instead (e.g. 4 and 12: fp32 gradients, fp32 master weights and Adam's two moments)."""

    grad_bytes_per_param: Optional[float] = None
    optimizer_bytes_per_param: Optional[float] = None
    reserve_bytes: Optional[float] = None
    seq_len: Optional[int] = None
    activation_checkpoint: Any = "none"


# ---------------------------------------------------------------- device and timing


def resolve_device(device: Union[str, torch.device, None]) -> torch.device:
    """'cpu', 'cuda', 'cuda:1', ... -> torch.device, or a SchedcError saying why it cannot be used."""
    if device is None:
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ParameterError("device", f"{literal(repr(device))} is not a device torch knows; use cpu, cuda or cuda:N")
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ParameterError("device", f"{{name}}{literal(device)}: this torch build or machine has no CUDA device; "
                                 "use {name}cpu")
        count = torch.cuda.device_count()
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        if index >= count:
            raise ParameterError("device", f"{{name}}{literal(device)}: only {count} CUDA device(s) here "
                                 f"(cuda:0..cuda:{count - 1})")
        return torch.device("cuda", index)
    if dev.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ParameterError("device", f"{{name}}{literal(device)}: MPS is not available on this machine")
        return dev
    raise ParameterError("device", f"{{name}}{literal(device)}: only cpu, cuda and mps devices can be profiled")


@dataclass
class Stat:
    """Median and spread of repeated timings, in seconds."""

    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """(max - min) / median: 0.05 means the repeats lie within 5% of the median's size."""
        m = self.median
        return (max(self.samples) - min(self.samples)) / m if m > 0 else 0.0

    def __str__(self) -> str:
        return f"{format_seconds(self.median)} ±{100 * self.spread:.0f}%"


# ---------------------------------------------------------------- memory accounting


def _storage_key(t: torch.Tensor) -> Optional[tuple[int, int]]:
    try:
        s = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # tensor subclasses without a storage
        return None
    if s.nbytes() == 0:
        return None
    return (s.data_ptr(), s.nbytes())


def _add_storages(held: dict[int, int], tensors, exclude: set[int]) -> dict[int, int]:
    """Add the storages of `tensors` (data pointer -> bytes) not in `exclude` to `held`; returns it."""
    for t in tensors or ():
        if isinstance(t, torch.Tensor):
            key = _storage_key(t)
            if key and key[0] not in exclude:
                held[key[0]] = max(held.get(key[0], 0), key[1])
    return held


def _unique_bytes(tensors, exclude: set[int]) -> int:
    return sum(_add_storages({}, tensors, exclude).values())


class _Box:
    """What autograd stores instead of a saved tensor, so we can tell when the graph lets go of it."""

    __slots__ = ("t", "__weakref__")

    def __init__(self, t: torch.Tensor):
        self.t = t


class _SavedTensorTracker:
    """Weak references to every tensor autograd saves while active; counts what is still held."""

    def __init__(self) -> None:
        self.boxes: list[tuple[weakref.ref, Optional[tuple[int, int]]]] = []

    def pack(self, t: torch.Tensor) -> _Box:
        # Keep the storage, not the autograd identity: a saved *output* (softmax's result, SDPA's
        # out) would otherwise hold its own grad_fn, a cycle through C++ that gc cannot break, so
        # the node and its saved tensors would never be freed unless a backward releases them;
        # under the split backward they would look held after I (and after W).
        box = _Box(t.detach())
        self.boxes.append((weakref.ref(box), _storage_key(t)))
        return box

    @staticmethod
    def unpack(box: _Box) -> torch.Tensor:
        return box.t

    def alive_storages(self, exclude: set[int]) -> dict[int, int]:
        gc.collect()
        held: dict[int, int] = {}
        for ref, key in self.boxes:
            if key is not None and ref() is not None and key[0] not in exclude:
                held[key[0]] = max(held.get(key[0], 0), key[1])
        return held

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


# ---------------------------------------------------------------- one stage


@dataclass
class StageMeasurement:
    """Everything measured for one stage; :func:`profile_stages` turns a list of them into a Profile."""

    index: int
    forward: Stat
    backward_input: Stat
    backward_weight: Stat
    backward_full: Stat
    activation_bytes: int
    weight_grad_bytes: int
    static_bytes: int
    param_bytes: int
    output_bytes: int
    n_params: int
    notes: list[str] = field(default_factory=list)
    cuda_after_forward: Optional[int] = None
    cuda_after_input: Optional[int] = None
    # transient peak of each action kind above what it started and ended with (allocator's view)
    transient: dict[str, int] = field(default_factory=dict)

    _TIMES = ("forward", "backward_input", "backward_weight", "backward_full")

    def to_dict(self) -> dict:
        """JSON-ready (timings as their samples), e.g. to send from a rank to its parent."""
        d = {k: v for k, v in self.__dict__.items() if k not in self._TIMES}
        d.update({k: getattr(self, k).samples for k in self._TIMES})
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "StageMeasurement":
        d = dict(d)
        for k in cls._TIMES:
            d[k] = Stat(list(d[k]))
        return cls(**d)

    def merged(self, other: "StageMeasurement") -> "StageMeasurement":
        """The same stage measured again: samples pooled (bytes are deterministic)."""
        out = StageMeasurement.from_dict(self.to_dict())
        for k in self._TIMES:
            getattr(out, k).samples.extend(getattr(other, k).samples)
        return out


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _check_outputs(stage: int, out) -> tuple[torch.Tensor, ...]:
    outs = _as_tuple(out)
    bad = [type(o).__name__ for o in outs if not isinstance(o, torch.Tensor)]
    if bad or not outs:
        raise SchedcError(
            f"stage {stage}: forward returned {type(out).__name__}"
            f"{' containing ' + ', '.join(bad) if bad and isinstance(out, (tuple, list)) else ''}; "
            f"a pipeline stage must return a tensor (or a tuple of tensors) that the next stage takes"
        )
    return outs


def _optimizer_factor(optimizer: Optional[str]) -> int:
    """State tensors per parameter for `optimizer` (None: none); SchedcError for an unknown name."""
    name = (optimizer or "none").lower()
    if name not in OPTIMIZER_STATE_FACTOR:
        raise SchedcError(
            f"optimizer must be one of {', '.join(OPTIMIZER_STATE_FACTOR)}, got {optimizer!r}"
        )
    return OPTIMIZER_STATE_FACTOR[name]


def static_bytes_of(module: nn.Module, optimizer: Optional[str]) -> tuple[int, int, int]:
    """(static bytes, parameter bytes, parameter count): params + their grads + optimizer state."""
    factor = _optimizer_factor(optimizer)
    params = [p for p in module.parameters()]
    p_bytes = sum(p.numel() * p.element_size() for p in params)
    g_bytes = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    state = factor * g_bytes
    return p_bytes + g_bytes + state, p_bytes, sum(p.numel() for p in params)


def _fresh_inputs(sample: tuple, needs_grad: bool) -> list:
    """A received activation: a new leaf that requires grad (floating point only), like the runtime's recv buffer."""
    out = []
    for x in sample:
        if isinstance(x, torch.Tensor):
            x = x.detach().clone()
            if needs_grad and x.is_floating_point():
                x.requires_grad_(True)
        out.append(x)
    return out


class _StageRunner:
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
        self.output_grads: Optional[list[torch.Tensor]] = None
        self.gen = torch.Generator(device="cpu").manual_seed(1234 + index)

    def inputs(self, sample: tuple) -> list:
        return _fresh_inputs(sample, needs_grad=not self.is_first)

    def forward(self, inputs) -> tuple[tuple[torch.Tensor, ...], list[torch.Tensor]]:
        """(the stage's outputs, the roots its backward starts from: the loss on the last stage)."""
        out = self.module(*inputs)
        outs = _check_outputs(self.index, out)
        if not self.is_last:
            return outs, list(outs)
        loss = self.loss_fn(out, self.target) if self.loss_fn is not None else out
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise SchedcError(
                f"stage {self.index} (last): the loss must be a one-element tensor; "
                f"give loss_fn (and target) that reduce the stage's output to a scalar"
            )
        return outs, [loss]

    def grads_for(self, outs) -> Optional[list[torch.Tensor]]:
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


@dataclass
class _MemoryCount:
    activation: int
    weight_grad: int
    output_bytes: int
    cuda_after_forward: Optional[int]
    cuda_after_input: Optional[int]
    notes: list[str]
    transient: dict[str, int] = field(default_factory=dict)


def _hook_counts(run: _StageRunner, tracker: "_SavedTensorTracker", held_tensors, grads, param_groups) -> int:
    """What the saved-tensor hooks say I leaves for W: live saved tensors plus the gradients I made for W."""
    i_storages = _add_storages(tracker.alive_storages(run.param_ptrs), held_tensors, run.param_ptrs)
    left_for_w = [
        g for pg in (param_groups or []) for gs in (pg.get("grads") or []) for g in (gs or ()) if g is not None
    ]
    extra = _unique_bytes(left_for_w, run.param_ptrs | set(i_storages) | set(_add_storages({}, grads, set())))
    return sum(i_storages.values()) + extra


def _measure_memory(run: _StageRunner, sample: tuple) -> _MemoryCount:
    """One untimed F, I, W and one F, B, traced by the allocator (:mod:`schedc.runtime.allocator`):
    held after F, held from I until W (may exceed F's: torch's split backward keeps the graph and
    adds the gradients W needs), each action's transient peak. The stage's received inputs, the
    gradients I sends back and the output gradients it receives are the boundary's buffers
    (``boundary_bytes``), not the stage's; on the last stage the logits go at I, as in the runtime. Saved-tensor hooks count the
    same pass as a cross-check (a note when the two disagree)."""
    from schedc.runtime.allocator import AllocatorTrace, nbytes_of

    index, param_ptrs = run.index, run.param_ptrs
    tracker = _SavedTensorTracker()
    inputs = run.inputs(sample)
    input_bytes = 0 if run.is_first else _unique_bytes(inputs, param_ptrs)
    for p in run.params:  # gradients are static bytes: W accumulates into them in place
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    with torch.no_grad():
        probe = _as_tuple(run.module(*run.inputs(sample)))
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
        hooked_f = sum(_add_storages(tracker.alive_storages(param_ptrs), held_tensors, param_ptrs).values())
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
    return _MemoryCount(activation, max(0, weight_grad), output_bytes, lv["F"].end if cuda else None,
                        lv["I"].end if cuda else None, notes, transient)


def _memory_notes(index: int, activation: int, weight_grad: int, hooked_f: int, hooked_i: int,
                  run: _StageRunner) -> list[str]:
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


class _Marks:
    """Time points between the actions of one round, as torch's runtime runs them: one after
    another on the device's current stream with no synchronize in between (CUDA events recorded
    back to back; perf_counter on CPU, and on MPS after synchronizing). Synchronizing around
    every action instead would add launch latency to each, most of a short W's time."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.points: list = []

    def mark(self) -> None:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record(torch.cuda.current_stream(self.device))
            self.points.append(e)
            return
        if self.device.type == "mps":
            torch.mps.synchronize()
        self.points.append(time.perf_counter())

    def seconds(self) -> list[float]:
        """Seconds between consecutive marks (synchronizes on CUDA)."""
        if self.cuda:
            self.points[-1].synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.points, self.points[1:])]
        return [b - a for a, b in zip(self.points, self.points[1:])]


def _time_repeats(run: _StageRunner, sample: tuple, warmup: int, repeats: int) -> dict[str, list[float]]:
    """Seconds of F, I, W and of F, B, after `warmup` untimed rounds: {'F', 'I', 'W', 'B'} -> samples.

    Each round runs F, I, W of one microbatch and then F, B of another back to back, as a
    one-rank schedule of this stage would; the device synchronizes only at the round's start and
    end (:class:`_Marks`)."""
    times: dict[str, list[float]] = {"F": [], "I": [], "W": [], "B": []}
    for rep in range(warmup + repeats):
        inputs, inputs2 = run.inputs(sample), run.inputs(sample)
        if run.device.type == "cuda":
            torch.cuda.synchronize(run.device)
        marks = _Marks(run.device)
        marks.mark()
        outs, roots = run.forward(inputs)
        marks.mark()
        pg = run.run_input(roots, inputs)
        marks.mark()
        run.detach_last(outs)
        run.run_weight(roots, inputs, pg)
        marks.mark()
        outs2, roots2 = run.forward(inputs2)
        marks.mark()
        run.run_full(roots2, inputs2)
        marks.mark()
        tf, ti, tw, tf2, tb = marks.seconds()
        del outs, roots, pg, outs2, roots2
        if rep >= warmup:
            times["F"] += [tf, tf2]
            times["I"].append(ti)
            times["W"].append(tw)
            times["B"].append(tb)
    for p in run.module.parameters():
        p.grad = None
    return times


def _measure_stage(
    index: int,
    module: nn.Module,
    sample: tuple,
    is_first: bool,
    is_last: bool,
    loss_fn: Optional[Callable],
    target,
    device: torch.device,
    warmup: int,
    repeats: int,
    optimizer: Optional[str],
) -> StageMeasurement:
    """Memory from one untimed pass, then the timed repeats (module docstring)."""
    run = _StageRunner(index, module, is_first, is_last, loss_fn, target, device)
    memory = _measure_memory(run, sample)
    times = _time_repeats(run, sample, warmup, repeats)
    notes = list(memory.notes)
    if is_first:
        notes.append(
            f"stage {index}: first stage: torch's runtime skips I here (its input needs no gradient) "
            f"and runs the whole backward in W; I is the bookkeeping time only"
        )
    w_stat = Stat(times["W"])
    if not run.has_params:
        notes.append(f"stage {index}: no parameters: W = 0 (nothing to compute for weights)")
        w_stat = Stat([0.0])
    static, p_bytes, n_params = static_bytes_of(module, optimizer)
    return StageMeasurement(
        index=index,
        forward=Stat(times["F"]),
        backward_input=Stat([max(x, 1e-7) for x in times["I"]]),  # the file wants I > 0; a skipped I is still an action
        backward_weight=w_stat,
        backward_full=Stat(times["B"]),
        activation_bytes=int(memory.activation),
        weight_grad_bytes=int(memory.weight_grad),
        static_bytes=int(static),
        param_bytes=int(p_bytes),
        output_bytes=int(memory.output_bytes),
        n_params=int(n_params),
        notes=notes,
        cuda_after_forward=memory.cuda_after_forward,
        cuda_after_input=memory.cuda_after_input,
        transient=dict(memory.transient),
    )


# ---------------------------------------------------------------- communication


def comm_seconds(boundary_bytes: Sequence[int], bandwidth: Optional[float], latency: float = 0.0) -> list[float]:
    """latency + bytes / bandwidth (bytes per second) for each boundary; latency only without a bandwidth."""
    if bandwidth is not None and bandwidth <= 0:
        raise ParameterError("comm_bandwidth", f"{{param}} must be > 0 bytes/s, got {bandwidth:g}")
    if latency < 0:
        raise ParameterError("comm_latency", f"{{param}} must be >= 0 seconds, got {latency:g}")
    return [latency + (b / bandwidth if bandwidth else 0.0) for b in boundary_bytes]


def measure_p2p_seconds(
    boundary_bytes: Sequence[int],
    device: Union[str, torch.device] = "cpu",
    repeats: int = 10,
    warmup: int = 3,
    group=None,
) -> list[float]:
    """One-way time of sending each boundary's activation from rank 0 to rank 1 (half a ping-pong).

    Every rank of the (initialized) process group must call this with the same arguments; ranks
    other than 0 and 1 only wait. The result (median per boundary) is the same on every rank.
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise SchedcError("measuring communication needs torch.distributed initialized (launch with torchrun)")
    world = dist.get_world_size(group)
    if world < 2:
        raise SchedcError("measuring communication needs at least 2 ranks (torchrun --nproc-per-node 2)")
    rank = dist.get_rank(group)
    dev = torch.device(device)
    results = []
    for nbytes in boundary_bytes:
        buf = torch.zeros(max(1, int(math.ceil(nbytes / 4))), dtype=torch.float32, device=dev)
        samples = []
        for rep in range(warmup + repeats):
            if rank in (0, 1):
                t0 = time.perf_counter()
                if rank == 0:
                    dist.send(buf, 1, group=group)
                    dist.recv(buf, 1, group=group)
                else:
                    dist.recv(buf, 0, group=group)
                    dist.send(buf, 0, group=group)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                if rep >= warmup:
                    samples.append((time.perf_counter() - t0) / 2)
        value = torch.tensor([statistics.median(samples) if samples else 0.0], dtype=torch.float64)
        if dev.type == "cuda":
            value = value.to(dev)
        dist.broadcast(value, 0, group=group)
        results.append(float(value.item()))
    return results


# ---------------------------------------------------------------- the whole pipeline


def measure_stages(
    stage_modules: Sequence[nn.Module],
    sample_input,
    loss_fn: Optional[Callable] = None,
    target=None,
    device: Union[str, torch.device, None] = "cpu",
    warmup: int = 2,
    repeats: int = 5,
    optimizer: Optional[str] = "adamw",
    progress: Optional[ProgressFn] = None,
    only: Optional[Sequence[int]] = None,
) -> list[StageMeasurement]:
    """Measure every stage (see the module docstring); modules and inputs are moved to `device`.

    ``only`` restricts the measurement to those stage indices (the others still run one
    forward to produce the sample inputs); the result then holds only those stages."""
    if not stage_modules:
        raise SchedcError("profile: give at least one stage module")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (warmup, repeats)) or warmup < 0 or repeats < 1:
        raise SchedcError(f"profile: need warmup >= 0 and repeats >= 1 (integers), got {warmup!r:.40} and {repeats!r:.40}")
    _optimizer_factor(optimizer)  # fail before measuring, not after
    dev = resolve_device(device)
    for i, m in enumerate(stage_modules):
        if not isinstance(m, nn.Module):
            raise SchedcError(f"stage {i}: expected a torch.nn.Module, got {type(m).__name__}")
        m.to(dev)
    if isinstance(target, torch.Tensor):
        target = target.to(dev)

    samples = _stage_samples(stage_modules, sample_input, dev)
    n = len(stage_modules)
    results = []
    for i, m in enumerate(stage_modules):
        if only is not None and i not in only:
            continue
        if progress:
            progress(f"profiling stage {i + 1}/{n} on {dev} ({warmup} warm-up + {repeats} runs)")
        results.append(
            _measure_stage(i, m, samples[i], i == 0, i == n - 1, loss_fn, target, dev, warmup, repeats, optimizer)
        )
    return _timed_in_runtime(results, stage_modules, samples[0], loss_fn, target, dev, warmup, repeats, progress)


def _stage_samples(stage_modules: Sequence[nn.Module], sample_input, dev: torch.device) -> list[tuple]:
    """Each stage's sample input: the previous stage's output, as the runtime would receive it."""
    samples = []
    x = tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in _as_tuple(sample_input))
    with torch.no_grad():
        for i, m in enumerate(stage_modules):
            samples.append(x)
            try:
                out = m(*x)
            except SchedcError:
                raise
            except Exception as e:  # the user's code: one line here, the traceback with --debug
                raise SchedcError(f"stage {i}: forward raised {type(e).__name__}: {e}") from e
            x = tuple(t.detach() for t in _check_outputs(i, out))
    return samples


def _timed_in_runtime(results: list[StageMeasurement], stage_modules, sample, loss_fn, target, dev, warmup,
                      repeats, progress) -> list[StageMeasurement]:
    """`results` with F, I and W replaced by torch's runtime's own action times
    (:func:`schedc.runtime.one_rank.runtime_action_times`), where it can run here; B stays the
    stage's own (it only checks I + W ~ B)."""
    from schedc.runtime.one_rank import runtime_action_times

    if progress:
        progress(f"timing F, I, W of {len(stage_modules)} stages inside torch's runtime ({repeats} microbatches)")
    try:
        times = runtime_action_times(stage_modules, sample, loss_fn, target, dev, warmup, repeats)
    except Exception as e:  # noqa: BLE001 - the stage-by-stage timings stand; the note says why
        times = None
        reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    else:
        reason = "a process group already exists (torchrun), or the sample is not batch-split tensors"
    for m in results:
        for p in stage_modules[m.index].parameters():
            p.grad = None
        got = times and all(times.get((m.index, k)) for k in ("F", "I", "W"))
        if not got:
            m.notes.append(f"stage {m.index}: F, I, W timed back to back outside torch's runtime ({reason})")
            continue
        m.forward = Stat(times[(m.index, "F")])
        m.backward_input = Stat([max(x, 1e-7) for x in times[(m.index, "I")]])
        if m.backward_weight.samples != [0.0]:
            m.backward_weight = Stat(times[(m.index, "W")])
        if times.get((m.index, "B")):
            m.backward_full = Stat(times[(m.index, "B")])
        m.notes.append(f"stage {m.index}: F, I, W are torch's runtime's own action times (a one-rank schedule of "
                       f"all stages, W right after its I, B on every other microbatch)")
    return results


NOISY_SPREAD = 0.5  # (max - min) / median above which the repeats disagree too much to trust


def timing_warning(measured: Sequence[StageMeasurement]) -> Optional[str]:
    """A warning when the repeats of some F, I or W spread more than NOISY_SPREAD (None if not)."""
    noisy = []
    for m in measured:
        total = m.forward.median + m.backward_input.median + m.backward_weight.median
        for kind, stat in (("F", m.forward), ("I", m.backward_input), ("W", m.backward_weight)):
            if stat.median >= 0.05 * total and stat.spread > NOISY_SPREAD:
                noisy.append(f"stage {m.index} {kind} ±{100 * stat.spread:.0f}%")
    if not noisy:
        return None
    samples = min(len(m.backward_input.samples) for m in measured)
    return (f"warning: timings vary a lot between repeats ({', '.join(noisy[:6])}{', ...' if len(noisy) > 6 else ''}); "
            f"the compiler would optimize noise: profile again with more repeats than the {samples} timed here "
            f"(e.g. --repeats {max(20, 2 * samples)}), --threads as the ranks will use, on a quiet machine "
            f"(other processes share the cores)")


def cpu_contention(threads: int, processes: int = 1) -> Optional[str]:
    """A warning when this host's CPUs are oversubscribed for a CPU profile (None if not).

    Timings taken while more threads want the cores than there are (this profile's own
    ``processes x threads``, or other programs: the 1-minute load average before measuring) come
    out many times slower than on a quiet host, consistently, so the spread of the repeats does
    not show it; a profile measured so describes the contention, not the model."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    wanted = threads * processes
    if wanted > cores:
        return (f"warning: {processes} process(es) x {threads} thread(s) want {wanted} cores but {cores} are here: "
                f"oversubscribed, so every timing includes waiting for a core; use --threads "
                f"{max(1, cores // processes)} or fewer")
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    if load + wanted > cores + 0.5:
        return (f"warning: the machine was busy before profiling (load average {load:.1f} on {cores} cores, "
                f"{wanted} more thread(s) for this profile): the timings include waiting for a core and describe "
                f"this load; profile on a quiet machine for the model's own costs")
    return None


def profile_warnings(profile: Profile) -> list[str]:
    """The profile's notes that are warnings (e.g. from :func:`timing_warning`), without the prefix."""
    return [n.removeprefix("warning: ") for n in profile.notes or [] if n.startswith("warning: ")]


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
            transient_bytes={k: float(v) for k, v in m.transient.items()} or None,
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
    comm_value = [float(c) for c in comm] if isinstance(comm, (list, tuple)) else float(comm)
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
    device: Union[str, torch.device, None] = "cpu",
    warmup: int = 2,
    repeats: int = 5,
    optimizer: Optional[str] = "adamw",
    comm: Union[None, float, Sequence[float], str] = None,
    comm_bandwidth: Optional[float] = None,
    comm_latency: float = 0.0,
    model: Optional[str] = None,
    microbatch_size: Optional[int] = None,
    dtype: Optional[str] = None,
    progress: Optional[ProgressFn] = None,
    *,
    unit_names: Optional[Sequence[Sequence[str]]] = None,
    reuse_layers: bool = True,
    shared: Sequence[str] = (),
    settings: Optional[RunSettings] = None,
) -> Profile:
    """Profile a pipeline given as its stage modules, in order; returns a ``schedc.profile/v1`` Profile.

    ``sample_input`` is one microbatch for stage 0 (a tensor or tuple); ``loss_fn(output, target)``
    turns the last stage's output into the loss (without it the last output must be a scalar).
    ``comm``: seconds per boundary (a number or one per boundary), ``"measure"`` for a ping-pong
    between ranks 0 and 1 (every rank must call, under torchrun), or None to compute
    ``comm_latency + bytes / comm_bandwidth`` from each boundary's activation (0 without either).
    With ``unit_names`` (one list of module names per module) the modules are a model's units
    and the result a per-unit profile (:func:`profile_units`). ``settings`` (:class:`RunSettings`)
    states what the run holds per parameter and outside the allocator; ``assumes`` records it. Its
    ``activation_checkpoint`` is applied to a per-unit profile's layers (:func:`measure_units_ac`);
    stage modules are measured as given, so checkpoint them first (:func:`checkpoint_blocks`).
    """
    dev = resolve_device(device)
    notes = _contention_note(dev, 1)
    if unit_names is None:
        measured = measure_stages(stage_modules, sample_input, loss_fn, target, dev, warmup, repeats, optimizer,
                                  progress)
    else:
        if len(unit_names) != len(stage_modules):
            raise SchedcError(f"profile_units: {len(stage_modules)} unit modules but {len(unit_names)} name lists")
        measured = measure_units(stage_modules, sample_input, loss_fn, target, reuse_layers=reuse_layers, device=dev,
                                 warmup=warmup, repeats=repeats, optimizer=optimizer, progress=progress,
                                 activation_checkpoint=_unit_mode(settings), unit_names=unit_names)
        if shared:
            notes.append(f"every unit also kept {', '.join(shared)} (modules every stage needs; not listed in "
                         f"'modules')")
        notes.append(f"per-unit profile: {len(stage_modules)} units, each measured as its own pipeline stage"
                     + ("; identical layers measured once" if reuse_layers else "; every unit measured"))
    profile = _assemble(measured, dev, comm, comm_bandwidth, comm_latency, model, microbatch_size,
                        dtype or _dtype_of(stage_modules), notes=notes, optimizer=optimizer, settings=settings)
    return profile if unit_names is None else with_modules(profile, unit_names)


# ---------------------------------------------------------------- per-unit profiles


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


# ---------------------------------------------------------------- checkpointed units


_BLOCK_NAME = re.compile(r"(^|\.)\w+\.\d+$")  # "layers.3", "model.layers.3", "blocks.0": one block


def _unit_mode(settings: Optional[RunSettings]) -> str:
    """The one activation-checkpointing mode of a per-unit measurement (``RunSettings``)."""
    from schedc.runtime.checkpointing import check_mode

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
    from schedc.runtime.checkpointing import checkpoint_block

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
    from schedc.core.costs import PER_OP_AC
    from schedc.runtime.checkpointing import check_mode

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
    samples = _stage_samples(unit_modules, sample_input, dev)
    n = len(unit_modules)
    own = [i for i in range(1, n - 1) if source[i] == i]
    out: dict[int, StageMeasurement] = {}
    for k, i in enumerate(own):
        if progress:
            progress(f"profiling unit {i} checkpointed ({mode}) {k + 1}/{len(own)} on {dev}: F and B")
        run = _StageRunner(i, unit_modules[i], False, False, loss_fn, target, dev)
        memory = _memory_b(run, samples[i])
        times = _time_b(run, samples[i], warmup, repeats)
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


@dataclass
class _BMemory:
    activation: int
    transient_f: int
    peak_above: int  # B's peak above what F left, less the input gradient it sends back
    end: int         # what B leaves allocated, less the input gradient


def _memory_b(run: _StageRunner, sample: tuple) -> _BMemory:
    """One untimed F, B of a checkpointed unit traced by the allocator: what F leaves (its output
    included), F's transient, B's peak above that and what B leaves (received inputs and the
    gradients sent back are the boundary's, as in :func:`_measure_memory`)."""
    from schedc.runtime.allocator import AllocatorTrace, nbytes_of

    inputs = run.inputs(sample)
    for p in run.params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    with torch.no_grad():
        probe = _as_tuple(run.module(*run.inputs(sample)))
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
    return _BMemory(f.end, f.transient, max(0, b.peak - sent_back - f.end), max(0, b.end - sent_back))


def _time_b(run: _StageRunner, sample: tuple, warmup: int, repeats: int) -> dict[str, list[float]]:
    """Seconds of F and B, back to back, after `warmup` untimed rounds (:class:`_Marks`)."""
    times: dict[str, list[float]] = {"F": [], "B": []}
    for rep in range(warmup + repeats):
        inputs = run.inputs(sample)
        if run.device.type == "cuda":
            torch.cuda.synchronize(run.device)
        marks = _Marks(run.device)
        marks.mark()
        outs, roots = run.forward(inputs)
        marks.mark()
        run.run_full(roots, inputs)
        marks.mark()
        tf, tb = marks.seconds()
        del outs, roots
        if rep >= warmup:
            times["F"].append(tf)
            times["B"].append(tb)
    for p in run.module.parameters():
        p.grad = None
    return times


def _per_op_measurement(none: StageMeasurement, memory: _BMemory, times: dict, mode: str) -> StageMeasurement:
    """A per-op checkpointed unit as the profile records it, comparable with the counted route
    (``schedc.model_costs``), which counts per-op modes as held from I until W = kept + the output
    gradients W consumes + dx, and I's transient above that: here held = what F left + what the
    split backward adds at I to the same unit without checkpointing (`none`'s held less its
    activation: those gradients and dx), and I's transient = B's measured peak above that (0 when
    below). ``checkpointed_form`` (schedc.plan.ac) adds the two back: B's peak is the measured one
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
    from schedc.runtime.one_rank import runtime_action_times

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
    a note records them, since a framework's split must give them to every stage. ``options``
    are :func:`profile_stages`'s (device, warmup, repeats, comm, ...)."""
    return profile_stages(unit_modules, sample_input, loss_fn, target, unit_names=unit_names,
                          reuse_layers=reuse_layers, shared=shared, **options)


def with_modules(profile: Profile, unit_names: Sequence[Sequence[str]]) -> Profile:
    """The profile with ``modules`` set on every stage (unit) from ``unit_names``."""
    stages = [st.model_copy(update={"modules": list(names)}) for st, names in zip(profile.stages, unit_names)]
    return profile.model_copy(update={"stages": stages})


def _contention_note(dev: torch.device, processes: int) -> list[str]:
    """:func:`cpu_contention` before measuring on a CPU, as profile notes."""
    if dev.type != "cpu":
        return []
    warning = cpu_contention(torch.get_num_threads(), processes)
    return [warning] if warning else []


def _assemble(measured, dev, comm, comm_bandwidth, comm_latency, model, microbatch_size, dtype,
              notes: Sequence[str] = (), optimizer: Optional[str] = "adamw",
              settings: Optional[RunSettings] = None) -> Profile:
    settings = settings or RunSettings()
    measured = [_with_param_cost(m, settings) for m in measured]
    boundary_bytes = [m.output_bytes for m in measured[:-1]]
    notes = list(notes)
    if isinstance(comm, str):
        if comm != "measure":
            raise SchedcError(f"comm must be seconds, a list of seconds or 'measure', got {comm!r}")
        comm_value: Union[float, list[float]] = measure_p2p_seconds(boundary_bytes, dev)
        notes.append("comm: measured send/recv between ranks 0 and 1 (half a ping-pong, median)")
    elif comm is not None:
        comm_value = list(comm) if isinstance(comm, (list, tuple)) else float(comm)
    else:
        comm_value = comm_seconds(boundary_bytes, comm_bandwidth, comm_latency)
        if comm_bandwidth is None and comm_latency == 0:
            notes.append("comm: no bandwidth or latency given; communication is taken as free (0 s)")
        else:
            notes.append(
                f"comm: latency {comm_latency:g}s + activation bytes / "
                f"{'inf' if comm_bandwidth is None else f'{comm_bandwidth:g}'} B/s"
            )
    if dev.type == "cpu":
        notes.append(f"cpu threads: {torch.get_num_threads()}")
    reserve, reserve_note = _reserve(dev, settings.reserve_bytes)
    if reserve_note:
        notes.append(reserve_note)
    return to_profile(
        measured,
        comm=comm_value,
        device=_device_label(dev),
        model=model,
        microbatch_size=microbatch_size,
        dtype=dtype,
        extra_notes=notes,
        assumes=_assumes(measured, dtype, optimizer, microbatch_size, settings, reserve),
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


def _assumes(measured, dtype, optimizer, microbatch_size, settings: RunSettings, reserve) -> dict:
    """What the numbers took about the run (the plan report's ``assumes``)."""
    out = {"dtype": dtype, "optimizer": optimizer or "none", "microbatch_size": microbatch_size,
           "static_bytes_per_param": _static_per_param(measured),
           "grad_bytes_per_param": settings.grad_bytes_per_param,
           "optimizer_bytes_per_param": settings.optimizer_bytes_per_param,
           "activation_checkpoint": settings.activation_checkpoint,
           # as schedc.model_costs' unit_profile records it: torch refuses W after I through a per-op
           # checkpoint, so such layers run (and were measured as) one whole backward B
           "split_backward": not _per_op(settings.activation_checkpoint), "dp_shard": 1, "tp": 1,
           "torch": torch.__version__.split("+")[0], "reserve_bytes": reserve}
    if settings.seq_len is not None:
        out["seq_len"] = settings.seq_len
    return {k: v for k, v in out.items() if v is not None}


def _per_op(choice) -> bool:
    """Whether an activation-checkpointing choice (a mode, or one per stage or block) has a per-op mode."""
    from schedc.core.costs import PER_OP_AC, block_modes

    return any(b in PER_OP_AC for b in block_modes(choice or ()))


def _reserve(dev: torch.device, given: Optional[float]) -> tuple[Optional[float], Optional[str]]:
    """(reserve_bytes, a note): what was given; on CUDA otherwise the larger of the measured bytes
    outside torch's allocator and :data:`CUDA_RESERVE_DEFAULT`; none on CPU."""
    if given is not None:
        return float(given), f"reserve: {format_bytes(given)} outside torch's allocator (given)"
    if dev.type != "cuda":
        return None, None
    from schedc.runtime.allocator import cuda_reserve_bytes

    measured = cuda_reserve_bytes(dev) or 0
    value = max(measured, CUDA_RESERVE_DEFAULT)
    return float(value), (f"reserve: {format_bytes(measured)} measured outside torch's allocator (device used minus "
                          f"torch's reserved; no NCCL group here); recorded {format_bytes(value)}, at least the "
                          f"documented {format_bytes(CUDA_RESERVE_DEFAULT)} of a process with one NCCL group")


def _dtype_of(modules) -> Optional[str]:
    for m in modules:
        for p in m.parameters():
            return str(p.dtype).replace("torch.", "")
    return None


def _device_label(dev: torch.device) -> str:
    if dev.type == "cuda":
        return f"{dev} ({torch.cuda.get_device_name(dev)})"
    return str(dev)


# ---------------------------------------------------------------- the built-in GPT


def gpt_stages(config, n_stages: int) -> list[nn.Module]:
    """The built-in GPT (schedc.runtime.models) split into `n_stages` contiguous stages."""
    from schedc.runtime.models import GPT
    from schedc.runtime.split import split_gpt

    if n_stages < 1:
        raise ParameterError("n_stages", f"{{param}} must be >= 1, got {literal(n_stages)}", flag="--stages")
    stages = split_gpt(GPT(config), range(n_stages), n_stages)
    return [stages[s] for s in range(n_stages)]


def gpt_units(config) -> tuple[list[nn.Module], list[list[str]]]:
    """The built-in GPT as units (its ``embed``, each of its ``blocks``, ``norm`` + ``head``): one
    stage module per unit and the module names each holds."""
    from schedc.runtime.models import GPT
    from schedc.runtime.split import split_gpt

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
    device: Union[str, torch.device, None] = "cpu",
    dtype: Optional[str] = None,
    warmup: int = 2,
    repeats: int = 5,
    optimizer: Optional[str] = "adamw",
    comm: Union[None, float, Sequence[float], str] = None,
    comm_bandwidth: Optional[float] = None,
    comm_latency: float = 0.0,
    progress: Optional[ProgressFn] = None,
    concurrent: int = 1,
    timeout: float = 1800.0,
    units: bool = False,
    reuse_layers: bool = True,
    settings: Optional[RunSettings] = None,
) -> Profile:
    """Profile schedc's built-in GPT (``GPTConfig``) split into `n_stages`, one microbatch of
    `microbatch_size` sequences; `dtype` overrides ``config.dtype``.

    ``concurrent=N`` (CPU only) measures in N processes at once, each timing every stage, and
    pools their samples: N ranks on one host share its cores and memory bandwidth, so this is
    what each of them will see when they run the pipeline together.

    ``units=True`` ignores `n_stages` and writes a per-unit profile (:func:`gpt_units`,
    :func:`measure_units`; ``reuse_layers`` as there)."""
    import dataclasses

    from schedc.runtime.models import GPTConfig, lm_loss, make_batch, parse_dtype

    if not isinstance(config, GPTConfig):
        raise ParameterError("config", f"{{param}} must be a schedc.runtime.GPTConfig, got {type(config).__name__}")
    for param, value, flag in (("n_stages", n_stages, "--stages"), ("microbatch_size", microbatch_size, "--mbs"),
                               ("concurrent", concurrent, "")):
        if isinstance(value, bool) or not isinstance(value, int):  # before a comparison's TypeError
            raise ParameterError(param, f"{{param}} must be an integer, got {literal(repr(value)[:40])}", flag=flag)
    if microbatch_size < 1:
        raise ParameterError("microbatch_size", f"{{param}} must be >= 1, got {literal(microbatch_size)}", flag="--mbs")
    try:
        if dtype is not None:
            config = dataclasses.replace(config, dtype=dtype)
        parse_dtype(config.dtype)
    except ValueError as e:
        raise ParameterError("dtype", literal(e)) from None
    dev = resolve_device(device)
    settings = dataclasses.replace(settings or RunSettings(), seq_len=config.seq_len)
    try:
        stages, names = gpt_units(config) if units else (gpt_stages(config, n_stages), None)
    except ValueError as e:
        raise ParameterError("n_stages", f"{{name}}{literal(n_stages)}: {literal(e)}", flag="--stages") from None
    if units:  # the layer units, as measure_units_ac checkpoints them
        if concurrent > 1 and settings.activation_checkpoint != "none":
            raise ParameterError("concurrent", "{param} measures without activation checkpointing; drop one of them")
    else:
        _checkpoint(stages, settings.activation_checkpoint, concurrent)
    tokens, targets = make_batch(config, microbatch_size, seed=0)
    model = gpt_label(config, len(stages), "units" if units else "stages")
    if concurrent < 1:
        raise ParameterError("concurrent", f"{{param}} must be >= 1, got {literal(concurrent)}")
    if concurrent > 1:
        if dev.type != "cpu":
            raise ParameterError("concurrent", "{param} is for CPU hosts whose ranks share cores; a GPU rank has its "
                                               "own device")
        if isinstance(comm, str):
            raise ParameterError("concurrent", "{param} and measuring comm do not mix; measure comm separately under "
                                               "torchrun")
        if progress:
            progress(f"profiling {len(stages)} {'units' if units else 'stages'} in {concurrent} processes at once "
                     f"({warmup} warm-up + {repeats} runs each)")
        busy = _contention_note(dev, concurrent)
        measured = _measure_concurrently(config, n_stages, microbatch_size, concurrent, warmup, repeats,
                                         optimizer, timeout, units, reuse_layers)
        profile = _assemble(measured, dev, comm, comm_bandwidth, comm_latency, model, microbatch_size, config.dtype,
                            notes=busy + [f"measured in {concurrent} concurrent processes (ranks sharing this "
                                          f"host), samples pooled"], optimizer=optimizer, settings=settings)
        return with_modules(profile, names) if units else profile
    common = dict(loss_fn=lm_loss, target=targets, device=dev, warmup=warmup, repeats=repeats, optimizer=optimizer,
                  comm=comm, comm_bandwidth=comm_bandwidth, comm_latency=comm_latency, model=model,
                  microbatch_size=microbatch_size, dtype=config.dtype, progress=progress, settings=settings)
    if units:
        return profile_units(stages, names, tokens, reuse_layers=reuse_layers, **common)
    return profile_stages(stages, tokens, **common)


def _checkpoint(stages: Sequence[nn.Module], choice, concurrent: int) -> None:
    """Apply ``RunSettings.activation_checkpoint`` (one mode, or one per stage) to the GPT's
    stages' blocks. The per-op modes (light, selective) cannot run under the split backward the
    stage route times, in a stage's own mode or in any of its blocks' (the unit route measures
    them: :func:`measure_units_ac`)."""
    from schedc.core.costs import PER_OP_AC, block_modes
    from schedc.runtime.checkpointing import apply_to_stage, stage_modes

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


def _measure_concurrently(config, n_stages, mbs, n_procs, warmup, repeats, optimizer, timeout,
                          units=False, reuse_layers=True) -> list[StageMeasurement]:
    import dataclasses

    from schedc.runtime import launch as launcher

    spec = {"config": dataclasses.asdict(config), "n_stages": n_stages, "mbs": mbs, "warmup": warmup,
            "repeats": repeats, "optimizer": optimizer, "threads": torch.get_num_threads(),
            "units": units, "reuse_layers": reuse_layers}
    results = launcher.launch(launcher.python_module("schedc.runtime.profiler"), n_procs, timeout=timeout,
                              spec=spec, label="profile --concurrent", threads=spec["threads"])
    pooled: Optional[list[StageMeasurement]] = None
    for got in results:
        got = [StageMeasurement.from_dict(d) for d in got]
        pooled = got if pooled is None else [a.merged(b) for a, b in zip(pooled, got)]
    return pooled or []


def _concurrent_entry() -> int:
    """``python -m schedc.runtime.profiler``: one of the concurrent measurers :func:`launch` starts."""
    from schedc.runtime import launch as launcher

    return launcher.run_rank(lambda: _measure_one(launcher.read_spec()))


def _measure_one(spec: dict) -> list[dict]:
    from schedc.runtime.models import GPTConfig, lm_loss, make_batch

    torch.set_num_threads(int(spec["threads"]))
    cfg = GPTConfig(**spec["config"])
    tokens, targets = make_batch(cfg, int(spec["mbs"]), seed=0)
    options = dict(device="cpu", warmup=int(spec["warmup"]), repeats=int(spec["repeats"]), optimizer=spec["optimizer"])
    if spec.get("units"):
        measured = measure_units(gpt_units(cfg)[0], tokens, lm_loss, targets,
                                 reuse_layers=bool(spec.get("reuse_layers", True)), **options)
    else:
        measured = measure_stages(gpt_stages(cfg, int(spec["n_stages"])), tokens, lm_loss, targets, **options)
    return [m.to_dict() for m in measured]


class StderrProgress:
    """A progress line on stderr, rewritten in place on a terminal; ``done()`` ends it (only if one
    was shown). When stderr is not a terminal (a log file, CI) each message is a plain line: no
    carriage returns or escape codes in logs."""

    def __init__(self, prefix: str = "schedc profile"):
        self.prefix = prefix
        self.shown = False
        self.tty = sys.stderr.isatty()

    def __call__(self, msg: str) -> None:
        if not self.tty:
            print(f"{self.prefix}: {msg}", file=sys.stderr, flush=True)
            return
        self.shown = True
        print(f"\r{self.prefix}: {msg}\033[K", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.shown:
            print(file=sys.stderr, flush=True)
            self.shown = False


if __name__ == "__main__":
    sys.exit(_concurrent_entry())
