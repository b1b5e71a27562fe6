"""A deep model (Llama-3.1-405B's 126 layers) under `--placement auto`: the V's partition bounds
grow as ranks x units^4 and check no deadline, so auto leaves the V out when they alone would take
over half the time limit, and says so; an ordinary depth keeps both placements."""

from schedc.model_costs import unit_profile
from schedc.planning import plan
from schedc.planning.request import _placements


def test_auto_keeps_the_v_for_an_ordinary_depth():
    notes: list[str] = []
    assert _placements("auto", 8, 34, "units.json", 30.0, notes) == ["loop", "v"] and notes == []


def test_auto_leaves_the_v_out_of_a_deep_model_and_says_how_to_plan_it():
    notes: list[str] = []
    assert _placements("auto", 8, 128, "units.json", 5.0, notes) == ["loop"]
    assert len(notes) == 1 and "--placement v" in notes[0] and "128 units on 8 ranks" in notes[0]
    asked: list[str] = []  # asked for, the V is planned, with a note that it outlasts the limit
    assert _placements("v", 8, 128, "units.json", 5.0, asked) == ["v"] and "beyond the time limit" in asked[0]


def test_a_126_layer_plan_returns_the_loop_with_the_note():
    profile = unit_profile(layers=126, hidden=64, ffn_hidden=128, heads=4, kv_heads=2, vocab=256, seq=64)
    res = plan(profile=profile, ranks=8, microbatches=16, memory="none", time_limit=5)
    assert res.placement == "loop"
    assert any("placement auto left the V out" in n for n in res.notes)
