"""Run memory actions (offload, per-microbatch recompute) on torch's ``_PipelineScheduleRuntime``.

Problem: a plan may send the activations a stage saves for one microbatch to host memory after
its F and fetch them back at a compiled point before its I (or B), send them again (or only)
after its I and fetch them back before its W, or recompute that microbatch's
forward in its backward (:mod:`schedc.core.memory_actions`). torch's pipelining has neither, and
its runtime runs each action inside one closure (``_step_microbatches``' ``_perform_action``)
that a subclass cannot extend; ``register_custom_function`` replaces an action kind's whole body,
which would mean copying torch's forward and backward bookkeeping.

Method: the three stage methods torch's runtime calls once per compute action are wrapped on the
stage instances, and the stage module's ``forward`` on the module instance, so torch's code runs
unchanged between them:

- ``forward_one_chunk(mb)`` (an F): fetches what is due at this F, makes the compute stream wait
  for the copies out of the offloads that name it as ``room_for`` (it runs in the room they
  make), then marks (stage, mb) as the
  forward in progress. The module's ``forward`` reads that mark: for an offloaded microbatch it
  runs under ``torch.autograd.graph.saved_tensors_hooks`` whose pack hook hands autograd a
  small holder of each saved tensor; when the forward returns, the holders its ``fraction``
  picks are copied to host buffers and drop their device tensor, so its memory is freed once
  the copy out ends (the model starts that copy at F's end too); for a recomputed one it runs under
  ``torch.utils.checkpoint.checkpoint`` (non-reentrant), which keeps only the inputs and runs
  the forward again when the backward unpacks.
- ``backward_one_chunk(mb, full_backward=...)`` (an I or B) and ``backward_weight_one_chunk(mb)``
  (a W): fetch what is due when the rank starts them (``fetch_at`` may name any compute action
  of the rank), and after the B or the W, the last use of the graph, drop every buffer of that
  (stage, mb). Torch's split backward unpacks in I and again in W (I keeps the graph), so the
  fetched device copies stay until W, unless the microbatch moves after I (an offload with
  ``after: "I"``, whose forward keeps its holders on the device, or one with ``refetch_at``):
  then, once the I returns, the holders its ``fraction`` picks are copied out again and drop
  their device tensor, and the W's unpack finds them fetched at ``fetch_at`` (``refetch_at``).

Granularity: every tensor the stage's forward saves for that microbatch, except those the stage
holds on the device anyway: its parameters and buffers and the stage's own inputs (torch keeps
them in ``fwd_cache`` until the backward), matched by storage; a tensor saved twice (two ops
saving one activation) is held once. Not a subset by tensor class: the stage's saved bytes are
the quantity the cost model counts per (stage, microbatch) (``activation_bytes``), so moving all
of them keeps the runtime's bytes equal to the plan's, and one transfer per microbatch and
direction is what the copy streams of the model schedule (first in, first out). An offload's
``fraction`` below 1 moves the largest saved tensors first (ties in saved order) until the bytes
picked reach at least that share of the microbatch's total; the rest stay on the device (unpack
returns them, the fetch skips them, the release drops them). At least, not nearest: memory is
the hard cap, so the runtime frees no less than the plan counts; the copy then takes a little
longer than modeled (at most the bytes of one tensor more). The choice waits for the forward's
end because only then are the sizes all known; ``StepStats.moved`` gives, per (stage, mb), the
bytes copied and the bytes saved, to compare with the plan.

On CUDA the copies run on two side streams per rank (device to host, host to device) into pinned
host memory; the copy out waits for the forward's compute (one event per microbatch), the fetch
waits for the copy out, and the first unpack makes the compute stream wait for the fetch (and
records the fetched tensor on it, so the caching allocator does not reuse it early). On CPU the
"host buffer" is a second CPU tensor (a clone), which exercises the same bookkeeping. A holder
unpacked before its fetch point (a CSV run differently from the plan) is fetched then, counted
in ``late_fetches``.

Every step starts and ends with nothing held (:meth:`MemoryRunner.live` is zero); buffers a
failed step left behind are dropped when the next step starts. Cost: one copy out and one copy in
per picked saved tensor of an offloaded microbatch (a sort of its holders to pick them); one
extra forward per recomputed microbatch.
"""

from __future__ import annotations

import weakref
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, Optional, Sequence

import torch
from torch.autograd.graph import saved_tensors_hooks
from torch.utils.checkpoint import checkpoint

from schedc.core.ir import Action
from schedc.core.memory_actions import MemoryAction
from schedc.errors import SchedcError


