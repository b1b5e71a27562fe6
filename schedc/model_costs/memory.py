"""Bytes per token that one unit keeps, as the implementation that runs it keeps them.

Problem: the memory a pipeline stage holds is what autograd saves for the backward, and that
depends on the code of the layer (Hugging Face transformers' eager modules, which NeMo AutoModel
trains, or torchtitan's own), on the kernels of the device (CUDA's fused RMSNorm and flash
attention), on activation checkpointing, and on torch's split backward, which keeps the whole
graph after I plus the output gradients W consumes.

Method: a ledger of the tensors each operation saves, per token, read from the installed
sources and checked against real layers (benchmarks/memory_fidelity.py):

- RMSNorm, Hugging Face (eager): an fp32 copy of its input (4w), the normalized input in the
  activation dtype (e w, for the weight's gradient) and one fp32 rsqrt per row; torchtitan
  (``nn.RMSNorm``): on CUDA torch's fused kernel saves the input (e w) and the fp32 rstd per row,
  on CPU the composite saves two fp32 tensors (8w) and the rstd. LayerNorm (GPT-2): its input
  and fp32 mean and rstd per row.
- The norm's output, which the following linears keep (e w each norm).
- Attention: the rotary-embedded q and k (e q, e k), v (e k), the output (e q; on CUDA the
  same storage as W_o's input, on CPU W_o's input is a copy, e q more) and flash attention's fp32
  logsumexp (4 per head). Qwen3's q/k norms add an RMSNorm of width q and of width k.
- SwiGLU: four FFN-width tensors (gate output, SiLU output, up output, their product: 4 e f);
  GPT-2's ``gelu_new`` five (its input, 0.5x, tanh's output, 1 + tanh, the product: 5 e f).
- Dropout masks (GPT-2 in training): 1 byte per element on CUDA, one element of the activation
  dtype on CPU.
- MoE (Mixtral, Qwen2/3-MoE; transformers' grouped experts): the router's fp32 probabilities (4E per
  token); per routed token-slot (k per token) its gathered input (e h), the expert's SwiGLU
  (4 e f_e, gate and up in one storage) and its output (e h), which the routing weight's multiply
  keeps; a shared expert (Qwen2-MoE) a SwiGLU of its own plus its sigmoid gate.
- Held from I until W: everything above (the graph is retained) + the gradient of every linear's
  and norm's output, which torch's ``stage_backward_input`` captures for W (e x output width
  each), less the gradient given to the unit (its own output's, which the caller holds) + the
  input gradient I returns (held by the previous unit's W, or sent).
- Loss head: the final norm, the LM head's input (e h); the loss upcasts the logits to fp32 and
  log-softmax keeps its fp32 output (4V) from F until I. Transient while F runs: the fp32 copy of
  the logits (4V; the bf16 logits are gone by then); while I runs: the fp32 gradients of the
  log-probabilities and of the logits, less what outlives them ((8 - e) V - 2 e h), or the norm's
  backward with a small vocabulary; the LM head's output gradient (e V) is held from I until W.
- Transients of a layer (measured, then counted): the norms' fp32 temporaries in F (4h), the
  gradients that die inside I (18h with RMSNorm, 28h for GPT-2; with Hugging Face's q/k norms
  16 max(h, q) + 2h, the q norm's backward); MoE layers: in F the routed outputs weighted and
  gathered back to token order (2 k w h, w the routing weights' bytes), in I the gradient of the
  experts' gathered input (k e h), plus the router's per-token temporaries.
- Activation checkpointing (per layer): ``full`` keeps the layer's input only; I recomputes the
  forward (its activation is live while I runs) and, because torch's ``stage_backward_weight``
  runs one ``autograd.grad`` per parameter group and a checkpoint recomputes once per graph task,
  W recomputes the forward once per parameter group of the layer. ``selective`` is torchtitan's
  op-level policy (``SelectiveAC``): it saves the outputs of matmuls and attention except every
  second matmul, and recomputes the rest. ``light`` (schedc's runtime,
  :mod:`schedc.runtime.checkpointing`) saves the output of every matmul (q, k, v, W_o, gate, up,
  down; GPT-2's four Conv1D addmms; MoE: the router's logits and the experts' two grouped matmuls
  per routed slot, a shared expert's three linears and its gate's) and attention's output and fp32
  logsumexp, besides the layer's input, and recomputes the rest (norms, activations, rotary
  embeddings, the router's softmax and top-k): no FLOPs again, only memory traffic. Both per-op
  modes run a full backward B (torch refuses W after I); held from I until W is counted as their
  kept bytes + the output gradients + dx. Transients of a checkpointed layer: F peaks in the MLP
  (light: the activation's and the product's FFN-wide tensors, 2 e f; GPT-2 3 e f + e h; an MoE layer
  when the routed outputs are gathered back, as without checkpointing, beside the experts'
  gathered input, or with wide experts in their SwiGLU); I, the same for every mode (measured),
  peaks in the MLP's backward, with the recomputed activation live (the activation without
  checkpointing, less its input), 2 e f of FFN-wide gradients (MoE: the gather's gradients, 2 k w h,
  or the experts' SwiGLU backward) and the norm's 4h, above the output gradients W consumes and dx.
  An MoE layer's parameter groups are the router and the experts' two stacked weights. Under full
  and selective its experts are recomputed whole (torchtitan's save list has the router's mm and
  top-k, not ``_grouped_mm``): F peaks in the experts' SwiGLU or their gather, I inside the
  recompute at the gather, and I..W holds the experts' down output gradient too.

Cost: O(1) per unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from schedc.model_costs.shape import ModelShape, need

Impl = Literal["hf", "torchtitan", "paper"]
# one of the modes, fastest first (schedc.core.costs.AC_MODES is the one list, so no Literal here)
AC = str


@dataclass
class UnitBytes:
    """One unit's bytes per token (activation dtype already applied) and its recompute FLOPs."""

    activation: float                      # held after F
    held: float                            # held from I until W
    transient: dict = field(default_factory=dict)  # F/I/W -> bytes live only while it runs
    recompute_i: float = 0.0               # forward FLOPs per token I repeats (checkpointing)
    recompute_w: float = 0.0               # forward FLOPs per token W repeats
    wgrads: float = 0.0                    # output gradients W consumes (part of held)


