"""PuLP (the default compiler) against CP-SAT (schedc.solver.engines.cpsat) on the same cases, same limit.

Cases: compile_quality's quick set (identical 8x16; heterogeneous 4x16, 8x24, 16x48 and V 4 ranks
x 2 stages x 16 at 1p, both objectives; the span closed-form case 4x12), issue 11's V points
(4 ranks x 2 stages, F = I = W = 1, I frees nothing, 8 and 16 microbatches, 0.75p and 0.5p) and
its slow-link case (identical stages, comm 0.25F, 8x24, 1.25p, span).

Each engine gets the same warm start rules and time limit; "best" is the simulated objective of
its schedule, "bound" the lower bound it certifies (PuLP: the driver's; CP-SAT: its own bound
converted to seconds, or the combinatorial bound when higher). Timings are wall clock.

Usage: python benchmarks/cpsat_vs_pulp.py [--time-limit S] [--workers N] [--only NAME,...] [--markdown]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedc.core.costs import Profile, StageCost  # noqa: E402
from schedc.solver import compile_problem  # noqa: E402
from schedc.solver.bounds.chains import lower_bound  # noqa: E402
from schedc.solver.engines.cpsat import solve_cpsat  # noqa: E402
from schedc.solver.problem import Problem  # noqa: E402


def v_profile(n_stages: int) -> Profile:
    """F = I = W = 1 and I frees nothing (what torch's split backward measures)."""
    st = StageCost(forward=1, backward_input=1, backward_weight=1, activation_bytes=1.0, weight_grad_bytes=1.0)
    return Profile(stages=[st] * n_stages, comm=0.0, model="v-half-points")


def cases():
    out = [("8x16 identical", dict(n_stages=8, n_microbatches=16, memory="1p"))]
    for objective in ("makespan", "span"):
        for n, m in [(4, 16), (8, 24), (16, 48)]:
            out.append((f"{n}x{m} hetero", dict(n_stages=n, n_microbatches=m, profile=Profile.edge_heavy(n),
                                                memory="1p", objective=objective)))
        out.append(("V 4x2x16 hetero", dict(n_stages=8, n_microbatches=16, n_ranks=4, placement="v",
                                            profile=Profile.edge_heavy(8), memory="1p", objective=objective)))
    out.append(("4x12 identical", dict(n_stages=4, n_microbatches=12, memory="1p", objective="span")))
    for m in (8, 16):
        for mem in ("0.75p", "0.5p"):
            out.append((f"V 4x2x{m} I-frees-0", dict(n_stages=8, n_microbatches=m, n_ranks=4, placement="v",
                                                    profile=v_profile(8), memory=mem)))
    out.append(("8x24 comm 0.25", dict(n_stages=8, n_microbatches=24, profile=Profile.uniform(8, comm=0.25),
                                       memory="1.25p", objective="span")))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=20.0, help="seconds per engine and case (default 20)")
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT worker threads (default 2)")
    ap.add_argument("--only", default="", help="comma-separated substrings of case names to run")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    header = ["case", "obj", "mem", "PuLP best", "PuLP bound", "PuLP s", "CP-SAT best", "CP-SAT bound", "CP-SAT s"]
    if args.markdown:
        print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    else:
        print("  ".join(f"{h:>12}" if i else f"{h:<22}" for i, h in enumerate(header)))
    only = [s for s in args.only.split(",") if s]
    for label, kw in cases():
        if only and not any(s in label for s in only):
            continue
        problem = Problem.build(**kw)
        t0 = time.monotonic()
        res = compile_problem(problem, time_limit=args.time_limit)
        t_pulp = time.monotonic() - t0
        t0 = time.monotonic()
        out = solve_cpsat(problem, time_limit=args.time_limit, workers=args.workers)
        t_cp = time.monotonic() - t0
        cp_bound = max(lower_bound(problem), out.bound or 0.0)
        row = [label, problem.objective, str(problem.memory), f"{res.value:.4g}", f"{res.lower_bound:.4g}",
               f"{t_pulp:.1f}", f"{out.value:.4g}", f"{cp_bound:.4g}", f"{t_cp:.1f}"]
        if args.markdown:
            print("| " + " | ".join(row) + " |", flush=True)
        else:
            print("  ".join(f"{c:>12}" if i else f"{c:<22}" for i, c in enumerate(row)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