class _Saved:
    """One saved tensor of an offloaded microbatch: the device tensor until the forward's end;
    then, if picked, its host copy until the fetch and its device copy until the backward that
    last needs it; if not, still the device tensor until then. Autograd holds this object in
    place of the tensor."""

    __slots__ = ("host", "device", "copied_out", "fetched", "nbytes", "key")

    def __init__(self, key: tuple[int, int], device: torch.Tensor, nbytes: int):
        self.key, self.nbytes = key, nbytes
        self.host: Optional[torch.Tensor] = None
        self.device: Optional[torch.Tensor] = device
        self.copied_out: Any = None
        self.fetched: Any = None


@dataclass
class StepStats:
    """What one step's memory actions did on this rank."""

    offloaded_tensors: int = 0  # copied out to the host (a fraction below 1 copies some)
    offloaded_bytes: int = 0
    moved: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)  # (stage, mb) -> (copied, saved) bytes
    fetches: list[tuple[str, tuple[int, int]]] = field(default_factory=list)  # (action started, (stage, mb))
    room_waits: list[tuple[str, tuple[int, int]]] = field(default_factory=list)  # (F, offload it waited for)
    late_fetches: int = 0
    forward_runs: Counter = field(default_factory=Counter)  # (stage, mb) -> times its forward ran
    peak_host_bytes: int = 0
    left_at_end: int = 0  # microbatches whose buffers no backward released (dropped at the step's end)


