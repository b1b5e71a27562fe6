"""Measured per-unit profiles (`schedc profile --units`), arguments no function takes, CPU threads."""

import sys

import pytest

torch = pytest.importorskip("torch")

from _dist import ROOT  # noqa: E402

from schedc import cli  # noqa: E402
from schedc.core.costs import Profile  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.runtime.models import GPTConfig  # noqa: E402
from schedc.runtime.profiling.gpt import profile_gpt  # noqa: E402
from schedc.runtime.profiling.noise import cpu_contention, timing_warning  # noqa: E402
from schedc.runtime.profiling.units import measure_units  # noqa: E402
from schedc.runtime.user_model import units_from_split  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))

LLAMA = f"{ROOT / 'examples' / 'llama.py'}:stages"
HF = f"{ROOT / 'examples' / 'hf_causal_lm.py'}:stages"
CFG = GPTConfig(vocab_size=32, hidden=16, layers=3, heads=2, seq_len=8)
QUICK = ["--warmup", "0", "--repeats", "1"]


pytestmark = pytest.mark.usefixtures("keep_torch_threads")


def test_gpt_units_one_entry_per_unit_with_module_names():
    p = profile_gpt(CFG, 2, 2, warmup=0, repeats=1, units=True)
    assert [u.modules for u in p.stages] == [["embed"], ["blocks.0"], ["blocks.1"], ["blocks.2"], ["norm", "head"]]
    assert p.model.endswith("/5 units") and p.runtime == "torch"
    # identical layers: measured once, the others reuse it and say so
    assert p.stages[1] == p.stages[2].model_copy(update={"modules": ["blocks.0"]}) == \
        p.stages[3].model_copy(update={"modules": ["blocks.0"]})
    assert any("stage 3: identical to stage 1" in n for n in p.notes)
    # the embedding has the vocabulary table, the head stage the head matrix and the loss
    assert p.stages[0].static_bytes > 0 and p.stages[-1].activation_bytes > 0
    merged = p.merge([2, 3])
    assert merged.stages[0].modules == ["embed", "blocks.0"] and merged.stages[1].modules[-2:] == ["norm", "head"]


def test_measuring_every_unit_gives_the_same_bytes_as_reuse():
    from schedc.runtime.models import lm_loss, make_batch
    from schedc.runtime.profiling.gpt import gpt_units

    modules, _ = gpt_units(CFG)
    tokens, targets = make_batch(CFG, 2)
    every = measure_units(modules, tokens, lm_loss, targets, warmup=0, repeats=1, reuse_layers=False)
    reused = measure_units(modules, tokens, lm_loss, targets, warmup=0, repeats=1, reuse_layers=True)
    assert [m.index for m in every] == [m.index for m in reused] == list(range(5))
    for a, b in zip(every, reused):
        assert (a.activation_bytes, a.weight_grad_bytes, a.static_bytes, a.output_bytes) == \
            (b.activation_bytes, b.weight_grad_bytes, b.static_bytes, b.output_bytes)
    # measured apart, the layers have their own samples; reused ones share layer 1's
    assert every[2].forward.samples is not every[1].forward.samples
    assert reused[2].forward.samples == reused[1].forward.samples


def test_cli_gpt_units_and_all_units(tmp_path, capsys):
    small = ["--layers", "2", "--hidden", "16", "--heads", "2", "--seq", "8", "--vocab", "32", "--mbs", "2"]
    out = tmp_path / "u.json"
    assert cli.main(["profile", "--units", *small, *QUICK, "-o", str(out)]) == 0
    p = Profile.load(out)
    assert [u.modules for u in p.stages] == [["embed"], ["blocks.0"], ["blocks.1"], ["norm", "head"]]
    assert "4 units" in capsys.readouterr().out
    assert cli.main(["profile", "--units", "--all-units", *small, *QUICK, "-o", str(out)]) == 0
    assert not any("identical to" in n for n in Profile.load(out).notes)


