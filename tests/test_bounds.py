"""Lower bounds are certificates: never above a known optimum. The exhaustive search that provides
those optima is itself checked against brute force over all per-rank orders, and runs without the
bounds under test where it checks them (use_bounds=False)."""

from __future__ import annotations

import itertools
import math

import pytest
from exhaustive import exact_optimum  # noqa: E402  (tests/exhaustive.py: the oracle these tests serve)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from schedc.core.costs import MemoryLimit, Profile, StageCost
from schedc.core.ir import Action, Schedule
from schedc.core.simulate import simulate
from schedc.errors import SchedcError
from schedc.solver import graph
from schedc.solver.bounds.chains import FIRST_RANK_TERMS, lower_bound, lower_bound_details, rank_span_bounds
from schedc.solver.bounds.rank import rank_relaxation_bound
from schedc.solver.engines import mip as model
from schedc.solver.engines.heuristic import check_memory_feasible, heuristic_schedule
from schedc.solver.engines.warm import feasible_baselines, matching_baselines
from schedc.solver.problem import Problem

EPS = 1e-9


COSTS = [
    (1.0, 1.0, 1.0, 0.0),  # identical stages, the paper's unit case
    (1.0, 2.0, 0.5, 0.3),  # slow I, fast W, slow links
    (2.0, 1.0, 0.0, 0.5),  # no weight gradient at all
]




TINY = [(2, 2, "loop", None), (2, 3, "loop", None), (3, 2, "loop", None), (4, 2, "v", 2),
        (3, 2, (0, 1, 0), None), (3, 2, (0, 0, 1), None), (4, 1, "loop", 2)]


@pytest.mark.parametrize("n_stages,n_mb,placement,n_ranks", TINY)
@pytest.mark.parametrize("memory", ["0.5p", "1p", "2p", "none"])
@pytest.mark.parametrize("objective", ["makespan", "span"])
def test_bound_never_above_exact_optimum(n_stages, n_mb, placement, n_ranks, memory, objective):
    for costs in COSTS + [None]:
        prof = Profile.edge_heavy(n_stages) if costs is None else Profile.uniform(n_stages, *costs[:3], comm=costs[3])
        p = Problem.build(n_stages, n_mb, n_ranks=n_ranks, placement=placement, profile=prof,
                          memory=memory, objective=objective)
        opt, sched = exact_optimum(p, use_bounds=False)
        sim = simulate(sched, prof, p.memory)
        assert sim.fits and abs(sim.objective(objective) - opt) < 1e-6
        details = lower_bound_details(p)
        assert details["lower_bound"] <= opt + EPS, (details, opt)
        relaxed = rank_relaxation_bound(p)
        assert relaxed is None if objective == "span" else relaxed <= opt + EPS, (relaxed, opt)
        # every rank's own span bound holds for the optimal schedule too
        for r, b in enumerate(rank_span_bounds(p)):
            assert b <= sim.span_per_rank[r] + EPS
        h = simulate(heuristic_schedule(p, time_budget=0.05), prof, p.memory).objective(objective)
        assert h >= opt - EPS


def _linear_extensions(actions, before):
    """All orders of `actions` where each (a, b) in `before` with both present has a first."""
    if not actions:
        yield []
        return
    for a in actions:
        if any(x in actions and x != a for x, y in before if y == a):
            continue
        rest = [x for x in actions if x != a]
        for tail in _linear_extensions(rest, before):
            yield [a] + tail


def _brute_force(problem: Problem) -> float:
    """Minimum of simulate() over every tuple of per-rank orders (I/W split), no pruning and
    no symmetry breaking: an independent check of exact_optimum."""
    M = problem.n_microbatches
    per_rank = []
    for r in range(problem.n_ranks):
        acts = [Action(s, k, m) for s in problem.stages_of(r) for m in range(M) for k in "FIW"]
        before = [(Action(s, "F", m), Action(s, "I", m)) for s in problem.stages_of(r) for m in range(M)]
        before += [(Action(s, "I", m), Action(s, "W", m)) for s in problem.stages_of(r) for m in range(M)]
        per_rank.append(list(_linear_extensions(acts, before)))
    best = math.inf
    for rows in itertools.product(*per_rank):
        sched = Schedule(rows=[list(r) for r in rows], placement=problem.placement, n_microbatches=M)
        try:
            sim = simulate(sched, problem.profile, problem.memory)
        except SchedcError:
            continue  # deadlock
        if sim.fits:
            best = min(best, sim.objective(problem.objective))
    return best


