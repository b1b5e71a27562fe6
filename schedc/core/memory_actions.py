"""Memory actions: what happens to one stage's activations for one microbatch between its F and
its backward.

Problem: torch's CSV says the order of F, I, W and B, not where a microbatch's activations live
while the stage waits for its backward. A plan may send some of them to host memory and fetch
them back before they are needed (offload), or not keep them at all and run that microbatch's
forward again inside its backward (recompute). Those choices must travel beside the CSV (in the
report and the plan, ``"memory_actions"``), be checked against it before anything runs, and be
run by schedc's runtime (:mod:`schedc.runtime.offload`) exactly as written.

Method: one :class:`MemoryAction` per (stage, microbatch) that does not keep:

- ``"keep"`` (the default, also allowed explicitly): the activations stay on the device.
- ``"offload"``: the tensors the stage's forward saves for backward for that microbatch go to
  host memory after its F, and come back when the stage's rank *starts* the action named by
  ``fetch_at`` (a compute action of the CSV, torch's notation, e.g. ``"1F5"``). The fetch point
  must be on the same rank, after the offloaded F and before that microbatch's I (or B); the
  default is the action just before it on that rank. The bytes are off the device from the end
  of the copy out to the start of the fetch. ``fraction`` (default 1: all of them) is the share
  of the microbatch's offloadable bytes that moves, the largest saved tensors first: a copy of
  half the bytes takes half the link's time, so a link too slow to move every microbatch whole
  in the time a stage holds it can still move part of each (Megatron's
  ``activation_offload_fraction`` is the same lever, one value for a whole run). ``room_for``
  (optional) names a later F of the same rank that starts only once this copy out has ended:
  an F that needs the room the copy makes waits for it rather than run over the cap (a rank's
  first forwards come faster than a link moves their bytes; the wait is what lets them fit).
  ``after: "I"`` moves the same bytes between the split backward's I and its W instead: torch's
  I keeps the whole graph for W (``retain_graph``), so a stage that defers W holds them there;
  the copy out starts when the I ends, the fetch at ``fetch_at`` (an action after the I and
  before the W; default the one just before the W), and the W waits for it. ``refetch_at``
  beside an offload after F moves them both ways: out after the F and back at ``fetch_at`` for
  the I, out again after the I and back at ``refetch_at`` for the W.
- ``"recompute"``: that microbatch's forward on that stage runs under checkpointing, so it keeps
  only the stage's input, and its backward runs the forward again. The CSV must run that
  backward as B: torch's split backward keeps the graph from I to W and, on a checkpointed
  graph, recomputes the forward in I and again for each weight group W differentiates
  (measured on torch 2.14: 1 + 4 forwards for a stage of four weighted layers), which no cost
  model would count. Stage 0 is the exception torch makes: its I runs nothing and its W the
  whole backward, so it recomputes once and may run I and W.

The JSON form is a list of small objects (docs/formats.md, "Memory actions")::

    "memory_actions": [{"stage": 1, "microbatch": 3, "action": "offload", "fetch_at": "1F5"},
                       {"stage": 0, "microbatch": 1, "action": "offload", "fetch_at": "0W0", "fraction": 0.5},
                       {"stage": 0, "microbatch": 0, "action": "recompute"}]

:func:`parse_memory_actions` checks its structure (types, names, duplicates) and
:func:`check_memory_actions` checks it against a :class:`~schedc.core.ir.Schedule` and fills in
the default fetch points. Every refusal is one :class:`~schedc.errors.SchedcError` naming the
entry, its field and what to give instead. No torch import: core runs without torch.

Cost: linear in the schedule's actions plus the entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from schedc.core.ir import KIND_TABLE, Action, Kind, Schedule
from schedc.errors import SchedcError, shown

MEMORY_ACTIONS = ("keep", "offload", "recompute")
_FIELDS = ("stage", "microbatch", "action", "fetch_at", "fraction", "room_for", "after", "refetch_at")
AFTER = ("F", "I")  # an offload's copy out follows its F (the default) or its I


@dataclass(frozen=True)
class MemoryAction:
    """The memory action of one (stage, microbatch); ``fetch_at``, ``fraction``, ``room_for`` and
    ``after`` only for an offload (``fetch_at`` None: the action just before its I or B on the
    stage's rank, or before its W after I, filled in by :func:`check_memory_actions`;
    ``fraction``: the share of its offloadable bytes that moves; ``room_for``: the F that waits
    for its copy out, if any; ``after``: "F", the copy out follows the forward and the bytes are
    back for I, or "I", it follows the split backward's I and they are back for W;
    ``refetch_at``: after F only, the bytes move out again after the I and come back at that
    action, for the W)."""

    stage: int
    microbatch: int
    action: str
    fetch_at: Optional[Action] = None
    fraction: float = 1.0
    room_for: Optional[Action] = None
    after: str = "F"
    refetch_at: Optional[Action] = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {"stage": self.stage, "microbatch": self.microbatch, "action": self.action}
        if self.fetch_at is not None:
            out["fetch_at"] = str(self.fetch_at)
        if self.fraction != 1.0:
            out["fraction"] = self.fraction
        if self.room_for is not None:
            out["room_for"] = str(self.room_for)
        if self.after != "F":
            out["after"] = self.after
        if self.refetch_at is not None:
            out["refetch_at"] = str(self.refetch_at)
        return out


class PlannedActions(list):
    """Parsed memory actions that remember the file they came from (a plan's), so that a check
    against a CSV names both: ``plan.json (against s.csv): memory_actions[0] ...``; and, where
    some recompute, the stages' checkpointed costs the file records (``recompute``, a
    :class:`~schedc.core.costs.Profile`), which schedc.core.simulate then times them with."""

    def __init__(self, actions: Iterable[MemoryAction], source: str, recompute: Any = None):
        super().__init__(actions)
        self.source = source
        self.recompute = recompute


def recorded_recompute(report: Any, where: str):
    """The stages' checkpointed costs a plan or report records for its recomputed microbatches
    (``"offload"."recompute_profile"``) as a :class:`~schedc.core.costs.Profile`, or None where it
    records none; a malformed one is one SchedcError naming `where`."""
    from pydantic import ValidationError

    from schedc.core.costs import Profile, describe_validation_error

    offload = report.get("offload") if isinstance(report, dict) else None
    recorded = offload.get("recompute_profile") if isinstance(offload, dict) else None
    if recorded is None:
        return None
    try:
        return Profile.model_validate(recorded)
    except ValidationError as e:
        raise SchedcError(f"{where}: offload.recompute_profile is not a profile: "
                          f"{describe_validation_error(e)}") from None


def to_json(actions: Iterable[MemoryAction]) -> list[dict]:
    """The ``"memory_actions"`` list of a report or plan, sorted by (stage, microbatch)."""
    return [a.to_json() for a in sorted(actions, key=lambda a: (a.stage, a.microbatch))]


def _entry(where: str, i: int, entry: Any) -> str:
    """``FILE: memory_actions[i] (stage s, microbatch m)``: where an entry's message starts."""
    head = f"{where}: memory_actions[{i}]" if where else f"memory_actions[{i}]"
    if isinstance(entry, dict) and all(isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool)
                                       for k in ("stage", "microbatch")):
        return f"{head} (stage {entry['stage']}, microbatch {entry['microbatch']})"
    return head


