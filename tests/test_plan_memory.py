"""The planner's memory questions are the cost model's (schedc.core.cost_model): which partitions
can hold a microbatch, which unit alone exceeds the cap, where the least-memory search starts and
whether the cap binds. On a per-unit profile with every term beyond the ZB accounting (a reserve,
receive buffers, transients, I rises) the planner's answers agree with ``schedc simulate``."""

from __future__ import annotations

import itertools

import pytest

from schedc.core.cost_model import least_need
from schedc.core.costs import Profile, StageCost
from schedc.core.ir import Action, Schedule
from schedc.core.simulate import simulate
from schedc.errors import SchedcError
from schedc.planning import parse_cap, plan, problem_for
from schedc.planning.least_memory import _memory_floor
from schedc.planning.problem import holds_one_microbatch
from schedc.planning.request import PlanRequest

GiB = 2**30


def units_with_terms() -> Profile:
    """Embedding, five layers whose I raises the held bytes (weight_grad 1.5 x activation) and
    whose F and W have transients, and a head; a reserve and receive buffers at every boundary."""
    units = [StageCost(forward=0.05, backward_input=0.0, backward_weight=0.05, activation_bytes=0.2 * GiB,
                       static_bytes=2 * GiB, modules=["tok_embeddings"])]
    for k in range(5):
        f = 1.0 + 0.1 * (k % 3)
        units.append(StageCost(forward=f, backward_input=1.1 * f, backward_weight=0.9 * f, activation_bytes=1 * GiB,
                               weight_grad_bytes=1.5 * GiB, transient_bytes={"F": 0.5 * GiB, "W": 0.25 * GiB},
                               static_bytes=1 * GiB, modules=[f"layers.{k}"]))
    units.append(StageCost(forward=2.0, backward_input=2.0, backward_weight=2.0, activation_bytes=2 * GiB,
                           static_bytes=2 * GiB, modules=["norm", "lm_head"]))
    return Profile(stages=units, comm=0.1, boundary_bytes=0.25 * GiB, reserve_bytes=1 * GiB, model="tiny with terms")


def one_at_a_time(problem) -> Schedule:
    """Every microbatch through all stages and back before the next one starts."""
    rows: list[list[Action]] = [[] for _ in range(problem.n_ranks)]
    for m in range(problem.n_microbatches):
        for s in range(problem.n_stages):
            rows[problem.placement[s]].append(Action(s, "F", m))
        for s in reversed(range(problem.n_stages)):
            rows[problem.placement[s]] += [Action(s, "I", m), Action(s, "W", m)]
    return Schedule(rows=rows, placement=tuple(problem.placement), n_microbatches=problem.n_microbatches)


def compositions(n: int, parts: int):
    for cuts in itertools.combinations(range(1, n), parts - 1):
        bounds = (0,) + cuts + (n,)
        yield [bounds[k + 1] - bounds[k] for k in range(parts)]


def v_problems(memory: str):
    units = units_with_terms()
    return [problem_for(units, c, "v", 2, 4, parse_cap(memory), "makespan") for c in compositions(units.n_stages, 4)]


def test_the_least_caps_are_the_simulated_peaks_of_one_microbatch_at_a_time():
    for problem in v_problems("none"):
        sim = simulate(one_at_a_time(problem), problem.profile, problem.memory)
        assert sim.peak_memory == pytest.approx(problem.costs.least_caps, rel=1e-12)
        # the terms matter here: static bytes and one microbatch's activations (the planner's
        # old rule) leave out 2.5-3.5 GiB of buffers and the 1 GiB reserve on every rank, and more
        plain = [sum(problem.profile.stages[s].static_bytes + problem.profile.stages[s].activation_bytes
                     for s in problem.stages_of(r)) for r in range(problem.n_ranks)]
        assert all(need - p > 3.4 * GiB for need, p in zip(problem.costs.least_caps, plain))


@pytest.mark.parametrize("memory", ["12.5GiB", "13GiB", "13.5GiB", "15GiB"])
def test_a_partition_is_kept_exactly_when_simulate_finds_a_schedule_that_fits(memory):
    kept = 0
    for problem in v_problems(memory):
        sim = simulate(one_at_a_time(problem), problem.profile, problem.memory)
        assert holds_one_microbatch(problem) == sim.fits, problem.placement
        kept += sim.fits
    assert kept == {"12.5GiB": 0, "13GiB": 2, "13.5GiB": 6, "15GiB": 10}[memory]


def test_no_schedule_fits_below_a_partitions_least_cap():
    from schedc.solver.engines.warm import build_baselines

    units = units_with_terms()
    problem = problem_for(units, [2, 3, 1, 1], "v", 2, 4, parse_cap("none"), "makespan")
    floor, step = _memory_floor(problem)
    # rank 0: the embedding and a layer, and the head with the inputs torch 2.15 keeps for it
    assert floor == pytest.approx(12.7 * GiB) and step == 2 * GiB
    peaks = [max(sim.peak_memory) for _, _, sim in build_baselines(problem)]
    assert peaks and min(peaks) >= floor * (1 - 1e-12)


def test_a_unit_whose_transients_or_reserve_exceed_the_cap_is_refused_with_a_cap_that_works():
    units = units_with_terms()
    # a layer alone: static 1 + reserve 1 + activation 1 + its F's transient 0.5 = 3.5 GiB; the
    # head alone (static 2, activation 2, reserve 1) needs 5
    assert least_need(units.executed("torch"), [6]) == 5 * GiB
    args = dict(profile=units, ranks=2, microbatches=4, placement="v", objective="makespan", time_limit=5,
                source="u.json")
    with pytest.raises(SchedcError, match=r"unit 6 \(norm, lm_head\) alone needs 5.00GiB \(static 2.00GiB \+ reserve "
                                          r"1.00GiB \+ one microbatch 2.00GiB\).* --memory 5.00GiB"):
        PlanRequest.build(memory="4.5GiB", **args)
    assert PlanRequest.build(memory="5GiB", **args).cap == 5 * GiB


