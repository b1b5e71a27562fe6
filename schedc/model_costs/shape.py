"""A model's shape: what the counts need to know about an architecture, and reading it from a
Hugging Face ``config.json`` (GPT-2's ``n_embd``/``n_head``/``n_layer`` aliases included).

Cost: one JSON read of a bounded regular file; O(1) after it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal, Optional, Union

from schedc.core import limits
from schedc.errors import ParameterError, SchedcError, literal
from schedc.io.fileio import read_json

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32",
                  "float": "float32", "fp64": "float64", "double": "float64"}

# The one place that says which architectures schedc counts: config.json's model_type -> the kind of
# decoder layer the counts follow (norm, q/k norm, biases, MLP, positions, experts). Any other
# model_type is refused: another layout counted as Llama's would be silently wrong.
FAMILIES = {
    "llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gpt2": "gpt2",
    "mixtral": "mixtral", "qwen2_moe": "qwen2_moe", "qwen3_moe": "qwen3_moe",
}
COUNTED_MODEL_TYPES = tuple(FAMILIES)
"""The ``model_type`` values of a ``config.json`` that :func:`read_hf_config` counts."""
# the layer kinds ModelShape.family takes: those above, and "decoder" (a Llama-like layer given by flags)
LAYER_FAMILIES = ("decoder", *dict.fromkeys(FAMILIES.values()))
# why some common architectures are not counted, said when one is refused (every model_type not in
# COUNTED_MODEL_TYPES is refused, listed here or not)
REFUSED = {
    "deepseek_v3": "multi-head latent attention and shared + routed experts with dense first layers",
    "deepseek_v2": "multi-head latent attention and shared + routed experts with dense first layers",
    "gpt_oss": "attention sinks, sliding windows and experts with biases",
    "qwen3_next": "linear-attention (gated DeltaNet) layers",
    "jamba": "Mamba layers",
    "mamba": "state-space layers",
}
# model_types a framework trains with code of its own, not the modules schedc counts for it:
# counting them would be counting another layout. NeMo AutoModel 0.7.0's _transformers/registry.py
# maps Qwen3MoeForCausalLM to its own components/models/qwen3_moe (its MoE layer with grouped
# experts and token dispatch, its backend's linears and norms), used unless force_hf is set
OWN_CODE: dict[tuple[str, Optional[str]], str] = {
    ("nemo", "qwen3_moe"): "NeMo AutoModel 0.7.0 trains Qwen3MoeForCausalLM with its own "
                           "nemo_automodel/components/models/qwen3_moe (grouped experts, its own token dispatch), "
                           "not Hugging Face's modules, which are what schedc counts for {name}nemo",
}
# expert parallelism is not modelled: every rank holds all experts of its layers (assumes, notes)
EXPERT_PARALLEL = ("not modelled: each rank holds every expert of its layers (static bytes) and runs its tokens' "
                   "top-k experts itself; no all-to-all is counted")
MAX_LAYERS = limits.MAX_STAGES - 2  # a unit profile has layers + 2 units; more cannot be planned anyway
MAX_WIDTH = 2**24                   # hidden, FFN, vocabulary, heads: beyond any model, and keeps every count finite


def dtype_name(dtype: str, where: str = "dtype") -> str:
    """The canonical name of a dtype ('torch.float32' -> 'float32', 'bf16' -> 'bfloat16')."""
    name = str(dtype).removeprefix("torch.").lower()
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise SchedcError(f"{where}: {str(dtype)[:40]!r} is not a dtype schedc knows; use one of {', '.join(DTYPE_BYTES)}")
    return name


def need(value: Optional[int]) -> int:
    """A field that :meth:`ModelShape.resolved` fills (the widths; ``moe_ffn_hidden`` of an MoE
    shape): the counts read resolved shapes only."""
    assert value is not None, "the counts read a ModelShape.resolved() shape"
    return value


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer as the counts see it.

    ``family`` decides which tensors each layer saves (:data:`FAMILIES`): ``llama`` (RMSNorm,
    SwiGLU, RoPE, no biases; Mistral is the same layer), ``qwen2`` (adds q/k/v biases), ``qwen3``
    (adds RMSNorm on each head of q and k), ``gpt2`` (LayerNorm, GELU MLP with biases, learned
    positions, dropout), the MoE families ``mixtral``/``qwen2_moe``/``qwen3_moe`` (``experts``
    routed experts of width ``moe_ffn_hidden``, ``experts_per_token`` per token, optional shared
    expert of width ``shared_ffn_hidden``), and ``decoder`` (a Llama-like layer given by flags); a
    counted ``model_type`` (:data:`COUNTED_MODEL_TYPES`) is taken for its family, any other value
    is refused.
    """

    layers: int
    hidden: int
    vocab: int
    ffn_hidden: Optional[int] = None
    heads: Optional[int] = None
    kv_heads: Optional[int] = None
    head_dim: Optional[int] = None
    mlp: Literal["swiglu", "gelu"] = "swiglu"
    tied_embeddings: bool = False
    dropout: bool = False
    family: str = "decoder"
    experts: int = 0
    experts_per_token: int = 0
    moe_ffn_hidden: Optional[int] = None
    shared_ffn_hidden: int = 0
    positions: int = 0  # learned position embeddings (GPT-2's wpe): rows of the table
    dtype: str = "bfloat16"
    model: Optional[str] = None

    def resolved(self) -> "ModelShape":
        """Defaults filled (heads -> kv heads, head_dim; ffn 4 x hidden) and every field checked;
        raises SchedcError naming the first bad field."""
        for name in ("layers", "hidden", "vocab"):
            _check_int(name, getattr(self, name))
        for name in ("ffn_hidden", "heads", "kv_heads", "head_dim", "moe_ffn_hidden"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name))
        if self.layers > MAX_LAYERS:
            raise SchedcError(f"layers: {self.layers} is more than schedc plans ({MAX_LAYERS}, "
                              f"{limits.MAX_STAGES} units); count a model with fewer layers")
        family = FAMILIES.get(self.family, self.family) if isinstance(self.family, str) else self.family
        if family not in LAYER_FAMILIES:  # a layer kind, or a model_type schedc counts ('mistral' is Llama's)
            raise ParameterError("family", f"{literal(_short(self.family))} is not a layer schedc counts; give one "
                                           f"of {', '.join(LAYER_FAMILIES)}, or a model_type among "
                                           f"{', '.join(COUNTED_MODEL_TYPES)}")
        for name in ("tied_embeddings", "dropout"):  # "no" would count as true
            if not isinstance(getattr(self, name), bool):
                raise SchedcError(f"{name} must be True or False, got {_short(getattr(self, name))}")
        if self.mlp not in ("swiglu", "gelu"):
            raise SchedcError(f"mlp must be 'swiglu' or 'gelu', got {self.mlp!r}")
        if self.heads is None and (self.kv_heads is not None or self.head_dim is not None):
            raise ParameterError("heads", "{param:kv_heads} and {param:head_dim} need {param}")
        heads, kv, hd = self.heads, self.kv_heads, self.head_dim
        if heads is not None:
            kv = heads if kv is None else kv
            if heads % kv:
                raise ParameterError("kv_heads", f"{{param:heads}} ({heads}) must be a multiple of {{param}} ({kv})")
            if hd is None:
                if self.hidden % heads:
                    raise ParameterError("heads", f"{{param:hidden}} ({self.hidden}) is not a multiple of {{param}} "
                                                  f"({heads}); give {{param:head_dim}}")
                hd = self.hidden // heads
        if self.experts and not 1 <= self.experts_per_token <= self.experts:
            raise SchedcError(f"experts_per_token must be between 1 and experts ({self.experts}), "
                              f"got {self.experts_per_token}")
        return replace(self, kv_heads=kv, head_dim=hd, ffn_hidden=self.ffn_hidden or 4 * self.hidden,
                       dtype=dtype_name(self.dtype), family=family)

    def as_dict(self) -> dict:
        return asdict(self)


