"""schedc.core.memory_actions: the memory actions a plan writes beside its CSV, read strictly and
checked against the schedule (no torch needed)."""

from __future__ import annotations

import json

import pytest

from schedc.core.baselines import make_baseline
from schedc.core.ir import Action
from schedc.core.memory_actions import MemoryAction, check_memory_actions, parse_memory_actions, to_json
from schedc.errors import SchedcError

ONE_F_ONE_B = make_baseline("1f1b", 2, 4)  # rank 0: 0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3
ZB_V = make_baseline("zb-v", 4, 4, n_ranks=2)  # split I/W, stages 0 and 3 on rank 0


def test_default_fetch_point_is_the_action_before_the_backward_on_that_rank():
    got = check_memory_actions([{"stage": 0, "microbatch": 1, "action": "offload"},
                                {"stage": 0, "microbatch": 3, "action": "offload", "fetch_at": "0B2"},
                                {"stage": 1, "microbatch": 2, "action": "recompute"},
                                {"stage": 1, "microbatch": 0, "action": "keep"}], ONE_F_ONE_B)
    assert got == {(0, 1): MemoryAction(0, 1, "offload", Action(0, "F", 2)),
                   (0, 3): MemoryAction(0, 3, "offload", Action(0, "B", 2)),
                   (1, 2): MemoryAction(1, 2, "recompute")}


def test_the_json_form_round_trips():
    actions = [MemoryAction(1, 0, "offload", Action(1, "F", 2)), MemoryAction(0, 2, "recompute"),
               MemoryAction(0, 0, "offload", Action(0, "F", 2), 0.25, Action(0, "F", 1))]
    text = json.dumps(to_json(actions))
    assert json.loads(text) == [{"stage": 0, "microbatch": 0, "action": "offload", "fetch_at": "0F2",
                                 "fraction": 0.25, "room_for": "0F1"},
                                {"stage": 0, "microbatch": 2, "action": "recompute"},
                                {"stage": 1, "microbatch": 0, "action": "offload", "fetch_at": "1F2"}]
    def key(a):
        return a.stage, a.microbatch

    assert sorted(parse_memory_actions(json.loads(text)), key=key) == sorted(actions, key=key)


def test_recompute_on_stage_0_may_run_i_and_w_torch_runs_its_backward_in_w():
    assert check_memory_actions([{"stage": 0, "microbatch": 2, "action": "recompute"}], ZB_V) == {
        (0, 2): MemoryAction(0, 2, "recompute")}


