"""The README runs top to bottom: its shell and Python blocks, in order, in one fresh directory.

Every fenced ```bash and ```python block of README.md is a test, run in the order it appears, all
in one temporary directory (the working directory of every block), so a block may use the files
the blocks above it wrote. ``bash`` blocks run under ``bash -euo pipefail`` (a failing command fails
the block), ``python`` blocks with this interpreter. The ``schedc`` and ``torchrun`` found first on
PATH are the installed ones beside this interpreter; the checkout's ``examples/`` is linked into the
directory (the README runs ``examples/train.py``); the schedule library is the one schedc finds
itself (the checkout's ``schedules/`` for an editable install). Other fenced blocks (toml, text)
are not run.

Markers: HTML comments on the lines right before a block's opening fence (invisible on GitHub).

    <!-- readme-test: skip REASON -->      do not run the block: it installs packages or runs the
                                           whole suite (CI's .ci/run runs those itself), or it is a
                                           fragment that cannot run alone
    <!-- readme-test: sub "OLD" "NEW" -->  run the block with every OLD replaced by NEW (several
                                           allowed, applied in order): a smaller model, a shorter
                                           time limit, fewer steps, so that the whole README runs in
                                           about two minutes on two cores. OLD must occur in the
                                           block, so a marker left behind by an edit fails.

A marker with any other directive is an error. When a block fails, the blocks after it are skipped
(they would fail for the same reason).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_MARKER = re.compile(r"<!--\s*readme-test:\s*(.*?)\s*-->")
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: str = ""
    subs: list[tuple[str, str]] = field(default_factory=list)

    def runnable_code(self) -> str:
        code = self.code
        for old, new in self.subs:
            if old not in code:
                raise AssertionError(f"README.md line {self.line}: readme-test sub {old!r} does not occur in the block")
            code = code.replace(old, new)
        return code


def parse_readme(text: str) -> list[Block]:
    """The bash and python blocks with their markers, in order."""
    lines = text.splitlines()
    blocks, pending, i = [], [], 0
    while i < len(lines):
        m = _MARKER.fullmatch(lines[i].strip())
        if m:
            pending.append((i + 1, m.group(1)))
            i += 1
            continue
        fence = _FENCE.match(lines[i])
        if not fence:
            if lines[i].strip():
                pending = []  # a marker belongs to the block right after it
            i += 1
            continue
        start, lang = i, fence.group(1)
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        block = Block(start + 1, lang, "\n".join(body) + "\n")
        for where, directive in pending:
            _apply(block, where, directive)
        pending = []
        if lang in ("bash", "python"):
            blocks.append(block)
    return blocks


def _apply(block: Block, where: int, directive: str) -> None:
    if directive.startswith("skip"):
        block.skip = directive[4:].strip() or "marked skip"
        return
    if directive.startswith("sub "):
        parts = shlex.split(directive[4:])
        if len(parts) == 2:
            block.subs.append((parts[0], parts[1]))
            return
    raise AssertionError(f"README.md line {where}: unknown readme-test marker {directive!r}; "
                         'use skip REASON or sub "OLD" "NEW"')


BLOCKS = parse_readme(README.read_text())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("readme")
    (d / "examples").symlink_to(ROOT / "examples")
    return {"dir": d, "failed": None}


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("SCHEDC_LIBRARY", None)
    return env


def test_the_readme_has_runnable_blocks():
    langs = [b.lang for b in BLOCKS if not b.skip]
    assert langs.count("bash") >= 3 and "python" in langs


def test_markers_are_checked():
    with pytest.raises(AssertionError, match="unknown readme-test marker"):
        parse_readme("<!-- readme-test: shrink -->\n```bash\ntrue\n```\n")
    (block,) = parse_readme('<!-- readme-test: sub "--mb 99" "--mb 2" -->\n```bash\nschedc x --mb 8\n```\n')
    with pytest.raises(AssertionError, match="does not occur"):
        block.runnable_code()


@pytest.mark.parametrize("block", BLOCKS, ids=[f"line{b.line}-{b.lang}" for b in BLOCKS])
def test_readme_block_runs(block: Block, workdir):
    if block.skip:
        pytest.skip(block.skip)
    if workdir["failed"] is not None:
        pytest.skip(f"the block at README.md line {workdir['failed']} failed")
    code = block.runnable_code()
    argv = ["bash", "-euo", "pipefail", "-c", code] if block.lang == "bash" else [sys.executable, "-c", code]
    try:
        out = subprocess.run(argv, cwd=workdir["dir"], env=_env(), capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        workdir["failed"] = block.line
        raise
    if out.returncode != 0:
        workdir["failed"] = block.line
        pytest.fail(f"README.md line {block.line} ({block.lang}) exited {out.returncode}\n--- code\n{code}"
                    f"--- stdout (tail)\n{out.stdout[-3000:]}\n--- stderr (tail)\n{out.stderr[-3000:]}")
