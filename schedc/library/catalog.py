"""The library's catalog: set-up names, the default set-ups, where the library lives, reading it back.

A set-up is named ``r{R}_mb{M}_mem{K}p_{loop|v}_{uniform|transformer}`` (:class:`Setup`); the name
alone determines the compile request, costs included (:meth:`Setup.profile`). :func:`find_library`
says which directory holds the library; :func:`load_entries` and :func:`find_entry` read its file
pairs (``NAME.csv`` + ``NAME.json``) back. Cost: one directory listing and one JSON read per file.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Union

from schedc.core.costs import MemoryLimit, Profile
from schedc.errors import SchedcError
from schedc.library.transformer import transformer_profile

PathLike = Union[str, Path]

INDEX_NAME = "README.md"
ENV_VAR = "SCHEDC_LIBRARY"
LIBRARY_SEED = 0
LIBRARY_OBJECTIVE = "makespan"
# Time limit (seconds) of the largest default set-up; smaller ones get proportionally less.
DEFAULT_MAX_TIME_LIMIT = 60.0
_REFERENCE_ACTIONS = 32 * 64 * 3  # actions of the largest default set-up (16 ranks, V, 64 mb)
_MIN_TIME_LIMIT = 2.0

BUILD_COMMAND = "schedc library build schedules/"

COSTS = ("uniform", "transformer")
PLACEMENTS = ("loop", "v")
_NAME_RE = re.compile(r"r(\d+)_mb(\d+)_mem(\d+(?:\.\d+)?)p_(loop|v)_(uniform|transformer)")


@dataclass(frozen=True)
class Setup:
    """One library entry: `ranks`, microbatches `mb`, `memory` ('1p', '2p', ...), `placement`
    ('loop': one stage per rank; 'v': two stages per rank in a V), `costs` ('uniform' or
    'transformer')."""

    ranks: int
    mb: int
    memory: str = "1p"
    placement: str = "loop"
    costs: str = "uniform"

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.mb < 1:
            raise SchedcError(f"library set-up: ranks and mb must be >= 1, got ranks={self.ranks} mb={self.mb}")
        if self.placement not in PLACEMENTS:
            raise SchedcError(f"library set-up: placement must be loop or v, got {self.placement!r}")
        if self.costs not in COSTS:
            raise SchedcError(f"library set-up: costs must be uniform or transformer, got {self.costs!r}")
        limit = MemoryLimit.parse(self.memory)
        if limit.kind != "relative":
            raise SchedcError(f"library set-up: memory must be Kp (e.g. 1p, 2p), got {self.memory!r}")
        object.__setattr__(self, "memory", str(limit))

    @property
    def stages_per_rank(self) -> int:
        return 2 if self.placement == "v" else 1

    @property
    def stages(self) -> int:
        return self.ranks * self.stages_per_rank

    @property
    def name(self) -> str:
        return f"r{self.ranks}_mb{self.mb}_mem{self.memory}_{self.placement}_{self.costs}"

    @property
    def n_actions(self) -> int:
        return 3 * self.stages * self.mb

    def profile(self) -> Profile:
        if self.costs == "uniform":
            return Profile.uniform(self.stages)
        return transformer_profile(self.stages)

    def sort_key(self) -> tuple:
        return (COSTS.index(self.costs), PLACEMENTS.index(self.placement), self.ranks, self.mb,
                MemoryLimit.parse(self.memory).value)

    @classmethod
    def parse(cls, name: str) -> "Setup":
        """'r8_mb16_mem1p_v_uniform' (a trailing .csv/.json is ignored) -> Setup."""
        stem = Path(str(name)).name
        for ext in (".csv", ".json"):
            if stem.endswith(ext):
                stem = stem[: -len(ext)]
        m = _NAME_RE.fullmatch(stem)
        if not m:
            raise SchedcError(f"{name!r} is not a library set-up name; names look like r8_mb16_mem1p_v_uniform "
                              "(r{ranks}_mb{microbatches}_mem{K}p_{loop|v}_{uniform|transformer})")
        setup = cls(int(m.group(1)), int(m.group(2)), m.group(3) + "p", m.group(4), m.group(5))
        if setup.name != stem:
            raise SchedcError(f"{name!r}: write the set-up as {setup.name!r} (canonical spelling)")
        return setup


def default_setups() -> list[Setup]:
    """Ranks 2, 4, 8, 16; microbatches 2R and 4R; memory 1p and 2p; loop and V; uniform and
    transformer: 64 set-ups (8 ranks x 16 microbatches is the 2R case of 8 ranks)."""
    out = []
    for costs in COSTS:
        for placement in PLACEMENTS:
            for ranks in (2, 4, 8, 16):
                for mb in (2 * ranks, 4 * ranks):
                    for memory in ("1p", "2p"):
                        out.append(Setup(ranks, mb, memory, placement, costs))
    return out


DEFAULT_SETUPS: tuple[Setup, ...] = tuple(default_setups())


def time_limit_for(setup: Setup, max_time_limit: float = DEFAULT_MAX_TIME_LIMIT) -> float:
    """Seconds for one set-up: proportional to its number of actions, `max_time_limit` for the
    largest default set-up (16 ranks, V, 64 microbatches), at least 2 s, at most `max_time_limit`."""
    scaled = max_time_limit * setup.n_actions / _REFERENCE_ACTIONS
    return round(min(max_time_limit, max(min(_MIN_TIME_LIMIT, max_time_limit), scaled)), 3)


def default_budget(setups: Iterable[Setup] = DEFAULT_SETUPS, max_time_limit: float = DEFAULT_MAX_TIME_LIMIT) -> float:
    """Upper bound on the build's solver time (seconds): the sum of the time limits."""
    return sum(time_limit_for(s, max_time_limit) for s in setups)


