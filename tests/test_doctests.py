"""The examples in the public modules' docstrings run, and print what they show.

Every ``>>>`` example of the front door (schedc.api, schedc.results, schedc.choices, schedc.planning) is one test,
collected with the standard library's doctest finder and run in a temporary directory; so
``python -m pytest tests`` (CI) checks the documentation as well as the code. The examples are
small (2-4 stages, time limits of seconds, no torch), so the whole set runs in seconds.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

PUBLIC_MODULES = ("schedc", "schedc.api", "schedc.results", "schedc.choices", "schedc.planning",
                  "schedc.planning.planner")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _examples() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder()
    found = []
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        found += [t for t in finder.find(module, name) if t.examples and t.name.startswith(name)]
    return sorted({t.name: t for t in found}.values(), key=lambda t: t.name)


EXAMPLES = _examples()


def test_every_public_function_shows_an_example():
    import schedc

    shown = {t.name.rsplit(".", 1)[-1] for t in EXAMPLES}
    functions = [n for n in schedc.__all__ if callable(getattr(schedc, n)) and n[0].islower()]
    assert functions and not [n for n in functions if n not in shown and n != "read_report"]


@pytest.mark.parametrize("test", EXAMPLES, ids=[t.name for t in EXAMPLES])
def test_docstring_example(test, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    report: list[str] = []
    runner = doctest.DocTestRunner(verbose=False, optionflags=FLAGS)
    result = runner.run(test, out=report.append)
    assert result.attempted and not result.failed, "".join(report)
