"""Offload inside CP-SAT (schedc.solver.engines.cpsat_offload): the order and the offloads chosen
in one model find a shorter schedule that fits than the choosers on the hand-made orders, its
memory actions run as the CSV says, and ``--offload auto`` uses it on small problems only.

1F1B and the zero-bubble orders on 4 identical stages (F = I = W = 1 s, 1 byte of activation),
8 microbatches, at 0.8p: rank 0 holds 4 microbatches at 1F1B's peak; a copy of one microbatch
takes 2 s.
"""

import pytest

pytest.importorskip("ortools")

from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.core.costs import MemoryLimit, Profile  # noqa: E402
from schedc.core.host_link import HostLink  # noqa: E402
from schedc.core.memory_actions import check_memory_actions, to_json  # noqa: E402
from schedc.core.simulate import simulate  # noqa: E402
from schedc.solver.deadline import Deadline  # noqa: E402
from schedc.solver.engines.cpsat_offload import offload_cpsat  # noqa: E402
from schedc.solver.offload import CPSAT_SOURCE, best_offload, compile_schedule_offloading, cpsat_offload_runs  # noqa: E402
from schedc.solver.problem import Problem  # noqa: E402

PROFILE = Profile.uniform(4)
MEMORY = MemoryLimit.parse("0.8p")
LINK = HostLink(bandwidth=1 / 2.0, latency=0.0)
PROBLEM = Problem.build(4, 8, profile=PROFILE, memory=MEMORY)


def _choosers():
    found = best_offload([(n, make_baseline(n, 4, 8)) for n in ("1f1b", "zb-h1", "zb-h2")], PROBLEM, LINK)
    assert found is not None
    return found[1]


def test_the_order_and_the_offloads_together_beat_the_choosers_on_hand_made_orders():
    incumbent = _choosers()
    found = offload_cpsat(PROBLEM, LINK, incumbent, Deadline.after(30))
    assert found is not None and found.sim.fits
    assert found.sim.makespan < incumbent.sim.makespan
    assert any(a.action == "offload" for a in found.actions)
    # what the CSV and its memory actions run is what was found
    check_memory_actions(to_json(found.actions), found.schedule)
    again = simulate(found.schedule, PROFILE, MEMORY, memory_actions=to_json(found.actions), link=LINK)
    assert again.fits and again.makespan == found.sim.makespan
    # offload only adds waits: never below the uncapped order's step
    assert found.sim.makespan >= simulate(found.schedule, PROFILE, None).makespan


def test_it_answers_only_when_shorter_than_what_it_is_given():
    incumbent = _choosers()
    found = offload_cpsat(PROBLEM, LINK, incumbent, Deadline.after(30))
    again = offload_cpsat(PROBLEM, LINK, found, Deadline.after(30))
    assert again is None or again.sim.makespan < found.sim.makespan


def test_offload_auto_runs_it_on_small_problems_and_keeps_the_uncapped_bound():
    assert cpsat_offload_runs(PROBLEM)
    assert not cpsat_offload_runs(Problem.build(8, 32, profile=Profile.uniform(8), memory=MEMORY))
    res = compile_schedule_offloading(4, 8, LINK, profile=PROFILE, memory="0.8p", time_limit=10, budget="work")
    assert res.sim.fits and res.value <= _choosers().sim.makespan
    assert res.lower_bound <= res.value
    if res.report["offload"]["from_schedule"] == CPSAT_SOURCE:
        assert res.warm_start_source == CPSAT_SOURCE
        check_memory_actions(res.report["memory_actions"], res.schedule)
