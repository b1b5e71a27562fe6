"""`schedc calibrate`: run a CSV schedule on local ranks and compare with the prediction."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from contextlib import contextmanager

from schedc.cli import common
from schedc.core.costs import Profile
from schedc.errors import SchedcError

# integer flags: (least, most); the most keeps a run finite and is beyond any calibration worth taking
INTS = {"layers": (1, 8190), "hidden": (1, 2**16), "heads": (1, 2**12), "seq": (1, 2**20), "vocab": (1, 2**22),
        "mbs": (1, 2**16), "threads": (1, 4096), "nproc": (1, 4096), "steps": (1, 10_000),
        "warmup_steps": (0, 10_000)}


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="run a CSV schedule on local ranks and compare with the prediction")
    p.set_defaults(handler=run)
    p.add_argument("file", metavar="SCHEDULE.csv")
    p.add_argument("--profile", metavar="P.json", required=True, help="the profile the prediction uses")
    common.add_gpt_args(p, with_stages=False)
    p.set_defaults(mbs=None, threads=1)
    p.add_argument("--device", help="cpu (gloo) or cuda (NCCL, one GPU per rank); default cpu")
    p.add_argument("--nproc", type=int, default=None, help="ranks to launch (default: the CSV's rows; must match)")
    p.add_argument("--steps", type=int, help="timed training steps (default 3)")
    p.add_argument("--warmup-steps", type=int, help="untimed steps first (default 1)")
    p.add_argument("--in-situ", action="store_true",
                   help="also profile each rank's stages inside the ranks between steps and predict from that")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="kill the ranks after this many seconds (default 300)")
    p.add_argument("-o", "--output", metavar="REFINED.json",
                   help="write the profile refined from the measured action times")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    g = p.add_argument_group("your own model (instead of the built-in GPT; as schedc profile --model)")
    g.add_argument("--model", metavar="MODULE:FUNCTION",
                   help="returns the stage modules, or {'model': m, 'split': [[module names], ...]} with optional "
                        "'sample', 'target', 'loss_fn'; it is passed n_stages (the CSV's), microbatch_size (--mbs) "
                        "if it takes them; e.g. examples/llama.py:stages")
    g.add_argument("--sample", metavar="MODULE:FUNCTION", help="returns one microbatch for stage 0 (or (sample, target))")
    g.add_argument("--model-arg", metavar="KEY=VALUE", action="append", default=[],
                   help="extra keyword argument for the --model/--sample functions (repeatable)")


def check_numbers(args) -> None:
    """One line naming the flag for a count out of :data:`INTS`' range or a --timeout that is not a
    finite number of seconds in (0, MAX_TIMEOUT], before a file is read or a rank starts."""
    from schedc.runtime.calibrate import MAX_TIMEOUT

    for name, (least, most) in INTS.items():
        value = getattr(args, name, None)
        if value is not None and not least <= value <= most:
            said = str(value) if abs(value) < 10**12 else f"a {len(str(abs(value)))}-digit number"
            raise SchedcError(f"--{name.replace('_', '-')} must be between {least} and {most}, got {said}")
    if args.timeout is not None and not (math.isfinite(args.timeout) and 0 < args.timeout <= MAX_TIMEOUT):
        raise SchedcError(f"--timeout must be a finite number of seconds > 0 and at most {MAX_TIMEOUT:g} (a week), "
                          f"got {args.timeout!r}")


def run(args) -> int:
    common.require_torch("schedc calibrate")
    check_numbers(args)
    if args.output:
        common.check_outputs(args, (args.output, "-o"))  # before the ranks run
        common.check_json_output(args.output, "the refined profile")
    from schedc.runtime.calibrate import calibrate, format_calibration

    # the flags not given are left to calibrate(); what it will use is read off it for the messages
    run_flags = common.given(steps=args.steps, warmup_steps=args.warmup_steps, device=args.device,
                             timeout=args.timeout)
    ran = {**common.defaults_of(calibrate), **run_flags}

    profile = Profile.load(args.profile)
    mbs = args.mbs if args.mbs is not None else profile.microbatch_size
    if mbs is None:
        raise SchedcError(f"{args.profile} does not record a microbatch size; give --mbs")
    if profile.microbatch_size is not None and mbs != profile.microbatch_size:
        raise SchedcError(f"--mbs {mbs} differs from the profile's microbatch size {profile.microbatch_size}; "
                          f"profile with --mbs {mbs} or drop --mbs")
    cfg = common.gpt_config_from_args(args)
    from schedc.runtime.profiling.gpt import gpt_label

    expected = gpt_label(cfg, profile.n_stages)
    if args.model:
        if profile.model and profile.model.startswith("gpt("):
            raise SchedcError(f"{args.profile} describes the built-in GPT ({profile.model}), not --model "
                              f"{args.model}; profile it with schedc profile --model {args.model}")
    elif profile.model and profile.model.startswith("gpt(") and profile.model != expected:
        raise SchedcError(f"{args.profile} describes {profile.model} but the model flags give {expected}; "
                          f"pass the --layers/--hidden/--heads/--seq/--vocab the profile was made with")
    elif args.sample or args.model_arg:
        raise SchedcError("--sample and --model-arg go with --model (your own model); without it the built-in "
                          "GPT runs")
    threads_note = next((n for n in profile.notes or [] if n.startswith("cpu threads: ")), None)
    if ran["device"] == "cpu" and threads_note and threads_note != f"cpu threads: {args.threads}":
        print(f"schedc calibrate: warning: the profile was measured with {threads_note}, the ranks run with "
              f"--threads {args.threads}; predictions will be off (profile with --threads {args.threads})",
              file=sys.stderr)
    what = (f"running {args.file} on local ranks: {ran['warmup_steps']} warm-up + {ran['steps']} timed steps"
            f"{' with in-situ profiling' if args.in_situ else ''} (--timeout {ran['timeout']:g}s)")
    model_args = None
    if args.model:
        from schedc.runtime.user_model import load_function

        model_args = {"dtype": cfg.dtype, **common.model_args(args.model_arg)}
        load_function(args.model)  # a wrong name is one line before the progress line
        if args.sample:
            load_function(args.sample, "--sample")
    try:
        with _ticking(what):
            cal = calibrate(args.file, profile, cfg, mbs, threads=args.threads, n_ranks=args.nproc,
                            in_situ=args.in_situ, model=args.model, sample=args.sample, model_args=model_args,
                            **run_flags)
    except SchedcError as e:
        raise common.said_once(e, "calibrate") from None
    if args.output:
        cal.refined.save(args.output)
    if args.json:
        print(json.dumps(cal.to_dict(), indent=2))
    else:
        print(format_calibration(cal))
        if args.output:
            print(f"wrote {common.printable(args.output)}: profile refined from the measured action times")
    return 0



@contextmanager
def _ticking(what: str):
    """Say on stderr what runs while the ranks work, with the seconds elapsed on a terminal (the
    run is silent otherwise: ranks start, build, warm up and time their steps for minutes)."""
    from schedc.cli.progress import StderrProgress

    progress = StderrProgress("schedc calibrate")
    stop = threading.Event()
    t0 = time.monotonic()

    def tick() -> None:
        while not stop.wait(1.0):
            progress(f"{what}: {time.monotonic() - t0:.0f}s")

    progress(what)
    ticker = threading.Thread(target=tick, daemon=True)
    if sys.stderr.isatty():
        ticker.start()
    try:
        yield
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join()
        progress.done()
    print(f"schedc calibrate: ranks done in {time.monotonic() - t0:.0f}s", file=sys.stderr)  # not on errors
