"""`schedc plan`: choose the partition of a per-unit profile, the placement and the schedule together."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

from schedc.cli import common, offload_flags
from schedc.core.costs import AC_MODES, Profile, format_duration
from schedc.errors import SchedcError
from schedc.frameworks import launchable_modes
from schedc.io.fileio import write_all


def register(sub) -> None:
    from schedc import api
    from schedc.frameworks import targets

    p = sub.add_parser("plan", help="choose the layer partition, placement and schedule under a memory cap in bytes")
    p.set_defaults(handler=run)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--profile", metavar="UNITS.json", action="append",
                     help="per-unit profile: embedding, each layer, norm + head + loss, in model order; with --ac "
                          "auto one per mode as MODE=UNITS.json (none=a.json --profile selective=b.json ...)")
    src.add_argument("--config", metavar="config.json",
                     help="a Hugging Face config.json: count the per-unit profile from it with the settings below "
                          "(as `schedc profile --units --config` does)")
    run_ = p.add_argument_group("the run's settings (with --config; recorded in the report's \"assumes\")")
    run_.add_argument("--seq", type=int, metavar="N", help="sequence length of a microbatch (required with --config)")
    run_.add_argument("--mbs", type=int, metavar="N", help="sequences per microbatch (default 1)")
    run_.add_argument("--dtype", metavar="NAME", help="parameter and activation dtype (default: the config's)")
    run_.add_argument("--grad-dtype", metavar="NAME", help="gradient dtype (default float32)")
    run_.add_argument("--optimizer-dtype", metavar="NAME", help="optimizer state dtype (default float32)")
    run_.add_argument("--dp-shard", type=int, metavar="N",
                      help="data-parallel shard degree (FSDP2 divides the static bytes by it and holds each "
                           "stage's weights and gradients unsharded under pipelining; default 1)")
    run_.add_argument("--tp", type=int, metavar="N", help="tensor-parallel degree (default 1)")
    run_.add_argument("--reserve", metavar="SIZE",
                      help="memory a CUDA process holds outside torch's allocator (default: the counted route's)")
    from schedc.cli.profile import CALIBRATE_HELP, GPU_HELP

    run_.add_argument("--calibrate", metavar="MEASURED.json", help=CALIBRATE_HELP)
    run_.add_argument("--gpu", metavar="NAME", help=GPU_HELP)
    p.add_argument("--for", dest="framework", metavar="FRAMEWORK", default=None,
                   help=f"the framework that will run the plan: {', '.join(targets())} (schedc: its own runtime; "
                        "NAME==VERSION prints the flags of that release, e.g. torchtitan==main); with "
                        "--config the count holds what that framework holds (torchtitan and NeMo wrap every block in "
                        "FSDP2 at shard degree 1 too), with --profile it only names the target; recorded in the "
                        f"report's \"assumes\" (default {common.defaults_of(api.count_profile)['framework']})")
    p.add_argument("--ac", metavar="MODE", default=None,
                   help="activation checkpointing: none, light (saves every matmul's output; schedc's runtime only), "
                        "selective, full, or auto (the plan chooses, globally and per stage, the one with the shortest "
                        "step under the cap; with --for torchtitan or nemo one of their modes for every layer); "
                        "default: what the profile assumes")
    p.add_argument("--offload", choices=["none", "auto"], default="none",
                   help="auto: also offload microbatches' activations to host memory where that makes a shorter plan "
                        "fit, chosen with the partition, placement and --ac (schedc.planning.offload): the plan "
                        "--offload none makes, then half of --time-limit more offloading its candidates; plan.json "
                        "gets \"memory_actions\" and the bound allows offload and checkpointing per microbatch under the cap (default none)")
    offload_flags.add_link_args(p)
    p.add_argument("--ranks", type=common.ranks_count(), required=True, help="pipeline ranks R")
    p.add_argument("--mb", type=common.microbatches_count(), required=True, help="microbatches M")
    p.add_argument("--memory", metavar="SIZE", required=True,
                   help="per-rank cap in bytes, static bytes included (e.g. 80GiB), or none")
    p.add_argument("--placement", choices=["loop", "v", "auto"], default="auto",
                   help="loop (1 stage per rank), v (2 per rank) or auto (both, keep the better; default)")
    p.add_argument("--objective", choices=["makespan", "span"], default="makespan")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help="seconds in all (default 60), or work units with --budget work")
    p.add_argument("--budget", choices=["time", "work"], default="time",
                   help="time: --time-limit counts wall-clock seconds (default); work: it counts work units (about a "
                        "second each on an idle machine), so the same inputs give the same plan on any machine")
    p.add_argument("-o", "--output", metavar="FILE.csv", default="plan.csv",
                   help="the schedule; the report goes to FILE.json, the merged per-stage profile to "
                        "FILE.profile.json (default plan.csv)")
    p.add_argument("--plot", metavar="FILE.png",
                   help="also draw the plan beside torchtitan's default split with its fastest class (png, svg, pdf)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def output_paths(csv: str) -> tuple[Path, Path, Path]:
    """(plan.csv, plan.json, plan.profile.json)."""
    from schedc.io import csvio

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
    from schedc.io import csvio

    if not str(args.output).endswith(".csv"):
        raise SchedcError(f"-o {args.output}: the schedule file must end in .csv (the report goes beside it as .json)")
    if args.time_limit is None or not 0 < args.time_limit < math.inf:
        raise SchedcError(f"--time-limit must be a finite number of seconds > 0, got {args.time_limit}")
    csv, report_file, profile_file = output_paths(args.output)
    outputs = [(path, "-o") for path in (csv, report_file, profile_file)]
    if args.plot:
        from schedc.show.plot import output_format

        output_format(args.plot)
        outputs.append((Path(args.plot), "--plot"))
    common.check_outputs(args, *outputs)
    link = _link(args)
    profiles, source = _unit_profiles(args)

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    kw = dict(ranks=args.ranks, microbatches=args.mb, memory=args.memory, placement=args.placement,
              objective=args.objective, time_limit=_time_left(args), progress=progress, source=source,
              budget=args.budget)
    with _command_wall_clock(args):
        if link is not None:
            from schedc.planning.offload import plan_with_offload

            mode = next(iter(profiles))
            none = _counted(args, "none") if len(profiles) == 1 and args.config is not None and mode not in (None, "none") \
                else None
            res = plan_with_offload(profiles, link, none=none, **kw)
        elif len(profiles) > 1:
            from schedc.planning import plan_ac

            res = plan_ac(profiles, **kw)
        else:
            from schedc.planning.ac import plan_mode

            mode, units = next(iter(profiles.items()))
            none = _counted(args, "none") if args.config is not None and mode not in (None, "none") else None
            res = plan_mode(units, mode, none, **kw)
    from schedc.planning import build_plan_report

    res = replace(res, report=build_plan_report(res, csv=csv.name))
    files = {  # the report records the CSV's hash (csvio.schedule_files): never paired with another CSV
        **csvio.schedule_files(res.schedule, res.report, csv),
        profile_file: (res.profile.model_dump_json(indent=2, exclude_none=True) + "\n").encode(),
    }
    if args.plot:
        files[Path(args.plot)] = _plot_bytes(res, args.plot)
    write_all(files)
    print(format_plan_summary(res, csv, report_file, profile_file))
    print()
    print(format_handoff(res))
    launch = format_runtime_launch(res, report_file)
    if launch:
        print()
        print(launch)
    return res, csv


AC_CHOICES = (*AC_MODES, "auto")


def _link(args):
    """The host link of --offload auto (the --host-* flags, else their defaults); None with
    --offload none, where the link flags are refused in one line."""
    if args.offload != "auto":
        if offload_flags.link_given(args):
            raise SchedcError("--host-bandwidth, --host-latency, --host-memory and --link-shared-by describe the link "
                              "offload uses; give --offload auto with them")
        return None
    return offload_flags.link_from_args(args)
SETTINGS = (("seq", "--seq"), ("mbs", "--mbs"), ("dtype", "--dtype"), ("grad_dtype", "--grad-dtype"),
            ("optimizer_dtype", "--optimizer-dtype"), ("dp_shard", "--dp-shard"), ("tp", "--tp"),
            ("reserve", "--reserve"), ("calibrate", "--calibrate"), ("gpu", "--gpu"))



def _unit_profiles(args) -> tuple[dict, str]:
    """({activation-checkpointing mode or None: per-unit profile}, the name errors use): one
    profile, or one per mode for --ac auto, from --profile files or counted from --config."""
    if args.ac is not None and args.ac not in AC_CHOICES:
        raise SchedcError(f"--ac must be one of {', '.join(AC_CHOICES)}, got {args.ac!r}")
    if args.config is not None:
        if args.seq is None:
            raise SchedcError("--seq: give the sequence length of a microbatch with --config (e.g. --seq 4096)")
        modes = list(AC_MODES) if args.ac == "auto" else [args.ac]
        return {m: _counted(args, m) for m in modes}, args.config
    given = [flag for attr, flag in SETTINGS if getattr(args, attr) is not None]
    if given:
        raise SchedcError(f"{given[0]} sets the counted route's run: give --config config.json with it (a --profile "
                          f"already holds what its numbers assumed)")
    pairs = [p.split("=", 1) if "=" in p and p.split("=", 1)[0] in AC_MODES else (None, p) for p in args.profile]
    if args.ac == "auto":
        _check_mode_pairs(args.profile, pairs)
        profiles = {m: _stated_mode(_target(Profile.load(path), args), path, m, f"--profile {m}=") for m, path in pairs}
        return profiles, ", ".join(path for _, path in pairs)
    if len(pairs) > 1:
        raise SchedcError("--profile: give one per-unit profile, or one per mode (MODE=UNITS.json) with --ac auto")
    mode, path = pairs[0]
    if mode is not None and args.ac is not None and mode != args.ac:  # else --ac was silently dropped
        raise SchedcError(f"--ac {args.ac}: --profile {mode}={path} names mode {mode!r}; give --profile "
                          f"{args.ac}=UNITS.json, or --ac auto with one profile per mode")
    prefix = f"--profile {mode}=" if mode is not None else f"--ac {args.ac}: "
    mode = mode or args.ac
    units = _stated_mode(_target(Profile.load(path), args), path, mode, prefix)
    return {mode or (units.assumes or {}).get("activation_checkpoint"): units}, path


def _check_mode_pairs(given: list, pairs: list) -> None:
    """--ac auto's MODE=UNITS.json list: each names a mode of AC_MODES once, at least two."""
    if len(pairs) < 2:
        raise SchedcError("--ac auto with --profile needs one profile per mode: --profile none=a.json --profile "
                          "full=b.json (or --config config.json, which counts every mode)")
    seen = set()
    for text, (mode, _) in zip(given, pairs):
        if mode is None:
            head = text.split("=", 1)[0] if "=" in text else None
            what = f"{head!r} is not one of {', '.join(AC_MODES)}" if head else "names no mode"
            raise SchedcError(f"--profile {text}: {what}; --ac auto takes one profile per mode: --profile "
                              f"none=a.json --profile full=b.json (or --config config.json, which counts every mode)")
        if mode in seen:
            raise SchedcError(f"--profile {text}: mode {mode!r} is given twice; give one profile per mode")
        seen.add(mode)


