"""A progress line for long commands (profile, calibrate) on stderr."""

from __future__ import annotations

import sys


class StderrProgress:
    """A progress line on stderr, rewritten in place on a terminal; ``done()`` ends it (only if one
    was shown). When stderr is not a terminal (a log file, CI) each message is a plain line: no
    carriage returns or escape codes in logs."""

    def __init__(self, prefix: str = "schedc profile"):
        self.prefix = prefix
        self.shown = False
        self.tty = sys.stderr.isatty()

    def __call__(self, msg: str) -> None:
        if not self.tty:
            print(f"{self.prefix}: {msg}", file=sys.stderr, flush=True)
            return
        self.shown = True
        print(f"\r{self.prefix}: {msg}\033[K", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.shown:
            print(file=sys.stderr, flush=True)
            self.shown = False
