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


def test_a_field_missing_from_a_text_config_is_named_there_with_why(tmp_path):
    text = {k: v for k, v in LLAMA.items() if k != "intermediate_size"}
    path = _write(tmp_path, {"model_type": "llava", "text_config": text})
    with pytest.raises(SchedcError, match=rf"^{path}: field 'text_config.intermediate_size' is missing; .*"
                                          r"values equal to llama's defaults"):
        read_hf_config(path)


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
