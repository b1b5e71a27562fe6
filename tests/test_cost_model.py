"""The one cost model (schedc.core.cost_model): the memory rule with rises at I, transients, overlap
cells, receive buffers and held sends per torch version, the reserve, and ``Kp`` caps built from
the same terms; the simulator, the constructions and the solvers agree with it."""

from __future__ import annotations

import math

import pytest

from schedc.core import cost_model
from schedc.core.costs import MemoryLimit, Profile, StageCost
from schedc.core.ir import TORCH_KINDS, Action, Overlap, Schedule
from schedc.core.simulate import simulate
from schedc.solver.engines.heuristic import check_memory_feasible, heuristic_schedule
from schedc.solver.problem import Problem


def _stage(act=4.0, wg=None, transient=None, static=0.0, f=1.0, i=1.0, w=1.0) -> StageCost:
    return StageCost(forward=f, backward_input=i, backward_weight=w, activation_bytes=act,
                     weight_grad_bytes=wg, transient_bytes=transient, static_bytes=static)


def _one_rank(stage: StageCost, rows, mb: int = 2, **kw) -> tuple[Schedule, Profile]:
    prof = Profile(stages=[stage], runtime="ideal", **kw)
    return Schedule(rows=[rows], placement=(0,), n_microbatches=mb), prof


def test_a_rise_at_i_counts_from_its_start_and_w_frees_it():
    sched, prof = _one_rank(_stage(act=4.0, wg=6.0), [Action(0, "F", 0), Action(0, "I", 0), Action(0, "W", 0)], mb=1)
    sim = simulate(sched, prof)
    assert sim.peak_memory == [6.0]
    # F allocates at its start (t=0), I's rise at its start (t=1), W frees at its end (t=3)
    assert sim.memory_curve[0] == [(0.0, 0.0), (0.0, 4.0), (1.0, 6.0), (3.0, 0.0)]


def test_transients_are_live_only_while_their_action_runs():
    stage = _stage(act=4.0, wg=2.0, transient={"F": 3.0, "W": 1.0})
    sched, prof = _one_rank(stage, [Action(0, "F", 0), Action(0, "F", 1), Action(0, "I", 0), Action(0, "W", 0),
                                    Action(0, "I", 1), Action(0, "W", 1)])
    sim = simulate(sched, prof)
    # the second F runs while the first microbatch is held: 4 + 4 + 3
    assert sim.peak_memory == [11.0]
    assert max(b for _, b in sim.memory_curve[0][3:]) <= 11.0 and sim.memory_curve[0][-1][1] == 0.0


def test_an_overlap_cell_counts_every_allocation_before_any_free():
    # torch 2.15's liveness analysis counts both actions of a B-first cell live
    stages = [_stage(act=1.0, w=0.0), _stage(act=1.0, w=0.0)]
    prof = Profile(stages=stages, runtime="ideal")
    b_first = Schedule(rows=[[Action(0, "F", 0), Action(0, "F", 1), Action(0, "B", 1), Action(0, "B", 0)],
                             [Action(1, "F", 0), Overlap((Action(1, "B", 0), Action(1, "F", 1))), Action(1, "B", 1)]],
                       placement=(0, 1), n_microbatches=2)
    f_first = Schedule(rows=[b_first.rows[0],
                             [Action(1, "F", 0), Overlap((Action(1, "F", 1), Action(1, "B", 0))), Action(1, "B", 1)]],
                       placement=(0, 1), n_microbatches=2)
    assert simulate(b_first, prof).peak_memory[1] == 2.0
    assert simulate(f_first, prof).peak_memory[1] == 2.0


