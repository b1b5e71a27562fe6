"""A transformer's per-stage costs from arithmetic: the library's ``transformer`` set-ups.

Problem: plan and compare schedules for a GPT/Llama-like decoder before any GPU runs it.
Method: FLOPs, activation and parameter bytes per layer and for the LM head from the published
formulas (cited in :func:`transformer_profile`), layers split as evenly as possible.
Cost: O(stages).
"""

from __future__ import annotations

from typing import Optional

from schedc.core.costs import Profile, StageCost
from schedc.errors import SchedcError

__all__ = ["transformer_profile"]

# Sources of the formulas in transformer_profile (cited in its docstring).
_NOTES = [
    "per-layer forward FLOPs 2bs(4h^2 + 2hf) + 4bs^2h (linears + attention core; Narayanan et al. 2021, "
    "'Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM', sec. 5.1: 24bsh^2 + 4bs^2h "
    "for f = 4h)",
    "backward: I = linears again + attention core twice, W = linears again, the attention core has no weights; "
    "LM head F = I = W = 2bshV",
    "activation bytes per layer 18bsh + 4bsf (= 34bsh for f = 4h; Korthikanti et al. 2022, 'Reducing Activation "
    "Recomputation in Large Transformer Models', eq. 1 without the 5as^2b score term, i.e. flash attention); "
    "LM head: logits 6bsV (bf16 + fp32 for the loss) + 4bsh",
    "held between I and W: everything (torch's split backward keeps the graph until W; measured by "
    "benchmarks/split_backward_memory.py); with held='paper' per layer 16bsh + 4bsf (inputs of the linears + "
    "gradients of their outputs; = 32bsh for f = 4h, the zero-bubble paper's M_W, Qi et al. 2023, table 1), "
    "LM head 2bsh + 2bsV",
    "static bytes 18 per parameter (bf16 weights 2 + fp32 gradients 4 + fp32 master weights 4 + Adam moments 8)",
]


def _split_layers(layers: int, n_stages: int) -> list[int]:
    """As even as possible; the first stages take the extra layers (the last already has the head)."""
    base, extra = divmod(layers, n_stages)
    return [base + (1 if s < extra else 0) for s in range(n_stages)]


