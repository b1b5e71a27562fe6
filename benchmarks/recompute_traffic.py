"""Counted vs measured memory traffic of a checkpointed layer's recompute, and what it costs.

Problem: "light" and "selective" activation checkpointing recompute memory-bound ops (norms,
activations, rotary embeddings, residual adds, dropout, MoE routing) inside the backward; the
counted cost model (``schedc.model_costs.traffic.recompute_traffic``) charges their bytes at the
device's memory bandwidth. This checks that ledger against what the recompute really runs.

Method: the real layers (Hugging Face transformers' decoder layers, as NeMo AutoModel trains
them, and torchtitan's own blocks, built as benchmarks/memory_fidelity.py builds them) at their
real hidden sizes with a short sequence on CPU, checkpointed as they run: by schedc's runtime
(``schedc.runtime.checkpointing.checkpoint_block``; NeMo AutoModel's selective policy is the same),
torchtitan's blocks under selective by torchtitan's own ``SelectiveAC``. A
``TorchDispatchMode`` sums, over the ops of the backward, the bytes of each op's tensor inputs
and outputs, leaving out what moves no memory (views, aliases, allocations) and the matmuls and
attention kernels (charged by FLOPs). The recompute's traffic is the checkpointed layer's
backward minus the same layer's backward without checkpointing: the backward ops are the same,
so the difference is exactly the ops the recompute ran (after torch's early stop, with the
saved matmuls taken from the cache). Parameters read once per microbatch (norm weights) make a
measured difference of e h / tokens per norm, left out of the count.

It prints counted vs measured bytes per token per layer and mode (device="cpu" counts: CPU's
composite kernels), then the recompute's time at seq 4096 for Llama-3-8B and Qwen2.5-7B on CUDA
at 2 TB/s next to selective's recomputed matmuls at the counted FLOP rate. Target: within 10 %.
Cost: three backward passes per layer (none, light, selective); real sizes take a few GB of
RAM and a few minutes on one core.

    python benchmarks/recompute_traffic.py               # real sizes, seq 32
    python benchmarks/recompute_traffic.py --small       # the fast test's sizes, seq 64
    python benchmarks/recompute_traffic.py --models Llama-3-8B --ops   # the recomputed ops, one by one
    python benchmarks/recompute_traffic.py --small --float32           # the layers in float32
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import sys
import warnings
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from schedc.model_costs import ModelShape, unit_profile  # noqa: E402
from schedc.model_costs.traffic import recompute_traffic  # noqa: E402
from schedc.runtime.checkpointing import checkpoint_block  # noqa: E402

MODES = ("light", "selective")
# charged by FLOPs, not bytes: every matmul (grouped and float8 ones too) and attention kernel
COMPUTE = {getattr(torch.ops.aten, n).default for n in (
    "mm", "addmm", "bmm", "linear", "_grouped_mm", "_scaled_mm", "_scaled_grouped_mm",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_fused_attention_overrideable")
    if hasattr(getattr(torch.ops.aten, n, None), "default")}


def _fidelity():
    """benchmarks/memory_fidelity.py, which builds the real layers and gives their shapes."""
    name = "memory_fidelity"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("memory_fidelity.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


class Traffic(TorchDispatchMode):
    """Bytes each memory-bound op reads and writes (its tensor inputs and outputs), by op."""

    def __init__(self):
        super().__init__()
        self.by_op: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in COMPUTE or func.is_view or "empty" in func.__name__:
            return out
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        storages = {t.untyped_storage().data_ptr() for t in inputs}
        if not func._schema.is_mutable and any(t.untyped_storage().data_ptr() in storages for t in outputs):
            return out  # an alias (_unsafe_view, ...): no copy
        shapes = tuple(tuple(t.shape) for t in inputs)
        self.by_op[(func.__name__, shapes)] += sum(t.numel() * t.element_size() for t in inputs + outputs)
        return out


def _layer(name: str, impl: str, sizes: dict, seq: int, dtype: torch.dtype):
    """A fresh layer (the Unit memory_fidelity builds) and its shape keywords, dtype included."""
    mf = _fidelity()
    dtype_name = str(dtype).removeprefix("torch.")
    if impl == "torchtitan":
        unit, shape = mf.tt_layer(name, sizes, seq, dtype)
        return unit, {**shape, "dtype": dtype_name}
    units, extra = mf.hf_units(name, sizes, seq, dtype)
    return units[1], {**mf.shape_of(sizes, name), **extra, "dtype": dtype_name}


def backward_traffic(name: str, impl: str, sizes: dict, seq: int, mode: str,
                     dtype: torch.dtype = torch.bfloat16) -> tuple[collections.Counter, dict]:
    """Bytes by op of one layer's backward, checkpointed as `mode` (schedc's runtime; torchtitan's
    SelectiveAC for its blocks' selective), and the layer's shape keywords."""
    torch.manual_seed(0)
    unit, shape = _layer(name, impl, sizes, seq, dtype)
    forward = unit.forward
    if mode == "selective" and impl == "torchtitan":  # what torchtitan runs: its own SelectiveAC
        forward = _fidelity().checkpointed(unit, mode)[0].forward
    elif mode != "none":
        checkpoint_block(unit.module, mode)
    x = unit.make_input()
    y = forward(x)
    meter = Traffic()
    with meter:
        y.backward(torch.ones_like(y))
    return meter.by_op, shape


def measured(name: str, impl: str, sizes: dict, seq: int, modes=MODES, dtype: torch.dtype = torch.bfloat16) -> dict:
    """The layer's shape keywords and mode -> (bytes per token the recompute moved, its ops by
    bytes per token)."""
    base, shape = backward_traffic(name, impl, sizes, seq, "none", dtype)
    out = {}
    for mode in modes:
        diff, _ = backward_traffic(name, impl, sizes, seq, mode, dtype)
        diff.subtract(base)
        ops = {op: b / seq for op, b in diff.items() if b}
        out[mode] = (sum(ops.values()), ops)
    return shape, out


def counted(shape: dict, impl: str, mode: str, device: str = "cpu") -> float:
    keys = {"family", "mlp", "dropout", "positions", "experts", "experts_per_token", "moe_ffn_hidden",
            "shared_ffn_hidden", "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "vocab", "layers", "dtype"}
    s = ModelShape(**{k: v for k, v in shape.items() if k in keys}).resolved()
    return recompute_traffic(s, impl, device, mode)


def rows(sizes: dict, tt: dict, seq: int, names=None, show_ops=False, dtype: torch.dtype = torch.bfloat16) -> list[tuple]:
    """(layer, mode, counted, measured) per case; prints each layer's recomputed ops with `show_ops`."""
    cases = [(n, "hf", sizes) for n in (names or sizes) if n in sizes]
    cases += [(n, "torchtitan", tt) for n in (names or tt) if n in tt]
    out = []
    for name, impl, table in cases:
        shape, by_mode = measured(name, impl, table, seq, dtype=dtype)
        for mode, (got, ops) in by_mode.items():
            out.append((f"{name} ({impl})", mode, counted(shape, impl, mode), got))
            if show_ops:
                for (op, shapes), b in sorted(ops.items(), key=lambda kv: -kv[1]):
                    print(f"    {name} {impl} {mode}: {op} {shapes} {b:.1f}")
        print(f"  measured {name} ({impl})", file=sys.stderr)
    return out