def test_buffers_follow_the_torch_version():
    # 8 microbatches, a 1 MiB boundary between two ranks (the measurement of issue 38)
    mib = 2.0 ** 20
    base = dict(stages=[_stage(), _stage()], boundary_bytes=mib)
    old = Profile(**base, assumes={"torch": "2.14.1"})
    new = Profile(**base, assumes={"torch": "2.15.0"})
    default = Profile(**base)
    assert cost_model.buffer_bytes(old, (0, 1), 8) == [16 * mib, 16 * mib]  # 8 received + 8 sent
    # 2.15: 1 received and 8 sent on each rank; the later, the last stage, also the 8 inputs its
    # losses keep
    assert cost_model.buffer_bytes(new, (0, 1), 8) == [9 * mib, 17 * mib]
    assert cost_model.buffer_bytes(default, (0, 1), 8) == cost_model.buffer_bytes(new, (0, 1), 8)
    assert cost_model.torch_version(default) == cost_model.NEWEST_TORCH
    # two stages on one rank do not communicate; up to 2.14 the later one still preallocates
    # both buffers per microbatch (torch's PipelineStage), 2.15 allocates none
    assert cost_model.buffer_bytes(old, (0, 0), 8) == [16 * mib]
    assert cost_model.buffer_bytes(new, (0, 0), 8) == [0.0]
    assert cost_model.buffer_bytes(Profile(stages=[_stage(), _stage()]), (0, 1), 8) == [0.0, 0.0]


def test_buffers_and_reserve_count_in_the_peak_and_leave_less_room():
    prof = Profile(stages=[_stage(static=10.0), _stage(static=10.0)], boundary_bytes=1.0, reserve_bytes=5.0,
                   assumes={"torch": "2.14.1"})
    p = Problem.build(2, 2, profile=prof, memory="40B")
    assert p.fixed_bytes == [10.0 + 4.0 + 5.0] * 2  # static + (2 received + 2 sent) + reserve
    assert p.activation_room == [40.0 - 19.0] * 2
    sched = heuristic_schedule(p, time_budget=0.1)
    sim = simulate(sched, p.profile, p.memory)
    assert sim.fits and min(sim.peak_memory) >= 19.0 + 4.0


def test_kp_includes_what_1f1b_holds_with_rises_transients_buffers_and_reserve():
    stages = [_stage(act=2.0, wg=3.0, transient={"F": 1.0}, static=5.0) for _ in range(4)]
    prof = Profile(stages=stages, boundary_bytes=0.5, reserve_bytes=2.0, assumes={"torch": "2.14"})
    placement = (0, 1, 2, 3)
    fixed = cost_model.fixed_bytes(prof, placement, 8)
    peaks = cost_model.one_f_one_b_peaks(prof, placement)
    # 1F1B runs full backwards: B's transient (unmeasured: I's rise) or F's, whichever is larger
    assert peaks[0] == 4 * 2.0 + max(1.0, 3.0 - 2.0)
    caps = MemoryLimit.parse("1p").per_rank(prof, placement, 8)
    assert caps == [max(fx + pk for fx, pk in zip(fixed, peaks))] * 4
    # 1p fits wherever 1F1B fits, every term included
    from schedc.core.baselines import make_baseline

    f1b = make_baseline("1f1b", 4, 8)
    sim = simulate(f1b, prof, MemoryLimit.parse("1p"))
    assert sim.fits
    assert cost_model.p_needed(max(sim.peak_memory), prof, placement, 8) <= 1.0 + 1e-9


def test_without_the_new_fields_the_cost_model_is_the_zb_accounting():
    prof = Profile.edge_heavy(4, held_fraction=0.5)
    m = cost_model.CostModel.build(prof.executed(), (0, 1, 2, 3), 8, MemoryLimit.parse("1p"))
    for s in range(4):
        for k in "FIWB":
            assert m.held(s, k) == prof.executed().memory_delta(s, k)
            assert m.over(s, k) == max(0.0, m.held(s, k))
    assert m.fixed == [0.0] * 4 and not m.new_terms


def test_huge_static_bytes_and_tiny_activations_compile():
    # issue 39 item 20: the room was cap - static, which rounded the activation part away
    from schedc.solver.compile import compile_schedule

    prof = Profile(stages=[_stage(act=1.0, static=1e17) for _ in range(4)])
    res = compile_schedule(4, 8, profile=prof, memory="1p", time_limit=5)
    sim = simulate(res.schedule, prof, MemoryLimit.parse("1p"))
    assert sim.fits and res.status in ("optimal", "feasible", "heuristic")
    assert Problem.build(4, 8, profile=prof, memory="1p").activation_room == [4.0] * 4