def _stated_mode(units: Profile, path: str, mode, prefix: str) -> Profile:
    """`units`, refused when its ``assumes`` records another checkpointing mode than the one it is
    planned as (its costs would be taken for that mode's)."""
    stated = (units.assumes or {}).get("activation_checkpoint")
    if mode is not None and stated is not None and stated != mode:
        raise SchedcError(f"{prefix}{path} was counted with activation checkpointing {stated!r}; give a profile "
                          f"counted with {mode!r}")
    return units


def _target(units: Profile, args) -> Profile:
    """A measured profile holds what it measured: --for only names the framework the plan is for
    (its hand-off then warns about what the profile did not count)."""
    from schedc import api

    return units if args.framework is None else api.with_framework(units, args.framework)


def _counted(args, mode):
    """The per-unit profile counted from --config with the run's settings, for the framework of
    --for (schedc.api.count_profile, which records them in the profile's ``assumes``)."""
    from schedc import api
    from schedc.cli.profile import COUNTED_INTS
    from schedc.core.settings import RunSettings

    for name, flag in (("seq", "--seq"), ("mbs", "--mbs"), ("dp_shard", "--dp-shard"), ("tp", "--tp")):
        value = getattr(args, name)
        if value is not None and value > COUNTED_INTS[name]:
            raise SchedcError(f"{flag} {value} is beyond any run schedc counts (at most {COUNTED_INTS[name]})")
    settings = common.given(dp_shard=args.dp_shard, tp=args.tp, grad_dtype=args.grad_dtype,
                            optimizer_dtype=args.optimizer_dtype, framework=args.framework, gpu=args.gpu,
                            reserve_bytes=None if args.reserve is None else _bytes(args.reserve, "--reserve"))
    if args.dtype is not None:
        settings.update(dtype=args.dtype, param_dtype=args.dtype)
    run = RunSettings.of(seq=args.seq, microbatch_size=1 if args.mbs is None else args.mbs,
                         activation_checkpoint=mode or "none", **settings)
    # a bad setting is a ParameterError, which schedc.cli.toplevel spells with its flag
    return api.count_profile(args.config, settings=run, calibrate=args.calibrate)


