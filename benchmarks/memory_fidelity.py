"""Counted vs measured memory per unit: schedc.model_costs against real layers on CPU.

Problem: the counted route (``schedc profile --units --config``) is only as good as its ledger
of what the running code keeps. This builds the real modules (Hugging Face transformers'
decoder layers, loss head and embedding, as NeMo AutoModel trains them; torchtitan's own
TransformerBlock where torchtitan has the model) at real hidden sizes with a short sequence
(the quantities are linear in tokens: attention keeps O(s) with flash-style kernels), runs F, the
split I (torch.distributed.pipelining's ``stage_backward_input``) and W
(``stage_backward_weight``), and measures:

- the bytes live, by a dispatch-mode ledger of every storage an op creates (freed when its last
  tensor dies: what the allocator holds, without the allocator's caching), plus the unit's input
  when autograd saves it (it was allocated before F);
- held after F (the unit's output excluded: the pipeline's boundary), held from I until W (the
  given output gradient excluded, the returned input gradient included), and the transient
  peak above the held bytes while F, I and W run (W's parameter gradients excluded: static bytes).

It prints each against ``unit_profile(..., device="cpu")``, the same count with CPU's kernels
(CPU's composite RMSNorm in torchtitan, W_o's input copied after CPU flash attention, dropout
masks in the activation dtype); the CUDA count differs only in those terms (docs/design.md).
Target: within 5 % per unit and quantity. Cost: one F, I and W per unit and checkpointing mode;
real sizes take a few GB of RAM and a few minutes on one core.

    python benchmarks/memory_fidelity.py            # real sizes, seq 128
    python benchmarks/memory_fidelity.py --small    # the fast test's sizes
    python benchmarks/memory_fidelity.py --mid      # the MoE layouts at a middle width
    python benchmarks/memory_fidelity.py --models Qwen3-30B-A3B --seq 64 --no-ac   # one model
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from schedc.model_costs import unit_profile  # noqa: E402

QUANTITIES = ("after F", "I..W", "F transient", "I transient", "W transient")


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages ops create that some tensor still references, and their peak."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, list[int]] = {}
        self.now = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # a view of a storage made before the ledger started (a weight, the input) is not new
        inputs = {a.untyped_storage().data_ptr() for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self._track(t, inputs)
        return out

    def _track(self, t: torch.Tensor, inputs: set[int]) -> None:
        storage = t.untyped_storage()
        key, size = storage.data_ptr(), storage.nbytes()
        if not key or (key in inputs and key not in self.live):
            return
        if key in self.live:
            self.live[key][1] += 1
        else:
            self.live[key] = [size, 1]
            self.now += size
            self.peak = max(self.peak, self.now)
        weakref.finalize(t, self._drop, key)

    def _drop(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.now -= entry[0]
            del self.live[key]

    def restart_peak(self) -> int:
        self.peak = self.now
        return self.now

    def bytes_of(self, t: torch.Tensor) -> int:
        entry = self.live.get(t.untyped_storage().data_ptr())
        return entry[0] if entry else 0


@dataclass
class Unit:
    name: str
    module: torch.nn.Module
    make_input: Callable[[], torch.Tensor]
    forward: Callable[[torch.Tensor], torch.Tensor]
    first: bool = False  # the embedding: no I (torch skips it on the first stage), W runs the backward
    call: Optional[Callable] = None  # layers: call(module, x), so a checkpoint wrapper can stand in
    keeps_input: bool = False  # a checkpoint keeps its input for the recompute (a reference, not a saved tensor)


def checkpointed(unit: Unit, mode: str) -> tuple[Unit, list[int]]:
    """The unit with torchtitan's own per-block checkpointing (FullAC, or SelectiveAC: its
    op-level policy, which NeMo AutoModel's "selective" follows), and a list that counts the
    forwards run (1 in F; recomputes after)."""
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    policy = (FullAC if mode == "full" else SelectiveAC)
    wrapped = policy(policy.Config())._wrap_block(unit.module)
    runs = [0]
    inner = unit.module.forward

    def counted(*args, **kwargs):
        runs[0] += 1
        return inner(*args, **kwargs)

    unit.module.forward = counted
    return Unit(unit.name, unit.module, unit.make_input, lambda x: unit.call(wrapped, x), keeps_input=True), runs


def measure(unit: Unit) -> dict[str, float]:
    """Bytes after F, from I until W, and the transient peaks of F and I (see the docstring)."""
    params = list(unit.module.parameters())
    x = unit.make_input()
    saved_inputs: set[int] = set()
    key = x.untyped_storage().data_ptr()

    def pack(t):
        if t.untyped_storage().data_ptr() == key:
            saved_inputs.add(key)
        return t

    ledger = LiveBytes()
    with ledger, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = unit.forward(x)
    extra = x.untyped_storage().nbytes() if saved_inputs or unit.keeps_input else 0
    out = ledger.bytes_of(y) if y.numel() > 1 else 0
    after_f = ledger.now - out + extra
    peak_f = ledger.peak - ledger.now
    if unit.first:
        return {"after F": after_f, "I..W": after_f, "F transient": peak_f, "I transient": 0.0, "W transient": 0.0}
    dy = torch.randn_like(y) if y.numel() > 1 else None
    with ledger:
        start = ledger.restart_peak()
        _, groups = stage_backward_input([y], [dy] if dy is not None else None, [x], iter(params))
        held = ledger.now - out + extra
        peak_i = ledger.peak - ledger.now
        before_w = ledger.restart_peak()
        try:
            stage_backward_weight(iter(params), groups)
        except RuntimeError as err:  # selective checkpointing allows one backward per region
            if "backward an extra time" not in str(err):
                raise
            return {"after F": after_f, "I..W": math.nan, "F transient": peak_f, "I transient": peak_i,
                    "W transient": math.nan}
    # W's parameter gradients are static bytes, not a transient
    grads = sum(p.grad.untyped_storage().nbytes() for p in params if p.grad is not None)
    peak_w = max(0.0, ledger.peak - before_w - grads)
    del start
    return {"after F": after_f, "I..W": held, "F transient": peak_f, "I transient": peak_i, "W transient": peak_w}


# ---------------------------------------------------------------- Hugging Face transformers

HF = {  # name: (model_type, config fields at real size)
    "Llama-3-8B": ("llama", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                 num_key_value_heads=8, vocab_size=128256)),
    "Qwen2.5-7B": ("qwen2", dict(hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                                 num_key_value_heads=4, vocab_size=152064)),
    "Mistral-7B": ("mistral", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                   num_key_value_heads=8, vocab_size=32768)),
    "Qwen3-8B": ("qwen3", dict(hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                               num_key_value_heads=8, head_dim=128, vocab_size=151936)),
    "GPT-2": ("gpt2", dict(n_embd=768, n_head=12, vocab_size=50257, attn_pdrop=0.0)),
    "Qwen3-30B-A3B": ("qwen3_moe", dict(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                                        num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                                        vocab_size=151936, num_experts=128, num_experts_per_tok=8)),
}
SMALL = {  # the fast test's sizes: same layouts, narrow
    "Llama-3-8B": ("llama", dict(hidden_size=256, intermediate_size=896, num_attention_heads=8,
                                 num_key_value_heads=2, vocab_size=512)),
    "Qwen2.5-7B": ("qwen2", dict(hidden_size=224, intermediate_size=1184, num_attention_heads=7,
                                 num_key_value_heads=1, vocab_size=640)),
    "Mistral-7B": ("mistral", dict(hidden_size=256, intermediate_size=896, num_attention_heads=8,
                                   num_key_value_heads=2, vocab_size=512)),
    "Qwen3-8B": ("qwen3", dict(hidden_size=256, intermediate_size=768, num_attention_heads=8,
                               num_key_value_heads=2, head_dim=32, vocab_size=512)),
    "GPT-2": ("gpt2", dict(n_embd=192, n_head=6, vocab_size=500, attn_pdrop=0.0)),
    "Mixtral-8x7B": ("mixtral", dict(hidden_size=256, intermediate_size=512, num_attention_heads=8,
                                     num_key_value_heads=2, vocab_size=512, num_local_experts=8,
                                     num_experts_per_tok=2)),
    "Qwen3-30B-A3B": ("qwen3_moe", dict(hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
                                        num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                                        vocab_size=512, num_experts=16, num_experts_per_tok=4)),
}

MID = {  # MoE layouts of the real models (experts, experts per token, q/h, h/f_e) at a middle width
    "Mixtral-8x7B": ("mixtral", dict(hidden_size=1024, intermediate_size=3584, num_attention_heads=8,
                                     num_key_value_heads=2, vocab_size=512, num_local_experts=8,
                                     num_experts_per_tok=2)),
    "Qwen3-30B-A3B": ("qwen3_moe", dict(hidden_size=512, intermediate_size=1536, moe_intermediate_size=192,
                                        num_attention_heads=32, num_key_value_heads=4, head_dim=32,
                                        vocab_size=512, num_experts=128, num_experts_per_tok=8)),
}


def _fill(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.02)
    return module


def hf_units(name: str, sizes: dict, seq: int, dtype=torch.bfloat16) -> tuple[list[Unit], dict]:
    """Embedding, one decoder layer and norm + LM head + loss of a Hugging Face model, and the
    shape fields unit_profile takes."""
    kind, fields = sizes[name]
    modeling = importlib.import_module(f"transformers.models.{kind}.modeling_{kind}")
    config = importlib.import_module(f"transformers.models.{kind}.configuration_{kind}")
    cls = next(getattr(config, n) for n in dir(config) if n.lower() == f"{kind.replace('_', '')}config")
    cfg = cls(**fields, num_hidden_layers=1, n_layer=1) if kind == "gpt2" else cls(**fields, num_hidden_layers=1)
    cfg._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = (modeling.GPT2LMHeadModel if kind == "gpt2" else getattr(
            modeling, next(n for n in dir(modeling) if n.endswith("ForCausalLM"))))(cfg)
    model = _fill(model.to_empty(device="cpu").to(dtype)).train()
    if kind == "gpt2":
        return _gpt2_units(model, cfg, seq, dtype), {"family": "gpt2", "mlp": "gelu", "dropout": True,
                                                    "positions": cfg.n_positions}
    inner = model.model
    tokens = torch.randint(0, cfg.vocab_size, (1, seq))
    positions = torch.arange(seq)[None]
    with torch.no_grad():
        rope = inner.rotary_emb(torch.zeros(1, seq, cfg.hidden_size, dtype=dtype), positions)
    layer = inner.layers[0]
    hidden = lambda: torch.randn(1, seq, cfg.hidden_size, dtype=dtype, requires_grad=True)  # noqa: E731
    labels = torch.randint(0, cfg.vocab_size, (1, seq))

    def head(x):
        return model.loss_function(model.lm_head(inner.norm(x)), labels, vocab_size=cfg.vocab_size)

    units = [
        Unit("embedding", inner.embed_tokens, lambda: tokens.clone(), inner.embed_tokens, first=True),
        _layer(layer, hidden, lambda m, x: _first(m(x, position_embeddings=rope, attention_mask=None,
                                                     position_ids=positions))),
        Unit("norm+head+loss", torch.nn.ModuleList([inner.norm, model.lm_head]), hidden, head),
    ]
    return units, {"family": kind}


def _gpt2_units(model, cfg, seq: int, dtype) -> list[Unit]:
    tr = model.transformer
    tokens = torch.randint(0, cfg.vocab_size, (1, seq))
    block = tr.h[0]
    hidden = lambda: torch.randn(1, seq, cfg.n_embd, dtype=dtype, requires_grad=True)  # noqa: E731
    labels = torch.randint(0, cfg.vocab_size, (1, seq))

    def embed(ids):  # positions made here, as GPT2Model.forward makes them
        return tr.drop(tr.wte(ids) + tr.wpe(torch.arange(ids.shape[1])[None]))

    def head(x):
        return model.loss_function(model.lm_head(tr.ln_f(x)), labels, vocab_size=cfg.vocab_size)

    return [
        Unit("embedding", torch.nn.ModuleList([tr.wte, tr.wpe]), lambda: tokens.clone(), embed, first=True),
        _layer(block, hidden, lambda m, x: _first(m(x))),
        # the tied LM head's weight sits on the last stage in a pipeline: its W is this unit's
        Unit("norm+head+loss", torch.nn.ModuleList([tr.ln_f, model.lm_head]), hidden, head),
    ]


def _layer(module, make_input, call) -> Unit:
    return Unit("layer", module, make_input, lambda x: call(module, x), call=call)


def _first(out):
    return out[0] if isinstance(out, tuple) else out


# ---------------------------------------------------------------- torchtitan

TT = {"Llama-3-8B": ("llama3", "8B"), "Qwen3-8B": ("qwen3", "8B")}
TT_SMALL = {"Llama-3-8B": ("llama3", "debugmodel"), "Qwen3-8B": ("qwen3", "debugmodel")}


def tt_layer(name: str, flavors: dict, seq: int, dtype=torch.bfloat16) -> tuple[Unit, dict]:
    """One torchtitan TransformerBlock of the model's registered flavor, and its shape for the count.

    torchtitan 0.3.0 runs attention with FlexAttention, whose backward does not run on CPU; its
    own ScaledDotProductAttention module stands in here: both keep q, k, v, the output and the
    logsumexp (docs/design.md)."""
    from torchtitan.models.common.attention import ScaledDotProductAttention

    kind, flavor = flavors[name]
    configs = importlib.import_module(f"torchtitan.models.{kind}")
    cfg = getattr(configs, f"{kind}_configs")[flavor](attn_backend="flex")
    layer_cfg = cfg.layers[0]
    layer_cfg.attention.inner_attention = ScaledDotProductAttention.Config()
    layer = layer_cfg.build()
    for p in layer.parameters():  # the parameters only: the rotary table stays complex
        p.data = p.data.to(dtype)
    _fill(layer)
    attn = layer.attention
    head_dim = attn.wo.weight.shape[1] // attn.n_heads
    shape = dict(layers=1, hidden=cfg.dim, heads=attn.n_heads, kv_heads=attn.n_kv_heads, head_dim=head_dim,
                 ffn_hidden=layer.feed_forward.w1.weight.shape[0], vocab=cfg.vocab_size,
                 family="qwen3" if kind == "qwen3" else "llama")
    hidden = lambda: torch.randn(1, seq, cfg.dim, dtype=dtype, requires_grad=True)  # noqa: E731
    return _layer(layer, hidden, lambda m, x: m(x, None, None)), shape


def shape_of(sizes: dict, name: str) -> dict:
    """unit_profile's shape keywords for a case of HF / SMALL."""
    kind, f = sizes[name]
    if kind == "gpt2":
        return dict(layers=1, hidden=f["n_embd"], heads=f["n_head"], vocab=f["vocab_size"], ffn_hidden=4 * f["n_embd"])
    shape = dict(layers=1, hidden=f["hidden_size"], ffn_hidden=f["intermediate_size"], heads=f["num_attention_heads"],
                 kv_heads=f["num_key_value_heads"], head_dim=f.get("head_dim"), vocab=f["vocab_size"])
    experts = f.get("num_local_experts") or f.get("num_experts")
    if experts:
        shape.update(experts=experts, experts_per_token=f["num_experts_per_tok"],
                     moe_ffn_hidden=f.get("moe_intermediate_size") or f["intermediate_size"])
    return shape


