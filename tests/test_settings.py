"""One frozen run-settings object: built once, handed to the counted route, and the profile's
assumes recorded from it; the keyword API of count_profile builds the same object."""

import dataclasses

import pytest

import schedc
from schedc.core.settings import RunSettings
from schedc.errors import SchedcError
from schedc.model_costs import unit_profile
from schedc.model_costs.profile import count_units

SHAPE = {"layers": 4, "hidden": 256, "vocab": 1000, "heads": 8, "kv_heads": 4, "ffn_hidden": 512}


def test_the_settings_are_frozen_and_unknown_names_are_refused():
    run = RunSettings(seq=128)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.seq = 256
    with pytest.raises(SchedcError, match=r"^run settings: unknown setting 'sequence'; the settings are "):
        RunSettings.of(sequence=128)
    assert run.but(tp=2, dp_shard=None).tp == 2 and run.but(tp=2).dp_shard == 1 and run.tp == 1


def test_count_profile_from_one_object_is_the_keyword_count():
    run = RunSettings(seq=128, microbatch_size=2, tp=2, dp_shard=2, activation_checkpoint="full",
                      optimizer="sgd-momentum", framework="torchtitan")
    from_object = schedc.count_profile(SHAPE, settings=run)
    from_keywords = schedc.count_profile(SHAPE, seq=128, microbatch_size=2, tp=2, dp_shard=2,
                                         activation_checkpoint="full", optimizer="sgd-momentum",
                                         framework="torchtitan")
    assert from_object == from_keywords
    a = from_object.assumes
    assert (a["seq_len"], a["microbatch_size"], a["tp"], a["dp_shard"], a["optimizer"], a["framework"]) == \
        (128, 2, 2, 2, "sgd-momentum", "torchtitan")
    # a keyword beside the object replaces its field
    assert schedc.count_profile(SHAPE, settings=run, microbatch_size=4).assumes["microbatch_size"] == 4


def test_unit_profiles_keywords_are_the_object_resolved():
    run = RunSettings(seq=64, tp=2, tp_bandwidth=100e9, reserve_bytes=0.0, names="hf")
    assert count_units(None, run, **SHAPE) == unit_profile(**SHAPE, seq=64, tp=2, tp_bandwidth=100e9,
                                                           reserve_bytes=0.0, names="hf")
    assert count_units(None, run, **SHAPE).assumes["tp_bandwidth"] == 100e9


def test_a_bad_setting_in_the_object_is_named_as_the_keyword():
    with pytest.raises(SchedcError, match=r"^tp: must be an integer >= 1, got 0"):
        schedc.count_profile(SHAPE, settings=RunSettings(seq=64, tp=0))
    with pytest.raises(SchedcError, match=r"^seq: give the tokens per sequence"):
        schedc.count_profile(SHAPE, settings=RunSettings())
    with pytest.raises(SchedcError, match=r"^settings: expected a schedc.core.settings.RunSettings, got dict"):
        schedc.count_profile(SHAPE, settings={"seq": 64})


def test_an_object_that_leaves_the_names_out_takes_the_frameworks():
    # the command line builds the object without --names: NeMo's Hugging Face names, not a contradiction
    counted = schedc.count_profile(SHAPE, settings=RunSettings.of(seq=64, framework="nemo", names=None))
    assert counted.stages[0].modules == ["model.embed_tokens"] and counted.assumes["implementation"] == "hf"
    with pytest.raises(SchedcError, match=r"^names 'torchtitan' contradicts framework 'nemo'"):
        schedc.count_profile(SHAPE, settings=RunSettings(seq=64, framework="nemo", names="torchtitan"))
