"""Hostile and extreme inputs (issue 23): each is one line on stderr, exit code 2, no traceback, no
hang and no file left behind; outputs never destroy what is at their path or an input."""

import json
import os
import re
import stat
import subprocess
import sys
import threading

import pytest

from schedc import cli
from schedc.core import limits
from schedc.core.costs import Profile
from schedc.errors import SchedcError
from schedc.io import csvio, fileio

TIMEOUT = 120  # generous: the machine may be busy; a hang still fails


def _schedc(*args, cwd):
    return subprocess.run([sys.executable, "-m", "schedc.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=TIMEOUT)


def _profile(stage: dict, n: int = 2) -> str:
    return json.dumps({"format": "schedc.profile/v1", "stages": [stage] * n})


_STAGE = {"forward": 1, "backward_input": 1, "backward_weight": 1, "activation_bytes": 1}
_ONE_F_ONE_B = "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"
# per-unit profiles that record the checkpointing mode they were counted with
_MODED = {f"{mode}.json": json.dumps({"format": "schedc.profile/v1", "stages": [_STAGE] * 4,
                                      "assumes": {"activation_checkpoint": mode}}) for mode in ("none", "light")}
_SMALL_CONFIG = json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
                            "vocab_size": 100, "intermediate_size": 128})
_PLAN_ARGS = ["--ranks", "2", "--mb", "4", "--memory", "none", "--time-limit", "2", "-o", "p.csv"]


def _one_line_error(out, command: str, *needles: str) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"schedc {command}: error: "), out.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ---------------------------------------------------------------- bad inputs: one line, exit 2, nothing written

