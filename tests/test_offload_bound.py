"""The bound that holds with offload (schedc.core.offload_bound): never above the exact optimum
under the cap (a schedule without memory actions is one with offload), never above a step found
with offload and recompute, at least the bound without a cap, and it rises where the cap binds:
a stage whose forward cannot keep one microbatch must recompute, and a slow link leaves the
byte-seconds on the device.

Uniform stages (F = I = W = 1 s, one unit of activation per microbatch) on 2-4 ranks; the
checkpointed form keeps a tenth of it and recomputes for 0.25 s (tests/test_cpsat_offload.py's).
"""

import math

import pytest
from exhaustive import exact_optimum  # tests/exhaustive.py: the exact search
from test_plan_offload import RANKS, M, units  # the tiny per-unit model

from schedc.core.costs import MemoryLimit, Profile
from schedc.core.host_link import HostLink
from schedc.core.offload_bound import offload_partition_bound
from schedc.core.partition import partition_bound
from schedc.errors import SchedcError
from schedc.planning.ac import checkpointed_form
from schedc.solver.offload import HELD_SOURCE, compile_schedule_offloading, offload_stage_bound
from schedc.solver.problem import Problem

FAST = HostLink(bandwidth=100.0, latency=0.0)  # a copy of one microbatch: 0.01 s
SLOW = HostLink(bandwidth=0.25, latency=0.0)  # 4 s: longer than most gaps a microbatch is held
GiB = 2**30


def _checkpointed(profile: Profile) -> Profile:
    raw = profile.model_copy(update={"stages": [
        s.model_copy(update={"backward_input": s.backward_input + 0.25, "activation_bytes": 0.1 * s.activation_bytes,
                             "weight_grad_bytes": 0.1 * s.activation_bytes}) for s in profile.stages]})
    return checkpointed_form(raw, profile)


@pytest.mark.parametrize("n_stages,n_mb", [(2, 3), (3, 3), (2, 4)])
@pytest.mark.parametrize("memory", ["0.5p", "0.75p", "1p"])
@pytest.mark.parametrize("link", [FAST, SLOW], ids=["fast", "slow"])
@pytest.mark.parametrize("held", [0.0, 0.5])
def test_the_bound_never_exceeds_the_exact_optimum_under_the_cap(n_stages, n_mb, memory, link, held):
    profile = Profile.uniform(n_stages, held_fraction=held)
    problem = Problem.build(n_stages, n_mb, profile=profile, memory=memory)
    bound = offload_stage_bound(problem, link, _checkpointed(profile))
    uncapped, _ = exact_optimum(problem.with_memory(MemoryLimit(kind="none")), use_bounds=False)
    try:
        optimum, _ = exact_optimum(problem, use_bounds=False)
    except SchedcError:  # the cap holds less than one microbatch per stage: nothing to compare
        return
    assert bound <= optimum + 1e-9
    # at least the part of the bound without a cap that the partition alone gives
    assert bound >= partition_bound(profile, n_stages, n_mb).value - 1e-9
    assert uncapped <= optimum + 1e-9


@pytest.mark.parametrize("memory", ["0.25p", "0.5p", "0.75p"])
@pytest.mark.parametrize("link", [FAST, SLOW], ids=["fast", "slow"])
def test_the_bound_never_exceeds_a_step_found_with_offload_and_recompute(memory, link):
    profile = Profile.uniform(4, held_fraction=0.0)
    checkpointed = _checkpointed(profile)
    res = compile_schedule_offloading(4, 8, link, profile=profile, memory=memory, time_limit=4, budget="work",
                                      checkpointed=checkpointed)
    assert res.sim.fits
    bound = offload_stage_bound(res.problem, link, checkpointed)
    assert 0 < bound <= res.value + 1e-9
    assert res.lower_bound <= res.value + 1e-9
    assert res.report["lower_bound_details"]["offload_memory_bound"] == bound


def test_a_stage_whose_forward_cannot_keep_one_microbatch_pays_for_its_recompute():
    # 0.2p is 0.8 of a microbatch per rank: every forward must drop 0.2 of its bytes, at 0.25 s
    # per 0.9 dropped, 8 times on every rank
    profile = Profile.uniform(4, held_fraction=0.0)
    problem = Problem.build(4, 8, profile=profile, memory="0.2p")
    assert offload_stage_bound(problem, SLOW) == math.inf  # offload alone cannot: no schedule fits
    bound = offload_stage_bound(problem, SLOW, _checkpointed(profile))
    free = partition_bound(profile, 4, 8).value
    assert bound >= free + 8 * 0.2 * 0.25 / 0.9 - 1e-9
    res = compile_schedule_offloading(4, 8, SLOW, profile=profile, memory="0.2p", time_limit=4, budget="work",
                                      checkpointed=_checkpointed(profile))
    assert res.sim.fits and bound <= res.value + 1e-9
    assert res.report["lower_bound_source"] == HELD_SOURCE
    assert res.lower_bound == pytest.approx(min(bound, res.value))


def test_the_bound_over_partitions_rises_as_the_link_slows_and_is_the_uncapped_one_without_a_cap():
    profile = units()
    free = partition_bound(profile, RANKS, M).value
    assert offload_partition_bound(profile, [], RANKS, M, math.inf, bandwidth=1e9).value == pytest.approx(free)
    values = [offload_partition_bound(profile, [], RANKS, M, 7 * GiB, bandwidth=b).value
              for b in (math.inf, 50e9, 1e9, 0.1e9)]
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:]))
    assert values[0] >= free - 1e-12 and values[-1] > values[0]


@pytest.mark.parametrize("memory", ["7GiB", "9GiB"])
@pytest.mark.parametrize("bandwidth", [0.5e9, 50e9])
@pytest.mark.parametrize("placement", ["loop", "v"])
def test_the_bound_over_partitions_never_exceeds_the_plan_with_offload(memory, bandwidth, placement):
    from schedc.planning.ac import plan_mode
    from schedc.planning.offload import plan_offload
    from schedc.solver.deadline import counting_work

    without = plan_mode(units(), None, None, ranks=RANKS, microbatches=M, memory=memory, placement=placement,
                        time_limit=3, budget="work")
    with counting_work(3):
        res = plan_offload(without, HostLink(bandwidth=bandwidth), 3, {"offload only": without.units})
    raw = offload_partition_bound(units(), [], RANKS, M, MemoryLimit.parse(memory).value, placement,
                                  bandwidth=HostLink(bandwidth=bandwidth).per_gpu_bandwidth).value
    assert raw <= res.value + 1e-9
    assert res.bound == pytest.approx(min(raw, res.value))
    # the capped bound without offload may be above it: offload relaxes the cap
    assert raw <= without.value + 1e-9
