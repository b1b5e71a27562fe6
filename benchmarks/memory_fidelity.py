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
  peak above the held bytes while F, I and W run. The parameters' gradients exist before F, as
  every microbatch after a step's first finds them (static bytes): W's new gradients, live until
  added into them, are its transient. The embedding's W is its whole backward (torch runs no I
  on the first stage); ``--b`` measures B's peak, each layer run with a whole backward.

Checkpointed layers are measured under torchtitan's ``FullAC`` and ``SelectiveAC`` (where the
recompute refuses a layer that mutates a saved tensor, Mixtral's top-k, with torch's
``allow_cache_entry_mutation``, the row named so) and under schedc's own light policy
(``schedc.runtime.checkpointing.checkpoint_block(block, "light")``).
It prints each against ``unit_profile(..., device="cpu")``, the same count with CPU's kernels
(CPU's composite RMSNorm in torchtitan, W_o's input copied after CPU flash attention, dropout
masks in the activation dtype); the CUDA count differs only in those terms (docs/design.md).
Target: within 5 % per unit and quantity. Cost: one F, I and W per unit and checkpointing mode;
real sizes take a few GB of RAM and a few minutes on one core.

    python benchmarks/memory_fidelity.py            # real sizes, seq 128
    python benchmarks/memory_fidelity.py --small    # the fast test's sizes
    python benchmarks/memory_fidelity.py --mid      # the MoE layouts at a middle width
    python benchmarks/memory_fidelity.py --models Qwen3-30B-A3B --seq 64 --no-ac   # one model
    python benchmarks/memory_fidelity.py --ac light   # only the layers under light checkpointing
    python benchmarks/memory_fidelity.py --fsdp     # FSDP2 under torch's pipelining, 4 gloo ranks

``--fsdp`` compares, per rank of a pp 2 x dp 2 run, the most FSDP2 and AdamW hold over a step (a
ledger of their storages at every action and reduce-scatter copy-in) with the stage's counted
static bytes at ``dp_shard=2`` (section "FSDP2 under torch's pipelining" below).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import math
import sys
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
from torch.distributed.pipelining._backward import stage_backward, stage_backward_input, stage_backward_weight
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from schedc.model_costs import unit_profile  # noqa: E402

QUANTITIES = ("after F", "I..W", "F transient", "I transient", "W transient")


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages ops create that some tensor still references, and their peak."""

    def __init__(self, device: str = "cpu"):
        super().__init__()
        self.device = device
        self.live: dict[int, list[int]] = {}
        self.now = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # a view of a storage made before the ledger started (a weight, the input) is not new
        inputs = {a.untyped_storage().data_ptr() for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == self.device:
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
    op-level policy, which NeMo AutoModel's "selective" follows), or, for "light" (no framework has
    it), schedc's runtime's own (``checkpoint_block``), and a list that counts the forwards run (1
    in F; recomputes after)."""
    runs = [0]
    inner = unit.module.forward

    def counted(*args, **kwargs):
        runs[0] += 1
        return inner(*args, **kwargs)

    unit.module.forward = counted
    if mode == "light":
        from schedc.runtime.checkpointing import checkpoint_block

        wrapped = checkpoint_block(unit.module, mode)
    else:
        from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

        policy = (FullAC if mode == "full" else SelectiveAC)
        wrapped = policy(policy.Config())._wrap_block(unit.module)
    return Unit(unit.name, unit.module, unit.make_input, lambda x: unit.call(wrapped, x), keeps_input=True), runs


@contextlib.contextmanager
def cache_mutation_allowed():
    """torchtitan's SelectiveAC with torch's ``allow_cache_entry_mutation=True``: its policy saves
    top-k's output, which Mixtral's router (and Qwen-MoE's with ``norm_topk_prob``) then normalizes in
    place, so the recompute in I raises "Tensor cached during selective activation checkpoint has
    been mutated". Allowing it measures what the policy would keep if it ran."""
    import torchtitan.distributed.activation_checkpoint as titan

    contexts = titan.create_selective_checkpoint_contexts
    titan.create_selective_checkpoint_contexts = functools.partial(contexts, allow_cache_entry_mutation=True)
    try:
        yield
    finally:
        titan.create_selective_checkpoint_contexts = contexts


