"""An error of the emulate Python API names itself ("emulate: ..."), as a program calling it needs;
the command line prints it once after its own "schedc emulate: error:", not "... error: emulate: ..."."""

import pytest

pytest.importorskip("torch")

from schedc import cli  # noqa: E402
from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.core.costs import Profile  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.io.csvio import write_csv  # noqa: E402
from schedc.runtime import launch as launcher  # noqa: E402
from schedc.runtime.emulate import emulate  # noqa: E402


@pytest.fixture
def csv(tmp_path, monkeypatch):
    write_csv(make_baseline("1f1b", 2, 4), tmp_path / "a.csv")
    monkeypatch.chdir(tmp_path)
    return "a.csv"


@pytest.mark.parametrize("argv, kwargs, line", [
    (["--scale", "0"], {"scale": 0}, "--scale must be a finite number > 0, got 0.0"),
    (["--steps", "0"], {"steps": 0}, "need --steps >= 1, got 0"),
    (["--warmup", "-1"], {"warmup": -1}, "need --warmup >= 0, got -1"),
])
def test_a_bad_setting_is_one_line_with_one_prefix(csv, monkeypatch, capsys, argv, kwargs, line):
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: pytest.fail("ranks were started"))
    assert cli.main(["emulate", csv, "--costs", "1,1,1", *argv]) == 2
    assert capsys.readouterr().err == f"schedc emulate: error: {line}\n"
    with pytest.raises(SchedcError) as e:  # the Python API's message still says whose it is
        emulate([csv], Profile.uniform(2), **{"scale": 0.001, **kwargs})
    assert str(e.value).startswith("emulate: ")


def test_a_failing_rank_is_one_line_with_one_prefix(csv, monkeypatch, capsys):
    def failing(*args, label="launch", **kwargs):
        raise launcher.LaunchError(f"{label}: rank 1: RuntimeError: boom", 1, "the log's end")

    monkeypatch.setattr(launcher, "launch", failing)
    assert cli.main(["emulate", csv, "--costs", "1,1,1", "--steps", "1"]) == 2
    assert capsys.readouterr().err == "schedc emulate: error: rank 1: RuntimeError: boom\n"
    with pytest.raises(launcher.LaunchError, match=r"^emulate: rank 1: RuntimeError: boom$"):
        emulate([csv], Profile.uniform(2), scale=0.001, steps=1)


def test_calibrate_s_errors_have_one_prefix_too(csv, tmp_path, capsys):
    Profile.uniform(2, 0.01, 0.01, 0.01).save(tmp_path / "p.json")
    assert cli.main(["calibrate", csv, "--profile", "p.json", "--mbs", "2", "--steps", "0"]) == 2
    assert capsys.readouterr().err == "schedc calibrate: error: --steps must be between 1 and 10000, got 0\n"
