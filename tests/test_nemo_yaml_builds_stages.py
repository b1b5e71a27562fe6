"""The NeMo YAML a plan prints builds stages that run, with NeMo AutoModel 0.7.0's own splitting code.

A tiny Hugging Face ``LlamaForCausalLM`` (built from a config, nothing downloaded) is split by NeMo's
``split_model_into_stages`` (which patches each stage with ``patch_hf_model_for_pp`` and prunes every
module its list leaves out) on the lists the YAML gives, as NeMo's loader reads them back. The stages,
run one after another on one gloo rank (NeMo's pipeline stages need a process group; all stages of a
loop sit on rank 0 when pp_size is 1), must give the unsplit model's logits.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("nemo_automodel.components.distributed.pipelining.functional")
pytest.importorskip("nemo_automodel.recipes._dist_utils")

from _dist import run_ranks  # noqa: E402

from schedc.frameworks import REGISTRY, Handoff, nemo_yaml  # noqa: E402

LAYERS = 5
TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)
# an uneven split in schedc's Hugging Face unit names, as a per-unit profile's merge writes it
PARTITION = [["model.embed_tokens", "model.layers.0", "model.layers.1"], ["model.layers.2"], ["model.layers.3"],
             ["model.layers.4", "model.norm", "lm_head"]]


def _yaml_lists(tmp_path, model_type: str = "llama") -> list[list[str]]:
    """module_fqns_per_model_part as NeMo's recipe reads the printed YAML back."""
    from nemo_automodel.components.config.loader import load_yaml_config
    from nemo_automodel.recipes._dist_utils import parse_distributed_section

    h = Handoff(partition=PARTITION, placement="loop", n_ranks=2, n_microbatches=4, csv="plan.csv",
                assumes={"seq_len": 16, "microbatch_size": 1, "model_type": model_type})
    path = tmp_path / "recipe.yaml"
    path.write_text(nemo_yaml({"nemo": REGISTRY["nemo"].settings(h)}) + "\n")
    return parse_distributed_section(load_yaml_config(path).distributed.to_dict())["pipeline_config"] \
        .module_fqns_per_model_part


def run_stages(rank: int, world: int, cases: list[list[list[str]]]) -> list[dict]:
    """Per case: split a tiny Llama with NeMo's code on its lists, run a forward through the stages."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("pp",))
    return [_run_one(mesh, lists) for lists in cases]


def _run_one(mesh, lists: list[list[str]]) -> dict:
    from nemo_automodel.components.distributed.pipelining.functional import split_model_into_stages
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**TINY)).eval()
    ids = torch.randint(0, TINY["vocab_size"], (2, 16))
    with torch.no_grad():
        reference = model(input_ids=ids).logits
    stages, parts = split_model_into_stages(model, mesh, "pp", "Interleaved1F1B", torch.device("cpu"),
                                            module_names_per_stage=lists)
    x = ids
    try:
        with torch.no_grad():
            for part in parts:
                x = part(x)
    except Exception as e:  # noqa: BLE001 - the parent asserts on what NeMo's stages raised
        return {"error": f"{type(e).__name__}: {e}"}
    return {"stages": [s.stage_index for s in stages], "max_error": (x - reference).abs().max().item()}


def test_the_printed_yaml_splits_into_stages_that_run(tmp_path):
    lists = _yaml_lists(tmp_path)
    assert all("model.rotary_emb" in stage for stage in lists)
    without = [[m for m in stage if m != "model.rotary_emb"] for stage in lists]
    ok, broken = run_ranks(run_stages, 1, timeout=240, cases=[lists, without])[0]["ok"]
    assert ok.get("stages") == [0, 1, 2, 3], ok
    assert ok["max_error"] < 1e-5, ok
    # what the lists without the shared module gave: NeMo prunes it and Llama's attention cannot run
    assert "NoneType" in broken.get("error", ""), broken


def test_a_model_with_learned_positions_gets_no_rotary_module(tmp_path):
    assert not any("model.rotary_emb" in stage for stage in _yaml_lists(tmp_path, model_type="gpt2"))
