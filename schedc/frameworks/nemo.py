"""NeMo AutoModel 0.7.0: the stages it builds from its settings, and the YAML that launches a plan.

Rules read from the installed sources, ``nemo_automodel/components/distributed/pipelining/functional.py``
(line numbers of that release): ``calculate_virtual_stages`` (L182-247) builds 1 or 2 stages per rank
by the same single/multi split as torch (L240-245), or with ``layers_per_stage`` K stages =
ceil(layers / K) (L194; embedding and head carry no weight), rounded to a multiple of ``pp_size`` by
``round_virtual_stages_to_pp_multiple`` "up"/"down" (L201-209) or else an error (L214-220), exactly 1
per rank for single-stage names (L225-231), at least 2 otherwise (L233-239); stages <= layers
(L132-136). V placement only for ZBVZeroBubble (DualPipeV builds *loop* stages), exactly 2 per rank
(L822-830, L86-95). ``pp_batch_size`` divisible by ``pp_microbatch_size`` (autopipeline.py L96-97);
``recipes/llm/train_ft.py`` L670-677 sets them from ``step_scheduler.local_batch_size`` and
``distributed.pipeline.pp_microbatch_size`` and asserts microbatches >= pp_size.
The YAML is read by ``components/config/loader.py`` ``load_yaml_config`` and its ``distributed``
section by ``recipes/_dist_utils.py`` ``parse_distributed_section``: ``activation_checkpointing``
false / true (full) / selective, ``dp_size`` the data-parallel degree (FSDP2 shards over
dp_size / dp_replicate_size), ``pipeline`` the fields of ``PipelineConfig`` (``pp_seq_len``: the
sequence length the stages' shapes are inferred for). Precision: ``distributed.mp_policy`` becomes
FSDP2's ``MixedPrecisionPolicy`` (``_dist_utils.py`` L142-156: ``param_dtype`` the compute dtype,
``reduce_dtype`` the gradient reduction's, ``output_dtype`` null keeps outputs in the compute dtype,
which the pipeline's inter-stage ``dtype`` then follows, L224-237); ``model.torch_dtype`` is the parameters' storage
dtype (``_transformers/model_init.py``; FSDP2 keeps sharded gradients in it, torch's ``_fsdp_collectives``
casts the reduced gradient back, and torch's AdamW its states); ``step_scheduler.global_batch_size``
over ``local_batch_size`` x the data-parallel degree is the gradient-accumulation count
(``components/training/step_scheduler.py`` L116-122).

Cost: constant per name; rendering is linear in the number of module names.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from schedc.errors import ParameterError, SchedcError, python_spelling
from schedc.frameworks._base import (
    SCHEDULE_NAMES,
    Build,
    Framework,
    Handoff,
    check_per_rank,
    check_positive,
    check_v,
    count_advice,
    fsdp_shortfall,
    microbatches,
    schedule_name,
)
from schedc.frameworks._names import check_module_names, in_own_names

NAME = "nemo"
FIELDS = {
    "schedule": "distributed.pipeline.pp_schedule",
    "layers": "the model's num_hidden_layers",
    "layers_per_stage": "distributed.pipeline.layers_per_stage",
    "local_batch_size": "step_scheduler.local_batch_size",
    "microbatch_size": "distributed.pipeline.pp_microbatch_size",
    "ranks": "distributed.pp_size",
    "partition": "distributed.pipeline.module_fqns_per_model_part",
}
V_NAMES = ("ZBVZeroBubble",)
PLAN_NAMES = {"loop": "1F1B", "v": "ZBVZeroBubble", "interleaved": "Interleaved1F1B"}  # a plan's placement -> its class
_AC = {"none": False, "full": True, "selective": "selective"}  # what parse_distributed_section reads
# Hugging Face MoE models NeMo AutoModel 0.7.0 trains with transformers' own modules (it has its own
# Qwen3-MoE) whose router divides top-k's output in place
_TOPK_IN_PLACE = ("mixtral",)


@python_spelling
def build(
    schedule: str,
    n_ranks: int,
    layers: Optional[int] = None,
    layers_per_stage: Optional[int] = None,
    round_virtual_stages: Optional[str] = None,
    local_batch_size: Optional[int] = None,
    microbatch_size: int = 1,
    partition: Optional[int] = None,
) -> Build:
    """What NeMo AutoModel 0.7.0's ``AutoPipeline`` builds in the LLM recipe; its errors as SchedcError.
    ``partition``: the number of parts of an explicit ``module_fqns_per_model_part``, which then
    sets the stage count."""
    name = schedule_name(schedule)
    single = SCHEDULE_NAMES[name]
    check_positive(NAME, FIELDS, layers=layers, layers_per_stage=layers_per_stage)
    if partition is not None:
        n_stages = partition
        check_per_rank(NAME, name, single, n_stages, n_ranks, f"{FIELDS['partition']} with {n_stages} parts")
        layers = None
    elif layers_per_stage is not None:
        if layers is None:
            raise ParameterError("layers", "nemo: with layers_per_stage the stage count depends on the model; "
                                 "give {param} as well")
        n_stages = math.ceil(layers / layers_per_stage)
        if n_stages % n_ranks and round_virtual_stages is not None:
            if round_virtual_stages not in ("up", "down"):
                raise SchedcError(f"nemo: round_virtual_stages_to_pp_multiple must be up or down, "
                                  f"got {round_virtual_stages!r}")
            n_stages = (n_stages // n_ranks + (round_virtual_stages == "up")) * n_ranks
        check_per_rank(NAME, name, single, n_stages, n_ranks,
                       f"{layers} layers over {FIELDS['layers_per_stage']} {layers_per_stage}")
    else:
        n_stages = n_ranks * (1 if single else 2)
    if layers is not None and n_stages > layers:
        raise SchedcError(f"nemo: {n_stages} stages exceed the model's {layers} layers")
    placement = "v" if name in V_NAMES else "loop"
    check_v(NAME, name, placement, n_stages, n_ranks)
    n_microbatches = microbatches(NAME, FIELDS, local_batch_size, microbatch_size)
    if n_microbatches is not None and n_microbatches < n_ranks:
        raise SchedcError(f"nemo: {n_microbatches} microbatches are fewer than pp_size {n_ranks}; the LLM recipe "
                          f"asserts local_batch_size // pp_microbatch_size >= pp_size")
    return Build(NAME, name, n_ranks, n_stages, placement, n_microbatches)


def settings(h: Handoff) -> dict:
    """The recipe YAML's ``distributed`` and ``step_scheduler`` sections, and the keys of its ``model``
    (storage dtype) and ``optimizer`` (class) sections, that build the plan's stages, run its CSV and
    set what the plan assumed; ``warnings`` lists what they cannot set, one line each."""
    check_module_names(h.partition)
    partition, warnings = in_own_names(h.partition, "hf", "NeMo AutoModel")
    a, mbs = h.assumes, h.microbatch_size
    pipeline = {"pp_schedule": PLAN_NAMES[h.placement], "pp_schedule_csv": h.csv, "pp_microbatch_size": mbs,
                "module_fqns_per_model_part": with_shared_modules(partition, a.get("model_type"))}
    if a.get("seq_len"):
        pipeline["pp_seq_len"] = int(a["seq_len"])
    else:
        warnings.append("the profile does not record its sequence length: set distributed.pipeline.pp_seq_len "
                        "and the dataset's length to the one it was profiled at")
    dp = int(a.get("dp_shard") or 1)
    # strategy fsdp2 with no replication: every data-parallel rank shards, as the plan's dp_shard divides
    distributed: dict[str, Any] = {"strategy": "fsdp2", "pp_size": h.n_ranks, "tp_size": int(a.get("tp") or 1),
                                   "dp_size": dp, "dp_replicate_size": 1}
    if a.get("sequence_parallel") and distributed["tp_size"] > 1:
        distributed["sequence_parallel"] = True
    mp_policy, model, precision_warnings = _precision(a)
    if mp_policy:
        distributed["mp_policy"] = mp_policy
    optimizer = _optimizer(a.get("optimizer"), precision_warnings)
    mode = h.ac_mode(FRAMEWORK.ac_modes)
    if mode is not None:
        distributed["activation_checkpointing"] = _AC[mode]
    else:
        warnings.append(h.ac_warning("NeMo AutoModel", FRAMEWORK.ac_modes, FRAMEWORK.ac_default))
    if mode == "selective" and a.get("model_type") in _TOPK_IN_PLACE:
        warnings.append(f"NeMo AutoModel's selective checkpointing saves top-k, which transformers' "
                        f"{a['model_type']} router then normalizes in place: torch refuses it in the first backward "
                        "('Tensor cached during selective activation checkpoint has been mutated'); plan with full or "
                        "none, or run under schedc's runtime, whose selective policy recomputes top-k")
    warnings += precision_warnings + _fsdp(a, mp_policy, h.n_ranks * distributed["tp_size"] * dp)
    warnings += h.common_warnings(NAME, "hf", "NeMo AutoModel")
    local = h.n_microbatches * mbs
    out = {"distributed": {**distributed, "pipeline": pipeline},
           # one optimizer step per pipeline step: no gradient accumulation the plan did not count
           "step_scheduler": {"local_batch_size": local, "global_batch_size": local * dp}}
    if model:
        out["model"] = model
    if optimizer:
        out["optimizer"] = optimizer
    return {**out, "warnings": warnings}


# What every stage keeps beside its units. split_model_into_stages (functional.py L730-796) sets each
# module not listed to None, and patch_hf_model_for_pp's forward (hf_utils.py L176-179) then passes
# position_embeddings=None to every layer, which Hugging Face's rotary attention unpacks ("cannot unpack
# non-iterable NoneType object"). NeMo's own split lists the inner model's rotary_emb on every stage
# (generate_hf_model_fqn_per_model_part, L173-175); in transformers 5 every family schedc counts but
# GPT-2 (learned positions, transformer.wpe) has one at model.rotary_emb.
SHARED_MODULES = ("model.rotary_emb",)
_NO_ROTARY = ("gpt2",)


def with_shared_modules(partition: list[list[str]], model_type: Optional[str]) -> list[list[str]]:
    """The partition with :data:`SHARED_MODULES` on every stage, where the model has them and the
    partition is in Hugging Face's names (a stage that already lists one keeps its list).
    Cost: linear in the number of names."""
    if model_type in _NO_ROTARY or not any(name.startswith("model.") for stage in partition for name in stage):
        return partition
    return [stage + [m for m in SHARED_MODULES if m not in stage] for stage in partition]


_NEMO_DTYPES = ("bfloat16", "float16", "float32")  # what dtype_from_str reads and FSDP2 computes in
_OPTIMIZERS: dict[str, dict[str, Any]] = {
    "adamw": {"_target_": "torch.optim.AdamW"}, "adam": {"_target_": "torch.optim.Adam"},
    "sgd": {"_target_": "torch.optim.SGD", "momentum": 0.0},
    "sgd-momentum": {"_target_": "torch.optim.SGD", "momentum": 0.9}}


def _precision(a: dict) -> tuple[dict, dict, list[str]]:
    """(``distributed.mp_policy``, the ``model`` section, warnings) for the dtypes the plan counted.
    Storage (``model.torch_dtype``) is float32 where the plan counted float32 parameters or float32
    master weights, else the parameter dtype; FSDP2 computes in the activation dtype and reduces
    gradients in the gradient dtype. What storage decides alone (stored gradients, optimizer
    states) and differs from the plan's count is a warning."""
    act, param, grad, opt = (a.get(k) for k in ("activation_dtype", "param_dtype", "grad_dtype", "optimizer_dtype"))
    mp, model, out = {}, {}, []
    if act in _NEMO_DTYPES:
        mp = {"param_dtype": act, "reduce_dtype": grad if grad in _NEMO_DTYPES else "float32", "output_dtype": None}
    elif act is not None:
        out.append(f"the plan counts {ascii(act)[:20]} activations; FSDP2's mp_policy computes in one of "
                   f"{', '.join(_NEMO_DTYPES)}")
    storage = "float32" if param == "float32" or (param is not None and a.get("master_weights")) else param
    if storage in _NEMO_DTYPES:
        model["torch_dtype"] = storage
    elif param is not None:
        out.append(f"the plan counts {ascii(param)[:20]} parameters; model.torch_dtype stores one of "
                   f"{', '.join(_NEMO_DTYPES)}")
        storage = None
    if storage and grad and grad != storage:
        out.append(f"the plan counts {ascii(grad)[:20]} gradients; FSDP2 keeps them in the parameters' storage "
                   f"dtype (model.torch_dtype {storage})")
    if storage and opt and opt != storage and a.get("optimizer") not in ("sgd", "none"):
        out.append(f"the plan counts {ascii(opt)[:20]} optimizer states; torch's optimizers keep them in the "
                   f"parameters' storage dtype (model.torch_dtype {storage})")
    return mp, model, out