def counted(shape: dict, extra: dict, seq: int, impl: str, ac: str = "none") -> dict[str, dict[str, float]]:
    p = unit_profile(**shape, **extra, seq=seq, impl=impl, device="cpu", activation_checkpoint=ac)
    return {name: _quantities(c) for name, c in zip(("embedding", "layer", "norm+head+loss"), p.stages)}


def _quantities(c) -> dict[str, float]:
    t = c.transient_bytes or {}
    return {"after F": c.activation_bytes, "I..W": c.weight_grad_bytes, "F transient": t.get("F", 0.0),
            "I transient": t.get("I", 0.0), "W transient": t.get("W", 0.0)}


def ac_rows(sizes: dict, seq: int, names=None, tt: Optional[dict] = None, modes=("full", "selective")) -> list[tuple]:
    """(model, mode, quantity, counted, measured) for a layer under torchtitan's checkpointing
    policies, and (model, mode, "forwards run", counted, measured): F, I's recompute and W's."""
    out = []
    cases = [(n, "hf") for n in (names or sizes) if n in sizes] + [(n, "torchtitan") for n in (names or tt or {})
                                                                      if n in (tt or {})]
    for name, impl in cases:
        for mode in modes:
            if impl == "hf":
                units, extra = hf_units(name, sizes, seq)
                unit, shape = units[1], {**shape_of(sizes, name), **extra}
            else:
                unit, shape = tt_layer(name, tt, seq)
            wrapped, runs = checkpointed(unit, mode)
            got = measure(wrapped)
            p = unit_profile(**shape, seq=seq, impl=impl, device="cpu", activation_checkpoint=mode).stages[1]
            count = _quantities(p)
            label = f"{name} ({impl}, {mode} AC)"
            out.extend((label, "layer", q, count[q], got[q]) for q in QUANTITIES if not math.isnan(got[q]))
            if mode == "full":
                plain = unit_profile(**shape, seq=seq, impl=impl, device="cpu").stages[1]
                forwards = 1 + round((p.backward_input + p.backward_weight - plain.backward_input
                                      - plain.backward_weight) / plain.forward)
                out.append((label, "layer", "forwards run", forwards, runs[0]))
            else:
                out.append((label, "layer", "split I/W runs", 0, 0 if math.isnan(got["I..W"]) else 1))
    return out


