"""`schedc trace`: a Chrome trace (Perfetto, chrome://tracing) of a CSV schedule, with the costs it brings
(as `schedc plot` finds them) or those given."""

from __future__ import annotations

import argparse

from schedc.cli import common, offload_flags


def register(sub) -> None:
    p = sub.add_parser("trace", help="write a Chrome trace (Perfetto, chrome://tracing) of a CSV schedule")
    p.set_defaults(handler=run)
    p.add_argument("file", metavar="FILE.csv", type=common.path,
                   help="the schedule; drawn with the costs beside it (NAME.profile.json or its report NAME.json) "
                        "unless --profile/--costs give them")
    common.add_cost_args(p)
    offload_flags.add_memory_actions_arg(p)
    # --mem stays --memory's abbreviation, as --memory-actions shares its prefix
    p.add_argument("--mem", dest="memory", metavar="SPEC", help=argparse.SUPPRESS)
    offload_flags.add_link_args(p)
    p.add_argument("-o", "--output", required=True, metavar="trace.json", type=common.path, help="trace file to write")


def run(args) -> int:
    from schedc import api
    from schedc.io import csvio
    from schedc.show.trace import check_trace_size

    common.check_outputs(args, (args.output, "-o"))
    common.check_json_output(args.output, "a Chrome trace")
    actions, link = offload_flags.link_and_actions(args)
    args.files = [args.file]
    # the trace's bound is far below what reading and checking a schedule allows: say so first
    check_trace_size(csvio.count_actions(args.file), str(args.file))
    (schedule,), (profile,), memory, sources = common.read_with_costs(args)
    costs = "" if sources is None else f" with the costs in {sources[0]}"
    common.warn_mismatches("trace", args.files, [schedule], memory, [profile])
    trace = api.write_trace(schedule, args.output, profile=profile, memory=memory,
                            memory_actions=offload_flags.against(actions, args.file), host_link=link)
    n = sum(1 for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == 0)
    copies = sum(1 for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] != 0)
    moved = f" and {copies} copies on the copy streams" if actions is not None else ""
    print(f"wrote {common.printable(args.output)}: {n} actions{moved} on {schedule.n_ranks} ranks{costs}; open it in https://ui.perfetto.dev "
          f"or chrome://tracing (1 s of the profile = 1 s of trace)")
    return 0

