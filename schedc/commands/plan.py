"""`schedc plan`: choose the partition of a per-unit profile, the placement and the schedule together."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from schedc.costs import Profile, format_duration
from schedc.errors import SchedcError
from schedc.commands import common
from schedc.fileio import write_all


def register(sub) -> None:
    p = sub.add_parser("plan", help="choose the layer partition, placement and schedule under a memory cap in bytes")
    p.set_defaults(handler=run)
    p.add_argument("--profile", metavar="UNITS.json", required=True,
                   help="per-unit profile: embedding, each layer, norm + head + loss, in model order")
    p.add_argument("--ranks", type=int, required=True, help="pipeline ranks R")
    p.add_argument("--mb", type=int, required=True, help="microbatches M")
    p.add_argument("--memory", metavar="SIZE", required=True,
                   help="per-rank cap in bytes, static bytes included (e.g. 80GiB), or none")
    p.add_argument("--placement", choices=["loop", "v", "auto"], default="auto",
                   help="loop (1 stage per rank), v (2 per rank) or auto (both, keep the better; default)")
    p.add_argument("--objective", choices=["makespan", "span"], default="makespan")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S", help="seconds in all (default 60)")
    p.add_argument("-o", "--output", metavar="FILE.csv", default="plan.csv",
                   help="the schedule; the report goes to FILE.json, the merged per-stage profile to "
                        "FILE.profile.json (default plan.csv)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def output_paths(csv: str) -> tuple[Path, Path, Path]:
    """(plan.csv, plan.json, plan.profile.json)."""
    from schedc import csvio

    path = Path(csv)
    return path, csvio.report_path(path), path.with_suffix(".profile.json")


def run(args) -> int:
    from schedc.solver.interrupt import received, stop_on_sigint

    # as in `schedc compile`: the first Ctrl-C (or SIGTERM) ends the search and the best plan so
    # far is written
    with stop_on_sigint():
        res, csv = _plan(args)
        signum = received()
    if res.interrupted:
        word, code = common.stopped_by(signum)
        print(f"schedc plan: {word}: wrote the best plan found so far to {csv} (gap {100 * res.gap:.2f}%)",
              file=sys.stderr)
        return code
    return 0


def _plan(args):
    from schedc import csvio
    from schedc.plan import plan

    if not str(args.output).endswith(".csv"):
        raise SchedcError(f"-o {args.output}: the schedule file must end in .csv (the report goes beside it as .json)")
    if args.time_limit is None or not 0 < args.time_limit < math.inf:
        raise SchedcError(f"--time-limit must be a finite number of seconds > 0, got {args.time_limit}")
    csv, report_file, profile_file = output_paths(args.output)
    common.check_outputs(args, *((path, "-o") for path in (csv, report_file, profile_file)))
    units = Profile.load(args.profile)

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    res = plan(profile=units, ranks=args.ranks, microbatches=args.mb, memory=args.memory, placement=args.placement,
               objective=args.objective, time_limit=args.time_limit, progress=progress, source=args.profile)
    from schedc.plan import build_plan_report

    res = replace(res, report=build_plan_report(res, csv=csv.name))
    write_all({  # the report records the CSV's hash (csvio.schedule_files): never paired with another CSV
        **csvio.schedule_files(res.schedule, res.report, csv),
        profile_file: (res.profile.model_dump_json(indent=2, exclude_none=True) + "\n").encode(),
    })
    print(format_plan_summary(res, csv, report_file, profile_file))
    print()
    print(format_handoff(res))
    return res, csv


def format_plan_summary(res, csv, report_file, profile_file) -> str:
    p = res.compiled.problem

    def t(x):
        return format_duration(x, p.profile, digits=6)

    lines = [f"wrote {csv}, {report_file} and {profile_file}",
             f"plan: {p.n_stages} stages ({res.placement}) on {p.n_ranks} ranks, {p.n_microbatches} microbatches, "
             f"memory {p.memory}: {p.objective} {t(res.value)} ({res.compiled.status}, {res.solve_time:.1f}s)",
             f"  units per stage {res.counts}",
             f"  bound over every partition and schedule {t(res.bound)}: gap {100 * res.gap:.2f}%"]
    for c in res.comparisons:
        if c.value is None:
            lines.append(f"  {c.split} split ({c.placement}) {c.counts}: {c.note}")
        else:
            lines.append(f"  {c.split} split ({c.placement}) {c.counts}: best hand-made {c.schedule} {t(c.value)}, "
                         f"plan {100 * (c.value - res.value) / c.value:.1f}% shorter")
    for note in res.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def format_handoff(res) -> str:
    """Each framework's block (schedc.frameworks.REGISTRY), in its own module names."""
    from schedc.frameworks import render_handoff

    return render_handoff(res.report["frameworks"])
