"""Train schedc's small GPT with a pipeline schedule from a CSV (or a baseline, or torch's own).

    torchrun --nproc-per-node 2 examples/train.py --schedule schedules/zb-h1_2x8.csv
    torchrun --nproc-per-node 2 examples/train.py --baseline zb-v --mb 8
    torchrun --nproc-per-node 2 examples/train.py --torch-schedule 1F1B --mb 8
    torchrun --nproc-per-node 2 examples/train.py --plan plan.json      # a `schedc plan` as planned

Each rank builds only the stages the CSV gives it (schedc.runtime.load_pipeline checks world
size, microbatch count and placement against the CSV before any communication). The data is
synthetic but learnable (arithmetic progressions of tokens), so the loss falls within a few
dozen steps. The rank holding the last stage prints loss and step time per step; a step's time
is measured between two barriers, so it is the time of the slowest rank (what a synchronizing
optimizer step sees). `--backend` defaults to nccl when CUDA is available, gloo otherwise.

`--plan plan.json` runs what `schedc plan` chose: the CSV beside it, its blocks per stage, its
activation checkpointing, one mode per stage where `--ac auto` chose per stage, and its memory
actions (offloads and recomputes per microbatch, its "memory_actions", run by
schedc.runtime.offload) (schedc.runtime.checkpointing.plan_settings); the model gets as many blocks as the plan's
partition holds (so --layers-per-stage is refused with it, and --layers unless it agrees), and
the shape the plan was made for (--hidden, --heads, --seq-len, --vocab, --microbatch-size and
--dtype, read from the profile's model and "assumes"; a flag that contradicts them is refused,
and a plan that does not record one of them, or was counted for another model than this GPT,
needs the flag or is refused). A malformed plan, a CSV beside it that the plan did not write (or
a plan without the CSV's hash), checkpointing or a memory action the CSV cannot run, or a flag
that contradicts the CSV is one line naming --plan or the flag before any process group starts. `--ac` checkpoints the blocks (none, light,
selective, full, or one per stage, comma-separated) for the other sources, and overrides the
plan's; light or selective on a stage the CSV runs as I and W (stage 0 aside) is refused then too.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from schedc.errors import ParameterError, SchedcError, printable, shown  # noqa: E402
from schedc.runtime import GPT, GPTConfig, lm_loss, load_pipeline, load_torch_pipeline, make_batch  # noqa: E402
from schedc.runtime.launch import init_group  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--schedule", metavar="FILE.csv", help="a schedule CSV (schedc compile output or torch _dump_csv)")
    src.add_argument("--baseline", metavar="NAME", help="build a schedc baseline on the fly: 1f1b, zb-h1, zb-v, ...")
    src.add_argument("--torch-schedule", metavar="NAME", help="torch's class: 1F1B, GPipe, Interleaved1F1B, ZBVZeroBubble, ...")
    src.add_argument("--plan", metavar="plan.json",
                     help="a `schedc plan` report: its CSV (beside it), blocks per stage and per-stage checkpointing")
    p.add_argument("--ac", default=None, metavar="MODE[,MODE...]",
                   help="activation checkpointing: none, light, selective, full, or one per stage (default: the "
                        "plan's, else none)")
    p.add_argument("--mb", type=int, default=None, help="microbatches (default: the CSV's; 8 otherwise)")
    p.add_argument("--stages", type=int, default=None,
                   help="stages for --baseline / --torch-schedule (default: 1 or 2 per rank, as the schedule needs)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the step-time summary")
    p.add_argument("--microbatch-size", type=int, default=None, help="sequences per microbatch (default: the plan's, "
                   "else 2)")
    p.add_argument("--layers", type=int, default=None, help="blocks (default: the plan's, else 8)")
    for flag, default in (("--hidden", 128), ("--heads", 4), ("--seq-len", 64), ("--vocab", 512)):
        p.add_argument(flag, type=int, default=None, help=f"default: the plan's, else {default}")
    p.add_argument("--layers-per-stage", default=None, help="comma-separated block counts, one per stage")
    p.add_argument("--dtype", default=None, help="float32, bfloat16, float64, ... (default: the plan's, else float32)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", choices=["gloo", "nccl"], default=None)
    p.add_argument("--timeout", type=float, default=300, help="process-group timeout, seconds")
    return p.parse_args(argv)


# the model's shape when neither a flag nor --plan gives it (argparse dest -> value)
SHAPE_DEFAULTS = {"hidden": 128, "heads": 4, "seq_len": 64, "vocab": 512, "microbatch_size": 2, "dtype": "float32"}
# a profile of this GPT names its shape (schedc.runtime.profiling.gpt.gpt_label)
GPT_LABEL = re.compile(r"^gpt\(layers=(\d+), hidden=(\d+), heads=(\d+), seq=(\d+), vocab=(\d+)\)")

# load_pipeline's parameters that this script sets from a flag: its errors name the parameter,
# the user typed the flag
FLAG_OF = {"name": "--torch-schedule", "activation_checkpoint": "--ac"}


def as_flags(e: SchedcError) -> SchedcError:
    """`e` spelt with this script's flags where it names a load_pipeline parameter."""
    if isinstance(e, ParameterError) and e.param in FLAG_OF:
        return ParameterError(e.param, e.detail, flag=FLAG_OF[e.param])
    return e


