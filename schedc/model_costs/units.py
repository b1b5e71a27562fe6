"""The units' StageCosts from a resolved shape and checked settings: FLOPs, bytes, parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from schedc.core.costs import PER_OP_AC, StageCost
from schedc.model_costs import memory, timing
from schedc.model_costs.shape import DTYPE_BYTES, ModelShape, need

if TYPE_CHECKING:
    from schedc.model_costs.profile import Run
from schedc.model_costs.traffic import recompute_traffic


def layer_params(s: ModelShape, impl: str) -> float:
    """Parameters of one layer: attention, MLP or experts + router, and (but for the textbook
    count) norm weights and biases."""
    h, q, k, f = memory.widths(s)
    attention = h * q + 2 * h * k + q * h
    if s.experts:
        mlp = s.experts * 3 * h * need(s.moe_ffn_hidden) + h * s.experts
        mlp += 3 * h * s.shared_ffn_hidden + (h if s.shared_ffn_hidden else 0)
    else:
        mlp = (3 if s.mlp == "swiglu" else 2) * h * f
    if impl == "paper":
        return attention + mlp
    extra = 2 * h  # two norm weights
    if s.family in ("qwen2", "qwen2_moe"):
        extra += q + 2 * k
    if s.family in ("qwen3", "qwen3_moe"):
        extra += 2 * need(s.head_dim)
    if s.family == "gpt2":
        extra += 2 * h + 3 * h + h + f + h  # norm biases, c_attn, c_proj, c_fc, mlp c_proj biases
    return attention + mlp + extra


def layer_flops(s: ModelShape, tokens: float, seq: float) -> tuple[float, float, float]:
    """(linear FLOPs, attention-core FLOPs) of one layer's forward for `tokens` tokens, and its
    per-token forward FLOPs."""
    h, q, k, f = memory.widths(s)
    if s.experts:
        routed = s.experts_per_token * 3 * h * need(s.moe_ffn_hidden) + 3 * h * s.shared_ffn_hidden + h * s.experts
        linear = 2 * tokens * (h * q + 2 * h * k + q * h + routed)
    else:
        linear = 2 * tokens * (h * q + 2 * h * k + q * h + (3 if s.mlp == "swiglu" else 2) * h * f)
    attention = 4 * tokens * seq * q
    return linear, attention, (linear + attention) / tokens


# Tensor parallelism's collectives per unit and pass, as torchtitan 0.3.0 shards a decoder
# (models/common/decoder_sharding.py, enable_sequence_parallel on by default in config/configs.py):
# a layer's F all-gathers the sequence-sharded input of attention and of the MLP and
# reduce-scatters wo's and w2's outputs; its I runs the transposes (a reduce-scatter per
# all-gather and back). Plain TP's two all-reduces move the same bytes (an all-reduce is a
# reduce-scatter then an all-gather). The embedding reduce-scatters its output in F and gathers
# its output gradient in its W (its whole backward); the LM head gathers its input in F and
# reduce-scatters that input's gradient in its backward. W's weight gradients stay local; the
# norms' replicated weights' all-reduce (h numbers) is not counted.
TP_COLLECTIVES = {"layer": (4, 4, 0), "embedding": (1, 0, 1), "head": (1, 1, 0)}  # (F, I, W)


def tp_collective_seconds(nbytes: float, tp: int, bandwidth: float, latency: float) -> float:
    """One ring all-gather or reduce-scatter of a tensor of `nbytes` (whole, not per rank) over
    `tp` ranks of one node: each rank sends and receives (tp - 1) / tp of it at `bandwidth`,
    plus `latency` (NCCL's ring; the standard alpha-beta count). 0 with no tensor parallelism."""
    return 0.0 if tp == 1 else (tp - 1) / tp * nbytes / bandwidth + latency


def build_units(s: ModelShape, run: Run, names: list[list[str]]) -> tuple[list[StageCost], float]:
    """The units in model order and the bytes sent across each unit boundary."""
    e = DTYPE_BYTES[s.dtype]
    tokens, seq, tp = float(run.seq * run.mbs), float(run.seq), run.tp
    flops = run.flops * tp  # tensor parallelism splits every matmul; its collectives are added (TP_COLLECTIVES)
    # one collective of the unit boundary's tensor (b s h elements), whole
    collective = tp_collective_seconds(e * tokens * s.hidden, tp, run.tp_bandwidth, run.tp_latency)

    def tp_comm(unit: str) -> tuple[float, float, float]:
        f, i, w = (n * collective for n in TP_COLLECTIVES[unit])
        return f, i, w
    # sharded states, plus what FSDP2 under torch's pipelining holds unsharded all step (profile.fsdp_held)
    # resolve refuses an impl or names outside memory.Impl and profile.Names
    impl, device = cast("memory.Impl", run.impl), run.device
    per_param = run.static_per_param / run.dp_shard + run.fsdp_held_per_param
    h, V = float(s.hidden), float(s.vocab)
    linear, attention, per_token = layer_flops(s, tokens, seq)
    params = layer_params(s, impl)
    groups = memory.weight_groups(s, impl)

    # a W adds its new gradients into those earlier microbatches left: they are live until added
    # (memory.accumulated_grads). FSDP2 before torch 2.15 moves the gradient out of .grad at each
    # backward's hook (profile.fsdp_held counts that copy all step); from 2.15 a W adds its
    # reduce-dtype gradient and a B its compute-dtype one (profile.fsdp_transients). The textbook
    # count has no transients
    accumulates = impl != "paper" and (not run.fsdp_held_per_param or run.fsdp_w_grad_bytes > 0)
    w_grad, b_grad = (run.fsdp_w_grad_bytes, e) if run.fsdp_w_grad_bytes else (run.param_bytes, run.param_bytes)

    def cost(fw, inp, wt, b: memory.UnitBytes, n_params, modules, unit_groups=()) -> StageCost:
        held = b.held if run.held == "torch" or impl != "paper" else b.wgrads
        transient = {k: v * tokens / tp for k, v in b.transient.items()}
        if accumulates and unit_groups:  # tensor parallelism splits the weights and the gradients alike
            added = memory.accumulated_grads(unit_groups, w_grad, e, tokens) / tp
            transient["W"] = transient.get("W", 0.0) + added
            if "B" in transient:  # a whole backward adds each new gradient as it comes: the largest
                transient["B"] += max(n for n, _ in unit_groups) * b_grad / tp
        if run.fsdp_reduce_excess_per_param:
            # the unit's FSDP group's reduce-scatter at REDUCE_GRAD, after the step's last W or B,
            # with nothing else above the static bytes: that action's transient bounds it
            excess = run.fsdp_reduce_excess_per_param * n_params / tp
            for kind in ("W", "B"):
                transient[kind] = max(transient.get(kind, 0.0), excess)
        return StageCost(forward=fw, backward_input=inp, backward_weight=wt,
                         activation_bytes=b.activation * tokens / tp, weight_grad_bytes=held * tokens / tp,
                         transient_bytes={k: v for k, v in transient.items() if v} or None,
                         static_bytes=per_param * n_params / tp, modules=modules)

    emb_b = memory.embedding_bytes(s, device)
    emb_params = (0.0 if s.tied_embeddings else V * h) + s.positions * h
    # the embedding's W is its whole backward: one parameter's new gradient at a time
    c_f, _, c_w = tp_comm("embedding")
    e_f, e_w = 2 * e * tokens * h / run.memory_bandwidth, (2 * e * tokens * h + 3 * e * V * h) / run.memory_bandwidth
    if run.rates is not None:  # the card's per-op rates (timing), else the one-rate count
        e_f, _, e_w = timing.unit_seconds(timing.embedding_ops(s, tokens, tp), run.rates)
    embed = cost(e_f + c_f, 0.0, e_w + c_w, emb_b, emb_params, names[0],
                 [(max(0.0 if s.tied_embeddings else V * h, s.positions * h), 0.0)])
    c_f, c_i, _ = tp_comm("layer")
    body = []
    for i, ac in enumerate(run.ac):
        b = memory.layer_bytes(s, impl, device, ac, per_token)
        fw = (linear + attention) / flops
        again_i, again_w = _recompute_seconds(s, run, ac, b, tokens, fw, attention)
        # a recomputed forward's collectives run again (full: in I, and in W in proportion to the
        # forward FLOPs its groups recompute); the per-op modes save the collectives' outputs
        if c_f and ac == "full":
            again_i += c_f
            again_w += c_f * (again_w / fw if fw else 0.0)
        # under full checkpointing W's output gradients come from its own recomputes and die with them
        # (the leak term), so a group's new gradients get no credit for those released before it (measured)
        unit_groups = [(n, 0.0) for n, _ in groups] if ac == "full" else groups
        inp, wt = (linear + 2 * attention) / flops + again_i, linear / flops + again_w
        if run.rates is not None:
            moved = recompute_traffic(s, run.impl, run.device, ac) if ac in PER_OP_AC else 0.0
            fw, inp, wt = timing.layer_seconds(s, run, ac, b.recompute_i, b.recompute_w, moved)
            if c_f and ac == "full":  # the recomputed forward's collectives, as above
                inp += c_f
                wt += c_f * b.recompute_w / b.recompute_i if b.recompute_i else 0.0
        body.append(cost(fw + c_f, inp + c_i, wt, b, params, names[1 + i], unit_groups))
    head_flops = 2 * tokens * h * V
    head_params = V * h + (0 if impl == "paper" else h * (2 if s.family == "gpt2" else 1))
    c_f, c_i, _ = tp_comm("head")
    h_f, h_i, h_w = head_flops / flops, head_flops / flops, head_flops / flops
    chunked = 3 * head_flops / flops
    if run.rates is not None:
        h_f, h_i, h_w = timing.unit_seconds(timing.head_ops(s, impl, device, tokens, tp), run.rates)
        chunked = h_f + h_i + h_w
    if impl == "torchtitan":  # its chunked loss runs the LM head's backward inside F
        head = cost(chunked + c_f + c_i, 0.0, 0.0, memory.head_bytes(s, impl, device, V), head_params,
                    names[-1])
    else:  # two groups: the final norm's (an RMSNorm releases two h-wide gradients after it), the LM head's
        head = cost(h_f + c_f, h_i + c_i, h_w,
                    memory.head_bytes(s, impl, device, V), head_params, names[-1],
                    [(head_params - V * h, h if s.family == "gpt2" else 2 * h), (V * h, V)])
    return [embed, *body, head], e * tokens * h / tp


def _recompute_seconds(s: ModelShape, run: Run, ac: str, b: memory.UnitBytes, tokens: float,
                       forward: float, attention: float) -> tuple[float, float]:
    """Seconds a checkpointed layer's recompute adds to I and to W: its recomputed FLOPs at the
    effective FLOP rate and, for the per-op modes (light, selective), the bytes their recomputed
    memory-bound ops move (:func:`schedc.model_costs.traffic.recompute_traffic`) at the memory
    bandwidth, in I only (a per-op mode runs B = I + W, which recomputes once). `attention`: the
    layer's attention-core FLOPs for its tokens."""
    flops = run.flops * run.tp
    again_i, again_w = b.recompute_i * tokens / flops, b.recompute_w * tokens / flops
    if ac == "selective" and not memory.selective_saves_attention(run.device):
        again_i += attention / flops  # its recompute runs attention again
    if ac not in PER_OP_AC:
        return again_i, again_w  # full: the forward's time, which the effective rate gives all its work
    # tensor parallelism with sequence parallelism splits the norms' and activations' tokens and
    # the rotary embeddings' heads over the ranks
    moved = recompute_traffic(s, run.impl, run.device, ac) * tokens / run.tp / run.memory_bandwidth
    # a part of the forward never costs more than the whole, which full's recompute is charged:
    # the effective FLOP rate stands for all of a forward's work, memory-bound ops included
    return min(again_i + moved, forward), again_w
