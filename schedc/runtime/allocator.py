"""Bytes as the allocator sees them, around named actions, on CPU and on CUDA.

Problem: a profile must say what one microbatch of a stage holds after F, what it holds from I
until W (torch's split backward can *add* memory at I), and the transient peak while each action
runs (the loss's fp32 logits, matmul and attention workspaces); the pipeline's peak is then
checked against the same view. Saved-tensor hooks see only what autograd saves; the allocator
sees everything.

Method: on CUDA, ``memory_allocated`` before and after each action (after a synchronize) and
``max_memory_allocated`` after resetting the peak at its start. On CPU, where torch keeps no such
counters, one ``torch.profiler`` session with ``profile_memory=True`` records every allocation
and free with its timestamp; each action runs inside ``record_function`` so the running sum of
the allocations inside its span gives its start, end and peak levels. Levels are relative to the
trace's start: what was allocated before it does not count.

Cost: CUDA, two synchronizes per action; CPU, the profiler's start-up (about a second the first
time in a process) and one event per allocation.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Optional

import torch

_PREFIX = "schedc::"
# kineto logs an error line per profiler start on a CUDA build without a GPU; it says nothing here
os.environ.setdefault("KINETO_LOG_LEVEL", "5")


@dataclass
class Levels:
    """Allocated bytes at an action's start, at its end and at its peak, relative to the trace's start."""

    start: int
    end: int
    peak: int

    @property
    def transient(self) -> int:
        """Bytes live only while the action ran: its peak above both what it started and ended with."""
        return max(0, self.peak - max(self.start, self.end))


class AllocatorTrace:
    """``with AllocatorTrace(device) as t: with t.action("F"): ...`` then ``t.levels["F"]``.

    Action names must be unique within a trace. ``t.peak`` is the highest level over the whole
    trace (available after it closes)."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.levels: dict[str, Levels] = {}
        self.peak = 0
        self._prof: Any = None  # torch.profiler.profile, on CPU only
        self._base = 0
        self._names: list[str] = []

    def __enter__(self) -> "AllocatorTrace":
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            from torch.profiler import ProfilerActivity, profile

            self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            with _quiet_stderr():
                self._prof.__enter__()
        return self

    def __exit__(self, *exc) -> Literal[False]:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.peak = max([torch.cuda.max_memory_allocated(self.device) - self._base]
                            + [lv.peak for lv in self.levels.values()])
            return False
        with _quiet_stderr():
            self._prof.__exit__(*exc)
        if exc[0] is None:
            self._read_cpu_events()
        return False

    @contextmanager
    def action(self, name: str) -> Iterator[None]:
        if name in self._names:
            raise ValueError(f"action {name!r} traced twice")
        self._names.append(name)
        if not self.cuda:
            with torch.profiler.record_function(_PREFIX + name):
                yield
            return
        torch.cuda.synchronize(self.device)
        start = torch.cuda.memory_allocated(self.device) - self._base
        before = torch.cuda.max_memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        yield
        torch.cuda.synchronize(self.device)
        end = torch.cuda.memory_allocated(self.device) - self._base
        peak = torch.cuda.max_memory_allocated(self.device) - self._base
        self.levels[name] = Levels(start, end, max(peak, start, end))
        self.peak = max(self.peak, before - self._base, peak)

    def _read_cpu_events(self) -> None:
        events = list(self._prof.profiler.kineto_results.events())
        memory = sorted((e.start_ns(), int(e.nbytes())) for e in events
                        if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"))
        spans = {e.name()[len(_PREFIX):]: (e.start_ns(), e.end_ns()) for e in events
                 if e.name().startswith(_PREFIX)}
        times, levels, level = [], [], 0
        for t, nbytes in memory:
            level += nbytes
            times.append(t)
            levels.append(level)
        self.peak = max([0] + levels)
        for name, (t0, t1) in spans.items():
            self.levels[name] = _levels_in(times, levels, t0, t1)


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 while kineto starts and stops: it logs a line for each on a build
    with tracing probes, which would land in every ``schedc profile``'s output."""
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _levels_in(times: list[int], levels: list[int], t0: int, t1: int) -> Levels:
    """Start, end and peak of the running sum `levels` (after each event at `times`) over [t0, t1]."""
    import bisect

    i0 = bisect.bisect_left(times, t0)
    i1 = bisect.bisect_right(times, t1)
    start = levels[i0 - 1] if i0 > 0 else 0
    end = levels[i1 - 1] if i1 > 0 else 0
    inside = levels[i0:i1]
    return Levels(start, end, max([start, end] + inside))


def live_bytes_peak(device: torch.device, fn) -> tuple[object, int]:
    """(fn(), the highest allocated level while it ran, relative to before it)."""
    with AllocatorTrace(device) as trace:
        with trace.action("run"):
            out = fn()
    return out, max(trace.peak, trace.levels["run"].peak)


def nbytes_of(tensors) -> int:
    """Bytes of the distinct storages among `tensors` (None entries skipped)."""
    seen: dict[int, int] = {}
    for t in tensors or ():
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            seen[s.data_ptr()] = max(seen.get(s.data_ptr(), 0), s.nbytes())
    return sum(seen.values())


def cuda_reserve_bytes(device: torch.device) -> Optional[int]:
    """What this CUDA process holds outside torch's allocator: the device's used bytes (all
    processes; exact when this is the only one) minus what torch's caching allocator reserved."""
    if torch.device(device).type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    return max(0, (total - free) - torch.cuda.memory_reserved(device))
