"""`schedc baseline`: emit a hand-made schedule (GPipe, 1F1B, ZB-H1, ...) as CSV (schedc.api.baseline)."""

from __future__ import annotations

import sys

from schedc.cli import common
from schedc.errors import SchedcError


def register(sub) -> None:
    p = sub.add_parser("baseline", help="emit a hand-made schedule (GPipe, 1F1B, ZB-H1, ...) as CSV")
    p.set_defaults(handler=run)
    p.add_argument("name", nargs="?", help="gpipe, 1f1b, zb-h1, zb-h2, interleaved-1f1b, zb-v, looped-bfs, "
                   "interleaved-zb, dualpipev (case/dashes ignored; torch class names accepted)")
    p.add_argument("--list", action="store_true", help="list the hand-made schedules")
    p.add_argument("--stages", type=common.stages_count(), help="number of pipeline stages N")
    p.add_argument("--mb", type=common.microbatches_count(), help="number of microbatches M")
    p.add_argument("--ranks", type=common.ranks_count(), help="number of ranks R (default: N for one-stage-per-rank schedules, else N/2)")
    p.add_argument("--placement", choices=["loop", "v"], help="stage placement (default: the schedule's own)")
    p.add_argument("-o", "--output", metavar="FILE.csv", type=common.path, help="write the CSV here (default: print it)")


def run(args) -> int:
    from schedc import api
    from schedc.io import csvio

    if args.list:
        from schedc.core.baselines import list_baselines

        for info in list_baselines():
            print(f"{info.name:18s} {info.placement:5s} {info.description}")
        return 0
    if not args.name or args.stages is None or args.mb is None:
        raise SchedcError("baseline: give NAME --stages N --mb M (or --list)")
    schedule = api.baseline(args.name, stages=args.stages, microbatches=args.mb,
                            **common.given(ranks=args.ranks, placement=args.placement))
    if args.output:
        api.write_csv(schedule, args.output)
        common.echo(f"wrote {common.printable(args.output)}: {schedule.name}, "
                f"{common.shape(schedule.n_stages, schedule.n_ranks, schedule.n_microbatches)}")
    else:
        sys.stdout.write(csvio.to_csv_text(schedule))
    return 0

