"""What each work charge costs: CPU seconds per work unit charged, per place that charges.

A work budget (schedc.solver.deadline, ``--budget work``) is reproducible because its clock
advances only by charges that are functions of the inputs; it keeps its size in seconds only where
those charges match the work done. A work unit is meant to be about a second of wall clock on a
2-core machine with two other busy processes, about 2/3 of a CPU second (the plan's process gets
two thirds of the cores). This script runs ``schedc.plan`` under a work budget on issue 52's two
cases (plan_budgets.py's configs, counted; nothing downloaded) with the work clock instrumented:
each charge is attributed the process CPU seconds since the previous charge, and the table gives,
per charging function, the units charged, the CPU seconds and their ratio (0.67 is on target;
above it the charge is too small, below it too large), then CP-SAT's solves alone (CPU seconds
inside ``solve`` against its deterministic time). Use it to re-measure the rates in
schedc/solver/engines/cpsat.py, heuristic.py, schedc/planning/problem.py and handmade.py.

    python benchmarks/work_charges.py                  # both cases, 30 work units each
    python benchmarks/work_charges.py --time-limit 15 --match mistral
    python benchmarks/work_charges.py --time-limit 15 --ac-auto   # plan_offload.py's --ac auto plan instead
    python benchmarks/work_charges.py --time-limit 15 --offload   # and the offload of that plan

``--ac-auto`` runs ``plan_ac`` on benchmarks/plan_offload.py's first rows (Llama-3-8B and
Qwen2.5-7B, seq 4096, 28 GiB, 8 ranks x 32 microbatches) in place of issue 52's cases;
``--offload`` then measures the offload plan plan_offload.py adds to it at 50 GB/s (its
OFFLOAD_SHARE of the time limit, on a work clock of its own). The last column, the most the wall
clock ran ahead of the work charged at a charge of that site, shows how close a run came to the
2 s where the wall takes over (schedc.planning.clock.WALL_LEAD); run the script with two busy
processes beside it (``yes > /dev/null &`` twice) to see the reference machine.
"""

from __future__ import annotations

import argparse
import collections
import math
import sys
import tempfile
import time
from pathlib import Path

import schedc.solver.deadline as deadline
from schedc.solver.engines import cpsat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_budgets import CONFIGS  # noqa: E402  (the issue's two configs, one definition)

TARGET = 2 / 3  # CPU seconds per work unit


class _Attributed:
    """Per charging function: [units, CPU seconds, charges]."""

    def __init__(self) -> None:
        self.sites: dict[str, list] = collections.defaultdict(lambda: [0.0, 0.0, 0, -math.inf])
        self.cpu = time.process_time()

    def restart(self, solves: list) -> tuple[float, float]:
        """Forget what was attributed (and CP-SAT's `solves`) before a plan; its CPU and wall start."""
        self.sites.clear()
        solves.clear()
        self.cpu = time.process_time()
        return self.cpu, time.monotonic()

    def record(self, units: float) -> None:
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_name in ("charge", "charge_passes", "charge_work"):
            frame = frame.f_back
        site = "?" if frame is None else \
            f"{frame.f_code.co_filename.split('schedc/')[-1]}:{frame.f_code.co_name}"
        cpu = time.process_time()
        row = self.sites[site]
        row[0] += units
        row[1] += cpu - self.cpu
        row[2] += 1
        # how far the wall clock ran ahead of the work charged when this charge came: past
        # schedc.planning.clock.WALL_LEAD the wall takes over the plan (not reproducible)
        clock = deadline.work_clock()
        if clock is not None:
            row[3] = max(row[3], deadline.wall_elapsed() - clock.spent)
        self.cpu = cpu


def _instrument(attributed: _Attributed, solves: list) -> None:
    charge = deadline.charge

    def counted(units: float) -> None:
        if deadline.counting_work_on() and units > 0:
            attributed.record(units)
        charge(units)

    for module in list(sys.modules.values()):  # every module that imported charge by name
        if getattr(module, "__name__", "").startswith("schedc") and getattr(module, "charge", None) is charge:
            module.charge = counted  # type: ignore[attr-defined]
    deadline.charge = counted
    run = cpsat._run

    def timed(solver, m, stale):
        cpu = time.process_time()
        status = run(solver, m, stale)
        solves.append((time.process_time() - cpu, solver.deterministic_time,
                       len(m.proto.variables) + len(m.proto.constraints)))
        return status

    cpsat._run = timed


