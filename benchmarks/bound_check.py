"""Lower-bound check table: every term of schedc.solver.bounds.chains against exact optima of random tiny
instances, found without the bounds.

Problem: a lower bound is a certificate only if no schedule beats it. The unit tests pin a few
instances; this draws many at random and counts, per term, how often it is the strongest and how
often it meets the optimum, and (the number that must stay 0) how often it exceeds it.

Method: random problems of 2-4 stages and 2-5 microbatches (placements loop, V, interleaved and
hand-written; torch's and the ideal runtime; caps from 0.5p to none; communication 0 to 1; random
F, I, W, activation and weight-gradient bytes) for both objectives. The optimum is
tests/exhaustive.py's search with ``use_bounds=False`` (no pruning or early stop by these
bounds, so an invalid bound cannot certify itself); instances it cannot finish within --nodes are
skipped. Every rank's own span bound is checked against that rank's
span in the optimal schedule too.

Usage: python benchmarks/bound_check.py [--seconds 120] [--seed 0] [--nodes 300000]
Cost: --seconds of exhaustive search (most instances take milliseconds, a few up to a second).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the exhaustive oracle lives with its tests

import exhaustive  # noqa: E402

from schedc.core.costs import Profile, StageCost  # noqa: E402
from schedc.core.simulate import simulate  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.solver.bounds.chains import lower_bound_details, rank_span_bounds  # noqa: E402
from schedc.solver.problem import Problem  # noqa: E402

EPS = 1e-9


def random_problem(rng: random.Random) -> Problem:
    S = rng.choice([2, 3, 4])
    placement, ranks = "loop", None
    if S == 4:
        placement, ranks = rng.choice([("loop", None), ("v", 2), ("loop", 2), ((0, 1, 1, 0), None)])
    M = rng.choice([2, 3, 4, 5]) if S <= 3 else rng.choice([2, 3])
    if S * M > 10:
        M = 10 // S
    stages = []
    for _ in range(S):
        act = rng.choice([1.0, 2.0])
        stages.append(StageCost(forward=rng.choice([0.5, 1.0, 1.5]), backward_input=rng.choice([0.5, 1.0, 2.0]),
                                backward_weight=rng.choice([0.0, 0.5, 1.0, 2.0]), activation_bytes=act,
                                weight_grad_bytes=rng.choice([0.0, 0.5, 1.0]) * act))
    return Problem.build(S, M, n_ranks=ranks, placement=placement,
                         profile=Profile(stages=stages, comm=rng.choice([0.0, 0.2, 0.5, 1.0])),
                         memory=rng.choice(["0.5p", "0.75p", "1p", "1.5p", "none"]),
                         objective=rng.choice(["makespan", "span"]), runtime=rng.choice(["torch", "ideal"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nodes", type=int, default=300_000)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    strongest, tight, above = Counter(), Counter(), Counter()
    checked = skipped = rank_violations = 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        try:
            problem = random_problem(rng)
            opt, sched = exhaustive.exact_optimum(problem, max_nodes=args.nodes, use_bounds=False)
        except SchedcError:  # a cap below one microbatch, or a search too large
            skipped += 1
            continue
        checked += 1
        details = lower_bound_details(problem)
        terms = {k: v for k, v in details.items() if k != "lower_bound"}
        best = max(terms.values())
        for name, value in terms.items():
            if value > opt + EPS * max(1.0, opt):
                above[name] += 1
            if value >= best - EPS and value > 0:
                strongest[name] += 1
                if value >= opt - EPS * max(1.0, opt):
                    tight[name] += 1
        spans = simulate(sched, problem.profile, problem.memory).span_per_rank
        rank_violations += sum(b > spans[r] + EPS for r, b in enumerate(rank_span_bounds(problem)))
    print(f"{checked} instances checked, {skipped} skipped (infeasible cap or over {args.nodes} nodes), "
          f"seed {args.seed}; per-rank span bounds above a rank's optimal span: {rank_violations}\n")
    print("| term | strongest | of which = optimum | above the optimum |")
    print("|---|---:|---:|---:|")
    for name in sorted(set(strongest) | set(above), key=lambda n: -strongest[n]):
        print(f"| {name} | {strongest[name]} | {tight[name]} | {above[name]} |")


if __name__ == "__main__":
    main()
