"""The validator: completeness, placement, same-rank order, deadlock, expectations, CLI."""

from __future__ import annotations

import networkx as nx
import pytest

from schedc.cli.toplevel import main
from schedc.core.ir import Action, Overlap, Schedule, loop_placement, v_placement
from schedc.core.validate import dependency_graph, problems, validate
from schedc.errors import SchedcError
from schedc.io import csvio

ONE_F_ONE_B = "0F0,0F1,0B0,0F2,0B1,0B2\n,1F0,1B0,1F1,1B1,1F2,1B2\n"


def parse(text, source="sched.csv"):
    return csvio.parse_csv_text(text, source)


def error_of(schedule, **kw):
    with pytest.raises(SchedcError) as e:
        validate(schedule, source="sched.csv", **kw)
    msg = str(e.value)
    assert msg.startswith("sched.csv: ") and "\n" not in msg
    return msg


def test_valid_schedules_pass(make_schedule):
    validate(parse(ONE_F_ONE_B))
    assert problems(parse(ONE_F_ONE_B)) == []
    for placement in (loop_placement(4, 4), loop_placement(6, 3), v_placement(6, 3)):
        for split in (False, True):
            validate(make_schedule(placement, 4, split_backward=split))


def test_missing_backward_names_expected_actions():
    msg = error_of(parse("0F0,0F1,0B0\n,1F0,1B0,1F1,1B1\n"))
    assert "stage 0 microbatch 1 has no backward (expected 0B1 or 0I1 + 0W1)" in msg


def test_missing_forward():
    s = parse("0F0,0B0\n1F0,1B0\n", "x")
    s.n_microbatches = 2
    msg = error_of(s)
    assert "stage 0 microbatch 1 has no forward (expected 0F1)" in msg
    assert "more problems" in msg  # 1F1, 0B1, 1B1 are missing too


def test_i_without_w_and_w_without_i_and_mixed():
    assert "has 0I0 but no 0W0" in error_of(parse("0F0,0I0\n1F0,1B0\n"))
    assert "has both 0B0 and 0W0" in error_of(parse("0F0,0B0,0W0\n1F0,1B0\n"))


def test_duplicate_action_built_in_code():
    a = Action
    s = Schedule(rows=[[a(0, "F", 0), a(0, "B", 0), a(0, "B", 0)], [a(1, "F", 0), a(1, "B", 0)]],
                 placement=(0, 1), n_microbatches=1)
    assert "0B0 appears twice: at rank 0 (row 1), column 2 and at rank 0 (row 1), column 3" in error_of(s)


def test_action_on_wrong_rank():
    s = parse(ONE_F_ONE_B)
    s.placement = (1, 0)
    msg = error_of(s)
    assert "rank 0 (row 1), column 1 runs 0F0, but stage 0 is placed on rank 1" in msg


def test_stage_and_microbatch_out_of_range():
    s = parse(ONE_F_ONE_B)
    s.n_microbatches = 2
    assert "rank 0 (row 1), column 4 runs 0F2, but the schedule has 2 microbatches (0..1)" in error_of(s)
    s = parse(ONE_F_ONE_B)
    s.placement = (0,)
    assert "runs 1F0, but the schedule has 1 stages (0..0)" in error_of(s)


def test_same_rank_out_of_order():
    msg = error_of(parse("0F0,0F1,0W0,0I0,0B1\n1F0,1F1,1B0,1B1\n"))
    assert "rank 0 runs 0W0 (column 3) before 0I0 (column 4), which it needs" in msg
    # V placement: stages 1 and 2 share rank 1; 2B0 listed before 2F0 on that rank
    s = parse("0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n")
    s2 = parse("0F0,3F0,3B0,0B0\n1F0,2B0,2F0,1B0\n")
    assert problems(s) == []
    assert "rank 1 runs 2B0 (column 2) before 2F0 (column 3)" in error_of(s2)


def test_deadlock_cycle_in_words():
    # rank 0 does its first backward before feeding rank 1 its second forward, while rank 1
    # insists on forward 1 before forward 0
    msg = error_of(parse("0F0,0B0,0F1,0B1\n1F1,1F0,1B0,1B1\n"))
    assert msg.startswith("sched.csv: the schedule deadlocks: rank 0 runs 0B0 before 0F1, but ")
    assert "1F1 (rank 1) waits for 0F1 (rank 0)" in msg
    assert "rank 1 runs 1F1 before 1B0" in msg
    assert "0B0 (rank 0) waits for 1B0 (rank 1)" in msg


