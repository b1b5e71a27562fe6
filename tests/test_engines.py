"""The problem graph and the engine protocol (schedc.solver.graph, schedc.solver.engine).

Every engine takes the problem's graph, an incumbent and a deadline and returns a Result; what it
returns must be a valid schedule that fits, simulated as the simulator times it, and any bound it
claims must hold for every schedule (checked against the exhaustive optimum). The baselines are
built once per graph, and a compile reuses what its warm start built.
"""

from __future__ import annotations

import random

import pytest
from exhaustive import exact_optimum  # noqa: E402  (tests/exhaustive.py: the oracle)

from schedc.core.costs import Profile, StageCost
from schedc.core.simulate import simulate
from schedc.core.validate import problems
from schedc.errors import SchedcError
from schedc.solver.compile import compile_problem
from schedc.solver.deadline import Deadline
from schedc.solver.engine import STATUSES, Incumbent
from schedc.solver.engines import heuristic
from schedc.solver.engines import mip as model
from schedc.solver.engines import zb_greedy as greedy
from schedc.solver.engines import zb_rounds as paper_greedy
from schedc.solver.engines.cpsat import CpsatEngine, cpsat_available
from schedc.solver.engines.warm import feasible_baselines
from schedc.solver.engines.windows import WindowSearch
from schedc.solver.graph import canonical_orders, graph_of, orders_from_schedule, schedule_from_orders
from schedc.solver.problem import Problem


def _engines(objective: str):
    mip = model.available_solver()
    out = [heuristic.ListHeuristic(time_budget=0.1), greedy.ZbGreedy(), paper_greedy.ZbRounds(),
           model.MipEngine(mip, late_start=objective == "span"), WindowSearch(mip)]
    if cpsat_available():
        out += [CpsatEngine(workers=1), WindowSearch("cpsat")]
    return out


@pytest.mark.parametrize("objective", ["makespan", "span"])
def test_every_engine_answers_through_the_protocol(objective):
    # 3 stages x 3 microbatches with slow links (small enough for the exhaustive optimum), from
    # 1F1B's orders, which the searches can improve
    from schedc.core import baselines

    p = Problem.build(3, 3, profile=Profile.uniform(3, comm=0.25), memory="1p", objective=objective)
    g = graph_of(p)
    opt, _ = exact_optimum(p)
    orders = canonical_orders(g, orders_from_schedule(g, baselines.make_baseline("1f1b", 3, 3)))
    weak = schedule_from_orders(g, orders)
    incumbent = Incumbent(weak, simulate(weak, p.profile, p.memory), "1f1b", orders)
    assert incumbent.value(objective) > opt + 0.1
    for engine in _engines(objective):
        res = engine.run(g, incumbent, Deadline.after(5.0))
        assert res.status in STATUSES, engine.name
        if res.bound is not None:
            assert res.bound <= opt + 1e-6, (engine.name, res.bound, opt)
        if engine.name in ("mip", "cpsat"):  # the whole model, proven at this size: a tight certificate
            assert res.status == "optimal" and res.bound == pytest.approx(opt, abs=1e-6), engine.name
            if objective == "makespan":  # (a span model's times are re-simulated at earliest starts)
                assert res.sim.objective(objective) == pytest.approx(opt), engine.name
        if not res.answered:
            continue
        assert problems(res.schedule, p.n_stages, p.n_microbatches, p.n_ranks, p.placement) == [], engine.name
        again = simulate(res.schedule, p.profile, p.memory)
        assert again.fits and again.objective(objective) == pytest.approx(res.sim.objective(objective))
        assert res.sim.objective(objective) >= opt - 1e-6, engine.name
        if res.orders is not None:  # the orders are the schedule's, in the graph's ids
            assert canonical_orders(g, orders_from_schedule(g, res.schedule)) == canonical_orders(g, res.orders)