def test_one_microbatch_need_includes_rises_and_transients():
    prof = Profile(stages=[_stage(act=2.0, wg=5.0), _stage(act=1.0, transient={"F": 4.0})], runtime="ideal")
    # F0 (2), F1 (2 + 1 + 4 transient), I1, W1, I0 rises to 5, W0
    assert cost_model.one_microbatch_need(prof, [0, 1]) == 7.0
    p = Problem.build(2, 2, n_ranks=1, placement=(0, 0), profile=prof, memory="6B", runtime="ideal")
    with pytest.raises(Exception, match="smallest limit that works is --memory 7B"):
        check_memory_feasible(p)


@pytest.mark.parametrize("torch", ["2.14.1", "2.15.0"])
def test_least_caps_are_the_peaks_of_one_microbatch_at_a_time(torch):
    # a V on two ranks with rises, transients, receive buffers (per microbatch up to 2.14) and a
    # reserve: the least cap per rank is what the simulator measures when every microbatch goes
    # through and back before the next, and no cap below it lets the heuristic start
    stages = [_stage(act=2.0, wg=3.0, transient={"F": 1.0}, static=5.0), _stage(act=1.0, transient={"W": 2.0}, static=4.0),
              _stage(act=2.0, static=1.0), _stage(act=1.0, wg=4.0, static=2.0)]
    prof = Profile(stages=stages, boundary_bytes=0.5, reserve_bytes=2.0, assumes={"torch": torch}, runtime="ideal")
    placement, mb = (0, 1, 1, 0), 3
    rows: list[list] = [[], []]
    for m in range(mb):
        for s in range(4):
            rows[placement[s]].append(Action(s, "F", m))
        for s in reversed(range(4)):
            rows[placement[s]] += [Action(s, "I", m), Action(s, "W", m)]
    model = cost_model.CostModel.build(prof, placement, mb)
    assert simulate(Schedule(rows=rows, placement=placement, n_microbatches=mb), prof).peak_memory == model.least_caps
    assert model.least_caps == [cost_model.least_need(prof, [0, 3], model.buffers[0]),
                                cost_model.least_need(prof, [1, 2], model.buffers[1])]
    below = f"{int(max(model.least_caps)) - 1}B"
    # the limit it names is whole bytes, rounded up
    with pytest.raises(Exception, match=f"smallest limit that works is --memory {math.ceil(max(model.least_caps))}B"):
        check_memory_feasible(Problem.build(4, mb, n_ranks=2, placement=placement, profile=prof, memory=below,
                                            runtime="ideal"))


def _units_with_new_terms() -> Profile:
    gib = 2.0 ** 30
    units = [StageCost(forward=0.05, backward_input=0.0, backward_weight=0.05, activation_bytes=0.2 * gib,
                       static_bytes=2 * gib)]
    for k in range(3):
        f = 1.0 + 0.1 * k
        units.append(StageCost(forward=f, backward_input=1.1 * f, backward_weight=0.9 * f, activation_bytes=1 * gib,
                               weight_grad_bytes=1.5 * gib, static_bytes=1 * gib))
    units.append(StageCost(forward=2.0, backward_input=2.0, backward_weight=2.0, activation_bytes=2 * gib,
                           weight_grad_bytes=2.2 * gib, static_bytes=2 * gib, transient_bytes={"F": 1.5 * gib}))
    return Profile(stages=units, comm=0.1, reserve_bytes=0.5 * gib)


@pytest.mark.parametrize("placement,ranks,mb", [("loop", 2, 3), ("v", 2, 2)])
def test_partition_bound_and_smallest_cap_with_rises_transients_and_reserve(placement, ranks, mb):
    import itertools
    import math
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from exhaustive import exact_optimum

    from schedc.core.ir import make_placement
    from schedc.core.partition import Units, min_cap, partition_bound
    from schedc.errors import SchedcError

    units = _units_with_new_terms()
    cap = 9.5 * 2.0 ** 30
    n_stages = ranks * (2 if placement == "v" else 1)
    best, least_need = math.inf, math.inf
    for cuts in itertools.combinations(range(1, units.n_stages), n_stages - 1):
        edges = (0,) + cuts + (units.n_stages,)
        counts = [edges[k + 1] - edges[k] for k in range(n_stages)]
        merged = units.merge(counts)
        pl = make_placement(placement, n_stages, ranks)
        need = Problem.build(n_stages, mb, n_ranks=ranks, placement=pl, profile=merged, memory="none")
        from schedc.solver.engines.heuristic import min_memory_need

        least_need = min(least_need, max(min_memory_need(need)))
        try:
            p = Problem.build(n_stages, mb, n_ranks=ranks, placement=pl, profile=merged, memory=f"{cap:.0f}B")
            best = min(best, exact_optimum(p)[0])
        except SchedcError:
            continue
    assert best < math.inf
    bound = partition_bound(units, ranks, mb, cap, placement)
    assert 0.5 * best < bound.value <= best * (1 + 1e-9)
    # the smallest cap that holds one microbatch somewhere: rises, transients and reserve included
    assert min_cap(Units.of(units), placement, ranks)[0] == pytest.approx(least_need)


