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
sequence length the stages' shapes are inferred for).

Cost: constant per name; rendering is linear in the number of module names.
"""

from __future__ import annotations

import json
import math
from typing import Optional

from schedc.errors import SchedcError
from schedc.frameworks._base import (SCHEDULE_NAMES, Build, Framework, Handoff, check_per_rank,
                                     check_positive, check_v, microbatches, schedule_name)
from schedc.frameworks._names import VOCABULARIES, check_module_names, in_own_names

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
PLAN_NAMES = {"loop": "1F1B", "v": "ZBVZeroBubble"}
_AC = {"none": False, "full": True, "selective": "selective"}  # what parse_distributed_section reads


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
            raise SchedcError("nemo: with layers_per_stage the stage count depends on the model; give --layers")
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
    """The ``distributed`` and ``step_scheduler`` sections of the recipe's YAML that build the plan's
    stages, run its CSV and set what the plan assumed; ``warnings`` lists what they cannot set."""
    check_module_names(h.partition)
    partition, warnings = in_own_names(h.partition, "hf", "NeMo AutoModel")
    a, mbs = h.assumes, h.microbatch_size
    pipeline = {"pp_schedule": PLAN_NAMES[h.placement], "pp_schedule_csv": h.csv, "pp_microbatch_size": mbs,
                "module_fqns_per_model_part": partition}
    if a.get("seq_len"):
        pipeline["pp_seq_len"] = int(a["seq_len"])
    else:
        warnings.append("the profile does not record its sequence length: set distributed.pipeline.pp_seq_len "
                        "and the dataset's length to the one it was profiled at")
    distributed = {"pp_size": h.n_ranks, "tp_size": int(a.get("tp") or 1), "dp_size": int(a.get("dp_shard") or 1)}
    mode = h.ac_mode()
    if mode is not None:
        distributed["activation_checkpointing"] = _AC[mode]
    else:
        warnings.append(f"the plan checkpoints activations differently per stage or layer "
                        f"({h.ac_summary()}); NeMo AutoModel applies one mode to every layer: run the plan "
                        "under schedc's runtime or plan with one --ac mode")
    warnings += h.common_warnings(NAME, "hf", "NeMo AutoModel")
    return {"distributed": {**distributed, "pipeline": pipeline},
            "step_scheduler": {"local_batch_size": h.n_microbatches * mbs}, "warnings": warnings}


def yaml_text(s: dict) -> str:
    """The two sections as YAML (flow-style lists for the partition), as the recipe's loader reads them."""
    d, p = s["distributed"], s["distributed"]["pipeline"]
    lines = ["distributed:"]
    for key in ("pp_size", "tp_size", "dp_size", "activation_checkpointing"):
        if key in d:
            lines.append(f"  {key}: {json.dumps(d[key])}")
    lines.append("  pipeline:")
    lines += [f"    {key}: {json.dumps(value)}" for key, value in p.items() if key != "module_fqns_per_model_part"]
    lines.append("    module_fqns_per_model_part:")
    if any(name.startswith("model.") for stage in p["module_fqns_per_model_part"] for name in stage):
        # per-unit profiles leave out modules every stage keeps (a merge would repeat them)
        lines.append("      # NeMo's own split also puts model.rotary_emb on every stage: add it to each list "
                     "if your model has one")
    lines += [f"      - {json.dumps(stage)}" for stage in p["module_fqns_per_model_part"]]
    lines += ["step_scheduler:", f"  local_batch_size: {s['step_scheduler']['local_batch_size']}"]
    return "\n".join(lines)


def render(s: dict) -> str:
    lines = [f"{FRAMEWORK.label} (YAML; dp_size is the data-parallel degree FSDP2 shards over):"]
    lines += ["  " + line for line in yaml_text(s).splitlines()]
    return "\n".join(lines + [f"  warning: {w}" for w in s.get("warnings", [])])


FRAMEWORK = Framework(name=NAME, label="NeMo AutoModel 0.7.0", v_names=V_NAMES, plan_names=PLAN_NAMES, fields=FIELDS,
                      unit_names=VOCABULARIES["hf"], build=build, settings=settings, render=render)
