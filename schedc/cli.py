"""`schedc` command line: argument parsing and printing only; the work happens in the modules.

Every subcommand is a pair: ``add_<name>(subparsers)`` declares its arguments and
``run_<name>(args)`` calls the Python API and prints. A user-facing failure is a
:class:`SchedcError` (or an OSError on a path) and becomes one line on stderr and exit code 2;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from schedc import __version__
from schedc.costs import MemoryLimit, Profile, format_bytes, parse_comm, parse_costs
from schedc.errors import SchedcError

# Subcommands in the order `schedc --help` lists them; each section below appends its own.
COMMANDS: list[str] = ["baseline", "validate", "simulate"]


# ---------------------------------------------------------------- shared argument groups


def _add_cost_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("costs")
    g.add_argument("--profile", metavar="P.json", help="measured per-stage costs (schedc profile)")
    g.add_argument("--costs", metavar="F,I,W", default=None,
                   help="identical stages: seconds (or units) of F, I, W (default 1,1,1)")
    g.add_argument("--comm", metavar="C", default=None,
                   help="communication time per stage boundary: one number or one per boundary")
    g.add_argument("--memory", metavar="SPEC", default="1p",
                   help="per-rank memory limit: Kp (1p = what 1F1B holds), a size (40GiB) or none; default 1p")


def _profile_from_args(args, n_stages: int) -> Profile:
    """The profile named by --profile, or identical stages from --costs/--comm."""
    if args.profile:
        if args.costs:
            raise SchedcError("give either --profile or --costs, not both")
        profile = Profile.load(args.profile)
        if args.comm is not None:
            profile = profile.model_copy(update={"comm": parse_comm(args.comm)})
            Profile.model_validate(profile.model_dump())
        return profile
    f, i, w = parse_costs(args.costs or "1,1,1")
    return Profile.uniform(n_stages, f, i, w, comm=parse_comm(args.comm) if args.comm else 0.0)


def _memory_from_args(args) -> MemoryLimit:
    return MemoryLimit.parse(args.memory)


# ---------------------------------------------------------------- baseline


def add_baseline(sub) -> None:
    p = sub.add_parser("baseline", help="emit a hand-made schedule (GPipe, 1F1B, ZB-H1, ...) as CSV")
    p.add_argument("name", nargs="?", help="gpipe, 1f1b, zb-h1, zb-h2, interleaved-1f1b, zb-v, ...")
    p.add_argument("--list", action="store_true", help="list the hand-made schedules")
    p.add_argument("--stages", type=int, help="number of pipeline stages N")
    p.add_argument("--mb", type=int, help="number of microbatches M")
    p.add_argument("--ranks", type=int, help="number of ranks R (default: N, or N/2 for V schedules)")
    p.add_argument("--placement", choices=["loop", "v"], help="stage placement (default: the schedule's own)")
    p.add_argument("-o", "--output", metavar="FILE.csv", help="write the CSV here (default: print it)")


def run_baseline(args) -> int:
    from schedc import baselines, csvio

    if args.list:
        for info in baselines.list_baselines():
            print(f"{info.name:18s} {info.placement:5s} {info.description}")
        return 0
    if not args.name or args.stages is None or args.mb is None:
        raise SchedcError("baseline: give NAME --stages N --mb M (or --list)")
    schedule = baselines.make_baseline(args.name, args.stages, args.mb, n_ranks=args.ranks, placement=args.placement)
    if args.output:
        csvio.write_csv(schedule, args.output)
        print(f"wrote {args.output}: {schedule.name}, {schedule.n_stages} stages on {schedule.n_ranks} ranks, "
              f"{schedule.n_microbatches} microbatches")
    else:
        sys.stdout.write(csvio.to_csv_text(schedule))
    return 0


# ---------------------------------------------------------------- validate


def add_validate(sub) -> None:
    p = sub.add_parser("validate", help="check a CSV schedule: completeness, dependencies, deadlock")
    p.add_argument("file", metavar="FILE.csv")
    p.add_argument("--stages", type=int, help="expected number of stages")
    p.add_argument("--mb", type=int, help="expected number of microbatches")
    p.add_argument("--ranks", type=int, help="expected number of ranks")
    p.add_argument("--placement", choices=["loop", "v"], help="expected placement")


def run_validate(args) -> int:
    from schedc import csvio, validate

    schedule = csvio.read_csv(args.file)
    validate.validate(schedule, n_stages=args.stages, n_microbatches=args.mb, n_ranks=args.ranks,
                      placement=args.placement, source=args.file)
    print(f"{args.file}: valid: {schedule.n_stages} stages on {schedule.n_ranks} ranks "
          f"({_placement_label(schedule)}), {schedule.n_microbatches} microbatches")
    return 0


def _placement_label(schedule) -> str:
    from schedc.ir import placement_name

    return placement_name(schedule.placement)


# ---------------------------------------------------------------- simulate


def add_simulate(sub) -> None:
    p = sub.add_parser("simulate", help="predict step time, bubble and memory of CSV schedules")
    p.add_argument("files", nargs="+", metavar="FILE.csv")
    _add_cost_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run_simulate(args) -> int:
    from schedc import csvio, validate
    from schedc.simulate import simulate

    memory = _memory_from_args(args)
    rows = []
    for path in args.files:
        schedule = csvio.read_csv(path)
        validate.validate(schedule, source=path)
        profile = _profile_from_args(args, schedule.n_stages)
        res = simulate(schedule, profile, memory)
        rows.append((path, schedule, res))
    if args.json:
        print(json.dumps([summary_dict(p, s, r) for p, s, r in rows], indent=2))
        return 0
    for path, schedule, res in rows:
        print(format_simulation(path, schedule, res, memory))
        print()
    if len(rows) > 1:
        print(format_comparison(rows))
    return 0


def summary_dict(path, schedule, res) -> dict:
    return {
        "file": str(path),
        "stages": schedule.n_stages,
        "ranks": schedule.n_ranks,
        "microbatches": schedule.n_microbatches,
        "makespan": res.makespan,
        "span": res.span,
        "bubble": res.bubble,
        "bubble_per_rank": res.bubble_per_rank,
        "peak_memory": res.peak_memory,
        "memory_limit": [None if m == float("inf") else m for m in res.memory_limit],
        "fits_memory": res.fits,
    }


def format_simulation(path, schedule, res, memory: MemoryLimit) -> str:
    lines = [
        f"{path}: {schedule.n_stages} stages on {schedule.n_ranks} ranks, {schedule.n_microbatches} microbatches",
        f"  makespan {res.makespan:.4g}   span {res.span:.4g}   bubble {100 * res.bubble:.1f}%   "
        f"memory limit {memory}: {'fits' if res.fits else 'EXCEEDED'}",
        f"  {'rank':>4}  {'busy':>9}  {'bubble':>7}  {'peak memory':>12}  {'limit':>10}",
    ]
    for r in range(schedule.n_ranks):
        flag = "" if res.peak_memory[r] <= res.memory_limit[r] * (1 + 1e-9) else "  over"
        lines.append(f"  {r:>4}  {res.busy[r]:>9.4g}  {100 * res.bubble_per_rank[r]:>6.1f}%  "
                     f"{_fmt_mem(res.peak_memory[r]):>12}  {_fmt_mem(res.memory_limit[r]):>10}{flag}")
    return "\n".join(lines)


def format_comparison(rows) -> str:
    best = min(r.makespan for _, _, r in rows)
    lines = [f"{'schedule':40s} {'makespan':>10} {'vs best':>8} {'bubble':>7} {'max peak':>10} {'fits':>5}"]
    for path, _, res in rows:
        lines.append(f"{str(path)[-40:]:40s} {res.makespan:>10.4g} {res.makespan / best:>7.3f}x "
                     f"{100 * res.bubble:>6.1f}% {_fmt_mem(max(res.peak_memory)):>10} {'yes' if res.fits else 'no':>5}")
    return "\n".join(lines)


def _fmt_mem(x: float) -> str:
    if x == float("inf"):
        return "none"
    return format_bytes(x) if x >= 1024 else f"{x:.4g}"


# ---------------------------------------------------------------- compile (solver)

# ---------------------------------------------------------------- plot, trace (pictures)

# ---------------------------------------------------------------- profile, calibrate (profiler)

# ---------------------------------------------------------------- library (schedule library)

# ---------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="schedc", description="Pipeline-schedule compiler for PyTorch training.")
    parser.add_argument("--version", action="version", version=f"schedc {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    module = sys.modules[__name__]
    for name in COMMANDS:
        getattr(module, f"add_{name}")(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    parser = build_parser()
    args = parser.parse_args(argv)
    runner = getattr(sys.modules[__name__], f"run_{args.command.replace('-', '_')}")
    try:
        return runner(args)
    except SchedcError as e:
        if debug:
            raise
        print(f"schedc {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if debug:
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(f"schedc {args.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"schedc {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
