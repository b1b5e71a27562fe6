"""Compiled CSVs through the real frameworks: torchtitan 0.3.0's ``pipeline_llm`` and NeMo AutoModel
0.7.0's ``AutoPipeline.build`` on 2 gloo ranks train with the unsplit model's float64 gradients, and
schedc.frameworks predicts exactly the stages their own functions build. So do `schedc plan`'s
uneven partitions, handed over as ``module_fqns_per_model_part`` with the plan's CSV.

Needs the frameworks (README, "Run the tests": installed without their heavy dependencies); skipped
when they are absent. One spawned 2-rank group runs every case (importing the frameworks dominates).
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchtitan.distributed.pipeline_parallel")
pytest.importorskip("nemo_automodel.components.distributed.pipelining.autopipeline")
pytest.importorskip("transformers")  # NeMo's stage split imports it

from _dist import ROOT, capture, run_ranks  # noqa: E402

from schedc.errors import SchedcError  # noqa: E402
from schedc.frameworks import SCHEDULE_NAMES, check_csv_for, framework_build  # noqa: E402
from schedc.io.csvio import write_csv  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))
import llama  # noqa: E402

M = 4
CFG = dict(vocab_size=32, dim=16, n_layers=4, n_heads=2, seq_len=8, dtype="float64")
# (framework:name, stages, placement the CSV is compiled for)
CASES = [
    ("torchtitan:1F1B", 2, "loop"),
    ("torchtitan:ZBVZeroBubble", 4, "v"),
    ("torchtitan:Interleaved1F1B", 4, "loop"),
    ("nemo:1F1B", 2, "loop"),
    ("nemo:ZBVZeroBubble", 4, "v"),
    ("nemo:Interleaved1F1B", 4, "loop"),
]


class HFShaped(torch.nn.Module):
    """examples/llama.py's Llama in Hugging Face's layout (``model.embed_tokens``, ``model.layers``,
    ``model.norm``, ``lm_head``), the layout NeMo's stage split expects; same weights by name map."""

    def __init__(self, base: llama.Llama):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.embed_tokens = base.tok_embeddings
        self.model.layers = torch.nn.ModuleList(base.layers.values())
        self.model.norm = base.norm
        self.model.register_buffer("rope_cos", base.rope_cos, persistent=False)
        self.model.register_buffer("rope_sin", base.rope_sin, persistent=False)
        self.lm_head = base.lm_head
        self.config = SimpleNamespace(tie_word_embeddings=False)

    def forward(self, x):
        inner = self.model
        h = inner.embed_tokens(x) if inner.embed_tokens is not None else x
        layers = inner.layers.values() if hasattr(inner.layers, "values") else inner.layers
        for layer in layers:
            h = layer(h, inner.rope_cos, inner.rope_sin)
        h = inner.norm(h) if inner.norm is not None else h
        return self.lm_head(h) if self.lm_head is not None else h


def _batch():
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, CFG["vocab_size"], (M, CFG["seq_len"] + 1), generator=gen)
    return tokens[:, :-1], tokens[:, 1:]


def _reference_grads(model) -> dict:
    x, y = _batch()
    loss = sum(llama.lm_loss(model(x[m:m + 1]), y[m:m + 1]) for m in range(M))  # scale_grads=False: a sum
    loss.backward()
    return {n: p.grad for n, p in model.named_parameters()}, loss.item()


