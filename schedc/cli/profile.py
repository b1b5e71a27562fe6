"""`schedc profile`: measure each stage (or each unit) of a model, or count a model's units from
arithmetic, and write a profile JSON."""

from __future__ import annotations

import math
import os
import sys
from typing import Optional

from schedc.cli import common
from schedc.core.costs import MemoryLimit, Profile
from schedc.core.formatting import format_bytes, format_seconds
from schedc.errors import SchedcError

# --calibrate, here and on schedc plan --config
CALIBRATE_HELP = ("counted: scale the count's F, I and W per unit kind (embedding, layer, head) and action by a "
                  "per-unit profile measured on a GPU (schedc profile --units --model ...) of this model truncated to "
                  "a few layers, at the same --seq, --mbs and --dtype; memory stays as counted; the factors and the "
                  "file's sha256 are recorded in \"assumes\"")
# --gpu, here and on schedc plan --config
GPU_HELP = ("counted: price F, I and W from their operations at this card's per-op rates (schedc.core.device_rates: "
            "h100, h200; a fit of the project's GPU measurements) instead of one FLOP rate (--flops); "
            "\"assumes\" records the time model")
# What a measured profile splits the model into and runs per microbatch when not told (no function
# under the command has a default for them); the model's own shape defaults are GPTConfig's.
MEASURED_DEFAULTS = {"stages": 2, "mbs": 4}
# shape flags -> the parameter names a --model function (and every example) takes
MODEL_PARAMS = {"layers": "layers", "hidden": "hidden", "heads": "heads", "kv_heads": "kv_heads",
                "ffn": "ffn_hidden", "seq": "seq_len", "vocab": "vocab_size"}
ARITHMETIC_ONLY = ("head_dim", "mlp", "tied_embeddings", "names", "memory_bandwidth", "impl", "dp_shard", "tp",
                   "param_dtype", "calibrate", "gpu")
# the counted route's integer flags and the most each may be (beyond any model; keeps counts finite and fast)
COUNTED_INTS = {"layers": 8190, "hidden": 2**24, "heads": 2**24, "kv_heads": 2**24, "head_dim": 2**24,
                "ffn": 2**24, "vocab": 2**24, "seq": 2**24, "mbs": 2**16, "dp_shard": 2**20, "tp": 2**16}
# the measured route's integer flags: (least, most); the most keeps a measurement finite (a
# model that fits a host, a run that ends) and is beyond any profile worth taking
MEASURED_INTS = {"stages": (1, 4096), "mbs": (1, 2**16), "layers": (1, 8190), "hidden": (1, 2**16),
                 "heads": (1, 2**12), "seq": (1, 2**20), "vocab": (1, 2**22), "warmup": (0, 10_000),
                 "repeats": (1, 10_000), "concurrent": (1, 256), "threads": (1, 4096)}
# the measured route's number flags: the most each may be
MEASURED_FLOATS = {"comm_latency": 3600.0, "optimizer_bytes": 1024.0}
# what the default --comm-bandwidth stands for
COMM_BANDWIDTH_HELP = ("40GB/s for a counted profile: about one 400 Gb/s InfiniBand or RoCE NIC per GPU, a pipeline "
                       "link across nodes; within a node NVLink gives about 450GB/s per direction (H100/H200 NVLink 4), "
                       "PCIe 4.0 x16 about 25GB/s")