def main(argv=None) -> int:
    args = parse_args(argv)
    try:  # before any process group: a bad flag or --plan is one line, not a hang
        check_args(args)
        planned = _plan_settings(args)
        for name, value in SHAPE_DEFAULTS.items():  # what neither a flag nor the plan set
            if getattr(args, name) is None:
                setattr(args, name, value)
        _check_launch(args, planned)
    except SchedcError as e:
        print(f"error: {printable(e)}", file=sys.stderr)
        return 2
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    try:
        # NCCL: set_device before the group, device_id in it, one line when ranks outnumber GPUs
        device = init_group(backend, timeout=args.timeout)
    except SchedcError as e:
        print(f"rank {os.environ.get('RANK', '?')}: error: {printable(e)}", file=sys.stderr)
        return 2
    try:
        return train(args, device, planned)
    except SchedcError as e:
        print(f"rank {dist.get_rank()}: error: {printable(as_flags(e))}", file=sys.stderr)
        return 2
    finally:
        dist.destroy_process_group()


def train(args: argparse.Namespace, device: torch.device, planned: dict) -> int:
    rank, world = dist.get_rank(), dist.get_world_size()
    args.layers = args.layers or sum(planned.get("layers_per_stage", [])) or 8
    cfg = GPTConfig(vocab_size=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
                    seq_len=args.seq_len, dtype=args.dtype)
    model = GPT(cfg, seed=args.seed)  # same seed on every rank: each keeps its own slice
    per_stage = ([int(n) for n in args.layers_per_stage.split(",")] if args.layers_per_stage
                 else planned.get("layers_per_stage"))
    ac = args.ac.split(",") if args.ac and "," in args.ac else (args.ac or planned.get("activation_checkpoint", "none"))

    if args.torch_schedule:
        mb = args.mb or 8
        per_rank = args.stages // world if args.stages else None
        pipe = load_torch_pipeline(args.torch_schedule, model, lm_loss, mb, device,
                                   stages_per_rank=per_rank, layers_per_stage=per_stage, activation_checkpoint=ac)
        label = f"torch {type(pipe.schedule).__name__}"
    else:
        if args.baseline:
            from schedc.core.baselines import list_baselines, make_baseline, normalize_name

            info = {i.name: i for i in list_baselines()}[normalize_name(args.baseline)]
            n_stages = args.stages or (world if info.stages_per_rank == "1" else 2 * world)
            schedule = make_baseline(info.name, n_stages, args.mb or 8, n_ranks=world)
            label = f"schedc baseline {info.name}"
        else:
            from schedc.io.csvio import read_csv

            schedule = read_csv(args.schedule)
            label = f"CSV {args.schedule}"
        pipe = load_pipeline(schedule, model, lm_loss, device, n_microbatches=args.mb,
                             layers_per_stage=per_stage, activation_checkpoint=ac,
                             memory_actions=planned.get("memory_actions"))
        mb = schedule.n_microbatches
    del model  # the stages hold what this rank needs

    n_stages = pipe.stages[0].num_stages
    mine = [s.stage_index for s in pipe.stages]
    reporter = pipe.is_last
    if reporter:
        n_params = sum(p.numel() for p in pipe.parameters())
        print(f"{label}: {world} ranks, {n_stages} stages, {mb} microbatches x {args.microbatch_size} "
              f"sequences, {dist.get_backend()} on {device}; rank {rank} holds stages {mine} "
              f"({n_params / 1e6:.2f}M parameters); GPT of {cfg.layers} blocks, hidden {cfg.hidden}, heads {cfg.heads}, "
              f"seq {cfg.seq_len}, vocab {cfg.vocab_size}, {cfg.dtype}; activation checkpointing {ac}", flush=True)

    opt = torch.optim.AdamW(pipe.parameters(), lr=args.lr)
    times = []
    for step in range(args.steps):
        tokens, targets = make_batch(cfg, mb * args.microbatch_size, seed=args.seed * 100003 + step,
                                     device=device)
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        losses: list = []
        pipe.step(tokens, target=targets, losses=losses)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()
        dt = time.perf_counter() - t0
        if step >= args.warmup:
            times.append(dt)
        if reporter:
            loss = torch.stack([l.detach().float() for l in losses]).mean().item()
            print(f"step {step:4d}  loss {loss:.4f}  step time {dt * 1e3:8.1f} ms", flush=True)
    if reporter and times:
        print(f"step time over {len(times)} steps (after {args.warmup} warm-up): median "
              f"{statistics.median(times) * 1e3:.1f} ms, min {min(times) * 1e3:.1f} ms, "
              f"max {max(times) * 1e3:.1f} ms", flush=True)
    return 0