def rows(sizes: dict, seq: int, names=None, quiet=False, tt: Optional[dict] = None) -> list[tuple]:
    """(model, unit, quantity, counted, measured) for every case."""
    out = []
    for name in [n for n in (names or tt or {}) if n in (tt or {})]:
        unit, shape = tt_layer(name, tt, seq)
        p = unit_profile(**shape, seq=seq, impl="torchtitan", device="cpu").stages[1]
        got = measure(unit)
        count = _quantities(p)
        out.extend((f"{name} (torchtitan)", "layer", q, count[q], got[q]) for q in QUANTITIES)
    for name in [n for n in (names or sizes) if n in sizes]:
        units, extra = hf_units(name, sizes, seq)
        count = counted(shape_of(sizes, name), extra, seq, "hf")
        for unit in units:
            got = measure(unit)
            for q in QUANTITIES:
                out.append((f"{name} (hf)", unit.name, q, count[unit.name][q], got[q]))
            if not quiet:
                print(f"  measured {name} {unit.name}", file=sys.stderr)
    return out


def _refuse(message: str) -> int:
    print(f"memory_fidelity.py: error: {message}", file=sys.stderr)
    return 2


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--small", action="store_true", help="the fast test's narrow sizes")
    ap.add_argument("--mid", action="store_true", help="the MoE models' layouts at a middle width")
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--no-ac", action="store_true", help="leave out the activation-checkpointing rows")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="A saved_tensors_hooks context")
    if args.small and args.mid:
        sys.exit(_refuse("--small and --mid: pick one size"))
    sizes, tt = (SMALL, TT_SMALL) if args.small else ((MID, {}) if args.mid else (HF, TT))
    unknown = sorted(set(args.models or ()) - set(sizes) - set(tt))
    if unknown:
        sys.exit(_refuse(f"--models: no case {', '.join(unknown)} at these sizes; pick from "
                         f"{', '.join(sorted({*sizes, *tt}))}"))
    table = rows(sizes, args.seq, args.models, tt=tt)
    if not args.no_ac:
        table += ac_rows(sizes, args.seq, args.models, tt=tt)
    print(f"| model | unit | quantity | counted | measured | ratio |  (bytes per token; seq {args.seq}, bf16, CPU)")
    print("|---|---|---|---|---|---|")
    for model, unit, q, c, m in table:
        ratio = f"{c / m:.3f}" if m else ("=" if not c else "-")
        scale = 1 if q in ("forwards run", "split I/W runs") else args.seq
        print(f"| {model} | {unit} | {q} | {c / scale:,.0f} | {m / scale:,.0f} | {ratio} |")


if __name__ == "__main__":
    main()