def register(sub) -> None:
    p = sub.add_parser("profile", help="measure each stage's (or unit's) F, I, W time and memory, or count a "
                                       "model's units from arithmetic; write a profile JSON")
    p.set_defaults(handler=run)
    common.add_gpt_args(p)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default cpu; a counted profile follows "
                                                 "CUDA's kernels, or the CPU's with --device cpu)")
    p.add_argument("--optimizer", default=None, help="optimizer whose state counts in static bytes: "
                   "adamw, adam, sgd, sgd-momentum, none (default adamw)")
    p.add_argument("--warmup", type=int, default=None, help="untimed runs per stage (default 2)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per stage; the median is kept (default 5)")
    p.add_argument("--comm-bandwidth", metavar="B/s", default=None,
                   help="link bandwidth for boundary activations, e.g. 25GB/s (default: comm is free when measured; "
                        + COMM_BANDWIDTH_HELP + ")")
    p.add_argument("--comm-latency", metavar="S", type=float, default=None,
                   help="seconds per transfer, added to every boundary's time (default 0; a few microseconds "
                        "within a node, about 10-20us across nodes)")
    p.add_argument("--comm-measure", action="store_true",
                   help="measure send/recv between ranks 0 and 1 (run under torchrun --nproc-per-node 2)")
    p.add_argument("--concurrent", type=int, default=None, metavar="N",
                   help="CPU: measure in N processes at once, as N ranks sharing this host will run (default 1)")
    p.add_argument("--reserve", metavar="BYTES", default=None,
                   help="bytes a rank holds outside torch's allocator (CUDA context, workspaces, NCCL), e.g. 1.2GiB "
                        "(default on CUDA: measured, at least 1.54 GiB; none on CPU)")
    p.add_argument("-o", "--output", metavar="P.json", required=True, help="profile file to write")
    g = p.add_argument_group("your own model (instead of the built-in GPT; schedc.runtime.user_model)")
    g.add_argument("--model", metavar="MODULE:FUNCTION",
                   help="returns the stage modules, or {'model': m, 'split': [[module names], ...]} with optional "
                        "'sample', 'target', 'loss_fn'; it is passed n_stages (--stages), microbatch_size (--mbs), "
                        "dtype (--dtype) if it takes them, and --layers, --hidden, --heads, --kv-heads, --ffn, --seq, "
                        "--vocab when given as layers, hidden, heads, kv_heads, ffn_hidden, seq_len, vocab_size; "
                        "e.g. examples/llama.py:stages")
    g.add_argument("--sample", metavar="MODULE:FUNCTION", help="returns one microbatch for stage 0 (or (sample, target))")
    g.add_argument("--model-arg", metavar="KEY=VALUE", action="append", default=[],
                   help="extra keyword argument for the --model/--sample functions (repeatable); one that neither "
                        "takes is an error")
    u = p.add_argument_group("per-unit profiles (the input of schedc plan): units are the embedding, each layer, "
                             "the final norm + head + loss, each with its module names")
    u.add_argument("--units", action="store_true",
                   help="measure every unit as its own stage (built-in GPT or --model with a 'split'); identical "
                        "layers are measured once")
    u.add_argument("--all-units", action="store_true", help="with --units: measure every layer, not one per kind")
    u.add_argument("--config", metavar="config.json",
                   help="arithmetic per-unit profile of a Hugging Face config.json (nothing downloaded; needs --seq)")
    u.add_argument("--flops", metavar="FLOP/s", type=float, default=None,
                   help="effective FLOP/s of one device: an arithmetic per-unit profile (default with --config: "
                        "400e12, an H100 at about 40%%); without --config give --layers, --hidden, --vocab, --seq")
    u.add_argument("--memory-bandwidth", metavar="B/s", default=None,
                   help="arithmetic: device memory bandwidth, for the embedding and the memory-bound ops that light "
                        "and selective checkpointing recompute (default 2TB/s)")
    u.add_argument("--optimizer-bytes", metavar="N", type=float, default=None,
                   help="optimizer bytes per parameter (arithmetic default 12: fp32 master weights + Adam's "
                        "two moments); weights in --dtype and fp32 gradients come on top (measured default: what "
                        "the modules hold, --optimizer's states in the parameters' dtype)")
    u.add_argument("--kv-heads", type=int, default=None, help="key/value heads (GQA; default: --heads)")
    u.add_argument("--head-dim", type=int, default=None, help="arithmetic: per-head width (default hidden/heads)")
    u.add_argument("--ffn", type=int, default=None, help="FFN width (default 4 x hidden)")
    u.add_argument("--mlp", choices=("swiglu", "gelu"), default=None, help="arithmetic: MLP kind (default swiglu)")
    u.add_argument("--tied-embeddings", action="store_true", default=None,
                   help="arithmetic: the LM head shares the embedding's matrix")
    _add_run_settings(u)
    u.add_argument("--calibrate", metavar="MEASURED.json", default=None, help=CALIBRATE_HELP)
    u.add_argument("--gpu", metavar="NAME", default=None, help=GPU_HELP)
    from schedc.model_costs import UNIT_NAMES  # with the vocabulary of each registered framework

    others = [k for k in UNIT_NAMES if k not in ("torchtitan", "hf")]
    u.add_argument("--names", choices=tuple(UNIT_NAMES), default=None,
                   help="arithmetic: module names of the units: torchtitan's (tok_embeddings, layers.N, norm, "
                        "lm_head; default) or Hugging Face / NeMo AutoModel's (model.embed_tokens, model.layers.N, "
                        "model.norm, lm_head)" + "".join(f", or {k}'s" for k in others))


