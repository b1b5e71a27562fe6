"""The few PuLP calls whose form changed between PuLP 3 and PuLP 4, in one place.

Problem: schedc's integer program must build and solve on PuLP 3.3 (Python 3.10+, bundled CBC,
``LpVariable.index``, ``pulp.LpStatus`` / ``prob.sol_status``) and on PuLP 4 (Python 3.12+, no
bundled CBC, ``solve()`` returns an ``LpSolveStats``, solver columns are
``LpProblem.exported_variables()``), without calling anything PuLP 3.3 deprecates (it warns on
``PULP_CBC_CMD`` and on ``LpVariable(...)`` built outside a problem).

Method: feature tests on the installed PuLP (never version strings): the solver's column order
comes from ``exported_variables`` where it exists, else ``variables`` (the order PuLP 3's HiGHS
class adds its columns in); CBC always runs through ``COIN_CMD`` with an explicit binary:
``pulp[cbc]``'s ``cbcbox`` wheel, a ``cbc`` on PATH, or PuLP 3's bundled binary; a solve's result
is read from the ``LpSolveStats`` it returns (PuLP 4) or from the status code and
``sol_status`` (PuLP 3).

Cost: constant per call, except ``solver_columns`` (one pass over the model's variables).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Optional

import pulp


def new_variable(prob: pulp.LpProblem, name: str, low=None, up=None, cat: str = pulp.LpContinuous):
    """A variable attached to `prob` (``prob.add_variable``: PuLP >= 3.3; ``LpVariable`` before)."""
    add = getattr(prob, "add_variable", None)
    if add is not None:
        return add(name, lowBound=low, upBound=up, cat=cat)
    return pulp.LpVariable(name, lowBound=low, upBound=up, cat=cat)


def solver_columns(prob: pulp.LpProblem) -> list:
    """The variables in the order a solver API (HiGHS) numbers its columns: PuLP 4 exports only
    the variables a row or the objective uses; PuLP 3 adds every variable, in ``variables()``
    order."""
    exported = getattr(prob, "exported_variables", None)
    return list(exported()) if exported is not None else list(prob.variables())


def cbc_executable() -> Optional[str]:
    """The CBC binary COIN_CMD should run, or None: ``cbcbox`` (``pip install pulp[cbc]``), then
    the binary PuLP 3 bundles (PuLP 4 bundles none), then ``cbc`` on PATH."""
    try:
        import cbcbox  # type: ignore[import-not-found]

        path = cbcbox.cbc_bin_path()
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    except (ImportError, OSError, AttributeError):
        pass
    # PuLP 3's own binary before PATH: a `cbc` on PATH may be a stale shim (pyenv's for another
    # Python) that fails only when the solve starts
    try:
        from pulp.apis import coin_api  # PuLP 3 only; reading the path does not warn

        bundled = coin_api.pulp_cbc_path
        if os.path.isfile(bundled) and os.access(bundled, os.X_OK):
            return bundled
    except (ImportError, AttributeError):
        pass
    return shutil.which("cbc")


def cbc_solver(**options) -> pulp.LpSolver:
    """``COIN_CMD`` on :func:`cbc_executable`'s binary; raises PulpSolverError when there is none."""
    exe = cbc_executable()
    if exe is None:
        raise pulp.PulpSolverError("no CBC binary: pip install 'pulp[cbc]' (or highspy for HiGHS)")
    return pulp.COIN_CMD(path=exe, **options)


def highs_available() -> bool:
    """pulp's HiGHS class (highspy) can run here."""
    return bool(pulp.HiGHS(msg=False).available())


@dataclass(frozen=True)
class SolveStatus:
    optimal: bool  # the solver proved the solution optimal within the gap tolerances it was given
    has_solution: bool  # a feasible solution came back


def solve_status(prob: pulp.LpProblem, returned) -> SolveStatus:
    """What ``prob.solve(solver)`` returned, as (optimal, has a solution): PuLP 4 returns an
    ``LpSolveStats``; PuLP 3 a status code, with the solution's own status on the problem.
    CBC's "Optimal (within gap tolerance)" is optimal in PuLP 3 (and HiGHS's kOptimal means the
    same) but ``GapLimit`` in PuLP 4: both count as optimal here, the solver's gap options
    being the caller's definition of a proof."""
    if hasattr(returned, "has_solution"):
        done = returned.status in (pulp.LpSolveStatus.Optimal, pulp.LpSolveStatus.GapLimit)
        return SolveStatus(bool(done and returned.has_solution), bool(returned.has_solution))
    sol = getattr(prob, "sol_status", None)
    found = sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    return SolveStatus(returned == pulp.LpStatusOptimal and sol == pulp.LpSolutionOptimal, found)
