"""`schedc compile`: the fastest schedule under a memory limit (the integer program)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import get_args

from schedc.core import limits
from schedc.choices import Solver
from schedc.cli import common
from schedc.core.costs import format_duration, format_memory
from schedc.errors import SchedcError
from schedc.io.fileio import write_all


# a limit shorter than the least compile takes is refused (docs/cli.md; schedc.solver.deadline
# bounds large sizes)
MIN_TIME_LIMIT = limits.MIN_TIME_LIMIT


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
    p.add_argument("--budget", choices=["time", "work"], default="time",
                   help="what --time-limit counts: wall-clock seconds (default) or work units, which give the same "
                        "schedule, value and bound on any machine however loaded (a wall-clock cap of 10x the limit "
                        "+ 60 s stays as a safety net); --deterministic is --budget work")
    p.add_argument("--deterministic", dest="budget", action="store_const", const="work", help="same as --budget work")
    p.add_argument("--solver", choices=[s for s in get_args(Solver) if s != "auto"],
                   help="one engine only: the integer program with HiGHS or CBC, or OR-Tools' CP-SAT (default: "
                        "CP-SAT for 40%% of the time when installed, then the integer program with HiGHS, else CBC, and "
                        "on instances too large for it, CP-SAT windows)")
    p.add_argument("-o", "--output", metavar="FILE.csv", default="schedule.csv",
                   help="where to write the CSV; the report goes to FILE.json (default schedule.csv)")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the compiled schedule next to the best baseline")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run(args) -> int:
    from schedc.solver.interrupt import received, stop_on_sigint

    # Ctrl-C from here on stops the search and the best schedule so far is written. Taken before
    # pulp is imported: its optional-solver imports use bare excepts that would swallow a
    # KeyboardInterrupt (the compile then ran to its time limit and exited 0). SIGTERM (a batch
    # scheduler's time limit) does the same and exits 143.
    with stop_on_sigint():
        res = _compile(args)
        signum = received()
    if res.interrupted:
        word, code = common.stopped_by(signum)
        common.echo(f"schedc compile: {word}: wrote the best schedule found so far to {args.output} "
                    f"(status {res.status}, gap {100 * res.gap:.2f}%)", file=sys.stderr)
        return code
    return 0


def _compile(args):
    from schedc.io import csvio
    from schedc.solver.compile import compile_schedule

    report = _check_request(args)  # sizes too (schedc.core.limits), before a profile of that many stages is built
    profile = common.profile_from_args(args, args.stages) if args.stages and args.stages > 0 else None
    if args.profile and profile is not None and profile.n_stages != args.stages:
        raise SchedcError(f"--profile {args.profile} describes {profile.n_stages} stages but --stages is "
                          f"{args.stages}; give --stages {profile.n_stages}, or a profile of {args.stages} stages")
    memory = common.memory_from_args(args)

    def progress(e: dict) -> None:
        if args.quiet:
            return
        unit = "s" if args.budget == "time" else "w"  # work units under --budget work
        print(f"[{e['elapsed']:7.1f}{unit}] {e['phase']:<26s} best {e['best']:.6g}  bound {e['bound']:.6g}  "
              f"gap {100 * e['gap']:.2f}%", file=sys.stderr, flush=True)

    res = compile_schedule(args.stages, args.mb, n_ranks=args.ranks, placement=args.placement, profile=profile,
                           memory=memory, objective=args.objective, time_limit=args.time_limit,
                           solver=args.solver, progress=progress, runtime=args.runtime, budget=args.budget)
    # the CSV and its report (which records the CSV's hash) are renamed into place together
    files = csvio.schedule_files(res.schedule, res.report, args.output)
    if args.plot:
        files[args.plot] = _plot_bytes(res, args)
    write_all(files)  # all or none: a failing plot leaves no CSV or report behind
    common.echo(format_compile_summary(res, args.output, report))  # a profile's names, escaped
    if args.plot:
        common.echo(f"plot: {args.plot}")
    return res


def _check_request(args) -> Path:
    """Everything that can fail before the solve, checked before it: names, places, limits.
    Returns the report's path."""
    from schedc.io import csvio

    limits.check_schedule_size(args.stages, args.mb, args.ranks)
    if not str(args.output).endswith(".csv"):
        raise SchedcError(f"-o {args.output}: the schedule file must end in .csv (the report goes beside it as .json)")
    if args.time_limit is None or not 0 < args.time_limit < math.inf:
        raise SchedcError(f"--time-limit must be a finite number of seconds > 0 (e.g. 60, or 3600 for a long "
                          f"search), got {args.time_limit}")
    if args.time_limit < MIN_TIME_LIMIT:  # less than building the least problem takes: nothing is searched
        raise SchedcError(f"--time-limit {args.time_limit:g} is shorter than any compile takes; give "
                          f"--time-limit {MIN_TIME_LIMIT:g} or more (1 for a quick answer)")
    report = csvio.report_path(args.output)
    outputs = [(args.output, "-o"), (report, "-o (the report beside it)")]
    if args.plot:
        from schedc.show.plot import output_format

        output_format(args.plot)
        outputs.append((args.plot, "--plot"))
    common.check_outputs(args, *outputs)
    return report


