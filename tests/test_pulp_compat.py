"""The integer program on the installed PuLP (3.3 in the main job, 4 in the Python 3.12 job):
solver columns, CBC through COIN_CMD, solve results read through either API, no deprecated call,
and a one-line answer when no MIP solver is installed."""

from __future__ import annotations

import warnings

import pulp
import pytest

from schedc.core.costs import Profile
from schedc.errors import SchedcError
from schedc.solver import graph, pulp_compat
from schedc.solver.engines import mip as model
from schedc.solver.engines.warm import warm_start
from schedc.solver.problem import Problem


def _small_mip():
    prob = pulp.LpProblem("t", pulp.LpMinimize)
    unused = pulp_compat.new_variable(prob, "unused", 0, 5)  # PuLP 4 exports no column for it
    x = pulp_compat.new_variable(prob, "x", 0, 1, cat=pulp.LpBinary)
    y = pulp_compat.new_variable(prob, "y", 0, 1, cat=pulp.LpBinary)
    z = pulp_compat.new_variable(prob, "z", 0, 10)
    prob += x + 2 * y + z
    prob += x + y >= 1, "one"
    prob += z >= 3 * y + 0.5, "z_floor"
    return prob, unused


def test_solver_columns_are_the_columns_highs_solved():
    if not pulp_compat.highs_available():
        pytest.skip("highspy not installed")
    prob, _ = _small_mip()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        returned = prob.solve(pulp.HiGHS(msg=False))
    columns = pulp_compat.solver_columns(prob)
    solved = list(prob.solverModel.getSolution().col_value)
    assert len(columns) == len(solved)
    assert [c.varValue for c in columns] == pytest.approx(solved)
    assert {c.name: c.varValue for c in columns if c.name != "unused"} == pytest.approx({"x": 1, "y": 0, "z": 0.5})
    assert pulp_compat.solve_status(prob, returned) == pulp_compat.SolveStatus(optimal=True, has_solution=True)


def test_cbc_runs_through_coin_cmd_without_deprecation():
    if pulp_compat.cbc_executable() is None:
        pytest.skip("no CBC binary (pip install 'pulp[cbc]')")
    prob, _ = _small_mip()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        solver = pulp_compat.cbc_solver(msg=False)
        returned = prob.solve(solver)
    assert type(solver).__name__ == "COIN_CMD"
    assert pulp_compat.solve_status(prob, returned).optimal
    assert pulp.value(prob.objective) == pytest.approx(1.5)


def test_infeasible_is_neither_optimal_nor_a_solution():
    if not pulp_compat.highs_available():
        pytest.skip("highspy not installed")
    prob = pulp.LpProblem("t", pulp.LpMinimize)
    x = pulp_compat.new_variable(prob, "x", 0, 1)
    prob += x
    prob += x >= 2, "impossible"
    assert pulp_compat.solve_status(prob, prob.solve(pulp.HiGHS(msg=False))) == pulp_compat.SolveStatus(False, False)


def test_both_solvers_prove_the_same_optimum_without_deprecated_calls():
    problem = Problem.build(3, 3, profile=Profile.edge_heavy(3), memory="1p", objective="makespan")
    inst = graph.graph_of(problem)
    start, sim, _ = warm_start(problem, time_budget=0.05)
    inc = graph.canonical_orders(inst, graph.orders_from_schedule(inst, start))
    if pulp_compat.highs_available():
        # a HiGHS solve with its default threads first, as a user's own code may run: HiGHS then
        # refuses schedc's threads=1 unless schedc replaces the idle scheduler
        _small_mip()[0].solve(pulp.HiGHS(msg=False))
    found = {}
    for solver in ("highs", "cbc"):
        if (solver == "highs" and not pulp_compat.highs_available()) or (
                solver == "cbc" and pulp_compat.cbc_executable() is None):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            out = model.solve_model(inst, inc, sim.makespan, "makespan", 20.0, solver)
        assert out.proven, out.message
        found[solver] = out.objective
    assert found and max(found.values()) - min(found.values()) < 1e-6


def test_the_solver_asked_for_is_the_one_run(monkeypatch):
    monkeypatch.setattr(model, "highs_available", lambda: True)
    monkeypatch.setattr(model, "cbc_executable", lambda: "/usr/bin/cbc")
    assert [model.available_solver(n) for n in (None, "highs", "cbc")] == ["highs", "highs", "cbc"]
    monkeypatch.setattr(model, "highs_available", lambda: False)
    assert model.available_solver(None) == "cbc"


def test_no_solver_installed_is_one_line(monkeypatch):
    monkeypatch.setattr(model, "highs_available", lambda: False)
    monkeypatch.setattr(model, "cbc_executable", lambda: None)
    with pytest.raises(SchedcError) as err:
        model.available_solver(None)
    assert "pip install highspy" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SchedcError, match="--solver cbc"):
        model.available_solver("cbc")
    with pytest.raises(SchedcError, match="--solver highs"):
        model.available_solver("highs")


def test_missing_cbc_binary_is_a_failed_solve_not_a_crash(monkeypatch):
    monkeypatch.setattr(pulp_compat, "cbc_executable", lambda: None)
    problem = Problem.build(2, 2, memory="1p", objective="makespan")
    inst = graph.graph_of(problem)
    start, sim, _ = warm_start(problem, time_budget=0.05)
    inc = graph.canonical_orders(inst, graph.orders_from_schedule(inst, start))
    out = model.solve_model(inst, inc, sim.makespan, "makespan", 5.0, "cbc")
    assert out.orders is None and "pulp[cbc]" in out.message