BRUTE = [(2, 2, m, o) for m in ("0.5p", "1p", "none") for o in ("makespan", "span")]
BRUTE += [(3, 2, "1p", "makespan"), (3, 2, "none", "span")]  # 8000 order tuples each, ~2 s


@pytest.mark.parametrize("n_stages,n_mb,memory,objective", BRUTE)
def test_exhaustive_search_matches_brute_force(n_stages, n_mb, memory, objective):
    prof = Profile.uniform(n_stages, 1.0, 2.0, 0.5, comm=0.3)
    p = Problem.build(n_stages, n_mb, profile=prof, memory=memory, objective=objective)
    brute = _brute_force(p)
    assert exact_optimum(p, use_heuristic=False)[0] == pytest.approx(brute)
    assert exact_optimum(p, use_bounds=False)[0] == pytest.approx(brute)


def test_merging_backward_never_helps():
    for objective in ("makespan", "span"):
        p = Problem.build(2, 3, profile=Profile.uniform(2, 1.0, 2.0, 0.5, comm=0.3), memory="1p", objective=objective)
        assert exact_optimum(p, merge_backward=True)[0] == pytest.approx(exact_optimum(p)[0])


def test_exhaustive_refuses_large_instances():
    p = Problem.build(4, 4, profile=Profile.edge_heavy(4), memory="none", objective="span")
    with pytest.raises(SchedcError, match="exceeded"):
        exact_optimum(p, max_nodes=50, use_heuristic=False)


LARGER = [(4, 16, "loop", None), (8, 24, "loop", None), (8, 16, "v", 4), (8, 16, "loop", 4)]


@pytest.mark.parametrize("n_stages,n_mb,placement,n_ranks", LARGER)
@pytest.mark.parametrize("objective", ["makespan", "span"])
def test_bound_never_above_feasible_baselines(n_stages, n_mb, placement, n_ranks, objective):
    for prof in (Profile.uniform(n_stages), Profile.edge_heavy(n_stages), Profile.uniform(n_stages, 1.0, 2.0, 0.0, comm=0.5)):
        for memory in ("0.5p", "1p", "1.5p", "2p", "none"):
            p = Problem.build(n_stages, n_mb, n_ranks=n_ranks, placement=placement, profile=prof,
                              memory=memory, objective=objective)
            lb = lower_bound(p)
            for name, _, sim in feasible_baselines(p):
                assert lb <= sim.objective(objective) + EPS, (name, memory, lb, sim.objective(objective))


def test_identical_stages_known_values():
    # makespan with identical stages: the last rank cannot start before (p-1)F, then M(F+I+W)
    p = Problem.build(4, 8, profile=Profile.uniform(4), memory="none")
    assert lower_bound(p) == pytest.approx(3 + 8 * 3)
    # span at 1p: the first rank waits for its first I with at most p forwards done: (p-1) I idle
    p = Problem.build(4, 8, profile=Profile.uniform(4), memory="1p", objective="span")
    assert lower_bound(p) == pytest.approx(8 * 3 + 3)
    assert lower_bound_details(p)["span_memory_warmup"] == pytest.approx(27)


def test_memory_cool_down_proves_slow_link_optimum():
    # 8 identical stages, comm 0.5F, 24 mb, 1.25p: rank 0 idles >= 22 - 10 before its first
    # backward and >= 23 - 20 after its last forward; zb-greedy's schedule meets 72 + 12 + 3
    p = Problem.build(8, 24, profile=Profile.uniform(8, comm=0.5), memory="1.25p")
    assert lower_bound_details(p)["memory_warmup"] == pytest.approx(87)
    assert lower_bound(p) == pytest.approx(87)
    greedy = next(sim for name, _, sim in matching_baselines(p) if name == "zb-greedy")
    assert greedy.fits and greedy.makespan == pytest.approx(87)


