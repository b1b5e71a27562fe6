"""Measured per-unit profiles under activation checkpointing (`schedc profile --units --ac MODE`),
and `schedc plan --ac auto` from them."""

import json
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _dist import ROOT  # noqa: E402

from schedc import cli  # noqa: E402
from schedc.core.costs import AC_MODES, Profile  # noqa: E402
from schedc.core.settings import RunSettings  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.runtime.checkpointing import planned_modes  # noqa: E402
from schedc.runtime.models import GPTConfig  # noqa: E402
from schedc.runtime.profiling.gpt import profile_gpt  # noqa: E402
from schedc.runtime.profiling.units import measure_units_ac  # noqa: E402
from schedc.runtime.user_model import split_by_fqns, units_from_split  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))

HF = f"{ROOT / 'examples' / 'hf_causal_lm.py'}:stages"
SHAPE = ["--layers", "2", "--mbs", "2", "--seq", "16"]
QUICK = ["--warmup", "0", "--repeats", "2"]


pytestmark = pytest.mark.usefixtures("keep_torch_threads")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One measured per-unit profile per mode of one tiny Hugging Face Llama."""
    d = tmp_path_factory.mktemp("ac")
    for mode in AC_MODES:
        assert cli.main(["profile", "--units", "--model", HF, *SHAPE, *QUICK, "--ac", mode,
                         "-o", str(d / f"{mode}.json")]) == 0
    return d, {mode: Profile.load(d / f"{mode}.json") for mode in AC_MODES}


def test_per_op_layers_hold_less_than_none_and_more_than_full(measured):
    _, p = measured
    for mode in ("light", "selective"):
        for k in (1, 2):  # the layer units
            held = p[mode].stages[k].activation_bytes
            assert p["full"].stages[k].activation_bytes < held < p["none"].stages[k].activation_bytes, mode
    # the embedding and the head are never checkpointed: their bytes are the none profile's
    for mode in AC_MODES:
        for k in (0, 3):
            assert p[mode].stages[k].activation_bytes == p["none"].stages[k].activation_bytes


def test_assumes_record_the_mode_and_whether_the_backward_splits(measured):
    _, p = measured
    for mode in AC_MODES:
        assert p[mode].assumes["activation_checkpoint"] == mode
        assert p[mode].assumes["split_backward"] is (mode in ("none", "full"))
        assert p[mode].assumes["seq_len"] == 16
    assert any("checkpointed light (per op)" in n and "I = B - W" in n for n in p["light"].notes)


def _hf_units():
    from hf_causal_lm import stages

    made = stages(2, 2, layers=2, seq_len=16)
    names, shared = units_from_split(made["split"])
    return split_by_fqns(made["model"], [n + shared for n in names]), names, made


def test_per_op_w_is_the_layer_without_checkpointing_and_i_plus_w_the_measured_b():
    modules, names, made = _hf_units()
    got = measure_units_ac(modules, made["sample"], made["loss_fn"], made["target"], "selective", unit_names=names,
                           warmup=0, repeats=2)
    none, sel = got["none"], got["selective"]
    for k in (1, 2):
        assert sel[k].backward_weight.samples == none[k].backward_weight.samples
        b, i, w = sel[k].backward_full.median, sel[k].backward_input.median, sel[k].backward_weight.median
        assert i + w == pytest.approx(b, rel=1e-9) or (i == pytest.approx(1e-7) and b < w)
        # comparable with the counted route: held I..W is F's plus what the split backward adds
        # without checkpointing; I's transient is B's peak above that
        rise = none[k].weight_grad_bytes - none[k].activation_bytes
        assert sel[k].weight_grad_bytes == sel[k].activation_bytes + rise
        assert sel[k].transient["I"] == max(0, sel[k].transient["B"] - rise)
    # the layer blocks were checkpointed in place with the runtime's code
    assert modules[1].get_submodule("model.layers.0")._schedc_ac == "selective"
    assert getattr(modules[0].get_submodule("model.embed_tokens"), "_schedc_ac", "none") == "none"


def test_plan_ac_auto_from_measured_profiles_names_a_mode_per_stage(measured, tmp_path):
    d, _ = measured
    plan_args = ["--ranks", "2", "--mb", "4", "--memory", "1.37MiB", "--time-limit", "2", "--budget", "work",
                 "--quiet"]
    # without checkpointing, under torch's split backward, nothing fits this cap: the plan must
    # checkpoint somewhere or run some stage's backward whole (B frees the graph I keeps for W);
    # which of the two is shorter follows the measured times
    assert cli.main(["plan", "--profile", str(d / "none.json"), *plan_args, "-o", str(tmp_path / "n.csv")]) == 2
    profiles = [f"--profile={m}={d / f'{m}.json'}" for m in AC_MODES]
    assert cli.main(["plan", "--ac", "auto", *profiles, *plan_args, "-o", str(tmp_path / "plan.csv")]) == 0
    modes = planned_modes(tmp_path / "plan.json")
    whole = any("B" in cell for cell in (tmp_path / "plan.csv").read_text().replace("\n", ",").split(","))
    assert len(modes) == 2 and all(m in AC_MODES for m in modes) and (any(m != "none" for m in modes) or whole)
    report = json.loads((tmp_path / "plan.json").read_text())
    assert report["partition"][1][-2:] == ["model.norm", "lm_head"]


def test_plan_refuses_measured_profiles_of_different_models(measured, tmp_path, capsys):
    d, _ = measured
    other = tmp_path / "light-wide.json"
    assert cli.main(["profile", "--units", "--model", HF, *SHAPE, "--hidden", "32", *QUICK, "--ac", "light",
                     "-o", str(other)]) == 0
    capsys.readouterr()
    argv = ["plan", "--ac", "auto", f"--profile=none={d / 'none.json'}", f"--profile=light={other}", "--ranks", "2",
            "--mb", "4", "--memory", "none", "--time-limit", "2", "-o", str(tmp_path / "p.csv")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the light profile has model" in err and "hidden=32" in err, err
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.parametrize("flags, named", [
    (["--ac", "light"], "--ac light: a measured stage runs torch's split backward"),
    (["--units", "--ac", "lihgt"], "--ac: 'lihgt' is not a mode; use one of none, light, selective, full"),
    (["--units", "--ac", "light,full"], "--ac: a measured profile takes one mode for every layer"),
    (["--units", "--ac", "full", "--concurrent", "2"], "--ac full: --concurrent measures without"),
])
def test_a_bad_measured_ac_is_one_line_naming_the_flag(tmp_path, capsys, flags, named):
    out = tmp_path / "u.json"
    argv = ["profile", "--layers", "2", "--hidden", "16", "--heads", "2", "--seq", "8", "--vocab", "32", *flags,
            "-o", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("schedc profile: error: ") and err.count("\n") == 1 and named in err, err
    assert list(tmp_path.iterdir()) == []


def test_python_stage_route_refuses_per_op_naming_the_keyword():
    cfg = GPTConfig(vocab_size=32, hidden=16, layers=2, heads=2, seq_len=8)
    with pytest.raises(SchedcError, match=r"activation_checkpoint 'light'.*units=True"):
        profile_gpt(cfg, 2, 2, warmup=0, repeats=1, settings=RunSettings(activation_checkpoint="light"))


def test_gpt_units_take_a_per_op_mode():
    cfg = GPTConfig(vocab_size=32, hidden=16, layers=2, heads=2, seq_len=8)
    none = profile_gpt(cfg, 1, 2, warmup=0, repeats=1, units=True)
    light = profile_gpt(cfg, 1, 2, warmup=0, repeats=1, units=True,
                        settings=RunSettings(activation_checkpoint="light"))
    assert light.assumes["split_backward"] is False and light.assumes["activation_checkpoint"] == "light"
    assert light.stages[1].activation_bytes < none.stages[1].activation_bytes
    assert [u.modules for u in light.stages] == [u.modules for u in none.stages]


def test_python_units_take_one_mode_for_every_layer():
    cfg = GPTConfig(vocab_size=32, hidden=16, layers=2, heads=2, seq_len=8)
    with pytest.raises(SchedcError, match=r"^activation_checkpoint: a measured per-unit profile takes one mode"):
        profile_gpt(cfg, 1, 2, warmup=0, repeats=1, units=True,
                    settings=RunSettings(activation_checkpoint=["none", "light", "none", "none"]))


def test_a_model_s_stages_take_full_on_the_stage_route(tmp_path):
    # the stage route times I and W apart, which full runs: each stage's blocks are checkpointed
    out = {}
    for mode in ("none", "full"):
        out[mode] = tmp_path / f"{mode}.json"
        assert cli.main(["profile", "--model", HF, "--stages", "2", *SHAPE, *QUICK, "--ac", mode,
                         "-o", str(out[mode])]) == 0
    none, full = Profile.load(out["none"]), Profile.load(out["full"])
    assert full.assumes["activation_checkpoint"] == "full" and full.assumes["split_backward"] is True
    for a, b in zip(none.stages, full.stages):
        assert b.activation_bytes < a.activation_bytes