def measure(unit: Unit) -> dict[str, float]:
    """Bytes after F, from I until W, and the transient peaks of F, I and W (see the docstring)."""
    params = list(unit.module.parameters())
    for p in params:  # static bytes, as every microbatch after a step's first finds them: W adds into them
        p.grad = torch.zeros_like(p)
    x = unit.make_input()
    saved_inputs: set[int] = set()
    key = x.untyped_storage().data_ptr()

    def pack(t):
        if t.untyped_storage().data_ptr() == key:
            saved_inputs.add(key)
        return t

    ledger = LiveBytes(x.device.type)
    with ledger, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = unit.forward(x)
    extra = x.untyped_storage().nbytes() if saved_inputs or unit.keeps_input else 0
    out = ledger.bytes_of(y) if y.numel() > 1 else 0
    after_f = ledger.now - out + extra
    peak_f = ledger.peak - ledger.now
    dy = torch.randn_like(y) if y.numel() > 1 else None
    if unit.first:  # no I (torch skips it on the first stage): W runs the whole backward
        with ledger:
            before_w = ledger.restart_peak()
            torch.autograd.backward([y], [dy])
        return {"after F": after_f, "I..W": after_f, "F transient": peak_f, "I transient": 0.0,
                "W transient": float(ledger.peak - before_w)}
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
    peak_w = float(ledger.peak - before_w)
    del start
    return {"after F": after_f, "I..W": held, "F transient": peak_f, "I transient": peak_i, "W transient": peak_w}


def measure_b(unit: Unit) -> float:
    """B's transient: the peak a whole backward (``stage_backward``, as torch's stage runs B)
    reaches above what is live before it -- what a stage that does not split its backward holds
    while B runs, on top of its bytes after F. The parameters' gradients exist before it (static
    bytes; every microbatch but a step's first accumulates into them), so each new gradient is
    live only until it is added."""
    params = list(unit.module.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)
    x = unit.make_input()
    ledger = LiveBytes(x.device.type)
    with ledger:
        y = unit.forward(x)
    dy = torch.randn_like(y) if y.numel() > 1 else None
    with ledger:
        before = ledger.restart_peak()
        stage_backward([y], [dy] if dy is not None else None, [x])
    return float(ledger.peak - before)


def b_rows(sizes: dict, seq: int, names=None, tt: Optional[dict] = None,
           modes=("none", "light", "selective", "full")) -> list[tuple]:
    """(model, unit, "B transient", counted, measured) for a layer run with a whole backward:
    counted as the planner runs such a stage (``schedc.planning.ac.checkpointed_form``, which reads the
    unit's ``transient("B")``), measured by :func:`measure_b`."""
    from schedc.planning.ac import checkpointed_form

    out = []
    for name, impl in layer_cases(sizes, names, tt):
        for mode in modes:
            unit, shape = layer_of(name, impl, sizes, tt, seq)
            if mode != "none":
                unit, _ = checkpointed(unit, mode)
            with cache_mutation_allowed() if mode == "selective" else contextlib.nullcontext():
                got = measure_b(unit)
            profile, none = (unit_profile(**shape, seq=seq, impl=impl, device="cpu", activation_checkpoint=m)
                             for m in (mode, "none"))
            counted = checkpointed_form(profile, none).stages[1].transient("B")
            out.append((f"{name} ({impl}, {mode} AC)", "layer", "B transient", counted, got))
    return out


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
    "Qwen1.5-MoE-A2.7B": ("qwen2_moe", dict(hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
                                            shared_expert_intermediate_size=512, num_attention_heads=8,
                                            num_key_value_heads=8, vocab_size=512, num_experts=15,
                                            num_experts_per_tok=4)),
}