@pytest.mark.parametrize("n_stages,n_mb,costs,memory", [
    (3, 4, (1.0, 1.0, 1.0, 0.5), "1p"), (2, 5, (1.0, 1.0, 2.0, 1.0), "1p"), (3, 3, (1.0, 2.0, 0.5, 2.0), "0.75p"),
    (3, 5, (1.0, 1.0, 1.0, 0.5), "0.75p"), (2, 5, (1.0, 2.0, 0.5, 0.5), "1.5p"),
])
def test_memory_cool_down_span_term_below_exact_optimum(n_stages, n_mb, costs, memory):
    # instances where the warm-up + cool-down span term is the strongest one: still a valid bound
    p = Problem.build(n_stages, n_mb, profile=Profile.uniform(n_stages, *costs[:3], comm=costs[3]), memory=memory,
                      objective="span")
    d = lower_bound_details(p)
    others = max(v for k, v in d.items() if k not in ("span_memory_warmup", "lower_bound") + FIRST_RANK_TERMS)
    assert d["span_memory_warmup"] > others + EPS
    assert d["span_memory_warmup"] <= exact_optimum(p, use_bounds=False)[0] + EPS


@pytest.mark.parametrize("n_stages,n_mb,costs,memory,objective", [
    (2, 5, (1.0, 2.0, 0.5, 0.5), "1.5p", "span"), (2, 4, (1.0, 2.0, 0.5, 0.5), "none", "span"),
    (3, 3, (1.5, 1.0, 1.0, 0.2), "1p", "span"), (3, 3, (1.5, 1.0, 1.0, 0.2), "none", "span"),
    (2, 4, (1.0, 2.0, 0.5, 0.5), "1.5p", "makespan"),
])
def test_first_rank_terms_meet_exact_optimum(n_stages, n_mb, costs, memory, objective):
    # instances where bounding rank 0's span through another rank is the strongest term: valid,
    # and here exactly the optimum
    p = Problem.build(n_stages, n_mb, profile=Profile.uniform(n_stages, *costs[:3], comm=costs[3]), memory=memory,
                      objective=objective)
    d = lower_bound_details(p)
    others = max(v for k, v in d.items() if k not in ("lower_bound",) + FIRST_RANK_TERMS)
    assert max(d[k] for k in FIRST_RANK_TERMS) > others + EPS
    assert d["lower_bound"] == pytest.approx(exact_optimum(p, use_bounds=False)[0])
    assert rank_span_bounds(p)[0] == pytest.approx(d["lower_bound"])


def test_first_rank_bound_proves_edge_heavy_span_optimum():
    # 8 stages, first and last 1.25x heavier, 24 mb, 1.25p: the last rank holds at most 10
    # owed W's, so its last I ends >= 7.95 + 63 + 14 x 1.125 after rank 0 starts, then 7.3 down
    # to stage 0 and its 2.5 s W: 96.5, which zb-greedy's span reaches (the warm-up term: 95.375)
    p = Problem.build(8, 24, profile=Profile.edge_heavy(8, edge=1.25), memory="1.25p", objective="span")
    d = lower_bound_details(p)
    assert d["span_memory_warmup"] == pytest.approx(95.375)
    assert d["first_rank_last_backward"] == pytest.approx(96.5)
    greedy = next(sim for name, _, sim in matching_baselines(p) if name == "zb-greedy")
    assert greedy.fits and greedy.span == pytest.approx(96.5)


@pytest.mark.parametrize("n_mb,memory,name,value", [(8, "0.5p", "v-min", 59), (8, "0.75p", "v-half", 53),
                                                      (16, "0.5p", "v-min", 107), (16, "0.75p", "v-half", 101)])
def test_first_rank_bound_proves_controllable_memory_v_schedules(n_mb, memory, name, value):
    # V, 4 ranks x 2 stages, F = I = W (issue 11). Rank 3 (stages 3, 4), 8 mb at 0.5p: its
    # first I starts >= 11 s after rank 0's start with at most 4 F-seconds before it; its other
    # 12 F-seconds and all but 8 s of its 32 s of I + W precede the end of its last F, whose
    # chain to stage 0's W takes 12 s more: 11 + 12 + 24 + 12 = 59 (0.75p: 11 + 10 + 20 + 12)
    # (the paper's runtime, for which the authors built V-Half's order)
    p = Problem.build(8, n_mb, n_ranks=4, placement="v", memory=memory, objective="span", runtime="ideal")
    hand_made = next(sim for n, _, sim in matching_baselines(p) if n == name)
    assert hand_made.fits and hand_made.span == pytest.approx(value)
    assert lower_bound_details(p)["first_rank_last_forward"] == pytest.approx(value)
    assert lower_bound(p) == pytest.approx(value)


