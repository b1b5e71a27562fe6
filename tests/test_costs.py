import json

import pytest

from schedc.core.costs import HELD_FRACTION, MemoryLimit, Profile, StageCost, parse_comm, parse_costs
from schedc.core.ir import loop_placement, v_placement
from schedc.errors import SchedcError


def _write(tmp_path, data):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    return path


def _stage(**over):
    stage = dict(forward=1.0, backward_input=1.1, backward_weight=0.9, activation_bytes=100, weight_grad_bytes=40)
    stage.update(over)
    return stage


def test_weight_grad_bytes_may_exceed_activation_and_transients_round_trip(tmp_path):
    # torch's split backward keeps the graph plus W's output gradients: memory rises at I
    p = Profile(stages=[_stage(weight_grad_bytes=150, transient_bytes={"F": 30, "I": 20}), _stage()],
                boundary_bytes=[8], reserve_bytes=5)
    p.save(tmp_path / "p.json")
    q = Profile.load(tmp_path / "p.json")
    assert q == p and q.stages[0].weight_grad_bytes == 150 and q.boundary_after(0) == 8
    # an unmeasured B runs I then W: I's transient on top of I's rise, or W's
    assert q.stages[0].transient("B") == 20 + 50 and q.stages[1].transient("F") == 0
    # torch's runtime runs stage 0's whole backward inside W
    assert q.executed("torch").stages[0].transient_bytes == {"F": 30, "I": 0, "W": 70, "B": 70}


def test_profile_round_trip(tmp_path):
    p = Profile(stages=[_stage(), _stage(static_bytes=7)], comm=[0.1], device="cpu", model="gpt")
    p.save(tmp_path / "p.json")
    assert Profile.load(tmp_path / "p.json") == p


@pytest.mark.parametrize(
    "data, needle",
    [
        ({"format": "schedc.profile/v1", "stages": [_stage(forward=-1)]}, "stages[0].forward"),
        ({"format": "schedc.profile/v1", "stages": [_stage(colour="red")]}, "stages[0].colour: unknown field"),
        ({"format": "schedc.profile/v1", "stages": [_stage(weight_grad_bytes=-1)]}, "weight_grad_bytes"),
        ({"format": "schedc.profile/v1", "stages": [_stage(transient_bytes={"F": -1})]}, "transient_bytes"),
        ({"format": "schedc.profile/v1", "stages": [_stage(transient_bytes={"X": 1})]}, "transient_bytes"),
        ({"format": "schedc.profile/v1", "stages": [_stage()] * 3, "boundary_bytes": [1]}, "boundary_bytes"),
        ({"format": "schedc.profile/v1", "stages": [_stage()] * 3, "comm": [0.1]}, "comm"),
        ({"format": "schedc.profile/v1", "stages": []}, "stages"),
        ({"format": "schedc.profile/v1", "stages": [_stage(forward="fast")]}, "stages[0].forward"),
        ({"stages": [_stage()]}, "field 'format'"),
    ],
)
def test_profile_errors_name_the_field(tmp_path, data, needle):
    path = _write(tmp_path, data)
    with pytest.raises(SchedcError) as e:
        Profile.load(path)
    msg = str(e.value)
    assert str(path) in msg and needle in msg and "\n" not in msg


def test_profile_bad_json_and_missing_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  'format': 1")
    with pytest.raises(SchedcError, match=r"bad.json: line 2 column 3: not valid JSON"):
        Profile.load(bad)
    with pytest.raises(SchedcError, match="no such file"):
        Profile.load(tmp_path / "nope.json")


def test_uniform_profile_holds_what_torch_split_backward_holds():
    p = Profile.uniform(4, 1, 2, 3, comm=0.5)
    assert [p.duration(0, k) for k in "FIWB"] == [1, 2, 3, 5]
    # torch's I keeps the graph until W (retain_graph=True): I frees nothing by default
    assert [p.memory_delta(2, k) for k in "FIWB"] == [1.0, 0.0, -1.0, -1.0]
    assert p.comm_after(2) == 0.5
    # the zero-bubble paper's ratio stays reachable
    half = Profile.uniform(4, held_fraction=0.5)
    assert [half.memory_delta(2, k) for k in "FIWB"] == [1.0, -0.5, -0.5, -1.0]


