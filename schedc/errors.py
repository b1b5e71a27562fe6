"""The one error type users see: a single line naming the file, position or field and what to do."""


class SchedcError(Exception):
    """A user-facing failure. ``str(e)`` is the whole message; the CLI prints it and exits 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch scheduler's time limit, ``kill``), raised where Ctrl-C raises
    KeyboardInterrupt so the same clean-up runs; the CLI exits 143 (128 + SIGTERM) on it."""


def raise_terminated(signum, frame) -> None:
    """A SIGTERM handler: raise :class:`Terminated` in the main thread."""
    raise Terminated