def _command_wall_clock(args):
    """Under --budget work, the safety net at --time-limit plus 10% and 2 s for the whole command
    (its start-up and WRITE_SECONDS off; schedc.solver.deadline.command_wall_clock): a machine slower than the work charges' nominal rate ends
    the plan near its budget in seconds too, marked as cut by the wall clock."""
    from contextlib import nullcontext

    from schedc.solver.deadline import command_wall_clock, process_seconds

    if args.budget != "work":
        return nullcontext()
    # 1 s of the 2 kept for the steps after the searches (the comparisons, the report)
    before = process_seconds() + WRITE_SECONDS
    return command_wall_clock(1.1 * args.time_limit + 1.0 - before, before)



WRITE_SECONDS = 1.0  # kept from --time-limit for writing the outputs and printing the hand-offs


def _time_left(args) -> float:
    """--time-limit covers the whole command: what the start-up (the interpreter, the imports, a
    counted profile) took comes off the plan's seconds, and so does WRITE_SECONDS. A work budget
    counts work units, not seconds: it is passed as given (the same inputs, the same plan)."""
    from schedc.core import limits
    from schedc.solver.deadline import check_time_limit, n_actions, process_seconds

    if args.budget == "work":
        return args.time_limit
    left = args.time_limit - process_seconds() - WRITE_SECONDS
    try:  # a limit the least plan cannot keep is refused by plan itself, naming the one given
        check_time_limit(n_actions(args.ranks, args.mb), left)
    except SchedcError:
        return args.time_limit
    return left if left >= limits.MIN_TIME_LIMIT else args.time_limit


