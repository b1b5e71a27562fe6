"""`schedc calibrate --model`: the closed loop on the user's own model (examples/llama.py), checked
before any rank starts; the printed step times and errors agree with each other."""

from __future__ import annotations

import json
import math
import re
import statistics

import pytest

torch = pytest.importorskip("torch")

from _dist import ROOT  # noqa: E402

from schedc import cli
from schedc.core import baselines
from schedc.io import csvio  # noqa: E402
from schedc.runtime.calibrate import Calibration, format_calibration  # noqa: E402

LLAMA = str(ROOT / "examples" / "llama.py") + ":stages"
TINY = ["--model-arg", "layers=2", "--model-arg", "hidden=16", "--model-arg", "heads=2", "--model-arg", "seq_len=8",
        "--model-arg", "vocab_size=32"]


@pytest.fixture(scope="module")
def llama_profile(tmp_path_factory):
    d = tmp_path_factory.mktemp("calibrate_model")
    prof = d / "p.json"
    assert cli.main(["profile", "--model", LLAMA, *TINY, "--stages", "2", "--mbs", "2", "--warmup", "0",
                     "--repeats", "1", "--threads", "1", "-o", str(prof)]) == 0
    csv = d / "1f1b.csv"
    csvio.write_csv(baselines.make_baseline("1f1b", 2, 4), csv)
    return d, prof, csv


def test_calibrate_runs_the_users_model(llama_profile, capsys):
    d, prof, csv = llama_profile
    capsys.readouterr()
    refined = d / "refined.json"
    assert cli.main(["calibrate", str(csv), "--profile", str(prof), "--model", LLAMA, *TINY, "--steps", "2",
                     "--timeout", "300", "--json", "-o", str(refined)]) == 0
    out = json.loads(capsys.readouterr().out.split("\nwrote ")[0])
    assert out["measured_step"] > 0 and all(r["measured_busy"] > 0 for r in out["ranks"])
    assert math.isfinite(out["refined_step"]) and refined.exists()
    # the printed error is the one between the two printed step times
    assert out["refined_error"] == pytest.approx((out["refined_step"] - out["measured_step"]) / out["measured_step"])
    assert math.isfinite(out["refined_paired_error"])


def test_a_wrong_model_is_one_line_before_any_rank_starts(llama_profile, capsys, monkeypatch):
    from schedc.runtime import launch as launcher

    d, prof, csv = llama_profile
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: pytest.fail("ranks were started"))
    capsys.readouterr()
    bad = LLAMA.replace(":stages", ":nothing")
    assert cli.main(["calibrate", str(csv), "--profile", str(prof), "--model", bad, *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no function nothing" in err[0], err
    # a profile of the built-in GPT does not predict another model
    gpt = d / "gpt.json"
    assert cli.main(["profile", "--stages", "2", "--mbs", "2", "--layers", "2", "--hidden", "16", "--heads", "2",
                     "--seq", "8", "--vocab", "32", "--warmup", "0", "--repeats", "1", "-o", str(gpt)]) == 0
    capsys.readouterr()
    assert cli.main(["calibrate", str(csv), "--profile", str(gpt), "--model", LLAMA, *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "describes the built-in GPT" in err[0] and "schedc profile --model" in err[0], err
    # --model-arg without --model: the built-in GPT would silently ignore it
    assert cli.main(["calibrate", str(csv), "--profile", str(gpt), "--layers", "2", "--hidden", "16", "--heads", "2",
                     "--seq", "8", "--vocab", "32", "--model-arg", "hidden=16"]) == 2
    assert "go with --model" in capsys.readouterr().err


def test_printed_errors_match_the_printed_step_times():
    measured, refined = [1.00, 1.30, 1.10], [1.20, 1.15, 1.25]
    cal = Calibration(csv="s.csv", predicted_step=1.0, measured_step=statistics.median(measured), ranks=[],
                      start_error=0.0, steps=3, measured_steps=measured, refined_steps=refined)
    line = next(x for x in format_calibration(cal).splitlines() if "refined profile" in x)
    step, error, paired = re.search(r": ([\d.]+)ms \(([+-][\d.]+)% against .*median ([+-][\d.]+)%\)", line).groups()
    assert float(step) == pytest.approx(1e3 * statistics.median(refined))
    assert float(error) == pytest.approx(100 * (statistics.median(refined) / statistics.median(measured) - 1), abs=0.05)
    pairs = statistics.median((r - m) / m for r, m in zip(refined, measured))
    assert float(paired) == pytest.approx(100 * pairs, abs=0.05)
