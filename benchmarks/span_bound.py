"""Span certificate table: the compiled span, its certified lower bound and the gap, on identical
stages over slow links (issue 11, item 2).

Cases: 8 ranks x 24 microbatches, identical stages (F = I = W = 1), communication 0.25 and 0.5
of F per boundary, memory 1.25p and 2p, objective span, for each --time-limit given. The bound
column names what certified it (the combinatorial terms, or the solver's dual bound on the
late-start model).

Usage: python benchmarks/span_bound.py [--time-limits 20,60] [--stages 8] [--mb 24]
Times are wall-clock on whatever machine runs it; on a loaded machine the solver sees less CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedc.core.costs import Profile  # noqa: E402
from schedc.solver import compile_schedule  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limits", default="20,60")
    ap.add_argument("--stages", type=int, default=8)
    ap.add_argument("--mb", type=int, default=24)
    args = ap.parse_args()
    print("| comm | memory | limit (s) | span | lower bound | gap | status | bound from |")
    print("|---|---|---|---|---|---|---|---|")
    for comm in (0.25, 0.5):
        for memory in ("1.25p", "2p"):
            for limit in (float(x) for x in args.time_limits.split(",")):
                res = compile_schedule(args.stages, args.mb, profile=Profile.uniform(args.stages, comm=comm),
                                       memory=memory, objective="span", time_limit=limit)
                print(f"| {comm:g}F | {memory} | {limit:g} | {res.value:.3f} | {res.lower_bound:.3f} | "
                      f"{100 * res.gap:.2f}% | {res.status} | {res.report['lower_bound_source']} |", flush=True)


if __name__ == "__main__":
    main()
