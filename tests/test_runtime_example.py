"""examples/train.py under torchrun, as a user runs it: a CSV trains, a mismatched CSV fails fast."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from _dist import ROOT, free_port, worker_env  # noqa: E402

from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.io.csvio import write_csv  # noqa: E402

SMALL = ["--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--vocab", "64",
         "--backend", "gloo", "--timeout", "60"]


def torchrun(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           str(ROOT / "examples" / "train.py"), *args, *SMALL]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=worker_env(),
                          cwd=str(ROOT))


def test_train_with_csv_prints_loss_and_step_time(tmp_path):
    path = tmp_path / "zb-h1.csv"
    write_csv(make_baseline("zb-h1", 2, 4), path)
    out = torchrun("--schedule", str(path), "--steps", "12", "--warmup", "1", "--lr", "1e-2")
    assert out.returncode == 0, out.stdout + out.stderr
    losses = [float(x) for x in re.findall(r"^step +\d+ +loss ([\d.]+) +step time +[\d.]+ ms$",
                                            out.stdout, re.M)]
    assert len(losses) == 12, out.stdout
    assert losses[-1] < losses[0], losses
    assert "2 ranks, 2 stages, 4 microbatches" in out.stdout
    assert "median" in out.stdout


def test_train_with_mismatched_csv_fails_on_every_rank(tmp_path):
    path = tmp_path / "three.csv"
    write_csv(make_baseline("1f1b", 3, 4), path)
    out = torchrun("--schedule", str(path), "--steps", "2")
    assert out.returncode != 0
    for rank in (0, 1):
        assert (f"rank {rank}: error: {path}: the CSV has 3 rows (ranks) but the pipeline group has 2 ranks"
                in out.stderr), out.stderr


# ----------------------------------------------------------------- benchmarks/gpu_check.py


def _gpu_check(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), *args], capture_output=True,
                          text=True, env=worker_env(), timeout=timeout, cwd=str(ROOT))


def test_gpu_check_runs_what_a_cpu_can_check():
    # the one-GPU check's CPU path: profiles of the GPT and the GQA Llama timed inside torch's
    # runtime with memory rising at I, a one-rank V against the unsplit model in float64 and bf16
    out = _gpu_check("--device", "cpu", "--skip", "calibrate", "--skip", "counted")
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    table = out.stdout
    assert "schedc gpu check on cpu" in table and "MISS" not in table
    for check in ("gpt: F/I/W from torch's runtime", "llama gqa: held I..W / after F",
                  "one-rank V vs unsplit, float64", "one-rank V vs unsplit, bfloat16"):
        assert re.search(re.escape(check) + r".*\bok$", table, re.M), check


@pytest.mark.cuda
def test_gpu_check_passes_on_a_gpu():
    out = _gpu_check("--device", "cuda", timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