def _check_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SchedcError(f"{name} must be an integer >= 1, got {_short(value)}")
    if value > MAX_WIDTH and name != "layers":
        raise SchedcError(f"{name}: {_short(value)} is beyond any model schedc counts (at most {MAX_WIDTH})")


def _short(value) -> str:
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 4000 else "a number of over 1000 digits"
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------- Hugging Face config.json

# config.json field -> what it means here, with the aliases transformers' configs declare in their
# attribute_map (GPT2Config: n_embd, n_head, n_layer, n_positions; n_inner is GPT-2's FFN width)
_FIELDS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head"),
    "vocab": ("vocab_size",),
}


# The config-class defaults of transformers 5.18 (models/<type>/configuration_<type>.py) for the
# fields read_hf_config reads: what transformers builds where a config.json leaves a field out.
# Used when transformers is not importable (it is optional for schedc); with it, its own classes
# are read (hf_defaults), and tests/test_config_edges.py checks this table against them. A field
# whose default is None is absent here: transformers derives it (kv heads = heads, head_dim =
# hidden / heads, GPT-2's n_inner = 4 x n_embd), and so does read_hf_config.
HF_DEFAULTS: dict[str, dict[str, object]] = {
    "llama": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 32000,
              "intermediate_size": 11008, "tie_word_embeddings": False},
    "mistral": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 32000,
                "intermediate_size": 14336, "num_key_value_heads": 8, "tie_word_embeddings": False},
    "qwen2": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 151936,
              "intermediate_size": 22016, "num_key_value_heads": 32, "tie_word_embeddings": False},
    "qwen3": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 151936,
              "intermediate_size": 22016, "num_key_value_heads": 32, "head_dim": 128, "tie_word_embeddings": False},
    "gpt2": {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "tie_word_embeddings": True,
             "n_positions": 1024, "resid_pdrop": 0.1, "embd_pdrop": 0.1},
    "mixtral": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 32000,
                "intermediate_size": 14336, "num_key_value_heads": 8, "tie_word_embeddings": False,
                "num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen2_moe": {"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16, "vocab_size": 151936,
                  "intermediate_size": 5632, "num_key_value_heads": 16, "tie_word_embeddings": False,
                  "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                  "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1},
    "qwen3_moe": {"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 32, "vocab_size": 151936,
                  "intermediate_size": 6144, "num_key_value_heads": 4, "tie_word_embeddings": False,
                  "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                  "decoder_sparse_step": 1},
}
HF_DEFAULTS_FROM = "transformers 5.18"
# every field read_hf_config reads (under any alias): the ones whose class defaults matter
_READ = ("num_hidden_layers", "n_layer", "hidden_size", "n_embd", "num_attention_heads", "n_head", "vocab_size",
         "intermediate_size", "n_inner", "num_key_value_heads", "head_dim", "tie_word_embeddings", "n_positions",
         "resid_pdrop", "embd_pdrop", "num_local_experts", "num_experts", "num_experts_per_tok",
         "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step")


