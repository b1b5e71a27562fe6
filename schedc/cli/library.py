"""`schedc library`: the precompiled schedules (build, list, show, check)."""

from __future__ import annotations

import math
import sys

from schedc.cli.common import check_json_output, echo, microbatches_count, ranks_count
from schedc.core.costs import MemoryLimit, Profile
from schedc.core.formatting import format_memory
from schedc.errors import SchedcError, printable


def register(sub) -> None:
    p = sub.add_parser("library", help="precompiled schedules for common set-ups: build, list, show, check")
    p.set_defaults(handler=run)
    lsub = p.add_subparsers(dest="library_command", metavar="ACTION")
    lsub.required = True

    b = lsub.add_parser("build", help="compile the library's set-ups into DIR (CSV + JSON + README.md index)")
    b.add_argument("dir", nargs="?", metavar="DIR", help="where to write (default: the library schedc finds)")
    b.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="time limit of the largest set-up; smaller ones get proportionally less "
                        "(default 60: at most ~13 minutes for all 64 set-ups, ~5 measured)")
    b.add_argument("--only", metavar="GLOB", help="only set-ups whose name matches (e.g. 'r8_*_v_*'; commas allowed)")
    b.add_argument("--index-only", action="store_true", help="only regenerate README.md from the JSON reports")

    ls = lsub.add_parser("list", help="list the library's schedules (filters combine)")
    ls.add_argument("--dir", metavar="DIR", help="library directory (default: $SCHEDC_LIBRARY, the checkout's "
                    "schedules/, or the installed copy)")
    ls.add_argument("--ranks", type=ranks_count(), help="only this many ranks")
    ls.add_argument("--mb", type=microbatches_count(), help="only this many microbatches")
    ls.add_argument("--memory", help="only this memory limit (1p or 2p)")
    ls.add_argument("--placement", choices=["loop", "v"], help="only this placement")
    ls.add_argument("--costs", choices=["uniform", "transformer"], help="only these costs")

    sh = lsub.add_parser("show", help="print a schedule's report summary and the path to its CSV")
    sh.add_argument("name", metavar="NAME", help="e.g. r8_mb16_mem1p_v_uniform")
    sh.add_argument("--dir", metavar="DIR", help="library directory")
    sh.add_argument("--write-profile", metavar="P.json",
                    help="also write the costs it was compiled for as a profile (for simulate/plot --profile)")

    ck = lsub.add_parser("check", help="verify the library without solving (validate, torch, re-simulate, index)")
    ck.add_argument("dir", nargs="?", metavar="DIR", help="library directory (default: the library schedc finds)")
    ck.add_argument("--no-torch", action="store_true", help="skip the torch load check")


def run(args) -> int:
    action = {"build": _build, "list": _list, "show": _show, "check": _check}.get(args.library_command)
    if action is None:
        raise SchedcError(f"unknown library action {args.library_command!r}")
    return action(args)


def _build(args) -> int:
    from schedc import library as lib

    directory = lib.find_library(args.dir, for_build=True)
    if directory.exists() and not directory.is_dir():  # mkdir's own words were "e.csv: File exists"
        raise SchedcError(f"{directory}: is a file, not a directory; give the directory to build the library in")
    if args.index_only:
        path = lib.write_index(directory)
        echo(f"wrote {path}")
        return 0
    setups = lib.select(lib.DEFAULT_SETUPS, args.only)
    limit = args.time_limit if args.time_limit is not None else lib.DEFAULT_MAX_TIME_LIMIT
    if not 0 < limit < math.inf:
        raise SchedcError(f"--time-limit must be a finite number of seconds > 0, got {args.time_limit}")
    echo(f"building {len(setups)} schedule(s) into {directory} (solver time at most "
         f"{lib.default_budget(setups, limit):.0f}s)")
    lib.build_library(directory, setups, time_limit=limit, progress=lambda line: echo(line))
    echo(f"wrote {directory / lib.INDEX_NAME}")
    return 0


def _list(args) -> int:
    from schedc import library as lib

    directory = lib.find_library(args.dir)
    entries, problems = lib.load_entries(directory)
    memory = str(MemoryLimit.parse(args.memory)) if args.memory else None
    chosen = [e for e in entries
              if (args.ranks is None or e.setup.ranks == args.ranks) and (args.mb is None or e.setup.mb == args.mb)
              and (memory is None or e.setup.memory == memory)
              and (args.placement is None or e.setup.placement == args.placement)
              and (args.costs is None or e.setup.costs == args.costs)]
    print(f"{'name':34s} {'stages':>6} {'makespan':>14} {'bubble':>7} {'status':>9} {'gap':>7}")
    for e in chosen:
        pred = e.report.get("predicted") or {}
        mk = pred.get("makespan")
        gap = e.report.get("gap")
        echo(f"{e.setup.name:34s} {e.setup.stages:>6} {lib.format_rank_makespan(mk, e.setup):>14} "
             f"{100 * pred.get('bubble', 0.0):>6.1f}% {printable(e.report.get('status', '?')):>9} "
             f"{'-' if gap is None else f'{100 * gap:.2f}%':>7}")
    echo(f"{len(chosen)} of {len(entries)} schedules in {directory}")
    if any(e.setup.costs == "uniform" for e in chosen):
        print("rank-F: uniform makespans in units of one rank's forward over all its stages (every stage has "
              "F = I = W = 1, so a v rank's two stages make one rank-F of 2 units: its report reads twice this)")
    for line in problems:
        echo(f"warning: {line}", file=sys.stderr)
    return 0