def widths(s: ModelShape) -> tuple[float, float, float, float]:
    """(h, q, k, f): hidden, query width, key/value width, FFN width of a resolved shape."""
    h = float(s.hidden)
    q = float(s.heads * need(s.head_dim)) if s.heads else h
    k = float(need(s.kv_heads) * need(s.head_dim)) if s.heads else h
    return h, q, k, float(need(s.ffn_hidden))


def _norm(width: float, rows: float, e: int, impl: Impl, device: str, layer_norm: bool) -> float:
    """Bytes a norm of `width` saves per token (its output excluded), `rows` rows per token."""
    if layer_norm:
        return e * width + 8 * rows
    if impl == "torchtitan":
        return (e * width if device == "cuda" else 8 * width) + 4 * rows
    return 4 * width + (e * width if e != 4 else 4 * width) + 4 * rows


def _mlp(s: ModelShape, e: int) -> tuple[float, float]:
    """(saved bytes, output gradients W consumes) of the MLP or MoE block."""
    h, _, _, f = widths(s)
    if not s.experts:
        if s.mlp == "gelu":
            return 5 * e * f, e * f + e * h
        return 4 * e * f, 2 * e * f + e * h
    E, k, fe = float(s.experts), float(s.experts_per_token), float(need(s.moe_ffn_hidden))
    saved = 4 * E + e * E + k * (e * h + 4 * e * fe + e * h) + 16 * k
    grads = e * E + k * 2 * e * fe
    if s.shared_ffn_hidden:
        fs = float(s.shared_ffn_hidden)
        saved += 4 * e * fs + e * h + 2 * e
        grads += 2 * e * fs + e * h + e
    return saved, grads


