"""The Python front door under wrong types and bad values, as a notebook user passes them: each is
a SchedcError (or a ValueError/TypeError) that names the argument, never an AttributeError,
KeyError or IndexError from deep inside."""

import pytest

import schedc
from schedc.core.costs import Profile
from schedc.errors import SchedcError
from schedc.model_costs import unit_profile

SHAPE = dict(layers=4, hidden=64, vocab=100, heads=4)


@pytest.fixture(scope="module")
def units():
    return unit_profile(seq=16, **SHAPE)


@pytest.mark.parametrize("kwargs, named", [
    (dict(profile="units.json"), "^profile: expected a schedc.Profile .*got str"),
    (dict(profile=None), "^profile: expected a schedc.Profile .*got NoneType"),
    (dict(profile=SHAPE), "^profile: .*got dict"),
    (dict(ranks="2"), "^ranks: must be an integer >= 1, got '2'"),
    (dict(ranks=2.0), "^ranks: must be an integer >= 1, got 2.0"),
    (dict(microbatches=None), "^microbatches: must be an integer >= 1, got None"),
    (dict(time_limit="4"), "^time_limit: must be a finite number of seconds > 0, got '4'"),
    (dict(time_limit="4", budget="work"), "^time_limit: "),
])
def test_plan_names_a_wrongly_typed_argument(units, kwargs, named):
    args = dict(profile=units, ranks=2, microbatches=4, memory="none", time_limit=4) | kwargs
    with pytest.raises(SchedcError, match=named):
        schedc.plan(**args)


@pytest.mark.parametrize("kwargs, named", [
    (dict(n_stages="4"), "n_stages must be an integer >= 1, got '4'"),
    (dict(hidden="4096"), "hidden must be an integer >= 1, got '4096'"),
    (dict(seq=float("nan")), "seq must be an integer >= 1, got nan"),
    (dict(layers=8.0), "layers must be an integer >= 1, got 8.0"),
    (dict(ffn_hidden=0), "ffn_hidden must be an integer >= 1, got 0"),
    (dict(flops_per_second=float("inf")), "flops_per_second must be a finite number > 0, got inf"),
])
def test_transformer_profile_names_a_wrongly_typed_argument(kwargs, named):
    from schedc.library import transformer_profile

    args = dict(n_stages=4, layers=8) | kwargs
    with pytest.raises(SchedcError, match=f"^transformer_profile: {named}"):
        transformer_profile(**args)


def test_a_progress_that_is_not_a_function_is_refused_before_the_search(units):
    with pytest.raises(SchedcError, match="^progress: must be a function .*got int"):
        schedc.compile(stages=2, microbatches=4, progress=3, time_limit=2)
    with pytest.raises(SchedcError, match="^progress: must be a function .*got int"):
        schedc.plan(profile=units, ranks=2, microbatches=4, memory="none", progress=3, time_limit=4)


def test_write_trace_refuses_a_csv_name(tmp_path):
    # a schedule's name: the trace's JSON would stand where `schedc.read_csv` looks for a schedule
    with pytest.raises(SchedcError, match=r"^path .*s\.csv: a Chrome trace is JSON, and a \.csv name is a schedule's"):
        schedc.write_trace(schedc.baseline("1f1b", stages=2, microbatches=2), tmp_path / "s.csv")
    assert not (tmp_path / "s.csv").exists()


def test_a_plot_path_that_is_a_directory_is_named_as_one(tmp_path):
    # not "unknown picture format '(none)'": the user gave a directory where a file name belongs
    with pytest.raises(SchedcError, match=rf"^{tmp_path}: is a directory; give a file name such as "):
        schedc.plot(schedc.baseline("1f1b", stages=2, microbatches=2), path=tmp_path)


@pytest.mark.parametrize("call, named", [
    (lambda: schedc.read_csv(None), "^path: expected a file name .*got NoneType"),
    (lambda: schedc.read_report(3), "^csv_path: expected a file name .*got int"),
    (lambda: schedc.write_csv(schedc.baseline("1f1b", stages=2, microbatches=2), None), "^path: .*got NoneType"),
    (lambda: schedc.write_trace(schedc.baseline("1f1b", stages=2, microbatches=2), 5), "^path: .*got int"),
])
def test_a_path_that_is_not_one_is_named(call, named):
    # was Python's "expected str, bytes or os.PathLike object", naming no argument
    with pytest.raises(SchedcError, match=named):
        call()


@pytest.mark.parametrize("call, names", [
    (lambda: Profile.uniform("4"), "n_stages"),
    (lambda: Profile.uniform(True), "n_stages"),
    (lambda: Profile.uniform(4).merge("2,2"), "units_per_stage"),
    (lambda: Profile.uniform(4).merge([2.5, 1.5]), "units_per_stage"),
])
def test_profile_counts_of_the_wrong_type_are_named(call, names):
    with pytest.raises(SchedcError, match=names):
        call()


@pytest.mark.parametrize("kwargs, names", [
    (dict(shape=[4096]), "shape"),
    (dict(layers=2, hidden=64, vocab=100, seq=8, master_weights="no"), "master_weights"),
])
def test_unit_profile_refuses_a_shape_or_flag_of_the_wrong_type(kwargs, names):
    with pytest.raises(SchedcError, match=names):
        unit_profile(**kwargs)
