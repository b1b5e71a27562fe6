"""The simulator with memory actions: offload's copy streams and per-microbatch recompute.

Each test builds a small schedule whose numbers can be worked out by hand: uniform stages (F = I =
W = 1 s, 1 byte of activation, 0.5 held from I until W), a host link whose copies take a chosen
time, and checks the step, the copy times and the peaks against that arithmetic.
"""

import math

import pytest

from schedc.core.baselines import make_baseline
from schedc.core.costs import Profile, StageCost
from schedc.core.host_link import HostLink, offload_bytes
from schedc.core.ir import Action, Schedule
from schedc.core.simulate import simulate
from schedc.errors import SchedcError


def _profile(n_stages=2, boundary=0.0):
    p = Profile.uniform(n_stages)
    return p.model_copy(update={"boundary_bytes": boundary})


def _link(copy_seconds, nbytes=1.0, **kw):
    """A link on which a copy of `nbytes` takes `copy_seconds` (no latency)."""
    return HostLink(bandwidth=nbytes / copy_seconds, latency=0.0, **kw)


def _one_rank(actions: str) -> Schedule:
    cells = [Action(int(c[0]), c[1], int(c[2:])) for c in actions.split()]
    return Schedule.from_actions([cells], placement=[0])


def test_without_memory_actions_the_result_is_the_plain_simulation():
    s = make_baseline("1f1b", n_stages=4, n_microbatches=8)
    p = _profile(4)
    plain = simulate(s, p)
    empty = simulate(s, p, memory_actions=[])
    assert (plain.makespan, plain.peak_memory, plain.memory_curve) == (empty.makespan, empty.peak_memory,
                                                                        empty.memory_curve)
    assert plain.copies == [] and plain.host_peak == [] and plain.fits


def test_an_offload_that_hides_lowers_the_peak_and_keeps_the_step():
    # one rank, one stage: F0 F1 F2 then their backwards; offloading microbatch 0 while F1 and F2
    # run takes its byte off the device before F2 allocates
    s = _one_rank("0F0 0F1 0F2 0I0 0W0 0I1 0W1 0I2 0W2")
    p = _profile(1)
    kept = simulate(s, p)
    moved = simulate(s, p, memory_actions=[{"stage": 0, "microbatch": 0, "action": "offload",
                                            "fetch_at": "0F2"}],
                     link=_link(0.5))
    assert kept.peak_memory == [3.0]
    assert moved.makespan == kept.makespan
    # out: 1.0-1.5 (after 0F0); in: from 0F2's start (2.0) to 2.5, before 0I0 starts at 3
    out, back = moved.copies
    assert (out.direction, out.start, out.end) == ("out", 1.0, 1.5)
    assert (back.direction, back.start, back.end) == ("in", 2.0, 2.5)
    # F2 allocates at 2.0, when the fetch has already brought microbatch 0 back: still 3 bytes;
    # fetched at 0I0's start would be too late, so the peak stays. Fetch at 0F2 with the copy out
    # earlier than F1's end: the peak between 1.5 and 2 is 1 (F1's) and 3 from 2.0
    assert moved.peak_memory == [3.0]
    assert moved.host_peak == [1.0]


def test_the_peak_drops_by_the_offloaded_bytes_when_the_fetch_comes_later():
    # microbatch 0 is on the host while 0F2 runs (the peak without offload: three held), and
    # comes back at 0W1's start, when 0W2 has freed microbatch 2 (stage 0 under torch: I runs
    # nothing, W the whole backward and frees at its end)
    s = _one_rank("0F0 0F1 0F2 0I2 0W2 0I1 0W1 0I0 0W0")
    p = _profile(1)
    kept = simulate(s, p)
    actions = [{"stage": 0, "microbatch": 0, "action": "offload", "fetch_at": "0W1"}]
    moved = simulate(s, p, memory_actions=actions, link=_link(0.5))
    assert kept.peak_memory == [3.0]
    assert moved.peak_memory == [2.0]
    assert moved.makespan == kept.makespan


def test_a_fraction_moves_that_share_of_the_bytes_in_that_share_of_the_time():
    # as above, half of microbatch 0 moves: its copy out takes 0.25 s of the 0.5 a whole one takes,
    # and the peak while 0F2 runs drops by half a byte
    s = _one_rank("0F0 0F1 0F2 0I2 0W2 0I1 0W1 0I0 0W0")
    actions = [{"stage": 0, "microbatch": 0, "action": "offload", "fetch_at": "0W1", "fraction": 0.5}]
    moved = simulate(s, _profile(1), memory_actions=actions, link=_link(0.5))
    out, back = moved.copies
    assert (out.start, out.end, out.nbytes) == (1.0, 1.25, 0.5)
    assert back.nbytes == 0.5 and back.end - back.start == 0.25
    assert moved.peak_memory == [2.5]
    assert moved.host_peak == [0.5]


def test_an_f_named_room_for_waits_for_the_copy_out_and_runs_in_the_room_it_made():
    # the copy out of microbatch 0 takes 1.5 s (1.0-2.5), longer than 0F1: 0F2 would start at 2.0
    # with microbatch 0 still on the device (peak 3); waiting for the copy, it starts at 2.5 with
    # it gone (peak 2, the bytes leave before 0F2's rise at the same moment) and the step is 0.5 s
    # longer
    s = _one_rank("0F0 0F1 0F2 0I2 0W2 0I1 0W1 0I0 0W0")
    p = _profile(1)
    kept = simulate(s, p)
    offload = {"stage": 0, "microbatch": 0, "action": "offload", "fetch_at": "0W1"}
    eager = simulate(s, p, memory_actions=[offload], link=_link(1.5))
    waits = simulate(s, p, memory_actions=[dict(offload, room_for="0F2")], link=_link(1.5))
    assert eager.peak_memory == [3.0] and eager.makespan == kept.makespan
    assert waits.timings[Action(0, "F", 2)].start == 2.5
    assert waits.peak_memory == [2.0]
    assert waits.makespan == kept.makespan + 0.5


