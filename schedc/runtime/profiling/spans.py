"""The seconds of each action torch's pipeline runtime runs, read from its own labels.

Problem: the profiler's one-rank timing, calibrate and emulate all need per-action times of
``_PipelineScheduleRuntime`` without changing what it executes. Method: the runtime wraps every
action in ``record_function("PP:<action>")``; :class:`timed_actions` swaps torch's
``record_function`` and ``_wait_batch_p2p`` in ``torch.distributed.pipelining.schedules`` for
recorders while active (restoring them on exit), noting each ``PP:`` span's enter and exit and the
time it waited for received tensors; other names go to torch's own ``record_function``. Cost: two
clock reads (or CUDA events) per action.
"""

from __future__ import annotations

import re
import time
from typing import Any, Optional

# a compute action's span: "PP:<stage><kind><microbatch>" (schedc.runtime.one_rank reads it too)
COMPUTE_LABEL = re.compile(r"^PP:(\d+)([FIWB])(\d+)$")



class ActionRecorder:
    """Stands in for ``torch.profiler.record_function`` in torch's pipelining schedules module.

    On CPU it notes perf_counter at enter/exit. With ``cuda=True`` the work is asynchronous, so
    it records CUDA events on the current stream instead (one at enter, one after each wait for
    a receive, one at exit); :meth:`resolve` turns them into times after the step synchronized.
    """

    def __init__(self, original, cuda: bool = False):
        self.original = original
        self.cuda = cuda
        self.events: list[tuple[str, float, float, float]] = []  # label, enter, wait, exit
        self._raw: list[tuple[str, Any, Any, Any]] = []  # CUDA: label, enter, after-wait, exit events
        self._open: Optional[list] = None

    def __call__(self, name: str, *args, **kwargs):
        if not str(name).startswith("PP:"):
            return self.original(name, *args, **kwargs)
        return _Span(self, str(name))

    def event(self):
        import torch

        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def waited(self, seconds: float) -> None:
        if self._open is not None:
            self._open[1] += seconds
            if self.cuda:  # the stream passes this point once the received tensor is there
                self._open[2] = self.event()

    def resolve(self, t0: float, start_event) -> None:
        """CUDA: convert the recorded events (after a synchronize) into perf_counter-based times,
        ``start_event`` having been recorded at perf_counter ``t0`` on an idle device."""
        for name, enter, after_wait, exit_ in self._raw:
            t_enter = t0 + start_event.elapsed_time(enter) / 1e3
            t_compute = t0 + start_event.elapsed_time(after_wait or enter) / 1e3
            t_exit = t0 + start_event.elapsed_time(exit_) / 1e3
            self.events.append((name, t_enter, max(0.0, t_compute - t_enter), max(t_exit, t_compute)))
        self._raw.clear()


class _Span:
    def __init__(self, rec: ActionRecorder, name: str):
        self.rec, self.name = rec, name

    def __enter__(self):
        self.state = [time.perf_counter(), 0.0, None, self.rec.event() if self.rec.cuda else None]
        self.rec._open = self.state
        return self

    def __exit__(self, *exc):
        self.rec._open = None
        if self.rec.cuda:
            self.rec._raw.append((self.name, self.state[3], self.state[2], self.rec.event()))
        else:
            self.rec.events.append((self.name, self.state[0], self.state[1], time.perf_counter()))
        return False


class timed_actions:
    """Context manager: while active, every ``PP:`` action of torch's pipeline runtime is timed.

    ``.events`` lists ``(label, enter, seconds waiting for receives, exit)`` in perf_counter time.
    """

    def __init__(self, cuda: bool = False):
        self.cuda = cuda

    def __enter__(self) -> ActionRecorder:
        from torch.distributed.pipelining import schedules

        self._mod = schedules
        self._orig_rf = schedules.record_function
        self._orig_wait = schedules._wait_batch_p2p
        rec = ActionRecorder(self._orig_rf, cuda=self.cuda)
        orig_wait = self._orig_wait

        def wait(work):
            t0 = time.perf_counter()
            out = orig_wait(work)
            rec.waited(time.perf_counter() - t0)
            return out

        # the stand-in replaces torch's class in its module: same calls, not the same type
        schedules.record_function = rec  # type: ignore[misc, assignment]
        schedules._wait_batch_p2p = wait
        self.rec = rec
        return rec

    def __exit__(self, *exc):
        self._mod.record_function = self._orig_rf
        self._mod._wait_batch_p2p = self._orig_wait
        return False