def test_deadlock_three_ranks():
    text = ("0F0,0F1,0B0,0B1\n"
            "1F0,1F1,1B0,1B1\n"
            "2F1,2B1,2F0,2B0\n")
    assert problems(parse(text)) == []
    # rank 1 now wants 1B0 before 1F1, rank 2 wants microbatch 1 first -> circle
    text = ("0F0,0F1,0B0,0B1\n"
            "1F0,1B0,1F1,1B1\n"
            "2F1,2B1,2F0,2B0\n")
    msg = error_of(parse(text))
    assert "deadlocks" in msg and "rank 1 runs 1B0 before 1F1" in msg and "2F1 (rank 2) waits for 1F1" in msg


def test_overlap_cell_waits_for_all_parts_inputs():
    ok = parse("0F0,0F1,0B0,0B1\n1F0,(1F1;1B0)OVERLAP_F_B,1B1\n")
    assert problems(ok) == []
    # rank 0 waits for 1B0 before running 0F1; the cell (1B0;1F1) also needs 0F1 (for 1F1).
    # Run back to back that would work, but torch issues the cell as one unit: a deadlock
    bad = Schedule(rows=[[Action(0, "F", 0), Action(0, "B", 0), Action(0, "F", 1), Action(0, "B", 1)],
                         [Action(1, "F", 0), Overlap((Action(1, "B", 0), Action(1, "F", 1))), Action(1, "B", 1)]],
                   placement=(0, 1), n_microbatches=2)
    assert "deadlocks" in error_of(bad)


def test_dependency_graph_edges():
    g = dependency_graph(parse(ONE_F_ONE_B))
    assert isinstance(g, nx.DiGraph)
    assert g.number_of_nodes() == 12
    assert g.edges[Action(0, "F", 0), Action(1, "F", 0)]["kind"] == "data"
    assert g.edges[Action(1, "B", 0), Action(0, "B", 0)]["kind"] == "data"
    assert g.edges[Action(0, "F", 0), Action(0, "F", 1)]["kind"] == "order"
    assert g.nodes[Action(1, "F", 0)] == {"rank": 1, "column": 1}  # 0-based cell index
    assert nx.is_directed_acyclic_graph(g)


def test_expectations():
    s = parse(ONE_F_ONE_B)
    validate(s, n_stages=2, n_microbatches=3, n_ranks=2, placement="loop")
    validate(s, placement=(0, 1))
    assert "expected 4 stages, the schedule has 2" in error_of(s, n_stages=4)
    assert "expected 8 microbatches, the schedule has 3" in error_of(s, n_microbatches=8)
    assert "expected 3 ranks, the schedule has 2" in error_of(s, n_ranks=3)
    assert "expected placement (1, 0)" in error_of(s, placement=(1, 0))
    interleaved = parse("0F0,2F0,2B0,0B0\n1F0,3F0,3B0,1B0\n")
    validate(interleaved, placement="loop")
    assert "expected 'v' placement, the schedule's stages sit on ranks (0, 1, 0, 1) (loop)" in \
        error_of(interleaved, placement="v")
    vee = parse("0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n")
    validate(vee, placement="v")
    assert "(v)" in error_of(vee, placement="loop")


def test_rank_without_actions():
    s = Schedule(rows=[[Action(0, "F", 0), Action(0, "B", 0)], [None, None]], placement=(0,), n_microbatches=1)
    assert "rank 1 (row 2) has no actions" in error_of(s)


# ---------------------------------------------------------------- CLI


