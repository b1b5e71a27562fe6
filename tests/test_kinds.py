"""The action-kind table (schedc.core.ir.KIND_TABLE): a kind registered as one row is read by the
simulator (dependencies, seconds, memory), csvio (parse and print) and the plot, with no other edit."""

from __future__ import annotations

import json

import pytest

from schedc.core.costs import Profile, StageCost
from schedc.core.ir import KIND_TABLE, TORCH_KINDS, Action, Kind, KindInfo, Schedule, kinds, registered_kind
from schedc.core.simulate import Deadlock, simulate
from schedc.errors import SchedcError
from schedc.io import csvio

# two memory actions that take no compute time: O moves half a microbatch's activation to the
# host after its forward, R brings it back (and must come after its O)
OFFLOAD = KindInfo("O", "OFFLOAD", seconds=lambda c: 0.0, held=lambda c: -c.activation_bytes / 2, memory="frees",
                   after=("F",), plot_label="offload", plot_colormap="Greys", trace_category="offload")
RELOAD = KindInfo("R", "RELOAD", seconds=lambda c: 0.0, held=lambda c: c.activation_bytes / 2, memory="allocates",
                  after=("O",), plot_label="reload", plot_colormap="Reds", trace_category="reload")

PROFILE = Profile(stages=[StageCost(forward=1.0, backward_input=1.0, backward_weight=1.0, activation_bytes=100.0)])
WITH_OFFLOAD = "0F0,0O0,0F1,0O1,0R0,0B0,0R1,0B1\n"


@pytest.fixture
def toy_kinds():
    with registered_kind(OFFLOAD), registered_kind(RELOAD):
        yield
    assert "O" not in KIND_TABLE and "R" not in KIND_TABLE


def test_the_table_holds_torchs_four_kinds_whose_values_are_the_csv_letters():
    assert TORCH_KINDS == (Kind.F, Kind.I, Kind.W, Kind.B) == tuple("FIWB")
    assert Action(0, "W", 1).kind is Kind.W and Kind("B").info.backward == "merged"
    assert json.dumps({"kind": Kind.I}) == '{"kind": "I"}' and str(Action(3, Kind.F, 0)) == "3F0"
    with pytest.raises(ValueError, match="action kind must be one of F/I/W/B, got 'O'"):
        Action(0, "O", 0)
    with pytest.raises(ValueError, match="already registered"):
        with registered_kind(KindInfo("F", "X", seconds=abs, held=abs, memory="none")):
            pass
    with pytest.raises(ValueError, match="comes after 'Q', which is not registered"):
        with registered_kind(KindInfo("X", "X", seconds=abs, held=abs, memory="none", after=("Q",))):
            pass
    assert kinds() == TORCH_KINDS


def test_a_registered_kind_round_trips_through_csvio(toy_kinds, tmp_path):
    schedule = csvio.parse_csv_text(WITH_OFFLOAD)
    assert [a.kind for a in schedule.actions(0)] == list("FOFORBRB")
    assert schedule.actions(0)[1].kind is Kind("O")
    assert csvio.to_csv_text(schedule) == WITH_OFFLOAD
    path = tmp_path / "s.csv"
    csvio.write_csv(schedule, path)
    assert csvio.read_csv(path).rows == schedule.rows
    with pytest.raises(SchedcError, match="has no microbatch number"):
        csvio.parse_cell("0O")


def test_csvio_rejects_the_kind_once_it_is_unregistered():
    with registered_kind(OFFLOAD):
        assert csvio.parse_cell("0O0") == Action(0, "O", 0)
    with pytest.raises(SchedcError, match="unknown action '0O0'"):
        csvio.parse_cell("0O0")


def test_the_simulator_takes_seconds_memory_and_dependencies_from_the_row(toy_kinds):
    plain = simulate(csvio.parse_csv_text("0F0,0F1,0B0,0B1\n"), PROFILE)
    res = simulate(csvio.parse_csv_text(WITH_OFFLOAD), PROFILE)
    assert res.makespan == plain.makespan == 6.0  # O and R take no time
    # held after each action: 100, 50, 150, 100, 150, 50, 100, 0; without them two activations
    assert plain.peak_memory == [200.0] and res.peak_memory == [150.0]
    assert res.memory_curve[0][-1][1] == 0.0
    # R waits for its O ("after"), which this rank runs later: the walk explains the deadlock
    with pytest.raises(Deadlock, match=r"rank 0 waits at 0R0 \(needs 0O0\)"):
        simulate(csvio.parse_csv_text("0F0,0R0,0O0,0B0\n"), PROFILE)


def test_the_plot_colours_and_names_a_registered_kind_from_its_row(toy_kinds):
    from matplotlib.colors import to_rgba

    from schedc.show.plot import kind_color, plot_schedules

    fig = plot_schedules([csvio.parse_csv_text(WITH_OFFLOAD)], PROFILE)
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert "O offload" in labels and "R reload" in labels and "F forward" in labels
    assert kind_color("O") != kind_color("R") != kind_color("F")
    assert to_rgba(kind_color("O"))[0] == pytest.approx(to_rgba(kind_color("O"))[1])  # a grey


def test_the_trace_names_a_registered_kind_by_its_category(toy_kinds):
    from schedc.show.trace import trace_events

    schedule = Schedule.from_actions([[Action(0, k, m) for k, m in zip("FOFORBRB", (0, 0, 1, 1, 0, 0, 1, 1))]])
    cats = [e["cat"] for e in trace_events(schedule, PROFILE)["traceEvents"] if e["ph"] == "X"]
    assert cats == ["forward", "offload", "forward", "offload", "reload", "backward", "reload", "backward"]
