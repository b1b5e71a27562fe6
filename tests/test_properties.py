"""Property tests: random valid schedules survive write/read and validate (and torch accepts
them); random single-cell corruptions are rejected with a SchedcError or are still valid -
never any other exception, and whatever the validator passes, torch and the simulator run."""

from __future__ import annotations

import random

import pytest
from conftest import build_schedule
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedc.core.costs import Profile
from schedc.core.ir import Schedule, loop_placement, v_placement
from schedc.core.simulate import simulate
from schedc.core.validate import problems, validate
from schedc.errors import SchedcError
from schedc.io import csvio

try:
    import torch  # noqa: F401

    from schedc.runtime.torch_check import check_with_torch

    HAVE_TORCH = True
except ImportError:  # the property still holds without torch; only the torch cross-check is skipped
    HAVE_TORCH = False

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def valid_schedules(draw) -> Schedule:
    n_ranks = draw(st.integers(1, 4))
    per_rank = draw(st.integers(1, 2))
    kind = draw(st.sampled_from(["loop", "v", "shuffled"]))
    n_stages = n_ranks * per_rank
    if kind == "loop":
        placement = loop_placement(n_stages, n_ranks)
    elif kind == "v":
        placement = v_placement(n_stages, n_ranks)
    else:  # any explicit mapping with every rank used
        placement = list(loop_placement(n_stages, n_ranks))
        random.Random(draw(st.integers(0, 2**16))).shuffle(placement)
    n_mb = draw(st.integers(1, 4))
    pairs = [(s, m) for s in range(n_stages) for m in range(n_mb)]
    split = {p for p in pairs if draw(st.booleans())} if draw(st.booleans()) else set()
    rng = random.Random(draw(st.integers(0, 2**32)))
    prefer = draw(st.sampled_from(["random", "forward", "backward"]))
    return build_schedule(placement, n_mb, split_backward=split, prefer=prefer, rng=rng,
                          idle_prob=draw(st.sampled_from([0.0, 0.2])))


def _same(a: Schedule, b: Schedule) -> bool:
    return a.rows == b.rows and a.placement == b.placement and a.n_microbatches == b.n_microbatches


@SETTINGS
@given(valid_schedules())
def test_random_valid_schedules_round_trip_and_validate(schedule):
    assert problems(schedule) == []
    text = csvio.to_csv_text(schedule)
    back = csvio.parse_csv_text(text, "random.csv")
    assert _same(schedule, back)
    validate(back, n_stages=schedule.n_stages, n_microbatches=schedule.n_microbatches,
             n_ranks=schedule.n_ranks, placement=schedule.placement)
    assert csvio.to_csv_text(back) == text


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_schedules())
def test_torch_accepts_random_valid_schedules(schedule):
    check_with_torch(csvio.parse_csv_text(csvio.to_csv_text(schedule)))


def _tokens(schedule: Schedule) -> st.SearchStrategy[str]:
    """Plausible cell texts: real actions slightly out of range, idle, overlaps and junk."""
    n_s, n_m = schedule.n_stages + 1, schedule.n_microbatches + 1
    action = st.builds(lambda s, k, m: f"{s}{k}{m}", st.integers(0, n_s), st.sampled_from("FIWB"), st.integers(0, n_m))
    overlap = st.builds(lambda a, b: f"({a};{b})OVERLAP_F_B", action, action)
    junk = st.text(alphabet="0123456789FIWBX();, _\"\n", max_size=8)
    return st.one_of(action, st.just(""), overlap, junk, st.sampled_from(["0SEND_F0", "1F", "F1", "0F0x", "0f0"]))