def run_case(name: str, time_limit: float, attributed: _Attributed, solves: list) -> None:
    import json

    import schedc
    from schedc.api import count_profile
    from schedc.planning.ac import plan_mode

    with tempfile.TemporaryDirectory() as d:
        config = Path(d) / f"{name}.json"
        config.write_text(json.dumps(CONFIGS[name]))
        if name == "llama70b":
            profile = count_profile(config, seq=8192, tp=4, framework="torchtitan", activation_checkpoint="full")
            cpu, wall = attributed.restart(solves)
            res = plan_mode(profile, "full", None, ranks=8, microbatches=32, memory="80GiB", budget="work",
                            time_limit=time_limit)
        else:
            profile = count_profile(config, seq=4096)
            cpu, wall = attributed.restart(solves)
            res = schedc.plan(profile=profile, ranks=8, microbatches=32, placement="v", memory="64GiB",
                              budget="work", time_limit=time_limit)
    report(name, time_limit, cpu, wall, res, attributed, solves)


def run_ac_case(name: str, time_limit: float, attributed: _Attributed, solves: list, offload: bool = False) -> None:
    """``plan_ac`` on one of benchmarks/ac_choice.py's models at seq 4096 under 28 GiB, as
    plan_offload.py's first table plans it, and with `offload` the offload plan it adds."""
    from ac_choice import profiles_of

    from schedc.planning import plan_ac

    with tempfile.TemporaryDirectory() as d:
        profiles = profiles_of(name, Path(d), 4096)
    cpu, wall = attributed.restart(solves)
    res = plan_ac(profiles, ranks=8, microbatches=32, memory="28GiB", time_limit=time_limit, budget="work")
    report(f"{name} --ac auto at 28GiB", time_limit, cpu, wall, res, attributed, solves)
    if offload:
        from plan_offload import OFFLOAD_SHARE, with_offload

        cpu, wall = attributed.restart(solves)
        off = with_offload(res, profiles, 50e9, time_limit, "work")
        report(f"{name} --offload auto at 28GiB, 50 GB/s", OFFLOAD_SHARE * time_limit, cpu, wall, off, attributed,
               solves)


def report(name: str, time_limit: float, cpu: float, wall: float, res, attributed: _Attributed, solves: list) -> None:
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    print(f"\n{name}: {time_limit:g} work units, {cpu:.1f} CPU s, {wall:.1f} wall s, cut by the wall clock: "
          f"{'yes' if res.cut_by_wall else 'no'}, step {res.compiled.value:.6g}")
    print("| charged by | charges | units | CPU s | CPU s per unit | wall's largest lead (s) |")
    print("|---|---|---|---|---|---|")
    for site, (units, spent, n, lead) in sorted(attributed.sites.items(), key=lambda kv: -kv[1][1]):
        print(f"| {site} | {n} | {units:.2f} | {spent:.2f} | {spent / units:.2f} | {lead:.1f} |")
    if solves:
        spent, dtime = sum(s[0] for s in solves), sum(s[1] for s in solves)
        print(f"CP-SAT: {len(solves)} solves, {spent:.2f} CPU s in solve, deterministic time {dtime:.3f}, "
              f"largest model {max(s[2] for s in solves)} variables + constraints")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--match", action="append", default=[], help="only cases whose name contains this")
    ap.add_argument("--ac-auto", action="store_true",
                    help="plan_offload.py's --ac auto plans (Llama-3-8B, Qwen2.5-7B at 28 GiB) instead")
    ap.add_argument("--offload", action="store_true", help="with --ac-auto (implied): also the offload plans")
    args = ap.parse_args(argv)
    args.ac_auto = args.ac_auto or args.offload
    print(f"target: {TARGET:.2f} CPU s per work unit")
    attributed, solves = _Attributed(), []
    _instrument(attributed, solves)
    names = ("llama3-8b", "qwen2.5-7b") if args.ac_auto else tuple(CONFIGS)
    for name in names:
        if not args.match or any(m in name for m in args.match):
            if args.ac_auto:
                run_ac_case(name, args.time_limit, attributed, solves, args.offload)
            else:
                run_case(name, args.time_limit, attributed, solves)
    return 0


if __name__ == "__main__":
    sys.exit(main())