def _add_run_settings(u) -> None:
    """The counted route's flags for the run the profile is for."""
    from schedc import api
    from schedc.frameworks import targets

    u.add_argument("--for", dest="framework", metavar="FRAMEWORK", default=None,
                   help="counted: the framework that will run the plan, whose memory the count follows: "
                        f"{', '.join(targets())} (torchtitan and nemo wrap every block in FSDP2 at shard degree 1 "
                        "too; nemo runs Hugging Face's modules and names; schedc: its own runtime; NAME==VERSION: "
                        "that release's flags, e.g. torchtitan==main); recorded in the profile's \"assumes\" "
                        f"(default {common.defaults_of(api.count_profile)['framework']})")
    u.add_argument("--impl", choices=("hf", "torchtitan", "paper"), default=None,
                   help="counted: whose code runs the model, which decides what it keeps: hf (Hugging Face "
                        "transformers' modules, as NeMo AutoModel trains them), torchtitan (its own model code), "
                        "paper (the textbook count); default: the framework of --names")
    u.add_argument("--ac", metavar="MODE", default=None,
                   help="activation checkpointing per layer: none (default), light (every matmul's and "
                        "attention's output saved, the memory-bound ops recomputed; schedc's runtime only), selective "
                        "(torchtitan's op-level policy: every other matmul and attention saved), full (the layer's "
                        "input only; I and W recompute its forward); counted: or a comma-separated list, one per "
                        "layer; measured: one mode for every layer unit (light and selective with --units: F and the "
                        "whole backward measured, W the layer's without checkpointing, I = B - W)")
    u.add_argument("--dp-shard", type=int, default=None, metavar="N",
                   help="counted: FSDP2 shard degree: divides params, gradients and optimizer states, and adds "
                        "the stage's weights and gradients FSDP2 holds unsharded under pipelining (default 1)")
    u.add_argument("--tp", type=int, default=None, metavar="N",
                   help="counted: tensor-parallel degree, with sequence parallelism: divides weights and "
                        "activations (default 1)")
    u.add_argument("--param-dtype", default=None,
                   help="counted: dtype the parameters are stored in (default --dtype, i.e. the config's; "
                        "torchtitan under FSDP keeps float32)")


def _given(args, names) -> list[str]:
    """The flags among `names` (dest names) that the user typed."""
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n, None) not in (None, False)]


