"""Ctrl-C during a compile: stop searching and keep the best schedule found so far.

Python raises KeyboardInterrupt wherever the main thread happens to be. During a HiGHS solve that
is inside the solver's progress callback, called from C++, where the exception can get lost: the
compile then ran on to its time limit and exited 0. Inside :func:`stop_on_sigint` a first SIGINT
therefore only sets a flag: the HiGHS callback asks the solver to stop (``e.interrupt()``), the
driver's loops see :func:`requested` and end, and ``compile_problem`` returns its best schedule
with ``interrupted=True`` (the CLI writes it, says so, and exits 130). A second Ctrl-C raises
KeyboardInterrupt as usual, for when the user does not want to wait for the search to wind down.
A solver that runs as a child process (CBC, through PuLP, which waits for it) gets the first
signal forwarded as SIGINT, and SIGKILL a second later if it has not stopped (CBC may not look at
SIGINT for many seconds); the compile keeps the best schedule it had. A child still running when
the block is left by an exception (the second Ctrl-C) is killed, never left behind.
A solver child that starts after the signal (the driver was building the model when it came)
would never see it: while a stop is requested, a watcher thread stops every child that appears,
within :data:`WATCH_SECONDS`, so the compile ends within about a second whenever the signal lands.
SIGTERM (what SLURM and other batch schedulers send at a time limit) stops the search the same
way when nobody but the CLI handles it (the CLI then exits 143), independently of SIGINT (which a
shell's background job ignores). A repeated SIGTERM changes nothing: the stop is under way, and a
scheduler that will not wait sends SIGKILL next. Outside the context (the library builder, benchmarks, plain API calls) Ctrl-C stays a
KeyboardInterrupt.

CP-SAT's solve holds the main thread in C++ for its whole run: OR-Tools' wrapper runs Python's
handler in there but swallows the KeyboardInterrupt it raises, and the search goes on to its
time limit (CP-SAT's own SIGINT catching, which schedc turns off, is worse: it leaves the process
with no handler at all afterwards). :func:`stop_native_solver` bridges that: Python's C-level
handler also writes a byte to a wakeup pipe, a watcher thread turns it into the solver's own stop
call, and the handler's effect (the stop request, or a KeyboardInterrupt) is redone afterwards.
"""

from __future__ import annotations

import math
import os
import select
import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from schedc.errors import Terminated, raise_terminated

_requested = False
_received: Optional[int] = None


def requested() -> bool:
    """Whether Ctrl-C (or SIGTERM) came inside :func:`stop_on_sigint`."""
    return _requested


def received() -> Optional[int]:
    """The signal that asked for the stop inside :func:`stop_on_sigint` (SIGINT or SIGTERM)."""
    return _received


def _children(pid: str = "self") -> list[int]:
    """The process ids of this process's descendants (a CBC solve runs as a child, perhaps under
    a wrapper script such as pyenv's shim), from Linux's ``/proc/PID/task/*/children``; [] where
    that is not available."""
    pids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return pids
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children = [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            continue
        for child in children:
            pids += [child] + _children(str(child))
    return pids


def _signal_children(signum: int, pids: Optional[list[int]] = None) -> None:
    for pid in _children() if pids is None else pids:
        try:
            os.kill(pid, signum)
        except OSError:  # it ended meanwhile
            pass


def _stop_children(grace: Optional[float] = None, pids: Optional[list[int]] = None) -> None:
    """SIGINT to the solver children (`pids`, else all) now, SIGKILL to those still ours after
    `grace` seconds (:data:`GRACE_SECONDS`): CBC takes SIGINT as "stop and report" but may not look
    at it for many seconds (in its cuts, or past its own time limit on a busy machine); PuLP then
    reports no solution and the compile keeps the best schedule it had."""
    grace = GRACE_SECONDS if grace is None else grace
    pids = _children() if pids is None else pids
    if not pids:
        return
    _signal_children(signal.SIGINT, pids)

    def kill_the_rest() -> None:
        alive = [pid for pid in pids if pid in _children()]  # still ours: not a reused id
        _signal_children(signal.SIGKILL, alive)

    timer = threading.Timer(grace, kill_the_rest)
    timer.daemon = True
    timer.start()


WATCH_SECONDS = 0.05  # how often the watcher looks for solver children once a stop is requested
GRACE_SECONDS = 0.5  # from SIGINT to SIGKILL for a solver child that has not stopped


def _watch_children(done: threading.Event) -> None:
    """Until `done`: once a stop is requested, stop each solver child as it appears (a CBC solve
    the driver started after the signal; :func:`_on_sigint` stopped those already running)."""
    seen: set[int] = set()
    while not done.wait(WATCH_SECONDS):
        if not _requested:
            continue
        new = [pid for pid in _children() if pid not in seen]
        if new:
            seen.update(new)
            _stop_children(pids=new)


def _on_sigint(signum, frame) -> None:
    global _requested, _received
    _requested = True
    _received = _received or signum
    # a solver running as a child process (CBC through PuLP) would search on to its time limit
    # while Python waits for it
    _stop_children()
    if signum == signal.SIGINT:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C interrupts at once
    if _cutting:
        raise Cut("stopped")


class Cut(Exception):
    """An untimed computation inside :func:`cut_after` stopped by its deadline or a stop request."""


_cutting = 0  # how many cut_after blocks are open (the signal handlers raise Cut inside one)


def _on_alarm(signum, frame) -> None:
    if _cutting:
        raise Cut("deadline")


@contextmanager
def cut_after(seconds: float) -> Iterator[None]:
    """Raise :class:`Cut` inside the block when `seconds` of wall clock pass, or at once when a
    stop is requested (Ctrl-C, SIGTERM inside :func:`stop_on_sigint`).

    Problem: a computation that looks at no clock (the planner's dynamic programs over V
    partitions, O(R U^4) in numpy, a minute on a busy machine for 80 layers on 8 ranks) would hold
    a time limit and a Ctrl-C until it ends. Method: a real-time interval timer (SIGALRM) and the
    stop handler raise between two Python bytecodes of the main thread, so only pure computations
    whose partial state is dropped belong inside. Off the main thread, or where SIGALRM has
    another handler, the block runs uncut. A nested block keeps the outer block's deadline.
    Cost: a timer set and cleared."""
    global _cutting
    if _requested:
        raise Cut("stopped")
    if seconds <= 0:
        raise Cut("deadline")
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGALRM)
    nested = previous is _on_alarm and _cutting > 0
    if not nested and previous not in (signal.SIG_DFL, None):  # someone else's alarm: leave it theirs
        yield
        return
    if not nested:
        signal.signal(signal.SIGALRM, _on_alarm)
        if math.isfinite(seconds):
            signal.setitimer(signal.ITIMER_REAL, seconds)
    _cutting += 1
    try:
        yield
    finally:
        _cutting -= 1
        if not nested:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


