"""Emulation check: every hand-made schedule that fits, and the compiled one, run in torch's own
pipeline runtime (sleeping stages, `schedc emulate`) against the prediction.

Cases (issue 10's targets): loop and V placement; identical, transformer-like
(schedc.library.transformer_profile) and edge-heavy (Profile.edge_heavy) costs; memory 1p and 2p;
4 and 8 ranks; microbatches = 2 x ranks. Per case the compiled schedule (``--time-limit``) and
every hand-made schedule that exists for it and fits the memory limit (the solver's
feasible_baselines: schedc.core.baselines plus zb-greedy) run in one launch of
:func:`schedc.runtime.emulate.emulate`.

Costs: each profile is scaled so that its mean F sleeps ``--unit`` seconds; the emulation sleeps no
communication. The compiler plans with the costs a profile measured inside torch's runtime would
give: the scaled costs plus the runtime's per-action overhead and localhost transfer delay,
measured once per placement and rank count by a short overhead run (``runtime_costs``). The
prediction adds the per-action overhead measured in each schedule's own overhead run (every sleep
1 us) to each action (see schedc.runtime.emulate).

Printed: a markdown table, one row per schedule: measured step (median of --steps after a
warm-up), prediction with the overhead, ratio, and per case the compiled schedule's margin over
the best fitting hand-made schedule, measured, predicted and predicted without the overhead
(positive = compiled faster).

Offload (``--offload R,...``, issue 49's emulation check): per rank count R, identical stages
compiled with ``--offload auto`` under ``--offload-memory`` (default 0.5p, where 1F1B's order
does not fit without moving activations) over a link on which one microbatch's copy takes
``--offload-copy`` mean Fs (default 1); the compiled CSV is emulated with its memory actions (each rank's copy streams sleeping
on threads of their own), with them over a link ``--offload-slow`` times slower (default 3: the
copies no longer hide, so the step follows the copy streams), and without them (the same
order, copies left out), each against its own prediction.

Usage: python benchmarks/emulate_check.py [--quick] [--placement loop,v] [--profiles identical,
transformer,edge] [--memory 1p,2p] [--ranks 4,8] [--time-limit S] [--unit S] [--steps N]
[--offload 8 [--offload-only] [--offload-memory 0.5p] [--offload-copy F] [--offload-slow K]]
--quick: loop and V, edge-heavy, 1p, 4 ranks, 5 s compiles. Timings depend on how loaded the host
is (a sleeping rank wakes late on a busy host); say so when quoting them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.core.costs import Profile  # noqa: E402
from schedc.core.host_link import HostLink  # noqa: E402
from schedc.io.csvio import write_csv  # noqa: E402
from schedc.library import transformer_profile  # noqa: E402
from schedc.runtime.emulate import emulate, scaled_costs  # noqa: E402
from schedc.solver import Problem  # noqa: E402
from schedc.solver.compile import compile_problem  # noqa: E402
from schedc.solver.engines.warm import feasible_baselines  # noqa: E402
from schedc.solver.offload import compile_with_offload  # noqa: E402

PROFILES = {
    "identical": lambda n: Profile.uniform(n),
    "transformer": lambda n: transformer_profile(n),
    "edge": lambda n: Profile.edge_heavy(n),
}


def runtime_costs(profile: Profile, scale: float, overhead: dict[str, float], transfer: float) -> Profile:
    """The costs a profile measured inside torch's runtime would give: `profile` as torch runs it,
    scaled to seconds, plus the runtime's own per-action overhead (by kind) and per-boundary
    transfer delay, both measured by an overhead run. The compiler plans with these, as it would
    with a real profile."""
    per_kind = {"forward": overhead.get("F", 0.0), "backward_input": overhead.get("I", 0.0),
                "backward_weight": overhead.get("W", 0.0)}
    add = profile.model_copy(update={"stages": [c.model_copy(update=per_kind) for c in profile.stages]})
    return scaled_costs(profile, scale, [transfer] * (profile.n_stages - 1), add=add)


def measure_overhead(placement: str, ranks: int, args, tmp: Path) -> tuple[dict[str, float], float]:
    """Per-kind action overhead and transfer delay of torch's runtime on this many local ranks: one
    short emulation of a hand-made schedule (the overhead does not depend on the stage times)."""
    n_stages = ranks * (2 if placement == "v" else 1)
    path = tmp / f"overhead-{placement}-r{ranks}.csv"
    write_csv(make_baseline("zb-v" if placement == "v" else "zb-h1", n_stages, 2 * ranks, n_ranks=ranks), path)
    run, = emulate([path], Profile.uniform(n_stages), scale=args.unit, steps=1, warmup=0)
    return run.overhead, run.transfer


def case_schedules(placement, profile_name, memory, ranks, args, overhead, transfer):
    """(profile without comm, scale, [(name, schedule)]): the compiled schedule first, then the
    fitting hand-made ones. The compiler sees the costs as the runtime will run them."""
    n_stages = ranks * (2 if placement == "v" else 1)
    profile = PROFILES[profile_name](n_stages).model_copy(update={"comm": 0.0})
    scale = args.unit / statistics.fmean(c.forward for c in profile.stages)
    problem = Problem.build(n_stages, 2 * ranks, n_ranks=ranks, placement=placement, profile=profile,
                            memory=memory)
    measured = Problem.build(n_stages, 2 * ranks, n_ranks=ranks, placement=placement, memory=memory,
                             profile=runtime_costs(profile, scale, overhead, transfer))
    compiled = compile_problem(measured, time_limit=args.time_limit)
    hand = [(name, sched) for name, sched, _ in feasible_baselines(problem)]
    return profile, scale, [("compiled", compiled.schedule)] + hand


def run_case(placement, profile_name, memory, ranks, args, tmp: Path, overhead, transfer) -> list[dict]:
    profile, scale, schedules = case_schedules(placement, profile_name, memory, ranks, args, overhead, transfer)
    paths = []
    for name, schedule in schedules:
        paths.append(tmp / f"{placement}-{profile_name}-{memory}-r{ranks}-{name}.csv")
        write_csv(schedule, paths[-1])
    runs = emulate(paths, profile, scale=scale, steps=args.steps, warmup=1)
    return [{"name": name, "run": run} for (name, _), run in zip(schedules, runs)]


def run_offload_case(ranks: int, args, tmp: Path, overhead, transfer) -> list[dict]:
    """The compiled schedule with offload on `ranks` ranks, emulated with its memory actions and
    without (module docstring). The compiler plans with the runtime's costs (seconds) over the
    link in seconds; the emulation takes the unit profile, the link in units, and the scale."""
    profile = Profile.uniform(ranks).model_copy(update={"comm": 0.0})
    scale = args.unit  # the mean F is one unit
    # one byte of activation per microbatch: --offload-copy units a copy
    units_link = HostLink(bandwidth=1.0 / args.offload_copy, latency=0.0)
    seconds_link = HostLink(bandwidth=1.0 / (args.offload_copy * scale), latency=0.0)
    measured = Problem.build(ranks, 2 * ranks, n_ranks=ranks, placement="loop", memory=args.offload_memory,
                             profile=runtime_costs(profile, scale, overhead, transfer))
    compiled = compile_with_offload(measured, seconds_link, args.time_limit, None, None, 0, "time")
    actions = compiled.report.get("memory_actions", [])
    path = tmp / f"offload-{args.offload_memory}-r{ranks}.csv"
    write_csv(compiled.schedule, path)
    with_copies, = emulate([path], profile, scale=scale, steps=args.steps, warmup=1, memory_actions=actions,
                           link=units_link)
    slow_link = HostLink(bandwidth=units_link.bandwidth / args.offload_slow, latency=0.0)
    slow, = emulate([path], profile, scale=scale, steps=args.steps, warmup=1, memory_actions=actions,
                    link=slow_link)
    without, = emulate([path], profile, scale=scale, steps=args.steps, warmup=1)
    return [{"name": f"compiled, {len(actions)} offloads", "run": with_copies},
            {"name": f"the same over a link {args.offload_slow:g}x slower", "run": slow},
            {"name": "same order, no copies", "run": without}]


def margin(rows: list[dict], key) -> tuple[str, float]:
    """(best hand-made name, (best hand-made - compiled) / best hand-made) under `key`."""
    hand = [r for r in rows if r["name"] != "compiled"]
    if not hand:
        return "-", float("nan")
    best = min(hand, key=lambda r: key(r["run"]))
    compiled = key(rows[0]["run"])
    return best["name"], (key(best["run"]) - compiled) / key(best["run"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="loop and V, edge-heavy, 1p, 4 ranks, 5 s compiles")
    ap.add_argument("--placement", default="loop,v")
    ap.add_argument("--profiles", default="identical,transformer,edge")
    ap.add_argument("--memory", default="1p,2p")
    ap.add_argument("--ranks", default="4,8")
    ap.add_argument("--time-limit", type=float, default=30.0, help="seconds per compile (default 30)")
    ap.add_argument("--unit", type=float, default=0.02, help="seconds the mean F sleeps (default 0.02)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per schedule (default 5)")
    ap.add_argument("--offload", default="", metavar="R,...",
                    help="also the offload case on these rank counts (e.g. 8)")
    ap.add_argument("--offload-only", action="store_true", help="only the offload case")
    ap.add_argument("--offload-memory", default="0.5p", help="the offload case's memory limit (default 0.5p)")
    ap.add_argument("--offload-copy", type=float, default=1.0, metavar="F",
                    help="the offload case's copy time, in mean Fs (default 1)")
    ap.add_argument("--offload-slow", type=float, default=3.0, metavar="K",
                    help="the offload case's second run: the link K times slower (default 3)")
    args = ap.parse_args(argv)
    if args.quick:
        args.profiles, args.memory, args.ranks, args.time_limit = "edge", "1p", "4", 5.0
    cases = [] if args.offload_only else [
        (pl, pr, mem, int(r)) for r in args.ranks.split(",") for pl in args.placement.split(",")
        for pr in args.profiles.split(",") for mem in args.memory.split(",")]
    print("| case | schedule | measured | predicted | ratio |")
    print("|---|---|---:|---:|---:|")
    summary, ratios = [], []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="schedc-emulate-check-") as tmp:
        overheads = {}
        for placement, profile_name, memory, ranks in cases:
            label = f"{placement} {profile_name} {memory} {ranks} ranks"
            if (placement, ranks) not in overheads:
                overheads[placement, ranks] = measure_overhead(placement, ranks, args, Path(tmp))
            rows = run_case(placement, profile_name, memory, ranks, args, Path(tmp), *overheads[placement, ranks])
            for row in rows:
                r = row["run"]
                ratios.append(r.ratio)
                print(f"| {label} | {row['name']} | {1e3 * r.measured_step:.1f} ms | {1e3 * r.predicted_step:.1f} ms "
                      f"| {r.ratio:.3f} |", flush=True)
            best, measured = margin(rows, lambda r: r.measured_step)
            _, predicted = margin(rows, lambda r: r.predicted_step)
            _, plain = margin(rows, lambda r: r.plain_prediction.makespan)
            summary.append(f"| {label} | {best} | {100 * measured:+.1f}% | {100 * predicted:+.1f}% "
                           f"| {100 * plain:+.1f}% |")
        for ranks in [int(r) for r in args.offload.split(",") if r]:
            if ("loop", ranks) not in overheads:
                overheads["loop", ranks] = measure_overhead("loop", ranks, args, Path(tmp))
            label = f"loop identical {args.offload_memory} {ranks} ranks, offload, {args.offload_copy:g} F a copy"
            for row in run_offload_case(ranks, args, Path(tmp), *overheads["loop", ranks]):
                r = row["run"]
                ratios.append(r.ratio)
                print(f"| {label} | {row['name']} | {1e3 * r.measured_step:.1f} ms | {1e3 * r.predicted_step:.1f} ms "
                      f"| {r.ratio:.3f} |", flush=True)
    print()
    print("| case | best fitting hand-made | compiled's margin, measured | predicted | without overhead |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(summary))
    worst = max(abs(x - 1) for x in ratios)
    print(f"\nworst |measured / predicted - 1|: {100 * worst:.1f}% over {len(ratios)} schedules; "
          f"{time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
