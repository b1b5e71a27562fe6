"""The simulator against closed forms: the zero-bubble paper's bubble formulas for identical
stages, flow-shop formulas for GPipe, a hand-computed timeline, memory accounting, and errors.

How the ZB bubbles are measured: the paper's objective is per rank, from the rank's first
action's start to its last action's end (``SimResult.span_per_rank``; ``span`` is the largest,
docs/design.md's ``span`` objective), because in its setting ranks do not wait for each other at the
step boundary. The bubble of a rank is that span minus the rank's busy time ``m(F+I+W)``; the
schedule's bubble is the largest over ranks (rank 0's for 1F1B and ZB-H1)."""

from __future__ import annotations

import math

import pytest

from schedc.core.baselines import make_baseline
from schedc.core.costs import MemoryLimit, Profile, StageCost
from schedc.core.ir import Action, Overlap, Schedule
from schedc.core.simulate import peak_activation_units, simulate
from schedc.errors import SchedcError

SIZES = [(2, 2), (2, 4), (3, 3), (3, 6), (3, 9), (4, 4), (4, 8), (4, 12), (5, 10), (6, 18)]


def _profile(forward, backward_input, backward_weight, comm=0.0, activation=1.0, weight_grad=0.5, static=0.0):
    """One StageCost per entry of the (equal-length) cost lists."""
    stages = [
        StageCost(forward=f, backward_input=i, backward_weight=w, activation_bytes=activation,
                  weight_grad_bytes=weight_grad, static_bytes=static)
        for f, i, w in zip(forward, backward_input, backward_weight)
    ]
    return Profile(stages=stages, comm=comm)


# ---------------------------------------------------------------- the zero-bubble paper's closed forms


@pytest.mark.parametrize("p,m", SIZES)
def test_1f1b_makespan_and_bubble_closed_form(p, m):
    """1F1B with F=I=W=1 (B = I+W = 2): makespan 3m + 3(p-1); every rank idles (p-1)(F+B)."""
    res = simulate(make_baseline("1f1b", p, m), Profile.uniform(p))
    assert res.makespan == 3 * m + 3 * (p - 1)
    assert res.span == res.makespan  # rank 0 starts at 0 and finishes last
    for r in range(p):
        assert res.busy[r] == 3 * m
        assert res.makespan - res.busy[r] == 3 * (p - 1)
    assert res.bubble == pytest.approx(3 * (p - 1) / (3 * m + 3 * (p - 1)))


@pytest.mark.parametrize("p,m", SIZES)
def test_gpipe_makespan_closed_form(p, m):
    """GPipe: (m + p - 1)(F + B), the same as 1F1B for identical stages, but holding m."""
    res = simulate(make_baseline("gpipe", p, m), Profile.uniform(p))
    assert res.makespan == (m + p - 1) * 3
    assert peak_activation_units(make_baseline("gpipe", p, m), Profile.uniform(p)) == [m] * p


@pytest.mark.parametrize("p,m", [(p, m) for p, m in SIZES if m >= p])
def test_zb_h1_bubble_is_p_minus_1_times_f_plus_i_minus_w(p, m):
    res = simulate(make_baseline("zb-h1", p, m), Profile.uniform(p))
    idle_in_span = [s - b for s, b in zip(res.span_per_rank, res.busy)]
    assert res.busy == [3 * m] * p
    assert res.span - 3 * m == (p - 1) * (1 + 1 - 1)
    assert idle_in_span[0] == p - 1 and max(idle_in_span) == p - 1
    # a third of 1F1B's bubble, as the paper says
    one_f_one_b = simulate(make_baseline("1f1b", p, m), Profile.uniform(p))
    assert 3 * (res.span - 3 * m) == one_f_one_b.span - 3 * m


@pytest.mark.parametrize("p,m", [(2, 3), (2, 6), (3, 5), (3, 9), (4, 7), (4, 8), (4, 12), (5, 9), (5, 15)])
def test_zb_h2_has_no_bubble_inside_any_rank_span(p, m):
    """ZB-H2 with F=I=W and m >= 2p-1: (p-1)(F+I-2W) = 0 on every rank; the ranks form a
    parallelogram (rank r runs from r to r + 3m), so the makespan is 3m + p - 1."""
    res = simulate(make_baseline("zb-h2", p, m), Profile.uniform(p), runtime="ideal")
    assert res.span_per_rank == [3 * m] * p
    assert res.span_bubble == 0
    assert res.makespan == 3 * m + p - 1
    assert [res.timings[res.order[r][0]].start for r in range(p)] == list(range(p))