def test_cli_compile_then_simulate_check_with_every_memory_term(tmp_path):
    # a profile with rises at I, transients, boundary bytes (torch 2.14's buffers) and a reserve:
    # what compile writes fits under `simulate --check` at the same cap, and a cap 1 KiB under
    # the reported peak does not
    import json
    import subprocess
    import sys

    mib = 2.0 ** 20
    stages = [_stage(act=100 * mib, wg=150 * mib, static=500 * mib, transient={"F": 20 * mib, "I": 30 * mib})
              for _ in range(4)]
    Profile(stages=stages, comm=0.01, boundary_bytes=4 * mib, reserve_bytes=64 * mib,
            assumes={"torch": "2.14.1"}).save(tmp_path / "p.json")

    def schedc(*args):
        return subprocess.run([sys.executable, "-m", "schedc.cli", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=120)

    out = schedc("compile", "--profile", "p.json", "--stages", "4", "--mb", "8", "--memory", "1.2GiB",
                 "--time-limit", "5", "-o", "s.csv", "--quiet")
    assert out.returncode == 0, out.stderr
    peaks = json.loads((tmp_path / "s.json").read_text())["predicted"]["peak_memory_per_rank"]
    # every rank holds its static bytes, buffers (8 received + 8 sent per boundary side) and reserve
    assert min(peaks) >= 500 * mib + 64 * mib + 16 * 4 * mib + 150 * mib
    ok = schedc("simulate", "s.csv", "--profile", "p.json", "--memory", "1.2GiB", "--check")
    assert ok.returncode == 0, ok.stderr
    tight = schedc("simulate", "s.csv", "--profile", "p.json", "--memory", f"{int(max(peaks)) - 1024}B", "--check")
    assert tight.returncode == 1 and "exceeds the memory limit" in tight.stderr


def test_a_boundary_holds_receive_buffers_and_sends_per_torch_version():
    # across ranks: torch 2.14 preallocates M receive buffers per side, 2.15 one; both keep the M
    # sends (counted), 2.15 also the last stage's M inputs; on one rank 2.14 preallocates both
    # directions' M buffers, 2.15 nothing
    import numpy as np

    assert cost_model.boundary_buffers(2.0, 4, "2.14.1") == 16.0
    assert cost_model.boundary_buffers(2.0, 4, "2.14.1", into_last=True) == 16.0
    assert cost_model.boundary_buffers(2.0, 4, "2.15") == 10.0
    assert cost_model.boundary_buffers(2.0, 4, "2.15", into_last=False) == 10.0
    assert cost_model.boundary_buffers(2.0, 4, "2.15", into_last=True) == 18.0
    assert cost_model.boundary_buffers(2.0, 4, "2.14.1", same_rank=True) == 16.0
    assert cost_model.boundary_buffers(2.0, 4, "2.15", same_rank=True) == 0.0
    sizes, same = np.array([2.0, 3.0]), np.array([False, True])
    assert list(cost_model.boundary_buffers(sizes, 4, "2.15", same)) == [10.0, 0.0]
    prof = Profile(stages=[_stage()] * 4, boundary_bytes=[1.0, 2.0, 3.0], assumes={"torch": "2.14.1"})
    # V on 2 ranks: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2 (a boundary on one rank)
    assert cost_model.buffer_bytes(prof, [0, 1, 1, 0], 2) == [4 * 1.0 + 4 * 3.0, 4 * 1.0 + 4 * 2.0 + 4 * 3.0]
    # 2.15: 1 received and 2 sent per side; rank 0 also keeps the 2 inputs of stage 3, the last
    new = prof.model_copy(update={"assumes": {"torch": "2.15.0"}})
    assert cost_model.buffer_bytes(new, [0, 1, 1, 0], 2) == [3 * 1.0 + 5 * 3.0, 3 * 1.0 + 3 * 3.0]


def _units_for_segments() -> Profile:
    # unit 0 rises at I without measured transients (merged into stage 0 its rise becomes part of
    # the whole backward's transient only when another unit is measured), a unit without W (its
    # stage runs B), units without transients whose B transient is their rise, per-boundary bytes
    return Profile(stages=[_stage(act=1.0, wg=3.0, static=5.0, i=0.5),
                           _stage(act=4.0, wg=6.0, transient={"F": 2.0, "W": 1.0}, static=2.0),
                           _stage(act=2.0, wg=1.0, static=3.0, w=0.0),
                           _stage(act=3.0, wg=5.0, static=1.0),
                           _stage(act=2.0, wg=2.0, transient={"I": 4.0, "B": 0.5}, static=4.0),
                           _stage(act=5.0, wg=5.5, static=2.0)],
                   boundary_bytes=[0.5, 1.0, 1.5, 2.0, 2.5], reserve_bytes=7.0)


def test_segments_are_the_stages_profile_merge_makes():
    # every run of units [i, j) reads as the stage a partition makes of it, as torch runs it
    prof = _units_for_segments()
    segs = cost_model.Segments.of(prof)
    n = prof.n_stages
    for i in range(n):
        for j in range(i + 1, n + 1):
            counts = [c for c in (i, j - i, n - j) if c]
            stage = prof.merge(counts).executed("torch").stages[1 if i else 0]
            view = segs.stage(i, j)
            assert view.activation_bytes == pytest.approx(stage.activation_bytes)
            assert view.weight_grad_bytes == pytest.approx(stage.weight_grad_bytes)
            assert view.backward_weight == pytest.approx(stage.backward_weight)
            for k in TORCH_KINDS:
                assert view.transient(k) == pytest.approx(stage.transient(k)), (i, j, k)
            assert cost_model.microbatch_need([view]) == pytest.approx(cost_model.one_microbatch_need(
                prof.merge(counts).executed("torch"), [1 if i else 0]))
    assert list(segs.cut) == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 0.0]


