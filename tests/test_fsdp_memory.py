"""What each rank holds under FSDP2 and torch's pipelining against the counted static bytes
(``unit_profile(dp_shard=2)``): torchtitan's debug Llama-3 in two stages, sharded by torchtitan's own
``apply_fsdp_to_decoder`` over the dp axis of a 2 x 2 (pp, dp) gloo mesh, run by torch's schedule
runtime from a zero-bubble CSV (benchmarks/memory_fidelity.py, ``fsdp_measure``)."""


import pytest
from _benchmarks import load_benchmark

torch = pytest.importorskip("torch")
pytest.importorskip("torchtitan")

# torch 2.15 produces a split W's gradient in the fp32 reduce dtype at once (fsdp_held): no bf16 copy
SPLIT_W_BF16_COPY = tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 15)


@pytest.fixture(scope="module")
def fidelity():
    return load_benchmark("memory_fidelity")


@pytest.fixture(scope="module")
def split_run(fidelity):
    return fidelity.fsdp_measure("zb-h1", layers=4, seq=16, timeout=90)


def test_each_rank_holds_its_stage_weights_unsharded_all_step(split_run):
    assert len(split_run) == 4
    for r in split_run:
        # bf16 compute copy of the whole stage from the first F (UNSHARD) on, fp32 sharded states
        assert r["first_unsharded"] == r["unsharded params"] == 2 * r["params"]
        assert r["sharded"] == (4 + 4 + 8) / 2 * r["params"]  # fp32 params, grads and two AdamW moments, / dp


def test_unsharded_gradients_accumulate_until_the_reduce_scatter(split_run):
    first, last = [next(r for r in split_run if r["pp"] == pp) for pp in (0, 1)]
    # before 2.15 a split W leaves its bf16 gradient beside the fp32 accumulator until the next
    # I's post-backward hook; from 2.15 on it comes in fp32 and is added to the one gradient
    assert last["unsharded grads"] == (4 + 2 * SPLIT_W_BF16_COPY) * last["params"]
    # torch's runtime runs the first stage's backward whole in W, whose hooks upcast at once
    assert first["unsharded grads"] == 4 * first["params"]


def test_the_count_is_what_a_split_stage_holds_and_bounds_the_first(split_run, fidelity):
    for r in split_run:
        assert r["per_param"] == 2 + 4 + 2 * SPLIT_W_BF16_COPY
        # the reduce-scatter's copy-in instants included: within the stage's last W's transient
        assert r["measured"] <= r["counted"] + r["transient"]
    last = [r for r in split_run if r["pp"] == 1]
    first = [r for r in split_run if r["pp"] == 0]
    if SPLIT_W_BF16_COPY:
        assert all(r["measured"] == pytest.approx(r["counted"], rel=1e-9) for r in last)
        assert all(r["counted"] - r["measured"] <= 2 * r["params"] for r in first)  # the bf16 slot it never fills
        return
    # from 2.15 the static count is exact on both stages, and each rises above it at the stage's
    # first reduce-scatter (REDUCE_GRAD goes through the FSDP groups last to first): that group's
    # fp32 input less its resharded bf16 weights; a later group's rise is offset by the gradients
    # the groups before it freed. The count takes the largest unit's, a bound
    model, _ = fidelity.fsdp_model(1)
    numel = lambda *modules: sum(p.numel() for m in modules for p in m.parameters())  # noqa: E731
    first_reduced = {0: numel(model.layers["0"]), 1: numel(model.norm, model.lm_head)}
    for r in split_run:
        assert r["measured"] == pytest.approx(r["counted"] + (4 - 2) * first_reduced[r["pp"]], rel=1e-9)
