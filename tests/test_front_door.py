"""One front door: the commands call schedc.api, so each option is wired once and each default
lives in one place (issue 37, item 5)."""

import json
import re

import pytest

import schedc
from schedc import api, frameworks
from schedc.cli import toplevel as cli

# fields of a compile's report that record when and how long, not what
_TIMES = {"solve_time", "progress", "work_spent"}


def _report(path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in _TIMES}


def test_schedc_compile_writes_what_schedc_dot_compile_returns(tmp_path, capsys):
    argv = ["compile", "--stages", "4", "--mb", "8", "--placement", "v", "--costs", "1,1.5,0.5", "--comm", "0.1",
            "--memory", "1.5p", "--budget", "work", "--time-limit", "2", "--quiet", "-o", str(tmp_path / "cli.csv")]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    res = schedc.compile(stages=4, microbatches=8, placement="v", profile=schedc.Profile.uniform(4, 1, 1.5, 0.5, comm=0.1),
                         memory="1.5p", budget="work", time_limit=2)
    schedc.write_csv(res.schedule, tmp_path / "api.csv", report=res.report)
    assert (tmp_path / "cli.csv").read_bytes() == (tmp_path / "api.csv").read_bytes()
    assert _report(tmp_path / "cli.json") == _report(tmp_path / "api.json")
    assert f"status {res.status}" in printed and f"makespan {res.simulation.makespan:.6g} units" in printed


def test_a_default_changed_in_the_api_is_the_one_the_command_uses(tmp_path, monkeypatch, capsys):
    # schedc.api.compile's own keyword defaults, not the parser's: the command leaves out what was not given
    defaults = api.compile.__wrapped__.__kwdefaults__
    monkeypatch.setitem(defaults, "memory", "2p")
    monkeypatch.setitem(defaults, "objective", "span")
    monkeypatch.setitem(defaults, "budget", "work")
    assert cli.main(["compile", "--stages", "2", "--mb", "4", "--time-limit", "2", "--quiet",
                     "-o", str(tmp_path / "s.csv")]) == 0
    inputs = json.loads((tmp_path / "s.json").read_text())["inputs"]
    assert (inputs["memory_limit"], inputs["objective"]) == ("2p", "span")
    assert "memory 2p, objective span" in capsys.readouterr().out
    # and the limit simulate judges a CSV against when --memory is not given
    monkeypatch.setattr(api, "DEFAULT_MEMORY", "3p")
    assert cli.main(["simulate", str(tmp_path / "s.csv")]) == 0
    assert "memory limit 3p:" in capsys.readouterr().out


def test_the_parser_restates_no_default_of_the_api():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for command, dests in {
        "compile": ("ranks", "placement", "memory", "costs", "comm", "runtime", "objective", "time_limit", "budget",
                    "solver"),
        "simulate": ("memory", "costs", "comm", "runtime"),
        "baseline": ("ranks", "placement"),
        "profile": ("layers", "hidden", "heads", "seq", "vocab", "mbs", "dtype", "optimizer", "warmup", "repeats",
                    "comm_latency", "concurrent", "flops", "memory_bandwidth", "names", "impl", "dp_shard", "tp"),
        "emulate": ("steps", "warmup", "comm"),
        "calibrate": ("steps", "warmup_steps", "device"),
    }.items():
        actions = {a.dest: a for a in sub[command]._actions}
        assert {d: actions[d].default for d in dests} == dict.fromkeys(dests), command


def test_a_counted_profile_default_lives_in_the_run_settings(tmp_path, monkeypatch, capsys):
    import dataclasses

    from schedc.core.settings import RunSettings

    shape = {"layers": 2, "hidden": 64, "vocab": 100, "heads": 4}
    argv = ["profile", "--flops", "1e12", "--layers", "2", "--hidden", "64", "--vocab", "100", "--heads", "4",
            "--seq", "8", "--ac", "full", "--names", "hf"]
    assert cli.main([*argv, "-o", str(tmp_path / "cli.json")]) == 0
    api_profile = schedc.count_profile(shape, seq=8, flops_per_second=1e12, activation_checkpoint="full", names="hf")
    assert schedc.Profile.load(tmp_path / "cli.json") == api_profile
    # every field has a default, so the dataclass's __init__ holds them in field order
    defaults = list(RunSettings.__init__.__defaults__)
    defaults[[f.name for f in dataclasses.fields(RunSettings)].index("bandwidth")] = 10e9
    monkeypatch.setattr(RunSettings.__init__, "__defaults__", tuple(defaults))
    assert cli.main([*argv, "-o", str(tmp_path / "slow.json")]) == 0
    assert "10 GB/s per link" in schedc.Profile.load(tmp_path / "slow.json").device
    assert schedc.count_profile(shape, seq=8).comm > api_profile.comm  # the same default at the front door


