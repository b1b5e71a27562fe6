"""What periodic schedules (schedc.solver.engines.periodic) give a compile under a tight memory cap.

For partitions of the Llama-3-8B-like model of benchmarks/plan_quality.py on 4 ranks in a V at
40 GiB (where a rank holds one microbatch of its heaviest stage), it prints the step of

- `schedc compile` with the periodic phase switched off (the gate forced shut),
- `schedc compile` as it runs (the phase opens under this cap),
- the periodic search alone (``periodic_schedule``) and the seconds it took,

each compile with the same time limit; step times in ms as the simulator predicts them.

    python benchmarks/periodic.py                  # the table in docs/design.md (about 3 minutes)
    python benchmarks/periodic.py --time-limit 20
"""

from __future__ import annotations

import argparse
import time

from plan_quality import MODELS, units_profile

from schedc.planning import parse_cap, problem_for
from schedc.solver.compile import compile_problem
from schedc.solver.engines import periodic
from schedc.solver.graph import graph_of

PARTITIONS = [(5, 1, 6, 1, 8, 3, 9, 1), (5, 1, 5, 6, 3, 4, 9, 1), (1, 1, 1, 1, 8, 8, 9, 5)]


def compile_without_periodic(problem, time_limit: float) -> float:
    gate = periodic.worth_trying
    periodic.worth_trying = lambda g: False
    try:
        return compile_problem(problem, time_limit=time_limit).value
    finally:
        periodic.worth_trying = gate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds per compile (default 10)")
    ap.add_argument("--mb", type=int, nargs="+", default=[16, 32])
    args = ap.parse_args()
    units = units_profile(**MODELS["llama3-8b"])
    print(f"Llama-3-8B-like, 4 ranks in a V, 40 GiB; compiles of {args.time_limit:g} s; ms\n")
    print("| units per stage | mb | compile without periodic | compile | periodic alone | its seconds |")
    print("|---|---|---|---|---|---|")
    for counts in PARTITIONS:
        for mb in args.mb:
            problem = problem_for(units, counts, "v", 4, mb, parse_cap("40GiB"), "makespan")
            without = compile_without_periodic(problem, args.time_limit)
            with_ = compile_problem(problem, time_limit=args.time_limit).value
            t = time.monotonic()
            alone = periodic.periodic_schedule(graph_of(problem), args.time_limit)
            seconds = time.monotonic() - t
            alone_ms = f"{alone[1].makespan * 1e3:.1f}" if alone else "none"
            print(f"| {','.join(map(str, counts))} | {mb} | {without * 1e3:.1f} | {with_ * 1e3:.1f} | {alone_ms} "
                  f"| {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
