"""The measured route takes the same run-settings object as the counted route: its assumes come
from that object, the measurement's knobs are a separate object, and `schedc profile` builds one
RunSettings for either route from its flags."""

import json

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import schedc  # noqa: E402
from schedc import cli  # noqa: E402
from schedc.core.settings import RunSettings  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.model_costs import OPTIMIZER_STATES  # noqa: E402
from schedc.runtime.profiling.assemble import profile_stages  # noqa: E402
from schedc.runtime.profiling.measurement import Measurement  # noqa: E402
from schedc.runtime.profiling.memory import optimizer_factor  # noqa: E402


def _stages():
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(8, 8), nn.ReLU()), nn.Linear(8, 1)]


def _loss(y, t):
    return (y - t).pow(2).mean()


def test_a_measured_profile_records_the_settings_object_as_its_assumes():
    run = RunSettings(seq=64, microbatch_size=3, optimizer="sgd-momentum", optimizer_bytes_per_param=8.0,
                      grad_bytes_per_param=4.0, reserve_bytes=2**20)
    p = profile_stages(_stages(), torch.randn(3, 8), _loss, torch.randn(3, 1), settings=run,
                       measurement=Measurement(warmup=0, repeats=1, comm=0.5))
    a = p.assumes
    assert (a["seq_len"], a["microbatch_size"], a["optimizer"], a["dtype"]) == (64, 3, "sgd-momentum", "float32")
    assert (a["optimizer_bytes_per_param"], a["grad_bytes_per_param"], a["reserve_bytes"]) == (8.0, 4.0, 2**20)
    # weight (fp32) + the stated fp32 gradient + the stated optimizer bytes, per parameter
    assert a["static_bytes_per_param"] == 4 + 4 + 8
    assert p.microbatch_size == 3 and p.reserve_bytes == 2**20 and p.comm == 0.5


def test_keywords_go_over_the_objects_and_an_unknown_one_is_one_line():
    stages, sample, target = _stages(), torch.randn(2, 8), torch.randn(2, 1)
    said = []
    p = profile_stages(stages, sample, _loss, target, settings=RunSettings(optimizer="adamw"),
                       measurement=Measurement(repeats=9), repeats=1, warmup=0, optimizer="none",
                       comm_latency=1e-3, progress=said.append)
    assert p.assumes["optimizer"] == "none" and p.comm == pytest.approx([1e-3])
    assert "profiling stage 1/2 on cpu (0 warm-up + 1 runs)" in said
    # without settings or microbatch_size only the sample says how many sequences ran: not recorded
    assert p.assumes["microbatch_size"] == 1
    bare = profile_stages(stages, sample, _loss, target, warmup=0, repeats=1)
    assert "microbatch_size" not in bare.assumes and bare.microbatch_size is None
    with pytest.raises(SchedcError, match=r"^profile_stages: unknown keyword 'seq_len'; it takes the fields of "
                                          r"RunSettings"):
        profile_stages(stages, sample, _loss, target, seq_len=16)
    with pytest.raises(SchedcError, match=r"^profile_stages: settings must be a schedc.core.settings.RunSettings, "
                                          r"got dict"):
        profile_stages(stages, sample, _loss, target, settings={"seq": 16})


def test_the_measured_and_counted_routes_hold_the_same_optimizer_state():
    assert all(optimizer_factor(name) == states for name, states in OPTIMIZER_STATES.items())
    assert optimizer_factor(None) == 0
    with pytest.raises(SchedcError, match="optimizer must be one of adamw, adam"):
        optimizer_factor("adagrad")


def test_schedc_profile_config_counts_what_the_one_settings_object_counts(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                                  "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                                  "vocab_size": 100, "torch_dtype": "bfloat16"}))
    argv = ["--seq", "32", "--mbs", "2", "--ac", "full,none", "--optimizer", "sgd", "--dp-shard", "2",
            "--for", "torchtitan", "--reserve", "1GiB", "--comm-bandwidth", "25GB/s", "--flops", "3e14"]
    assert cli.main(["profile", "--units", "--config", str(config), *argv, "-o", str(tmp_path / "u.json")]) == 0
    capsys.readouterr()
    run = RunSettings(seq=32, microbatch_size=2, activation_checkpoint=["full", "none"], optimizer="sgd",
                      dp_shard=2, framework="torchtitan", reserve_bytes=2**30, bandwidth=25e9,
                      flops_per_second=3e14)
    written = json.loads((tmp_path / "u.json").read_text())
    counted = json.loads(schedc.count_profile(str(config), settings=run).model_dump_json(exclude_none=True))
    for d in (written, counted):
        d.pop("created", None)
    assert written == counted
    assert written["assumes"]["dp_shard"] == 2 and written["assumes"]["optimizer"] == "sgd"