def _torchtitan(name: str, csv: str, mesh, partition=None, cfg=CFG):
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed.pipeline_parallel import pipeline_llm

    model = llama.Llama(llama.LlamaConfig(**cfg), seed=1)
    parallel_dims = SimpleNamespace(pp=2, get_mesh=lambda names: mesh)
    parallelism = ParallelismConfig(pipeline_parallel_degree=2, pipeline_parallel_schedule=name,
                                    pipeline_parallel_schedule_csv=csv, module_fqns_per_model_part=partition)
    schedule, parts, has_first, has_last = pipeline_llm(
        model, parallel_dims=parallel_dims, training=TrainingConfig(local_batch_size=M), parallelism=parallelism,
        compile_config=CompileConfig(), ac_config=None, dump_folder="", device=torch.device("cpu"),
        model_config=SimpleNamespace(layers=[None] * cfg["n_layers"]), parallelize_fn=lambda m, **_: m,
        # the trainer passes loss_kwargs={"global_valid_tokens": ...} through the schedule
        loss_fn=lambda out, target, global_valid_tokens=None: (llama.lm_loss(out, target), None),
    )
    return schedule, parts, has_first, has_last, lambda: llama.Llama(llama.LlamaConfig(**cfg), seed=1)


def _nemo(name: str, csv: str, mesh, partition=None, cfg=CFG):
    from nemo_automodel.components.distributed.pipelining.autopipeline import AutoPipeline

    model = HFShaped(llama.Llama(llama.LlamaConfig(**cfg), seed=1))
    pipe = AutoPipeline(world_mesh=mesh, pp_schedule=name, pp_schedule_csv=csv, pp_microbatch_size=1,
                        pp_batch_size=M, patch_inner_model=False, patch_causal_lm_model=False,
                        module_fqns_per_model_part=partition,
                        device=torch.device("cpu")).build(model, loss_fn=llama.lm_loss)
    info = pipe.info
    return (info.schedule, info.model_parts, info.has_first_stage, info.has_last_stage,
            lambda: HFShaped(llama.Llama(llama.LlamaConfig(**cfg), seed=1)))


def run_cases(rank: int, world: int, cases: list) -> list:
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("pp",))
    return [capture(lambda: _one_case(rank, *case, mesh=mesh)) for case in cases]


def _one_case(rank: int, spec: str, csv: str, partition=None, mesh=None) -> dict:
    framework, name = spec.split(":")
    cfg = PLAN_CFG if partition else CFG
    schedule, parts, has_first, has_last, unsplit = (_torchtitan if framework == "torchtitan" else _nemo)(
        name, csv, mesh, partition, cfg)
    x, y = _batch()
    if framework == "torchtitan":
        loss = _torchtitan_train_step(schedule, has_first, has_last, x, y)
    else:  # NeMo's recipe (train_ft.py, _forward_backward_step): the full batch, the schedule splits it
        losses = [] if has_last else None
        schedule.step(*((x,) if has_first else ()), target=y if has_last else None, losses=losses)
        loss = torch.sum(torch.stack(losses)).item() if has_last else None
    reference, reference_loss = _reference_grads(unsplit())
    errors = [(p.grad - reference[n]).abs().max().item() for part in parts for n, p in part.named_parameters()]
    stage_ids = sorted(s.stage_index for s in schedule._stages)
    return {"stages": stage_ids, "max_grad_error": max(errors), "n_params": len(errors),
            "loss_error": None if loss is None else abs(loss - reference_loss)}