def test_details_name_every_term():
    p = Problem.build(4, 8, profile=Profile.edge_heavy(4), memory="1p")
    d = lower_bound_details(p)
    assert d["lower_bound"] == max(v for k, v in d.items() if k != "lower_bound")
    assert {"work_after_head", "one_microbatch_chain", "memory_warmup", "span_work", *FIRST_RANK_TERMS} <= set(d)
    d_span = lower_bound_details(Problem.build(4, 8, profile=Profile.edge_heavy(4), memory="1p", objective="span"))
    assert "work_after_head" not in d_span  # head terms are not valid when ranks may start late


@st.composite
def tiny_problems(draw):
    n_stages = draw(st.integers(1, 3))
    n_mb = draw(st.integers(1, 3))
    objective = draw(st.sampled_from(["makespan", "span"]))
    if objective == "span" and n_stages * n_mb > 6:
        n_mb = 6 // n_stages  # span instances of 3 x 3 take seconds; keep the property test fast
    stages = []
    for _ in range(n_stages):
        act = draw(st.sampled_from([1.0, 2.0]))
        stages.append(StageCost(
            forward=draw(st.sampled_from([0.5, 1.0, 1.5])),
            backward_input=draw(st.sampled_from([0.5, 1.0, 2.0])),
            backward_weight=draw(st.sampled_from([0.0, 0.5, 1.0])),
            activation_bytes=act,
            weight_grad_bytes=draw(st.sampled_from([0.0, 0.5])) * act,
        ))
    comm = draw(st.sampled_from([0.0, 0.2, [0.1, 0.4][: max(0, n_stages - 1)]]))
    if isinstance(comm, list) and len(comm) != n_stages - 1:
        comm = 0.1
    memory = draw(st.sampled_from(["1p", "2p", "none", "bytes"]))
    if memory == "bytes":
        memory = MemoryLimit(kind="bytes", value=max(s.activation_bytes for s in stages) * draw(st.integers(1, 3)))
    return Problem.build(n_stages, n_mb, profile=Profile(stages=stages, comm=comm), memory=memory, objective=objective)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_problems())
def test_property_bound_exact_heuristic(p):
    opt, sched = exact_optimum(p, max_nodes=400_000, use_bounds=False)
    sim = simulate(sched, p.profile, p.memory)
    assert sim.fits
    assert lower_bound(p) <= opt + EPS
    h = heuristic_schedule(p, time_budget=0.05)
    hsim = simulate(h, p.profile, p.memory)
    assert hsim.fits
    assert hsim.objective(p.objective) >= opt - EPS


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_problems())
def test_property_late_start_model_never_above_exhaustive_span_optimum(p):
    # the span certificate the compiler prints (the late-start model's dual bound) on random
    # costs, links, memory and weightless stages, against the optimum over all orders
    assume(p.n_stages * p.n_microbatches <= 6)  # span searches of 3 x 3 take seconds
    p = Problem(given_profile=p.given_profile, placement=p.placement, n_microbatches=p.n_microbatches,
                memory=p.memory, objective="span", runtime=p.runtime)
    opt, sched = exact_optimum(p, max_nodes=400_000, use_bounds=False)
    inst = graph.graph_of(p)
    inc = graph.canonical_orders(inst, graph.orders_from_schedule(inst, sched))
    val = simulate(graph.schedule_from_orders(inst, inc), p.profile).span
    out = model.solve_model(inst, inc, max(val, opt), "span", 10.0, late_start=True, lower_bound=lower_bound(p))
    assert out.dual_bound is not None and out.dual_bound <= opt + 1e-6


