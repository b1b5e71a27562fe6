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

``--measured PATH ...`` adds the points of files ``benchmarks/gpu_times.py --json`` wrote (per unit,
F, I and W; the embedding's F and W too, priced by :func:`schedc.model_costs.timing.embedding_ops`),
keyed by the file's device name (:func:`card_of`): an H100 80GB HBM3 or H200 joins the GH100 fit
above, any other card fits every rate of its own (no datasheet peak bounds them: a rate no point
bounds is printed unbounded); a point with routed experts adds their GEMM rate (``moe_gemm``). It
prints the refit, each point's residual, the largest residual per unit and action of the files'
points, and the DeviceRates lines to paste where the fit differs from the table.
Cost: under a second, and about 0.1 s per file point.

    python benchmarks/time_fit.py
    python benchmarks/time_fit.py --measured gpu_times.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import ac_choice  # noqa: E402

from schedc.core.device_rates import RATES, DeviceRates  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
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
        "moe_gemm": 989.4e12, "memory@h100-80gb": 3.35e12, "memory@h200": 4.8e12}
SCALE = {"launch": 1e-5, "launch_backward": 1e-5, "memory@h100-80gb": 1e-12, "memory@h200": 1e-12}  # near 1
UNIT = {"embedding": 0, "layer": 1, "head": -1}
KINDS = {"F": 0, "I": 1, "W": 2}
# torch.cuda.get_device_name() of the cards the table has; any other device fits rates of its own
CARD_OF_DEVICE = {"nvidia h100 80gb hbm3": "h100-80gb", "nvidia h200": "h200"}


def card_of(device: str) -> str:
    """The device_rates card a measured file's device name is: a card the table has, else the
    name itself, lower case, spaces as dashes (``NVIDIA B200`` -> ``b200``)."""
    key = " ".join(str(device).lower().split())
    return CARD_OF_DEVICE.get(key) or "-".join(key.removeprefix("nvidia ").split()) or "unnamed"


def rate_key(rate: str, card: str) -> str:
    """The unknown that is `card`'s `rate`: the GH100 cards (:data:`CARDS`) share every rate but
    memory; any other card has each of its own."""
    if rate == "memory":
        return f"memory@{card}"
    return rate if card in CARDS else f"{rate}@{card}"


def _scale(name: str) -> float:
    return SCALE.get(name, 1e-5 if name.startswith("launch") else 1e-12 if name.startswith("memory") else 1e-15)


def _write_config(config: dict, tmp: str) -> Path:
    path = Path(tmp) / "config.json"
    path.write_text(json.dumps(config))
    return path


def shape(model: str, config: Optional[dict] = None) -> ModelShape:
    with tempfile.TemporaryDirectory() as tmp:
        return ModelShape(**read_hf_config(_write_config(config or CONFIGS[model], tmp))).resolved()


def ops(model: str, unit: str, seq: int, config: Optional[dict] = None) -> tuple:
    """F, I, W work of `unit` as the count prices it (Hugging Face's code, CUDA, one sequence);
    `config`: the model's Hugging Face config where :data:`CONFIGS` has none (a measured file's)."""
    s = shape(model, config)
    if unit == "layer":
        return timing.layer_ops(s, "hf", "cuda", float(seq), float(seq))
    if unit == "embedding":
        return timing.embedding_ops(s, float(seq))
    return timing.head_ops(s, "hf", "cuda", float(seq))


def one_rate_ms(model: str, unit: str, seq: int, kind: str, config: Optional[dict] = None) -> float:
    """Today's one-rate count of a unit's pass, ms (``schedc profile --units --config C --names hf``)."""
    with tempfile.TemporaryDirectory() as tmp:
        u = unit_profile(_write_config(config or CONFIGS[model], tmp), seq=seq, names="hf").stages[UNIT[unit]]
    return 1000 * (u.forward, u.backward_input, u.backward_weight)[KINDS[kind]]