@pytest.mark.parametrize("costs", [(2, 2, 1), (1, 1, 0.5), (1, 2, 1)])
@pytest.mark.parametrize("p,m", [(3, 9), (4, 8), (4, 12)])
def test_closed_forms_with_unequal_pass_times(costs, p, m):
    """The paper's formulas with F, I, W not all equal (W <= F, I), under its ideal runtime: span
    minus busy is (p-1)(F+I+W) for 1F1B, (p-1)(F+I-W) for ZB-H1, (p-1)(F+I-2W) for ZB-H2."""
    f, i, w = costs
    prof = Profile.uniform(p, f, i, w)
    busy = m * (f + i + w)
    expected = {"1f1b": (p - 1) * (f + i + w), "zb-h1": (p - 1) * (f + i - w), "zb-h2": (p - 1) * (f + i - 2 * w)}
    for name, bubble in expected.items():
        assert simulate(make_baseline(name, p, m), prof, runtime="ideal").span - busy == pytest.approx(bubble), name


# ---------------------------------------------------------------- peak memory


@pytest.mark.parametrize("p,m", [(2, 4), (3, 6), (4, 8), (4, 12), (5, 10)])
def test_peak_memory_1f1b_zbh1_zbh2(p, m):
    """The paper's memory accounting (ideal runtime, half the activation freed by I)."""
    prof = Profile.uniform(p, held_fraction=0.5)
    f1b = peak_activation_units(make_baseline("1f1b", p, m), prof, runtime="ideal")
    assert f1b == [p - r for r in range(p)]  # rank 0 holds p microbatches: "1p"
    h1 = peak_activation_units(make_baseline("zb-h1", p, m), prof, runtime="ideal")
    assert h1[0] == p and max(h1) <= p
    h2 = peak_activation_units(make_baseline("zb-h2", p, m), prof, runtime="ideal")
    assert h2[0] == min(m, 2 * p - 1) and max(h2) <= 2 * p - 1  # about 2p
    # the memory limit says the same thing
    one_p, two_p = MemoryLimit.parse("1p"), MemoryLimit.parse("2p")
    assert simulate(make_baseline("1f1b", p, m), prof, one_p, runtime="ideal").fits
    assert simulate(make_baseline("zb-h1", p, m), prof, one_p, runtime="ideal").fits
    assert not simulate(make_baseline("zb-h2", p, m), prof, one_p, runtime="ideal").fits
    assert simulate(make_baseline("zb-h2", p, m), prof, two_p, runtime="ideal").fits


@pytest.mark.parametrize("p,m", [(2, 4), (3, 6), (4, 8), (4, 12), (5, 10)])
def test_peak_memory_under_torch_split_backward(p, m):
    """torch's runtime: I frees nothing (retain_graph keeps the graph until W), so a schedule
    that defers W holds more. 1F1B runs B and holds p on rank 0 either way; ZB-H1 holds one
    more microbatch per deferred W, so it needs more than 1p."""
    prof = Profile.uniform(p)
    assert peak_activation_units(make_baseline("1f1b", p, m), prof) == [p - r for r in range(p)]
    h1 = peak_activation_units(make_baseline("zb-h1", p, m), prof)
    assert h1[0] == p  # stage 0's W is its whole backward: freed as in 1F1B
    assert max(h1) > p - 1 and all(h >= p - r for r, h in enumerate(h1))
    assert max(h1[r] - (p - r) for r in range(p)) >= 1  # some rank holds at least one more



@pytest.mark.parametrize("name,n,m", [("1f1b", 4, 8), ("zb-h1", 3, 6), ("zb-h2", 4, 9), ("zb-v", 6, 12),
                                      ("interleaved-1f1b", 6, 6), ("dualpipev", 4, 8)])
