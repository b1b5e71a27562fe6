"""Closed-loop table: predicted vs measured step time of a compiled schedule and of 1F1B.

Profiles schedc's built-in GPT (one thread per process, as many processes at once as there
will be ranks, since local ranks share the host's cores), compiles a schedule from that
profile, writes the 1F1B baseline, then runs both on local gloo ranks (``schedc calibrate``'s
machinery) for several alternating rounds, so that a change in machine load hits both alike.
For each schedule it prints the medians over rounds of: the step time the simulator predicts
from the offline profile, the measured step time, the prediction from the in-situ profile
(each rank profiles its own stages between timed steps, under the same load as the run), and
from the profile refined from the measured action times.

    python benchmarks/calibrate.py --hidden 256 --seq 128 --mb 8 --rounds 3 --out /tmp/closed-loop
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--mbs", type=int, default=2, help="microbatch size")
    ap.add_argument("--mb", type=int, default=8, help="microbatches per step")
    ap.add_argument("--stages", type=int, default=2, help="stages = ranks (loop placement)")
    ap.add_argument("--memory", default="1p")
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=7, help="profiler repeats")
    ap.add_argument("--concurrent", type=int, default=None,
                    help="profile in this many processes at once (default: one per rank, as the ranks share the host)")
    ap.add_argument("--out", default=None, help="directory for the profile, CSVs and results (default: a new temporary one)")
    args = ap.parse_args(argv)

    import torch

    from schedc.cli.progress import StderrProgress
    from schedc.core import baselines
    from schedc.io import csvio
    from schedc.runtime.calibrate import calibrate
    from schedc.runtime.models import GPTConfig
    from schedc.runtime.profiling.gpt import profile_gpt
    from schedc.solver.compile import compile_schedule

    out = Path(args.out or tempfile.mkdtemp(prefix="schedc-closed-loop-"))
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # the ranks run with one thread each
    cfg = GPTConfig(vocab_size=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
                    seq_len=args.seq)
    progress = StderrProgress("profile")
    profile = profile_gpt(cfg, args.stages, args.mbs, repeats=args.repeats, progress=progress,
                          concurrent=args.concurrent or args.stages)
    progress.done()
    profile.save(out / "profile.json")

    res = compile_schedule(args.stages, args.mb, profile=profile, memory=args.memory, time_limit=args.time_limit)
    schedules = {"compiled": res.schedule, "1f1b": baselines.make_baseline("1f1b", args.stages, args.mb)}
    paths = {}
    for name, sched in schedules.items():
        paths[name] = out / f"{name}.csv"
        csvio.write_csv(sched, paths[name])
    print(f"compiled: {res.status}, predicted {1e3 * res.sim.makespan:.1f}ms; "
          f"1f1b predicted {1e3 * res.baselines.get('1f1b', {}).get('makespan', float('nan')):.1f}ms")

    rows: dict[str, list] = {name: [] for name in schedules}
    for r in range(args.rounds):
        for name in schedules:
            cal = calibrate(paths[name], profile, cfg, args.mbs, steps=args.steps, warmup_steps=1, threads=1,
                            in_situ=True)
            rows[name].append(cal.to_dict())
            print(f"round {r + 1}/{args.rounds} {name:9s} predicted {1e3 * cal.predicted_step:7.1f}ms  "
                  f"measured {1e3 * cal.measured_step:7.1f}ms ({100 * cal.step_error:+.1f}%)  "
                  f"in-situ {1e3 * cal.in_situ_step:7.1f}ms ({100 * cal.in_situ_error:+.1f}%, paired "
                  f"{100 * cal.in_situ_paired_error:+.1f}%)  refined {1e3 * cal.refined_step:7.1f}ms "
                  f"({100 * cal.refined_error:+.1f}%, paired {100 * cal.refined_paired_error:+.1f}%)", flush=True)
    (out / "results.json").write_text(json.dumps(rows, indent=2))

    def med(name, key):
        return statistics.median(row[key] for row in rows[name])

    print()
    # error: a prediction against the measured step (both medians over the steps); paired: the
    # median over steps of each step's prediction against that step (load changes cancel)
    print(f"{'schedule':10s} {'predicted':>10s} {'measured':>10s} {'error':>7s} {'in-situ':>10s} {'error':>7s} "
          f"{'paired':>7s} {'refined':>10s} {'error':>7s} {'paired':>7s}   (medians of {args.rounds} rounds x "
          f"{args.steps} steps, {args.stages} ranks gloo)")
    for name in schedules:
        print(f"{name:10s} {1e3 * med(name, 'predicted_step'):>8.1f}ms {1e3 * med(name, 'measured_step'):>8.1f}ms "
              f"{100 * med(name, 'step_error'):>+6.1f}% {1e3 * med(name, 'in_situ_step'):>8.1f}ms "
              f"{100 * med(name, 'in_situ_error'):>+6.1f}% {100 * med(name, 'in_situ_paired_error'):>+6.1f}% "
              f"{1e3 * med(name, 'refined_step'):>8.1f}ms {100 * med(name, 'refined_error'):>+6.1f}% "
              f"{100 * med(name, 'refined_paired_error'):>+6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
