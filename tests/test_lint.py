"""The linter's rules (pyproject.toml's [tool.ruff]) hold over the code, and the solver does not
import the front door: CI installs .[dev], which brings ruff; without ruff the lint test skips."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if exe is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    return [exe]


def test_ruff_check_passes():
    out = subprocess.run(_ruff() + ["check", "--no-cache", "schedc", "schedc_entry", "tests", "benchmarks", "examples",
                                    "scripts"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_compiler_imports_nothing_from_the_front_door():
    # with the package root as an empty shell, importing the compiler loads only what it needs:
    # no schedc.api, no CLI command (the version comes from the leaf schedc._version)
    code = ("import os, sys, types; pkg = types.ModuleType('schedc'); pkg.__path__ = [os.path.join(%r, 'schedc')]; "
            "sys.modules['schedc'] = pkg; import schedc.solver.compile; "
            "print(' '.join(m for m in sys.modules if m.startswith('schedc')))" % str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout.split()
    assert "schedc.solver.compile" in loaded and "schedc._version" in loaded
    assert not [m for m in loaded if m in ("schedc.api", "schedc.cli") or m.startswith("schedc.cli")], loaded
