"""The front door (``import schedc``): what a user imports, how it is called, what it returns.

Every exported name is importable and documented; parameters after the subject are keyword-only;
a bad choice is one SchedcError naming the parameter, before any work; results are frozen; the
old spellings through the package still work for this release and warn; importing schedc loads
neither torch nor the solvers nor matplotlib. (The docstring examples run in test_doctests.py.)
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

import schedc
from schedc import SchedcError

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = ("compile", "simulate", "validate", "baseline", "plot", "read_csv", "write_csv", "read_report")


def _has_attribute_docstring(name: str) -> bool:
    """A module-level constant or type alias counts as documented when a string follows its
    assignment in the module that defines it (what IDEs and Sphinx show)."""
    for module in ("schedc/choices.py", "schedc/api.py"):
        body = ast.parse((ROOT / module).read_text()).body
        for stmt, after in zip(body, body[1:]):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) \
                    and isinstance(after.value.value, str) and len(after.value.value) > 20
    return False


def test_every_exported_name_is_importable_and_documented():
    assert len(set(schedc.__all__)) == len(schedc.__all__)
    undocumented = []
    for name in schedc.__all__:
        obj = getattr(schedc, name)  # importable: a missing one raises here
        if inspect.isclass(obj) or inspect.isfunction(obj):
            doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
            if not doc or len(doc.strip()) < 20:
                undocumented.append(name)
        elif not _has_attribute_docstring(name):
            undocumented.append(name)
    assert undocumented == []
    namespace: dict = {}
    exec("from schedc import *", namespace)
    assert set(schedc.__all__) <= set(namespace)


def test_public_functions_document_parameters_returns_and_raises():
    for name in FUNCTIONS:
        doc = inspect.getdoc(getattr(schedc, name))
        params = list(inspect.signature(getattr(schedc, name)).parameters)
        assert "Returns" in doc and "Raises" in doc and "Examples" in doc, name
        assert all(p in doc for p in params), (name, [p for p in params if p not in doc])


def test_parameters_after_the_subject_are_keyword_only():
    for name in FUNCTIONS:
        params = list(inspect.signature(getattr(schedc, name)).parameters.values())
        subject = 0 if name == "compile" else (2 if name == "write_csv" else 1)
        assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[:subject]), name
        assert all(p.kind is p.KEYWORD_ONLY for p in params[subject:]), name


def test_positional_calls_raise_type_error(tmp_path):
    s = schedc.baseline("1f1b", stages=2, microbatches=4)
    prof = schedc.Profile.uniform(2)
    calls = [
        lambda: schedc.compile(2, 4),
        lambda: schedc.simulate(s, prof),
        lambda: schedc.validate(s, 2),
        lambda: schedc.baseline("1f1b", 2, 4),
        lambda: schedc.plot(s, prof),
        lambda: schedc.read_csv(tmp_path / "x.csv", 4),
        lambda: schedc.write_csv(s, tmp_path / "x.csv", {}),
    ]
    for call in calls:
        with pytest.raises(TypeError, match="positional argument"):
            call()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("call, parameter", [
    (lambda s: schedc.compile(stages=2, microbatches=4, objective="fastest"), "objective"),
    (lambda s: schedc.compile(stages=2, microbatches=4, execution="cuda"), "execution"),
    (lambda s: schedc.compile(stages=2, microbatches=4, solver="gurobi"), "solver"),
    (lambda s: schedc.compile(stages=2, microbatches=4, placement="zigzag"), "placement"),
    (lambda s: schedc.compile(stages=2, microbatches=4, placement=[0, -1]), "placement"),
    (lambda s: schedc.compile(stages=2, microbatches=0), "microbatches"),
    (lambda s: schedc.compile(stages="2", microbatches=4), "stages"),
    (lambda s: schedc.compile(stages=2, microbatches=4, time_limit=0), "time_limit"),
    (lambda s: schedc.compile(stages=2, microbatches=4, memory="lots"), "memory"),
    (lambda s: schedc.compile(stages=2, microbatches=4, profile=3), "profile"),
    (lambda s: schedc.simulate(s, execution="fast"), "execution"),
    (lambda s: schedc.simulate("1f1b.csv"), "schedule"),
    (lambda s: schedc.validate(s, placement="ring"), "placement"),
    (lambda s: schedc.baseline("1f1b", stages=2, microbatches=4, placement="x"), "placement"),
    (lambda s: schedc.plot([s, None]), "schedules[1]"),
    (lambda s: schedc.plot(s, execution="paper"), "execution"),
    (lambda s: schedc.plot([s, s], profile=[schedc.Profile.uniform(2)]), "profile"),
    (lambda s: schedc.simulate(s).objective("throughput"), "objective"),
])
def test_a_bad_choice_is_one_error_naming_the_parameter(call, parameter):
    s = schedc.baseline("1f1b", stages=2, microbatches=4)
    with pytest.raises(SchedcError) as e:
        call(s)
    message = str(e.value)
    assert message.startswith(f"{parameter}: ") and "\n" not in message


def test_choices_are_literal_types_and_status_is_a_str_enum():
    from typing import get_args

    assert get_args(schedc.Objective) == ("makespan", "span")
    assert get_args(schedc.Execution) == ("torch", "ideal")
    assert set(get_args(schedc.Solver)) == {"auto", "highs", "cbc", "cpsat"}
    assert schedc.Status("optimal") is schedc.Status.OPTIMAL and schedc.Status.OPTIMAL == "optimal"
    assert str(schedc.Status.FEASIBLE) == "feasible" and json.dumps(schedc.Status.HEURISTIC) == '"heuristic"'


@pytest.fixture(scope="module")
def compiled():
    return schedc.compile(stages=4, microbatches=8, profile=schedc.Profile.uniform(4, 1, 1.1, 0.9, comm=0.1),
                          memory="1.5p", time_limit=5)


def test_compile_returns_named_results_that_agree_with_each_other(compiled):
    res = compiled
    assert isinstance(res.status, schedc.Status) and res.report.status is res.status
    assert res.value == res.simulation.makespan == res.report.predicted.makespan
    assert res.lower_bound <= res.value * (1 + 1e-9) and 0 <= res.gap < 1
    assert res.simulation.fits and res.memory == schedc.MemoryLimit.parse("1.5p")
    assert res.objective == "makespan" and res.execution == "torch" == res.report.inputs.runtime
    assert set(res.baselines) >= {"gpipe", "1f1b", "zb-h1"}
    one_f_one_b = res.baselines["1f1b"]
    assert isinstance(one_f_one_b, schedc.BaselineResult) and one_f_one_b.fits
    assert one_f_one_b.makespan == schedc.simulate(schedc.baseline("1f1b", stages=4, microbatches=8),
                                                   profile=res.profile).makespan
    assert res.value <= min(b.makespan for b in res.baselines.values() if b.fits)
    schedc.validate(res.schedule, stages=4, microbatches=8)


def test_results_are_frozen(compiled):
    res = compiled
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.status = schedc.Status.OPTIMAL
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.simulation.makespan = 0.0
    with pytest.raises(TypeError):
        res.baselines["mine"] = res.baselines["1f1b"]
    with pytest.raises(TypeError):
        res.simulation.timings[schedc.Action(0, "F", 0)] = None
    with pytest.raises(pydantic.ValidationError):
        res.report.gap = 0.0
    with pytest.raises(pydantic.ValidationError):
        res.baselines["1f1b"].fits = False
    assert isinstance(res.simulation.peak_memory, tuple) and isinstance(res.simulation.order[0], tuple)


def test_write_csv_writes_what_the_cli_writes_and_read_report_reads_it_back(compiled, tmp_path):
    path = tmp_path / "api.csv"
    schedc.write_csv(compiled.schedule, path, report=compiled.report)
    assert schedc.read_csv(path).rows == compiled.schedule.rows
    assert schedc.read_report(path) == compiled.report
    cli = tmp_path / "cli.csv"
    subprocess.run([sys.executable, "-m", "schedc.cli", "compile", "--stages", "4", "--mb", "8", "--costs", "1,1.1,0.9",
                    "--comm", "0.1", "--memory", "1.5p", "--time-limit", "5", "--quiet", "-o", str(cli)],
                   check=True, capture_output=True, timeout=300)
    ours, theirs = json.loads(path.with_suffix(".json").read_text()), json.loads(cli.with_suffix(".json").read_text())
    assert list(ours) == list(theirs) and list(ours["inputs"]) == list(theirs["inputs"])
    assert ours["predicted"]["makespan"] == theirs["predicted"]["makespan"]


def test_every_library_report_reads_and_round_trips_unchanged():
    paths = sorted((ROOT / "schedules").glob("*.json"))
    assert paths
    for path in paths:
        report = schedc.read_report(path.with_suffix(".csv"))
        assert report.to_dict() == json.loads(path.read_text()), path.name
        assert report.library == json.loads(path.read_text())["library"]  # fields it does not name stay


def test_a_bad_report_field_is_named(tmp_path):
    (tmp_path / "s.csv").write_text("0F0,0B0\n")
    data = json.loads(next((ROOT / "schedules").glob("*.json")).read_text())
    data["predicted"]["fits_memory"] = "perhaps"
    (tmp_path / "s.json").write_text(json.dumps(data))
    with pytest.raises(SchedcError, match=r"s.json: field predicted.fits_memory: "):
        schedc.read_report(tmp_path / "s.csv")


def test_simulate_plot_and_profile_paths(tmp_path):
    prof = schedc.Profile.uniform(2, 1, 2, 1, comm=0.5)
    prof.save(tmp_path / "p.json")
    s = schedc.baseline("zb-h1", stages=2, microbatches=4)
    by_object, by_path = schedc.simulate(s, profile=prof), schedc.simulate(s, profile=tmp_path / "p.json")
    assert by_object == by_path
    ideal = schedc.simulate(s, profile=prof, execution="ideal")
    assert ideal.execution == "ideal" and by_object.execution == "torch"
    i0 = schedc.Action(0, "I", 0)  # under torch stage 0 has no input backward: its I takes no time
    assert ideal.timings[i0].end - ideal.timings[i0].start == 2.0
    assert by_object.timings[i0].end == by_object.timings[i0].start
    fig = schedc.plot([s, s], profile=prof, memory="1p", titles=["a", "b"], path=tmp_path / "two.png")
    assert len(fig.axes) == 4 and (tmp_path / "two.png").stat().st_size > 0


def test_import_schedc_stays_light():
    heavy = ("torch", "pulp", "matplotlib", "ortools", "highspy", "networkx")
    code = f"import sys, schedc; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_schedc_plan_is_the_function_and_the_planning_package_imports_by_dotted_name():
    import pkgutil

    assert inspect.isfunction(schedc.plan) and "profile" in inspect.signature(schedc.plan).parameters
    assert "schedc.plan" not in sys.modules  # one name, one thing: the function
    from schedc import plan

    assert plan is schedc.plan is sys.modules["schedc.planning"].plan
    package = sys.modules["schedc.planning"]
    names = [m.name for m in pkgutil.iter_modules(package.__path__)]
    assert "ac" in names
    for name in names:  # `import a.b.c as x` reads a.b then .c as attributes
        namespace: dict = {}
        exec(f"import schedc.planning.{name} as module", namespace)
        assert namespace["module"] is sys.modules[f"schedc.planning.{name}"], name
    # and in a fresh interpreter, where nothing else imported the module first
    code = "import schedc.planning.ac as a, schedc; print(a.__name__, schedc.plan.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout.split()) == (0, ["schedc.planning.ac", "plan"]), out.stderr