def test_one_check_two_spellings(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(schedc.SchedcError, match=r"^time_limit: 0.001 s is shorter than any compile"):
        schedc.compile(stages=2, microbatches=4, time_limit=0.001)
    assert cli.main(["compile", "--stages", "2", "--mb", "4", "--time-limit", "0.001"]) == 2
    assert "error: --time-limit: 0.001 s is shorter than any compile" in capsys.readouterr().err
    with pytest.raises(schedc.SchedcError, match=r"^stages: must be at least 1, got 0$"):
        schedc.baseline("1f1b", stages=0, microbatches=4)
    with pytest.raises(SystemExit) as stopped:  # refused as the flag is read (cli.common.count)
        cli.main(["baseline", "1f1b", "--stages", "0", "--mb", "4"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith("schedc baseline: error: argument --stages: must be at least 1, got 0 ")
    assert list(tmp_path.iterdir()) == []


def test_simulate_plot_and_trace_commands_report_what_the_api_computes(tmp_path, capsys):
    s = schedc.baseline("zb-h1", stages=4, microbatches=8)
    schedc.write_csv(s, tmp_path / "zb.csv")
    prof = schedc.Profile.uniform(4, 1, 2, 1, comm=0.25)
    prof.save(tmp_path / "p.json")
    assert cli.main(["simulate", str(tmp_path / "zb.csv"), "--profile", str(tmp_path / "p.json"), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    sim = schedc.simulate(s, profile=prof, memory=api.DEFAULT_MEMORY)
    assert (row["makespan"], row["peak_memory"], row["fits_memory"]) == (sim.makespan, list(sim.peak_memory), sim.fits)
    assert cli.main(["trace", str(tmp_path / "zb.csv"), "--profile", str(tmp_path / "p.json"),
                     "-o", str(tmp_path / "cli.trace.json")]) == 0
    ours = schedc.write_trace(s, tmp_path / "api.trace.json", profile=prof, memory=api.DEFAULT_MEMORY)
    theirs = json.loads((tmp_path / "cli.trace.json").read_text())
    assert theirs["traceEvents"] == ours["traceEvents"]  # the CSV's name (zb) is the command's, the rest the same
    assert {k: v for k, v in theirs["otherData"].items() if k != "schedule"} == \
        {k: v for k, v in ours["otherData"].items() if k != "schedule"}


def test_compile_plot_draws_the_best_hand_made_schedule_the_report_lists(tmp_path):
    res = schedc.compile(stages=4, microbatches=8, memory="1p", time_limit=2)
    best = res.best_baseline()
    fitting = {name: b.makespan for name, b in res.baselines.items() if b.fits}
    assert fitting[best] == min(fitting.values())
    assert set(res.baseline_schedules) == set(res.baselines)
    assert schedc.simulate(res.baseline_schedules[best], memory="1p").makespan == res.baselines[best].makespan
    assert res.budget == "time"


def test_new_front_door_functions_are_keyword_only_after_their_subject():
    import inspect

    for function, subject in ((schedc.count_profile, 1), (schedc.write_trace, 2)):
        params = list(inspect.signature(function).parameters.values())
        assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[:subject])
        assert all(p.kind is p.KEYWORD_ONLY for p in params[subject:])
    with pytest.raises(schedc.SchedcError, match=r"^impl: must be one of 'hf', 'torchtitan', 'paper'; got 'jax'$"):
        schedc.count_profile({"layers": 2, "hidden": 64, "vocab": 100}, seq=8, impl="jax")


def _units(tmp_path):
    from schedc.library import transformer_profile

    units = transformer_profile(6, layers=6, hidden=256, vocab=32000, seq=256)
    units.save(tmp_path / "units.json")
    return units


def _torch_costs(tmp_path):
    prof = schedc.Profile.uniform(2).executed("torch")  # stage 0's backward all in W: no ideal form
    prof.save(tmp_path / "torch.json")
    return prof


# (keyword, the call through schedc, its command, what Python reads, what the command prints): a
# check deep below each front door (core, solver, plan) that names its parameter
_SPELLINGS = [
    ("microbatches", lambda tmp: schedc.baseline("1f1b", stages=4, microbatches=3),
     ["baseline", "1f1b", "--stages", "4", "--mb", "3"],
     "1f1b needs microbatches >= stages (4)", "1f1b needs --mb >= --stages (4)"),
    ("ranks", lambda tmp: schedc.baseline("zb-v", stages=8, microbatches=8, ranks=2),
     ["baseline", "zb-v", "--stages", "8", "--mb", "8", "--ranks", "2"],
     "ranks: zb-v needs exactly 2 stages per rank", "--ranks: zb-v needs exactly 2 stages per rank"),
    ("placement", lambda tmp: schedc.baseline("zb-v", stages=4, microbatches=4, placement="loop"),
     ["baseline", "zb-v", "--stages", "4", "--mb", "4", "--placement", "loop"],
     "not loop; drop placement or", "not loop; drop --placement or"),
    ("ranks", lambda tmp: schedc.compile(stages=5, microbatches=4, ranks=2, time_limit=2),
     ["compile", "--stages", "5", "--mb", "4", "--ranks", "2", "--time-limit", "2"],
     "stages=5 must be a multiple of ranks=2", "--stages 5 must be a multiple of --ranks 2"),
    ("microbatches", lambda tmp: schedc.compile(stages=4, microbatches=100_000, time_limit=2),
     ["compile", "--stages", "4", "--mb", "100000", "--time-limit", "2"],
     "stages=4 microbatches=100000 make 1,200,000 actions", "--stages 4 --mb 100000 make 1,200,000 actions"),
    ("memory", lambda tmp: schedc.compile(stages=4, microbatches=8, memory="0.1p", time_limit=2),
     ["compile", "--stages", "4", "--mb", "8", "--memory", "0.1p", "--time-limit", "2"],
     "memory=0.1p: rank 0 needs", "smallest limit that works is --memory 0.25p"),
    ("execution", lambda tmp: schedc.compile(stages=2, microbatches=4, profile=_torch_costs(tmp), execution="ideal",
                                             time_limit=2),
     ["compile", "--stages", "2", "--mb", "4", "--profile", "torch.json", "--runtime", "ideal", "--time-limit", "2"],
     "execution: this profile follows torch's runtime", "no ideal form; use --runtime torch"),
    ("memory", lambda tmp: schedc.plan(profile=_units(tmp), ranks=2, microbatches=4, memory="1p", time_limit=4),
     ["plan", "--profile", "units.json", "--ranks", "2", "--mb", "4", "--memory", "1p", "--time-limit", "4"],
     "memory=1p: Kp is relative to 1F1B", "--memory 1p: Kp is relative to 1F1B"),
    ("memory", lambda tmp: schedc.plan(profile=_units(tmp), ranks=2, microbatches=4, memory="1KiB", time_limit=4),
     ["plan", "--profile", "units.json", "--ranks", "2", "--mb", "4", "--memory", "1KiB", "--time-limit", "4"],
     "but memory is 1.00KiB; the smallest cap it fits is memory=156.25MiB",
     "but --memory is 1.00KiB; the smallest cap it fits is --memory 156.25MiB"),
    ("memory", lambda tmp: schedc.plan(profile=_units(tmp), ranks=2, microbatches=4, memory="210MiB", placement="v",
                                       time_limit=4),
     ["plan", "--profile", "units.json", "--ranks", "2", "--mb", "4", "--memory", "210MiB", "--placement", "v",
      "--time-limit", "4"],
     "memory=210.00MiB: no partition of the 6 units", "--memory 210.00MiB: no partition of the 6 units"),
    ("time_limit", lambda tmp: schedc.plan(profile=_units(tmp), ranks=2, microbatches=4, time_limit=1e-9),
     ["plan", "--profile", "units.json", "--ranks", "2", "--mb", "4", "--memory", "80GiB", "--time-limit", "1e-9"],
     "time_limit=1e-09 is shorter than any plan takes; give time_limit=0.1",
     "--time-limit 1e-09 is shorter than any plan takes; give --time-limit 0.1"),
    ("layers", lambda tmp: frameworks.check_csv_for(_fit_csv(tmp), "torchtitan:1F1B", layers_per_stage=2)
     .raise_unless_ok(),
     ["validate", "in/a.csv", "--for", "torchtitan:1F1B", "--layers-per-stage", "2"],
     "torchtitan:1F1B does not start: torchtitan: with layers_per_stage the stage count depends on the model; "
     "give layers as well", "depends on the model; give --layers as well"),
    ("layers", lambda tmp: (_fit_csv(tmp), frameworks.nemo_build("1F1B", 2, layers_per_stage=2)),
     ["validate", "in/a.csv", "--for", "nemo:1F1B", "--layers-per-stage", "2"],
     "nemo: with layers_per_stage the stage count depends on the model; give layers as well",
     "nemo: with layers_per_stage the stage count depends on the model; give --layers as well"),
]


@pytest.mark.parametrize("keyword,call,argv,python,command", _SPELLINGS,
                         ids=[f"{row[2][0]}-{row[0]}-{i}" for i, row in enumerate(_SPELLINGS)])
def test_a_check_below_the_front_door_names_the_keyword_in_python_and_the_flag_on_the_command_line(
        tmp_path, monkeypatch, capsys, keyword, call, argv, python, command):
    from schedc.errors import cli_flag

    monkeypatch.chdir(tmp_path)
    with pytest.raises(schedc.SchedcError) as e:
        call(tmp_path)
    said = str(e.value)
    assert python in said and "--" not in said
    assert re.search(rf"(^|\W){keyword}[:= ]", said)  # the keyword the caller passed, as they passed it
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"schedc {argv[0]}: error: ") and err.count("\n") == 1
    assert command in err and cli_flag(keyword) in err
    assert not any(p.suffix in (".csv", ".png") for p in tmp_path.iterdir())  # refused before any output


def test_a_parameter_error_keeps_its_spelling_through_pickle():
    import pickle

    from schedc.errors import ParameterError

    for e in (ParameterError("microbatches", "{name:stages}4 {name}9 is too many"),
              ParameterError("memory", "give {name}none").for_python()):
        back = pickle.loads(pickle.dumps(e))  # a worker process's error reaches its parent whole
        assert (type(back), str(back), back.python) == (ParameterError, str(e), e.python)
    assert str(ParameterError("microbatches", "{name:stages}4 {name}9 is too many")) == "--stages 4 --mb 9 is too many"


def test_a_value_that_looks_like_a_placeholder_is_shown_as_typed(capsys):
    with pytest.raises(schedc.SchedcError, match=r"^memory: expected Kp .*, got '\{param\}'$"):
        schedc.compile(stages=2, microbatches=2, memory="{param}")
    assert cli.main(["compile", "--stages", "2", "--mb", "2", "--costs", "{name}"]) == 2
    assert capsys.readouterr().err.endswith("error: --costs: expected three finite numbers F,I,W with F>0, I>0, "
                                            "W>=0 (e.g. 1,1,1), got '{name}'\n")


def _fit_csv(tmp_path) -> str:
    """A 2-rank 1F1B CSV for the framework checks, out of the way of the table's no-output check."""
    (tmp_path / "in").mkdir(exist_ok=True)
    schedc.write_csv(schedc.baseline("1f1b", stages=2, microbatches=4), tmp_path / "in" / "a.csv")
    return "in/a.csv"


def test_a_framework_check_names_its_argument_as_each_door_takes_it(tmp_path, monkeypatch, capsys):
    # the Python keyword (spec, partition_file, path) and the command's flag (--for, --partition) differ
    monkeypatch.chdir(tmp_path)
    csv = _fit_csv(tmp_path)
    with pytest.raises(schedc.SchedcError, match=r"^spec='jax:1F1B': expected torchtitan:NAME or nemo:NAME"):
        frameworks.check_csv_for(csv, "jax:1F1B")
    assert cli.main(["validate", csv, "--for", "jax:1F1B"]) == 2
    assert capsys.readouterr().err == ("schedc validate: error: --for 'jax:1F1B': expected torchtitan:NAME or "
                                       "nemo:NAME, e.g. torchtitan:ZBVZeroBubble\n")
    (tmp_path / "three.json").write_text(json.dumps([["tok_embeddings"], ["layers.0"], ["norm", "lm_head"]]))
    with pytest.raises(schedc.SchedcError, match=r"^partition_file=three.json: 3 stages, but in/a.csv has 2; give "):
        frameworks.check_partition(csv, 2, "three.json")
    assert cli.main(["validate", csv, "--partition", "three.json"]) == 2
    assert capsys.readouterr().err.startswith("schedc validate: error: --partition three.json: 3 stages, but in/a.csv "
                                              "has 2; give the plan report written with this CSV")
    (tmp_path / "bad.json").write_text(json.dumps({"partition": 3}))
    with pytest.raises(schedc.SchedcError, match=r"^path=bad.json: expected a plan report with 'partition'"):
        frameworks.read_partition("bad.json")
    assert cli.main(["validate", csv, "--for", "nemo:1F1B", "--partition", "bad.json"]) == 2
    assert capsys.readouterr().err.startswith("schedc validate: error: --partition bad.json: expected a plan report")