def test_memory_curve_is_consistent(name, n, m):
    """Each rank's curve starts at its static bytes, changes by the ZB deltas at non-decreasing
    times, peaks at peak_memory and ends with everything freed."""
    schedule = make_baseline(name, n, m)
    prof = _profile([1.0] * n, [1.5] * n, [0.5] * n, comm=0.1, activation=4.0, weight_grad=1.0, static=10.0)
    res = simulate(schedule, prof)
    for r in range(schedule.n_ranks):
        static = 10.0 * len(schedule.stages_of(r))
        curve = res.memory_curve[r]
        assert curve[0] == (0.0, static)
        assert curve[-1][1] == pytest.approx(static)
        assert all(t0 <= t1 for (t0, _), (t1, _) in zip(curve, curve[1:]))
        assert max(v for _, v in curve) == res.peak_memory[r]
        assert len(curve) == len(res.order[r]) + 1
        steps = {round(b - a, 9) for (_, a), (_, b) in zip(curve, curve[1:])}
        # under torch's runtime stage 0's I frees nothing (0) and its W frees everything (-4)
        assert steps <= ({4.0, -3.0, -1.0, -4.0, 0.0} if 0 in schedule.stages_of(r) else {4.0, -3.0, -1.0, -4.0})


# ---------------------------------------------------------------- communication and heterogeneous stages


def test_hand_computed_timeline_with_comm_and_unequal_stages():
    """1F1B, 2 stages, 2 microbatches; stage 0: F=1 B=3 (I=2, W=1), stage 1: F=2 B=2; comm 0.5.
    rank 0: F0 F1 B0 B1, rank 1: F0 B0 F1 B1 (worked out by hand)."""
    prof = _profile([1, 2], [2, 1], [1, 1], comm=0.5, activation=4.0, weight_grad=1.0)
    res = simulate(make_baseline("1f1b", 2, 2), prof)
    expect = {
        Action(0, "F", 0): (0, 1), Action(0, "F", 1): (1, 2),
        Action(1, "F", 0): (1.5, 3.5), Action(1, "B", 0): (3.5, 5.5),
        Action(1, "F", 1): (5.5, 7.5), Action(1, "B", 1): (7.5, 9.5),
        Action(0, "B", 0): (6, 9), Action(0, "B", 1): (10, 13),
    }
    assert {a: (t.start, t.end) for a, t in res.timings.items()} == expect
    assert res.makespan == 13 and res.busy == [8, 8]
    assert res.span_per_rank == [13, 8]
    assert res.bubble_per_rank == pytest.approx([1 - 8 / 13, 1 - 8 / 13])
    assert res.memory_curve[0] == [(0, 0), (0, 4), (1, 8), (9, 4), (13, 0)]
    assert res.peak_memory == [8, 4]
    assert res.objective("makespan") == 13 and res.objective("span") == 13
    with pytest.raises(ValueError, match="objective"):
        res.objective("throughput")


@pytest.mark.parametrize("p,m", [(3, 6), (4, 8)])
@pytest.mark.parametrize("c", [0.1, 0.5, 2.0])
def test_comm_increases_makespan_as_expected(p, m, c):
    base = 3 * (m + p - 1)
    # GPipe is two flow shops (forward, then backward), each crossing p-1 boundaries once
    assert simulate(make_baseline("gpipe", p, m), Profile.uniform(p, comm=c)).makespan == pytest.approx(base + 2 * (p - 1) * c)
    # more comm always costs time; 1F1B and ZB-H1 have no slack on the first round trip, so
    # they pay all of its 2(p-1) crossings on top of the comm-free makespan (ZB-H2 hides some)
    for name in ("1f1b", "zb-h1", "zb-h2"):
        times = [simulate(make_baseline(name, p, m), Profile.uniform(p, comm=x)).makespan for x in (0, c / 2, c)]
        assert times[0] < times[1] < times[2], name
        if name != "zb-h2":
            assert times[2] >= times[0] + 2 * (p - 1) * c - 1e-9, name


def test_comm_is_only_paid_between_ranks():
    """In ZB-V, stages R-1 and R sit on the same rank, so that boundary's comm costs nothing."""
    p, m = 3, 6
    n = 2 * p
    cheap = [0.0] * (n - 1)
    pricey = list(cheap)
    pricey[p - 1] = 100.0
    zbv = make_baseline("zb-v", n, m)
    assert simulate(zbv, Profile.uniform(n, comm=pricey)).makespan == simulate(zbv, Profile.uniform(n, comm=cheap)).makespan
    loop = make_baseline("interleaved-1f1b", n, m)  # here every boundary crosses ranks
    assert simulate(loop, Profile.uniform(n, comm=pricey)).makespan > simulate(loop, Profile.uniform(n, comm=cheap)).makespan + 100


