"""The longest functions of the schedc package, as a table: `python scripts/longest_functions.py [N]`.

Lines run from ``def`` to the function's last line ("total") and, without its docstring, "code":
a fully documented public function (parameters, returns, raises, an example) is long on paper
without being long to read.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "schedc"


def function_lengths(package: Path = PACKAGE) -> list[tuple[int, int, str]]:
    """(code lines, total lines, "path::name") for every function and method, longest code first."""
    rows = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            total = node.end_lineno - node.lineno + 1
            first = node.body[0]
            is_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                and isinstance(first.value.value, str)
            code = total - (first.end_lineno - first.lineno + 1 if is_doc else 0)
            rows.append((code, total, f"{path.relative_to(package.parent)}::{node.name}"))
    return sorted(rows, reverse=True)


def main(n: int = 10) -> None:
    rows = function_lengths()
    print(f"{len(rows)} functions; over 80 lines: {sum(t > 80 for _, t, _ in rows)} counting docstrings, "
          f"{sum(c > 80 for c, _, _ in rows)} without\n")
    print("| code | total | function |\n|---:|---:|---|")
    for code, total, name in rows[:n]:
        print(f"| {code} | {total} | `{name}` |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