def weight_groups(s: ModelShape, impl: Impl) -> list[tuple[float, float]]:
    """(parameters, output width per token) of each group torch's ``stage_backward_weight``
    differentiates with one ``autograd.grad``, in its order (the order the layer registers its
    parameters): one linear with its bias, a norm (an RMSNorm's two h-wide gradients), an MoE
    block's router or one of its stacked experts' weights (``gate_up_proj``, ``down_proj``, k slots
    a token)."""
    h, q, k, f = widths(s)
    if s.family == "gpt2":  # ln_1, attention (c_attn's fused output is released with its split), ln_2, MLP
        ln = (2 * h, h)
        return [ln, (3 * h * h + 3 * h, 6 * h), (h * h + h, h), ln, (h * f + f, f), (f * h + h, h)]
    # the last of the linears that read one input also releases that input's gradient (h wide)
    if impl == "torchtitan":
        attention = [(h * (q + 2 * k), q + 2 * k + h), (q * h, h)]
    else:
        bias = 1.0 if s.family in ("qwen2", "qwen2_moe") else 0.0
        attention = [(h * q + bias * q, q), (h * k + bias * k, k), (h * k + bias * k, k + h), (q * h, h)]
    if s.family in ("qwen3", "qwen3_moe"):  # q and k norms, registered after W_o
        attention += [(float(need(s.head_dim)), 2 * q), (float(need(s.head_dim)), 2 * k)]
    if s.experts:
        E, fe, slots = float(s.experts), float(need(s.moe_ffn_hidden)), float(s.experts_per_token)
        mlp = [(h * E, E), (2 * E * fe * h, slots * 2 * fe), (E * fe * h, slots * h)]
        if s.shared_ffn_hidden:
            fs = float(s.shared_ffn_hidden)
            mlp += [(h * fs, fs), (h * fs, fs), (fs * h, h), (h, 1.0)]
    elif impl == "torchtitan":  # w1 (gate), w2 (down), w3 (up)
        mlp = [(h * f, f), (f * h, h), (h * f, f + h)]
    else:  # gate, up, down
        mlp = [(h * f, f), (h * f, f + h), (f * h, h)]
    return attention + mlp + [(h, 2 * h)] * 2


def accumulated_grads(groups: list[tuple[float, float]], param_bytes: float, e: int, tokens: float) -> float:
    """Bytes a W adds above what it started with when it adds its new gradients into those
    earlier microbatches left (a step's first W keeps them as the gradients instead: static
    bytes). A group's new gradients live until the next group's ``autograd.grad`` returns (the
    loop's variable still holds them), while each finished group releases the output gradients it
    consumed: the most of the previous and the current group's gradients less what the groups
    before the current one released. Cost: O(groups)."""
    most = previous = released = 0.0
    for params, width in groups:
        new = params * param_bytes
        most = max(most, previous + new - released)
        released += e * tokens * width
        previous = new
    return most


def _moe_transients(s: ModelShape, e: int) -> tuple[float, float]:
    """(F, I) transient bytes per token of transformers' routed experts (``grouped_mm_experts_forward``,
    its default experts implementation, with or without torch's grouped_mm kernel): F peaks when the routed
    outputs, weighted by the routing weights (w bytes: fp32 in Mixtral, whose router keeps its fp32
    top-k values, else the activation dtype), are gathered back to token order: both (k w h each)
    are live, with the router's logits (e E), the sorted expert ids (int64), their fp32 copy for
    histc and the routing weights (w) per slot. In I the gradient of the experts' gathered input
    (k e h) stays live until I returns, with the routing's index tensors (top-k's, the sort's and the
    inverse permutation, int64) and the gathered routing weights; it adds to the norms' peak."""
    h, E, k = float(s.hidden), float(s.experts), float(s.experts_per_token)
    w = 4 if s.family == "mixtral" else e
    return 2 * k * w * h + e * E + (12 + w) * k, k * e * h + (24 + w) * k