MID = {  # MoE layouts of the real models (experts, experts per token, q/h, h/f_e) at a middle width
    "Mixtral-8x7B": ("mixtral", dict(hidden_size=1024, intermediate_size=3584, num_attention_heads=8,
                                     num_key_value_heads=2, vocab_size=512, num_local_experts=8,
                                     num_experts_per_tok=2)),
    "Qwen3-30B-A3B": ("qwen3_moe", dict(hidden_size=512, intermediate_size=1536, moe_intermediate_size=192,
                                        num_attention_heads=32, num_key_value_heads=4, head_dim=32,
                                        vocab_size=512, num_experts=128, num_experts_per_tok=8)),
    "Qwen1.5-MoE-A2.7B": ("qwen2_moe", dict(hidden_size=512, intermediate_size=1408, moe_intermediate_size=352,
                                            shared_expert_intermediate_size=1408, num_attention_heads=16,
                                            num_key_value_heads=16, vocab_size=512, num_experts=60,
                                            num_experts_per_tok=4)),
}


def _fill(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.02)
    return module


def hf_units(name: str, sizes: dict, seq: int, dtype=torch.bfloat16, device: str = "cpu") -> tuple[list[Unit], dict]:
    """Embedding, one decoder layer and norm + LM head + loss of a Hugging Face model on `device`,
    and the shape fields unit_profile takes."""
    kind, fields = sizes[name]
    modeling = importlib.import_module(f"transformers.models.{kind}.modeling_{kind}")
    config = importlib.import_module(f"transformers.models.{kind}.configuration_{kind}")
    cls = next(getattr(config, n) for n in dir(config) if n.lower() == f"{kind.replace('_', '')}config")
    cfg = cls(**fields, num_hidden_layers=1, n_layer=1) if kind == "gpt2" else cls(**fields, num_hidden_layers=1)
    cfg._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = (modeling.GPT2LMHeadModel if kind == "gpt2" else getattr(
            modeling, next(n for n in dir(modeling) if n.endswith("ForCausalLM"))))(cfg)
    model = _fill(model.to_empty(device=device).to(dtype)).train()
    if kind == "gpt2":
        return _gpt2_units(model, cfg, seq, dtype, device), {"family": "gpt2", "mlp": "gelu", "dropout": True,
                                                    "positions": cfg.n_positions}
    inner = model.model
    tokens = torch.randint(0, cfg.vocab_size, (1, seq), device=device)
    positions = torch.arange(seq, device=device)[None]
    with torch.no_grad():
        rope = inner.rotary_emb(torch.zeros(1, seq, cfg.hidden_size, dtype=dtype, device=device), positions)
    layer = inner.layers[0]
    hidden = lambda: torch.randn(1, seq, cfg.hidden_size, dtype=dtype, device=device, requires_grad=True)  # noqa: E731
    labels = torch.randint(0, cfg.vocab_size, (1, seq), device=device)

    def head(x):
        return model.loss_function(model.lm_head(inner.norm(x)), labels, vocab_size=cfg.vocab_size)

    units = [
        Unit("embedding", inner.embed_tokens, lambda: tokens.clone(), inner.embed_tokens, first=True),
        _layer(layer, hidden, lambda m, x: _first(m(x, position_embeddings=rope, attention_mask=None,
                                                     position_ids=positions))),
        Unit("norm+head+loss", torch.nn.ModuleList([inner.norm, model.lm_head]), hidden, head),
    ]
    return units, {"family": kind}


