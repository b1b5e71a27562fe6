"""The results table of docs/results.md: schedc vs the hand-made schedules and torch's own, same model, same ranks.

Problem: show at a glance what schedc buys over GPipe, 1F1B, ZB-H1, ZB-H2, interleaved 1F1B
and ZB-V (and torch's built-in schedule classes) on representative set-ups.

Method: each row is one model on R ranks with M microbatches and a memory limit (1p: what 1F1B
holds; 1.5p; 2p). Every schedule gets the split it is made for: one stage per rank (R stages) for
GPipe / 1F1B / ZB-H1 / ZB-H2 and schedc's `loop` column; two stages per rank (2R stages of half
the size) for interleaved 1F1B (loop placement), ZB-V and schedc's `v` column. The models:
  - identical: R x (F, I, W) = (1, 1, 1) per rank in total, activation 1 per microbatch per rank
    (held until W, as torch's split backward does), no communication time; the 2R split halves
    every number;
  - transformer: schedc.library.transformer_profile (32 layers, hidden 4096, vocab 128256,
    sequence 4096; LM head + loss on the last stage), split into R or 2R stages; times in ms.
The memory limit is relative to each split (Kp = one cap for every rank: max over ranks of
static + K x 1F1B's activation peak there, a rank's stages run as one; docs/design.md). Every
hand-made schedule is simulated under the row's costs; a value
over the memory limit is shown in parentheses and never counted as "best". schedc compiles
each split (makespan objective, --time-limit per compile). torch's table simulates the orders
torch's classes report (``_schedule_visualizer.get_schedule_ops``, converted with
``csvio.from_torch_order``) under the same costs. Everything is timed as torch's runtime runs it
(stage 0's backward all in W).

Emulated columns (with torch installed, unless --no-emulate): per row, schedc's faster schedule and
the best hand-made one that fits run in torch's own ``_PipelineScheduleRuntime`` on R local gloo
ranks whose stages sleep their costs (``schedc.runtime.emulate``; identical stages sleep
``UNIT_SECONDS`` s per unit, the transformer its seconds). Communication is not slept, so the
emulated margin compares the two schedules without it; per-action runtime overhead is in the
measurement, as it would be on GPUs.

Usage: python benchmarks/results_table.py [--time-limit S] [--quick] [--no-emulate] [--no-torch]
Prints Markdown (the command that produced it first). Cost: 2 compiles per row
(at most --time-limit each), simulations, and one emulation launch per row (~1 minute).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedc.core import baselines as bl  # noqa: E402
from schedc.core.costs import HELD_FRACTION, MemoryLimit, Profile, StageCost  # noqa: E402
from schedc.core.simulate import simulate  # noqa: E402
from schedc.core.validate import validate  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.io.csvio import write_csv  # noqa: E402
from schedc.library import transformer_profile  # noqa: E402
from schedc.solver.compile import compile_schedule  # noqa: E402

HAND_MADE = [  # (column, baseline name, stages per rank)
    ("GPipe", "gpipe", 1),
    ("1F1B", "1f1b", 1),
    ("ZB-H1", "zb-h1", 1),
    ("ZB-H2", "zb-h2", 1),
    ("Interleaved 1F1B", "interleaved-1f1b", 2),
    ("ZB-V", "zb-v", 2),
]
TORCH_CLASSES = [  # torch class, stages per rank
    ("ScheduleGPipe", 1),
    ("Schedule1F1B", 1),
    ("ScheduleInterleaved1F1B", 2),
    ("ScheduleLoopedBFS", 2),
    ("ScheduleInterleavedZeroBubble", 2),
    ("ScheduleZBVZeroBubble", 2),
    ("ScheduleDualPipeV", 2),
]


def identical(n_stages: int, n_ranks: int) -> Profile:
    """Identical stages whose per-rank total is F = I = W = 1 and activation 1 per microbatch."""
    k = n_ranks / n_stages
    stage = StageCost(forward=k, backward_input=k, backward_weight=k, activation_bytes=k,
                      weight_grad_bytes=k * HELD_FRACTION)
    return Profile(stages=[stage] * n_stages, comm=0.0, model="identical")


def profile_for(model: str, n_stages: int, n_ranks: int) -> Profile:
    return identical(n_stages, n_ranks) if model == "identical" else transformer_profile(n_stages)


ROWS = [  # (model, ranks, microbatches, memory)
    ("identical", 8, 16, "1p"),
    ("identical", 8, 16, "2p"),
    ("identical", 4, 16, "1p"),
    ("transformer", 8, 16, "1p"),
    ("transformer", 8, 16, "1.5p"),  # between the hand-made memory points
    ("transformer", 8, 16, "2p"),
    ("transformer", 4, 16, "1p"),
    ("transformer", 4, 16, "2p"),
]


def fmt(value, model: str, fits: bool = True) -> str:
    if value is None:
        return "-"
    text = f"{1e3 * value:.1f}" if model == "transformer" else f"{value:.4g}"
    return text if fits else f"({text})"


def emulate_pair(model: str, schedules: list, profiles: list) -> list[float]:
    """Measured median step (seconds, in the row's units) of each schedule in torch's runtime."""
    from schedc.runtime.emulate import UNIT_SECONDS, emulate

    scale = UNIT_SECONDS if model == "identical" else 1.0
    with tempfile.TemporaryDirectory(prefix="schedc-results-") as tmp:
        paths = []
        for k, sched in enumerate(schedules):
            paths.append(Path(tmp) / f"s{k}.csv")
            write_csv(sched, paths[-1])
        runs = emulate(paths, profiles, scale=scale, steps=5, warmup=1)
    return [r.measured_step / scale for r in runs]


def torch_orders(name: str, ranks: int, m: int, per_rank: int):
    """torch's reported order for class `name` as a schedc Schedule, or None if torch refuses."""
    from torch.distributed.pipelining import schedules as ts
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    from schedc.io import csvio

    ops = get_schedule_ops(getattr(ts, name), ranks, m, num_stages_per_rank=per_rank)
    compute = ("F", "I", "W", "B", "OVERLAP_F_B")  # drop idle cells and REDUCE_GRAD (not compute)
    rows = [[a for a in row if a is not None and a.computation_type.value in compute] for row in ops]
    return csvio.from_torch_order(rows, n_microbatches=m)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=30.0, help="seconds per compile (default 30)")
    ap.add_argument("--quick", action="store_true", help="first two rows only, 5 s per compile (a smoke test)")
    ap.add_argument("--no-torch", action="store_true", help="skip the table of torch's own schedule classes")
    ap.add_argument("--no-emulate", action="store_true", help="skip the emulated columns (torch's runtime)")
    ap.add_argument("--model", choices=["identical", "transformer"],
                    help="only this model's rows (e.g. to regenerate the rows a cost change touches)")
    args = ap.parse_args(argv)
    rows = ROWS[:2] if args.quick else ROWS
    if args.model:
        rows = [row for row in rows if row[0] == args.model]
    limit = 5.0 if args.quick else args.time_limit
    command = "python benchmarks/results_table.py" + (" --quick" if args.quick else "") + (
        f" --time-limit {args.time_limit:g}" if not args.quick and args.time_limit != 30.0 else "") + (
        f" --model {args.model}" if args.model else "")
    try:
        import torch  # noqa: F401
        have_torch, can_emulate = not args.no_torch, not args.no_emulate
    except ImportError:
        have_torch = can_emulate = False

    print(f"Produced by `{command}` (schedc {__import__('schedc').__version__}; makespan per training step: "
          "identical stages in units of one stage's F, transformer in ms; lower is better; "
          "(x) = exceeds the memory limit).\n")
    head = ["set-up", "memory", "schedc loop", "schedc V"] + [c for c, _, _ in HAND_MADE] + [
        "schedc vs best hand-made that fits", "schedc status"]
    if can_emulate:
        head += ["emulated: schedc", "emulated: best hand-made", "emulated: schedc vs it"]
    print("| " + " | ".join(head) + " |")
    print("|---|---|" + "---:|" * (len(head) - 3) + "---|")
    torch_lines = []
    t_start = time.monotonic()
    for model, ranks, m, memory in rows:
        label = f"{model}, {ranks} ranks, {m} mb"
        values: dict[str, tuple[float, bool]] = {}
        made: dict[str, tuple] = {}  # column -> (schedule, profile)
        results = {}
        for placement, per_rank in (("loop", 1), ("v", 2)):
            n = ranks * per_rank
            res = compile_schedule(n, m, n_ranks=ranks, placement=placement, profile=profile_for(model, n, ranks),
                                   memory=memory, time_limit=limit)
            results[placement] = res
        for col, name, per_rank in HAND_MADE:
            n = ranks * per_rank
            sched, profile = bl.make_baseline(name, n, m, n_ranks=ranks), profile_for(model, n, ranks)
            sim = simulate(sched, profile, MemoryLimit.parse(memory))
            values[col] = (sim.makespan, sim.fits)
            made[col] = (sched, profile)
        best_col = min((c for c in values if values[c][1]), key=lambda c: values[c][0])
        schedc_best = min(results.values(), key=lambda r: r.sim.makespan)
        which = "loop" if schedc_best is results["loop"] else "V"
        gain = schedc_best.sim.makespan / values[best_col][0] - 1
        status = "; ".join(f"{k}: {r.status}" + ("" if r.status == "optimal" else f" (gap {100 * r.gap:.1f}%)")
                           for k, r in (("loop", results["loop"]), ("V", results["v"])))
        cells = [label, memory, fmt(results["loop"].sim.makespan, model), fmt(results["v"].sim.makespan, model)]
        cells += [fmt(values[c][0], model, values[c][1]) for c, _, _ in HAND_MADE]
        cells += [f"{100 * gain:+.1f}% ({which} vs {best_col})", status]
        if can_emulate:
            mine, theirs = emulate_pair(model, [schedc_best.schedule, made[best_col][0]],
                                        [schedc_best.problem.given_profile, made[best_col][1]])
            cells += [fmt(mine, model), fmt(theirs, model), f"{100 * (mine / theirs - 1):+.1f}%"]
        print("| " + " | ".join(cells) + " |", flush=True)

        if have_torch:
            tcells = [label, memory]
            for cls, per_rank in TORCH_CLASSES:
                n = ranks * per_rank
                try:
                    sched = torch_orders(cls, ranks, m, per_rank)
                    validate(sched)
                    sim = simulate(sched, profile_for(model, n, ranks), MemoryLimit.parse(memory))
                    tcells.append(fmt(sim.makespan, model, sim.fits))
                except (SchedcError, ValueError, AssertionError, RuntimeError) as e:
                    tcells.append("n/a")
                    print(f"  note: {cls} {ranks}x{per_rank} mb {m}: {str(e).splitlines()[0][:160]}", file=sys.stderr)
            torch_lines.append("| " + " | ".join(tcells) + " |")

    if have_torch:
        print("\ntorch's own schedule classes (orders from `get_schedule_ops`, simulated under the same costs; "
              "n/a: the reported order is not a complete valid schedule, e.g. torch 2.13's Schedule1F1B "
              "reports its last rank shifted by one microbatch):\n")
        thead = ["set-up", "memory"] + [c.replace("Schedule", "") for c, _ in TORCH_CLASSES]
        print("| " + " | ".join(thead) + " |")
        print("|---|---|" + "---:|" * (len(thead) - 2))
        for line in torch_lines:
            print(line)
    print(f"\n({time.monotonic() - t_start:.0f} s on this machine)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
