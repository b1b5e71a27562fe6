"""plan_limiter calls a step memory-bound by comparing with the uncapped problem: the claim is that
more memory shortens the step, so planning again with the uncapped schedule's peak as the cap must
give (about) the uncapped step. Two ways the old test (room for one more microbatch on some rank,
hand-made schedules only) got it wrong: a shorter order that needs more than one microbatch's room,
and an uncapped order only schedc's heuristic finds."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from schedc.core.cost_model import fits  # noqa: E402
from schedc.plan import plan  # noqa: E402
from schedc.plan.limiter import HEURISTIC, plan_limiter  # noqa: E402
from schedc.solver.deadline import counting_work  # noqa: E402
from test_plan import tiny_units  # noqa: E402

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
