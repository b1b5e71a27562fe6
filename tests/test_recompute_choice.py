"""Recompute chosen per microbatch (schedc.solver.recompute_choice): the microbatches of a fixed
order that run their forward again in a whole backward, alone or beside offload, make the order
fit a cap that offload over a slow link cannot.

1F1B and ZB-H1 on 4 identical stages (F = I = W = 1 s, 1 byte of activation), 8 microbatches;
checkpointed, a stage keeps 0.1 byte and its B costs 3 s (I + W and the forward again).
"""

import pytest

from schedc.core.baselines import make_baseline
from schedc.core.costs import MemoryLimit, Profile
from schedc.core.host_link import HostLink
from schedc.core.ir import Action, Kind
from schedc.core.memory_actions import check_memory_actions
from schedc.core.simulate import simulate
from schedc.planning.ac import checkpointed_form
from schedc.solver.offload import best_offload, choose_offload
from schedc.solver.offload_fractions import choose_fractions
from schedc.solver.recompute_choice import choose_recompute, recompute_then_offload, run_as_b

PROFILE = Profile.uniform(4)
CHECKPOINTED = checkpointed_form(
    PROFILE.model_copy(update={"stages": [s.model_copy(update={"activation_bytes": 0.1, "weight_grad_bytes": 0.1,
                                                                 "backward_input": 2.0})
                                          for s in PROFILE.stages]}), PROFILE)
ONE_F_ONE_B = make_baseline("1f1b", 4, 8)
ZB_H1 = make_baseline("zb-h1", 4, 8)
SLOW = HostLink(bandwidth=1.0 / 100.0, latency=0.0)  # a copy of one microbatch takes 100 s
FAST = HostLink(bandwidth=1.0 / 0.5, latency=0.0)


def test_a_recomputed_backward_runs_whole_at_its_i_and_its_w_is_gone():
    merged = run_as_b(ZB_H1, [(1, 3)])
    row = merged.actions(1)
    before = ZB_H1.actions(1)
    assert Action(1, Kind.B, 3) in row and Action(1, Kind.I, 3) not in row and Action(1, Kind.W, 3) not in row
    assert row.index(Action(1, Kind.B, 3)) == before.index(Action(1, Kind.I, 3))
    assert len(row) == len(before) - 1
    assert [merged.actions(r) for r in (0, 2, 3)] == [ZB_H1.actions(r) for r in (0, 2, 3)]


@pytest.mark.parametrize("schedule", [ONE_F_ONE_B, ZB_H1], ids=["1f1b", "zb-h1"])
def test_recomputing_some_microbatches_fits_where_a_slow_link_cannot(schedule):
    memory = MemoryLimit.parse("0.8p")
    assert not simulate(schedule, PROFILE, memory).fits
    assert not choose_fractions(schedule, PROFILE, memory, SLOW).sim.fits
    assert not choose_offload(schedule, PROFILE, memory, SLOW).fits
    choice = choose_recompute(schedule, PROFILE, CHECKPOINTED, memory)
    assert choice.fits and choice.why == ""
    keys = choice.recomputed
    assert keys and len(keys) < 8 * 4  # some microbatches, not every one
    # the CSV runs each recomputed backward as B, as torch needs under checkpointing
    check_memory_actions(choice.to_json(), choice.schedule)
    again = simulate(choice.schedule, PROFILE, memory, memory_actions=choice.to_json(), recompute=CHECKPOINTED)
    assert again.fits and again.makespan == choice.sim.makespan
    # recompute adds work: never shorter than the order without a cap
    assert choice.sim.makespan >= simulate(schedule, PROFILE, None).makespan


def test_every_recompute_chosen_is_needed_at_the_last_pick():
    memory = MemoryLimit.parse("0.8p")
    choice = choose_recompute(ONE_F_ONE_B, PROFILE, CHECKPOINTED, memory)
    fewer = choice.recomputed[:-1]
    sim = simulate(run_as_b(ONE_F_ONE_B, fewer), PROFILE, memory,
                   memory_actions=[{"stage": s, "microbatch": m, "action": "recompute"} for s, m in fewer] or None,
                   recompute=CHECKPOINTED)
    assert not sim.fits


def test_a_cap_below_one_microbatch_says_why():
    choice = choose_recompute(ONE_F_ONE_B, PROFILE, CHECKPOINTED, MemoryLimit.parse("0.2p"))
    assert not choice.fits and "stay over the cap" in choice.why


def test_where_the_link_keeps_up_offload_replaces_the_recomputes_and_costs_less():
    memory = MemoryLimit.parse("0.8p")
    alone = choose_recompute(ONE_F_ONE_B, PROFILE, CHECKPOINTED, memory)
    mix = recompute_then_offload(ONE_F_ONE_B, PROFILE, CHECKPOINTED, memory, FAST)
    assert mix is not None and mix.fits
    assert mix.sim.makespan <= alone.sim.makespan
    assert len(mix.recomputed) < len(alone.recomputed)
    assert any(a.action == "offload" for a in mix.actions)
    # an offload never moves a recomputed microbatch
    moved = {(a.stage, a.microbatch) for a in mix.actions if a.action == "offload"}
    assert not moved & set(mix.recomputed)
    check_memory_actions(mix.to_json(), mix.schedule)


def test_the_compilers_choosers_recompute_only_when_given_the_checkpointed_costs():
    from schedc.solver.problem import Problem

    memory = MemoryLimit.parse("0.8p")
    problem = Problem.build(4, 8, profile=PROFILE, memory=memory)
    assert best_offload([("1f1b", ONE_F_ONE_B)], problem, SLOW) is None
    name, choice = best_offload([("1f1b", ONE_F_ONE_B)], problem, SLOW, checkpointed=CHECKPOINTED)
    assert name == "1f1b" and choice.fits
    assert {a.action for a in choice.actions} == {"recompute"}
