"""The flags of offload to host memory, shared by `schedc compile`, `simulate` and `validate`.

Problem: the link (schedc.core.host_link.HostLink) and a report's memory actions reach three
commands; each value must be read the same way everywhere and a bad one refused in one line
naming its flag. Method: ``--host-bandwidth`` takes the byte sizes ``--memory`` takes, per second
(``50GB/s``, ``46.6GiB/s``, or a plain number of bytes per second); ``--host-latency`` seconds
(``10us``, ``0.01ms``, ``1e-5``); ``--host-memory`` a size per node or ``none``;
``--link-shared-by`` a whole number. ``--memory-actions FILE`` reads the ``"memory_actions"``
of a report or plan, or a bare JSON list. Cost: O(1) per flag, the file's size for the actions.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from typing import Optional

from schedc.cli import common
from schedc.core.costs import size_unit
from schedc.core.host_link import DEFAULT_BANDWIDTH, DEFAULT_LATENCY, HostLink
from schedc.errors import SchedcError, shown

LINK_FLAGS = ("host_bandwidth", "host_latency", "host_memory", "link_shared_by")
_NUMBER = r"([+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)"
_SECONDS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def add_link_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("host link (offload to host memory; schedc.core.host_link)")
    g.add_argument("--host-bandwidth", metavar="RATE",
                   help=f"one GPU's link to host memory, each direction: a size per second as --memory takes sizes "
                        f"(50GB/s, 46.6GiB/s) or bytes per second (default {DEFAULT_BANDWIDTH / 1e9:g}GB/s, PCIe "
                        f"Gen5 x16)")
    g.add_argument("--host-latency", metavar="TIME",
                   help=f"per copy: seconds, or with a unit (10us, 0.01ms) (default {DEFAULT_LATENCY * 1e6:g}us)")
    g.add_argument("--host-memory", metavar="SIZE",
                   help="pinned host memory one node (8 ranks) may give offload, e.g. 1TiB (default none: no cap)")
    g.add_argument("--link-shared-by", metavar="N",
                   help="GPUs behind one PCIe switch that split its bandwidth (default 1)")


def add_memory_actions_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--memory-actions", metavar="FILE.json",
                   help="run the CSV with the offloads of a report or plan (its \"memory_actions\", e.g. from "
                        "`schedc compile --offload auto`) or of a JSON list, over the --host-* link")


def _seconds(text: str) -> float:
    t = str(text).strip().lower().replace(" ", "")
    m = re.fullmatch(_NUMBER + r"(s|ms|us|ns)?", t) if len(t) <= 100 else None
    value = float(m.group(1)) * _SECONDS[m.group(2) or ""] if m else math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise SchedcError(f"--host-latency: expected a time >= 0 per copy, e.g. 10us, 0.01ms or 1e-5 (seconds), "
                          f"got {shown(text)}")
    return value


def _size(text: str) -> float:
    t = str(text).strip().lower().replace(" ", "")
    if t in ("none", "inf", "unlimited"):
        return math.inf
    m = re.fullmatch(_NUMBER + r"([kmgt]i?b?|b)", t) if len(t) <= 100 else None
    value = float(m.group(1)) * size_unit(m.group(2)) if m and m.group(2) != "i" else math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise SchedcError(f"--host-memory: expected a size of pinned memory per node, e.g. 1TiB or 512GB, or none, "
                          f"got {shown(text)}")
    return value


def _count(text: str) -> int:
    t = str(text).strip()
    if not re.fullmatch(r"\d{1,6}", t) or int(t) < 1:
        raise SchedcError(f"--link-shared-by: expected a whole number of GPUs >= 1, got {shown(text)}")
    return int(t)


def link_given(args) -> bool:
    return any(getattr(args, name, None) is not None for name in LINK_FLAGS)


def link_from_args(args, recorded: Optional[dict] = None) -> HostLink:
    """The HostLink the flags describe; where a flag is not given, the link a report recorded
    (its ``assumes``, `recorded`), else the defaults."""
    kwargs: dict = {}
    recorded = recorded if isinstance(recorded, dict) else {}
    for field, key in (("bandwidth", "host_bandwidth"), ("latency", "host_latency"), ("host_memory", "host_memory"),
                       ("shared_by", "host_link_shared_by"), ("ranks_per_node", "ranks_per_node")):
        if key in recorded:
            kwargs[field] = recorded[key]
    if args.host_bandwidth is not None:
        kwargs["bandwidth"] = common.rate(args.host_bandwidth, "--host-bandwidth")
    if args.host_latency is not None:
        kwargs["latency"] = _seconds(args.host_latency)
    if args.host_memory is not None:
        kwargs["host_memory"] = _size(args.host_memory)
    if args.link_shared_by is not None:
        kwargs["shared_by"] = _count(args.link_shared_by)
    return HostLink(**kwargs)


def read_memory_actions(path: Optional[str]):
    """(actions, the report) from `path` (None: (None, None)): the actions parsed and
    remembering their file, so that a check against a CSV names it
    (schedc.core.memory_actions.PlannedActions); the report or plan they came from (None for a
    bare list), whose ``assumes`` records the link."""
    from schedc.core.memory_actions import PlannedActions, parse_memory_actions, recorded_recompute

    if path is None:
        return None, None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise SchedcError(f"--memory-actions {path}: cannot read it ({e.strerror or e})") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise SchedcError(f"--memory-actions {path}: not JSON ({e}); give a report or plan with \"memory_actions\", "
                          f"or a JSON list") from None
    if isinstance(data, dict):
        if "memory_actions" not in data:
            raise SchedcError(f"--memory-actions {path}: the object has no \"memory_actions\"; give a report of "
                              f"`schedc compile --offload auto`, a plan, or a JSON list")
        report, data = data, data["memory_actions"]
    else:
        report = None
    return PlannedActions(parse_memory_actions(data, where=str(path)), source=str(path),
                          recompute=recorded_recompute(report, f"--memory-actions {path}")), report


def link_and_actions(args):
    """(memory actions or None, HostLink or None) from --memory-actions and the link flags; the
    link flags alone are refused (they only time the copies of memory actions)."""
    actions, report = read_memory_actions(args.memory_actions)
    recorded = report.get("assumes") if report is not None else None
    if actions is None:
        if link_given(args):
            raise SchedcError("the --host-* and --link-shared-by flags time the copies of memory "
                              "actions; give --memory-actions FILE.json with them")
        return None, None
    try:
        return actions, link_from_args(args, recorded)
    except SchedcError as e:
        if any(getattr(args, name, None) is not None for name in LINK_FLAGS):
            raise
        raise SchedcError(f"--memory-actions {args.memory_actions}: its \"assumes\" {e}") from None


def validate_note(args, schedule) -> str:
    """`schedc validate --memory-actions`: the actions checked against the CSV, and, where costs
    are known (the report the actions came from, else the files beside the CSV), whether the CSV
    fits with them under the report's memory limit: what validate prints, or one SchedcError."""
    from pydantic import ValidationError

    from schedc.api import simulate
    from schedc.cli.common import costs_beside, printable
    from schedc.core.costs import MemoryLimit, Profile, describe_validation_error
    from schedc.core.formatting import format_memory
    from schedc.core.memory_actions import PlannedActions, check_memory_actions

    actions, link = link_and_actions(args)
    if actions is None:
        return ""
    where = f"{actions.source} (against {args.file})"
    checked = check_memory_actions(PlannedActions(actions, where, actions.recompute), schedule)
    _, report = read_memory_actions(args.memory_actions)
    inputs = report.get("inputs") if isinstance(report, dict) else None
    inputs = inputs if isinstance(inputs, dict) else {}
    profile: Optional[Profile]
    if isinstance(inputs.get("costs"), dict):
        try:
            profile = Profile.model_validate(inputs["costs"])
        except ValidationError as e:
            raise SchedcError(f"--memory-actions {args.memory_actions}: inputs.costs is not a profile: "
                              f"{describe_validation_error(e)}") from None
    else:
        beside = costs_beside(args.file, "validate")
        profile = beside[0] if beside else None
    n = len(checked)
    if profile is None:
        return f"{n} memory action(s) match the CSV (no costs known: the fit was not checked)"
    if not isinstance(inputs.get("memory_limit"), str):
        return f"{n} memory action(s) match the CSV (no memory limit recorded with them: the fit was not checked)"
    memory = MemoryLimit.parse(inputs["memory_limit"])
    sim = simulate(schedule, profile=profile, memory=memory, host_link=link,
                   memory_actions=PlannedActions(checked.values(), where, actions.recompute))
    if not sim.fits:
        ranks = sim.ranks_over
        over = (f"--memory {memory} on rank(s) {', '.join(map(str, ranks))} (peak "
                f"{format_memory(max(sim.peak_memory[r] for r in ranks))}, cap {format_memory(sim.memory_limit[ranks[0]])})"
                if ranks else f"the pinned host memory of a node (peak {format_memory(max(sim.host_peak))}, "
                              f"--host-memory {format_memory(link.host_memory)})")
        raise SchedcError(f"{printable(where)}: with these memory actions the CSV exceeds {over}; compile it again "
                          f"with --offload auto for this link")
    return (f"{n} memory action(s) match the CSV and it fits --memory {memory} with them "
            f"(makespan {sim.makespan:g})")


def against(actions, path):
    """The memory actions as checked against the CSV at `path` (their messages name both files)."""
    if actions is None:
        return None
    from schedc.core.memory_actions import PlannedActions

    return PlannedActions(actions, f"{actions.source} (against {path})", getattr(actions, "recompute", None))


def moved_bytes(entry: dict, format_size) -> str:
    """One stage of a report's ``offload.stages`` as a line says it: ``12 x 1.2 GiB`` (each moved
    microbatch's bytes, a fraction of them where only part moves), or the total where the
    fractions differ."""
    n = len(entry["microbatches"])
    if len(entry.get("fractions", [1.0])) > 1:
        return f"{n} microbatches, {format_size(entry['bytes'])} in all"
    return f"{n} x {format_size(entry['bytes'] / n if n else 0.0)}"
