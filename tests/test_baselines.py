"""Hand-made schedules: valid for every size, identical to torch's where torch has them, accepted
by torch's runtime checks, reachable by every spelling of their names, and clear errors
otherwise."""

from __future__ import annotations

import pytest

from schedc.cli.toplevel import main
from schedc.core.baselines import BASELINE_NAMES, baselines_for, list_baselines, make_baseline, normalize_name
from schedc.core.costs import Profile
from schedc.core.ir import Action, Overlap, loop_placement, v_placement
from schedc.core.simulate import simulate
from schedc.core.validate import validate
from schedc.errors import SchedcError
from schedc.io import csvio

INFO = {i.name: i for i in list_baselines()}


def _stages_per_rank(name: str) -> list[int]:
    return {"1": [1], "2": [2], ">=2": [2, 3]}[INFO[name].stages_per_rank]


def _sizes(name: str, ranks=range(1, 6), mbs=range(1, 13)):
    """Every (stages, ranks, microbatches) in the grid that the schedule supports."""
    for r in ranks:
        for v in _stages_per_rank(name):
            for m in mbs:
                try:
                    yield make_baseline(name, r * v, m, n_ranks=r), (r * v, r, m)
                except SchedcError:
                    continue


# ---------------------------------------------------------------- validity


@pytest.mark.parametrize("name", BASELINE_NAMES)
def test_every_baseline_is_valid_on_a_grid_of_sizes(name):
    count = 0
    for schedule, (n, r, m) in _sizes(name):
        validate(schedule, n_stages=n, n_microbatches=m, n_ranks=r, placement=INFO[name].placement,
                 source=f"{name} {n}/{r}/{m}")
        assert schedule.name == name and schedule.meta["baseline"] == name
        expected = v_placement(n, r) if INFO[name].placement == "v" else loop_placement(n, r)
        assert schedule.placement == expected
        # simulating it cannot deadlock either, and every rank is busy 3 units per stage-microbatch
        res = simulate(schedule, Profile.uniform(n))
        assert res.busy == [3 * m * (n // r)] * r
        count += 1
    assert count >= 12, f"{name}: too few supported sizes in the grid"


@pytest.mark.parametrize("name", BASELINE_NAMES)
def test_backward_kinds(name):
    """B for GPipe, 1F1B, interleaved 1F1B and looped BFS; I+W for the zero-bubble family;
    DualPipeV mixes overlapped B's and a zero-bubble tail of I+W."""
    schedule = make_baseline(name, 8, 16, n_ranks=4 if INFO[name].stages_per_rank != "1" else None)
    kinds = {a.kind for _, a in schedule.all_actions()}
    if name in ("gpipe", "1f1b", "interleaved-1f1b", "looped-bfs"):
        assert kinds == {"F", "B"}
    elif name == "dualpipev":
        assert kinds == {"F", "B", "I", "W"}
        assert any(isinstance(c, Overlap) for row in schedule.rows for c in row)
    else:
        assert kinds == {"F", "I", "W"}


def test_warm_up_lengths_follow_the_papers():
    def leading_forwards(schedule, r):
        row = schedule.actions(r)
        return next(i for i, a in enumerate(row) if a.kind != "F")

    p = 4
    # 1F1B / ZB-H1: p - r forwards before rank r's first backward (p-1-r warm-up + the steady F)
    for name in ("1f1b", "zb-h1"):
        s = make_baseline(name, p, 8)
        assert [leading_forwards(s, r) for r in range(p)] == [4, 3, 2, 1]
    # ZB-H2: 2p-1-2r (7/5/3/1 in the paper's figure 3)
    s = make_baseline("zb-h2", p, 8)
    assert [leading_forwards(s, r) for r in range(p)] == [7, 5, 3, 1]
    # ZB-H1: rank r postpones the W of its first r backwards
    s = make_baseline("zb-h1", p, 8)
    for r in range(p):
        row = [a for a in s.actions(r) if a.kind != "F"]
        first_w = next(i for i, a in enumerate(row) if a.kind == "W")
        assert first_w == r + 1  # r I's, then I(r), then W(0)
    # the last rank of 1F1B starts with microbatch 0 (unlike the order torch 2.13 reports)
    assert make_baseline("1f1b", p, 8).actions(p - 1)[:4] == [
        Action(3, "F", 0), Action(3, "B", 0), Action(3, "F", 1), Action(3, "B", 1)]


# ---------------------------------------------------------------- names


@pytest.mark.parametrize("spelling,name", [
    ("gpipe", "gpipe"), ("GPipe", "gpipe"), ("ScheduleGPipe", "gpipe"),
    ("1F1B", "1f1b"), ("Schedule1F1B", "1f1b"),
    ("zbh1", "zb-h1"), ("ZB_H1", "zb-h1"), ("zb-h2", "zb-h2"), ("ZBH2", "zb-h2"),
    ("interleaved-1f1b", "interleaved-1f1b"), ("Interleaved1F1B", "interleaved-1f1b"),
    ("ScheduleInterleaved1F1B", "interleaved-1f1b"), ("interleaved_1f1b", "interleaved-1f1b"),
    ("zb-v", "zb-v"), ("ZBV", "zb-v"), ("ZBVZeroBubble", "zb-v"), ("ScheduleZBVZeroBubble", "zb-v"),
    ("LoopedBFS", "looped-bfs"), ("ScheduleLoopedBFS", "looped-bfs"),
    ("InterleavedZeroBubble", "interleaved-zb"), ("ScheduleInterleavedZeroBubble", "interleaved-zb"),
    ("DualPipeV", "dualpipev"), ("ScheduleDualPipeV", "dualpipev"), ("dual_pipe_v", "dualpipev"),
    ("v-half", "v-half"), ("V_Half", "v-half"), ("ZBV-Half", "v-half"), ("vmin", "v-min"), ("V-Min", "v-min"),
])
def test_normalize_name(spelling, name):
    assert normalize_name(spelling) == name
    assert name in BASELINE_NAMES


def test_unknown_names():
    for bad in ("", "zb", "schedule", "1f2b", "ScheduleFoo"):
        with pytest.raises(SchedcError, match="unknown schedule .*choose one of gpipe, 1f1b"):
            normalize_name(bad)


def test_list_baselines():
    infos = list_baselines()
    assert tuple(i.name for i in infos) == BASELINE_NAMES
    assert {"gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved-1f1b", "zb-v"} <= set(BASELINE_NAMES)
    for i in infos:
        assert i.placement in ("loop", "v") and i.description
    assert {i.name for i in infos if i.placement == "v"} == {"zb-v", "dualpipev", "v-half", "v-min"}


def test_baselines_for_a_shape():
    assert list(baselines_for(4, 8, 4)) == ["gpipe", "1f1b", "zb-h1", "zb-h2"]
    assert list(baselines_for(4, 2, 4)) == ["gpipe", "zb-h1", "zb-h2"]  # 1F1B needs M >= 4
    assert list(baselines_for(8, 8, n_ranks=4)) == ["interleaved-1f1b", "zb-v", "looped-bfs", "interleaved-zb",
                                                  "dualpipev", "v-half", "v-min"]
    assert list(baselines_for(8, 8, n_ranks=4, placement="v")) == ["zb-v", "dualpipev", "v-half", "v-min"]
    assert list(baselines_for(8, 8, n_ranks=4, placement="loop")) == ["interleaved-1f1b", "looped-bfs",
                                                                      "interleaved-zb"]
    assert list(baselines_for(12, 8, n_ranks=4)) == ["interleaved-1f1b", "looped-bfs", "interleaved-zb"]
    assert list(baselines_for(4, 8, n_ranks=4, placement="v")) == ["gpipe", "1f1b", "zb-h1", "zb-h2"]
    assert baselines_for(5, 8, n_ranks=2) == {}


# ---------------------------------------------------------------- unsupported combinations


@pytest.mark.parametrize("args,match", [
    (("zb-v", 8, 8, 2), "exactly 2 stages per rank.*got 8 stages on 2 ranks; use --ranks 4"),
    (("zb-v", 5, 8, None), "exactly 2 stages per rank.*use an even --stages"),
    (("dualpipev", 8, 8, 8), "exactly 2 stages per rank"),
    (("dualpipev", 8, 7, None), r"dualpipev needs --mb >= --stages \(8\)"),
    (("interleaved-1f1b", 4, 8, 4), ">= 2 stages per rank.*use e.g. --ranks 2, or 1f1b / zb-h1"),
    (("interleaved-1f1b", 5, 8, None), ">= 2 stages per rank"),
    (("interleaved-zb", 6, 8, 4), ">= 2 stages per rank"),
    (("interleaved-1f1b", 8, 9, 4), r"multiple of max\(1, mb // ranks\) = 2.*use e.g. 8 or 10"),
    (("interleaved-zb", 8, 13, 4), r"multiple of max\(1, mb // ranks\) = 3.*use e.g. 12 or 15"),
    (("1f1b", 4, 3, None), r"1f1b needs --mb >= --stages \(4\)"),
    (("gpipe", 4, 8, 2), "one stage per rank, so --ranks must equal --stages"),
    (("zb-h1", 4, 8, 2), "one stage per rank"),
    (("gpipe", 0, 8, None), "--stages must be >= 1"),
    (("gpipe", 4, 0, None), "--mb must be >= 1"),
    (("looped-bfs", 8, 4, 0), "--ranks must be >= 1"),
])
def test_unsupported_combinations_say_what_would_work(args, match):
    name, n, m, r = args
    with pytest.raises(SchedcError, match=match):
        make_baseline(name, n, m, n_ranks=r)


def test_placement_argument():
    assert make_baseline("zb-v", 8, 8, placement="v").placement == v_placement(8, 4)
    # one stage per rank: loop and v are the same placement
    assert make_baseline("1f1b", 4, 8, placement="v").placement == (0, 1, 2, 3)
    with pytest.raises(SchedcError, match="zb-v uses v placement, not loop"):
        make_baseline("zb-v", 8, 8, placement="loop")
    with pytest.raises(SchedcError, match="interleaved-1f1b uses loop placement, not v.*zb-v"):
        make_baseline("interleaved-1f1b", 8, 8, placement="v")
    with pytest.raises(SchedcError, match="placement must be loop or v"):
        make_baseline("1f1b", 4, 8, placement="zigzag")


def test_default_ranks():
    assert make_baseline("1f1b", 4, 8).n_ranks == 4
    assert make_baseline("zb-v", 8, 8).n_ranks == 4
    assert make_baseline("interleaved-1f1b", 8, 8).n_ranks == 4
    assert make_baseline("looped-bfs", 12, 8, n_ranks=3).n_ranks == 3


# ---------------------------------------------------------------- torch: same orders, and acceptance


def _torch_schedule(torch_class: str, ranks: int, m: int, per_rank: int, placement):
    pytest.importorskip("torch")
    from torch.distributed.pipelining import schedules as ts
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    ops = get_schedule_ops(getattr(ts, torch_class), ranks, m, num_stages_per_rank=per_rank)
    compute = ("F", "I", "W", "B", "OVERLAP_F_B")  # drop REDUCE_GRAD and idle cells
    rows = [[a for a in row if a is not None and a.computation_type.value in compute] for row in ops]
    return csvio.from_torch_order(rows, n_microbatches=m, placement=placement)


TORCH_CASES = [
    (name, r, v, m)
    for name in BASELINE_NAMES if INFO[name].torch_class and name != "1f1b"
    for (r, m) in [(1, 3), (2, 3), (2, 4), (3, 6), (4, 4), (4, 8), (4, 10), (4, 12), (3, 2)]
    for v in _stages_per_rank(name)
]


@pytest.mark.parametrize("name,r,v,m", TORCH_CASES)
def test_same_order_as_torch(name, r, v, m):
    """Same action order per rank as torch's own schedule class, hence the same simulated
    makespan and peak memory."""
    try:
        ours = make_baseline(name, r * v, m, n_ranks=r)
    except SchedcError:
        # we refuse exactly when torch refuses
        pytest.importorskip("torch")
        with pytest.raises(Exception):  # noqa: B017 - any refusal of torch's, whatever its type
            _torch_schedule(INFO[name].torch_class, r, m, v, None)
        return
    theirs = _torch_schedule(INFO[name].torch_class, r, m, v, ours.placement)
    for rank in range(r):
        assert ours.actions(rank) == theirs.actions(rank), f"rank {rank}"
    prof = Profile.uniform(r * v, 1.0, 1.2, 0.7, comm=0.1)
    a, b = simulate(ours, prof), simulate(theirs, prof)
    assert a.makespan == b.makespan and a.peak_memory == b.peak_memory


@pytest.mark.parametrize("r,m", [(2, 2), (2, 4), (3, 6), (4, 4), (4, 8), (4, 12)])
def test_1f1b_matches_torch_except_torchs_shifted_last_rank(r, m):
    """torch 2.13's ``Schedule1F1B._get_pipeline_order`` (what get_schedule_ops returns)
    numbers the last rank's forwards from 1: it runs F1..F{m} (F{m} does not exist, F0 never
    runs) while its backwards are B0..B{m-1}, so that order cannot run (schedc's simulator
    reports 'needs F0, which no rank runs'). torch's real 1F1B execution (_step_microbatches) is
    not affected. Every other rank matches schedc exactly, and shifting the last rank's forwards
    back by one gives schedc's order, hence the same makespan and peak memory."""
    ours = make_baseline("1f1b", r, m)
    theirs = _torch_schedule("Schedule1F1B", r, m, 1, ours.placement)
    for rank in range(r - 1):
        assert ours.actions(rank) == theirs.actions(rank)
    last = theirs.actions(r - 1)
    assert [a.microbatch for a in last if a.kind == "F"] == list(range(1, m + 1))  # the quirk, pinned
    assert [a.microbatch for a in last if a.kind == "B"] == list(range(m))
    with pytest.raises(SchedcError, match=f"{r - 1}B0 needs {r - 1}F0, which no rank runs"):
        simulate(theirs, Profile.uniform(r))
    fixed = [Action(a.stage, a.kind, a.microbatch - 1) if a.kind == "F" else a for a in last]
    assert fixed == ours.actions(r - 1)
    theirs.rows[r - 1] = fixed
    prof = Profile.uniform(r)
    a, b = simulate(ours, prof), simulate(theirs, prof)
    assert a.makespan == b.makespan == 3 * m + 3 * (r - 1)
    assert a.peak_memory == b.peak_memory


@pytest.mark.parametrize("r,m", [(2, 4), (3, 9), (4, 2), (4, 4), (4, 8)])
def test_zb_h1_is_torchs_interleaved_zero_bubble_with_one_stage_per_rank(r, m):
    """torch has no ZB-H1 class, but ScheduleInterleavedZeroBubble (ZB1P) built with one stage
    per rank is the same schedule. get_schedule_ops insists on >= 2 stages per rank, so build
    it the way get_schedule_ops does (a mocked stage)."""
    pytest.importorskip("torch")
    from unittest import mock

    from torch.distributed.pipelining import schedules as ts
    from torch.distributed.pipelining.stage import PipelineStage

    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.submod, stage.num_stages = 0, r, None, r
    order = ts.ScheduleInterleavedZeroBubble([stage], m).pipeline_order
    theirs = csvio.from_torch_order([[a for a in order[k] if a is not None] for k in range(r)], n_microbatches=m)
    ours = make_baseline("zb-h1", r, m)
    assert [theirs.actions(k) for k in range(r)] == [ours.actions(k) for k in range(r)]


@pytest.mark.parametrize("name", BASELINE_NAMES)
def test_torch_accepts_every_baseline(name):
    pytest.importorskip("torch")
    from schedc.runtime.torch_check import check_with_torch

    checked = 0
    for schedule, size in _sizes(name, ranks=(1, 2, 4), mbs=(2, 4, 8)):
        check_with_torch(schedule, source=f"{name} {size}")
        # and through a CSV file, as the runtime would read it
        again = csvio.parse_csv_text(csvio.to_csv_text(schedule), n_microbatches=schedule.n_microbatches,
                                     placement=schedule.placement)
        assert [again.actions(r) for r in range(again.n_ranks)] == [schedule.actions(r) for r in range(schedule.n_ranks)]
        checked += 1
    assert checked >= 4


# ---------------------------------------------------------------- CLI


def test_cli_baseline_writes_a_csv_that_reads_back(tmp_path, capsys):
    out = tmp_path / "zbv.csv"
    assert main(["baseline", "ZBVZeroBubble", "--stages", "8", "--mb", "8", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    read = csvio.read_csv(out)
    ours = make_baseline("zb-v", 8, 8)
    assert read.placement == ours.placement
    assert [read.actions(r) for r in range(4)] == [ours.actions(r) for r in range(4)]
    assert main(["validate", str(out), "--stages", "8", "--mb", "8", "--ranks", "4", "--placement", "v"]) == 0


def test_cli_baseline_prints_and_lists(capsys):
    assert main(["baseline", "1f1b", "--stages", "2", "--mb", "3"]) == 0
    assert capsys.readouterr().out.splitlines() == ["0F0,0F1,0B0,0F2,0B1,0B2", "1F0,1B0,1F1,1B1,1F2,1B2"]
    assert main(["baseline", "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == list(BASELINE_NAMES)
    assert listed[BASELINE_NAMES.index("zb-v")].split()[1] == "v"


def test_cli_baseline_errors_leave_no_file(tmp_path, capsys):
    out = tmp_path / "x.csv"
    assert main(["baseline", "zb-v", "--stages", "4", "--ranks", "4", "--mb", "4", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zb-v needs exactly 2 stages per rank" in err and "use --ranks 2" in err
    assert not out.exists()
    assert main(["baseline", "nope", "--stages", "4", "--mb", "4"]) == 2
    assert "unknown schedule 'nope'" in capsys.readouterr().err
    assert main(["baseline", "1f1b"]) == 2
    assert "give NAME --stages N --mb M" in capsys.readouterr().err


# ---------------------------------------------------------------- V-Half and V-Min (controllable memory)


def _v_peak(name, p, m, held, runtime):
    schedule = make_baseline(name, 2 * p, m)
    res = simulate(schedule, Profile.uniform(2 * p, held_fraction=held), runtime=runtime)
    return res, max(res.peak_memory) / (2 * p)  # in units of p: 1p = p microbatches of both stages


@pytest.mark.parametrize("p", [2, 3, 4, 5, 6, 8])
def test_v_min_holds_its_claimed_memory(p):
    """V-Min: at most (p+4)//3 microbatches of a rank's stages (the paper's table), under the
    paper's accounting (I frees half) and also when I frees nothing, ideal or torch runtime."""
    bound = ((p + 4) // 3) / p
    for held, runtime in ((0.5, "ideal"), (1.0, "ideal"), (1.0, "torch")):
        _, peak = _v_peak("v-min", p, 16, held, runtime)
        assert peak <= bound + 1e-9


@pytest.mark.parametrize("p", [2, 3, 4, 5, 6, 7, 8])
def test_v_half_holds_its_claimed_memory(p):
    """V-Half: at most (p+2)//2 microbatches of a rank's stages (the paper's table) when a
    microbatch's activation lives until its W (the paper's accounting, and torch's split
    backward), ideal or torch runtime; freeing part of it at I only lowers the peak."""
    bound = ((p + 2) // 2) / p
    for m in (p, 2 * p + 1, 16):
        for held, runtime in ((1.0, "ideal"), (1.0, "torch"), (0.5, "ideal")):
            _, peak = _v_peak("v-half", p, m, held, runtime)
            assert peak <= bound + 1e-9, (m, held, runtime)


def test_v_half_never_slower_than_v_min():
    """More memory buys time: V-Half's makespan is never above V-Min's (unit costs)."""
    for p in (2, 3, 5, 8):
        for m in (p, 2 * p, 3 * p + 1):
            half, _ = _v_peak("v-half", p, m, 1.0, "ideal")
            vmin, _ = _v_peak("v-min", p, m, 1.0, "ideal")
            assert half.makespan <= vmin.makespan, (p, m)


def test_v_schedules_on_the_issue_instance():
    """4 ranks x 2 stages, F = I = W, I frees nothing, ideal runtime: V-Min fits 0.5p and takes
    59 / 107 for 8 / 16 microbatches, V-Half fits 0.75p and takes 53 / 101, the lower bound
    6M + 5 (the authors' numbers)."""
    for m, v_min, v_half in ((8, 59, 53), (16, 107, 101)):
        res, peak = _v_peak("v-min", 4, m, 1.0, "ideal")
        assert (res.makespan, peak) == (v_min, 0.5)
        res, peak = _v_peak("v-half", 4, m, 1.0, "ideal")
        assert (res.makespan, peak) == (v_half, 0.75)


# What the authors' generator (sail-sg/zero-bubble-pipeline-parallelism, the V-Half / V-Min
# PipelineGraph: get_schedule with f = b = w = 1, c = 0, mem_config "half" / "min") returns as
# its step time at R ranks x M microbatches; a rank's stages hold (R+2)//2 and (R+4)//3
# microbatches there (5 of 8 = 0.625p and 4 of 8 = 0.5p at 8 ranks).
AUTHORS = {  # (R, M): (V-Half, V-Min)
    (4, 8): (53, 59), (4, 12): (77, 83), (4, 16): (101, 107),
    (6, 12): (83, 89), (6, 18): (119, 125), (6, 24): (155, 161),
    (8, 16): (113, 123), (8, 24): (161, 171), (8, 32): (209, 219),
}


@pytest.mark.parametrize("p,m", sorted(AUTHORS))
def test_v_half_and_v_min_take_the_authors_time_and_memory(p, m):
    """schedc's V-Half and V-Min are the schedules the authors' generator makes: same step time
    on identical stages (makespan and span coincide there), same memory."""
    for name, value, held in (("v-half", AUTHORS[p, m][0], (p + 2) // 2), ("v-min", AUTHORS[p, m][1], (p + 4) // 3)):
        res, peak = _v_peak(name, p, m, 1.0, "ideal")
        assert (res.makespan, res.span) == (value, value), (name, p, m)
        assert peak == held / p, (name, p, m)


@pytest.mark.parametrize("name,p,m,rank,row", [
    ("v-half", 4, 8, 3, "3F0,4F0,3F1,4F1,3F2,4F2,4I0,4W0,3I0,3W0,3F3,4F3,4I1,4W1,3I1,3W1,3F4,4F4,4I2,4W2,3I2,"
     "3W2,3F5,4F5,4I3,4W3,3I3,3F6,3W3,4F6,4I4,3I4,4W4,3F7,3W4,4F7,4I5,3I5,4I6,3I6,4W5,4W6,4I7,3I7,4W7,3W5,3W6,3W7"),
    ("v-min", 4, 8, 0, "0F0,0F1,0F2,7F0,7I0,7W0,7F1,7I1,7W1,0I0,0W0,0F3,7F2,7I2,0I1,7W2,0W1,0F4,7F3,7I3,0I2,7W3,"
     "0W2,0F5,7F4,7I4,0I3,7W4,0W3,0F6,7F5,7I5,0I4,7W5,0W4,0F7,7F6,7I6,0I5,7W6,0W5,7F7,7I7,0I6,7W7,0W6,0I7,0W7"),
    ("v-half", 6, 12, 0, "0F0,0F1,0F2,0F3,0F4,0F5,0F6,11F0,11I0,11W0,11F1,11I1,11W1,11F2,11I2,11W2,11F3,0I0,"
     "11I3,11W3,11F4,0W0,0F7,0I1,11I4,11W4,11F5,0W1,0F8,0I2,11I5,11W5,11F6,0W2,0F9,0I3,11I6,11W6,11F7,0W3,0F10,"
     "0I4,11I7,11W7,11F8,0W4,0F11,0I5,11I8,11W8,11F9,11I9,11W9,0I6,0W5,0W6,11F10,11I10,11W10,0I7,0W7,11F11,"
     "11I11,0I8,11W11,0I9,0W8,0W9,0I10,0W10,0I11,0W11"),
])
def test_v_orders_are_the_authors_orders(name, p, m, rank, row):
    """One rank's whole order, as the authors' generator orders it (its stage_order, written in
    torch's notation)."""
    got = make_baseline(name, 2 * p, m).rows[rank]
    assert ",".join(f"{a.stage}{a.kind}{a.microbatch}" for a in got) == row


def test_cli_v_half(capsys):
    assert main(["baseline", "v-half", "--stages", "8", "--mb", "8"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 4 and rows[0].startswith("0F0,0F1,")