def layer_bytes(s: ModelShape, impl: Impl, device: str, ac: AC, forward_flops: float) -> UnitBytes:
    """Bytes per token of one decoder layer (see the module docstring) and the FLOPs per token its
    checkpointing repeats; `forward_flops` is the layer's forward FLOPs per token."""
    e = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}[s.dtype]
    if impl == "paper":
        return _paper_layer(s, e)
    h, q, k, f = widths(s)
    heads = float(s.heads or 1)
    kv = float(s.kv_heads or 1)
    gpt2 = s.family == "gpt2"
    norms = 2 * _norm(h, 1, e, impl, device, gpt2) + 2 * e * h          # two norms and their outputs
    attention = e * (2 * q + 2 * k) + 4 * heads
    qk_norm = s.family in ("qwen3", "qwen3_moe")
    if qk_norm:
        attention += _norm(q, heads, e, impl, device, False) + _norm(k, kv, e, impl, device, False)
    mlp, mlp_grads = _mlp(s, e)
    masks = 2 * h * (1 if device == "cuda" else e) if s.dropout else 0.0
    activation = norms + attention + mlp + masks
    wgrads = e * (q + 2 * k + h) + 2 * e * h + mlp_grads - e * h   # less the output gradient given
    if gpt2:
        wgrads = e * (3 * h + h) + 2 * e * h + mlp_grads - e * h    # c_attn fused (one output)
    if qk_norm:
        wgrads += e * (q + k)
    if impl == "torchtitan" and device == "cpu":  # CPU's composite RMSNorm multiplies its weight in fp32
        wgrads += (4 - e) * (2 * h + (q + k if qk_norm else 0))
    dx = e * h
    groups = len(weight_groups(s, impl))  # torch's stage_backward_weight runs one autograd.grad each
    # measured (benchmarks/memory_fidelity.py): the norms' fp32 temporaries in F; in I the
    # gradients that die inside it (the norms' fp32 backward, the residual stream's)
    transient = {"F": 4 * h, "I": (28 if gpt2 else 18) * h}
    if qk_norm and impl == "hf":  # I peaks in the q norm's backward (16 fp32 bytes a channel) when q > h
        transient["I"] = 16 * max(h, q) + 2 * h
    # measured on an H100 (benchmarks/gpu_layers.py, Qwen1.5-MoE at real size), not on CPU: with a
    # shared expert, I peaks with one more e h, without checkpointing and under light alike
    shared_cuda = e * h if s.shared_ffn_hidden and device == "cuda" else 0.0
    if s.experts:
        moe_f, moe_i = _moe_transients(s, e)
        transient = {"F": max(transient["F"], moe_f), "I": transient["I"] + moe_i + shared_cuda}
    if qk_norm and impl == "torchtitan" and device == "cpu":  # CPU's composite q/k norms' fp32 temporaries
        transient = {"F": max(transient["F"], 2.5 * q), "I": max(transient["I"], 11.5 * (q + k))}
    # B, a whole backward, consumes the output gradients W would need as it goes: a dense layer's
    # peaks with the largest weight's new gradient (added per parameter, units.py) beside the FFN-wide
    # gradient computed with it; an MoE layer's counted as I's peak beside it (an upper bound).
    # Measured by benchmarks/memory_fidelity.py --b
    b_none = transient["I"] if s.experts else e * f
    if ac == "none":
        return UnitBytes(activation, activation + wgrads + dx, {**transient, "B": b_none}, wgrads=wgrads)
    # a checkpointed layer's B first regenerates what it did not keep (activation - kept) and a copy of
    # its input, then runs as without checkpointing
    b_after = b_none + e * h
    # what a checkpointed forward holds at its peak: the MLP's live FFN-wide tensors, its input
    peak_f = (4 * e * f + 2 * e * h) if s.mlp == "gelu" else (3 * e * f + (8 * h if impl == "torchtitan" and
                                                                           device == "cpu" else e * h))
    recomputed_i = _checkpointed_i(s, e, activation, wgrads + dx) + shared_cuda
    if s.experts:  # measured: the experts' down output gradient is held for W, and the output
        # gradient given is no linear's (without checkpointing the saved ledger absorbs both)
        wgrads += (float(s.experts_per_token) + 1) * e * h
        peak_f = _moe_checkpointed_f(s, e, selective=ac == "selective")
        if ac != "light":  # light saves the experts' outputs: its recompute stops short of the gather
            recomputed_i = max(recomputed_i, _moe_recompute_i(s, e, activation) - wgrads - dx)
    if ac == "full":
        kept = e * h
        # W: one recompute per parameter group, whose recomputed tensors outlive it until the graph
        # nodes of later groups are released (measured; benchmarks/memory_fidelity.py). torchtitan's
        # block leaves less at the end but peaks in its MLP's middle group, with the gradients
        # added in beside; its leftovers are taken as HF's, which is over there, never under
        leak = groups - (4 / 3 if gpt2 else 3)
        return UnitBytes(kept, kept + wgrads + dx + (e * h if gpt2 else 0),
                         {"F": peak_f, "I": recomputed_i, "W": leak * activation, "B": activation - kept + b_after},
                         recompute_i=forward_flops, recompute_w=groups * forward_flops, wgrads=wgrads)
    if ac == "light":  # its recompute moves memory only: its time is counted from that traffic (units)
        kept = e * h + _light_saved(s, e)
        # measured: a Llama-style layer's B peaks with one more h-wide tensor than under full or selective
        light_b = max(0.0, activation - kept) + b_after + (0.0 if gpt2 else e * h)
        return UnitBytes(kept, kept + wgrads + dx, {"F": _light_peak_f(s, e, device), "I": recomputed_i,
                                                    "B": light_b}, wgrads=wgrads)
    kept = e * h + _selective_saved(s, impl, device, e)
    if not s.experts:
        peak_f = _selective_peak_f(s, impl, e, peak_f)
    # per op: torch runs no W after I here, so B = I + W recomputes once, all of it counted in I
    return UnitBytes(kept, kept + wgrads + dx, {"F": peak_f, "I": recomputed_i, "B": max(0.0, activation - kept) + b_after},
                     recompute_i=selective_recompute_flops(s, impl), wgrads=wgrads)


