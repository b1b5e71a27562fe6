"""A fingerprint of the solver's deterministic paths: what a refactor must leave unchanged.

Covers, on a grid of small problems (loop and V, identical and uneven stages, communication,
byte caps and no cap, both objectives, both runtimes): the simulation of every hand-made
schedule (every start, end and peak), zb-greedy, the lower bound's terms, the list heuristic's
first constructions (one per rule, no time budget involved), the action graph, and the CSV text
of each. Memory caps are given in bytes or none, so the fingerprint does not move when the
meaning of ``Kp`` does. Time-limited searches are left out: they depend on the machine's load.

Usage: python benchmarks/fingerprint.py [--show]   (prints one SHA-256; --show prints each part's)
tests/test_fingerprint.py pins the value.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedc.core import baselines
from schedc.core.costs import Profile  # noqa: E402
from schedc.core.simulate import simulate  # noqa: E402
from schedc.io import csvio  # noqa: E402
from schedc.solver import graph
from schedc.solver.bounds import chains as bounds
from schedc.solver.engines import heuristic  # noqa: E402
from schedc.solver.engines import zb_greedy as greedy
from schedc.solver.problem import Problem  # noqa: E402

N_RULES = 12  # list-heuristic rules fingerprinted per problem


def problems():
    for n, m, placement, ranks in ((4, 6, "loop", None), (4, 9, "loop", None), (8, 16, "loop", None),
                                   (8, 8, "v", 4), (4, 8, "v", 2), (6, 12, "loop", 3)):
        for prof_name, prof in (("uniform", Profile.uniform(n)),
                                ("comm", Profile.uniform(n, forward=1.0, backward_input=1.1, backward_weight=0.7,
                                                         comm=0.25)),
                                ("edges", Profile.edge_heavy(n))):
            for memory in ("none", f"{max(2, n // 2)}B", f"{n}B"):
                for objective in ("makespan", "span"):
                    for runtime in ("torch", "ideal"):
                        try:
                            p = Problem.build(n, m, n_ranks=ranks, placement=placement, profile=prof,
                                              memory=memory, objective=objective, runtime=runtime)
                        except Exception:
                            continue
                        yield f"{n}x{m} {placement} {prof_name} {memory} {objective} {runtime}", p


def _sim_text(sim) -> str:
    times = ";".join(f"{a}:{t.start!r},{t.end!r}" for row in sim.order for a in row for t in [sim.timings[a]])
    return f"{sim.makespan!r}|{sim.span!r}|{sim.peak_memory!r}|{sim.fits}|{times}"


def parts(problem: Problem) -> dict[str, str]:
    out = {}
    pname = problem.placement_name
    for name in baselines.BASELINE_NAMES:
        try:
            sched = baselines.make_baseline(name, problem.n_stages, problem.n_microbatches, n_ranks=problem.n_ranks,
                                            placement=pname if pname in ("loop", "v") else None)
        except Exception:
            continue
        if tuple(sched.placement) != tuple(problem.placement):
            continue
        sim = simulate(sched, problem.profile, problem.memory)
        out[name] = csvio.to_csv_text(sched) + _sim_text(sim)
    if greedy.supports(problem):
        try:
            fam = greedy.greedy_family(problem)
            out["zb-greedy"] = "".join(csvio.to_csv_text(s) + _sim_text(sim) for _, s, sim in fam)
        except Exception as e:  # a cap the greedy cannot meet is part of the fingerprint too
            out["zb-greedy"] = f"error {e}"
    out["bounds"] = repr(sorted(bounds.lower_bound_details(problem).items()))
    try:
        heuristic.check_memory_feasible(problem)
    except Exception as e:
        out["feasible"] = f"error {e}"
        return out
    a = graph.graph_of(problem)
    rules = heuristic._dedupe_by_memory(a, heuristic.list_rules(a, problem.objective))[:N_RULES]
    out["heuristic"] = repr([heuristic._list_schedule(a, rule) for rule in rules])
    inst = graph.graph_of(problem)
    out["graph"] = repr((inst.actions, inst.preds, inst.dur, inst.delta, inst.topo, inst.first, inst.backward))
    return out


def fingerprint(show: bool = False) -> str:
    total = hashlib.sha256()
    for label, p in problems():
        for key, text in parts(p).items():
            h = hashlib.sha256(text.encode()).hexdigest()
            if show:
                print(f"{label} {key}: {h[:16]}")
            total.update(f"{label}|{key}|{h}".encode())
    return total.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", action="store_true", help="print each part's hash")
    args = ap.parse_args(argv)
    print(fingerprint(args.show))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
