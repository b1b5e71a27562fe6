"""Compile quality table: schedc vs the hand-made schedules, the lower bound, the gap, the time.

Cases (issue 3's targets):
  (a) 8 stages x 16 microbatches, identical stages, 1p, makespan;
  (b) heterogeneous stages (first and last 1.3x, I = 1.1F, W = 0.9F, comm 0.1F), both objectives,
      1p / 1.5p / 2p, for (4,16), (8,24), (16,48) (twice the time limit) and V placement 4 ranks x
      2 stages x 16 mb;
  (c) 32 stages x 128 microbatches (identical, 1p, 120 s; and heterogeneous, outside --quick);
  (d) span objective, identical stages, vs the ZB paper's closed forms (ZB-H1 at 1p, ZB-H2 at 2p);
  (e) issue 11: identical stages on slow links (comm 0.25F, 0.5F) and first/last stages 1.25x /
      1.5x heavier, at 8x24 (60 s) and 16x48 (120 s), memory 1.25p and 2p, both objectives;
  (v) issue 11: V placement, 4 and 8 ranks x 2 stages, F = I = W, at 0.5p, 0.75p and 1p, both
      objectives, against V-Half / V-Min / ZB-V.
  (s) issue 22, scale: 32 and 64 ranks x 128 and 256 microbatches, loop and V, 1p and 2p,
      communication 0 and 0.25F, torch's and the ideal runtime, identical stages, makespan, 60 s
      each (--quick: 32 ranks x 128, loop, comm 0.25F, torch, 10 s).
--paper: the zero-bubble paper's 28.3B setting (32 stages; F, I, W, comm = 10.192, 10.367, 7.559,
      0.474; 2p; ideal runtime; span) at 96, 128, 256 microbatches: zb-greedy, zb-rounds (their
      own greedy, schedc.solver.engines.zb_rounds) and schedc in 30 s, as span bubbles.
--wall: `schedc compile --time-limit 10` as a user runs it (process start included): wall and peak
      RSS at 64x256, 128x512, V 32x128 (also with comm 0.25F, and V 64x256 so: the cool-down
      re-listing's instances), 8x8192, 2000x2, 8x100000 (refused: over the size limit) and 1M
      actions with --time-limit 2 (refused: shorter than the least compile of that size).
--cost-curve: the same command at 1k, 10k, 100k and 1M actions (8 stages).

Usage: python benchmarks/compile_quality.py [--quick] [--markdown] [--time-limit S] [--only a,b,c,d,e,v,s]
       [--solver highs|cbc|cpsat] [--paper] [--wall] [--cost-curve] [--match TEXT]
--only s alone prints the scale table: schedc against zb-greedy, zb-rounds and the best of ZB-H1,
ZB-H2, ZB-V that fits (makespan), its lower bound, gap, wall time and where its answer came from
(the warm start's source); --match keeps the rows whose case and memory contain TEXT.
By default each compile runs as `schedc compile` does: CP-SAT first (when OR-Tools is installed),
then the integer program; --solver runs one engine alone, to compare them.
'best hand-made' is the best hand-made schedule (V-Half and V-Min included) that exists for the
case and fits the memory limit, with its name; 'zb-greedy' is the zero-bubble paper's greedy
(one stage per rank), '-' where none fits or applies. --quick runs a tiny subset with 5 s limits.
Costs follow torch's runtime (stage 0's backward all in W), the default everywhere.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedc.core.costs import Profile  # noqa: E402
from schedc.solver import compile_schedule  # noqa: E402

GREEDY = "zb-greedy"


def issue11_cases(quick: bool, only: set[str]):
    out = []
    if "e" in only:
        profiles = [("comm 0.25F", lambda n: Profile.uniform(n, comm=0.25)),
                    ("comm 0.5F", lambda n: Profile.uniform(n, comm=0.5)),
                    ("edges 1.25x", lambda n: Profile.edge_heavy(n, edge=1.25)),
                    ("edges 1.5x", lambda n: Profile.edge_heavy(n, edge=1.5))]
        sizes = [(8, 24, 60.0), (16, 48, 120.0)]
        mems = ["1.25p", "2p"]
        if quick:
            profiles, sizes, mems = profiles[:1], [(8, 24, 5.0)], mems[:1]
        for objective in ("makespan", "span"):
            for label, prof in profiles:
                for n, m, tl in sizes:
                    for mem in mems:
                        out.append(("e", f"{n}x{m} {label}", dict(n_stages=n, n_microbatches=m, profile=prof(n),
                                                                  memory=mem, objective=objective), tl, None))
    if "v" in only:
        shapes = [(4, 16, 30.0), (8, 24, 60.0)]
        mems = ["0.5p", "0.75p", "1p"]
        objectives = ("makespan", "span")
        if quick:
            shapes, mems, objectives = [(4, 8, 5.0)], ["0.5p", "0.75p"], ("makespan",)
        for objective in objectives:
            for r, m, tl in shapes:
                for mem in mems:
                    out.append(("v", f"V {r}r x 2s x {m}", dict(n_stages=2 * r, n_microbatches=m, n_ranks=r,
                                                                placement="v", memory=mem, objective=objective),
                                tl, None))
    return out


def scale_cases(quick: bool, only: set[str]):
    if "s" not in only:
        return []
    out = []
    ranks, mbs, placements, mems, comms, runtimes, tl = (32, 64), (128, 256), ("loop", "v"), ("1p", "2p"), \
        (0.0, 0.25), ("torch", "ideal"), 60.0
    if quick:
        ranks, mbs, placements, mems, comms, runtimes, tl = (32,), (128,), ("loop",), ("1p", "2p"), (0.25,), \
            ("torch",), 10.0
    for r in ranks:
        for m in mbs:
            for placement in placements:
                n = 2 * r if placement == "v" else r
                for mem in mems:
                    for comm in comms:
                        for runtime in runtimes:
                            label = f"{'V ' if placement == 'v' else ''}{r}r x {m} c{comm:g} {runtime}"
                            out.append(("s", label, dict(n_stages=n, n_microbatches=m, n_ranks=r, placement=placement,
                                                         profile=Profile.uniform(n, comm=comm), memory=mem,
                                                         runtime=runtime), tl, None))
    return out


PAPER_COSTS = dict(forward=10.192, backward_input=10.367, backward_weight=7.559, comm=0.474)


def paper_rows(quick: bool) -> None:
    """The zero-bubble paper's 28.3B setting: span bubbles of zb-greedy, zb-rounds and schedc."""
    from schedc.solver.engines import zb_greedy as greedy
    from schedc.solver.engines import zb_rounds as paper_greedy
    from schedc.solver.problem import Problem

    print("| stages x mb | zb-greedy | zb-rounds | schedc (30 s) | lower bound | status |")
    print("|---|---|---|---|---|---|")
    for m in ((96,) if quick else (96, 128, 256)):
        kw = dict(profile=Profile.uniform(32, **PAPER_COSTS), memory="2p", objective="span", runtime="ideal")
        p = Problem.build(32, m, **kw)
        zg, zr = greedy.zb_greedy(p), paper_greedy.paper_greedy(p)
        res = compile_schedule(32, m, time_limit=10.0 if quick else 30.0, **kw)
        cells = [f"{100 * x[1].span_bubble:.2f}%" if x else "-" for x in (zg, zr)]
        busy = sum(res.sim.busy) / 32
        print(f"| 32x{m} | {cells[0]} | {cells[1]} | {100 * res.sim.span_bubble:.2f}% | "
              f"{100 * (1 - busy / res.lower_bound):.2f}% | {res.status} |", flush=True)


