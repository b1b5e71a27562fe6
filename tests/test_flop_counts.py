"""The FLOPs unit_profile counts per unit and action (F, I, W; B for per-op checkpointing)
against what the real layers execute, by torch's own FLOP formulas (benchmarks/flop_counts.py
at narrow sizes on CPU): Hugging Face transformers' dense, GPT-style and MoE layers and head,
torchtitan's blocks, under every checkpointing mode."""


import pytest
from _benchmarks import load_benchmark

pytestmark = pytest.mark.filterwarnings("ignore:A saved_tensors_hooks context")
MODES = ("none", "light", "selective", "full")


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("torchtitan")  # its FullAC and SelectiveAC wrap the checkpointed layers
    return load_benchmark("flop_counts")


@pytest.mark.parametrize("model", ["Llama-3-8B", "Qwen2.5-7B", "Qwen3-8B", "GPT-2", "Mixtral-8x7B",
                                   "Qwen3-30B-A3B", "Qwen1.5-MoE-A2.7B"])
def test_hf_units_count_the_flops_torch_runs(bench, model):
    found = bench.rows(bench.mf.SMALL, 32, [model], {}, MODES)
    actions = {(label.split("(")[1].rstrip(")"), unit, action) for label, unit, action, *_ in found}
    # every mode's actions and the head's were measured: F, I, W, or F, B where torch runs B
    assert {("hf, none AC", "layer", a) for a in "FIW"} <= actions
    assert {("hf", "norm+head+loss", a) for a in "FIW"} <= actions
    assert {("hf, selective AC", "layer", "B"), ("hf, light AC", "layer", "B"), ("hf, full AC", "layer", "W")} <= actions
    # Qwen2-MoE's shared-expert gate (one output column) is the only matmul the count leaves out
    rel = 5e-4 if model == "Qwen1.5-MoE-A2.7B" else 1e-6
    for label, unit, action, counted, executed, convention in found:
        assert executed > 0
        assert counted == pytest.approx(convention, rel=rel), (label, unit, action)
        if action in ("I", "B") and unit == "layer":  # flash's backward recomputes the scores
            assert executed > convention


@pytest.mark.parametrize("model", ["Llama-3-8B", "Qwen3-8B"])
def test_torchtitan_blocks_count_the_flops_torch_runs(bench, model):
    found = bench.rows({}, 32, [model], bench.mf.TT_SMALL, MODES)
    assert len(found) == 2 * 3 + 2 * 2  # none and full: F, I, W; light and selective: F, B
    for label, _unit, action, counted, _executed, convention in found:
        assert counted == pytest.approx(convention, rel=1e-6), (label, action)


def test_full_checkpointing_recomputes_the_forward_once_per_parameter_group_in_w(bench):
    """What makes full AC under the split backward expensive: the count's W is the weights'
    gradient plus one forward per group torch's stage_backward_weight differentiates alone."""
    found = {(label, action): executed for label, _, action, _, executed, _ in
             bench.rows(bench.mf.SMALL, 32, ["Llama-3-8B"], {}, ("none", "full"))}
    forward = found[("Llama-3-8B (hf, none AC)", "F")]
    extra = found[("Llama-3-8B (hf, full AC)", "W")] - found[("Llama-3-8B (hf, none AC)", "W")]
    assert extra / forward == pytest.approx(round(extra / forward)) and round(extra / forward) >= 4
    assert found[("Llama-3-8B (hf, full AC)", "I")] == pytest.approx(found[("Llama-3-8B (hf, none AC)", "I")] + forward)


def test_an_unknown_model_is_refused(bench, capsys):
    assert bench.main(["--small", "--models", "Llama-9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flop_counts.py: error: --models: unknown 'Llama-9'") and "\n" == err[-1] and err.count("\n") == 1
