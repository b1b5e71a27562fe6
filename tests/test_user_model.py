"""`schedc profile --model MODULE:FUNCTION`: a user's model, split by module names, profiled."""

import sys

import pytest

torch = pytest.importorskip("torch")

from _dist import ROOT  # noqa: E402
from schedc import cli  # noqa: E402
from schedc.core.costs import Profile  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.runtime.user_model import build_user_model, split_by_fqns  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))
import llama  # noqa: E402

LLAMA = f"{ROOT / 'examples' / 'llama.py'}:stages"
TINY = ["--model-arg", "layers=3", "--model-arg", "hidden=16", "--model-arg", "heads=2", "--model-arg", "seq_len=8",
        "--model-arg", "vocab_size=32"]


def test_split_stages_compose_to_the_whole_model():
    cfg = llama.LlamaConfig(vocab_size=32, dim=16, n_layers=3, n_heads=2, seq_len=8, dtype="float64")
    model = llama.Llama(cfg)
    stages = split_by_fqns(model, llama.fqns_per_stage(cfg, 3))
    x = torch.randint(0, 32, (2, 8))
    h = x
    for stage in stages:
        h = stage(h)
    torch.testing.assert_close(h, model(x), rtol=0, atol=0)
    names = [n for s in stages for n, _ in s.named_parameters()]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())  # each once, whole-model names


def test_profile_model_writes_a_valid_profile(tmp_path, capsys):
    out = tmp_path / "llama.json"
    assert cli.main(["profile", "--model", LLAMA, "--stages", "3", "--mbs", "2", *TINY,
                     "--warmup", "0", "--repeats", "1", "-o", str(out)]) == 0
    profile = Profile.load(out)
    assert profile.n_stages == 3 and profile.microbatch_size == 2
    assert profile.model.startswith("llama(layers=3") and profile.model.endswith("/3 stages")
    assert all(s.forward > 0 and s.backward_input > 0 and s.activation_bytes > 0 for s in profile.stages)
    assert profile.stages[0].static_bytes > profile.stages[1].static_bytes  # the embedding lives on stage 0
    assert "wrote" in capsys.readouterr().out


def test_plain_stage_list_and_separate_sample(tmp_path):
    factory = tmp_path / "mine.py"
    factory.write_text(
        "import torch\n"
        "def stages(n_stages=2):\n"
        "    return [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()) for _ in range(n_stages)]\n"
        "def sample():\n"
        "    return torch.randn(4, 8)\n"
    )
    user = build_user_model(f"{factory}:stages", f"{factory}:sample", {"n_stages": 3, "dtype": "float32"})
    assert len(user.stages) == 3 and user.sample.shape == (4, 8)
    assert user.loss_fn(torch.ones(2), None).item() == 2.0  # no loss given: the output is summed


def test_bad_factories_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SchedcError, match="expected MODULE:FUNCTION"):
        build_user_model("examples/llama.py", None, {})
    with pytest.raises(SchedcError, match="has no function nope"):
        build_user_model(f"{ROOT / 'examples' / 'llama.py'}:nope", None, {})
    with pytest.raises(SchedcError, match="does not have"):
        split_by_fqns(torch.nn.Linear(2, 2), [["weightless"]])
    assert cli.main(["profile", "--model", LLAMA, "--model-arg", "layers=1", "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "raised ValueError: n_stages must be between 1 and the 1 layers" in err
    assert not (tmp_path / "x.json").exists()


def test_llama_grouped_query_attention_is_full_attention_with_shared_key_value_heads():
    # kv_heads < heads (Llama 3's GQA): each key/value head serves heads / kv_heads query heads,
    # so the model equals a full-attention one whose key/value rows repeat per group
    gqa = llama.stages(n_stages=1, layers=1, hidden=32, heads=4, kv_heads=2, seq_len=8, vocab_size=40, dtype="float64")
    full = llama.stages(n_stages=1, layers=1, hidden=32, heads=4, seq_len=8, vocab_size=40, dtype="float64")
    g, f = gqa["model"], full["model"]
    assert g.layers["0"].attention.wk.weight.shape == (16, 32) and "kv_heads=2" in gqa["name"]
    with torch.no_grad():
        f.load_state_dict({k: v for k, v in g.state_dict().items() if ".wk." not in k and ".wv." not in k},
                          strict=False)
        for name in ("wk", "wv"):
            w = getattr(g.layers["0"].attention, name).weight.view(2, 8, 32)
            getattr(f.layers["0"].attention, name).weight.copy_(w.repeat_interleave(2, dim=0).reshape(32, 32))
    assert torch.allclose(g(gqa["sample"]), f(gqa["sample"]), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="multiple of kv_heads 3"):
        llama.stages(heads=4, kv_heads=3)