def _checkpointed_i(s: ModelShape, e: int, activation: float, held: float) -> float:
    """I's transient of a checkpointed layer, the same for full, selective and light (measured:
    the backward regenerates every tensor the layer without checkpointing keeps, whatever the
    mode saved). It peaks in the MLP's backward: the recomputed activation (without its input),
    two FFN-wide gradients and, with RMSNorm, the norm's 4h, above what outlives I: the output
    gradients W would consume, dx, and one more e h gradient of the residual stream."""
    h, _, _, f = widths(s)
    mlp = _moe_peak_i(s, e) if s.experts else 2 * e * f
    norm = 0.0 if s.family == "gpt2" else 4 * h
    return activation - e * h + mlp + norm - held - e * h


def _moe_peak_i(s: ModelShape, e: int) -> float:
    """What an MoE layer's backward adds at its peak in a checkpointed I (measured, then counted):
    either the gradients of the routed outputs' gather back to token order (2 k w h, w the routing
    weights' bytes) or, with wide experts, the experts' SwiGLU backward (two FFN-wide gradients per
    slot, the experts' gathered input gone by then), or a wide shared expert's SwiGLU backward."""
    h, E, k, fe = float(s.hidden), float(s.experts), float(s.experts_per_token), float(need(s.moe_ffn_hidden))
    w = 4 if s.family == "mixtral" else e
    gather = 2 * k * w * h + 2 * (w - 3) * h - 2 * E + 18 * k
    experts = 2 * k * e * fe - k * e * h - 2 * h
    # a wide shared expert (Qwen2-MoE) peaks in its SwiGLU's backward, as a dense MLP does
    shared = e * float(s.shared_ffn_hidden)
    return max(gather, experts, shared)


