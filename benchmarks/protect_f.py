"""What the list heuristic's protect_f rules gain on V placements: a table.

For the Llama-3-8B-like model of benchmarks/plan_quality.py on its compute-balanced split, in a V,
it prints the best list schedule over every deterministic rule of schedc.solver.engines.heuristic, once
with the rules as they are without ``protect_f`` and once with it, and the partition's own lower
bound (schedc.planning.own_bound). No time limit is involved: each rule is one construction.

    python benchmarks/protect_f.py          # about a minute here
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from plan_quality import MODELS, units_profile  # noqa: E402

from schedc.core.partition import Units, balanced  # noqa: E402
from schedc.planning import own_bound, parse_cap, problem_for  # noqa: E402
from schedc.solver.engines import heuristic  # noqa: E402
from schedc.solver.graph import graph_of  # noqa: E402

ROWS = [("llama3-8b", 4, 16, "40GiB"), ("llama3-8b", 4, 32, "40GiB"), ("llama3-8b", 8, 16, "80GiB"),
        ("llama3-8b", 8, 32, "40GiB"), ("mistral-7b", 8, 32, "40GiB"), ("llama3-8b", 16, 16, "40GiB"),
        ("llama3-8b", 16, 16, "80GiB")]


def best_list_schedule(graph, protect_f: bool) -> float:
    rules = heuristic._dedupe_by_memory(graph, heuristic.list_rules(graph, "makespan"))
    rules = {replace(r, protect_f=protect_f) for r in rules}
    best = float("inf")
    for rule in rules:
        orders = heuristic._list_schedule(graph, rule)
        timed = heuristic._retime(graph, orders) if orders is not None else None
        if timed is not None and timed[2]:
            best = min(best, timed[0])
    return best


def main() -> int:
    print("| model | ranks | mb | memory | without protect_f (ms) | with protect_f | own bound |")
    print("|---|---|---|---|---|---|---|")
    for model, ranks, mb, memory in ROWS:
        units = units_profile(**MODELS[model])
        limit = parse_cap(memory)
        counts = balanced(Units.of(units), "v", ranks, limit.value)[1]
        problem = problem_for(units, counts, "v", ranks, mb, limit, "makespan")
        graph = graph_of(problem)
        plain, protected = best_list_schedule(graph, False), best_list_schedule(graph, True)
        print(f"| {model} | {ranks} | {mb} | {memory} | {1e3 * plain:.1f} | {1e3 * protected:.1f} | "
              f"{1e3 * own_bound(problem):.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