def run(args) -> int:
    if args.all_units and not args.units:
        raise SchedcError("--all-units goes with --units (it measures every layer of a per-unit profile)")
    if args.config or args.flops is not None:
        return _run_arithmetic(args)
    if _given(args, ARITHMETIC_ONLY):
        raise SchedcError(f"{_given(args, ARITHMETIC_ONLY)[0]} describes an arithmetic profile; add --config "
                          f"config.json or --flops FLOP/s, or drop it to measure")
    if args.framework is not None:  # a measurement holds what it measured, whoever runs the plan
        raise SchedcError("--for counts memory as a framework holds it: add --config config.json or --flops FLOP/s; "
                          "for a measured profile give --for to schedc plan, which names the target")
    _check_measured_numbers(args)  # before torch is imported, a file is touched or anything measured
    _measured_ac(args)  # before torch is imported or any group is made
    common.require_torch("schedc profile")
    common.check_outputs(args, (args.output, "-o"))  # before minutes of measuring
    common.check_json_output(args.output, "a profile")
    import torch

    from schedc.cli.progress import StderrProgress
    from schedc.runtime.profiling.assemble import profile_stages, profile_units
    from schedc.runtime.profiling.gpt import profile_gpt
    from schedc.runtime.profiling.measurement import Measurement

    args.device = args.device or Measurement().device  # the profiler's

    device_is_cpu = args.device == "cpu"
    if args.threads is not None or device_is_cpu:
        # one thread per rank by default: the ranks schedc runs on a CPU host (emulate, calibrate)
        # each use one, and torch's default (every core) oversubscribes a host its ranks share
        torch.set_num_threads(args.threads or 1)
    bandwidth = _parse_bandwidth(args.comm_bandwidth)
    rank = 0
    progress = StderrProgress()
    if not args.model:
        if _given(args, ("kv_heads", "ffn")):
            raise SchedcError(f"{_given(args, ('kv_heads', 'ffn'))[0]}: the built-in GPT has full attention and a "
                              f"4 x hidden MLP; this flag is for --model or an arithmetic profile (--config/--flops)")
        if args.units and args.stages is not None:
            raise SchedcError("--stages does not apply to --units: every unit is measured as its own stage")
        if args.model_arg or args.sample:
            raise SchedcError(f"{'--model-arg' if args.model_arg else '--sample'} goes with --model")
    if args.comm_measure:
        import torch.distributed as dist

        if "RANK" not in os.environ:
            raise SchedcError("--comm-measure: launch with torchrun --nproc-per-node 2 (RANK is not set)")
        from schedc.runtime.launch import init_group

        dev = init_group("nccl" if args.device.startswith("cuda") else "gloo", timeout=600.0)
        rank = dist.get_rank()
        if dev.type == "cuda":
            args.device = str(dev)  # each rank measures on its own GPU
    measure = dict(settings=_run_settings(args), progress=progress if rank == 0 else None,
                   measurement=Measurement().but(device=args.device, comm="measure" if args.comm_measure else None,
                                                 comm_bandwidth=bandwidth, comm_latency=args.comm_latency,
                                                 warmup=args.warmup, repeats=args.repeats, concurrent=args.concurrent))
    try:
        if args.model:
            profile = _measure_user_model(args, measure, profile_stages, profile_units)
        else:
            profile = profile_gpt(common.gpt_config_from_args(args), _or_default(args, "stages"),
                                  measure["settings"].microbatch_size, units=args.units,
                                  reuse_layers=not args.all_units, **measure)
    finally:
        progress.done()
        if args.comm_measure:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
    if rank != 0:
        return 0
    return _write(profile, args.output)


def _or_default(args, name: str) -> int:
    """--stages / --mbs as given (0 is refused before), else the measured route's default."""
    value = getattr(args, name)
    return MEASURED_DEFAULTS[name] if value is None else value


def _check_measured_numbers(args) -> None:
    """One line naming the flag for a number the measured route cannot use: out of its range
    (:data:`MEASURED_INTS`), not finite, negative or beyond :data:`MEASURED_FLOATS`; --comm-bandwidth
    and --reserve as their parsers read them."""
    for name, (least, most) in MEASURED_INTS.items():
        value = getattr(args, name, None)
        if value is not None and not least <= value <= most:
            said = str(value) if abs(value) < 10**12 else f"a {len(str(abs(value)))}-digit number"
            raise SchedcError(f"--{name} must be between {least} and {most} for a measured profile, got {said}")
    for name, ceiling in MEASURED_FLOATS.items():
        value = getattr(args, name, None)
        if value is not None and not (math.isfinite(value) and 0 <= value <= ceiling):
            raise SchedcError(f"--{name.replace('_', '-')} must be a finite number >= 0 and at most {ceiling:g}, "
                              f"got {value!r}")
    _parse_bandwidth(args.comm_bandwidth)
    _reserve_bytes(args)