def _fsdp(a: dict, mp_policy: dict, world: int) -> list[str]:
    """NeMo AutoModel 0.7.0 wraps every block in FSDP2 on any world of more than one GPU, dp_size 1
    included: ``components/distributed/fsdp2.py`` ``fsdp2_sharding_enabled`` asks the whole
    (pp, dp_replicate, dp_shard, cp, tp) mesh, whose size is the world's, and
    ``model_parallelizer.py`` ``_parallelize_fsdp2`` then calls ``fully_shard`` per block over the
    size-1 dp_shard mesh. Under torch's pipelining a rank so holds :func:`fsdp_held` bytes per
    parameter in ``mp_policy``'s dtypes. A warning where the plan counted fewer. Cost: O(1)."""
    if world < 2:
        return []
    dtypes = (mp_policy["param_dtype"], mp_policy["reduce_dtype"]) if mp_policy else None
    amount = fsdp_shortfall(a, dtypes)
    if amount is None:
        return []
    return [f"NeMo AutoModel wraps every block in FSDP2 on any world of more than one GPU, dp_size 1 included "
            f"(distributed/fsdp2.py: fsdp2_sharding_enabled asks the whole mesh, pp included): under pipeline "
            f"parallelism each rank holds its stages' gradients unsharded all step and their weights again in the "
            f"compute dtype, {amount}: {count_advice(NAME, 'NeMo AutoModel', a, dtypes)}"]


