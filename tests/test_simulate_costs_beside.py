"""`schedc simulate` judges each CSV by the costs it brings, as plot, trace and emulate do:
NAME.profile.json beside NAME.csv (schedc plan writes one), else its report NAME.json's costs."""

import json

from schedc import cli
from schedc.core.baselines import make_baseline
from schedc.core.costs import Profile
from schedc.core.simulate import simulate
from schedc.io import csvio


def _two_csvs(tmp_path):
    fast, slow = Profile.uniform(4, 1.0, 1.5, 1.0), Profile.uniform(4, 3.0, 4.5, 3.0)  # neither the default costs
    a, b = tmp_path / "plan.csv", tmp_path / "other.csv"
    csvio.write_csv(make_baseline("1f1b", 4, 8), a)
    fast.save(tmp_path / "plan.profile.json")  # as `schedc plan` writes it
    csvio.write_schedule(make_baseline("1f1b", 4, 8), {"inputs": {"costs": slow.model_dump(mode="json")}}, b)  # a compile's
    return a, b, fast, slow


def test_simulate_uses_the_costs_beside_each_csv_and_says_which(tmp_path, capsys):
    a, b, fast, slow = _two_csvs(tmp_path)
    assert cli.main(["simulate", str(a), str(b), "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # each judged by its own costs: nothing to warn about
    rows = json.loads(captured.out)
    for row, profile, source in ((rows[0], fast, "plan.profile.json"), (rows[1], slow, "other.json")):
        assert row["makespan"] == simulate(make_baseline("1f1b", 4, 8), profile.executed()).makespan
        assert row["costs_from"] == source
    assert rows[1]["makespan"] == 3 * rows[0]["makespan"]

    assert cli.main(["simulate", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "  costs from plan.profile.json beside it" in text and "  costs from other.json beside it" in text


def test_simulate_flags_still_give_the_costs_of_every_csv(tmp_path, capsys):
    a, b, fast, _ = _two_csvs(tmp_path)
    assert cli.main(["simulate", str(a), str(b), "--costs", "1,1.5,1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["makespan"] == rows[1]["makespan"] == simulate(make_baseline("1f1b", 4, 8), fast.executed()).makespan
    assert rows[0]["costs_from"] is None


def test_simulate_refuses_a_csv_without_costs_beside_one_with_them(tmp_path, capsys):
    a, _, _, _ = _two_csvs(tmp_path)
    bare = tmp_path / "bare.csv"
    csvio.write_csv(make_baseline("1f1b", 4, 8), bare)
    assert cli.main(["simulate", str(a), str(bare)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "bare.csv has none" in captured.err and "bare.profile.json" in captured.err


def test_a_baseline_and_a_compile_without_costs_compare_by_the_defaults(tmp_path, capsys):
    bare, compiled = tmp_path / "1f1b.csv", tmp_path / "s.csv"
    csvio.write_csv(make_baseline("1f1b", 4, 8), bare)
    default = Profile.uniform(4)
    csvio.write_schedule(make_baseline("1f1b", 4, 8), {"inputs": {"costs": default.model_dump(mode="json")}}, compiled)
    assert cli.main(["simulate", str(bare), str(compiled), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["costs_from"] for r in rows] == [None, None]
    assert rows[0]["makespan"] == rows[1]["makespan"] == simulate(make_baseline("1f1b", 4, 8), default.executed()).makespan