def _plan_settings(args: argparse.Namespace) -> dict:
    """With --plan: its CSV becomes --schedule, and its blocks per stage, checkpointing and memory
    actions are returned (plan_settings' keywords of load_pipeline)."""
    if not args.plan:
        return {}
    from schedc.io import csvio
    from schedc.io.fileio import read_input, read_json
    from schedc.runtime.checkpointing import plan_settings

    try:
        read_input(args.plan, "a plan report (the plan.json `schedc plan` wrote)")  # a file at all, first
        csv = Path(args.plan).with_suffix(".csv")
        if not csv.is_file():
            raise SchedcError(f"{args.plan}: the schedule {csv} is not beside it; give the plan.json `schedc plan` "
                              f"wrote next to its CSV")
        planned = plan_settings(args.plan)
    except SchedcError as e:
        raise SchedcError(f"--plan {e}") from None
    report = read_json(args.plan, "a plan report")  # a dict: plan_settings read it
    recorded = report.get(csvio.CSV_HASH_KEY)
    if not isinstance(recorded, str):  # without it any CSV named plan.csv would run as planned
        raise SchedcError(f"--plan {args.plan}: " + ("no" if recorded is None else "a non-text")
                          + f" \"{csvio.CSV_HASH_KEY}\" (the hash of the CSV the plan wrote), so {csv} cannot be "
                          f"checked; give the plan.json `schedc plan` wrote, or plan again")
    if csvio.csv_sha256(read_input(csv, "a CSV schedule")) != recorded:
        raise SchedcError(f"--plan {args.plan}: {csv} is not the schedule this plan wrote; plan again")
    stages = _csv(csv).n_stages
    if len(planned["layers_per_stage"]) != stages:
        raise SchedcError(f"--plan {args.plan}: its partition has {len(planned['layers_per_stage'])} stages but {csv} "
                          f"has {stages}; plan again")
    if args.layers_per_stage is not None:
        raise SchedcError("--layers-per-stage: --plan sets the blocks per stage (its partition); drop one of them")
    args.layers_of_plan = sum(planned["layers_per_stage"])
    if args.layers is not None and args.layers != sum(planned["layers_per_stage"]):
        raise SchedcError(f"--layers {args.layers}: the plan's partition holds {sum(planned['layers_per_stage'])} "
                          f"blocks; drop --layers (the model gets the plan's)")
    _take_plan_shape(args, report)
    args.schedule = str(csv)
    return planned


def _plan_shape(report: dict) -> tuple[str, dict]:
    """(the model the plan's profile names, the shape it records, as this script's argparse
    dests): a profile of this GPT names all of it; any profile's "assumes" gives its sequence
    length, microbatch size and dtype."""
    profile = report.get("profile")
    model = profile.get("model") if isinstance(profile, dict) else None
    label = model if isinstance(model, str) else ""
    assumes = report.get("assumes") if isinstance(report.get("assumes"), dict) else {}
    shape = {name: assumes.get(key) for name, key in (("seq_len", "seq_len"), ("microbatch_size", "microbatch_size"),
                                                      ("dtype", "dtype"))}
    for name, value in shape.items():
        good = isinstance(value, str) if name == "dtype" else (
            isinstance(value, int) and not isinstance(value, bool) and value >= 1)
        if value is not None and not good:
            raise SchedcError(f"\"assumes\".{name}: {shown(value)} is not " + ("a dtype" if name == "dtype" else
                              "an integer >= 1") + "; give the plan.json `schedc plan` wrote, or plan again")
    gpt = GPT_LABEL.match(label)
    if gpt:
        shape.update(zip(("layers", "hidden", "heads", "seq_len", "vocab"), map(int, gpt.groups())))
    return label, {k: v for k, v in shape.items() if v is not None}