def _run_settings(args, layers: Optional[int] = None):
    """The run the profile is for, from the flags: the one ``RunSettings`` each route hands down
    and records as ``assumes``. ``layers``: the counted route's model (its --ac may give one mode
    per layer); None: the measured route, whose modules hold what they hold (their dtype, the
    optimizer's state in it) unless --optimizer-bytes says otherwise (fp32 gradients beside it, as
    the counted route takes it), and whose sequence is the built-in GPT's config's or --seq."""
    from schedc.core.settings import RunSettings

    run = dict(optimizer=args.optimizer, optimizer_bytes_per_param=args.optimizer_bytes,
               reserve_bytes=_reserve_bytes(args))
    if layers is None:
        return RunSettings.of(**run, seq=args.seq if args.model else None, microbatch_size=_or_default(args, "mbs"),
                              grad_bytes_per_param=4.0 if args.optimizer_bytes is not None else None,
                              activation_checkpoint=_measured_ac(args))
    if args.gpu is not None and args.flops is not None:
        raise SchedcError("--gpu prices time at a card's per-op rates and --flops at one rate: give one or the other")
    return RunSettings.of(**run, seq=args.seq, microbatch_size=args.mbs, dtype=args.dtype, flops_per_second=args.flops,
                          gpu=args.gpu,
                          bandwidth=_parse_bandwidth(args.comm_bandwidth, "--comm-bandwidth"),
                          memory_bandwidth=_parse_bandwidth(args.memory_bandwidth, "--memory-bandwidth"),
                          latency=args.comm_latency, activation_checkpoint=_ac(args, layers), impl=args.impl,
                          device=_counted_device(args.device), dp_shard=args.dp_shard, tp=args.tp,
                          param_dtype=args.param_dtype, names=args.names, framework=args.framework)


def _measured_ac(args) -> str:
    """--ac of a measured profile: one mode for every layer unit (or stage); the per-op modes only
    on the per-unit route, whose layers run their backward whole (B), as torch must run them."""
    from schedc.core.costs import AC_MODES, PER_OP_AC

    if args.ac is None:
        return "none"
    if "," in args.ac:
        raise SchedcError(f"--ac: a measured profile takes one mode for every layer, got {args.ac[:40]!r}; measure "
                          f"each mode apart and plan with --ac auto --profile MODE=UNITS.json ...")
    if args.ac not in AC_MODES:
        raise SchedcError(f"--ac: {args.ac[:40]!r} is not a mode; use one of {', '.join(AC_MODES)}")
    if args.ac in PER_OP_AC and not args.units:
        raise SchedcError(f"--ac {args.ac}: a measured stage runs torch's split backward (I, then W), which cannot go "
                          f"twice through a layer checkpointed per op; measure per-unit profiles (--units --ac "
                          f"{args.ac}) or use --ac full")
    if args.ac != "none" and args.concurrent not in (None, 1):
        raise SchedcError(f"--ac {args.ac}: --concurrent measures without activation checkpointing; drop one of them")
    return args.ac


def _reserve_bytes(args) -> Optional[float]:
    """--reserve as bytes (None when not given)."""
    if args.reserve is None:
        return None
    if args.reserve.strip() == "0":
        return 0.0
    try:
        limit: Optional[MemoryLimit] = MemoryLimit.parse(args.reserve)
    except SchedcError:
        limit = None
    if limit is None or limit.kind != "bytes":
        raise SchedcError(f"--reserve: expected a byte size (e.g. 1.2GiB or 0), got {args.reserve[:40]!r}")
    return limit.value


def _measure_user_model(args, measure: dict, profile_stages, profile_units) -> Profile:
    from schedc.runtime.user_model import build_user_model, unit_modules

    if args.concurrent not in (None, 1):
        raise SchedcError("--concurrent measures the built-in GPT only; drop it with --model")
    explicit = {MODEL_PARAMS[k]: f"--{k.replace('_', '-')} {getattr(args, k)}" for k in MODEL_PARAMS
                if getattr(args, k) is not None}
    extra = common.model_args(args.model_arg)
    explicit.update({k: f"--model-arg {k}={v!r}" for k, v in extra.items()})
    explicit.update({p: f"--{f} {getattr(args, a)}" for a, f, p in
                     (("stages", "stages", "n_stages"), ("mbs", "mbs", "microbatch_size"), ("dtype", "dtype", "dtype"))
                     if getattr(args, a) is not None})
    from schedc.runtime.models import GPTConfig

    offered = {"n_stages": _or_default(args, "stages"),
               "microbatch_size": _or_default(args, "mbs"), "dtype": args.dtype or GPTConfig.dtype,
               **{MODEL_PARAMS[k]: getattr(args, k) for k in MODEL_PARAMS if getattr(args, k) is not None},
               **extra}
    user = build_user_model(args.model, args.sample, offered, explicit)
    if not args.units:
        _checkpoint_stages(user, measure["settings"].activation_checkpoint)
        return profile_stages(user.stages, user.sample, user.loss_fn, user.target,
                              model=f"{user.name}/{len(user.stages)} stages", **measure)
    modules, names, shared = unit_modules(user, args.model)
    return profile_units(modules, names, user.sample, user.loss_fn, user.target, reuse_layers=not args.all_units,
                         shared=shared, model=f"{user.name}/{len(names)} units", **measure)


