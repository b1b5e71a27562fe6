"""`schedc emulate FILE.csv [FILE2.csv ...]`: run schedules in torch's runtime with sleeping stages
and compare the measured step with the prediction (see :mod:`schedc.runtime.emulate`)."""

from __future__ import annotations

import json
import sys

from schedc.commands import common
from schedc.costs import UNIT_SECONDS, Profile, parse_comm, parse_costs



def register(subparsers) -> None:
    p = subparsers.add_parser(
        "emulate", help="run CSV schedules in torch's pipeline runtime on local ranks whose stages sleep "
                        "their costs; compare with the prediction")
    p.add_argument("files", nargs="+", metavar="FILE.csv")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--profile", metavar="P.json", help="per-stage costs in seconds (schedc profile)")
    g.add_argument("--costs", metavar="F,I,W", help="identical stages, in units (default 1,1,1)")
    p.add_argument("--comm", metavar="C", default="0",
                   help="communication per boundary the prediction adds, in profile units: a number, one per "
                        "boundary, or 'profile'; default 0, since the emulation does not sleep for communication")
    p.add_argument("--scale", type=float, default=None, metavar="S",
                   help=f"seconds slept per profile second (default 1 with --profile, {UNIT_SECONDS} per unit "
                        f"with --costs)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per schedule (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="kill the ranks after this many seconds (default: start-up + 3x the predicted work)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    common.require_torch("schedc emulate")
    from schedc.csvio import read_csv
    from schedc.runtime.emulate import emulate, format_emulations

    if args.profile:
        profiles = Profile.load(args.profile)
    else:
        f, i, w = parse_costs(args.costs or "1,1,1")
        profiles = [Profile.uniform(read_csv(path).n_stages, f, i, w) for path in args.files]
    scale = args.scale if args.scale is not None else (1.0 if args.profile else UNIT_SECONDS)
    comm = None if args.comm.strip().lower() == "profile" else parse_comm(args.comm)
    runs = emulate(args.files, profiles, scale=scale, steps=args.steps, warmup=args.warmup, comm=comm,
                   timeout=args.timeout)
    if args.json:
        print(json.dumps([r.to_dict() for r in runs], indent=2))
        return 0
    if comm is None:
        note = "the prediction adds the profile's comm, so the ratio shows what communication would add"
    elif comm == 0:
        note = "measured and predicted both leave it out (the prediction's comm is 0)"
    else:
        note = f"the prediction adds --comm {args.comm}, which the measured step does not contain"
    print(format_emulations(runs, note))
    sys.stdout.flush()
    return 0