@contextmanager
def stop_on_sigint() -> Iterator[None]:
    """Turn the first SIGINT (or SIGTERM) into a stop request for the compile running inside the block."""
    global _requested, _received
    main = threading.current_thread() is threading.main_thread()
    # a caller's own handler, or not the main thread: leave that signal alone
    take_int = main and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    term = signal.getsignal(signal.SIGTERM) if main else None
    take_term = main and term in (signal.SIG_DFL, raise_terminated)
    if not (take_int or take_term):
        yield
        return

    _requested, _received = False, None
    done = threading.Event()
    watcher = threading.Thread(target=_watch_children, args=(done,), name="schedc-child-watcher", daemon=True)
    watcher.start()
    if take_int:
        signal.signal(signal.SIGINT, _on_sigint)
    if take_term:
        signal.signal(signal.SIGTERM, _on_sigint)
    try:
        yield
    except BaseException:
        # a second Ctrl-C (or an error) while a solver child runs: PuLP does not end it, and it
        # would go on after schedc exits
        _signal_children(signal.SIGKILL)
        raise
    finally:
        done.set()
        watcher.join()
        if take_int:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if take_term:
            signal.signal(signal.SIGTERM, term)
        _requested = False


@contextmanager
def stop_native_solver(stop: Callable[[], None]) -> Iterator[None]:
    """Call `stop` (from a watcher thread) as soon as SIGINT (or SIGTERM) arrives while native code holds the
    main thread. Python runs its own handler when that code returns: inside
    :func:`stop_on_sigint` the stop request is recorded, elsewhere KeyboardInterrupt follows at
    once instead of after the solver's time limit. A no-op off the main thread, with SIGINT
    ignored, or when another wakeup pipe (an event loop's) is already installed."""
    if threading.current_thread() is not threading.main_thread() or \
            not any(callable(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM)):
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
    seen: list[int] = []

    def watch() -> None:
        while not finished.is_set():
            if select.select([read_end], [], [], 0.1)[0]:
                data = os.read(read_end, 512)
                got = [s for s in (signal.SIGINT, signal.SIGTERM) if s in data]
                if got:
                    seen.extend(got)
                    stop()

    watcher = threading.Thread(target=watch, name="schedc-sigint-watcher", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        finished.set()
        try:  # wake the watcher now rather than at its next poll (up to 0.1 s added to every solve)
            os.write(write_end, b"\0")
        except OSError:  # the pipe is full of signal bytes: the watcher is awake anyway
            pass
        watcher.join()
        signal.set_wakeup_fd(-1)
        os.close(read_end)
        os.close(write_end)
    # OR-Tools runs Python's handler inside its solve and swallows what it raises: redo its effect
    if seen and not _requested:
        handler = signal.getsignal(seen[0])
        if handler is _on_sigint:
            _on_sigint(seen[0], None)
        elif handler is signal.default_int_handler:
            raise KeyboardInterrupt
        elif handler is raise_terminated:
            raise Terminated
