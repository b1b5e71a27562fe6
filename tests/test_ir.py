import pytest

from schedc.core.ir import Action, Overlap, Schedule, loop_placement, make_placement, placement_name, v_placement


def test_placements_match_torchtitan_conventions():
    assert loop_placement(8, 4) == (0, 1, 2, 3, 0, 1, 2, 3)
    assert v_placement(8, 4) == (0, 1, 2, 3, 3, 2, 1, 0)
    assert v_placement(6, 2) == (0, 1, 1, 0, 0, 1)
    assert placement_name(loop_placement(4, 4)) == "loop"
    assert placement_name(v_placement(4, 2)) == "v"
    assert placement_name((0, 0, 1, 1)) == "explicit"
    with pytest.raises(ValueError, match="multiple of ranks"):
        make_placement("loop", 5, 2)
    with pytest.raises(ValueError, match="placement"):
        make_placement("zigzag", 4, 2)


def test_action_text_and_checks():
    assert str(Action(3, "W", 12)) == "3W12"
    assert str(Overlap((Action(0, "F", 7), Action(7, "B", 3)))) == "(0F7;7B3)OVERLAP_F_B"
    with pytest.raises(ValueError):
        Action(0, "X", 0)
    with pytest.raises(ValueError):
        Action(-1, "F", 0)


def test_schedule_infers_placement_and_flattens_overlaps():
    rows = [
        [Action(0, "F", 0), None, Overlap((Action(0, "F", 1), Action(3, "B", 0))), Action(3, "F", 0)],
        [Action(1, "F", 0), Action(2, "F", 0)],
    ]
    s = Schedule.from_actions(rows)
    assert s.placement == (0, 1, 1, 0)
    assert s.n_microbatches == 2 and s.n_ranks == 2 and s.n_stages == 4
    assert [str(a) for a in s.actions(0)] == ["0F0", "0F1", "3B0", "3F0"]
    assert s.stages_of(1) == [1, 2]
    assert s.compact().rows[0][1] == Overlap((Action(0, "F", 1), Action(3, "B", 0)))
    with pytest.raises(ValueError, match=r"stages \[1\]"):
        Schedule.from_actions([[Action(0, "F", 0)], [Action(2, "F", 0)]])
