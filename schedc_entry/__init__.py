"""The ``schedc`` command's entry point: it sits outside the ``schedc`` package so that it runs first.

Problem: a console script imports the package of its entry point before it calls anything, and
``import schedc`` loads the front door (pydantic models, the engines: a tenth of a second, more
on a busy machine). A Ctrl-C in that time printed a KeyboardInterrupt traceback and a SIGTERM
ended the process by its signal (exit -15, no message), where the command says one line and
exits 130 or 143.

Method: :func:`main` first makes SIGINT and SIGTERM end the process at once, with the command's
line (``schedc: interrupted`` / ``terminated``) and its exit code: nothing has been written yet.
Then it imports :mod:`schedc.cli.toplevel` and runs its ``main``, which takes each signal over
(:func:`hand_over`) for its own clean-up. A signal the process was started with ignored
(``nohup``, a shell script's background job) stays ignored, and a thread other than the main
one installs nothing. Only this entry point installs these handlers: a program that imports
schedc keeps Python's own signal handling, and inside ``schedc.compile`` Ctrl-C is a stop
request (schedc.solver.interrupt) for the CLI and the API alike.

Cost: two handler swaps per start. Before Python runs this module (the interpreter's own
start-up, a few tens of milliseconds) a signal still has its default action; schedc has run
nothing by then.
"""

from __future__ import annotations

# `_signal`, the C module under `signal`: importing `signal` itself loads enum, and `typing` or
# `threading` would add tens of milliseconds more, all of it time in which a signal kills the
# command unheard
import _signal
import os

_WORDS = {_signal.SIGINT: ("interrupted", 130), _signal.SIGTERM: ("terminated", 143)}
_previous: dict = {}  # the handler before ours, per signal while ours is installed


def _stop_while_loading(signum, frame) -> None:
    word, code = _WORDS[signum]
    os.write(2, f"schedc: {word}\n".encode())
    os._exit(code)


def hold_while_loading() -> None:
    """From now until :func:`hand_over`, SIGINT and SIGTERM end the process with the command's
    line and exit code (see the module's docstring)."""
    for signum, default in ((_signal.SIGINT, _signal.default_int_handler), (_signal.SIGTERM, _signal.SIG_DFL)):
        if _signal.getsignal(signum) == default:  # not ignored (nohup) nor taken by someone else
            try:
                _previous[signum] = _signal.signal(signum, _stop_while_loading)
            except ValueError:  # not the main thread: Python runs handlers there only
                return


def holds(signum: int) -> bool:
    """Whether `signum` is still held by :func:`hold_while_loading`."""
    return signum in _previous and _signal.getsignal(signum) is _stop_while_loading


def hand_over(signum: int, handler=None) -> None:
    """Give `signum` to `handler` (default: the handler it had before :func:`hold_while_loading`),
    in one swap, so that no moment is left with the default action in between."""
    if holds(signum):
        try:
            _signal.signal(signum, _previous[signum] if handler is None else handler)
        except ValueError:  # not the main thread: leave it as it is
            return
        del _previous[signum]


def main() -> int:
    """The ``schedc`` console script (and ``python -m schedc_entry``)."""
    hold_while_loading()
    from schedc.cli.toplevel import main as command

    return command()
