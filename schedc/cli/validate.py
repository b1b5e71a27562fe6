"""`schedc validate`: the pre-flight check of a CSV schedule (structure, dependencies, deadlock)."""

from __future__ import annotations

import argparse
from pathlib import Path

from schedc.cli import common, offload_flags
from schedc.core.costs import block_modes
from schedc.errors import SchedcError


def register(sub) -> None:
    p = sub.add_parser("validate", help="check a CSV schedule: completeness, dependencies, deadlock")
    p.set_defaults(handler=run)
    p.add_argument("file", metavar="FILE.csv")
    p.add_argument("--stages", type=int, help="expected number of stages")
    p.add_argument("--mb", type=int, help="expected number of microbatches")
    p.add_argument("--ranks", type=int, help="expected number of ranks")
    p.add_argument("--placement", choices=["loop", "v"], help="expected placement")
    p.add_argument("--partition", metavar="PLAN.json",
                   help="the module_fqns_per_model_part the CSV is launched on: a plan report (schedc plan) or a JSON "
                        "list of lists; fails when the CSV was made for another (with --for it sets the stage count)")
    offload_flags.add_memory_actions_arg(p)
    offload_flags.add_link_args(p)
    _add_framework_args(p)


def _add_framework_args(p: argparse.ArgumentParser) -> None:
    from schedc.frameworks import REGISTRY

    g = p.add_argument_group("framework fit (schedc.frameworks): does the CSV match what the framework builds")
    offered = [f.spec_help or f"{f.name}:NAME ({f.label})" for f in REGISTRY.values()]
    g.add_argument("--for", dest="for_", metavar="FRAMEWORK:NAME",
                   help=" or ".join([", ".join(offered[:-1]), offered[-1]] if len(offered) > 1 else offered) +
                        "; NAME is the schedule name the framework is given, e.g. ZBVZeroBubble, Interleaved1F1B, "
                        "1F1B (case ignored)")
    g.add_argument("--layers", type=int, help="transformer layers of the model")
    g.add_argument("--layers-per-stage", type=int, help="pipeline_parallel_layers_per_stage / layers_per_stage")
    g.add_argument("--first-less", type=int, help="torchtitan: pipeline_parallel_first_stage_less_layers (default 1)")
    g.add_argument("--last-less", type=int, help="torchtitan: pipeline_parallel_last_stage_less_layers (default 1)")
    g.add_argument("--round-virtual-stages", choices=["up", "down"],
                   help="nemo: round_virtual_stages_to_pp_multiple")
    g.add_argument("--local-batch-size", type=int, help="training.local_batch_size / step_scheduler.local_batch_size")
    g.add_argument("--microbatch-size", type=int,
                   help="pipeline_parallel_microbatch_size / pp_microbatch_size (default 1)")


def _check_counts(args) -> None:
    """Counts must be positive (the 'less' weights may be 0): one line naming the flag."""
    for flag in ("stages", "mb", "ranks", "layers", "layers_per_stage", "local_batch_size", "microbatch_size",
                 "first_less", "last_less"):
        value = getattr(args, flag, None)
        least = 0 if flag.endswith("_less") else 1
        if value is not None and value < least:
            raise SchedcError(f"--{flag.replace('_', '-')} must be >= {least}, got {value}")


def _run_validate_for(args) -> int:
    from schedc.errors import ParameterError
    from schedc.frameworks import check_csv_for, parse_spec

    try:  # torch's schedule names are checked apart from the flag: name it here
        parse_spec(args.for_)
    except ParameterError:
        raise
    except SchedcError as e:
        raise SchedcError(f"--for {args.for_}: {e}") from None
    for flag in ("stages", "mb", "placement"):
        if getattr(args, flag) is not None:
            raise SchedcError(f"--for computes what the framework builds; drop --{flag}")
    settings = {k: getattr(args, k) for k in ("layers", "layers_per_stage", "first_less", "last_less",
                                               "round_virtual_stages", "local_batch_size", "microbatch_size")}
    schedule = _read(args.file)
    split = _check_split(args, schedule)
    if args.partition:
        from schedc.frameworks import read_partition

        settings["partition"] = len(read_partition(args.partition))
    report = check_csv_for(schedule, args.for_, ranks=args.ranks, **settings)
    report.raise_unless_ok()
    torch_note = _torch_note(schedule, args.file, parse_spec(args.for_)[0])
    print(common.printable(report.message + (f"; {split}" if split else "") + (f"; {torch_note}" if torch_note else "")))
    return 0


