"""examples/hf_causal_lm.py: a Hugging Face causal LM from a config, split into stages, profiled."""

import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _dist import ROOT, run_ranks  # noqa: E402

from schedc import cli  # noqa: E402
from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.core.costs import Profile  # noqa: E402
from schedc.io.csvio import write_csv  # noqa: E402
from schedc.runtime.user_model import split_by_fqns  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))
import hf_causal_lm  # noqa: E402

HF = f"{ROOT / 'examples' / 'hf_causal_lm.py'}:stages"
TINY = dict(layers=3, hidden=16, heads=2, kv_heads=1, vocab_size=32, seq_len=8, dtype="float64")


@pytest.mark.parametrize("arch, overrides", [
    ("llama", {}),
    # window 3 < sequence 8 on layers 1 and 2: each stage must build the sliding mask itself
    ("qwen2", dict(use_sliding_window=True, sliding_window=3, max_window_layers=1)),
])
def test_split_stages_compose_to_the_hf_model(arch, overrides):
    hf = hf_causal_lm.hf_model(arch, **TINY, **overrides)
    if overrides:
        assert "sliding_attention" in hf.config.layer_types
    stages = split_by_fqns(hf_causal_lm.PipelineCausalLM(hf), hf_causal_lm.fqns_per_stage(3, 3))
    x = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(1))
    target = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(2))
    h = x
    for stage in stages:
        h = stage(h)
        assert not h._is_view()  # torch's split backward detaches stage outputs in place
    expected = hf(input_ids=x).logits
    torch.testing.assert_close(h, expected, rtol=1e-12, atol=1e-12)

    hf_causal_lm.lm_loss(h, target).backward()
    hf_causal_lm.lm_loss(expected, target).backward()
    whole = dict(hf.named_parameters())
    split = {n: p for s in stages for n, p in s.named_parameters()}
    assert sorted(split) == sorted(whole)  # each parameter on exactly one stage, under HF's own name
    for name, p in split.items():
        torch.testing.assert_close(p.grad, whole[name].grad, rtol=1e-10, atol=1e-12, msg=name)


def zb_two_ranks(rank, world, csv):
    """One stage of the HF model per rank under a zero-bubble CSV (split I and W, hidden states sent
    over gloo); the max gradient error of this rank's parameters against the unsplit model."""
    from torch.distributed.pipelining import PipelineStage

    from schedc.runtime.pipeline import build_schedule

    hf = hf_causal_lm.hf_model("llama", **{**TINY, "layers": 2})
    module = split_by_fqns(hf_causal_lm.PipelineCausalLM(hf), hf_causal_lm.fqns_per_stage(2, 2))[rank]
    runtime = build_schedule(csv, PipelineStage(module, rank, world, torch.device("cpu")), loss_fn=hf_causal_lm.lm_loss)
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randint(0, 32, (8, 8), generator=gen), torch.randint(0, 32, (8, 8), generator=gen)
    runtime.step(*((x,) if rank == 0 else ()), target=y if rank == world - 1 else None)
    losses = [hf_causal_lm.lm_loss(hf(input_ids=xs).logits, ys) for xs, ys in zip(x.chunk(4), y.chunk(4))]
    (sum(losses) / 4).backward()  # the runtime scales gradients by the microbatch count
    whole = dict(hf.named_parameters())
    return {"params": len(list(module.parameters())),
            "error": max((p.grad - whole[n].grad).abs().max().item() for n, p in module.named_parameters())}


def test_zero_bubble_run_on_two_ranks_matches_the_hf_model(tmp_path):
    path = tmp_path / "zb.csv"
    write_csv(make_baseline("zb-h1", 2, 4), path)
    results = run_ranks(zb_two_ranks, 2, timeout=120, csv=str(path))
    assert all("ok" in r for r in results), results
    assert all(r["ok"]["params"] > 0 and r["ok"]["error"] < 1e-12 for r in results), results


def test_split_follows_nemo_hf_layout():
    assert hf_causal_lm.fqns_per_stage(5, 2) == [
        ["model.embed_tokens", "model.layers.0", "model.layers.1", "model.layers.2", "model.rotary_emb"],
        ["model.layers.3", "model.layers.4", "model.rotary_emb", "model.norm", "lm_head"],
    ]
    with pytest.raises(ValueError, match="between 1 and the 3 layers"):
        hf_causal_lm.fqns_per_stage(3, 4)


def test_profile_hf_model_writes_a_valid_profile(tmp_path, capsys):
    out = tmp_path / "hf.json"
    args = ["--model-arg", "layers=2", "--model-arg", "hidden=16", "--model-arg", "heads=2",
            "--model-arg", "kv_heads=1", "--model-arg", "seq_len=8", "--model-arg", "vocab_size=32"]
    assert cli.main(["profile", "--model", HF, "--stages", "2", "--mbs", "2", *args,
                     "--warmup", "0", "--repeats", "1", "-o", str(out)]) == 0
    profile = Profile.load(out)
    assert profile.n_stages == 2 and profile.microbatch_size == 2
    assert profile.model.startswith("hf-llama(layers=2") and profile.model.endswith("/2 stages")
    assert all(s.forward > 0 and s.backward_input > 0 and s.backward_weight > 0 and s.activation_bytes > 0
               for s in profile.stages)
    assert "wrote" in capsys.readouterr().out


def test_unknown_arch_is_a_one_line_error(tmp_path, capsys):
    assert cli.main(["profile", "--model", HF, "--model-arg", "arch=gpt9", "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "arch must be one of llama, qwen2, qwen3, got 'gpt9'" in err
    assert not (tmp_path / "x.json").exists()
