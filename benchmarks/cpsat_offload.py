"""CP-SAT with the order and the offloads in one model (schedc.solver.engines.cpsat_offload)
against the choosers on the hand-made orders (schedc.solver.offload.best_offload), on small
problems where the cap binds.

Per row (identical stages, F = I = W = 1 s, 1 byte of activation per microbatch; a copy of one
microbatch takes the row's seconds each way) it prints the step without a cap (ZB-H2), the
choosers' best over 1F1B, ZB-H1 and ZB-H2, CP-SAT's answer hinted with it, and CP-SAT's
seconds. Steps are the simulator's, in seconds of the uniform costs; CP-SAT runs with two
workers, so a row may differ run to run by a step.

    python benchmarks/cpsat_offload.py                 # the table, 10 s per row
    python benchmarks/cpsat_offload.py --seconds 30
"""

from __future__ import annotations

import argparse
import sys
import time

from schedc.core.baselines import make_baseline
from schedc.core.costs import MemoryLimit, Profile
from schedc.core.host_link import HostLink
from schedc.core.simulate import simulate
from schedc.solver.deadline import Deadline
from schedc.solver.engines.cpsat_offload import offload_cpsat
from schedc.solver.offload import best_offload
from schedc.solver.problem import Problem

ROWS = [(4, 8, "0.8p", 2.0), (4, 8, "0.8p", 0.5), (4, 16, "0.8p", 2.0), (8, 16, "0.8p", 2.0), (8, 16, "0.7p", 1.0),
        (8, 32, "0.8p", 2.0)]


def row(stages: int, microbatches: int, cap: str, copy: float, seconds: float) -> str:
    profile, memory = Profile.uniform(stages), MemoryLimit.parse(cap)
    link = HostLink(bandwidth=1 / copy, latency=0.0)
    problem = Problem.build(stages, microbatches, profile=profile, memory=memory)
    orders = [(name, make_baseline(name, stages, microbatches)) for name in ("1f1b", "zb-h1", "zb-h2")]
    found = best_offload(orders, problem, link)
    chosen = None if found is None else found[1]
    t0 = time.monotonic()
    solved = offload_cpsat(problem, link, chosen, Deadline.after(seconds))
    took = time.monotonic() - t0
    best = solved if solved is not None else chosen
    free = simulate(make_baseline("zb-h2", stages, microbatches), profile, None).makespan

    def step(choice) -> str:
        return "does not fit" if choice is None else f"{choice.sim.makespan:g}"

    gain = "" if solved is None or chosen is None else f"{100 * (1 - solved.sim.makespan / chosen.sim.makespan):.1f}%"
    return (f"| {stages} x {microbatches} | {cap} | {copy:g} | {free:g} | {step(chosen)} | "
            f"{step(best) if solved is not None else 'nothing shorter'} | {gain} | {took:.1f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="CP-SAT's time per row (default 10)")
    args = ap.parse_args(argv)
    print("| stages x microbatches | cap | copy s | no cap (ZB-H2) | choosers on 1F1B, ZB-H1, ZB-H2 | CP-SAT, order "
          "and offloads | shorter by | CP-SAT s |")
    print("|---" * 8 + "|")
    for stages, microbatches, cap, copy in ROWS:
        print(row(stages, microbatches, cap, copy, args.seconds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
