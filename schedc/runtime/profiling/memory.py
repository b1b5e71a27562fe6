"""Bytes a stage holds: storages, saved tensors, parameters with their optimizer state.

Problem: a tensor's bytes are its storage's, shared by views and aliases, and what autograd
keeps for the backward is invisible from the module. Method: count storages once by data pointer
(:func:`add_storages`); a :class:`SavedTensorTracker` boxes every saved tensor so a weak reference
tells when the graph lets go of it; static bytes are parameters + gradients + the optimizer's
state tensors (:data:`OPTIMIZER_STATE_FACTOR`); a CUDA process's bytes outside the allocator are
:func:`reserve_bytes_of`. Cost: a ``gc.collect`` per count of live saved tensors.
"""

from __future__ import annotations

import gc
import weakref
from typing import Optional

import torch
import torch.nn as nn

from schedc.core.formatting import format_bytes
from schedc.errors import SchedcError
from schedc.model_costs.profile import CUDA_RESERVE_BYTES, OPTIMIZER_STATES
from schedc.runtime.allocator import cuda_reserve_bytes

# state tensors per parameter, each the parameter's size: the counted route's table, so that a
# measured and a counted profile hold the same optimizer state
OPTIMIZER_STATE_FACTOR = OPTIMIZER_STATES

# What a CUDA process holds outside torch's allocator that a single-process profile cannot see
# (the context, cuBLAS/cuDNN workspaces and one NCCL group): a CUDA profile records the larger of
# the count's reserve and what it measures
CUDA_RESERVE_DEFAULT = int(CUDA_RESERVE_BYTES)


def storage_key(t: torch.Tensor) -> Optional[tuple[int, int]]:
    try:
        s = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # tensor subclasses without a storage
        return None
    if s.nbytes() == 0:
        return None
    return (s.data_ptr(), s.nbytes())


def add_storages(held: dict[int, int], tensors, exclude: set[int]) -> dict[int, int]:
    """Add the storages of `tensors` (data pointer -> bytes) not in `exclude` to `held`; returns it."""
    for t in tensors or ():
        if isinstance(t, torch.Tensor):
            key = storage_key(t)
            if key and key[0] not in exclude:
                held[key[0]] = max(held.get(key[0], 0), key[1])
    return held


def unique_bytes(tensors, exclude: set[int]) -> int:
    return sum(add_storages({}, tensors, exclude).values())


class _Box:
    """What autograd stores instead of a saved tensor, so we can tell when the graph lets go of it."""

    __slots__ = ("t", "__weakref__")

    def __init__(self, t: torch.Tensor):
        self.t = t


class SavedTensorTracker:
    """Weak references to every tensor autograd saves while active; counts what is still held."""

    def __init__(self) -> None:
        self.boxes: list[tuple[weakref.ref, Optional[tuple[int, int]]]] = []

    def pack(self, t: torch.Tensor) -> _Box:
        # Keep the storage, not the autograd identity: a saved *output* (softmax's result, SDPA's
        # out) would otherwise hold its own grad_fn, a cycle through C++ that gc cannot break, so
        # the node and its saved tensors would never be freed unless a backward releases them;
        # under the split backward they would look held after I (and after W).
        box = _Box(t.detach())
        self.boxes.append((weakref.ref(box), storage_key(t)))
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


def optimizer_factor(optimizer: Optional[str]) -> int:
    """State tensors per parameter for `optimizer` (None: none); SchedcError for an unknown name."""
    name = (optimizer or "none").lower()
    if name not in OPTIMIZER_STATE_FACTOR:
        raise SchedcError(
            f"optimizer must be one of {', '.join(OPTIMIZER_STATE_FACTOR)}, got {optimizer!r}"
        )
    return OPTIMIZER_STATE_FACTOR[name]


def static_bytes_of(module: nn.Module, optimizer: Optional[str]) -> tuple[int, int, int]:
    """(static bytes, parameter bytes, parameter count): params + their grads + optimizer state."""
    factor = optimizer_factor(optimizer)
    params = [p for p in module.parameters()]
    p_bytes = sum(p.numel() * p.element_size() for p in params)
    g_bytes = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    state = factor * g_bytes
    return p_bytes + g_bytes + state, p_bytes, sum(p.numel() for p in params)



def reserve_bytes_of(dev: torch.device, given: Optional[float]) -> tuple[Optional[float], Optional[str]]:
    """(reserve_bytes, a note): what was given; on CUDA otherwise the larger of the measured bytes
    outside torch's allocator and :data:`CUDA_RESERVE_DEFAULT`; none on CPU."""
    if given is not None:
        return float(given), f"reserve: {format_bytes(given)} outside torch's allocator (given)"
    if dev.type != "cuda":
        return None, None
    measured = cuda_reserve_bytes(dev) or 0
    value = max(measured, CUDA_RESERVE_DEFAULT)
    return float(value), (f"reserve: {format_bytes(measured)} measured outside torch's allocator (device used minus "
                          f"torch's reserved; no NCCL group here); recorded {format_bytes(value)}, at least the "
                          f"documented {format_bytes(CUDA_RESERVE_DEFAULT)} of a process with one NCCL group")

