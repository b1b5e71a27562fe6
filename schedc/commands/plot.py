"""`schedc plot`: Gantt charts and memory curves of CSV schedules on one time axis."""

from __future__ import annotations

from pathlib import Path

from schedc.commands import common
from schedc.errors import SchedcError


def register(sub) -> None:
    p = sub.add_parser("plot", help="draw Gantt charts and memory curves of CSV schedules (png, svg, pdf)")
    p.set_defaults(handler=run)
    p.add_argument("files", nargs="+", metavar="FILE.csv", help="one panel per file, stacked on one time axis")
    common.add_cost_args(p)
    p.add_argument("--title", action="append", metavar="TEXT",
                   help="panel title, once per file in order (default: the file name)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png", help="picture to write: .png, .svg or .pdf")


def run(args) -> int:
    from schedc.plot import output_format, plot_schedules

    output_format(args.output)  # a wrong extension or place fails before any work
    common.check_outputs(args, (args.output, "-o"))
    if args.title and len(args.title) != len(args.files):
        raise SchedcError(f"give --title once per file ({len(args.files)}), or not at all")
    schedules, profiles = common.read_checked(args)
    memory = common.memory_from_args(args)
    common.warn_mismatches("plot", args.files, schedules, memory, profiles)
    titles = args.title or [Path(f).name for f in args.files]
    plot_schedules(schedules, profiles, memory, titles=titles, path=args.output)
    print(f"wrote {args.output}: {len(schedules)} panel{'s' if len(schedules) > 1 else ''} "
          f"({', '.join(titles)}), memory limit {memory}")
    return 0

