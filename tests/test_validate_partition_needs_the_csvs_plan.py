"""`schedc validate s.csv --partition plan.json` checks that the CSV was made for that partition; with
nothing that says which partition the CSV was made for, it cannot pass (it used to, on the stage count)."""

import json
import shutil

import pytest

from schedc import cli, frameworks
from schedc.core.baselines import make_baseline
from schedc.errors import SchedcError
from schedc.io import csvio

PLANNED = [["tok_embeddings", "layers.0", "layers.1", "layers.2"], ["layers.3", "norm", "lm_head"]]


def _run(capsys, *argv):
    code = cli.main(["validate", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_csv_with_no_plan_beside_it_fails_saying_what_is_missing(tmp_path, capsys):
    bare = tmp_path / "s.csv"
    csvio.write_csv(make_baseline("1f1b", 2, 4), bare)
    split = tmp_path / "split.json"
    split.write_text(json.dumps(PLANNED))
    code, out, err = _run(capsys, bare, "--partition", split)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"schedc validate: error: --partition {split}: nothing says which partition {bare} was "
                          "made for")
    assert "s.json" in err and "s.profile.json" in err  # what to put beside it
    code, _, err = _run(capsys, bare, "--for", "torchtitan:1F1B", "--partition", split)
    assert code == 2 and "nothing says which partition" in err
    with pytest.raises(SchedcError, match=r"^partition_file=.*split.json: nothing says which partition"):
        frameworks.check_partition(bare, 2, split)


def test_a_compile_report_without_module_names_does_not_say_it_either(tmp_path, capsys):
    compiled = tmp_path / "c.csv"
    csvio.write_schedule(make_baseline("1f1b", 2, 4), {"inputs": {"stages": 2}}, compiled)
    split = tmp_path / "split.json"
    split.write_text(json.dumps(PLANNED))
    code, _, err = _run(capsys, compiled, "--partition", split)
    assert code == 2 and "nothing says which partition" in err


def test_the_plan_report_of_this_very_csv_matches_it_wherever_it_lies(tmp_path, capsys):
    # the report records the CSV's SHA-256: a copied CSV is matched to the report it was written with
    plan = tmp_path / "plan.csv"
    csvio.write_schedule(make_baseline("1f1b", 2, 4), {"partition": PLANNED}, plan)
    (tmp_path / "deploy").mkdir()
    copy = tmp_path / "deploy" / "s.csv"
    shutil.copy(plan, copy)
    code, out, _ = _run(capsys, copy, "--partition", plan.with_suffix(".json"))
    assert code == 0 and "launched on the partition of" in out
    # another CSV (another schedule) copied there is not the one the report was written with
    csvio.write_csv(make_baseline("zb-h1", 2, 4), copy)
    code, _, err = _run(capsys, copy, "--partition", plan.with_suffix(".json"))
    assert code == 2 and "nothing says which partition" in err


def test_a_fit_without_the_plan_beside_the_csv_says_the_partition_was_not_checked(tmp_path, capsys):
    # a plan's CSV copied away from its plan.json fits the framework's stage count, and nothing more is known
    plan = tmp_path / "plan.csv"
    csvio.write_schedule(make_baseline("1f1b", 2, 4), {"partition": PLANNED}, plan)
    (tmp_path / "deploy").mkdir()
    copy = tmp_path / "deploy" / "plan.csv"
    shutil.copy(plan, copy)
    code, out, _ = _run(capsys, copy, "--for", "torchtitan:1F1B")
    assert code == 0 and "fits torchtitan:1F1B" in out
    assert "the partition was not checked" in out and "--partition PLAN.json" in out
    code, out, _ = _run(capsys, copy, "--for", "torchtitan:1F1B", "--partition", plan.with_suffix(".json"))
    assert code == 0 and "not checked" not in out and "launched on the partition of" in out
