"""The per-op time model (schedc.model_costs.timing) and its rate table (schedc.core.device_rates)."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import schedc
from schedc.core.device_rates import RATES, device_rates
from schedc.errors import SchedcError
from schedc.model_costs import timing
from schedc.model_costs.shape import ModelShape
from schedc.model_costs.units import layer_flops

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import time_fit  # noqa: E402

LLAMA = time_fit.CONFIGS["Llama-3-8B"]


@pytest.fixture(scope="module")
def fitted():
    return time_fit.fit()


def test_the_table_carries_the_fit_and_reproduces_every_point(fitted):
    rates, data = fitted
    worst = max(abs(p["residual"]) for p in data)
    assert worst < 0.05
    for card in time_fit.CARDS:
        table = time_fit.table_rates(card, rates)
        for field in time_fit.SHARED + ("memory",):
            assert getattr(RATES[card], field) == getattr(table, field), (card, field)
    # the count with the table's (rounded) rates meets each measured point within the fit's residual
    for p in data:
        work = time_fit.ops(p["model"], p["unit"], p["seq"])
        ms = 1000 * sum(timing.seconds(work[time_fit.KINDS[k]], k, RATES[p["card"]]) for k in p["actions"])
        assert abs(ms / p["ms"] - 1) <= worst + 1e-3, p


def test_the_count_with_gpu_prices_the_fitted_points(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    units = schedc.count_profile(path, seq=4096, names="hf", gpu="h200").stages
    layer, head = units[1], units[-1]
    for unit, measured in ((layer, (3.818, 4.909, 2.628)), (head, (9.781, 9.275, 6.219))):
        counted = (unit.forward, unit.backward_input, unit.backward_weight)
        assert all(abs(1000 * c / m - 1) < 0.05 for c, m in zip(counted, measured))


def test_w_is_gemm_only_and_causal_attention_halves_the_flops():
    s = ModelShape(**{"layers": 1, "hidden": 4096, "vocab": 1000, "heads": 32, "kv_heads": 8,
                      "ffn_hidden": 14336}).resolved()
    f, i, w = timing.layer_ops(s, "hf", "cuda", 4096.0, 4096.0)
    assert w.attention == 0 and w.bytes == 0 and w.gemm == f.gemm
    assert "attention_f" not in timing.terms(w, "W") and "attention_b" not in timing.terms(w, "W")
    _, one_rate_attention, _ = layer_flops(s, 4096.0, 4096.0)
    assert f.attention == one_rate_attention / 2
    assert i.attention == timing.FLASH_BACKWARD * f.attention
    # W's seconds do not move with the attention rates
    r = RATES["h200"]
    slow = replace(r, attention_f=r.attention_f / 10, attention_b=r.attention_b / 10)
    assert timing.seconds(w, "W", slow) == timing.seconds(w, "W", r)
    assert timing.seconds(i, "I", slow) > timing.seconds(i, "I", r)


def test_seconds_grow_with_the_sequence(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    last = None
    for seq in (256, 1024, 2048, 4096, 8192, 16384):
        u = schedc.count_profile(path, seq=seq, names="hf", gpu="h100").stages
        times = [t for unit in u for t in (unit.forward, unit.backward_input, unit.backward_weight)]
        if last is not None:
            assert all(a >= b for a, b in zip(times, last))
        last = times
    # short sequences are host-bound: the forward costs its kernels, not its FLOPs
    short = schedc.count_profile(path, seq=256, names="hf", gpu="h100").stages[1]
    assert short.forward == pytest.approx(39 * RATES["h100-80gb"].launch)


def test_the_default_route_is_the_one_rate_count(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    default = schedc.count_profile(path, seq=4096)
    given = schedc.count_profile(path, seq=4096, flops_per_second=400e12, memory_bandwidth=2e12)
    assert default.model_dump_json() == given.model_dump_json()
    s = ModelShape(**time_fit.read_hf_config(path)).resolved()
    linear, attention, _ = layer_flops(s, 4096.0, 4096.0)
    layer = default.stages[1]
    assert (layer.forward, layer.backward_input, layer.backward_weight) == \
        ((linear + attention) / 400e12, (linear + 2 * attention) / 400e12, linear / 400e12)
    assert default.assumes["time_model"].startswith("one rate: 400 TFLOP/s")
    h200 = schedc.count_profile(path, seq=4096, gpu="h200")
    assert h200.assumes["time_model"].startswith("h200 per-op rates (fit of")
    # memory is the same count either way
    assert [u.activation_bytes for u in h200.stages] == [u.activation_bytes for u in default.stages]


def test_unknown_gpu_and_unpriced_runs_are_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    with pytest.raises(SchedcError, match=r"^gpu: 'a100' has no rates .* give one of h100-80gb, h200") as e:
        schedc.count_profile(path, seq=4096, gpu="a100")
    assert "\n" not in str(e.value)
    moe = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "num_local_experts": 4,
           "num_experts_per_tok": 2}
    path.write_text(json.dumps(moe))
    with pytest.raises(SchedcError, match="no measured rate for routed experts"):
        schedc.count_profile(path, seq=128, gpu="h200")
    with pytest.raises(SchedcError, match="flash attention"):
        schedc.count_profile({"layers": 1, "hidden": 64, "vocab": 100, "heads": 4}, seq=8, dtype="float32", gpu="h200")
    assert device_rates(" H100 ") is RATES["h100-80gb"]


def test_moe_is_priced_where_a_table_has_its_rate():
    s = ModelShape(layers=1, hidden=256, vocab=1000, heads=4, kv_heads=2, family="mixtral", experts=4,
                   experts_per_token=2, moe_ffn_hidden=512).resolved()
    f, i, w = timing.layer_ops(s, "hf", "cuda", 1024.0, 1024.0)
    assert f.experts == 2 * 1024 * 2 * 3 * 256 * 512 and w.experts == f.experts
    rates = replace(RATES["h200"], moe_gemm=100e12)
    timing.check_rates(s, rates, "cuda")
    faster = replace(rates, moe_gemm=200e12, launch=0.0, launch_backward=0.0)
    slower = replace(rates, launch=0.0, launch_backward=0.0)
    assert timing.seconds(w, "W", faster) < timing.seconds(w, "W", slower)


def test_cli_profile_and_plan_take_gpu(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "num_hidden_layers": 2}))
    out = tmp_path / "p.json"
    cmd = [str(Path(sys.executable).parent / "schedc"), "profile", "--units", "--config", str(path), "--seq", "1024",
           "--gpu", "h200", "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text())
    assert written["assumes"]["time_model"].startswith("h200 per-op rates")
    bad = subprocess.run(cmd[:-4] + ["--gpu", "tpu", "-o", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode != 0 and bad.stderr.strip().count("\n") == 0 and "--gpu: 'tpu'" in bad.stderr
    plan = subprocess.run([str(Path(sys.executable).parent / "schedc"), "plan", "--config", str(path), "--seq", "1024", "--ranks",
                           "2", "--mb", "4", "--memory", "none", "--gpu", "h300", "-o", str(tmp_path / "p.csv")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert plan.returncode != 0 and "--gpu: 'h300' has no rates" in plan.stderr
