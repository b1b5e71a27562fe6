"""`schedc emulate FILE.csv [FILE2.csv ...]`: run schedules in torch's runtime with sleeping stages
and compare the measured step with the prediction (see :mod:`schedc.runtime.emulate`)."""

from __future__ import annotations

import json
import sys
from typing import Optional, Union

from schedc.cli import common, offload_flags
from schedc.core.costs import UNIT_SECONDS, Profile, parse_comm
from schedc.errors import SchedcError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "emulate", help="run CSV schedules in torch's pipeline runtime on local ranks whose stages sleep "
                        "their costs; compare with the prediction")
    p.add_argument("files", nargs="+", metavar="FILE.csv", type=common.path)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--profile", metavar="P.json", type=common.path, help="per-stage costs in seconds (schedc profile), for every CSV "
                   "(default: each CSV's own: NAME.profile.json beside NAME.csv, as plan writes it, else the "
                   "costs its report NAME.json names)")
    g.add_argument("--costs", metavar="F,I,W", help="identical stages, in units, for every CSV (default 1,1,1 "
                   "when no CSV names its costs)")
    p.add_argument("--comm", metavar="C", default=None,
                   help="communication per boundary the prediction adds, in profile units: a number, one per "
                        "boundary, or 'profile'; default 0, since the emulation does not sleep for communication")
    p.add_argument("--scale", type=float, default=None, metavar="S",
                   help=f"seconds slept per profile second (default 1 with --profile, {UNIT_SECONDS} per unit "
                        f"with --costs)")
    p.add_argument("--steps", type=int, help="timed steps per schedule (default 5)")
    p.add_argument("--warmup", type=int, help="untimed steps first (default 1)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="kill the ranks after this many seconds (default: start-up + 3x the predicted work)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    offload_flags.add_memory_actions_arg(p)
    offload_flags.add_link_args(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    common.require_torch("schedc emulate")
    from schedc import api
    from schedc.runtime.emulate import emulate, format_emulations

    if args.timeout is not None and not 0 < args.timeout < float("inf"):  # nan: a deadline that never fires
        raise SchedcError(f"--timeout must be a finite number of seconds > 0, got {args.timeout}")
    actions, link = offload_flags.link_and_actions(args)
    own = None if (args.profile or args.costs is not None) else own_profiles(args.files)
    schedules = [api.read_csv(path) for path in args.files]
    profiles: Union[Profile, list[Profile]]  # one for every file, or each file's own
    if args.profile:
        profiles = Profile.load(args.profile)
        for path, schedule in zip(args.files, schedules):  # named here with the file: emulate knows no --profile
            if schedule.n_stages != profiles.n_stages:
                raise SchedcError(f"{path}: the schedule has {schedule.n_stages} stages but {args.profile} describes "
                                  f"{profiles.n_stages}; give a profile of this model's {schedule.n_stages} stages")
    elif own is not None:
        profiles = own
    else:  # --costs "" is an error, not the default
        profiles = [Profile.uniform(s.n_stages) if args.costs is None else common.uniform_costs(args.costs, s.n_stages)
                    for s in schedules]
    in_seconds = bool(args.profile) or (own is not None and own[0].model != "uniform")
    scale = args.scale if args.scale is not None else (1.0 if in_seconds else UNIT_SECONDS)
    # --comm left out: emulate's default (none, as the emulation does not sleep for it)
    comm = None if args.comm is None or args.comm.strip().lower() == "profile" else parse_comm(args.comm)
    _say_how_long(args, schedules, profiles, scale)
    try:
        runs = emulate(args.files, profiles, scale=scale, timeout=args.timeout,
                       **common.given(steps=args.steps, warmup=args.warmup, memory_actions=actions, link=link),
                       **({} if args.comm is None else {"comm": comm}))
    except SchedcError as e:
        raise common.said_once(e, "emulate") from None
    if args.json:
        print(json.dumps([r.to_dict() for r in runs], indent=2))
        return 0
    if args.comm is None or comm == 0:
        note = "measured and predicted both leave it out (the prediction's comm is 0)"
    elif comm is None:
        note = "the prediction adds the profile's comm, so the ratio shows what communication would add"
    else:
        note = f"the prediction adds --comm {args.comm}, which the measured step does not contain"
    print(format_emulations(runs, note))
    sys.stdout.flush()
    return 0


LONG_SECONDS = 60.0  # a run past this says how long it will sleep before it starts
MAX_SECONDS = 86400.0  # a day of sleeping stages is a unit mistake (--costs in ms, --scale), not an emulation


def _say_how_long(args, schedules: list, profiles, scale: float) -> None:
    """The stages' sleep the timed and warm-up steps add up to (the prediction's steps): said on
    stderr when past a minute, refused past a day, before any rank starts (a typo in --costs or
    --scale, or --steps 10**9, was a silent wait)."""
    import math

    from schedc import api
    from schedc.runtime.emulate import emulate, scaled_costs

    if not 0 < scale < math.inf:
        return  # emulate names --scale itself
    defaults = common.defaults_of(emulate)
    steps = (args.steps if args.steps is not None else defaults["steps"]) + \
        (args.warmup if args.warmup is not None else defaults["warmup"])
    total = 0.0
    for k, schedule in enumerate(schedules):
        profile = profiles if isinstance(profiles, Profile) else profiles[k]
        try:
            total += steps * api.simulate(schedule, profile=scaled_costs(profile, scale, [])).makespan
        except SchedcError:
            return  # a stage count the costs do not fit: emulate names it, with the file
    if not total <= MAX_SECONDS:
        raise SchedcError(f"the stages would sleep {total:.3g} s ({steps} steps of {len(args.files)} schedule(s) at "
                          f"--scale {scale:g}), more than a day; give fewer --steps, a smaller --scale or smaller costs")
    if total > LONG_SECONDS:
        print(f"schedc emulate: the stages sleep about {total:.0f} s over {steps} steps (--steps, --warmup, --scale "
              f"{scale:g}); Ctrl-C stops it", file=sys.stderr, flush=True)


def own_profiles(paths) -> Optional[list[Profile]]:
    """Each CSV's own costs (:func:`schedc.cli.common.own_costs`), in seconds or all in units; None
    when none names any; an error when only some do or units are mixed."""
    found = common.own_costs(paths, "emulate")
    if found is None:
        return None
    kinds = {f[0].model == "uniform" for f in found}
    if len(kinds) > 1:
        raise SchedcError("the CSVs name costs in seconds (profiles) and in units (--costs) at once; emulate them "
                          "apart or give one --profile")
    for p, (profile, where) in zip(paths, found):
        print(common.printable(f"schedc emulate: {p}: costs from {where} ({profile.model or 'unnamed'})"), file=sys.stderr)
    return [profile for profile, _ in found]
