"""Seconds of each unit's F, I and W from its operations, at a GPU's per-operation rates.

Problem: the one-rate count (FLOPs over ``flops_per_second``) prices a layer's forward, input
gradient (I) and weight gradient (W) at one rate, while a GPU runs them at different ones (on an
H200 about 520, 475 and 680 TFLOP/s for a Llama-3-8B layer at seq 4096, issue 50) and short
sequences are bound by the host launching kernels. The ratio F : I : W decides the schedule.

Method: each pass of each unit is a list of work (:class:`Ops`), priced at the rates of a card
(:class:`~schedc.core.device_rates.DeviceRates`): seconds = GEMM FLOPs / that pass's GEMM rate +
attention FLOPs / the attention rate of its direction + bytes / the memory rate (+ routed
experts' FLOPs / their rate) on the GPU, or kernels x the host's time per kernel where that is
longer. The terms, with t tokens of the microbatch, s
the sequence, q and k the query and key/value widths, h hidden, f FFN width, e bytes per element,
V vocabulary:

- GEMMs by shape: F one forward GEMM per weight, 2 t x in x out FLOPs; I one input-gradient GEMM
  per weight; W one weight-gradient GEMM per weight and nothing else (its norms' weight-gradient
  reductions, 8 h bytes per token, are left out: under 1% of W).
- Attention: the sdpa kernel that runs on CUDA for bfloat16 and float16, flash, causal: 2 t s q
  FLOPs forward (half the 4 t s q of the one-rate count: the masked half of the blocks is
  skipped), its backward 2.5 x that (five block GEMMs, QK^T recomputed, against two), in I.
- Memory-bound ops by the bytes they read and write per token: the forward's are the ledger of
  :func:`schedc.model_costs.traffic.recompute_traffic` (the ops between the matmuls and attention:
  norms, rotary embedding of q and k, SwiGLU's or GELU's elementwise work, dropout, an MoE layer's
  routing and permutations) plus the second residual add (3 e h); I moves twice the forward's
  bytes (each elementwise backward reads the output gradient and its saved input and writes the
  input gradient); W none. The head: the final norm and the loss's float32 logits (cast (e + 4) V,
  log-softmax 8 V per token in F; the NLL backward's fill 4 V, log-softmax backward 12 V and the
  cast back (4 + e) V in I, with the norm's backward). The embedding: the gather (2 e h per token)
  in F, and in W the output gradient read and the dense gradient written (2 e h per token and
  3 e V h), the one-rate count's bytes.
- Kernels per unit and pass, a rough count of what Hugging Face's eager layer launches: an eager
  RMSNorm 8 (casts, pow, mean, add, rsqrt, two products), torch's fused norm 1, the rotary
  embedding 5 per tensor, one per linear, attention 1 and its output copy 1, the MLP's
  elementwise 2, the adds 2 (:func:`layer_ops`); I twice F's elementwise kernels, one per linear,
  3 for flash's backward and 2 adds of the residual branches' gradients; W one per linear. These
  are what make seq 1024 slower than its FLOPs: the host's time per kernel (forward: eager
  dispatch and the modules' Python; I and W: autograd's engine and torch's split backward) is
  fitted to it, and a pass is the longer of the GPU's and the host's seconds.
- Tensor parallelism splits the GEMMs, attention's heads and, with sequence parallelism, the
  memory-bound ops' tokens over ``tp``; its collectives are :data:`schedc.model_costs.units.TP_COLLECTIVES`'
  (counted there, added to these seconds).
- MoE: the routed top-k experts' GEMMs in transformers' per-expert loop at the card's
  ``moe_gemm`` rate, the router's GEMM with the dense ones, the routing and permutations' bytes
  (in the ledger), and per expert its 3 GEMMs and 6 gathers, scatters and elementwise kernels.

The textbook count (``impl="paper"``) names no code: it is priced as Hugging Face's eager layer,
the code the rates were fitted to (``benchmarks/time_fit.py``: whole-layer H100 and H200 times,
within 3.5%; the split of a pass among its terms is the fit's, not measured op by op). Where the
table has no measured rate for what a run needs (:func:`check_rates`) the run is refused with one
line, never priced at a guess. Cost: O(1) per unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from schedc.core.device_rates import DeviceRates
from schedc.errors import ParameterError
from schedc.model_costs import traffic
from schedc.model_costs.memory import selective_saves_attention, widths
from schedc.model_costs.shape import DTYPE_BYTES, ModelShape, need

if TYPE_CHECKING:
    from schedc.model_costs.profile import Run

FLASH_BACKWARD = 2.5  # flash attention's backward FLOPs over its forward's
ELEMENTWISE_BACKWARD = 2.0  # an elementwise op's backward bytes (and kernels) over its forward's
PASSES = ("F", "I", "W")


@dataclass(frozen=True)
class Ops:
    """The work of one pass of one unit."""

    gemm: float = 0.0  # FLOPs of dense GEMMs
    attention: float = 0.0  # FLOPs of the attention core as the kernel runs it
    bytes: float = 0.0  # bytes memory-bound ops read and write
    kernels: float = 0.0  # kernels launched
    experts: float = 0.0  # FLOPs of routed experts' GEMMs


def terms(ops: Ops, kind: str) -> dict[str, float]:
    """What multiplies each rate's inverse in the GPU's seconds of `ops` run as pass `kind` (F, I
    or W): those seconds are linear in the inverse rates (``benchmarks/time_fit.py`` fits them so)."""
    out = {"gemm_" + kind.lower(): ops.gemm, "memory": ops.bytes}
    if kind != "W":
        out["attention_f" if kind == "F" else "attention_b"] = ops.attention
    if ops.experts:
        out["moe_gemm"] = ops.experts
    return out


def host_rate(kind: str) -> str:
    """The field of :class:`DeviceRates` that is the host's seconds per kernel of pass `kind`."""
    return "launch" if kind == "F" else "launch_backward"


