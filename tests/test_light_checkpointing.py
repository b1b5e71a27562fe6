"""Light activation checkpointing (save every matmul's and attention's output, recompute the rest):
schedc's runtime runs it per stage and per block on real gloo ranks with the unsplit model's loss
and gradients, refuses it where torch's split backward would go twice through it, and on real
Hugging Face layers it holds less than no checkpointing and more than selective, with the same
gradients and, in an MoE layer, the same routing."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from _dist import ROOT, free_port, run_ranks, worker_env  # noqa: E402
from test_runtime import CFG, M  # noqa: E402  (the gradient tests' tiny float64 GPT)

from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.core.costs import AC_MODES  # noqa: E402
from schedc.errors import ParameterError  # noqa: E402
from schedc.io.csvio import write_csv  # noqa: E402

# (CSV, activation_checkpoint, layers_per_stage): stages checkpointed per op run B, except stage 0,
# whose I runs nothing under torch's split backward
RUNS = {
    "all-light": ("1f1b", "light", None),
    "per-stage": ("1f1b", ["none", "light"], None),
    "per-block": ("1f1b", [["light", "full"], ["none", "light"]], [2, 2]),
    "per-block-uneven": ("1f1b", [["light"], ["light", "none", "selective"]], [1, 3]),
    "stage-0-split": ("zb-h1", ["light", "none"], None),
}
REFUSED = ("zb-h1", ["none", "light"])  # stage 1 runs I and W apart


# ------------------------------------------------------------------------------- rank side
def rank_runs_light(rank: int, world: int, csvs: dict, runs: dict, refused: list):
    """Per case: each gradient's largest relative error against the unsplit model and the loss in
    a first step, each block's forwards in a second (the first also runs torch's metadata
    inference, whose backward on a non-first stage recomputes checkpointed blocks once more).
    Then the refused case, on one rank at a time: the other waits at a barrier, which any
    collective load_pipeline started before refusing would mismatch."""
    import torch.distributed as dist
    from _dist import capture

    from schedc.runtime import GPT, GPTConfig, lm_loss, load_pipeline, make_batch

    cfg = GPTConfig(**CFG)
    x, y = make_batch(cfg, 2 * M, seed=3)
    ref = GPT(cfg, seed=1)
    ref_loss = lm_loss(ref(x), y)
    ref_loss.backward()
    out = {"ref_loss": ref_loss.item(), "runs": {}, "refused": {}}
    for name, (csv, ac, per_stage) in runs.items():
        dist.barrier()

        def run(csv=csv, ac=ac, per_stage=per_stage):
            model = GPT(cfg, seed=1)
            pipe = load_pipeline(csvs[csv], model, lm_loss, layers_per_stage=per_stage, activation_checkpoint=ac)
            counts: dict = {}
            for s, module in pipe.modules.items():
                for k, block in enumerate(module.blocks):  # ln1 runs again when the block is recomputed
                    block.ln1.register_forward_hook(
                        lambda *a, key=(s, k): counts.__setitem__(key, counts.get(key, 0) + 1))
            losses: list = []
            pipe.step(x, target=y, losses=losses)
            mine = {id(p) for p in pipe.parameters()}
            err = max((p.grad - q.grad).abs().max().item() / (q.grad.abs().max().item() + 1e-30)
                      for p, q in zip(model.parameters(), ref.parameters()) if id(p) in mine)
            counts.clear()
            pipe.step(x, target=y)
            return {"stages": sorted(pipe.modules), "forwards": [counts[k] for k in sorted(counts)], "rel_err": err,
                    "loss": (sum(losses) / len(losses)).item() if losses else None}
        out["runs"][name] = capture(run)
    def attempt():
        load_pipeline(csvs[refused[0]], GPT(cfg, seed=1), lm_loss, activation_checkpoint=refused[1])
        return "built"

    for alone in range(world):
        dist.barrier()
        if rank == alone:
            out["refused"] = capture(attempt)
    dist.barrier()
    return out


# ------------------------------------------------------------------------------- parent side
@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("light")
    csvs = {}
    for name in ("1f1b", "zb-h1"):
        csvs[name] = str(tmp / f"{name}.csv")
        write_csv(make_baseline(name, 2, M), csvs[name])
    results = run_ranks(rank_runs_light, 2, timeout=150, csvs=csvs, runs=RUNS, refused=list(REFUSED))
    for rank, got in enumerate(results):
        assert "ok" in got, f"rank {rank}: {got.get('error')}\n{got.get('traceback', '')}"
    return [got["ok"] for got in results]


def _blocks(ac, stage: int, n: int) -> list[str]:
    entry = ac if isinstance(ac, str) else ac[stage]
    return [entry] * n if isinstance(entry, str) else list(entry)


@pytest.mark.parametrize("case", sorted(RUNS))
def test_light_stages_train_like_the_unsplit_model_and_recompute_once(ranks, case):
    csv, ac, _ = RUNS[case]
    schedule = make_baseline(csv, 2, M)
    split = {a.stage for _, a in schedule.all_actions() if a.kind in ("I", "W")}
    for rank, got in enumerate(ranks):
        run = got["runs"][case]
        assert "ok" in run, f"rank {rank}: {run.get('error')}\n{run.get('traceback', '')}"
        run = run["ok"]
        (stage,) = run["stages"]
        modes = _blocks(ac, stage, len(run["forwards"]))
        assert "light" not in modes or stage == 0 or stage not in split  # the premise: light stages run B
        assert run["rel_err"] < 1e-10, (rank, run)
        # a checkpointed block runs its forward once more per microbatch, in the backward, once
        assert run["forwards"] == [2 * M if m != "none" else M for m in modes], (rank, modes, run)
    (loss,) = [g["runs"][case]["ok"]["loss"] for g in ranks if g["runs"][case]["ok"]["loss"] is not None]
    assert loss == pytest.approx(ranks[0]["ref_loss"], rel=0, abs=1e-12)


def test_light_on_a_stage_run_as_i_and_w_is_one_line_on_each_rank_before_any_collective(ranks):
    # each rank refused alone while the other waited at a barrier: no collective was started
    for rank, got in enumerate(ranks):
        refused = got["refused"]
        assert refused.get("type") == "SchedcError", (rank, refused)
        message = refused["error"]
        assert "\n" not in message
        assert message.endswith(".csv: stage 1 runs I and W apart, and torch's split backward cannot go twice "
                                "through a region checkpointed per op ('light'); use 'full' or 'none' there, or a "
                                "schedule that runs that stage's backward as B"), message


def test_modes_are_listed_in_the_one_order_fastest_first():
    from schedc.runtime.checkpointing import check_mode, stage_modes

    assert AC_MODES == ("none", "light", "selective", "full")
    with pytest.raises(ParameterError, match=r"activation_checkpoint: 'Light' is not one of none, light, selective, "
                                             r"full; give one of them"):
        stage_modes("Light", 2)
    with pytest.raises(ParameterError, match=r"\[1\]: int 3 is neither a mode \(none, light, selective, full\) nor"):
        stage_modes(["light", 3], 2)
    assert check_mode("light") == "light"


def test_a_plan_that_checkpoints_light_launches_as_planned(tmp_path):
    import json

    from schedc.errors import SchedcError
    from schedc.runtime.checkpointing import plan_settings

    plan = {"partition": [["embed", "layers.0", "layers.1"], ["layers.2", "layers.3", "norm", "head"]],
            "assumes": {"activation_checkpoint": [["light", "full"], "light"]}}
    assert plan_settings(plan) == {"activation_checkpoint": [["light", "full"], "light"], "layers_per_stage": [2, 2]}
    plan["assumes"]["activation_checkpoint"] = [["light", "lite"], "light"]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(SchedcError, match=r"plan.json: assumes.activation_checkpoint\[0\]\[1\]: 'lite' is not one of "
                                          r"none, light, selective, full; give the plan.json"):
        plan_settings(tmp_path / "plan.json")


# ------------------------------------------------------------------ real Hugging Face layers
def _hf_layer(kind: str, mode: str, wrap=None):
    """(layer checkpointed as `mode`, its call on a fixed input, the input): tiny, sdpa, float32,
    CPU; `wrap`: a function that returns the module to call instead of the layer."""
    transformers = pytest.importorskip("transformers")
    from schedc.runtime.checkpointing import checkpoint_block

    tiny = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, vocab_size=32)
    config, layer_cls, rotary_cls = {
        "llama": (transformers.LlamaConfig(intermediate_size=128, **tiny), "llama.modeling_llama.LlamaDecoderLayer",
                  "llama.modeling_llama.LlamaRotaryEmbedding"),
        "qwen2": (transformers.Qwen2Config(intermediate_size=128, **tiny), "qwen2.modeling_qwen2.Qwen2DecoderLayer",
                  "qwen2.modeling_qwen2.Qwen2RotaryEmbedding"),
        # the router normalizes its top-k in place, as Mixtral's does
        "qwen2_moe": (transformers.Qwen2MoeConfig(intermediate_size=64, moe_intermediate_size=16,
                                                  shared_expert_intermediate_size=32, num_experts=4,
                                                  num_experts_per_tok=2, norm_topk_prob=True, **tiny),
                      "qwen2_moe.modeling_qwen2_moe.Qwen2MoeDecoderLayer",
                      "qwen2_moe.modeling_qwen2_moe.Qwen2MoeRotaryEmbedding"),
        "mixtral": (transformers.MixtralConfig(intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
                                               **tiny),
                    "mixtral.modeling_mixtral.MixtralDecoderLayer", "mixtral.modeling_mixtral.MixtralRotaryEmbedding"),
    }[kind.removesuffix("-grouped_mm")]
    import importlib

    def find(path):
        module, name = path.rsplit(".", 1)
        return getattr(importlib.import_module(f"transformers.models.{module}"), name)

    config._attn_implementation = "sdpa"
    if kind.endswith("-grouped_mm"):  # the experts as one torch._grouped_mm (transformers' default in a model)
        config._experts_implementation = "grouped_mm"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = find(layer_cls)(config, 0)
        with torch.no_grad():
            for p in layer.parameters():
                p.normal_(0.0, 0.1)  # transformers leaves some weights empty until a model initializes them
        x = torch.randn(2, 32, 32, requires_grad=True)
    positions = torch.arange(x.shape[1])[None]
    embeddings = find(rotary_cls)(config)(x, positions)
    checkpoint_block(layer, mode)
    run = wrap(layer) if wrap else layer

    def call():
        out = run(x, attention_mask=None, position_embeddings=embeddings, position_ids=positions)
        return out[0] if isinstance(out, tuple) else out

    return layer, call, x


def _titan_selective(kind: str):
    """The layer under torchtitan 0.3.0's own SelectiveAC (what torchtitan and NeMo launch)."""
    from torchtitan.distributed.activation_checkpoint import SelectiveAC

    return _hf_layer(kind, "none", wrap=lambda layer: SelectiveAC(SelectiveAC.Config())._wrap_block(layer))