def _counted_for_another_model(label: str) -> str:
    """What in a counted profile's model (schedc.model_costs' label: '... N layers, hidden H, ffn
    F (mlp), heads A/K x D ...') this GPT cannot be: its MLP is 4 x hidden with GELU and its
    attention has as many key/value heads as heads; '' where the label says nothing of it."""
    hidden = re.search(r"\bhidden (\d+)", label)
    ffn = re.search(r"\bffn (\d+)(?: \((\w+)\))?", label)
    heads = re.search(r"\bheads (\d+)/(\d+)", label)
    if ffn and hidden and int(ffn.group(1)) != 4 * int(hidden.group(1)):
        return f"an MLP of {ffn.group(1)} (this GPT's is 4 x hidden = {4 * int(hidden.group(1))})"
    if ffn and ffn.group(2) and ffn.group(2) != "gelu":
        return f"a {ffn.group(2)} MLP (this GPT's is GELU)"
    if heads and heads.group(1) != heads.group(2):
        return f"{heads.group(2)} key/value heads for {heads.group(1)} heads (this GPT has as many as heads)"
    return ""


def _take_plan_shape(args: argparse.Namespace, report: dict) -> None:
    """The model's shape from the plan: a flag that contradicts it is refused, one it does not
    record must be given (this script's defaults are not the plan's model), and a plan counted for
    a model this GPT is not is refused."""
    try:
        label, shape = _plan_shape(report)
    except SchedcError as e:
        raise SchedcError(f"--plan {args.plan}: {e}") from None
    counted = {"hidden": r"\bhidden (\d+)", "heads": r"\bheads (\d+)", "vocab": r"\bvocab (\d+)",
               "layers": r"\b(\d+) layers"}
    if not GPT_LABEL.match(label):
        other = _counted_for_another_model(label)
        if other:
            raise SchedcError(f"--plan {args.plan}: it was counted for {shown(label, 120)}, with {other}; this script "
                              f"trains schedc's GPT: plan from a profile of it (schedc profile --units ...)")
        for name, pattern in counted.items():
            found = re.search(pattern, label)
            if found:
                shape.setdefault(name, int(found.group(1)))
    for name, value in shape.items():
        given = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if name == "layers":  # the partition's blocks, checked against --layers above
            if value != args.layers_of_plan:
                raise SchedcError(f"--plan {args.plan}: its model has {value} layers but its partition holds "
                                  f"{args.layers_of_plan} blocks; plan again")
            continue
        if given is not None and given != value:
            said = (lambda v: shown(v)) if name == "dtype" else str
            raise SchedcError(f"{flag} {said(given)}: the plan was made for {name.replace('_', ' ')} {said(value)}; "
                              f"drop {flag} (the model gets the plan's)")
        setattr(args, name, value)
    missing = ["--" + n.replace("_", "-") for n in ("hidden", "heads", "seq_len", "vocab") if getattr(args, n) is None]
    if missing:
        raise SchedcError(f"--plan {args.plan}: the plan does not record its model's "
                          f"{', '.join(m[2:] for m in missing)} (its profile's model is "
                          f"{shown(label, 120) if label else 'not named'}); pass {', '.join(missing)} of the model it was "
                          f"made for, or plan from a profile of this GPT (schedc profile --units ...)")


def check_args(args: argparse.Namespace) -> None:
    """The numbers, dtype, --layers-per-stage and --ac as given, before anything starts."""
    from schedc.runtime.checkpointing import AC_MODES
    from schedc.runtime.models import parse_dtype

    least = {"mb": 1, "stages": 1, "steps": 1, "microbatch_size": 1, "layers": 1, "hidden": 1, "heads": 1,
             "seq_len": 1, "vocab": 1, "warmup": 0}
    for name, low in least.items():
        value = getattr(args, name)
        if value is not None and value < low:
            raise SchedcError(f"--{name.replace('_', '-')} must be >= {low}, got {value}")
    if not 0 < args.timeout < float("inf"):
        raise SchedcError(f"--timeout must be a finite number of seconds > 0, got {args.timeout}")
    try:
        parse_dtype(args.dtype or SHAPE_DEFAULTS["dtype"])
    except ValueError as e:
        raise SchedcError(f"--dtype: {e}") from None
    if args.layers_per_stage is not None:
        counts = args.layers_per_stage.split(",")
        if not all(c.strip().isdigit() for c in counts):
            raise SchedcError(f"--layers-per-stage {shown(args.layers_per_stage)}: give block counts (integers >= 0) "
                              f"separated by commas, one per stage, e.g. 3,3,2")
    for mode in (args.ac or "none").split(","):
        if mode not in AC_MODES:
            raise SchedcError(f"--ac: {shown(mode)} is not one of {', '.join(AC_MODES)}; give one, or one per stage "
                              f"separated by commas")