HOSTILE = [
    ("not-a-list", {"stage": 0}, "plan.json: memory_actions: expected a list"),
    ("not-an-object", [3], "plan.json: memory_actions[0]: expected an object"),
    ("missing-field", [{"stage": 0, "action": "offload"}], "memory_actions[0]: no \"microbatch\""),
    ("unknown-field", [{"stage": 0, "microbatch": 0, "action": "offload", "fetch": "0F1"}],
     "memory_actions[0] (stage 0, microbatch 0): unknown field 'fetch'"),
    ("text-stage", [{"stage": "0", "microbatch": 0, "action": "keep"}], "\"stage\" must be an integer >= 0"),
    ("bool-microbatch", [{"stage": 0, "microbatch": True, "action": "keep"}], "\"microbatch\" must be an integer"),
    ("negative", [{"stage": -1, "microbatch": 0, "action": "keep"}], "\"stage\" must be an integer >= 0"),
    ("unknown-action", [{"stage": 0, "microbatch": 0, "action": "swap"}],
     "\"action\" 'swap' is not one of keep, offload, recompute"),
    ("fetch-on-recompute", [{"stage": 0, "microbatch": 0, "action": "recompute", "fetch_at": "0F1"}],
     "\"fetch_at\" is for an offload only"),
    ("fetch-not-a-cell", [{"stage": 0, "microbatch": 0, "action": "offload", "fetch_at": "0F1x"}],
     "\"fetch_at\" must be one action of the CSV in torch's notation"),
    ("duplicate", [{"stage": 1, "microbatch": 2, "action": "recompute"},
                   {"stage": 1, "microbatch": 2, "action": "keep"}],
     "memory_actions[1] (stage 1, microbatch 2): stage 1, microbatch 2 already has an entry (memory_actions[0])"),
    ("unknown-stage", [{"stage": 2, "microbatch": 0, "action": "recompute"}], "the CSV has stages 0..1"),
    ("unknown-microbatch", [{"stage": 0, "microbatch": 9, "action": "offload"}], "the CSV runs microbatches 0..3"),
    ("fetch-not-in-csv", [{"stage": 0, "microbatch": 0, "action": "offload", "fetch_at": "0F7"}],
     "\"fetch_at\" '0F7' is not an action of the CSV"),
    ("fetch-on-another-rank", [{"stage": 0, "microbatch": 1, "action": "offload", "fetch_at": "1F1"}],
     "\"fetch_at\" '1F1' runs on rank 1, not on rank 0 that holds stage 0"),
    ("fetch-at-its-backward", [{"stage": 0, "microbatch": 1, "action": "offload", "fetch_at": "0B1"}],
     "\"fetch_at\" '0B1' runs at or after 0B1 on rank 0; name an action between 0F1 and 0B1"),
    ("fetch-after-its-backward", [{"stage": 0, "microbatch": 0, "action": "offload", "fetch_at": "0B3"}],
     "runs at or after 0B0"),
    ("fetch-before-its-forward", [{"stage": 0, "microbatch": 2, "action": "offload", "fetch_at": "0F1"}],
     "\"fetch_at\" '0F1' runs at or before 0F2"),
    ("fetch-at-its-forward", [{"stage": 0, "microbatch": 2, "action": "offload", "fetch_at": "0F2"}],
     "runs at or before 0F2"),
    ("fraction-zero", [{"stage": 0, "microbatch": 0, "action": "offload", "fraction": 0}],
     "\"fraction\" must be a number in (0, 1]"),
    ("fraction-above-one", [{"stage": 0, "microbatch": 0, "action": "offload", "fraction": 1.5}],
     "\"fraction\" must be a number in (0, 1]"),
    ("fraction-text", [{"stage": 0, "microbatch": 0, "action": "offload", "fraction": "0.5"}],
     "\"fraction\" must be a number in (0, 1]"),
    ("fraction-nan", [{"stage": 0, "microbatch": 0, "action": "offload", "fraction": float("nan")}],
     "\"fraction\" must be a number in (0, 1]"),
    ("fraction-on-recompute", [{"stage": 0, "microbatch": 0, "action": "recompute", "fraction": 0.5}],
     "\"fraction\" is for an offload only"),
    ("room-for-not-a-cell", [{"stage": 0, "microbatch": 0, "action": "offload", "room_for": "F1"}],
     "\"room_for\" must be one action of the CSV in torch's notation"),
    ("room-for-a-backward", [{"stage": 0, "microbatch": 0, "action": "offload", "room_for": "0B1"}],
     "\"room_for\" '0B1' must be a forward of the CSV on rank 0, after 0F0"),
    ("room-for-an-earlier-forward", [{"stage": 0, "microbatch": 1, "action": "offload", "room_for": "0F0"}],
     "\"room_for\" '0F0' must be a forward of the CSV on rank 0, after 0F1"),
    ("room-for-another-rank", [{"stage": 0, "microbatch": 0, "action": "offload", "room_for": "1F1"}],
     "must be a forward of the CSV on rank 0"),
    ("nothing-between", [{"stage": 1, "microbatch": 0, "action": "offload"}],
     "1B0 follows 1F0 directly on rank 1, so there is no action to fetch at; keep this microbatch"),
]


@pytest.mark.parametrize("data,needle", [(d, n) for _, d, n in HOSTILE], ids=[c for c, _, _ in HOSTILE])
def test_hostile_memory_actions_are_one_line_naming_the_entry_and_field(data, needle):
    with pytest.raises(SchedcError) as e:
        check_memory_actions(data, ONE_F_ONE_B, where="plan.json")
    assert needle in str(e.value)
    assert "\n" not in str(e.value) and str(e.value).startswith("plan.json: memory_actions")


def test_recompute_of_a_split_backward_on_a_later_stage_asks_for_b():
    with pytest.raises(SchedcError, match=r"memory_actions\[0\] \(stage 3, microbatch 1\): the CSV runs this backward "
                                          r"as I and W \(3I1\).*give a CSV that runs it as B \(3B1\)"):
        check_memory_actions([{"stage": 3, "microbatch": 1, "action": "recompute"}], ZB_V)