def _plot_bytes(res, args) -> bytes:
    """The compiled schedule next to the best hand-made one that fits, as the picture's bytes."""
    from schedc.show.plot import output_format, plot_schedules, render_figure
    from schedc.solver.engines.warm import feasible_baselines

    schedules, titles = [res.schedule], [f"schedc ({res.status})"]
    # the hand-made ones and zb-greedy, as the report lists (built during the compile, on its graph)
    fitting = feasible_baselines(res.graph or res.problem)
    if fitting:
        best, sched, _ = min(fitting, key=lambda b: b[2].objective(args.objective))
        schedules.append(sched)
        titles.append(best)
    fig = plot_schedules(schedules, res.problem.profile, res.problem.memory, titles=titles)
    return render_figure(fig, output_format(args.plot))


def format_compile_summary(res, csv_path, report_file) -> str:
    p, sim = res.problem, res.sim

    def t(x: float) -> str:
        return format_duration(x, p.profile, digits=6)

    lines = [
        f"wrote {csv_path} and {report_file}: {common.shape(p.n_stages, p.n_ranks, p.n_microbatches, p.placement_name)}, "
        f"memory {p.memory}, objective {p.objective}, {p.runtime} runtime",
        f"  makespan {t(sim.makespan)}   span {t(sim.span)}   bubble {100 * sim.bubble:.1f}%   "
        f"status {res.status}   lower bound {t(res.lower_bound)}   gap {100 * res.gap:.2f}%   "
        + (f"time {res.solve_time:.1f}s" if res.budget == "time" else
         f"work {res.solve_time:.2f} units" + (" (cut by the wall clock: not reproducible)"
                                                 if res.report.get("cut_by_wall_clock") else " (reproducible)")),
        "  peak memory / limit per rank: " + ", ".join(
            f"{format_memory(pk)}/{format_memory(lim)}" for pk, lim in zip(sim.peak_memory, sim.memory_limit)),
    ]
    fitting = {k: v for k, v in res.baselines.items() if v["fits"]}
    if fitting:
        lines.append("  baselines that fit: " + ", ".join(
            f"{k} {t(v['makespan'])}" + (f" (span {t(v['span'])})" if p.objective == "span" else "")
            for k, v in sorted(fitting.items(), key=lambda kv: kv[1][p.objective])))
    else:
        lines.append("  baselines that fit: none")
    same = res.report.get("same_as_baseline")
    if same:
        proof = "; the lower bound proves nothing shorter fits" if res.status == "optimal" else ""
        lines.append(f"  the compiled schedule is {same} itself (a baseline above, same order on every rank){proof}")
    lines.append("  limits the step: " + res.report["limiter"]["message"])
    lines += ["  " + line for line in explain_units(p)]
    return "\n".join(lines)


def explain_units(problem) -> list[str]:
    """What the numbers above are measured in: the time unit of --costs and the memory unit, and
    what the memory limit is in that unit (1p = 1F1B's need on its most loaded rank)."""
    from schedc.core.costs import one_f_one_b_peaks

    out = []
    uniform = problem.profile.model == "uniform"
    if uniform:
        out.append("units: times are in the unit of --costs F,I,W (one stage's F, I and W of one microbatch); memory "
                   "counts one microbatch's activation of one stage as 1")
    if problem.memory.kind == "relative":
        peaks = one_f_one_b_peaks(problem.profile, problem.placement)
        static = problem.fixed_bytes  # static bytes, buffers and reserve (schedc.core.cost_model)
        r = max(range(len(peaks)), key=lambda i: (static[i] + peaks[i], -i))
        act = sum(problem.profile.stages[s].activation_bytes for s in problem.stages_of(r))
        held = peaks[r] / act if act else 0.0
        out.append(f"memory {problem.memory} = {format_memory(problem.memory_caps[r])} on every rank: "
                   f"{problem.memory.value:g} x what 1F1B holds on its most loaded rank (rank {r}: {held:g} "
                   f"microbatches of its stages{', plus static bytes' if static[r] else ''})")
    return out
