"""What each hand-made schedule needs under the literal ``Kp`` memory limit, on identical and uneven stages.

Problem: ``1p`` is one cap for every rank, what 1F1B needs on its most loaded rank (static bytes
included; a rank's stages run as one in 1F1B). How much of it does each hand-made schedule use?
On identical stages the answers are the papers' (ZB-H1 1p, ZB-H2 2p, ZB-V 1p, ...); on a
transformer, whose last stage carries the LM head and its logits, a schedule that holds more
microbatches of that stage than 1F1B does needs more.

Method: build every hand-made schedule (schedc.core.baselines) for R ranks (loop: R stages; V and
interleaved: 2R) and M microbatches, simulate it under torch's runtime, and print
``schedc.core.costs.p_needed`` of its largest per-rank peak: the smallest K under which it fits
``Kp``. Costs: identical stages (``Profile.uniform``), ``Profile.edge_heavy`` (times uneven,
activations even) and ``schedc.library.transformer_profile`` split into R or 2R stages.

Usage: python benchmarks/memory_needs.py [--ranks 8] [--mb 16]. Prints Markdown. Cost: one
simulation per cell, a few seconds in all.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedc.core import baselines as bl  # noqa: E402
from schedc.core.costs import Profile, p_needed  # noqa: E402
from schedc.core.simulate import simulate  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.library import transformer_profile  # noqa: E402

PROFILES = {
    "identical": Profile.uniform,
    "edge-heavy": Profile.edge_heavy,
    "transformer": transformer_profile,
}


def need(name: str, ranks: int, mb: int, costs: str) -> str:
    for per_rank in (1, 2):
        n = ranks * per_rank
        try:
            sched = bl.make_baseline(name, n, mb, n_ranks=ranks)
        except (SchedcError, ValueError):
            continue
        sim = simulate(sched, PROFILES[costs](n))
        return f"{p_needed(max(sim.peak_memory), PROFILES[costs](n), sched.placement):.3g}p"
    return "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=int, default=16)
    args = ap.parse_args(argv)
    print(f"Produced by `python benchmarks/memory_needs.py --ranks {args.ranks} --mb {args.mb}` "
          f"({args.ranks} ranks, {args.mb} microbatches; the smallest K under which each fits Kp).\n")
    print("| schedule | " + " | ".join(PROFILES) + " |")
    print("|---|" + "---:|" * len(PROFILES))
    for name in bl.BASELINE_NAMES:
        print(f"| {name} | " + " | ".join(need(name, args.ranks, args.mb, c) for c in PROFILES) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