PEERS = ("zb-h1", "zb-h2", "zb-v")  # the hand-made schedules a scale row compares with


def scale_rows(specs, markdown: bool, progress) -> None:
    """Group s as its own table: schedc against every peer it must not be behind (zb-greedy,
    zb-rounds, the best of ZB-H1 / ZB-H2 / ZB-V that fits), its lower bound, gap and wall time."""
    from schedc.solver.engines import zb_rounds as paper_greedy
    from schedc.solver.engines.warm import matching_baselines

    header = ["case", "mem", "zb-greedy", "zb-rounds", "ZB-H1/H2/V", "schedc", "lower bound", "gap", "status",
              "wall s", "from"]
    print("| " + " | ".join(header) + " |" if markdown else _line(header))
    if markdown:
        print("|" + "---|" * len(header))
    for _, label, kw, tl, _ in specs:
        t0 = time.monotonic()
        res = compile_schedule(time_limit=tl, progress=progress, **kw)
        wall = time.monotonic() - t0
        # the peers, built in full whatever the deadline let the compile build (outside the wall)
        built = {name: sim.makespan for name, _, sim in matching_baselines(res.problem) if sim.fits}
        rounds = paper_greedy.paper_greedy(res.problem)
        hand = {n: built[n] for n in PEERS if n in built}
        best_hand = min(hand, key=hand.get) if hand else None
        peers = [built.get(GREEDY), rounds[1].makespan if rounds else None, hand.get(best_hand)]
        row = [f"(s) {label}", kw["memory"], *(_exact(x) for x in peers[:2]),
               f"{_exact(peers[2])} {best_hand}" if best_hand else "-", _exact(res.value), _exact(res.lower_bound),
               f"{100 * res.gap:.2f}%", res.status, f"{wall:.1f}", res.warm_start_source]
        print("| " + " | ".join(row) + " |" if markdown else _line(row), flush=True)
        fitting = [x for x in peers if x is not None]
        if fitting and res.value > min(fitting) + 1e-9:
            print(f"  WARNING: behind a peer ({min(fitting):.4g})", file=sys.stderr)
        if res.gap > 0.005:
            print(f"  MISS: gap {100 * res.gap:.2f}% > 0.5%", file=sys.stderr)


