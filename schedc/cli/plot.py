"""`schedc plot`: Gantt charts and memory curves of CSV schedules on one time axis.

Each CSV is drawn with its own costs when it brings them: ``NAME.profile.json`` beside it (``schedc plan``
writes one), else the costs its report ``NAME.json`` names (a plan's merged profile, a compile's
inputs). ``--profile``, ``--costs`` or ``--comm`` give one set of costs for every CSV instead.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from schedc.cli import common, offload_flags
from schedc.errors import SchedcError


def register(sub) -> None:
    p = sub.add_parser("plot", help="draw Gantt charts and memory curves of CSV schedules (png, svg, pdf)")
    p.set_defaults(handler=run)
    p.add_argument("files", nargs="+", metavar="FILE.csv", type=common.path,
                   help="one panel per file, stacked on one time axis; each with its own costs when NAME.profile.json "
                        "or a report NAME.json sits beside it (unless --profile/--costs give one for all)")
    common.add_cost_args(p)
    offload_flags.add_memory_actions_arg(p)
    # --mem stays --memory's abbreviation, as --memory-actions shares its prefix
    p.add_argument("--mem", dest="memory", metavar="SPEC", help=argparse.SUPPRESS)
    offload_flags.add_link_args(p)
    p.add_argument("--title", action="append", metavar="TEXT",
                   help="panel title, once per file in order (default: the file name)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png", type=common.path, help="picture to write: .png, .svg or .pdf")


def run(args) -> int:
    from schedc import api
    from schedc.show.plot import output_format

    output_format(args.output)  # a wrong extension or place fails before any work
    common.check_outputs(args, (args.output, "-o"))
    if args.title and len(args.title) != len(args.files):
        raise SchedcError(f"give --title once per file ({len(args.files)}), or not at all")
    actions, link = offload_flags.link_and_actions(args)
    schedules, profiles, memory, sources = common.read_with_costs(args)
    costs = "" if sources is None else \
        "; costs from " + ", ".join(f"{s} for {Path(p).name}" for p, s in zip(args.files, sources))
    common.warn_mismatches("plot", args.files, schedules, memory, profiles)
    # control characters drawn escaped: matplotlib warned of each glyph missing from its font
    titles = [common.printable(t) for t in (args.title or [Path(f).name for f in args.files])]
    api.plot(schedules, profile=profiles, memory=memory, titles=titles, path=args.output,
             memory_actions=offload_flags.against(actions, ", ".join(map(str, args.files))), host_link=link)
    print(common.printable(f"wrote {args.output}: {len(schedules)} panel{'s' if len(schedules) > 1 else ''} "
          f"({', '.join(titles)}), memory limit {memory}{costs}"))
    return 0