def _gpt2_units(model, cfg, seq: int, dtype, device: str = "cpu") -> list[Unit]:
    tr = model.transformer
    tokens = torch.randint(0, cfg.vocab_size, (1, seq), device=device)
    block = tr.h[0]
    hidden = lambda: torch.randn(1, seq, cfg.n_embd, dtype=dtype, device=device, requires_grad=True)  # noqa: E731
    labels = torch.randint(0, cfg.vocab_size, (1, seq), device=device)

    def embed(ids):  # positions made here, as GPT2Model.forward makes them
        return tr.drop(tr.wte(ids) + tr.wpe(torch.arange(ids.shape[1], device=ids.device)[None]))

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
                     moe_ffn_hidden=f.get("moe_intermediate_size") or f["intermediate_size"],
                     shared_ffn_hidden=f.get("shared_expert_intermediate_size", 0))
    return shape


def counted(shape: dict, extra: dict, seq: int, impl: str, ac: str = "none") -> dict[str, dict[str, float]]:
    p = unit_profile(**shape, **extra, seq=seq, impl=impl, device="cpu", activation_checkpoint=ac)
    return {name: _quantities(c) for name, c in zip(("embedding", "layer", "norm+head+loss"), p.stages)}


def _quantities(c) -> dict[str, float]:
    t = c.transient_bytes or {}
    return {"after F": c.activation_bytes, "I..W": c.weight_grad_bytes, "F transient": t.get("F", 0.0),
            "I transient": t.get("I", 0.0), "W transient": t.get("W", 0.0)}


def layer_cases(sizes: dict, names, tt: Optional[dict]) -> list[tuple[str, str]]:
    """(model, "hf" or "torchtitan") for each layer asked for (`names`, default all) at these sizes."""
    return [(n, "hf") for n in (names or sizes) if n in sizes] + [(n, "torchtitan") for n in (names or tt or {})
                                                                    if n in (tt or {})]


def layer_of(name: str, impl: str, sizes: dict, tt: Optional[dict], seq: int) -> tuple[Unit, dict]:
    """One decoder layer of `name` in `impl`'s code, and its shape for the count."""
    if impl == "hf":
        units, extra = hf_units(name, sizes, seq)
        return units[1], {**shape_of(sizes, name), **extra}
    return tt_layer(name, tt, seq)


def ac_rows(sizes: dict, seq: int, names=None, tt: Optional[dict] = None, modes=("full", "selective", "light")) -> list[tuple]:
    """(model, mode, quantity, counted, measured) for a layer under torchtitan's checkpointing
    policies (full, selective) and schedc's runtime's light policy, and (model, mode, "forwards run",
    counted, measured): F, I's recompute and W's (per-op modes: whether W could run after I)."""
    out = []
    for name, impl in layer_cases(sizes, names, tt):
        for mode in modes:
            unit, shape = layer_of(name, impl, sizes, tt, seq)
            wrapped, runs = checkpointed(unit, mode)
            label = f"{name} ({impl}, {mode} AC)"
            try:
                got = measure(wrapped)
            except RuntimeError as err:
                if mode != "selective" or "has been mutated" not in str(err.__cause__ or err):
                    raise
                # the failed backward left the first forward's graph: a fresh layer, then measured
                # with the mutation allowed (cache_mutation_allowed)
                units, _ = hf_units(name, sizes, seq)
                wrapped, runs = checkpointed(units[1], mode)
                with cache_mutation_allowed():
                    got = measure(wrapped)
                label = f"{name} ({impl}, selective AC, top-k mutation allowed)"
            p = unit_profile(**shape, seq=seq, impl=impl, device="cpu", activation_checkpoint=mode).stages[1]
            count = _quantities(p)
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


# ---------------------------------------------------------------- FSDP2 under torch's pipelining
#
# What each rank holds with --dp-shard > 1: torchtitan's debug Llama-3 (its own blocks, SDPA in place
# of FlexAttention as above), split in two stages, sharded by torchtitan's own apply_fsdp_to_decoder
# (fully_shard per block, bf16 compute, fp32 reduce, reshard_after_forward off under PP) over the
# dp axis of a 2 x 2 (pp, dp) mesh on gloo, run by torch's schedule runtime from a schedc CSV. A
# ledger sums the storages FSDP and the optimizer reach (sharded parameters, gradients and AdamW
# states; unsharded parameters and gradients; the reduce-scatter's input) at every action's start
# and end and at the instant of each reduce-scatter copy-in (the group's gradients and its input
# both alive), against the stage's counted static bytes (unit_profile(dp_shard=2)).

