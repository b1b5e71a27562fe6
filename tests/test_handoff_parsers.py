"""The hand-off a plan prints, read back by the frameworks' own parsers.

torchtitan 0.3.0: the flags go through ``ConfigManager`` (tyro with its comma-separated ``list[str]``
rule) on top of a registered model config (``llama3_8b``), whose ``Trainer.Config`` refuses pipeline
parallelism with CUDA graphs; where the registry cannot be imported (it needs tensorboard, torchdata
and datasets besides triton) the same flags go through the same tyro rule into the real config
sections. NeMo AutoModel 0.7.0: the YAML goes through ``load_yaml_config`` and the recipe's
``parse_distributed_section``. Each parsed config must equal what the plan assumed.
"""

from __future__ import annotations

import dataclasses
import importlib

import pytest

pytest.importorskip("torch")
tyro = pytest.importorskip("tyro")
pytest.importorskip("torchtitan.config.manager")
pytest.importorskip("torchtitan.distributed.activation_checkpoint")

from schedc.errors import SchedcError  # noqa: E402
from schedc.frameworks import REGISTRY, Handoff, nemo_yaml  # noqa: E402

TT = [["tok_embeddings", "layers.0", "layers.1"], ["layers.2"], ["layers.3"], ["layers.4", "norm", "lm_head"]]
HF = [["model.embed_tokens", "model.layers.0", "model.layers.1"], ["model.layers.2"], ["model.layers.3"],
      ["model.layers.4", "model.norm", "lm_head"]]
# what NeMo is given: every stage keeps the rotary embedding (tests/test_nemo_yaml_builds_stages.py runs them)
HF_STAGES = [stage + ["model.rotary_emb"] for stage in HF]
ASSUMES = {"seq_len": 4096, "microbatch_size": 2, "activation_checkpoint": "none", "dp_shard": 1, "tp": 1,
           "activation_dtype": "bfloat16", "param_dtype": "bfloat16", "master_weights": True,
           # what torchtitan's FSDP2 holds unsharded at every shard degree, counted (unit_profile(fsdp=True))
           "fsdp": "counted", "fsdp_unsharded_bytes_per_param": 8}


def handoff(partition=TT, **assumes) -> Handoff:
    return Handoff(partition=partition, placement="v", n_ranks=2, n_microbatches=16, csv="plan.csv",
                   assumes={**ASSUMES, **assumes})


def _registry_importable() -> bool:
    try:
        importlib.import_module("torchtitan.models.llama3.config_registry")
        return True
    except Exception:  # noqa: BLE001 (a missing optional dependency of the trainer, e.g. tensorboard)
        return False


def _parse_torchtitan(args: list[str]):
    """The real ConfigManager on llama3_8b where it imports, else the same tyro rule on the real sections."""
    from torchtitan.config import ParallelismConfig, TrainingConfig
    from torchtitan.config.manager import ConfigManager, custom_registry
    from torchtitan.distributed.activation_checkpoint import ActivationCheckpointingConfig, SelectiveAC

    if _registry_importable():
        return ConfigManager().parse_args(["--module", "llama3", "--config", "llama3_8b", *args])
    ConfigManager()  # registers the comma-separated list[str] rule in custom_registry
    Job = dataclasses.make_dataclass("Job", [
        ("parallelism", ParallelismConfig, dataclasses.field(default_factory=ParallelismConfig)),
        ("training", TrainingConfig, dataclasses.field(default_factory=TrainingConfig)),
        ("activation_checkpoint", ActivationCheckpointingConfig,
         dataclasses.field(default_factory=SelectiveAC.Config))])
    return tyro.cli(Job, args=args, default=Job(), registry=custom_registry)


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_torchtitan_parses_the_flags_into_what_the_plan_assumed(mode):
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    s = REGISTRY["torchtitan"].settings(handoff(activation_checkpoint=mode, dp_shard=2, tp=1))
    cfg = _parse_torchtitan(s["command_line"])
    p, t = cfg.parallelism, cfg.training
    assert p.module_fqns_per_model_part == TT
    assert (p.pipeline_parallel_degree, p.pipeline_parallel_schedule, p.pipeline_parallel_schedule_csv) == \
        (2, "ZBVZeroBubble", "plan.csv")
    assert (p.pipeline_parallel_microbatch_size, t.local_batch_size) == (2, 32)  # 16 microbatches of 2
    assert (p.data_parallel_shard_degree, p.tensor_parallel_degree) == (2, 1)
    assert t.seq_len == 4096 and t.disable_cuda_graphs is True
    assert (t.dtype, t.mixed_precision_param) == ("float32", "bfloat16")  # fp32 master weights, bf16 compute
    expected = {"none": type(None), "selective": SelectiveAC.Config, "full": FullAC.Config}[mode]
    assert type(cfg.activation_checkpoint) is expected
    assert s["warnings"] == []