def test_single_microbatch_makespan_is_the_critical_path():
    fwd, bi, bw = [1, 3, 2, 1.5], [2, 1, 1, 1], [0.5, 1, 0, 2]
    prof = _profile(fwd, bi, bw, comm=[0.1, 0.2, 0.3])
    expect = sum(fwd) + sum(bi) + sum(bw) + 2 * (0.1 + 0.2 + 0.3)
    assert simulate(make_baseline("gpipe", 4, 1), prof).makespan == pytest.approx(expect)
    # with I/W split only stage 0's W stays on the critical path; the other W's overlap it
    split = sum(fwd) + sum(bi) + bw[0] + 2 * (0.1 + 0.2 + 0.3)
    assert simulate(make_baseline("zb-h1", 4, 1), prof).makespan == pytest.approx(split)


@pytest.mark.parametrize("times", [(1, 1, 3, 1), (3, 1, 1, 1), (1, 2, 1, 1), (2, 1, 1.5, 1)])
def test_heterogeneous_stages(times):
    """Unequal stages: GPipe is a forward flow shop then a backward one, so its makespan is
    sum(F) + (m-1) max(F) + sum(B) + (m-1) max(B); no schedule beats the per-stage bound
    m(F_s + B_s) + what must run before stage s starts and after it ends; 1F1B's makespan is
    m(F+B) of the bottleneck + one pass through the others when the last stage is the bottleneck."""
    p, m = len(times), 6
    fwd = [float(t) for t in times]
    bi = [1.5 * t for t in times]
    bw = [0.5 * t for t in times]
    bwd = [i + w for i, w in zip(bi, bw)]
    prof = _profile(fwd, bi, bw)
    gpipe = simulate(make_baseline("gpipe", p, m), prof).makespan
    assert gpipe == pytest.approx(sum(fwd) + (m - 1) * max(fwd) + sum(bwd) + (m - 1) * max(bwd))
    # stage s cannot start before microbatch 0's forwards before it; after its last backward the
    # gradient still crosses the stages below it. With I/W split only the last I must precede
    # that crossing (the W's may overlap it).
    merged = max(sum(fwd[:s]) + m * (fwd[s] + bwd[s]) + sum(bwd[:s]) for s in range(p))
    split = max(sum(fwd[:s]) + max(m * (fwd[s] + bwd[s]), m * (fwd[s] + bi[s]) + sum(bi[:s])) for s in range(p))
    for name, bound in (("gpipe", merged), ("1f1b", merged), ("zb-h1", split), ("zb-h2", split)):
        assert simulate(make_baseline(name, p, m), prof).makespan >= bound - 1e-9, name
    last_heavy = _profile([1, 1, 1, 3], [1, 1, 1, 3], [1, 1, 1, 3])
    assert simulate(make_baseline("1f1b", 4, m), last_heavy).makespan == m * 9 + 3 * 3


def test_overlap_cells_wait_for_all_inputs_then_run_back_to_back():
    a, b = Action(0, "F", 1), Action(1, "B", 0)
    s = Schedule(rows=[[Action(0, "F", 0), Overlap((a, Action(0, "B", 0))), Action(0, "B", 1)],
                       [Action(1, "F", 0), b, Action(1, "F", 1), Action(1, "B", 1)]],
                 placement=(0, 1), n_microbatches=2)
    res = simulate(s, Profile.uniform(2))
    f1, b0 = res.timings[a], res.timings[Action(0, "B", 0)]
    # torch receives every input of the cell before running it, so the cell waits for 1B0 (ends
    # at 4) even though its F part needs nothing; then the parts run back to back
    assert (f1.start, f1.end, b0.start, b0.end) == (4, 5, 5, 7)
    assert res.makespan == 10
    assert res.order[0] == [Action(0, "F", 0), a, Action(0, "B", 0), Action(0, "B", 1)]


# ---------------------------------------------------------------- errors


def test_deadlock_is_an_error_naming_the_waits():
    # rank 1 runs microbatch 1 first, rank 0 runs microbatch 0's backward before microbatch 1's forward
    rows = [[Action(0, "F", 0), Action(0, "B", 0), Action(0, "F", 1), Action(0, "B", 1)],
            [Action(1, "F", 1), Action(1, "B", 1), Action(1, "F", 0), Action(1, "B", 0)]]
    s = Schedule(rows=rows, placement=(0, 1), n_microbatches=2)
    with pytest.raises(SchedcError, match="deadlock") as e:
        simulate(s, Profile.uniform(2))
    assert "rank 0 waits at 0B0" in str(e.value) and "rank 1 waits at 1F1" in str(e.value)
    # a rank waiting on its own later action
    own = Schedule(rows=[[Action(0, "B", 0), Action(0, "F", 0)]], placement=(0,), n_microbatches=1)
    with pytest.raises(SchedcError, match="deadlock.*0B0.*0F0"):
        simulate(own, Profile.uniform(1))