@pytest.mark.parametrize("placement,n_ranks,costs", [("v", 2, (1.0, 2.0, 0.5, 0.3)), ((0, 1, 0), None, (2.0, 1.0, 0.0, 0.5))])
def test_one_rank_relaxation_proves_optima_the_closed_form_terms_miss(placement, n_ranks, costs):
    # a rank whose stages wait on very different chains (V, or a rank holding stages 0 and 2):
    # the closed-form terms stay below the optimum, the one-rank relaxation reaches it
    n_stages = 4 if placement == "v" else 3
    p = Problem.build(n_stages, 2, n_ranks=n_ranks, placement=placement,
                      profile=Profile.uniform(n_stages, *costs[:3], comm=costs[3]), memory="1p")
    opt, _ = exact_optimum(p, use_bounds=False)
    assert lower_bound_details(p)["lower_bound"] < opt - 0.5
    assert rank_relaxation_bound(p) == pytest.approx(opt)


@pytest.mark.parametrize("n_stages,n_mb,placement,n_ranks,costs", [
    (4, 2, "v", 2, (1.0, 1.0, 1.0, 0.0)), (3, 3, (0, 1, 0), None, (1.0, 2.0, 0.5, 0.3))])
def test_one_rank_relaxation_sees_the_room_a_ranks_stages_share(n_stages, n_mb, placement, n_ranks, costs,
                                                                monkeypatch):
    # half of 1F1B's memory with two stages on a rank: a microbatch on the later stage also holds
    # the earlier stage's activation, so that rank's stages wait on each other's weight gradients
    # (graph.memory_arcs); with those orders the relaxation reaches the optimum
    p = Problem.build(n_stages, n_mb, n_ranks=n_ranks, placement=placement, memory="0.5p",
                      profile=Profile.uniform(n_stages, *costs[:3], comm=costs[3]))
    opt, _ = exact_optimum(p, use_bounds=False)
    assert rank_relaxation_bound(p) == pytest.approx(opt)
    from schedc.solver.bounds import rank as rank_relaxation

    monkeypatch.setattr(rank_relaxation, "memory_arcs", lambda g: [a for a in graph.memory_arcs(g) if a[1] == a[2]])
    assert rank_relaxation_bound(p) < opt - 1  # each stage's own memory orders alone fall short


def test_one_rank_relaxation_counts_the_waits_a_tight_cap_forces():
    # 3 identical stages, 3 microbatches, half of 1F1B's memory: microbatches wait on each other's
    # backward; the relaxation sees those orders, the closed-form terms do not
    p = Problem.build(3, 3, profile=Profile.uniform(3, 1.0, 1.0, 1.0), memory="0.5p")
    opt, _ = exact_optimum(p, use_bounds=False)
    assert lower_bound_details(p)["lower_bound"] < opt - 1
    assert rank_relaxation_bound(p) == pytest.approx(opt)


def _graph_heads_and_tails(problem: Problem):
    """Longest paths over the action graph itself: the reference the array recurrences must equal."""
    g = graph.graph_of(problem).lower()
    preds, topo = g.preds, g.topo
    head, tail = [0.0] * g.n, [0.0] * g.n
    succs = [[] for _ in range(g.n)]
    for b in topo:
        for a, lag in preds[b]:
            head[b] = max(head[b], head[a] + g.dur[a] + lag)
            succs[a].append((b, lag))
    for a in reversed(topo):
        for b, lag in succs[a]:
            tail[a] = max(tail[a], lag + g.dur[b] + tail[b])
    return g, head, tail


@pytest.mark.parametrize("placement,n_stages,n_ranks", [("loop", 4, 4), ("v", 6, 3), ((0, 1, 0, 1), 4, 2)])
@pytest.mark.parametrize("memory", ["0.5p", "0.75p", "1p", "none"])
def test_one_rank_relaxation_heads_and_tails_are_the_graphs_longest_paths(placement, n_stages, n_ranks, memory):
    from schedc.solver.bounds.rank import heads_and_tails

    # uneven stages, a stage without weights (a B action), slow links: every rule of the graph
    stages = [StageCost(forward=1.0 + 0.3 * s, backward_input=1.2 + 0.1 * s, backward_weight=0.0 if s == 1 else 0.7,
                        activation_bytes=2.0 + s, weight_grad_bytes=0.0 if s == 1 else 1.0 + 0.5 * s)
              for s in range(n_stages)]
    p = Problem.build(n_stages, 7, n_ranks=n_ranks, placement=placement,
                      profile=Profile(stages=stages, comm=0.3), memory=memory)
    ht = heads_and_tails(p)
    if ht is None:  # a rank cannot hold one microbatch of its stages: no schedule exists
        with pytest.raises(SchedcError, match="to hold one microbatch"):
            check_memory_feasible(p)
        return
    inst, head, tail = _graph_heads_and_tails(p)
    arrays = {"F": (ht.head_f, ht.tail_f), "I": (ht.head_b, ht.tail_b), "B": (ht.head_b, ht.tail_b),
              "W": (ht.head_w, ht.tail_w)}
    for i, a in enumerate(inst.actions):
        h, t = arrays[a.kind]
        assert h[a.stage, a.microbatch] == pytest.approx(head[i]) and t[a.stage, a.microbatch] == pytest.approx(tail[i]), a


