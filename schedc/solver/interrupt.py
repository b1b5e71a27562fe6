"""Ctrl-C during a compile: stop searching and keep the best schedule found so far.

Python raises KeyboardInterrupt wherever the main thread happens to be. During a HiGHS solve that
is inside the solver's progress callback, called from C++, where the exception can get lost: the
compile then ran on to its time limit and exited 0. Inside :func:`stop_on_sigint` a first SIGINT
therefore only sets a flag: the HiGHS callback asks the solver to stop (``e.interrupt()``), the
driver's loops see :func:`requested` and end, and ``compile_problem`` returns its best schedule
with ``interrupted=True`` (the CLI writes it, says so, and exits 130). A second Ctrl-C raises
KeyboardInterrupt as usual, for when the user does not want to wait for the search to wind down.
Outside the context (the library builder, benchmarks, plain API calls) nothing changes.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

_requested = False


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

    _requested = False
    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _requested = False