def _torch_note(schedule, source, framework=None) -> str:
    """torch's own checks of the CSV where torch is installed (schedc.runtime.torch_check)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return ""
    from schedc.runtime.torch_check import check_for_launch

    return check_for_launch(schedule, str(source), framework)


def _read(path, **expected):
    """The CSV, read and validated by schedc.api against the counts and placement the flags ask for."""
    from schedc import api

    schedule = api.read_csv(path)
    # the counts the user asked for are named by their flags here; api.validate words the same
    # mismatch for both front doors
    for key, flag, noun, actual in (("stages", "--stages", "stages", schedule.n_stages),
                                    ("microbatches", "--mb", "microbatches", schedule.n_microbatches),
                                    ("ranks", "--ranks", "ranks", schedule.n_ranks)):
        if expected.get(key) is not None and expected[key] != actual:
            raise SchedcError(f"{path}: {flag} {expected[key]}: expected {expected[key]} {noun}, "
                              f"the schedule has {actual}")
    api.validate(schedule, **common.given(**expected))
    return schedule


def _check_split(args, schedule) -> str:
    """With --partition: the CSV must be launched on that partition. With --for and a plan report
    beside the CSV: the framework must be given the plan's partition, or it builds its own split."""
    from schedc.frameworks import check_partition, is_default_split, parse_spec, plan_partition_of

    if args.partition:
        line = check_partition(args.file, schedule.n_stages, args.partition)
        note = _check_plan_checkpointing(args, schedule)
        return line + (f"; {note}" if note else "")
    if not args.for_:
        return ""
    own = plan_partition_of(args.file)
    if own is None:  # a CSV copied away from its plan report: its fit says nothing of its partition
        stem = Path(args.file).stem
        return (f"the partition was not checked: nothing beside {args.file} says which one it was planned for "
                f"(keep {stem}.json, the plan report, beside it, or give --partition PLAN.json)")
    from schedc.frameworks import REGISTRY

    framework = REGISTRY[parse_spec(args.for_)[0]]
    if is_default_split(framework.name, own[0], layers_per_stage=args.layers_per_stage, first_less=args.first_less,
                        last_less=args.last_less):
        return f"the plan's partition is {framework.label}'s own split"
    raise SchedcError(f"{args.file} was made for the partition in {own[1]}, but without it {framework.label} "
                      f"builds its own split: pass --partition {own[1]} here and set "
                      f"{framework.fields['partition']} as `schedc plan` printed")


def _check_plan_checkpointing(args, schedule) -> str:
    """With --partition a plan report (its "partition" and "assumes"): the activation checkpointing it planned
    must be what schedc's runtime applies to this CSV (schedc.runtime.checkpointing.planned_modes:
    one mode, or one per stage and per block), selective only on stages the CSV runs as B. Where
    torch is installed: the runtime that applies it needs torch. With --for, a note when the plan
    checkpoints stages or blocks differently, which the framework (one mode per run) cannot apply."""
    import importlib.util

    from schedc.io.fileio import read_json

    report = read_json(args.partition, "a partition (a plan report or a JSON list of lists)")
    if not (isinstance(report, dict) and "partition" in report and "assumes" in report) or \
            importlib.util.find_spec("torch") is None:
        return ""
    from schedc.runtime.checkpointing import check_split_backward, planned_modes

    try:
        modes = planned_modes(args.partition)
    except SchedcError as e:
        raise SchedcError(f"--partition {e}") from None
    check_split_backward(modes, schedule, str(args.file))
    flat = set(block_modes(modes))
    if not args.for_:
        return ""
    from schedc.frameworks import REGISTRY, parse_spec

    framework = REGISTRY[parse_spec(args.for_)[0]]
    if len(flat) < 2 and flat <= set(framework.ac_modes):
        return ""
    label = framework.label
    if len(flat) < 2:  # light: a mode the frameworks do not have
        return (f"but the plan checkpoints every layer with {', '.join(flat)!r}, a mode {label} does not have "
                f"({', '.join(framework.ac_modes)}): its step assumes schedc's runtime")
    return (f"but the plan checkpoints activations per stage or block ({', '.join(sorted(flat))}), which "
            f"{label} cannot apply (one mode per run): its step assumes schedc's runtime")


def run(args) -> int:
    _check_counts(args)
    if args.for_:
        return _run_validate_for(args)
    schedule = _read(args.file, stages=args.stages, microbatches=args.mb, ranks=args.ranks, placement=args.placement)
    split = _check_split(args, schedule)
    offload = offload_flags.validate_note(args, schedule)  # the memory actions against the CSV, and their fit
    split = "; ".join(note for note in (split, offload) if note)
    torch_note = _torch_note(schedule, args.file)
    print(f"{common.printable(args.file)}: valid: "
          f"{common.shape(schedule.n_stages, schedule.n_ranks, schedule.n_microbatches, _placement_label(schedule))}"
          + (f"; {split}" if split else "") + (f"; {torch_note}" if torch_note else ""))
    return 0


def _placement_label(schedule) -> str:
    from schedc.core.ir import placement_name

    return placement_name(schedule.placement)

