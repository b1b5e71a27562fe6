"""Every phase of a compile is a row of schedc.solver.compile's tables, run by one loop.

A new engine is one row: inserted into PHASES it runs for its share of the time left, from the
best so far, and its answer is adopted by the row's policy; a bound that meets the best ends the
compile, whichever row found it (the warm start proven by the combinatorial bound builds no
action graph).
"""

import re

import pytest

from schedc.core.baselines import make_baseline
from schedc.core.costs import Profile
from schedc.core.simulate import simulate
from schedc.solver import compile as driver
from schedc.solver.deadline import now
from schedc.solver.engine import found
from schedc.solver.graph import Graph
from schedc.solver.problem import Problem


class Recording:
    """An engine of the protocol (schedc.solver.engine) that answers one given schedule and
    records what the driver handed it."""

    name = "recording"

    def __init__(self, schedule, problem):
        self.schedule, self.problem, self.calls = schedule, problem, []

    def run(self, graph, incumbent, deadline):
        self.calls.append((graph, incumbent, deadline))
        return found(self.schedule, simulate(self.schedule, self.problem.profile, self.problem.memory))


def _weak_start(problem):
    """1F1B as the given warm start: 33 units where ZB-H1 takes 27 (4 stages x 8 at 1p)."""
    sched = make_baseline("1f1b", problem.n_stages, problem.n_microbatches)
    return sched, simulate(sched, problem.profile, problem.memory), "1f1b"


def test_a_new_engine_is_one_row_run_for_its_share_and_adopted(monkeypatch):
    problem = Problem.build(4, 8, memory="1p")
    engine = Recording(make_baseline("zb-h1", 4, 8), problem)
    later = Recording(make_baseline("zb-h1", 4, 8), problem)
    seen = {}

    def build(c):
        seen.update(t=now(), deadline=c.deadline, best=c.best_val)
        return engine

    rows = (driver.engine_phase("zb-h1 as an engine", build, lambda c: 0.3),
            driver.engine_phase("never: its predicate", lambda c: later, lambda c: 1.0, when=lambda c: False),
            driver.engine_phase("never: proven before it", lambda c: later, lambda c: 1.0))
    monkeypatch.setattr(driver, "PHASES", rows + driver.PHASES)
    res = driver.compile_problem(problem, time_limit=5, warm=_weak_start(problem), budget="work")

    assert len(engine.calls) == 1 and later.calls == []
    graph, incumbent, deadline = engine.calls[0]
    assert graph is res.graph  # the action graph of step 4
    # IN_ORDER: it starts from the best so far, here the 1F1B of 33 relabelled by step 4 (RELABELLED)
    assert incumbent.value("makespan") == seen["best"] == 30.0
    assert deadline.at == pytest.approx(seen["t"] + 0.3 * (seen["deadline"] - seen["t"]))  # its share of the time left
    # its answer is adopted, meets the combinatorial bound, and that ends the compile
    assert (res.value, res.lower_bound, res.status, res.warm_start_source) == (27.0, 27.0, "optimal", "1f1b")
    assert res.sim.makespan == simulate(engine.schedule, problem.profile, problem.memory).makespan
    assert [e["phase"] for e in res.report["progress"]] == ["warm start (1f1b)", "zb-h1 as an engine"]


def test_a_row_that_does_not_certify_leaves_the_bound(monkeypatch):
    problem = Problem.build(4, 8, memory="1p")
    engine = Recording(make_baseline("zb-h1", 4, 8), problem)

    class Claiming(Recording):
        def run(self, graph, incumbent, deadline):
            out = super().run(graph, incumbent, deadline)
            out.bound, out.bound_source = 40.0, "claimed"  # above the optimum: not a bound at all
            return out

    claiming = Claiming(engine.schedule, problem)
    monkeypatch.setattr(driver, "PHASES", (driver.engine_phase("claims", lambda c: claiming, lambda c: 0.2),))
    res = driver.compile_problem(problem, time_limit=3, warm=_weak_start(problem), budget="work")
    assert len(claiming.calls) == 1
    assert (res.value, res.lower_bound, res.report["lower_bound_source"]) == (27.0, 27.0, "combinatorial")


@pytest.mark.parametrize("memory,profile,rank_row", [
    ("1p", None, False),  # ZB-H1 meets the chains' bound: the one-rank relaxation does not run either
    ("0.5p", Profile.uniform(4, comm=0.5), True),  # 51 against chains' 48: the one-rank relaxation proves it
])
def test_a_bound_that_meets_the_warm_start_ends_the_compile(monkeypatch, memory, profile, rank_row):
    lowered = []
    lower = Graph.lower
    monkeypatch.setattr(Graph, "lower", lambda g: lowered.append(g) or lower(g))
    problem = Problem.build(4, 8, memory=memory, profile=profile)
    res = driver.compile_problem(problem, time_limit=5, budget="work")
    assert res.status == "optimal" and res.value == res.lower_bound
    assert lowered == []  # no action graph: no row of PHASES ran
    assert ("one_rank_relaxation" in res.report["lower_bound_details"]) == rank_row
    assert [e["phase"] for e in res.report["progress"]] == [f"warm start ({res.warm_start_source})"]


def test_the_module_docstring_numbers_the_rows():
    steps = re.findall(r"^(\d+)\. ([A-Za-z -]+?)[:(]", driver.__doc__, re.MULTILINE)
    names = [name.strip().lower() for _, name in steps]
    assert [int(n) for n, _ in steps] == list(range(1, len(steps) + 1))
    assert names == [p.name for p in driver.START + driver.PHASES]
