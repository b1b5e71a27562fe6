"""`schedc validate`: the pre-flight check of a CSV schedule (structure, dependencies, deadlock)."""

from __future__ import annotations

from schedc.commands import common


def register(sub) -> None:
    p = sub.add_parser("validate", help="check a CSV schedule: completeness, dependencies, deadlock")
    p.set_defaults(handler=run)
    p.add_argument("file", metavar="FILE.csv")
    p.add_argument("--stages", type=int, help="expected number of stages")
    p.add_argument("--mb", type=int, help="expected number of microbatches")
    p.add_argument("--ranks", type=int, help="expected number of ranks")
    p.add_argument("--placement", choices=["loop", "v"], help="expected placement")


def run(args) -> int:
    from schedc import csvio, validate

    schedule = csvio.read_csv(args.file)
    validate.validate(schedule, n_stages=args.stages, n_microbatches=args.mb, n_ranks=args.ranks,
                      placement=args.placement, source=args.file)
    print(f"{args.file}: valid: "
          f"{common.shape(schedule.n_stages, schedule.n_ranks, schedule.n_microbatches, _placement_label(schedule))}")
    return 0


def _placement_label(schedule) -> str:
    from schedc.ir import placement_name

    return placement_name(schedule.placement)