def test_cli_validate_ok(tmp_path, capsys):
    p = tmp_path / "ok.csv"
    p.write_text(ONE_F_ONE_B)
    assert main(["validate", str(p)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"{p}: valid: 2 stages on 2 ranks (loop), 3 microbatches"
    assert main(["validate", str(p), "--stages", "2", "--mb", "3", "--ranks", "2", "--placement", "loop"]) == 0


def test_cli_validate_past_the_torch_check_bound_runs_torchs_validation_only(tmp_path, capsys, monkeypatch):
    # torch's comms simulation is quadratic in the actions (minutes at 10**6): past the bound only
    # its _validate_schedule runs, and the output says so
    pytest.importorskip("torch")
    from torch.distributed.pipelining import schedules as ts

    from schedc.core import limits

    p = tmp_path / "ok.csv"
    p.write_text(ONE_F_ONE_B)  # 12 actions
    monkeypatch.setattr(limits, "MAX_TORCH_CHECK_ACTIONS", 11)
    monkeypatch.setattr(ts, "_simulate_comms_compute", lambda *a, **k: pytest.fail("simulated past the bound"))
    assert main(["validate", str(p)]) == 0
    out = capsys.readouterr().out
    assert "torch's _validate_schedule accepts it; its lowering and comms simulation were not run: 12 actions, " \
           "more than 11" in out
    monkeypatch.setattr(limits, "MAX_TORCH_CHECK_ACTIONS", 12)
    with pytest.raises(pytest.fail.Exception, match="simulated past the bound"):
        main(["validate", str(p)])
    # torch's own validation still runs past the bound: a stage on the wrong rank is torch's error
    monkeypatch.setattr(limits, "MAX_TORCH_CHECK_ACTIONS", 1)
    monkeypatch.setattr(ts, "_validate_schedule", lambda *a, **k: (_ for _ in ()).throw(AssertionError("no")))
    assert main(["validate", str(p)]) == 2
    assert "torch's _validate_schedule rejects the schedule: no" in capsys.readouterr().err


@pytest.mark.parametrize("text, args, fragment", [
    ("0F0,0F1,0B0\n,1F0,1B0,1F1,1B1\n", [], "stage 0 microbatch 1 has no backward"),
    ("0F0,0B0,0F1,0B1\n1F1,1F0,1B0,1B1\n", [], "the schedule deadlocks"),
    ("0F0,0B0x\n1F0,1B0\n", [], "rank 0 (row 1), column 2: '0B0x' has trailing text"),
    (ONE_F_ONE_B, ["--mb", "4"], "--mb 4: expected 4 microbatches, the schedule has 3"),
    (ONE_F_ONE_B, ["--placement", "v", "--stages", "4"], "--stages 4: expected 4 stages"),
    (ONE_F_ONE_B, ["--ranks", "3"], "--ranks 3: expected 3 ranks, the schedule has 2"),
])
def test_cli_validate_errors(tmp_path, capsys, text, args, fragment):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    assert main(["validate", str(p), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"schedc validate: error: {p}")
    assert fragment in lines[0]


def test_cli_validate_missing_file(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.csv")]) == 2
    err = capsys.readouterr().err
    assert "nope.csv: no such file" in err and len(err.strip().splitlines()) == 1


def test_stray_huge_numbers_fail_fast():
    """A typo like 0F99999999999 must give an error at once, not loop over every microbatch."""
    import time

    t0 = time.perf_counter()
    # the parser refuses numbers past schedc.core.limits at their cell
    with pytest.raises(SchedcError, match=r"column 3: '0F99999999999': the microbatch number is too large"):
        parse("0F0,0B0,0F99999999999\n1F0,1B0\n")
    msg = error_of(parse("0F0,0B0,0F999999\n1F0,1B0\n"))
    assert "stage 0 microbatch 1 has no forward (expected 0F1)" in msg
    s = Schedule(rows=[[Action(0, "F", 0), Action(0, "B", 0)]], placement=(0,), n_microbatches=10**12)
    assert "more microbatches have neither a forward nor a backward" in " ".join(problems(s))
    with pytest.raises(SchedcError, match="stage 1 never appears, but stage 8000 does"):
        parse("0F0,0B0\n8000F0\n")
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize("args, fragment", [
    (["--stages", "0"], "--stages must be >= 1, got 0"),
    (["--mb", "-1"], "--mb must be >= 1, got -1"),
    (["--for", "torchtitan:1F1B", "--layers", "4", "--layers-per-stage", "0"], "--layers-per-stage must be >= 1"),
    (["--for", "torchtitan:1F1B", "--layers", "4", "--first-less", "-1"], "--first-less must be >= 0, got -1"),
    (["--for", "torchtitan:1F1B", "--layers", "4", "--last-less", "-1"], "--last-less must be >= 0, got -1"),
])
def test_cli_validate_refuses_counts_below_their_least_naming_the_flag(tmp_path, capsys, args, fragment):
    p = tmp_path / "ok.csv"
    p.write_text(ONE_F_ONE_B)
    assert main(["validate", str(p), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and fragment in captured.err


def test_a_deadlock_in_a_large_schedule_is_named_from_the_few_actions_its_cycle_lies_in():
    # the graph that words the cycle is built on Deadlock.stuck, not on every action that never
    # starts (at 10**6 actions that graph took minutes)
    from schedc.core.baselines import make_baseline
    from schedc.core.simulate import Deadlock, walk

    schedule = make_baseline("1f1b", 4, 3000)
    row = schedule.rows[0]
    row.remove(Action(0, "B", 0))
    row.insert(1, Action(0, "B", 0))  # rank 0 waits for 1B0 before sending 0F1
    with pytest.raises(Deadlock) as e:
        walk(schedule)
    assert len(e.value.unplaced) > 10_000 and len(e.value.stuck) < 20
    assert e.value.stuck <= e.value.unplaced
    assert problems(schedule) == [
        "the schedule deadlocks: rank 0 runs 0B0 before 0F1, but 1F1 (rank 1) waits for 0F1 (rank 0), "
        "rank 1 runs 1F1 before 1B0, 0B0 (rank 0) waits for 1B0 (rank 1) - a cycle, so none of these can "
        "start; reorder one of these ranks"]
