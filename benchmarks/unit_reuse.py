"""What measuring identical layers once costs, and how far merged units are from measured stages.

`schedc profile --units` measures each unit of a model (embedding, each layer, norm + head + loss)
as its own pipeline stage; by default a layer identical to an earlier one (same modules, shapes
and settings) reuses that layer's measurement (`--all-units` measures every one). This script, on
schedc's built-in GPT on CPU (one thread):

1. measures every unit twice (`reuse_layers=False`), and per layer prints the relative difference of
   its F, I, W median from layer 0's in the same run (the error reuse makes) next to the difference
   between the two runs of the same layer (the measurement's own noise): reuse is harmless when the
   first column is no larger than the second;
2. merges the per-unit profile (reused) into an even partition and compares each stage's F, I, W
   and activation bytes with a per-stage profile measured directly (``profile_gpt``): the sum of
   units is what ``schedc plan`` assumes a stage costs.

    python benchmarks/unit_reuse.py [--layers 6 --hidden 256 --seq 128 --mbs 2 --repeats 10 --stages 3]

Timings on a shared machine are noisy; read the noise column before the error column.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from schedc.runtime.models import GPTConfig, lm_loss, make_batch  # noqa: E402
from schedc.runtime.profiling.gpt import gpt_units, profile_gpt  # noqa: E402
from schedc.runtime.profiling.units import measure_units  # noqa: E402
from schedc.runtime.split import layers_per_stage_even  # noqa: E402


def rel(a: float, b: float) -> float:
    return abs(a - b) / b if b else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--mbs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--stages", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = GPTConfig(vocab_size=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
                    seq_len=args.seq)
    modules, _ = gpt_units(cfg)
    tokens, targets = make_batch(cfg, args.mbs)
    runs = [measure_units(modules, tokens, lm_loss, targets, warmup=2, repeats=args.repeats, reuse_layers=False)
            for _ in range(2)]
    print(f"GPT layers={args.layers} hidden={args.hidden} seq={args.seq} mbs={args.mbs}, CPU 1 thread, "
          f"{args.repeats} repeats, medians")
    print("\n1. reuse error (|layer - layer 0| / layer 0, run 1) vs noise (|run 1 - run 2| / run 2, same layer)")
    print(f"  {'layer':>5}  {'F err':>7} {'F noise':>7}  {'I err':>7} {'I noise':>7}  {'W err':>7} {'W noise':>7}")
    errs, noises = [], []
    for layer in range(1, args.layers + 1):
        row = []
        for kind in ("forward", "backward_input", "backward_weight"):
            a, ref = getattr(runs[0][layer], kind).median, getattr(runs[0][1], kind).median
            again = getattr(runs[1][layer], kind).median
            err, noise = rel(a, ref), rel(a, again)
            row += [err, noise]
            if layer > 1:
                errs.append(err)
            noises.append(noise)
        print(f"  {layer - 1:>5}  " + "  ".join(f"{100 * row[i]:6.1f}% {100 * row[i + 1]:6.1f}%" for i in (0, 2, 4)))
    print(f"  median over layers and F/I/W: reuse error {100 * statistics.median(errs):.1f}%, "
          f"run-to-run noise {100 * statistics.median(noises):.1f}%")

    units = profile_gpt(cfg, 1, args.mbs, warmup=2, repeats=args.repeats, units=True)
    counts = layers_per_stage_even(args.layers, args.stages)
    counts[0] += 1
    counts[-1] += 1
    merged = units.merge(counts)
    direct = profile_gpt(cfg, args.stages, args.mbs, warmup=2, repeats=args.repeats)
    print(f"\n2. merged units (reused layers) vs stages measured directly, layers per stage "
          f"{layers_per_stage_even(args.layers, args.stages)}")
    print(f"  {'stage':>5}  {'F':>7}  {'I':>7}  {'W':>7}  {'I+W':>7}  {'activation':>10}  {'static':>7}")
    for s, (m, d) in enumerate(zip(merged.stages, direct.stages)):
        cells = [m.forward / d.forward - 1, (m.backward_input / d.backward_input - 1) if d.backward_input > 1e-6 else 0,
                 m.backward_weight / d.backward_weight - 1, m.backward / d.backward - 1,
                 m.activation_bytes / d.activation_bytes - 1, m.static_bytes / d.static_bytes - 1]
        print(f"  {s:>5}  " + "  ".join(f"{100 * c:+6.1f}%" + ("   " if i == 4 else "") for i, c in enumerate(cells)))
    print("  (stage 0's I is empty under torch's runtime: its backward is all in W)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