def hf_defaults(model_type: str) -> tuple[dict, str]:
    """The defaults transformers' config class for `model_type` gives the fields schedc reads
    (those that are not None), and where they come from.

    Method: :data:`HF_DEFAULTS` where transformers is not installed or is the release the table
    was written from (tests/test_config_edges.py checks it against that release's classes);
    the installed classes' dataclass field defaults (before ``__post_init__`` derives the None
    ones) for any other release. Cost: O(1) from the table; importing transformers' configuration
    module otherwise (it imports torch: seconds), once per config that leaves a field out.
    """
    import dataclasses
    import importlib
    from importlib import metadata

    try:
        version = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        version = None
    if version is None or version.split(".")[:2] == HF_DEFAULTS_FROM.split()[1].split("."):
        return dict(HF_DEFAULTS[model_type]), f"{HF_DEFAULTS_FROM}'s config defaults"
    try:
        module = importlib.import_module(f"transformers.models.{model_type}.configuration_{model_type}")
        cls = next(c for c in vars(module).values()
                   if isinstance(c, type) and getattr(c, "model_type", None) == model_type)
        found = {f.name: f.default for f in dataclasses.fields(cls)}
    except (ImportError, StopIteration, TypeError):  # a release whose configs are not dataclasses
        return dict(HF_DEFAULTS[model_type]), f"{HF_DEFAULTS_FROM}'s config defaults"
    return ({k: v for k, v in found.items() if k in _READ and v is not None and v is not dataclasses.MISSING},
            f"transformers {version}'s {cls.__name__} defaults")


