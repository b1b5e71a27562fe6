"""Counted vs executed FLOPs per unit and action: schedc.model_costs against real layers on CPU.

Problem: the counted route's time is its FLOPs over an effective rate (plus the recompute's
memory traffic, benchmarks/recompute_traffic.py). The rate is the device's business (measured
on a GPU by benchmarks/gpu_layers.py); the FLOPs are the count's, and they must be the matmul and
attention work the running code really does in each action: F, the split backward's I and W
(``stage_backward_input`` / ``stage_backward_weight``), or the whole backward B where torch runs a
per-op checkpointed layer so, the recompute each activation-checkpointing mode adds, MoE
layers' routed experts and router, the LM head.

Method: the real modules of benchmarks/memory_fidelity.py (Hugging Face transformers' layers and
head, torchtitan's own blocks) at their real hidden sizes with a short sequence (FLOPs are
exact at any length: linear in tokens, attention in tokens x sequence), run under a dispatch
mode that counts each matmul (``mm``, ``addmm``, ``bmm``, ...) and attention kernel by torch's
own formulas (``torch.utils.flop_counter``); CPU's flash attention and ``_grouped_mm`` (transformers' and
torchtitan's experts), which it has no formula for, are given torch's SDPA formulas and the
grouped shape rule here. Checkpointed layers are wrapped as memory_fidelity.py wraps them
(torchtitan's FullAC / SelectiveAC, schedc's light policy). The count is ``unit_profile`` at 1
FLOP/s with an unbounded memory bandwidth (its seconds are then its FLOPs).

Where they differ by design: the count follows Megatron-LM's convention for attention (backward
= 2 x forward); a flash-style kernel's backward recomputes the scores too (torch counts 2.5 x).
So I (and B) count ``0.5 x`` the attention forward's FLOPs fewer than executed; the table
prints that difference in its own column and compares the rest. Qwen2-MoE's shared-expert gate
(one output column) and norms, rotary tables and softmax (no matmul) are not FLOPs here.

Target: counted = executed (minus the attention convention) within 0.5 % per unit and action.
Cost: one F, I and W (or F, B) per unit and mode; real sizes take a few GB and minutes on one core.

    python benchmarks/flop_counts.py              # real sizes, seq 64
    python benchmarks/flop_counts.py --small      # the fast test's sizes
    python benchmarks/flop_counts.py --models Llama-3-8B --modes none full
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import sys
from pathlib import Path
from typing import Optional

import torch
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop, sdpa_flop, shape_wrapper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import memory_fidelity as mf  # noqa: E402

from schedc.core.costs import PER_OP_AC  # noqa: E402
from schedc.model_costs import unit_profile  # noqa: E402

MODES = ("none", "light", "selective", "full")
ATTENTION = ("sdpa", "attention")  # op names whose FLOPs are attention (the rest are matmuls)


def _grouped_mm(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """``_grouped_mm(a, b, offs)``: every row (or, for a weight gradient, every token of the
    shared dimension) meets one group, so it costs one dense product of the ungrouped sizes."""
    if len(a_shape) == 2 and len(b_shape) == 3:  # tokens x k  @  groups x k x n
        return 2 * a_shape[0] * a_shape[1] * b_shape[2]
    if len(a_shape) == 2 and len(b_shape) == 2:  # k x tokens  @  tokens x n -> groups x k x n
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]
    if len(a_shape) == 3 and len(b_shape) == 3:  # batched
        return 2 * a_shape[0] * a_shape[1] * a_shape[2] * b_shape[2]
    return 2 * a_shape[0] * a_shape[1] * b_shape[-1]  # groups x m x k  @  k x tokens


def _cpu_flash(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop(query_shape, key_shape, value_shape)


def _cpu_flash_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop(grad_out_shape, query_shape, key_shape, value_shape)


def _formulas() -> dict:
    """torch's FLOP formulas, and the kernels it has none for on CPU."""
    aten = torch.ops.aten
    out = dict(flop_registry)
    out[aten._scaled_dot_product_flash_attention_for_cpu] = shape_wrapper(_cpu_flash)
    out[aten._scaled_dot_product_flash_attention_for_cpu_backward] = shape_wrapper(_cpu_flash_backward)
    if hasattr(aten, "_grouped_mm"):
        out[aten._grouped_mm] = shape_wrapper(_grouped_mm)
    return out


class Flops(TorchDispatchMode):
    """FLOPs of the ops run inside it by torch's own formulas (``torch.utils.flop_counter``): all,
    and the attention backward's. ``FlopCounterMode`` itself cannot stand in: its module tracker
    hooks the graph in a way torch's split backward refuses."""

    formulas: dict = {}

    def __init__(self):
        super().__init__()
        self.total = self.attention_backward = 0.0
        if not Flops.formulas:
            Flops.formulas = _formulas()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = self.formulas.get(func.overloadpacket)
        if formula is not None:
            n = float(formula(*args, **kwargs, out_val=out))
            self.total += n
            name = str(func.overloadpacket)
            if "backward" in name and any(word in name for word in ATTENTION):
                self.attention_backward += n
        return out

    def counts(self) -> tuple[float, float]:
        return self.total, self.attention_backward