@pytest.mark.parametrize("torch", ["2.14.1", "2.15"])
@pytest.mark.parametrize("placement,ranks,mb", [("loop", 2, 3), ("v", 2, 2)])
def test_partition_bound_with_receive_buffers_is_a_bound_and_starts_where_a_schedule_fits(placement, ranks, mb,
                                                                                          torch):
    # a cap at which the buffers decide which partitions fit: the bound over partitions stays
    # below the exact optimum of every partition that fits, and the partition it starts the
    # search from holds a microbatch on every rank
    import itertools
    import math
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from exhaustive import exact_optimum

    from schedc.core.partition import partition_bound
    from schedc.planning import parse_cap, problem_for
    from schedc.planning.problem import holds_one_microbatch

    gib = 2.0 ** 30
    units = _units_with_new_terms().model_copy(update={"boundary_bytes": 0.25 * gib, "assumes": {"torch": torch}})
    cap = 10.5 * gib
    n_stages = ranks * (2 if placement == "v" else 1)
    best, kept, unbuffered = math.inf, 0, 0
    for cuts in itertools.combinations(range(1, units.n_stages), n_stages - 1):
        edges = (0,) + cuts + (units.n_stages,)
        counts = [edges[k + 1] - edges[k] for k in range(n_stages)]
        problem = problem_for(units, counts, placement, ranks, mb, parse_cap(f"{cap:.0f}B"), "makespan")
        costs = problem.costs
        unbuffered += all(need - b <= cap for need, b in zip(costs.least_caps, costs.buffers))
        if holds_one_microbatch(problem):
            kept += 1
            best = min(best, exact_optimum(problem)[0])
    assert 0 < kept < unbuffered  # the buffers rule some partitions out
    bound = partition_bound(units, ranks, mb, cap, placement)
    assert 0.5 * best < bound.value <= best * (1 + 1e-9)
    start = problem_for(units, bound.counts, placement, ranks, mb, parse_cap(f"{cap:.0f}B"), "makespan")
    assert holds_one_microbatch(start)
