"""The compiler: heuristic warm start, lower bounds, the PuLP integer program and the driver.

``compile_schedule(n_stages, n_microbatches, ...)`` is the entry point (schedc.solver.compile);
``Problem`` is one resolved request. The driver (and pulp) are imported on first use so that the
heuristic and the bounds stay light.
"""

from schedc.solver.problem import Problem

__all__ = ["compile_schedule", "compile_problem", "CompileResult", "Problem"]


def __getattr__(name):
    if name in ("compile_schedule", "compile_problem", "CompileResult"):
        from schedc.solver import compile as _compile

        return getattr(_compile, name)
    raise AttributeError(f"module 'schedc.solver' has no attribute {name!r}")