@pytest.mark.skipif(not _registry_importable(), reason="torchtitan's model registry needs tensorboard, torchdata, "
                    "datasets")
def test_torchtitan_refuses_pipeline_parallelism_without_the_cuda_graphs_flag(capsys):
    # why the flag is printed: tyro reports Trainer.Config's ValueError and exits
    flags = REGISTRY["torchtitan"].settings(handoff())["command_line"]
    args = [a for a in flags if a != "--training.disable_cuda_graphs"]
    with pytest.raises(SystemExit):
        _parse_torchtitan(args)
    assert "CUDA graphs do not support pipeline parallelism" in capsys.readouterr().err


@pytest.mark.parametrize("mode, parsed", [("none", False), ("selective", "selective"), ("full", True)])
def test_nemo_loads_the_yaml_into_what_the_plan_assumed(tmp_path, mode, parsed):
    pytest.importorskip("nemo_automodel.recipes._dist_utils")
    from nemo_automodel.components.config.loader import load_yaml_config
    from nemo_automodel.recipes._dist_utils import parse_distributed_section

    settings = {name: f.settings(handoff(partition=HF, activation_checkpoint=mode, dp_shard=2))
                for name, f in REGISTRY.items()}
    path = tmp_path / "recipe.yaml"
    path.write_text(nemo_yaml(settings) + "\n")
    cfg = load_yaml_config(path)
    d = parse_distributed_section(cfg.distributed.to_dict())
    pc = d["pipeline_config"]
    assert pc.module_fqns_per_model_part == HF_STAGES
    assert (pc.pp_schedule, pc.pp_schedule_csv, pc.pp_microbatch_size, pc.pp_seq_len) == \
        ("ZBVZeroBubble", "plan.csv", 2, 4096)
    assert (d["pp_size"], d["tp_size"], d["dp_size"]) == (2, 1, 2)
    assert d["activation_checkpointing"] == parsed
    assert cfg.step_scheduler.local_batch_size == 32


def test_each_framework_gets_its_own_module_names_with_a_warning_when_translated():
    tt = REGISTRY["torchtitan"].settings(handoff(partition=HF))
    assert tt["config"]["parallelism.module_fqns_per_model_part"] == TT
    assert any("translated to torchtitan's" in w for w in tt["warnings"])
    nemo = REGISTRY["nemo"].settings(handoff(partition=TT))
    assert nemo["distributed"]["pipeline"]["module_fqns_per_model_part"] == HF_STAGES
    assert any("translated to Hugging Face's" in w for w in nemo["warnings"])
    own = REGISTRY["torchtitan"].settings(handoff(partition=TT))
    assert own["warnings"] == []
    custom = REGISTRY["torchtitan"].settings(handoff(partition=[["embed", "blocks.0"], ["blocks.1", "head"]]))
    assert custom["config"]["parallelism.module_fqns_per_model_part"] == [["embed", "blocks.0"], ["blocks.1", "head"]]
    assert any("are not torchtitan's" in w for w in custom["warnings"])


def test_a_per_stage_checkpointing_plan_is_not_handed_off_as_one_mode():
    s = REGISTRY["torchtitan"].settings(handoff(activation_checkpoint=["none", "full", "full", "none"]))
    assert "activation_checkpoint" not in s["config"] and not any(a.startswith("activation_checkpoint:")
                                                                  for a in s["command_line"])
    assert any("applies one mode" in w and "none x 2, full x 2" in w for w in s["warnings"])
    same = REGISTRY["nemo"].settings(handoff(partition=HF, activation_checkpoint=["full"] * 4))
    assert same["distributed"]["activation_checkpointing"] is True and same["warnings"] == []
    for name in ("torchtitan", "nemo"):  # a mode only schedc's runtime has is named, not called a per-stage mix
        light = REGISTRY[name].settings(handoff(partition=HF if name == "nemo" else TT, activation_checkpoint="light"))
        assert "activation_checkpoint" not in light.get("config", {}) and \
            "activation_checkpointing" not in light.get("distributed", {})
        assert any("'light', a mode only schedc's runtime applies" in w for w in light["warnings"]), light["warnings"]



