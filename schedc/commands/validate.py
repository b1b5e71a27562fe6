"""`schedc validate`: the pre-flight check of a CSV schedule (structure, dependencies, deadlock)."""

from __future__ import annotations

import argparse

from schedc.commands import common
from schedc.errors import SchedcError


def register(sub) -> None:
    p = sub.add_parser("validate", help="check a CSV schedule: completeness, dependencies, deadlock")
    p.set_defaults(handler=run)
    p.add_argument("file", metavar="FILE.csv")
    p.add_argument("--stages", type=int, help="expected number of stages")
    p.add_argument("--mb", type=int, help="expected number of microbatches")
    p.add_argument("--ranks", type=int, help="expected number of ranks")
    p.add_argument("--placement", choices=["loop", "v"], help="expected placement")
    _add_framework_args(p)


def _add_framework_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("framework fit (schedc.frameworks): does the CSV match what the framework builds")
    g.add_argument("--for", dest="for_", metavar="FRAMEWORK:NAME",
                   help="torchtitan:NAME (0.3.0) or nemo:NAME (NeMo AutoModel 0.7.0); NAME is the schedule name "
                        "the framework is given, e.g. ZBVZeroBubble, Interleaved1F1B, 1F1B (case ignored)")
    g.add_argument("--layers", type=int, help="transformer layers of the model")
    g.add_argument("--layers-per-stage", type=int, help="pipeline_parallel_layers_per_stage / layers_per_stage")
    g.add_argument("--first-less", type=int, help="torchtitan: pipeline_parallel_first_stage_less_layers (default 1)")
    g.add_argument("--last-less", type=int, help="torchtitan: pipeline_parallel_last_stage_less_layers (default 1)")
    g.add_argument("--round-virtual-stages", choices=["up", "down"],
                   help="nemo: round_virtual_stages_to_pp_multiple")
    g.add_argument("--local-batch-size", type=int, help="training.local_batch_size / step_scheduler.local_batch_size")
    g.add_argument("--partition", metavar="PLAN.json",
                   help="an explicit module_fqns_per_model_part: a plan report (schedc plan) or a JSON list of lists; "
                        "the stage count then comes from it")
    g.add_argument("--microbatch-size", type=int,
                   help="pipeline_parallel_microbatch_size / pp_microbatch_size (default 1)")


def _run_validate_for(args) -> int:
    from schedc.frameworks import check_csv_for

    for flag in ("stages", "mb", "placement"):
        if getattr(args, flag) is not None:
            raise SchedcError(f"--for computes what the framework builds; drop --{flag}")
    settings = {k: getattr(args, k) for k in ("layers", "layers_per_stage", "first_less", "last_less",
                                               "round_virtual_stages", "local_batch_size", "microbatch_size")}
    if args.partition:
        from schedc.frameworks import read_partition

        settings["partition"] = len(read_partition(args.partition))
    report = check_csv_for(args.file, args.for_, ranks=args.ranks, **settings)
    report.raise_unless_ok()
    print(report.message)
    return 0


def run(args) -> int:
    from schedc import csvio
    from schedc.validate import validate

    if args.for_:
        return _run_validate_for(args)
    schedule = csvio.read_csv(args.file)
    validate(schedule, n_stages=args.stages, n_microbatches=args.mb, n_ranks=args.ranks,
             placement=args.placement, source=args.file)
    print(f"{args.file}: valid: "
          f"{common.shape(schedule.n_stages, schedule.n_ranks, schedule.n_microbatches, _placement_label(schedule))}")
    return 0


def _placement_label(schedule) -> str:
    from schedc.ir import placement_name

    return placement_name(schedule.placement)