def _moe_checkpointed_f(s: ModelShape, e: int, selective: bool) -> float:
    """F's transient of an MoE layer under full or selective checkpointing (measured, then counted):
    nothing of the experts is saved, so F peaks either in their SwiGLU (gate_up's output, the
    activation and the product: 4 k e f_e) or when the weighted routed outputs are gathered back to
    token order (the down output, k e h, the weighted outputs and their gather, 2 k w h, and the
    inverse permutation), above the residual stream (e h), the router's logits (e E), the routing's
    int64 indices (top-k's, the sort's two: 24 per slot), the routing weights (w per slot, twice:
    top-k's or their cast, and the sorted ones), histc's fp32 input and the experts' gathered input
    (k e h). Selective saves the router's logits and top-k's output (its indices; in Mixtral also
    the weights, top-k's own fp32 values), so those are kept bytes, not transient. A shared expert
    (Qwen2-MoE) adds its output, or peaks in its own SwiGLU."""
    h, E, k, fe = float(s.hidden), float(s.experts), float(s.experts_per_token), float(need(s.moe_ffn_hidden))
    w = 4 if s.family == "mixtral" else e
    base = e * h + e * E + (28 + 2 * w) * k + k * e * h
    if selective:
        base -= e * E + 8 * k + (w * k if s.family == "mixtral" else 0)
    routed = base + max(4 * k * e * fe, 8 * k + k * e * h + 2 * k * w * h)
    if not s.shared_ffn_hidden:
        return routed
    # Qwen2-MoE's shared expert runs first: its output (e h) is live while the routed experts run;
    # its own SwiGLU peaks at the product (the activation, up's output and the product: 3 e f_s;
    # selective saves up's output)
    fs = float(s.shared_ffn_hidden)
    return max(routed + e * h, e * h + (2 if selective else 3) * e * fs)


def _moe_recompute_i(s: ModelShape, e: int, activation: float) -> float:
    """What is live when a full or selective MoE layer's I peaks inside its own recompute (measured,
    then counted): the backward's first node that needs a saved tensor is the gather's, so the
    forward is rerun with the gradient of the gathered outputs (k w h) already live; at its gather
    back to token order every tensor the layer without checkpointing saves is live again (its
    activation, which counts the experts' down output as saved: here that output is live anyway),
    with the residual stream (e h), the weighted outputs and their gather (2 k w h) and the inverse
    permutation (int64 per slot)."""
    h, k = float(s.hidden), float(s.experts_per_token)
    w = 4 if s.family == "mixtral" else e
    return activation + e * h + 3 * k * w * h + 8 * k


def _light_saved(s: ModelShape, e: int) -> float:
    """Bytes per token light AC saves besides the layer's input: every matmul's output and
    attention's output and fp32 logsumexp (the module docstring lists them)."""
    h, q, k, f = widths(s)
    attention = e * q + 4 * float(s.heads or 1)
    if s.family == "gpt2":  # Conv1D: c_attn (q, k, v fused), c_proj, c_fc, the MLP's c_proj
        return attention + e * (3 * h + h + f + h)
    mlp = e * (2 * f + h)
    if s.experts:  # the router's logits; per routed slot gate and up (one grouped matmul), down
        E, k_slots, fe = float(s.experts), float(s.experts_per_token), float(need(s.moe_ffn_hidden))
        mlp = e * E + k_slots * e * (2 * fe + h)
        if s.shared_ffn_hidden:  # its gate, up and down linears and its sigmoid gate's linear
            mlp += e * (2 * float(s.shared_ffn_hidden) + h) + e
    return attention + e * (q + 2 * k + h) + mlp


def _light_peak_f(s: ModelShape, e: int, device: str) -> float:
    """F's transient of a light layer (measured, then counted): the MLP's activation output and the
    product it feeds down (SwiGLU: 2 e f; GPT-2's gelu_new: three FFN-wide temporaries and an
    h-wide one), or in an MoE layer the gather of the weighted routed outputs back to token order
    (as without checkpointing, 2 k w h) beside the experts' gathered input (k e h), the MLP's input
    and the routing's int64 indices (five per slot) and weights; or, with wide experts, their
    SwiGLU's activation and product (2 k e f_e)."""
    h, _, _, f = widths(s)
    if s.family == "gpt2":
        return 3 * e * f + e * h
    if not s.experts:
        return 2 * e * f
    k, fe = float(s.experts_per_token), float(need(s.moe_ffn_hidden))
    w = 4 if s.family == "mixtral" else e
    if device == "cuda":
        # measured on an H100 (benchmarks/gpu_layers.py: Qwen3-30B-A3B, Mixtral-8x7B, Qwen1.5-MoE at
        # real size), not on CPU: one more token-permuted copy (k e h) beside the gather, and the
        # experts' SwiGLU peaks as if gate_up's saved output were not shared (4 k e f_e)
        return e * h + 41 * k + max(k * e * h + k * (e * h + 2 * w * h), 4 * k * e * fe)
    return e * h + 41 * k + max(k * (e * h + 2 * w * h), 2 * k * e * fe)