@pytest.mark.parametrize("memory", ["none", "0.75p", "1.5p"])
def test_the_stage_level_rule_is_the_action_graphs(memory):
    # Graph.input_time (what the event-driven constructions ask) against the action graph's own
    # producers, on uneven stages, a stage without weights (B), slow links and a V placement
    stages = [StageCost(forward=1.0 + 0.3 * s, backward_input=1.2 + 0.1 * s, backward_weight=0.0 if s == 1 else 0.7,
                        activation_bytes=2.0 + s, weight_grad_bytes=0.0 if s == 1 else 1.0 + 0.5 * s) for s in range(4)]
    p = Problem.build(4, 5, n_ranks=2, placement="v", profile=Profile(stages=stages, comm=0.3), memory=memory)
    g = graph_of(p)
    rng = random.Random(0)
    end_f = [[rng.uniform(0, 50) for _ in range(g.M)] for _ in range(g.S)]
    end_i = [[rng.uniform(0, 50) for _ in range(g.M)] for _ in range(g.S)]
    for i, a in enumerate(g.actions):
        producers = [(g.actions[j], lag) for j, lag in g.preds[i]
                     if g.actions[j].microbatch == a.microbatch and (g.actions[j].stage, g.actions[j].kind) != (a.stage, a.kind)]
        expected = max([(end_f if b.kind == "F" else end_i)[b.stage][b.microbatch] + lag for b, lag in producers],
                       default=0.0)
        kind = "I" if a.kind == "B" else a.kind
        assert g.input_time(kind, a.stage, a.microbatch, end_f, end_i) == pytest.approx(expected), a


def test_a_compile_builds_each_baseline_once(monkeypatch):
    # the warm start builds the baselines on the compile's graph; the report, the result's
    # baselines and a later caller with that graph (the plot) reuse them
    from schedc.core import baselines

    built = []
    make = baselines.make_baseline

    def counting(name, *args, **kwargs):
        built.append(name)
        return make(name, *args, **kwargs)

    monkeypatch.setattr(baselines, "make_baseline", counting)
    p = Problem.build(4, 8, profile=Profile.uniform(4, comm=0.25), memory="1.25p")
    res = compile_problem(p, time_limit=3.0)
    assert built and len(built) == len(set(built))
    n = len(built)
    fitting = feasible_baselines(res.graph)
    assert len(built) == n  # nothing built again
    assert {name for name, _, _ in fitting} == {name for name, b in res.baselines.items() if b["fits"]}
    feasible_baselines(p)  # a bare Problem gets a graph, and baselines, of its own
    assert len(built) > n


# ---------------------------------------------------------------- work budgets (reproducible results)


def _work_compile(budget: str = "work"):
    """6 stages x 18 microbatches, span, slow links, 1.25p: CP-SAT and the integer program both
    run and stop on their budget (not proven), so every phase's limit shows in the result."""
    problem = Problem.build(6, 18, profile=Profile.uniform(6, comm=0.25), memory="1.25p", objective="span")
    return compile_problem(problem, time_limit=1.0, budget=budget)


def _files(res) -> tuple[str, str]:
    import json

    from schedc.io import csvio

    return csvio.to_csv_text(res.schedule), json.dumps(res.report, sort_keys=True)


def test_a_work_budget_gives_the_same_schedule_and_report_on_a_busy_machine():
    """The same inputs under `budget="work"` give byte-identical CSVs and reports whether or not
    another process keeps a core busy; the report says which budget ran and that the wall
    clock did not cut it."""
    import subprocess
    import sys

    quiet = _work_compile()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = _work_compile()
    finally:
        spinner.kill()
        spinner.wait()
    assert _files(quiet) == _files(busy)
    report = quiet.report
    assert report["budget"] == "work" and report["cut_by_wall_clock"] is False
    assert 0 < report["work_spent"] <= 1.0 + 0.5  # a solve may overrun its share by a little
    assert quiet.status != "optimal"  # the budget, not a proof, ended the search


