"""Ctrl-C during a compile: stop searching and keep the best schedule found so far.

Python raises KeyboardInterrupt wherever the main thread happens to be. During a HiGHS solve that
is inside the solver's progress callback, called from C++, where the exception can get lost: the
compile then ran on to its time limit and exited 0. Inside :func:`stop_on_sigint` a first SIGINT
therefore only sets a flag: the HiGHS callback asks the solver to stop (``e.interrupt()``), the
driver's loops see :func:`requested` and end, and ``compile_problem`` returns its best schedule
with ``interrupted=True`` (the CLI writes it, says so, and exits 130). A second Ctrl-C raises
KeyboardInterrupt as usual, for when the user does not want to wait for the search to wind down.
Outside the context (the library builder, benchmarks, plain API calls) nothing changes.

CP-SAT's solve holds the main thread in C++ for its whole run, so no Python signal handler runs
until it returns (and CP-SAT's own SIGINT catching, which schedc turns off, leaves the process
with no handler at all afterwards). :func:`stop_native_solver` bridges that: Python's C-level
handler still writes a byte to a wakeup pipe, and a watcher thread turns it into the solver's
own stop call.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

_requested = False
_active = False  # inside stop_on_sigint, with our handler installed


def requested() -> bool:
    """Whether Ctrl-C was pressed inside :func:`stop_on_sigint`."""
    return _requested


@contextmanager
def stop_on_sigint() -> Iterator[None]:
    """Turn the first SIGINT into a stop request for the compile running inside the block."""
    global _requested
    ours = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if not ours:  # a caller's own handler, or not the main thread: leave signals alone
        yield
        return

    def on_sigint(signum, frame) -> None:
        global _requested
        _requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C interrupts at once

    global _active
    _requested, _active = False, True
    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _requested, _active = False, False


@contextmanager
def stop_native_solver(stop: Callable[[], None]) -> Iterator[None]:
    """Inside :func:`stop_on_sigint`, call `stop` (from a watcher thread) as soon as SIGINT
    arrives while native code holds the main thread; the stop request itself is recorded when
    that code returns and Python runs the handler. Elsewhere a no-op."""
    if not _active or threading.current_thread() is not threading.main_thread():
        yield
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end)
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            if select.select([read_end], [], [], 0.1)[0] and signal.SIGINT in os.read(read_end, 512):
                stop()

    watcher = threading.Thread(target=watch, name="schedc-sigint-watcher", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        finished.set()
        watcher.join()
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)
