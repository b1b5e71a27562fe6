"""Ctrl-C while the ``schedc`` command is still loading: exit 130 with one line, no traceback.

Problem: ``import schedc`` loads the front door (pydantic models, the engine modules): a tenth of
a second on a quiet machine, more on a busy one. For the ``schedc`` command that happens before
``schedc.cli.main`` can catch anything, so a Ctrl-C right after starting a command printed a
KeyboardInterrupt traceback instead of the CLI's ``interrupted`` line and exit code 130.

Method: while the package loads, and only when the process is the schedc command (the console
script, or ``python -m schedc.cli``) in its main thread, SIGINT exits at once with 130: nothing
has been written yet. A program that imports schedc keeps Python's own Ctrl-C behaviour.

Cost: two signal-handler swaps per start of the command.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator


def _is_schedc_command() -> bool:
    if sys.argv and os.path.basename(sys.argv[0]) == "schedc":
        return True
    argv = list(getattr(sys, "orig_argv", ()))
    return any(a == "-m" and b == "schedc.cli" for a, b in zip(argv, argv[1:]))


@contextmanager
def command_exits_on_ctrl_c() -> Iterator[None]:
    """Within the block, a SIGINT ends the schedc command with exit code 130 (see module doc)."""
    if not _is_schedc_command() or threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum, frame) -> None:
        os.write(2, b"schedc: interrupted\n")
        os._exit(130)

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
