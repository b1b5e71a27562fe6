"""plan_limiter calls a step memory-bound by comparing with the uncapped problem: the claim is that
more memory shortens the step, so planning again with the uncapped schedule's peak as the cap must
give (about) the uncapped step. Two ways the old test (room for one more microbatch on some rank,
hand-made schedules only) got it wrong: a shorter order that needs more than one microbatch's room,
and an uncapped order only schedc's heuristic finds. The message names a cap and claims nothing about
other microbatch counts: with more microbatches the step per microbatch can beat the uncapped one."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402
from test_plan import tiny_units  # noqa: E402

from schedc.core.cost_model import fits  # noqa: E402
from schedc.planning import parse_cap, plan  # noqa: E402
from schedc.planning.limiter import HEURISTIC, plan_limiter  # noqa: E402
from schedc.solver.deadline import counting_work  # noqa: E402

GiB = 2**30


def _plan(units, ranks: int, microbatches: int, memory: str):
    return plan(profile=units, ranks=ranks, microbatches=microbatches, memory=memory, placement="v",
                time_limit=1, budget="work")


def _at_the_uncapped_peak(units, ranks: int, microbatches: int, tight):
    cap = math.ceil(tight.limiter.uncapped_peak / GiB * 4) / 4  # a quarter GiB above it at most
    return _plan(units, ranks, microbatches, f"{cap}GiB")


def test_memory_binds_though_every_rank_has_room_for_one_more_microbatch():
    units = tiny_units(n_layers=6, head=1.0, comm=1.0)
    tight = _plan(units, 4, 8, "11GiB")
    problem, sim = tight.compiled.problem, tight.compiled.sim
    room = [fits(sim.peak_memory[r] + max(problem.costs.activation(s) for s in problem.costs.stages_of(r)),
                 sim.memory_limit[r]) for r in range(problem.n_ranks)]
    assert all(room)  # the next shorter order needs more than one microbatch more
    assert tight.limiter.kind == "memory" and tight.report["plan"]["limiter"]["kind"] == "memory"
    assert "more memory per rank" in tight.limiter.message
    more = _at_the_uncapped_peak(units, 4, 8, tight)
    assert more.value <= tight.limiter.uncapped_step * (1 + 1e-9) < tight.value * 0.99
    assert more.limiter.kind != "memory"


def test_schedc_heuristic_with_no_cap_counts_where_every_hand_made_schedule_is_longer():
    units = tiny_units(n_layers=6, head=1.0)
    tight = _plan(units, 2, 6, "12GiB")
    assert tight.limiter.kind == "memory" and HEURISTIC in tight.limiter.message
    more = _at_the_uncapped_peak(units, 2, 6, tight)
    assert more.value <= tight.limiter.uncapped_step * (1 + 1e-9) < tight.value * 0.99


def test_the_limiter_charges_nothing_to_the_work_clock():
    tight = _plan(tiny_units(n_layers=6, head=1.0), 2, 6, "12GiB")
    with counting_work(10.0) as clock:
        again = plan_limiter(tight)
        assert clock.spent == 0.0
    assert again == tight.limiter


@pytest.mark.parametrize("layout,ranks,microbatches,cap,fitted", [
    ({"comm": 1.0}, 4, 8, "11GiB", "it"),  # the shortest uncapped schedule is also the least memory's
    ({}, 2, 6, "11GiB", "that one"),  # a shorter one than the plan needs less memory than the shortest
])
def test_the_memory_message_names_a_cap_that_gives_the_step_it_names(layout, ranks, microbatches, cap, fitted):
    units = tiny_units(n_layers=6, head=1.0, **layout)
    tight = _plan(units, ranks, microbatches, cap)
    message = tight.limiter.message
    assert tight.limiter.kind == "memory" and "more microbatches" not in message
    given, what, count = re.search(r"more memory per rank shortens the step: --memory (\S+) or more fits (.+), "
                                   r"at the same (\d+) microbatches$", message).groups()
    assert what == fitted and int(count) == microbatches
    percent = re.findall(r"([\d.]+)% shorter", message)[-1]  # the fitted schedule's: the last one named
    peak = re.findall(r"at a peak of (\S+?)[;,]", message)[-1]
    assert len(re.findall(r"% shorter", message)) == (2 if fitted == "that one" else 1)
    # the cap is that schedule's peak, rounded up in the last printed digit
    assert parse_cap(peak).value <= parse_cap(given).value < parse_cap(peak).value + 0.011 * GiB
    roomy = _plan(units, ranks, microbatches, given)
    assert roomy.value <= tight.value * (1 - float(percent) / 100 + 5e-4) < tight.value * 0.99


def test_more_microbatches_under_the_same_cap_can_beat_the_uncapped_step_per_microbatch():
    # why the message claims nothing about microbatches: at 4 times as many, under the same cap,
    # fill and drain weigh less and a microbatch costs less than in the uncapped schedule at 8
    units = tiny_units(n_layers=6, head=1.0, comm=1.0)
    tight = _plan(units, 4, 8, "11GiB")
    assert tight.limiter.kind == "memory"
    more = _plan(units, 4, 32, "11GiB")
    assert more.value / 32 < tight.limiter.uncapped_step / 8 and more.value > tight.value


def test_with_no_cap_memory_is_never_the_limit_and_nothing_is_simulated_again(monkeypatch):
    # at thousands of microbatches simulating every hand-made schedule again took longer than the
    # search: with no cap the plan's problem is the uncapped one
    import schedc.planning.limiter as limiter_module

    free = _plan(tiny_units(n_layers=6, head=1.0), 2, 6, "none")
    monkeypatch.setattr(limiter_module, "uncapped_schedules",
                        lambda *a, **k: pytest.fail("simulated the uncapped problem under no cap"))
    again = plan_limiter(free)
    assert again == free.limiter and again.kind in ("rank", "critical-path")
    assert again.uncapped_step is None and again.message
