"""The `schedc` command line, a thin layer over :mod:`schedc.api`.

``toplevel`` holds the top-level parser and how failures reach the user (one line, exit 2; Ctrl-C
130; SIGTERM 143); ``commands`` lists the subcommands, one module each (``compile``, ``plan``, ...:
``register(subparsers)`` adds the parser, ``run(args) -> int`` runs it); ``common`` holds the
argument groups and readers several commands share. The console script's entry point is
:mod:`schedc_entry`, outside the package, so that it answers Ctrl-C and SIGTERM before the
package loads. ``main`` loads on first use, so importing ``schedc`` does not load the parser.
"""

from __future__ import annotations

from typing import Any

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    if name == "main":
        from schedc.cli.toplevel import main

        return main
    raise AttributeError(f"module 'schedc.cli' has no attribute {name!r}")
