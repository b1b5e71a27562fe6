"""`schedc` command line: the top-level parser and how failures reach the user.

Each subcommand lives in its own module under :mod:`schedc.cli.commands` (parser + handler together).
A user-facing failure is a :class:`SchedcError` (or an OSError on a path) and becomes one line on
stderr and exit code 2; ``--debug`` (before or after the subcommand) shows the traceback instead.
Ctrl-C exits 130 and SIGTERM (a batch scheduler's time limit) 143, both after the same clean-up
(SIGTERM raises :class:`~schedc.errors.Terminated`, a KeyboardInterrupt), also while the commands
load (both are held until they have loaded: an interrupt inside an import can surface as another
error; before that the console script's entry point, :mod:`schedc_entry`, answers them); a reader that closes the pipe (``| head``) is not an error. An option a command does not
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
from schedc.errors import (
    EscapingStream,
    ParameterError,
    SchedcError,
    Terminated,
    cut_long,
    printable,
    raise_terminated,
    signals_held,
)

# what users of other tools type for an option schedc spells otherwise (difflib finds typos only)
_SYNONYMS = {"--microbatches": "--mb", "--num-microbatches": "--mb", "--n-microbatches": "--mb",
             "--microbatch": "--mb", "--num-stages": "--stages", "--pp": "--ranks", "--gpus": "--ranks",
             "--mem": "--memory", "--memory-limit": "--memory", "--out": "--output", "--timeout": "--time-limit"}


def _parser_class():
    import argparse
    import difflib

    class Parser(argparse.ArgumentParser):
        """argparse, plus: an unknown ``--option`` is an error that names the nearest real one, and
        so is another command's option that would pass here as an abbreviation (``profile --mb 4``
        would silently mean ``--mbs 4``, the microbatch size); a misspelt choice or command names the
        nearest one; a value that starts with '-' (``--memory -1GiB``) is taken as the value, so
        that the option's own check says what is wrong with it; errors are one line."""

        every_option: set[str] = set()  # of all commands, filled by build_parser

        def parse_known_args(self, args=None, namespace=None):
            if args is not None and not any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
                args = self._join_dash_values(list(args))
                self._check_unknown(args)
            return super().parse_known_args(args, namespace)

        def _join_dash_values(self, args: list[str]) -> list[str]:
            """``--memory -1GiB`` as ``--memory=-1GiB``: argparse would read ``-1GiB`` as an option."""
            takes_value = {s for a in self._actions if a.nargs is None and a.option_strings
                           and not isinstance(a, (argparse._StoreConstAction, argparse._StoreTrueAction,
                                                  argparse._StoreFalseAction, argparse._CountAction,
                                                  argparse._HelpAction, argparse._VersionAction))
                           for s in a.option_strings}
            end = args.index("--") if "--" in args else len(args)
            out: list[str] = []
            for token in args[:end]:
                if out and (out[-1] in takes_value or out[-1].startswith("--") and len(out[-1]) > 2
                            and any(k.startswith(out[-1]) for k in takes_value)) and len(token) > 1 and token[0] == "-" \
                        and (token[1].isdigit() or token[1] in ".,"):
                    out[-1] = f"{out[-1]}={token}" if out[-1].startswith("--") else out[-1] + token  # -o-1.csv
                else:
                    out.append(token)
            return out + args[end:]

        def _check_unknown(self, args: list[str]) -> None:
            known = [s for a in self._actions for s in a.option_strings]
            for token in args:
                if token == "--":
                    return
                if not token.startswith("-") or token == "-" or _is_number(token):
                    continue
                name = token.split("=", 1)[0]
                if name in known or (not token.startswith("--") and token[:2] in known):  # -oFILE
                    continue
                if name.startswith("--") and any(k.startswith(name) for k in known) \
                        and name not in self.every_option:
                    continue  # an abbreviation argparse resolves (or calls ambiguous)
                close = [_SYNONYMS[name]] if _SYNONYMS.get(name) in known else \
                    difflib.get_close_matches(name if name.startswith("--") else "-" + name, known, n=1, cutoff=0.6)
                hint = ""
                if close:
                    action = next(a for a in self._actions if close[0] in a.option_strings)
                    # the help's first words say what the option is, unless they are its values
                    what = action.help.split(";")[0].split(" (")[0] if action.help and not action.choices else ""
                    hint = f"; did you mean {close[0]}{f' ({what})' if what else ''}?"
                self.error(f"unknown option {name}{hint}")

        def _check_value(self, action, value):
            if action.choices is not None and value not in action.choices:
                close = difflib.get_close_matches(str(value), [str(c) for c in action.choices], n=1, cutoff=0.5)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise argparse.ArgumentError(action, f"invalid choice {value!r}{hint} (choose from "
                                                     f"{', '.join(map(str, action.choices))})")
            super()._check_value(action, value)

        def error(self, message):
            self.exit(2, f"{self.prog}: error: {printable(cut_long(message))} "
                         f"({self.prog} --help lists the options)\n")

    return Parser


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def build_parser():
    from schedc.cli.commands import COMMANDS

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


