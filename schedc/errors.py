"""The one error type users see: a single line naming the file, position or field and what to do;
and the signals that end a run (Ctrl-C, SIGTERM) as exceptions, held where one must not land."""

from __future__ import annotations

import re
import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator


class SchedcError(Exception):
    """A user-facing failure. ``str(e)`` is the whole message; the CLI prints it and exits 2."""


class ParameterError(SchedcError):
    """A bad value of one parameter, told the same way at every front door.

    `param` is the Python name (``memory``); `detail` says what is wrong, with ``{name}`` where the
    text names the parameter again with a value after it (``for no cap give {name}none``). ``str()``
    spells it as the command line does (``--memory: ...``, ``--memory none``);
    :meth:`for_python` spells it as ``schedc.api`` takes it (``memory: ...``, ``memory='none'``
    reads ``memory=none``).

    ``{param}`` names the parameter bare (``--memory`` / ``memory``); ``{name:P}`` and
    ``{param:P}`` name another parameter P the same two ways (``{name:stages}`` is ``--stages ``
    / ``stages=``), its flag from :data:`FLAGS` or ``--P``. A detail that names its own parameter
    in place (it holds ``{param}``, or opens with a placeholder) is the whole message, with no
    ``PARAM:`` before it (``{name}1e-09 is shorter ...``, ``1f1b needs {param} >= {param:stages}``).
    A value from the user or a file goes in through :func:`literal`, so that its braces are shown,
    not read as placeholders."""

    def __init__(self, param: str, detail: str, *, flag: str = "", python: bool = False):
        self.param, self.detail, self.python = param, detail, python
        self.flag = flag or cli_flag(param)  # the CLI's spelling when not --PARAM (--mb)

        def spell(m: "re.Match[str]") -> str:
            if not m.group(1):  # {{ or }}: a brace of a value (literal)
                return m.group()[0]
            other = m.group(2) or param
            head = other if python else (self.flag if other == param else cli_flag(other))
            if m.group(1) == "param":
                return head
            return f"{head}=" if python else f"{head} "

        text = _PLACEHOLDER.sub(spell, detail)
        found = [m for m in _PLACEHOLDER.finditer(detail) if m.group(1)]
        self.names_itself = any(m.group(1) == "param" and not m.group(2) for m in found)  # a bare {param}
        whole = self.names_itself or bool(found and found[0].start() == 0)
        super().__init__(text if whole else f"{param if python else self.flag}: {text}")

    def for_python(self) -> "ParameterError":
        """The same error, naming the keyword argument instead of the flag."""
        return ParameterError(self.param, self.detail, flag=self.flag, python=True)

    def around(self, head: str, tail: str) -> "ParameterError":
        """The same error inside a longer message, `head` and `tail` taken as typed: the detail
        still names its parameter in place (``{param}: `` is put before it when it did not)."""
        detail = self.detail if self.names_itself else "{param}: " + self.detail
        return ParameterError(self.param, literal(head) + detail + literal(tail), flag=self.flag, python=self.python)

    def __reduce__(self):  # pickled (a worker process's error, copy.copy) as what it was built from
        import functools

        return functools.partial(ParameterError, flag=self.flag, python=self.python), (self.param, self.detail)


def python_spelling(function):
    """A :class:`ParameterError` raised anywhere below `function` names the keyword argument
    (``memory=``), not the command-line flag the core spells by default (``--memory``): for the
    Python front door's functions (``schedc.compile``, ``schedc.plan``). The CLI turns it back
    into the flag's spelling when it prints it."""
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except ParameterError as e:
            raise e.for_python() from None

    return wrapper


FLAGS = {"microbatches": "--mb", "execution": "--runtime", "framework": "--for"}
"""The command-line flag of each Python parameter not spelt ``--PARAM`` (``time_limit`` is
``--time-limit``)."""

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{(name|param)(?::([a-z_]+))?\}")


