"""Strict reading and writing of torch's compute-only schedule CSV, and the JSON report beside it.

Problem: torch's ``_PipelineScheduleRuntime._load_csv`` reads one row per rank (row i = rank i,
no header), one action per cell (``3F0``, ``0I7``, ``5W2``, ``2B1``; empty = idle;
``(0F7;7B3)OVERLAP_F_B`` = several actions issued as one). Its parser is lax: a regex *match*
at the start of the cell, so ``0F0x`` silently reads as ``0F0``. schedc's files must load in
torch unchanged, and a typo in a hand-edited file must be an error that says where it is.

Method: every cell is matched in full against the compute-only grammar; known-but-unsupported
tokens (communication and FSDP actions) and common slips (no microbatch number, trailing text)
get their own message. Then the whole table is checked for what a single cell cannot show: an
action given twice, a stage on two ranks, a stage number never used. Positions are reported as
``rank r (row r+1), column c`` with 1-based rows and columns, i.e. the line and field a text
editor shows. Placement is inferred from the rank on which each stage appears.

Rows are parsed one at a time and the table is bounded as it grows (``schedc.core.limits``: bytes,
ranks, cells, actions, stage and microbatch numbers), so a hostile file fails early, at its place.

The report beside a CSV (``NAME.json``) records the CSV's SHA-256; :func:`read_report` refuses a
report whose CSV has changed since, so one run's CSV is never paired with another run's report.

Cost: linear in the number of cells. This module never imports torch.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from schedc.core import limits
from schedc.core.ir import KIND_TABLE, OVERLAP_LABELS, Action, Cell, Kind, Overlap, Schedule
from schedc.errors import SchedcError
from schedc.io.fileio import atomic_write_text, read_input, read_json, write_all

PathLike = Union[str, os.PathLike[str]]  # a Path is one

_OVERLAP = re.compile(r"\((.*)\)([A-Za-z_]*)")
_COMM = re.compile(r"\d*(UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)\d*")


@dataclass(frozen=True)
class _Grammar:
    """The cell patterns for one set of action-kind letters (schedc.core.ir.KIND_TABLE)."""

    action: re.Pattern
    no_microbatch: re.Pattern
    no_stage: re.Pattern
    trailing: re.Pattern


@functools.lru_cache(maxsize=8)
def _grammar_of(letters: str) -> _Grammar:
    k = "[" + "".join(re.escape(c) for c in letters) + "]"
    return _Grammar(action=re.compile(rf"(\d+)({k})(\d+)"), no_microbatch=re.compile(rf"(\d+)({k})"),
                    no_stage=re.compile(rf"({k})(\d+)"), trailing=re.compile(rf"(\d+{k}\d+)(.+)"))


def _grammar() -> _Grammar:
    """The patterns for the kinds registered now (cached per set of letters)."""
    return _grammar_of("".join(KIND_TABLE))
# a cell longer than this is no action (the longest real one, an OVERLAP_F_B of two actions, is ~40)
_MAX_CELL_CHARS = 200
_FORMS = "cells look like 3F0, 0I7, 5W2, 2B1, (0F7;7B3)OVERLAP_F_B, or empty for idle"


def _fail(where: str, message: str) -> SchedcError:
    return SchedcError(f"{where}: {message}" if where else message)


def _show(cell: str) -> str:
    """A cell as error messages quote it: whole when short, else its start and length."""
    return repr(cell) if len(cell) <= 40 else f"{cell[:24]!r}... ({len(cell)} characters)"


def _number(digits: str, limit: int, what: str, cell: str, where: str) -> int:
    """A stage or microbatch number of a cell, refused (without converting thousands of digits)
    when it is not below schedc's limit."""
    if len(digits) > len(str(limit)) or int(digits) >= limit:
        raise _fail(where, f"{_show(cell)}: the {what} number is too large; schedc handles {what} numbers "
                           f"0..{limit - 1}")
    return int(digits)


