"""The per-operation rates of schedc.core.device_rates, fitted to the project's GPU measurements.

Problem: the counted route's per-op time model (:mod:`schedc.model_costs.timing`) needs, per
card, a GEMM rate per pass (F, dgrad, wgrad), flash attention's forward and backward rates, an
HBM rate and a time per kernel launch. The project has no per-op measurement, only whole-layer
times: it must not invent rates, and must say which the data determine.

Method: the data (:data:`MEASURED`), each a unit's pass (or I + W) in ms:

- H100 80GB HBM3, torch 2.11.0+cu130, Hugging Face Llama-3-8B layer (bf16, sdpa, one sequence per
  microbatch, no checkpointing): F and B = I + W of the split backward at seq 1024, 4096, 8192
  (docs/results.md, "On a GPU", the layer time table; benchmarks/gpu_layers.py, CUDA events).
- H200, issue 50's table at seq 4096: counted (``schedc profile --units --config``, one rate of
  400 TFLOP/s) over measured, per unit and action. The measured ms are today's one-rate count
  (:func:`one_rate_ms`, names hf) divided by that ratio: e.g. the Llama-3-8B layer's F counts
  5.154 ms, / 1.35 = 3.818 ms measured.

Each point's per-op seconds are linear in the rates' inverses (:func:`schedc.model_costs.timing.terms`),
so the fit is one linear least squares of the relative residuals (each row divided by its
measured time), non-negative (an active-set NNLS). Eight unknowns on fifteen points: the H100 and
H200 carry the same GH100 compute (132 SMs, the same tensor cores and clocks), so the GEMM rates,
the attention rates and the launch time are shared; the HBM rate is each card's. Alone, neither
card's data determine its rates: the H100's three sequences separate attention (s^2) from the
GEMMs and memory ops (s) and the launches (1), but not F's from I's and W's GEMMs nor the memory
rate from the GEMM rate; the H200's split I and W and its three units separate those, at one
sequence only. Prints the fit, each point counted against measured, and the largest residual;
``--table`` prints the DeviceRates lines schedc/core/device_rates.py carries.
Cost: under a second.

    python benchmarks/time_fit.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import ac_choice  # noqa: E402

from schedc.core.device_rates import RATES, DeviceRates  # noqa: E402
from schedc.model_costs import timing, unit_profile  # noqa: E402
from schedc.model_costs.shape import ModelShape, read_hf_config  # noqa: E402

CONFIGS = {"Llama-3-8B": ac_choice.CONFIGS["llama3-8b"], "Qwen2.5-7B": ac_choice.CONFIGS["qwen2.5-7b"]}
H100 = "H100 80GB HBM3, torch 2.11.0+cu130, docs/results.md 'On a GPU' (benchmarks/gpu_layers.py, CUDA events)"
H200 = "H200, issue 50 (CUDA events, median of 10): one-rate count at 400 TFLOP/s / the ratio"
# (card, model, unit, seq, actions, measured ms or None, counted/measured ratio or None, source)
MEASURED = [
    ("h100-80gb", "Llama-3-8B", "layer", 1024, "F", 1.45, None, H100),
    ("h100-80gb", "Llama-3-8B", "layer", 1024, "IW", 4.33, None, H100),
    ("h100-80gb", "Llama-3-8B", "layer", 4096, "F", 3.77, None, H100),
    ("h100-80gb", "Llama-3-8B", "layer", 4096, "IW", 7.84, None, H100),
    ("h100-80gb", "Llama-3-8B", "layer", 8192, "F", 7.85, None, H100),
    ("h100-80gb", "Llama-3-8B", "layer", 8192, "IW", 16.95, None, H100),
    ("h200", "Llama-3-8B", "layer", 4096, "F", None, 1.35, H200),
    ("h200", "Llama-3-8B", "layer", 4096, "I", None, 1.19, H200),
    ("h200", "Llama-3-8B", "layer", 4096, "W", None, 1.70, H200),
    ("h200", "Qwen2.5-7B", "layer", 4096, "F", None, 1.41, H200),
    ("h200", "Qwen2.5-7B", "layer", 4096, "I", None, 1.19, H200),
    ("h200", "Qwen2.5-7B", "layer", 4096, "W", None, 1.67, H200),
    ("h200", "Llama-3-8B", "head", 4096, "F", None, 1.10, H200),
    ("h200", "Llama-3-8B", "head", 4096, "I", None, 1.16, H200),
    ("h200", "Llama-3-8B", "head", 4096, "W", None, 1.73, H200),
]
SHARED = ("gemm_f", "gemm_i", "gemm_w", "attention_f", "attention_b", "launch", "launch_backward")
CARDS = ("h100-80gb", "h200")
UNKNOWNS = SHARED + tuple(f"memory@{card}" for card in CARDS)
# the most each card can do (NVIDIA's H100 and H200 SXM datasheets: 989.4 TFLOP/s dense BF16 tensor
# cores, HBM3 3.35 TB/s, HBM3e 4.8 TB/s): the fit keeps every rate under them
PEAK = {"gemm_f": 989.4e12, "gemm_i": 989.4e12, "gemm_w": 989.4e12, "attention_f": 989.4e12, "attention_b": 989.4e12,
        "memory@h100-80gb": 3.35e12, "memory@h200": 4.8e12}
SCALE = {"launch": 1e-5, "launch_backward": 1e-5, "memory@h100-80gb": 1e-12, "memory@h200": 1e-12}  # near 1
UNIT = {"layer": 1, "head": -1}
KINDS = {"F": 0, "I": 1, "W": 2}


def shape(model: str) -> ModelShape:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(CONFIGS[model]))
        return ModelShape(**read_hf_config(path)).resolved()


def ops(model: str, unit: str, seq: int) -> tuple:
    """F, I, W work of `unit` as the count prices it (Hugging Face's code, CUDA, one sequence)."""
    s = shape(model)
    if unit == "layer":
        return timing.layer_ops(s, "hf", "cuda", float(seq), float(seq))
    return timing.head_ops(s, "hf", "cuda", float(seq))


def one_rate_ms(model: str, unit: str, seq: int, kind: str) -> float:
    """Today's one-rate count of a unit's pass, ms (``schedc profile --units --config C --names hf``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(CONFIGS[model]))
        u = unit_profile(path, seq=seq, names="hf").stages[UNIT[unit]]
    return 1000 * (u.forward, u.backward_input, u.backward_weight)[KINDS[kind]]


def points() -> list[dict]:
    """Each measured point with its ms (H200: derived from the ratio) and, per pass, its GPU row
    and its host row (what multiplies each unknown)."""
    out = []
    for card, model, unit, seq, actions, ms, ratio, source in MEASURED:
        if ms is None:
            counted = sum(one_rate_ms(model, unit, seq, k) for k in actions)
            ms = counted / ratio
        work = ops(model, unit, seq)
        passes = []
        for kind in actions:
            gpu, host = dict.fromkeys(UNKNOWNS, 0.0), dict.fromkeys(UNKNOWNS, 0.0)
            for name, amount in timing.terms(work[KINDS[kind]], kind).items():
                gpu[f"memory@{card}" if name == "memory" else name] += amount
            host[timing.host_rate(kind)] = work[KINDS[kind]].kernels
            passes.append((np.array([gpu[u] for u in UNKNOWNS]), np.array([host[u] for u in UNKNOWNS])))
        out.append({"card": card, "model": model, "unit": unit, "seq": seq, "actions": actions, "ms": ms,
                    "ratio": ratio, "source": source, "passes": passes})
    return out


def predicted(p: dict, x: np.ndarray) -> float:
    """A point's seconds at unknowns `x`: per pass the longer of the GPU's and the host's."""
    return sum(max(float(gpu @ x), float(host @ x)) for gpu, host in p["passes"])


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min |a x - b| with x >= 0 (Lawson and Hanson's active set; a has few columns)."""
    n = a.shape[1]
    x, free = np.zeros(n), np.zeros(n, bool)
    for _ in range(3 * n):
        w = a.T @ (b - a @ x)
        if free.all() or (w[~free] <= 1e-12 * np.abs(w).max()).all():
            break
        free[np.argmax(np.where(free, -np.inf, w))] = True
        while True:
            z = np.zeros(n)
            z[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
            if (z[free] > 0).all():
                x = z
                break
            bad = free & (z <= 0)
            step = np.min(x[bad] / (x[bad] - z[bad]))
            x = x + step * (z - x)
            free &= x > 1e-30
    return x


def fit() -> tuple[dict, list[dict]]:
    """The fitted rates (FLOP/s, B/s; the launches in s per kernel) and the points with their
    fitted ms. Each pass is the longer of the GPU's seconds and the host's, so the fit alternates:
    with each pass taken as GPU- or host-bound at the current rates, one bounded linear least
    squares of the relative residuals (the inverse rates at least those of :data:`PEAK`), until
    no pass changes side. It starts host-bound at short sequences (30 us per kernel)."""
    data = points()
    scale = np.array([SCALE.get(u, 1e-15) for u in UNKNOWNS])
    low = np.array([1 / PEAK[u] if u in PEAK else 0.0 for u in UNKNOWNS])
    x = np.array([30e-6 if u.startswith("launch") else 1 / 600e12 if u.startswith(("gemm", "attention")) else
                  1 / 3e12 for u in UNKNOWNS])
    measured = np.array([p["ms"] / 1000 for p in data])
    for _ in range(50):
        rows = np.array([sum(gpu if gpu @ x >= host @ x else host for gpu, host in p["passes"]) for p in data])
        a = rows / measured[:, None]
        new = low + nnls(a * scale, np.ones(len(data)) - a @ low) * scale
        if np.allclose(new, x, rtol=1e-12, atol=0):
            break
        x = new
    for p in data:
        p["fit_ms"] = 1000 * predicted(p, x)
        p["residual"] = p["fit_ms"] / p["ms"] - 1
    rates = {u: (v if u.startswith("launch") else 1 / v) for u, v in zip(UNKNOWNS, x)}
    return rates, data


def table_lines(rates: dict) -> list[str]:
    out = []
    for card in CARDS:
        out.append(f'    DeviceRates("{card}", gemm_f={rates["gemm_f"]:.4e}, gemm_i={rates["gemm_i"]:.4e}, '
                   f'gemm_w={rates["gemm_w"]:.4e}, attention_f={rates["attention_f"]:.4e},')
        out.append(f'                attention_b={rates["attention_b"]:.4e}, memory={rates["memory@" + card]:.4e}, '
                   f'launch={rates["launch"]:.4e},')
        out.append(f'                launch_backward={rates["launch_backward"]:.4e}, source=_FIT, absent=_ABSENT),')
    return out


def table_rates(card: str, rates: dict) -> DeviceRates:
    """The fitted rates as the table's entry of `card`, rounded as :func:`table_lines` prints them."""
    r = {k: float(f"{v:.4e}") for k, v in rates.items()}
    return DeviceRates(card, gemm_f=r["gemm_f"], gemm_i=r["gemm_i"], gemm_w=r["gemm_w"], attention_f=r["attention_f"],
                       attention_b=r["attention_b"], memory=r["memory@" + card], launch=r["launch"],
                       launch_backward=r["launch_backward"], source="")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", action="store_true", help="print the DeviceRates lines of the fit")
    args = parser.parse_args(argv)
    rates, data = fit()
    print("Fit (least squares of relative residuals under the datasheet peaks; GH100 compute and host shared, HBM per card):")
    for k in UNKNOWNS:
        v = rates[k]
        bound = " (at the card's peak: the data do not bound it)" if k in PEAK and v >= PEAK[k] * (1 - 1e-6) else ""
        print(f"  {k:<18} " + (f"{v * 1e6:.2f} us per kernel (host)" if k.startswith("launch") else
                                f"{v / 1e12:.2f} TB/s" if k.startswith("memory") else f"{v / 1e12:.1f} TFLOP/s")
              + bound)
    print()
    print("| card | unit | seq | action | measured ms | one-rate count ms | per-op fit ms | residual |")
    print("|---|---|---|---|---|---|---|---|")
    for p in data:
        counted = sum(one_rate_ms(p["model"], p["unit"], p["seq"], k) for k in p["actions"])
        how = "" if p["ratio"] is None else f" (= {counted:.3f} / {p['ratio']:.2f})"
        name = "I+W" if p["actions"] == "IW" else p["actions"]
        print(f"| {p['card']} | {p['model']} {p['unit']} | {p['seq']} | {name} | {p['ms']:.3f}{how} | "
              f"{counted:.3f} | {p['fit_ms']:.3f} | {100 * p['residual']:+.1f}% |")
    worst = max(abs(p["residual"]) for p in data)
    print(f"\nlargest residual {100 * worst:.1f}%; rms {100 * float(np.sqrt(np.mean([p['residual'] ** 2 for p in data]))):.1f}%")
    table = {card: table_rates(card, rates) for card in CARDS}
    same = all(getattr(table[c], f) == getattr(RATES[c], f) for c in CARDS for f in SHARED + ("memory",))
    print("schedc/core/device_rates.py carries this fit" if same else
          "schedc/core/device_rates.py differs from this fit: paste the lines of --table")
    if args.table:
        print("\n".join(table_lines(rates)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