def test_the_plan_fits_where_simulate_says_and_refuses_with_a_cap_that_fits():
    units = units_with_terms()
    res = plan(profile=units, ranks=2, microbatches=4, memory="14GiB", placement="v", time_limit=5)
    again = simulate(res.compiled.schedule, res.compiled.problem.profile, res.compiled.problem.memory)
    assert again.fits and max(again.peak_memory) <= 14 * GiB
    assert max(res.compiled.problem.costs.least_caps) <= 14 * GiB
    # under 12.5 GiB no partition holds a microbatch with its buffers: a one-line error naming the
    # least cap over all partitions (12.7 GiB: [2, 3, 1, 1]), under which the plan then fits
    with pytest.raises(SchedcError, match=r"^memory=12.50GiB: no partition .* memory=(\S+) \(v\); .* would fit: ") as e:
        plan(profile=units, ranks=2, microbatches=4, memory="12.5GiB", placement="v", time_limit=5)
    cap = str(e.value).split("memory=")[-1].split(" ")[0]
    assert parse_cap(cap).value == pytest.approx(min(max(p.costs.least_caps) for p in v_problems("none")))
    assert parse_cap(cap).value == pytest.approx(12.7 * GiB, rel=1e-3)
    res = plan(profile=units, ranks=2, microbatches=4, memory=cap, placement="v", time_limit=5)
    assert simulate(res.compiled.schedule, res.compiled.problem.profile, res.compiled.problem.memory).fits


def test_a_cap_that_only_some_partitions_fit_with_their_buffers_plans_one_of_them():
    # at 13 GiB two partitions fit once receive buffers are counted; the search starts from one
    # (the bound over partitions counts them) and plans a split that fits
    units = units_with_terms()
    fitting = [c for c, p in zip(compositions(units.n_stages, 4), v_problems("13GiB")) if holds_one_microbatch(p)]
    assert len(fitting) == 2
    res = plan(profile=units, ranks=2, microbatches=4, memory="13GiB", placement="v", time_limit=5)
    assert list(res.counts) in fitting
    again = simulate(res.compiled.schedule, res.compiled.problem.profile, res.compiled.problem.memory)
    assert again.fits and max(again.peak_memory) <= 13 * GiB


def small_units(torch, boundary, terms: bool) -> Profile:
    """Seven units; with `terms` rises at I, transients, a unit without W and a reserve; with
    `boundary` bytes per boundary (unequal) and the torch version whose buffers count."""
    units = []
    for k in range(7):
        act, f = (1.0 + (k * 7) % 5) * GiB, 1.0 + 0.3 * (k % 4)
        units.append(StageCost(
            forward=f, backward_input=0.0 if k == 0 else f, backward_weight=0.0 if terms and k == 3 else 0.8 * f,
            activation_bytes=act, weight_grad_bytes=1.4 * act if terms and k % 2 else 0.7 * act,
            transient_bytes={"F": 0.3 * act, "I": 0.2 * act} if terms and k in (1, 4) else None,
            static_bytes=(1.0 + (k * 3) % 4) * GiB))
    return Profile(stages=units, comm=0.01, boundary_bytes=[(0.1 + 0.05 * k) * GiB for k in range(6)] if boundary
                   else None, reserve_bytes=0.5 * GiB if terms else None,
                   assumes={"torch": torch} if torch else None)


@pytest.mark.parametrize("placement,ranks", [("loop", 2), ("loop", 3), ("v", 2), ("v", 3)])
@pytest.mark.parametrize("torch,boundary", [("2.14.1", True), ("2.15", True), (None, False)])
@pytest.mark.parametrize("terms", [True, False])
def test_the_least_cap_over_partitions_is_the_cost_models_over_all_partitions(placement, ranks, torch, boundary,
                                                                              terms):
    # brute force: every partition's least caps (CostModel.least_caps, which simulate reaches by
    # running the microbatches one at a time); the dynamic program finds their least maximum
    from schedc.core.partition import Units, balanced, min_cap

    units, mb = small_units(torch, boundary, terms), 3
    stages = ranks * (2 if placement == "v" else 1)
    need = {tuple(c): max(problem_for(units, c, placement, ranks, mb, parse_cap("none"), "makespan").costs.least_caps)
            for c in compositions(units.n_stages, stages)}
    value, counts = min_cap(Units.of(units, mb), placement, ranks)
    assert value == pytest.approx(min(need.values()), rel=1e-12)
    assert need[tuple(counts)] == pytest.approx(value, rel=1e-12)
    # the compute-balanced split under a cap between the least and the largest need fits it
    cap = sorted(need.values())[len(need) // 2]
    split = balanced(Units.of(units, mb), placement, ranks, cap)[1]
    assert need[tuple(split)] <= cap * (1 + 1e-9)


def test_memory_binds_where_a_shorter_uncapped_schedule_exceeds_the_cap_with_every_term_counted():
    units = units_with_terms()
    tight = plan(profile=units, ranks=2, microbatches=4, memory="13GiB", placement="v", time_limit=2,
                 budget="work")
    loose = plan(profile=units, ranks=2, microbatches=4, memory="40GiB", placement="v", time_limit=2,
                 budget="work")
    assert tight.limiter.kind == "memory" and tight.limiter.uncapped_step < tight.value
    assert tight.limiter.uncapped_peak > parse_cap("13GiB").value
    assert loose.limiter.kind != "memory"
