"""CP-SAT engine against exhaustive search on tiny instances (torch's runtime model, where stage 0's I
is a 0-length action, and the ideal one): its schedules are valid and fit
memory, reach the exact optimum (makespan: its own answer, unhinted), and its bound, converted from
integer units, is never above the optimum (exact and inexact time units, both objectives)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from exhaustive import exact_optimum  # noqa: E402  (tests/exhaustive.py: the oracle these tests serve)

from schedc.core.costs import Profile, StageCost
from schedc.core.validate import problems
from schedc.errors import SchedcError
from schedc.solver.engines import cpsat
from schedc.solver.problem import Problem

TINY = [
    # (stages, mb, ranks, placement, profile, memory, objective)
    (3, 3, None, "loop", None, "1p", "makespan"),
    (3, 3, None, "loop", "hetero", "1p", "makespan"),
    (3, 3, None, "loop", "hetero", "0.67p", "makespan"),
    (2, 4, None, "loop", "hetero", "0.5p", "makespan"),
    (4, 2, 2, "v", "hetero", "1p", "makespan"),
    (4, 2, 2, "v", "i-frees-0", "0.75p", "makespan"),
    (3, 3, None, "loop", "hetero", "1p", "span"),
    (2, 4, None, "loop", "hetero", "none", "span"),
    (4, 2, 2, "v", "hetero", "1p", "span"),
]


def _profile(kind, n):
    if kind == "hetero":
        return Profile.edge_heavy(n)
    if kind == "i-frees-0":
        st = StageCost(forward=1, backward_input=1, backward_weight=1, activation_bytes=1.0, weight_grad_bytes=1.0)
        return Profile(stages=[st] * n)
    return None


def _problem(case):
    n, m, r, placement, prof, memory, objective = case
    return Problem.build(n, m, n_ranks=r, placement=placement, profile=_profile(prof, n), memory=memory,
                         objective=objective)


def _check_schedule(problem, sched, sim):
    assert problems(sched, problem.n_stages, problem.n_microbatches, problem.n_ranks, problem.placement) == []
    assert sim.fits


@pytest.mark.parametrize("case", TINY, ids=lambda c: "-".join(str(x) for x in c))
def test_cpsat_matches_exhaustive_optimum(case):
    problem = _problem(case)
    exact, _ = exact_optimum(problem)
    out = cpsat.solve_cpsat(problem, time_limit=10.0, hint=False, stop_at_bound=False)
    assert out.time_exact and out.memory_exact
    assert out.proven
    _check_schedule(problem, out.cp_schedule, out.cp_sim)
    _check_schedule(problem, out.schedule, out.sim)
    assert out.value == pytest.approx(exact, abs=1e-6)
    assert out.cp_bound <= exact + 1e-6
    if problem.objective == "makespan":
        # the model is exact for makespan: CP-SAT's own schedule is optimal, its bound tight
        assert out.cp_sim.makespan == pytest.approx(exact, abs=1e-6)
        assert out.cp_bound == pytest.approx(exact, abs=1e-6)
    else:
        # free first starts: a relaxation of simulate()'s earliest starts
        assert out.cp_value <= exact + 1e-6 <= out.cp_sim.span + 2e-6


@pytest.mark.parametrize("objective", ["makespan", "span"])
def test_inexact_time_unit_gives_a_conservative_bound(objective):
    # thirds are no decimal: durations are floored in a fine unit and the bound converted down
    stages = [StageCost(forward=1 / 3 * (1 + s), backward_input=0.37 / 3, backward_weight=2 / 7,
                        activation_bytes=1.0, weight_grad_bytes=0.5) for s in range(2)]
    problem = Problem.build(2, 3, profile=Profile(stages=stages, comm=1 / 30), memory="1p", objective=objective)
    exact, _ = exact_optimum(problem)
    out = cpsat.solve_cpsat(problem, time_limit=3.0, stop_at_bound=False)  # a bound at any time is valid
    assert not out.time_exact
    _check_schedule(problem, out.schedule, out.sim)
    assert out.value == pytest.approx(exact, rel=1e-9)
    assert out.cp_bound is not None and out.cp_bound <= exact + 1e-9
    if objective == "makespan":
        assert out.cp_bound >= 0.99 * exact  # flooring in a unit of 1/1000 of the shortest action costs little


def test_inexact_bytes_still_fit_and_claim_no_bound():
    stages = [StageCost(forward=1, backward_input=1, backward_weight=1, activation_bytes=1 / 3,
                        weight_grad_bytes=1 / 7) for _ in range(3)]
    problem = Problem.build(3, 4, profile=Profile(stages=stages), memory="0.67p")
    out = cpsat.solve_cpsat(problem, time_limit=10.0, hint=False, stop_at_bound=False)
    assert not out.memory_exact
    assert out.cp_bound is None
    _check_schedule(problem, out.cp_schedule, out.cp_sim)
    assert out.value >= exact_optimum(problem)[0] - 1e-9


def test_missing_ortools_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)
    with pytest.raises(SchedcError, match=r"pip install 'schedc\[cpsat\]'"):
        cpsat.solve_cpsat(Problem.build(2, 2), time_limit=1.0)


def test_compile_with_cpsat_certifies_and_reports():
    from schedc.solver import compile_schedule

    kw = dict(n_stages=4, n_microbatches=2, n_ranks=2, placement="v", profile=Profile.edge_heavy(4), memory="1p",
              objective="span")
    exact, _ = exact_optimum(Problem.build(**kw))
    res = compile_schedule(time_limit=10.0, solver="cpsat", **kw)
    assert res.sim.fits
    assert res.value == pytest.approx(exact, abs=1e-6)
    assert res.lower_bound <= exact + 1e-6
    assert res.report["inputs"]["solver"] == "cpsat"
    # the combinatorial bound stops short here; CP-SAT's free-start bound proves the span optimal
    assert res.status == "optimal"
    assert res.report["lower_bound_source"] == "cp-sat (proven optimal)"


@pytest.mark.parametrize("objective", ["makespan", "span"])
def test_cpsat_under_the_ideal_runtime(objective):
    # every stage's I takes time and frees memory (the paper's model), not only stage 0's W
    problem = Problem.build(3, 3, profile=Profile.edge_heavy(3), memory="0.67p", objective=objective, runtime="ideal")
    exact, _ = exact_optimum(problem)
    out = cpsat.solve_cpsat(problem, time_limit=10.0, hint=False, stop_at_bound=False)
    _check_schedule(problem, out.cp_schedule, out.cp_sim)
    assert out.value == pytest.approx(exact, abs=1e-6)
    assert out.cp_bound <= exact + 1e-6


def test_default_compile_polishes_with_cpsat_before_the_integer_program():
    from schedc.solver import compile_schedule

    # slow-ish links at 1.3p: the warm start takes 45.08; CP-SAT finds 45 in about 1 s (the
    # integer program alone: 7 s), the bound proves it, and the compile ends there
    res = compile_schedule(6, 12, profile=Profile.uniform(6, 1.0, 1.3, 0.7, comm=0.17), memory="1.3p",
                           time_limit=30.0)
    assert res.report["inputs"]["solver"] in ("highs+cpsat", "cbc+cpsat")
    progress = res.report["progress"]
    assert progress[0]["best"] > 45.05 and progress[1]["phase"] == "cp-sat done"
    assert res.status == "optimal" and res.value == pytest.approx(45)
    assert res.solve_time < 25


@pytest.mark.parametrize("values, unit", [
    ([1.0, 0.25, 2.0], 0.25),  # quarters: 0.25, not the decimal 0.01
    ([1.3, 1.1, 0.9, 0.1], 0.1),
    ([2.0, 4.0, 6.0], 2.0),
    ([0.5, 0.75], 0.25),
])
def test_the_time_unit_is_the_largest_that_divides_every_cost(values, unit):
    scale = cpsat.choose_time_scale(values)
    assert scale.exact and scale.unit == pytest.approx(unit)
    assert all(scale.floor(v) * scale.unit == pytest.approx(v) for v in values)


def test_byte_unit_divides_every_delta_and_keeps_the_cap_exact():
    scale = cpsat.choose_byte_scale([2e9, -1e9, 3e9, -4e9])
    assert scale.exact and scale.unit == pytest.approx(1e9)
    assert scale.floor(7.5e9) == 7  # a cap between two levels keeps the lower one


def test_a_vanishing_cost_does_not_overflow_the_time_scale():
    # a 1e-45 s link once gave CP-SAT a 1e48-unit horizon (a TypeError from its 64-bit domains)
    problem = Problem.build(2, 2, profile=Profile.uniform(2, 1.0, 1.0, 0.0, comm=1.401298464324817e-45),
                            memory="1p", objective="span")
    out = cpsat.solve_cpsat(problem, time_limit=5.0, hint=False, stop_at_bound=False)
    assert not out.time_exact and out.time_unit > 1e-12
    _check_schedule(problem, out.cp_schedule, out.cp_sim)


def test_ctrl_c_in_an_api_call_stops_cpsat_at_once():
    # outside the CLI (no stop_on_sigint) Ctrl-C during CP-SAT's native solve is a
    # KeyboardInterrupt as soon as the solver stops, not after its 60 s
    code = ("from schedc.solver import compile_schedule\nfrom schedc.core.costs import Profile\n"
            "compile_schedule(16, 48, profile=Profile.uniform(16, comm=0.25), memory='1.25p', time_limit=60, "
            "solver='cpsat')\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(6.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    # well under the 60 s the search would run without the stop; a loaded host takes more than 10 s
    assert time.monotonic() - sent < 30, f"took {time.monotonic() - sent:.1f}s to stop after Ctrl-C"
    assert proc.returncode != 0 and "KeyboardInterrupt" in err


def _weak_start(problem):
    """1F1B's orders in the model's vocabulary, simulated: a start the windows can improve."""
    from schedc.core import baselines
    from schedc.core.simulate import simulate
    from schedc.solver import graph

    inst = graph.graph_of(problem)
    weak = baselines.make_baseline("1f1b", problem.n_stages, problem.n_microbatches)
    orders = graph.canonical_orders(inst, graph.orders_from_schedule(inst, weak))
    sched = graph.schedule_from_orders(inst, orders)
    return inst, orders, sched, simulate(sched, problem.profile, problem.memory)


def _check_window_answer(problem, inst, orders, sim, free, out):
    """A window's answer is valid, fits, is no slower, and every action before its rank's window
    kept its start (whatever it waits for finished in time)."""
    from schedc.core.simulate import simulate
    from schedc.solver import graph

    assert out is not None
    new_sched = graph.schedule_from_orders(inst, out)
    new_sim = simulate(new_sched, problem.profile, problem.memory)
    _check_schedule(problem, new_sched, new_sim)
    assert new_sim.makespan <= sim.makespan + 1e-9
    for r, (lo, _) in enumerate(free):
        for i in orders[r][:lo]:
            assert new_sim.timings[inst.actions[i]].start == pytest.approx(sim.timings[inst.actions[i]].start)


@pytest.mark.parametrize("stale_seconds", [None, 0.5])
def test_cpsat_window_moves_only_the_window_and_never_loses(stale_seconds):
    problem = Problem.build(4, 8, profile=Profile.edge_heavy(4), memory="1p")
    inst, orders, _, sim = _weak_start(problem)
    free = [(4, 12)] * problem.n_ranks
    out = cpsat.solve_window(problem, inst, orders, sim, free, time_limit=5.0, workers=2, stale_seconds=stale_seconds)
    assert out is not None
    for r, row in enumerate(out):
        assert row[:4] == orders[r][:4] and row[12:] == orders[r][12:]
        assert sorted(row[4:12]) == sorted(orders[r][4:12])
    _check_window_answer(problem, inst, orders, sim, free, out)


@pytest.mark.parametrize("shear", [1.0, -1.0, 3.0, -3.0])
def test_slanted_cpsat_window_keeps_what_lies_before_it(shear):
    # slanted one forward hop per rank (as the search slants them), a window keeps every
    # producer of a fixed action fixed too; slanted more steeply it frees some producer that a
    # fixed action on the next rank waits for, which must then still finish in time for it
    from schedc.solver.engines.windows import _forward_hop, _window_at

    problem = Problem.build(4, 8, profile=Profile.uniform(4, comm=0.25), memory="1.25p")
    inst, orders, _, sim = _weak_start(problem)
    hop = _forward_hop(problem)
    assert hop == pytest.approx(1.25)
    free = _window_at(inst, orders, sim, 8.0, 6.0, shear * hop)
    starts = [[sim.timings[inst.actions[i]].start for i in row] for row in orders]
    for r, (lo, hi) in enumerate(free):
        t_r = 8.0 + shear * hop * (r - 1.5)
        assert all(s < t_r for s in starts[r][:lo]) and all(t_r <= s < t_r + 6.0 for s in starts[r][lo:hi])
    assert len({lo for lo, _ in free}) > 1  # the window is really slanted
    fixed = {i for r, (lo, _) in enumerate(free) for i in orders[r][:lo]}
    freed_producers = [a for b in fixed for a, _ in inst.preds[b] if a not in fixed]
    assert bool(freed_producers) == (abs(shear) > 1)
    out = cpsat.solve_window(problem, inst, orders, sim, free, time_limit=5.0, workers=2)
    _check_window_answer(problem, inst, orders, sim, free, out)


@pytest.mark.parametrize("objective", ["makespan", "span"])
def test_cpsat_window_search_improves_a_weak_start(objective):
    from schedc.solver.engines.windows import window_search

    problem = Problem.build(4, 12, profile=Profile.uniform(4, comm=0.25), memory="1.25p", objective=objective)
    inst, orders, sched, sim = _weak_start(problem)
    reports = []
    orders2, sched2, sim2, used = window_search(inst, problem, orders, sched, sim, time.monotonic() + 6.0, "cpsat",
                                                0.0, lambda best, what: reports.append((best, what)), seed=0)
    assert used and reports
    _check_schedule(problem, sched2, sim2)
    assert sim2.objective(objective) < sim.objective(objective) - 1e-6


def test_window_search_focuses_where_it_gained_until_that_is_exhausted(monkeypatch):
    # a fake window solver that improves once, in the second half of the timeline: the windows
    # after it stay where it gained until a whole cycle there finds nothing; then the search
    # sweeps all of the timeline again, and stops when that finds nothing either
    from schedc.core import baselines
    from schedc.solver import graph
    from schedc.solver.engine import materialize
    from schedc.solver.engines import windows as driver

    problem = Problem.build(4, 12, profile=Profile.uniform(4, comm=0.25), memory="1.25p")
    inst, orders, sched, sim = _weak_start(problem)
    better = baselines.make_baseline("zb-h1", 4, 12)
    better_orders = graph.canonical_orders(inst, graph.orders_from_schedule(inst, better))
    windows, gains = [], []  # (t, length, step time) of every window placed; (t, length) of the gain
    window_at = driver._window_at

    def recording_window_at(inst, orders, sim, t, length, shear=0.0):
        windows.append((t, length, sim.makespan))
        return window_at(inst, orders, sim, t, length, shear)

    def fake_solver(inst, problem, engine, lb):
        def solve(orders, sim, value, free, seconds, seed):
            t, length, end = windows[-1]
            if not gains and t >= end / 2:
                gains.append((t, length))
                return better_orders
            return None
        return solve

    monkeypatch.setattr(driver, "_window_at", recording_window_at)
    monkeypatch.setattr(driver, "_window_solver", fake_solver)
    t0 = time.monotonic()
    _, _, sim2, used = driver.window_search(inst, problem, orders, sched, sim, t0 + 60.0, "cpsat",
                                            0.0, lambda best, what: None, seed=0)
    assert time.monotonic() - t0 < 30  # it stopped on its own: nothing more to find
    _, better_sim = materialize(inst, better_orders, problem)
    assert used and sim2.makespan == pytest.approx(better_sim.makespan) and better_sim.makespan < sim.makespan
    (t_gain, length), = gains
    focus_from = t_gain - length
    after = [t for t, _, _ in windows[[w[0] for w in windows].index(t_gain) + 1:]]
    first_outside = next(i for i, t in enumerate(after) if t < focus_from - 1e-9)
    n_cycle = len(driver.WINDOW_SIZES["cpsat"]) * len(driver.WINDOW_OFFSETS)
    assert first_outside >= n_cycle  # at least one window per focused sweep of a whole cycle
    assert min(after) < 0  # then the whole timeline again, edges included


def test_the_first_solution_does_not_reset_the_stale_clock():
    # CP-SAT's first solution is the hint (9 s to complete on a 16x48 model): only solutions
    # after it are news
    class FakeSolver:
        stopped_at = None

        def stop_search(self):
            self.stopped_at = time.monotonic()

    for news_after in (None, 0.8):
        solver = FakeSolver()
        t0 = time.monotonic()
        with cpsat._stop_when_stale(solver, 1.0) as on_solution:
            on_solution.on_solution_callback()  # the hint
            if news_after is not None:
                time.sleep(news_after)
                on_solution.on_solution_callback()
            while solver.stopped_at is None and time.monotonic() - t0 < 10:
                time.sleep(0.05)
        assert solver.stopped_at is not None
        waited = solver.stopped_at - t0
        if news_after is None:
            assert 1.0 <= waited < 2.5
        else:
            assert news_after + 1.0 <= waited < news_after + 2.5


def test_stale_cpsat_search_stops_long_before_its_time_limit():
    # 12 stages on slow links: CP-SAT keeps searching without proving; the stale rule ends it
    problem = Problem.build(12, 36, profile=Profile.uniform(12, comm=0.25), memory="1.25p")
    t0 = time.monotonic()
    out = cpsat.solve_cpsat(problem, time_limit=60.0, workers=2, stale_seconds=1.0)
    assert time.monotonic() - t0 < 30
    assert not out.proven
    _check_schedule(problem, out.schedule, out.sim)