def parse_cell(text: str, where: str = "") -> Cell:
    """One CSV cell -> Action, Overlap or None (idle). `where` prefixes error messages."""
    cell = text.strip()
    if not cell:
        return None
    if len(cell) > _MAX_CELL_CHARS:
        raise _fail(where, f"{_show(cell)} is not a schedule cell; {_FORMS}")
    m = _OVERLAP.fullmatch(cell)
    if m:
        inner, label = m.groups()
        if label not in OVERLAP_LABELS:
            raise _fail(where, f"unknown combined action {_show(cell)}: the label after ')' must be "
                               f"{' or '.join(OVERLAP_LABELS)}")
        parts = [p.strip() for p in inner.split(";")]
        if not inner.strip() or any(not p for p in parts):
            raise _fail(where, f"{_show(cell)} has an empty action inside the parentheses; "
                               "write e.g. (0F7;7B3)OVERLAP_F_B")
        actions = []
        for p in parts:
            if p.startswith("("):
                raise _fail(where, f"{_show(cell)}: nested parentheses are not allowed")
            a = parse_cell(p, where)
            assert isinstance(a, Action)
            actions.append(a)
        if len(set(actions)) != len(actions):
            raise _fail(where, f"{_show(cell)} lists the same action twice")
        return Overlap(tuple(actions), label)
    grammar = _grammar()
    m = grammar.action.fullmatch(cell)
    if m:
        return Action(_number(m.group(1), limits.MAX_STAGES, "stage", cell, where), Kind(m.group(2)),
                      _number(m.group(3), limits.MAX_MICROBATCHES, "microbatch", cell, where))
    if _COMM.fullmatch(cell):
        raise _fail(where, f"{_show(cell)} is a communication/FSDP action; schedc reads compute-only "
                           "schedules (F, I, W, B; torch adds sends, receives and FSDP actions itself)")
    if grammar.no_microbatch.fullmatch(cell):
        raise _fail(where, f"{_show(cell)} has no microbatch number; write e.g. {cell}0")
    if grammar.no_stage.fullmatch(cell):
        raise _fail(where, f"{_show(cell)} has no stage number; write e.g. 0{cell}")
    m = grammar.trailing.fullmatch(cell)
    if m:
        raise _fail(where, f"{_show(cell)} has trailing text {m.group(2)!r} after {m.group(1)} "
                           "(torch would silently ignore it); remove it")
    if cell.upper() != cell and grammar.action.fullmatch(cell.upper()):
        raise _fail(where, f"unknown action {_show(cell)}: action kinds are upper case ({cell.upper()})")
    raise _fail(where, f"unknown action {_show(cell)}; {_FORMS}")


def _parse_plain(cell: str, action: re.Pattern) -> Optional[Action]:
    """The common cell (one action, numbers far below the limits; `action` is the grammar's
    pattern) without building its position text; None for anything else, which
    :func:`parse_cell` then reads or explains."""
    m = action.fullmatch(cell)
    if m and len(m.group(1)) < 4 and len(m.group(3)) < 6:
        return Action(int(m.group(1)), Kind(m.group(2)), int(m.group(3)))
    return None


def cell_position(rank: int, column: int) -> str:
    """Human position of a cell: 0-based rank and column index in, 1-based row/column out."""
    return f"rank {rank} (row {rank + 1}), column {column + 1}"


def _build(
    rows: list[list[Cell]],
    source: str,
    n_microbatches: Optional[int],
    placement: Optional[Sequence[int]],
    name: str = "",
) -> Schedule:
    """Checks that need the whole table (duplicates, stage on two ranks, stage gaps) and the
    inference of placement and microbatch count."""
    prefix = f"{source}: " if source else ""
    seen: dict[Action, tuple[int, int]] = {}
    owner: dict[int, tuple[int, int, Action]] = {}
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            if cell is None:
                continue
            for a in cell.parts:
                if a in seen:
                    r0, c0 = seen[a]
                    raise SchedcError(f"{prefix}{a} appears twice: at {cell_position(r0, c0)} and at "
                                      f"{cell_position(r, c)}; each action runs exactly once")
                seen[a] = (r, c)
                if a.stage in owner and owner[a.stage][0] != r:
                    r0, c0, a0 = owner[a.stage]
                    raise SchedcError(
                        f"{prefix}stage {a.stage} appears on two ranks: {a0} at {cell_position(r0, c0)} and "
                        f"{a} at {cell_position(r, c)}; a stage runs on exactly one rank")
                owner.setdefault(a.stage, (r, c, a))
    if not seen:
        raise SchedcError(f"{prefix}no actions: expected one row per rank with cells such as 0F0, 0B0")
    if placement is None:
        n_stages = max(owner) + 1
        if len(owner) < n_stages:
            # the first few gaps only: a stray huge stage number must not make this slow
            missing: list[int] = []
            s = 0
            while len(missing) < 9:
                if s not in owner:
                    missing.append(s)
                s += 1
            raise SchedcError(
                f"{prefix}stage {missing[0]} never appears, but stage {n_stages - 1} does; stages are "
                f"numbered 0..N-1 without gaps (missing: {', '.join(map(str, missing[:8]))}"
                f"{', ...' if n_stages - len(owner) > 8 else ''})")
        placement = tuple(owner[s][0] for s in range(n_stages))
    if n_microbatches is None:
        n_microbatches = max(a.microbatch for a in seen) + 1
    return Schedule(rows=rows, placement=tuple(placement), n_microbatches=n_microbatches, name=name)


