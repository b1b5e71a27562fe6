"""The compiler: heuristic warm start, lower bounds, the PuLP integer program and the driver.

``compile_schedule(n_stages, n_microbatches, ...)`` is the entry point (schedc.solver.compile;
users call it as :func:`schedc.compile`); ``Problem`` is one resolved request. Importing this
package loads PuLP (about 0.2 s): ``import schedc`` does not import it.
"""

from schedc.solver.compile import CompileResult, compile_problem, compile_schedule
from schedc.solver.problem import Problem

__all__ = ["compile_schedule", "compile_problem", "CompileResult", "Problem"]