def cost_rows(seq: int = 4096, bandwidth: float = 2e12) -> list[tuple]:
    """(model, mode, recompute traffic ms, recomputed FLOPs ms (selective: its matmuls; full: the
    forward), I ms) per layer on CUDA at `seq`."""
    mf = _fidelity()
    out = []
    for name in ("Llama-3-8B", "Qwen2.5-7B"):
        shape = {**mf.shape_of(mf.HF, name), "family": mf.HF[name][0]}
        base = dict(**{k: v for k, v in shape.items() if v is not None}, seq=seq, impl="hf", device="cuda",
                    memory_bandwidth=bandwidth)
        none = unit_profile(**base).stages[1]
        for mode in ("none", "light", "selective", "full"):
            try:
                layer = unit_profile(**base, activation_checkpoint=mode).stages[1]
            except Exception as err:  # a mode the installed counts do not take yet
                print(f"  {name} {mode}: {str(err).splitlines()[0]}", file=sys.stderr)
                continue
            ms = recompute_traffic(ModelShape(**{**shape, "layers": 1}).resolved(), "hf", "cuda", mode) * seq \
                / bandwidth * 1e3 if mode in MODES else 0.0
            extra = (layer.backward_input - none.backward_input) * 1e3
            out.append((name, mode, ms, max(0.0, extra - ms) if mode != "full" else extra, layer.backward_input * 1e3))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="the fast test's narrow sizes")
    parser.add_argument("--seq", type=int, default=None, help="tokens per layer (default 32, --small 64)")
    parser.add_argument("--models", nargs="*", default=None, help="only these models")
    parser.add_argument("--ops", action="store_true", help="print the recomputed ops one by one")
    parser.add_argument("--float32", action="store_true", help="the layers in float32 (default bfloat16)")
    args = parser.parse_args(argv)
    mf = _fidelity()
    known = set(mf.HF) | set(mf.SMALL) | set(mf.TT)
    bad = next((n for n in args.models or [] if n not in known), None)
    if bad is not None:
        print(f"recompute_traffic.py: error: --models: {bad!r} is not one of {', '.join(sorted(known))}",
              file=sys.stderr)
        return 2
    if args.seq is not None and args.seq < 1:
        print("recompute_traffic.py: error: --seq must be an integer >= 1", file=sys.stderr)
        return 2
    seq = args.seq or (64 if args.small else 32)
    sizes, tt = (mf.SMALL, mf.TT_SMALL) if args.small else (mf.HF, mf.TT)
    warnings.filterwarnings("ignore")
    dtype = torch.float32 if args.float32 else torch.bfloat16
    table = rows(sizes, tt, seq, args.models, args.ops, dtype)
    print(f"recompute traffic per token and layer, seq {seq}, {str(dtype)[6:]} on CPU (device='cpu' counts)")
    print(f"{'layer':34} {'mode':10} {'counted B':>11} {'measured B':>11} {'error':>7}")
    worst = 0.0
    for layer, mode, c, m in table:
        err = (c - m) / m if m else float("inf")
        worst = max(worst, abs(err))
        print(f"{layer:34} {mode:10} {c:11.0f} {m:11.0f} {100 * err:6.2f}%")
    print(f"worst error {100 * worst:.2f}% (target 10%)")
    print("\nper layer on CUDA at seq 4096, 2 TB/s, 400 TFLOP/s (unit_profile's defaults), Hugging Face")
    print(f"{'model':12} {'mode':10} {'traffic ms':>11} {'FLOPs ms':>10} {'I ms':>8}")
    for name, mode, ms, mm, i in cost_rows():
        print(f"{name:12} {mode:10} {ms:11.3f} {mm:10.3f} {i:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
