"""benchmarks/gpu_times.py, the GPU timing check of issue 50, runs end to end on CPU (`--device cpu`), and
benchmarks/time_fit.py and time_fidelity.py read what it writes: the next session lent a GPU runs it as one
command and refits and judges with one command each, so none of the three may rot where no GPU is."""

import contextlib
import io
import json
import statistics
import sys

import pytest
import torch
from _dist import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_times  # noqa: E402
import memory_fidelity as mf  # noqa: E402
import time_fidelity  # noqa: E402
import time_fit  # noqa: E402

MODELS = ("Llama-3-8B", "Qwen3-30B-A3B")  # a dense layer and an MoE one
SEQS = (16, 32)


def _main(module, *args) -> str:
    """`module`'s main run here (one import of torch and transformers for every test), its stdout."""
    threads = torch.get_num_threads()
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            assert module.main([str(a) for a in args]) == 0
    finally:
        torch.set_num_threads(threads)  # the dry run takes one thread: a shared CPU's threads only contend
    return out.getvalue()


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpu_times") / "t.json"
    stdout = _main(gpu_times, "--device", "cpu", "--models", *MODELS, "--seqs", *SEQS, "--json", path)
    return path, json.loads(path.read_text()), stdout


def test_the_dry_run_times_every_unit_of_every_model_and_sequence(dry_run):
    _, report, stdout = dry_run
    assert report["device"] == "cpu" and report["torch"] and report["transformers"]
    assert not report["skipped"] and not report["failed"]
    got = {(p["model"], p["seq"], p["unit"]): p for p in report["points"]}
    assert set(got) == {(m, s, u) for m in MODELS for s in SEQS for u in ("embedding", "layer", "head")}
    for (model, seq, unit), p in got.items():
        assert p["config"]["model_type"] in ("llama", "qwen3_moe")
        for kind in ("F", "I", "W", "B"):
            runs = p["repeats"][kind]
            assert len(runs) == p["n"] == report["repeats"]
            assert p["ms"][kind] == statistics.median(runs)
            if unit == "embedding" and kind == "I":
                assert runs == [0.0] * len(runs)  # the first stage runs no I
            else:
                assert p["ms"][kind] > 0, (model, seq, unit, kind)
    assert "Qwen3-30B-A3B" in stdout and "layer" in stdout  # the table printed as it went


def test_the_refit_reads_the_file_and_keeps_the_gh100_rates(dry_run):
    path, report, _ = dry_run
    stdout = _main(time_fit, "--measured", path)
    assert "| cpu | Llama-3-8B layer | 16 | F |" in stdout and "launch@cpu" in stdout
    assert "schedc/core/device_rates.py carries this fit" in stdout  # the cpu fits rates of its own
    rows = time_fit.measured_rows([path])
    assert len(rows) == len(MODELS) * len(SEQS) * (2 + 3 + 3)  # the embedding's F and W, the layer's and head's F, I, W


def test_the_fidelity_table_reads_the_file(dry_run):
    path, _, _ = dry_run
    stdout = _main(time_fidelity, "--no-plans", "--measured", path)
    assert "| cpu | Qwen3-30B-A3B layer | 32 | B (count: I+W) |" in stdout
    assert "not judged: the table has no rates for this card" in stdout


def test_the_budget_skips_what_does_not_fit_and_says_so():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the dry run runs: a shared CPU's threads only contend
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            report = gpu_times.run(["Llama-3-8B"], [16, 32], "cpu", budget_s=1e-3)
    finally:
        torch.set_num_threads(threads)
    assert {p["seq"] for p in report["points"]} == {16}  # the first case has no estimate: it runs
    assert [(s["seq"], s["why"].split(":")[0]) for s in report["skipped"]] == [(32, "skipped")]


def _file(tmp_path, scale_layer_f=1.0, models=("Llama-3-8B",), seqs=(4096,)):
    """A file in gpu_times' format whose times are the per-op count at the H200's table rates."""
    points = []
    for model in models:
        config = gpu_times.hf_config(mf.HF, model, "bfloat16")
        for seq in seqs:
            profile = time_fidelity._count(config, seq, "h200")
            for unit in ("embedding", "layer", "head"):
                ms = {k: time_fidelity.unit_ms(profile, unit, k) for k in "FIW"}
                if unit == "layer":
                    ms["F"] *= scale_layer_f
                ms["B"] = ms["I"] + ms["W"]
                points.append({"model": model, "seq": seq, "unit": unit, "config": config, "ms": ms})
    path = tmp_path / f"h200-{scale_layer_f}.json"
    path.write_text(json.dumps({"device": "NVIDIA H200", "points": points}))
    return path


def test_the_target_is_judged_per_unit_and_action_and_names_what_is_missing(tmp_path):
    _, lines = time_fidelity.file_table(_file(tmp_path))
    assert lines[0].endswith("not met") and not any("MISS" in line for line in lines)
    assert any(line.startswith("  not measured in this file:") and "Mistral-7B layer at 1024" in line for line in lines)
    _, lines = time_fidelity.file_table(_file(tmp_path, scale_layer_f=1.25))
    missed = [line for line in lines if "MISS" in line]
    assert len(missed) == 1 and missed[0].startswith("  layer F:") and "20.0%" in missed[0]  # 1 / 1.25 - 1


def test_a_file_at_the_table_rates_refits_to_them(tmp_path):
    rows = time_fit.measured_rows([_file(tmp_path, models=("Llama-3-8B", "Mistral-7B"), seqs=(1024, 8192))])
    assert {r["card"] for r in rows} == {"h200"}
    rates, data = time_fit.fit(rows)
    from schedc.core.device_rates import RATES

    assert abs(rates["gemm_f"] / RATES["h200"].gemm_f - 1) < 0.05
    assert max(abs(p["residual"]) for p in data if p["source"].startswith(str(tmp_path))) < 0.05


def test_a_file_that_is_not_one_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert time_fit.main(["--table", "--measured", str(bad)]) == 2
    assert time_fidelity.main(["--no-plans", "--measured", str(bad)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("is not a file benchmarks/gpu_times.py --json wrote" in line for line in err)
