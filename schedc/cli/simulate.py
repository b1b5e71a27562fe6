"""`schedc simulate`: predicted step time, bubble and memory of CSV schedules (schedc.api.simulate).

Each CSV is judged by the costs it brings, as `schedc plot` draws it (:func:`schedc.cli.common.costs_beside`),
unless ``--profile``, ``--costs`` or ``--comm`` give one set for every CSV."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

from schedc.cli import common, offload_flags
from schedc.core.costs import MemoryLimit, Profile, format_duration
from schedc.core.diagnose import limiter
from schedc.core.formatting import format_memory


def register(sub) -> None:
    p = sub.add_parser("simulate", help="predict step time, bubble and memory of CSV schedules")
    p.set_defaults(handler=run)
    p.add_argument("files", nargs="+", metavar="FILE.csv", type=common.path,
                   help="each judged by its own costs when NAME.profile.json or a report NAME.json sits beside it "
                        "(unless --profile/--costs give one for all)")
    common.add_cost_args(p)
    offload_flags.add_memory_actions_arg(p)
    # --mem is --memory's abbreviation, which argparse cannot infer once --memory-actions shares its prefix
    p.add_argument("--mem", dest="memory", metavar="SPEC", help=argparse.SUPPRESS)
    offload_flags.add_link_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--check", action="store_true",
                   help="exit 1 (after printing) when a schedule exceeds the memory limit, for scripts")


def run(args) -> int:
    from schedc import api

    actions, link = offload_flags.link_and_actions(args)
    schedules, profiles, memory, sources = common.read_with_costs(args)
    sources = sources or [None] * len(schedules)
    common.warn_mismatches("simulate", args.files, schedules, memory, profiles)
    rows = [(path, schedule, api.simulate(schedule, profile=profile, memory=memory,
                                          memory_actions=offload_flags.against(actions, path), host_link=link))
            for path, schedule, profile in zip(args.files, schedules, profiles)]
    if args.json:  # JSON escapes control characters itself
        print(json.dumps([summary_dict(p, s, r, prof, source)
                          for (p, s, r), prof, source in zip(rows, profiles, sources)], indent=2))
    else:
        for (path, schedule, res), profile, source in zip(rows, profiles, sources):
            common.echo(format_simulation(path, schedule, res, memory, profile, source))
            print()
        if len(rows) > 1:
            common.echo(format_comparison(rows, profiles))
    over = [(path, res) for path, _, res in rows if not res.fits]
    if args.check and over:
        for path, res in over:
            ranks = res.ranks_over
            common.echo(f"schedc simulate: {common.printable(path)} exceeds the memory limit {memory} on rank(s) "
                        f"{', '.join(map(str, ranks))} (peak {format_memory(max(res.peak_memory))}, limit "
                        f"{format_memory(res.memory_limit[ranks[0]])})", file=sys.stderr)
        return 1
    return 0


def summary_dict(path, schedule, res, profile: Profile, costs_from: Optional[str] = None) -> dict:
    """`costs_from`: the file beside the CSV its costs came from (None: --profile, --costs or the default)."""
    return {
        "file": str(path),
        "costs_from": costs_from,
        "stages": schedule.n_stages,
        "ranks": schedule.n_ranks,
        "microbatches": schedule.n_microbatches,
        "time_unit": "units" if profile.model == "uniform" else "s",
        "makespan": res.makespan,
        "span": res.span,
        "bubble": res.bubble,
        "bubble_per_rank": res.bubble_per_rank,
        "peak_memory": res.peak_memory,
        "memory_limit": [None if m == float("inf") else m for m in res.memory_limit],
        "fits_memory": res.fits,
        "runtime": res.execution,
        "limiter": limiter(res, profile).as_dict(),
        **({"link_busy": [{"rank": r, "out": out, "in": back} for r, (out, back) in enumerate(res.link_busy)],
            "host_peak_per_node": list(res.host_peak)} if res.link_busy else {}),
    }


def format_simulation(path, schedule, res, memory: MemoryLimit, profile: Profile,
                      costs_from: Optional[str] = None) -> str:
    lines = [
        f"{common.printable(path)}: {common.shape(schedule.n_stages, schedule.n_ranks, schedule.n_microbatches)}",
        *([f"  costs from {common.printable(costs_from)} beside it"] if costs_from else []),
        f"  makespan {format_duration(res.makespan, profile)}   span {format_duration(res.span, profile)}   bubble {100 * res.bubble:.1f}%   "
        f"memory limit {memory}: {'fits' if res.fits else 'EXCEEDED'}   ({res.execution} runtime)",
        f"  {'rank':>4}  {'busy (' + format_duration(0, profile).split()[-1] + ')':>12}  {'bubble':>7}  {'peak memory':>12}  {'limit':>10}",
    ]
    for r in range(schedule.n_ranks):
        flag = "  over" if r in res.ranks_over else ""
        lines.append(f"  {r:>4}  {res.busy[r]:>12.4g}  {100 * res.bubble_per_rank[r]:>6.1f}%  "
                     f"{format_memory(res.peak_memory[r]):>12}  {format_memory(res.memory_limit[r]):>10}{flag}")
    if res.link_busy:
        lines.append("  offload: link busy per rank (out/in) " + ", ".join(
            f"{100 * out:.0f}%/{100 * back:.0f}%" for out, back in res.link_busy) +
            "; pinned host memory per node " + ", ".join(format_memory(h) for h in res.host_peak))
    lines.append(f"  limits the step: {limiter(res, profile).message}")
    return "\n".join(lines)


def format_comparison(rows, profiles) -> str:
    best = min(r.makespan for _, _, r in rows)
    lines = [f"{'schedule':40s} {'makespan':>12} {'vs best':>8} {'bubble':>7} {'max peak':>10} {'fits':>5}"]
    for (path, _, res), profile in zip(rows, profiles):
        lines.append(f"{str(path)[-40:]:40s} {format_duration(res.makespan, profile):>12} {res.makespan / best:>7.3f}x "
                     f"{100 * res.bubble:>6.1f}% {format_memory(max(res.peak_memory)):>10} {'yes' if res.fits else 'no':>5}")
    return "\n".join(lines)