class MemoryRunner:
    """The memory actions of one rank's stages, hooked into their stage objects by :meth:`install`.

    ``actions``: (stage, microbatch) -> :class:`MemoryAction`, checked against the CSV with every
    offload's ``fetch_at`` filled in (:func:`schedc.core.memory_actions.check_memory_actions`);
    entries of stages other ranks hold are ignored.
    """

    def __init__(self, actions: dict[tuple[int, int], MemoryAction], stages: Sequence[Any]):
        self.stages = {s.stage_index: s for s in stages}
        self.actions = {k: a for k, a in actions.items() if k[0] in self.stages}
        self.due: dict[Action, list[tuple[int, int]]] = defaultdict(list)  # fetch point -> offloads
        self.room: dict[Action, list[tuple[int, int]]] = defaultdict(list)  # an F -> the copies out it waits for
        for key, a in sorted(self.actions.items()):
            if a.action == "offload":
                if a.fetch_at is None:
                    raise SchedcError(f"memory action of stage {key[0]}, microbatch {key[1]}: no fetch point; check "
                                      f"the actions against the CSV first (check_memory_actions)")
                self.due[a.fetch_at].append(key)
                if a.refetch_at is not None:
                    self.due[a.refetch_at].append(key)
                if a.room_for is not None:
                    self.room[a.room_for].append(key)
        self.saved: dict[tuple[int, int], list[_Saved]] = {}
        self.stats = StepStats()
        self._current: Optional[tuple[int, int]] = None
        self._host_bytes = 0
        self._streams: dict[torch.device, tuple[Any, Any]] = {}
        self._installed = False

    # ---------------------------------------------------------------- hooks into torch's stages
    def install(self) -> "MemoryRunner":
        """Wrap each local stage's per-action methods and its module's forward (once)."""
        if self._installed:
            return self
        for index, stage in self.stages.items():
            if getattr(stage, "_schedc_memory", None) is not None:
                raise SchedcError(f"stage {index}: memory actions are already installed on this PipelineStage; "
                                  f"build new stages for another schedule")
            stage._schedc_memory = self
            self._wrap_stage(index, stage)
        self._installed = True
        return self

    def _wrap_stage(self, index: int, stage: Any) -> None:
        forward_one_chunk = stage.forward_one_chunk
        backward_one_chunk = stage.backward_one_chunk
        backward_weight_one_chunk = stage.backward_weight_one_chunk
        module = stage.submod
        module_forward = module.forward

        @wraps(forward_one_chunk)
        def forward(fwd_chunk_id, *args, **kwargs):
            self._start(Action(index, "F", fwd_chunk_id))
            self._current = (index, fwd_chunk_id)
            try:
                return forward_one_chunk(fwd_chunk_id, *args, **kwargs)
            finally:
                self._current = None

        @wraps(backward_one_chunk)
        def backward(bwd_chunk_id, loss=None, full_backward=True, last_backward=False):
            key = (index, bwd_chunk_id)
            self._start(Action(index, "B" if full_backward else "I", bwd_chunk_id))
            backward_one_chunk(bwd_chunk_id, loss=loss, full_backward=full_backward, last_backward=last_backward)
            if full_backward:
                self._release(key)
                return
            action = self.actions.get(key)
            if action is not None and action.action == "offload" and (action.after == "I" or action.refetch_at):
                # what the I keeps for W moves out until its fetch for W (the same share again
                # where the F's bytes moved before the I)
                self._move_out(key, _pick(self.saved.get(key, []), action.fraction), _device(stage.device))

        @wraps(backward_weight_one_chunk)
        def backward_weight(bwd_chunk_id, last_backward=False):
            self._start(Action(index, "W", bwd_chunk_id))
            backward_weight_one_chunk(bwd_chunk_id, last_backward=last_backward)
            self._release((index, bwd_chunk_id))

        @wraps(module_forward)
        def module_call(*args, **kwargs):
            key = self._current
            action = self.actions.get(key) if key is not None and key[0] == index else None
            if action is None:
                return module_forward(*args, **kwargs)

            def run(*a, **kw):
                self.stats.forward_runs[key] += 1
                return module_forward(*a, **kw)

            if action.action == "recompute":
                return checkpoint(run, *args, use_reentrant=False, **kwargs)
            skip = _storages(list(args) + list(kwargs.values()) + list(module.parameters()) + list(module.buffers()))
            device = _device(stage.device)
            holders: list[_Saved] = []
            pack, unpack = self._hooks(key, skip, device, holders)
            with saved_tensors_hooks(pack, unpack):
                out = run(*args, **kwargs)
            self._register(key, holders)
            if action.after == "F":
                self._move_out(key, _pick(holders, action.fraction), device)
            return out

        stage.forward_one_chunk = forward
        stage.backward_one_chunk = backward
        stage.backward_weight_one_chunk = backward_weight
        module.forward = module_call

    # ---------------------------------------------------------------- per step
    def begin_step(self) -> None:
        """Forget what a failed step left behind and start this step's counts."""
        for key in list(self.saved):
            self._release(key)
        self.stats = StepStats()

    def end_step(self) -> None:
        """Every offloaded microbatch's buffers were dropped by its backward; a CSV whose backward
        never ran leaves some, dropped here so no step leaks."""
        self.stats.left_at_end = len(self.saved)
        for key in list(self.saved):
            self._release(key)

    def live(self) -> dict:
        """What the runner holds now: host buffers, device buffers (fetched, or not picked by a
        fraction) and their bytes."""
        held = [s for entries in self.saved.values() for s in entries]
        return {"host_buffers": sum(s.host is not None for s in held),
                "device_buffers": sum(s.device is not None for s in held),
                "host_bytes": sum(s.nbytes for s in held if s.host is not None),
                "device_bytes": sum(s.nbytes for s in held if s.device is not None),
                "microbatches": len(self.saved)}

    # ---------------------------------------------------------------- copies
    def _copy_streams(self, device: torch.device) -> tuple[Any, Any]:
        if device not in self._streams:
            self._streams[device] = (torch.cuda.Stream(device), torch.cuda.Stream(device))
        return self._streams[device]

    def _hooks(self, key: tuple[int, int], skip: set, device: torch.device, holders: list[_Saved]):
        seen: dict[tuple, tuple[weakref.ref, _Saved]] = {}

        def pack(t: torch.Tensor):
            if t.layout != torch.strided or t.device != device or t.numel() == 0 or _storage(t) in skip:
                return t  # held on the device anyway, or not a plain device tensor
            ident = (_storage(t), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
            hit = seen.get(ident)
            if hit is not None and hit[0]() is t:
                return hit[1]
            # detached: a holder that kept `t` itself would close a cycle through t's grad_fn
            saved = _Saved(key, t.detach(), t.numel() * t.element_size())
            holders.append(saved)
            seen[ident] = (weakref.ref(t), saved)
            return saved

        def unpack(packed):
            if not isinstance(packed, _Saved):
                return packed
            if packed.device is None:
                if packed.host is None:
                    raise RuntimeError(f"schedc offload: stage {packed.key[0]} microbatch {packed.key[1]}: a saved "
                                       f"tensor was used after its backward released it")
                self.stats.late_fetches += 1
                self._fetch_one(packed, device)
            if packed.fetched is not None:
                current = torch.cuda.current_stream(device)
                current.wait_event(packed.fetched)
                packed.device.record_stream(current)
                packed.fetched = None
            return packed.device

        return pack, unpack

    def _register(self, key: tuple[int, int], holders: list[_Saved]) -> None:
        """At the forward's end: the microbatch's holders, kept until its last backward."""
        self.saved.setdefault(key, []).extend(holders)
        before = self.stats.moved.get(key, (0, 0))
        self.stats.moved[key] = (before[0], before[1] + sum(s.nbytes for s in holders))

    def _move_out(self, key: tuple[int, int], picked: list[_Saved], device: torch.device) -> None:
        """Copy out the `picked` holders (after the forward, or after the I) and drop their device
        tensor."""
        picked = [s for s in picked if s.device is not None]
        copied_bytes = sum(s.nbytes for s in picked)
        before = self.stats.moved.get(key, (0, 0))
        self.stats.moved[key] = (before[0] + copied_bytes, before[1])
        if not picked:
            return
        with torch.no_grad():
            if device.type == "cuda":
                out_stream, _ = self._copy_streams(device)
                out_stream.wait_stream(torch.cuda.current_stream(device))  # after the compute that made them
                copied = torch.cuda.Event()
                for saved in picked:
                    t = saved.device
                    assert t is not None, "only holders with a device tensor are moved out"
                    if saved.fetched is not None:  # fetched for I but not unpacked there: after its fetch
                        out_stream.wait_event(saved.fetched)
                        saved.fetched = None
                    saved.host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                    with torch.cuda.stream(out_stream):
                        saved.host.copy_(t, non_blocking=True)
                    t.record_stream(out_stream)  # its memory is reused only after the copy out
                    saved.copied_out = copied
                copied.record(out_stream)
            else:
                for saved in picked:
                    assert saved.device is not None, "only holders with a device tensor are moved out"
                    saved.host = saved.device.clone()
            for saved in picked:
                saved.device = None
        self.stats.offloaded_tensors += len(picked)
        self.stats.offloaded_bytes += copied_bytes
        self._host_bytes += copied_bytes
        self.stats.peak_host_bytes = max(self.stats.peak_host_bytes, self._host_bytes)

    def _fetch_one(self, saved: _Saved, device: torch.device) -> None:
        host = saved.host
        assert host is not None, "both callers fetch only a tensor that still has its host copy"
        with torch.no_grad():
            if device.type == "cuda":
                _, in_stream = self._copy_streams(device)
                in_stream.wait_event(saved.copied_out)
                with torch.cuda.stream(in_stream):
                    saved.device = torch.empty(host.shape, dtype=host.dtype, device=device)
                    saved.device.copy_(host, non_blocking=True)
                saved.fetched = torch.cuda.Event()
                saved.fetched.record(in_stream)
            else:
                saved.device = host.clone()
        # a pinned buffer freed with its copy in flight is held by torch's host allocator until then
        saved.host = None
        self._host_bytes -= saved.nbytes

    def _start(self, action: Action) -> None:
        for key in self.room.get(action, ()):
            # the F runs in the room the copy out makes: the compute stream waits for that copy, one
            # event per microbatch (on CPU the copy ended with the forward that made it)
            copied = next((s.copied_out for s in self.saved.get(key, ()) if s.copied_out is not None), None)
            if copied is not None:
                torch.cuda.current_stream(_device(self.stages[key[0]].device)).wait_event(copied)
            self.stats.room_waits.append((str(action), key))
        for key in self.due.get(action, ()):
            entries = self.saved.get(key)
            if entries is None:
                continue  # its F has not run (a failed step) or its backward already ran
            for saved in entries:
                if saved.device is None and saved.host is not None:
                    self._fetch_one(saved, _device(self.stages[key[0]].device))
            self.stats.fetches.append((str(action), key))

    def _release(self, key: tuple[int, int]) -> None:
        for saved in self.saved.pop(key, ()):
            if saved.host is not None:
                self._host_bytes -= saved.nbytes
            saved.host = saved.device = saved.fetched = saved.copied_out = None


def _pick(holders: list[_Saved], fraction: float) -> list[_Saved]:
    """The largest holders first (ties in saved order) until their bytes reach at least
    `fraction` of all of them: fraction 1 picks every one."""
    want = fraction * sum(s.nbytes for s in holders)
    picked: list[_Saved] = []
    got = 0
    for saved in sorted(holders, key=lambda s: -s.nbytes):  # sorted is stable
        if got >= want:
            break
        picked.append(saved)
        got += saved.nbytes
    return picked


def _device(device) -> torch.device:
    """The device with its index: a stage built on "cuda" computes on the current GPU, and its
    saved tensors say "cuda:N"."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _storages(values) -> set:
    return {_storage(v) for v in values if isinstance(v, torch.Tensor) and v.layout == torch.strided}
