"""`schedc profile --model MODULE:FUNCTION`: a user's model, split by module names, profiled."""

import collections
import copy
import sys

import pytest

torch = pytest.importorskip("torch")

from _dist import ROOT  # noqa: E402

from schedc import cli  # noqa: E402
from schedc.core.costs import Profile  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.runtime.user_model import (  # noqa: E402
    UserModel,
    build_user_model,
    split_by_fqns,
    unit_modules,
    units_from_split,  # noqa: E402
)

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
    (tmp_path / "model.txt").write_text("def stages(): pass\n")  # a file path no importer reads
    with pytest.raises(SchedcError, match="model.txt is not a Python file: give a .py file"):
        build_user_model(f"{tmp_path / 'model.txt'}:stages", None, {})
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


@pytest.fixture
def copied(monkeypatch):
    """Counter: how many times each tensor (by id) of the source model was deep-copied."""
    counts = collections.Counter()
    for cls in (torch.Tensor, torch.nn.Parameter):
        original = cls.__deepcopy__

        def counting(self, memo, _original=original):
            if id(self) not in memo:  # a tied tensor seen again is not copied again
                counts[id(self)] += 1
            return _original(self, memo)

        monkeypatch.setattr(cls, "__deepcopy__", counting)
    return counts


class _Toy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.keep = torch.nn.Linear(4, 4)
        self.rest = torch.nn.Linear(256, 256)  # the big part no piece below keeps
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))
        self.register_buffer("scale", torch.ones(4))


def test_a_piece_deep_copies_only_what_it_keeps(copied):
    model = _Toy()
    (piece,) = split_by_fqns(model, [["keep", "blocks.1"]])
    kept = [model.keep.weight, model.keep.bias, model.blocks[1].weight, model.blocks[1].bias, model.scale]
    assert {id(t) for t in kept} == set(copied) and set(copied.values()) == {1}
    assert piece.rest is None and list(piece.blocks.keys()) == ["1"]
    assert model.rest is not None and len(model.blocks) == 3  # the source is left whole


def test_a_kept_part_that_points_at_its_container_gets_the_piece_not_a_copy_of_the_model(copied):
    model = _Toy()
    model.keep.owner = [model]  # a plain reference back, as some models keep one
    (piece,) = split_by_fqns(model, [["keep"]])
    assert piece.keep.owner[0] is piece and model.keep.owner[0] is model
    assert id(model.rest.weight) not in copied


def test_per_unit_split_copies_each_layer_once_in_total(copied):
    made = llama.stages(n_stages=2, layers=6, hidden=16, heads=2, seq_len=8, vocab_size=32)
    model = made["model"]
    modules, units, _ = unit_modules(UserModel([], made["sample"], model=model, split=made["split"]), "llama")
    assert len(modules) == 8 and units[1] == ["layers.0"]
    assert {copied[id(p)] for p in model.parameters()} == {1}  # 8 units, one copy of the weights
    # the model's own buffers (RoPE tables) are every unit's: copied once per unit
    assert [copied[id(b)] for b in (model.rope_cos, model.rope_sin)] == [8, 8]


class _Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.mid, self.head = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        self.head.weight = self.emb.weight
        self.note = {"kind": "toy"}

    def forward(self, x):
        for part in (self.emb, self.mid, self.head):
            x = part(x) if part is not None else x
        return x


def test_tied_weights_stay_tied_in_a_piece_and_hooks_and_attributes_are_kept():
    model = _Tied()
    calls = []
    model.head.register_forward_hook(lambda m, i, o: calls.append("head"))
    model.register_forward_pre_hook(lambda m, i: calls.append("root"))
    both, mid = split_by_fqns(model, [["emb", "head"], ["mid"]])
    assert both.head.weight is both.emb.weight and both.emb.weight is not model.emb.weight
    assert both.mid is None and mid.emb is None and mid.head is None and mid.mid.weight is not model.mid.weight
    x = torch.randn(2, 4)
    torch.testing.assert_close(both(x), model.head(model.emb(x)), rtol=0, atol=0)
    assert calls == ["root", "head", "head"]  # the piece's two hooks, then the model's head hook
    assert both.note == {"kind": "toy"} and both.note is not model.note
    assert model.mid is not None and model.head.weight is model.emb.weight  # the source is left as it was