@st.composite
def corrupted(draw):
    schedule = draw(valid_schedules())
    table = [["" if c is None else str(c) for c in row] for row in schedule.rows]
    cells = [(r, c) for r, row in enumerate(table) for c in range(len(row))]
    how = draw(st.sampled_from(["replace", "delete", "swap", "swap_in_row", "empty", "insert"]))
    r, c = draw(st.sampled_from(cells))
    if how == "replace":
        table[r][c] = draw(_tokens(schedule))
    elif how == "insert":
        table[r].insert(c, draw(_tokens(schedule)))
    elif how == "delete":
        del table[r][c]
    elif how == "empty":
        table[r][c] = ""
    elif how == "swap_in_row":  # reorders a rank: the way out-of-order and deadlocks arise
        c2 = draw(st.integers(0, len(table[r]) - 1))
        table[r][c], table[r][c2] = table[r][c2], table[r][c]
    else:
        r2, c2 = draw(st.sampled_from(cells))
        table[r][c], table[r2][c2] = table[r2][c2], table[r][c]
    # written the way a person or a script would: plain joins, so junk may break the CSV too
    return schedule, "\n".join(",".join(row) for row in table) + "\n"


@SETTINGS
@given(corrupted())
def test_single_cell_corruptions_are_rejected_or_valid(case):
    original, text = case
    try:
        schedule = csvio.parse_csv_text(text, "corrupt.csv")
        validate(schedule, source="corrupt.csv")
    except SchedcError as e:
        msg = str(e)
        assert msg.startswith("corrupt.csv") and "\n" not in msg
        return
    # still valid: then torch must accept it and the simulator must run it to the end
    if HAVE_TORCH:
        check_with_torch(schedule)
    res = simulate(schedule, Profile.uniform(schedule.n_stages))
    assert len(res.timings) == sum(len(schedule.actions(r)) for r in range(schedule.n_ranks))


@st.composite
def new_term_problems(draw):
    """Tiny problems whose memory rises at I and has transients (schedc.core.cost_model)."""
    from schedc.core.costs import StageCost
    from schedc.solver.problem import Problem

    n_stages, n_mb = draw(st.sampled_from([(2, 2), (2, 3), (3, 2)]))
    stages = []
    for _ in range(n_stages):
        tr = {k: draw(st.sampled_from([0.0, 0.25, 0.5])) for k in draw(st.sets(st.sampled_from("FIW")))}
        stages.append(StageCost(forward=draw(st.sampled_from([0.5, 1.0])), backward_input=1.0,
                                backward_weight=draw(st.sampled_from([0.0, 0.5, 1.0])), activation_bytes=1.0,
                                weight_grad_bytes=draw(st.sampled_from([0.5, 1.0, 1.5, 2.0])), transient_bytes=tr or None))
    prof = Profile(stages=stages, comm=draw(st.sampled_from([0.0, 0.2])))
    memory = draw(st.sampled_from(["none", "1p", "1.5p", "2.5B", "4B"]))
    return Problem.build(n_stages, n_mb, profile=prof, memory=memory)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(new_term_problems())
def test_bounds_below_optimum_below_heuristic_with_rises_and_transients(problem):
    # every lower bound stays below the exact optimum, which no construction beats, and what the
    # constructions build fits the simulator's (exact) accounting
    from exhaustive import exact_optimum

    from schedc.solver.bounds.chains import lower_bound
    from schedc.solver.engines.heuristic import heuristic_schedule

    try:
        opt, best = exact_optimum(problem, use_bounds=False)
    except SchedcError:  # the cap holds no microbatch: every engine must say so, none may build
        with pytest.raises(SchedcError):
            heuristic_schedule(problem, time_budget=0.05)
        return
    assert simulate(best, problem.profile, problem.memory).fits
    assert lower_bound(problem) <= opt + 1e-9
    sched = heuristic_schedule(problem, time_budget=0.05)
    sim = simulate(sched, problem.profile, problem.memory)
    assert sim.fits and sim.makespan >= opt - 1e-9
    # the zero-bubble greedies build on the safe view: every member they build fits
    from schedc.solver.engines.zb_greedy import greedy_family
    from schedc.solver.engines.zb_rounds import rounds_family

    for _, _, member in greedy_family(problem) + rounds_family(problem):
        assert member.fits and member.makespan >= opt - 1e-9