def _optimizer(name, warnings: list[str]) -> dict:
    """The ``optimizer`` section's class for the optimizer whose states the plan counted."""
    if name is None or isinstance(name, str) and name in _OPTIMIZERS:
        return dict(_OPTIMIZERS[name]) if name is not None else {}
    counted = "no optimizer states" if name == "none" else f"the states of optimizer {ascii(name)[:20]}"
    warnings.append(f"the plan counts {counted}; the LLM recipe builds the optimizer of your YAML's optimizer "
                    "section, whose states add to what the plan counted")
    return {}


def yaml_text(s: dict) -> str:
    """The sections as YAML (flow-style lists for the partition), as the recipe's loader reads them."""
    d, p = s["distributed"], s["distributed"]["pipeline"]
    lines = ["distributed:"]
    for key, value in d.items():
        if key == "mp_policy":  # parse_distributed_section builds FSDP2's MixedPrecisionPolicy from it
            lines += ["  mp_policy:"] + [f"    {k}: {json.dumps(v)}" for k, v in value.items()]
        elif key != "pipeline":
            lines.append(f"  {key}: {json.dumps(value)}")
    lines.append("  pipeline:")
    for key, value in p.items():
        if key != "module_fqns_per_model_part":
            lines.append(f"    {key}: {json.dumps(value)}"
                         + ("  # and your dataset's length (dataset.seq_len or packed_sequence.packed_sequence_size)"
                            if key == "pp_seq_len" else ""))
    lines.append("    module_fqns_per_model_part:")
    lines += [f"      - {json.dumps(stage)}" for stage in p["module_fqns_per_model_part"]]
    lines.append("step_scheduler:")
    lines += [f"  {k}: {json.dumps(v)}" for k, v in s["step_scheduler"].items()]
    if s.get("model"):
        lines += ["model:  # merge into your model section (keep its _target_ and checkpoint)"]
        lines += [f"  {k}: {json.dumps(v)}" for k, v in s["model"].items()]
    if s.get("optimizer"):
        lines += ["optimizer:  # merge into your optimizer section (keep its lr and other settings)"]
        lines += [f"  {k}: {json.dumps(v)}" + ("  # any momentum > 0 keeps the one state counted" if v else "")
                  if k == "momentum" else f"  {k}: {json.dumps(v)}" for k, v in s["optimizer"].items()]
    return "\n".join(lines)


def render(s: dict) -> str:
    lines = [f"{FRAMEWORK.label} (YAML; dp_size is the data-parallel degree FSDP2 shards over):"]
    lines += ["  " + line for line in yaml_text(s).splitlines()]
    return "\n".join(lines + [f"  warning: {w}" for w in s.get("warnings", [])])


FRAMEWORK = Framework(
    name=NAME, label="NeMo AutoModel 0.7.0", v_names=V_NAMES, plan_names=PLAN_NAMES, fields=FIELDS, vocabulary="hf",
    build=build, settings=settings, render=render,
    # components/distributed/fsdp2.py fsdp2_sharding_enabled asks the whole (pp, dp_replicate, dp_shard,
    # cp, tp) mesh, whose size is pp_size > 1 under pipelining, so model_parallelizer.py
    # _parallelize_fsdp2 calls fully_shard on every block over the size-1 dp_shard mesh
    fsdp=True,
    ac_modes=("none", "selective", "full"),  # distributed.activation_checkpointing: false, selective, true
    ac_default="none (parse_distributed_section's default, activation_checkpointing false)",
    spec_help="nemo:NAME (NeMo AutoModel 0.7.0)")