def _bytes(text: str, flag: str) -> float:
    from schedc.core.costs import MemoryLimit

    try:
        limit = MemoryLimit.parse(text)
    except (SchedcError, ValueError):
        limit = None
    if limit is None or limit.kind != "bytes":
        raise SchedcError(f"{flag} {text}: give a byte size, e.g. 1.2GiB")
    return limit.value


def _plot_bytes(res, path) -> bytes:
    """The plan beside torchtitan's default split with its fastest class, each with its own costs."""
    from schedc.planning import comparison_pictures
    from schedc.show.plot import output_format, plot_schedules, render_figure

    pictures = comparison_pictures(res)
    fig = plot_schedules([s for _, s, _ in pictures], [p for _, _, p in pictures], res.compiled.problem.memory,
                         titles=[t for t, _, _ in pictures])
    return render_figure(fig, output_format(path))


def format_plan_summary(res, csv, report_file, profile_file) -> str:
    from schedc.core.devices import margin_warning
    from schedc.core.formatting import format_bytes
    from schedc.planning import plan_status

    p = res.compiled.problem

    def t(x):
        return format_duration(x, p.profile, digits=6)

    lines = [common.printable(f"wrote {csv}, {report_file} and {profile_file}"),
             f"plan: {p.n_stages} stages ({res.placement}) on {p.n_ranks} ranks, {p.n_microbatches} microbatches, "
             f"memory {p.memory}: {p.objective} {t(res.value)} ({plan_status(res)}, "
             + (f"{res.solve_time:.1f}s)" if res.budget == "time" else
                f"{res.solve_time:.1f} work units, reproducible)" if not res.cut_by_wall else
                f"{res.solve_time:.1f} work units, cut by the wall clock: not reproducible)"),
             f"  units per stage {res.counts}",
             f"  bound over every partition, schedule, offload over the link and checkpointing per microbatch "
             f"{t(res.bound)}: gap {100 * res.gap:.2f}%" if res.offload is not None else
             f"  bound over every partition and schedule {t(res.bound)}: gap {100 * res.gap:.2f}%"
             if res.ac is None or isinstance(res.ac.chosen, str) else
             f"  bound for this partition and per-stage checkpointing {t(res.bound)}: gap {100 * res.gap:.2f}%"]
    lm = res.report["plan"].get("least_memory")
    if lm is not None:
        margin = lm["margin_to_cap"]
        lines.append(f"  this step also fits in {format_bytes(lm['peak'])} per rank"
                     + (f" (the search's schedule peaked at {format_bytes(lm['found_peak'])})"
                        if lm["peak"] < lm["found_peak"] else "")
                     + ("" if margin is None else f"; margin to the cap {format_bytes(margin)}"))
    outside = res.report["plan"].get("step_with_optimizer_and_collectives")
    if outside is not None:  # counted, not simulated (schedc.model_costs.step)
        lines.append(f"  step with the optimizer and collectives (counted: rank {outside['rank']}'s optimizer and "
                     f"exposed FSDP2 collectives added) {t(outside['seconds'])}")
    if (thin := margin_warning(res.compiled.sim.peak_memory, res.compiled.sim.memory_limit)) is not None:
        lines.append(f"  warning: {thin}")
    if res.limiter is not None:
        lines.append(f"  limits the step: {res.limiter.message}")
        lines.append(f"  why this partition: {res.limiter.why_partition}")
    if res.ac is not None:
        lines += _ac_lines(res, t)
    if res.offload is not None:
        lines += _offload_lines(res, t)
    for c in res.comparisons:
        name = f"{c.split} split ({c.placement}) {c.counts}"
        if c.value is None:
            lines.append(f"  {name}" + (f" with {c.schedule}" if c.schedule else "") + f": {c.note}")
        else:
            lines.append(f"  {name}: {'torchtitan class' if c.peak is not None else 'best hand-made'} {c.schedule} "
                         f"{t(c.value)}, plan {100 * (c.value - res.value) / c.value:.1f}% shorter")
    for note in res.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def _ac_lines(res, t) -> list[str]:
    ac = res.ac
    steps = ", ".join(f"{m} {t(v) if v is not None else 'not planned'}" for m, v in ac.global_steps.items())
    only_ours = [m for m in ac.global_steps if m not in launchable_modes()]  # light: they have no such mode
    steps += f" ({', '.join(only_ours)}: schedc's runtime only)" if only_ours else ""
    out = [f"  activation checkpointing for the whole model (what torchtitan and NeMo launch): {steps}"]
    mix = ac.per_stage
    if mix is not None:
        best = min((v for v in ac.global_steps.values() if v is not None), default=None)
        gain = "" if best is None else ", not shorter than the best global mode" if mix["step"] >= best else \
            f", {100 * (best - mix['step']) / best:.1f}% shorter than the best global mode"
        out.append(f"  per stage (schedc's runtime; checkpointed stages run B): {_short_modes(mix['modes'])} on "
                   f"{mix['units_per_stage']} ({mix['placement']}; backward {' '.join(mix['backward'])}): "
                   f"{t(mix['step'])}{gain}")
    elif len(ac.global_steps) > 1:
        out.append(f"  per stage (schedc's runtime): {ac.per_stage_missing or 'no per-stage choice fits'}")
    out.append(f"  chosen: {ac.chosen if isinstance(ac.chosen, str) else _short_modes(ac.chosen)}")
    return out