def _selective_matmuls(s: ModelShape, impl: Impl) -> list[tuple[float, float, bool]]:
    """(input width, output width, saved) of a layer's matmuls in execution order under torchtitan's
    SelectiveAC: every second plain mm/linear recomputed, an addmm (a linear with a bias) always
    saved and not counted, an MoE's experts (grouped matmuls, not in its save list) recomputed."""
    h, q, k, f = widths(s)
    if s.family == "gpt2":  # Conv1D: every projection is an addmm
        order = [(h, 3 * h, "addmm"), (h, h, "addmm"), (h, f, "addmm"), (f, h, "addmm")]
    else:
        bias = "addmm" if s.family in ("qwen2", "qwen2_moe") else "mm"
        qkv = [(h, q + 2 * k, "mm")] if impl == "torchtitan" else [(h, q, bias), (h, k, bias), (h, k, bias)]
        mlp = [(h, f, "mm"), (h, f, "mm"), (f, h, "mm")]  # gate, up, down (torchtitan: w1, w3, w2)
        if s.experts:  # the router, then per routed slot gate and up (one grouped matmul) and down
            E, slots, fe = float(s.experts), float(s.experts_per_token), float(need(s.moe_ffn_hidden))
            mlp = [(h, E, "mm"), (slots * h, 2 * fe, "grouped"), (slots * fe, h, "grouped")]
            if s.shared_ffn_hidden:  # Qwen2-MoE: the shared expert before the router, its gate after
                fs = float(s.shared_ffn_hidden)
                mlp = [(h, fs, "mm"), (h, fs, "mm"), (fs, h, "mm")] + mlp + [(h, 1.0, "mm")]
        order = qkv + [(q, h, "mm")] + mlp  # W_o between them
    out, count = [], 0
    for width_in, width_out, kind in order:
        if kind == "mm":
            count += 1
        out.append((width_in, width_out, kind == "addmm" or kind == "mm" and count % 2 == 1))
    return out


def _selective_peak_f(s: ModelShape, impl: Impl, e: int, full_peak: float) -> float:
    """F's transient of a dense layer under selective checkpointing (measured, then counted): full
    checkpointing's MLP peak less what the save list keeps of it. With SwiGLU's gate output saved
    (Hugging Face's Llama, Mistral, Qwen3; torchtitan's w1) the peak is its activation, up's output
    and their product (3 e f); with up's saved instead (Qwen2, whose biased q/k/v take no turn in
    the alternation) up's output leaves the transient; GPT-2's saved c_fc output leaves it with
    the MLP's input."""
    h, _, _, f = widths(s)
    matmuls = _selective_matmuls(s, impl)
    if s.mlp == "gelu":
        return full_peak - (e * f + e * h if matmuls[-2][2] else 0.0)
    gate_saved, up_saved = matmuls[-3][2], matmuls[-2][2]
    if gate_saved:
        return 3 * e * f
    return full_peak - (e * f if up_saved else 0.0)


def selective_recompute_flops(s: ModelShape, impl: Impl) -> float:
    """Forward FLOPs per token selective AC repeats: the matmuls it does not save."""
    return sum(2 * a * b for a, b, saved in _selective_matmuls(s, impl) if not saved)


def selective_saves_attention(device: str) -> bool:
    """Whether selective AC saves the attention kernel's output (or recomputes attention): its save
    list names CUDA's attention kernels, not CPU's flash kernel."""
    return device == "cuda"


