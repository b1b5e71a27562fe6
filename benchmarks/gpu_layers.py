"""Counted vs measured per layer on a CUDA GPU: bytes by the allocator, seconds by CUDA events.

Problem: ``benchmarks/memory_fidelity.py`` and ``benchmarks/recompute_traffic.py`` check the
counted route (``schedc.model_costs.unit_profile``) on CPU, where CPU's kernels stand in for
CUDA's; the CUDA-only terms (flash attention's saved tensors, the matmul workspaces) and the
effective rates the times assume (``flops_per_second``, ``memory_bandwidth``) can only be read on
a GPU. This builds Hugging Face transformers' decoder layers (as NeMo AutoModel trains them) at
real sizes on the GPU, in bfloat16, with a real sequence, and for each checkpointing mode
(``schedc.runtime.checkpointing.checkpoint_block``, what ``load_pipeline`` applies):

- bytes: ``torch.cuda.memory_allocated`` around F, the split I (``stage_backward_input``) and W
  (``stage_backward_weight``), and ``max_memory_allocated`` inside each (the transient above
  what is held), and B's peak (a whole backward), with memory_fidelity's conventions (the unit's
  output and the given output gradient excluded, the input included when saved, the parameters'
  gradients existing before, as every microbatch after a step's first finds them);
- seconds: the median over repeats of F, I, W and the whole backward B (per-op modes: B only,
  torch's split backward cannot go twice through them), against ``unit_profile(device="cuda")``
  at its default rates; from them, F's effective FLOP rate and each mode's recompute (its B less
  none's B), counted vs measured.

``--json PATH`` also writes the measured bytes per unit and mode, which ``benchmarks/plan_rewalk.py
--measured PATH`` re-walks a plan with. ``--ledger`` also measures with memory_fidelity's op
ledger (the storages ops create) and prints it where it differs from the allocator: a difference
there is a kernel's workspace, not a tensor.

Cost: per model, one build (a layer, the embedding and the head at real size) and, per mode, a
few F/I/W runs: a few minutes on an H100 for the default models at seq 4096.

    python benchmarks/gpu_layers.py                      # every model, every mode, seq 4096
    python benchmarks/gpu_layers.py --models Llama-3-8B --modes none light --seq 2048
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Optional

import torch
from torch.distributed.pipelining._backward import stage_backward, stage_backward_input, stage_backward_weight

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import memory_fidelity as mf  # noqa: E402

from schedc.core.costs import AC_MODES, PER_OP_AC  # noqa: E402
from schedc.io.fileio import atomic_write_text  # noqa: E402
from schedc.model_costs import unit_profile  # noqa: E402
from schedc.planning.ac import checkpointed_form  # noqa: E402

MODELS = ("Llama-3-8B", "Qwen2.5-7B", "Mistral-7B", "Qwen3-8B", "GPT-2", "Qwen3-30B-A3B", "Mixtral-8x7B",
          "Qwen1.5-MoE-A2.7B")
# real sizes too large for the CPU benchmark's share of RAM, at home on a GPU
mf.HF.setdefault("Mixtral-8x7B", ("mixtral", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                                  num_key_value_heads=8, vocab_size=32000, num_local_experts=8,
                                                  num_experts_per_tok=2)))
mf.HF.setdefault("Qwen1.5-MoE-A2.7B", ("qwen2_moe", dict(hidden_size=2048, intermediate_size=5632,
                                                         moe_intermediate_size=1408,
                                                         shared_expert_intermediate_size=5632,
                                                         num_attention_heads=16, num_key_value_heads=16,
                                                         vocab_size=151936, num_experts=60, num_experts_per_tok=4)))
MiB = 2.0 ** 20


def _sync_alloc() -> int:
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def measure_bytes(unit: mf.Unit) -> dict[str, float]:
    """memory_fidelity.measure's quantities, read from the CUDA allocator (workspaces included)."""
    params = list(unit.module.parameters())
    for p in params:  # static bytes, as every microbatch after a step's first finds them: W adds into them
        p.grad = torch.zeros_like(p)
    x = unit.make_input()
    key, saved = x.untyped_storage().data_ptr(), []

    def pack(t):
        if t.untyped_storage().data_ptr() == key:
            saved.append(True)
        return t

    with _no_gc():
        base = _sync_alloc()
        torch.cuda.reset_peak_memory_stats()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = unit.forward(x)
        after = _sync_alloc()
        out = y.untyped_storage().nbytes() if y.numel() > 1 else 0
        extra = x.untyped_storage().nbytes() if saved or unit.keeps_input else 0
        got = {"after F": after - base - out + extra, "F transient": torch.cuda.max_memory_allocated() - after}
        dy = torch.randn_like(y) if y.numel() > 1 else None
        if unit.first:  # no I (torch skips it on the first stage): W runs the whole backward
            before_w = _sync_alloc()
            torch.cuda.reset_peak_memory_stats()
            torch.autograd.backward([y], [dy])
            return {**got, "I..W": got["after F"], "I transient": 0.0,
                    "W transient": torch.cuda.max_memory_allocated() - before_w}
        before_i = _sync_alloc()
        torch.cuda.reset_peak_memory_stats()
        _, groups = stage_backward_input([y], [dy] if dy is not None else None, [x], iter(params))
        held = _sync_alloc()
        got["I..W"] = held - before_i + (after - base) - out + extra
        got["I transient"] = torch.cuda.max_memory_allocated() - held
        torch.cuda.reset_peak_memory_stats()
        try:
            stage_backward_weight(iter(params), groups)
        except RuntimeError as err:  # a per-op checkpoint allows one backward per region
            if "backward an extra time" not in str(err):
                raise
            return {**got, "I..W": math.nan, "W transient": math.nan}
        got["W transient"] = torch.cuda.max_memory_allocated() - held
        return got


