"""The fraction chooser (schedc.solver.offload_fractions): a share of every microbatch per rank,
and forwards that wait for copies out, make an order fit a cap that whole microbatches cannot.

1F1B on 4 identical stages (F = I = W = 1 s, 1 byte of activation), 8 microbatches; rank 0
holds 4 microbatches at its peak, which caps below 1F1B's memory (``0.9p``, ``0.8p``) forbid.
"""

from dataclasses import replace

import pytest

from schedc.core.baselines import make_baseline
from schedc.core.costs import MemoryLimit, Profile
from schedc.core.host_link import HostLink
from schedc.core.simulate import simulate
from schedc.solver.offload import choose_offload
from schedc.solver.offload_fractions import LEVELS, choose_fractions, offloads_at

PROFILE = Profile.uniform(4)
ONE_F_ONE_B = make_baseline("1f1b", 4, 8)


def _link(copy_seconds: float) -> HostLink:
    """A copy of one whole microbatch (1 byte) takes `copy_seconds`."""
    return HostLink(bandwidth=1.0 / copy_seconds, latency=0.0)


def test_a_share_of_each_microbatch_fits_where_whole_ones_cannot_and_hides():
    memory, link = MemoryLimit.parse("0.9p"), _link(2.0)
    plain = simulate(ONE_F_ONE_B, PROFILE, memory)
    assert not plain.fits and plain.ranks_over == [0]
    assert not choose_offload(ONE_F_ONE_B, PROFILE, memory, link).fits
    choice = choose_fractions(ONE_F_ONE_B, PROFILE, memory, link)
    assert choice.sim.fits and choice.why == ""
    assert choice.sim.makespan == plain.makespan  # every copy hides
    assert 0 < choice.fractions[0] < 1 and choice.fractions[1:] == (0.0, 0.0, 0.0)
    assert {a.fraction for a in choice.actions} == {choice.fractions[0]}
    assert all(a.stage == 0 and a.room_for is None for a in choice.actions)


def test_the_fraction_is_the_least_that_fits():
    memory, link = MemoryLimit.parse("0.9p"), _link(2.0)
    choice = choose_fractions(ONE_F_ONE_B, PROFILE, memory, link)
    timing = simulate(ONE_F_ONE_B, PROFILE, None)
    less = offloads_at(ONE_F_ONE_B, PROFILE, link, {0: choice.fractions[0] - 1 / LEVELS}, timing)
    assert 0 in simulate(ONE_F_ONE_B, PROFILE, memory, memory_actions=less, link=link).ranks_over


def test_where_the_first_forwards_outrun_the_link_a_forward_waits_for_a_copy_out():
    # at 0.8p rank 0's warm-up makes bytes faster than the link empties it: only an F that waits
    # for a copy out fits; without its wait the same offloads go over the cap
    memory, link = MemoryLimit.parse("0.8p"), _link(2.0)
    choice = choose_fractions(ONE_F_ONE_B, PROFILE, memory, link)
    assert choice.sim.fits
    waiting = [a for a in choice.actions if a.room_for is not None]
    assert waiting and all(a.room_for.kind == "F" and a.room_for.stage == 0 for a in waiting)
    eager = [replace(a, room_for=None) for a in choice.actions]
    assert not simulate(ONE_F_ONE_B, PROFILE, memory, memory_actions=eager, link=link).fits


def test_an_order_that_fits_needs_nothing():
    choice = choose_fractions(ONE_F_ONE_B, PROFILE, MemoryLimit.parse("1p"), _link(2.0))
    assert choice.sim.fits and choice.actions == () and choice.fractions == (0.0,) * 4


@pytest.mark.parametrize("memory", ["0.5p", "0.6p"])
def test_a_cap_no_share_reaches_says_why(memory):
    # rank 0 cannot hold its own F beside what it must keep: no fraction and no wait fits
    choice = choose_fractions(ONE_F_ONE_B, PROFILE, MemoryLimit.parse(memory), _link(2.0))
    assert not choice.sim.fits
    assert "stay over the cap at every fraction" in choice.why and "rank(s) 0" in choice.why


def test_the_commands_say_a_share_per_microbatch_or_the_total_where_shares_differ():
    from schedc.cli.offload_flags import moved_bytes

    def fmt(n):
        return f"{n:g} B"

    assert moved_bytes({"microbatches": [1, 2], "fractions": [0.25], "bytes": 1.0}, fmt) == "2 x 0.5 B"
    assert moved_bytes({"microbatches": [1, 2], "fractions": [0.25, 1.0], "bytes": 2.5}, fmt) == \
        "2 microbatches, 2.5 B in all"


def test_a_plans_order_offloaded_after_its_deadline_says_the_time_ran_out():
    from schedc.solver.deadline import Deadline
    from schedc.solver.offload import offload_order

    memory = MemoryLimit.parse("0.9p")
    choice = offload_order(ONE_F_ONE_B, PROFILE, memory, _link(2.0), deadline=Deadline(0.0))
    assert not choice.fits and choice.actions == () and "time limit" in choice.why
    assert offload_order(ONE_F_ONE_B, PROFILE, memory, _link(2.0)).fits