def _held_after_f_and_grads(kind: str, mode: str):
    """Bytes allocated by F that are still held after it (its output excluded), with the
    allocator's own trace (schedc.runtime.allocator: SAC's cached outputs are not saved tensors,
    so saved-tensor hooks would miss them); then the gradients of one backward. Mode "titan": the
    layer under torchtitan's SelectiveAC."""
    from schedc.runtime.allocator import AllocatorTrace, nbytes_of

    layer, call, x = _titan_selective(kind) if mode == "titan" else _hf_layer(kind, mode)
    # the trace counts every free while F runs: a garbage collection then would free an earlier
    # layer's cycles and count them against this one
    gc.collect()
    gc.disable()
    try:
        with AllocatorTrace("cpu") as trace:
            with trace.action("F"):
                out = call()
    finally:
        gc.enable()
    held = trace.levels["F"].end - nbytes_of([out])
    out.square().sum().backward()
    return held, [p.grad for p in layer.parameters()] + [x.grad]


def _same(grads, base) -> bool:
    return len(grads) == len(base) and all(torch.allclose(g, b, rtol=1e-6, atol=1e-8) for g, b in zip(grads, base))


@pytest.mark.parametrize("kind", ["llama", "qwen2", "mixtral", "mixtral-grouped_mm", "qwen2_moe"])
def test_light_holds_between_selective_and_none_after_f_with_the_same_gradients(kind):
    held, grads = {}, {}
    for mode in ("none", "light", "selective"):
        held[mode], grads[mode] = _held_after_f_and_grads(kind, mode)
    assert held["selective"] < held["light"] < held["none"], held
    assert _same(grads["light"], grads["none"]) and _same(grads["selective"], grads["none"])


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_selective_keeps_what_torchtitans_selective_keeps(kind):
    # the counts (schedc.model_costs) describe torchtitan's SelectiveAC, which NeMo follows; schedc's
    # runtime applies "selective" itself and must keep the same tensors: Qwen2's biased q, k, v
    # (addmm) are saved and take no turn in the every-other-matmul alternation
    pytest.importorskip("torchtitan")
    ours, grads = _held_after_f_and_grads(kind, "selective")
    theirs, titan_grads = _held_after_f_and_grads(kind, "titan")
    assert ours == theirs
    assert _same(grads, titan_grads)


