"""What large and hostile inputs cost: seconds and peak memory of `schedc validate` and `schedc simulate`.

For each case it writes one input file into a temporary directory (a ZB-H1 schedule of 8 stages
with enough microbatches for the number of actions asked for, validated, simulated and traced; a
1F1B schedule of as many actions with a two-rank deadlock; files of blank lines; a CSV larger than
the input limit), runs the command in a fresh process and prints the wall time, the peak
resident memory of that process (``os.wait4``'s ``ru_maxrss``), the exit code and the first line
of stderr. Inputs past schedc.core.limits' bounds must fail in about a second with one line.

    python benchmarks/large_inputs.py [--sizes 100000,1000000] [--timeout 600]

Timings on a shared machine are noisy; memory is not.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from schedc.core import baselines
from schedc.io import csvio  # noqa: E402


def run(argv: list[str], timeout: float) -> tuple[float, float, int, str]:
    """Seconds, peak RSS in MiB, exit code and first stderr line of `schedc ARGV` in a new process."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "schedc.cli", *argv], stdout=subprocess.DEVNULL, stderr=err)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        seconds = time.perf_counter() - start
        err.seek(0)
        first = err.read().decode(errors="replace").strip().splitlines()[:1]
    rc = os.waitstatus_to_exitcode(status)
    return seconds, usage.ru_maxrss / 1024, rc, (first[0] if first else "")


def zbh1_csv(directory: Path, n_actions: int) -> Path:
    n_mb = max(1, n_actions // 24)  # 8 stages x 3 actions per microbatch
    path = directory / f"zbh1_{n_mb}mb.csv"
    path.write_text(csvio.to_csv_text(baselines.make_baseline("zb-h1", 8, n_mb)))
    return path


def deadlock_csv(directory: Path, n_actions: int) -> Path:
    """1F1B on 8 stages whose rank 0 runs 0B0 right after 0F0: it waits for 1B0 while rank 1
    waits for 0F1, a cycle of two ranks among ~n_actions that never start."""
    from schedc.core.ir import Action

    n_mb = max(2, n_actions // 16)  # 8 stages x F and B per microbatch
    schedule = baselines.make_baseline("1f1b", 8, n_mb)
    schedule.rows[0].remove(Action(0, "B", 0))
    schedule.rows[0].insert(1, Action(0, "B", 0))
    path = directory / f"deadlock_{n_mb}mb.csv"
    path.write_text(csvio.to_csv_text(schedule))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,300000,1000000", help="actions per valid CSV (comma separated)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run before it is killed")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'case':44s} {'bytes':>11} {'seconds':>8} {'peak MiB':>9} {'rc':>3}  first line of stderr")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        cases = []
        for n in sizes:
            csv = zbh1_csv(d, n)
            cases.append((f"validate, {n} actions", csv, ["validate", str(csv)]))
            cases.append((f"simulate, {n} actions", csv, ["simulate", str(csv)]))
            cases.append((f"trace, {n} actions", csv, ["trace", str(csv), "-o", str(d / "trace.json")]))
            dead = deadlock_csv(d, n)
            cases.append((f"validate, {n} actions, deadlocked", dead, ["validate", str(dead)]))
        blank = d / "blank_10M.csv"
        blank.write_bytes(b"0F0,0B0\n" + b"\n" * 10_000_000)
        cases.append(("validate, 10M blank lines", blank, ["validate", str(blank)]))
        blank50 = d / "blank_50M.csv"
        blank50.write_bytes(b"0F0,0B0\n" + b"\n" * 50_000_000)
        cases.append(("validate, 50M blank lines", blank50, ["validate", str(blank50)]))
        wide = d / "valid_50MB.csv"
        with open(zbh1_csv(d, 350_000), "rb") as f:
            rows = f.read().splitlines()
        # the same schedule, every rank's row padded with idle cells up to ~50 MB in all
        pad = b"," * ((50_000_000 - sum(map(len, rows))) // len(rows))
        wide.write_bytes(b"\n".join(row + pad for row in rows) + b"\n")
        cases.append(("validate, 50 MB valid CSV (idle cells)", wide, ["validate", str(wide)]))
        for name, path, argv in cases:
            seconds, rss, rc, line = run(argv, args.timeout)
            print(f"{name:44s} {path.stat().st_size:>11,} {seconds:>8.1f} {rss:>9.0f} {rc:>3}  {line[:110]}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
