"""The one error type users see: a single line naming the file, position or field and what to do."""


class SchedcError(Exception):
    """A user-facing failure. ``str(e)`` is the whole message; the CLI prints it and exits 2."""
