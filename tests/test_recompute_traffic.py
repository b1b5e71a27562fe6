"""The memory traffic of a checkpointed layer's recompute (schedc.model_costs.traffic) against what
the real layers' recompute moves (benchmarks/recompute_traffic.py at narrow sizes on CPU), and the
time it adds to I in unit_profile: light < selective < full."""


import pytest
from _benchmarks import load_benchmark

from schedc.model_costs import ModelShape, unit_profile
from schedc.model_costs.traffic import recompute_traffic

pytestmark = pytest.mark.filterwarnings("ignore:A saved_tensors_hooks context")
LLAMA_8B = dict(layers=4, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=128256, family="llama",
                seq=4096, impl="hf", device="cuda")


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return load_benchmark("recompute_traffic")


@pytest.mark.parametrize("model,impl,dtype", [
    ("Llama-3-8B", "hf", "bfloat16"), ("Qwen2.5-7B", "hf", "bfloat16"), ("Qwen3-8B", "hf", "bfloat16"),
    ("GPT-2", "hf", "bfloat16"), ("Mixtral-8x7B", "hf", "bfloat16"), ("Qwen3-30B-A3B", "hf", "bfloat16"),
    ("Llama-3-8B", "torchtitan", "bfloat16"), ("Qwen3-8B", "torchtitan", "bfloat16"),
    ("Qwen3-8B", "hf", "float32"), ("Qwen3-8B", "torchtitan", "float32")])
def test_counted_traffic_is_what_the_recompute_moves(bench, model, impl, dtype):
    import torch

    mf = bench._fidelity()
    sizes = mf.TT_SMALL if impl == "torchtitan" else mf.SMALL
    shape, by_mode = bench.measured(model, impl, sizes, 32, dtype=getattr(torch, dtype))
    for mode in ("light", "selective"):
        got, ops = by_mode[mode]
        assert got > 0 and ops
        assert bench.counted(shape, impl, mode) == pytest.approx(got, rel=0.02), (mode, ops)


def test_traffic_follows_device_dtype_and_mode():
    s = ModelShape(layers=1, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=100, family="llama").resolved()
    assert recompute_traffic(s, "hf", "cuda", "none") == 0.0
    assert recompute_traffic(s, "hf", "cuda", "light") == recompute_traffic(s, "hf", "cuda", "selective")
    # torchtitan's fused CUDA RMSNorm moves less than its CPU composite and than HF's eager norm
    assert recompute_traffic(s, "torchtitan", "cuda", "light") < recompute_traffic(s, "torchtitan", "cpu", "light")
    assert recompute_traffic(s, "torchtitan", "cuda", "light") < recompute_traffic(s, "hf", "cuda", "light")
    fp32 = ModelShape(**{**s.as_dict(), "dtype": "float32"})
    assert recompute_traffic(fp32, "hf", "cuda", "light") > recompute_traffic(s, "hf", "cuda", "light")
    with pytest.raises(ValueError, match="full recomputes the forward"):
        recompute_traffic(s, "hf", "cuda", "full")


def test_selective_i_adds_its_matmuls_and_its_traffic():
    none, sel = (unit_profile(**LLAMA_8B, activation_checkpoint=ac).stages[1] for ac in ("none", "selective"))
    s = ModelShape(layers=1, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=100, family="llama").resolved()
    matmuls = 2 * 4096 * (4096 * 1024 + 4096 * 4096 + 4096 * 14336) / 400e12  # W_k, W_o, up
    moved = recompute_traffic(s, "hf", "cuda", "selective") * 4096 / 2e12
    assert sel.backward_input == pytest.approx(none.backward_input + matmuls + moved)
    # per-op checkpointing runs B = I + W, which recomputes once: W is charged nothing again
    assert sel.backward_weight == pytest.approx(none.backward_weight)
    # half the bandwidth, twice the traffic's time
    slow = unit_profile(**LLAMA_8B, activation_checkpoint="selective", memory_bandwidth=1e12).stages[1]
    assert slow.backward_input - sel.backward_input == pytest.approx(moved)
    # tensor parallelism splits the recompute's tokens or heads as it splits the matmuls
    tp = unit_profile(**LLAMA_8B, activation_checkpoint="selective", tp=2).stages[1]
    tp_none = unit_profile(**LLAMA_8B, tp=2).stages[1]
    assert tp.backward_input - tp_none.backward_input == pytest.approx((matmuls + moved) / 2)


def test_a_recompute_never_costs_more_than_the_forward():
    crawl = dict(LLAMA_8B, memory_bandwidth=1e9)
    none, sel, full = (unit_profile(**crawl, activation_checkpoint=ac).stages[1] for ac in ("none", "selective", "full"))
    assert sel.backward_input == pytest.approx(none.backward_input + none.forward)
    assert sel.backward_input <= full.backward_input


@pytest.mark.parametrize("impl,family", [("hf", "llama"), ("hf", "qwen3"), ("torchtitan", "llama")])
def test_light_i_is_below_selective_below_full(impl, family):
    shape = dict(LLAMA_8B, impl=impl, family=family, head_dim=128)
    none, light, sel, full = (unit_profile(**shape, activation_checkpoint=ac).stages[1]
                              for ac in ("none", "light", "selective", "full"))
    assert none.backward_input < light.backward_input < sel.backward_input < full.backward_input
    s = ModelShape(**{k: v for k, v in shape.items() if k not in ("seq", "impl", "device")}).resolved()
    assert light.backward_input - none.backward_input == pytest.approx(
        recompute_traffic(s, impl, "cuda", "light") * 4096 / 2e12)
