"""The type checker (pyproject.toml's [tool.mypy]) passes over the package: CI installs .[dev],
which brings mypy; without mypy the test skips. The modules listed under the "remaining" override
are not checked yet; every other module must check with zero errors."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_passes(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[dev]')")
    # the module form runs the mypy that this interpreter has; a fresh cache keeps the run
    # independent of what an earlier run (or another checkout) left in .mypy_cache
    out = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
