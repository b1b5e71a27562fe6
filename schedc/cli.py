"""`schedc` command line: argument parsing and printing only; the work happens in the modules.

Every subcommand is a pair: ``add_<name>(subparsers)`` declares its arguments and
``run_<name>(args)`` calls the Python API and prints. A user-facing failure is a
:class:`SchedcError` (or an OSError on a path) and becomes one line on stderr and exit code 2;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from schedc import __version__
from schedc.costs import DEFAULT_RUNTIME, RUNTIMES, MemoryLimit, Profile, format_bytes, format_memory, parse_comm, parse_costs
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
    g.add_argument("--runtime", choices=RUNTIMES, default=DEFAULT_RUNTIME,
                   help="how the schedule is executed: torch (stage 0's backward all in W, as torch's "
                        "_PipelineScheduleRuntime runs it; default) or ideal (the zero-bubble paper's model)")


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


def _read_checked(args):
    """Read and validate every CSV in args.files, with a profile for each."""
    from schedc import csvio, validate

    schedules, profiles = [], []
    by_stage_count: dict[int, Profile] = {}  # read a --profile file once, not once per CSV
    for path in args.files:
        schedule = csvio.read_csv(path)
        validate.validate(schedule, source=path)
        schedule.name = schedule.name or Path(path).stem
        if schedule.n_stages not in by_stage_count:
            by_stage_count[schedule.n_stages] = _profile_from_args(args, schedule.n_stages)
        profile = by_stage_count[schedule.n_stages]
        if profile.n_stages != schedule.n_stages:
            raise SchedcError(f"{path}: the schedule has {schedule.n_stages} stages but {args.profile} describes "
                              f"{profile.n_stages}; give a profile of this model's {schedule.n_stages} stages")
        schedules.append(schedule)
        profiles.append(profile.executed(args.runtime))
    return schedules, profiles


# ---------------------------------------------------------------- baseline


def add_baseline(sub) -> None:
    p = sub.add_parser("baseline", help="emit a hand-made schedule (GPipe, 1F1B, ZB-H1, ...) as CSV")
    p.add_argument("name", nargs="?", help="gpipe, 1f1b, zb-h1, zb-h2, interleaved-1f1b, zb-v, looped-bfs, "
                   "interleaved-zb, dualpipev (case/dashes ignored; torch class names accepted)")
    p.add_argument("--list", action="store_true", help="list the hand-made schedules")
    p.add_argument("--stages", type=int, help="number of pipeline stages N")
    p.add_argument("--mb", type=int, help="number of microbatches M")
    p.add_argument("--ranks", type=int, help="number of ranks R (default: N for one-stage-per-rank schedules, else N/2)")
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
    from schedc.simulate import simulate

    memory = _memory_from_args(args)
    schedules, profiles = _read_checked(args)
    rows = [(path, schedule, simulate(schedule, profile, memory))
            for path, schedule, profile in zip(args.files, schedules, profiles)]
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
        "runtime": res.runtime,
    }


def format_simulation(path, schedule, res, memory: MemoryLimit) -> str:
    lines = [
        f"{path}: {schedule.n_stages} stages on {schedule.n_ranks} ranks, {schedule.n_microbatches} microbatches",
        f"  makespan {res.makespan:.4g}   span {res.span:.4g}   bubble {100 * res.bubble:.1f}%   "
        f"memory limit {memory}: {'fits' if res.fits else 'EXCEEDED'}   ({res.runtime} runtime)",
        f"  {'rank':>4}  {'busy':>9}  {'bubble':>7}  {'peak memory':>12}  {'limit':>10}",
    ]
    for r in range(schedule.n_ranks):
        flag = "" if res.peak_memory[r] <= res.memory_limit[r] * (1 + 1e-9) else "  over"
        lines.append(f"  {r:>4}  {res.busy[r]:>9.4g}  {100 * res.bubble_per_rank[r]:>6.1f}%  "
                     f"{format_memory(res.peak_memory[r]):>12}  {format_memory(res.memory_limit[r]):>10}{flag}")
    return "\n".join(lines)


def format_comparison(rows) -> str:
    best = min(r.makespan for _, _, r in rows)
    lines = [f"{'schedule':40s} {'makespan':>10} {'vs best':>8} {'bubble':>7} {'max peak':>10} {'fits':>5}"]
    for path, _, res in rows:
        lines.append(f"{str(path)[-40:]:40s} {res.makespan:>10.4g} {res.makespan / best:>7.3f}x "
                     f"{100 * res.bubble:>6.1f}% {format_memory(max(res.peak_memory)):>10} {'yes' if res.fits else 'no':>5}")
    return "\n".join(lines)


# ---------------------------------------------------------------- compile (solver)


def add_compile(sub) -> None:
    p = sub.add_parser("compile", help="find the fastest schedule under a memory limit (integer program)")
    p.add_argument("--stages", type=int, required=True, help="number of pipeline stages N")
    p.add_argument("--mb", type=int, required=True, help="number of microbatches M")
    p.add_argument("--ranks", type=int, help="number of ranks R (default: N for loop, N/2 for v)")
    p.add_argument("--placement", choices=["loop", "v"], default="loop", help="stage placement (default loop)")
    _add_cost_args(p)
    p.add_argument("--objective", choices=["makespan", "span"], default="makespan",
                   help="makespan (ranks synchronize at the optimizer step; default) or per-rank span")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S", help="seconds to search (default 60)")
    p.add_argument("--solver", choices=["highs", "cbc", "cpsat"],
                   help="MIP solver (default: HiGHS if installed, else CBC), or cpsat: OR-Tools' CP-SAT "
                        "(pip install 'schedc[cpsat]'; best on V placement under 1p)")
    p.add_argument("-o", "--output", metavar="FILE.csv", default="schedule.csv",
                   help="where to write the CSV; the report goes to FILE.json (default schedule.csv)")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the compiled schedule next to the best baseline")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run_compile(args) -> int:
    from schedc import csvio
    from schedc.solver.compile import compile_schedule

    if not str(args.output).endswith(".csv"):
        raise SchedcError(f"-o {args.output}: the schedule file must end in .csv (the report goes beside it as .json)")
    if args.time_limit is None or not args.time_limit > 0:
        raise SchedcError(f"--time-limit must be > 0 seconds, got {args.time_limit}")
    if args.plot:
        from schedc.plot import output_format

        output_format(args.plot)
    profile = _profile_from_args(args, args.stages) if args.stages and args.stages > 0 else None
    memory = _memory_from_args(args)

    def progress(e: dict) -> None:
        if args.quiet:
            return
        bound = e["bound"]
        print(f"[{e['elapsed']:7.1f}s] {e['phase']:<26s} best {e['best']:.6g}  bound {bound:.6g}  "
              f"gap {100 * e['gap']:.2f}%", file=sys.stderr, flush=True)

    res = compile_schedule(args.stages, args.mb, n_ranks=args.ranks, placement=args.placement, profile=profile,
                           memory=memory, objective=args.objective, time_limit=args.time_limit,
                           solver=args.solver, progress=progress, runtime=args.runtime)
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
        f"{p.n_microbatches} microbatches, memory {p.memory}, objective {p.objective}, {p.runtime} runtime",
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


COMMANDS += ["compile"]

# ---------------------------------------------------------------- plot, trace (pictures)


def add_plot(sub) -> None:
    p = sub.add_parser("plot", help="draw Gantt charts and memory curves of CSV schedules (png, svg, pdf)")
    p.add_argument("files", nargs="+", metavar="FILE.csv", help="one panel per file, stacked on one time axis")
    _add_cost_args(p)
    p.add_argument("--title", action="append", metavar="TEXT",
                   help="panel title, once per file in order (default: the file name)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png", help="picture to write: .png, .svg or .pdf")


def run_plot(args) -> int:
    from schedc.plot import output_format, plot_schedules

    output_format(args.output)  # a wrong extension fails before any work
    if args.title and len(args.title) != len(args.files):
        raise SchedcError(f"give --title once per file ({len(args.files)}), or not at all")
    schedules, profiles = _read_checked(args)
    memory = _memory_from_args(args)
    titles = args.title or [Path(f).name for f in args.files]
    plot_schedules(schedules, profiles, memory, titles=titles, path=args.output)
    print(f"wrote {args.output}: {len(schedules)} panel{'s' if len(schedules) > 1 else ''} "
          f"({', '.join(titles)}), memory limit {memory}")
    return 0


def add_trace(sub) -> None:
    p = sub.add_parser("trace", help="write a Chrome trace (Perfetto, chrome://tracing) of a CSV schedule")
    p.add_argument("file", metavar="FILE.csv")
    _add_cost_args(p)
    p.add_argument("-o", "--output", required=True, metavar="trace.json", help="trace file to write")


def run_trace(args) -> int:
    from schedc.trace import write_trace

    args.files = [args.file]
    (schedule,), (profile,) = _read_checked(args)
    trace = write_trace(schedule, profile, args.output, _memory_from_args(args))
    n = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    print(f"wrote {args.output}: {n} actions on {schedule.n_ranks} ranks; open it in https://ui.perfetto.dev "
          f"or chrome://tracing (1 s of the profile = 1 s of trace)")
    return 0


COMMANDS += ["plot", "trace"]

# ---------------------------------------------------------------- profile, calibrate (profiler)


def _add_gpt_args(p: argparse.ArgumentParser, with_stages: bool = True) -> None:
    g = p.add_argument_group("model (schedc's built-in GPT)")
    g.add_argument("--layers", type=int, default=4, help="transformer blocks (default 4)")
    g.add_argument("--hidden", type=int, default=64, help="hidden size (default 64)")
    g.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    g.add_argument("--seq", type=int, default=32, help="sequence length (default 32)")
    g.add_argument("--vocab", type=int, default=256, help="vocabulary size (default 256)")
    g.add_argument("--mbs", type=int, default=4, help="microbatch size: sequences per microbatch (default 4)")
    if with_stages:
        g.add_argument("--stages", type=int, default=2, help="pipeline stages to split the model into (default 2)")
    g.add_argument("--dtype", default="float32", help="float32, bfloat16, float16, float64 (default float32)")
    g.add_argument("--threads", type=int, default=None,
                   help="CPU threads per process (torch.set_num_threads); use the same number when calibrating")


def _gpt_config_from_args(args):
    from schedc.runtime.models import GPTConfig

    try:
        return GPTConfig(vocab_size=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
                         seq_len=args.seq, dtype=args.dtype)
    except ValueError as e:
        raise SchedcError(f"model: {e}")


def _parse_bandwidth(text: Optional[str]) -> Optional[float]:
    """'25e9', '25GB', '25GB/s', '100MiB/s' -> bytes per second."""
    if text is None:
        return None
    t = text.strip()
    if t.lower().endswith("/s"):
        t = t[:-2]
    try:
        value = float(t)
    except ValueError:
        try:
            limit = MemoryLimit.parse(t)
        except SchedcError:
            limit = None
        if limit is None or limit.kind != "bytes":
            raise SchedcError(f"--comm-bandwidth: expected bytes per second (e.g. 25e9 or 25GB/s), got {text!r}")
        value = limit.value
    if value <= 0:
        raise SchedcError(f"--comm-bandwidth must be > 0, got {text!r}")
    return value


def _require_torch(command: str) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SchedcError(f"{command} runs the model and needs torch: pip install 'schedc[torch]'")


def add_profile(sub) -> None:
    p = sub.add_parser("profile", help="measure each stage's F, I, W time and memory; write a profile JSON")
    _add_gpt_args(p)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    p.add_argument("--optimizer", default="adamw", help="optimizer whose state counts in static bytes: "
                   "adamw, adam, sgd, sgd-momentum, none (default adamw)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs per stage (default 2)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per stage; the median is kept (default 5)")
    p.add_argument("--comm-bandwidth", metavar="B/s", default=None,
                   help="link bandwidth for boundary activations, e.g. 25GB/s (default: comm is free)")
    p.add_argument("--comm-latency", metavar="S", type=float, default=0.0, help="seconds per transfer (default 0)")
    p.add_argument("--comm-measure", action="store_true",
                   help="measure send/recv between ranks 0 and 1 (run under torchrun --nproc-per-node 2)")
    p.add_argument("--concurrent", type=int, default=1, metavar="N",
                   help="CPU: measure in N processes at once, as N ranks sharing this host will run (default 1)")
    p.add_argument("-o", "--output", metavar="P.json", required=True, help="profile file to write")


def run_profile(args) -> int:
    _require_torch("schedc profile")
    import torch

    from schedc.runtime.profiler import StderrProgress, profile_gpt

    if args.threads is not None:
        if args.threads < 1:
            raise SchedcError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    bandwidth = _parse_bandwidth(args.comm_bandwidth)
    cfg = _gpt_config_from_args(args)
    rank = 0
    progress = StderrProgress()
    if args.comm_measure:
        import torch.distributed as dist

        if "RANK" not in os.environ:
            raise SchedcError("--comm-measure: launch with torchrun --nproc-per-node 2 (RANK is not set)")
        dist.init_process_group("nccl" if args.device.startswith("cuda") else "gloo")
        rank = dist.get_rank()
        if args.device.startswith("cuda") and torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    try:
        profile = profile_gpt(
            cfg, args.stages, args.mbs, device=args.device, warmup=args.warmup, repeats=args.repeats,
            optimizer=args.optimizer, comm="measure" if args.comm_measure else None,
            comm_bandwidth=bandwidth, comm_latency=args.comm_latency,
            progress=progress if rank == 0 else None, concurrent=args.concurrent,
        )
    finally:
        progress.done()
        if args.comm_measure:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
    if rank != 0:
        return 0
    profile.save(args.output)
    print(f"wrote {args.output}: {profile.n_stages} stages of {profile.model} on {profile.device}, "
          f"microbatch {profile.microbatch_size}, {profile.dtype}")
    print(f"  {'stage':>5}  {'F':>9}  {'I':>9}  {'W':>9}  {'activation':>10}  {'held I..W':>10}  {'static':>10}")
    for s, c in enumerate(profile.stages):
        print(f"  {s:>5}  {_fmt_secs(c.forward):>9}  {_fmt_secs(c.backward_input):>9}  "
              f"{_fmt_secs(c.backward_weight):>9}  {format_bytes(c.activation_bytes):>10}  "
              f"{format_bytes(c.weight_grad_bytes):>10}  {format_bytes(c.static_bytes):>10}")
    comm = profile.comm if isinstance(profile.comm, list) else [profile.comm]
    print(f"  comm per boundary: {', '.join(_fmt_secs(c) for c in comm)}")
    return 0


def _fmt_secs(x: float) -> str:
    if x == 0:
        return "0"
    return f"{1e3 * x:.3g}ms" if x >= 1e-4 else f"{1e6 * x:.3g}us"


COMMANDS += ["profile"]


def add_calibrate(sub) -> None:
    p = sub.add_parser("calibrate", help="run a CSV schedule on local ranks and compare with the prediction")
    p.add_argument("file", metavar="SCHEDULE.csv")
    p.add_argument("--profile", metavar="P.json", required=True, help="the profile the prediction uses")
    _add_gpt_args(p, with_stages=False)
    p.set_defaults(mbs=None, threads=1)
    p.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (NCCL, one GPU per rank); default cpu")
    p.add_argument("--nproc", type=int, default=None, help="ranks to launch (default: the CSV's rows; must match)")
    p.add_argument("--steps", type=int, default=3, help="timed training steps (default 3)")
    p.add_argument("--warmup-steps", type=int, default=1, help="untimed steps first (default 1)")
    p.add_argument("--in-situ", action="store_true",
                   help="also profile each rank's stages inside the ranks between steps and predict from that")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="kill the ranks after this many seconds (default 600)")
    p.add_argument("-o", "--output", metavar="REFINED.json",
                   help="write the profile refined from the measured action times")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")


def run_calibrate(args) -> int:
    _require_torch("schedc calibrate")
    from schedc.runtime.calibrate import calibrate, format_calibration

    profile = Profile.load(args.profile)
    mbs = args.mbs if args.mbs is not None else profile.microbatch_size
    if mbs is None:
        raise SchedcError(f"{args.profile} does not record a microbatch size; give --mbs")
    if profile.microbatch_size is not None and mbs != profile.microbatch_size:
        raise SchedcError(f"--mbs {mbs} differs from the profile's microbatch size {profile.microbatch_size}; "
                          f"profile with --mbs {mbs} or drop --mbs")
    cfg = _gpt_config_from_args(args)
    from schedc.runtime.profiler import gpt_label

    expected = gpt_label(cfg, profile.n_stages)
    if profile.model and profile.model.startswith("gpt(") and profile.model != expected:
        raise SchedcError(f"{args.profile} describes {profile.model} but the model flags give {expected}; "
                          f"pass the --layers/--hidden/--heads/--seq/--vocab the profile was made with")
    threads_note = next((n for n in profile.notes or [] if n.startswith("cpu threads: ")), None)
    if args.device == "cpu" and threads_note and threads_note != f"cpu threads: {args.threads}":
        print(f"schedc calibrate: warning: the profile was measured with {threads_note}, the ranks run with "
              f"--threads {args.threads}; predictions will be off (profile with --threads {args.threads})",
              file=sys.stderr)
    cal = calibrate(args.file, profile, cfg, mbs, steps=args.steps,
                    warmup_steps=args.warmup_steps, threads=args.threads, device=args.device,
                    timeout=args.timeout, n_ranks=args.nproc, in_situ=args.in_situ)
    if args.output:
        cal.refined.save(args.output)
    if args.json:
        print(json.dumps(cal.to_dict(), indent=2))
    else:
        print(format_calibration(cal))
        if args.output:
            print(f"wrote {args.output}: profile refined from the measured action times")
    return 0


COMMANDS += ["calibrate"]

# ---------------------------------------------------------------- library (schedule library)


def add_library(sub) -> None:
    p = sub.add_parser("library", help="precompiled schedules for common set-ups: build, list, show, check")
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
    ls.add_argument("--ranks", type=int, help="only this many ranks")
    ls.add_argument("--mb", type=int, help="only this many microbatches")
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


def run_library(args) -> int:
    from schedc import csvio
    from schedc import library as lib

    action = args.library_command
    if action == "build":
        directory = lib.find_library(args.dir, for_build=True)
        if args.index_only:
            path = lib.write_index(directory)
            print(f"wrote {path}")
            return 0
        setups = lib.select(lib.DEFAULT_SETUPS, args.only)
        limit = args.time_limit if args.time_limit is not None else lib.DEFAULT_MAX_TIME_LIMIT
        if not limit > 0:
            raise SchedcError(f"--time-limit must be > 0 seconds, got {args.time_limit}")
        print(f"building {len(setups)} schedule(s) into {directory} (solver time at most "
              f"{lib.default_budget(setups, limit):.0f}s)", flush=True)
        lib.build_library(directory, setups, time_limit=limit, progress=lambda line: print(line, flush=True))
        print(f"wrote {directory / lib.INDEX_NAME}")
        return 0
    if action == "list":
        directory = lib.find_library(args.dir)
        entries, problems = lib.load_entries(directory)
        memory = str(MemoryLimit.parse(args.memory)) if args.memory else None
        chosen = [e for e in entries
                  if (args.ranks is None or e.setup.ranks == args.ranks) and (args.mb is None or e.setup.mb == args.mb)
                  and (memory is None or e.setup.memory == memory)
                  and (args.placement is None or e.setup.placement == args.placement)
                  and (args.costs is None or e.setup.costs == args.costs)]
        print(f"{'name':34s} {'stages':>6} {'makespan':>12} {'bubble':>7} {'status':>9} {'gap':>7}")
        for e in chosen:
            pred = e.report.get("predicted") or {}
            mk = pred.get("makespan")
            gap = e.report.get("gap")
            print(f"{e.setup.name:34s} {e.setup.stages:>6} {lib.format_makespan(mk, e.setup.costs):>12} "
                  f"{100 * pred.get('bubble', 0.0):>6.1f}% {str(e.report.get('status', '?')):>9} "
                  f"{'-' if gap is None else f'{100 * gap:.2f}%':>7}")
        print(f"{len(chosen)} of {len(entries)} schedules in {directory}")
        for line in problems:
            print(f"warning: {line}", file=sys.stderr)
        return 0
    if action == "show":
        entry = lib.find_entry(args.name, args.dir)
        print(format_library_entry(entry))
        if args.write_profile:
            try:
                profile = Profile.model_validate(entry.report["inputs"]["costs"])
            except (KeyError, TypeError, ValueError):
                raise SchedcError(f"{csvio.report_path(entry.csv)}: inputs.costs is missing or not a valid profile")
            profile.save(args.write_profile)
            print(f"wrote {args.write_profile}: the costs {entry.setup.name} was compiled for")
        return 0
    if action == "check":
        directory = lib.find_library(args.dir)
        problems = lib.check_library(directory, torch=False if args.no_torch else None)
        for line in problems:
            print(line)
        if problems:
            print(f"schedc library check: {len(problems)} problem(s) in {directory}", file=sys.stderr)
            return 1
        n = len(list(directory.glob("*.csv")))
        print(f"{directory}: {n} schedules ok (validated, {'' if lib._torch_available() and not args.no_torch else 'NOT '}"
              f"loaded in torch, re-simulated = reports, index current)")
        return 0
    raise SchedcError(f"unknown library action {action!r}")


def format_library_entry(entry) -> str:
    from schedc import csvio
    from schedc import library as lib

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
        f"  makespan {lib.format_makespan(mk, s.costs)}   span {lib.format_makespan(pred.get('span'), s.costs)}   "
        f"bubble {100 * pred.get('bubble', 0.0):.1f}%   status {rep.get('status', '?')}   "
        f"lower bound {lib.format_makespan(rep.get('lower_bound'), s.costs)}   gap {100 * (rep.get('gap') or 0.0):.2f}%   "
        f"solve time {rep.get('solve_time', 0.0):.1f}s",
        f"  peak memory per rank vs limit ({'-' if p_units is None else f'{p_units:.2f}p'} of {s.memory} at most): "
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
    return "\n".join(lines)


COMMANDS += ["library"]


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
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: not an error; keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
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