def read_hf_config(path: Union[str, Path]) -> dict:
    """The model keywords of :func:`~schedc.model_costs.unit_profile` from a Hugging Face
    ``config.json`` file (a :class:`ModelShape` as a dict).

    Reads the layer count, widths, heads (``num_key_value_heads``, ``head_dim``), vocabulary,
    ``tie_word_embeddings`` and ``torch_dtype``/``dtype`` under their own names or the aliases
    transformers' ``attribute_map`` gives them (GPT-2's ``n_layer``, ``n_embd``, ``n_head``,
    ``n_inner``, ``n_positions``), the experts of Mixtral and Qwen2/3-MoE, and a multimodal
    config's ``text_config``. A field left out is what transformers' config class for that
    ``model_type`` builds (:func:`hf_defaults`; a Qwen2-MoE config without
    ``shared_expert_intermediate_size`` has a shared expert of 5632), and the model's label names
    the fields so taken. A ``model_type`` not in :data:`COUNTED_MODEL_TYPES` (DeepSeek-V3,
    Gemma, Phi, ...), or none, is refused by name: never counted as another layout. Nothing is
    downloaded.

    Raises SchedcError (one line, naming the file and the field).
    """
    path = Path(path)
    top = data = _load(path)
    field, nested = "model_type", ""
    if not any(k in data for k in _FIELDS["layers"]) and isinstance(data.get("text_config"), dict):
        data, field, nested = data["text_config"], "text_config.model_type", "text_config."
    kind = _model_type(path, data, field)
    family = FAMILIES[kind]
    # a field left out is the config class's default (transformers also saves a nested config
    # without the values equal to them); looked up only when one is left out
    defaults: dict = {}
    taken: dict = {}

    def default_of(names) -> Optional[str]:
        if any(n in data for n in names):
            return None  # given, as null: transformers derives it, as the callers here do
        if not defaults:
            defaults.update(zip(("values", "source"), hf_defaults(kind)))
        return next((n for n in names if n in defaults["values"]), None)

    def integer(names, default=None, required=True, fill=True) -> Optional[int]:
        names = (names,) if isinstance(names, str) else names
        found = next((n for n in names if data.get(n) is not None), None)
        if found is None:
            fill = default_of(names) if fill else None
            if fill is not None:
                taken[fill] = defaults["values"][fill]
                return taken[fill]
            if required:
                raise SchedcError(f"{path}: field '{nested}{names[0]}' is missing and transformers' {kind} config "
                                  f"has no default for it; write it in")
            return default
        value = data[found]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SchedcError(f"{path}: field '{nested}{found}' must be an integer >= 1, got {_short(value)}")
        if value > (MAX_LAYERS if names == _FIELDS["layers"] else MAX_WIDTH):
            raise SchedcError(f"{path}: field '{nested}{found}': {_short(value)} is more than schedc counts "
                              f"(at most {MAX_LAYERS if names == _FIELDS['layers'] else MAX_WIDTH})")
        return value

    out: dict = {key: integer(fields) for key, fields in _FIELDS.items()}
    gpt2 = family == "gpt2"
    out["ffn_hidden"] = integer(("n_inner",) if gpt2 else ("intermediate_size",), 4 * out["hidden"],
                                required=not gpt2)
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
    if "tie_word_embeddings" in data:
        tied = data["tie_word_embeddings"]
    else:
        tie = default_of(("tie_word_embeddings",))
        tied = defaults["values"][tie] if tie else gpt2  # GPT-2 ties them unless it says otherwise
    if not isinstance(tied, bool):
        raise SchedcError(f"{path}: field 'tie_word_embeddings' must be true or false, got {_short(tied)}")
    out["tied_embeddings"] = tied
    # a multimodal config may give the dtype once, for the whole model, outside its text_config
    dtype = (data.get("torch_dtype") or data.get("dtype") or top.get("torch_dtype") or top.get("dtype")
             or "bfloat16")
    out["dtype"] = dtype_name(dtype, f"{path}: field 'torch_dtype'")
    out["mlp"] = "gelu" if gpt2 else "swiglu"
    out["family"] = family
    if gpt2:
        out["positions"] = integer(("n_positions", "max_position_embeddings"), 1024, required=False)
        out["dropout"] = any(isinstance(data.get(k, 0.1), (int, float)) and data.get(k, 0.1) > 0
                             for k in ("resid_pdrop", "embd_pdrop"))
    out.update(_experts(path, data, family, integer))
    out["model"] = _label(kind, path.name, out) + (
        f"; left out, taken from {defaults['source']}: " + ", ".join(f"{k} {v}" for k, v in taken.items())
        if taken else "")
    return out


