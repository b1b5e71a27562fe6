"""Where a compile's time and memory go, phase by phase, at the sizes people train.

Runs ``compile_problem`` as ``schedc compile`` does (default engines, identical stages, 1p,
makespan) with every phase wrapped in a timer: building the problem, the action graph, each warm
start (hand-made schedules, zb-greedy, the list heuristic), the bounds, each engine (CP-SAT, the
integer program, windows), the report and the CSV. Each instance runs in its own process, so the
peak RSS column is that process's high-water mark when the phase ended (phases run in order:
the first phase whose column jumps is the one that allocated).

Usage: python benchmarks/where_time_goes.py [--time-limit 10] [--sizes 32x256,64x256,128x512,8x8192]
Wall times on a shared machine are noisy; run all sizes in one go and compare rows, not runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (module, attribute, label): wrapped in place; calls nested in another wrapped call count in both
PHASES = [
    ("schedc.solver.problem", "Problem.build", "build problem"),
    ("schedc.solver.graph", "Graph.lower", "action graph"),
    ("schedc.solver.engines.warm", "_build_baselines", "baselines (all)"),
    ("schedc.solver.engines.warm", "build_baselines", "baselines (all)"),
    ("schedc.core.baselines", "make_baseline", "  hand-made orders"),
    ("schedc.solver.engines.zb_greedy", "zb_greedy", "  zb-greedy"),
    ("schedc.solver.engines.zb_rounds", "paper_greedy", "  paper greedy"),
    ("schedc.solver.engines.heuristic", "heuristic_schedule", "list heuristic"),
    ("schedc.solver.bounds.chains", "lower_bound_details", "bounds"),
    ("schedc.solver.engines.cpsat", "build_cp_model", "cp-sat model"),
    ("schedc.solver.engines.cpsat", "solve_cpsat", "cp-sat (all)"),
    ("schedc.solver.engines.mip", "solve_model", "integer program"),
    ("schedc.solver.engines.windows", "window_search", "windows"),
    ("schedc.core.simulate", "simulate", "simulate (every call)"),
    ("schedc.solver.compile", "build_report", "report"),
    ("schedc.io.csvio", "to_csv_text", "csv text"),
]


def _child(spec: str, time_limit: float) -> dict:
    import importlib

    stats: dict[str, list] = {}

    def wrap(fn, label):
        @functools.wraps(fn)
        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                e = stats.setdefault(label, [0.0, 0, 0.0])
                e[0] += time.perf_counter() - t
                e[1] += 1
                e[2] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return timed

    for mod_name, attr, label in PHASES:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        owner, name = mod, attr
        if "." in attr:
            cls, name = attr.split(".")
            owner = getattr(mod, cls)
        fn = getattr(owner, name, None)
        if fn is None:
            continue
        if isinstance(owner.__dict__.get(name), classmethod):
            setattr(owner, name, classmethod(wrap(owner.__dict__[name].__func__, label)))
            continue
        w = wrap(fn, label)
        setattr(owner, name, w)
        # modules that imported the name directly
        for other in list(sys.modules.values()):
            if other is not None and getattr(other, "__name__", "").startswith("schedc") and \
                    getattr(other, name, None) is fn:
                setattr(other, name, w)

    from schedc.io import csvio
    from schedc.solver.compile import compile_problem
    from schedc.solver.problem import Problem

    placement = "loop"
    if spec.startswith("V"):
        placement, spec = "v", spec[1:]
    n, m = (int(x) for x in spec.split("x"))
    t0 = time.perf_counter()
    problem = Problem.build(n, m, placement=placement, n_ranks=n // 2 if placement == "v" else None)
    res = compile_problem(problem, time_limit=time_limit)
    csvio.to_csv_text(res.schedule)
    wall = time.perf_counter() - t0
    return {"stats": stats, "wall": wall, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "status": res.status, "gap": res.gap, "source": res.warm_start_source}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--sizes", default="32x256,64x256,128x512,8x8192",
                    help="comma-separated NxM (loop) or VNxM (V placement, N stages on N/2 ranks)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.time_limit)))
        return 0
    results = {}
    for spec in args.sizes.split(","):
        out = subprocess.run([sys.executable, __file__, "--child", spec, "--time-limit", str(args.time_limit)],
                             capture_output=True, text=True, timeout=30 * args.time_limit + 600)
        if out.returncode:
            print(f"{spec}: failed: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            continue
        results[spec] = json.loads(out.stdout.strip().splitlines()[-1])
    labels = list(dict.fromkeys(label for _, _, label in PHASES))
    specs = list(results)
    print(f"time limit {args.time_limit:g} s; seconds (calls) / peak RSS MB when the phase ended")
    print("| phase | " + " | ".join(specs) + " |")
    print("|---|" + "---|" * len(specs))
    for label in labels:
        cells = []
        for spec in specs:
            e = results[spec]["stats"].get(label)
            cells.append("-" if e is None else f"{e[0]:.2f} ({e[1]}) / {e[2]:.0f}")
        if any(c != "-" for c in cells):
            print(f"| {label} | " + " | ".join(cells) + " |")
    print("| **total (in process)** | " + " | ".join(
        f"{results[s]['wall']:.1f} / {results[s]['rss']:.0f}" for s in specs) + " |")
    print("| result | " + " | ".join(
        f"{results[s]['status']} {100 * results[s]['gap']:.2f}% ({results[s]['source']})" for s in specs) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