def test_missing_producer_is_an_error():
    s = Schedule(rows=[[Action(0, "F", 0), Action(0, "B", 0)], [Action(1, "B", 0)]], placement=(0, 1), n_microbatches=1)
    with pytest.raises(SchedcError, match="1B0 needs 1F0, which no rank runs"):
        simulate(s, Profile.uniform(2))


def test_profile_schedule_stage_count_mismatch():
    with pytest.raises(SchedcError, match="profile describes 3 stages but the schedule has 4"):
        simulate(make_baseline("1f1b", 4, 4), Profile.uniform(3))


def test_memory_limit_bytes_and_none():
    prof = _profile([1] * 2, [1] * 2, [1] * 2, activation=2**30, weight_grad=2**29, static=2**31)
    res = simulate(make_baseline("1f1b", 2, 4), prof, MemoryLimit.parse("4GiB"))
    assert res.peak_memory == [2**31 + 2 * 2**30, 2**31 + 2**30]
    assert res.memory_limit == [4 * 2**30] * 2 and res.fits
    res = simulate(make_baseline("gpipe", 2, 4), prof, MemoryLimit.parse("4GiB"))
    assert not res.fits
    assert simulate(make_baseline("gpipe", 2, 4), prof).memory_limit == [math.inf, math.inf]


# ---------------------------------------------------------------- torch's runtime: stage 0's backward


def test_torch_runtime_runs_stage0_backward_in_w():
    """Stage 0's I takes no time and frees nothing; its W takes I + W and frees the activation.
    Other stages keep their own I and W. The ideal runtime keeps the paper's numbers."""
    prof = _profile([1, 1, 1], [2, 2, 2], [1, 1, 1], activation=4.0, weight_grad=1.0)
    schedule = make_baseline("zb-h1", 3, 3)
    torch_run, ideal_run = simulate(schedule, prof), simulate(schedule, prof, runtime="ideal")
    for m in range(3):
        i0, w0 = torch_run.timings[Action(0, "I", m)], torch_run.timings[Action(0, "W", m)]
        assert i0.end == i0.start and w0.end - w0.start == 3
        i1 = torch_run.timings[Action(1, "I", m)]
        assert i1.end - i1.start == 2
        assert ideal_run.timings[Action(0, "I", m)].end - ideal_run.timings[Action(0, "I", m)].start == 2
    # rank 0's curve: F adds 4, I changes nothing, W frees 4
    steps = [round(b - a, 9) for (_, a), (_, b) in zip(torch_run.memory_curve[0], torch_run.memory_curve[0][1:])]
    kinds = [a.kind for a in torch_run.order[0]]
    assert {k: {s for s, kk in zip(steps, kinds) if kk == k} for k in "FIW"} == {"F": {4.0}, "I": {0.0}, "W": {-4.0}}


def test_torch_conversion_is_idempotent_and_marked():
    prof = _profile([1, 1], [2, 2], [1, 1], activation=4.0, weight_grad=1.0)
    once = prof.executed("torch")
    assert once.runtime == "torch" and once.executed("torch") is once
    assert [once.duration(0, k) for k in "IWB"] == [0, 3, 3] and once.memory_delta(0, "W") == -4
    assert [once.duration(1, k) for k in "IWB"] == [2, 1, 3]
    assert simulate(make_baseline("zb-h1", 2, 4), once).makespan == simulate(make_baseline("zb-h1", 2, 4), prof).makespan
    # a profile measured under torch has no ideal form
    with pytest.raises(SchedcError, match="follows torch's runtime"):
        simulate(make_baseline("1f1b", 2, 2), once, runtime="ideal")
    with pytest.raises(SchedcError, match="--runtime must be one of torch, ideal"):
        simulate(make_baseline("1f1b", 2, 2), prof, runtime="megatron")


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_full_backward_schedules_time_alike_under_both_runtimes(name):
    """B on stage 0 is I + W either way, so schedules without split backwards do not change."""
    prof = _profile([1, 2, 1], [2, 1, 3], [1, 1, 2], comm=0.25, activation=4.0, weight_grad=1.0)
    schedule = make_baseline(name, 3, 6)
    assert simulate(schedule, prof).makespan == simulate(schedule, prof, runtime="ideal").makespan