def test_a_slow_fetch_delays_the_backward_that_waits_for_it():
    s = _one_rank("0F0 0F1 0I0 0W0 0I1 0W1")
    p = _profile(1)
    kept = simulate(s, p)
    # out 1.0-4.0; the fetch is issued at 0F1's start (1.0) but waits for the copy out: 4.0-7.0;
    # 0I0 then starts at 7 instead of 2
    moved = simulate(s, p, memory_actions=[{"stage": 0, "microbatch": 0, "action": "offload"}], link=_link(3.0))
    assert [c.end for c in moved.copies] == [4.0, 7.0]
    assert moved.timings[Action(0, "I", 0)].start == 7.0
    assert moved.makespan == kept.makespan + 5.0


def test_each_copy_stream_is_first_in_first_out():
    s = _one_rank("0F0 0F1 0F2 0I0 0W0 0I1 0W1 0I2 0W2")
    p = _profile(1)
    actions = [{"stage": 0, "microbatch": 0, "action": "offload", "fetch_at": "0F2"},
               {"stage": 0, "microbatch": 1, "action": "offload", "fetch_at": "0F2"}]
    res = simulate(s, p, memory_actions=actions, link=_link(0.75))
    outs = [c for c in res.copies if c.direction == "out"]
    ins = [c for c in res.copies if c.direction == "in"]
    # out of microbatch 1 waits for out of microbatch 0: 1.0-1.75, then 2.0-2.75
    assert [(c.start, c.end) for c in outs] == [(1.0, 1.75), (2.0, 2.75)]
    # both fetched from 0F2 (starts 2.0): microbatch 0 first (its I runs first), 1 behind it and
    # behind its own copy out (ends 2.75)
    assert [(c.microbatch, c.start, c.end) for c in ins] == [(0, 2.0, 2.75), (1, 2.75, 3.5)]
    assert res.timings[Action(0, "I", 1)].start == 5.0  # its turn comes after 0I0 0W0 anyway
    assert res.link_busy(0, "out") == pytest.approx(1.5 / res.makespan)


def test_host_memory_is_a_cap_per_node():
    s = make_baseline("1f1b", n_stages=2, n_microbatches=4)
    p = _profile(2)
    actions = [{"stage": 0, "microbatch": m, "action": "offload"} for m in (0, 1)]
    roomy = simulate(s, p, memory_actions=actions, link=_link(0.25, ranks_per_node=2))
    assert roomy.fits and len(roomy.host_peak) == 1
    tight = simulate(s, p, memory_actions=actions, link=_link(0.25, ranks_per_node=2, host_memory=0.5))
    assert not tight.fits and tight.nodes_over == [0]


def test_what_an_offload_moves_leaves_the_stage_input_on_the_device():
    p = _profile(2, boundary=0.25)
    assert offload_bytes(p, 0) == 1.0
    assert offload_bytes(p, 1) == 0.75


def test_a_recomputed_microbatch_holds_less_and_runs_longer():
    s = _one_rank("0F0 0F1 0B0 0B1")
    # stage 0 under torch: its whole backward runs as W; a B here frees the activation at its end
    p = Profile(stages=[StageCost(forward=1.0, backward_input=1.0, backward_weight=1.0, activation_bytes=1.0,
                                  weight_grad_bytes=0.5)])
    checkpointed = Profile(stages=[StageCost(forward=1.0, backward_input=2.0, backward_weight=1.0,
                                             activation_bytes=0.1, weight_grad_bytes=0.1)])
    kept = simulate(s, p)
    re = simulate(s, p, memory_actions=[{"stage": 0, "microbatch": 0, "action": "recompute"}],
                  recompute=checkpointed)
    assert kept.peak_memory == [2.0]
    assert re.peak_memory == [pytest.approx(1.1)]
    assert re.makespan == kept.makespan + 1.0  # its B recomputes F


def test_recompute_without_its_costs_is_refused_in_one_line():
    s = _one_rank("0F0 0F1 0B0 0B1")
    with pytest.raises(SchedcError, match="recompute="):
        simulate(s, _profile(1), memory_actions=[{"stage": 0, "microbatch": 0, "action": "recompute"}])


def test_a_fetch_after_its_backward_is_refused_before_simulating():
    s = _one_rank("0F0 0F1 0I0 0W0 0I1 0W1")
    with pytest.raises(SchedcError, match="fetch_at"):
        simulate(s, _profile(1), memory_actions=[{"stage": 0, "microbatch": 0, "action": "offload",
                                                  "fetch_at": "0W0"}])


@pytest.mark.parametrize("field, value", [("bandwidth", 0.0), ("bandwidth", math.nan), ("latency", -1.0),
                                          ("shared_by", 0), ("ranks_per_node", 1.5), ("host_memory", -1.0)])
def test_a_host_link_with_a_bad_field_names_it(field, value):
    with pytest.raises(SchedcError, match=field):
        HostLink(**{field: value})