def gpu_seconds(ops: Ops, kind: str, rates: DeviceRates) -> float:
    """The GPU's seconds of `ops` run as pass `kind` at `rates`: the sum of its terms."""
    total = 0.0
    for name, amount in terms(ops, kind).items():
        if amount:
            rate = getattr(rates, name)
            assert rate is not None, f"check_rates refuses a run that needs {name}"
            total += amount / rate
    return total


def seconds(ops: Ops, kind: str, rates: DeviceRates) -> float:
    """The seconds of `ops` run as pass `kind` at `rates`: the GPU's, or the host's launching its
    kernels where that is longer (launches are asynchronous: the host runs ahead of a busy GPU,
    and a GPU waits for a slow host)."""
    return max(gpu_seconds(ops, kind, rates), ops.kernels * getattr(rates, host_rate(kind)))


def check_rates(s: ModelShape, rates: DeviceRates, device: str) -> None:
    """A ParameterError about ``gpu`` when `rates` has no measured rate for what the run needs:
    routed experts, a dtype flash attention does not run, a head dimension over flash's 256,
    CPU kernels."""
    what = ""
    if device != "cuda":
        what = f"device {device!r}: its rates are CUDA kernels'; count with device cuda, or leave it out"
    elif s.experts and rates.moe_gemm is None:
        what = f"{rates.name} has no measured rate for routed experts' GEMMs; count this MoE model at one FLOP rate "
        what += "(leave it out)"
    elif s.dtype not in ("bfloat16", "float16"):
        what = f"{rates.name}'s attention rates are flash attention's, which runs bfloat16 and float16, not "
        what += f"{s.dtype}; count at one FLOP rate (leave it out)"
    elif s.head_dim is not None and s.head_dim > 256:
        what = (f"head_dim {s.head_dim} is over flash attention's 256, whose rates are all {rates.name} has; "
                "count at one FLOP rate (leave it out)")
    if what:
        raise ParameterError("gpu", what)


def _norm_kernels(impl: str, family: str) -> float:
    if family == "gpt2":
        return 1.0  # torch's fused LayerNorm
    return 1.0 if impl == "torchtitan" else 8.0


def _ledger_impl(impl: str) -> str:
    # the textbook count names no code: priced as Hugging Face's eager layer, the code measured
    return "torchtitan" if impl == "torchtitan" else "hf"


def layer_ops(s: ModelShape, impl: str, device: str, tokens: float, seq: float,
              tp: int = 1) -> tuple[Ops, Ops, Ops]:
    """F, I and W of one decoder layer for `tokens` tokens of sequences of `seq`."""
    h, q, k, f = widths(s)
    e = DTYPE_BYTES[s.dtype]
    impl = _ledger_impl(impl)
    attention_weights = h * q + 2 * h * k + q * h
    if s.experts:
        routed = s.experts_per_token * 3 * h * need(s.moe_ffn_hidden)
        dense = attention_weights + 3 * h * s.shared_ffn_hidden + h * s.experts  # the router is a GEMM
    else:
        routed = 0.0
        dense = attention_weights + (3 if s.mlp == "swiglu" else 2) * h * f
    linears = (5.0 if impl == "torchtitan" else 7.0) if s.mlp == "swiglu" else 4.0
    if s.experts:
        linears = 4.0 + 1.0 + (3.0 if s.shared_ffn_hidden else 0.0)  # attention's, the router, the shared expert
    norms = 2 * _norm_kernels(impl, s.family) + (2 * _norm_kernels(impl, s.family)
                                                if s.family in ("qwen3", "qwen3_moe") else 0.0)
    rotary = 0.0 if s.family == "gpt2" else 10.0
    mlp_elementwise = 2.0 + (2.0 if s.dropout else 0.0)
    # an MoE layer's router (softmax, top-k, casts, sort: 6) and per expert its gather, index, SiLU,
    # product, weighting and scatter-add (6) beside its three GEMMs
    elementwise = norms + rotary + 1 + mlp_elementwise + 2 + (6.0 + s.experts * 6 if s.experts else 0.0)
    expert_gemms = 3.0 * s.experts if s.experts else 0.0
    moved = traffic.recompute_traffic(s, impl, device, "light") + 3 * e * h  # + the second residual add
    attention = 2 * tokens * seq * q  # causal: half the blocks
    f_ops = Ops(gemm=2 * tokens * dense / tp, attention=attention / tp, bytes=moved * tokens / tp,
                kernels=linears + 1 + elementwise + expert_gemms, experts=2 * tokens * routed / tp)
    i_ops = Ops(gemm=f_ops.gemm, attention=FLASH_BACKWARD * f_ops.attention, bytes=ELEMENTWISE_BACKWARD * f_ops.bytes,
                kernels=linears + 3 + ELEMENTWISE_BACKWARD * elementwise + 2 + expert_gemms, experts=f_ops.experts)
    w_ops = Ops(gemm=f_ops.gemm, kernels=linears + expert_gemms, experts=f_ops.experts)
    return f_ops, i_ops, w_ops


