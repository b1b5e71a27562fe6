"""Offload against checkpointing: `schedc plan --offload auto` (with `--ac auto`) on the rows of
issue 49, where memory costs the most.

For Llama-3-8B- and Qwen2.5-7B-shaped decoders (benchmarks/ac_choice.py's configs, counted by
``schedc.model_costs.unit_profile``; nothing is downloaded), 8 ranks x 32 microbatches of one
sequence, per (model, seq, cap) it prints the step of

- ``--ac auto`` (``plan_ac`` with --time-limit): today's best plan under the cap;
- no cap: ``plan`` without checkpointing and without a cap (a fifth of the time);
- ``--ac auto --offload auto`` at 25, 50 and 100 GB/s per direction with the same --time-limit
  (schedc.planning.offload.plan_with_offload: that ``--ac auto`` plan, then the offload of its
  candidates, without checkpointing (where the choosers may also recompute single microbatches at
  ``--ac full``'s costs), with the chosen one and with stages sized for offload
  (schedc.planning.offload.offload_sized_candidates), in half the time limit more; the ``--ac
  auto`` plan is computed once for the three links);
- its margin over ``--ac auto``, its distance to the no-cap step, the gap to the plan's bound that
  allows offload (over every partition under the cap: the third table's), which row won (offload only, both; "none helps":
  the plan is its own ``--ac auto`` answer), the microbatches moved and recomputed, the link load (over the ranks
  of the no-cap plan's partition, the seconds one microbatch's bytes take on the link over the
  seconds the rank computes per microbatch: at most 1, the bytes a stage moves fit its link in the
  time it holds them) and whether the chosen transfers hide (every fetch ends before its
  backward);
- under ``--budget work``, which of the row's plans the wall clock cut (its work clock ran more
  than schedc.planning.clock.WALL_LEAD seconds behind the wall, where some charge is smaller than
  the work it stands for): those cells may differ from run to run and machine to machine.

A second table says what the no-cap plan's order holds, under the cap, at its rank furthest
over it: static bytes, the activations between F and I (what offload moves), the bytes held from
I to W for a deferred W (which only a move after I takes away), and the rest (transients); then, over
all ranks, the most the same order is over the cap (GiB; negative: it fits) if a perfect link
took what each F made (but the last stage's) away from F to I, from I to W, or both.

A third table gives the bounds over every partition (loop or V) and schedule
(schedc.core.offload_bound): without a cap; with offload and any checkpointing per unit and
microbatch (the modes of ``--ac auto``) at 25, 50 and 100 GB/s; with offload alone at those links
and a perfect one; and issue 49's target (10% under ``--ac auto``) with what rules it out where a
bound at 50 GB/s is above it (for every plan, or for offload without checkpointing). ``--bounds-only`` prints that table alone (seconds: no plan runs)
without the last two columns.

Step times are the simulator's (counted costs at 400 TFLOP/s effective), not measurements.

    python benchmarks/plan_offload.py --budget work --time-limit 15   # the table, the same on any machine
    python benchmarks/plan_offload.py --match qwen --match 28GiB      # some rows
    python benchmarks/plan_offload.py --bounds-only                   # the bounds alone
    python benchmarks/plan_offload.py --budget work --torch 2.15.0    # the plans for torch 2.15's runtime
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Optional

from ac_choice import UNCAPPED_SHARE, ms, profiles_of  # benchmarks/ac_choice.py: the configs, counted

from schedc.core.host_link import HostLink, offload_bytes
from schedc.core.settings import COUNTED_FOR_TORCH
from schedc.errors import SchedcError
from schedc.planning import plan, plan_ac
from schedc.planning.ac import checkpointed_form, mode_forms
from schedc.planning.offload import OFFLOAD_SHARE, checkpointing_modes, interleaved_offload_bound, plan_offload
from schedc.solver.deadline import counting_work

# issue 49's table: (model, seq, cap), memory costing the most first
CASES = [("llama3-8b", 4096, "28GiB"), ("qwen2.5-7b", 4096, "28GiB"), ("qwen2.5-7b", 8192, "40GiB"),
         ("llama3-8b", 8192, "40GiB"), ("qwen2.5-7b", 4096, "34GiB"), ("qwen2.5-7b", 4096, "40GiB"),
         ("llama3-8b", 4096, "40GiB")]
RANKS, MICROBATCHES = 8, 32
BANDWIDTHS = (25e9, 50e9, 100e9)


def with_offload(base, profiles: dict, bandwidth: float, time_limit: float, budget: str):
    """What ``schedc plan --ac auto --offload auto --host-bandwidth B`` adds to the ``--ac auto``
    plan `base` (schedc.planning.offload.plan_with_offload: the same plan, then the offload of its
    candidates in OFFLOAD_SHARE of the time limit more)."""
    forms = {"offload only": profiles["none"]}
    if base.ac is not None and base.ac.chosen != "none":
        forms["both"] = base.units
    seconds = OFFLOAD_SHARE * time_limit
    recompute_units = checkpointed_form(profiles["full"], profiles["none"])  # per-microbatch recompute
    with counting_work(seconds) if budget == "work" else nullcontext() as clock:
        res = plan_offload(base, HostLink(bandwidth=bandwidth), seconds, forms, recompute_units=recompute_units,
                           modes=checkpointing_modes(profiles), stage_forms=mode_forms(profiles), interleaved=True)
    return replace(res, cut_by_wall=bool(clock is not None and clock.cut_by_wall))


def bounds(profiles: dict, cap: str) -> list[float]:
    """Over every partition (loop, V or interleaved loop) of 8 ranks x 32 microbatches
    (schedc.core.offload_bound; the interleaved loop's schedc.planning.offload.interleaved_offload_bound):
    the bound without a cap; with offload and any checkpointing per unit and microbatch at 25, 50
    and 100 GB/s; with offload alone at the same links and a perfect one."""
    from schedc.core.costs import MemoryLimit
    from schedc.core.offload_bound import offload_partition_bound

    none, modes, c = profiles["none"], checkpointing_modes(profiles), MemoryLimit.parse(cap).value

    def over(chosen, limit, bw):
        return min([offload_partition_bound(none, chosen, RANKS, MICROBATCHES, limit, pl, bandwidth=bw).value
                    for pl in ("loop", "v")] +
                   [interleaved_offload_bound(none, chosen, RANKS, MICROBATCHES, limit, bandwidth=bw)])
    inf = float("inf")
    return [over([], inf, inf)] + [over(modes, c, b) for b in BANDWIDTHS] + [over([], c, b) for b in BANDWIDTHS + (inf,)]


def link_load(res, bandwidth: float) -> float:
    """Over the ranks of `res`'s partition, the largest ratio of the seconds a rank's link needs to
    move one microbatch of its stages out (the same again back in, on the other stream) to the
    seconds the rank computes per microbatch: at or below 1 the link keeps up with what the
    rank makes (the case where offload can hide), above it the bytes a stage must move do not fit
    its link in the time it holds them (the last stage moves nothing: its backward follows its
    forward)."""
    profile = res.compiled.problem.profile
    link = HostLink(bandwidth=bandwidth)
    placement = res.compiled.problem.placement
    load = 0.0
    for r in range(res.compiled.problem.n_ranks):
        stages = [s for s, q in enumerate(placement) if q == r]
        work = sum(profile.stages[s].forward + profile.stages[s].backward for s in stages)
        moved = sum(offload_bytes(profile, s) for s in stages if s < profile.n_stages - 1)
        load = max(load, link.seconds(moved) / work if moved else 0.0)
    return load


def moved_and_recomputed(res) -> str:
    """The plan's memory actions: microbatches moved / recomputed."""
    actions = res.compiled.report.get("memory_actions", []) if res.offload.get("chosen") else []
    redone = sum(1 for a in actions if a["action"] == "recompute")
    return f"{len(actions) - redone} / {redone}"


def peak_parts(res, cap: str) -> str:
    """Where the no-cap plan `res`'s order is furthest over `cap`: the rank, its peak and what the
    peak holds (static bytes; activations between F and I, what offload moves, less each stage's
    input; the bytes held from I to W, which nothing moves; the rest: transients and the action
    running), in GiB, as table cells."""
    from schedc.core.costs import MemoryLimit
    from schedc.core.ir import Action, Kind
    from schedc.core.simulate import simulate
    from schedc.solver.offload_fractions import peak_time

    schedule, profile = res.compiled.schedule, res.compiled.problem.profile
    sim = simulate(schedule, profile, MemoryLimit.parse(cap))
    r = max(range(sim.n_ranks), key=lambda q: sim.peak_memory[q] - sim.memory_limit[q])
    t = peak_time(sim, r)
    static = sim.memory_curve[r][0][1]
    moves = waits = 0.0
    for a in schedule.actions(r):
        if a.kind != Kind.F:
            continue
        back, w = Action(a.stage, Kind.I, a.microbatch), Action(a.stage, Kind.W, a.microbatch)
        back = back if back in sim.timings else Action(a.stage, Kind.B, a.microbatch)
        if sim.timings[a].end <= t < sim.timings[back].start:
            moves += offload_bytes(profile, a.stage) if a.stage < profile.n_stages - 1 else 0.0
        elif w in sim.timings and sim.timings[back].end <= t < sim.timings[w].start:
            waits += profile.stages[a.stage].weight_grad_bytes
    peak, g = sim.peak_memory[r], 2 ** 30
    cells = [f"{r}", f"{peak / g:.1f}", f"{(peak - sim.memory_limit[r]) / g:.1f}", f"{static / g:.1f}",
             f"{moves / g:.1f}", f"{waits / g:.1f}", f"{(peak - static - moves - waits) / g:.1f}"]
    # the same order with a perfect link: what F made away from F to I, from I to W, or both
    for before, after in ((True, False), (False, True), (True, True)):
        stages = []
        for s, c in enumerate(profile.stages):
            away = offload_bytes(profile, s) if s < profile.n_stages - 1 else 0.0
            stages.append(c.model_copy(update={"activation_bytes": c.activation_bytes - before * away,
                                               "weight_grad_bytes": c.weight_grad_bytes - after * away}))
        relaxed = simulate(schedule, profile.model_copy(update={"stages": stages}), MemoryLimit.parse(cap))
        cells.append(f"{max(p - q for p, q in zip(relaxed.peak_memory, relaxed.memory_limit)) / g:.1f}")
    return " | ".join(cells)


def row(case: tuple, profiles: dict, time_limit: float, budget: str, parts: list) -> tuple[str, float]:
    """The first table's row and the row's --ac auto step (inf where nothing fits)."""
    name, seq, cap = case
    head = f"| {name} | seq {seq} | {cap} |"
    t0 = time.monotonic()
    try:
        base = plan_ac(profiles, ranks=RANKS, microbatches=MICROBATCHES, memory=cap, time_limit=time_limit,
                       budget=budget)
    except SchedcError as e:
        return f"{head} {str(e)[:100]} |", math.inf
    free = plan(profile=profiles["none"], ranks=RANKS, microbatches=MICROBATCHES, memory="none",
                time_limit=UNCAPPED_SHARE * time_limit, budget=budget)
    uncapped = free.value
    parts.append(f"{head} {peak_parts(free, cap)} |")
    steps = {b: with_offload(base, profiles, b, time_limit, budget) for b in BANDWIDTHS}
    # under --budget work, the plans whose work clock the wall clock took over (not reproducible)
    cut = [what for what, res in [("--ac auto", base), ("no cap", free)] + [(f"{b / 1e9:g} GB/s", steps[b]) for b in BANDWIDTHS]
           if res.cut_by_wall]
    mid = steps[50e9]
    summary = mid.offload
    won = summary.get("row", "none helps") + ("" if summary["chosen"] or "row" not in summary else " (nothing moves)")
    hides = "—" if not summary["chosen"] else "yes" if summary.get("transfers_hide") else "no"
    cells = [ms(base.value), ms(uncapped), f"{100 * (base.value - uncapped) / uncapped:.1f}%",
             f"**{ms(mid.value)}**", f"{100 * (base.value - mid.value) / base.value:.1f}%",
             f"{100 * (mid.value - uncapped) / uncapped:.1f}%", f"{100 * mid.gap:.1f}%", won,
             moved_and_recomputed(mid), f"{link_load(free, 50e9):.2f}", hides, ms(steps[25e9].value), ms(steps[100e9].value),
             ", ".join(cut) or "—", f"{time.monotonic() - t0:.0f}"]
    return f"{head} {' | '.join(cells)} |", base.value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=15.0,
                    help="seconds per --ac auto plan; each offload gets half of it (default 15)")
    ap.add_argument("--budget", choices=["time", "work"], default="time",
                    help="work: --time-limit in work units, the same table on any machine (schedc plan --budget)")
    ap.add_argument("--match", action="append", default=[], metavar="TEXT",
                    help="keep the rows whose model, seq and cap contain every TEXT")
    ap.add_argument("--torch", default=COUNTED_FOR_TORCH, metavar="RELEASE",
                    help=f"the torch release whose runtime the plans are for (what it holds across a step: "
                         f"schedc.core.cost_model; default {COUNTED_FOR_TORCH}, as the counted profiles assume)")
    ap.add_argument("--bounds-only", action="store_true",
                    help="only the third table (the bounds with offload: seconds, no plan runs)")
    args = ap.parse_args(argv)
    if args.bounds_only:
        with tempfile.TemporaryDirectory() as tmp:
            print_bounds(args.match, Path(tmp), torch=args.torch)
        return 0
    print(f"step in ms (simulated); {RANKS} ranks x {MICROBATCHES} microbatches of one sequence; offload at 50 GB/s "
          f"per direction unless the column says otherwise; torch {args.torch}'s runtime")
    print("| model | seq | cap | --ac auto | no cap | memory costs | **--offload auto + --ac auto** | vs --ac auto | "
          "vs no cap | gap to the bound with offload | row chosen | microbatches moved / recomputed | link load (no-cap partition) | "
          "transfers hide | 25 GB/s | 100 GB/s | cut by the wall clock | s |")
    print("|---" * 18 + "|")
    cache: dict = {}
    parts: list[str] = []
    targets: dict = {}  # row -> its --ac auto step
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            name, seq, cap = case
            if not all(text in f"| {name} | seq {seq} | {cap} |" for text in args.match):
                continue
            if (name, seq) not in cache:
                cache[(name, seq)] = profiles_of(name, Path(tmp), seq, args.torch)
            line, targets[f"| {name} | seq {seq} | {cap} |"] = row(case, cache[(name, seq)], args.time_limit,
                                                                    args.budget, parts)
            print(line, flush=True)
    print()
    print("the no-cap plan's order under the cap, at its rank furthest over it: GiB at the peak")
    print("| model | seq | cap | rank | peak | over the cap by | static | F to I (offload moves) | I to W (held for W) | "
          "transients, running action | over with F to I away | with I to W away | with both away |")
    print("|---" * 13 + "|")
    for line in parts:
        print(line)
    print()
    with tempfile.TemporaryDirectory() as tmp:
        print_bounds(args.match, Path(tmp), targets, torch=args.torch)
    return 0