def test_nemo_selective_on_a_router_that_normalizes_top_k_in_place_is_a_warning():
    mixtral = REGISTRY["nemo"].settings(handoff(partition=HF, activation_checkpoint="selective", model_type="mixtral"))
    assert any("normalizes in place" in w and "plan with full or none" in w for w in mixtral["warnings"])
    for other in (dict(model_type="llama", activation_checkpoint="selective"),
                  dict(model_type="mixtral", activation_checkpoint="full")):
        assert not any("normalizes in place" in w for w in REGISTRY["nemo"].settings(handoff(partition=HF, **other))[
            "warnings"])


def test_memory_counted_for_another_implementation_is_a_warning():
    tt = REGISTRY["torchtitan"].settings(handoff(implementation="hf"))
    assert any("Hugging Face transformers' modules" in w and "--for torchtitan" in w for w in tt["warnings"])
    assert REGISTRY["torchtitan"].settings(handoff(implementation="torchtitan"))["warnings"] == []
    nemo = REGISTRY["nemo"].settings(handoff(partition=HF, implementation="torchtitan"))
    assert any("schedc plan --for nemo" in w for w in nemo["warnings"])


@pytest.mark.parametrize("name, fragment", [("layers.0,layers.1", "contains a comma"), ("-x", "starts with '-'"),
                                            ("lay ers.0", "space or control"), ("\x1b]0;x\x07", "control"),
                                            ("layers.\u202e0", "control")])
def test_module_names_a_parser_would_misread_are_refused(name, fragment):
    bad = [["tok_embeddings", name], ["layers.2"], ["layers.3"], ["layers.4", "norm", "lm_head"]]
    for framework in REGISTRY.values():
        with pytest.raises(SchedcError, match=fragment) as e:
            framework.settings(handoff(partition=bad))
        assert "\x1b" not in str(e.value)


def test_dtypes_follow_what_the_plan_counted():
    pure = REGISTRY["torchtitan"].settings(handoff(master_weights=False))["config"]
    assert (pure["training.dtype"], pure["training.mixed_precision_param"]) == ("bfloat16", "bfloat16")
    fp32 = REGISTRY["torchtitan"].settings(handoff(param_dtype="float32", activation_dtype="float32"))["config"]
    assert (fp32["training.dtype"], fp32["training.mixed_precision_param"]) == ("float32", "float32")
    half = REGISTRY["torchtitan"].settings(handoff(activation_dtype="float16"))
    assert "training.mixed_precision_param" not in half["config"]
    assert any("float16" in w for w in half["warnings"])


def test_without_a_sequence_length_the_handoff_says_what_to_set():
    s = REGISTRY["torchtitan"].settings(handoff(seq_len=None))
    assert "training.seq_len" not in s["config"]
    assert any("--training.seq_len" in w for w in s["warnings"])