def _trainer_function(name: str):
    """``torchtitan.trainer.Trainer.<name>``, compiled from the installed trainer.py itself.

    Importing torchtitan.trainer needs its full dependency set (torchdata, tensorboard, datasets,
    wandb), which the tests install without; the method runs with just those of trainer.py's own
    import statements that bind a name it uses. Tracebacks point at trainer.py's lines."""
    import ast
    import importlib.util
    from pathlib import Path

    path = Path(importlib.util.find_spec("torchtitan").submodule_search_locations[0]) / "trainer.py"
    tree = ast.parse(path.read_text())
    trainer = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    func = next(n for n in trainer.body if isinstance(n, ast.FunctionDef) and n.name == name)
    used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
               and any((a.asname or a.name).split(".")[0] in used for a in n.names)]
    namespace: dict = {}
    exec(compile(ast.Module(body=imports + [func], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


def _torchtitan_train_step(schedule, has_first: bool, has_last: bool, x, y):
    """One microbatch group through torchtitan's own ``Trainer.pp_forward_backward_step``, which
    hands the schedule pre-split microbatches: ``step(arg_mbs=..., kwarg_mbs=..., target_mbs=...,
    losses=..., loss_kwargs=...)`` (torch 2.14.1 or later). Returns the summed loss (last stage)."""
    import contextlib

    from torchtitan.config import ParallelismConfig

    trainer = type("TrainerStep", (), {
        "post_dataloading_process": _trainer_function("post_dataloading_process"),
        "pp_forward_backward_step": _trainer_function("pp_forward_backward_step"),
    })()
    trainer.pp_schedule, trainer.pp_has_first_stage, trainer.pp_has_last_stage = schedule, has_first, has_last
    trainer.train_context, trainer.device = contextlib.nullcontext, torch.device("cpu")
    trainer.model_config = None  # not a torchtitan Decoder: no attention masks to build
    trainer.parallel_dims = SimpleNamespace(cp_enabled=False)
    trainer.ntokens_seen = 0
    # partial_dtensor: plain tensors on the pp axis (the spmd_types default annotates inputs for a
    # full ParallelDims mesh, which a 2-rank pp-only test does not build)
    trainer.config = SimpleNamespace(parallelism=ParallelismConfig(pipeline_parallel_degree=2,
                                                                   spmd_backend="partial_dtensor"))
    loss = trainer.pp_forward_backward_step(
        input_dict_mbs=[{"input": x[m:m + 1]} for m in range(M)], label_mbs=[y[m:m + 1] for m in range(M)],
        global_valid_tokens=torch.tensor(y.numel()))
    return loss.item() if has_last else None


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from schedc.solver import compile_schedule

    tmp = tmp_path_factory.mktemp("fw")
    cases = []
    for spec, stages, placement in CASES:
        csv = tmp / f"{stages}_{placement}.csv"
        if not csv.exists():
            write_csv(compile_schedule(stages, M, n_ranks=2, placement=placement, time_limit=5).schedule, csv)
        assert check_csv_for(csv, spec, local_batch_size=M).ok  # what a user runs before launching
        cases.append((spec, str(csv)))
    plans = {}
    for spec, placement in PLAN_CASES:
        res = _plan(spec.split(":")[0], placement)
        csv = tmp / f"plan_{spec.replace(':', '_')}.csv"
        write_csv(res.schedule, csv)
        # what a user runs before launching, with the plan's partition
        assert check_csv_for(csv, spec, local_batch_size=M, partition=len(res.partition)).ok
        plans[f"plan {spec}"] = res
        cases.append((spec, str(csv), res.partition))
    per_rank = run_ranks(run_cases, 2, timeout=120, cases=cases)
    for r in per_rank:
        assert "ok" in r, r.get("traceback", r)
    out = {case[0] if len(case) == 2 else f"plan {case[0]}": [r["ok"][i] for r in per_rank]
           for i, case in enumerate(cases)}
    out["plans"] = plans
    return out


# a 5-layer model whose head costs 3.5 layers: the plan puts 4 layers + the embedding on one stage
# and 1 layer + the head on the other (loop), and some uneven V split
PLAN_CFG = dict(CFG, n_layers=5)
PLAN_CASES = [("torchtitan:1F1B", "loop"), ("torchtitan:ZBVZeroBubble", "v"),
              ("nemo:1F1B", "loop"), ("nemo:ZBVZeroBubble", "v")]
NAMES = {"torchtitan": (["tok_embeddings"], "layers.{}", ["norm", "lm_head"]),
         "nemo": (["model.embed_tokens"], "model.layers.{}", ["model.norm", "lm_head"])}


def _plan(framework: str, placement: str):
    from schedc.core.costs import Profile, StageCost
    from schedc.planning import plan

    first, layer, last = NAMES[framework]
    units = [StageCost(forward=0.05, backward_input=0.0, backward_weight=0.05, activation_bytes=0, modules=first)]
    units += [StageCost(forward=1, backward_input=1, backward_weight=1, activation_bytes=1, modules=[layer.format(k)])
              for k in range(PLAN_CFG["n_layers"])]
    units.append(StageCost(forward=3.5, backward_input=3.5, backward_weight=3.5, activation_bytes=1, modules=last))
    return plan(profile=Profile(stages=units, comm=0.05), ranks=2, microbatches=M, memory="none",
                placement=placement, time_limit=3)


@pytest.mark.parametrize("spec,placement", PLAN_CASES)
def test_planned_uneven_partition_trains_like_the_unsplit_model(results, spec, placement):
    res = results["plans"][f"plan {spec}"]
    counts = res.counts
    if placement == "loop":
        assert counts == [5, 2]  # embedding + 4 layers | 1 layer + head
    assert len(set(counts)) > 1  # uneven: not what the frameworks' default split builds
    framework = spec.split(":")[0]
    build = framework_build(framework, spec.split(":")[1], 2, local_batch_size=M, partition=len(counts))
    for rank, out in enumerate(results[f"plan {spec}"]):
        assert "ok" in out, out.get("traceback", out)
        assert out["ok"]["stages"] == [s for s in range(build.n_stages) if _rank_of(s, build) == rank]
        assert out["ok"]["n_params"] > 0 and out["ok"]["max_grad_error"] < 1e-10, out["ok"]
    print(f"plan {spec}: units per stage {counts}, max |grad - unsplit grad| = "
          f"{max(r['ok']['max_grad_error'] for r in results[f'plan {spec}']):.1e}")


@pytest.mark.parametrize("spec,stages,placement", CASES)
def test_compiled_csv_trains_like_the_unsplit_model(results, spec, stages, placement):
    framework, name = spec.split(":")
    build = framework_build(framework, name, 2, local_batch_size=M)
    for rank, res in enumerate(results[spec]):
        assert "ok" in res, res.get("traceback", res)
        # the framework built exactly the stages schedc.frameworks predicts for this rank
        expected = [s for s in range(build.n_stages) if _rank_of(s, build) == rank]
        assert res["ok"]["stages"] == expected
        assert res["ok"]["n_params"] > 0 and res["ok"]["max_grad_error"] < 1e-10, res["ok"]
    # the last stage's rank returns the step's loss: the unsplit model's
    assert [r["ok"]["loss_error"] is not None for r in results[spec]].count(True) == 1
    assert all(r["ok"]["loss_error"] is None or r["ok"]["loss_error"] < 1e-10 for r in results[spec])
    print(f"{spec}: max |grad - unsplit grad| = {max(r['ok']['max_grad_error'] for r in results[spec]):.1e}")


def _rank_of(stage: int, build) -> int:
    r = build.n_ranks
    return stage % r if build.placement == "loop" else (stage if stage < r else 2 * r - 1 - stage)


def test_mismatched_name_is_caught_before_launch(tmp_path):
    from schedc.core.baselines import make_baseline

    csv = tmp_path / "v.csv"
    write_csv(make_baseline("zb-v", 4, M, n_ranks=2), csv)
    report = check_csv_for(csv, "torchtitan:Interleaved1F1B", local_batch_size=M)
    assert not report.ok and "ZBVZeroBubble" in report.message


# ------------------------------------------------------------------ the rules, against their code
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("name", [n for n in SCHEDULE_NAMES])
def test_stage_rules_match_the_frameworks_code(name, ranks):
    from nemo_automodel.components.distributed.pipelining import functional as nemo
    from torchtitan.config import ParallelismConfig
    from torchtitan.distributed import pipeline_parallel as tt

    single = SCHEDULE_NAMES[name]
    for layers in (4, 8, 12):
        for k in (None, 1, 2, 3, 5):
            cfg = ParallelismConfig(pipeline_parallel_schedule=name, pipeline_parallel_layers_per_stage=k)
            theirs = _outcome(lambda: tt._get_pipeline_metadata(SimpleNamespace(pp=ranks), cfg,
                                                                SimpleNamespace(layers=[0] * layers))[0])
            if isinstance(theirs, int):  # the split and placement steps that follow
                theirs = _outcome(lambda: (tt._generate_llm_fqn_per_model_part(theirs, layers, 1, 1), [
                    tt._get_pp_rank_to_stage_indices_mapping(r, ranks, name, theirs) for r in range(ranks)])
                    and theirs)
            _compare("torchtitan", name, ranks, layers, k, theirs)
            theirs = _outcome(lambda: nemo.calculate_virtual_stages(layers, k, ranks, single)[0])
            if isinstance(theirs, int):
                style = "v" if name == "ZBVZeroBubble" else "loop"
                theirs = _outcome(lambda: (nemo.generate_hf_model_fqn_per_model_part(theirs, layers), [
                    nemo.stage_ids_this_rank(r, ranks, theirs, style) for r in range(ranks)]) and theirs)
            _compare("nemo", name, ranks, layers, k, theirs)


def _outcome(fn):
    try:
        return fn()
    except (ValueError, AssertionError) as e:
        return e


def _compare(framework, name, ranks, layers, k, theirs):
    try:
        ours = framework_build(framework, name, ranks, layers=layers, layers_per_stage=k).n_stages
    except SchedcError as e:
        ours = e
    where = f"{framework} {name} ranks={ranks} layers={layers} layers_per_stage={k}"
    if isinstance(theirs, Exception):
        assert isinstance(ours, SchedcError), f"{where}: they raise {theirs!r}, schedc says {ours} stages"
    else:
        assert ours == theirs, f"{where}: they build {theirs} stages, schedc says {ours}"


def test_plan_handoff_parses_as_the_frameworks_read_it(results):
    """The flags `schedc plan` prints go through torchtitan's own command-line rules (tyro with
    ConfigManager's registry) into the config fields pipeline_llm reads; the YAML block loads
    into NeMo's PipelineConfig."""
    import dataclasses

    import tyro
    import yaml
    from nemo_automodel.components.distributed.pipelining.config import PipelineConfig
    from torchtitan.config import ParallelismConfig, TrainingConfig
    from torchtitan.config.manager import ConfigManager, custom_registry

    from schedc.planning import nemo_yaml

    ConfigManager()  # registers torchtitan's parsing rules (comma-separated list[str]) in custom_registry

    # the two sections of torchtitan's job config that the flags touch (real types, not strings:
    # this module's annotations are postponed)
    from torchtitan.distributed.activation_checkpoint import ActivationCheckpointingConfig, SelectiveAC

    Job = dataclasses.make_dataclass("Job", [
        ("parallelism", ParallelismConfig, dataclasses.field(default_factory=ParallelismConfig)),
        ("training", TrainingConfig, dataclasses.field(default_factory=TrainingConfig)),
        ("activation_checkpoint", ActivationCheckpointingConfig, dataclasses.field(default_factory=SelectiveAC.Config))])

    for spec, _placement in PLAN_CASES:
        res = results["plans"][f"plan {spec}"]
        settings = res.report["frameworks"]
        if spec.startswith("torchtitan"):
            job = tyro.cli(Job, args=settings["torchtitan"]["command_line"], default=Job(), registry=custom_registry)
            assert job.parallelism.module_fqns_per_model_part == res.partition
            assert job.parallelism.pipeline_parallel_schedule == spec.split(":")[1]
            assert job.training.local_batch_size == M
        else:
            block = yaml.safe_load(nemo_yaml(settings))
            cfg = PipelineConfig(**block["distributed"]["pipeline"])
            # every stage also keeps the rotary embedding (tests/test_nemo_yaml_builds_stages.py runs them)
            assert cfg.module_fqns_per_model_part == [stage + ["model.rotary_emb"] for stage in res.partition]
            assert cfg.pp_schedule == spec.split(":")[1] and block["step_scheduler"]["local_batch_size"] == M