def literal(value: Any) -> str:
    """`value` (typed by the user or read from a file) as text for a :class:`ParameterError`'s
    detail: its braces doubled, so a value ``{param}`` is shown as typed, not spelt as a flag."""
    return str(value).replace("{", "{{").replace("}", "}}")


def cli_flag(param: str) -> str:
    """The command line's flag for the Python parameter `param`: ``microbatches`` -> ``--mb``."""
    return FLAGS.get(param) or f"--{param.replace('_', '-')}"


# C0 and C1 control characters (ESC, BEL, CR, newline...), DEL, and the bidirectional overrides
# that reorder what a terminal shows; a tab is harmless and kept
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: Any) -> str:
    """`text` safe to print: every control character written as its escape (``\\x1b``).

    For any string that comes from an input file, a path or an argument: an ESC sequence printed
    raw can retitle or clear the user's terminal or forge lines of output; a newline would split a
    one-line message. Cost: one regular-expression pass over the text."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


# what a stream of schedc's own output may carry: lines, tabs, a carriage return and ESC[K (a
# progress line rewritten in place); every other control character is escaped
_UNSAFE_IN_OUTPUT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]|"
                               "\x1b(?!\\[K)")


class EscapingStream:
    """A text stream (stdout, stderr) that writes through :func:`printable`'s escapes, keeping
    newlines, tabs, carriage returns and ESC[K: the CLI wraps its streams in it, so a terminal
    escape in any string from an input file (a model type, a module name, a report's field) is
    shown, not obeyed, whichever command prints it. Everything else is the wrapped stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(_UNSAFE_IN_OUTPUT.sub(
            lambda m: m.group().encode("unicode_escape").decode("ascii"), text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def shown(value: Any, limit: int = 40) -> str:
    """`value` quoted for a message, escaped (:func:`printable`) and cut when long: a 5,000-digit
    number is echoed as its first characters and its length, so the message stays one line."""
    text = str(value)
    if len(text) <= limit:
        return repr(printable(text))
    return f"{printable(text[:limit // 2])!r}... ({len(text)} characters)"


def cut_long(message: str, limit: int = 40) -> str:
    """`message` with each quoted value (no spaces in it: not prose) longer than `limit` cut as :func:`shown` cuts it, and any
    other unbroken run of over 120 characters likewise (for messages that echo a value whole:
    argparse's "invalid int value: '999...'", a 5,000-character field name)."""
    message = re.sub("'([^'\\s]{%d,})'" % (limit + 1), lambda m: shown(m.group(1), limit), message)
    return re.sub("[^\\s'\":,]{121,}", lambda m: f"{m.group()[:limit // 2]}... ({len(m.group())} characters)",
                  message)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch scheduler's time limit, ``kill``), raised where Ctrl-C raises
    KeyboardInterrupt so the same clean-up runs; the CLI exits 143 (128 + SIGTERM) on it."""


def raise_terminated(signum, frame) -> None:
    """A SIGTERM handler: raise :class:`Terminated` in the main thread."""
    raise Terminated


@contextmanager
def signals_held(*signals: int) -> Iterator[None]:
    """Hold `signals` while the block runs: one that arrives is only recorded, and its handler
    runs when the block ends (unless the block is raising already: that exception goes on).

    For code an exception must not cut halfway: an import (a library's bare ``except:`` can
    swallow a KeyboardInterrupt, or CPython's unhandled-interrupt flag stays set) or
    ``subprocess.Popen`` between its fork and its return (the child would be lost). Only signals
    with a Python handler, and only on the main thread, where Python runs handlers; a signal
    mask would not do, as the kernel hands a process's signal to any thread that does not mask it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Callable[[int, Any], Any]] = {}
    for s in signals:
        handler = signal.getsignal(s)
        if callable(handler):
            previous[s] = handler
    came: list[int] = []
    for s in previous:
        signal.signal(s, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    for s in dict.fromkeys(came):
        previous[s](s, None)