# memory that rises at I (torch's split backward keeps the graph and W's output gradients) and
# transient bytes live only while an action runs: the bounds fall back to the relaxed accounting
# (Graph.relaxed) and must stay below the exact optimum, which the compiled schedule reaches
NEW_TERMS = [
    (3, 3, "loop", None, "3B", 1.5, None),
    (3, 3, "loop", None, "2.5B", 1.5, None),
    (3, 3, "loop", None, "3B", 1.0, {"F": 0.5, "W": 0.7}),
    (4, 2, "v", 2, "4B", 1.6, {"I": 0.3}),
    (3, 3, "loop", None, "1p", 1.5, {"B": 0.2}),
    (2, 3, "loop", None, "2.2B", 2.0, {"F": 0.2}),
]


@pytest.mark.parametrize("n,m,placement,ranks,memory,wg,transient", NEW_TERMS)
def test_bounds_hold_with_rises_at_i_and_transients(n, m, placement, ranks, memory, wg, transient):
    from schedc.solver.compile import compile_schedule

    stages = [StageCost(forward=1.0, backward_input=1.0, backward_weight=1.0, activation_bytes=1.0,
                        weight_grad_bytes=wg, transient_bytes=transient) for _ in range(n)]
    prof = Profile(stages=stages, comm=0.1)
    p = Problem.build(n, m, n_ranks=ranks, placement=placement, profile=prof, memory=memory)
    opt, best = exact_optimum(p, use_bounds=False)
    assert simulate(best, p.profile, p.memory).fits
    assert lower_bound(p) <= opt + EPS
    rr = rank_relaxation_bound(p)
    assert rr is None or rr <= opt + EPS
    res = compile_schedule(n, m, n_ranks=ranks, placement=placement, profile=prof, memory=memory, time_limit=10)
    sim = simulate(res.schedule, p.profile, p.memory)
    assert sim.fits and sim.makespan >= opt - EPS
    assert res.lower_bound <= opt + EPS
    # the same problem without the new terms needs less memory: its optimum is no worse
    plain = Problem.build(n, m, n_ranks=ranks, placement=placement, memory=memory,
                          profile=Profile(stages=[s.model_copy(update={"weight_grad_bytes": 1.0, "transient_bytes": None})
                                                  for s in stages], comm=0.1))
    assert exact_optimum(plain)[0] <= opt + EPS


@pytest.mark.parametrize("memory,wg,transient", [("4B", 1.6, {"I": 0.3}), ("3.5B", 2.0, {"F": 0.4, "W": 0.2})])
def test_cpsat_relaxations_hold_with_rises_at_i_and_transients(memory, wg, transient):
    from schedc.solver.bounds.anchored import anchored_bound
    from schedc.solver.bounds.blocks import block_bound
    from schedc.solver.bounds.pair import PairRelaxation
    from schedc.solver.deadline import Deadline

    stages = [StageCost(forward=1.0, backward_input=1.0, backward_weight=1.0, activation_bytes=1.0,
                        weight_grad_bytes=wg, transient_bytes=transient) for _ in range(4)]
    p = Problem.build(4, 3, n_ranks=2, placement="v", profile=Profile(stages=stages), memory=memory)
    opt, _ = exact_optimum(p, use_bounds=False)
    assert anchored_bound(p, Deadline.after(10)) <= opt + EPS
    assert block_bound(p, Deadline.after(10)) <= opt + EPS
    pair = PairRelaxation(p, opt)
    while not pair.settled:
        pair.next(Deadline.after(10))
    assert pair.best <= opt + EPS
