"""Compile quality table: schedc vs the hand-made schedules, the lower bound, the gap, the time.

Cases (issue 3's targets):
  (a) 8 stages x 16 microbatches, identical stages, 1p, makespan;
  (b) heterogeneous stages (first and last 1.3x, I = 1.1F, W = 0.9F, comm 0.1F), both objectives,
      1p / 1.5p / 2p, for (4,16), (8,24), (16,48) and V placement 4 ranks x 2 stages x 16 mb;
  (c) 32 stages x 128 microbatches (identical, 1p, 120 s; and heterogeneous, outside --quick);
  (d) span objective, identical stages, vs the ZB paper's closed forms (ZB-H1 at 1p, ZB-H2 at 2p).

Usage: python benchmarks/compile_quality.py [--quick] [--markdown] [--time-limit S] [--only a,b,c,d]
A baseline column shows its objective value when it exists for the case and fits the memory
limit, '-' otherwise. --quick runs one memory level per heterogeneous size and shorter limits.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedc.costs import Profile  # noqa: E402
from schedc.solver import compile_schedule  # noqa: E402

BASELINES = ["gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved-1f1b", "zb-v"]


def cases(quick: bool, time_limit: float, only: set[str]):
    out = []
    if "a" in only:
        out.append(("a", "8x16 identical", dict(n_stages=8, n_microbatches=16, memory="1p"), 10.0, None))
    if "b" in only:
        sizes = [(4, 16), (8, 24), (16, 48)]
        mems = ["1p"] if quick else ["1p", "1.5p", "2p"]
        for objective in ("makespan", "span"):
            for n, m in sizes:
                for mem in mems:
                    out.append(("b", f"{n}x{m} hetero", dict(n_stages=n, n_microbatches=m, profile=Profile.edge_heavy(n),
                                                             memory=mem, objective=objective), time_limit, None))
            for mem in mems:
                out.append(("b", "V 4r x 2s x 16 hetero",
                            dict(n_stages=8, n_microbatches=16, n_ranks=4, placement="v", profile=Profile.edge_heavy(8),
                                 memory=mem, objective=objective), time_limit, None))
    if "c" in only:
        out.append(("c", "32x128 identical", dict(n_stages=32, n_microbatches=128, memory="1p"),
                    60.0 if quick else 120.0, None))
        if not quick:  # the decomposition's case: the warm start does not meet the bound
            out.append(("c", "32x128 hetero", dict(n_stages=32, n_microbatches=128, profile=Profile.edge_heavy(32),
                                                   memory="1p"), 120.0, None))
    if "d" in only:
        for n, m in ([(4, 12)] if quick else [(4, 12), (8, 24)]):
            p = n
            # ZB paper's span bubbles with F = I = W = 1: ZB-H1 (p-1)(F+I-W), ZB-H2 (p-1)(F+I-2W)
            out.append(("d", f"{n}x{m} identical", dict(n_stages=n, n_microbatches=m, memory="1p", objective="span"),
                        time_limit, 3 * m + (p - 1) * 1))
            out.append(("d", f"{n}x{m} identical", dict(n_stages=n, n_microbatches=m, memory="2p", objective="span"),
                        time_limit, 3 * m + (p - 1) * 0))
    return out


def fmt(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a subset with shorter limits")
    ap.add_argument("--markdown", action="store_true", help="emit a Markdown table (for the README)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per heterogeneous case (default 60)")
    ap.add_argument("--only", default="a,b,c,d", help="comma-separated case groups (a,b,c,d)")
    ap.add_argument("--progress", action="store_true", help="print solver progress to stderr")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    limit = min(args.time_limit, 20.0) if args.quick else args.time_limit

    header = ["case", "obj", "mem", "schedc"] + BASELINES + ["closed form", "lower bound", "gap", "status", "time s"]
    rows = []
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    else:
        print("  ".join(f"{h:>12}" if i else f"{h:<24}" for i, h in enumerate(header)))
    for group, label, kw, tl, closed in cases(args.quick, limit, only):
        kw = dict(kw)
        objective = kw.get("objective", "makespan")

        def progress(e):
            if args.progress:
                print(f"  [{e['elapsed']:6.1f}s] {e['phase']:<24} best {e['best']:.5g} bound {e['bound']:.5g}",
                      file=sys.stderr)

        t0 = time.monotonic()
        res = compile_schedule(time_limit=tl, progress=progress, **kw)
        wall = time.monotonic() - t0
        base = []
        for name in BASELINES:
            b = res.baselines.get(name)
            base.append(b[objective] if b and b["fits"] else None)
        row = [f"({group}) {label}", objective, kw.get("memory", "1p"), fmt(res.value)] + [fmt(b) for b in base] + [
            fmt(closed), fmt(res.lower_bound), f"{100 * res.gap:.2f}%", res.status, f"{wall:.1f}"]
        rows.append(row)
        if args.markdown:
            print("| " + " | ".join(row) + " |", flush=True)
        else:
            print("  ".join(f"{c:>12}" if i else f"{c:<24}" for i, c in enumerate(row)), flush=True)
        fitting = [b for b in base if b is not None]
        if fitting and res.value > min(fitting) + 1e-9:
            print(f"  WARNING: worse than a fitting baseline ({min(fitting):.4g})", file=sys.stderr)
        if closed is not None and res.value > closed + 1e-9:
            print(f"  WARNING: worse than the closed form ({closed:.4g})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
