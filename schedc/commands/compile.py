"""`schedc compile`: the fastest schedule under a memory limit (the integer program)."""

from __future__ import annotations

import sys

from schedc.commands import common
from schedc.costs import format_memory
from schedc.errors import SchedcError


def register(sub) -> None:
    p = sub.add_parser("compile", help="find the fastest schedule under a memory limit (integer program)")
    p.set_defaults(handler=run)
    p.add_argument("--stages", type=int, required=True, help="number of pipeline stages N")
    p.add_argument("--mb", type=int, required=True, help="number of microbatches M")
    p.add_argument("--ranks", type=int, help="number of ranks R (default: N for loop, N/2 for v)")
    p.add_argument("--placement", choices=["loop", "v"], default="loop", help="stage placement (default loop)")
    common.add_cost_args(p)
    p.add_argument("--objective", choices=["makespan", "span"], default="makespan",
                   help="makespan (ranks synchronize at the optimizer step; default) or per-rank span")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S", help="seconds to search (default 60)")
    p.add_argument("--solver", choices=["highs", "cbc"], help="MIP solver (default: HiGHS if installed, else CBC)")
    p.add_argument("-o", "--output", metavar="FILE.csv", default="schedule.csv",
                   help="where to write the CSV; the report goes to FILE.json (default schedule.csv)")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the compiled schedule next to the best baseline")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run(args) -> int:
    from schedc import csvio
    from schedc.solver.compile import compile_schedule

    if not str(args.output).endswith(".csv"):
        raise SchedcError(f"-o {args.output}: the schedule file must end in .csv (the report goes beside it as .json)")
    if args.time_limit is None or not args.time_limit > 0:
        raise SchedcError(f"--time-limit must be > 0 seconds, got {args.time_limit}")
    if args.plot:
        from schedc.plot import output_format

        output_format(args.plot)
    profile = common.profile_from_args(args, args.stages) if args.stages and args.stages > 0 else None
    memory = common.memory_from_args(args)

    def progress(e: dict) -> None:
        if args.quiet:
            return
        bound = e["bound"]
        print(f"[{e['elapsed']:7.1f}s] {e['phase']:<26s} best {e['best']:.6g}  bound {bound:.6g}  "
              f"gap {100 * e['gap']:.2f}%", file=sys.stderr, flush=True)

    res = compile_schedule(args.stages, args.mb, n_ranks=args.ranks, placement=args.placement, profile=profile,
                           memory=memory, objective=args.objective, time_limit=args.time_limit,
                           solver=args.solver, progress=progress)
    csvio.write_csv(res.schedule, args.output)
    report_file = csvio.write_report(res.report, args.output)
    if args.plot:
        from schedc import baselines as bl_mod
        from schedc.plot import plot_schedules

        schedules, titles = [res.schedule], [f"schedc ({res.status})"]
        fitting = {k: v for k, v in res.baselines.items() if v["fits"]}
        if fitting:
            best = min(fitting, key=lambda k: fitting[k][args.objective])
            schedules.append(bl_mod.make_baseline(best, args.stages, args.mb, n_ranks=res.problem.n_ranks,
                                                  placement=res.problem.placement_name))
            titles.append(best)
        plot_schedules(schedules, res.problem.profile, res.problem.memory, titles=titles, path=args.plot)
    print(format_compile_summary(res, args.output, report_file))
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def format_compile_summary(res, csv_path, report_file) -> str:
    p, sim = res.problem, res.sim
    lines = [
        f"wrote {csv_path} and {report_file}: {p.n_stages} stages on {p.n_ranks} ranks ({p.placement_name}), "
        f"{p.n_microbatches} microbatches, memory {p.memory}, objective {p.objective}",
        f"  makespan {sim.makespan:.6g}   span {sim.span:.6g}   bubble {100 * sim.bubble:.1f}%   "
        f"status {res.status}   lower bound {res.lower_bound:.6g}   gap {100 * res.gap:.2f}%   "
        f"time {res.solve_time:.1f}s",
        "  peak memory per rank vs limit: " + ", ".join(
            f"{format_memory(pk)}/{format_memory(lim)}" for pk, lim in zip(sim.peak_memory, sim.memory_limit)),
    ]
    fitting = {k: v for k, v in res.baselines.items() if v["fits"]}
    if fitting:
        lines.append("  baselines that fit: " + ", ".join(
            f"{k} {v['makespan']:.6g}" + (f" (span {v['span']:.6g})" if p.objective == "span" else "")
            for k, v in sorted(fitting.items(), key=lambda kv: kv[1][p.objective])))
    else:
        lines.append("  baselines that fit: none")
    return "\n".join(lines)

