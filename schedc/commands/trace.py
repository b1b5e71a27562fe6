"""`schedc trace`: a Chrome trace (Perfetto, chrome://tracing) of a CSV schedule."""

from __future__ import annotations

from schedc.commands import common


def register(sub) -> None:
    p = sub.add_parser("trace", help="write a Chrome trace (Perfetto, chrome://tracing) of a CSV schedule")
    p.set_defaults(handler=run)
    p.add_argument("file", metavar="FILE.csv")
    common.add_cost_args(p)
    p.add_argument("-o", "--output", required=True, metavar="trace.json", help="trace file to write")


def run(args) -> int:
    from schedc.trace import write_trace

    common.check_outputs(args, (args.output, "-o"))
    args.files = [args.file]
    (schedule,), (profile,) = common.read_checked(args)
    memory = common.memory_from_args(args)
    common.warn_mismatches("trace", args.files, [schedule], memory, [profile])
    trace = write_trace(schedule, profile, args.output, memory)
    n = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    print(f"wrote {args.output}: {n} actions on {schedule.n_ranks} ranks; open it in https://ui.perfetto.dev "
          f"or chrome://tracing (1 s of the profile = 1 s of trace)")
    return 0

