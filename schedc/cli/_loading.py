"""Ctrl-C while the ``schedc`` command is still loading: exit 130 with one line, no traceback.

Problem: ``import schedc`` loads the front door (pydantic models, the engine modules): a tenth of
a second on a quiet machine, more on a busy one. For the ``schedc`` command that happens before
``schedc.cli.toplevel.main`` can catch anything, so a Ctrl-C right after starting a command printed a
KeyboardInterrupt traceback instead of the CLI's ``interrupted`` line and exit code 130.

Method: from the start of ``import schedc`` until :func:`schedc.cli.toplevel.main` holds Ctrl-C itself,
and only when the process is the schedc command (the console script, or ``python -m schedc.cli``)
in its main thread, SIGINT exits at once with 130: nothing has been written yet. The handler stays
installed after the package has loaded, because ``python -m schedc.cli`` still reads and runs
``cli.py`` before ``main`` starts; restoring it at the end of the import left a gap in which a
Ctrl-C on a busy machine showed a traceback. A program that imports schedc keeps Python's own
Ctrl-C behaviour, and a command started with Ctrl-C ignored (``nohup``, ``&`` in a script) keeps
ignoring it.

Cost: two signal-handler swaps per start of the command.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any


def _is_schedc_command() -> bool:
    if sys.argv and os.path.basename(sys.argv[0]) == "schedc":
        return True
    argv = list(getattr(sys, "orig_argv", ()))
    return any(a == "-m" and b == "schedc.cli" for a, b in zip(argv, argv[1:]))


_previous: Any = None  # the SIGINT handler before exit_on_ctrl_c_while_loading, while ours is installed


def _interrupted(signum, frame) -> None:
    os.write(2, b"schedc: interrupted\n")
    os._exit(130)


def exit_on_ctrl_c_while_loading() -> None:
    """For the schedc command, a SIGINT from now on ends the process with 130 (see module doc)."""
    global _previous
    if not _is_schedc_command() or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not ignored (nohup) nor taken
        _previous = signal.signal(signal.SIGINT, _interrupted)


def hand_over_ctrl_c() -> None:
    """Give SIGINT back to the handler it had before (cli.main calls this while Ctrl-C is held)."""
    global _previous
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, _previous)
        _previous = None
