"""config.json edge cases a new user brings to `schedc plan --config` / `schedc profile --config`:
each is counted as the file says or refused in one line naming the field."""

import json

import pytest

from schedc.errors import SchedcError
from schedc.model_costs.shape import read_hf_config

LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 512,
         "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1000}


def _write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_a_multimodal_configs_dtype_outside_its_text_config_is_the_models(tmp_path):
    # the whole model's dtype given once, beside text_config: counted in it, not in bfloat16
    path = _write(tmp_path, {"model_type": "llava", "torch_dtype": "float32", "text_config": LLAMA})
    assert read_hf_config(path)["dtype"] == "float32"
    own = _write(tmp_path, {"model_type": "llava", "dtype": "float32", "text_config": LLAMA | {"dtype": "float16"}})
    assert read_hf_config(own)["dtype"] == "float16"


def test_a_field_missing_from_a_text_config_is_its_model_types_default(tmp_path):
    # transformers saves a nested config without the values equal to its class's defaults
    text = {k: v for k, v in LLAMA.items() if k != "intermediate_size"}
    shape = read_hf_config(_write(tmp_path, {"model_type": "llava", "text_config": text}))
    assert shape["ffn_hidden"] == 11008 and "intermediate_size 11008" in shape["model"]


def test_more_experts_per_token_than_experts_names_the_field(tmp_path):
    path = _write(tmp_path, LLAMA | {"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 8})
    with pytest.raises(SchedcError, match=rf"^{path}: field 'num_experts_per_tok' \(8\) is more than the 4 experts"):
        read_hf_config(path)


@pytest.mark.parametrize("field", ["tied_embeddings", "dropout"])
def test_a_yes_no_shape_field_given_as_text_is_refused(field):
    # "no" is truthy: it was counted as tied embeddings / dropout
    from schedc.model_costs import unit_profile

    with pytest.raises(SchedcError, match=f"{field} must be True or False, got 'no'"):
        unit_profile(layers=2, hidden=64, vocab=100, heads=4, seq=16, **{field: "no"})


# ---------------------------------------------------------------- fields a config leaves out

COUNTED = ["llama", "mistral", "qwen2", "qwen3", "gpt2", "mixtral", "qwen2_moe", "qwen3_moe"]


def _built_by_transformers(model_type):
    """The shape transformers' own config class builds from a config.json with every field left out."""
    pytest.importorskip("transformers")
    from transformers import AutoConfig

    c = AutoConfig.for_model(model_type)
    out = {"layers": c.num_hidden_layers, "hidden": c.hidden_size, "heads": c.num_attention_heads,
           "vocab": c.vocab_size, "tied_embeddings": c.tie_word_embeddings,
           "kv_heads": getattr(c, "num_key_value_heads", None) or c.num_attention_heads,
           "head_dim": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads}
    if model_type == "gpt2":
        out["ffn_hidden"], out["positions"] = c.n_inner or 4 * c.hidden_size, c.n_positions
    else:
        out["ffn_hidden"] = c.intermediate_size
    if model_type in ("mixtral", "qwen2_moe", "qwen3_moe"):
        out["experts"] = getattr(c, "num_local_experts", None) or c.num_experts
        out["experts_per_token"] = c.num_experts_per_tok
        out["moe_ffn_hidden"] = c.intermediate_size if model_type == "mixtral" else c.moe_intermediate_size
        out["shared_ffn_hidden"] = getattr(c, "shared_expert_intermediate_size", 0)
    return out


@pytest.mark.parametrize("model_type", COUNTED)
def test_a_config_that_leaves_out_every_field_is_counted_as_transformers_builds_it(tmp_path, model_type):
    shape = read_hf_config(_write(tmp_path, {"model_type": model_type}))
    built = _built_by_transformers(model_type)
    assert {k: shape.get(k, 0) for k in built} == built
    assert "left out, taken from transformers" in shape["model"]  # the label says which fields were taken


@pytest.mark.parametrize("model_type", COUNTED)
def test_the_table_of_defaults_is_the_installed_transformers_own(model_type):
    # the table serves where transformers is not installed: it must say what transformers 5.18 says
    transformers = pytest.importorskip("transformers")
    import dataclasses
    import importlib

    from schedc.model_costs.shape import _READ, HF_DEFAULTS, HF_DEFAULTS_FROM

    if transformers.__version__.split(".")[:2] != HF_DEFAULTS_FROM.split()[1].split("."):
        pytest.skip(f"the table is of {HF_DEFAULTS_FROM}, transformers {transformers.__version__} is installed")
    module = importlib.import_module(f"transformers.models.{model_type}.configuration_{model_type}")
    cls = next(c for c in vars(module).values() if isinstance(c, type) and getattr(c, "model_type", "") == model_type)
    own = {f.name: f.default for f in dataclasses.fields(cls) if f.name in _READ and f.default is not None}
    assert HF_DEFAULTS[model_type] == own


def test_a_qwen2_moe_config_without_its_shared_expert_width_gets_transformers_shared_expert(tmp_path):
    from schedc.model_costs import unit_profile

    full = {"model_type": "qwen2_moe", "num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
            "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1000, "num_experts": 4,
            "num_experts_per_tok": 2, "moe_intermediate_size": 64, "shared_expert_intermediate_size": 5632}
    left_out = {k: v for k, v in full.items() if k != "shared_expert_intermediate_size"}
    shape = read_hf_config(_write(tmp_path, left_out, "left_out.json"))
    assert shape["shared_ffn_hidden"] == 5632
    assert shape["model"].endswith("defaults: shared_expert_intermediate_size 5632")
    given = read_hf_config(_write(tmp_path, full, "full.json"))
    counted = [unit_profile(**{**s, "model": None}, seq=16).stages[1] for s in (shape, given)]
    assert counted[0] == counted[1]


def test_a_qwen2_config_without_kv_heads_has_transformers_32_and_a_null_one_the_heads(tmp_path):
    # Qwen2Config's default is 32 kv heads; a null is derived from the heads (its __post_init__)
    base = {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 1024, "intermediate_size": 512,
            "num_attention_heads": 64, "vocab_size": 1000}
    assert read_hf_config(_write(tmp_path, base, "a.json"))["kv_heads"] == 32
    assert read_hf_config(_write(tmp_path, base | {"num_key_value_heads": None}, "b.json"))["kv_heads"] == 64
