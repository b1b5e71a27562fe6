"""Bytes per token that a checkpointed layer's recompute moves through memory, op by op.

Problem: "light" activation checkpointing saves every matmul's and attention's output and
recomputes only the ops between them, and "selective" (torchtitan's op-level policy) recomputes
the same ops plus every second matmul. Those ops do (almost) no FLOPs: a FLOP-based time charges
them nothing, yet each reads its inputs and writes its output at the device's memory bandwidth.

Method: a ledger, per token, of the inputs and outputs of each op the recompute runs (views
and allocations move nothing; the matmuls selective recomputes are charged by their FLOPs in
:mod:`schedc.model_costs.units`, not here), read from the installed sources and checked op by op
against the real layers' backward on CPU (benchmarks/recompute_traffic.py). e is the activation
dtype's bytes, up = (e + 4) w for a cast between it and fp32 (nothing when e is 4), r the rows
of a norm per token (1, or the heads of Qwen3's q/k norms):

- RMSNorm, Hugging Face (eager): to fp32 (up), pow (8w), mean (4w + 4r), + eps (8r), rsqrt
  (8r), x * rstd (8w + 4r), back to the dtype (up), * weight (2 e w): 2 up + 20 w + 2 e w + 24 r.
  torchtitan (``nn.RMSNorm``): on CUDA torch's fused kernel (2 e w + 4 r); on CPU the composite,
  which multiplies the weight in fp32: 2 up + 28 w + 24 r. LayerNorm (GPT-2): 2 e w plus its
  mean and rstd per row (fp32; in the activation dtype on CPU).
- Rotary embedding of q and of k (width w, head dim d): Hugging Face's rotate_half in the dtype
  (x cos, neg and cat of the halves, x sin, add: 10 e w + 2 e d); torchtitan's Llama 3 as complex
  numbers in fp32 (2 up + 8 w + 4 d), its Qwen3 rotate_half in fp32 (2 up + 40 w + 8 d).
- torchtitan's fused q/k/v projection: its split is copied to contiguous q, k and v (2 e (q + 2k)).
- Qwen3's q and k norms: an RMSNorm of width q (r = heads) and of width k (r = kv heads).
- SwiGLU: SiLU (2 e f) and the gate product (3 e f); GPT-2's ``gelu_new`` eight elementwise ops
  (18 e f).
- Residual adds: the first only (3 e h). The recompute stops once the last tensor the backward
  needs is back (torch's early stop, on in schedc's runtime and NeMo AutoModel), and nothing in
  the layer saves the second add's output. torchtitan's ``SelectiveAC`` (``impl="torchtitan"``,
  selective) turns the early stop off: it recomputes the second add too.
- Dropout (GPT-2, after attention and after the MLP): on CUDA the fused kernel (2 e h + a 1-byte
  mask) each; on CPU the composite (bernoulli and the scaling in place, 4 e h, each), and the
  first dropout's product (3 e h; the second's output is past the early stop).
- MoE (transformers' grouped experts): the router's fp32 cast and softmax (e E + 12 E), top-k
  (4 E + 12 k), Mixtral's renormalized fp32 weights (20 k + 8), the others' cast (4 + e per slot); per
  slot (k per token) the sort and expert ids (48 bytes), the gather of the hidden states (whose
  whole input it reads, e h, plus k e h out), the routing weights' gather, the experts' SwiGLU
  (5 e f_e) and the weight multiply (2 e h + e; fp32 out in Mixtral); the scatter's index
  (32 bytes). A shared expert (Qwen2-MoE): its SwiGLU and sigmoid gate.

Parameters (norm weights, the rotary table) are read once per microbatch, not per token: left
out. ``light`` and ``selective`` recompute the same memory-bound ops (but torchtitan's second add);
``full`` recomputes the
whole forward, whose time the FLOP-based forward already stands for (not counted here).

Cost: O(1) per call.
"""

from __future__ import annotations

from schedc.core.costs import PER_OP_AC
from schedc.model_costs.memory import widths
from schedc.model_costs.shape import DTYPE_BYTES, ModelShape, need


