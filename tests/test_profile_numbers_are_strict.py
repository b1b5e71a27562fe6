"""A profile's times, bytes and counts are JSON numbers: `true` or `"1"` where a number belongs is a
mistake (a hand edit, another tool's output) that is refused, naming the file and the field."""

import json
import subprocess
import sys

import pytest

from schedc import cli
from schedc.core.baselines import make_baseline
from schedc.core.costs import Profile
from schedc.errors import SchedcError
from schedc.io import csvio

_STAGE = {"forward": 0.01, "backward_input": 0.01, "backward_weight": 0.005, "activation_bytes": 1000}


def _profile(tmp_path, stage=None, **top):
    data = {"format": "schedc.profile/v1", "stages": [{**_STAGE, **(stage or {})}, _STAGE], **top}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("stage, top, field, bad", [
    ({"forward": True}, {}, "stages[0].forward", "True"),
    ({"backward_input": "1"}, {}, "stages[0].backward_input", "'1'"),
    ({"activation_bytes": False}, {}, "stages[0].activation_bytes", "False"),
    ({"static_bytes": "1e9"}, {}, "stages[0].static_bytes", "'1e9'"),
    ({"weight_grad_bytes": True}, {}, "stages[0].weight_grad_bytes", "True"),
    ({"transient_bytes": {"F": "5"}}, {}, "stages[0].transient_bytes.F", "'5'"),
    ({}, {"comm": True}, "comm", "True"),
    ({}, {"comm": ["0.1"]}, "comm", "'0.1'"),
    ({}, {"boundary_bytes": "100"}, "boundary_bytes", "'100'"),
    ({}, {"reserve_bytes": True}, "reserve_bytes", "True"),
    ({}, {"microbatch_size": "4"}, "microbatch_size", "'4'"),
    ({}, {"microbatch_size": True}, "microbatch_size", "True"),
])
def test_a_boolean_or_string_where_a_number_belongs_is_refused_naming_the_field(tmp_path, stage, top, field, bad):
    path = _profile(tmp_path, stage, **top)
    with pytest.raises(SchedcError) as e:
        Profile.load(path)
    message = str(e.value)
    assert message.startswith(f"{path}: field {field}") and "expected a number" in message and bad in message
    assert "\n" not in message


def test_the_cli_says_it_in_one_line_with_exit_2(tmp_path):
    path = _profile(tmp_path, {"forward": True})
    csvio.write_csv(make_baseline("1f1b", 2, 4), tmp_path / "s.csv")
    out = subprocess.run([sys.executable, "-m", "schedc.cli", "simulate", "s.csv", "--profile", path.name],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.splitlines() == ["schedc simulate: error: p.json: field stages[0].forward: expected a number, "
                                       "not true or false (got True)"]


def test_integers_and_floats_still_load(tmp_path):
    path = _profile(tmp_path, {"forward": 1, "activation_bytes": 10**12, "transient_bytes": {"F": 7}},
                    comm=[0], boundary_bytes=4096, reserve_bytes=0, microbatch_size=4)
    profile = Profile.load(path)
    assert profile.stages[0].forward == 1.0 and profile.stages[0].activation_bytes == 1e12
    assert profile.comm == [0.0] and profile.microbatch_size == 4


def test_a_profile_schedc_profile_writes_loads_again(tmp_path, capsys):
    out = tmp_path / "units.json"
    assert cli.main(["profile", "--units", "--flops", "100e12", "--layers", "2", "--hidden", "64", "--heads", "4",
                     "--vocab", "256", "--seq", "32", "--mbs", "2", "-o", str(out)]) == 0
    written = Profile.load(out)
    assert len(written.stages) == 4 and written.microbatch_size == 2
    plan = tmp_path / "plan.csv"
    assert cli.main(["plan", "--profile", str(out), "--ranks", "2", "--mb", "4", "--memory", "none",
                     "--time-limit", "3", "--quiet", "-o", str(plan)]) == 0
    assert Profile.load(tmp_path / "plan.profile.json").n_stages == 2
