"""How much `schedc plan` gains by choosing the partition: a table over public decoder shapes.

For each model shape, rank count, placement, microbatch count and memory cap (bytes, static
included) it prints the step time of

- the best hand-made schedule (schedc.core.baselines) that fits, on torchtitan 0.3.0's default split
  (first/last_stage_less_layers = 1), on the even split (layers even, embedding and head added to
  the first and last stage) and on the compute-balanced split (the busiest rank's F + I + W least),
- `schedc compile` on the compute-balanced split (same time limit as plan),
- `schedc plan` (the placement of the row),
- the margin of plan over the best of those four, the bound over every partition and schedule
  (schedc.core.partition.partition_bound) and plan's gap to it, and plan's wall time.

Costs are arithmetic (schedc.library.transformer_profile, one layer per stage, split here into
units: embedding, each layer, final norm + LM head + loss), times on an H100 at 400 TFLOP/s
effective. Wall times on a shared 2-core machine are noisy; the step times are the simulator's.

    python benchmarks/plan_quality.py --time-limit 20   # the table in docs/results.md (about 20 minutes here)
    python benchmarks/plan_quality.py --quick           # 4 rows, 4 ranks, short limits (a smoke run)
    python benchmarks/plan_quality.py --time-limit 20 --match "| v |" --match 40GiB   # some rows

--match TEXT (repeatable) keeps the rows whose first five cells, as the table prints them
("| llama3-8b | 4 | v | 16 | 40GiB |"), contain every TEXT.
"""

from __future__ import annotations

import argparse
import sys
import time

from schedc.core.costs import Profile, StageCost
from schedc.core.partition import Units, balanced, even_counts, n_stages_for, torchtitan_default_counts
from schedc.library import transformer_profile
from schedc.planning import best_hand_made, parse_cap, plan, problem_for

# public decoder shapes; transformer_profile's MLP is GPT-style (2hf parameters) with f = ffn
MODELS = {
    "llama3-8b": dict(layers=32, hidden=4096, vocab=128256, seq=4096),
    "mistral-7b": dict(layers=32, hidden=4096, vocab=32000, seq=4096, ffn_hidden=14336),
    "llama3.2-3b-tied": dict(layers=28, hidden=3072, vocab=128256, seq=4096, ffn_hidden=8192, tied_embeddings=True),
}


def units_profile(layers: int, **shape) -> Profile:
    """A per-unit profile: transformer_profile's per-layer stages split into the embedding unit
    (its static bytes; a forward of 1 us, no FLOPs worth counting), one unit per layer and the
    head unit (norm + LM head + loss), named as torchtitan 0.3.0 names them."""
    p = transformer_profile(n_stages=layers, layers=layers, **shape)
    layer, first, last = p.stages[1], p.stages[0], p.stages[-1]
    units = [StageCost(forward=1e-6, backward_input=0.0, backward_weight=1e-6, activation_bytes=0.0,
                       static_bytes=first.static_bytes - layer.static_bytes, modules=["tok_embeddings"])]
    units += [layer.model_copy(update={"modules": [f"layers.{k}"]}) for k in range(layers)]
    units.append(StageCost(
        forward=last.forward - layer.forward, backward_input=last.backward_input - layer.backward_input,
        backward_weight=last.backward_weight - layer.backward_weight,
        activation_bytes=last.activation_bytes - layer.activation_bytes,
        weight_grad_bytes=last.weight_grad_bytes - layer.weight_grad_bytes,
        static_bytes=last.static_bytes - layer.static_bytes, modules=["norm", "lm_head"]))
    return p.model_copy(update={"stages": units, "model": p.model.split(";")[0] + "; per-unit"})