def test_the_wall_clock_stays_the_default_and_an_unknown_budget_is_refused():
    problem = Problem.build(4, 8, memory="1p")
    res = compile_problem(problem, time_limit=5.0)
    assert res.budget == "time" and res.report["budget"] == "time" and "work_spent" not in res.report
    with pytest.raises(SchedcError, match="budget must be one of time, work; got 'cpu'"):
        compile_problem(problem, time_limit=5.0, budget="cpu")


def test_the_cli_and_the_python_api_offer_the_work_budget(tmp_path, capsys):
    import json

    import schedc
    from schedc.cli.toplevel import main

    out = tmp_path / "s.csv"
    assert main(["compile", "--stages", "4", "--mb", "8", "--time-limit", "5", "--deterministic", "--quiet",
                 "-o", str(out)]) == 0
    assert json.loads(out.with_suffix(".json").read_text())["budget"] == "work"
    assert "(reproducible)" in capsys.readouterr().out
    res = schedc.compile(stages=4, microbatches=8, time_limit=5, budget="work")
    assert res.report.to_dict()["budget"] == "work"
    with pytest.raises(SchedcError, match="budget"):
        schedc.compile(stages=4, microbatches=8, time_limit=5, budget="cpu")


def test_statuses_are_the_status_enum_and_reports_write_its_strings():
    """engine.Result.status and CompileResult.status are schedc.Status members (issue 37); the
    report still writes the plain strings."""
    import json

    from schedc.choices import Status

    problem = Problem.build(4, 8, memory="1p")
    res = compile_problem(problem, time_limit=5.0)
    assert res.status is Status.OPTIMAL and res.report["status"] == "optimal"
    assert json.loads(json.dumps(res.report))["status"] == "optimal"
    assert greedy.ZbGreedy().run(graph_of(problem), None, Deadline()).status is Status.FEASIBLE
    assert model.MipEngine(model.available_solver()).run(graph_of(problem), None, Deadline()).status is Status.NONE


def test_the_work_clock_moves_only_with_charged_work_and_nests():
    """Inside counting_work a Deadline expires by charged work, not by time passing; a nested
    counting_work (a plan compiling many problems) shares the outer clock."""
    import time

    from schedc.solver import deadline as dl

    with dl.counting_work(1.0) as clock:
        d = Deadline.after(0.5)
        time.sleep(0.6)
        assert not d.expired() and d.left() == pytest.approx(0.5)
        dl.charge(0.3)
        with dl.counting_work(5.0) as inner:
            assert inner is clock
            dl.charge(0.3)
        assert d.expired() and clock.spent == pytest.approx(0.6) and not clock.cut_by_wall
    assert dl.work_clock() is None and dl.now() == pytest.approx(time.monotonic(), abs=1.0)


def test_a_v_program_skipped_for_work_is_not_a_cut_by_the_wall_clock():
    """Under a work budget a V's dynamic program whose estimated seconds do not fit before its end
    on the work clock is skipped at once, uncharged; that is the same decision on any machine, so
    the plan stays reproducible (it was marked cut by the wall clock). One that fits is charged
    its estimate and runs."""
    from schedc.core.partition import v_bound_seconds
    from schedc.planning.clock import bounded_program
    from schedc.solver import deadline as dl
    from schedc.solver.interrupt import Cut

    estimate = v_bound_seconds(40, 8)
    with dl.counting_work(10.0) as clock:
        with pytest.raises(Cut):
            with bounded_program("v", 40, 8, end=dl.now() + 0.5 * estimate):
                pytest.fail("a program that does not fit its share must not run")
        assert clock.spent == 0.0 and not clock.cut_by_wall
        ran = False
        with bounded_program("v", 40, 8, end=dl.now() + 2 * estimate):
            ran = True
        assert ran and clock.spent == pytest.approx(estimate) and not clock.cut_by_wall
