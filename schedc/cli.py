"""`schedc` command line: the top-level parser and how failures reach the user.

Each subcommand lives in its own module under :mod:`schedc.commands` (parser + handler together).
A user-facing failure is a :class:`SchedcError` (or an OSError on a path) and becomes one line on
stderr and exit code 2; ``--debug`` (before or after the subcommand) shows the traceback instead.
Ctrl-C exits 130 and SIGTERM (a batch scheduler's time limit) 143, both after the same clean-up
(SIGTERM raises :class:`~schedc.errors.Terminated`, a KeyboardInterrupt), also while the commands
load (Ctrl-C is held until they have loaded: an interrupt inside an import can surface as another
error); a reader that closes the pipe (``| head``) is not an error. An option a command does not
have is named with the nearest one it does have (``--mbs`` -> ``--mb``), before argparse would
complain about something else.
"""

from __future__ import annotations

# only modules Python has loaded at start-up (and signal, built in) before main() holds Ctrl-C:
# an interrupt while a module loads would show a traceback
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

from schedc import __version__
from schedc._loading import hand_over_ctrl_c
from schedc.errors import SchedcError, Terminated, raise_terminated, signals_held


def _parser_class():
    import argparse
    import difflib

    class Parser(argparse.ArgumentParser):
        """argparse, plus: an unknown ``--option`` is an error that names the nearest real one, and
        so is another command's option that would pass here as an abbreviation (``profile --mb 4``
        would silently mean ``--mbs 4``, the microbatch size)."""

        every_option: set[str] = set()  # of all commands, filled by build_parser

        def parse_known_args(self, args=None, namespace=None):
            if args is not None and not any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
                self._check_unknown(list(args))
            return super().parse_known_args(args, namespace)

        def _check_unknown(self, args: list[str]) -> None:
            known = [s for a in self._actions for s in a.option_strings]
            for token in args:
                if token == "--":
                    return
                if not token.startswith("-") or token == "-" or _is_number(token):
                    continue
                name = token.split("=", 1)[0]
                if name in known:
                    continue
                if name.startswith("--") and any(k.startswith(name) for k in known) \
                        and name not in self.every_option:
                    continue  # an abbreviation argparse resolves (or calls ambiguous)
                close = difflib.get_close_matches(name if name.startswith("--") else "-" + name, known, n=1,
                                                  cutoff=0.6)
                hint = ""
                if close:
                    action = next(a for a in self._actions if close[0] in a.option_strings)
                    what = f" ({action.help.split(';')[0].split(' (')[0]})" if action.help else ""
                    hint = f"; did you mean {close[0]}{what}?"
                self.error(f"unknown option {name}{hint} ({self.prog} --help lists the options)")

    return Parser


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def build_parser():
    from schedc.commands import COMMANDS

    parser = _parser_class()(prog="schedc", description="Pipeline-schedule compiler for PyTorch training.")
    parser.add_argument("--version", action="version", version=f"schedc {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors (also after the command)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    parsers = list(sub.choices.values())
    while parsers:  # every command's options, nested ones (library build/list/...) included
        p = parsers.pop()
        for a in p._actions:
            parser.every_option.update(a.option_strings)
            if isinstance(a.choices, dict):
                parsers += [q for q in a.choices.values() if hasattr(q, "_actions")]
    return parser


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Take Ctrl-C over from the loading handler (schedc._loading) and hold it while the body runs
    (schedc.errors.signals_held): a Ctrl-C meanwhile is raised as KeyboardInterrupt when the body
    is done, not inside an import."""
    hand_over_ctrl_c()
    with signals_held(signal.SIGINT):
        yield


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
        with _sigint_held():  # from here a Ctrl-C is a KeyboardInterrupt, raised when the hold ends
            parser = build_parser()  # imports the commands
    except KeyboardInterrupt as e:
        word, code = _stopped(e)
        print(f"schedc: {word}", file=sys.stderr)
        return code
    try:
        args = parser.parse_args(argv)
    except KeyboardInterrupt as e:
        word, code = _stopped(e)
        print(f"schedc: {word}", file=sys.stderr)
        return code
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
    except MemoryError:
        if debug:
            raise
        print(f"schedc {args.command}: error: out of memory; the input is too large for this machine "
              "(or its memory limit, ulimit -v)", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        word, code = _stopped(e)
        print(f"schedc {args.command}: {word}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
