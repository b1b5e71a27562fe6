"""`schedc compile`: the fastest schedule under a memory limit, through :func:`schedc.api.compile`.

The command reads its flags into the API's keyword arguments (a flag not given is left out, so
the API's default applies), writes the CSV, its report and the picture together, and prints the
summary."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import get_args

from schedc import api
from schedc.choices import Budget, Objective, Solver
from schedc.cli import common, offload_flags
from schedc.core import limits
from schedc.core.costs import format_duration
from schedc.core.formatting import format_memory
from schedc.errors import SchedcError
from schedc.io.fileio import write_all


def register(sub) -> None:
    p = sub.add_parser("compile", help="find the fastest schedule under a memory limit (integer program)")
    p.set_defaults(handler=run)
    p.add_argument("--stages", type=common.stages_count(), required=True, help="number of pipeline stages N")
    p.add_argument("--mb", type=common.microbatches_count(), required=True, help="number of microbatches M")
    p.add_argument("--ranks", type=common.ranks_count(), help="number of ranks R (default: N for loop, N/2 for v)")
    p.add_argument("--placement", choices=["loop", "v"], help="stage placement (default loop)")
    common.add_cost_args(p)
    p.add_argument("--objective", choices=get_args(Objective),
                   help="makespan (ranks synchronize at the optimizer step; default) or per-rank span")
    p.add_argument("--time-limit", type=float, metavar="S", help="seconds to search (default 60)")
    p.add_argument("--budget", choices=get_args(Budget),
                   help="what --time-limit counts: wall-clock seconds (default) or work units, which give the same "
                        "schedule, value and bound on any machine however loaded (a wall-clock cap of 10x the limit "
                        "+ 60 s stays as a safety net); --deterministic is --budget work")
    p.add_argument("--deterministic", dest="budget", action="store_const", const="work", help="same as --budget work")
    p.add_argument("--solver", choices=[s for s in get_args(Solver) if s != "auto"],
                   help="one engine only: the integer program with HiGHS or CBC, or OR-Tools' CP-SAT (default: "
                        "CP-SAT for 40%% of the time when installed, then the integer program with HiGHS, else CBC, and "
                        "on instances too large for it, CP-SAT windows)")
    p.add_argument("--offload", choices=["none", "auto"],
                   help="auto: also offload microbatches' activations to host memory where that makes a shorter "
                        "schedule fit (schedc.solver.offload); the report gets \"memory_actions\" and the bound "
                        "allows offload: the uncapped one, or what offload cannot move where higher (default none)")
    p.add_argument("--recompute-profile", metavar="FILE.json", type=common.path,
                   help="with --offload auto: the same stages profiled with --ac full (or a plan or report that "
                        "records them in \"offload\".\"recompute_profile\"), so that single microbatches may be "
                        "recomputed too; their backward runs as B")
    offload_flags.add_link_args(p)
    p.add_argument("-o", "--output", metavar="FILE.csv", type=common.path, default="schedule.csv",
                   help="where to write the CSV; the report goes to FILE.json (default schedule.csv)")
    p.add_argument("--plot", metavar="FILE.png", type=common.path, help="also draw the compiled schedule next to the best baseline")
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


def compile_arguments(args) -> dict:
    """The keyword arguments of :func:`schedc.api.compile` that the flags give (those not given
    are left out: the API's defaults apply)."""
    # sizes first (schedc.core.limits, as the API checks them), before a profile of that many stages is built
    limits.check_schedule_size(args.stages, args.mb, args.ranks)
    profile = common.profile_from_args(args, args.stages)
    if args.profile:
        assert profile is not None  # profile_from_args reads --profile whenever it is given
        if profile.n_stages > args.stages and all(stage.modules for stage in profile.stages):
            raise SchedcError(_per_unit_message(args, profile.n_stages))
        if profile.n_stages != args.stages:
            raise SchedcError(f"--profile {args.profile} describes {profile.n_stages} stages but --stages is "
                              f"{args.stages}; give --stages {profile.n_stages}, or a profile of {args.stages} "
                              f"stages")
    link = None
    if offload_flags.link_given(args):
        link = offload_flags.link_from_args(args)
        if args.offload != "auto":
            raise SchedcError("--host-bandwidth, --host-latency, --host-memory and --link-shared-by describe the link "
                              "offload uses; give --offload auto with them")
    return common.given(stages=args.stages, microbatches=args.mb, ranks=args.ranks, placement=args.placement,
                        profile=profile, memory=common.memory_from_args(args), objective=args.objective,
                        execution=args.runtime, time_limit=args.time_limit, solver=args.solver, budget=args.budget,
                        offload=args.offload, host_link=link, recompute_profile=args.recompute_profile)


def _per_unit_message(args, n_units: int) -> str:
    """A per-unit profile (schedc profile --units) is schedc plan's input: said with the plan command
    of these ranks and microbatches, rather than "give --stages N" (one stage per layer)."""
    from schedc.core.costs import MemoryLimit

    ranks = args.ranks or (args.stages // 2 if args.placement == "v" and args.stages > 1 else args.stages)
    limit = MemoryLimit.parse(args.memory) if args.memory is not None else None
    memory = args.memory if limit is not None and limit.kind in ("bytes", "none") else "SIZE"  # plan takes no Kp
    return (f"--profile {args.profile} has {n_units} entries naming their modules (a per-unit profile), but --stages "
            f"is {args.stages}: compile takes one entry per stage; `schedc plan --profile {args.profile} --ranks "
            f"{ranks} --mb {args.mb} --memory {memory}` groups the units into stages and compiles their schedule")


def _compile(args):
    from schedc.io import csvio

    report = _check_outputs(args)
    kwargs = compile_arguments(args)

    def progress(e: dict) -> None:
        if args.quiet:
            return
        unit = "w" if args.budget == "work" else "s"  # work units under --budget work
        print(f"[{e['elapsed']:7.1f}{unit}] {e['phase']:<26s} best {e['best']:.6g}  bound {e['bound']:.6g}  "
              f"gap {100 * e['gap']:.2f}%", file=sys.stderr, flush=True)

    res = api.compile(**kwargs, progress=progress)
    # the CSV and its report (which records the CSV's hash) are renamed into place together
    files = csvio.schedule_files(res.schedule, res.report.to_dict(), args.output)
    if args.plot:
        files[args.plot] = _plot_bytes(res, args.plot)
    write_all(files)  # all or none: a failing plot leaves no CSV or report behind
    try:
        common.echo(format_compile_summary(res, args.output, report))  # a profile's names, escaped
    except BrokenPipeError:
        raise
    except OSError as e:  # stdout failed after the files were in place (> /dev/full): say they are
        raise SchedcError(f"standard output: {e.strerror or e}; {common.printable(args.output)} and "
                          f"{common.printable(report)} were written, only the summary could not be printed") from None
    if args.plot:
        common.echo(f"plot: {args.plot}")
    return res


def _check_outputs(args) -> Path:
    """The places the command writes, checked before the solve. Returns the report's path."""
    from schedc.io import csvio

    if not str(args.output).endswith(".csv"):
        raise SchedcError(f"-o {args.output}: the schedule file must end in .csv (the report goes beside it as .json)")
    report = csvio.report_path(args.output)
    outputs = [(args.output, "-o"), (report, "-o (the report beside it)")]
    if args.plot:
        from schedc.show.plot import output_format

        output_format(args.plot)
        outputs.append((args.plot, "--plot"))
    common.check_outputs(args, *outputs)
    return report


def _plot_bytes(res, path: str) -> bytes:
    """The compiled schedule next to the best hand-made one that fits, as the picture's bytes."""
    from schedc.show.plot import output_format, render_figure

    schedules, titles = [res.schedule], [f"schedc ({res.status})"]
    best = res.best_baseline()  # among the hand-made ones and zb-greedy the report lists
    if best is not None:
        schedules.append(res.baseline_schedules[best])
        titles.append(best)
    fig = api.plot(schedules, profile=res.profile, memory=res.memory, titles=titles, execution=res.execution)
    return render_figure(fig, output_format(path))


def format_compile_summary(res, csv_path, report_file) -> str:
    """What `schedc compile` prints about a :class:`schedc.results.Compiled`."""
    from schedc.core.ir import placement_name

    sched, sim, rep = res.schedule, res.simulation, res.report

    def t(x: float) -> str:
        return format_duration(x, res.profile, digits=6)

    cut = (rep.model_extra or {}).get("cut_by_wall_clock")
    # all the work the command spent: with --offload auto the choosers' too, not only the compiles'
    work = (rep.model_extra or {}).get("work_spent", res.solve_time)
    lines = [
        f"wrote {common.printable(csv_path)} and {common.printable(report_file)}: "
        f"{common.shape(sched.n_stages, sched.n_ranks, sched.n_microbatches, placement_name(sched.placement))}, "
        f"memory {res.memory}, objective {res.objective}, {res.execution} runtime",
        f"  makespan {t(sim.makespan)}   span {t(sim.span)}   bubble {100 * sim.bubble:.1f}%   "
        f"status {res.status}   lower bound {t(res.lower_bound)}   gap {100 * res.gap:.2f}%   "
        + (f"time {res.solve_time:.1f}s" if res.budget == "time" else
           f"work {work:.2f} units" + (" (cut by the wall clock: not reproducible)" if cut
                                                 else " (reproducible)")),
        "  peak memory / limit per rank: " + ", ".join(
            f"{format_memory(pk)}/{format_memory(lim)}" for pk, lim in zip(sim.peak_memory, sim.memory_limit)),
    ]
    fitting = {k: v for k, v in res.baselines.items() if v.fits}
    if fitting:
        lines.append("  baselines that fit: " + ", ".join(
            f"{k} {t(v.makespan)}" + (f" (span {t(v.span)})" if res.objective == "span" else "")
            for k, v in sorted(fitting.items(), key=lambda kv: getattr(kv[1], res.objective))))
    else:
        lines.append("  baselines that fit: none")
    if rep.same_as_baseline and res.memory_actions:
        proof = "; the lower bound proves nothing shorter exists" if res.status == "optimal" else ""
        lines.append(f"  the compiled schedule is {rep.same_as_baseline}'s order with offload (it does not fit "
                     f"without){proof}")
    elif rep.same_as_baseline:
        proof = "; the lower bound proves nothing shorter fits" if res.status == "optimal" else ""
        lines.append(f"  the compiled schedule is {rep.same_as_baseline} itself (a baseline above, same order on "
                     f"every rank){proof}")
    if rep.limiter is not None:
        lines.append("  limits the step: " + rep.limiter.message)
    lines += ["  " + line for line in explain_offload(res, t)]
    lines += ["  " + line for line in explain_units(res)]
    return "\n".join(lines)


def explain_offload(res, t) -> list[str]:
    """With --offload auto: what moves, the step without it and how busy the links are."""
    extra = res.report.model_extra or {}
    summary = extra.get("offload")
    if summary is None:
        return []
    without = summary["step_without_offload"]
    before = "nothing fits without offload" if without is None else f"without offload {t(without)}"
    # the bound of what offload cannot move, where it is above the uncapped one, says so itself
    assumes = "no memory cap" if summary.get("lower_bound_assumes", "").startswith("no memory cap") else \
        "the cap with offload over the link"
    if not res.memory_actions:
        return [f"offload: none chosen (no schedule is shorter with it; {before}); the bound assumes {assumes}"]
    offloads = sum(a.get("action") == "offload" for a in res.memory_actions)
    redone = sum(len(e["microbatches"]) for e in summary.get("recomputed", ()))
    moved = ", ".join(f"stage {e['stage']}: {offload_flags.moved_bytes(e, format_memory)}"
                      for e in summary["stages"])
    after_i = sum(len(e.get("after_i", ())) for e in summary["stages"])
    also = f", {after_i} of them moved after their I for a deferred W" if after_i else ""
    what = [f"{offloads} microbatches to host memory ({moved}){also}"] if offloads else []
    what += [f"{redone} recomputed (their backward runs as B)"] if redone else []
    busiest = max(summary["link_busy"], key=lambda e: max(e["out"], e["in"]))
    link = (f"; transfers {'hide' if summary['transfers_hide'] else 'do not all hide'}; busiest link rank "
            f"{busiest['rank']} (out {100 * busiest['out']:.0f}%, in {100 * busiest['in']:.0f}%)") if offloads else ""
    return [f"offload: {', '.join(what)}; {before}{link}; the bound assumes {assumes}"]


def explain_units(res) -> list[str]:
    """What the numbers above are measured in: the time unit of --costs and the memory unit, and
    what the memory limit is in that unit (1p = 1F1B's need on its most loaded rank), as the cost
    model (schedc.core.cost_model) counts them."""
    from schedc.core.cost_model import CostModel, one_f_one_b_peaks

    out = []
    if res.profile.model == "uniform":
        out.append("units: times are in the unit of --costs F,I,W (one stage's F, I and W of one microbatch); memory "
                   "counts one microbatch's activation of one stage as 1")
    if res.memory.kind == "relative":
        placement = res.schedule.placement
        profile = res.profile.executed(res.execution)
        costs = CostModel.build(profile, placement, res.schedule.n_microbatches, res.memory)
        peaks = one_f_one_b_peaks(profile, placement)
        static = costs.fixed  # static bytes, buffers and reserve
        r = max(range(len(peaks)), key=lambda i: (static[i] + peaks[i], -i))
        act = sum(costs.held(s, "F") for s, rank in enumerate(placement) if rank == r)  # one microbatch's forwards
        held = peaks[r] / act if act else 0.0
        out.append(f"memory {res.memory} = {format_memory(costs.caps[r])} on every rank: "
                   f"{res.memory.value:g} x what 1F1B holds on its most loaded rank (rank {r}: {held:g} "
                   f"microbatches of its stages{', plus static bytes' if static[r] else ''})")
    return out
