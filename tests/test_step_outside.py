"""The step around the actions (schedc.model_costs.step): the optimizer, FSDP2's collectives and
the links, counted per unit and recorded in assumes; the plan's step with them added."""

import pytest

import schedc
from schedc.core.device_rates import device_rates
from schedc.core.settings import RunSettings
from schedc.errors import SchedcError
from schedc.model_costs import unit_profile
from schedc.model_costs.profile import count_units
from schedc.model_costs.step import step_with_extras, unshard_counts

# h 64, q 64 (4 heads x 16), k 32 (2 kv heads), SwiGLU 128: a layer's weights and its two norms
SHAPE = {"layers": 2, "hidden": 64, "vocab": 100, "heads": 4, "kv_heads": 2, "ffn_hidden": 128, "dtype": "bfloat16"}
LAYER = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128 + 2 * 64


def _step(**run):
    return unit_profile(**SHAPE, seq=8, **run).assumes["step_outside_actions"]


def test_adamws_step_is_its_foreach_bytes_over_the_memory_bandwidth():
    rec = _step()
    # bf16 weights with an fp32 master: lerp/mul/addcmul/sqrt/div/add/addcdiv + weight decay read and
    # write 4 master, 3 gradient and 14 state elements of 4 bytes, and the copy back reads 4, writes 2
    per = 4 * 4 + 3 * 4 + 14 * 4 + (4 + 2)
    assert rec["optimizer_bytes_per_element"] == per
    assert rec["elements_per_unit"][1] == pytest.approx(LAYER)
    assert rec["optimizer_seconds"][1] == pytest.approx(per * LAYER / 2e12)
    assert rec["grad_scale_seconds"][1] == pytest.approx(2 * 4 * LAYER / 2e12)
    assert rec["optimizer_kernels_per_unit"] == [8] * 4
    sgd = unit_profile(**{**SHAPE, "dtype": "float32"}, seq=8, optimizer="sgd").assumes["step_outside_actions"]
    assert sgd["optimizer_bytes_per_element"] == 2 * 4 + 4 and sgd["optimizer_kernels_per_unit"] == [1] * 4
    assert unit_profile(**SHAPE, seq=8, optimizer="none").assumes["step_outside_actions"]["optimizer_seconds"] == \
        [0.0] * 4


def test_sharding_divides_the_optimizer_and_adds_the_collectives():
    one, four = _step(), _step(dp_shard=4)
    assert [x / 4 for x in one["optimizer_seconds"]] == pytest.approx(four["optimizer_seconds"])
    assert one["all_gather_seconds"] == one["reduce_scatter_seconds"] == [0.0] * 4
    assert four["all_gather_seconds"][1] == pytest.approx(3 / 4 * 2 * LAYER / 50e9 + 10e-6)  # bf16 weights
    assert four["reduce_scatter_seconds"][1] == pytest.approx(3 / 4 * 4 * LAYER / 50e9 + 10e-6)  # fp32 gradients
    slow = _step(dp_shard=4, dp_bandwidth=5e9, dp_latency=0.0)
    assert slow["reduce_scatter_seconds"][1] == pytest.approx(3 / 4 * 4 * LAYER / 5e9)
    # FSDP2 at degree 1 (torchtitan wraps at every degree) gathers nothing
    assert _step(fsdp=True)["reduce_scatter_seconds"] == [0.0] * 4


