"""What offload to host memory buys: `schedc compile --offload auto` against `--offload none`, simulated.

For Llama-3-8B- and Qwen2.5-7B-shaped decoders (the Hugging Face config fields of
benchmarks/ac_choice.py, nothing downloaded; counted by ``schedc.model_costs.unit_profile``, no
activation checkpointing, torch's runtime), merged into 8 even stages (the embedding joins the
first, the head the last; the layers split as evenly as they go) on 8 ranks, 32 microbatches of
one 4096-token sequence, at per-rank caps of 28, 34 and 40 GiB, it prints per row

- the step without a cap (the uncapped compile, whose bound is what ``--offload auto`` states),
- the step under the cap with ``--offload none``,
- the step with ``--offload auto`` at 25, 50 and 100 GB/s per direction (10 us a copy, the link
  not shared, no host memory cap), ``-`` where nothing fits,
- the gain at 50 GB/s over ``--offload none``; at 50 GB/s the most bytes one rank moves out per
  step, the busiest copy stream (percent of the step) and the microbatches whose bytes move
  between I and W (after I, or again after I: docs/formats.md, "Memory actions"), ``-`` where
  nothing is offloaded; and
  at 25/50/100 GB/s whether every transfer hides (``y``: the step equals the same order's
  without a cap; ``n``: some backward waits for its fetch; ``-``: no offload chosen).

The compiles of a row are shared by its three links (schedc.solver.offload.offload_compiles,
then its result for each link), so each link's answer is what `schedc compile
--offload auto` returns with those compiles. Step times are the simulator's (counted costs at
400 TFLOP/s effective), not measurements.

    python benchmarks/offload.py                    # the table (about 3 minutes on 2 cores)
    python benchmarks/offload.py --time-limit 20    # longer compiles
    python benchmarks/offload.py --match qwen --match 40GiB
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ac_choice import CONFIGS  # noqa: E402  (the same model shapes as the checkpointing table)

from schedc.core.host_link import HostLink  # noqa: E402
from schedc.errors import ParameterError  # noqa: E402
from schedc.model_costs import unit_profile  # noqa: E402
from schedc.solver.compile import compile_problem  # noqa: E402
from schedc.solver.offload import UNCAPPED_SHARE, offload_compiles  # noqa: E402
from schedc.solver.problem import Problem  # noqa: E402

RANKS, MICROBATCHES, SEQ = 8, 32, 4096
CAPS = ("28GiB", "34GiB", "40GiB")
BANDWIDTHS = (25e9, 50e9, 100e9)


def even_stages(n_units: int, n_stages: int) -> list[int]:
    """Units per stage: the layers (all units but the first and last) as even as they go, the
    extra ones on the middle stages, the embedding with the first and the head with the last."""
    layers = n_units - 2
    base, extra = divmod(layers, n_stages)
    middle = sorted(range(n_stages), key=lambda k: abs(k - (n_stages - 1) / 2))[:extra]
    counts = [base + (k in middle) for k in range(n_stages)]
    counts[0] += 1
    counts[-1] += 1
    return counts


def stage_profile(name: str, tmp: Path):
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(CONFIGS[name]))
    units = unit_profile(path, seq=SEQ, activation_checkpoint="none")
    return units.merge(even_stages(units.n_stages, RANKS))


def ms(x) -> str:
    """Milliseconds; ``-`` where nothing fits, ``none in time`` where no compile found a fitting
    schedule in its share of the time limit."""
    return "-" if x is None else "none in time" if x == "time" else f"{1000 * x:.1f}"


def rows(name: str, profile, caps, time_limit: float) -> list[str]:
    """The table's rows of one model: its uncapped compile once, then per cap the compiles of
    --offload auto and the chooser at each bandwidth."""
    uncapped_problem = Problem.build(RANKS, MICROBATCHES, profile=profile, memory="none")
    relaxed = compile_problem(uncapped_problem, time_limit * UNCAPPED_SHARE)
    out = []
    for cap in caps:
        problem = Problem.build(RANKS, MICROBATCHES, profile=profile, memory=cap)
        compiles = offload_compiles(problem, time_limit, relaxed=relaxed)
        steps, hides, moved, busy, after_i = [], [], None, None, None
        for bandwidth in BANDWIDTHS:
            try:
                res = compiles.result(problem, HostLink(bandwidth=bandwidth), time_limit)
            except ParameterError as e:  # nothing fits, with offload or without (or none found in time)
                if e.param not in ("memory", "time_limit"):
                    raise
                steps.append(None if e.param == "memory" else "time")
                hides.append("-")
                continue
            summary = res.report["offload"]
            steps.append(res.value)
            hides.append("-" if not res.report["memory_actions"] else "y" if summary["transfers_hide"] else "n")
            if bandwidth == 50e9 and res.report["memory_actions"]:
                moved = max(summary["bytes_per_rank"])
                busy = max(max(e["out"], e["in"]) for e in summary["link_busy"])
                after_i = sum(len(e.get("after_i", ())) for e in summary["stages"])
        none = None if compiles.capped is None else compiles.capped.value
        if none is None and compiles.refusal is not None and compiles.refusal.param == "time_limit":
            none = "time"
        gain = "" if not isinstance(none, float) or not isinstance(steps[1], float) else \
            f"{100 * (1 - steps[1] / none):.1f}%"
        link = "- | - | -" if moved is None else f"{moved / 2**30:.1f} GiB | {100 * busy:.0f}% | {after_i}"
        out.append(f"| {name} | {cap} | {ms(relaxed.value)} | {ms(none)} | " + " | ".join(ms(s) for s in steps) +
                   f" | {gain} | {link} | {'/'.join(hides)} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=6.0,
                    help="seconds of one --offload auto compile, shared as it shares them (default 6)")
    ap.add_argument("--match", action="append", default=[], help="only rows whose model or cap contains this")
    args = ap.parse_args(argv)
    t0 = time.time()
    print(f"Offload (simulated): {RANKS} stages on {RANKS} ranks, {MICROBATCHES} microbatches, seq {SEQ}, torch's "
          f"runtime; step in ms; --time-limit {args.time_limit:g} per compile")
    print()
    print("| model | cap | no cap | --offload none | auto 25 GB/s | auto 50 GB/s | auto 100 GB/s | gain at 50 | "
          "moved per rank (50) | busiest link (50) | moved after I (50) | hides 25/50/100 |")
    print("|---" * 12 + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in CONFIGS:
            caps = [cap for cap in CAPS if all(m in name or m in cap for m in args.match)]
            if not caps:
                continue
            for line in rows(name, stage_profile(name, Path(tmp)), caps, args.time_limit):
                print(line, flush=True)
    print()
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