def head_ops(s: ModelShape, impl: str, device: str, tokens: float, tp: int = 1) -> tuple[Ops, Ops, Ops]:
    """F, I and W of the final norm, the LM head and the loss (torchtitan's chunked loss runs all
    three in F: :func:`unit_seconds` adds them there)."""
    h, V = float(s.hidden), float(s.vocab)
    e = DTYPE_BYTES[s.dtype]
    impl = _ledger_impl(impl)
    if s.family == "gpt2":
        norm = traffic._layer_norm(h, e, device)
    else:
        norm = traffic._rms_norm(h, 1.0, e, impl, device)
    kernels = _norm_kernels(impl, s.family)
    gemm = 2 * tokens * h * V / tp
    f_ops = Ops(gemm=gemm, bytes=(norm + (e + 4) * V + 8 * V) * tokens / tp, kernels=kernels + 1 + 5)
    i_ops = Ops(gemm=gemm, bytes=(ELEMENTWISE_BACKWARD * norm + 4 * V + 12 * V + (4 + e) * V) * tokens / tp,
                kernels=ELEMENTWISE_BACKWARD * kernels + 1 + 4)
    w_ops = Ops(gemm=gemm, kernels=1.0)
    return f_ops, i_ops, w_ops


def embedding_ops(s: ModelShape, tokens: float, tp: int = 1) -> tuple[Ops, Ops, Ops]:
    """F, I and W of the embedding (its W is its whole backward: the dense gradient's scatter-add)."""
    h, V = float(s.hidden), float(s.vocab)
    e = DTYPE_BYTES[s.dtype]
    lookups = 2.0 if s.positions else 1.0
    f_ops = Ops(bytes=lookups * 2 * e * tokens * h / tp, kernels=lookups + (1.0 if s.positions else 0.0))
    w_ops = Ops(bytes=(lookups * 2 * e * tokens * h + 3 * e * V * h) / tp, kernels=3.0 * lookups)
    return f_ops, Ops(), w_ops


def unit_seconds(ops: tuple[Ops, Ops, Ops], rates: DeviceRates) -> tuple[float, float, float]:
    """(F, I, W) seconds of a unit's three passes."""
    f, i, w = ops
    return seconds(f, "F", rates), seconds(i, "I", rates), seconds(w, "W", rates)


def layer_seconds(s: ModelShape, run: "Run", ac: str, recompute_i: float, recompute_w: float,
                  moved: float) -> tuple[float, float, float]:
    """(F, I, W) seconds of one layer of `run` under checkpointing mode `ac`, without tensor
    parallelism's collectives. `recompute_i`, `recompute_w`: the forward FLOPs per token I and W
    repeat (:class:`schedc.model_costs.memory.UnitBytes`); `moved`: the bytes per token a per-op
    mode's recompute moves (:func:`schedc.model_costs.traffic.recompute_traffic`). A full
    recompute costs its share of the forward's FLOPs of the forward's seconds (its memory-bound
    ops and launches with it); a per-op mode's recompute its GEMM FLOPs at the forward's rate and
    its bytes at the memory rate (and attention's forward where selective does not save it), in
    I, never more than the forward."""
    assert run.rates is not None
    tokens, seq = float(run.seq * run.mbs), float(run.seq)
    ops = layer_ops(s, run.impl, run.device, tokens, seq, run.tp)
    f, i, w = unit_seconds(ops, run.rates)
    if ac == "none":
        return f, i, w
    forward_flops = (ops[0].gemm + ops[0].experts + 2 * ops[0].attention) * run.tp / tokens  # one-rate FLOPs/token
    if ac == "full":
        return f, i + f * recompute_i / forward_flops, w + f * recompute_w / forward_flops
    again = recompute_i * tokens / run.tp / run.rates.gemm_f + moved * tokens / run.tp / run.rates.memory
    if ac == "selective" and not selective_saves_attention(run.device):
        again += ops[0].attention / run.rates.attention_f  # its recompute runs attention again
    return f, i + min(again, f), w + f * recompute_w / forward_flops