def transformer_profile(
    n_stages: int,
    layers: int = 32,
    hidden: int = 4096,
    vocab: int = 128256,
    seq: int = 4096,
    microbatch_size: int = 1,
    ffn_hidden: Optional[int] = None,
    flops_per_second: float = 400e12,
    bandwidth: float = 40e9,
    tied_embeddings: bool = False,
    held: str = "torch",
) -> Profile:
    """Costs of a GPT/Llama-like decoder split into `n_stages` pipeline stages, from arithmetic.

    The model: `layers` transformer layers (hidden h, FFN width f = `ffn_hidden` or 4h, full
    multi-head attention), a token embedding on the first stage and the final norm + LM head +
    cross-entropy loss on the last; layers are split as evenly as possible (earlier stages take
    the remainder), so the last stage is the heaviest. The defaults are Llama-3-8B's depth,
    width and vocabulary with a GPT-style MLP (about 7.5 B parameters), sequence 4096, one
    sequence per microbatch, bf16.

    Per layer, with b = `microbatch_size`, s = `seq`:

    - forward FLOPs ``2bs(4h^2 + 2hf) + 4bs^2h`` (= 24bsh^2 + 4bs^2h for f = 4h; Narayanan et al.
      2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
      sec. 5.1). Backward for inputs (I) repeats the linears and doubles the attention core;
      backward for weights (W) repeats the linears only (the attention core has no weights), so
      with the defaults I = 1.14 F and W = 0.86 F.
    - activation bytes ``18bsh + 4bsf`` (= 34bsh; Korthikanti et al. 2022, "Reducing Activation
      Recomputation in Large Transformer Models", eq. 1 without the 5as^2b attention-score term,
      which flash attention does not store).
    - bytes held between I and W: with `held` = ``"torch"`` (default) the whole activation, since
      torch's split backward (``stage_backward_input`` with ``retain_graph=True``) keeps the graph
      until W; with ``"paper"`` ``16bsh + 4bsf`` (= 32bsh: the inputs of the linear layers plus
      the gradients of their outputs, which W needs; the zero-bubble paper's M_W, Qi et al. 2023,
      "Zero Bubble Pipeline Parallelism", table 1), what a runtime that frees the rest could reach.
    - parameters ``4h^2 + 2hf``; static bytes 18 per parameter (bf16 weights, fp32 gradients,
      fp32 master weights and two fp32 Adam moments; Rajbhandari et al. 2020, ZeRO, count 16 for
      fp16 weights and gradients, fp32 gradients add 2).

    LM head (last stage): F = I = W = ``2bshV`` FLOPs; activation ``6bsV`` (bf16 logits plus the
    fp32 copy the loss works on) + ``4bsh`` (inputs of the final norm and of the head); held
    between I and W ``2bsh + 2bsV`` (its input and the logits' gradient); parameters hV. The
    embedding (first stage) costs no FLOPs worth counting and hV parameters unless
    `tied_embeddings`.

    Times are FLOPs / `flops_per_second` (default 400e12: an H100's 989 TFLOP/s of dense bf16 at
    about 40 % utilisation); the communication per stage boundary is one bf16 activation,
    ``2bsh`` bytes, over `bandwidth` bytes/s (default 40e9: a 400 Gb/s NIC at 80 %).
    """
    counted = (("n_stages", n_stages), ("layers", layers), ("hidden", hidden), ("vocab", vocab), ("seq", seq),
               ("microbatch_size", microbatch_size), ("ffn_hidden", 1 if ffn_hidden is None else ffn_hidden))
    for name, value in counted:  # checked before any comparison: a string or NaN must not reach one
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SchedcError(f"transformer_profile: {name} must be an integer >= 1, got {value!r:.40}")
    if layers < n_stages:
        raise SchedcError(f"transformer_profile: {layers} layers cannot fill {n_stages} stages (need >= 1 layer "
                          "per stage); use more layers or fewer stages")
    for name, rate in (("flops_per_second", flops_per_second), ("bandwidth", bandwidth)):
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate < float("inf"):
            raise SchedcError(f"transformer_profile: {name} must be a finite number > 0, got {rate!r:.40}")
    if held not in ("torch", "paper"):
        raise SchedcError(f"transformer_profile: held must be 'torch' or 'paper', got {held!r}")
    h, s, b, V = float(hidden), float(seq), float(microbatch_size), float(vocab)
    f = float(ffn_hidden if ffn_hidden is not None else 4 * hidden)

    linear = 2 * b * s * (4 * h * h + 2 * h * f)
    attention = 4 * b * s * s * h
    layer_f, layer_i, layer_w = linear + attention, linear + 2 * attention, linear
    layer_act = 18 * b * s * h + 4 * b * s * f
    layer_held = 16 * b * s * h + 4 * b * s * f
    layer_params = 4 * h * h + 2 * h * f
    head = 2 * b * s * h * V
    head_act = 6 * b * s * V + 4 * b * s * h
    head_held = 2 * b * s * h + 2 * b * s * V

    stages = []
    counts = _split_layers(layers, n_stages)
    for st, n in enumerate(counts):
        fl, il, wl = n * layer_f, n * layer_i, n * layer_w
        act, kept, params = n * layer_act, n * layer_held, n * layer_params
        if st == 0 and not tied_embeddings:
            params += V * h
        if st == n_stages - 1:
            fl, il, wl = fl + head, il + head, wl + head
            act, kept, params = act + head_act, kept + head_held, params + V * h
        stages.append(StageCost(
            forward=fl / flops_per_second,
            backward_input=il / flops_per_second,
            backward_weight=wl / flops_per_second,
            activation_bytes=act,
            weight_grad_bytes=act if held == "torch" else kept,
            static_bytes=18 * params,
        ))
    comm = 2 * b * s * h / bandwidth
    return Profile(
        stages=stages,
        comm=comm,
        device=f"arithmetic model: {flops_per_second / 1e12:g} TFLOP/s effective, {bandwidth / 1e9:g} GB/s per link",
        model=(f"transformer: {layers} layers, hidden {hidden}, ffn {int(f)}, vocab {vocab}, seq {seq}"
               + (", tied embeddings" if tied_embeddings else "") + f"; layers per stage {counts}"),
        microbatch_size=microbatch_size,
        dtype="bfloat16",
        notes=list(_NOTES),
    )