def test_a_plans_report_launches_as_planned(tmp_path):
    """End to end: `schedc plan` on a profile that records its run; the flags in plan.json parse into
    the partition and settings the plan assumed, in torchtitan's names although the profile used HF's."""
    import json

    from schedc import cli
    from schedc.core.costs import Profile, StageCost

    unit = dict(forward=1.0, backward_input=1.0, backward_weight=1.0, activation_bytes=2**20, weight_grad_bytes=2**19)
    names = [["model.embed_tokens"]] + [[f"model.layers.{i}"] for i in range(4)] + [["model.norm", "lm_head"]]
    units = tmp_path / "units.json"
    Profile(stages=[StageCost(**unit, modules=m) for m in names], microbatch_size=1,
            assumes={"seq_len": 2048, "microbatch_size": 1, "activation_checkpoint": "full", "dp_shard": 1,
                     "tp": 1}).save(units)
    out = tmp_path / "plan.csv"
    assert cli.main(["plan", "--profile", str(units), "--ranks", "2", "--mb", "4", "--memory", "none",
                     "--placement", "loop", "--time-limit", "1", "-o", str(out), "--quiet"]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    cfg = _parse_torchtitan(report["frameworks"]["torchtitan"]["command_line"])
    translated = [[n.replace("model.embed_tokens", "tok_embeddings").removeprefix("model.") for n in stage]
                  for stage in report["partition"]]
    assert cfg.parallelism.module_fqns_per_model_part == translated
    assert cfg.training.seq_len == 2048 and cfg.training.local_batch_size == 4
    assert type(cfg.activation_checkpoint).__qualname__ == "FullAC.Config"


# the counted route's two common precisions: bf16 weights with fp32 master weights, gradients and
# AdamW states (--dtype bfloat16 --grad-dtype float32), and fp32 throughout (--dtype float32)
PRECISIONS = {"bf16 params + fp32 grads": {"dtype": "bfloat16", "grad_dtype": "float32"},
              "fp32 everything": {"dtype": "float32"}}


def _counted_handoff(**run) -> Handoff:
    """A handoff carrying what `unit_profile` (the route of `plan --config`) records in "assumes"."""
    from schedc.model_costs import unit_profile

    p = unit_profile(layers=4, hidden=64, vocab=100, heads=4, kv_heads=2, seq=256, microbatch_size=2, dp_shard=2,
                     names="hf", **run)
    units = [u.modules for u in p.stages]  # embedding, 4 layers, norm + head
    partition = [units[0] + units[1], units[2], units[3], units[4] + units[5]]
    return Handoff(partition=partition, placement="v", n_ranks=2, n_microbatches=16, assumes=dict(p.assumes))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_nemo_loads_the_dtypes_and_sizes_the_plan_counted(tmp_path, precision):
    pytest.importorskip("nemo_automodel.recipes._dist_utils")
    import torch
    from nemo_automodel.components.config.loader import load_yaml_config
    from nemo_automodel.components.distributed.config import FSDP2Config
    from nemo_automodel.components.training.step_scheduler import StepScheduler
    from nemo_automodel.recipes._dist_utils import parse_distributed_section
    from nemo_automodel.shared.utils import dtype_from_str

    h = _counted_handoff(**PRECISIONS[precision])
    a = h.assumes
    settings = {name: f.settings(h) for name, f in REGISTRY.items()}
    assert settings["nemo"]["warnings"] == []
    path = tmp_path / "recipe.yaml"
    path.write_text(nemo_yaml(settings) + "\n")
    cfg = load_yaml_config(path)
    d = parse_distributed_section(cfg.distributed.to_dict())
    mp, pc = d["strategy_config"].mp_policy, d["pipeline_config"]
    assert isinstance(d["strategy_config"], FSDP2Config) and d["dp_size"] == a["dp_shard"] == 2
    assert (pc.pp_seq_len, pc.pp_microbatch_size) == (a["seq_len"], a["microbatch_size"])
    # compute and stage-to-stage tensors in the activation dtype, reduction in the gradient dtype
    assert mp.param_dtype == pc.dtype == getattr(torch, a["activation_dtype"])
    assert mp.reduce_dtype == getattr(torch, a["grad_dtype"])
    # storage: fp32 master weights where params are bf16; FSDP2 keeps gradients and AdamW its states in it
    storage = dtype_from_str(cfg.model.torch_dtype)
    assert storage == getattr(torch, "float32" if a["master_weights"] else a["param_dtype"])
    assert storage == getattr(torch, a["grad_dtype"]) == getattr(torch, a["optimizer_dtype"])
    assert a["optimizer"] == "adamw" and cfg.optimizer._target_ is torch.optim.AdamW
    steps = StepScheduler(global_batch_size=cfg.step_scheduler.global_batch_size,
                          local_batch_size=cfg.step_scheduler.local_batch_size, dp_size=d["dp_size"],
                          dataloader=None, max_steps=1, preemption_signal=None)
    assert steps.grad_acc_steps == 1 and cfg.step_scheduler.local_batch_size == 16 * a["microbatch_size"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_torchtitan_parses_the_dtypes_the_plan_counted(precision):
    h = _counted_handoff(**PRECISIONS[precision])
    a = h.assumes
    s = REGISTRY["torchtitan"].settings(h)
    assert not any("dtype" in w or "gradients" in w for w in s["warnings"])
    t = _parse_torchtitan(s["command_line"]).training
    assert t.mixed_precision_param == a["activation_dtype"] and t.mixed_precision_reduce == a["grad_dtype"]
    # training.dtype stores parameters, gradients and optimizer states
    assert t.dtype == ("float32" if a["master_weights"] else a["param_dtype"]) == a["grad_dtype"] == a["optimizer_dtype"]
    assert t.seq_len == a["seq_len"]


def test_a_dtype_neither_framework_stores_as_counted_is_one_warning_each():
    # pure bf16 (no master weights) with fp32 gradients: both keep gradients in bf16 storage
    h = _counted_handoff(dtype="bfloat16", grad_dtype="float32", optimizer_dtype="bfloat16", master_weights=False)
    for name, fragment in (("nemo", "model.torch_dtype bfloat16"), ("torchtitan", "training.dtype bfloat16")):
        warnings = REGISTRY[name].settings(h)["warnings"]
        grads = [w for w in warnings if "gradients" in w]
        assert len(grads) == 1 and grads[0].startswith("the plan counts 'float32' gradients") and fragment in grads[0]
    nemo = REGISTRY["nemo"].settings(h)
    assert nemo["model"] == {"torch_dtype": "bfloat16"} and nemo["distributed"]["mp_policy"]["reduce_dtype"] == "float32"


def test_a_csv_name_with_a_newline_prints_on_one_line_and_round_trips(tmp_path):
    import subprocess

    import yaml

    name = "plan\nschedc: forged\x1b[31m.csv"
    h = Handoff(partition=TT, placement="v", n_ranks=2, n_microbatches=16, csv=name, assumes=ASSUMES)
    shown = REGISTRY["torchtitan"].render(REGISTRY["torchtitan"].settings(h))
    assert "\x1b" not in shown and not any(line.startswith("schedc: forged") for line in shown.splitlines())
    line, = [ln for ln in shown.splitlines() if "pipeline_parallel_schedule_csv" in ln]
    quoted = line.strip().removesuffix("\\").split(" ", 1)[1].strip()
    assert subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True, text=True).stdout == name
    nemo = REGISTRY["nemo"].settings(h)
    text = REGISTRY["nemo"].render(nemo)
    assert "\x1b" not in text and not any(ln.startswith("schedc: forged") for ln in text.splitlines())
    assert yaml.safe_load(nemo_yaml({"nemo": nemo}))["distributed"]["pipeline"]["pp_schedule_csv"] == name


def test_tensor_parallelism_with_sequence_parallelism_reaches_both_frameworks(tmp_path):
    pytest.importorskip("nemo_automodel.recipes._dist_utils")
    from nemo_automodel.components.config.loader import load_yaml_config
    from nemo_automodel.recipes._dist_utils import parse_distributed_section

    h = _counted_handoff(dtype="bfloat16", tp=2)
    assert h.assumes["sequence_parallel"] is True
    settings = {name: f.settings(h) for name, f in REGISTRY.items()}
    path = tmp_path / "recipe.yaml"
    path.write_text(nemo_yaml(settings) + "\n")
    d = parse_distributed_section(load_yaml_config(path).distributed.to_dict())
    assert d["tp_size"] == 2 and d["strategy_config"].sequence_parallel is True
    parallelism = _parse_torchtitan(settings["torchtitan"]["command_line"]).parallelism
    assert parallelism.tensor_parallel_degree == 2 and parallelism.enable_sequence_parallel is True  # its default


@pytest.mark.parametrize("optimizer, target, momentum", [("sgd", "torch.optim.SGD", 0.0),
                                                          ("sgd-momentum", "torch.optim.SGD", 0.9), ("none", None, None)])
def test_the_nemo_optimizer_section_is_the_one_whose_states_were_counted(optimizer, target, momentum):
    import yaml

    s = REGISTRY["nemo"].settings(_counted_handoff(dtype="float32", optimizer=optimizer))
    section = yaml.safe_load(nemo_yaml({"nemo": s})).get("optimizer")
    if target is None:
        assert section is None and any("no optimizer states" in w for w in s["warnings"])
    else:
        assert section == {"_target_": target, "momentum": momentum} and s["warnings"] == []


def test_a_counted_plan_s_report_loads_in_nemo_with_its_assumed_dtypes(tmp_path):
    """End to end: `schedc plan --config --dtype bfloat16 --grad-dtype float32`; the NeMo block of
    plan.json loads with NeMo's loader into the dtypes and sizes of the report's "assumes"."""
    pytest.importorskip("nemo_automodel.recipes._dist_utils")
    import json

    import torch
    from nemo_automodel.components.config.loader import load_yaml_config
    from nemo_automodel.recipes._dist_utils import parse_distributed_section
    from nemo_automodel.shared.utils import dtype_from_str

    from schedc import cli

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 4,
                                  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
                                  "intermediate_size": 128}))
    out = tmp_path / "plan.csv"
    assert cli.main(["plan", "--config", str(config), "--seq", "128", "--mbs", "2", "--dtype", "bfloat16",
                     "--grad-dtype", "float32", "--dp-shard", "2", "--ranks", "2", "--mb", "4", "--memory", "none",
                     "--time-limit", "1", "-o", str(out), "--quiet"]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    a = report["assumes"]
    path = tmp_path / "recipe.yaml"
    path.write_text(nemo_yaml(report["frameworks"]) + "\n")
    cfg = load_yaml_config(path)
    d = parse_distributed_section(cfg.distributed.to_dict())
    mp, pc = d["strategy_config"].mp_policy, d["pipeline_config"]
    assert (a["activation_dtype"], a["param_dtype"], a["grad_dtype"], a["master_weights"]) == \
        ("bfloat16", "bfloat16", "float32", True)
    assert mp.param_dtype == pc.dtype == torch.bfloat16 and mp.reduce_dtype == torch.float32
    assert dtype_from_str(cfg.model.torch_dtype) == torch.float32  # master weights, fp32 grads and AdamW states
    assert (pc.pp_seq_len, pc.pp_microbatch_size, d["dp_size"]) == (128, 2, 2)
    assert cfg.step_scheduler.local_batch_size == 4 * 2 and cfg.step_scheduler.global_batch_size == 4 * 2 * 2
    assert pc.module_fqns_per_model_part == [[n if n.startswith("lm_head") else
                                              ("model.embed_tokens" if n == "tok_embeddings" else "model." + n)
                                              for n in stage] + ["model.rotary_emb"] for stage in report["partition"]]


def _one_rank_under_torchtitan(parallelism, training) -> dict:
    """One pipeline rank as torchtitan 0.3.0 builds it from the parsed flags: its debug Llama-3 (2
    layers) through its own ``parallelize_llama`` on a 1-process gloo world (the rank's
    data-parallel shard axis, degree 1), FSDP2's ``reshard_after_forward`` from its own policy with
    pipeline parallelism on, then run by torch's ``PipelineStage`` and ``ScheduleGPipe`` over 2
    microbatches. Returns the blocks' wrapping and the bytes FSDP2 holds unsharded when REDUCE_GRAD
    starts (every backward done, nothing reduced yet)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule, fully_shard
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
    from torchtitan.config import CompileConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.fsdp import get_fsdp_reshard_after_forward_policy
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import llama3_configs
    from torchtitan.models.llama3.parallelize import parallelize_llama

    cfg = llama3_configs["debugmodel"](attn_backend="flex")
    cfg.layers = cfg.layers[:2]
    for layer in cfg.layers:  # flex attention needs a GPU; SDPA keeps the same parameters
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        one = dataclasses.replace(parallelism, pipeline_parallel_degree=1)
        model = parallelize_llama(cfg.build(), parallel_dims=ParallelDims.from_config(one, world_size=1),
                                  training=training, parallelism=one, compile_config=CompileConfig(),
                                  ac_config=None, dump_folder="")
        wrapped = [isinstance(b, FSDPModule) for b in model.layers.values()]
        model.set_reshard_after_forward(get_fsdp_reshard_after_forward_policy(
            parallelism.fsdp_reshard_after_forward, pp_enabled=True))
        stage = PipelineStage(model, 0, 1, torch.device("cpu"))
        held = {}

        def storages(tensors) -> int:
            return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                        for t in tensors if t is not None and t.untyped_storage().nbytes()}.values())

        def sample(*a, _reduce=stage.perform_reduce_grad, **k):
            params = [fp for s in fully_shard.state(model)._state_ctx.all_states
                      for g in s._fsdp_param_groups for fp in g.fsdp_params]
            held["weights"] = storages(t for fp in params for t in fp.all_gather_outputs)
            held["grads"] = storages([fp.unsharded_accumulated_grad for fp in params]
                                     + [fp._unsharded_param.grad for fp in params])
            return _reduce(*a, **k)

        stage.perform_reduce_grad = sample
        x = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
        loss = lambda out, y: torch.nn.functional.cross_entropy(out.float().flatten(0, 1), y.flatten())  # noqa: E731
        ScheduleGPipe(stage, 2, loss_fn=loss).step(x, target=x, return_outputs=False)
        return {"wrapped": wrapped, "params": sum(p.numel() for p in model.parameters()), **held}
    finally:
        dist.destroy_process_group()


def test_torchtitan_holds_fsdp2s_unsharded_bytes_at_shard_degree_1_and_the_handoff_counts_them(monkeypatch):
    """The printed --parallelism.data_parallel_shard_degree 1 leaves torchtitan's ParallelDims with
    FSDP "disabled", yet parallelize_llama wraps every block in FSDP2 and a pipeline rank holds its
    weights again in bf16 and fp32 gradients unsharded: the hand-off says so unless the plan counted
    them (unit_profile(fsdp=True)), and the count bounds what runs."""
    import torchtitan.distributed.parallel_dims as parallel_dims
    from torchtitan.distributed import ParallelDims

    from schedc.model_costs import unit_profile

    shape = dict(layers=4, hidden=64, vocab=100, heads=4, kv_heads=2, seq=256, microbatch_size=2, dtype="bfloat16")
    plain, counted = unit_profile(**shape), unit_profile(**shape, fsdp=True)
    units = [u.modules for u in plain.stages]
    partition = [units[0] + units[1] + units[2], units[3] + units[4] + units[5]]

    def settings(p):
        return REGISTRY["torchtitan"].settings(Handoff(partition=partition, placement="loop", n_ranks=2,
                                                       n_microbatches=4, assumes=dict(p.assumes)))

    s = settings(plain)
    cfg = _parse_torchtitan(s["command_line"])
    dims = ParallelDims.from_config(cfg.parallelism, world_size=s["world_size"])
    assert (dims.pp, dims.dp_shard, dims.fsdp_enabled) == (2, 1, False)
    warned = [w for w in s["warnings"] if "FSDP2" in w]
    assert len(warned) == 1 and "8 bytes per parameter where the plan counted 0" in warned[0]
    assert not any("FSDP2" in w for w in settings(counted)["warnings"])
    per_param = counted.assumes["fsdp_unsharded_bytes_per_param"]
    assert sum(u.static_bytes for u in counted.stages) - sum(u.static_bytes for u in plain.stages) == \
        per_param * sum(u.static_bytes for u in plain.stages) / plain.assumes["static_bytes_per_param"]

    monkeypatch.setattr(parallel_dims, "device_type", "cpu")  # its mesh on the CPU's gloo group
    run = _one_rank_under_torchtitan(cfg.parallelism, cfg.training)
    assert run["wrapped"] == [True, True]
    n = run["params"]
    assert run["weights"] == 2 * n  # bf16 (mixed_precision_param) copy beside the fp32 parameters
    assert run["grads"] == 4 * n    # float32 accumulator; a full backward leaves no bf16 gradient beside it
    assert run["weights"] + run["grads"] <= per_param * n  # the count adds the bf16 gradient a split W leaves


def test_torchtitan_refuses_a_world_size_the_plan_did_not_give():
    """The printed degrees fix the world: torchtitan's ParallelDims asserts their product is the
    world size, so the hand-off names that number; a larger launch stops at start."""
    from torchtitan.distributed import ParallelDims

    for dp_shard, tp in ((1, 1), (2, 1), (1, 2)):
        s = REGISTRY["torchtitan"].settings(handoff(dp_shard=dp_shard, tp=tp))
        assert s["world_size"] == 2 * dp_shard * tp
        assert f"launch on exactly {s['world_size']} GPUs" in REGISTRY["torchtitan"].render(s)
        parallelism = _parse_torchtitan(s["command_line"]).parallelism
        dims = ParallelDims.from_config(parallelism, world_size=s["world_size"])
        assert (dims.pp, dims.dp_shard, dims.tp, dims.fsdp_enabled) == (2, dp_shard, tp, dp_shard > 1)
        with pytest.raises(AssertionError, match="Invalid parallel dims"):
            ParallelDims.from_config(parallelism, world_size=2 * s["world_size"])


def _nemo_pipeline_rank(rank: int, world: int, path: str) -> dict:
    """One rank of NeMo AutoModel 0.7.0's world as its recipe builds it from the printed YAML
    (pp_size 2, dp_size 1): its own loader, mesh (``MeshContext.build``) and parallelizer
    (``parallelize_model``, what ``parallelize_for_pp`` calls on each stage) on a tiny Hugging Face
    Llama in the YAML's storage dtype, then two microbatches with FSDP2 set as torch's
    ``backward_maybe_with_nosync`` sets it. Returns the wrapping and the bytes FSDP2 holds
    unsharded (weights, gradients) after each forward and backward."""
    import torch
    from nemo_automodel.components.config.loader import load_yaml_config
    from nemo_automodel.components.distributed.fsdp2 import fsdp2_sharding_enabled
    from nemo_automodel.components.distributed.mesh import MeshContext
    from nemo_automodel.components.distributed.model_parallelizer import parallelize_model
    from nemo_automodel.recipes._dist_utils import parse_distributed_section
    from nemo_automodel.shared.utils import dtype_from_str
    from torch.distributed.fsdp import FSDPModule, fully_shard
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = load_yaml_config(path)
    d = parse_distributed_section(cfg.distributed.to_dict())
    mesh = MeshContext.build(d["strategy_config"], d["parallelism_sizes"], activation_checkpointing=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=100))
    model = parallelize_model(model.to(dtype_from_str(cfg.model.torch_dtype)), mesh)
    groups = [fully_shard.state(b)._fsdp_param_group for b in model.model.layers]

    def held() -> list[int]:
        params = [fp for g in groups for fp in g.fsdp_params]
        weights = sum(t.untyped_storage().size() for fp in params for t in fp.all_gather_outputs)
        grads = sum(t.untyped_storage().size() for fp in params
                    for t in (fp.unsharded_accumulated_grad, fp._unsharded_param.grad) if t is not None)
        return [weights, grads]

    model.set_reshard_after_backward(False)
    model.set_requires_gradient_sync(False)
    steps = []
    for _ in range(2):
        logits = model(input_ids=torch.randint(0, 100, (1, 8))).logits
        steps.append(held())
        logits.float().sum().backward()
        steps.append(held())
    return {"enabled": fsdp2_sharding_enabled(mesh.device_mesh), "shard_mesh": groups[0].mesh_info.mesh.size(),
            "wrapped": [isinstance(b, FSDPModule) for b in model.model.layers],
            "params": sum(p.numel() for p in model.model.layers.parameters()), "held": steps}


def test_nemo_wraps_in_fsdp2_at_dp_size_1_under_pipelining_and_a_plan_for_nemo_counts_it(tmp_path):
    """NeMo asks fsdp2_sharding_enabled about its whole (pp, dp, cp, tp) mesh, so at pp_size 2 and
    dp_size 1 every block is an FSDP2 unit over a size-1 shard mesh: after each backward a rank
    holds the blocks' bf16 weights again and their fp32 gradients. count_profile(framework='nemo')
    counts them (the YAML's block has no warning); the default count does not, and the block says so."""
    pytest.importorskip("nemo_automodel.recipes._dist_utils")
    from _dist import run_ranks

    import schedc

    shape = {"layers": 2, "hidden": 64, "ffn_hidden": 128, "heads": 4, "kv_heads": 2, "vocab": 100}

    def nemo_block(framework):
        p = schedc.count_profile(shape, seq=8, framework=framework)
        units = [u.modules for u in p.stages]
        h = Handoff(partition=[units[0] + units[1], units[2] + units[3]], placement="loop", n_ranks=2,
                    n_microbatches=2, assumes=dict(p.assumes))
        return p, REGISTRY["nemo"].settings(h)

    counted, block = nemo_block("nemo")
    assert not any("FSDP2" in w for w in block["warnings"])
    warned = [w for w in nemo_block("schedc")[1]["warnings"] if "FSDP2" in w]
    assert len(warned) == 1 and "8 bytes per parameter where the plan counted 0" in warned[0]
    # written once, before the ranks start: two ranks writing it at once let one read it half written
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(nemo_yaml({"nemo": block}) + "\n")
    ranks = run_ranks(_nemo_pipeline_rank, 2, timeout=120, path=str(recipe))
    for r in ranks:
        assert "ok" in r, r
        run = r["ok"]
        assert (run["enabled"], run["shard_mesh"], run["wrapped"]) == (True, 1, [True, True]), r
        n = run["params"]
        (_, f1), (w1, g1), (f2_w, f2_g), (w2, g2) = run["held"]
        assert f1 == 0  # no gradient before the first backward
        assert (w1, g1) == (w2, g2) == (2 * n, 4 * n)  # bf16 weights again, fp32 gradient accumulator
        assert f2_w < 2 * n and f2_g == 4 * n  # a forward reshards all but the last block; gradients stay
        assert w1 + g1 <= counted.assumes["fsdp_unsharded_bytes_per_param"] * n  # + the bf16 gradient a split W leaves