def _integer(where: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SchedcError(f"{where}: \"{name}\" must be an integer >= 0, got {shown(value)}")
    return value


def parse_fetch_at(text: Any, where: str = "fetch_at", name: str = "fetch_at") -> Action:
    """A CSV cell in torch's notation (``"1F5"``: stage 1, F, microbatch 5) as an Action; `name`
    is the field it came from."""
    letters = "".join(re.escape(k) for k in KIND_TABLE)  # the kinds registered now (schedc.core.ir)
    m = re.fullmatch(rf"(\d+)([{letters}])(\d+)", text) if isinstance(text, str) else None
    if m is None:
        raise SchedcError(f"{where}: \"{name}\" must be one action of the CSV in torch's notation (e.g. \"1F5\": "
                          f"stage 1, forward, microbatch 5), got {shown(text)}")
    return Action(int(m.group(1)), m.group(2), int(m.group(3)))


def parse_memory_actions(data: Any, where: str = "") -> list[MemoryAction]:
    """The entries of a ``"memory_actions"`` list, structure checked: each an object with
    ``stage`` and ``microbatch`` (integers >= 0), ``action`` (one of :data:`MEMORY_ACTIONS`) and,
    for an offload only, ``fetch_at`` and ``fraction`` (a number in (0, 1]); no other field, no
    (stage, microbatch) twice. ``"keep"`` entries are dropped (keeping is the default). Already
    parsed :class:`MemoryAction` objects pass through the same checks. SchedcError naming `where` (the file), the entry and the field."""
    return [a for _, a in _parse(data, where)]


def _parse(data: Any, where: str) -> list[tuple[int, MemoryAction]]:
    """The entries other than keep, each with its index in `data` (what messages name)."""
    if not isinstance(data, (list, tuple)):
        raise SchedcError(f"{where + ': ' if where else ''}memory_actions: expected a list of {{\"stage\", \"microbatch\", \"action\"}} objects, got "
                          f"{'null' if data is None else type(data).__name__}")
    out: list[tuple[int, MemoryAction]] = []
    seen: dict[tuple[int, int], int] = {}
    for i, entry in enumerate(data):
        if isinstance(entry, MemoryAction):
            entry = entry.to_json()
        at = _entry(where, i, entry)
        if not isinstance(entry, dict):
            raise SchedcError(f"{at}: expected an object {{\"stage\", \"microbatch\", \"action\"}}, got "
                              f"{'null' if entry is None else type(entry).__name__}")
        unknown = [k for k in entry if k not in _FIELDS]
        if unknown:
            raise SchedcError(f"{at}: unknown field {shown(unknown[0])}; the fields are {', '.join(_FIELDS)}")
        for name in ("stage", "microbatch", "action"):
            if name not in entry:
                raise SchedcError(f"{at}: no \"{name}\"; give stage, microbatch and action")
        stage = _integer(at, "stage", entry["stage"])
        microbatch = _integer(at, "microbatch", entry["microbatch"])
        action = entry["action"]
        if action not in MEMORY_ACTIONS:
            raise SchedcError(f"{at}: \"action\" {shown(action)} is not one of {', '.join(MEMORY_ACTIONS)}")
        fetch_at = entry.get("fetch_at")
        for name in ("fetch_at", "fraction", "room_for", "after", "refetch_at"):
            if entry.get(name) is not None and action != "offload":
                raise SchedcError(f"{at}: \"{name}\" is for an offload only; drop it from a {action}")
        fraction = entry.get("fraction", 1.0)
        if fraction is None:
            fraction = 1.0
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise SchedcError(f"{at}: \"fraction\" must be a number in (0, 1] (the share of the microbatch's "
                              f"bytes that moves; 1 moves them all), got {shown(fraction)}")
        after = entry.get("after", "F")
        after = "F" if after is None else after
        if after not in AFTER:
            raise SchedcError(f"{at}: \"after\" must be \"F\" (the copy out follows the forward, the bytes are "
                              f"back for I) or \"I\" (it follows the I, they are back for W), got {shown(after)}")
        for name in ("room_for", "refetch_at"):
            if after == "I" and entry.get(name) is not None:
                raise SchedcError(f"{at}: \"{name}\" is for an offload after F; drop it, or the \"after\"")
        key = (stage, microbatch)
        if key in seen:
            raise SchedcError(f"{at}: stage {stage}, microbatch {microbatch} already has an entry "
                              f"(memory_actions[{seen[key]}]); give one per (stage, microbatch)")
        seen[key] = i
        if action != "keep":
            out.append((i, MemoryAction(stage, microbatch, action,
                                        None if fetch_at is None else parse_fetch_at(fetch_at, at), float(fraction),
                                        None if entry.get("room_for") is None
                                        else parse_fetch_at(entry["room_for"], at, "room_for"), after,
                                        None if entry.get("refetch_at") is None
                                        else parse_fetch_at(entry["refetch_at"], at, "refetch_at"))))
    return out


def check_memory_actions(
    actions: Iterable[MemoryAction] | list, schedule: Schedule, where: str = ""
) -> dict[tuple[int, int], MemoryAction]:
    """The actions checked against `schedule`, by (stage, microbatch), with every offload's fetch
    point filled in. `actions` may be the JSON list itself (parsed first). Refused in one
    SchedcError naming the entry: a stage or microbatch the CSV does not have, a fetch point the
    CSV does not run, runs on another rank, or runs before the offloaded F or at or after its
    I/B (or an offload with no action between them to fetch at), and a recompute of a
    microbatch the CSV runs as I and W on a stage other than 0. Actions read from a plan
    (:class:`PlannedActions`) are named by their file, `where` (the CSV) beside it."""
    source = getattr(actions, "source", None)
    if source:
        where = f"{source} (against {where})" if where else source
    parsed = _parse(actions, where)
    pos: dict[Action, tuple[int, int]] = {}  # action -> (rank, index in the rank's actions)
    for rank in range(schedule.n_ranks):
        for k, a in enumerate(schedule.actions(rank)):
            pos.setdefault(a, (rank, k))
    out: dict[tuple[int, int], MemoryAction] = {}
    for i, ma in parsed:
        at = _entry(where, i, ma.to_json())
        if ma.stage >= schedule.n_stages:
            raise SchedcError(f"{at}: the CSV has stages 0..{schedule.n_stages - 1}; give one of them")
        if ma.microbatch >= schedule.n_microbatches:
            raise SchedcError(f"{at}: the CSV runs microbatches 0..{schedule.n_microbatches - 1}; give one of them")
        forward = Action(ma.stage, "F", ma.microbatch)
        backward = next((b for b in (Action(ma.stage, "I", ma.microbatch), Action(ma.stage, "B", ma.microbatch))
                         if b in pos), None)
        if forward not in pos or backward is None:
            raise SchedcError(f"{at}: the CSV runs no {forward} or no backward (I or B) of it; a memory action needs "
                              f"both")
        rank, f_at = pos[forward]
        b_at = pos[backward][1]
        if ma.action == "recompute":
            if backward.kind == "I" and ma.stage != 0:
                raise SchedcError(f"{at}: the CSV runs this backward as I and W ({backward}), and torch's split "
                                  f"backward recomputes a checkpointed forward in I and again for each weight group "
                                  f"in W; give a CSV that runs it as B ({ma.stage}B{ma.microbatch}), or offload or "
                                  f"keep it")
            out[(ma.stage, ma.microbatch)] = ma
            continue
        row = schedule.actions(rank)
        if ma.after == "I":
            out[(ma.stage, ma.microbatch)] = _after_i(at, ma, pos, backward, rank, row)
            continue
        if ma.fetch_at is None:
            if b_at - f_at < 2:
                raise SchedcError(f"{at}: {backward} follows {forward} directly on rank {rank}, so there is no "
                                  f"action to fetch at; keep this microbatch")
            fetch = row[b_at - 1]
        else:
            fetch = ma.fetch_at
            if fetch not in pos:
                raise SchedcError(f"{at}: \"fetch_at\" {str(fetch)!r} is not an action of the CSV; name an action "
                                  f"of rank {rank} between {forward} and {backward}")
            fetch_rank, fetch_index = pos[fetch]
            if fetch_rank != rank:
                raise SchedcError(f"{at}: \"fetch_at\" {str(fetch)!r} runs on rank {fetch_rank}, not on rank "
                                  f"{rank} that holds stage {ma.stage}; name an action of rank {rank} between "
                                  f"{forward} and {backward}")
            if not f_at < fetch_index < b_at:
                side = f"at or before {forward}" if fetch_index <= f_at else f"at or after {backward}"
                raise SchedcError(f"{at}: \"fetch_at\" {str(fetch)!r} runs {side} on rank {rank}; name an action "
                                  f"between {forward} and {backward}")
        if ma.room_for is not None:
            waits = pos.get(ma.room_for)
            if ma.room_for.kind != Kind.F or waits is None or waits[0] != rank or waits[1] <= f_at:
                raise SchedcError(f"{at}: \"room_for\" {str(ma.room_for)!r} must be a forward of the CSV on rank "
                                  f"{rank}, after {forward}; name a later F of rank {rank} or drop the field")
        refetch = None if ma.refetch_at is None else _after_i(at, ma, pos, backward, rank, row, ma.refetch_at).fetch_at
        out[(ma.stage, ma.microbatch)] = MemoryAction(ma.stage, ma.microbatch, "offload", fetch, ma.fraction,
                                                      ma.room_for, "F", refetch)
    return out


def _after_i(at: str, ma: MemoryAction, pos: dict, backward: Action, rank: int, row: list,
             given: Optional[Action] = None) -> MemoryAction:
    """An offload after I checked against the CSV, its fetch point filled in: the CSV runs the
    backward split (I, then W on the same rank), and the fetch (`given`, else ``fetch_at``) is an
    action of that rank after the I and before the W (default: the one just before the W)."""
    name = "refetch_at" if given is not None else "fetch_at"
    given = given if given is not None else ma.fetch_at
    weight = Action(ma.stage, Kind.W, ma.microbatch)
    if backward.kind != Kind.I or weight not in pos:
        raise SchedcError(f"{at}: an offload after I needs the CSV to run this backward split, as "
                          f"{ma.stage}I{ma.microbatch} then {weight}; give \"after\": \"F\", or a CSV that splits it")
    i_at, w_at = pos[backward][1], pos[weight][1]
    if given is None:
        if w_at - i_at < 2:
            raise SchedcError(f"{at}: {weight} follows {backward} directly on rank {rank}, so there is no action to "
                              f"fetch at; keep this microbatch or offload it after F")
        fetch = row[w_at - 1]
    else:
        fetch = given
        where = pos.get(fetch)
        if where is None or where[0] != rank or not i_at < where[1] < w_at:
            raise SchedcError(f"{at}: \"{name}\" {str(fetch)!r} must be an action of rank {rank} between "
                              f"{backward} and {weight} (what moves after I is fetched back for its W)")
    return MemoryAction(ma.stage, ma.microbatch, "offload", fetch, ma.fraction, None, "I")
