"""A count calibrated by a measured per-unit profile (schedc.model_costs.calibration): the measured
model's own units get the measured seconds, a deeper model's units the same factors, memory as
counted, the factors and the file's hash recorded, and every wrong file refused in one line."""

import hashlib
import json

import pytest

import schedc
from schedc import cli
from schedc.core.costs import Profile
from schedc.errors import SchedcError
from schedc.model_costs import read_hf_config

CONFIG = {"model_type": "llama", "num_hidden_layers": 6, "hidden_size": 256, "intermediate_size": 512,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "torch_dtype": "bfloat16",
          "tie_word_embeddings": False}
SEQ = 128
FACTORS = {"F": 0.7, "I": 0.85, "W": 0.6}  # what the GPU runs faster than the count (measured / counted)
FIELDS = {"F": "forward", "I": "backward_input", "W": "backward_weight"}


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    return path


def measured(config, layers=2, factors=FACTORS, *, mode="none", bookkeeping=0.0, names="hf", **count):
    """A profile as `schedc profile --units --model` writes it on a GPU: the units of the model
    truncated to `layers`, each action `factors` times the count's; twice the counted memory (a
    measurement of other bytes, which calibration must not take); the embedding's I `bookkeeping`
    seconds, as torch's runtime records the first stage's (its whole backward in W)."""
    shape = {**read_hf_config(config), "layers": layers}
    own = schedc.count_profile(shape, seq=SEQ, names=names, activation_checkpoint=mode, **count)
    stages = []
    for i, unit in enumerate(own.stages):
        times = {FIELDS[a]: getattr(unit, FIELDS[a]) * f for a, f in factors.items()}
        if i == 0:
            times["backward_input"] = bookkeeping
        stages.append(unit.model_copy(update={**times, "activation_bytes": 2 * unit.activation_bytes,
                                              "weight_grad_bytes": 2 * unit.weight_grad_bytes}))
    assumes = {"dtype": own.dtype, "optimizer": "adamw", "microbatch_size": own.microbatch_size,
               "static_bytes_per_param": own.assumes["static_bytes_per_param"], "activation_checkpoint": mode,
               "split_backward": own.assumes["split_backward"], "dp_shard": 1, "tp": 1, "torch": "2.14.1",
               "seq_len": SEQ}
    return Profile(stages=stages, comm=0.0, runtime="torch", device="cuda:0 (NVIDIA H200)",
                   model=f"hf-llama/{len(stages)} units", microbatch_size=own.microbatch_size, dtype=own.dtype,
                   torch_version="2.14.1+cu130", assumes=assumes)


def saved(profile, tmp_path, name="m.json"):
    path = tmp_path / name
    profile.save(path)
    return path


def seconds(unit):
    return [getattr(unit, FIELDS[a]) for a in "FIW"]


def test_the_measured_model_counted_and_calibrated_gets_the_measured_seconds(config, tmp_path):
    m = measured(config)
    shape = {**read_hf_config(config), "layers": 2}
    calibrated = schedc.count_profile(shape, seq=SEQ, names="hf", calibrate=m)
    for mine, theirs in zip(calibrated.stages, m.stages):
        assert seconds(mine)[0] == pytest.approx(seconds(theirs)[0], rel=1e-12)
        assert sum(seconds(mine)) == pytest.approx(sum(seconds(theirs)), rel=1e-12)
    for mine, theirs in zip(calibrated.stages[1:], m.stages[1:]):  # the first unit's I is torch's bookkeeping
        assert seconds(mine) == pytest.approx(seconds(theirs), rel=1e-12)


def test_a_deeper_model_gets_the_factors_on_every_unit_and_keeps_its_memory(config, tmp_path):
    path = saved(measured(config, bookkeeping=1e-6), tmp_path)
    counted = schedc.count_profile(config, seq=SEQ, names="hf")
    calibrated = schedc.count_profile(config, seq=SEQ, names="hf", calibrate=path)
    assert calibrated.n_stages == counted.n_stages == 8
    for unit, before in zip(calibrated.stages[1:], counted.stages[1:]):
        ratios = [a / b for a, b in zip(seconds(unit), seconds(before))]
        assert ratios == pytest.approx([FACTORS[a] for a in "FIW"], rel=1e-12)
    # the embedding's measured I (torch's bookkeeping) and W are compared with its counted W as one B
    emb, emb_count = calibrated.stages[0], counted.stages[0]
    assert emb.backward_input == emb_count.backward_input == 0
    b = (1e-6 + FACTORS["W"] * emb_count.backward_weight) / emb_count.backward_weight
    assert emb.backward_weight == pytest.approx(b * emb_count.backward_weight, rel=1e-12)
    assert calibrated.assumes["calibrated"]["factors"]["embedding"] == pytest.approx({"F": FACTORS["F"], "B": b})
    for unit, before in zip(calibrated.stages, counted.stages):
        for field in ("activation_bytes", "weight_grad_bytes", "static_bytes", "transient_bytes", "modules"):
            assert getattr(unit, field) == getattr(before, field), field
    for field in ("boundary_bytes", "reserve_bytes", "comm", "microbatch_size", "dtype"):
        assert getattr(calibrated, field) == getattr(counted, field), field


