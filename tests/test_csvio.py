"""CSV reading/writing: strict parsing, round trips, torch's own files, torch acceptance, reports."""

from __future__ import annotations

import csv
import os

import pytest

from schedc.core.ir import Action, Overlap, Schedule, loop_placement, v_placement
from schedc.core.validate import validate
from schedc.errors import SchedcError
from schedc.io import csvio


def write(tmp_path, text, name="sched.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


# ---------------------------------------------------------------- cells


@pytest.mark.parametrize("text, expected", [
    ("3F0", Action(3, "F", 0)),
    ("0I7", Action(0, "I", 7)),
    ("5W2", Action(5, "W", 2)),
    ("2B1", Action(2, "B", 1)),
    ("12F34", Action(12, "F", 34)),
    (" 1B0 ", Action(1, "B", 0)),
    ("", None),
    ("   ", None),
])
def test_parse_cell_accepts_compute_actions(text, expected):
    assert csvio.parse_cell(text) == expected


def test_parse_cell_overlap():
    cell = csvio.parse_cell("(0F7;7B3)OVERLAP_F_B")
    assert cell == Overlap((Action(0, "F", 7), Action(7, "B", 3)))
    assert str(cell) == "(0F7;7B3)OVERLAP_F_B"
    assert cell.parts == (Action(0, "F", 7), Action(7, "B", 3))


@pytest.mark.parametrize("text, fragment", [
    ("0F0x", "trailing text 'x' after 0F0"),
    ("3F", "no microbatch number"),
    ("F3", "no stage number"),
    ("0X1", "unknown action '0X1'"),
    ("hello", "unknown action 'hello'"),
    ("0f0", "upper case"),
    ("0SEND_F1", "compute-only"),
    ("1RECV_B0", "compute-only"),
    ("0UNSHARD", "compute-only"),
    ("2REDUCE_GRAD", "compute-only"),
    ("(0F7;7B3)OVERLAP", "label after ')'"),
    ("(0F7;)OVERLAP_F_B", "empty action"),
    ("()OVERLAP_F_B", "empty action"),
    ("(0F7;7Bx)OVERLAP_F_B", "unknown action '7Bx'"),
    ("(0F7;0F7)OVERLAP_F_B", "same action twice"),
    ("-1F0", "unknown action"),
    ("0 F 0", "unknown action"),
])
def test_parse_cell_rejects_with_reason(text, fragment):
    with pytest.raises(SchedcError) as e:
        csvio.parse_cell(text, where="s.csv: rank 1 (row 2), column 3")
    msg = str(e.value)
    assert msg.startswith("s.csv: rank 1 (row 2), column 3: ")
    assert fragment in msg
    assert "\n" not in msg


# ---------------------------------------------------------------- whole files


def test_read_infers_placement_microbatches_and_keeps_idle(tmp_path):
    p = write(tmp_path, "0F0,0F1,2F0,,2B0,0B0,2F1,2B1,0B1\n,1F0,1F1,3F0,3B0,1B0,3F1,3B1,1B1\n")
    s = csvio.read_csv(p)
    assert s.placement == (0, 1, 0, 1)
    assert s.n_microbatches == 2 and s.n_ranks == 2 and s.n_stages == 4
    assert s.rows[0][3] is None and s.rows[1][0] is None
    assert s.actions(1)[0] == Action(1, "F", 0)
    assert s.meta["source"] == str(p)
    validate(s)


def test_read_with_explicit_counts(tmp_path):
    p = write(tmp_path, "0F0,0B0\n1F0,1B0\n")
    s = csvio.read_csv(p, n_microbatches=3, placement=(0, 1))
    assert s.n_microbatches == 3 and s.placement == (0, 1)


def test_crlf_is_accepted(tmp_path):
    p = tmp_path / "s.csv"
    p.write_bytes("0F0,0B0\r\n1F0,1B0\r\n".encode())
    s = csvio.read_csv(p)
    assert s.rows == [[Action(0, "F", 0), Action(0, "B", 0)], [Action(1, "F", 0), Action(1, "B", 0)]]


def test_a_byte_order_mark_is_rejected_as_torch_rejects_it(tmp_path):
    p = tmp_path / "bom.csv"
    p.write_bytes("\ufeff0F0,0B0\r\n1F0,1B0\r\n".encode())
    with pytest.raises(SchedcError, match=r"bom\.csv: starts with a UTF-8 byte-order mark .*torch's _load_csv"):
        csvio.read_csv(p)
    torch_schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    with open(p, newline="") as f:  # what _PipelineScheduleRuntime._load_csv does with it
        first = next(csv.reader(f))[0]
    with pytest.raises(RuntimeError, match="Invalid action string"):
        torch_schedules._Action.from_str(first)


@pytest.mark.parametrize("text, fragments", [
    ("0F0,0B0,0F0x\n1F0,1B0\n", ["rank 0 (row 1), column 3", "trailing text"]),
    ("0F0,0B0\n1F0,,1Q0\n", ["rank 1 (row 2), column 3", "unknown action '1Q0'"]),
    ("0F0,0B0,0F0\n1F0,1B0\n", ["0F0 appears twice", "rank 0 (row 1), column 1", "rank 0 (row 1), column 3"]),
    ("0F0,0B0\n1F0,1B0,0F1\n", ["stage 0 appears on two ranks", "0F0 at rank 0 (row 1), column 1",
                                "0F1 at rank 1 (row 2), column 3"]),
    ("0F0,0B0\n2F0,2B0\n", ["stage 1 never appears", "stage 2 does"]),
    ("", ["empty file"]),
    ("\n\n", ["empty file"]),
    (",,\n,\n", ["empty file"]),
    ("0F0,0SEND_F0,0B0\n1F0,1B0\n", ["column 2", "compute-only"]),
    ('0F0,"0B0\n', ["not valid CSV"]),
])
def test_read_errors_name_position(tmp_path, text, fragments):
    """Positions are 1-based rows and columns as an editor shows them; row r+1 is rank r."""
    p = write(tmp_path, text)
    with pytest.raises(SchedcError) as e:
        csvio.read_csv(p)
    msg = str(e.value)
    assert msg.startswith(str(p)), msg
    for f in fragments:
        assert f in msg, msg


def test_read_missing_file_and_directory_and_binary(tmp_path):
    with pytest.raises(SchedcError, match="no such file"):
        csvio.read_csv(tmp_path / "nope.csv")
    with pytest.raises(SchedcError, match="is a directory"):
        csvio.read_csv(tmp_path)
    b = tmp_path / "b.csv"
    b.write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(SchedcError, match="not a UTF-8 text file|NUL"):
        csvio.read_csv(b)


def test_blank_row_is_a_rank_without_actions(tmp_path):
    # torch would count the blank line as a rank too; the validator says what is wrong
    s = csvio.read_csv(write(tmp_path, "0F0,0B0\n\n1F0,1B0\n"))
    assert s.n_ranks == 3 and s.placement == (0, 2)
    with pytest.raises(SchedcError, match=r"rank 1 \(row 2\) has no actions"):
        validate(s)


# ---------------------------------------------------------------- writing and round trips


def _same(a: Schedule, b: Schedule) -> bool:
    return a.rows == b.rows and a.placement == b.placement and a.n_microbatches == b.n_microbatches


@pytest.mark.parametrize("placement_fn, ranks, stages, split", [
    (loop_placement, 2, 2, False),
    (loop_placement, 3, 3, True),
    (loop_placement, 2, 4, False),
    (v_placement, 2, 4, True),
    (v_placement, 4, 8, False),
])
def test_write_read_round_trip(tmp_path, make_schedule, placement_fn, ranks, stages, split):
    s = make_schedule(placement_fn(stages, ranks), 5, split_backward=split)
    assert any(c is None for row in s.rows for c in row), "want idle cells in the round trip"
    p = tmp_path / "out.csv"
    csvio.write_csv(s, p)
    back = csvio.read_csv(p)
    assert _same(s, back)
    assert csvio.to_csv_text(back) == p.read_text()
    validate(back)


def test_to_csv_text_format():
    s = Schedule(rows=[[Action(0, "F", 0), None, Action(0, "B", 0)],
                       [None, Overlap((Action(1, "F", 0), Action(1, "B", 0)))]],
                 placement=(0, 1), n_microbatches=1)
    assert csvio.to_csv_text(s) == "0F0,,0B0\n,(1F0;1B0)OVERLAP_F_B\n"


def test_single_idle_cell_row_round_trips():
    s = Schedule(rows=[[Action(0, "F", 0), Action(0, "B", 0)], [None]], placement=(0,), n_microbatches=1)
    back = csvio.parse_csv_text(csvio.to_csv_text(s))
    assert back.rows == s.rows


def test_write_is_atomic_on_failure(tmp_path, monkeypatch):
    p = tmp_path / "out.csv"
    p.write_text("old\n")

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    s = Schedule(rows=[[Action(0, "F", 0), Action(0, "B", 0)]], placement=(0,), n_microbatches=1)
    with pytest.raises(OSError):
        csvio.write_csv(s, p)
    assert p.read_text() == "old\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out.csv"]


