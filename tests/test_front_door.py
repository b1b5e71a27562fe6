"""One front door: the commands call schedc.api, so each option is wired once and each default
lives in one place (issue 37, item 5)."""

import json

import pytest

import schedc
from schedc import api
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


def test_a_counted_profile_default_lives_in_unit_profile(tmp_path, monkeypatch, capsys):
    from schedc.model_costs import profile as counted

    shape = {"layers": 2, "hidden": 64, "vocab": 100, "heads": 4}
    argv = ["profile", "--flops", "1e12", "--layers", "2", "--hidden", "64", "--vocab", "100", "--heads", "4",
            "--seq", "8", "--ac", "full", "--names", "hf"]
    assert cli.main([*argv, "-o", str(tmp_path / "cli.json")]) == 0
    api_profile = schedc.count_profile(shape, seq=8, flops_per_second=1e12, activation_checkpoint="full", names="hf")
    assert schedc.Profile.load(tmp_path / "cli.json") == api_profile
    monkeypatch.setitem(counted.unit_profile.__kwdefaults__, "bandwidth", 10e9)
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
    assert cli.main(["baseline", "1f1b", "--stages", "0", "--mb", "4"]) == 2
    assert capsys.readouterr().err == "schedc baseline: error: --stages: must be at least 1, got 0\n"
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