def _selective_saved(s: ModelShape, impl: Impl, device: str, e: int) -> float:
    """Bytes per token selective AC saves (torchtitan's SelectiveAC; NeMo AutoModel's follows it):
    the outputs of the matmuls :func:`_selective_matmuls` saves, and the attention's output and
    logsumexp where it saves them (:func:`selective_saves_attention`)."""
    saved = sum(e * width for _, width, kept in _selective_matmuls(s, impl) if kept)
    if selective_saves_attention(device):
        saved += e * widths(s)[1] + 4 * float(s.heads or 1)
    if s.experts:  # top-k is in torchtitan's save list: its fp32 values and int64 indices
        saved += 12 * float(s.experts_per_token)
    return saved


def _paper_layer(s: ModelShape, e: int) -> UnitBytes:
    """The textbook count (Korthikanti et al. 2022 without score terms; zero bubble's M_W with
    held='paper'): kept for comparison with the papers and with schedc.library.transformer_profile."""
    h, q, k, f = widths(s)
    gated = s.mlp == "swiglu"
    act = 2 * e * h + e * (h + q + 2 * k + q) + e * h + (3 if gated else 2) * e * f + (2 * h if s.dropout else 0)
    kept = (e * (h + q + h) + e * f + e * (q + 2 * k) + e * h + (2 if gated else 1) * e * f + e * h)
    return UnitBytes(act, act, wgrads=kept)


def head_bytes(s: ModelShape, impl: Impl, device: str, vocab: float) -> UnitBytes:
    """Final norm + LM head + cross-entropy loss, per token (`vocab` already divided by tp)."""
    e = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}[s.dtype]
    h = float(s.hidden)
    if impl == "paper":
        act = e * vocab + 4 * vocab + 2 * e * h
        return UnitBytes(act, act, wgrads=e * h + e * vocab)
    if impl == "torchtitan":
        return _chunked_head(s, e, device, vocab)
    act = _norm(h, 1, e, impl, device, s.family == "gpt2") + e * h + 4 * vocab + 8
    wgrads = e * vocab + e * h
    # I peaks in the loss's backward (the fp32 gradients of the log-probabilities and the logits,
    # less the bf16 logits gradient and the h-wide gradients that outlive the peak) or, with a
    # small vocabulary, in the norm's backward
    norm_backward = 12 * h if s.family == "gpt2" else 18 * h
    loss_backward = (8 - e) * vocab - 2 * e * h + 8
    transient = {"F": 4 * vocab, "I": max(loss_backward, norm_backward)}
    if device == "cuda":
        # measured on an H100 (benchmarks/gpu_layers.py), not on CPU: W allocates a buffer the size of
        # the logits' gradient after the 4 h bytes a token of the norm's backward are freed
        transient["W"] = max(0.0, e * vocab - 4 * h)
    return UnitBytes(act, act + wgrads + e * h, transient, wgrads=wgrads)


# torchtitan's default loss (ChunkedLossWrapper.Config.num_chunks)
LOSS_CHUNKS = 8


def _chunked_head(s: ModelShape, e: int, device: str, vocab: float) -> UnitBytes:
    """torchtitan's last stage: the norm, then ``ChunkedLossWrapper``, which runs the LM head, the
    loss and their backward chunk by chunk inside F and keeps only an fp32 gradient of the hidden
    states until I (read from torchtitan 0.3.0's components/loss.py; not measured: FlexAttention and
    the trainer's wiring do not run on CPU). Per chunk, while F runs: the logits, their fp32 copy,
    log-softmax's output and the fp32 gradients of both ((e + 12) V / chunks)."""
    h = float(s.hidden)
    act = _norm(h, 1, e, "torchtitan", device, False) + 4 * h
    return UnitBytes(act, act + 2 * e * h, {"F": (e + 12) * vocab / LOSS_CHUNKS, "I": 18 * h}, wgrads=e * h)


def embedding_bytes(s: ModelShape, device: str) -> UnitBytes:
    """Token ids (int64) the embedding's backward indexes with; GPT-2 adds its position ids and
    the embedding dropout's mask."""
    e = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}[s.dtype]
    act = 8.0 + (8.0 if s.positions else 0.0)
    if s.dropout:
        act += s.hidden * (1 if device == "cuda" else e)
    return UnitBytes(act, act, {"F": e * s.hidden} if s.positions else {})