def parse_csv_text(
    text: str,
    source: str = "",
    n_microbatches: Optional[int] = None,
    placement: Optional[Sequence[int]] = None,
) -> Schedule:
    """Parse CSV text (one row per rank) into a Schedule; `source` names it in errors.

    Rows are parsed one at a time and the table's size is bounded as it grows (schedc.core.limits:
    ranks, cells, actions), so a huge or hostile text fails early with one line."""
    prefix = f"{source}: " if source else ""
    if "\x00" in text:
        raise SchedcError(f"{prefix}contains NUL bytes; this is not a CSV text file")
    reader = csv.reader(io.StringIO(text), strict=True)
    rows: list[list[Cell]] = []
    n_cells = n_actions = 0
    any_cell = False
    action = _grammar().action
    try:
        for r, row in enumerate(reader):
            if r >= limits.MAX_RANKS:
                raise SchedcError(f"{prefix}row {r + 1}: more than {limits.MAX_RANKS} rows; a CSV schedule has one "
                                  f"row per rank and schedc handles at most {limits.MAX_RANKS} ranks "
                                  "(blank lines count as ranks without actions)")
            n_cells += len(row)
            if n_cells > limits.MAX_CELLS:
                raise SchedcError(f"{prefix}{cell_position(r, len(row) - 1)}: more than {limits.MAX_CELLS:,} cells; "
                                  f"schedc handles schedules of at most {limits.MAX_ACTIONS:,} actions")
            cells = [_parse_plain(cell, action) or parse_cell(cell, f"{source or '<csv>'}: {cell_position(r, c)}")
                     for c, cell in enumerate(row)]
            for cell in cells:
                if cell is not None:
                    any_cell = True
                    n_actions += len(cell.parts)
            if n_actions > limits.MAX_ACTIONS:
                raise SchedcError(f"{prefix}rank {r} (row {r + 1}): more than {limits.MAX_ACTIONS:,} actions; "
                                  "schedc handles schedules of at most that many")
            rows.append(cells)
    except csv.Error as e:
        raise SchedcError(f"{prefix}row {reader.line_num}: not valid CSV ({e}); cells are separated by "
                          "commas and need no quotes") from None
    if not any_cell:
        raise SchedcError(f"{prefix}empty file: expected one row per rank with cells such as 0F0, 0B0")
    name = Path(source).stem if source else ""
    return _build(rows, source, n_microbatches, placement, name=name)


def count_actions(path: PathLike) -> int:
    """The actions a CSV schedule names (overlap parts each), counted from its text without
    building it: what a command with a tighter bound than schedc's (``schedc trace``) checks
    before it reads the schedule. Cost: one regular-expression scan of the file."""
    text = read_input(path, "a CSV schedule").decode("utf-8", errors="replace")
    return sum(1 for _ in _grammar().action.finditer(text))


def read_csv(
    path: PathLike,
    n_microbatches: Optional[int] = None,
    placement: Optional[Sequence[int]] = None,
) -> Schedule:
    """Read a compute-only schedule CSV (schedc's or torch's ``_dump_csv``).

    Placement is inferred from where each stage appears unless given; the microbatch count is
    one more than the largest microbatch index unless given. Structural completeness
    (every F and backward present) is :func:`schedc.core.validate.validate`'s job. Only regular files
    of at most ``limits.MAX_INPUT_BYTES`` are read (:func:`schedc.io.fileio.read_input`).
    """
    path = Path(path)
    raw = read_input(path, "a CSV schedule")
    if raw.startswith(b"\xef\xbb\xbf"):
        raise SchedcError(f"{path}: starts with a UTF-8 byte-order mark (BOM); torch's _load_csv (torchtitan, NeMo "
                          f"AutoModel) fails on it ('Invalid action string: \\ufeff...'): save the file without "
                          f"BOM (e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' {path})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SchedcError(f"{path}: not a UTF-8 text file (byte {e.start}); expected a CSV schedule") from None
    del raw
    schedule = parse_csv_text(text, str(path), n_microbatches, placement)
    schedule.meta["source"] = str(path)
    return schedule


def to_csv_text(schedule: Schedule) -> str:
    """torch's compute-only CSV: one row per rank, idle cells empty, ``\\n`` line ends."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in schedule.rows:
        writer.writerow(["" if cell is None else str(cell) for cell in row])
    return out.getvalue()


def write_csv(schedule: Schedule, path: PathLike) -> None:
    """Write the schedule all-or-nothing (temporary file, then rename)."""
    atomic_write_text(path, to_csv_text(schedule))


def from_torch_order(
    order: Union[Mapping[int, Sequence[Any]], Sequence[Sequence[Any]]],
    n_microbatches: Optional[int] = None,
    placement: Optional[Sequence[int]] = None,
    name: str = "",
) -> Schedule:
    """Convert torch's ``pipeline_order`` (dict rank -> list of ``_Action | None``, or a list of
    lists, e.g. from ``get_schedule_ops``) by duck typing: ``str(action)`` is torch's notation."""
    if isinstance(order, Mapping):
        ranks = sorted(order)
        if ranks != list(range(len(ranks))):
            raise SchedcError(f"torch order: ranks must be 0..R-1, got {ranks}")
        table = [order[r] for r in ranks]
    else:
        table = list(order)
    rows = [
        [None if a is None else parse_cell(str(a), f"torch order: rank {r}, step {i}") for i, a in enumerate(row)]
        for r, row in enumerate(table)
    ]
    return _build(rows, "torch order", n_microbatches, placement, name=name)