@pytest.mark.parametrize("files, argv, command, needles", [
    # a microbatch number with 5000 digits (int() would raise past 4300 digits)
    ({"big.csv": "0F0,0F" + "9" * 5000 + "\n"}, ["validate", "big.csv"], "validate",
     ["big.csv: rank 0 (row 1), column 2", "(5002 characters)"]),
    ({"big.csv": "0F0,0F99999999999,0B0\n"}, ["simulate", "big.csv", "--json"], "simulate",
     ["column 2: '0F99999999999': the microbatch number is too large", f"0..{limits.MAX_MICROBATCHES - 1}"]),
    # more rows than ranks schedc handles: blank lines count as ranks
    ({"blank.csv": "0F0,0B0\n" + "\n" * 5000}, ["validate", "blank.csv"], "validate",
     [f"row {limits.MAX_RANKS + 1}: more than {limits.MAX_RANKS} rows"]),
    # absurd sizes are refused up front with the limit
    ({}, ["compile", "--stages", "99999999999", "--mb", "4", "-o", "s.csv"], "compile",
     ["--stages: 99999999999 is more stages than schedc handles (at most 8,192)"]),
    ({}, ["baseline", "1f1b", "--stages", "8", "--mb", "1000000", "-o", "s.csv"], "baseline",
     ["make 24,000,000 actions", f"at most {limits.MAX_ACTIONS:,}"]),
    # a time limit the least compile of that size cannot keep: refused before anything is built,
    # with the limit that would do
    ({}, ["compile", "--stages", "8", "--mb", "43690", "--time-limit", "2", "-o", "s.csv"], "compile",
     ["--time-limit 2 is too short for 1,048,560 actions", "give --time-limit 9 or more"]),
    # a profile nested 5000 deep, or saved as Latin-1
    ({"a.csv": _ONE_F_ONE_B, "deep.json": "[" * 5000 + "]" * 5000}, ["simulate", "a.csv", "--profile", "deep.json"],
     "simulate", ["deep.json: JSON nested too deeply"]),
    ({"a.csv": _ONE_F_ONE_B, "latin.json": _profile({**_STAGE}).replace('"stages"', '"model": "caf\xe9", "stages"')},
     ["simulate", "a.csv", "--profile", "latin.json"], "simulate", ["latin.json: not UTF-8 text (byte"]),
    # finite numbers whose sums are not: named by field, never inf/nan in any output
    ({"a.csv": _ONE_F_ONE_B, "huge.json": _profile({**_STAGE, "forward": 1e308, "backward_input": 1e308})},
     ["plot", "a.csv", "--profile", "huge.json", "-o", "p.png"], "plot",
     ["huge.json: stages[0]: forward + backward_input + backward_weight is too large to add up"]),
    ({"a.csv": _ONE_F_ONE_B}, ["simulate", "a.csv", "--costs", "1e308,1e308,1e308", "--json"], "simulate",
     ["--costs 1e308,1e308,1e308: F + I + W is too large to add up"]),
    ({"a.csv": _ONE_F_ONE_B}, ["trace", "a.csv", "--comm", "1e308", "-o", "t.json"], "trace",
     ["--comm 1e308: the time of one microbatch through all stages"]),
    ({}, ["compile", "--stages", "2", "--mb", "4", "--comm", "1e308", "-o", "s.csv"], "compile",
     ["--comm 1e308: the time of one microbatch"]),
    ({"a.csv": _ONE_F_ONE_B}, ["simulate", "a.csv", "--memory", "9" * 400 + "p"], "simulate",
     ["--memory: the factor in", "(401 characters) is more than 1e+06"]),
    # plan's MODE=UNITS.json: a profile counted for another mode is not taken for this one's costs
    (_MODED, ["plan", "--profile", "none=none.json", "--profile", "light=none.json", "--ac", "auto", *_PLAN_ARGS],
     "plan", ["--profile light=none.json was counted with activation checkpointing 'none'; give a profile counted "
              "with 'light'"]),
    (_MODED, ["plan", "--profile", "light=none.json", *_PLAN_ARGS], "plan",
     ["--profile light=none.json was counted with activation checkpointing 'none'"]),
    # --ac light beside a profile named for another mode was dropped: the plan ran without checkpointing
    (_MODED, ["plan", "--profile", "none=none.json", "--ac", "light", *_PLAN_ARGS], "plan",
     ["--ac light: --profile none=none.json names mode 'none'; give --profile light=UNITS.json"]),
    # a misspelt mode, a profile without one, a mode twice: each named, not "needs one profile per mode"
    (_MODED, ["plan", "--profile", "none=none.json", "--profile", "Light=light.json", "--ac", "auto", *_PLAN_ARGS],
     "plan", ["--profile Light=light.json: 'Light' is not one of none, light, selective, full"]),
    (_MODED, ["plan", "--profile", "none=none.json", "--profile", "light.json", "--ac", "auto", *_PLAN_ARGS], "plan",
     ["--profile light.json: names no mode; --ac auto takes one profile per mode"]),
    (_MODED, ["plan", "--profile", "light=light.json", "--profile", "light=light.json", "--ac", "auto", *_PLAN_ARGS],
     "plan", ["--profile light=light.json: mode 'light' is given twice"]),
    (_MODED, ["plan", "--profile", "light.json", "--ac", "Light", *_PLAN_ARGS], "plan",
     ["--ac must be one of none, light, selective, full, auto, got 'Light'"]),
    # per-mode profiles of another model: more units was a numpy broadcast traceback, another --seq planned
    ({**_MODED, "six.json": json.dumps({"format": "schedc.profile/v1", "stages": [_STAGE] * 6})},
     ["plan", "--profile", "none=none.json", "--profile", "light=six.json", "--ac", "auto", *_PLAN_ARGS], "plan",
     ["the light profile has 6 units, the none profile 4: the profiles of --ac auto count one model and run"]),
    ({**_MODED, "seq.json": json.dumps({"format": "schedc.profile/v1", "stages": [_STAGE] * 4,
                                         "assumes": {"activation_checkpoint": "light", "seq_len": 128}}),
      "n.json": json.dumps({"format": "schedc.profile/v1", "stages": [_STAGE] * 4,
                            "assumes": {"activation_checkpoint": "none", "seq_len": 64}})},
     ["plan", "--profile", "none=n.json", "--profile", "light=seq.json", "--ac", "auto", *_PLAN_ARGS], "plan",
     ["the light profile has seq_len 128, the none profile 64"]),
    ({**_MODED, "slow.json": json.dumps({"format": "schedc.profile/v1", "stages": [_STAGE] * 4, "device": "1 TFLOP/s",
                                          "assumes": {"activation_checkpoint": "light"}}),
      "fast.json": json.dumps({"format": "schedc.profile/v1", "stages": [_STAGE] * 4, "device": "400 TFLOP/s",
                               "assumes": {"activation_checkpoint": "none"}})},
     ["plan", "--profile", "none=fast.json", "--profile", "light=slow.json", "--ac", "auto", *_PLAN_ARGS], "plan",
     ["the light profile has device '1 TFLOP/s', the none profile '400 TFLOP/s'"]),
    # profile --units --ac: one mode, or one per layer
    ({"c.json": json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
                            "vocab_size": 100, "intermediate_size": 128})},
     ["profile", "--units", "--config", "c.json", "--seq", "64", "--ac", "light,full", "-o", "u.json"], "profile",
     ["--ac: 2 modes for 4 layers; give one, or one per layer"]),
    # plan: a size no compile takes is refused before the partition bounds (minutes at 10**6 microbatches),
    # by the V's 2R stages under auto; a time limit too short for the least plan names the user's value
    ({"c.json": _SMALL_CONFIG}, ["plan", "--config", "c.json", "--seq", "64", "--ranks", "2", "--mb", "1000000",
                                 "--memory", "none", "-o", "p.csv"], "plan",
     ["--mb: 4 stages x 1000000 microbatches is 12,000,000 actions", "(e.g. --mb 87381)"]),
    ({"c.json": _SMALL_CONFIG}, ["plan", "--config", "c.json", "--seq", "64", "--ranks", "2", "--mb", "174762",
                                 "--placement", "loop", "--memory", "none", "--time-limit", "5", "-o", "p.csv"],
     "plan", ["--time-limit 5 is too short for 1,048,572 actions", "give --time-limit 9 or more"]),
    # --costs whose F + I + W adds up but whose step through both stages does not: was pydantic's traceback
    *[({"a.csv": _ONE_F_ONE_B}, [*argv, "--costs", "1e308,1,1"], argv[0],
       ["--costs 1e308,1,1: the time of one microbatch through all stages", "is too large to add up"])
      for argv in (["simulate", "a.csv"], ["compile", "--stages", "2", "--mb", "2", "-o", "s.csv"],
                   ["trace", "a.csv", "-o", "t.json"], ["emulate", "a.csv"])],
    # a JSON output given a schedule's .csv name: profile wrote its JSON over s.csv
    *[({"a.csv": _ONE_F_ONE_B, "c.json": _SMALL_CONFIG}, argv, argv[0], [f"-o {argv[-1]}: {what} is JSON"])
      for argv, what in ((["profile", "--units", "--config", "c.json", "--seq", "64", "-o", "a.csv"], "a profile"),
                         (["trace", "a.csv", "-o", "A.CSV"], "a Chrome trace"))],
    # emulate: a sleep of days (a unit mistake, --steps 10**9) refused before any rank starts, not waited on
    ({"a.csv": _ONE_F_ONE_B}, ["emulate", "a.csv", "--scale", "1e300"], "emulate",
     ["the stages would sleep 5.4e+301 s (6 steps of 1 schedule(s) at --scale 1e+300), more than a day"]),
    ({"a.csv": _ONE_F_ONE_B}, ["emulate", "a.csv", "--steps", "1000000000"], "emulate",
     ["(1000000001 steps of 1 schedule(s) at --scale 0.02), more than a day; give fewer --steps"]),
    ({"a.csv": _ONE_F_ONE_B, "p4.json": _profile(_STAGE, 4)}, ["emulate", "a.csv", "--profile", "p4.json"], "emulate",
     ["a.csv: the schedule has 2 stages but p4.json describes 4"]),
    # a JSON input saved with a byte-order mark: json's own message named only Python's utf-8-sig
    ({"a.csv": _ONE_F_ONE_B, "bom.json": "\ufeff" + _profile(_STAGE)}, ["simulate", "a.csv", "--profile", "bom.json"],
     "simulate", ["bom.json: starts with a UTF-8 byte-order mark (BOM)", "sed -i '1s/^\\xEF\\xBB\\xBF//' bom.json"]),
    ({}, ["library", "show", "r2_mb4_mem1p_loop_uniform", "--write-profile", "x.csv"], "library",
     ["--write-profile x.csv: a profile is JSON, and a .csv name is a schedule's"]),
    ({"a.csv": _ONE_F_ONE_B}, ["library", "build", "a.csv", "--index-only"], "library",
     ["a.csv: is a file, not a directory; give the directory"]),
    # validate --for: an unknown schedule name names the flag
    ({"a.csv": _ONE_F_ONE_B}, ["validate", "a.csv", "--for", "torchtitan:Nope"], "validate",
     ["--for torchtitan:Nope: unknown schedule name 'Nope'"]),
])
def test_bad_input_is_one_line_exit_2_and_leaves_no_file(tmp_path, files, argv, command, needles):
    for name, text in files.items():
        (tmp_path / name).write_bytes(text.encode("latin-1" if name == "latin.json" else "utf-8"))
    before = sorted(p.name for p in tmp_path.iterdir())
    _one_line_error(_schedc(*argv, cwd=tmp_path), command, *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("node", ["/dev/zero", "/dev/urandom", "fifo"])
@pytest.mark.parametrize("as_", ["csv", "profile"])
def test_non_regular_inputs_are_refused_not_read_forever(tmp_path, node, as_):
    if node == "fifo":
        os.mkfifo(tmp_path / "fifo")  # nobody writes it: opening it would block forever
        node = tmp_path / "fifo"
    (tmp_path / "a.csv").write_text(_ONE_F_ONE_B)
    argv = ["simulate", node] if as_ == "csv" else ["simulate", "a.csv", "--profile", node]
    kind = "a FIFO (named pipe)" if str(node).endswith("fifo") else "a character device"
    _one_line_error(_schedc(*argv, cwd=tmp_path), "simulate", f"{node}: is {kind}, not a regular file")


def test_dev_zero_under_a_memory_ulimit_is_one_line(tmp_path):
    resource = pytest.importorskip("resource")

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    out = subprocess.run([sys.executable, "-m", "schedc.cli", "validate", "/dev/zero"], capture_output=True,
                         text=True, timeout=TIMEOUT, preexec_fn=cap, cwd=tmp_path)
    _one_line_error(out, "validate", "/dev/zero: is a character device")


def test_files_over_the_size_bound_are_refused_without_reading_them(tmp_path):
    big = tmp_path / "big.csv"
    with open(big, "wb") as f:  # sparse: no disk, no time
        f.truncate(limits.MAX_INPUT_BYTES + 1)
    with pytest.raises(SchedcError, match=r"big.csv: larger than 32 MiB, more than a CSV schedule can hold"):
        csvio.read_csv(big)
    with pytest.raises(SchedcError, match=r"big.csv: larger than 32 MiB, more than a profile can hold"):
        Profile.load(big)


def test_parse_bounds_actions_and_cells():
    row = ",".join(f"0F{m}" for m in range(1000))
    with pytest.raises(SchedcError, match=f"more than {limits.MAX_ACTIONS:,} actions"):
        csvio.parse_csv_text("\n".join([row] * (limits.MAX_ACTIONS // 1000 + 1)), "many.csv")
    with pytest.raises(SchedcError, match=f"more than {limits.MAX_CELLS:,} cells"):
        csvio.parse_csv_text("0F0" + "," * limits.MAX_CELLS, "wide.csv")


def test_a_step_too_long_to_add_up_is_refused_by_simulate():
    from schedc.core.baselines import make_baseline
    from schedc.core.simulate import simulate

    profile = Profile.uniform(2, 1e300, 1e300, 1e300)  # one microbatch adds up, 10**9 would not
    s = make_baseline("1f1b", 2, 4)
    s.n_microbatches = 10**9
    with pytest.raises(SchedcError, match="1000000000 microbatches of these costs are too large to add up"):
        simulate(s, profile)


# ---------------------------------------------------------------- near misses

@pytest.mark.parametrize("argv, needle", [
    (["compile", "--mbs", "16", "--stages", "4"],
     "unknown option --mbs; did you mean --mb (number of microbatches M)?"),
    (["baseline", "1f1b", "--stages", "4", "--mbs", "8"], "unknown option --mbs; did you mean --mb"),
    # argparse would take --mb as an abbreviation of --mbs (the microbatch size) here
    (["profile", "--mb", "4", "-o", "p.json"], "unknown option --mb; did you mean --mbs (microbatch size"),
    (["simulate", "a.csv", "--memroy", "1p"], "unknown option --memroy; did you mean --memory"),
])
def test_near_miss_options_name_the_real_one(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "required" not in err
    assert list(tmp_path.iterdir()) == []


def test_abbreviations_of_a_commands_own_options_still_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["baseline", "1f1b", "--stage", "2", "--mb", "2", "-o", "a.csv"]) == 0
    assert cli.main(["simulate", "a.csv", "--mem", "1p", "--comm", "-0"]) == 0


# ---------------------------------------------------------------- outputs: never destroy what is there

def test_an_output_never_overwrites_an_input(tmp_path):
    prof = tmp_path / "prof.json"
    prof.write_text(_profile(_STAGE))
    before = prof.read_bytes()
    out = _schedc("compile", "--stages", "2", "--mb", "4", "--profile", "prof.json", "-o", "prof.csv",
                  "--time-limit", "5", cwd=tmp_path)
    _one_line_error(out, "compile", "-o (the report beside it) prof.json would overwrite the input --profile prof.json")
    assert prof.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["prof.json"]
    (tmp_path / "a.csv").write_text(_ONE_F_ONE_B)
    os.symlink("a.csv", tmp_path / "link.csv")
    out = _schedc("trace", "a.csv", "-o", "link.csv", cwd=tmp_path)  # the same file through a link
    _one_line_error(out, "trace", "-o link.csv would overwrite the input schedule a.csv")
    assert (tmp_path / "a.csv").read_text() == _ONE_F_ONE_B


def test_writing_through_a_symlink_keeps_the_link_and_mode(tmp_path):
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    target.chmod(0o600)
    link = tmp_path / "link.csv"
    os.symlink("real.csv", link)
    fileio.atomic_write_text(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    fileio.atomic_write_text(target, "newer\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "real.csv"]


def test_a_fifo_output_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    assert cli.main(["baseline", "1f1b", "--stages", "2", "--mb", "2", "-o", str(fifo)]) == 0
    reader.join(TIMEOUT)
    assert got == [_ONE_F_ONE_B] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_device_node_output_stays_a_device(tmp_path, capsys):
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a private /dev/null
    except (PermissionError, OSError):
        node = "/dev/null"
    (tmp_path / "a.csv").write_text(_ONE_F_ONE_B)
    assert cli.main(["trace", str(tmp_path / "a.csv"), "-o", str(node)]) == 0
    assert stat.S_ISCHR(os.stat(node).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["a.csv", "null"] if node != "/dev/null" else ["a.csv"])


def test_a_full_disk_names_the_file_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    (tmp_path / "a.csv").write_text(_ONE_F_ONE_B)
    # /dev/full: every write fails with ENOSPC
    assert cli.main(["trace", str(tmp_path / "a.csv"), "-o", "/dev/full"]) == 2
    assert capsys.readouterr().err.strip() == "schedc trace: error: /dev/full: No space left on device"

    real_fdopen = os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    out = tmp_path / "t.json"
    assert cli.main(["trace", str(tmp_path / "a.csv"), "-o", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"schedc trace: error: {out}: No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv"]


def test_a_report_from_another_run_is_never_paired_with_the_csv(tmp_path, capsys):
    csv = tmp_path / "s.csv"
    assert cli.main(["compile", "--stages", "2", "--mb", "4", "--memory", "2p", "--time-limit", "5", "--quiet",
                     "-o", str(csv)]) == 0
    report = csvio.read_report(csv)
    assert report[csvio.CSV_HASH_KEY] == csvio.csv_sha256(csv.read_bytes())
    # another run rewrites the CSV only: the old report must not be read as its report
    assert cli.main(["baseline", "1f1b", "--stages", "2", "--mb", "4", "-o", str(csv)]) == 0
    with pytest.raises(SchedcError, match="s.json: this report belongs to another version of .*s.csv"):
        csvio.read_report(csv)
    capsys.readouterr()
    assert cli.main(["simulate", str(csv)]) == 0
    err = capsys.readouterr().err
    assert "warning: ignoring the report beside" in err and "compiled for --memory 2p" not in err


# ---------------------------------------------------------------- the environment around a command

def test_progress_lines_off_a_terminal_are_plain(capsys):
    from schedc.cli.progress import StderrProgress

    p = StderrProgress("schedc profile")
    p("stage 1/2")
    p("stage 2/2")
    p.done()
    err = capsys.readouterr().err
    assert err == "schedc profile: stage 1/2\nschedc profile: stage 2/2\n"


def test_a_clone_named_schedc_beside_does_not_shadow_the_install(tmp_path):
    # `git clone .../schedc` leaves a directory named schedc where the user then runs python
    (tmp_path / "schedc" / "tests").mkdir(parents=True)
    (tmp_path / "schedc" / "README.md").write_text("a clone\n")
    out = subprocess.run([sys.executable, "-c", "from schedc import __version__; import schedc.solver; "
                          "print(__version__)"], capture_output=True, text=True, cwd=tmp_path, timeout=TIMEOUT)
    assert out.returncode == 0, ("the clone shadows the install; an editable install made before pyproject's "
                                 "package-dir setting needs `pip install -e .` again: " + out.stderr[-500:])


def test_the_time_limit_a_refusal_names_is_accepted():
    from schedc.solver.deadline import check_time_limit

    for n in (2 * 10**5, 5 * 10**5, limits.MAX_ACTIONS):
        check_time_limit(n, 60.0)  # the default limit takes every size schedc compiles
        with pytest.raises(SchedcError, match=r"give --time-limit (\d+) or more") as e:
            check_time_limit(n, 0.01)
        check_time_limit(n, float(re.search(r"give --time-limit (\d+)", str(e.value)).group(1)))


# ---------------------------------------------------------------- issue 39: spellings, near misses, values

@pytest.mark.parametrize("text, kind, value", [
    ("80G", "bytes", 80 * 2**30), ("80Gi", "bytes", 80 * 2**30), ("80GiB", "bytes", 80 * 2**30),
    ("80GB", "bytes", 80e9), ("512M", "bytes", 512 * 2**20), ("1e3p", "relative", 1000.0), (".5p", "relative", 0.5),
])
def test_memory_spellings_binary_and_decimal(text, kind, value):
    from schedc.core.costs import MemoryLimit

    limit = MemoryLimit.parse(text)
    assert (limit.kind, limit.value) == (kind, value)


@pytest.mark.parametrize("argv, needle", [
    (["compile", "--stages", "2", "--microbatches", "4"], "unknown option --microbatches; did you mean --mb"),
    (["plna"], "invalid choice 'plna'; did you mean plan?"),
    (["plan", "--placment", "v"], "unknown option --placment; did you mean --placement?"),
    (["simulate", "a.csv", "--memory", "-1GiB"], "--memory: '-1GiB' must be > 0"),
    (["simulate", "a.csv", "--costs", "-1,1,1"], "--costs"),
    (["simulate", "a.csv", "--memory", "80"], "--memory: '80' has no unit: give Kp"),
    # a count of bytes without its B: 80e9GiB, once suggested, is more than any rank holds
    (["simulate", "a.csv", "--memory", "80e9"], "--memory: '80e9' has no unit: for 74.51GiB give --memory 80e9B"),
    (["compile", "--stages", "2", "--mb", "9" * 5000], "'99999999999999999999'... (5000 characters)"),
    (["simulate", "a.csv", "--comm", "9" * 5000], "'99999999999999999999'... (5000 characters)"),
    # silent acceptance: an empty --costs is not the default, a limit shorter than any compile is refused
    (["simulate", "a.csv", "--costs", ""], "--costs: expected three finite numbers"),
    (["trace", "a.csv", "--costs", "", "-o", "t.json"], "--costs: expected three finite numbers"),
    (["compile", "--stages", "2", "--mb", "4", "--time-limit", "1e-9"], "--time-limit: 1e-09 s is shorter than any"),
])
def test_argument_errors_are_one_short_line_naming_the_flag(tmp_path, argv, needle):
    (tmp_path / "a.csv").write_text(_ONE_F_ONE_B)
    out = _schedc(*argv, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 260 and needle in lines[0], out.stderr
    assert "(loop)" not in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv"]


def test_values_that_start_with_a_dash_are_values(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["baseline", "1f1b", "--stages", "2", "--mb", "2", "-o", "-1.csv"]) == 0
    assert cli.main(["simulate", "./-1.csv", "--comm", "-0", "--mem", "1p"]) == 0  # a positional: ./ as usual
    assert sorted(p.name for p in tmp_path.iterdir()) == ["-1.csv"]


def test_the_python_front_door_names_the_keyword_not_the_flag():
    import schedc

    with pytest.raises(SchedcError, match=r"^memory: '-1G' must be > 0 \(for no cap give memory=none\)$"):
        schedc.compile(stages=2, microbatches=4, memory="-1G")
    # a core check names the parameter; each door spells it its way (--mb is microbatches=)
    with pytest.raises(SchedcError) as e:
        limits.check_schedule_size(2, 2 * 10**6)
    assert str(e.value).startswith("--mb: 2000000 is more microbatches than schedc handles")
    assert str(e.value.for_python()).startswith("microbatches: 2000000 is more microbatches")


@pytest.mark.parametrize("where", ["forward", "activation_bytes"])
def test_an_integer_too_long_for_python_names_the_file(tmp_path, where):
    (tmp_path / "a.csv").write_text(_ONE_F_ONE_B)
    (tmp_path / "p.json").write_text(_profile(_STAGE).replace(f'"{where}": 1', f'"{where}": ' + "9" * 5000))
    _one_line_error(_schedc("simulate", "a.csv", "--profile", "p.json", cwd=tmp_path), "simulate",
                    "p.json: a number of 5000 digits")


def test_a_closed_stdout_and_an_ascii_terminal_are_not_tracebacks(tmp_path):
    out = subprocess.run(["bash", "-c", f"exec >&-; exec {sys.executable} -m schedc.cli baseline 1f1b --stages 2 --mb 2"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=TIMEOUT)
    _one_line_error(out, "baseline", "standard output: closed when schedc started")
    (tmp_path / "a.csv").write_text(_ONE_F_ONE_B)
    (tmp_path / "p.json").write_text(_profile(_STAGE).replace('"stages"', '"model": "caf\\u00e9 \\u6a21", "stages"'))
    out = subprocess.run([sys.executable, "-m", "schedc.cli", "simulate", "a.csv", "--profile", "p.json"],
                         capture_output=True, cwd=tmp_path, timeout=TIMEOUT, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert out.returncode == 0 and b"Traceback" not in out.stderr, out.stderr


ESC = "\x1b]0;owned\x07\x1b[2J"


@pytest.mark.parametrize("argv", [["validate", "a" + ESC + ".csv"], ["simulate", "a.csv", "--x" + ESC],
                                  ["simulate", "a.csv", "--memory", ESC], ["baseline", ESC, "--stages", "2", "--mb", "2"]])
def test_terminal_escapes_in_arguments_are_printed_escaped(tmp_path, argv):
    (tmp_path / "a.csv").write_text(_ONE_F_ONE_B)
    out = _schedc(*argv, cwd=tmp_path)
    assert out.returncode == 2 and "\x1b" not in out.stderr and "\x07" not in out.stderr
    assert "\\x1b" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_printable_escapes_controls_and_bidi_overrides_only():
    from schedc.errors import printable

    assert printable("caf\u00e9 \u6a21\tx") == "caf\u00e9 \u6a21\tx"
    assert printable("a\x1b[2Jb\nc\u202ed\x9b") == "a\\x1b[2Jb\\nc\\u202ed\\x9b"


# ---------------------------------------------------------------- issue 39: outputs

def test_a_read_only_output_is_refused_even_for_root(tmp_path):
    ro = tmp_path / "ro.csv"
    ro.write_text("mine\n")
    ro.chmod(0o444)
    out = _schedc("baseline", "1f1b", "--stages", "2", "--mb", "2", "-o", "ro.csv", cwd=tmp_path)
    _one_line_error(out, "baseline", "ro.csv: the file exists and is read-only (mode -r--r--r--)")
    assert ro.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["ro.csv"]


def test_a_fifo_output_nobody_reads_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "out.csv")
    out = _schedc("baseline", "1f1b", "--stages", "2", "--mb", "2", "-o", "out.csv", cwd=tmp_path)
    _one_line_error(out, "baseline", "out.csv: a FIFO (named pipe) that no process is reading")


def test_an_output_name_ending_in_a_slash_is_refused_not_written_without_it(tmp_path):
    out = _schedc("baseline", "1f1b", "--stages", "2", "--mb", "2", "-o", "out/", cwd=tmp_path)
    _one_line_error(out, "baseline", "out/: ends in '/', a directory")
    assert list(tmp_path.iterdir()) == []


def test_a_legal_long_output_name_is_written(tmp_path):
    name = "x" * 246 + ".csv"  # 250 bytes: legal, though the temporary name once added 14
    assert cli.main(["baseline", "1f1b", "--stages", "2", "--mb", "2", "-o", str(tmp_path / name)]) == 0
    assert (tmp_path / name).read_text() == _ONE_F_ONE_B and sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_config_is_never_its_own_output(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                                  "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128}))
    before = config.read_bytes()
    out = _schedc("profile", "--units", "--config", "c.json", "--flops", "1e12", "--seq", "64", "-o", "c.json",
                  cwd=tmp_path)
    _one_line_error(out, "profile", "-o c.json would overwrite the input --config c.json")
    assert config.read_bytes() == before


def _library(tmp_path):
    import shutil
    from pathlib import Path

    lib = tmp_path / "lib"
    src = Path(__file__).resolve().parent.parent / "schedules"
    lib.mkdir()
    for name in ("r2_mb4_mem1p_loop_uniform.csv", "r2_mb4_mem1p_loop_uniform.json", "README.md"):
        shutil.copy(src / name, lib / name)
    return lib


def test_library_show_never_writes_a_profile_over_the_library(tmp_path):
    lib = _library(tmp_path)
    for name in ("r2_mb4_mem1p_loop_uniform.csv", "r2_mb4_mem1p_loop_uniform.json"):
        before = (lib / name).read_bytes()
        out = _schedc("library", "show", "r2_mb4_mem1p_loop_uniform", "--dir", "lib", "--write-profile",
                      f"lib/{name}", cwd=tmp_path)
        _one_line_error(out, "library", f"--write-profile lib/{name} would overwrite the input library")
        assert (lib / name).read_bytes() == before and out.stdout == ""


def test_library_index_never_replaces_a_readme_schedc_did_not_write(tmp_path):
    lib = _library(tmp_path)
    assert _schedc("library", "build", "lib", "--index-only", cwd=tmp_path).returncode == 0  # its own: rewritten
    (lib / "README.md").write_text("# my notes\n")
    for argv in (["--index-only"], ["--only", "r2_mb4_mem1p_loop_uniform", "--time-limit", "2"]):
        out = _schedc("library", "build", "lib", *argv, cwd=tmp_path)
        _one_line_error(out, "library", "lib/README.md: a README.md schedc did not write")
        assert (lib / "README.md").read_text() == "# my notes\n"


def test_library_prints_report_fields_escaped(tmp_path):
    lib = _library(tmp_path)
    report = json.loads((lib / "r2_mb4_mem1p_loop_uniform.json").read_text())
    report["status"] = ESC
    (lib / "r2_mb4_mem1p_loop_uniform.json").write_text(json.dumps(report))
    for argv in (["list", "--dir", "lib"], ["show", "r2_mb4_mem1p_loop_uniform", "--dir", "lib"]):
        out = _schedc("library", *argv, cwd=tmp_path)
        assert out.returncode == 0 and "\\x1b]0;owned\\x07" in out.stdout, out.stderr
        assert "\x1b" not in out.stdout + out.stderr


def test_simulate_says_how_the_costs_differ_when_the_names_are_the_same(tmp_path):
    name = "qwen2 (config.json): 28 layers"
    for file, forward in (("p1.json", 1), ("p2.json", 2)):
        (tmp_path / file).write_text(json.dumps({"format": "schedc.profile/v1", "model": name,
                                                 "stages": [{**_STAGE, "forward": forward}] * 2}))
    assert _schedc("compile", "--stages", "2", "--mb", "4", "--profile", "p1.json", "--time-limit", "5", "--quiet",
                   "-o", "s.csv", cwd=tmp_path).returncode == 0
    err = _schedc("simulate", "s.csv", "--profile", "p2.json", cwd=tmp_path).stderr
    assert f"both of '{name}': stage 0 forward 1 there, 2 here (and 1 more difference)" in err, err
    assert _schedc("simulate", "s.csv", "--profile", "p1.json", cwd=tmp_path).stderr == ""
    report = json.loads((tmp_path / "s.json").read_text())
    report["inputs"]["memory_limit"] = ESC  # a forged report: its fields are shown, not obeyed
    (tmp_path / "s.json").write_text(json.dumps(report))
    out = _schedc("simulate", "s.csv", "--profile", "p1.json", cwd=tmp_path)
    assert "\x1b" not in out.stderr


def _profile_config_with_model_type(tmp_path, model_type: str):
    """`schedc profile --units` of a small config.json whose model_type a hostile file set: not one
    schedc counts, so refused in one line that names it."""
    (tmp_path / "c.json").write_text(json.dumps({"model_type": model_type, "hidden_size": 64, "num_hidden_layers": 2,
                                                 "num_attention_heads": 4, "vocab_size": 100,
                                                 "intermediate_size": 128}))
    out = _schedc("profile", "--units", "--config", "c.json", "--flops", "1e12", "--seq", "64", "-o", "u.json",
                  cwd=tmp_path)
    _one_line_error(out, "profile", "c.json: model_type 'llama", "is not modelled by schedc")
    assert out.stdout == "" and not (tmp_path / "u.json").exists()
    return out


def test_a_config_s_model_type_is_printed_escaped_by_profile(tmp_path):
    out = _profile_config_with_model_type(tmp_path, "llama" + ESC)
    assert "llama\\x1b]0;owned\\x07\\x1b[2J" in out.stderr and "\x1b" not in out.stdout + out.stderr


@pytest.mark.parametrize("files, argv, command, needle", [
    ({"p.json": _profile(_STAGE, 4)}, ["compile", "--profile", "p.json", "--stages", "8", "--mb", "8", "-o", "s.csv"],
     "compile", "--profile p.json describes 4 stages but --stages is 8"),
    ({"a.csv": _ONE_F_ONE_B}, ["emulate", "a.csv", "--timeout", "nan"], "emulate", "--timeout must be a finite"),
    ({"m.py": "def f(**kw):\n    return 3\n"}, ["profile", "--model", "m:f", "-o", "p.json"], "profile",
     "--model m:f: returned int; return a list of torch.nn.Module stages"),
    ({"a.csv": _ONE_F_ONE_B, "deep.json": "[" * 100000 + "]" * 100000},
     ["validate", "a.csv", "--for", "torchtitan:1F1B", "--layers", "4", "--partition", "deep.json"], "validate",
     "deep.json: JSON nested too deeply"),
])
def test_more_inputs_that_once_passed_or_crashed(tmp_path, files, argv, command, needle):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    before = sorted(p.name for p in tmp_path.iterdir())
    _one_line_error(_schedc(*argv, cwd=tmp_path), command, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_plan_never_writes_its_report_over_the_units_it_read(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                                                 "num_attention_heads": 4, "vocab_size": 100,
                                                 "intermediate_size": 128}))
    assert _schedc("profile", "--units", "--config", "c.json", "--flops", "1e12", "--seq", "64", "-o", "u.json",
                   cwd=tmp_path).returncode == 0
    before = (tmp_path / "u.json").read_bytes()
    for given in ("u.json", "none=u.json"):  # plan's --profile may name a mode (--ac auto)
        out = _schedc("plan", "--profile", given, "--ranks", "2", "--mb", "4", "--memory", "80G", "--time-limit", "2",
                      "-o", "u.csv", cwd=tmp_path)
        _one_line_error(out, "plan", "u.json would overwrite the input --profile")
    assert (tmp_path / "u.json").read_bytes() == before and not (tmp_path / "u.csv").exists()


# ---------------------------------------------------------------- names with a newline or an escape

NL = "\nschedc: forged line\x1b[31m"  # a newline would forge an output line, ESC[31m recolour the terminal
NL_SHOWN = "\\nschedc: forged line\\x1b[31m"


def _no_raw_input(out) -> None:
    assert "\x1b" not in out.stdout + out.stderr and "forged line\n" not in out.stdout + out.stderr
    assert not any(line.startswith("schedc: forged") for line in (out.stdout + out.stderr).splitlines())


@pytest.mark.parametrize("files, argv, command", [
    ({"a" + NL + ".csv": "0F0,0X1\n"}, ["validate", "a" + NL + ".csv"], "validate"),
    ({"c" + NL + ".json": json.dumps({"model_type": "llama", "hidden_size": "big"})},
     ["profile", "--units", "--config", "c" + NL + ".json", "--seq", "64", "-o", "u.json"], "profile"),
    ({"u.json": json.dumps({"format": "schedc.profile/v1", "model": "m" + NL,
                            "stages": [{**_STAGE, "modules": [f"layers.{i}" + (NL if i == 1 else "")]}
                                       for i in range(4)]})},
     ["plan", "--profile", "u.json", "--ranks", "2", "--mb", "4", "--memory", "none", "-o", "p.csv"], "plan"),
])
def test_an_error_naming_a_hostile_name_is_one_escaped_line(tmp_path, files, argv, command):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    out = _schedc(*argv, cwd=tmp_path)
    _one_line_error(out, command, NL_SHOWN)
    _no_raw_input(out)


def test_a_warning_and_a_printout_naming_a_hostile_file_are_one_line_each(tmp_path):
    name = "a" + NL + ".csv"
    (tmp_path / name).write_text(_ONE_F_ONE_B)
    (tmp_path / ("a" + NL + ".json")).write_text("{not json")  # the report beside it, unreadable
    out = _schedc("simulate", name, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    warning, = out.stderr.splitlines()
    assert warning.startswith("schedc simulate: warning: ignoring the report beside a" + NL_SHOWN + ".csv: ")
    assert out.stdout.splitlines()[0].startswith("a" + NL_SHOWN + ".csv: 2 stages on 2 ranks")
    _no_raw_input(out)
    (tmp_path / ("a" + NL + ".json")).unlink()
    out = _schedc("validate", name, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.splitlines() == ["a" + NL_SHOWN + ".csv: valid: 2 stages on 2 ranks "
                                                               "(loop), 2 microbatches"], out.stdout


def test_a_config_s_model_type_with_a_newline_prints_on_its_line(tmp_path):
    out = _profile_config_with_model_type(tmp_path, "llama" + NL)
    assert "c.json: model_type 'llama" + NL_SHOWN + "' is not modelled by schedc" in out.stderr
    _no_raw_input(out)


def test_a_rank_hands_its_whole_error_up_on_one_line(tmp_path, monkeypatch):
    from schedc.runtime.launch import run_rank

    monkeypatch.setenv("SCHEDC_RESULT", str(tmp_path / "r.json"))
    monkeypatch.delenv("SCHEDC_LEADER_PID", raising=False)

    def fail():
        raise SchedcError("a" + NL + ".csv: rank 0 (row 1): unknown action")

    assert run_rank(fail) == 1
    assert json.loads((tmp_path / "r.json").read_text()) == {"error": "a" + NL_SHOWN + ".csv: rank 0 (row 1): unknown action"}


def test_library_prints_a_report_field_with_a_newline_on_its_line(tmp_path):
    lib = _library(tmp_path)
    report = json.loads((lib / "r2_mb4_mem1p_loop_uniform.json").read_text())
    report["status"] = "optimal" + NL
    (lib / "r2_mb4_mem1p_loop_uniform.json").write_text(json.dumps(report))
    for argv in (["list", "--dir", "lib"], ["show", "r2_mb4_mem1p_loop_uniform", "--dir", "lib"]):
        out = _schedc("library", *argv, cwd=tmp_path)
        assert out.returncode == 0 and "optimal" + NL_SHOWN in out.stdout, out.stderr
        _no_raw_input(out)


# ---------------------------------------------------------------- a plan for schedc's runtime: plan_settings,
# examples/train.py --plan, validate --partition (each one line naming the file, field or flag; nothing started)

_PARTITION = [["tok_embeddings", "layers.0", "layers.1"], ["layers.2", "layers.3", "norm", "lm_head"]]
_PER_BLOCK = [["full", "none"], ["selective", "selective"]]


def _plan_files(folder, assumes=None, partition=None, schedule=None):
    """plan.csv and plan.json (recording the CSV's hash) as `schedc plan` writes them; 2 ranks x 4."""
    from schedc.core.baselines import make_baseline

    report = {"partition": _PARTITION if partition is None else partition,
              "assumes": {"activation_checkpoint": _PER_BLOCK} if assumes is None else assumes,
              # the model examples/train.py builds (its shape is the plan's)
              "profile": {"model": "gpt(layers=4, hidden=32, heads=2, seq=16, vocab=64)/6 units"}}
    csvio.write_schedule(schedule or make_baseline("1f1b", 2, 4), report, folder / "plan.csv")
    return folder / "plan.json"


def _with(**assumes_or_partition):
    """A plan report with one field replaced (``partition``, ``assumes``, or the checkpointing)."""
    report = {"partition": _PARTITION, "assumes": {"activation_checkpoint": _PER_BLOCK}}
    for key, value in assumes_or_partition.items():
        if key == "ac":
            report["assumes"] = {"activation_checkpoint": value}
        elif value is _DROP:
            report.pop(key)
        else:
            report[key] = value
    return report


_DROP = object()
BAD_PLANS = [  # (report, or the file's raw text; what the line names)
    ("{not json", "line 1 column 2: not valid JSON"),
    ("[" * 100000 + "]" * 100000, "JSON nested too deeply"),
    ([1, 2], "expected a JSON object"),
    (_with(assumes=_DROP), 'no "assumes"'),
    (_with(assumes=[1]), '"assumes" is not an object'),
    (_with(partition=[[1, 2], ["layers.0"]]), '"partition" is not a list of non-empty lists of module names'),
    (_with(partition=[["unit0"], ["unit1"]]), '"partition" names no blocks'),
    (_with(ac=3), "assumes.activation_checkpoint: int 3 is neither a mode"),
    (_with(ac=float("nan")), "assumes.activation_checkpoint: float nan is neither a mode"),
    (_with(ac={"full": 1}), "assumes.activation_checkpoint: dict"),
    (_with(ac=[1, "none"]), "assumes.activation_checkpoint[0]: int 1 is neither a mode"),
    (_with(ac=[[["full"]], "none"]), "assumes.activation_checkpoint[0]: 1 modes given for the 2 blocks of stage 0"),
    (_with(ac=[["full", ["none"]], "none"]), "assumes.activation_checkpoint[0][1]: list ['none'] is not one of"),
    (_with(ac="sometimes"), "assumes.activation_checkpoint: 'sometimes' is not one of none, light, selective, full"),
    (_with(ac=["none", "x" * 5000]), "assumes.activation_checkpoint[1]: 'xxxxxxxxxxxxxxxxxxxx'... (5000 characters)"),
    (_with(ac=["none", "none", "none"]), "assumes.activation_checkpoint: 3 modes given for 2 stages"),
    (_with(ac=[]), "assumes.activation_checkpoint: 0 modes given for 2 stages"),
    (_with(ac=[["full"], "none"]), "assumes.activation_checkpoint[0]: 1 modes given for the 2 blocks of stage 0"),
    # light's near misses: a case, the planner's pair name, a mode inside a per-block list
    (_with(ac=["Light", "none"]), "assumes.activation_checkpoint[0]: 'Light' is not one of none, light, selective"),
    (_with(ac=["light+full", "none"]), "assumes.activation_checkpoint[0]: 'light+full' is not one of none, light"),
    (_with(ac=[["light", "lite"], "light"]), "assumes.activation_checkpoint[0][1]: 'lite' is not one of none, light"),
]


def _bad_plan(tmp_path, report):
    path = _plan_files(tmp_path)
    path.write_text(report if isinstance(report, str) else json.dumps(report))
    return path


@pytest.mark.parametrize("report, needle", BAD_PLANS)
def test_plan_settings_names_the_file_and_field_of_a_malformed_plan(tmp_path, report, needle):
    pytest.importorskip("torch")
    from schedc.runtime.checkpointing import plan_settings

    path = _bad_plan(tmp_path, report)
    with pytest.raises(SchedcError) as e:  # never a TypeError, AttributeError or RecursionError
        plan_settings(path)
    assert type(e.value) is SchedcError and "\n" not in str(e.value)
    assert str(e.value).startswith(f"{path}: ") and needle in str(e.value), str(e.value)


def _train_main():
    """examples/train.py's main, loaded by path (it is a script, not a module of the package)."""
    import importlib.util

    from schedc.runtime.launch import ROOT

    spec = importlib.util.spec_from_file_location("_train_example", ROOT / "examples" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _one_error_line(capsys, code: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


@pytest.mark.parametrize("report, needle", BAD_PLANS[::3] + BAD_PLANS[-2:])
def test_train_plan_refuses_a_malformed_plan_before_any_process_group(tmp_path, monkeypatch, capsys, report,
                                                                       needle):
    pytest.importorskip("torch")
    train = _train_main()
    path = _bad_plan(tmp_path, report)
    monkeypatch.chdir(tmp_path)
    _one_error_line(capsys, train.main(["--plan", "plan.json"]), f"error: --plan {path.name}: ", needle)


def test_train_flags_that_contradict_the_plan_or_csv_are_one_line_naming_the_flag(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    from schedc.core.baselines import make_baseline

    train = _train_main()
    monkeypatch.chdir(tmp_path)
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    _plan_files(tmp_path)
    for argv, needles in [
        (["--plan", "plan"], ["--plan plan: no such file"]),
        (["--plan", "."], ["--plan .: is a directory"]),
        (["--plan", "/dev/null"], ["--plan /dev/null: is a character device"]),
        (["--plan", "plan.json", "--layers", "3"], ["--layers 3: the plan's partition holds 4 blocks"]),
        (["--plan", "plan.json", "--layers-per-stage", "2,2"], ["--layers-per-stage: --plan sets the blocks"]),
        (["--plan", "plan.json", "--ac", "Full"], ["--ac: 'Full' is not one of none, light, selective, full"]),
        (["--plan", "plan.json", "--ac", "full,"], ["--ac: '' is not one of"]),
        (["--plan", "plan.json", "--ac", "full,none,none"], ["--ac full,none,none: 3 modes for the 2 stages"]),
        (["--plan", "plan.json", "--mb", "8"], ["--mb 8: plan.csv runs 4 microbatches"]),
        (["--schedule", "plan.csv", "--layers-per-stage", "a,b"], ["--layers-per-stage 'a,b': give block counts"]),
        (["--schedule", "plan.csv", "--mb", "0"], ["--mb must be >= 1, got 0"]),
        (["--schedule", "plan.csv", "--timeout", "nan"], ["--timeout must be a finite number"]),
        (["--schedule", "plan.csv", "--dtype", "float8"], ["--dtype: dtype must be one of"]),
        # not under torchrun: torch's env:// rendezvous would raise a traceback
        (["--plan", "plan.json"], ["RANK is not set: start this script with torchrun", "--nproc-per-node 2"]),
    ]:
        _one_error_line(capsys, train.main(argv), "error: ", *needles)
    # a plan whose CSV was rewritten, or whose partition has another stage count than the CSV beside it
    csvio.write_csv(make_baseline("gpipe", 2, 4), tmp_path / "plan.csv")
    _one_error_line(capsys, train.main(["--plan", "plan.json"]), "plan.csv is not the schedule this plan wrote")
    _plan_files(tmp_path, partition=[["tok_embeddings", "layers.0"], ["layers.1"], ["layers.2"], ["layers.3", "norm"]],
                assumes={"activation_checkpoint": "none"})
    _one_error_line(capsys, train.main(["--plan", "plan.json"]), "its partition has 4 stages but plan.csv has 2")


def test_train_plan_outside_torchrun_is_one_line_not_torchs_traceback(tmp_path):
    pytest.importorskip("torch")
    from schedc.runtime.launch import ROOT, worker_env

    _plan_files(tmp_path)
    env = {k: v for k, v in worker_env().items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "train.py"), "--plan", "plan.json"],
                         capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path, env=env)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert "RANK is not set: start this script with torchrun" in out.stderr


def test_the_runtime_api_names_its_parameters_and_train_py_its_flags():
    pytest.importorskip("torch")
    from schedc.errors import ParameterError
    from schedc.runtime import GPT, GPTConfig, lm_loss, load_torch_pipeline
    from schedc.runtime.checkpointing import stage_modes
    from schedc.runtime.one_rank import one_rank_group

    train = _train_main()
    for choice, needle in [(3, "activation_checkpoint: int 3 is neither a mode"),
                           (None, "activation_checkpoint: NoneType None is neither a mode"),
                           (["full", 2], "activation_checkpoint[1]: int 2 is neither a mode"),
                           (["full"], "activation_checkpoint: 1 modes given for 2 stages")]:
        with pytest.raises(ParameterError) as e:
            stage_modes(choice, 2)
        assert str(e.value).startswith(needle), str(e.value)
        assert str(train.as_flags(e.value)).startswith(needle.replace("activation_checkpoint", "--ac")), e.value
    model = GPT(GPTConfig(vocab_size=32, hidden=16, layers=2, heads=2, seq_len=8))
    with one_rank_group("cpu"):
        for name, needle in [("foo", "name: Unknown schedule name 'foo'"),
                             ("PipelineScheduleSingle", "name: 'PipelineScheduleSingle' is one of torch's abstract"),
                             (3, "name: expected a schedule name such as '1F1B', got int")]:
            with pytest.raises(ParameterError) as e:
                load_torch_pipeline(name, model, lm_loss, 2)
            assert str(e.value).startswith(needle) and "--torch-schedule" not in str(e.value), str(e.value)
            assert str(train.as_flags(e.value)).startswith(needle.replace("name:", "--torch-schedule:"))
        # a per-block list is checked against the blocks per stage given, before any stage is built
        from schedc.core.baselines import make_baseline
        from schedc.runtime import load_pipeline

        with pytest.raises(ParameterError, match=r"^activation_checkpoint\[0\]: 2 modes given for the 1 blocks of "):
            load_pipeline(make_baseline("zb-v", 2, 2, n_ranks=1), model, lm_loss, layers_per_stage=[1, 1],
                          activation_checkpoint=[["full", "none"], "none"])


def test_validate_partition_checks_a_plan_s_checkpointing_against_the_csv(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    from schedc.core.baselines import make_baseline

    monkeypatch.chdir(tmp_path)
    _plan_files(tmp_path)  # 1F1B runs B: selective applies on stage 1
    assert cli.main(["validate", "plan.csv", "--partition", "plan.json"]) == 0
    assert "launched on the partition of plan.json" in capsys.readouterr().out
    # a framework fits the CSV, but applies one checkpointing mode per run: said on the line
    assert cli.main(["validate", "plan.csv", "--for", "torchtitan:1F1B", "--partition", "plan.json"]) == 0
    assert "checkpoints activations per stage or block (full, none, selective), which torchtitan 0.3.0 cannot " \
           "apply" in capsys.readouterr().out
    for report, needle in BAD_PLANS[4:]:
        _bad_plan(tmp_path, report)
        code = cli.main(["validate", "plan.csv", "--partition", "plan.json"])
        err = _one_error_line(capsys, code, "schedc validate: error: --partition plan.json: ")
        if "names no blocks" in needle:  # a framework takes any names: the per-block list fits no block
            needle = "assumes.activation_checkpoint[0]: 2 modes given for the 0 blocks of stage 0"
        assert needle in err or "expected a plan report with 'partition'" in err, (needle, err)
    # selective or light checkpointing on a stage the CSV runs as I then W: torch's split backward refuses it
    _plan_files(tmp_path, schedule=make_baseline("zb-h1", 2, 4))
    code = cli.main(["validate", "plan.csv", "--partition", "plan.json"])
    _one_error_line(capsys, code, "plan.csv: stage 1 runs I and W apart", "'full' or 'none'")
    for light in (["none", "light"], [["none", "none"], ["full", "light"]], "light"):
        _plan_files(tmp_path, assumes={"activation_checkpoint": light}, schedule=make_baseline("zb-h1", 2, 4))
        code = cli.main(["validate", "plan.csv", "--partition", "plan.json"])
        _one_error_line(capsys, code, "plan.csv: stage 1 runs I and W apart", "per op ('light')")
    # ... but stage 0 may: torch runs its whole backward in W
    _plan_files(tmp_path, assumes={"activation_checkpoint": ["light", "none"]}, schedule=make_baseline("zb-h1", 2, 4))
    assert cli.main(["validate", "plan.csv", "--partition", "plan.json"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    # a partition alone, or per-stage costs naming their modules (their "assumes" is the profile's),
    # are not plan reports: checked for the split only
    (tmp_path / "split.json").write_text(json.dumps(_PARTITION))
    costs = {"format": "schedc.profile/v1", "assumes": {"activation_checkpoint": "per unit"},
             "stages": [dict(_STAGE, modules=stage) for stage in _PARTITION]}
    (tmp_path / "costs.json").write_text(json.dumps(costs))
    for split in ("split.json", "costs.json"):
        assert cli.main(["validate", "plan.csv", "--partition", split]) == 0, capsys.readouterr().err


def test_the_framework_warning_counts_a_per_block_plan_s_modes():
    from schedc.frameworks._base import Handoff

    def handoff(ac):
        return Handoff(partition=_PARTITION, placement="loop", n_ranks=2, n_microbatches=4, csv="plan.csv",
                       assumes={"activation_checkpoint": ac})

    mixed = handoff([["full", "full", "none"], ["selective", "selective", "none"]])
    assert mixed.ac_mode() is None
    assert mixed.ac_summary() == "[full x 2, none x 1] x 1, [selective x 2, none x 1] x 1"
    assert handoff([["full", "full"], "full"]).ac_mode() == "full"  # every block full: one mode per run
    assert handoff(["none", "none", "full"]).ac_summary() == "none x 2, full x 1"


@pytest.mark.parametrize("key, value", [("dp_shard", "abc"), ("dp_shard", -1), ("dp_shard", 2.5), ("tp", [2]),
                                        ("seq_len", True), ("microbatch_size", 1e300),
                                        ("activation_checkpoint", ["full", 3]), ("optimizer", ["adamw"]),
                                        ("param_dtype", {"bf16": 1})])
def test_a_profile_s_assumed_run_settings_are_refused_before_a_plan_prints_them(tmp_path, monkeypatch, capsys, key,
                                                                                value):
    # the framework hand-off prints them as flags and YAML: int('abc') was a traceback, -1 a flag
    units = [dict(_STAGE, static_bytes=1, modules=[name]) for name in ("tok_embeddings", "layers.0", "layers.1",
                                                                       "norm")]
    (tmp_path / "u.json").write_text(json.dumps({"format": "schedc.profile/v1", "stages": units,
                                                 "assumes": {"seq_len": 8, key: value}}))
    monkeypatch.chdir(tmp_path)
    code = cli.main(["plan", "--profile", "u.json", "--ranks", "2", "--mb", "4", "--memory", "none", "--time-limit",
                     "1", "--quiet", "-o", "plan.csv"])
    _one_error_line(capsys, code, f"schedc plan: error: u.json: field assumes: {key} must be ")
    assert not (tmp_path / "plan.csv").exists()


def test_plan_refuses_run_settings_beyond_any_model_before_printing_them(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64,
                                  "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                                  "vocab_size": 256, "torch_dtype": "bfloat16"}))
    for flag, value in (("--dp-shard", "100000000000000000000"), ("--tp", "70000"), ("--mbs", "70000")):
        out = subprocess.run([sys.executable, "-m", "schedc.cli", "plan", "--config", str(config), "--seq", "64",
                              flag, value, "--ranks", "2", "--mb", "4", "--memory", "80GiB", "--time-limit", "1"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert f"{flag} {value} is beyond any run schedc counts" in out.stderr
        assert not (tmp_path / "plan.csv").exists()


def test_plan_refuses_too_many_microbatches_before_bounding_any_partition(monkeypatch):
    import schedc
    from schedc.library import transformer_profile
    from schedc.planning import search

    def bound(*args, **kwargs):
        raise AssertionError("the partition bounds ran on a plan too large to compile")

    monkeypatch.setattr(search, "bounds_over_partitions", bound)
    monkeypatch.setattr("schedc.planning.planner.bounds_over_partitions", bound)
    units = transformer_profile(6, layers=6, hidden=256, vocab=32000, seq=256)
    with pytest.raises(SchedcError, match=r"^microbatches: 2 stages x 1000000 microbatches is 6,000,000 actions"):
        schedc.plan(profile=units, ranks=2, microbatches=10**6, memory="none", placement="loop")


def test_simulate_of_a_plan_without_costs_names_the_profile_beside_it(tmp_path):
    (tmp_path / "c.json").write_text(_SMALL_CONFIG)
    assert _schedc("plan", "--config", "c.json", "--seq", "64", "--ranks", "2", "--mb", "4", "--memory", "80GiB",
                   "--time-limit", "2", "--quiet", "-o", "p.csv", cwd=tmp_path).returncode == 0
    out = _schedc("simulate", "p.csv", cwd=tmp_path)  # a newcomer's first try: the costs beside it, as plot's
    assert out.returncode == 0 and "costs from p.profile.json beside it" in out.stdout
    assert "other costs" not in out.stderr and "pass --memory 80.00GiB" in out.stderr
    out = _schedc("simulate", "p.csv", "--costs", "1,1,1", cwd=tmp_path)  # another model's costs: said
    assert out.returncode == 0 and "pass the costs it was compiled with (--profile p.profile.json)" in out.stderr
    out = _schedc("simulate", "p.csv", "--profile", "p.profile.json", "--memory", "80GiB", cwd=tmp_path)
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_trace_never_writes_over_the_report_or_profile_beside_its_csv(tmp_path):
    # `trace s.csv -o s.json` read the compile report for its costs, then wrote the trace over it
    assert _schedc("compile", "--stages", "2", "--mb", "4", "--time-limit", "5", "--quiet", "-o", "s.csv",
                   cwd=tmp_path).returncode == 0
    (tmp_path / "s.profile.json").write_text(_profile(_STAGE))  # as `schedc plan` leaves one beside its CSV
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    for name, what in (("s.json", "report"), ("s.profile.json", "profile")):
        _one_line_error(_schedc("trace", "s.csv", "-o", name, cwd=tmp_path), "trace",
                        f"-o {name} would overwrite the input schedule s.csv's {what} {name}")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_bytes_past_any_gpu_print_with_an_exponent_not_hundreds_of_digits(tmp_path):
    (tmp_path / "a.csv").write_text(_ONE_F_ONE_B)
    (tmp_path / "huge.json").write_text(_profile({**_STAGE, "activation_bytes": 1e300}))
    out = _schedc("simulate", "a.csv", "--profile", "huge.json", cwd=tmp_path)
    assert out.returncode == 0 and "1.82e+288TiB" in out.stdout, out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) < 400


def test_emulate_ignores_a_broken_report_beside_its_csv_as_plot_and_trace_do(tmp_path):
    pytest.importorskip("torch")
    from schedc.cli.common import costs_beside

    (tmp_path / "a.csv").write_text(_ONE_F_ONE_B)
    (tmp_path / "a.json").write_text("{not json")  # the report beside: emulate stopped on it, naming only a.json
    assert costs_beside(str(tmp_path / "a.csv"), "emulate") is None


def test_plot_draws_a_title_s_control_characters_escaped(tmp_path):
    (tmp_path / "a.csv").write_text(_ONE_F_ONE_B)
    out = _schedc("plot", "a.csv", "--title", "a" + ESC, "-o", "t.png", cwd=tmp_path)
    # matplotlib warned on stderr of every control glyph missing from its font
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert "a\\x1b]0;owned\\x07" in out.stdout and "\x1b" not in out.stdout


# ---------------------------------------------------------------- the probe's final pass (issue 52)

@pytest.mark.parametrize("files, argv, command, needle", [
    # a scale whose sleeps cannot add up, and a deadline past what torch's process group keeps
    # (OverflowError from every rank): named by flag before any rank starts
    ({"a.csv": _ONE_F_ONE_B}, ["emulate", "a.csv", "--scale", "inf"], "emulate", "--scale must be a finite number > 0"),
    ({"a.csv": _ONE_F_ONE_B}, ["emulate", "a.csv", "--scale", "1e308"], "emulate",
     "--scale 1e+308 times the costs of"),
    ({"a.csv": _ONE_F_ONE_B}, ["emulate", "a.csv", "--timeout", "1e308"], "emulate",
     "--timeout must be a number of seconds > 0 and at most 604800 (a week), got 1e+308"),
    # counts past schedc's bounds: the flag and the range, before a profile is read or a partition tried
    ({"c.json": _SMALL_CONFIG}, ["plan", "--config", "c.json", "--seq", "64", "--ranks", "4097", "--mb", "4",
                                 "--memory", "none", "-o", "p.csv"], "plan",
     "argument --ranks: 4097 is more ranks than schedc handles (at most 4,096); give 1 to 4096"),
    ({}, ["plan", "--config", "c.json", "--seq", "64", "--ranks", "2", "--mb", "0", "--memory", "none"], "plan",
     "argument --mb: must be at least 1, got 0"),
    ({}, ["compile", "--stages", "2", "--mb", "x", "-o", "s.csv"], "compile",
     "argument --mb: 'x' is not a whole number of microbatches; give 1 to 1048576"),
    ({}, ["baseline", "1f1b", "--stages", "2", "--mb", "2", "--ranks", "99999"], "baseline",
     "argument --ranks: 99999 is more ranks than schedc handles"),
    # a V of an odd stage count: the flags, not "V placement ... on 1 ranks"
    ({}, ["compile", "--stages", "3", "--placement", "v", "--mb", "4", "-o", "s.csv"], "compile",
     "--placement v needs an even number of stages on each rank; --stages 3 on 1 rank is not"),
])
def test_the_final_pass_s_inputs_name_their_flag(tmp_path, files, argv, command, needle):
    if command == "emulate":
        pytest.importorskip("torch")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    before = sorted(p.name for p in tmp_path.iterdir())
    _one_line_error(_schedc(*argv, cwd=tmp_path), command, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("value", ["[" * 100000, "1+" * 50000, "9" * 100000])
def test_a_huge_model_arg_is_refused_naming_the_flag(value):
    from schedc.cli.common import model_args

    with pytest.raises(SchedcError, match=r"^--model-arg 'layers=.*100,007 characters, more than a model argument"):
        model_args(["layers=" + value])
    with pytest.raises(SchedcError, match=r"^--model-arg layers=\.\.\.: the value is nested too deeply"):
        model_args(["layers=" + "-" * 4000 + "1"])  # within the bound, past the parser: a RecursionError
    assert model_args(["layers=8", "name=gpt"]) == {"layers": 8, "name": "gpt"}


def test_compile_with_stdout_closed_writes_nothing(tmp_path):
    (tmp_path / "s.csv").write_text("kept\n")
    out = subprocess.run(["bash", "-c", f"exec >&-; exec {sys.executable} -m schedc.cli compile --stages 2 --mb 2 "
                                        "--time-limit 2 -o s.csv"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=TIMEOUT)
    _one_line_error(out, "compile", "standard output: closed when schedc started", ">/dev/null")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.csv"] and (tmp_path / "s.csv").read_text() == "kept\n"


_WRITER = """
import sys, time
from schedc.io.fileio import write_all
path, mark, until = sys.argv[1], sys.argv[2], float(sys.argv[3])
while time.time() < until:
    write_all({path: (mark * 2**18 + "\\n").encode()})
"""


def test_concurrent_writers_of_one_path_never_leave_a_partial_file(tmp_path):
    """Two processes (``baseline -o s.csv`` twice) write one path over and over while it is read:
    every read sees one writer's whole file, and no temporary file stays behind."""
    import time

    target = tmp_path / "s.csv"
    until = time.time() + 3.0
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(target), mark, str(until)]) for mark in "ab"]
    whole = {(mark * 2**18 + "\n").encode() for mark in "ab"}
    reads = 0
    try:
        while any(w.poll() is None for w in writers):
            try:
                data = target.read_bytes()
            except FileNotFoundError:  # before the first rename
                continue
            assert data in whole, (len(data), data[:1], data[-2:])
            reads += 1
    finally:
        for w in writers:
            w.wait(timeout=TIMEOUT)
    assert all(w.returncode == 0 for w in writers)
    assert reads > 0 and target.read_bytes() in whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.csv"]


@pytest.mark.parametrize("argv, command, flag", [
    # an unset shell variable (--profile "$P"): the default costs were used, the CSV printed, silently
    (["baseline", "1f1b", "--stages", "2", "--mb", "4", "-o", ""], "baseline", "-o/--output"),
    (["simulate", "a.csv", "--profile", ""], "simulate", "--profile"),
    (["compile", "--stages", "2", "--mb", "2", "--profile", "", "-o", "s.csv"], "compile", "--profile"),
    (["compile", "--stages", "2", "--mb", "2", "--plot", "", "-o", "s.csv"], "compile", "--plot"),
    (["emulate", "a.csv", "--profile", ""], "emulate", "--profile"),
    (["trace", "", "-o", "t.json"], "trace", "FILE.csv"),
    (["plot", "a.csv", "-o", ""], "plot", "-o/--output"),
    (["library", "list", "--ranks", "0"], "library list", "--ranks"),
])
def test_an_empty_path_or_a_zero_count_is_refused_naming_the_flag(tmp_path, argv, command, flag):
    (tmp_path / "a.csv").write_text(_ONE_F_ONE_B)
    out = _schedc(*argv, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith(f"schedc {command}: error: argument {flag}: "), out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_compile_says_its_files_were_written_when_stdout_fails_after_them(tmp_path):
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "schedc.cli", "compile", "--stages", "2", "--mb", "2", "--quiet",
                              "--time-limit", "2", "-o", "s.csv"], stdout=full, stderr=subprocess.PIPE, text=True,
                             cwd=tmp_path, timeout=TIMEOUT)
    _one_line_error(out, "compile", "standard output: No space left on device; s.csv and s.json were written")
    csvio.read_report(tmp_path / "s.csv")  # whole, and the report matches its CSV