def _checkpoint_stages(user, mode: str) -> None:
    """--ac on a --model's stages: each stage's blocks (modules named like layers.N), as load_pipeline
    checkpoints them; the stages of a split only (a list of modules names no blocks)."""
    from schedc.runtime.profiling.units import checkpoint_blocks

    if mode == "none":
        return
    if user.split is None:
        raise SchedcError(f"--ac {mode}: this --model returns stage modules without a split; return {{'model': m, "
                          f"'split': [[module names], ...]}} so that its blocks can be checkpointed")
    checkpoint_blocks(user.stages, user.split, mode, range(len(user.stages)))


def _run_arithmetic(args) -> int:
    from schedc import api

    for flag, given in (("--model", args.model), ("--comm-measure", args.comm_measure),
                        ("--concurrent", args.concurrent not in (None, 1)), ("--all-units", args.all_units)):
        if given:
            raise SchedcError(f"{flag} measures a model; --config/--flops count one from arithmetic: give one or the other")
    _check_counted_numbers(args)
    _counted_device(args.device)  # before a file is touched
    common.check_outputs(args, (args.output, "-o"))
    common.check_json_output(args.output, "a profile")
    shape = _counted_shape(args)
    if args.seq is None:
        raise SchedcError("--seq: give the sequence length of a microbatch (e.g. --seq 4096)")
    profile = api.count_profile(shape, settings=_run_settings(args, shape["layers"]), calibrate=args.calibrate)
    return _write(profile, args.output)


def _counted_device(device: Optional[str]) -> Optional[str]:
    """--device as the kernels a counted profile follows (schedc.choices.CountedDevice): cpu, or
    cuda (cuda:N is the same kernels); anything else is one line naming the flag."""
    if device is None or device == "cpu":
        return device
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit() and device[5:].isascii()):
        return "cuda"
    raise SchedcError(f"--device: {device[:40]!r} is not a device a counted profile follows; give cpu or cuda "
                      f"(cuda:N counts as cuda)")


def _check_counted_numbers(args) -> None:
    """One line naming the flag for numbers the counted route cannot use (before any file is read)."""
    for name, most in COUNTED_INTS.items():
        value = getattr(args, name, None)
        if value is not None and not 1 <= value <= most:
            said = str(value) if abs(value) < 10**12 else f"a {len(str(abs(value)))}-digit number"
            raise SchedcError(f"--{name.replace('_', '-')} must be between 1 and {most}, got {said}")
    for flag, value, ceiling in (("--flops", args.flops, 1e21),
                                 ("--optimizer-bytes", args.optimizer_bytes, 1024.0),
                                 ("--comm-latency", args.comm_latency, 3600.0)):
        if value is not None and not (math.isfinite(value) and 0 <= value <= ceiling
                                      and (flag != "--flops" or value > 0)):
            raise SchedcError(f"{flag} must be a finite number {'> 0' if flag == '--flops' else '>= 0'} and at most "
                              f"{ceiling:g}, got {value!r}")
    from schedc.model_costs import OPTIMIZER_STATES

    if args.optimizer is not None and args.optimizer not in OPTIMIZER_STATES:
        raise SchedcError(f"--optimizer must be one of {', '.join(OPTIMIZER_STATES)}, got {args.optimizer[:40]!r}")


