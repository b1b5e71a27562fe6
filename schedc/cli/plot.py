"""`schedc plot`: Gantt charts and memory curves of CSV schedules on one time axis.

Each CSV is drawn with its own costs when it brings them: ``NAME.profile.json`` beside it (``schedc plan``
writes one), else the costs its report ``NAME.json`` names (a plan's merged profile, a compile's
inputs). ``--profile``, ``--costs`` or ``--comm`` give one set of costs for every CSV instead.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from schedc.cli import common
from schedc.core.costs import Profile
from schedc.errors import SchedcError


def register(sub) -> None:
    p = sub.add_parser("plot", help="draw Gantt charts and memory curves of CSV schedules (png, svg, pdf)")
    p.set_defaults(handler=run)
    p.add_argument("files", nargs="+", metavar="FILE.csv",
                   help="one panel per file, stacked on one time axis; each with its own costs when NAME.profile.json "
                        "or a report NAME.json sits beside it (unless --profile/--costs give one for all)")
    common.add_cost_args(p)
    p.add_argument("--title", action="append", metavar="TEXT",
                   help="panel title, once per file in order (default: the file name)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png", help="picture to write: .png, .svg or .pdf")


def costs_beside(csv: str) -> Optional[tuple[Profile, str]]:
    """The costs a CSV brings (NAME.profile.json, else its report's), with the file they came from."""
    from pydantic import ValidationError

    from schedc.io import csvio
    from schedc.core.costs import describe_validation_error

    path = Path(csv)
    profile_file = path.with_suffix(".profile.json")
    if profile_file.is_file():
        return Profile.load(profile_file), profile_file.name
    if not csvio.report_path(path).is_file():
        return None
    try:
        report = csvio.read_report(path)
    except SchedcError as e:  # e.g. a report of another version of the CSV: its costs are not this one's
        print(f"schedc: warning: ignoring the report beside {path}: {e}", file=sys.stderr)
        return None
    costs = report.get("profile") or report.get("inputs", {}).get("costs")
    if not isinstance(costs, dict):
        return None
    try:
        return Profile.model_validate(costs), csvio.report_path(path).name
    except ValidationError as e:
        raise SchedcError(f"{csvio.report_path(path)}: its costs are not a profile: {describe_validation_error(e)}") \
            from None


def read_own_costs(args):
    """Every CSV with the costs beside it, or None when none brings any (then the defaults apply to all)."""
    from schedc import api

    schedules, found = [], []
    for path in args.files:
        schedule = api.read_csv(path)
        api.validate(schedule)
        schedule.name = schedule.name or Path(path).stem
        schedules.append(schedule)
        found.append(costs_beside(path))
    if not any(found):
        return None
    missing = [p for p, f in zip(args.files, found) if f is None]
    if missing:
        have = next(f"{p} ({f[1]})" for p, f in zip(args.files, found) if f)
        raise SchedcError(f"{have} brings its costs but {missing[0]} has none: put "
                          f"{Path(missing[0]).stem}.profile.json beside it, or give one --profile for every file")
    for path, schedule, (profile, source) in zip(args.files, schedules, found):
        if profile.n_stages != schedule.n_stages:
            raise SchedcError(f"{path}: the schedule has {schedule.n_stages} stages but {source} beside it describes "
                              f"{profile.n_stages}; give --profile")
    return schedules, [p.executed(args.runtime) for p, _ in found], [s for _, s in found]


def run(args) -> int:
    from schedc import api
    from schedc.show.plot import output_format

    output_format(args.output)  # a wrong extension or place fails before any work
    common.check_outputs(args, (args.output, "-o"))
    if args.title and len(args.title) != len(args.files):
        raise SchedcError(f"give --title once per file ({len(args.files)}), or not at all")
    own = None if (args.profile or args.costs or args.comm is not None) else read_own_costs(args)
    if own is None:
        schedules, profiles = common.read_checked(args)
        memory = common.judged_memory(args)
        costs = ""
    else:
        schedules, profiles, sources = own
        memory = common.judged_memory(args, bytes_need_profile=False)  # the costs beside the CSVs are in bytes
        costs = "; costs from " + ", ".join(f"{s} for {Path(p).name}" for p, s in zip(args.files, sources))
    common.warn_mismatches("plot", args.files, schedules, memory, profiles)
    # control characters drawn escaped: matplotlib warned of each glyph missing from its font
    titles = [common.printable(t) for t in (args.title or [Path(f).name for f in args.files])]
    api.plot(schedules, profile=profiles, memory=memory, titles=titles, path=args.output)
    print(common.printable(f"wrote {args.output}: {len(schedules)} panel{'s' if len(schedules) > 1 else ''} "
          f"({', '.join(titles)}), memory limit {memory}{costs}"))
    return 0
