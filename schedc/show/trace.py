"""A schedule as a Chrome trace (Trace Event Format) for Perfetto and chrome://tracing.

Problem: let people scrub through a predicted schedule with the tools they already use for
real profiler traces, and put the prediction beside a measured ``torch.profiler`` trace.

Method: :func:`schedc.core.simulate.simulate` gives every action's start and end. Each rank is one
process (``pid`` = rank, named by a ``process_name`` metadata event, sorted by rank) with one
thread ``compute``; every action is one complete event (``ph: "X"``) named like its CSV cell
(``3F0``) with stage, microbatch and kind in ``args``; each rank's memory is a counter track
(``ph: "C"``, name ``memory``) stepping at the same instants as the simulator's memory curve.
With memory actions (schedc.core.memory_actions), each rank's two copy streams are threads of
their own after ``compute`` (``tid`` 1 device to host, 2 host to device), each copy one complete
event (``out 1:3``: stage 1, microbatch 3) with its bytes in ``args``, and every node's pinned
host memory is a counter on its first rank (``host memory``).
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
from schedc.core.host_link import HostLink
from schedc.core.ir import Schedule
from schedc.core.simulate import SimResult, simulate
from schedc.errors import SchedcError
from schedc.io.fileio import atomic_write_bytes

US_PER_SECOND = 1e6


# the copy streams' threads, after the compute thread (tid 0)
COPY_THREADS = {"out": (1, "copy out (device to host)"), "in": (2, "copy in (host to device)")}


def trace_events(schedule: Schedule, profile: Profile, memory: Optional[MemoryLimit] = None, *,
                 memory_actions=None, link: Optional[HostLink] = None) -> dict:
    """The trace as a JSON-ready dict ``{"traceEvents": [...], "displayTimeUnit": "ms", ...}``;
    a schedule of more than ``limits.MAX_TRACE_ACTIONS`` actions is refused before any work.
    ``memory_actions`` and ``link`` as :func:`schedc.core.simulate.simulate` takes them add the
    copy streams."""
    check_trace_size(sum(len(cell.parts) for row in schedule.rows for cell in row if cell is not None),
                     schedule.name or "the schedule")
    res = simulate(schedule, profile, memory, memory_actions=memory_actions or None, link=link)
    events: list[dict] = []
    for r in range(schedule.n_ranks):
        own = schedule.stages_of(r)
        stages = ("stage " if len(own) == 1 else "stages ") + ", ".join(str(s) for s in own)
        events.append({"name": "process_name", "ph": "M", "pid": r, "tid": 0,
                       "args": {"name": f"rank {r} ({stages})"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": r, "tid": 0, "args": {"sort_index": r}})
        events.append({"name": "thread_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": "compute"}})
        if memory_actions:
            for tid, name in COPY_THREADS.values():
                events.append({"name": "thread_name", "ph": "M", "pid": r, "tid": tid, "args": {"name": name}})
    for r, row in enumerate(res.order):
        for index, a in enumerate(row):
            t = res.timings[a]
            events.append({
                "name": str(a), "cat": a.kind.info.trace_category, "ph": "X", "pid": r, "tid": 0,
                "ts": _us(t.start), "dur": _us(t.end - t.start),
                "args": {"stage": a.stage, "microbatch": a.microbatch, "kind": a.kind, "index": index},
            })
    for r, curve in enumerate(res.memory_curve):
        for when, held in merge_instants(curve):
            events.append({"name": "memory", "ph": "C", "pid": r, "tid": 0, "ts": _us(when), "args": {"held": held}})
    events += _copy_events(res, link or HostLink())
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
            **({"link_busy": [{"rank": r, "out": res.link_busy(r, "out"), "in": res.link_busy(r, "in")}
                              for r in range(schedule.n_ranks)],
                "host_peak_per_node": res.host_peak} if memory_actions else {}),
        },
    }


def _copy_events(res: SimResult, link: HostLink) -> list[dict]:
    """Each copy as a complete event on its stream's thread, and per node the pinned host memory
    the copies hold (from a copy out's start to its fetch's end, as the simulator counts it) as a
    counter on the node's first rank."""
    events = []
    host: dict[int, list[tuple[float, int, float]]] = {}
    for c in res.copies:
        tid, _ = COPY_THREADS[c.direction]
        # a microbatch that moves again after its I copies twice each way: the name tells which
        phase = " after I" if c.after == "I" else ""
        events.append({"name": f"{c.direction} {c.stage}:{c.microbatch}{phase}", "cat": "copy", "ph": "X",
                       "pid": c.rank, "tid": tid, "ts": _us(c.start), "dur": _us(c.end - c.start),
                       "args": {"stage": c.stage, "microbatch": c.microbatch, "direction": c.direction,
                                "after": c.after, "bytes": c.nbytes}})
        node = link.node_of(c.rank)
        host.setdefault(node, []).append((c.start, 0, c.nbytes) if c.direction == "out" else (c.end, 1, -c.nbytes))
    for node, changes in sorted(host.items()):
        held, steps = 0.0, []
        for t, _, change in sorted(changes):
            held += change
            steps.append((t, held))
        for t, value in merge_instants(steps):
            events.append({"name": "host memory", "ph": "C", "pid": node * link.ranks_per_node, "tid": 0,
                           "ts": _us(t), "args": {"pinned": value}})
    return events


def check_trace_size(n_actions: int, name: str) -> None:
    """Refuse, in one line naming the bound, a schedule of more than ``limits.MAX_TRACE_ACTIONS``
    actions (`name` says which)."""
    if n_actions > limits.MAX_TRACE_ACTIONS:
        raise SchedcError(f"{name}: {n_actions:,} actions; a trace holds at most {limits.MAX_TRACE_ACTIONS:,} "
                          "(one event per action and memory step, hundreds of MB past that); trace a schedule "
                          "with fewer microbatches, or use `schedc simulate`")


def write_trace(schedule: Schedule, profile: Profile, path: Union[str, Path],
                memory: Optional[MemoryLimit] = None, *, memory_actions=None,
                link: Optional[HostLink] = None) -> dict:
    """Write the trace JSON to ``path`` atomically (gzipped when the name ends in ``.gz``, which
    Perfetto opens as is); returns what was written."""
    trace = trace_events(schedule, profile, memory, memory_actions=memory_actions, link=link)
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