def _show(args) -> int:
    from schedc import library as lib
    from schedc.io import csvio

    entry = lib.find_entry(args.name, args.dir)
    if args.write_profile:  # before printing anything: never over the library's own files
        from schedc.io.fileio import check_not_input, check_writable

        check_writable(args.write_profile, "--write-profile")
        check_not_input(args.write_profile, "--write-profile", [(entry.csv, "library schedule"),
                                                                 (csvio.report_path(entry.csv), "library report")])
        check_json_output(args.write_profile, "a profile", "--write-profile")
    echo(format_library_entry(entry))
    if args.write_profile:
        try:
            profile = Profile.model_validate(entry.report["inputs"]["costs"])
        except (KeyError, TypeError, ValueError):
            raise SchedcError(f"{csvio.report_path(entry.csv)}: inputs.costs is missing or not a valid profile") from None
        profile.save(args.write_profile)
        echo(f"wrote {args.write_profile}: the costs {entry.setup.name} was compiled for")
    return 0


def _check(args) -> int:
    from schedc import library as lib

    directory = lib.find_library(args.dir)
    problems = lib.check_library(directory, torch=False if args.no_torch else None)
    for line in problems:
        echo(line)
    if problems:
        echo(f"schedc library check: {len(problems)} problem(s) in {directory}", file=sys.stderr)
        return 1
    n = len(list(directory.glob("*.csv")))
    echo(f"{directory}: {n} schedules ok (validated, {'' if lib.torch_available() and not args.no_torch else 'NOT '}"
          f"loaded in torch, re-simulated = reports, index current)")
    return 0


def format_library_entry(entry) -> str:
    from schedc import library as lib
    from schedc.io import csvio

    rep, s = entry.report, entry.setup
    pred = rep.get("predicted") or {}
    mk = pred.get("makespan")
    peaks = pred.get("peak_memory_per_rank") or []
    limits = pred.get("memory_limit_per_rank") or []
    p_units = lib.peak_in_p(rep)
    lines = [
        f"{s.name}: {s.stages} stages on {s.ranks} ranks ({s.placement}), {s.mb} microbatches, memory {s.memory}, "
        f"{s.costs} costs, objective {rep.get('inputs', {}).get('objective', '?')}",
        f"  csv:    {entry.csv}",
        f"  report: {csvio.report_path(entry.csv)}",
        f"  makespan {lib.format_makespan(mk, s.costs)}{'' if s.costs != 'uniform' else ' units'}"
        f"{'' if s.costs != 'uniform' or s.stages_per_rank == 1 else f' (= {lib.format_rank_makespan(mk, s)})'}   span {lib.format_makespan(pred.get('span'), s.costs)}   "
        f"bubble {100 * pred.get('bubble', 0.0):.1f}%   status {rep.get('status', '?')}   "
        f"lower bound {lib.format_makespan(rep.get('lower_bound'), s.costs)}   gap {100 * (rep.get('gap') or 0.0):.2f}%   "
        f"solve time {rep.get('solve_time', 0.0):.1f}s",
        f"  peak memory / limit per rank (needs {'-' if p_units is None else f'{p_units:.2f}p'} of {s.memory}): "
        + ", ".join(f"{format_memory(pk)}/{format_memory(lim if lim is not None else float('inf'))}"
                    for pk, lim in zip(peaks, limits)),
    ]
    bl = rep.get("baselines") or {}
    if bl:
        lines.append("  hand-made schedules under the same costs: " + ", ".join(
            f"{k} {lib.format_makespan(v.get('makespan'), s.costs)}{'' if v.get('fits') else ' (over memory)'}"
            for k, v in sorted(bl.items(), key=lambda kv: kv[1].get("makespan", 0.0))))
    lines.append(f"  simulate: schedc simulate {entry.csv} --memory {s.memory}"
                 + ("" if s.costs == "uniform" else f" --profile P.json  (write P.json with: schedc library show "
                                                    f"{s.name} --write-profile P.json)"))
    return "\n".join(printable(line) for line in lines)  # a report's fields: one line each

