"""torchtitan 0.3.0: the stages it builds from its settings, and the flags that launch a plan.

Rules read from the installed sources (line numbers of that release):
``torchtitan/distributed/pipeline_parallel.py``: single-stage schedule names build 1 stage per rank,
the others 2 (L205-206, L258-263) unless ``pipeline_parallel_layers_per_stage`` K is set: then
stages = ceil((layers + first_less + last_less) / K) (L219-225), a multiple of the PP degree
(L233-240), exactly 1 per rank for single-stage names (L244-250), at least 2 otherwise (L252-257);
an explicit ``module_fqns_per_model_part`` sets the stage count (L88-92, L621).
``_generate_llm_fqn_per_model_part`` (L366-428): stages <= layers + first_less + last_less, and neither
"less" weight may exceed floor((layers + first_less + last_less) / stages). V placement for
ZBVZeroBubble and DualPipeV (L559-576), loop otherwise. ``training.local_batch_size`` must be
divisible by ``pipeline_parallel_microbatch_size`` (trainer.py L124-139).
``trainer.py`` L179-187: with a PP degree above 1 the config is refused unless
``training.disable_cuda_graphs`` is set. ``config/configs.py``: ``seq_len`` 2048,
``data_parallel_shard_degree`` -1 (FSDP over the GPUs left), first/last less 1; the registered
configs choose their own activation checkpointing (``llama3_8b``: selective), a tyro subcommand
``activation_checkpoint:{none,selective,full}`` (distributed/activation_checkpoint.py L190-197).
``config/manager.py`` ``register_tyro_rules``: a ``list[str]`` flag is one argument split at commas.
``models/llama3/parallelize.py``: FSDP2 wraps every block at any shard degree, 1 included (:func:`_fsdp`);
``distributed/parallel_dims.py`` ``_validate``: the degrees' product must be the world size.

Releases after 0.3.0 count a batch in tokens: pytorch/torchtitan#4121 ("fold batch dim", merged on
main 2026-08-17) renames ``parallelism.pipeline_parallel_microbatch_size`` (sequences per microbatch)
to ``parallelism.num_pp_microbatches`` (how many microbatches), ``training.local_batch_size``
(sequences per data-parallel rank and accumulation step) to
``training.num_tokens_per_microbatch_per_dp_rank`` (token slots of one microbatch's forward) and
``training.seq_len`` to ``training.max_context_length`` (main's ``torchtitan/config/configs.py`` at
1a618d1d, ``config/parallelism.py`` at b3508e23). :func:`flag_release` picks the names of the
installed release, or of the one ``--for torchtitan==VERSION`` names; the stage rules above are
unchanged there.

Cost: constant per name; rendering is linear in the number of module names.
"""

from __future__ import annotations

import importlib.metadata
import math
import re
import shlex
from typing import Optional

from schedc.errors import ParameterError, SchedcError, literal, printable, python_spelling
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
from schedc.frameworks._names import VOCABULARIES, check_module_names, in_own_names

NAME = "torchtitan"
FIELDS = {
    "schedule": "--parallelism.pipeline_parallel_schedule",
    "layers": "the model's n_layers",
    "layers_per_stage": "--parallelism.pipeline_parallel_layers_per_stage",
    "first_less": "--parallelism.pipeline_parallel_first_stage_less_layers",
    "last_less": "--parallelism.pipeline_parallel_last_stage_less_layers",
    "local_batch_size": "--training.local_batch_size",
    "microbatch_size": "--parallelism.pipeline_parallel_microbatch_size",
    "ranks": "--parallelism.pipeline_parallel_degree",
    "partition": "--parallelism.module_fqns_per_model_part",
}
V_NAMES = ("ZBVZeroBubble", "DualPipeV")


