"""Arithmetic per-unit profiles (schedc.model_costs) and `schedc profile --config/--flops`: no torch needed."""

import json
import re

import pytest

import schedc
from schedc import cli
from schedc.core.costs import Profile
from schedc.errors import ParameterError, SchedcError
from schedc.library import transformer_profile
from schedc.model_costs import COUNTED_MODEL_TYPES, read_hf_config, unit_names, unit_profile

# A small GQA + SwiGLU decoder with numbers easy to follow by hand: b = 2, s = 4 (8 tokens),
# h = 8, 4 heads of 2 (q = 8), 2 kv heads (k = 4), f = 16, V = 10, bf16 (e = 2).
SMALL = dict(layers=2, hidden=8, ffn_hidden=16, heads=4, kv_heads=2, vocab=10, seq=4, microbatch_size=2,
             flops_per_second=1e3, memory_bandwidth=1e3, bandwidth=1e2)
# the textbook count (impl='paper'), which the hand counts below follow
PAPER = dict(SMALL, impl="paper")


def test_gqa_swiglu_units_match_hand_counts():
    p = unit_profile(**PAPER)
    assert [u.modules for u in p.stages] == [["tok_embeddings"], ["layers.0"], ["layers.1"], ["norm", "lm_head"]]
    emb, layer, _, head = p.stages
    # layer parameters: W_q 8x8 + W_k, W_v 8x4 each + W_o 8x8 + SwiGLU 3 x 8x16 = 576
    # F = 2 x 8 tokens x 576 + attention core 4 x 8 x 4 x 8 = 9216 + 1024 FLOPs at 1e3 FLOP/s
    assert layer.forward == pytest.approx(10.24)
    assert layer.backward_input == pytest.approx((9216 + 2 * 1024) / 1e3)
    assert layer.backward_weight == pytest.approx(9.216)
    # activations per token: norms 2 x 2h = 32, attention 2 x (h + q + 2k + q) = 64, MLP 2h + 3 x 2f = 112
    assert layer.activation_bytes == 8 * (32 + 64 + 112)
    assert layer.weight_grad_bytes == layer.activation_bytes  # torch's split backward holds it all until W
    assert layer.static_bytes == 18 * 576  # bf16 weight 2 + fp32 grad 4 + optimizer 12
    # head: 2 x 8 x 8 x 10 FLOPs each of F, I, W; logits 2 x 80 + fp32 copy 4 x 80 + 2 x 2 x 64
    assert head.forward == head.backward_input == head.backward_weight == pytest.approx(1.28)
    assert head.activation_bytes == 160 + 320 + 256 and head.static_bytes == 18 * 80
    # embedding: memory-bound, no input gradient; holds the int64 token ids
    assert emb.forward == pytest.approx(2 * 2 * 64 / 1e3) and emb.backward_input == 0
    assert emb.backward_weight == pytest.approx((2 * 2 * 64 + 3 * 2 * 80) / 1e3)
    assert emb.activation_bytes == 8 * 8 and emb.static_bytes == 18 * 80
    assert p.comm == pytest.approx(2 * 64 / 1e2) and p.dtype == "bfloat16" and p.microbatch_size == 2


def test_held_bytes_follow_the_zero_bubble_paper_and_gelu_counts_two_matrices():
    paper = unit_profile(**PAPER, held="paper", dropout=True)
    layer = paper.stages[1]
    # with dropout the two 1-byte masks are held after F but W does not need them
    assert layer.activation_bytes == 8 * (32 + 64 + 112 + 16)
    # linears' inputs 2 x (h + q + h) + 2f = 80, gradients of Q, K, V, W_o out 2 x (q + 2k) + 2h = 48,
    # of the MLP's gate, up and down 2 x 2f + 2h = 80
    assert layer.weight_grad_bytes == 8 * (80 + 48 + 80)
    assert paper.stages[-1].weight_grad_bytes == 2 * 64 + 2 * 80
    gelu = unit_profile(**PAPER, mlp="gelu").stages[1]
    assert gelu.static_bytes == 18 * (64 + 64 + 64 + 2 * 8 * 16)
    assert gelu.activation_bytes == 8 * (32 + 64 + 16 + 2 * 2 * 16)


def test_tied_embeddings_keep_the_head_matrix_only():
    tied = unit_profile(**PAPER, tied_embeddings=True)
    assert tied.stages[0].static_bytes == 0 and tied.stages[-1].static_bytes == 18 * 80
    assert "tied embeddings" in tied.model


def test_hf_names_are_nemo_automodels():
    assert unit_names(2, "hf") == [["model.embed_tokens"], ["model.layers.0"], ["model.layers.1"],
                                   ["model.norm", "lm_head"]]
    with pytest.raises(SchedcError, match="names must be one of"):
        unit_names(2, "megatron")