def measured_rows(paths) -> list[dict]:
    """The points of files benchmarks/gpu_times.py wrote (``--json``): per unit F, I and W (the
    embedding has no I), keyed by the file's device -> :func:`card_of`. A file that is not one
    is a SchedcError naming it."""
    out = []
    for path in paths:
        try:
            report = json.loads(Path(path).read_text())
            device, points = report["device"], report["points"]
            rows = [(p["model"], p["unit"], int(p["seq"]), p["config"], {k: float(v) for k, v in p["ms"].items()})
                    for p in points]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise SchedcError(f"--measured: {path} is not a file benchmarks/gpu_times.py --json wrote "
                              f"({type(err).__name__}: {str(err)[:80]}); give one it wrote") from None
        source = f"{path}: {device}, torch {report.get('torch', '?')}, transformers {report.get('transformers', '?')}"
        for model, unit, seq, config, ms in rows:
            if unit not in UNIT:
                raise SchedcError(f"--measured: {path} has unit {unit!r}; give a file benchmarks/gpu_times.py wrote")
            for kind in "FIW":
                if (kind == "I" and unit == "embedding") or not ms[kind] > 0:
                    continue  # the first stage runs no I; a time the clock did not resolve fits nothing
                out.append({"card": card_of(device), "model": model, "unit": unit, "seq": seq, "actions": kind,
                            "ms": ms[kind], "ratio": None, "source": source, "config": config})
    return out


def _builtin_rows() -> list[dict]:
    return [{"card": card, "model": model, "unit": unit, "seq": seq, "actions": actions, "ms": ms, "ratio": ratio,
             "source": source, "config": CONFIGS[model]}
            for card, model, unit, seq, actions, ms, ratio, source in MEASURED]


def unknowns(data: list[dict]) -> tuple:
    """The rates `data` fit: :data:`UNKNOWNS` (the GH100 cards), routed experts' GEMM rate where a
    point has them, and every rate of each other card."""
    cards = list(dict.fromkeys(p["card"] for p in data))
    moe = {p["card"] for p in data if p["moe"]}
    names = list(SHARED) + (["moe_gemm"] if moe & set(CARDS) else []) + [f"memory@{c}" for c in CARDS]
    for card in cards:
        if card not in CARDS:
            names += [rate_key(r, card) for r in SHARED + (("moe_gemm",) if card in moe else ())]
            names.append(f"memory@{card}")
    return tuple(names)


def points(extra: Sequence[dict] = ()) -> list[dict]:
    """Each measured point (:data:`MEASURED`, then `extra`, :func:`measured_rows`') with its ms
    (H200: derived from the ratio) and, per pass, its GPU terms and its host term (what multiplies
    each unknown), and as ``passes`` the rows of those over :func:`unknowns`. A point of `extra`
    replaces the :data:`MEASURED` one of the same card, unit, sequence and action: a file's
    time is measured, issue 50's H200 ones are derived from ratios."""
    out = []
    measured = {(r["card"], r["model"], r["unit"], r["seq"], r["actions"]) for r in extra}
    builtin = [r for r in _builtin_rows() if (r["card"], r["model"], r["unit"], r["seq"], r["actions"]) not in measured]
    for row in builtin + list(extra):
        card, model, unit, seq, actions = row["card"], row["model"], row["unit"], row["seq"], row["actions"]
        ms = row["ms"]
        if ms is None:
            counted = sum(one_rate_ms(model, unit, seq, k, row["config"]) for k in actions)
            ms = counted / row["ratio"]
        work = ops(model, unit, seq, row["config"])
        terms = []
        for kind in actions:
            gpu: dict[str, float] = {}
            for name, amount in timing.terms(work[KINDS[kind]], kind).items():
                if amount:
                    gpu[rate_key(name, card)] = gpu.get(rate_key(name, card), 0.0) + amount
            terms.append((gpu, {rate_key(timing.host_rate(kind), card): work[KINDS[kind]].kernels}))
        out.append({**row, "ms": ms, "moe": any(w.experts for w in work), "terms": terms})
    names = unknowns(out)
    for p in out:
        p["passes"] = [(np.array([gpu.get(u, 0.0) for u in names]), np.array([host.get(u, 0.0) for u in names]))
                       for gpu, host in p["terms"]]
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


