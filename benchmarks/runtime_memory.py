"""Peak memory of torch's runtime running a CSV against ``schedc simulate``'s prediction, on CPU.

    python benchmarks/runtime_memory.py --layers 4
    python benchmarks/runtime_memory.py --hidden 128 --seq 64 --mb 8

For the built-in GPT (schedc.runtime.models: the layer the library's ``transformer`` set-ups count,
GELU MLP of 4 x hidden, at a CPU's size), the script profiles the stages (``profile_gpt``: the allocator's
bytes after F, from I until W, transients, each boundary's bytes), then runs hand-made schedules
(1F1B, ZB-H1 on a loop; ZB-V on a V) and a compiled one on local gloo ranks. Each rank runs one
warm-up step, then traces one step with the allocator (``torch.profiler``'s memory events on
CPU): its peak above what it held before the step (parameters, zeroed gradients, torch's receive
buffers, all allocated by then). The prediction is ``simulate``'s peak for the rank minus what
the rank holds all step in the model (static bytes and the receive buffers): the part the step
adds. Target: within 5%.

Cost: one profile, one compile, and 2 steps per schedule on as many processes as ranks.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rank_body() -> dict:
    """In a launched rank: each CSV's step peak above the level before the step, in bytes."""
    import torch

    from schedc.runtime import launch as L
    from schedc.runtime.allocator import AllocatorTrace
    from schedc.runtime.models import GPT, GPTConfig, lm_loss, make_batch
    from schedc.runtime.pipeline import load_pipeline

    spec = L.read_spec()
    torch.set_num_threads(1)
    L.init_group("gloo")
    cfg = GPTConfig(**spec["config"])
    out = {}
    for csv in spec["csvs"]:
        pipe = load_pipeline(csv, GPT(cfg, seed=0), lm_loss)
        n_mb = pipe.schedule._n_microbatches
        x, y = make_batch(cfg, spec["mbs"] * n_mb, seed=0)
        for p in pipe.parameters():
            p.grad = torch.zeros_like(p)  # static bytes: held all step, as the profile counts them
        pipe.step(x, target=y, losses=[] if pipe.is_last else None)  # allocates torch's receive buffers
        with AllocatorTrace(torch.device("cpu")) as trace:
            with trace.action("step"):
                pipe.step(x, target=y, losses=[] if pipe.is_last else None)
        out[csv] = max(trace.peak, trace.levels["step"].peak)
        del pipe
    return out


def predicted_step_bytes(schedule, profile) -> list[float]:
    """Per rank: simulate's peak minus what the model holds all step and torch allocated before the
    step (static bytes, the receive buffers of every microbatch: torch up to 2.14 preallocates them)."""
    from schedc.core.cost_model import preallocates, rank_static_bytes, torch_version
    from schedc.core.simulate import simulate

    sim = simulate(schedule, profile)
    placement = schedule.placement
    static = rank_static_bytes(profile, placement)
    recv = [0.0] * schedule.n_ranks
    if preallocates(torch_version(profile)):
        for b in range(len(placement) - 1):
            lo, hi = placement[b], placement[b + 1]
            if lo != hi:
                recv[hi] += schedule.n_microbatches * profile.boundary_after(b)
                recv[lo] += schedule.n_microbatches * profile.boundary_after(b)
    return [p - st - rc - (profile.reserve_bytes or 0.0) for p, st, rc in zip(sim.peak_memory, static, recv)]


SCHEDULES = ("1f1b", "zb-h1", "zb-v", "compiled-loop", "compiled-v")


def schedules(n_stages: int, mb: int, profile, profile_v, time_limit: float, names=SCHEDULES) -> dict:
    from schedc.core import baselines
    from schedc.solver.compile import compile_schedule

    out = {}
    for name in ("1f1b", "zb-h1"):
        if name in names:
            out[name] = (baselines.make_baseline(name, n_stages, mb), profile)
    if "zb-v" in names:
        out["zb-v"] = (baselines.make_baseline("zb-v", 2 * n_stages, mb), profile_v)
    for name, prof, place, n in (("compiled-loop", profile, "loop", n_stages), ("compiled-v", profile_v, "v",
                                                                                 2 * n_stages)):
        if name in names:
            out[name] = (compile_schedule(n, mb, n_ranks=n_stages, placement=place, profile=prof, memory="none",
                                          time_limit=time_limit).schedule, prof)
    return out


def run(cfg, n_ranks: int, mbs: int, mb: int, time_limit: float, label: str, names=SCHEDULES) -> list[tuple]:
    """[(label, schedule, rank, predicted bytes, measured bytes)] for the schedules `names`."""
    import dataclasses

    from schedc.io import csvio
    from schedc.runtime import launch as L
    from schedc.runtime.profiling.gpt import profile_gpt

    profile = profile_gpt(cfg, n_ranks, mbs, warmup=1, repeats=3, optimizer="none")
    profile_v = profile_gpt(cfg, 2 * n_ranks, mbs, warmup=1, repeats=3, optimizer="none")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        made = schedules(n_ranks, mb, profile, profile_v, time_limit, names)
        paths = {}
        for name, (schedule, _) in made.items():
            paths[name] = str(Path(d) / f"{name}.csv")
            csvio.write_csv(schedule, paths[name])
        results = L.launch([sys.executable, str(Path(__file__).resolve()), "--rank"], n_ranks, timeout=600,
                           spec={"config": dataclasses.asdict(cfg), "csvs": list(paths.values()), "mbs": mbs},
                           label="runtime_memory", threads=1)
        for name, (schedule, prof) in made.items():
            predicted = predicted_step_bytes(schedule, prof)
            for r in range(n_ranks):
                measured = results[r][paths[name]]
                rows.append((label, name, r, predicted[r], measured))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--mbs", type=int, default=2)
    ap.add_argument("--mb", type=int, default=8)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=10.0)
    args = ap.parse_args(argv)
    if args.rank:
        from schedc.runtime import launch as L

        return L.run_rank(rank_body)
    import torch

    from schedc.core.formatting import format_bytes
    from schedc.runtime.models import GPTConfig

    torch.set_num_threads(1)
    cfg = GPTConfig(vocab_size=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
                    seq_len=args.seq)
    rows = run(cfg, args.ranks, args.mbs, args.mb, args.time_limit, f"gpt h{args.hidden} s{args.seq}")
    print(f"peak a step adds on each rank, torch {torch.__version__} runtime (CPU allocator) vs schedc simulate")
    print(f"{'model':<16} {'schedule':<14} {'rank':>4} {'predicted':>11} {'measured':>11} {'error':>7}")
    worst = 0.0
    for label, name, r, pred, meas in rows:
        err = (pred - meas) / meas if meas else float("nan")
        worst = max(worst, abs(err))
        print(f"{label:<16} {name:<14} {r:>4} {format_bytes(pred):>11} {format_bytes(meas):>11} {100 * err:>+6.1f}%")
    print(f"worst |error| {100 * worst:.1f}% (target 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
