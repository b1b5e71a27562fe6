"""Ctrl-C during a compile: stop searching and keep the best schedule found so far.

Python raises KeyboardInterrupt wherever the main thread happens to be. During a HiGHS solve that
is inside the solver's progress callback, called from C++, where the exception can get lost: the
compile then ran on to its time limit and exited 0. Inside :func:`stop_on_sigint` a first SIGINT
therefore only sets a flag: the HiGHS callback asks the solver to stop (``e.interrupt()``), the
driver's loops see :func:`requested` and end, and ``compile_problem`` returns its best schedule
with ``interrupted=True`` (the CLI writes it, says so, and exits 130). A second Ctrl-C raises
KeyboardInterrupt as usual, for when the user does not want to wait for the search to wind down.
Outside the context (the library builder, benchmarks, plain API calls) Ctrl-C stays a
KeyboardInterrupt.

CP-SAT's solve holds the main thread in C++ for its whole run: OR-Tools' wrapper runs Python's
handler in there but swallows the KeyboardInterrupt it raises, and the search goes on to its
time limit (CP-SAT's own SIGINT catching, which schedc turns off, is worse: it leaves the process
with no handler at all afterwards). :func:`stop_native_solver` bridges that: Python's C-level
handler also writes a byte to a wakeup pipe, a watcher thread turns it into the solver's own stop
call, and the handler's effect (the stop request, or a KeyboardInterrupt) is redone afterwards.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

_requested = False


def requested() -> bool:
    """Whether Ctrl-C was pressed inside :func:`stop_on_sigint`."""
    return _requested


def _on_sigint(signum, frame) -> None:
    global _requested
    _requested = True
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C interrupts at once


@contextmanager
def stop_on_sigint() -> Iterator[None]:
    """Turn the first SIGINT into a stop request for the compile running inside the block."""
    global _requested
    ours = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if not ours:  # a caller's own handler, or not the main thread: leave signals alone
        yield
        return

    _requested = False
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _requested = False


@contextmanager
def stop_native_solver(stop: Callable[[], None]) -> Iterator[None]:
    """Call `stop` (from a watcher thread) as soon as SIGINT arrives while native code holds the
    main thread. Python runs its own handler when that code returns: inside
    :func:`stop_on_sigint` the stop request is recorded, elsewhere KeyboardInterrupt follows at
    once instead of after the solver's time limit. A no-op off the main thread, with SIGINT
    ignored, or when another wakeup pipe (an event loop's) is already installed."""
    if threading.current_thread() is not threading.main_thread() or \
            not callable(signal.getsignal(signal.SIGINT)):
        yield
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end)
    if previous != -1:  # someone else's pipe: leave it theirs
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)
        yield
        return
    finished = threading.Event()
    seen = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            if select.select([read_end], [], [], 0.1)[0] and signal.SIGINT in os.read(read_end, 512):
                seen.set()
                stop()

    watcher = threading.Thread(target=watch, name="schedc-sigint-watcher", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        finished.set()
        watcher.join()
        signal.set_wakeup_fd(-1)
        os.close(read_end)
        os.close(write_end)
    # OR-Tools runs Python's handler inside its solve and swallows what it raises: redo its effect
    if seen.is_set() and not _requested:
        handler = signal.getsignal(signal.SIGINT)
        if handler is _on_sigint:
            _on_sigint(signal.SIGINT, None)
        elif handler is signal.default_int_handler:
            raise KeyboardInterrupt