def _solve(data: list[dict], names: tuple, x: np.ndarray, free: np.ndarray) -> np.ndarray:
    """The unknowns `x` with those `free` marks refitted to `data` (the rest held): with each pass
    taken as GPU- or host-bound at the current rates, one bounded linear least squares of the
    relative residuals (the inverse rates at least those of :data:`PEAK`), until no pass
    changes side."""
    scale = np.array([_scale(u) for u in names])[free]
    low = np.array([1 / PEAK[u] if u in PEAK else 0.0 for u in names])
    measured = np.array([p["ms"] / 1000 for p in data])
    x = x.copy()
    for _ in range(50):
        rows = np.array([sum(gpu if gpu @ x >= host @ x else host for gpu, host in p["passes"]) for p in data])
        a = rows / measured[:, None]
        held = a[:, ~free] @ x[~free]
        new = x.copy()
        new[free] = low[free] + nnls(a[:, free] * scale, np.ones(len(data)) - held - a[:, free] @ low[free]) * scale
        if np.allclose(new, x, rtol=1e-12, atol=0):
            break
        x = new
    return x


def fit(extra: Sequence[dict] = ()) -> tuple[dict, list[dict]]:
    """The fitted rates (FLOP/s, B/s; the launches in s per kernel) and the points with their
    fitted ms. Each pass is the longer of the GPU's seconds and the host's, so the fit alternates
    (:func:`_solve`), starting host-bound at short sequences (30 us per kernel). `extra`: measured
    files' points (:func:`measured_rows`), fitted with :data:`MEASURED`'s. Routed experts' GEMM
    rate is fitted after the rest, to the MoE points alone with every other rate held: the dense
    points decide the rates both kinds share, and an MoE layer's loop (its launches, its small
    GEMMs) does not pull them. A rate no point bounds is inf (a card without a datasheet peak
    here) or its peak."""
    data = points(extra)
    names = unknowns(data)
    x = np.array([30e-6 if u.startswith("launch") else 1 / 600e12 if u.startswith(("gemm", "attention", "moe")) else
                  1 / 3e12 for u in names])
    moe = np.array([u.startswith("moe_gemm") for u in names])
    dense = [p for p in data if not p["moe"]]
    x = _solve(dense, names, x, ~moe)
    if moe.any():
        x = _solve([p for p in data if p["moe"]], names, x, moe)
    for p in data:
        p["fit_ms"] = 1000 * predicted(p, x)
        p["residual"] = p["fit_ms"] / p["ms"] - 1
    rates = {u: (v if u.startswith("launch") else 1 / v if v > 0 else math.inf) for u, v in zip(names, x)}
    return rates, data


def _card_rate(rates: dict, rate: str, card: str) -> float:
    return rates[rate_key(rate, card)]


def _number(v: float) -> str:
    return f"{v:.4e}" if math.isfinite(v) else "None"  # None: no point bounds it (device_rates names it absent)


def table_lines(rates: dict, cards: Sequence[str] = CARDS) -> list[str]:
    """The DeviceRates lines of schedc/core/device_rates.py that carry `rates`, one entry per card."""
    out = []
    for card in cards:
        r = {f: _number(rates[rate_key(f, card)]) for f in SHARED + ("memory",)}
        moe = ""
        if rate_key("moe_gemm", card) in rates:  # at the peak no MoE point bounds it: absent, not a guess
            v = rates[rate_key("moe_gemm", card)]
            moe = f", moe_gemm={'None' if v >= PEAK['moe_gemm'] * (1 - 1e-6) else _number(v)}"
        out.append(f'    DeviceRates("{card}", gemm_f={r["gemm_f"]}, gemm_i={r["gemm_i"]}, '
                   f'gemm_w={r["gemm_w"]}, attention_f={r["attention_f"]},')
        out.append(f'                attention_b={r["attention_b"]}, memory={r["memory"]}, '
                   f'launch={r["launch"]},')
        out.append(f'                launch_backward={r["launch_backward"]}{moe}, source=_FIT, absent=_ABSENT),')
    return out


