"""The compiler: warm starts, lower bounds, CP-SAT, the PuLP integer program, windows and the driver.

``compile_schedule(n_stages, n_microbatches, ...)`` is the entry point (schedc.solver.compile;
users call it as :func:`schedc.compile`); ``Problem`` is one resolved request, ``graph`` lowers
it once for every engine, ``engine`` is the protocol they share. Importing this
package loads PuLP (about 0.2 s): ``import schedc`` does not import it.
"""

from schedc.solver.compile import CompileResult, compile_problem, compile_schedule
from schedc.solver.problem import Problem

__all__ = ["compile_schedule", "compile_problem", "CompileResult", "Problem"]