def test_assumes_records_the_factors_the_file_its_sha256_device_and_torch(config, tmp_path):
    path = saved(measured(config), tmp_path, "h200_units.json")
    calibrated = schedc.count_profile(config, seq=SEQ, names="hf", calibrate=str(path))
    record = calibrated.assumes["calibrated"]
    assert record["file"] == "h200_units.json"
    assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert record["device"] == "cuda:0 (NVIDIA H200)" and record["torch"] == "2.14.1"
    assert record["layers"] == 2 and record["activation_checkpoint"] == "none"
    assert record["factors"]["layer"] == pytest.approx(FACTORS)
    assert record["factors"]["head"] == pytest.approx(FACTORS)
    assert "NVIDIA H200" in calibrated.device and any(n.startswith("times calibrated by h200_units.json")
                                                      for n in calibrated.notes)
    # what the profile file keeps, read back
    again = Profile.load(saved(calibrated, tmp_path, "calibrated.json"))
    assert again.assumes["calibrated"] == json.loads(json.dumps(record))


def test_a_head_counted_with_its_backward_in_f_is_compared_whole(config):
    # torchtitan's chunked loss runs the head's backward inside F: the measured head's F, I and W as one
    m = measured(config)
    calibrated = schedc.count_profile(config, seq=SEQ, calibrate=m)  # torchtitan's names and code
    counted = schedc.count_profile(config, seq=SEQ)
    head, before = calibrated.stages[-1], counted.stages[-1]
    assert before.backward_input == before.backward_weight == 0
    assert head.forward == pytest.approx(sum(seconds(m.stages[-1])), rel=1e-12)
    assert list(calibrated.assumes["calibrated"]["factors"]["head"]) == ["F+B"]


def test_per_op_checkpointed_layers_compare_their_whole_backward(config):
    m = measured(config, mode="selective")
    calibrated = schedc.count_profile(config, seq=SEQ, names="hf", activation_checkpoint="selective", calibrate=m)
    counted = schedc.count_profile(config, seq=SEQ, names="hf", activation_checkpoint="selective")
    factors = calibrated.assumes["calibrated"]["factors"]["layer"]
    assert set(factors) == {"F", "B"}
    layer, before = calibrated.stages[1], counted.stages[1]
    whole = (FACTORS["I"] * before.backward_input + FACTORS["W"] * before.backward_weight) / before.backward
    assert factors["B"] == pytest.approx(whole) and layer.backward == pytest.approx(whole * before.backward)


def test_tensor_parallel_collectives_stay_as_counted(config):
    m = measured(config)
    calibrated = schedc.count_profile(config, seq=SEQ, names="hf", tp=2, calibrate=m)
    counted = schedc.count_profile(config, seq=SEQ, names="hf", tp=2)
    free = schedc.count_profile(config, seq=SEQ, names="hf", tp=2, tp_latency=0.0, tp_bandwidth=1e300)
    layer, before, compute = calibrated.stages[1], counted.stages[1], free.stages[1]
    collective = before.forward - compute.forward
    assert collective > 0
    assert layer.forward == pytest.approx(FACTORS["F"] * compute.forward + collective, rel=1e-9)


def _refusal(args, capsys):
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def _profile_args(config, path, tmp_path, *extra):
    return ["profile", "--units", "--config", str(config), "--seq", str(SEQ), "--names", "hf", "--calibrate",
            str(path), "-o", str(tmp_path / "out.json"), *extra]