@pytest.mark.parametrize("kind", ["mixtral", "mixtral-grouped_mm", "qwen2_moe"])
def test_light_moe_layer_routes_the_recompute_as_f_with_the_same_gradients(kind):
    routes, grads = {}, {}
    for mode in ("none", "light"):
        layer, call, x = _hf_layer(kind, mode)
        seen: list = []  # the router's top-k indices, at F and at the recompute
        layer.mlp.gate.register_forward_hook(lambda m, a, out: seen.append(out[2].clone()))
        call().square().sum().backward()
        routes[mode], grads[mode] = seen, [p.grad for p in layer.parameters()] + [x.grad]
    assert len(routes["none"]) == 1 and len(routes["light"]) == 2
    assert all(torch.equal(r, routes["none"][0]) for r in routes["light"])
    assert _same(grads["light"], grads["none"])


MATMULS = ("mm", "addmm", "bmm", "linear", "_grouped_mm", "_scaled_dot_product_flash_attention_for_cpu")


@pytest.mark.parametrize("kind", ["qwen2", "mixtral-grouped_mm"])
def test_light_recomputes_the_norms_but_no_matmul_or_attention(kind):
    # the ops dispatched over F and the backward, against no checkpointing: SAC serves a saved op's
    # output from its cache in the recompute, so only what light recomputes is dispatched again
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: dict = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            self.ops[name] = self.ops.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    ops = {}
    for mode in ("none", "light", "selective"):
        _, call, _ = _hf_layer(kind, mode)
        with Count() as count:
            call().square().sum().backward()
        ops[mode] = count.ops
    again = {mode: {op: n - ops["none"].get(op, 0) for op, n in ops[mode].items() if n > ops["none"].get(op, 0)}
             for mode in ("light", "selective")}
    assert again["light"].get("rsqrt") == 2, again  # both RMSNorms, once more each
    assert not set(again["light"]) & set(MATMULS), again
    assert set(again["selective"]) & set(MATMULS), again  # the count sees a recomputed matmul