FSDP_CSVS = {  # 2 ranks, 4 microbatches: split backward (zero-bubble order) and full backward
    "zb-h1": ["0F0,0F1,0I0,0F2,0I1,0W0,0F3,0I2,0W1,0I3,0W2,0W3",
              "1F0,1I0,1W0,1F1,1I1,1W1,1F2,1I2,1W2,1F3,1I3,1W3"],
    "1f1b": ["0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3", "1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3"],
}
FSDP_KINDS = ("sharded", "unsharded params", "unsharded grads", "reduce-scatter")


def fsdp_model(n_layers: int):
    """torchtitan's registered Llama-3 debug model cut to `n_layers`, and its shape for the count."""
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import llama3_configs

    cfg = llama3_configs["debugmodel"](attn_backend="flex")
    cfg.layers = cfg.layers[:n_layers]
    for layer in cfg.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    model = cfg.build()
    attn = model.layers["0"].attention
    shape = dict(layers=n_layers, hidden=cfg.dim, heads=attn.n_heads, kv_heads=attn.n_kv_heads,
                 head_dim=attn.wo.weight.shape[1] // attn.n_heads, vocab=cfg.vocab_size,
                 ffn_hidden=model.layers["0"].feed_forward.w1.weight.shape[0])
    return model, shape


def fsdp_ledger(module, optimizer, extra: Optional[dict] = None) -> dict[str, int]:
    """Bytes of the distinct storages FSDP2 and the optimizer reach, by kind (`extra`: kind ->
    tensors only a running call holds)."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    seen: dict[str, dict[int, int]] = {k: {} for k in FSDP_KINDS}

    def add(kind, t):
        if t is not None:
            t = t._local_tensor if isinstance(t, DTensor) else t
            s = t.untyped_storage()
            if s.nbytes():
                seen[kind][s.data_ptr()] = s.nbytes()

    for state in fully_shard.state(module)._state_ctx.all_states:
        for group in state._fsdp_param_groups:
            for rs in group.comm_ctx.reduce_scatter_states:
                add("reduce-scatter", rs.reduce_scatter_input)
            for fp in group.fsdp_params:
                add("sharded", fp.sharded_param)
                add("sharded", fp.sharded_param.grad)
                for t in fp.all_gather_outputs:
                    add("unsharded params", t)
                add("unsharded grads", fp.unsharded_accumulated_grad)
                if getattr(fp, "_unsharded_param", None) is not None:
                    add("unsharded grads", fp._unsharded_param.grad)
    for st in optimizer.state.values():
        for v in st.values():
            if torch.is_tensor(v) and v.dim():
                add("sharded", v)
    for kind, tensors in (extra or {}).items():
        for t in tensors:
            add(kind, t)
    return {k: sum(v.values()) for k, v in seen.items()}


def _fsdp_stage(pp: int, dp_mesh, n_layers: int):
    from torchtitan.distributed.fsdp import apply_fsdp_to_decoder

    model, _ = fsdp_model(n_layers)
    keep = {str(i) for i in range(n_layers) if (i < n_layers // 2) == (pp == 0)}
    for name in [n for n in model.layers if n not in keep]:
        del model.layers[name]
    if pp == 0:
        model.norm = model.lm_head = None
    else:
        model.tok_embeddings = None
    from torch.distributed.fsdp import FSDPModule

    apply_fsdp_to_decoder(model, dp_mesh, param_dtype=torch.bfloat16, reduce_dtype=torch.float32, pp_enabled=True)
    for module in model.modules():
        if isinstance(module, FSDPModule):  # gloo has no PREMUL_SUM: a SUM and an in-place divide instead
            module.set_force_sum_reduction_for_comms(True)
    return model


def fsdp_rank_body() -> dict:
    """In a launched rank (4 in all): the ledger's samples over the second step of the CSV."""
    import os
    import tempfile

    import torch.distributed.fsdp._fully_shard._fsdp_collectives as collectives
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage

    from schedc.runtime import launch as L
    from schedc.runtime.pipeline import build_schedule

    spec = L.read_spec()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    L.init_group("gloo")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    pp, dp = mesh["pp"].get_local_rank(), mesh["dp"].get_local_rank()
    model = _fsdp_stage(pp, mesh["dp"], spec["layers"])
    stage = PipelineStage(model, pp, 2, torch.device("cpu"), group=mesh["pp"].get_group())
    path = os.path.join(tempfile.mkdtemp(), "fsdp.csv")
    Path(path).write_text("\n".join(FSDP_CSVS[spec["csv"]]) + "\n")
    loss = lambda out, y: torch.nn.functional.cross_entropy(out.float().flatten(0, 1), y.flatten())  # noqa: E731
    schedule = build_schedule(path, stage, 4, loss_fn=loss)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    samples: list[dict] = []
    _instrument(stage, model, opt, samples, collectives)
    x = torch.randint(0, spec["vocab"], (4, spec["seq"]), generator=torch.Generator().manual_seed(dp))
    for _ in range(2):  # the second step: AdamW's states exist, sharded gradients kept (zeroed)
        samples.clear()
        schedule.step(*((x,) if pp == 0 else ()), target=x if pp == 1 else None, losses=[] if pp == 1 else None,
                      return_outputs=False)
        opt.step()
        opt.zero_grad(set_to_none=False)  # gradients held all step, as the count takes them
    # a sharded parameter is a DTensor: numel() is the whole parameter's
    return {"pp": pp, "dp": dp, "params": sum(p.numel() for p in model.parameters()), "samples": samples}