def _offload_lines(res, t) -> list[str]:
    """--offload auto: what moves over which link, the step without it, and the four rows."""
    from schedc.core.formatting import format_bytes

    o = res.offload
    link = o["link"]
    rate = f"{link['host_bandwidth'] / 1e9:g} GB/s per direction"
    if not o["chosen"]:
        out = [f"  offload ({rate}): none chosen; {o['why']}"]
    else:
        moved = ", ".join(f"stage {e['stage']}: {offload_flags.moved_bytes(e, format_bytes)}"
                          for e in o["stages"])
        busiest = max(o["link_busy"], key=lambda e: max(e["out"], e["in"]))
        out = [f"  offload ({rate}): {o['memory_actions']} microbatches to host memory ({moved}); without offload "
               f"{t(o['step_without_offload'])}",
               f"  transfers {'hide' if o.get('transfers_hide') else 'do not all hide'}; busiest link rank "
               f"{busiest['rank']} (out {100 * busiest['out']:.1f}%, in {100 * busiest['in']:.1f}%)"]
    out.append("  rows: " + "; ".join(f"{r['row']} {t(r['step']) if r['fits'] else 'does not fit'}"
                                      + ("" if r["fits"] or r["what"].startswith("no ") else f" ({r['what']})")
                                      for r in o["rows"]))
    return out


