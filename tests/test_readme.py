"""The README and the docs run top to bottom: their shell and Python blocks, in order, in one fresh directory.

Every fenced ```bash and ```python block of README.md, then of the pages in docs/ listed in PAGES (in
that order), is a test, run in the order it appears, all in one temporary directory (the working
directory of every block), so a block may use the files the blocks above it (or on an earlier page)
wrote. ``bash`` blocks run under ``bash -euo pipefail`` (a failing command fails the block),
``python`` blocks with this interpreter. The ``schedc`` and ``torchrun`` found first on PATH are the
installed ones beside this interpreter; the checkout's ``examples/`` is linked into the directory
(the README runs ``examples/train.py``); the schedule library is the one schedc finds itself (the
checkout's ``schedules/`` for an editable install). Other fenced blocks (toml, text) are not run. A
page in docs/ with a runnable block that PAGES does not list fails the test, and so does a relative
link (or #anchor) in any of them that leads nowhere.

Markers: HTML comments on the lines right before a block's opening fence (invisible on GitHub).

    <!-- readme-test: skip REASON -->      do not run the block: it installs packages or runs the
                                           whole suite (CI's .ci/run runs those itself), or it is a
                                           fragment that cannot run alone
    <!-- readme-test: sub "OLD" "NEW" -->  run the block with every OLD replaced by NEW (several
                                           allowed, applied in order): a smaller model, a shorter
                                           time limit, fewer steps, so that all pages run in a
                                           few minutes on two cores. OLD must occur in the
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
# run in this order, in one directory: later pages use files the earlier ones wrote
PAGES = ["README.md", "docs/cli.md", "docs/profile.md", "docs/plan.md", "docs/python-api.md", "docs/training.md",
         "docs/library.md", "docs/formats.md", "docs/results.md", "docs/development.md"]
_MARKER = re.compile(r"<!--\s*readme-test:\s*(.*?)\s*-->")
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: str = ""
    subs: list[tuple[str, str]] = field(default_factory=list)

    def runnable_code(self) -> str:
        code = self.code
        for old, new in self.subs:
            if old not in code:
                raise AssertionError(f"{self.page} line {self.line}: readme-test sub {old!r} does not occur in the block")
            code = code.replace(old, new)
        return code


def parse_readme(text: str, page: str = "README.md") -> list[Block]:
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
        block = Block(page, start + 1, lang, "\n".join(body) + "\n")
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
    raise AssertionError(f"{block.page} line {where}: unknown readme-test marker {directive!r}; "
                         'use skip REASON or sub "OLD" "NEW"')


BLOCKS = [b for page in PAGES if (ROOT / page).exists() for b in parse_readme((ROOT / page).read_text(), page)]


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
    langs = [b.lang for b in BLOCKS if not b.skip and b.page == "README.md"]
    assert langs.count("bash") >= 3 and "python" in langs
    missing = [p for p in PAGES if not (ROOT / p).exists()]
    assert not missing, f"PAGES lists pages that do not exist: {missing}"


def test_every_page_with_commands_is_run():
    unlisted = [f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md"))
                if f"docs/{p.name}" not in PAGES and parse_readme(p.read_text(), f"docs/{p.name}")]
    assert not unlisted, f"add {unlisted} to PAGES in tests/test_readme.py, so their blocks run"


_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path.read_text()).splitlines():
        if line.startswith("#"):
            slug = _slug(line.lstrip("#"))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _prose(text: str) -> str:
    """The text outside fenced blocks (a fence's contents are code, not links or headings)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _broken_links(page: Path) -> list[str]:
    bad = []
    for target in _LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target} (no heading #{anchor} in {dest.name})")
    return bad


@pytest.mark.parametrize("page", ["README.md"] + [f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md"))])
def test_links_lead_somewhere(page):
    assert not _broken_links(ROOT / page), f"{page}: broken links {_broken_links(ROOT / page)}"


def test_the_link_check_fails_on_a_dead_link(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## Two words\n\n[ok](#two-words) [ok](a.md#title) [dead](b.md) "
                                   "[gone](a.md#three)\n```text\n[in code](nowhere.md)\n```\n")
    assert _broken_links(tmp_path / "a.md") == ["b.md (no such file)", "a.md#three (no heading #three in a.md)"]


def test_markers_are_checked():
    with pytest.raises(AssertionError, match="unknown readme-test marker"):
        parse_readme("<!-- readme-test: shrink -->\n```bash\ntrue\n```\n")
    (block,) = parse_readme('<!-- readme-test: sub "--mb 99" "--mb 2" -->\n```bash\nschedc x --mb 8\n```\n')
    with pytest.raises(AssertionError, match="does not occur"):
        block.runnable_code()


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}:line{b.line}-{b.lang}" for b in BLOCKS])
def test_readme_block_runs(block: Block, workdir):
    if block.skip:
        pytest.skip(block.skip)
    if workdir["failed"] is not None:
        pytest.skip(f"the block at {workdir['failed']} failed")
    code = block.runnable_code()
    argv = ["bash", "-euo", "pipefail", "-c", code] if block.lang == "bash" else [sys.executable, "-c", code]
    try:
        out = subprocess.run(argv, cwd=workdir["dir"], env=_env(), capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        workdir["failed"] = f"{block.page} line {block.line}"
        raise
    if out.returncode != 0:
        workdir["failed"] = f"{block.page} line {block.line}"
        pytest.fail(f"{block.page} line {block.line} ({block.lang}) exited {out.returncode}\n--- code\n{code}"
                    f"--- stdout (tail)\n{out.stdout[-3000:]}\n--- stderr (tail)\n{out.stderr[-3000:]}")