def _model_type(path: Path, data: dict, field: str) -> str:
    """The config's model_type when schedc counts it (:data:`COUNTED_MODEL_TYPES`); else one line
    naming the file, the field, the value, the types counted and what to do instead."""
    kind = data.get("model_type")
    if isinstance(kind, str) and kind in FAMILIES:
        return kind
    todo = (f"schedc counts the model_types {', '.join(COUNTED_MODEL_TYPES)}; measure the model (schedc profile "
            f"--units --model MODULE:FUNCTION) or, for a Llama-like dense layer, give its shape as flags "
            f"(schedc profile --units --flops FLOP/s --layers N --hidden N --vocab N ...)")
    if kind is None:
        raise SchedcError(f"{path}: field {field!r} is missing; {todo}")
    why = f" ({REFUSED[kind]})" if isinstance(kind, str) and kind in REFUSED else ""
    raise SchedcError(f"{path}: {field} {_short(kind)} is not modelled by schedc{why}; {todo}")


def _experts(path: Path, data: dict, family: str, integer) -> dict:
    moe = family in ("mixtral", "qwen2_moe", "qwen3_moe")
    routed = integer(("num_local_experts", "num_experts", "n_routed_experts"), 0, required=False, fill=moe)
    if not routed:
        if family in ("mixtral", "qwen2_moe", "qwen3_moe"):
            raise SchedcError(f"{path}: a {family} config needs 'num_local_experts' or 'num_experts'")
        return {}
    if family not in ("mixtral", "qwen2_moe", "qwen3_moe"):
        raise SchedcError(f"{path}: model_type {data.get('model_type')!r} has {routed} experts and schedc counts "
                          f"experts only for mixtral, qwen2_moe and qwen3_moe; measure it instead")
    for field in ("mlp_only_layers", "first_k_dense_replace"):
        if data.get(field):
            raise SchedcError(f"{path}: field {field!r}: dense layers among expert layers are not modelled; "
                              f"measure the model instead")
    if data.get("decoder_sparse_step", 1) not in (1, None):  # 1 is Qwen2/3-MoE's default
        raise SchedcError(f"{path}: field 'decoder_sparse_step': expert layers every "
                          f"{data['decoder_sparse_step']} layers are not modelled; measure the model instead")
    out = {"experts": routed, "experts_per_token": integer("num_experts_per_tok")}
    if out["experts_per_token"] > routed:
        raise SchedcError(f"{path}: field 'num_experts_per_tok' ({out['experts_per_token']}) is more than the "
                          f"{routed} experts")
    if family == "mixtral":
        out["moe_ffn_hidden"] = integer("intermediate_size")
    else:
        out["moe_ffn_hidden"] = integer("moe_intermediate_size")
        out["shared_ffn_hidden"] = (integer("shared_expert_intermediate_size", 0, required=False)
                                    if family == "qwen2_moe" else 0)
    return out


def _label(kind: str, name: str, out: dict) -> str:
    moe = (f", {out['experts']} experts x {out['moe_ffn_hidden']} ({out['experts_per_token']} per token)"
           if out.get("experts") else "")
    return (f"{kind} ({name}): {out['layers']} layers, hidden {out['hidden']}, ffn {out['ffn_hidden']}, "
            f"heads {out['heads']}/{out['kv_heads']} x {out['head_dim']}, vocab {out['vocab']}{moe}"
            + (", tied embeddings" if out["tied_embeddings"] else ""))


def _load(path: Path) -> dict:
    data = read_json(path, "a Hugging Face config.json")  # schedc's one reader: size bound, BOM, one-line errors
    if not isinstance(data, dict):
        raise SchedcError(f"{path}: a config.json is a JSON object with fields like num_hidden_layers")
    return data


def finite(value: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
