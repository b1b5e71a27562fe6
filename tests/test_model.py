"""The integer program against exhaustive search: same optimum on tiny instances (both objectives,
memory caps, heterogeneous costs, comm, V placement), which also checks the in-order (symmetry
breaking) assumption, since the exhaustive search does not make it; warm starts reach the
solver; the model's solutions re-simulate to the model's value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from exhaustive import exact_optimum  # noqa: E402  (tests/exhaustive.py: the oracle these tests serve)

from schedc.core.costs import Profile, StageCost
from schedc.core.ir import Action, Schedule
from schedc.core.simulate import simulate
from schedc.solver import graph
from schedc.solver.engines import mip as model
from schedc.solver.engines.warm import warm_start
from schedc.solver.problem import Problem


def solve_full(problem: Problem, solver: str = "highs", time_limit: float = 20.0):
    inst = graph.graph_of(problem)
    sched, sim, _ = warm_start(problem, time_budget=0.05)
    inc = graph.canonical_orders(inst, graph.orders_from_schedule(inst, sched))
    val = simulate(graph.schedule_from_orders(inst, inc), problem.profile).objective(problem.objective)
    out = model.solve_model(inst, inc, val, problem.objective, time_limit, solver)
    return inst, val, out


def test_under_a_work_budget_a_model_whose_set_up_exceeds_its_share_is_not_solved():
    """Under a work budget the integer program is charged its set-up per binary (building the
    model, HiGHS's presolve and root: the node and check limits do not bound them); a share too
    small for it gets no solve, charged only for what was built, and a share that holds it is
    solved, charged the set-up and the solve."""
    from schedc.solver import deadline as dl

    problem = Problem.build(4, 8, memory="1.5p")
    inst = graph.graph_of(problem)
    sched, sim, _ = warm_start(problem, time_budget=0.05)
    inc = graph.canonical_orders(inst, graph.orders_from_schedule(inst, sched))
    val = simulate(graph.schedule_from_orders(inst, inc), problem.profile).objective(problem.objective)
    with dl.counting_work(100.0) as clock:
        out = model.solve_model(inst, inc, val, problem.objective, 0.05, model.available_solver())
        built = model.ORDER_WORK_PER_BINARY * out.n_binaries
        assert out.n_binaries > 0 and out.orders is None and "set-up" in out.message
        assert clock.spent == pytest.approx(built)
        setup = model.SETUP_WORK_PER_BINARY * out.n_binaries
        share = built + setup + 1.0
        solved = model.solve_model(inst, inc, val, problem.objective, share, model.available_solver())
        assert solved.orders is not None and solved.n_binaries == out.n_binaries
        assert clock.spent >= built + built + setup
        assert not clock.cut_by_wall


TINY = [
    # (stages, mb, ranks, placement, profile, memory, objective)
    (2, 3, None, "loop", None, "1p", "makespan"),
    (2, 3, None, "loop", None, "1p", "span"),
    (3, 3, None, "loop", None, "1p", "makespan"),
    (3, 3, None, "loop", None, "1p", "span"),
    (3, 3, None, "loop", "hetero", "1p", "makespan"),
    (3, 2, None, "loop", "hetero", "1p", "span"),
    (2, 4, None, "loop", "hetero", "1p", "span"),
    (2, 3, None, "loop", "hetero", "none", "span"),
    (3, 3, None, "loop", "hetero", "0.67p", "makespan"),
    (2, 4, None, "loop", "hetero", "0.5p", "makespan"),
    (4, 2, 2, "v", None, "1p", "makespan"),
    (4, 2, 2, "v", "hetero", "1p", "span"),
    (4, 2, 2, "loop", None, "none", "makespan"),
]


@pytest.mark.parametrize("case", TINY, ids=lambda c: "-".join(str(x) for x in c))
def test_ilp_optimum_equals_exhaustive_optimum(case):
    n, m, r, placement, prof, memory, objective = case
    profile = Profile.edge_heavy(n) if prof == "hetero" else None
    problem = Problem.build(n, m, n_ranks=r, placement=placement, profile=profile, memory=memory, objective=objective)
    exact, _ = exact_optimum(problem)
    inst, warm_val, out = solve_full(problem)
    assert out.proven
    assert out.orders is not None
    sched = graph.schedule_from_orders(inst, out.orders)
    sim = simulate(sched, problem.profile, problem.memory)
    assert sim.fits
    assert sim.objective(objective) == pytest.approx(exact, abs=1e-6)
    assert out.objective == pytest.approx(exact, abs=1e-6)
    assert out.dual_bound <= exact + 1e-6


SPAN = [c for c in TINY if c[-1] == "span"] + [(2, 3, None, "loop", "slow", "1p", "span"),
                                              (4, 2, 2, "loop", "slow", "2p", "span")]


@pytest.mark.parametrize("case", SPAN, ids=lambda c: "-".join(str(x) for x in c))
def test_late_start_model_bounds_the_exhaustive_span_optimum(case):
    # the late-start model relaxes every schedule (out-of-order ones included): its proven
    # optimum never exceeds the exhaustive optimum, and its orders re-simulate to a real schedule
    n, m, r, placement, prof, memory, objective = case
    profile = {"hetero": Profile.edge_heavy(n), "slow": Profile.uniform(n, 1.0, 2.0, 0.5, comm=0.3)}.get(prof)
    problem = Problem.build(n, m, n_ranks=r, placement=placement, profile=profile, memory=memory, objective=objective)
    exact, _ = exact_optimum(problem)
    inst = graph.graph_of(problem)
    sched, _, _ = warm_start(problem, time_budget=0.05)
    inc = graph.canonical_orders(inst, graph.orders_from_schedule(inst, sched))
    val = simulate(graph.schedule_from_orders(inst, inc), problem.profile).span
    out = model.solve_model(inst, inc, val, "span", 20.0, late_start=True)
    assert out.proven and out.dual_bound <= exact + 1e-6
    sim = simulate(graph.schedule_from_orders(inst, out.orders), problem.profile, problem.memory)
    assert sim.fits and sim.span >= exact - 1e-6


def test_late_start_is_the_full_span_model_only():
    problem = Problem.build(2, 2, memory="1p")
    inst = graph.graph_of(problem)
    inc = graph.canonical_orders(inst, graph.orders_from_schedule(inst, warm_start(problem, 0.05)[0]))
    with pytest.raises(ValueError, match="late_start"):
        model.solve_model(inst, inc, 10.0, "makespan", 5.0, late_start=True)


def test_cbc_reaches_the_same_optimum():
    problem = Problem.build(3, 3, profile=Profile.edge_heavy(3), memory="1p", objective="makespan")
    exact, _ = exact_optimum(problem)
    inst, _, out = solve_full(problem, solver="cbc")
    assert out.proven
    sim = simulate(graph.schedule_from_orders(inst, out.orders), problem.profile, problem.memory)
    assert sim.fits and sim.makespan == pytest.approx(exact, abs=1e-6)


def test_warm_start_reaches_highs(monkeypatch):
    problem = Problem.build(4, 6, profile=Profile.edge_heavy(4), memory="1p")
    seen = {}
    original = model._WarmHiGHS.callSolver

    def spy(self, lp):
        original(self, lp)
        seen["accepted"] = self.start_accepted
        seen["n"] = len(self.start_values)

    monkeypatch.setattr(model._WarmHiGHS, "callSolver", spy)
    inst, val, out = solve_full(problem, time_limit=5.0)
    assert seen["accepted"] is True
    assert seen["n"] > inst.n  # every start time, the order binaries and the objective
    assert out.orders is not None
    assert out.objective <= val + 1e-6


def test_model_vocabulary_round_trip():
    # B on a split stage becomes I then W; canonical relabelling puts kinds in microbatch order
    problem = Problem.build(2, 2)
    inst = graph.graph_of(problem)
    sched = Schedule.from_actions([
        [Action(0, "F", 1), Action(0, "F", 0), Action(0, "B", 1), Action(0, "B", 0)],
        [Action(1, "F", 1), Action(1, "B", 1), Action(1, "F", 0), Action(1, "B", 0)],
    ], n_microbatches=2, placement=(0, 1))
    orders = graph.orders_from_schedule(inst, sched)
    assert [str(inst.actions[i]) for i in orders[0]] == ["0F1", "0F0", "0I1", "0W1", "0I0", "0W0"]
    canon = graph.canonical_orders(inst, orders)
    assert graph.obeys_kind_order(inst, canon)
    before = simulate(sched, problem.profile).makespan
    after = simulate(graph.schedule_from_orders(inst, canon), problem.profile).makespan
    assert after <= before + 1e-9


def test_zero_cost_w_stages_use_b():
    # the stage without weights is the last one: under torch's runtime stage 0's W is its whole backward
    stages = [StageCost(forward=1, backward_input=1, backward_weight=1, activation_bytes=1, weight_grad_bytes=0.5),
              StageCost(forward=1, backward_input=1, backward_weight=0, activation_bytes=1, weight_grad_bytes=0)]
    problem = Problem.build(2, 3, profile=Profile(stages=stages))
    inst = graph.graph_of(problem)
    assert inst.backward == ["I", "B"]
    assert Action(1, "W", 0) not in inst.actions and inst.id(1, "W", 0) is None
    exact, _ = exact_optimum(problem)
    _, _, out = solve_full(problem)
    sim = simulate(graph.schedule_from_orders(inst, out.orders), problem.profile, problem.memory)
    assert sim.fits and sim.makespan == pytest.approx(exact, abs=1e-6)


def test_window_model_keeps_outside_order():
    problem = Problem.build(4, 8, profile=Profile.edge_heavy(4), memory="1p")
    inst = graph.graph_of(problem)
    sched, _, _ = warm_start(problem, time_budget=0.05)
    inc = graph.canonical_orders(inst, graph.orders_from_schedule(inst, sched))
    val = simulate(graph.schedule_from_orders(inst, inc), problem.profile).makespan
    free = [(4, 12)] * problem.n_ranks
    out = model.solve_model(inst, inc, val, "makespan", 5.0, free=free)
    assert out.orders is not None
    for r, row in enumerate(out.orders):
        assert row[:4] == inc[r][:4] and row[12:] == inc[r][12:]
        assert sorted(row[4:12]) == sorted(inc[r][4:12])


def test_highs_writes_nothing_to_stdout(tmp_path):
    # HiGHS prints its name and licence to the C-level stdout when a process creates its first
    # instance, whatever output_flag says: a user's `schedc compile ... > log` must not get it
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from test_model import *; "
            "solve_full(Problem.build(4, 6, profile=Profile.edge_heavy(4), memory='1p'), time_limit=2.0); "
            "print('solved')")
    proc = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "solved\n"), proc.stderr


@pytest.mark.parametrize("n,m,placement,ranks,memory,wg,transient", [
    (3, 3, "loop", None, "2.5B", 1.5, None),
    (4, 2, "v", 2, "4B", 1.6, {"I": 0.3}),
    (2, 3, "loop", None, "2.2B", 2.0, {"F": 0.2}),
])
def test_integer_program_rows_bind_at_rises_and_transients(n, m, placement, ranks, memory, wg, transient):
    # the memory rows at I's that rise and at actions with transients: the integer program's
    # proven optimum is the exact one, and its schedule fits the simulator's accounting
    from schedc.solver.compile import compile_schedule

    stages = [StageCost(forward=1.0, backward_input=1.0, backward_weight=1.0, activation_bytes=1.0,
                        weight_grad_bytes=wg, transient_bytes=transient) for _ in range(n)]
    prof = Profile(stages=stages, comm=0.1)
    p = Problem.build(n, m, n_ranks=ranks, placement=placement, profile=prof, memory=memory)
    opt, _ = exact_optimum(p, use_bounds=False)
    res = compile_schedule(n, m, n_ranks=ranks, placement=placement, profile=prof, memory=memory, time_limit=20,
                           solver="highs")
    sim = simulate(res.schedule, p.profile, p.memory)
    assert sim.fits and sim.makespan == pytest.approx(opt)
    assert res.lower_bound <= opt + 1e-9
    g = graph.graph_of(p)
    rises = [i for i, a in enumerate(g.actions) if a.kind == "I" and g.extra[i] > 0]
    assert rises or transient  # the instance exercises the new rows
