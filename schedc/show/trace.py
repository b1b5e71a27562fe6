"""A schedule as a Chrome trace (Trace Event Format) for Perfetto and chrome://tracing.

Problem: let people scrub through a predicted schedule with the tools they already use for
real profiler traces, and put the prediction beside a measured ``torch.profiler`` trace.

Method: :func:`schedc.core.simulate.simulate` gives every action's start and end. Each rank is one
process (``pid`` = rank, named by a ``process_name`` metadata event, sorted by rank) with one
thread ``compute``; every action is one complete event (``ph: "X"``) named like its CSV cell
(``3F0``) with stage, microbatch and kind in ``args``; each rank's memory is a counter track
(``ph: "C"``, name ``memory``) stepping at the same instants as the simulator's memory curve.
Times are microseconds (the format's unit) of the profile's seconds; a unit-less ``--costs``
profile therefore shows one cost unit as one second.

Cost: one simulation plus O(actions) events.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Optional, Union

from schedc.core import limits
from schedc.core.costs import MemoryLimit, Profile
from schedc.errors import SchedcError
from schedc.io.fileio import atomic_write_bytes
from schedc.core.ir import Schedule
from schedc.core.simulate import simulate

US_PER_SECOND = 1e6


def trace_events(schedule: Schedule, profile: Profile, memory: Optional[MemoryLimit] = None) -> dict:
    """The trace as a JSON-ready dict ``{"traceEvents": [...], "displayTimeUnit": "ms", ...}``;
    a schedule of more than ``limits.MAX_TRACE_ACTIONS`` actions is refused before any work."""
    check_trace_size(sum(len(cell.parts) for row in schedule.rows for cell in row if cell is not None),
                     schedule.name or "the schedule")
    res = simulate(schedule, profile, memory)
    events: list[dict] = []
    for r in range(schedule.n_ranks):
        own = schedule.stages_of(r)
        stages = ("stage " if len(own) == 1 else "stages ") + ", ".join(str(s) for s in own)
        events.append({"name": "process_name", "ph": "M", "pid": r, "tid": 0,
                       "args": {"name": f"rank {r} ({stages})"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": r, "tid": 0, "args": {"sort_index": r}})
        events.append({"name": "thread_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": "compute"}})
    for r, row in enumerate(res.order):
        for index, a in enumerate(row):
            t = res.timings[a]
            events.append({
                "name": str(a), "cat": a.kind.info.trace_category, "ph": "X", "pid": r, "tid": 0,
                "ts": _us(t.start), "dur": _us(t.end - t.start),
                "args": {"stage": a.stage, "microbatch": a.microbatch, "kind": a.kind, "index": index},
            })
    for r, curve in enumerate(res.memory_curve):
        for t, held in merge_instants(curve):
            events.append({"name": "memory", "ph": "C", "pid": r, "tid": 0, "ts": _us(t), "args": {"held": held}})
    caps = [None if math.isinf(x) else x for x in res.memory_limit]
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "schedc",
            "schedule": schedule.name,
            "stages": schedule.n_stages,
            "ranks": schedule.n_ranks,
            "microbatches": schedule.n_microbatches,
            "placement": list(schedule.placement),
            "makespan_s": res.makespan,
            "bubble": res.bubble,
            "peak_memory": res.peak_memory,
            "memory_limit": str(memory) if memory is not None else "none",
            "memory_limit_per_rank": caps,
        },
    }


def check_trace_size(n_actions: int, name: str) -> None:
    """Refuse, in one line naming the bound, a schedule of more than ``limits.MAX_TRACE_ACTIONS``
    actions (`name` says which)."""
    if n_actions > limits.MAX_TRACE_ACTIONS:
        raise SchedcError(f"{name}: {n_actions:,} actions; a trace holds at most {limits.MAX_TRACE_ACTIONS:,} "
                          "(one event per action and memory step, hundreds of MB past that); trace a schedule "
                          "with fewer microbatches, or use `schedc simulate`")


def write_trace(schedule: Schedule, profile: Profile, path: Union[str, Path],
                memory: Optional[MemoryLimit] = None) -> dict:
    """Write the trace JSON to ``path`` atomically (gzipped when the name ends in ``.gz``, which
    Perfetto opens as is); returns what was written."""
    trace = trace_events(schedule, profile, memory)
    data = (json.dumps(trace, separators=(",", ":")) + "\n").encode()
    # mtime 0: the same trace gives the same bytes
    atomic_write_bytes(path, gzip.compress(data, mtime=0) if str(path).endswith(".gz") else data)
    return trace


def _us(seconds: float) -> float:
    # Rounded to a nanosecond so float noise does not leak into the file.
    return round(seconds * US_PER_SECOND, 3)


def merge_instants(curve: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """One counter sample per instant (the last value wins), in time order; a rank's releases
    happen at action ends and allocations at starts, so several can share an instant."""
    last: dict[float, float] = {}
    for t, held in curve:
        last[t] = held
    return sorted(last.items())