def test_cli_llama_example_units(tmp_path):
    out = tmp_path / "llama.json"
    assert cli.main(["profile", "--units", "--model", LLAMA, "--layers", "3", "--hidden", "16", "--heads", "2",
                     "--seq", "8", "--vocab", "32", "--mbs", "2", *QUICK, "-o", str(out)]) == 0
    p = Profile.load(out)
    assert [u.modules for u in p.stages] == [["tok_embeddings"], ["layers.0"], ["layers.1"], ["layers.2"],
                                             ["norm", "lm_head"]]
    assert p.model.startswith("llama(layers=3, hidden=16") and p.microbatch_size == 2
    assert all(u.forward > 0 and u.activation_bytes > 0 for u in p.stages)
    assert p.stages[0].static_bytes > 0 and p.stages[-1].static_bytes > 0


def test_cli_hf_example_units_keep_rotary_embeddings_on_every_unit(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "hf.json"
    assert cli.main(["profile", "--units", "--model", HF, "--layers", "2", "--hidden", "16", "--heads", "2",
                     "--kv-heads", "1", "--seq", "8", "--vocab", "32", "--mbs", "2", *QUICK, "-o", str(out)]) == 0
    p = Profile.load(out)
    assert [u.modules for u in p.stages] == [["model.embed_tokens"], ["model.layers.0"], ["model.layers.1"],
                                             ["model.norm", "lm_head"]]
    assert any("every unit also kept model.rotary_emb" in n for n in p.notes)


def test_units_from_split():
    hf = [["model.embed_tokens", "model.layers.0", "model.rotary_emb"],
          ["model.layers.1", "model.norm", "lm_head", "model.rotary_emb"]]
    assert units_from_split(hf) == ([["model.embed_tokens"], ["model.layers.0"], ["model.layers.1"],
                                     ["model.norm", "lm_head"]], ["model.rotary_emb"])
    # no numbered layers: every module is a unit
    assert units_from_split([["a", "b"], ["c"]]) == ([["a"], ["b"], ["c"]], [])


def test_units_need_module_names(tmp_path, capsys):
    factory = tmp_path / "plain.py"
    factory.write_text("import torch\n"
                       "def stages(n_stages=2):\n"
                       "    return {'stages': [torch.nn.Linear(4, 4) for _ in range(n_stages)],\n"
                       "            'sample': torch.randn(2, 4)}\n")
    assert cli.main(["profile", "--units", "--model", f"{factory}:stages", *QUICK, "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--units needs module names" in err


@pytest.mark.parametrize("argv, needle", [
    # the cases: a name the function spells otherwise, a GPT flag the function does not take
    (["--model", HF, "--model-arg", "vocab=32000"],
     "--model-arg vocab=32000: no parameter 'vocab' to pass it to (--model {HF} takes n_stages, microbatch_size, "
     "dtype, arch, layers, hidden, heads, kv_heads, seq_len, vocab_size, ffn_hidden)"),
    (["--model", LLAMA, "--model-arg", "dim=128"], "--model-arg dim=128: no parameter 'dim' to pass it to"),
    (["--model", LLAMA, "--model-arg", "n_kv_heads=2"], "--model-arg n_kv_heads=2: no parameter 'n_kv_heads' to pass"),
    (["--ffn", "64"], "--ffn: the built-in GPT has full attention and a 4 x hidden MLP"),
    (["--units", "--stages", "3"], "--stages does not apply to --units"),
    (["--all-units"], "--all-units goes with --units"),
    (["--model-arg", "layers=2"], "--model-arg goes with --model"),
])
def test_arguments_nobody_takes_are_one_line_errors(tmp_path, capsys, argv, needle):
    out = tmp_path / "x.json"
    assert cli.main(["profile", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle.format(HF=HF) in err
    assert not out.exists()


def test_gpt_flags_reach_the_model_function(tmp_path):
    out = tmp_path / "llama.json"
    assert cli.main(["profile", "--model", LLAMA, "--layers", "2", "--hidden", "32", "--heads", "2", "--seq", "8",
                     "--vocab", "40", "--stages", "2", "--mbs", "1", *QUICK, "-o", str(out)]) == 0
    assert Profile.load(out).model.startswith("llama(layers=2, hidden=32, ffn=88, heads=2, seq=8, vocab=40)")


def test_a_function_that_ignores_mbs_is_told(tmp_path, capsys):
    factory = tmp_path / "mine.py"
    factory.write_text("import torch\n"
                       "def stages(n_stages=2):\n"
                       "    return {'stages': [torch.nn.Linear(4, 4) for _ in range(n_stages)],\n"
                       "            'sample': torch.randn(2, 4)}\n")
    assert cli.main(["profile", "--model", f"{factory}:stages", *QUICK, "-o", str(tmp_path / "ok.json")]) == 0
    assert cli.main(["profile", "--model", f"{factory}:stages", "--mbs", "8", "-o", str(tmp_path / "x.json")]) == 2
    assert "--mbs 8: no parameter 'microbatch_size' to pass it to" in capsys.readouterr().err


def test_cpu_profiles_default_to_one_thread(tmp_path):
    torch.set_num_threads(2)
    out = tmp_path / "p.json"
    assert cli.main(["profile", "--layers", "1", "--hidden", "16", "--heads", "2", "--seq", "8", "--vocab", "32",
                     "--stages", "1", *QUICK, "-o", str(out)]) == 0
    assert "cpu threads: 1" in Profile.load(out).notes


def test_oversubscription_is_said():
    import os

    cores = len(os.sched_getaffinity(0))
    warning = cpu_contention(threads=cores, processes=2)
    assert warning.startswith("warning: 2 process(es)") and f"{cores} are here: oversubscribed" in warning
    assert f"--threads {max(1, cores // 2)}" in warning


def test_noise_warning_names_the_repeats_it_had():
    from schedc.runtime.profiling.stages import StageMeasurement
    from schedc.runtime.profiling.timing import Stat

    noisy = StageMeasurement(index=1, forward=Stat([1.0, 3.0] * 10), backward_input=Stat([1.0] * 20),
                             backward_weight=Stat([0.5] * 20), backward_full=Stat([1.0]), activation_bytes=10,
                             weight_grad_bytes=5, static_bytes=0, param_bytes=0, output_bytes=4, n_params=1)
    message = timing_warning([noisy])
    assert "more repeats than the 20 timed here (e.g. --repeats 40)" in message


def test_profile_units_checks_its_names():
    from schedc.runtime.profiling.assemble import profile_units

    with pytest.raises(SchedcError, match="2 unit modules but 1 name lists"):
        profile_units([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)], [["a"]], torch.randn(1, 2))


def test_concurrent_units_pool_processes():
    p = profile_gpt(CFG, 1, 2, warmup=0, repeats=1, units=True, concurrent=2)
    assert [u.modules for u in p.stages][1:3] == [["blocks.0"], ["blocks.1"]]
    assert any("2 concurrent processes" in n for n in p.notes)
    single = profile_gpt(CFG, 1, 2, warmup=0, repeats=1, units=True)
    assert [u.activation_bytes for u in p.stages] == [u.activation_bytes for u in single.stages]


def test_layers_with_another_attention_kind_are_measured_apart():
    pytest.importorskip("transformers")
    import hf_causal_lm

    from schedc.runtime.profiling.units import unit_signature
    from schedc.runtime.user_model import split_by_fqns

    model = hf_causal_lm.PipelineCausalLM(hf_causal_lm.hf_model(
        "qwen2", layers=4, hidden=16, heads=2, kv_heads=1, vocab_size=32, seq_len=8,
        use_sliding_window=True, sliding_window=3, max_window_layers=2))
    units, shared = units_from_split(hf_causal_lm.fqns_per_stage(4, 2))
    signatures = [unit_signature(m) for m in split_by_fqns(model, [u + shared for u in units])]
    # layers 0, 1 full attention, 2, 3 sliding: two kinds, each measured once
    assert [signatures.index(s) for s in signatures] == [0, 1, 1, 3, 3, 5]


def test_units_of_a_one_layer_model_need_no_stage_count(tmp_path):
    # issue 39 item 9: units do not take the stage count's default (2 stages of 1 layer failed)
    out = tmp_path / "u.json"
    assert cli.main(["profile", "--units", "--layers", "1", "--repeats", "1", "--warmup", "0", "-o", str(out)]) == 0
    assert [u.modules for u in Profile.load(out).stages] == [["embed"], ["blocks.0"], ["norm", "head"]]