def row(model: str, ranks: int, placement: str, mb: int, memory: str, time_limit: float) -> dict:
    from schedc.solver.compile import compile_problem

    units = units_profile(**MODELS[model])
    limit = parse_cap(memory)
    cap = limit.value
    S = n_stages_for(placement, ranks)
    u = Units.of(units)
    out = {"model": model, "ranks": ranks, "placement": placement, "mb": mb, "memory": memory}
    splits = {"torchtitan": torchtitan_default_counts(units.n_stages, S), "even": even_counts(units.n_stages, S),
              "balanced": balanced(u, placement, ranks, cap)[1]}
    for name, counts in splits.items():
        out[name] = None
        if counts is None:
            continue
        try:
            out[name] = best_hand_made(problem_for(units, counts, placement, ranks, mb, limit, "makespan"))[1]
        except Exception:  # a rank that cannot hold one microbatch: nothing fits
            out[name] = None
    out["compile_balanced"] = None
    if splits["balanced"] is not None:
        res = compile_problem(problem_for(units, splits["balanced"], placement, ranks, mb, limit, "makespan"),
                              time_limit=time_limit)
        out["compile_balanced"] = res.value
    t0 = time.monotonic()
    try:
        res = plan(profile=units, ranks=ranks, microbatches=mb, memory=memory, placement=placement,
                   time_limit=time_limit)
    except Exception as e:  # noqa: BLE001 - the table says what failed
        out["plan"] = None
        out["error"] = str(e)
        return out
    out.update(plan=res.value, bound=res.bound, gap=res.gap, wall=time.monotonic() - t0, counts=res.counts)
    others = [out[k] for k in ("torchtitan", "even", "balanced", "compile_balanced") if out[k] is not None]
    out["margin"] = (min(others) - res.value) / min(others) if others else None
    return out


def ms(x) -> str:
    return "—" if x is None else f"{1e3 * x:.1f}"


def pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


HEADER = ("| model | ranks | placement | mb | memory | torchtitan default + best hand-made (ms) | even + hand-made | "
          "balanced + hand-made | compile on balanced | **plan** | margin | bound over partitions | gap | plan s | "
          "plan's units per stage |\n|" + "---|" * 15)


def format_row(r: dict) -> str:
    if r.get("plan") is None:
        return (f"| {r['model']} | {r['ranks']} | {r['placement']} | {r['mb']} | {r['memory']} | "
                f"{ms(r['torchtitan'])} | {ms(r['even'])} | {ms(r['balanced'])} | {ms(r['compile_balanced'])} | "
                f"{r.get('error', 'failed')} |  |  |  |  |  |")
    return (f"| {r['model']} | {r['ranks']} | {r['placement']} | {r['mb']} | {r['memory']} | {ms(r['torchtitan'])} | "
            f"{ms(r['even'])} | {ms(r['balanced'])} | {ms(r['compile_balanced'])} | **{ms(r['plan'])}** | "
            f"{pct(r['margin'])} | {ms(r['bound'])} | {pct(r['gap'])} | {r['wall']:.0f} | "
            f"{','.join(map(str, r['counts']))} |")


def cases(quick: bool):
    if quick:
        for memory in ("40GiB", "80GiB"):
            for placement in ("loop", "v"):
                yield "llama3-8b", 4, placement, 16, memory
        return
    for ranks in (4, 8, 16):
        for placement in ("loop", "v"):
            for mb in (16, 32):
                for memory in ("40GiB", "80GiB"):
                    yield "llama3-8b", ranks, placement, mb, memory
    for model in ("mistral-7b", "llama3.2-3b-tied"):
        for placement in ("loop", "v"):
            for memory in ("40GiB", "80GiB"):
                yield model, 8, placement, 32, memory
    yield "llama3-8b", 16, "loop", 64, "80GiB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 small rows with short limits (smoke run)")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per plan and per compile (default 30, quick 5)")
    ap.add_argument("--only", help="run only rows whose model contains this text")
    ap.add_argument("--match", action="append", default=[], metavar="TEXT",
                    help="run only rows whose first five cells ('| llama3-8b | 4 | v | 16 | 40GiB |') contain TEXT "
                         "(repeatable: all must match)")
    args = ap.parse_args(argv)
    limit = args.time_limit or (5.0 if args.quick else 30.0)
    print(HEADER, flush=True)
    for case in cases(args.quick):
        if args.only and args.only not in case[0]:
            continue
        if not all(m in "| " + " | ".join(map(str, case)) + " |" for m in args.match):
            continue
        print(format_row(row(*case, time_limit=limit)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
