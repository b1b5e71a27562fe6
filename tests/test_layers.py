"""The package's layers import downward only (docs/design.md, Layout): a new cost, engine or
framework lands in its layer without pulling the ones above it into the ones below."""

import ast
import warnings
from pathlib import Path

import pytest

import schedc

PACKAGE = Path(schedc.__file__).parent

BASE = {"errors", "_version", "choices"}
ALLOWED = {  # layer -> the layers its modules may import (besides itself)
    "errors": set(),
    "_version": set(),
    "choices": {"errors"},
    "core": BASE | {"io"},
    "io": BASE | {"core"},
    "model_costs": BASE | {"core", "io"},
    "solver": BASE | {"core", "io", "solver/engines", "solver/bounds"},
    "solver/engines": BASE | {"core", "io", "solver", "solver/bounds"},
    "solver/bounds": BASE | {"core", "io", "solver", "solver/engines"},
    "frameworks": BASE | {"core", "io", "model_costs"},
    "show": BASE | {"core", "io"},
    "results": BASE | {"core", "io"},
    "plan": BASE | {"core", "io", "model_costs", "solver", "solver/engines", "solver/bounds", "frameworks"},
    "library": BASE | {"core", "io", "solver", "solver/engines", "solver/bounds", "runtime"},
    "runtime": BASE | {"core", "io", "model_costs"},
}


def _layer(parts: tuple[str, ...]) -> str:
    """'core' for schedc/core/x.py, 'solver/engines' for schedc/solver/engines/x.py, 'api' for api.py."""
    if len(parts) == 1:
        return parts[0].removesuffix(".py")
    if parts[0] == "solver" and len(parts) > 2:
        return f"solver/{parts[1]}"
    return parts[0]


def _imported_layers(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "schedc" and len(parts) > 1:
                out.add(_layer(tuple(parts[1:])))
    return out


def test_layers_import_downward_only():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        layer = _layer(path.relative_to(PACKAGE).parts)
        if layer not in ALLOWED:  # the front door, the command line and the package root sit on top
            continue
        for target in _imported_layers(path) - ALLOWED[layer] - {layer}:
            wrong.append(f"{path.relative_to(PACKAGE)} imports schedc.{target.replace('/', '.')}")
    assert not wrong, wrong


@pytest.mark.parametrize("old, new", [("schedc.costs", "schedc.core.costs"),
                                      ("schedc.solver.model", "schedc.solver.engines.mip"),
                                      ("schedc.commands.compile", "schedc.cli.compile")])
def test_old_module_names_still_import_for_one_release(old, new):
    import importlib
    import sys

    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)


def test_old_names_of_front_door_modules_keep_the_functions():
    from schedc.simulate import simulate as engine_simulate  # the module's function, as before the move

    assert callable(schedc.simulate) and schedc.simulate is not engine_simulate
    assert engine_simulate is schedc.core.simulate.simulate