def measure_b_bytes(unit: mf.Unit) -> float:
    """B's transient from the allocator: a whole backward's peak above what F left (the
    gradients existing before, as memory_fidelity.measure_b takes them)."""
    params = list(unit.module.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)
    x = unit.make_input()
    with _no_gc():
        y = unit.forward(x)
        dy = torch.randn_like(y) if y.numel() > 1 else None
        before = _sync_alloc()
        torch.cuda.reset_peak_memory_stats()
        stage_backward([y], [dy] if dy is not None else None, [x])
        return float(torch.cuda.max_memory_allocated() - before)


@contextlib.contextmanager
def _no_gc():
    """No garbage collection inside a measurement: it would free an earlier model's cycles
    against this one."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def measure_seconds(unit: mf.Unit, split: bool, repeats: int) -> dict[str, float]:
    """Median seconds of F, and of I and W (split) or B (the whole backward)."""
    params = list(unit.module.parameters())
    times: dict[str, list[float]] = {}
    for r in range(repeats + 1):  # the first round warms the kernels and the allocator up
        x = unit.make_input()
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        marks[0].record()
        y = unit.forward(x)
        marks[1].record()
        dy = torch.randn_like(y)
        marks[2].record()
        kinds = ["F"]
        if split:
            _, groups = stage_backward_input([y], [dy], [x], iter(params))
            marks[3].record()
            last = torch.cuda.Event(enable_timing=True)
            stage_backward_weight(iter(params), groups)
            last.record()
            marks.append(last)
            kinds += ["I", "W"]
        else:
            torch.autograd.backward(y, dy)
            marks[3].record()
            kinds += ["B"]
        torch.cuda.synchronize()
        spans = [marks[0].elapsed_time(marks[1])] + [marks[i].elapsed_time(marks[i + 1]) for i in range(2, len(marks) - 1)]
        if r:
            for k, ms in zip(kinds, spans):
                times.setdefault(k, []).append(ms / 1e3)
        for p in params:
            p.grad = None
    out = {k: statistics.median(v) for k, v in times.items()}
    if split:
        out["B"] = out["I"] + out["W"]
    return out


def layer(name: str, seq: int, mode: str) -> tuple[list[mf.Unit], mf.Unit, dict]:
    units, extra = mf.hf_units(name, mf.HF, seq, device="cuda")
    unit = units[1]
    if mode != "none":
        from schedc.runtime.checkpointing import checkpoint_block

        wrapped, call = checkpoint_block(unit.module, mode), unit.call
        unit = mf.Unit(unit.name, unit.module, unit.make_input, lambda x: call(wrapped, x), keeps_input=True)
    return units, unit, {**mf.shape_of(mf.HF, name), **extra}


def rows_for(name: str, seq: int, modes, repeats: int, ledger: bool = False) -> list[tuple]:
    """(model, mode, quantity, counted, measured) for the layer in each mode, and the embedding
    and the head (mode none); with `ledger`, the op ledger's numbers where they differ from the
    allocator's by over 1%."""
    if mf.HF[name][0] == "gpt2":  # learned positions: at most n_positions tokens
        seq = min(seq, 1024)
    out = []
    seconds: dict[str, dict] = {}
    counted_s: dict[str, object] = {}
    for mode in modes:
        units, unit, shape = layer(name, seq, mode)
        profile = unit_profile(**shape, seq=seq, impl="hf", device="cuda", activation_checkpoint=mode)
        c = mf._quantities(profile.stages[1])
        try:
            measure_bytes(unit)  # warm-up: cuBLAS workspaces, autotuning
            got = measure_bytes(unit)
            got_b = measure_b_bytes(unit)
            secs = measure_seconds(unit, split=mode not in PER_OP_AC, repeats=repeats)
        except (RuntimeError, torch.OutOfMemoryError) as err:
            out.append((name, f"layer, {mode}", "failed", math.nan, f"{type(err).__name__}: {str(err)[:80]}"))
            continue
        out.extend((name, f"layer, {mode}", q, c[q], got[q]) for q in mf.QUANTITIES if not math.isnan(got[q]))
        whole = checkpointed_form(profile, unit_profile(**shape, seq=seq, impl="hf", device="cuda")).stages[1]
        out.append((name, f"layer, {mode}", "B transient", whole.transient("B"), got_b))
        if ledger:  # the same quantities from the storages ops create (memory_fidelity's ledger): where
            # it agrees with the count and the allocator does not, the difference is a kernel's workspace
            lg = mf.measure(unit)
            out.extend((name, f"layer, {mode}", f"{q} (op ledger)", c[q], lg[q]) for q in mf.QUANTITIES
                       if not math.isnan(lg[q]) and abs(lg[q] - got[q]) > 0.01 * max(got[q], c[q], 1.0))
        st = profile.stages[1]
        counted_t = {"F": st.forward, "I": st.backward_input, "W": st.backward_weight,
                     "B": st.backward_input + st.backward_weight}
        out.extend((name, f"layer, {mode}", f"{k} seconds", counted_t[k], v) for k, v in secs.items())
        seconds[mode], counted_s[mode] = secs, counted_t
        if mode == "none":
            for u, cq in zip((units[0], units[2]), (profile.stages[0], profile.stages[-1])):
                measure_bytes(u)
                got_u, cu = measure_bytes(u), mf._quantities(cq)
                out.extend((name, u.name, q, cu[q], got_u[q]) for q in mf.QUANTITIES if not math.isnan(got_u[q]))
        del units, unit
        torch.cuda.empty_cache()
    out.extend(_derived(name, seq, seconds, counted_s))
    return out