def test_merged_units_are_transformer_profile_plus_the_embeddings_own_costs():
    # transformer_profile's model: MHA, GELU MLP, dropout, bf16; it leaves the embedding's
    # memory-bound time and token ids out, so those are the only difference
    units = unit_profile(layers=32, hidden=4096, vocab=128256, seq=4096, mlp="gelu", dropout=True, impl="paper")
    for n in (1, 4, 8):
        counts = [4 if n == 8 else 32 // n] * n
        counts[0] += 1
        counts[-1] += 1
        merged, ref = units.merge(counts), transformer_profile(n)
        emb = units.stages[0]
        for k, (a, b) in enumerate(zip(merged.stages, ref.stages)):
            extra = emb if k == 0 else None
            assert a.forward == pytest.approx(b.forward + (extra.forward if extra else 0), rel=1e-12)
            assert a.backward_input == pytest.approx(b.backward_input, rel=1e-12)
            assert a.backward_weight == pytest.approx(b.backward_weight + (extra.backward_weight if extra else 0),
                                                      rel=1e-12)
            assert a.activation_bytes == pytest.approx(b.activation_bytes + (extra.activation_bytes if extra else 0))
            assert a.static_bytes == pytest.approx(b.static_bytes)
        assert merged.comm == pytest.approx(ref.comm)
    paper = unit_profile(layers=32, hidden=4096, vocab=128256, seq=4096, mlp="gelu", dropout=True, held="paper",
                         impl="paper")
    merged = paper.merge([1 + 16, 16 + 1])
    assert merged.stages[1].weight_grad_bytes == pytest.approx(transformer_profile(2, held="paper").stages[1].weight_grad_bytes)


@pytest.mark.parametrize("bad, needle", [
    (dict(layers=0), "layers must be an integer >= 1"),
    (dict(heads=6, kv_heads=3), "not a multiple of heads"),
    (dict(kv_heads=3), "must be a multiple of kv_heads"),
    (dict(flops_per_second=0), "flops_per_second must be a finite number > 0"),
    (dict(dtype="int8"), "not a dtype schedc knows"),
    (dict(mlp="relu"), "mlp must be"),
])
def test_bad_arguments_name_themselves(bad, needle):
    with pytest.raises(SchedcError, match=needle):
        unit_profile(**{**SMALL, **bad})


LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32,
             "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 128256, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "rope_theta": 500000.0}
# Qwen3-0.6B's shape: 16 heads of 128 = 2048 wide attention in a 1024 hidden model, tied embeddings, v5 "dtype"
QWEN3_SMALL = {"model_type": "qwen3", "num_hidden_layers": 28, "hidden_size": 1024, "intermediate_size": 3072,
               "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
               "tie_word_embeddings": True, "dtype": "bfloat16"}


def _write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_hf_config_llama_and_qwen3(tmp_path):
    shape = read_hf_config(_write(tmp_path, LLAMA3_8B))
    assert {k: shape[k] for k in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "vocab",
                                  "tied_embeddings", "dtype", "mlp")} == dict(
        layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, head_dim=128, vocab=128256,
        tied_embeddings=False, dtype="bfloat16", mlp="swiglu")
    p = unit_profile(**shape, seq=4096)
    params = sum(u.static_bytes for u in p.stages) / 18
    assert params == pytest.approx(8.03e9, rel=0.01)  # Llama 3 8B, less its norm weights
    q = read_hf_config(_write(tmp_path, QWEN3_SMALL, "qwen.json"))
    assert q["head_dim"] == 128 and q["tied_embeddings"] and q["model"].startswith("qwen3 (qwen.json)")
    layer = unit_profile(**q, seq=16, flops_per_second=1.0).stages[1]
    q_w, k_w = 16 * 128, 8 * 128
    assert layer.backward_weight == pytest.approx(2 * 16 * (1024 * q_w + 2 * 1024 * k_w + q_w * 1024 + 3 * 1024 * 3072))


def test_hf_config_text_config_and_defaults(tmp_path):
    nested = {"model_type": "llava", "text_config": LLAMA3_8B}
    assert read_hf_config(_write(tmp_path, nested, "vlm.json"))["vocab"] == 128256
    no_kv = {k: v for k, v in LLAMA3_8B.items() if k not in ("num_key_value_heads", "tie_word_embeddings", "torch_dtype")}
    shape = read_hf_config(_write(tmp_path, no_kv, "mha.json"))
    assert shape["kv_heads"] == 32 and shape["tied_embeddings"] is False and shape["dtype"] == "bfloat16"
    # a field transformers' LlamaConfig defaults is its default (11008), named in the label
    no_ffn = read_hf_config(_write(tmp_path, {k: v for k, v in LLAMA3_8B.items() if k != "intermediate_size"}))
    assert no_ffn["ffn_hidden"] == 11008 and no_ffn["model"].endswith("config defaults: intermediate_size 11008")


@pytest.mark.parametrize("data, needle", [
    ({**LLAMA3_8B, "hidden_size": "4096"}, "field 'hidden_size' must be an integer >= 1, got '4096'"),
    ({**LLAMA3_8B, "num_key_value_heads": 5}, "not a multiple of num_key_value_heads 5"),
    ({**LLAMA3_8B, "torch_dtype": "int4"}, "field 'torch_dtype': 'int4' is not a dtype"),
    ([1, 2], "a config.json is a JSON object"),
])
def test_hf_config_errors_name_the_file_and_field(tmp_path, data, needle):
    path = _write(tmp_path, data)
    with pytest.raises(SchedcError, match=f"^{path}: .*{needle}"):
        read_hf_config(path)


def test_hf_config_unreadable_files(tmp_path):
    with pytest.raises(SchedcError, match="nope.json: no such file"):
        read_hf_config(tmp_path / "nope.json")
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(LLAMA3_8B).encode())
    with pytest.raises(SchedcError, match="bom.json: starts with a UTF-8 byte-order mark"):
        read_hf_config(tmp_path / "bom.json")
    (tmp_path / "broken.json").write_text('{"num_hidden_layers": 2,')
    with pytest.raises(SchedcError, match="line 1 column .*not valid JSON"):
        read_hf_config(tmp_path / "broken.json")


# ---------------------------------------------------------------- the command line


def test_cli_config_writes_a_per_unit_profile(tmp_path, capsys):
    out = tmp_path / "units.json"
    rc = cli.main(["profile", "--units", "--config", str(_write(tmp_path, LLAMA3_8B)), "--seq", "4096", "--mbs", "1",
                   "--flops", "400e12", "--comm-bandwidth", "40GB/s", "--names", "hf", "-o", str(out)])
    assert rc == 0
    p = Profile.load(out)
    assert p.n_stages == 34 and p.stages[1].modules == ["model.layers.0"] and p.stages[-1].modules == [
        "model.norm", "lm_head"]
    counted = unit_profile(**read_hf_config(tmp_path / "config.json"), seq=4096, names="hf")
    # the command counts through schedc.count_profile, which names the framework counted for
    assert p == counted.model_copy(update={"created": p.created, "assumes": {**counted.assumes, "framework": "schedc"}})
    printed = capsys.readouterr().out
    assert "34 units" in printed and "model.layers.31" in printed


