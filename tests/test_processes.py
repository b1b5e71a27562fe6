"""Processes schedc starts and signals it gets: ranks never import from the working directory,
die with their leader (SIGTERM or SIGKILL), and nothing is left in the temp directory; SIGTERM
during a compile writes the best schedule so far like Ctrl-C; CBC leaves no files behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schedc.runtime import launch as launcher

POISON = ("import pathlib\npathlib.Path(__file__).with_suffix('.imported').write_text('')\n"
          "raise SystemExit('POISONED: ' + __file__ + ' was imported from the working directory')\n")


def poisoned_dir(path: Path) -> Path:
    """A directory whose pydantic.py / torch.py would fail loudly (and leave a mark) if imported."""
    path.mkdir(parents=True, exist_ok=True)
    for name in ("pydantic", "torch", "numpy", "pulp"):
        (path / f"{name}.py").write_text(POISON)
    return path


def imported_marks(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.imported"))


def schedc_command() -> list[str]:
    """`schedc` as a user runs it: the console script (its own directory first on sys.path)."""
    script = Path(sys.executable).parent / "schedc"
    return [str(script)] if script.exists() else [sys.executable, "-P", "-m", "schedc.cli"]


def env_with_tmp(tmp: Path) -> dict[str, str]:
    env = launcher.worker_env(threads=None)
    env.update(TMPDIR=str(tmp), TMP=str(tmp))
    return env


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(condition, seconds: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


# ---------------------------------------------------------------- the working directory


def test_python_commands_keep_the_working_directory_off_the_path():
    for cmd in (launcher.python_module("x.y"), launcher.python_code("pass")):
        assert cmd[0] == sys.executable and "-m" not in cmd
        assert ("-P" in cmd) == (sys.version_info >= (3, 11))


@pytest.mark.parametrize("form", ["current", "python3.10"])
def test_ranks_do_not_import_from_the_working_directory(tmp_path, monkeypatch, form):
    pytest.importorskip("torch")
    cwd = poisoned_dir(tmp_path / "work")
    monkeypatch.chdir(cwd)
    # PYTHONPATH=$PYTHONPATH:/x with nothing set: an empty entry, i.e. the working directory
    monkeypatch.setenv("PYTHONPATH", os.pathsep + str(tmp_path / "elsewhere"))
    # the 3.10 form (no -P: the bootstrap drops '' itself) is run here too, so both are pinned
    cmd = (launcher.python_module("schedc.runtime.emulate") if form == "current"
           else [sys.executable, "-c", launcher._RUN_MODULE, "schedc.runtime.emulate"])
    spec = {"runs": [], "steps": 1, "warmup": 0, "overhead_steps": 1}  # imports torch, joins gloo, returns
    assert launcher.launch(cmd, 2, timeout=120, spec=spec, label="emulate") == [[], []]
    assert imported_marks(cwd) == []


def test_emulate_from_a_poisoned_directory_runs_and_names_the_winner(tmp_path):
    pytest.importorskip("torch")
    from schedc.core.baselines import make_baseline
    from schedc.io.csvio import write_csv

    cwd = poisoned_dir(tmp_path / "work")
    write_csv(make_baseline("1f1b", 2, 4), cwd / "1f1b.csv")
    write_csv(make_baseline("zb-h1", 2, 4), cwd / "zb.csv")
    out = subprocess.run([*schedc_command(), "emulate", "1f1b.csv", "zb.csv", "--costs", "1,1,1", "--scale", "0.01",
                          "--steps", "3"], cwd=cwd, env=env_with_tmp(tmp_path), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert imported_marks(cwd) == []
    winner = [line for line in out.stdout.splitlines() if line.startswith("fastest: ")]
    assert len(winner) == 1, out.stdout
    assert winner[0].startswith(("fastest: 1f1b.csv", "fastest: zb.csv"))
    assert ("above the run-to-run spread" in winner[0]) != ("within the run-to-run spread" in winner[0])
    assert list(tmp_path.glob("schedc-launch-*")) == []


# ---------------------------------------------------------------- signals to emulate's leader


def _start_emulate(tmp_path: Path) -> tuple[subprocess.Popen, list[int], Path]:
    """A long emulate (2 ranks) with a private TMPDIR; returns it once both ranks run."""
    from schedc.core.baselines import make_baseline
    from schedc.io.csvio import write_csv

    write_csv(make_baseline("1f1b", 2, 4), tmp_path / "s.csv")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([*schedc_command(), "emulate", "s.csv", "--costs", "1,1,1", "--scale", "0.2",
                             "--steps", "200"], cwd=tmp_path, env=env_with_tmp(tmp), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert wait_until(lambda: len(children(proc.pid)) == 2 and list(tmp.glob("schedc-launch-*/rank1.log")), 120), \
        (proc.poll(), list(tmp.iterdir()))
    time.sleep(1.0)  # well into their start-up (importing torch, joining the group)
    ranks = children(proc.pid)
    assert len(ranks) == 2
    return proc, ranks, tmp


@linux_only
def test_sigterm_to_emulate_ends_its_ranks_and_leaves_no_files(tmp_path):
    pytest.importorskip("torch")
    proc, ranks, tmp = _start_emulate(tmp_path)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    *notice, last = err.splitlines()  # before it: how long the stages would sleep (a long run says so)
    assert last == "schedc emulate: terminated" and out == "", err
    assert all(line.startswith("schedc emulate: the stages sleep about") for line in notice), err
    assert wait_until(lambda: not any(alive(r) for r in ranks), 5), [r for r in ranks if alive(r)]
    assert list(tmp.iterdir()) == []


@linux_only
def test_sigkill_to_emulate_ends_its_ranks_and_the_next_launch_cleans_up(tmp_path):
    pytest.importorskip("torch")
    proc, ranks, tmp = _start_emulate(tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    assert wait_until(lambda: not any(alive(r) for r in ranks), 5), [r for r in ranks if alive(r)]
    (left,) = list(tmp.glob("schedc-launch-*"))  # a killed leader cannot clean up ...
    assert launcher.remove_stale_dirs(str(tmp)) == [left]  # ... the next launch does
    assert list(tmp.iterdir()) == []


def test_a_live_leaders_directory_is_not_taken_for_stale(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with launcher._launch_dir() as mine:
        (tmp_path / "schedc-launch-fresh").mkdir()  # being created: no lock file yet
        assert launcher.remove_stale_dirs(str(tmp_path)) == []
        assert mine.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["schedc-launch-fresh"]


def test_sigterm_in_a_script_calling_launch_cleans_up_and_dies_of_the_signal(tmp_path):
    code = ("from schedc.runtime import launch as L\n"
            "L.launch(L.python_code('import time; time.sleep(3600)'), 2, timeout=600)\n")
    proc = subprocess.Popen([sys.executable, "-P", "-c", code], env=env_with_tmp(tmp_path), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_until(lambda: len(children(proc.pid)) == 2, 60)
    ranks = children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    assert wait_until(lambda: not any(alive(r) for r in ranks), 5)
    assert list(tmp_path.iterdir()) == []


def test_sigterm_while_a_rank_starts_leaves_no_rank_behind(tmp_path):
    # the signal lands inside subprocess.Popen, after the fork (here, always: the second rank's
    # Popen sends it before it returns); that rank is killed with the others all the same
    code = ("import os, signal, subprocess\n"
            "from schedc.runtime import launch as L\n"
            "class Popen(subprocess.Popen):\n"
            "    started = 0\n"
            "    def __init__(self, *args, **kwargs):\n"
            "        super().__init__(*args, **kwargs)\n"
            "        print(self.pid, flush=True)\n"
            "        Popen.started += 1\n"
            "        if Popen.started == 2:\n"
            "            os.kill(os.getpid(), signal.SIGTERM)\n"
            "subprocess.Popen = Popen\n"
            "L.launch(L.python_code('import time; time.sleep(3600)'), 2, timeout=600)\n")
    proc = subprocess.run([sys.executable, "-P", "-c", code], env=env_with_tmp(tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    ranks = [int(line) for line in proc.stdout.split()]
    assert proc.returncode == -signal.SIGTERM and len(ranks) == 2, proc.stderr
    assert wait_until(lambda: not any(alive(r) for r in ranks), 5), [r for r in ranks if alive(r)]
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- compile


@pytest.mark.parametrize("solver", [[], ["--solver", "cbc"]])
def test_sigterm_during_a_compile_writes_the_best_schedule_so_far(tmp_path, solver):
    from schedc.core.validate import validate
    from schedc.io import csvio

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    argv = [*schedc_command(), "compile", "--stages", "16", "--mb", "48", "--comm", "0.25", "--memory", "1.25p",
            "--time-limit", "60", "--quiet", "-o", "s.csv", *solver]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env_with_tmp(tmp), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(8.0)  # into the search (the exact moment does not matter: see below)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert time.monotonic() - sent < 30, f"took {time.monotonic() - sent:.1f}s to stop after SIGTERM"
    assert proc.returncode == 143 and "Traceback" not in err, (proc.returncode, err)
    if "wrote the best schedule found so far to s.csv" in err:
        assert err.count("\n") == 1 and err.startswith("schedc compile: terminated: ")
        validate(csvio.read_csv(tmp_path / "s.csv"), n_stages=16, n_microbatches=48)
        assert json.loads((tmp_path / "s.json").read_text())["interrupted"] is True
    else:  # a loaded machine may still be loading Python: nothing to write yet
        assert err == "schedc: terminated\n" or err == "schedc compile: terminated\n", err
        assert not (tmp_path / "s.csv").exists()
    assert list(tmp.iterdir()) == []


def test_cbc_leaves_no_files_in_the_temp_directory(tmp_path, monkeypatch):
    from schedc.core.costs import Profile
    from schedc.solver import graph
    from schedc.solver.engines import mip as model
    from schedc.solver.engines.warm import warm_start
    from schedc.solver.problem import Problem

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    problem = Problem.build(3, 3, profile=Profile.edge_heavy(3), memory="1p", objective="makespan")
    inst = graph.graph_of(problem)
    start, sim, _ = warm_start(problem, time_budget=0.05)
    inc = graph.canonical_orders(inst, graph.orders_from_schedule(inst, start))
    out = model.solve_model(inst, inc, sim.makespan, "makespan", 20.0, "cbc")
    assert out.proven and list(tmp_path.iterdir()) == []
    # CBC failing (here: an executable that exits 1) is where pulp leaves its files behind
    monkeypatch.setattr("schedc.solver.pulp_compat.cbc_executable", lambda: "/bin/false")
    out = model.solve_model(inst, inc, sim.makespan, "makespan", 20.0, "cbc")
    assert out.orders is None and "Error while trying to execute" in out.message
    assert list(tmp_path.iterdir()) == []


def test_a_solver_child_started_after_the_stop_request_is_stopped_at_once():
    """A signal that lands while the compile builds its model (after the warm start, before CBC
    starts) found no child to forward to; the CBC started next searched on for its whole phase
    (12-17 s). The watcher stops a child that appears once a stop is requested."""
    from schedc.solver import interrupt

    with interrupt.stop_on_sigint():
        os.kill(os.getpid(), signal.SIGINT)  # the stop request (not taken: a KeyboardInterrupt fails the test)
        deadline = time.monotonic() + 10
        while not interrupt.requested() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert interrupt.requested()
        child = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                                  "signal.signal(signal.SIGINT, signal.SIG_IGN)  # CBC deep in its cuts\n"
                                  "time.sleep(60)"])
        started = time.monotonic()
        child.wait(timeout=30)
        # SIGINT at once, SIGKILL half a second later: well under the 60 s it would sleep
        assert time.monotonic() - started < 15 and child.returncode == -signal.SIGKILL