def print_bounds(match: list, tmp: Path, targets: Optional[dict] = None, torch: str = COUNTED_FOR_TORCH) -> None:
    """The third table: per row, the bounds over every partition without a cap, with offload and
    checkpointing, and with offload alone; with `targets` (row -> the --ac auto step) also the
    issue's target, 10% under it, and whether a bound rules it out."""
    print("bounds over every partition and schedule (ms; schedc.core.offload_bound)")
    head = ["model", "seq", "cap", "no cap", "offload + checkpointing, 25 GB/s", "50 GB/s", "100 GB/s",
            "offload alone, 25 GB/s", "50 GB/s", "100 GB/s", "perfect link"]
    if targets is not None:
        head += ["--ac auto less 10%", "the 50 GB/s bounds rule it out for"]
    print("| " + " | ".join(head) + " |")
    print("|---" * len(head) + "|")
    for name, seq, cap in CASES:
        key = f"| {name} | seq {seq} | {cap} |"
        if not all(text in key for text in match) or (targets is not None and key not in targets):
            continue
        values = bounds(profiles_of(name, tmp, seq, torch), cap)
        cells = [ms(v) if math.isfinite(v) else "nothing fits" for v in values]
        if targets is not None:
            goal = 0.9 * targets[key]
            cells += [ms(goal), "every plan" if values[2] > goal else "offload alone" if values[5] > goal else "—"]
        print(f"{key} {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