def _take_from_entry(signum: int, handler=None) -> bool:
    """Take `signum` over from the console script's loading handler (:mod:`schedc_entry`), in one
    swap; False when the entry point does not hold it (``cli.main`` called from Python)."""
    entry = sys.modules.get("schedc_entry")
    if entry is None or not entry.holds(signum):
        return False
    entry.hand_over(signum, handler)
    return True


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Take Ctrl-C over from the entry point's loading handler and hold it, and SIGTERM, while the
    body runs (schedc.errors.signals_held): a signal meanwhile is raised (KeyboardInterrupt,
    Terminated) when the body is done, not inside an import."""
    _take_from_entry(signal.SIGINT)
    with signals_held(signal.SIGINT, signal.SIGTERM):
        yield


def _split_debug(argv: list[str]) -> tuple[list[str], bool]:
    """Take --debug out of argv wherever it stands (before or after the subcommand), up to a bare '--'."""
    end = argv.index("--") if "--" in argv else len(argv)
    debug = "--debug" in argv[:end]
    return [a for i, a in enumerate(argv) if not (i < end and a == "--debug")], debug


CLOSED_WHY = "closed when schedc started (it was run with >&-); redirect it (>/dev/null) instead of closing it"


class _ClosedStream:
    """Stands for stdout or stderr when the command was started with it closed (``>&-``): a
    write is an OSError the CLI reports (or, for stderr, is dropped), not an AttributeError."""

    def __init__(self, name: str):
        self.name = name

    def write(self, text: str) -> int:
        raise OSError(9, CLOSED_WHY, f"standard {self.name}")

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        raise OSError(9, "closed", f"standard {self.name}")


def _usable_streams() -> None:
    """A closed stdout/stderr becomes :class:`_ClosedStream` (stderr: /dev/null, nowhere else to
    say it); one whose encoding cannot spell a name (``PYTHONIOENCODING=ascii``, the C locale)
    writes it as backslash escapes instead of failing with UnicodeEncodeError."""
    if sys.stdout is None:
        sys.stdout = _ClosedStream("output")
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", "") == "strict":
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    streams = sys.stdout, sys.stderr
    _usable_streams()
    sys.stdout, sys.stderr = EscapingStream(sys.stdout), EscapingStream(sys.stderr)
    try:
        return _main_with_signals(argv)
    finally:
        sys.stdout.flush()
        sys.stdout, sys.stderr = streams


def _main_with_signals(argv: Optional[Sequence[str]]) -> int:
    # SIGTERM cleans up as Ctrl-C does (temp files, ranks) instead of killing at once; taken from
    # the entry point's loading handler in one swap, so that no moment has the default action
    ours = threading.current_thread() is threading.main_thread() and \
        (_take_from_entry(signal.SIGTERM, raise_terminated) or signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    if ours:
        signal.signal(signal.SIGTERM, raise_terminated)
    try:
        return _main(argv)
    finally:
        if ours:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _stopped(e: KeyboardInterrupt) -> tuple[str, int]:
    return ("terminated", 143) if isinstance(e, Terminated) else ("interrupted", 130)


def _as_flag(e: SchedcError) -> SchedcError:
    """The error as the command line spells it: a ParameterError that schedc.api spelt for
    Python (``memory=``) names the flag (``--memory``), as the commands call the API."""
    if isinstance(e, ParameterError) and e.python:
        return ParameterError(e.param, e.detail, flag=e.flag)
    return e


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
    if isinstance(getattr(sys.stdout, "_stream", sys.stdout), _ClosedStream):
        # refused before any work: a command that wrote its files and then failed to say so
        # would leave outputs behind an exit code that says it failed
        print(f"schedc {args.command}: error: standard output: {CLOSED_WHY}", file=sys.stderr)
        return 2
    try:
        return args.handler(args)
    except SchedcError as e:
        if debug:
            raise
        print(f"schedc {args.command}: error: {printable(cut_long(str(_as_flag(e))))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: not an error; keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        if debug:
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(f"schedc {args.command}: error: {printable(where)}{printable(e.strerror or e)}", file=sys.stderr)
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