def _run_measured(argv: list[str], timeout: float) -> tuple[float, float, int, str]:
    """(wall s, peak RSS MB, exit code, last stderr line) of `schedc <argv>` in a fresh process."""
    probe = ("import resource, subprocess, sys, time; t = time.monotonic(); "
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, "
             "p.returncode); print((p.stderr.strip().splitlines() or [''])[-1])")
    out = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "schedc.cli", *argv],
                         capture_output=True, text=True, timeout=timeout)
    first, _, last = out.stdout.partition("\n")
    wall, rss, code = first.split()
    return float(wall), float(rss), int(code), last.strip()


def wall_rows(specs, time_limit: float = 10.0) -> None:
    """`schedc compile --time-limit 10` as a user runs it: wall (process start included), RSS."""
    print(f"| instance | actions | wall s (--time-limit {time_limit:g}) | peak RSS MB | exit | note |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, argv in specs:
            n, m = int(argv[argv.index("--stages") + 1]), int(argv[argv.index("--mb") + 1])
            limit = [] if "--time-limit" in argv else ["--time-limit", str(time_limit)]
            wall, rss, code, last = _run_measured(
                ["compile", *argv, *limit, "--quiet", "-o", str(Path(tmp) / "s.csv")],
                timeout=20 * time_limit + 120)
            note = last[:90] if code else ""
            print(f"| {label} | {3 * n * m:,} | {wall:.1f} | {rss:.0f} | {code} | {note} |", flush=True)


WALL_SPECS = [("64x256", ["--stages", "64", "--mb", "256"]), ("128x512", ["--stages", "128", "--mb", "512"]),
              ("V 32x128", ["--stages", "64", "--ranks", "32", "--placement", "v", "--mb", "128"]),
              ("V 32x128 comm 0.25", ["--stages", "64", "--ranks", "32", "--placement", "v", "--mb", "128",
                                      "--comm", "0.25"]),
              ("V 64x256 comm 0.25", ["--stages", "128", "--ranks", "64", "--placement", "v", "--mb", "256",
                                      "--comm", "0.25"]),
              ("8x8192", ["--stages", "8", "--mb", "8192"]), ("2000x2", ["--stages", "2000", "--mb", "2"]),
              ("8x100000", ["--stages", "8", "--mb", "100000"]),
              ("8x43690 --time-limit 2", ["--stages", "8", "--mb", "43690", "--time-limit", "2"])]
CURVE_SPECS = [(f"8x{m}", ["--stages", "8", "--mb", str(m)]) for m in (42, 417, 4167, 41666)]


def cases(quick: bool, time_limit: float, only: set[str]):
    out = []
    if quick:  # a tiny subset: one row of each older group, short limits
        time_limit = min(time_limit, 5.0)
        if "a" in only:
            out.append(("a", "8x16 identical", dict(n_stages=8, n_microbatches=16, memory="1p"), 5.0, None))
        if "b" in only:
            out.append(("b", "4x16 hetero", dict(n_stages=4, n_microbatches=16, profile=Profile.edge_heavy(4),
                                                 memory="1p", objective="span"), time_limit, None))
        if "d" in only:
            out.append(("d", "4x12 identical", dict(n_stages=4, n_microbatches=12, memory="2p", objective="span"),
                        time_limit, 3 * 12))
        return out + issue11_cases(quick, only) + scale_cases(quick, only)
    if "a" in only:
        out.append(("a", "8x16 identical", dict(n_stages=8, n_microbatches=16, memory="1p"), 10.0, None))
    if "b" in only:
        sizes = [(4, 16), (8, 24), (16, 48)]
        mems = ["1p"] if quick else ["1p", "1.5p", "2p"]
        for objective in ("makespan", "span"):
            for n, m in sizes:
                for mem in mems:  # 16x48 gets twice the limit, as issue 11's targets allow
                    out.append(("b", f"{n}x{m} hetero", dict(n_stages=n, n_microbatches=m, profile=Profile.edge_heavy(n),
                                                             memory=mem, objective=objective),
                                2 * time_limit if n >= 16 else time_limit, None))
            for mem in mems:
                out.append(("b", "V 4r x 2s x 16 hetero",
                            dict(n_stages=8, n_microbatches=16, n_ranks=4, placement="v", profile=Profile.edge_heavy(8),
                                 memory=mem, objective=objective), time_limit, None))
    if "c" in only:
        out.append(("c", "32x128 identical", dict(n_stages=32, n_microbatches=128, memory="1p"),
                    60.0 if quick else 120.0, None))
        if not quick:  # the decomposition's case: the warm start does not meet the bound
            out.append(("c", "32x128 hetero", dict(n_stages=32, n_microbatches=128, profile=Profile.edge_heavy(32),
                                                   memory="1p"), 120.0, None))
    if "d" in only:
        for n, m in ([(4, 12)] if quick else [(4, 12), (8, 24)]):
            p = n
            # ZB paper's span bubbles with F = I = W = 1: ZB-H1 (p-1)(F+I-W), ZB-H2 (p-1)(F+I-2W)
            out.append(("d", f"{n}x{m} identical", dict(n_stages=n, n_microbatches=m, memory="1p", objective="span"),
                        time_limit, 3 * m + (p - 1) * 1))
            out.append(("d", f"{n}x{m} identical", dict(n_stages=n, n_microbatches=m, memory="2p", objective="span"),
                        time_limit, 3 * m + (p - 1) * 0))
    return out + issue11_cases(quick, only) + scale_cases(quick, only)


def _line(cells) -> str:
    widths = [26, 8, 6, 20] + [10] * (len(cells) - 4)
    return "  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(cells, widths)))


def fmt(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def _exact(x) -> str:  # scale rows: step times of 400-1700 differ in their quarters
    return "-" if x is None else f"{x:.6g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a subset with shorter limits")
    ap.add_argument("--markdown", action="store_true", help="emit a Markdown table (for docs/results.md)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per heterogeneous case (default 60)")
    ap.add_argument("--only", default="a,b,c,d,e,v",
                    help="comma-separated case groups (a,b,c,d,e,v,s; s alone: the scale table)")
    ap.add_argument("--progress", action="store_true", help="print solver progress to stderr")
    ap.add_argument("--match", action="append", default=[], metavar="TEXT",
                    help="with --only s: only the rows whose case and memory contain TEXT (repeatable: all of them)")
    ap.add_argument("--solver", choices=["highs", "cbc", "cpsat"], help="one engine alone (default: as compile)")
    ap.add_argument("--budget", choices=["time", "work"], default="time",
                    help="what --time-limit counts (as compile's --budget): 'work' gives the same table on any "
                         "machine, busy or idle; the time column is then work units")
    ap.add_argument("--paper", action="store_true", help="only the zero-bubble paper's 32-stage rows")
    ap.add_argument("--wall", action="store_true", help="only the --time-limit 10 wall / RSS rows")
    ap.add_argument("--cost-curve", action="store_true", help="only wall / RSS against the number of actions")
    args = ap.parse_args(argv)
    if args.paper or args.wall or args.cost_curve:
        if args.paper:
            paper_rows(args.quick)
        if args.wall:
            wall_rows(WALL_SPECS)
        if args.cost_curve:
            wall_rows(CURVE_SPECS)
        return 0
    only = set(args.only.split(","))
    limit = min(args.time_limit, 5.0) if args.quick else args.time_limit

    def progress(e):
        if args.progress:
            print(f"  [{e['elapsed']:6.1f}s] {e['phase']:<24} best {e['best']:.5g} bound {e['bound']:.5g}",
                  file=sys.stderr)

    if only == {"s"}:  # the scale rows have their own columns
        specs = [c for c in scale_cases(args.quick, only)
                 if all(m in c[1] + " " + c[2]["memory"] for m in args.match)]
        scale_rows(specs, args.markdown, progress)
        return 0

    header = ["case", "obj", "mem", "best hand-made", GREEDY, "schedc", "closed form", "lower bound", "gap",
              "status", "time s"]
    rows = []
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    else:
        print(_line(header))
    for group, label, kw, tl, closed in cases(args.quick, limit, only):
        kw = dict(kw)
        objective = kw.get("objective", "makespan")
        t0 = time.monotonic()
        res = compile_schedule(time_limit=tl, progress=progress, solver=args.solver, budget=args.budget, **kw)
        wall = time.monotonic() - t0 if args.budget == "time" else res.solve_time
        hand = {name: b[objective] for name, b in res.baselines.items() if b["fits"] and name != GREEDY}
        best_hand = min(hand, key=hand.get) if hand else None
        greedy = res.baselines.get(GREEDY)
        greedy_val = greedy[objective] if greedy and greedy["fits"] else None
        base = [hand[best_hand] if best_hand else None, greedy_val]
        row = [f"({group}) {label}", objective, kw.get("memory", "1p"),
               f"{fmt(base[0])} {best_hand}" if best_hand else "-", fmt(greedy_val), fmt(res.value),
               fmt(closed), fmt(res.lower_bound), f"{100 * res.gap:.2f}%", res.status, f"{wall:.1f}"]
        rows.append(row)
        if args.markdown:
            print("| " + " | ".join(row) + " |", flush=True)
        else:
            print(_line(row), flush=True)
        fitting = [b for b in base if b is not None]
        if fitting and res.value > min(fitting) + 1e-9:
            print(f"  WARNING: worse than a fitting baseline ({min(fitting):.4g})", file=sys.stderr)
        if closed is not None and res.value > closed + 1e-9:
            print(f"  WARNING: worse than the closed form ({closed:.4g})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
