"""The command line as a user meets it: one-line errors, --debug, pipes, the set-up command."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from schedc import cli
from schedc.core.costs import Profile
from schedc.core.validate import validate
from schedc.io import csvio


def _python(code: str, cwd, **popen):
    """`python -c code` in `cwd`, output captured (a fresh process: its own signal handlers)."""
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60, **popen)


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


# ---------------------------------------------------------------- issue 12: inputs that slipped through

_NEG_COMM = '{"format": "schedc.profile/v1", "comm": -1, "stages": [' \
            '{"forward": 1, "backward_input": 1, "backward_weight": 1, "activation_bytes": 1, "weight_grad_bytes": 0.5}]}'
_INF_F = _NEG_COMM.replace('"comm": -1', '"comm": 0').replace('"forward": 1', '"forward": Infinity')


@pytest.mark.parametrize("files, argv, message", [
    ({}, ["compile", "--stages", "4", "--mb", "8", "--comm", "1,2", "-o", "s.csv"],
     "--comm: 2 values given, but 4 stages have 3 boundaries; give one number (every boundary) or 3 separated by commas"),
    ({"a.csv": "1f1b"}, ["simulate", "a.csv", "--comm", "1,2"], "--comm: 2 values given, but 4 stages have 3"),
    ({}, ["compile", "--stages", "4", "--mb", "8", "--time-limit", "inf", "-o", "inf.csv"],
     "--time-limit: must be a finite number of seconds > 0"),
    ({}, ["compile", "--stages", "4", "--mb", "8", "--time-limit", "nan", "-o", "nan.csv"],
     "--time-limit: must be a finite number of seconds > 0"),
    ({"inf.json": _INF_F}, ["compile", "--stages", "1", "--mb", "2", "--profile", "inf.json", "-o", "s.csv"],
     "inf.json: field stages[0].forward: Input should be a finite number (got inf)"),
    ({"a.csv": "1f1b", "inf.json": _INF_F}, ["simulate", "a.csv", "--profile", "inf.json"],
     "inf.json: field stages[0].forward: Input should be a finite number"),
    ({"neg.json": _NEG_COMM}, ["compile", "--stages", "1", "--mb", "2", "--profile", "neg.json", "-o", "s.csv"],
     "neg.json: comm: every communication time must be >= 0"),
    ({"nostages.json": '{"format": "schedc.profile/v1"}'},
     ["compile", "--stages", "1", "--mb", "2", "--profile", "nostages.json", "-o", "s.csv"],
     "nostages.json: field stages: Field required"),
    ({}, ["compile", "--stages", "4", "--mb", "8", "--memory", "40GiB", "-o", "s.csv"],
     "--memory 40GiB is a byte size, but without --profile memory is counted in microbatch activations"),
    ({"a.csv": "1f1b"}, ["simulate", "a.csv", "--memory", "40GiB"], "--memory 40GiB is a byte size"),
    ({}, ["compile", "--stages", "4", "--mb", "8", "-o", "nodir/s.csv"],
     "-o nodir/s.csv: directory nodir does not exist; create it first (mkdir -p nodir)"),
    ({"a.csv": "1f1b"}, ["compile", "--stages", "4", "--mb", "8", "-o", "a.csv/s.csv"],
     "-o a.csv/s.csv: a.csv is a file, not a directory"),
    ({}, ["compile", "--stages", "4", "--mb", "8", "-o", "s.csv", "--plot", "nodir/x.png"],
     "--plot nodir/x.png: directory nodir does not exist"),
    ({"a.csv": "1f1b"}, ["plot", "a.csv", "-o", "nodir/x.png"], "-o nodir/x.png: directory nodir does not exist"),
    ({"a.csv": "1f1b"}, ["trace", "a.csv", "-o", "nodir/t.json"], "-o nodir/t.json: directory nodir does not exist"),
    ({"a.csv": "1f1b"}, ["baseline", "gpipe", "--stages", "2", "--mb", "2", "-o", "nodir/g.csv"],
     "nodir/g.csv: No such file or directory"),
    ({"a.csv": "1f1b"}, ["validate", "a.csv", "--placement", "v"],
     "a.csv: expected 'v' placement (two stages per rank, rank r holding r and 2R-1-r"),
    ({"bom.csv": "\ufeff0F0,0B0\n"}, ["validate", "bom.csv"],
     "bom.csv: starts with a UTF-8 byte-order mark (BOM); torch's _load_csv (torchtitan, NeMo AutoModel) fails on it"),
])
def test_bad_input_is_one_line_exit_2_and_leaves_no_output(tmp_path, monkeypatch, capsys, files, argv, message):
    monkeypatch.chdir(tmp_path)
    for name, content in files.items():
        if content == "1f1b":
            assert cli.main(["baseline", "1f1b", "--stages", "4", "--mb", "8", "-o", name]) == 0
        else:
            (tmp_path / name).write_text(content)
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"schedc {argv[0]}: error: ") and err.count("\n") == 1, err
    assert message in err
    assert "{'" not in err and "pydantic" not in err  # no dict dumps, no library internals
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files)  # nothing new, no temp files


def test_a_failing_plot_leaves_neither_csv_nor_report(tmp_path, monkeypatch, capsys):
    # the module, not the package's schedc.plot (the front door's function of the same name)
    plot_module = sys.modules["schedc.show.plot"]

    def broken(fig, fmt):
        raise OSError(28, "No space left on device", "s.png")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(plot_module, "render_figure", broken)
    assert cli.main(["compile", "--stages", "2", "--mb", "4", "--quiet", "-o", "s.csv", "--plot", "s.png"]) == 2
    assert capsys.readouterr().err == "schedc compile: error: s.png: No space left on device\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_output_directory_fails_before_solving(tmp_path, monkeypatch, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    assert cli.main(["compile", "--stages", "4", "--mb", "8", "-o", str(ro / "s.csv")]) == 2
    assert "is not writable" in capsys.readouterr().err
    assert list(ro.iterdir()) == []


def test_debug_works_after_the_subcommand_too(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("0F0,0B0x\n")
    out = _schedc("validate", str(bad), "--debug")
    assert out.returncode != 0 and "Traceback" in out.stderr and "SchedcError" in out.stderr


def test_makespans_carry_units_and_one_microbatch_is_singular(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["baseline", "gpipe", "--stages", "2", "--mb", "1", "-o", "g.csv"]) == 0
    assert "2 stages on 2 ranks, 1 microbatch\n" in capsys.readouterr().out
    assert cli.main(["simulate", "g.csv", "--costs", "1,2,1"]) == 0
    assert "makespan 8 units   span 8 units" in capsys.readouterr().out
    prof = Profile.uniform(2, 0.01, 0.02, 0.01).model_copy(update={"model": "measured"})
    prof.save(tmp_path / "p.json")
    assert cli.main(["simulate", "g.csv", "--profile", "p.json"]) == 0
    assert "makespan 80 ms   span 80 ms" in capsys.readouterr().out
    assert cli.main(["compile", "--stages", "2", "--mb", "2", "--profile", "p.json", "--quiet", "-o", "s.csv"]) == 0
    out = capsys.readouterr().out
    assert "makespan 100 ms" in out and "lower bound 100 ms" in out


def test_comparing_unlike_schedules_warns(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["baseline", "1f1b", "--stages", "4", "--mb", "8", "-o", "a.csv"]) == 0
    assert cli.main(["compile", "--stages", "4", "--mb", "16", "--memory", "1.5p", "--quiet", "-o", "s.csv"]) == 0
    capsys.readouterr()
    assert cli.main(["simulate", "a.csv", "s.csv"]) == 0
    err = capsys.readouterr().err
    assert "warning: the schedules differ in microbatches (a.csv 8, s.csv 16)" in err
    assert "warning: s.csv was compiled for --memory 1.5p but is judged against --memory 1p here" in err
    assert cli.main(["plot", "s.csv", "--memory", "1.5p", "-o", "s.png"]) == 0
    assert "warning" not in capsys.readouterr().err  # like for like: no warning (plot names where costs came from)


@pytest.mark.parametrize("signum, line, code", [(signal.SIGINT, "schedc: interrupted\n", 130),
                                                (signal.SIGTERM, "schedc: terminated\n", 143)])
def test_a_signal_while_the_command_loads_is_one_line_and_its_exit_code(tmp_path, signum, line, code):
    # the console script's entry point (schedc_entry, outside the package) answers Ctrl-C and SIGTERM
    # before `import schedc`: a signal while the package loads is the command's line and code, not a
    # KeyboardInterrupt traceback or a death by signal 15 with no word
    command = ("import os, signal, time, schedc_entry; schedc_entry.hold_while_loading(); import schedc; "
               f"os.kill(os.getpid(), {int(signum)}); time.sleep(30); print('not stopped')")
    proc = _python(command, tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (code, "", line)
    # once main() holds them, Ctrl-C is the usual KeyboardInterrupt and SIGTERM raises Terminated
    # (the compile's clean-up runs), each taken over in one swap
    command = ("import signal, schedc_entry; schedc_entry.hold_while_loading(); import schedc.cli.toplevel as t\n"
               "from schedc.errors import raise_terminated\n"
               "t._take_from_entry(signal.SIGINT); t._take_from_entry(signal.SIGTERM, raise_terminated)\n"
               "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
               "signal.getsignal(signal.SIGTERM) is raise_terminated)")
    proc = _python(command, tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "True True\n"), proc.stderr


def test_a_program_that_imports_schedc_keeps_python_s_signal_handling(tmp_path):
    command = ("import signal, schedc, schedc.cli; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
               "signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)")
    proc = _python(command, tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "True True\n"), proc.stderr
    # a command started with Ctrl-C ignored (nohup, `&` in a script) keeps ignoring it
    command = ("import os, signal, schedc_entry; schedc_entry.hold_while_loading(); import schedc; "
               "os.kill(os.getpid(), signal.SIGINT); print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)")
    proc = _python(command, tmp_path, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert (proc.returncode, proc.stdout) == (0, "True\n"), proc.stderr


def _catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (Linux's /proc/PID/status SigCgt mask)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(mask >> (signum - 1) & 1)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_sigterm_as_soon_as_the_command_runs_exits_143_with_a_line(tmp_path):
    # the moment the entry point has run its first line, through the package's loading and the
    # commands' parsing: SIGTERM is "terminated" and 143, never -15
    for wait in (0.0, 0.2, 0.6):
        proc = subprocess.Popen([sys.executable, "-m", "schedc_entry", "compile", "--stages", "16", "--mb", "48",
                                 "--comm", "0.25", "--memory", "1.25p", "--time-limit", "60", "--quiet", "-o", "s.csv"],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not _catches(proc.pid, signal.SIGTERM) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(wait)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143 and "Traceback" not in err, (wait, proc.returncode, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "terminated" in lines[0], err


def test_ctrl_c_while_the_command_loads_its_modules_is_raised_after_them(tmp_path):
    # a KeyboardInterrupt raised inside a library's import can be swallowed (PuLP's optional-solver
    # imports use bare excepts: the command ran on to its time limit) or leave CPython's
    # unhandled-interrupt flag set (the process died by SIGINT after printing "interrupted"); under
    # load 4 runs in 40 failed one way or the other. So main() only records a Ctrl-C while it
    # loads the commands and raises it after them, and the commands take Ctrl-C over (their stop
    # request) before the solver's modules load
    command = ("import os, signal, sys; sys.argv[0] = 'schedc'; import schedc.cli.toplevel as cli\n"
               "try:\n"
               "    with cli._sigint_held():\n"
               "        os.kill(os.getpid(), signal.SIGINT)\n"
               "        sum(range(10 ** 6))  # the signal is handled during this, on any thread\n"
               "        print('body done')\n"
               "except KeyboardInterrupt:\n"
               "    print('raised after it', signal.getsignal(signal.SIGINT) is signal.default_int_handler)")
    proc = _python(command, tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "body done\nraised after it True\n"), proc.stderr
    command = "import sys, schedc.solver.interrupt; print(sorted({'pulp', 'highspy', 'ortools'} & set(sys.modules)))"
    proc = _python(command, tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "[]\n"), proc.stderr


@pytest.mark.parametrize("solver,delays", [([], (0.4, 1.2, 2.5, 6.0)), (["--solver", "cpsat"], (6.0,))])
def test_ctrl_c_during_a_compile_writes_the_best_schedule_so_far(tmp_path, solver, delays):
    # a compile that would search for 60 s (slow links at 1.25p: no proof comes early); SIGINT at
    # a few moments: while Python loads, during the warm start, during CP-SAT (native code that
    # holds the main thread: interrupt.stop_native_solver) and the integer program
    argv = [sys.executable, "-m", "schedc_entry", "compile", "--stages", "16", "--mb", "48", "--comm", "0.25",
            "--memory", "1.25p", "--time-limit", "60", "--quiet", "-o", "s.csv", *solver]
    for delay in delays:
        for f in tmp_path.iterdir():
            f.unlink()
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        # well under the 60 s the search would run without the stop; a loaded host takes more than 10 s
        assert time.monotonic() - sent < 30, f"took {time.monotonic() - sent:.1f}s to stop after Ctrl-C"
        assert proc.returncode == 130 and "Traceback" not in err, (delay, proc.returncode, err)
        if "wrote the best schedule found so far to s.csv" in err:
            assert err.count("\n") == 1 and "interrupted" in err
            schedule = csvio.read_csv(tmp_path / "s.csv")
            validate(schedule, n_stages=16, n_microbatches=48)
            assert json.loads((tmp_path / "s.json").read_text())["interrupted"] is True
        else:  # Ctrl-C before the compile started: nothing to write
            assert err.endswith("interrupted\n") and list(tmp_path.iterdir()) == []


def _cbc_child(pid: int, deadline: float):
    """The pid of the CBC process `pid` runs (directly or through a wrapper such as pyenv's
    shim), once it runs (None past `deadline`)."""
    from schedc.solver.interrupt import _children

    while time.monotonic() < deadline:
        for child in _children(str(pid)):
            try:
                argv = open(f"/proc/{child}/cmdline").read().split("\0")
            except OSError:
                continue
            if any(os.path.basename(a) == "cbc" for a in argv):
                return child
        time.sleep(0.05)
    return None


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="finds the CBC child through /proc")
@pytest.mark.parametrize("signals", [[signal.SIGINT], [signal.SIGTERM], [signal.SIGINT, signal.SIGINT]])
def test_a_signal_during_a_cbc_solve_stops_it_promptly_and_leaves_no_cbc(tmp_path, signals):
    from schedc.solver.pulp_compat import cbc_executable

    if cbc_executable() is None:
        pytest.skip("no CBC binary")
    # V at 1.2p with uneven F/I/W: CBC would search for the whole 60 s
    proc = subprocess.Popen([sys.executable, "-m", "schedc.cli", "compile", "--stages", "8", "--mb", "16",
                             "--placement", "v", "--costs", "1,1.3,0.7", "--memory", "1.2p", "--solver", "cbc",
                             "--time-limit", "60", "--quiet", "-o", "s.csv"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        cbc = _cbc_child(proc.pid, time.monotonic() + 40)
        assert cbc is not None, "the compile never reached CBC"
        sent = time.monotonic()
        for signum in signals:
            proc.send_signal(signum)
            time.sleep(0.2)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert took < 8, f"took {took:.1f}s to stop (CBC was given 60 s)"  # ~1.3 s idle; a busy host is slower
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{cbc}") or "cbc" not in open(f"/proc/{cbc}/cmdline").read(), "CBC left running"
    assert "Traceback" not in err
    if len(signals) == 1:
        code = 143 if signals[0] == signal.SIGTERM else 130
        assert proc.returncode == code and "wrote the best schedule found so far to s.csv" in err, err
        validate(csvio.read_csv(tmp_path / "s.csv"), n_stages=8, n_microbatches=16)
    else:  # the second Ctrl-C may land while the stop is written, or as the process ends
        assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, err)


@pytest.mark.parametrize("flags", [["--comm", "nan"], ["--comm", "inf"], ["--costs", "inf,1,1"], ["--comm", "0.1,nan,0.1"]])
def test_non_finite_costs_are_one_line_errors(flags, tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert cli.main(["compile", "--stages", "4", "--mb", "4", "--time-limit", "2", "-o", str(out), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("--comm" in err[0] or "--costs" in err[0]) and "finite" in err[0]
    assert not out.exists()


def test_plot_shows_zb_greedy_when_it_is_the_best_fitting_baseline(tmp_path):
    # zb-greedy fits 2p here and beats every hand-made schedule: the plot draws it (built by the
    # solver, not by name)
    out, png = tmp_path / "s.csv", tmp_path / "s.png"
    assert cli.main(["compile", "--stages", "4", "--mb", "8", "--costs", "1,2,0.5", "--comm", "0.1",
                     "--memory", "2p", "--time-limit", "3", "--quiet", "-o", str(out), "--plot", str(png)]) == 0
    assert out.exists() and png.stat().st_size > 0


def test_calibrate_leaves_its_timeout_to_the_api_and_says_which(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    import functools

    import schedc
    from schedc.cli.common import defaults_of
    from schedc.errors import SchedcError
    from schedc.runtime import calibrate as runtime_calibrate

    real = runtime_calibrate.calibrate
    calls = []

    @functools.wraps(real)  # the same signature: the command reads its defaults off it
    def stop_before_the_ranks(*args, **kwargs):
        calls.append(kwargs)
        raise SchedcError("stopped before the ranks")

    monkeypatch.setattr(runtime_calibrate, "calibrate", stop_before_the_ranks)
    schedc.write_csv(schedc.baseline("1f1b", stages=2, microbatches=4), tmp_path / "s.csv")
    Profile.uniform(2).save(tmp_path / "p.json")
    argv = ["calibrate", str(tmp_path / "s.csv"), "--profile", str(tmp_path / "p.json"), "--mbs", "1"]
    default = defaults_of(real)["timeout"]
    assert cli.main(argv) == 2
    assert "timeout" not in calls[-1] and f"(--timeout {default:g}s)" in capsys.readouterr().err
    assert cli.main([*argv, "--timeout", "42"]) == 2
    assert calls[-1]["timeout"] == 42 and "(--timeout 42s)" in capsys.readouterr().err
    from schedc.cli import toplevel

    sub = next(a for a in toplevel.build_parser()._actions if a.dest == "command").choices["calibrate"]
    (timeout,) = [a for a in sub._actions if a.dest == "timeout"]
    assert timeout.default is None and f"(default {default:g})" in timeout.help  # --help says the API's


_SMALL_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
                 "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "vocab_size": 100, "torch_dtype": "bfloat16"}
# how Python spells what the counted route's flags set: never shown on the command line
_KEYWORD_SPELLINGS = ("unit_profile", "param_dtype", "activation_checkpoint", "seq_len", "microbatch_size", "dtype=",
                      "impl=", "tp=", " dtype:", "bytes_per_param")


@pytest.mark.parametrize("command, flags, named", [
    ("profile", ["--dtype", "float7"], "--dtype: 'float7' is not a dtype"),
    ("profile", ["--dtype", "{param}"], "--dtype: '{param}' is not a dtype"),
    ("profile", ["--param-dtype", "float7"], "--param-dtype: 'float7' is not a dtype"),
    ("profile", ["--impl", "paper", "--ac", "full"], "give --ac none, or --impl hf or torchtitan"),
    ("profile", ["--ac", "sometimes"], "--ac: 'sometimes' is not a mode"),
    ("profile", ["--tp", "3"], "--tp 3 does not divide the 4 heads"),
    ("profile", ["--seq", "0"], "--seq must be between 1 and"),
    ("plan", ["--dtype", "float7"], "--dtype: 'float7' is not a dtype"),
    ("plan", ["--tp", "3"], "--tp 3 does not divide the 4 heads"),
])
def test_a_bad_counted_profile_setting_names_its_flag(tmp_path, capsys, command, flags, named):
    config, out = tmp_path / "config.json", tmp_path / ("u.json" if command == "profile" else "plan.csv")
    config.write_text(json.dumps(_SMALL_CONFIG))
    argv = ["--config", str(config), *(["--seq", "8"] if "--seq" not in flags else []), *flags, "-o", str(out)]
    argv = ["profile", "--units", *argv] if command == "profile" else \
        ["plan", "--ranks", "2", "--mb", "4", "--memory", "80GiB", "--time-limit", "2", *argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"schedc {command}: error: ") and err.count("\n") == 1 and named in err, err
    assert not [k for k in _KEYWORD_SPELLINGS if k in err], err
    assert list(tmp_path.iterdir()) == [config]


def test_a_bad_counted_dtype_is_one_line_without_a_traceback(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_SMALL_CONFIG))
    out = _schedc("profile", "--units", "--config", "config.json", "--seq", "8", "--dtype", "float7", "-o", "u.json",
                  cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr == ("schedc profile: error: --dtype: 'float7' is not a dtype schedc knows; use one of bfloat16, "
                          "float16, float32, float64\n")


@pytest.mark.parametrize("flags, named", [
    (["--heads", "3"], "--hidden (64) is not a multiple of --heads (3); give --head-dim"),
    (["--heads", "4", "--kv-heads", "3"], "--heads (4) must be a multiple of --kv-heads (3)"),
    (["--head-dim", "8"], "--kv-heads and --head-dim need --heads"),
])
def test_a_bad_counted_shape_from_flags_names_the_flags(tmp_path, capsys, flags, named):
    out = tmp_path / "u.json"
    argv = ["profile", "--flops", "1e12", "--layers", "2", "--hidden", "64", "--vocab", "100", "--seq", "8", *flags]
    assert cli.main([*argv, "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"schedc profile: error: {named}\n"
    assert not out.exists()


# ---------------------------------------------------------------- the counted route's --for and --device

@pytest.mark.parametrize("framework", ["torchtitan", "nemo", "schedc"])
def test_profile_config_for_counts_as_the_framework_holds_it(tmp_path, capsys, framework):
    import schedc

    config, out = tmp_path / "config.json", tmp_path / "u.json"
    config.write_text(json.dumps(_SMALL_CONFIG))
    assert cli.main(["profile", "--units", "--config", str(config), "--seq", "8", "--for", framework,
                     "-o", str(out)]) == 0
    counted = Profile.load(out)
    assert counted == schedc.count_profile(config, seq=8, framework=framework)  # the API's count, nothing more
    assert counted.assumes["framework"] == framework and f"framework {framework}" in capsys.readouterr().out
    plain = schedc.count_profile(config, seq=8, framework="schedc")
    # torchtitan and NeMo wrap every block in FSDP2 at degree 1: its unsharded weights and gradients on top
    assert (counted.stages[1].static_bytes > plain.stages[1].static_bytes) == (framework != "schedc")
    assert counted.stages[1].modules == (["model.layers.0"] if framework == "nemo" else ["layers.0"])


def test_profile_for_defaults_to_the_apis_framework(tmp_path, monkeypatch):
    import schedc
    from schedc import api

    config = tmp_path / "config.json"
    config.write_text(json.dumps(_SMALL_CONFIG))
    from schedc.cli import toplevel

    sub = next(a for a in toplevel.build_parser()._actions if a.dest == "command").choices["profile"]
    assert next(a for a in sub._actions if a.dest == "framework").default is None  # the default lives in the API
    monkeypatch.setitem(api.count_profile.__wrapped__.__kwdefaults__, "framework", "torchtitan")
    assert cli.main(["profile", "--units", "--config", str(config), "--seq", "8", "-o", str(tmp_path / "u.json")]) == 0
    assert Profile.load(tmp_path / "u.json").assumes["framework"] == "torchtitan"
    assert schedc.count_profile(config, seq=8).assumes["framework"] == "torchtitan"


@pytest.mark.parametrize("flags, named", [
    (["--for", "megatron"], "--for: 'megatron' is not a framework schedc counts for; give one of schedc, torchtitan, "
                            "nemo"),
    (["--device", "tpu"], "--device: 'tpu' is not a device a counted profile follows; give cpu or cuda"),
    (["--device", "cuda:x"], "--device: 'cuda:x' is not a device"),
    (["--device", "CPU"], "--device: 'CPU' is not a device"),
    (["--device", "mps"], "--device: 'mps' is not a device"),
])
def test_a_counted_profile_refuses_a_framework_or_device_it_does_not_count(tmp_path, capsys, flags, named):
    config, out = tmp_path / "config.json", tmp_path / "u.json"
    config.write_text(json.dumps(_SMALL_CONFIG))
    for route in (["--config", str(config)], ["--flops", "1e12", "--layers", "2", "--hidden", "64", "--vocab", "100"]):
        assert cli.main(["profile", "--units", *route, "--seq", "8", *flags, "-o", str(out)]) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith(f"schedc profile: error: {named}"), captured.err
        assert captured.err.count("\n") == 1 and captured.out == "" and not out.exists()


def test_a_counted_profile_follows_cuda_or_cpu_kernels(tmp_path):
    import schedc

    config = tmp_path / "config.json"
    config.write_text(json.dumps(_SMALL_CONFIG))

    def counted(*flags) -> Profile:
        assert cli.main(["profile", "--units", "--config", str(config), "--seq", "8", *flags,
                         "-o", str(tmp_path / "u.json")]) == 0
        return Profile.load(tmp_path / "u.json")

    cuda = counted()
    assert cuda.assumes["device"] == "cuda" and cuda.reserve_bytes > 0
    assert counted("--device", "cuda") == cuda and counted("--device", "cuda:1") == cuda  # the same kernels
    cpu = counted("--device", "cpu")
    assert cpu.assumes["device"] == "cpu" and cpu.reserve_bytes == 0
    with pytest.raises(schedc.SchedcError, match=r"^device: must be one of 'cuda', 'cpu'; got 'tpu'$"):
        schedc.count_profile(config, seq=8, device="tpu")


def test_a_measured_profile_refuses_for(tmp_path, capsys):
    assert cli.main(["profile", "--units", "--for", "torchtitan", "-o", str(tmp_path / "u.json")]) == 2
    assert capsys.readouterr().err == ("schedc profile: error: --for counts memory as a framework holds it: add "
                                       "--config config.json or --flops FLOP/s; for a measured profile give --for to "
                                       "schedc plan, which names the target\n")
    assert list(tmp_path.iterdir()) == []