@python_spelling
def build(
    schedule: str,
    n_ranks: int,
    layers: Optional[int] = None,
    layers_per_stage: Optional[int] = None,
    first_less: int = 1,
    last_less: int = 1,
    local_batch_size: Optional[int] = None,
    microbatch_size: int = 1,
    partition: Optional[int] = None,
) -> Build:
    """What torchtitan 0.3.0's ``pipeline_llm`` builds; its start-up errors as SchedcError.
    ``partition``: the number of parts of an explicit ``module_fqns_per_model_part`` (e.g. from
    ``schedc plan``), which then sets the stage count."""
    name = schedule_name(schedule)
    single = SCHEDULE_NAMES[name]
    check_positive(NAME, FIELDS, layers=layers, layers_per_stage=layers_per_stage, first_less=first_less,
                   last_less=last_less)
    if partition is not None:
        n_stages = partition
        check_per_rank(NAME, name, single, n_stages, n_ranks, f"{FIELDS['partition']} with {n_stages} parts")
        layers = None  # the explicit list replaces the default split and its checks
    elif layers_per_stage is not None:
        if layers is None:
            raise ParameterError("layers", "torchtitan: with layers_per_stage the stage count depends on the model; "
                                 "give {param} as well")
        n_stages = math.ceil((layers + first_less + last_less) / layers_per_stage)
        check_per_rank(NAME, name, single, n_stages, n_ranks,
                       f"{layers} layers + first_less {first_less} + last_less {last_less} over "
                       f"{FIELDS['layers_per_stage']} {layers_per_stage}")
    else:
        n_stages = n_ranks * (1 if single else 2)
    if layers is not None and n_stages > 1:
        effective = layers + first_less + last_less
        if n_stages > effective:
            raise SchedcError(f"torchtitan: {n_stages} stages exceed {layers} layers + first_less {first_less} "
                              f"+ last_less {last_less} = {effective}")
        if max(first_less, last_less) > effective // n_stages:
            raise SchedcError(f"torchtitan: first_less {first_less} / last_less {last_less} exceed the "
                              f"{effective // n_stages} layers each of {n_stages} stages gets")
    placement = "v" if name in V_NAMES else "loop"
    check_v(NAME, name, placement, n_stages, n_ranks)
    n_microbatches = microbatches(NAME, FIELDS, local_batch_size, microbatch_size)
    return Build(NAME, name, n_ranks, n_stages, placement, n_microbatches)


def default_partition(n_stages: int, layers: int, first_less: int = 1, last_less: int = 1) -> list[list[str]]:
    """The split torchtitan builds without ``module_fqns_per_model_part`` (``_generate_llm_fqn_per_model_part``):
    layers + first_less + last_less spread evenly, the first stages taking the remainder, the embedding
    weighing first_less layers on stage 0 and norm + head last_less on the last stage."""
    embed, layer, head = VOCABULARIES["torchtitan"]
    if n_stages == 1:
        return [[embed] + [layer.format(i) for i in range(layers)] + list(head)]
    base, extra = divmod(layers + first_less + last_less, n_stages)
    out, current = [], 0
    for s in range(n_stages):
        take = base + (s < extra) - (first_less if s == 0 else 0) - (last_less if s == n_stages - 1 else 0)
        names = [layer.format(i) for i in range(current, min(layers, current + max(take, 0)))]
        current += len(names)
        out.append(([embed] if s == 0 else []) + names + (list(head) if s == n_stages - 1 else []))
    return out


RELEASE = "0.3.0"  # the release whose sources the rules above were read from
TOKEN_RELEASE = "main"  # what the names of pytorch/torchtitan#4121 are called in `--for torchtitan==main`


