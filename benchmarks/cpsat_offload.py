"""CP-SAT with the order and the offloads in one model (schedc.solver.engines.cpsat_offload)
against the choosers on the hand-made orders (schedc.solver.offload.best_offload), on small
problems where the cap binds.

Per row (identical stages, F = I = W = 1 s, 1 byte of activation per microbatch; a copy of one
microbatch takes the row's seconds each way) it prints the step without a cap (ZB-H2), the
choosers' best over 1F1B, ZB-H1 and ZB-H2, CP-SAT's answer hinted with it, and CP-SAT's
seconds. Steps are the simulator's, in seconds of the uniform costs; CP-SAT runs with two
workers, so a row may differ run to run by a step.

A second table adds recompute of single microbatches (``checkpointed=``): checkpointed, a stage
keeps a tenth of its byte and its backward runs whole as B, I + W + the row's recompute seconds.
Per row: the step without a cap, the choosers with recompute mixed in (best_offload's "mixed"
pass), offload alone (CP-SAT hinted with the choosers' offload, or theirs where it finds nothing
shorter), and CP-SAT choosing keep, offload or recompute per microbatch with the order, hinted
with the choosers' mix, as ``--offload auto`` runs it, with the microbatches it recomputes and
moves.

    python benchmarks/cpsat_offload.py                 # the tables, 10 s per CP-SAT run
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
# (stages, microbatches, cap, copy seconds, recompute seconds)
RECOMPUTE_ROWS = [(4, 8, "0.5p", 20.0, 0.25), (4, 8, "0.5p", 2.0, 1.0), (4, 16, "0.5p", 2.0, 1.0),
                  (8, 16, "0.5p", 2.0, 1.0)]


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


def recompute_row(stages: int, microbatches: int, cap: str, copy: float, extra: float, seconds: float) -> str:
    from schedc.planning.ac import checkpointed_form

    profile, memory = Profile.uniform(stages), MemoryLimit.parse(cap)
    checkpointed = checkpointed_form(profile.model_copy(update={"stages": [
        st.model_copy(update={"backward_input": st.backward_input + extra, "activation_bytes": 0.1,
                              "weight_grad_bytes": 0.1}) for st in profile.stages]}), profile)
    link = HostLink(bandwidth=1 / copy, latency=0.0)
    problem = Problem.build(stages, microbatches, profile=profile, memory=memory)
    orders = [(name, make_baseline(name, stages, microbatches)) for name in ("1f1b", "zb-h1", "zb-h2")]
    found = best_offload(orders, problem, link, checkpointed=checkpointed)
    mix = None if found is None else found[1]
    shares = best_offload(orders, problem, link)
    alone = offload_cpsat(problem, link, None if shares is None else shares[1], Deadline.after(seconds))
    alone = alone if alone is not None else None if shares is None else shares[1]
    t0 = time.monotonic()
    both = offload_cpsat(problem, link, mix, Deadline.after(seconds), checkpointed=checkpointed)
    took = time.monotonic() - t0
    free = simulate(make_baseline("zb-h2", stages, microbatches), profile, None).makespan

    def step(choice) -> str:
        return "does not fit" if choice is None else f"{choice.sim.makespan:g}"

    kinds = "" if both is None else "{} / {}".format(*(sum(a.action == k for a in both.actions)
                                                     for k in ("recompute", "offload")))
    return (f"| {stages} x {microbatches} | {cap} | {copy:g} | {extra:g} | {free:g} | {step(mix)} | {step(alone)} | "
            f"{step(both) if both is not None else 'nothing shorter'} | {kinds} | {took:.1f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="CP-SAT's time per row (default 10)")
    args = ap.parse_args(argv)
    print("| stages x microbatches | cap | copy s | no cap (ZB-H2) | choosers on 1F1B, ZB-H1, ZB-H2 | CP-SAT, order "
          "and offloads | shorter by | CP-SAT s |")
    print("|---" * 8 + "|")
    for stages, microbatches, cap, copy in ROWS:
        print(row(stages, microbatches, cap, copy, args.seconds), flush=True)
    print()
    print("| stages x microbatches | cap | copy s | recompute s | no cap (ZB-H2) | choosers, recompute mixed in | "
          "offload only | CP-SAT, keep / offload / recompute | recomputed / moved | CP-SAT s |")
    print("|---" * 10 + "|")
    for stages, microbatches, cap, copy, extra in RECOMPUTE_ROWS:
        print(recompute_row(stages, microbatches, cap, copy, extra, args.seconds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