def table_rates(card: str, rates: dict) -> DeviceRates:
    """The fitted rates as the table's entry of `card`, rounded as :func:`table_lines` prints them."""
    r = {f: float(f"{_card_rate(rates, f, card):.4e}") for f in SHARED + ("memory",)}
    moe = rates.get(rate_key("moe_gemm", card))
    return DeviceRates(card, gemm_f=r["gemm_f"], gemm_i=r["gemm_i"], gemm_w=r["gemm_w"], attention_f=r["attention_f"],
                       attention_b=r["attention_b"], memory=r["memory"], launch=r["launch"],
                       launch_backward=r["launch_backward"], source="",
                       moe_gemm=None if moe is None else float(f"{moe:.4e}"))


def _shown(k: str, v: float) -> str:
    if not math.isfinite(v):
        return "unbounded: no point bounds it"
    if k.startswith("launch"):
        return f"{v * 1e6:.2f} us per kernel (host)"
    return f"{v / 1e12:.2f} TB/s" if k.startswith("memory") else f"{v / 1e12:.1f} TFLOP/s"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", action="store_true", help="print the DeviceRates lines of the fit")
    parser.add_argument("--measured", nargs="+", type=Path, metavar="PATH",
                        help="also fit the points of these benchmarks/gpu_times.py --json files (keyed by their device)")
    args = parser.parse_args(argv)
    try:
        extra = measured_rows(args.measured or ())
    except SchedcError as err:
        print(f"time_fit: {err}", file=sys.stderr)
        return 2
    rates, data = fit(extra)
    names = unknowns(data)
    print("Fit (least squares of relative residuals under the datasheet peaks; GH100 compute and host shared, HBM per card"
          + ("; any other card's rates its own" if set(p["card"] for p in data) - set(CARDS) else "") + "):")
    for k in names:
        v = rates[k]
        bound = " (at the card's peak: the data do not bound it)" if k in PEAK and v >= PEAK[k] * (1 - 1e-6) else ""
        print(f"  {k:<18} " + _shown(k, v) + bound)
    print()
    print("| card | unit | seq | action | measured ms | one-rate count ms | per-op fit ms | residual |")
    print("|---|---|---|---|---|---|---|---|")
    for p in data:
        counted = sum(one_rate_ms(p["model"], p["unit"], p["seq"], k, p["config"]) for k in p["actions"])
        how = "" if p["ratio"] is None else f" (= {counted:.3f} / {p['ratio']:.2f})"
        name = "I+W" if p["actions"] == "IW" else p["actions"]
        print(f"| {p['card']} | {p['model']} {p['unit']} | {p['seq']} | {name} | {p['ms']:.3f}{how} | "
              f"{counted:.3f} | {p['fit_ms']:.3f} | {100 * p['residual']:+.1f}% |")
    worst = max(abs(p["residual"]) for p in data)
    print(f"\nlargest residual {100 * worst:.1f}%; rms {100 * float(np.sqrt(np.mean([p['residual'] ** 2 for p in data]))):.1f}%")
    if extra:
        print("largest |residual| of the files' points, per unit and action: "
              + ", ".join(f"{k} {100 * v:.1f}%" for k, v in _worst_by_kind(data).items()))
    table = {card: table_rates(card, rates) for card in CARDS}
    same = all(getattr(table[c], f) == getattr(RATES[c], f) for c in CARDS for f in SHARED + ("memory", "moe_gemm"))
    print("schedc/core/device_rates.py carries this fit" if same else
          "schedc/core/device_rates.py differs from this fit: paste the lines of --table")
    cards = list(dict.fromkeys([*CARDS, *(p["card"] for p in data)]))
    if args.table or (extra and not same):
        if extra:
            print("# the lines to paste into RATES (and name the new data in _FIT's text: "
                  + ", ".join(str(m) for m in args.measured) + ")")
        print("\n".join(table_lines(rates, cards)))
    return 0


def _worst_by_kind(data: list[dict]) -> dict:
    """The largest |residual| of the measured files' points per unit and action (the builtin ones
    have ``source`` from :data:`MEASURED`)."""
    builtin = {row[-1] for row in MEASURED}
    out: dict = {}
    for p in data:
        if p["source"] not in builtin:
            key = f"{'MoE ' if p['moe'] else ''}{p['unit']} {p['actions']}"
            out[key] = max(out.get(key, 0.0), abs(p["residual"]))
    return out


if __name__ == "__main__":
    sys.exit(main())