def installed_version() -> Optional[str]:
    """The installed torchtitan's version (its package metadata; nothing imported), or None."""
    try:
        return importlib.metadata.version("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        return None


def flag_release(version: Optional[str]) -> str:
    """``"0.3.0"`` for 0.3.x and earlier (and when torchtitan is not installed), ``"main"`` for a
    release past 0.3 or ``main``, whose flags count a microbatch in tokens (pytorch/torchtitan#4121).
    A version that is not a release number is a SchedcError naming ``--for``."""
    if version is None:
        return RELEASE
    if version.strip().lower() == TOKEN_RELEASE:
        return TOKEN_RELEASE
    m = re.fullmatch(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?([.+\-]?[0-9A-Za-z.+\-]*)", version.strip())
    if not m:
        raise ParameterError("framework", f"torchtitan=={literal(printable(version)[:40])}: expected a release number "
                                          f"(e.g. 0.3.0) or {TOKEN_RELEASE}", flag="--for")
    release = tuple(int(g or 0) for g in m.groups()[:3])
    return TOKEN_RELEASE if release > (0, 3, 99) else RELEASE


_SEQ_FIELDS = ("training.seq_len", "training.max_context_length")


def _batch_fields(h: Handoff, release: str, warnings: list[str]) -> dict:
    """The batch settings in the names of `release`: 0.3.0 counts sequences (microbatch size,
    local batch), PR 4121 counts microbatches and tokens (a microbatch is mbs x seq token slots)."""
    a, mbs = h.assumes, h.microbatch_size
    seq = int(a["seq_len"]) if a.get("seq_len") else None
    if release == RELEASE:
        out = {"parallelism.pipeline_parallel_microbatch_size": mbs,
               "training.local_batch_size": h.n_microbatches * mbs}
        seq_field = "training.seq_len"
    else:
        out = {"parallelism.num_pp_microbatches": h.n_microbatches}
        if seq is not None:
            out["training.num_tokens_per_microbatch_per_dp_rank"] = mbs * seq
        seq_field = "training.max_context_length"
    if seq is not None:
        out[seq_field] = seq
    else:
        tokens = "" if release == RELEASE else (f" and --training.num_tokens_per_microbatch_per_dp_rank to {mbs} x "
                                                "that length")
        warnings.append(f"the profile does not record its sequence length: set --{seq_field} to the one it was "
                        f"profiled at{tokens} (torchtitan's configs default to theirs, e.g. 8192 for llama3_8b)")
    return out


def settings(h: Handoff) -> dict:
    """The config fields (``section.field``) and the command-line flags that build the plan's stages,
    run its CSV and set what the plan assumed, in the names of the installed release (or of the
    ``framework_version`` the plan's ``assumes`` names for torchtitan); ``warnings`` lists what the
    flags cannot set."""
    check_module_names(h.partition)
    partition, warnings = in_own_names(h.partition, "torchtitan", "torchtitan")
    a = h.assumes
    asked = a.get("framework_version") if a.get("framework") == NAME else None
    release = flag_release(asked if asked is not None else installed_version())
    batch = _batch_fields(h, release, warnings)
    config = {
        "parallelism.module_fqns_per_model_part": partition,
        "parallelism.pipeline_parallel_degree": h.n_ranks,
        "parallelism.pipeline_parallel_schedule": PLAN_NAMES[h.placement],
        "parallelism.pipeline_parallel_schedule_csv": h.csv,
        **{k: v for k, v in batch.items() if k.startswith("parallelism.")},
        "parallelism.data_parallel_shard_degree": int(a.get("dp_shard") or 1),
        "parallelism.tensor_parallel_degree": int(a.get("tp") or 1),
        **{k: v for k, v in batch.items() if k.startswith("training.") and k not in _SEQ_FIELDS},
        "training.disable_cuda_graphs": True,  # torchtitan refuses PP with CUDA graphs
        **{k: v for k, v in batch.items() if k in _SEQ_FIELDS},
    }
    warnings += _dtypes(a, config) + _fsdp(a)
    mode = h.ac_mode(FRAMEWORK.ac_modes)
    if mode is not None:
        config["activation_checkpoint"] = mode
    else:
        warnings.append(h.ac_warning("torchtitan", FRAMEWORK.ac_modes, FRAMEWORK.ac_default))
    warnings += h.common_warnings(NAME, "torchtitan", "torchtitan")
    world = h.n_ranks * config["parallelism.tensor_parallel_degree"] * config["parallelism.data_parallel_shard_degree"]
    return {"release": release, "config": config, "command_line": command_line(config), "world_size": world,
            "warnings": warnings}


_TITAN_DTYPES = ("bfloat16", "float32")  # what training.dtype / mixed_precision_param accept


def _dtypes(assumes: dict, config: dict) -> list[str]:
    """``training.mixed_precision_param`` (the compute dtype FSDP's policy casts to; torchtitan's llama3
    always installs it, parallelize.py) from the activation dtype, and ``training.dtype`` (how
    parameters, gradients and optimizer states are stored) from the parameter dtype: float32
    storage where the plan counted float32 parameters or float32 master weights;
    ``training.mixed_precision_reduce`` (FSDP's gradient reduction, float32 only in 0.3.0). FSDP2
    keeps the reduced gradients, and torch's optimizers their states, in the storage dtype: a
    gradient or optimizer dtype the plan counted otherwise is a warning. Returns warnings."""
    out = []
    act, param, grad, opt = (assumes.get(k) for k in ("activation_dtype", "param_dtype", "grad_dtype",
                                                      "optimizer_dtype"))
    if act in _TITAN_DTYPES:
        config["training.mixed_precision_param"] = act
    elif act is not None:
        out.append(f"the plan counts {ascii(act)[:20]} activations; torchtitan computes in bfloat16 or float32")
    storage = None
    if param == "float32" or (param == "bfloat16" and assumes.get("master_weights")):
        storage = config["training.dtype"] = "float32"
    elif param == "bfloat16":
        storage = config["training.dtype"] = "bfloat16"
    elif param is not None:
        out.append(f"the plan counts {ascii(param)[:20]} parameters; torchtitan stores bfloat16 or float32")
    if grad == "float32":
        config["training.mixed_precision_reduce"] = "float32"
    if storage and grad and grad != storage:
        out.append(f"the plan counts {ascii(grad)[:20]} gradients; torchtitan keeps them in training.dtype {storage}")
    if storage and opt and opt != storage and assumes.get("optimizer") not in ("sgd", "none"):
        out.append(f"the plan counts {ascii(opt)[:20]} optimizer states; torchtitan keeps them in training.dtype "
                   f"{storage}")
    return out


def _fsdp(assumes: dict) -> list[str]:
    """torchtitan 0.3.0 wraps every block in FSDP2 whatever ``data_parallel_shard_degree`` is:
    ``parallelize_llama`` / ``parallelize_qwen3`` always call ``apply_fsdp_to_decoder`` (for its
    mixed-precision policy; ``ParallelDims.fsdp_enabled`` is not asked), ``ParallelDims`` keeps the
    shard mesh alive at size 1, and FSDP2 at shard size 1 still copies the weights into
    ``all_gather_outputs``. Under torch's pipelining each rank so holds :func:`fsdp_held` bytes per
    parameter, with float32 gradients (``training.mixed_precision_reduce`` takes nothing else). A
    warning where the plan counted fewer. Cost: O(1)."""
    act = assumes.get("activation_dtype")
    dtypes = (act, "float32") if act in _TITAN_DTYPES else None
    amount = fsdp_shortfall(assumes, dtypes)
    if amount is None:
        return []
    return [f"torchtitan wraps every block in FSDP2 at any data_parallel_shard_degree, 1 included "
            f"(models/llama3/parallelize.py: apply_fsdp_to_decoder always runs), and reduces in float32: under "
            f"pipeline parallelism each rank holds its stages' weights again in the compute dtype and their "
            f"gradients unsharded all step, {amount}: {count_advice(NAME, 'torchtitan', assumes, dtypes)}"]


def command_line(config: dict) -> list[str]:
    """The flags, one list argument per stage (torchtitan splits each at commas); the
    activation-checkpointing subcommand last, after a flag that takes one value, since a list
    flag would swallow it as one more stage."""
    args = []
    for key, value in config.items():
        if key == "activation_checkpoint":
            continue
        if value is True:
            args.append(f"--{key}")
        elif isinstance(value, list):
            args += [f"--{key}"] + [",".join(stage) for stage in value]
        else:
            args += [f"--{key}", str(value)]
    if "activation_checkpoint" in config:
        args.append(f"activation_checkpoint:{config['activation_checkpoint']}")
    return args


def _shell_quote(arg: str) -> str:
    """``shlex.quote``, or bash's ``$'...'`` with escapes where the argument holds a control
    character (a CSV name with a newline): the same argument, printed on one line."""
    if printable(arg) == arg:
        return shlex.quote(arg)
    return "$'" + "".join("\\" + c if c in "\\'" else printable(c) for c in arg) + "'"


def render(s: dict) -> str:
    groups: list[list[str]] = []
    for arg in s["command_line"]:  # one flag and its values a line, the subcommand on its own
        if arg.startswith("--") or arg.startswith("activation_checkpoint:") or not groups:
            groups.append([])
        groups[-1].append(_shell_quote(arg))
    label = FRAMEWORK.label if s.get("release", RELEASE) == RELEASE else \
        "torchtitan main (the token-counted flags of pytorch/torchtitan#4121)"
    lines = [f"{label} (after --module and --config of your registered model; these override them):"]
    lines += ["  " + " ".join(g) + (" \\" if k < len(groups) - 1 else "") for k, g in enumerate(groups)]
    if s.get("world_size"):  # ParallelDims._validate asserts dp_replicate * dp_shard * cp * tp * pp == WORLD_SIZE
        lines.append(f"  launch on exactly {s['world_size']} GPUs (pipeline x tensor x data-parallel shard degrees): "
                     "torchtitan refuses any other world size")
    return "\n".join(lines + [f"  warning: {w}" for w in s.get("warnings", [])])


PLAN_NAMES = {"loop": "1F1B", "v": "ZBVZeroBubble", "interleaved": "Interleaved1F1B"}  # a plan's placement -> its class
def default_split(n_stages: int, layers: int, layers_per_stage: Optional[int] = None, first_less: Optional[int] = None,
                  last_less: Optional[int] = None, **_) -> Optional[list[list[str]]]:
    """:func:`default_partition` under the settings validate takes; None where it does not apply
    (``layers_per_stage`` set, or settings torchtitan would refuse)."""
    if layers_per_stage is not None or layers < 1:
        return None
    first, last = 1 if first_less is None else first_less, 1 if last_less is None else last_less
    effective = layers + first + last
    if n_stages < 1 or n_stages > effective or max(first, last) > effective // n_stages:
        return None
    return default_partition(n_stages, layers, first, last)


FRAMEWORK = Framework(
    name=NAME, label="torchtitan 0.3.0", v_names=V_NAMES, plan_names=PLAN_NAMES, fields=FIELDS, vocabulary="torchtitan",
    build=build, settings=settings, render=render, default_split=default_split, release=flag_release,
    # models/llama3/parallelize.py parallelize_llama always calls apply_fsdp_to_decoder (for its
    # MixedPrecisionPolicy), ParallelDims keeps a size-1 fsdp mesh
    fsdp=True,
    # the activation_checkpoint:{none,selective,full} subcommand (distributed/activation_checkpoint.py)
    ac_modes=("none", "selective", "full"),
    # without an activation_checkpoint: subcommand the registered config's own (config_registry.py)
    ac_default="its registered config's own (llama3_8b: selective, llama3_70b and llama3_405b: full)",
    spec_help="torchtitan:NAME (0.3.0)")