def _instrument(stage, model, opt, samples: list, collectives) -> None:
    """Sample the ledger at each action's start and end and at every reduce-scatter copy-in."""
    def wrap(obj, name, label):
        original = getattr(obj, name)

        def sampled(*a, **k):
            samples.append({"at": label + " start", **fsdp_ledger(model, opt)})
            out = original(*a, **k)
            samples.append({"at": label + " end", **fsdp_ledger(model, opt)})
            return out
        setattr(obj, name, sampled)

    for name, label in (("forward_one_chunk", "F"), ("backward_one_chunk", "I/B"),
                        ("backward_weight_one_chunk", "W"), ("perform_reduce_grad", "REDUCE_GRAD")):
        wrap(stage, name, label)
    copy_in = collectives.foreach_reduce_scatter_copy_in

    def copy_in_sampled(grads, rs_input, world_size):
        copy_in(grads, rs_input, world_size)
        # the instant the group's gradients (only foreach_reduce's list holds them now) and the
        # reduce-scatter's input are both alive
        extra = {"reduce-scatter": [rs_input], "unsharded grads": grads}
        samples.append({"at": "reduce-scatter copy-in", **fsdp_ledger(model, opt, extra)})
    collectives.foreach_reduce_scatter_copy_in = copy_in_sampled


