"""A plan re-walked with per-unit bytes measured on a GPU (benchmarks/plan_rewalk.py with the H100's
bytes in benchmarks/data): today's counted plan fits and stays within 5% of what it reports; the
textbook count's plan does not fit; measured bytes, not counted ones, drive the re-walk."""

import json

import pytest
from _benchmarks import load_benchmark

from schedc.errors import SchedcError

GiB = 2.0 ** 30
CASE = ("Llama-3-8B", 8, 8, 4096, "80GiB")


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("plan_rewalk")


@pytest.fixture(scope="module")
def data(bench):
    return json.loads(bench.MEASURED.read_text())


def test_a_counted_plan_fits_when_re_walked_with_the_gpus_bytes(bench, data, tmp_path):
    reserve = data["outside_allocator_bytes"]
    label, peak, rank, there, top, worst, worst_units, step = bench.case_row(CASE, "none", data, reserve, 1.0,
                                                                             tmp_path)
    assert top <= 80 * GiB and step > 0
    assert abs(worst) <= 0.05 and abs(worst_units) <= 0.05
    assert there == pytest.approx(peak, rel=0.01)  # the count's reserve is the most the GPU held


def test_the_textbook_counts_plan_does_not_fit_the_gpu(bench, data, tmp_path):
    """What the re-walk is for: the count schedc planned with before it counted what the code
    keeps reports a plan under 40 GiB that the measured bytes put far above it."""
    reserve = data["outside_allocator_bytes"]
    _, peak, _, _, top, worst, _, _ = bench.case_row(("Llama-3-8B", 8, 32, 4096, "40GiB"), "none", data, reserve,
                                                     1.0, tmp_path, textbook=True)
    assert peak <= 40 * GiB < top and worst > 0.2


def test_the_re_walk_reads_the_measured_bytes(bench, data, tmp_path):
    counted = bench.counted_units("Llama-3-8B", 4096, "none", tmp_path)
    heavier = json.loads(json.dumps(data["models"]["Llama-3-8B"]["units"]))
    heavier["layer"]["none"]["after F"] *= 2
    plain = bench.measured_units(counted, data["models"]["Llama-3-8B"]["units"], "none", 0.0)
    doubled = bench.measured_units(counted, heavier, "none", 0.0)
    assert doubled.stages[1].activation_bytes == 2 * plain.stages[1].activation_bytes
    assert doubled.stages[1].static_bytes == counted.stages[1].static_bytes  # static bytes stay counted
    assert plain.stages[-1].transient_bytes["W"] == data["models"]["Llama-3-8B"]["units"]["norm+head+loss"]["none"][
        "W transient"]


def test_a_mode_the_gpu_could_not_split_is_refused_by_name(bench, data, tmp_path):
    counted = bench.counted_units("Llama-3-8B", 4096, "light", tmp_path)
    with pytest.raises(SchedcError, match=r"no 'I\.\.W' for the layer \(light\)"):
        bench.measured_units(counted, data["models"]["Llama-3-8B"]["units"], "light", 0.0)


def test_gpu_layers_writes_what_the_re_walk_reads():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    gpu_layers = load_benchmark("gpu_layers")
    rows = [("Llama-3-8B", "layer, none", "after F", 1.0, 5.0), ("Llama-3-8B", "embedding", "I..W", 0.0, 3.0),
            ("Llama-3-8B", "layer, full", "F seconds", 1e-3, 2e-3),
            ("Llama-3-8B", "layer, light", "failed", float("nan"), "OutOfMemoryError: ...")]
    assert gpu_layers.measured_units(rows) == {"layer": {"none": {"after F": 5.0}}, "embedding": {"none": {"I..W": 3.0}}}


def test_a_checkpointed_plan_needs_bs_peak_measured(bench, data, tmp_path):
    """The H100's file has no B measured: a full-checkpointing plan, whose layers run B, is not re-walked."""
    with pytest.raises(SchedcError, match=r"no 'B transient' for the layer \(full\)"):
        bench.case_row(CASE, "full", data, data["outside_allocator_bytes"], 1.0, tmp_path)
