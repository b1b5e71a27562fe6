"""The one error type users see: a single line naming the file, position or field and what to do;
and the signals that end a run (Ctrl-C, SIGTERM) as exceptions, held where one must not land."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


class SchedcError(Exception):
    """A user-facing failure. ``str(e)`` is the whole message; the CLI prints it and exits 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch scheduler's time limit, ``kill``), raised where Ctrl-C raises
    KeyboardInterrupt so the same clean-up runs; the CLI exits 143 (128 + SIGTERM) on it."""


def raise_terminated(signum, frame) -> None:
    """A SIGTERM handler: raise :class:`Terminated` in the main thread."""
    raise Terminated


@contextmanager
def signals_held(*signals: int) -> Iterator[None]:
    """Hold `signals` while the block runs: one that arrives is only recorded, and its handler
    runs when the block ends (unless the block is raising already: that exception goes on).

    For code an exception must not cut halfway: an import (a library's bare ``except:`` can
    swallow a KeyboardInterrupt, or CPython's unhandled-interrupt flag stays set) or
    ``subprocess.Popen`` between its fork and its return (the child would be lost). Only signals
    with a Python handler, and only on the main thread, where Python runs handlers; a signal
    mask would not do, as the kernel hands a process's signal to any thread that does not mask it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in signals if callable(signal.getsignal(s))}
    came: list[int] = []
    for s in previous:
        signal.signal(s, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    for s in dict.fromkeys(came):
        previous[s](s, None)
