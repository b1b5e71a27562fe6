"""The `schedc` subcommands, one module each (pip's ``commands/`` layout).

A command module defines ``register(subparsers) -> None`` (adds its parser and sets
``handler=run``) and ``run(args) -> int``. ``COMMANDS`` lists them in ``schedc --help`` order;
shared argument groups and read/validate helpers live in :mod:`schedc.cli.common`.
"""

from schedc.cli import baseline, calibrate, compile, emulate, library, plan, plot, profile, simulate, trace, validate

COMMANDS = [baseline, validate, simulate, compile, plan, plot, trace, emulate, profile, calibrate, library]
