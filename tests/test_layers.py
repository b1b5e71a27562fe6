"""The package's layers import downward only (docs/design.md, Layout): a new cost, engine or
framework lands in its layer without pulling the ones above it into the ones below."""

import ast
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
    "planning": BASE | {"core", "io", "model_costs", "solver", "solver/engines", "solver/bounds", "frameworks"},
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


def _module_name(path: Path) -> str:
    parts = ("schedc", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (never run)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skip |= {id(n) for n in ast.walk(node)}
    return skip


def import_graph() -> dict[str, set[str]]:
    """schedc module -> the schedc modules it imports anywhere in its body (function-level imports
    too: they run, later), each ``from a.b import c`` read as ``a.b.c`` where that is a module."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_only(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            edges |= {t for t in targets if t in files and t != name}
        graph[name] = edges
    return graph


def _cycle(graph: dict[str, set[str]], nodes: set[str]):
    """One import cycle among `nodes` as a list of modules, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n] & nodes):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = 2
        stack.pop()
        return None

    for n in sorted(nodes):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_runtime_imports_form_no_cycle():
    # a loop hidden behind function-level imports still couples the modules: each can only be
    # understood (and imported first) with the other; the runtime's graph must be a DAG
    graph = import_graph()
    runtime = {m for m in graph if m.startswith("schedc.runtime.")}
    assert "schedc.runtime.profiling.stages" in runtime and "schedc.runtime.profiler" not in graph
    assert _cycle(graph, runtime) is None, " -> ".join(_cycle(graph, runtime))


def test_the_package_imports_form_no_cycle():
    # function-level imports included: a module that imports another only inside a function is
    # still coupled to it, and a loop of them means neither can be read (or imported) first
    graph = import_graph()
    assert _cycle(graph, set(graph)) is None, " -> ".join(_cycle(graph, set(graph)))


def test_the_cycle_check_sees_a_loop_through_a_function_level_import():
    tree = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(tree, set(tree)) == ["a", "b", "c", "a"]
    assert _cycle(tree, {"a", "b", "d"}) is None


def test_every_module_imports_first_in_a_fresh_interpreter():
    # each module imported before any other schedc module: a module-level cycle shows here as an
    # ImportError of a partly initialized module (processes schedc spawns import their entry first)
    import subprocess
    import sys

    pytest.importorskip("torch")
    modules = sorted(m for m in import_graph() if m.startswith(("schedc.runtime.", "schedc.cli.")) and not m.endswith("__main__"))
    code = ("import importlib, sys\nbad = []\nfor m in sys.argv[1:]:\n"
            "    for k in [k for k in sys.modules if k == 'schedc' or k.startswith('schedc.')]:\n"
            "        del sys.modules[k]\n"
            "    try:\n        importlib.import_module(m)\n"
            "    except Exception as e:\n        bad.append(f'{m}: {type(e).__name__}: {e}')\n"
            "print('\\n'.join(bad)); sys.exit(1 if bad else 0)\n")
    done = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