# ------------------------------------------------------------------ examples/train.py --ac


def _train(args, cwd, **kw):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=180, env=worker_env(),
                          cwd=str(cwd), **kw)


def test_train_refuses_a_bad_or_split_light_ac_in_one_line_before_any_process_group(tmp_path):
    write_csv(make_baseline("zb-h1", 2, M), tmp_path / "zbh1.csv")
    script = str(ROOT / "examples" / "train.py")
    out = _train([script, "--schedule", "zbh1.csv", "--ac", "Light"], tmp_path)
    assert out.returncode == 2 and out.stderr == ("error: --ac: 'Light' is not one of none, light, selective, full; "
                                                  "give one, or one per stage separated by commas\n"), out.stderr
    out = _train([script, "--schedule", "zbh1.csv", "--ac", "none,light"], tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("error: --ac none,light with zbh1.csv: stage 1 runs I and W apart") \
        and "('light')" in out.stderr, out.stderr


def test_train_runs_light_checkpointing(tmp_path):
    write_csv(make_baseline("1f1b", 2, M), tmp_path / "1f1b.csv")
    out = _train(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                  "--master-port", str(free_port()), str(ROOT / "examples" / "train.py"), "--schedule", "1f1b.csv",
                  "--ac", "light", "--steps", "2", "--warmup", "0", "--hidden", "32", "--heads", "2",
                  "--seq-len", "16", "--vocab", "64", "--layers", "4", "--backend", "gloo", "--timeout", "60"],
                 tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "activation checkpointing light" in out.stdout
    assert sum(line.startswith("step ") and " loss " in line for line in out.stdout.splitlines()) == 2, out.stdout