# ---------------------------------------------------------------- the JSON report


def test_report_round_trip_and_errors(tmp_path):
    csv_path = tmp_path / "best.csv"
    assert csvio.report_path(csv_path) == tmp_path / "best.json"
    report = {"makespan": 12.5, "status": "optimal", "peak_memory": [1, 2]}
    assert csvio.write_report(report, csv_path) == tmp_path / "best.json"
    assert csvio.read_report(csv_path) == report
    with pytest.raises(SchedcError, match="no report beside"):
        csvio.read_report(tmp_path / "other.csv")
    (tmp_path / "bad.json").write_text('{"a": 1,\n oops}')
    with pytest.raises(SchedcError, match=r"bad.json: line 2 column 2: not valid JSON"):
        csvio.read_report(tmp_path / "bad.csv")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(SchedcError, match="expected a JSON object"):
        csvio.read_report(tmp_path / "list.csv")
    with pytest.raises(SchedcError, match="cannot be written as JSON"):
        csvio.write_report({"x": float("nan")}, tmp_path / "nan.csv")
    assert not (tmp_path / "nan.json").exists()


# ---------------------------------------------------------------- torch's own schedules and torch acceptance

TORCH_MULTI = ["ZBVZeroBubble", "DualPipeV", "Interleaved1F1B", "InterleavedZeroBubble"]