def test_assumes_records_the_inputs_and_the_times_do_not_move():
    base = unit_profile(**SHAPE, seq=8)
    other = unit_profile(**SHAPE, seq=8, dp_bandwidth=1e9, dp_latency=1.0)
    assert base.stages == other.stages and base.comm == other.comm
    rec = other.assumes["step_outside_actions"]
    assert (rec["dp_bandwidth"], rec["dp_latency"], rec["memory_bandwidth"], rec["launch_seconds"]) == (1e9, 1.0, 2e12, 0)
    p2p = rec["p2p"]
    assert p2p["boundary_bytes"] == 2 * 8 * 64 and p2p["counted"]["seconds"] == pytest.approx(base.comm)
    assert p2p["within_node"]["bandwidth"] == 450e9 and p2p["across_nodes"]["bandwidth"] == 1e9
    h200 = device_rates("h200")
    rated = count_units(None, RunSettings(seq=8, gpu="h200"), **SHAPE).assumes["step_outside_actions"]
    assert (rated["memory_bandwidth"], rated["launch_seconds"]) == (h200.memory, h200.launch)
    # a small layer's 8 foreach launches take longer than its bytes
    assert rated["optimizer_seconds"][1] == pytest.approx(8 * h200.launch)
    with pytest.raises(SchedcError, match=r"^dp_bandwidth must be a finite number > 0, got 0"):
        unit_profile(**SHAPE, seq=8, dp_bandwidth=0)
    with pytest.raises(SchedcError, match=r"^dp_latency must be a finite number >= 0, got -1"):
        unit_profile(**SHAPE, seq=8, dp_latency=-1)


def test_unshards_follow_torchs_lowering():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    for order in ([0, 0, 3, 3, 0, 3], [0, 1, 2, 3, 0, 1, 2, 3, 3, 2], [5, 1, 5, 2, 7, 1, 2, 5, 7, 7]):
        lowered = schedules._add_unshard_reshard([schedules._Action(s, schedules.F, 0) for s in order])
        torch_counts: dict = {}
        for a in lowered:
            if a.computation_type == schedules.UNSHARD:
                torch_counts[a.stage_index] = torch_counts.get(a.stage_index, 0) + 1
        assert unshard_counts(order) == torch_counts


def test_the_step_adds_the_largest_ranks_optimizer_and_exposed_collectives():
    rec = {"optimizer_seconds": [1.0, 2.0, 3.0, 4.0], "grad_scale_seconds": [0.0] * 4,
           "all_gather_seconds": [0.1, 0.2, 0.3, 0.4], "reduce_scatter_seconds": [0.5] * 4}
    # one unit per stage in a V on 2 ranks: rank 0 holds stages 0 and 3 and runs 0 first
    out = step_with_extras(10.0, {"step_outside_actions": rec}, [1, 1, 1, 1], [[0, 3, 3, 0], [1, 2, 2, 1]])
    assert out is not None
    assert out["per_rank"][0]["extra"] == pytest.approx(1 + 4 + 1.0 + 0.1)
    assert out["per_rank"][1]["extra"] == pytest.approx(2 + 3 + 1.0 + 0.2)
    assert (out["rank"], out["seconds"]) == (1, pytest.approx(16.2))
    assert step_with_extras(10.0, {}, [1, 1], [[0], [1]]) is None


def test_the_plans_report_has_the_step_with_the_optimizer_and_collectives():
    units = unit_profile(**SHAPE, seq=8, dp_shard=4)
    res = schedc.plan(profile=units, ranks=2, microbatches=4, memory="none", time_limit=3)
    out = res.report["plan"]["step_with_optimizer_and_collectives"]
    rec, counts = units.assumes["step_outside_actions"], res.counts
    starts = [sum(counts[:k]) for k in range(len(counts))]
    extra = []
    for rank in range(2):
        order = [a.stage for a in res.schedule.actions(rank)]
        mine = sorted(set(order))
        units_of = [u for st in mine for u in range(starts[st], starts[st] + counts[st])]
        first = range(starts[order[0]], starts[order[0]] + counts[order[0]])
        extra.append(sum(rec["optimizer_seconds"][u] + rec["grad_scale_seconds"][u] + rec["reduce_scatter_seconds"][u]
                         for u in units_of) + sum(rec["all_gather_seconds"][u] for u in first))
    assert out["step"] == res.value and out["seconds"] == pytest.approx(res.value + max(extra))
    assert out["seconds"] > res.value
    measured = units.model_copy(update={"assumes": None})
    assert schedc.plan(profile=measured, ranks=2, microbatches=4, memory="none",
                       time_limit=3).report["plan"]["step_with_optimizer_and_collectives"] is None