def recompute_traffic(s: ModelShape, impl: str, device: str, ac: str) -> float:
    """Bytes per token the memory-bound ops that `ac` recomputes in one decoder layer read and
    write (see the module docstring); 0 for ``"none"``. `s` is a resolved shape, `impl` "hf" or
    "torchtitan", `device` "cuda" or "cpu"."""
    if ac == "none":
        return 0.0
    if ac not in PER_OP_AC:
        raise ValueError(f"recompute_traffic: ac must be 'none', 'light' or 'selective', got {ac!r} (full "
                         "recomputes the forward, charged the forward's time)")
    if impl not in ("hf", "torchtitan"):
        raise ValueError(f"recompute_traffic: impl must be 'hf' or 'torchtitan', got {impl!r}")
    e = DTYPE_BYTES[s.dtype]
    h, q, k, f = widths(s)
    d = float(s.head_dim or h)
    gpt2 = s.family == "gpt2"
    norms = 2 * (_layer_norm(h, e, device) if gpt2 else _rms_norm(h, 1, e, impl, device))
    attention = 0.0 if gpt2 else _rotary(q, d, e, impl, s.family) + _rotary(k, d, e, impl, s.family)
    if impl == "torchtitan":
        attention += 2 * e * (q + 2 * k)
    if s.family in ("qwen3", "qwen3_moe"):
        attention += _rms_norm(q, float(need(s.heads)), e, impl, device) + _rms_norm(k, float(need(s.kv_heads)), e, impl, device)
    if s.experts:
        mlp = _moe(s, e)
    else:
        mlp = 18 * e * f if s.mlp == "gelu" else 5 * e * f
    dropout = 0.0
    if s.dropout:
        dropout = 2 * (2 * e * h + h) if device == "cuda" else 2 * 4 * e * h + 3 * e * h
    # torchtitan's SelectiveAC wraps its blocks with early_stop=False: the output add runs again
    adds = 2 if impl == "torchtitan" and ac == "selective" else 1
    return norms + attention + mlp + adds * 3 * e * h + dropout


def _cast(width: float, e: int) -> float:
    """A copy between the activation dtype and fp32 (none when the dtype is fp32)."""
    return 0.0 if e == 4 else (e + 4) * width


def _rms_norm(w: float, rows: float, e: int, impl: str, device: str) -> float:
    if impl == "torchtitan":
        if device == "cuda":
            return 2 * e * w + 4 * rows
        return 2 * _cast(w, e) + 28 * w + 24 * rows
    return 2 * _cast(w, e) + 20 * w + 2 * e * w + 24 * rows


def _layer_norm(w: float, e: int, device: str) -> float:
    return 2 * e * w + 2 * (e if device == "cpu" else 4)


def _rotary(w: float, d: float, e: int, impl: str, family: str) -> float:
    if impl == "hf":
        return 10 * e * w + 2 * e * d
    if family in ("qwen3", "qwen3_moe"):
        return 2 * _cast(w, e) + 40 * w + 8 * d
    return 2 * _cast(w, e) + 8 * w + 4 * d


def _moe(s: ModelShape, e: int) -> float:
    """Routing, gathers and the experts' SwiGLU of transformers' grouped experts, per token."""
    h, E, k, fe = float(s.hidden), float(s.experts), float(s.experts_per_token), float(need(s.moe_ffn_hidden))
    mixtral = s.family == "mixtral"
    w = 4 if mixtral else e  # the routing weights' bytes: Mixtral keeps its top-k values in fp32
    router = (e + 4) * E + 8 * E + 4 * E + 12 * k + (20 * k + 8 if mixtral else (4 + e) * k)
    index = 24 * k + 16 * k + 12 * k + 4 * k + 8 * k + 32 * k  # sort, ids, histc's cast, histc, scatter index
    gather = e * h + 8 * k + k * e * h + k * (2 * w + 8)
    weighted = k * (e * h + 4 + 4 * h) if mixtral else k * (2 * e * h + e)
    out = router + index + gather + 5 * e * fe * k + weighted
    if s.shared_ffn_hidden:
        out += 5 * e * float(s.shared_ffn_hidden) + 2 * e
    return out