def _derived(name: str, seq: int, seconds: dict, counted_s: dict) -> list[tuple]:
    """The rates the counted times assume, as the GPU delivers them: F's effective FLOP rate and
    each mode's recompute (its B over none's B), counted vs measured."""
    out = []
    if "none" not in seconds:
        return out
    default_rate = unit_profile.__kwdefaults__["flops_per_second"]
    flops = counted_s["none"]["F"] * default_rate
    out.append((name, "layer, none", "F TFLOP/s", default_rate / 1e12, flops / seconds["none"]["F"] / 1e12))
    for mode in seconds:
        if mode == "none":
            continue
        extra_c = counted_s[mode]["B"] - counted_s["none"]["B"]
        extra_m = seconds[mode]["B"] - seconds["none"]["B"]
        out.append((name, f"layer, {mode}", "recompute seconds (B - none's B)", extra_c, extra_m))
    return out


def show(rows: list[tuple]) -> None:
    print(f"{'model':<15} {'unit':<18} {'quantity':<34} {'counted':>12} {'measured':>12} {'c/m':>7}")
    for model, unit, q, c, m in rows:
        if isinstance(m, str):
            print(f"{model:<15} {unit:<18} {q:<34} {m}")
            continue
        scale, unit_label = (1e3, "ms") if "seconds" in q else ((1.0, "") if "TFLOP" in q else (1 / MiB, "MiB"))
        ratio = f"{c / m:.3f}" if m else "-"
        print(f"{model:<15} {unit:<18} {q:<34} {c * scale:>10.2f}{unit_label:>2} {m * scale:>10.2f}{unit_label:>2} "
              f"{ratio:>7}", flush=True)


def measured_units(rows: list[tuple]) -> dict:
    """The measured bytes of `rows` (:func:`rows_for`), as benchmarks/plan_rewalk.py reads them:
    ``{unit: {mode: {quantity: bytes}}}``, unit "layer", "embedding" or "norm+head+loss" (the
    last two without checkpointing)."""
    out: dict = {}
    for _, label, quantity, _, measured in rows:
        if quantity not in (*mf.QUANTITIES, "B transient") or isinstance(measured, str):
            continue
        unit, _, mode = label.partition(", ")
        out.setdefault(unit, {}).setdefault(mode or "none", {})[quantity] = float(measured)
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(mf.HF))
    ap.add_argument("--modes", nargs="+", default=list(AC_MODES), choices=list(AC_MODES))
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ledger", action="store_true", help="also measure with memory_fidelity's op ledger")
    ap.add_argument("--json", type=Path, help="also write the measured bytes per unit here (benchmarks/plan_rewalk.py "
                                              "--measured reads it)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_layers: no CUDA device; run benchmarks/memory_fidelity.py for the CPU check", file=sys.stderr)
        return 2
    print(f"schedc per-layer check on {torch.cuda.get_device_name()} (torch {torch.__version__}, bfloat16, "
          f"seq {args.seq}, microbatch 1; counted at unit_profile's default rates)", flush=True)
    if "none" in args.modes:  # none's times come first: the recompute rows read them
        args.modes = ["none"] + [m for m in args.modes if m != "none"]
    models = {}
    for name in args.models:
        rows = rows_for(name, args.seq, args.modes, args.repeats, args.ledger)
        seq = min(args.seq, 1024) if mf.HF[name][0] == 'gpt2' else args.seq
        print(f"{name}, seq {seq}:")
        show(rows)
        models[name] = {"seq": seq, "units": measured_units(rows)}
    if args.json:
        import transformers

        atomic_write_text(args.json, json.dumps({
            "source": f"benchmarks/gpu_layers.py --seq {args.seq} --modes {' '.join(args.modes)}",
            "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "transformers": transformers.__version__, "w_after_gradients": True, "models": models}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
