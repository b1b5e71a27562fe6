"""The bound over partitions counts a loop rank's cool-down for every number of open microbatches
(O(M) numpy steps per rank): at many microbatches that ran past the plan's time limit. It now stops
at the caller's deadline with a looser bound, still a bound, says so, and gives the same bound as
before when time suffices."""

import schedc
from schedc.core.partition import Units, min_cap, partition_bound
from schedc.library import transformer_profile
from schedc.planning import search

UNITS = transformer_profile(6, layers=6, hidden=256, vocab=32000, seq=256)


def _cap(placement="loop", ranks=2):
    need, _ = min_cap(Units.of(UNITS), placement, ranks)
    return 1.3 * need


def test_a_stopped_knapsack_gives_a_looser_bound_and_says_so():
    cap = _cap()
    full = partition_bound(UNITS, 2, 200, cap, "loop")
    never = partition_bound(UNITS, 2, 200, cap, "loop", stop=lambda: False)
    assert (never.value, never.counts, never.cut) == (full.value, full.counts, False)  # time suffices: the same
    cut = partition_bound(UNITS, 2, 200, cap, "loop", stop=lambda: True)
    assert cut.cut and not full.cut
    assert cut.value <= full.value  # looser, so still below every partition's step
    assert cut.value >= cut.chain  # and no weaker than the partition-free chain


def test_a_plan_whose_bound_stopped_early_says_so_in_its_notes(monkeypatch):
    monkeypatch.setattr(search, "BOUND_SHARE", 0.0)  # the bounds' deadline is already past
    res = schedc.plan(profile=UNITS, ranks=2, microbatches=64, memory=f"{int(_cap())}B", placement="loop", time_limit=3)
    note = next(n for n in res.notes if "stopped counting the cool-down" in n)
    assert note.startswith("placement loop: the bound over partitions stopped counting the cool-down of 64 "
                           "microbatches")
    assert res.bound <= res.value * (1 + 1e-9)
