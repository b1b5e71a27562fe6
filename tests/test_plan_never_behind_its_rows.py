"""A plan is never slower than a schedule it evaluated and prints (issue 52, item 1).

A user reads the comparison rows as what else they could run; a row shorter than the plan means
the flags printed below it launch the slower one. The plan must become that row instead, and
search the interleaved loop (two stages per rank: torchtitan's Interleaved1F1B) it compares with.
"""

from __future__ import annotations

import math

import pytest

from schedc.core.costs import Profile, StageCost
from schedc.core.partition import Units, partition_bound
from schedc.planning import plan, problem_for
from schedc.planning.search import interleaved_bound

GiB = 2**30


def uniform_units(n_layers: int, head: float = 1.5) -> Profile:
    """Embedding, equal layers and a heavier head: the interleaved loop's short fill wins here."""
    units = [StageCost(forward=0.02, backward_input=0.0, backward_weight=0.02, activation_bytes=0.1 * GiB,
                       static_bytes=1 * GiB, modules=["tok_embeddings"])]
    units += [StageCost(forward=1.0, backward_input=1.1, backward_weight=0.9, activation_bytes=0.5 * GiB,
                        static_bytes=1 * GiB, modules=[f"layers.{k}"]) for k in range(n_layers)]
    units.append(StageCost(forward=head, backward_input=head, backward_weight=head, activation_bytes=1 * GiB,
                           static_bytes=1 * GiB, modules=["norm", "lm_head"]))
    return Profile(stages=units, comm=0.05, model="uniform per-unit")


@pytest.mark.parametrize("time_limit", [1.0, 4.0])
def test_the_plan_is_never_slower_than_a_row_it_prints(time_limit):
    # at 1 s the search barely starts: a comparison row may beat it, and the plan becomes that row
    res = plan(profile=uniform_units(10), ranks=3, microbatches=6, memory="none", time_limit=time_limit)
    rows = [c for c in res.comparisons if c.value is not None]
    assert rows
    assert all(res.value <= c.value * (1 + 1e-9) for c in rows), [(c.split, c.placement, c.value) for c in rows]
    assert res.bound <= res.value * (1 + 1e-9)


def test_a_faster_interleaved_row_becomes_the_plan_with_its_flags():
    # an answer slower than every row: the fastest row that fits (torchtitan's Interleaved1F1B on
    # its default split, the V left out) becomes the plan, partition, placement and schedule
    from types import SimpleNamespace

    from schedc.planning import parse_cap
    from schedc.planning.comparisons import torchtitan_rows
    from schedc.planning.compiles import adopt_faster_row

    units, limit = uniform_units(12), parse_cap("none")
    rows = [c for c in torchtitan_rows(units, 3, 6, limit, "makespan") if c.placement != "v"]
    by_class = {c.schedule: c for c in rows}
    assert by_class["Interleaved1F1B"].value < by_class["1F1B"].value  # what makes this case
    fastest = min((c for c in rows if c.value is not None), key=lambda c: c.value)
    slow = SimpleNamespace(value=10 * fastest.value)
    res, pl, counts = adopt_faster_row(units, slow, "loop", [4, 5, 5], rows, 3, 6, limit, "makespan", 0)
    assert (pl, counts) == ("interleaved", fastest.counts)
    assert res.value <= fastest.value * (1 + 1e-9)
    assert res.problem.n_stages == len(fastest.counts) and res.problem.n_ranks == 3


def test_auto_searches_the_interleaved_loop_and_bounds_it():
    units = uniform_units(12)
    res = plan(profile=units, ranks=3, microbatches=6, memory="none", time_limit=4.0)
    assert "interleaved" in res.bounds
    assert res.bound <= min(res.bounds.values()) * (1 + 1e-9)
    assert any(c.placement == "interleaved" and c.split == "even" for c in res.comparisons)


def test_the_interleaved_bound_holds_for_every_interleaved_partition():
    # every composition of 6 units into 4 stages on 2 ranks, each compiled to its own bound or better:
    # none is below the bound over interleaved partitions
    import itertools

    from schedc.solver.compile import compile_problem

    units = uniform_units(4, head=1.2)
    u = Units.of(units, 3)
    bound = interleaved_bound(units, u, 2, 3, math.inf, "makespan")
    assert bound > 0 and bound >= partition_bound(units, 4, 3, math.inf, "loop").value * (1 - 1e-9)
    for cuts in itertools.combinations(range(1, units.n_stages), 3):
        edges = (0,) + cuts + (units.n_stages,)
        counts = [edges[k + 1] - edges[k] for k in range(4)]
        problem = problem_for(units, counts, "interleaved", 2, 3, parse("none"), "makespan")
        res = compile_problem(problem, time_limit=2, seed=0)
        assert res.lower_bound >= 0 and res.value >= bound * (1 - 1e-9), (counts, res.value, bound)


def parse(text):
    from schedc.planning import parse_cap

    return parse_cap(text)


def test_the_busiest_rank_bound_holds_for_every_dealing_of_the_units_to_the_ranks():
    # brute force: every assignment of 7 units to 3 ranks (not only contiguous stages)
    import itertools

    import numpy as np

    from schedc.planning.search import busiest_rank_work_bound, mean_work_bound

    rng = np.random.default_rng(3)
    for _ in range(5):
        works = rng.uniform(0.1, 2.0, size=7)
        u = Units.of(Profile(stages=[StageCost(forward=w / 3, backward_input=w / 3, backward_weight=w / 3,
                                               activation_bytes=0) for w in works]), 4)
        best = min(max(sum(works[i] for i in range(7) if deal[i] == r) for r in range(3))
                   for deal in itertools.product(range(3), repeat=7))
        bound = busiest_rank_work_bound(u, 3, 4)
        assert mean_work_bound(u, 3, 4) <= bound <= 4 * best * (1 + 1e-12)
    layer = StageCost(forward=1.0, backward_input=1.0, backward_weight=1.0, activation_bytes=0)
    equal = Units.of(Profile(stages=[layer] * 7), 4)
    assert busiest_rank_work_bound(equal, 3, 4) == pytest.approx(4 * 3 * 3.0)  # ceil(7 / 3) layers


def test_an_auto_plan_is_bounded_by_its_busiest_rank_not_the_mean_rank():
    # 9 equal layers on 4 ranks: whatever the placement, some rank computes 3 of them. The
    # interleaved loop's bound was the mean rank's 2.25 layers and, the least of the placements'
    # bounds, the plan's: a 20% gap on a plan within 2% of what any partition can do
    units = uniform_units(9, head=1.0)
    M = 8
    res = plan(profile=units, ranks=4, microbatches=M, memory="none", time_limit=4, budget="work")
    three_layers = M * 3 * (1.0 + 1.1 + 0.9)
    assert res.bounds["interleaved"] >= three_layers * (1 - 1e-9)
    assert three_layers * (1 - 1e-9) <= res.bound <= res.value
    assert res.value / res.bound - 1 < 0.05
