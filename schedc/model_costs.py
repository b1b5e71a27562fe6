"""Per-unit costs of a decoder-only transformer from arithmetic: a profile before the cluster exists.

Problem: choosing how to cut a model into pipeline stages (``schedc plan``) needs the cost of
every *unit* of the model (the embedding, each layer, the final norm + LM head + loss) before
any GPU runs it: from the model's shape (a Hugging Face ``config.json`` or a few numbers), the
sequence and microbatch size, and the device's effective FLOP/s and link bandwidth.

Method: :func:`unit_profile` returns a ``schedc.profile/v1`` :class:`~schedc.costs.Profile`
whose stages are the units in model order, each with ``modules`` (the names torchtitan's or NeMo
AutoModel's ``module_fqns_per_model_part`` takes, :data:`UNIT_NAMES`); ``Profile.merge(counts)``
turns it into the profile of any contiguous partition. Per layer, with b = microbatch size,
s = sequence, h = hidden, q = heads x head_dim (h without GQA), k = kv_heads x head_dim, f = FFN
width, e = bytes per element of ``dtype``, V = vocabulary:

- parameters ``h q + 2 h k + q h`` (attention: W_q, W_k, W_v, W_o; GQA shrinks W_k and W_v to
  h x k) + ``3 h f`` (SwiGLU: gate, up, down) or ``2 h f`` (GELU MLP); = 4h^2 + 2hf for MHA + GELU.
- forward FLOPs ``2 b s x params`` (every weight is one multiply-add per token) + ``4 b s^2 q``
  (Q K^T and the attention-weighted V); = 24bsh^2 + 4bs^2h for MHA with f = 4h (Narayanan et al.
  2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
  sec. 5.1; causal masking is not halved there, nor here). Backward for inputs (I) repeats the
  linears and doubles the attention core; backward for weights (W) repeats the linears only.
- activation bytes (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", sec. 4.1, without the 5as^2b score terms, which flash attention does not
  store): the two norms' inputs ``2 e bsh``; attention: its input ``e bsh``, Q ``e bsq``, K and
  V ``2 e bsk``, W_o's input ``e bsq``; MLP: its input ``e bsh`` and ``2 e bsf`` (GELU's input
  and output) or ``3 e bsf`` (SwiGLU: gate and up outputs and their product, as a fused SwiGLU
  keeps them); with ``dropout`` two 1-byte masks ``2 bsh``. = 18bsh + 4bsf = 34bsh for GPT
  (MHA, GELU, f = 4h, dropout, e = 2), the paper's count.
- bytes held between I and W: with ``held="torch"`` (default) all of it, since torch's split
  backward (``stage_backward_input`` with ``retain_graph=True``) keeps the graph until W; with
  ``"paper"`` the inputs of the linear layers plus the gradients of their outputs, which W needs
  (the zero-bubble paper's M_W, Qi et al. 2023, "Zero Bubble Pipeline Parallelism", table 1:
  32bsh for GPT).
- static bytes per parameter: the weight in ``dtype`` + ``grad_bytes_per_param`` (default 4,
  fp32 gradients) + ``optimizer_bytes_per_param`` (default 12: fp32 master weights and Adam's two
  moments, the K = 12 of Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
  Trillion Parameter Models", sec. 3.1); 18 per parameter for bf16.

Head unit (final norm, LM head, loss): F = I = W = ``2bshV`` FLOPs; activation ``e bsV`` (logits)
+ ``4 bsV`` (the fp32 copy the loss works on) + ``2 e bsh`` (inputs of the norm and the head);
held for W (``"paper"``) ``e bsh + e bsV``; parameters hV, which exist also with tied embeddings.
Embedding unit: no FLOPs; F reads one row per token and writes it (``2 e bsh`` bytes), W adds the
gradient rows into a dense V x h gradient that torch's embedding backward writes and accumulates
(``2 e bsh + 3 e Vh`` bytes), both over ``memory_bandwidth``; no I (the tokens need no gradient);
it holds the token ids (8 bytes each) for W; parameters Vh, none with ``tied_embeddings`` (the
head's matrix is the one copy counted). Norm weights, biases and rotary buffers are left out
(< 0.1 % of a layer). Times are FLOPs / ``flops_per_second``; every unit boundary sends one
activation, ``e bsh`` bytes, over ``bandwidth``.

:func:`transformer_profile`'s per-stage numbers are these with MHA, a GELU MLP and dropout, the
embedding's memory-bound time and token ids left out; merged per-unit profiles reproduce them.

:func:`read_hf_config` maps a Hugging Face ``config.json`` (Llama, Qwen2/3, Mistral and any model
type with the same fields) to :func:`unit_profile`'s model keywords. Cost: O(layers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Optional, Union

from schedc.costs import Profile, StageCost
from schedc.errors import SchedcError

__all__ = ["UNIT_NAMES", "unit_names", "unit_profile", "read_hf_config"]

# Module names of the units, as each framework's pipeline split names them:
# torchtitan 0.3.0 (_generate_llm_fqn_per_model_part: tok_embeddings, layers.N, norm, lm_head) and
# NeMo AutoModel 0.7.0 for Hugging Face models (generate_hf_model_fqn_per_model_part: model.embed_tokens,
# model.layers.N, model.norm, lm_head; it also puts model.rotary_emb, a parameter-free buffer, on
# every stage, which no single unit owns, so whoever writes NeMo's lists adds it to each stage).
UNIT_NAMES = {
    "torchtitan": ("tok_embeddings", "layers.{}", ("norm", "lm_head")),
    "hf": ("model.embed_tokens", "model.layers.{}", ("model.norm", "lm_head")),
}
Names = Literal["torchtitan", "hf"]

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32",
                  "float": "float32", "fp64": "float64", "double": "float64"}

_NOTES = [
    "arithmetic per-unit profile (schedc.model_costs.unit_profile): units are the embedding, each layer, "
    "and the final norm + LM head + loss, in model order",
    "layer FLOPs 2bs x params + 4bs^2q (Narayanan et al. 2021, Megatron-LM, sec. 5.1); I = linears + 2 x "
    "attention core, W = linears",
    "activations per Korthikanti et al. 2022 sec. 4.1 without the attention-score terms (flash attention), "
    "generalized to GQA and SwiGLU; held between I and W per Qi et al. 2023 (zero bubble) table 1 with "
    "held='paper', everything with held='torch' (torch's split backward keeps the graph until W)",
    "static bytes: weight + gradient + optimizer bytes per parameter (Rajbhandari et al. 2020, ZeRO, sec. 3.1)",
]


def dtype_name(dtype: str, where: str = "dtype") -> str:
    """The canonical name of a dtype ('torch.float32' -> 'float32', 'bf16' -> 'bfloat16')."""
    name = str(dtype).removeprefix("torch.").lower()
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise SchedcError(f"{where}: {dtype!r} is not a dtype schedc knows; use one of {', '.join(DTYPE_BYTES)}")
    return name


def unit_names(layers: int, names: Names = "torchtitan") -> list[list[str]]:
    """The module names of each unit: ``[[embedding], [layer 0], ..., [norm, head]]``."""
    if names not in UNIT_NAMES:
        raise SchedcError(f"names must be one of {', '.join(UNIT_NAMES)}, got {names!r}")
    embed, layer, head = UNIT_NAMES[names]
    return [[embed]] + [[layer.format(i)] for i in range(layers)] + [list(head)]


def unit_profile(
    *,
    layers: int,
    hidden: int,
    vocab: int,
    seq: int,
    microbatch_size: int = 1,
    ffn_hidden: Optional[int] = None,
    heads: Optional[int] = None,
    kv_heads: Optional[int] = None,
    head_dim: Optional[int] = None,
    mlp: Literal["swiglu", "gelu"] = "swiglu",
    tied_embeddings: bool = False,
    dropout: bool = False,
    dtype: str = "bfloat16",
    flops_per_second: float = 400e12,
    memory_bandwidth: float = 2e12,
    bandwidth: float = 40e9,
    grad_bytes_per_param: float = 4,
    optimizer_bytes_per_param: float = 12,
    held: Literal["torch", "paper"] = "torch",
    names: Names = "torchtitan",
    model: Optional[str] = None,
) -> Profile:
    """Per-unit costs of a decoder-only transformer (formulas and sources: the module docstring).

    Parameters: the model's shape (``layers``, ``hidden``, ``vocab``; ``ffn_hidden`` default 4 x
    hidden; ``heads``/``kv_heads``/``head_dim`` for GQA, where ``heads`` None means full multi-head
    attention of width ``hidden``; ``mlp``; ``tied_embeddings``; ``dropout``), one microbatch
    (``seq`` tokens x ``microbatch_size`` sequences, activations in ``dtype``), the device
    (``flops_per_second``, default 400e12: an H100's dense bf16 at about 40 % utilisation;
    ``memory_bandwidth``, default 2e12 B/s, for the embedding; ``bandwidth``, default 40e9 B/s
    per pipeline link), static bytes per parameter, ``held`` and ``names`` (:data:`UNIT_NAMES`).

    Returns a Profile with ``layers + 2`` stages (the units), each with ``modules``; raises
    SchedcError naming the first invalid argument.

    >>> p = unit_profile(layers=2, hidden=64, vocab=100, seq=8, heads=4, kv_heads=2)
    >>> [u.modules for u in p.stages]
    [['tok_embeddings'], ['layers.0'], ['layers.1'], ['norm', 'lm_head']]
    >>> p.merge([2, 2]).stages[1].modules
    ['layers.1', 'norm', 'lm_head']
    """
    for name, value in (("layers", layers), ("hidden", hidden), ("vocab", vocab), ("seq", seq),
                        ("microbatch_size", microbatch_size)):
        if not isinstance(value, int) or value < 1:
            raise SchedcError(f"unit_profile: {name} must be an integer >= 1, got {value!r}")
    for name, value in (("ffn_hidden", ffn_hidden), ("heads", heads), ("kv_heads", kv_heads), ("head_dim", head_dim)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise SchedcError(f"unit_profile: {name} must be an integer >= 1, got {value!r}")
    for name, value in (("flops_per_second", flops_per_second), ("memory_bandwidth", memory_bandwidth),
                        ("bandwidth", bandwidth)):
        if not value > 0 or value == float("inf"):
            raise SchedcError(f"unit_profile: {name} must be a finite number > 0, got {value!r}")
    for name, value in (("grad_bytes_per_param", grad_bytes_per_param),
                        ("optimizer_bytes_per_param", optimizer_bytes_per_param)):
        if not value >= 0 or value == float("inf"):
            raise SchedcError(f"unit_profile: {name} must be a finite number >= 0, got {value!r}")
    if mlp not in ("swiglu", "gelu"):
        raise SchedcError(f"unit_profile: mlp must be 'swiglu' or 'gelu', got {mlp!r}")
    if held not in ("torch", "paper"):
        raise SchedcError(f"unit_profile: held must be 'torch' or 'paper', got {held!r}")
    if heads is None and (kv_heads is not None or head_dim is not None):
        raise SchedcError("unit_profile: kv_heads and head_dim need heads")
    if heads is not None:
        kv_heads = heads if kv_heads is None else kv_heads
        if heads % kv_heads:
            raise SchedcError(f"unit_profile: heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
        if head_dim is None:
            if hidden % heads:
                raise SchedcError(f"unit_profile: hidden ({hidden}) is not a multiple of heads ({heads}); give head_dim")
            head_dim = hidden // heads
    dtype = dtype_name(dtype, "unit_profile: dtype")
    e = DTYPE_BYTES[dtype]
    names_per_unit = unit_names(layers, names)

    b, s, h, V = float(microbatch_size), float(seq), float(hidden), float(vocab)
    f = float(ffn_hidden if ffn_hidden is not None else 4 * hidden)
    q = float(heads * head_dim) if heads is not None else h
    k = float(kv_heads * head_dim) if heads is not None else h
    gated = mlp == "swiglu"
    tokens = b * s

    layer_params = h * q + 2 * h * k + q * h + (3 if gated else 2) * h * f
    linear = 2 * tokens * layer_params
    attention = 4 * tokens * s * q
    layer_act = (2 * e * h                              # inputs of the two norms
                 + e * (h + q + 2 * k + q)              # attention: input, Q, K, V, W_o's input
                 + e * h + (3 if gated else 2) * e * f  # MLP: input; gate/up/product or GELU in/out
                 + (2 * h if dropout else 0)) * tokens  # two 1-byte dropout masks
    layer_held = (e * (h + q + h) + e * f               # inputs of the linears (Q/K/V share one)
                  + e * (q + 2 * k) + e * h             # gradients of Q, K, V and of W_o's output
                  + (2 if gated else 1) * e * f + e * h) * tokens  # of the MLP's up (and gate) and down
    head_flops = 2 * tokens * h * V
    head_act = e * tokens * V + 4 * tokens * V + 2 * e * tokens * h
    head_held = e * tokens * h + e * tokens * V
    embed_act = 8 * tokens  # int64 token ids, which the embedding's backward indexes with
    static_per_param = e + grad_bytes_per_param + optimizer_bytes_per_param

    def unit(fw: float, inp: float, wt: float, act: float, kept: float, params: float, modules) -> StageCost:
        return StageCost(forward=fw, backward_input=inp, backward_weight=wt, activation_bytes=act,
                         weight_grad_bytes=act if held == "torch" else kept,
                         static_bytes=static_per_param * params, modules=modules)

    embed = unit(2 * e * tokens * h / memory_bandwidth, 0.0, (2 * e * tokens * h + 3 * e * V * h) / memory_bandwidth,
                 embed_act, embed_act, 0.0 if tied_embeddings else V * h, names_per_unit[0])
    body = [unit((linear + attention) / flops_per_second, (linear + 2 * attention) / flops_per_second,
                 linear / flops_per_second, layer_act, layer_held, layer_params, names_per_unit[1 + i])
            for i in range(layers)]
    head = unit(head_flops / flops_per_second, head_flops / flops_per_second, head_flops / flops_per_second,
                head_act, head_held, V * h, names_per_unit[-1])

    attn = "MHA" if heads is None else f"heads {heads}/{kv_heads} x {head_dim}"
    label = model or (f"decoder: {layers} layers, hidden {hidden}, ffn {int(f)} ({mlp}), {attn}, vocab {vocab}"
                      + (", tied embeddings" if tied_embeddings else ""))
    return Profile(
        stages=[embed, *body, head],
        comm=e * tokens * h / bandwidth,
        device=(f"arithmetic model: {flops_per_second / 1e12:g} TFLOP/s effective, memory "
                f"{memory_bandwidth / 1e12:g} TB/s, {bandwidth / 1e9:g} GB/s per link"),
        model=f"{label}; seq {seq}; per unit",
        microbatch_size=microbatch_size,
        dtype=dtype,
        notes=list(_NOTES),
    )


# ---------------------------------------------------------------- Hugging Face config.json

_REQUIRED = {  # unit_profile keyword: config.json field
    "layers": "num_hidden_layers",
    "hidden": "hidden_size",
    "ffn_hidden": "intermediate_size",
    "heads": "num_attention_heads",
    "vocab": "vocab_size",
}


def read_hf_config(path: Union[str, Path]) -> dict:
    """The model keywords of :func:`unit_profile` from a Hugging Face ``config.json`` file.

    Reads ``num_hidden_layers``, ``hidden_size``, ``intermediate_size``, ``num_attention_heads``,
    ``vocab_size`` (required), ``num_key_value_heads`` (default: the attention heads), ``head_dim``
    (default hidden / heads), ``tie_word_embeddings`` (default false, as Llama, Qwen and Mistral
    declare) and ``torch_dtype`` or ``dtype`` (default bfloat16); a multimodal config's
    ``text_config`` is read when the top level has no ``num_hidden_layers``. The MLP is taken as
    gated (SwiGLU), as in every family with these fields. Nothing is downloaded.

    Raises SchedcError (one line, naming the file and the field) for a missing file, invalid JSON,
    or a missing or non-integer required field.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SchedcError(f"{path}: config file not found")
    except IsADirectoryError:
        raise SchedcError(f"{path}: is a directory; give the config.json file in it")
    except UnicodeDecodeError:
        raise SchedcError(f"{path}: not UTF-8 text; give a Hugging Face config.json")
    except json.JSONDecodeError as e:
        raise SchedcError(f"{path}: line {e.lineno} column {e.colno}: not valid JSON ({e.msg})")
    except RecursionError:
        raise SchedcError(f"{path}: JSON nested too deeply")
    if not isinstance(data, dict):
        raise SchedcError(f"{path}: a config.json is a JSON object with fields like num_hidden_layers")
    if "num_hidden_layers" not in data and isinstance(data.get("text_config"), dict):
        data = data["text_config"]

    def integer(field: str, default=None, required=True) -> Optional[int]:
        value = data.get(field)
        if value is None:
            if required:
                raise SchedcError(f"{path}: field {field!r} is missing; schedc needs it to count the model's costs")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SchedcError(f"{path}: field {field!r} must be an integer >= 1, got {value!r}")
        return value

    out: dict = {key: integer(field) for key, field in _REQUIRED.items()}
    out["kv_heads"] = integer("num_key_value_heads", out["heads"], required=False)
    out["head_dim"] = integer("head_dim", None, required=False)
    if out["head_dim"] is None:
        if out["hidden"] % out["heads"]:
            raise SchedcError(f"{path}: hidden_size {out['hidden']} is not a multiple of num_attention_heads "
                              f"{out['heads']} and there is no 'head_dim' field")
        out["head_dim"] = out["hidden"] // out["heads"]
    if out["heads"] % out["kv_heads"]:
        raise SchedcError(f"{path}: num_attention_heads {out['heads']} is not a multiple of "
                          f"num_key_value_heads {out['kv_heads']}")
    tied = data.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise SchedcError(f"{path}: field 'tie_word_embeddings' must be true or false, got {tied!r}")
    out["tied_embeddings"] = tied
    dtype = data.get("torch_dtype") or data.get("dtype") or "bfloat16"
    out["dtype"] = dtype_name(dtype, f"{path}: field 'torch_dtype'")
    out["mlp"] = "swiglu"
    kind = data.get("model_type") or "decoder"
    out["model"] = (f"{kind} ({path.name}): {out['layers']} layers, hidden {out['hidden']}, ffn {out['ffn_hidden']}, "
                    f"heads {out['heads']}/{out['kv_heads']} x {out['head_dim']}, vocab {out['vocab']}"
                    + (", tied embeddings" if tied else ""))
    return out
