"""Measured step time of a compiled schedule vs 1F1B / ZB-H1 CSVs vs torch's Schedule1F1B.

    python benchmarks/runtime_step.py                       # 2 gloo ranks on this machine
    python benchmarks/runtime_step.py --reps 9 --layers 8 --hidden 256   # a larger model

Method: two ranks (torch.multiprocessing, gloo, one CPU thread each); rank 0 profiles schedc's
GPT split into 2 stages (schedc.runtime.profiling) and both ranks time the stage boundary's
send/recv by ping-pong; rank 0 compiles a schedule for that profile (schedc.solver.compile_schedule,
memory limit 1p, the default) and writes it and the 1F1B and ZB-H1 baselines as CSVs. Every rank
then builds all four pipelines over one shared copy of the model: the three CSVs through
schedc.runtime.load_pipeline and torch's own Schedule1F1B through load_torch_pipeline. Each
repetition runs one step of every variant, in an order rotated per repetition so that drifts in
machine load hit all of them alike; a step is timed between two barriers (the slowest rank's
time, as a synchronizing optimizer step sees it) and excludes the optimizer. The table gives the
median, min, max and the spread ((max - min) / median) per variant, and the simulator's
prediction from the measured profile (makespan; torch's Schedule1F1B runs the same order as the
1F1B CSV, so it shares that prediction). On a shared machine spreads of 10% and more are normal;
compare medians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

VARIANTS = ("compiled", "1f1b", "zb-h1", "torch Schedule1F1B")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=192)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--mb", type=int, default=8, help="microbatches per step")
    p.add_argument("--microbatch-size", type=int, default=4, help="sequences per microbatch")
    p.add_argument("--reps", type=int, default=9, help="timed steps per variant")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per variant first")
    p.add_argument("--time-limit", type=float, default=30.0, help="compiler time limit, seconds")
    p.add_argument("--objective", default="makespan", choices=["makespan", "span"])
    p.add_argument("--out", default=None, help="also write the numbers as JSON here")
    return p.parse_args(argv)


def _rank(rank: int, args: argparse.Namespace, port: int, workdir: str) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=max(300.0, 4 * args.time_limit)))
    try:
        _run(rank, args, Path(workdir))
    finally:
        dist.destroy_process_group()


def _run(rank: int, args: argparse.Namespace, work: Path) -> None:
    from schedc.core.baselines import make_baseline
    from schedc.core.simulate import simulate
    from schedc.io.csvio import write_csv
    from schedc.runtime import GPT, GPTConfig, lm_loss, load_pipeline, load_torch_pipeline, make_batch
    from schedc.runtime.profiling.comm import measure_p2p_seconds
    from schedc.runtime.profiling.gpt import profile_gpt
    from schedc.solver import compile_schedule

    cfg = GPTConfig(vocab_size=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
                    seq_len=args.seq_len)
    predicted: dict[str, float] = {}
    info: dict = {}
    # Rank 0 measures the stages while rank 1 waits, then both time the one boundary's
    # send/recv (a microbatch of float32 hidden states) by ping-pong.
    if rank == 0:
        profile = profile_gpt(cfg, 2, args.microbatch_size, warmup=2, repeats=7)
    dist.barrier()
    boundary = args.microbatch_size * args.seq_len * args.hidden * 4
    comm = measure_p2p_seconds([boundary])
    if rank == 0:
        profile = profile.model_copy(update={"comm": comm})
        schedules = {
            "1f1b": make_baseline("1f1b", 2, args.mb, n_ranks=2),
            "zb-h1": make_baseline("zb-h1", 2, args.mb, n_ranks=2),
        }
        t0 = time.monotonic()
        res = compile_schedule(2, args.mb, n_ranks=2, profile=profile, objective=args.objective,
                               time_limit=args.time_limit)
        schedules["compiled"] = res.schedule
        info["compile"] = {"status": res.status, "seconds": time.monotonic() - t0, "gap": res.gap}
        for name, sched in schedules.items():
            write_csv(sched, work / f"{name}.csv")
            predicted[name] = simulate(sched, profile).makespan
        predicted["torch Schedule1F1B"] = predicted["1f1b"]
        profile.save(work / "profile.json")
        info["profile"] = [
            {"F": s.forward, "I": s.backward_input, "W": s.backward_weight} for s in profile.stages
        ]
        info["comm"] = profile.comm
    dist.barrier()

    model = GPT(cfg, seed=0)
    pipes = {}
    for name in VARIANTS:
        if name == "torch Schedule1F1B":
            pipes[name] = load_torch_pipeline("1F1B", model, lm_loss, args.mb)
        elif (work / f"{name}.csv").exists():
            pipes[name] = load_pipeline(work / f"{name}.csv", model, lm_loss)
    names = list(pipes)
    params = [p for p in model.parameters()]
    times: dict[str, list[float]] = {n: [] for n in names}
    tokens, targets = make_batch(cfg, args.mb * args.microbatch_size, seed=1)
    for rep in range(args.warmup + args.reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            for p in params:
                p.grad = None
            dist.barrier()
            t0 = time.perf_counter()
            pipes[name].step(tokens, target=targets, losses=[])
            dist.barrier()
            if rep >= args.warmup:
                times[name].append(time.perf_counter() - t0)
    if rank == 0:
        result = {"times": times, "predicted": predicted, "info": info, "args": vars(args)}
        (work / "result.json").write_text(json.dumps(result))


def table(result: dict) -> str:
    times, predicted = result["times"], result["predicted"]
    base = statistics.median(times["1f1b"]) if times.get("1f1b") else None
    lines = [
        f"{'schedule':<20} {'predicted s':>11} {'median s':>9} {'min s':>7} {'max s':>7} {'spread':>7} "
        f"{'vs 1F1B CSV':>11}",
        "-" * 78,
    ]
    for name in VARIANTS:
        if name not in times:
            lines.append(f"{name:<20} {'(not available)':>11}")
            continue
        t = times[name]
        med = statistics.median(t)
        pred = f"{predicted[name]:.3f}" if name in predicted else "-"
        rel = f"{med / base:.3f}x" if base else "-"
        lines.append(
            f"{name:<20} {pred:>11} {med:>9.3f} {min(t):>7.3f} {max(t):>7.3f} "
            f"{(max(t) - min(t)) / med:>6.1%} {rel:>11}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="schedc-bench-") as work:
        t0 = time.monotonic()
        mp.spawn(_rank, args=(args, port, work), nprocs=2, join=True)
        result = json.loads((Path(work) / "result.json").read_text())
    info = result["info"]
    print(f"schedc runtime benchmark: 2 ranks, gloo, 1 CPU thread per rank, torch {torch.__version__}")
    print(f"model: GPT layers={args.layers} hidden={args.hidden} heads={args.heads} seq={args.seq_len} "
          f"vocab={args.vocab}; 2 stages, {args.mb} microbatches x {args.microbatch_size} sequences")
    if "profile" in info:
        costs = "; ".join(f"stage {i}: F {c['F'] * 1e3:.1f} I {c['I'] * 1e3:.1f} W {c['W'] * 1e3:.1f} ms"
                          for i, c in enumerate(info["profile"]))
        print(f"profile: {costs}; comm {info['comm']}")
    if "compile" in info:
        c = info["compile"]
        print(f"compiled ({args.objective}): {c['status']}, gap {c['gap']:.1%}, {c['seconds']:.1f} s")
    print(f"{args.reps} timed steps per variant after {args.warmup} warm-up, rotated order\n")
    print(table(result))
    print(f"\n(total {time.monotonic() - t0:.0f} s)")
    if args.out:
        from schedc.io.fileio import atomic_write_text

        atomic_write_text(args.out, json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