def test_weight_grad_bytes_defaults_to_the_held_fraction(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"format": "schedc.profile/v1", "stages": [{"forward": 1, "backward_input": 1, '
                    '"backward_weight": 1, "activation_bytes": 8}]}')
    prof = Profile.load(path)
    assert prof.stages[0].weight_grad_bytes == 8 * HELD_FRACTION
    assert prof.runtime is None  # each stage's real I and W: converted for torch when used
    assert prof.executed().runtime == "torch"


@pytest.mark.parametrize(
    "text, kind, value",
    [("1p", "relative", 1.0), ("1.5P", "relative", 1.5), ("40GiB", "bytes", 40 * 2**30),
     ("500MB", "bytes", 500e6), ("none", "none", 0.0), ("1024b", "bytes", 1024)],
)
def test_memory_limit_parse(text, kind, value):
    m = MemoryLimit.parse(text)
    assert (m.kind, m.value) == (kind, value)


@pytest.mark.parametrize("text", ["", "p", "1x", "-1p", "0p", "40 parsecs", "1.5pp"])
def test_memory_limit_rejects(text):
    with pytest.raises(SchedcError, match="--memory"):
        MemoryLimit.parse(text)


def test_relative_limit_is_ranks_times_own_activation_plus_static():
    p = Profile(stages=[_stage(static_bytes=10)] * 4)
    # one stage per rank: 1p = R microbatches of the rank's stage
    assert MemoryLimit.parse("1p").per_rank(p, loop_placement(4, 4)) == [10 + 4 * 100] * 4
    # V placement: each rank holds two stages, so a microbatch of "its own stages" is 200 bytes
    assert MemoryLimit.parse("2p").per_rank(p, v_placement(4, 2)) == [20 + 2 * 2 * 200] * 2
    assert MemoryLimit.parse("1KiB").per_rank(p, v_placement(4, 2)) == [1024, 1024]


def test_parse_costs_and_comm():
    assert parse_costs("1,1.1,0.9") == (1.0, 1.1, 0.9)
    assert parse_comm("0.1") == 0.1 and parse_comm("0.1,0.2") == [0.1, 0.2]
    for bad in ["1,1", "a,b,c", "0,1,1", "1,1,-1"]:
        with pytest.raises(SchedcError, match="--costs"):
            parse_costs(bad)
    with pytest.raises(SchedcError, match="--comm"):
        parse_comm("-1")


def test_edge_heavy_profile_is_the_benchmark_shape():
    p = Profile.edge_heavy(4)
    assert [p.duration(s, "F") for s in range(4)] == [1.3, 1.0, 1.0, 1.3]
    assert p.duration(0, "I") == pytest.approx(1.43) and p.duration(1, "W") == pytest.approx(0.9)
    assert p.comm_after(0) == 0.1


def test_merge_sums_units_into_stages_and_keeps_module_names():
    units = [StageCost(forward=f, backward_input=i, backward_weight=w, activation_bytes=a, weight_grad_bytes=a / 2,
                       static_bytes=10 * a, modules=[name])
             for f, i, w, a, name in [(0.5, 0.0, 0.25, 1, "tok_embeddings"), (1, 1, 1, 2, "layers.0"),
                                      (1, 1, 1, 2, "layers.1"), (2, 2, 2, 3, "norm")]]
    profile = Profile(stages=units, comm=[0.1, 0.2, 0.3])
    merged = profile.merge([2, 1, 1])
    assert merged.n_stages == 3
    assert [s.modules for s in merged.stages] == [["tok_embeddings", "layers.0"], ["layers.1"], ["norm"]]
    first = merged.stages[0]
    assert (first.forward, first.backward_input, first.backward_weight) == (1.5, 1.0, 1.25)
    assert (first.activation_bytes, first.weight_grad_bytes, first.static_bytes) == (3, 1.5, 30)
    assert merged.comm == [0.2, 0.3]  # the unit boundaries where stages 0 and 1 end


def test_merge_rejects_partitions_that_do_not_cover_the_units():
    profile = Profile.uniform(4)
    for bad in ([2, 1], [2, 2, 1], [0, 4]):
        with pytest.raises(SchedcError, match="partition of 4 units"):
            profile.merge(bad)


def test_merge_of_a_torch_form_profile_keeps_stage_zero_backward_in_w():
    torch_form = Profile.uniform(4).executed("torch")
    merged = torch_form.merge([2, 2])
    assert merged.runtime == "torch"
    assert merged.stages[0].backward_input == 0.0 and merged.stages[0].backward_weight == 4.0
    assert merged.stages[1].backward_input == 2.0