@pytest.fixture(scope="module")
def torch_ops():
    pytest.importorskip("torch")
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    return get_schedule_ops


@pytest.mark.parametrize("name", TORCH_MULTI)
@pytest.mark.parametrize("ranks, mb", [(2, 4), (4, 8)])
def test_load_csv_dumped_by_torch(tmp_path, capsys, torch_ops, name, ranks, mb):
    """torch's _dump_csv writes its pipeline_order rows with csv.writer; do exactly that."""
    import csv

    ops = torch_ops(name, ranks, mb)
    p = tmp_path / f"{name}.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        for row in ops:
            w.writerow(row)
    s = csvio.read_csv(p)
    assert s.n_ranks == ranks and s.n_microbatches == mb and s.n_stages == 2 * ranks
    expected_placement = v_placement(2 * ranks, ranks) if name in ("ZBVZeroBubble", "DualPipeV") \
        else loop_placement(2 * ranks, ranks)
    assert s.placement == expected_placement
    validate(s, n_stages=2 * ranks, n_microbatches=mb, n_ranks=ranks)
    assert _same(s, csvio.from_torch_order(ops))
    assert _same(s, csvio.from_torch_order({r: row for r, row in enumerate(ops)}))
    if name == "DualPipeV":
        assert any(isinstance(c, Overlap) for row in s.rows for c in row)
    # and schedc's rewrite is byte-identical to torch's own dump (apart from line ends)
    assert csvio.to_csv_text(s) == p.read_text().replace("\r\n", "\n")
    from schedc.cli.toplevel import main

    kind = "v" if name in ("ZBVZeroBubble", "DualPipeV") else "loop"
    assert main(["validate", str(p), "--stages", str(2 * ranks), "--mb", str(mb), "--placement", kind]) == 0
    assert f"valid: {2 * ranks} stages on {ranks} ranks ({kind}), {mb} microbatches" in capsys.readouterr().out