def _whole_copy_split(model, split):
    """The split this module did before: a whole deep copy per piece, then pruned (the reference)."""
    def prune(module, names, prefix=""):
        for child_name, child in list(module.named_children()):
            full = prefix + child_name
            if full in names:
                continue
            if any(n.startswith(full + ".") for n in names):
                module._modules[child_name] = prune(child, names, full + ".")
            elif isinstance(module, (torch.nn.ModuleDict, torch.nn.ModuleList)):
                del module._modules[child_name]
            elif isinstance(child, (torch.nn.ModuleDict, torch.nn.ModuleList)):
                module._modules[child_name] = torch.nn.ModuleDict()
            else:
                setattr(module, child_name, None)
        return torch.nn.ModuleDict(module._modules) if isinstance(module, torch.nn.ModuleList) else module

    return [prune(copy.deepcopy(model), set(names)) for names in split]


def _layout(piece):
    """Every module's name, class, attribute names and child slots (None kept), and every tensor."""
    modules = [(name, type(m).__name__, sorted(k for k in vars(m) if k != "_modules"), list(m._modules),
                [c is None for c in m._modules.values()]) for name, m in piece.named_modules()]
    return modules, list(piece.state_dict()), dict(piece.named_parameters()), dict(piece.named_buffers())


def _library_gpt():
    from schedc.runtime.models import GPT, GPTConfig

    model = GPT(GPTConfig(layers=3, hidden=16, heads=2, seq_len=8, vocab_size=32))
    return model, [["embed", "blocks.0"], ["blocks.1", "blocks.2", "norm", "head"]], None  # forward iterates a list


def _example_llama():
    made = llama.stages(n_stages=3, layers=3, hidden=16, heads=2, seq_len=8, vocab_size=32)
    return made["model"], made["split"], made["sample"]


def _hugging_face():
    pytest.importorskip("transformers")
    import hf_causal_lm

    made = hf_causal_lm.stages(n_stages=2, layers=3, hidden=16, heads=2, kv_heads=1, seq_len=8, vocab_size=32)
    return made["model"], made["split"], made["sample"]


def _torchtitan():
    pytest.importorskip("torchtitan")
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import llama3_configs

    cfg = llama3_configs["debugmodel"](attn_backend="flex")
    cfg.layers = cfg.layers[:3]
    for layer in cfg.layers:  # flex attention needs a GPU; SDPA keeps the same parameters
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = cfg.build()
        model.init_states()
    split = [["tok_embeddings", "layers.0"], ["layers.1", "layers.2", "norm", "lm_head"]]
    return model, split, torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("build", [_library_gpt, _example_llama, _hugging_face, _torchtitan])
def test_pieces_equal_those_of_the_whole_copy_split(build):
    model, split, sample = build()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    units, shared = units_from_split(split)
    for names in (split, [u + shared for u in units]):  # per stage and per unit
        new, old = split_by_fqns(model, names), _whole_copy_split(model, names)
        for a, b in zip(new, old):
            (mods_a, keys_a, params_a, bufs_a), (mods_b, keys_b, params_b, bufs_b) = _layout(a), _layout(b)
            assert mods_a == mods_b and keys_a == keys_b
            assert list(params_a) == list(params_b) and list(bufs_a) == list(bufs_b)
            for x, y in [*zip(params_a.values(), params_b.values()), *zip(bufs_a.values(), bufs_b.values())]:
                assert x.dtype == y.dtype and x.requires_grad == y.requires_grad
                torch.testing.assert_close(x, y, rtol=0, atol=0)
        if sample is not None:
            h_new = h_old = sample
            with torch.no_grad():
                for a, b in zip(new, old):
                    h_new, h_old = a(h_new), b(h_old)
                torch.testing.assert_close(h_new, h_old, rtol=0, atol=0)
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)