def _short_modes(modes) -> str:
    """Per stage: its mode, or a list with one per block (JSON, as plan.json writes it)."""
    import json

    return json.dumps(modes)


def format_runtime_launch(res, report_file) -> str:
    """How schedc's runtime launches a plan whose checkpointing is per stage (torchtitan and NeMo
    take one mode per run), or in a mode only schedc's runtime has (light, planned or chosen for
    the whole model): load_pipeline with plan_settings, or the example trainer."""
    mode = res.report["assumes"].get("activation_checkpoint") if res.report else None
    if res.report and res.report.get("memory_actions"):
        why = "offload to host memory, which torchtitan and NeMo do not run"
    elif isinstance(mode, list):
        why = "per-stage activation checkpointing; torchtitan and NeMo take one mode per run"
    elif mode is not None and mode not in launchable_modes():
        why = f"{mode} activation checkpointing, a mode torchtitan and NeMo do not have"
    else:
        return ""
    n = res.compiled.problem.n_ranks
    return "\n".join([
        f"schedc's runtime ({why}):",
        "  from schedc.runtime import load_pipeline",
        "  from schedc.runtime.checkpointing import plan_settings",
        f"  pipe = load_pipeline({str(report_file.with_suffix('.csv'))!r}, model, loss_fn, device, "
        f"**plan_settings({str(report_file)!r}))",
        f"  # schedc's example model: torchrun --nproc-per-node {n} examples/train.py --plan {report_file}",
    ])


def format_handoff(res) -> str:
    """Each framework's block (schedc.frameworks.REGISTRY), in its own module names."""
    from schedc.frameworks import render_handoff

    return "\n".join(filter(None, [render_handoff(res.report["frameworks"]), _cannot_launch(res)]))


def _cannot_launch(res) -> str:
    """torchtitan and NeMo AutoModel run no memory actions and one checkpointing mode for every
    layer: for a plan that offloads, one line saying so and the best row they can launch."""
    if res.offload is None or not res.offload["chosen"]:
        return ""
    p = res.compiled.problem

    def t(x):
        return format_duration(x, p.profile, digits=6)

    launch = res.offload["frameworks_launch"]
    if launch["row"] is None:
        return ("torchtitan and NeMo AutoModel cannot launch this plan (it offloads to host memory) and nothing "
                "they can launch fits the cap; run it with schedc's runtime")
    return (f"torchtitan and NeMo AutoModel cannot launch this plan (it offloads to host memory): the best plan "
            f"they can launch is \"{launch['row']}\", step {t(launch['step'])}, {t(launch['longer_by'])} "
            f"({100 * launch['longer_by'] / res.value:.1f}%) longer; the same command with --ac "
            f"{launch['activation_checkpoint']} --offload none writes it")