def executed(unit: mf.Unit, per_op: bool) -> dict[str, tuple[float, float]]:
    """{action: (FLOPs, attention-backward FLOPs)} of F, I and W (or F and B)."""
    params = list(unit.module.parameters())
    x = unit.make_input()
    with Flops() as fc:
        y = unit.forward(x)
    out = {"F": fc.counts()}
    dy = torch.randn_like(y) if y.numel() > 1 else None
    if per_op:  # torch refuses the split backward of a per-op checkpointed region
        with Flops() as fc:
            torch.autograd.backward(y, dy)
        out["B"] = fc.counts()
        return out
    with Flops() as fc:
        _, groups = stage_backward_input([y], [dy] if dy is not None else None, [x], iter(params))
    out["I"] = fc.counts()
    with Flops() as fc:
        stage_backward_weight(iter(params), groups)
    out["W"] = fc.counts()
    return out


def counted_flops(shape: dict, seq: int, impl: str, mode: str) -> list[dict[str, float]]:
    """{action: FLOPs} of each unit as unit_profile counts them (seconds at 1 FLOP/s)."""
    p = unit_profile(**shape, seq=seq, impl=impl, device="cpu", activation_checkpoint=mode,
                     flops_per_second=1.0, memory_bandwidth=1e300)
    return [{"F": c.forward, "I": c.backward_input, "W": c.backward_weight,
             "B": c.backward_input + c.backward_weight} for c in p.stages]


def rows(sizes: dict, seq: int, names=None, tt: Optional[dict] = None, modes=MODES) -> list[tuple]:
    """(model, unit, action, counted, executed, executed minus the attention convention)."""
    out = []
    for (name, impl), mode in itertools.product(mf.layer_cases(sizes, names, tt), modes):
        if impl == "hf":
            units, extra = mf.hf_units(name, sizes, seq)
            shape = {**mf.shape_of(sizes, name), **extra}
            # the embedding has no matmul in either count; the head has no checkpointing
            units = units[1:] if mode == "none" else units[1:2]
        else:
            unit, shape = mf.tt_layer(name, tt, seq)
            units = [unit]
        count = counted_flops(shape, seq, impl, mode)
        for unit in units:
            label = f"{name} ({impl}, {mode} AC)" if unit.name == "layer" else f"{name} ({impl})"
            if mode != "none":
                unit, _ = mf.checkpointed(unit, mode)
            # Mixtral's router normalizes the top-k SelectiveAC saved in place; allowing the
            # mutation changes no FLOP
            with mf.cache_mutation_allowed() if mode == "selective" else contextlib.nullcontext():
                got = executed(unit, mode in PER_OP_AC)
            c = count[1] if unit.name == "layer" else count[-1]
            for action, (total, attention_b) in got.items():
                # past the convention's 2 x forward, the scores a flash-style backward recomputes:
                # torch's formula counts that backward 2.5 x forward, so a fifth of it
                out.append((label, unit.name, action, c[action], total, total - attention_b / 5))
        print(f"  counted {name} ({impl}, {mode})", file=sys.stderr)
    return out


def table(found: list[tuple]) -> str:
    lines = [f"{'model':44} {'unit':16} {'action':6} {'counted':>12} {'executed':>12} {'conv.':>12} "
             f"{'c/conv.':>8}"]
    for model, unit, action, c, total, conv in found:
        ratio = c / conv if conv else (1.0 if c == 0 else math.inf)
        lines.append(f"{model:44} {unit:16} {action:6} {c / 1e9:11.3f}G {total / 1e9:11.3f}G {conv / 1e9:11.3f}G "
                     f"{ratio:8.4f}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="the fast test's narrow layouts")
    parser.add_argument("--seq", type=int, default=64, help="tokens per sequence (default 64)")
    parser.add_argument("--models", nargs="+", help="some of the models (default: all)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    args = parser.parse_args(argv)
    sizes, tt = (mf.SMALL, mf.TT_SMALL) if args.small else ({**mf.MID, **mf.HF}, mf.TT)
    unknown = [n for n in args.models or [] if n not in sizes and n not in tt]
    if unknown:
        print(f"flop_counts.py: error: --models: unknown {unknown[0]!r}; one of {', '.join(sorted(set(sizes) | set(tt)))}",
              file=sys.stderr)
        return 2
    torch.manual_seed(0)
    found = rows(sizes, args.seq, args.models, tt, args.modes)
    print(f"FLOPs per unit and action, counted (schedc.model_costs.unit_profile) vs executed (torch's "
          f"FLOP formulas on the real layers, CPU, seq {args.seq}); conv.: executed with the attention "
          "backward at Megatron's 2 x forward")
    print(table(found))
    worst = max(abs(c / conv - 1) for *_, c, _, conv in found if conv)
    print(f"largest difference from the convention: {100 * worst:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