def fsdp_measure(csv: str = "zb-h1", layers: int = 4, seq: int = 16, timeout: float = 120.0) -> list[dict]:
    """Run the 4 ranks; per rank its stage, measured peak by kind and in all, and the count."""
    from schedc.runtime import launch as L

    _, shape = fsdp_model(layers)
    results = L.launch([sys.executable, str(Path(__file__).resolve()), "--fsdp-rank"], 4, timeout=timeout,
                       spec={"csv": csv, "layers": layers, "seq": seq, "vocab": shape["vocab"]},
                       label="memory_fidelity --fsdp")
    counted = unit_profile(**shape, seq=seq, impl="torchtitan", device="cpu", dtype="bfloat16",
                           param_dtype="float32", grad_dtype="float32", dp_shard=2, torch=torch.__version__)
    units = counted.stages
    stages = [units[:1 + layers // 2], units[1 + layers // 2:]]
    per_stage = [sum(u.static_bytes for u in stage) for stage in stages]
    # a stage's last W or B bounds the reduce-scatter's rise above the static bytes (fsdp_transients)
    rise = [max(max(u.transient("W"), u.transient("B")) for u in stage) for stage in stages]
    out = []
    for r in results:
        samples = r["samples"]
        total = max(sum(s[k] for k in FSDP_KINDS) for s in samples)
        out.append({"pp": r["pp"], "dp": r["dp"], "params": r["params"], "counted": per_stage[r["pp"]],
                    "transient": rise[r["pp"]],
                    "measured": total, **{k: max(s[k] for s in samples) for k in FSDP_KINDS},
                    "first_unsharded": next(s for s in samples if s["at"] == "F start")["unsharded params"],
                    "per_param": counted.assumes["fsdp_unsharded_bytes_per_param"]})
    return sorted(out, key=lambda o: (o["pp"], o["dp"]))


def fsdp_rows(csvs=tuple(FSDP_CSVS)) -> list[tuple]:
    rows = []
    for csv in csvs:
        for r in fsdp_measure(csv):
            if r["dp"] == 0:  # the dp ranks of a stage hold the same
                rows.append((csv, r["pp"], r["counted"], r["measured"], r["counted"] - r["per_param"] * r["params"]))
    return rows


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--small", action="store_true", help="the fast test's narrow sizes")
    ap.add_argument("--mid", action="store_true", help="the MoE models' layouts at a middle width")
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--no-ac", action="store_true", help="leave out the activation-checkpointing rows")
    ap.add_argument("--ac", nargs="+", choices=("full", "selective", "light"), default=None,
                    help="only the checkpointed layers, under these modes")
    ap.add_argument("--fsdp", action="store_true", help="only the FSDP2 rows (4 gloo ranks, dp_shard 2)")
    ap.add_argument("--b", action="store_true", help="only B's transient: each layer run with a whole backward, "
                                                     "every checkpointing mode")
    args = ap.parse_args(argv)
    if args.fsdp:
        print("| schedule | stage | counted static bytes | measured peak (FSDP2 + AdamW) | ratio | sharded only "
              "| ratio |  (torchtitan debug Llama-3, 4 layers, pp 2 x dp 2, bf16 compute, fp32 reduce, CPU gloo)")
        print("|---|---|---|---|---|---|---|")
        for csv, stage, c, m, sharded in fsdp_rows():
            print(f"| {csv} | {stage} | {c:,.0f} | {m:,.0f} | {c / m:.3f} | {sharded:,.0f} | {sharded / m:.3f} |")
        return
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
    if args.ac and args.no_ac:
        sys.exit(_refuse("--ac and --no-ac: pick one"))
    if args.b:
        table = b_rows(sizes, args.seq, args.models, tt=tt)
    else:
        table = [] if args.ac else rows(sizes, args.seq, args.models, tt=tt)
    if not args.no_ac and not args.b:
        table += ac_rows(sizes, args.seq, args.models, tt=tt, **({"modes": tuple(args.ac)} if args.ac else {}))
    print(f"| model | unit | quantity | counted | measured | ratio |  (bytes per token; seq {args.seq}, bf16, CPU)")
    print("|---|---|---|---|---|---|")
    for model, unit, q, c, m in table:
        ratio = f"{c / m:.3f}" if m else ("=" if not c else "-")
        scale = 1 if q in ("forwards run", "split I/W runs") else args.seq
        print(f"| {model} | {unit} | {q} | {c / scale:,.0f} | {m / scale:,.0f} | {ratio} |")


if __name__ == "__main__":
    if sys.argv[1:] == ["--fsdp-rank"]:
        from schedc.runtime import launch as _launch

        sys.exit(_launch.run_rank(fsdp_rank_body))
    main()