def test_cli_flags_write_a_per_unit_profile(tmp_path):
    out = tmp_path / "u.json"
    assert cli.main(["profile", "--flops", "1e12", "--layers", "3", "--hidden", "64", "--vocab", "100", "--seq", "8",
                     "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--tied-embeddings", "-o", str(out)]) == 0
    p = Profile.load(out)
    counted = unit_profile(layers=3, hidden=64, vocab=100, seq=8, heads=4, kv_heads=2, ffn_hidden=128,
                           tied_embeddings=True, flops_per_second=1e12)
    assert p == counted.model_copy(update={"assumes": {**counted.assumes, "framework": "schedc"}})


@pytest.mark.parametrize("argv, needle", [
    (["--config", "C", "-o", "u.json"], "--seq: give the sequence length"),
    (["--config", "C", "--seq", "8", "--layers", "4", "-o", "u.json"], "--layers: the model's shape comes from --config"),
    (["--flops", "1e12", "--layers", "3", "--seq", "8", "-o", "u.json"], "give --hidden, --vocab"),
    (["--config", "C", "--seq", "8", "--model", "examples/llama.py:stages", "-o", "u.json"], "--model measures a model"),
    (["--tied-embeddings", "-o", "u.json"], "--tied-embeddings describes an arithmetic profile"),
    (["--config", "C", "--seq", "8", "--comm-bandwidth", "fast", "-o", "u.json"], "--comm-bandwidth: expected bytes"),
])
def test_cli_arithmetic_mistakes_are_one_line_errors(tmp_path, capsys, argv, needle):
    config = str(_write(tmp_path, LLAMA3_8B))
    argv = [config if a == "C" else str(tmp_path / a) if a == "u.json" else a for a in argv]
    assert cli.main(["profile", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err
    assert not (tmp_path / "u.json").exists()


# ---------------------------------------------------------------- memory as the running code holds it

QWEN25_7B = {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944,
             "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "torch_dtype": "bfloat16"}
MIB = 2**20


def test_hf_layers_count_what_an_h200_measured(tmp_path):
    # H200, bf16, seq 4096, mbs 1, HF's decoder layers: held after F 784.5 / 880.5 MiB; from I
    # until W 1152.5 / 1296.5 MiB without the input gradient I returns (2 h bytes per token here)
    for config, after_f, held in ((LLAMA3_8B, 784.5, 1152.5), (QWEN25_7B, 880.5, 1296.5)):
        p = unit_profile(read_hf_config(_write(tmp_path, config)), seq=4096, impl="hf")
        layer, hidden = p.stages[1], config["hidden_size"]
        assert layer.activation_bytes / MIB == pytest.approx(after_f, abs=0.1)
        assert (layer.weight_grad_bytes - 2 * hidden * 4096) / MIB == pytest.approx(held, abs=0.1)
        assert p.boundary_bytes == 2 * hidden * 4096 and p.reserve_bytes == pytest.approx(1.54 * 2**30)
    head = unit_profile(read_hf_config(_write(tmp_path, LLAMA3_8B)), seq=4096, impl="hf").stages[-1]
    # the loss's fp32 log-probabilities are held; its fp32 copy of the logits lives only while F runs
    assert head.activation_bytes > 4 * 128256 * 4096 and head.transient_bytes["F"] == 4 * 128256 * 4096


def test_torchtitan_counts_cuda_kernels_and_says_so(tmp_path):
    shape = read_hf_config(_write(tmp_path, LLAMA3_8B))
    hf = unit_profile(shape, seq=4096, impl="hf").stages[1]
    tt = unit_profile(shape, seq=4096, impl="torchtitan").stages[1]
    # torch's fused RMSNorm on CUDA keeps the bf16 input, not an fp32 copy: 2 norms x (4 + 2 - 2) h bytes less
    assert hf.activation_bytes - tt.activation_bytes == 2 * 4 * 4096 * 4096
    cpu = unit_profile(shape, seq=4096, impl="torchtitan", device="cpu")
    assert cpu.reserve_bytes == 0 and cpu.assumes["device"] == "cpu" and cpu.assumes["implementation"] == "torchtitan"


def test_static_bytes_follow_optimizer_dtypes_and_sharding():
    base = dict(layers=2, hidden=64, vocab=100, seq=8, heads=4)
    per_param = {opt: unit_profile(**base, optimizer=opt).assumes["static_bytes_per_param"]
                 for opt in ("adamw", "sgd-momentum", "sgd", "none")}
    assert per_param == {"adamw": 18, "sgd-momentum": 14, "sgd": 10, "none": 6}
    layer = unit_profile(**base).stages[1].static_bytes
    assert unit_profile(**base, optimizer="none").stages[1].static_bytes == layer * 6 / 18
    # FSDP2 under torch's pipelining: the sharded 18 / 4, plus bf16 weights, an fp32 gradient
    # accumulator and the bf16 gradient a split W leaves, unsharded (model_costs.profile.fsdp_held)
    assert unit_profile(**base, dp_shard=4).stages[1].static_bytes == layer * (18 / 4 + 2 + 4 + 2) / 18
    assert unit_profile(**base, tp=2).stages[1].static_bytes == layer / 2
    # torchtitan under FSDP: fp32 params, fp32 grads, two fp32 moments, no separate master copy
    assert unit_profile(**base, param_dtype="float32").assumes["static_bytes_per_param"] == 16
    sharded, whole = unit_profile(**base, dp_shard=4).stages[1], unit_profile(**base).stages[1]
    # nothing gathered per action; under FSDP2 a W's new gradients land in an empty .grad (its hook
    # moved the last one out), so W adds no gradients into earlier microbatches' as unsharded it does
    assert {k: sharded.transient_bytes[k] for k in "FI"} == {k: whole.transient_bytes[k] for k in "FI"}
    assert "W" not in sharded.transient_bytes and whole.transient_bytes["W"] > 0
    assert whole.transient_bytes["B"] > sharded.transient_bytes["B"] > 0  # B adds each new gradient as it comes
    assert unit_profile(**base, tp=2).stages[1].activation_bytes == unit_profile(**base).stages[1].activation_bytes / 2


def test_activation_checkpointing_changes_memory_and_recompute():
    base = dict(layers=3, hidden=64, vocab=100, seq=8, heads=4, kv_heads=2, impl="hf")
    none, full = unit_profile(**base).stages[1], unit_profile(**base, activation_checkpoint="full").stages[1]
    assert full.activation_bytes == 2 * 64 * 8  # the layer's input only
    assert full.backward_input == pytest.approx(none.backward_input + none.forward)
    # W recomputes once per parameter group (q, k, v, o, gate, up, down, two norms)
    assert full.backward_weight == pytest.approx(none.backward_weight + 9 * none.forward)
    selective = unit_profile(**base, activation_checkpoint="selective")
    assert none.activation_bytes > selective.stages[1].activation_bytes > full.activation_bytes
    assert selective.assumes["split_backward"] is False
    assert any(n.startswith("warning: selective") for n in selective.notes)
    # per-op checkpointing runs B = I + W, which recomputes once: all of it is charged to I, none to W
    for mode in ("selective", "light"):
        layer = unit_profile(**base, activation_checkpoint=mode).stages[1]
        assert layer.backward_input > none.backward_input, mode
        assert layer.backward_weight == pytest.approx(none.backward_weight), mode
    mixed = unit_profile(**base, activation_checkpoint=["full", "none", "selective"])
    assert [u.activation_bytes for u in mixed.stages[1:4]] == [full.activation_bytes, none.activation_bytes,
                                                               selective.stages[1].activation_bytes]
    assert mixed.assumes["activation_checkpoint"] == ["full", "none", "selective"]
    with pytest.raises(SchedcError, match="one per layer"):
        unit_profile(**base, activation_checkpoint=["full"])
    with pytest.raises(SchedcError, match="impl 'paper' counts no activation checkpointing"):
        unit_profile(**{**base, "impl": "paper"}, activation_checkpoint="full")


def test_assumes_records_the_run():
    p = unit_profile(layers=2, hidden=64, vocab=100, seq=16, microbatch_size=2, heads=4, dp_shard=2, tp=2,
                     reserve_bytes=0, optimizer="sgd")
    assert {k: p.assumes[k] for k in ("seq_len", "microbatch_size", "activation_checkpoint", "dp_shard", "tp",
                                      "optimizer", "reserve_bytes", "implementation", "torch")} == dict(
        seq_len=16, microbatch_size=2, activation_checkpoint="none", dp_shard=2, tp=2, optimizer="sgd",
        reserve_bytes=0, implementation="torchtitan", torch="2.14")
    assert p.assumes["param_dtype"] == "bfloat16" and p.assumes["grad_dtype"] == "float32"


MIXTRAL = {"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
           "num_experts_per_tok": 2, "torch_dtype": "bfloat16"}
QWEN3_MOE = {"model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048, "intermediate_size": 6144,
             "moe_intermediate_size": 768, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
             "vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8, "torch_dtype": "bfloat16"}


def test_moe_layers_hold_every_expert_and_run_the_routed_ones(tmp_path):
    shape = read_hf_config(_write(tmp_path, MIXTRAL))
    assert (shape["experts"], shape["experts_per_token"], shape["moe_ffn_hidden"]) == (8, 2, 14336)
    moe = unit_profile(shape, seq=4096).stages[1]
    dense = unit_profile({**shape, "experts": 0, "experts_per_token": 0}, seq=4096).stages[1]
    experts = 8 * 3 * 4096 * 14336
    assert moe.static_bytes / 18 == pytest.approx(dense.static_bytes / 18 - 3 * 4096 * 14336 + experts + 8 * 4096)
    assert moe.static_bytes / 2**30 > 20  # the experts hold about 24 GiB per layer with AdamW
    # two experts per token: about twice the dense MLP's time, not eight times
    assert 1.5 < moe.forward / dense.forward < 2.2
    q = unit_profile(read_hf_config(_write(tmp_path, QWEN3_MOE, "q.json")), seq=1024)
    assert q.stages[1].static_bytes / 18 > 128 * 3 * 2048 * 768


@pytest.mark.parametrize("model_type", ["deepseek_v3", "qwen3_next", "gpt_oss"])
def test_architectures_not_modelled_are_refused_by_name(tmp_path, model_type):
    path = _write(tmp_path, {**LLAMA3_8B, "model_type": model_type, "n_routed_experts": 256})
    with pytest.raises(SchedcError, match=f"model_type '{model_type}' is not modelled by schedc"):
        read_hf_config(path)
    experts = _write(tmp_path, {**LLAMA3_8B, "num_experts": 64}, "e.json")
    with pytest.raises(SchedcError, match="has 64 experts and schedc counts experts only for"):
        read_hf_config(experts)


GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "n_inner": None,
        "vocab_size": 50257, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}


def test_gpt2_configs_are_read_through_their_aliases(tmp_path):
    shape = read_hf_config(_write(tmp_path, GPT2))
    assert {k: shape[k] for k in ("layers", "hidden", "heads", "ffn_hidden", "mlp", "family", "positions",
                                  "tied_embeddings", "dropout")} == dict(
        layers=12, hidden=768, heads=12, ffn_hidden=3072, mlp="gelu", family="gpt2", positions=1024,
        tied_embeddings=True, dropout=True)
    p = unit_profile(shape, seq=1024)
    assert sum(u.static_bytes for u in p.stages) / 18 == pytest.approx(124.4e6, rel=0.01)  # GPT-2 small


def test_sizes_past_any_model_are_one_line_errors(tmp_path):
    with pytest.raises(SchedcError, match="layers: 10000000 is more than schedc plans"):
        unit_profile(layers=10_000_000, hidden=64, vocab=100, seq=8)
    with pytest.raises(SchedcError, match=r"hidden: 10+\.\.\. is beyond any model"):
        unit_profile(layers=2, hidden=10**400, vocab=100, seq=8)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(LLAMA3_8B)[:-1] + ', "x": ' + "9" * 5000 + "}")
    with pytest.raises(SchedcError, match=f"^{path}: a number of 5000 digits"):
        read_hf_config(path)


# ---------------------------------------------------------------- the counted route's flags

@pytest.mark.parametrize("argv, needle", [
    (["--comm-latency", "nan"], "--comm-latency must be a finite number >= 0"),
    (["--comm-latency", "-1"], "--comm-latency must be a finite number >= 0"),
    (["--comm-latency", "inf"], "--comm-latency must be a finite number >= 0"),
    (["--comm-latency", "1" + "0" * 5000], "--comm-latency must be a finite number >= 0"),
    (["--mbs", "0"], "--mbs must be between 1 and"),
    (["--seq", "0"], "--seq must be between 1 and"),
    (["--seq", "1" + "0" * 400], "--seq must be between 1 and 16777216, got a 401-digit number"),
    (["--optimizer-bytes", "1e308"], "--optimizer-bytes must be a finite number >= 0 and at most 1024"),
    (["--optimizer", "adagrad"], "--optimizer must be one of adamw, adam, sgd-momentum, sgd, none"),
    (["--ac", "sometimes"], "--ac: 'sometimes' is not a mode"),
    (["--ac", "full,none"], "--ac: 2 modes for 32 layers"),
    (["--tp", "3"], "tp 3 does not divide the 32 heads"),
    (["--reserve", "lots"], "--reserve: expected a byte size"),
    (["--dp-shard", "0"], "--dp-shard must be between 1 and"),
])
def test_counted_route_numbers_are_one_line_errors_naming_the_flag(tmp_path, capsys, argv, needle):
    config, out = _write(tmp_path, LLAMA3_8B), tmp_path / "u.json"
    assert cli.main(["profile", "--units", "--config", str(config), "--seq", "4096", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and len(err) < 300, err
    assert not out.exists()


@pytest.mark.parametrize("argv, needle", [
    (["--hidden", "1" + "0" * 400], "--hidden must be between 1 and 16777216, got a 401-digit number"),
    (["--layers", "10000000"], "--layers must be between 1 and 8190"),
])
def test_flag_shapes_past_any_model_are_refused_at_once(tmp_path, capsys, argv, needle):
    flags = {"--layers": "2", "--hidden": "64", "--vocab": "100"}
    flags.update(dict(zip(argv[::2], argv[1::2])))
    out = tmp_path / "u.json"
    argv = ["profile", "--flops", "1e12", "--seq", "8", *[x for kv in flags.items() for x in kv], "-o", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and not out.exists()


def test_counted_route_uses_latency_optimizer_ac_and_device(tmp_path):
    config = _write(tmp_path, LLAMA3_8B)

    def profile(*argv) -> Profile:
        out = tmp_path / "u.json"
        assert cli.main(["profile", "--units", "--config", str(config), "--seq", "4096", *argv, "-o", str(out)]) == 0
        return Profile.load(out)

    base = profile()
    assert profile("--comm-latency", "1e-5").comm == pytest.approx(base.comm + 1e-5)
    sgd = profile("--optimizer", "sgd")
    assert sgd.stages[1].static_bytes == pytest.approx(base.stages[1].static_bytes * 10 / 18)
    assert profile("--optimizer", "none").assumes["static_bytes_per_param"] == 6
    full = profile("--ac", "full", "--impl", "hf", "--dp-shard", "8")
    assert full.assumes["activation_checkpoint"] == "full" and full.assumes["implementation"] == "hf"
    # the sharded 18 bytes / 8, and bf16 weights + fp32 and bf16 gradients held unsharded
    assert full.stages[1].static_bytes == pytest.approx(base.stages[1].static_bytes * (18 / 8 + 8) / 18)
    assert base.reserve_bytes == pytest.approx(1.54 * 2**30) and base.assumes["device"] == "cuda"
    assert profile("--device", "cpu").reserve_bytes == 0 and profile("--reserve", "2GiB").reserve_bytes == 2 * 2**30


def test_the_config_is_never_the_output(tmp_path, capsys):
    config = _write(tmp_path, LLAMA3_8B)
    before = config.read_text()
    assert cli.main(["profile", "--units", "--config", str(config), "--seq", "8", "-o", str(config)]) == 2
    assert "would overwrite" in capsys.readouterr().err and config.read_text() == before


def test_the_default_link_bandwidth_says_what_it_stands_for(capsys):
    with pytest.raises(SystemExit):
        cli.main(["profile", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "40GB/s for a counted profile" in text and "InfiniBand" in text and "NVLink" in text


def test_tensor_parallelism_splits_time_and_bytes():
    base = dict(layers=2, hidden=64, vocab=100, seq=8, heads=4)
    one, two = unit_profile(**base).stages[1], unit_profile(**base, tp=2, tp_latency=0.0).stages[1]
    # W's weight gradients stay local: no collective; F's and I's add theirs (the next test)
    assert two.backward_weight == pytest.approx(one.backward_weight / 2) and two.forward > one.forward / 2
    assert two.weight_grad_bytes == one.weight_grad_bytes / 2


def test_a_tp4_layers_f_and_i_are_a_quarter_of_tp1s_plus_the_counted_collectives():
    # torchtitan's sequence parallelism: 2 all-gathers + 2 reduce-scatters of b s h elements per layer
    # in F and in I, each a ring over 4 ranks ((4-1)/4 of the tensor) at tp_bandwidth plus tp_latency
    shape = dict(layers=2, hidden=8192, ffn_hidden=28672, heads=64, kv_heads=8, vocab=128256, seq=8192)
    one = unit_profile(**shape).stages[1]
    four = unit_profile(**shape, tp=4)
    layer = four.stages[1]
    ring = 3 / 4 * 2 * 8192 * 8192 / 450e9 + 10e-6
    assert layer.forward == pytest.approx(one.forward / 4 + 4 * ring)
    assert layer.backward_input == pytest.approx(one.backward_input / 4 + 4 * ring)
    assert layer.forward > 1.05 * one.forward / 4  # a 70B-sized layer at seq 8192: about 9% more
    assert four.assumes["tp_bandwidth"] == 450e9 and "reduce-scatters" in four.assumes["tp_collectives"]
    assert "tp_collectives" not in unit_profile(**shape).assumes
    # a slower link costs more; a full recompute reruns the forward's collectives in I
    slow = unit_profile(**shape, tp=4, tp_bandwidth=100e9).stages[1]
    assert slow.forward > layer.forward
    full = unit_profile(**shape, tp=4, activation_checkpoint="full").stages[1]
    plain_full = unit_profile(**shape, activation_checkpoint="full").stages[1]
    assert full.backward_input == pytest.approx(plain_full.backward_input / 4 + 8 * ring)


def test_torchtitans_chunked_loss_runs_the_heads_backward_in_f(tmp_path):
    shape = read_hf_config(_write(tmp_path, LLAMA3_8B))
    hf, tt = (unit_profile(shape, seq=4096, impl=impl).stages[-1] for impl in ("hf", "torchtitan"))
    assert tt.forward == pytest.approx(hf.forward + hf.backward_input + hf.backward_weight)
    assert tt.backward_input == tt.backward_weight == 0
    # no logits survive F: an fp32 gradient of the hidden states does; the chunks' logits are transient
    assert tt.activation_bytes < hf.activation_bytes / 20
    assert tt.transient_bytes["F"] == pytest.approx(14 * 128256 * 4096 / 8)


def test_dp_shard_counts_what_fsdp2_holds_unsharded_under_pipelining():
    # torchtitan's FSDP2: fp32 storage, bf16 compute, fp32 reduce (benchmarks/memory_fidelity.py --fsdp measures it)
    base = dict(layers=2, hidden=64, vocab=100, seq=8, heads=4, kv_heads=2, param_dtype="float32")
    whole = unit_profile(**base)
    n = [u.static_bytes / 16 for u in whole.stages]  # 16 bytes per parameter unsharded: n parameters per unit
    for dp in (2, 8):
        p = unit_profile(**base, dp_shard=dp)
        # the sharded states / dp, plus bf16 weights, the fp32 gradient accumulator and the bf16 gradient a split
        # W leaves until the next I, held unsharded from the first action to the reduce-scatter
        assert [u.static_bytes for u in p.stages] == pytest.approx([k * (16 / dp + 2 + 4 + 2) for k in n])
        # no gradient added into an earlier one's (FSDP2's hook empties .grad): the rest is the same
        assert [{k: v for k, v in (u.transient_bytes or {}).items() if k in "FI"} for u in p.stages] == [
            {k: v for k, v in (u.transient_bytes or {}).items() if k in "FI"} for u in whole.stages]
        assert all("W" not in (u.transient_bytes or {}) for u in p.stages)
        assert p.assumes["fsdp_unsharded_bytes_per_param"] == 8 and "reshard_after_forward off" in p.assumes["fsdp"]
        assert any(note.startswith(f"dp_shard {dp}: + 8 bytes") for note in p.notes)
        assert p.assumes["held"] == "torch"  # the other settings are as given
        paper = unit_profile(**base, dp_shard=dp, impl="paper")
        assert paper.stages[1].weight_grad_bytes == unit_profile(**base, impl="paper").stages[1].weight_grad_bytes
    # gradients reduced in the compute dtype accumulate in place: no second copy
    same = unit_profile(**base, dp_shard=2, grad_dtype="bfloat16")
    assert same.stages[1].static_bytes == pytest.approx(n[1] * ((4 + 2 + 8) / 2 + 2 + 2))
    assert unit_profile(**base, dp_shard=2, tp=2).stages[1].static_bytes == pytest.approx(n[1] * 16 / 2)
    assert "fsdp" not in whole.assumes and not any(note.startswith("dp_shard") for note in whole.notes)


def test_plan_with_dp_shard_counts_and_records_the_unsharded_bytes(tmp_path):
    config = _write(tmp_path, {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 4,
                               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
                               "intermediate_size": 128})
    out = tmp_path / "plan.csv"
    assert cli.main(["plan", "--config", str(config), "--seq", "64", "--dp-shard", "2", "--ranks", "2", "--mb", "4",
                     "--memory", "none", "--time-limit", "1", "-o", str(out), "--quiet"]) == 0
    assumes = json.loads(out.with_suffix(".json").read_text())["assumes"]
    assert assumes["dp_shard"] == 2 and assumes["fsdp_unsharded_bytes_per_param"] == 2 + 4 + 2
    assert "unsharded" in assumes["fsdp"]
    units = tmp_path / "u.json"
    assert cli.main(["profile", "--units", "--config", str(config), "--seq", "64", "--dp-shard", "2",
                     "-o", str(units)]) == 0
    sharded = Profile.load(units)
    assert sharded.assumes["fsdp_unsharded_bytes_per_param"] == 8
    # bf16 params: weights 2 + fp32 grads 4 + fp32 master 4 + AdamW 8 = 18 sharded, + 8 unsharded
    one = unit_profile(str(config), seq=64)
    assert sharded.stages[1].static_bytes == pytest.approx(one.stages[1].static_bytes * (18 / 2 + 8) / 18)


# ---------------------------------------------------------------- which architectures --config counts

QWEN2_MOE = {"model_type": "qwen2_moe", "num_hidden_layers": 24, "hidden_size": 2048, "intermediate_size": 5632,
             "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_attention_heads": 16,
             "num_key_value_heads": 16, "vocab_size": 151936, "num_experts": 60, "num_experts_per_tok": 4}
# one config per model_type schedc counts: a type added to COUNTED_MODEL_TYPES needs one here
COUNTED_CONFIGS = {"llama": LLAMA3_8B, "mistral": {**LLAMA3_8B, "model_type": "mistral"}, "qwen2": QWEN25_7B,
                   "qwen3": QWEN3_SMALL, "gpt2": GPT2, "mixtral": MIXTRAL, "qwen2_moe": QWEN2_MOE,
                   "qwen3_moe": QWEN3_MOE}


@pytest.mark.parametrize("model_type", COUNTED_MODEL_TYPES)
def test_every_counted_model_type_is_counted_at_both_doors(tmp_path, capsys, model_type):
    assert set(COUNTED_CONFIGS) == set(COUNTED_MODEL_TYPES)
    config, out = _write(tmp_path, COUNTED_CONFIGS[model_type]), tmp_path / "u.json"
    assert cli.main(["profile", "--units", "--config", str(config), "--seq", "64", "-o", str(out)]) == 0
    assert capsys.readouterr().err == ""
    counted = Profile.load(out)
    assert counted.model.startswith(f"{model_type} (config.json): ")
    assert counted == schedc.count_profile(config, seq=64)
    assert counted.n_stages == COUNTED_CONFIGS[model_type].get("num_hidden_layers", 12) + 2


@pytest.mark.parametrize("model_type, shown", [
    ("foo", "'foo'"), ("deepseek_v3", "'deepseek_v3' is not modelled by schedc (multi-head latent attention"),
    ("gemma2", "'gemma2'"), ("phi3", "'phi3'"), ("falcon", "'falcon'"), ("LLaMA", "'LLaMA'"), (7, "7"),
])
def test_a_model_type_schedc_does_not_count_is_refused_in_one_line(tmp_path, capsys, model_type, shown):
    config = _write(tmp_path, {**LLAMA3_8B, "model_type": model_type})
    counted = ", ".join(COUNTED_MODEL_TYPES)
    for argv in (["profile", "--units", "--config", str(config), "--seq", "64", "-o", str(tmp_path / "u.json")],
                 ["plan", "--config", str(config), "--seq", "64", "--ranks", "2", "--mb", "4", "--memory", "none",
                  "-o", str(tmp_path / "p.csv")]):
        assert cli.main(argv) == 2
        captured = capsys.readouterr()
        line, = captured.err.splitlines()  # one line, no traceback, nothing on stdout
        assert line.startswith(f"schedc {argv[0]}: error: {config}: model_type {shown}"), line
        assert f"schedc counts the model_types {counted};" in line and "--model" in line and "--flops" in line
        assert captured.out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]  # no partial output
    with pytest.raises(SchedcError, match=f"^{config}: model_type {re.escape(shown)}.* schedc counts the model_types"):
        schedc.count_profile(config, seq=64)


def test_a_config_without_model_type_or_a_refused_text_config_names_the_field(tmp_path, capsys):
    bare = _write(tmp_path, {k: v for k, v in LLAMA3_8B.items() if k != "model_type"})
    with pytest.raises(SchedcError, match=f"^{bare}: field 'model_type' is missing; schedc counts the model_types"):
        read_hf_config(bare)
    vlm = _write(tmp_path, {"model_type": "gemma3", "text_config": {**LLAMA3_8B, "model_type": "gemma3_text"}}, "v.json")
    assert cli.main(["profile", "--units", "--config", str(vlm), "--seq", "64", "-o", str(tmp_path / "u.json")]) == 2
    assert f"{vlm}: text_config.model_type 'gemma3_text' is not modelled" in capsys.readouterr().err


def test_a_shape_given_as_keywords_takes_only_the_layer_families_schedc_counts():
    shape = {"layers": 2, "hidden": 64, "vocab": 100, "heads": 4}
    assert schedc.count_profile({**shape, "family": "qwen3"}, seq=8).stages[1].static_bytes > \
        schedc.count_profile(shape, seq=8).stages[1].static_bytes  # q/k norms
    with pytest.raises(ParameterError, match=r"^family: 'gemma2' is not a layer schedc counts; give one of decoder, "):
        schedc.count_profile({**shape, "family": "gemma2"}, seq=8)
    # a counted model_type names its layer: Mistral's is Llama's
    assert schedc.count_profile({**shape, "family": "mistral"}, seq=8).stages == \
        schedc.count_profile({**shape, "family": "llama"}, seq=8).stages


@pytest.mark.parametrize("model_type", COUNTED_MODEL_TYPES)
def test_light_checkpointing_keeps_between_none_and_selective(tmp_path, model_type):
    # light saves every matmul's and attention's output: less than the whole layer, more than
    # selective (which also recomputes every second matmul), for each implementation and device
    config = _write(tmp_path, COUNTED_CONFIGS[model_type])
    for impl in ("hf", "torchtitan"):
        for device in ("cuda", "cpu"):
            kept = {m: unit_profile(config, seq=64, impl=impl, device=device, activation_checkpoint=m).stages[1]
                    for m in schedc.model_costs.AC_MODES}
            assert kept["none"].activation_bytes > kept["light"].activation_bytes, (impl, device)
            assert kept["selective"].activation_bytes > kept["full"].activation_bytes
            if model_type == "gpt2" and device == "cuda":
                # every GPT-2 projection is an addmm, which selective saves too, and so is CUDA's
                # flash attention: the same bytes (CPU's flash kernel selective recomputes)
                assert kept["light"].activation_bytes == kept["selective"].activation_bytes
            else:
                assert kept["light"].activation_bytes > kept["selective"].activation_bytes, (impl, device)
            assert kept["light"].weight_grad_bytes < kept["none"].weight_grad_bytes


def test_light_checkpointing_counts_the_matmul_outputs_and_runs_as_b():
    from schedc.core.costs import AC_MODES

    assert schedc.model_costs.AC_MODES is AC_MODES  # one list, fastest first
    h, q, k, f, e, heads = 64, 64, 32, 128, 2, 4
    base = dict(layers=3, hidden=h, ffn_hidden=f, heads=heads, kv_heads=2, vocab=100, impl="hf", seq=8)
    light = unit_profile(**base, activation_checkpoint="light")
    # the input, q, k, v, W_o, gate, up, down, attention's output and fp32 logsumexp, per token
    assert light.stages[1].activation_bytes == 8 * (e * h + e * (q + 2 * k + h + 2 * f + h) + e * q + 4 * heads)
    none = unit_profile(**base)
    assert light.stages[1].forward == none.stages[1].forward
    assert light.assumes["split_backward"] is False
    assert any(n.startswith("warning: light activation checkpointing") for n in light.notes)
    # the bytes scale with the tokens; a per-layer list mixes modes and a per-op one turns the split off
    double = unit_profile(**{**base, "seq": 16}, activation_checkpoint="light").stages[1]
    assert double.activation_bytes == 2 * light.stages[1].activation_bytes
    assert double.weight_grad_bytes == 2 * light.stages[1].weight_grad_bytes
    assert {k: 2 * light.stages[1].transient_bytes[k] for k in "FI"} == {k: double.transient_bytes[k] for k in "FI"}
    # W's new gradients, added into those of earlier microbatches, are the weights' size: not per token
    assert 0 < double.transient_bytes["W"] <= light.stages[1].transient_bytes["W"]
    mixed = unit_profile(**base, activation_checkpoint=["none", "light", "full"])
    assert mixed.stages[2].activation_bytes == light.stages[2].activation_bytes
    assert mixed.assumes["split_backward"] is False
    assert unit_profile(**base, activation_checkpoint=["none", "full", "none"]).assumes["split_backward"] is True


@pytest.mark.parametrize("ac", ["lite", "Light", "", 3])
def test_an_unknown_checkpointing_mode_lists_the_four(ac):
    with pytest.raises(ParameterError) as err:
        unit_profile(**SMALL, activation_checkpoint=ac)
    message = str(err.value)
    assert "\n" not in message and "activation_checkpoint" in message
    assert "none, light, selective, full" in message


def test_selective_recomputes_the_matmuls_its_save_list_skips_in_each_implementation():
    from schedc.model_costs.memory import selective_recompute_flops
    from schedc.model_costs.shape import ModelShape

    def shape(**kw):
        base = dict(layers=2, hidden=64, vocab=100, ffn_hidden=160, heads=4, kv_heads=2, head_dim=16, dtype="bfloat16")
        return ModelShape(**{**base, **kw}).resolved()

    h, q, k, f = 64, 64, 32, 160
    # Hugging Face Llama: q, k, v, o, gate, up, down; every second plain mm recomputed: k, o, up
    assert selective_recompute_flops(shape(family="llama"), "hf") == 2 * (h * k + q * h + h * f)
    # torchtitan fuses q, k, v: qkv, o, w1, w3, w2; recomputed: o and w3
    assert selective_recompute_flops(shape(family="llama"), "torchtitan") == 2 * (q * h + h * f)
    # Qwen2's biased q, k, v are addmms, always saved and not counted: o, gate, up, down; gate and down again
    assert selective_recompute_flops(shape(family="qwen2"), "hf") == 2 * (h * f + f * h)
    # an MoE layer's experts are grouped matmuls, not on the save list: all three recomputed per routed slot
    moe = shape(family="qwen3_moe", experts=8, experts_per_token=2, moe_ffn_hidden=32)
    assert selective_recompute_flops(moe, "hf") == 2 * (h * k + q * h) + 2 * 2 * 3 * h * 32


def test_nemo_qwen3_moe_is_refused_since_nemo_runs_its_own_code_and_moe_says_ep_is_not_modelled(tmp_path):
    # NeMo AutoModel 0.7.0 maps Qwen3MoeForCausalLM to nemo_automodel/components/models/qwen3_moe
    import schedc

    path = _write(tmp_path, {**QWEN3_MOE, "num_hidden_layers": 2})
    with pytest.raises(SchedcError, match=r"^NeMo AutoModel 0.7.0 trains Qwen3MoeForCausalLM with its own "
                                          r"nemo_automodel/components/models/qwen3_moe .*framework=nemo; measure the model"):
        schedc.count_profile(path, seq=16, framework="nemo")
    counted = schedc.count_profile(path, seq=16, framework="torchtitan")
    assert counted.assumes["expert_parallel"].startswith("not modelled: each rank holds every expert")
    assert any(n.startswith("note: expert parallelism is not modelled") for n in counted.notes)
    # Mixtral under NeMo is Hugging Face's MixtralForCausalLM, counted; a dense model says nothing of experts
    assert schedc.count_profile(_write(tmp_path, {**MIXTRAL, "num_hidden_layers": 2}, "m.json"), seq=16,
                                framework="nemo").assumes["expert_parallel"]
    assert "expert_parallel" not in schedc.count_profile(_write(tmp_path, LLAMA3_8B, "l.json"), seq=16).assumes