def _check_launch(args: argparse.Namespace, planned: dict) -> None:
    """--mb and --ac (or the plan's checkpointing) against the CSV, and torchrun's environment,
    without which the process group cannot start (torch raises deep inside)."""
    if args.schedule:
        schedule = _csv(args.schedule)
        if args.mb is not None and args.mb != schedule.n_microbatches:
            raise SchedcError(f"--mb {args.mb}: {args.schedule} runs {schedule.n_microbatches} microbatches; drop "
                              f"--mb (the CSV's count is the default) or compile the schedule for {args.mb}")
        modes = args.ac.split(",") if args.ac and "," in args.ac else []
        if modes and len(modes) != schedule.n_stages:
            raise SchedcError(f"--ac {args.ac}: {len(modes)} modes for the {schedule.n_stages} stages of "
                              f"{args.schedule}; give one per stage or one for all")
        if args.ac:  # load_pipeline refuses it too, but on every rank after the group started
            from schedc.runtime.checkpointing import check_split_backward

            check_split_backward(modes or [args.ac] * schedule.n_stages, schedule,
                                 f"--ac {args.ac} with {args.schedule}")
        elif planned.get("activation_checkpoint") is not None:  # as load_pipeline would, on every rank
            from schedc.runtime.checkpointing import check_split_backward, stage_modes

            check_split_backward(stage_modes(planned["activation_checkpoint"], schedule.n_stages), schedule,
                                 f"--plan {args.plan}: its activation checkpointing with {args.schedule}")
        if planned.get("memory_actions"):  # as load_pipeline would, on every rank, after the group started
            from schedc.core.memory_actions import check_memory_actions

            try:
                check_memory_actions(planned["memory_actions"], schedule, args.schedule)
            except SchedcError as e:
                raise SchedcError(f"--plan {e}") from None
    _check_stage_counts(args)
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        ranks = schedule.n_ranks if args.schedule else 2
        raise SchedcError(f"{missing[0]} is not set: start this script with torchrun, e.g. torchrun --nproc-per-node "
                          f"{ranks} examples/train.py ...")


def _check_stage_counts(args: argparse.Namespace) -> None:
    """--layers-per-stage against --layers and the CSV's stages, and --stages against the torch
    class and the world size: on every rank after the group started, these would name
    load_pipeline's parameters, or be ignored (a --stages torch's class cannot build)."""
    if args.layers_per_stage is not None:
        counts = [int(c) for c in args.layers_per_stage.split(",")]
        blocks = args.layers or 8
        if sum(counts) != blocks:
            raise SchedcError(f"--layers-per-stage {args.layers_per_stage}: {sum(counts)} blocks but the model has "
                              f"{blocks} (--layers); give counts that add up to it")
        if args.schedule and len(counts) != _csv(args.schedule).n_stages:
            raise SchedcError(f"--layers-per-stage {args.layers_per_stage}: {len(counts)} counts for the "
                              f"{_csv(args.schedule).n_stages} stages of {args.schedule}; give one per stage")
    world = int(os.environ.get("WORLD_SIZE", "0") or 0)
    if not (args.torch_schedule and args.stages is not None and world):
        return
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class

    try:
        single = issubclass(get_schedule_class(args.torch_schedule), PipelineScheduleSingle)
    except ValueError:  # an unknown name: load_torch_pipeline says which are known
        return
    if single and args.stages != world:
        raise SchedcError(f"--stages {args.stages}: torch's {args.torch_schedule} runs one stage per rank ({world}); "
                          f"drop --stages or use a multi-stage class such as Interleaved1F1B")
    if args.stages % world:
        raise SchedcError(f"--stages {args.stages}: torch's {args.torch_schedule} runs as many stages on every rank; "
                          f"give a multiple of the {world} ranks")


def _csv(path: str):
    from schedc.io.csvio import read_csv

    return read_csv(path)


if __name__ == "__main__":
    sys.exit(main())
