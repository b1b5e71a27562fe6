"""`schedc` command line: the top-level parser and how failures reach the user.

Each subcommand lives in its own module under :mod:`schedc.commands` (parser + handler together).
A user-facing failure is a :class:`SchedcError` (or an OSError on a path) and becomes one line on
stderr and exit code 2; ``--debug`` (before or after the subcommand) shows the traceback instead.
Ctrl-C exits 130 and SIGTERM (a batch scheduler's time limit) 143, both after the same clean-up
(SIGTERM raises :class:`~schedc.errors.Terminated`, a KeyboardInterrupt); a reader that closes the
pipe (``| head``) is not an error.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Optional, Sequence

from schedc import __version__
from schedc.errors import SchedcError, Terminated, raise_terminated


def build_parser() -> argparse.ArgumentParser:
    from schedc.commands import COMMANDS

    parser = argparse.ArgumentParser(prog="schedc", description="Pipeline-schedule compiler for PyTorch training.")
    parser.add_argument("--version", action="version", version=f"schedc {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors (also after the command)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    return parser


def _split_debug(argv: list[str]) -> tuple[list[str], bool]:
    """Take --debug out of argv wherever it stands (before or after the subcommand), up to a bare '--'."""
    end = argv.index("--") if "--" in argv else len(argv)
    debug = "--debug" in argv[:end]
    return [a for i, a in enumerate(argv) if not (i < end and a == "--debug")], debug


def main(argv: Optional[Sequence[str]] = None) -> int:
    ours = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if ours:  # SIGTERM cleans up as Ctrl-C does (temp files, ranks) instead of killing at once
        signal.signal(signal.SIGTERM, raise_terminated)
    try:
        return _main(argv)
    finally:
        if ours:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _stopped(e: KeyboardInterrupt) -> tuple[str, int]:
    return ("terminated", 143) if isinstance(e, Terminated) else ("interrupted", 130)


def _main(argv: Optional[Sequence[str]]) -> int:
    argv, debug = _split_debug(list(sys.argv[1:] if argv is None else argv))
    try:
        parser = build_parser()  # imports the commands: Ctrl-C may come while they load
    except KeyboardInterrupt as e:
        word, code = _stopped(e)
        print(f"schedc: {word}", file=sys.stderr)
        return code
    args = parser.parse_args(argv)
    args.debug = debug
    try:
        return args.handler(args)
    except SchedcError as e:
        if debug:
            raise
        print(f"schedc {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: not an error; keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        if debug:
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(f"schedc {args.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        word, code = _stopped(e)
        print(f"schedc {args.command}: {word}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
