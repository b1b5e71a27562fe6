"""The command line as a user meets it: one-line errors, --debug, pipes, the set-up command."""

import subprocess
import sys

import pytest

from schedc import cli


def _schedc(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "schedc.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_default_compile_writes_an_optimal_schedule(tmp_path):
    # the README's first command, on its defaults
    out = _schedc("compile", "--stages", "8", "--mb", "16", "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "status optimal" in out.stdout and "makespan 55" in out.stdout
    assert (tmp_path / "schedule.csv").exists() and (tmp_path / "schedule.json").exists()


def test_error_is_one_line_and_debug_shows_the_traceback(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("0F0,0B0x\n")
    out = _schedc("validate", str(bad))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "bad.csv" in out.stderr and "Traceback" not in out.stderr
    out = _schedc("--debug", "validate", str(bad))
    assert out.returncode != 0 and "Traceback" in out.stderr


def test_closed_pipe_is_not_an_error(tmp_path):
    csv = tmp_path / "big.csv"
    assert cli.main(["baseline", "zb-h1", "--stages", "32", "--mb", "64", "-o", str(csv)]) == 0
    # like `schedc simulate big.csv big.csv | head -1`: the reader leaves while schedc still prints
    proc = subprocess.Popen(f"{sys.executable} -m schedc.cli simulate {csv} {csv} | head -1 >/dev/null; "
                            "echo ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    assert out.strip() == "0" and err == ""


@pytest.mark.parametrize("argv", [["compile", "--stages", "4", "--mb", "8", "--memory", "0.1p"],
                                  ["compile", "--stages", "4", "--mb", "8", "--costs", "1,1"],
                                  ["simulate", "missing.csv"]])
def test_bad_requests_exit_2_without_output_files(tmp_path, argv, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"schedc {argv[0]}: error: ") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
