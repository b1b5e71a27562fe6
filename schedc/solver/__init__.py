"""The compiler: warm starts, lower bounds, CP-SAT, the PuLP integer program, windows and the driver.

``compile_schedule(n_stages, n_microbatches, ...)`` is the entry point (schedc.solver.compile;
users call it as :func:`schedc.compile`); ``Problem`` is one resolved request, ``graph`` lowers
it once for every engine, ``engine`` is the protocol they share.

The names below are loaded on first use (PEP 562), so importing a submodule such as
``schedc.solver.interrupt`` does not load PuLP (its import time: docs/design.md): the commands take Ctrl-C over with it
before PuLP's optional-solver imports run, whose bare ``except:`` clauses would swallow a
KeyboardInterrupt (the command then ran to its time limit) or leave CPython's unhandled-interrupt
flag set (the process then died by SIGINT after printing that it was interrupted).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"compile_schedule": "schedc.solver.compile", "compile_problem": "schedc.solver.compile",
         "CompileResult": "schedc.solver.compile", "Problem": "schedc.solver.problem"}

__all__ = ["compile_schedule", "compile_problem", "CompileResult", "Problem"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'schedc.solver' has no attribute {name!r}")