def select(setups: Iterable[Setup], only: Optional[str] = None) -> list[Setup]:
    """Set-ups whose name matches the glob `only` (comma-separated globs allowed)."""
    setups = list(setups)
    if not only:
        return setups
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    chosen = [s for s in setups if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]
    if not chosen:
        example = setups[0].name if setups else "r8_mb16_mem1p_v_uniform"
        raise SchedcError(f"--only {only!r} matches no set-up; names look like {example}")
    return chosen


def _package_repo_library() -> Optional[Path]:
    """``schedules/`` of the checkout this package runs from (editable installs, source trees)."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file():
        return root / "schedules"
    return None


def _installed_library() -> Optional[Path]:
    """``share/schedc/schedules`` under the installation prefixes (pyproject's data-files)."""
    import site
    import sysconfig

    prefixes = [sys.prefix, sys.base_prefix, sysconfig.get_paths().get("data", ""),
                getattr(site, "USER_BASE", "") or ""]
    for prefix in dict.fromkeys(p for p in prefixes if p):
        path = Path(prefix) / "share" / "schedc" / "schedules"
        if path.is_dir():
            return path
    return None


def find_library(directory: Optional[PathLike] = None, for_build: bool = False) -> Path:
    """The library directory: `directory` if given, else $SCHEDC_LIBRARY, else the ``schedules/``
    folder of the source checkout the package runs from, else the installed copy
    (``<prefix>/share/schedc/schedules``). With `for_build` the directory need not exist yet."""
    if directory:
        path = Path(directory)
        if not for_build and not path.is_dir():
            raise SchedcError(f"{path}: no such schedule library directory")
        return path
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env)
        if not for_build and not path.is_dir():
            raise SchedcError(f"${ENV_VAR}={env}: no such directory")
        return path
    repo = _package_repo_library()
    if repo is not None and (for_build or any(repo.glob("*.csv"))):
        return repo
    installed = _installed_library()
    if installed is not None and not for_build:
        return installed
    if for_build:
        raise SchedcError("no library directory: give one (e.g. `schedc library build schedules/`)")
    raise SchedcError(f"no schedule library found: pass --dir DIR or set ${ENV_VAR} (looked in the source "
                      "checkout's schedules/ and <prefix>/share/schedc/schedules)")


@dataclass
class Entry:
    """One library file pair as read back: its set-up, CSV path and report."""

    setup: Setup
    csv: Path
    report: dict


def load_entries(directory: PathLike) -> tuple[list[Entry], list[str]]:
    """Every ``NAME.csv`` with its report, sorted as the index lists them, and the problems met
    reading them (unparseable names, missing or unreadable reports, orphan reports)."""
    from schedc.io import csvio

    directory = Path(directory)
    entries, problems = [], []
    csvs = sorted(directory.glob("*.csv"))
    for csv_path in csvs:
        try:
            setup = Setup.parse(csv_path.name)
        except SchedcError as e:
            problems.append(f"{csv_path}: {e}")
            continue
        try:
            report = csvio.read_report(csv_path)
        except SchedcError as e:
            problems.append(str(e))
            continue
        entries.append(Entry(setup, csv_path, report))
    stems = {p.stem for p in csvs}
    for json_path in sorted(directory.glob("*.json")):
        if json_path.stem not in stems:
            problems.append(f"{json_path}: a report without its schedule {json_path.stem}.csv; delete it or rebuild")
    entries.sort(key=lambda e: e.setup.sort_key())
    return entries, problems


def find_entry(name: str, directory: Optional[PathLike] = None) -> Entry:
    """The entry called `name` (with or without .csv) in the library."""
    import difflib

    from schedc.io import csvio

    lib = find_library(directory)
    stem = Path(name).name
    if stem.endswith(".csv") or stem.endswith(".json"):
        stem = stem.rsplit(".", 1)[0]
    csv_path = lib / f"{stem}.csv"
    if not csv_path.is_file():
        names = sorted(p.stem for p in lib.glob("*.csv"))
        close = difflib.get_close_matches(stem, names, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else "; `schedc library list` shows them"
        raise SchedcError(f"{stem}: no such schedule in {lib}{hint}")
    return Entry(Setup.parse(stem), csv_path, csvio.read_report(csv_path))