@pytest.mark.parametrize("case, says", [
    ("seq", "measured at sequence length 64 (field assumes.seq_len), the count at 128"),
    ("mbs", "measured at microbatch size 2 (field microbatch_size), the count at 1"),
    ("dtype", "measured at dtype 'float32' (field dtype), the count at 'bfloat16'"),
    ("no seq", "field assumes.seq_len is missing"),
    ("no layer", "it has no layer unit"),
    ("no head", "it has no head unit"),
    ("per stage", "unit 0 names no modules: it is not a per-unit profile"),
    ("merged", "unit 1 holds model.layers.0, model.layers.1, not one layer"),
    ("counted", "is a counted profile"),
    ("factor", "the embedding's F takes"),
    ("other model", "its layers hold"),
    ("no mode", "field assumes.activation_checkpoint is None"),
])
def test_a_wrong_measured_profile_is_refused_in_one_line_naming_the_flag(case, says, config, tmp_path, capsys):
    m = measured(config)
    a = dict(m.assumes)
    if case == "seq":
        m = m.model_copy(update={"assumes": {**a, "seq_len": 64}})
    elif case == "mbs":
        m = m.model_copy(update={"microbatch_size": 2})
    elif case == "dtype":
        m = m.model_copy(update={"dtype": "float32"})
    elif case == "no seq":
        m = m.model_copy(update={"assumes": {k: v for k, v in a.items() if k != "seq_len"}})
    elif case == "no layer":
        m = m.model_copy(update={"stages": [m.stages[0], m.stages[-1]], "comm": 0.0})
    elif case == "no head":
        m = m.model_copy(update={"stages": m.stages[:-1]})
    elif case == "per stage":
        m = m.model_copy(update={"stages": [u.model_copy(update={"modules": None}) for u in m.stages]})
    elif case == "merged":
        merged = m.merge([1, 2, 1])
        m = merged.model_copy(update={"stages": [merged.stages[0], merged.stages[1], merged.stages[2]]})
    elif case == "counted":
        m = schedc.count_profile({**read_hf_config(config), "layers": 2}, seq=SEQ, names="hf")
    elif case == "factor":
        m = measured(config, factors={"F": 40.0, "I": 1.0, "W": 1.0})
    elif case == "other model":
        wide = tmp_path / "wide.json"
        wide.write_text(json.dumps({**CONFIG, "hidden_size": 320}))
        m = measured(wide)
    elif case == "no mode":
        m = m.model_copy(update={"assumes": {k: v for k, v in a.items() if k != "activation_checkpoint"}})
    path = saved(m, tmp_path)
    err = _refusal(_profile_args(config, path, tmp_path), capsys)
    assert err.startswith(f"schedc profile: error: --calibrate {path}: "), err
    assert says in err, err
    assert not (tmp_path / "out.json").exists()


def test_a_file_that_is_not_a_profile_is_refused_naming_the_flag(config, tmp_path, capsys):
    junk = tmp_path / "junk.json"
    junk.write_text('{"stages": []}')
    err = _refusal(_profile_args(config, junk, tmp_path), capsys)
    assert err.startswith(f"schedc profile: error: --calibrate {junk}: field 'format' must be"), err
    err = _refusal(_profile_args(config, tmp_path / "none.json", tmp_path), capsys)
    assert err.startswith("schedc profile: error: --calibrate ") and "no such file" in err, err


def test_python_names_the_keyword_and_the_measured_route_refuses_the_flag(config, tmp_path, capsys):
    m = measured(config)
    with pytest.raises(SchedcError, match=r"^calibrate: measured at sequence length 128"):
        schedc.count_profile(config, seq=256, names="hf", calibrate=m)
    with pytest.raises(SchedcError, match=r"^calibrate must be a measured per-unit Profile"):
        schedc.count_profile(config, seq=SEQ, calibrate=3)
    err = _refusal(["profile", "--units", "--calibrate", str(saved(m, tmp_path)), "-o", str(tmp_path / "o.json")],
                   capsys)
    assert "--calibrate describes an arithmetic profile" in err


def test_profile_and_plan_take_the_flag_end_to_end(config, tmp_path, capsys):
    path = saved(measured(config), tmp_path)
    out = tmp_path / "units.json"
    assert cli.main(["profile", "--units", "--config", str(config), "--seq", str(SEQ), "--names", "hf",
                     "--calibrate", str(path), "-o", str(out)]) == 0
    assert Profile.load(out).assumes["calibrated"]["factors"]["layer"] == pytest.approx(FACTORS)
    csv = tmp_path / "plan.csv"
    assert cli.main(["plan", "--config", str(config), "--seq", str(SEQ), "--for", "nemo", "--calibrate", str(path),
                     "--ranks", "2", "--mb", "4", "--memory", "none", "--time-limit", "3", "--quiet",
                     "-o", str(csv)]) == 0
    capsys.readouterr()
    report = json.loads(csv.with_suffix(".json").read_text())
    assert report["assumes"]["calibrated"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    err = _refusal(["plan", "--profile", str(out), "--calibrate", str(path), "--ranks", "2", "--mb", "4",
                    "--memory", "none", "-o", str(csv)], capsys)
    assert "--calibrate sets the counted route's run: give --config" in err