def test_torch_dump_csv_method_output_loads(tmp_path, torch_ops):
    """The real `_dump_csv` of a torch schedule object (built on mocked stages, as
    get_schedule_ops does)."""
    from unittest import mock

    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B
    from torch.distributed.pipelining.stage import PipelineStage

    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.submod, stage.num_stages = 0, 2, None, 4
    sched = ScheduleInterleaved1F1B([stage, stage], 4)
    p = tmp_path / "torch.csv"
    sched._dump_csv(str(p), format="compute_only")
    s = csvio.read_csv(p)
    assert s.placement == (0, 1, 0, 1) and s.n_microbatches == 4
    validate(s)


def _torch_runtime_loads(path, schedule):
    """Load a CSV through torch's real `_PipelineScheduleRuntime._load_csv` (mocked stages)."""
    from unittest import mock

    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime
    from torch.distributed.pipelining.stage import PipelineStage

    per_rank = len(schedule.stages_of(0))
    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.submod = 0, schedule.n_ranks, None
    stage.num_stages = schedule.n_stages
    stages = [stage] * per_rank if per_rank > 1 else [stage]
    runtime = _PipelineScheduleRuntime(stages, schedule.n_microbatches)
    runtime._load_csv(str(path))
    return runtime


HAND_MADE = [
    ("gpipe-2", loop_placement(2, 2), 4, False, "forward"),
    ("1f1b-3", loop_placement(3, 3), 6, False, "backward"),
    ("zb-4", loop_placement(4, 4), 6, True, "backward"),
    ("gpipe-4-split", loop_placement(4, 4), 3, True, "forward"),
    ("interleaved-2x2", loop_placement(4, 2), 4, False, "backward"),
    ("v-2", v_placement(4, 2), 4, True, "backward"),
    ("v-3", v_placement(6, 3), 5, False, "forward"),
]


@pytest.mark.parametrize("name, placement, mb, split, prefer", HAND_MADE, ids=[h[0] for h in HAND_MADE])
def test_torch_accepts_files_schedc_writes(tmp_path, torch_ops, make_schedule, name, placement, mb, split, prefer):
    from schedc.runtime.torch_check import check_with_torch

    s = make_schedule(placement, mb, split_backward=split, prefer=prefer, name=name)
    p = tmp_path / f"{name}.csv"
    csvio.write_csv(s, p)
    back = csvio.read_csv(p)
    validate(back)
    lowered = check_with_torch(back, source=str(p))
    assert any("SEND" in str(a) or "RECV" in str(a) for acts in lowered.values() for a in acts)
    runtime = _torch_runtime_loads(p, back)
    assert [runtime.stage_index_to_group_rank[i] for i in range(back.n_stages)] == list(back.placement)


def test_torch_accepts_overlap_cells(torch_ops):
    from schedc.runtime.torch_check import check_with_torch

    check_with_torch(csvio.from_torch_order(torch_ops("DualPipeV", 2, 6)))


def test_check_with_torch_reports_rejections(torch_ops):
    from schedc.runtime.torch_check import check_with_torch

    out_of_order = csvio.parse_csv_text("0F0,0F1,0W0,0I0,0B1\n1F0,1F1,1B0,1B1\n")
    with pytest.raises(SchedcError, match="_validate_schedule rejects.*Backward Weight for stage 0"):
        check_with_torch(out_of_order)
    deadlock = csvio.parse_csv_text("0F0,0B0,0F1,0B1\n1F1,1F0,1B0,1B1\n")
    with pytest.raises(SchedcError, match="d.csv: torch.s _add_send_recv rejects the schedule"):
        check_with_torch(deadlock, source="d.csv")
    missing = csvio.parse_csv_text("0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n")
    with pytest.raises(SchedcError, match="_validate_schedule"):
        check_with_torch(missing)