# ---------------------------------------------------------------- the JSON report beside a CSV


def report_path(csv_path: PathLike) -> Path:
    """``NAME.json`` next to ``NAME.csv``."""
    return Path(csv_path).with_suffix(".json")


# The report records the SHA-256 of the CSV text it was written with; read_report checks it, so a
# reader never pairs one run's CSV with another run's report (a CSV rewritten after its report,
# two compiles racing on one name, a crash between the two renames).
CSV_HASH_KEY = "csv_sha256"


def csv_sha256(csv_text: Union[str, bytes]) -> str:
    data = csv_text.encode() if isinstance(csv_text, str) else csv_text
    return hashlib.sha256(data).hexdigest()


def write_report(report: Mapping[str, Any], csv_path: PathLike, csv_text: Optional[str] = None) -> Path:
    """Write `report` as JSON beside `csv_path`, all-or-nothing; returns the report's path. Given
    the CSV's text, the report records its hash (``csv_sha256``), which :func:`read_report` checks."""
    path = report_path(csv_path)
    if csv_text is not None:
        report = {**report, CSV_HASH_KEY: csv_sha256(csv_text)}
    atomic_write_text(path, report_text(report, path))
    return path


def schedule_files(schedule: Schedule, report: Mapping[str, Any], csv_path: PathLike) -> dict[Path, bytes]:
    """The CSV and its report (recording the CSV's hash) as bytes per path, CSV first, for
    :func:`schedc.io.fileio.write_all` (with other outputs of the same run, e.g. a plot)."""
    text = to_csv_text(schedule)
    path = report_path(csv_path)
    return {Path(csv_path): text.encode(),
            path: report_text({**report, CSV_HASH_KEY: csv_sha256(text)}, path).encode()}


def write_schedule(schedule: Schedule, report: Mapping[str, Any], csv_path: PathLike) -> Path:
    """Write the CSV and its report together, all-or-nothing; returns the report's path."""
    write_all(schedule_files(schedule, report, csv_path))
    return report_path(csv_path)


def report_text(report: Mapping[str, Any], path: PathLike) -> str:
    """`report` as the JSON text of the file `path` (named in the error when it has no JSON form)."""
    try:
        return json.dumps(report, indent=2, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        raise SchedcError(f"{path}: the report cannot be written as JSON: {e}") from None


def read_report(csv_path: PathLike, csv_text: Optional[Union[str, bytes]] = None) -> dict:
    """The report beside `csv_path` as a dict. When the report records the hash of its CSV, the
    CSV (`csv_text`, else the file) must match it: a report of another run is an error."""
    path = report_path(csv_path)
    if not path.exists() and not path.is_symlink():
        raise SchedcError(f"{path}: no report beside {csv_path} (schedc writes NAME.json next to NAME.csv)")
    data = read_json(path, "a schedule report")
    if not isinstance(data, dict):
        raise SchedcError(f"{path}: expected a JSON object at the top level, got {type(data).__name__}")
    recorded = data.get(CSV_HASH_KEY)
    if isinstance(recorded, str):
        if csv_text is None:
            try:
                csv_text = read_input(csv_path, "a CSV schedule")
            except SchedcError:
                return data  # no CSV to pair it with (only the report is asked for)
        if csv_sha256(csv_text) != recorded:
            raise SchedcError(f"{path}: this report belongs to another version of {csv_path} (the CSV was "
                              "rewritten after it); recompile, or delete the stale report")
    return data