def _counted_shape(args) -> dict:
    """The model's shape from --config (its dtype left to --dtype or the file) or the shape flags
    given (the others left to schedc.api.count_profile)."""
    from schedc.model_costs import read_hf_config

    if args.config:
        shape_flags = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "tied_embeddings", "mlp")
        if _given(args, shape_flags):
            raise SchedcError(f"{_given(args, shape_flags)[0]}: the model's shape comes from --config {args.config}; "
                              f"drop the flag (or edit a copy of the file)")
        return read_hf_config(args.config)
    missing = [f"--{k}" for k in ("layers", "hidden", "vocab") if getattr(args, k) is None]
    if missing:
        raise SchedcError(f"--flops without --config counts the model from flags: give {', '.join(missing)} "
                          f"(or --config config.json)")
    return common.given(layers=args.layers, hidden=args.hidden, vocab=args.vocab, heads=args.heads,
                        kv_heads=args.kv_heads, head_dim=args.head_dim, ffn_hidden=args.ffn, mlp=args.mlp,
                        tied_embeddings=args.tied_embeddings)


def _ac(args, layers: int):
    """--ac as one mode or one per layer."""
    from schedc.model_costs import AC_MODES

    if args.ac is None:
        return None
    modes = [m.strip() for m in args.ac.split(",")]
    bad = next((m for m in modes if m not in AC_MODES), None)
    if bad is not None:
        raise SchedcError(f"--ac: {bad[:40]!r} is not a mode; use one of {', '.join(AC_MODES)} (or one per layer)")
    if len(modes) not in (1, layers):
        raise SchedcError(f"--ac: {len(modes)} modes for {layers} layers; give one, or one per layer")
    return modes[0] if len(modes) == 1 else modes


def _write(profile: Profile, output: str) -> int:
    from schedc.core.cost_model import CostModel, rank_static_bytes

    profile.save(output)
    for note in profile.notes or []:
        if note.startswith("warning: "):  # schedc.runtime.profiling.noise.profile_warnings, without importing torch
            common.echo(f"schedc profile: {note}", file=sys.stderr)
    per_unit = all(c.modules for c in profile.stages)
    kind = "units" if per_unit else "stages"
    # the model's and modules' names come from the user's config or model: shown escaped
    common.echo(f"wrote {common.printable(output)}: {profile.n_stages} {kind} of {common.printable(profile.model)} on {profile.device}, "
                f"microbatch {profile.microbatch_size}, {profile.dtype}")
    print(f"  {kind[:-1]:>5}  {'F':>9}  {'I':>9}  {'W':>9}  {'activation':>10}  {'held I..W':>10}  {'static':>10}"
          + ("  modules" if per_unit else ""))
    # each stage as the cost model counts it alone on a rank: what its F holds, what stays from its
    # I to its W, its static bytes
    alone = list(range(profile.n_stages))
    costs = CostModel.build(profile, alone, 1)
    static = rank_static_bytes(profile, alone)
    for s, c in enumerate(profile.stages):
        common.echo(f"  {s:>5}  {format_seconds(costs.duration(s, 'F')):>9}  {format_seconds(costs.duration(s, 'I')):>9}  "
                    f"{format_seconds(costs.duration(s, 'W')):>9}  {format_bytes(costs.held(s, 'F')):>10}  "
                    f"{format_bytes(-costs.held(s, 'W')):>10}  {format_bytes(static[s]):>10}"
                    + (f"  {', '.join(c.modules or ())}" if per_unit else ""))
    comm = profile.comm if isinstance(profile.comm, list) else [profile.comm]
    print(f"  comm per boundary: {', '.join(format_seconds(c) for c in comm)}")
    if profile.assumes:  # what the framework must be told to run what was counted or measured
        print("  assumes: " + ", ".join(f"{k} {v}" for k, v in profile.assumes.items()))
    return 0


def _parse_bandwidth(text: Optional[str], flag: str = "--comm-bandwidth") -> Optional[float]:
    """'25e9', '25GB', '25GB/s', '100MiB/s' -> bytes per second (schedc.cli.common.rate)."""
    return None if text is None else common.rate(text, flag)
