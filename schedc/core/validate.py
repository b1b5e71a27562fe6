"""Is a schedule runnable? Completeness, placement, dependency order and deadlock checks.

Problem: a schedule is runnable by torch's ``_PipelineScheduleRuntime`` when (1) every stage
runs exactly one forward and one backward (B, or I then W) per microbatch, (2) every action runs
on the rank that holds its stage, (3) on each rank an action never comes before another action
of the same rank it needs (docs/design.md's dependency rules), and (4) the ranks cannot wait on each
other in a circle (deadlock).

Method: (1)-(3) are counted/compared cell by cell. (4) walks the schedule as the simulator does
(:func:`schedc.core.simulate.walk`: each rank runs its next action once its producers have run); it can
run iff every action is reached. Only when some are not does it build a directed graph
(networkx) of those actions, with "runs before" edges on the same rank plus "needs" data
dependencies (:func:`schedc.core.simulate.producers`), and turn a cycle found by
``networkx.find_cycle`` back into words. An ``OVERLAP_F_B``
cell is issued as one unit by torch, so every cross-rank input of any of its parts must exist
before the cell's first part starts; the graph models that with an extra edge into the first
part.

Cost: O(actions); the graph and the cycle search only for a schedule that deadlocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Collection, Optional, Sequence, Union

from schedc.core.ir import Action, Kind, Schedule, make_placement, placement_name
from schedc.core.simulate import Deadlock, producer_keys, producers, walk
from schedc.errors import SchedcError
from schedc.io.csvio import cell_position as _pos  # positions read as in csvio's parse errors

if TYPE_CHECKING:  # networkx loads on the first graph built, not with `import schedc`
    import networkx as nx

PlacementSpec = Union[str, Sequence[int], None]


def _locate(schedule: Schedule) -> dict[Action, tuple[int, int, int]]:
    """action -> (rank, column of its cell, index in the rank's flattened order). First
    occurrence wins; duplicates are reported separately."""
    where: dict[Action, tuple[int, int, int]] = {}
    for r, row in enumerate(schedule.rows):
        k = 0
        for c, cell in enumerate(row):
            if cell is None:
                continue
            for a in cell.parts:
                where.setdefault(a, (r, c, k))
                k += 1
    return where


def _backward_kind(schedule: Schedule) -> dict[tuple[int, int], str]:
    kinds: dict[tuple[int, int], str] = {}
    for _, a in schedule.all_actions():
        if a.kind in (Kind.I, Kind.B):
            kinds.setdefault((a.stage, a.microbatch), a.kind)
    return kinds


def _expectation_problems(schedule: Schedule, n_stages, n_microbatches, n_ranks, placement) -> list[str]:
    out = []
    if n_stages is not None and n_stages != schedule.n_stages:
        out.append(f"expected {n_stages} stages, the schedule has {schedule.n_stages}")
    if n_microbatches is not None and n_microbatches != schedule.n_microbatches:
        out.append(f"expected {n_microbatches} microbatches, the schedule has {schedule.n_microbatches}")
    if n_ranks is not None and n_ranks != schedule.n_ranks:
        out.append(f"expected {n_ranks} ranks, the schedule has {schedule.n_ranks} (one row per rank)")
    if placement is not None and schedule.n_stages and schedule.n_ranks:
        actual = tuple(schedule.placement)
        if isinstance(placement, str):
            try:
                wanted = make_placement(placement, schedule.n_stages, schedule.n_ranks)
            except ValueError:
                wanted = None
            ok = wanted == actual
            label = f"{placement!r} placement"
            if placement == "v" and schedule.n_stages < 2 * schedule.n_ranks:
                # with one stage per rank 'v' and 'loop' coincide, but V-placement schedules
                # (ZBVZeroBubble, DualPipeV) build two stages per rank: not this schedule
                out.append("expected 'v' placement (two stages per rank, rank r holding r and 2R-1-r, as "
                           "ZBVZeroBubble and DualPipeV build them), the schedule has one stage per rank")
                return out
        else:
            ok = tuple(placement) == actual
            label = f"placement {tuple(placement)}"
        if not ok:
            out.append(f"expected {label}, the schedule's stages sit on ranks {actual} "
                       f"({placement_name(actual) if actual else 'empty'})")
    return out


def _structure_problems(schedule: Schedule, where) -> list[str]:
    out = []
    n_s, n_m, n_r = schedule.n_stages, schedule.n_microbatches, schedule.n_ranks
    if n_s == 0:
        return ["the schedule has no stages"]
    if n_m <= 0:
        return ["the schedule has no microbatches"]
    for s, r in enumerate(schedule.placement):
        if not 0 <= r < n_r:
            out.append(f"stage {s} is placed on rank {r}, but the schedule has {n_r} ranks (0..{n_r - 1})")
    for r in range(n_r):
        if not any(cell is not None for cell in schedule.rows[r]):
            out.append(f"rank {r} (row {r + 1}) has no actions; every rank must run at least one stage")
    seen: dict[Action, tuple[int, int]] = {}
    for r, row in enumerate(schedule.rows):
        for c, cell in enumerate(row):
            if cell is None:
                continue
            for a in cell.parts:
                if a in seen:
                    out.append(f"{a} appears twice: at {_pos(*seen[a])} and at {_pos(r, c)}")
                    continue
                seen[a] = (r, c)
                if a.stage >= n_s:
                    out.append(f"{_pos(r, c)} runs {a}, but the schedule has {n_s} stages (0..{n_s - 1})")
                elif a.microbatch >= n_m:
                    out.append(f"{_pos(r, c)} runs {a}, but the schedule has {n_m} microbatches (0..{n_m - 1})")
                elif schedule.placement[a.stage] != r:
                    out.append(f"{_pos(r, c)} runs {a}, but stage {a.stage} is placed on rank "
                               f"{schedule.placement[a.stage]}")
    # per stage, look only at microbatches that have some action plus the first few that have
    # none, so that a stray huge microbatch number cannot make this loop run for ages
    by_stage: dict[int, dict[str, set[int]]] = {s: {k: set() for k in "FBIW"} for s in range(n_s)}
    for a in where:
        if a.stage < n_s and a.microbatch < n_m:
            by_stage[a.stage][a.kind].add(a.microbatch)
    for s in range(n_s):
        present = set().union(*by_stage[s].values())
        absent: list[int] = []
        m = 0
        while len(absent) < _LISTED_ABSENT and m < n_m:
            if m not in present:
                absent.append(m)
            m += 1
        for m in sorted(present | set(absent)):
            out += _microbatch_problems(s, m, where)
        unlisted = n_m - len(present) - len(absent)
        if unlisted > 0:
            out.append(f"stage {s}: {unlisted} more microbatches have neither a forward nor a backward")
    return out


_LISTED_ABSENT = 20


def _microbatch_problems(s: int, m: int, where) -> list[str]:
    out = []
    f, b, i, w = (Action(s, k, m) for k in "FBIW")
    if f not in where:
        out.append(f"stage {s} microbatch {m} has no forward (expected {f})")
    has_b, has_i, has_w = b in where, i in where, w in where
    if has_b and (has_i or has_w):
        out.append(f"stage {s} microbatch {m} has both {b} and {i if has_i else w}; "
                   f"use either {b} or {i} + {w}")
    elif has_i and not has_w:
        out.append(f"stage {s} microbatch {m} has {i} but no {w} (every I needs its W)")
    elif has_w and not has_i:
        out.append(f"stage {s} microbatch {m} has {w} but no {i} (W needs I first)")
    elif not (has_b or has_i):
        out.append(f"stage {s} microbatch {m} has no backward (expected {b} or {i} + {w})")
    return out


def _order_problems(schedule: Schedule, where) -> list[str]:
    """Same-rank actions listed before an action they need."""
    out = []
    kinds = _backward_kind(schedule)
    by_key = {(a.stage, a.kind, a.microbatch): loc for a, loc in where.items()}  # tuples hash fast
    for a, (r, c, k) in where.items():
        for key, _ in producer_keys(a.stage, a.kind, a.microbatch, schedule.n_stages, kinds):
            loc = by_key.get(key)
            if loc is not None and loc[0] == r and loc[2] > k:
                dep = Action(*key)
                out.append(f"rank {r} runs {a} (column {c + 1}) before {dep} (column {loc[1] + 1}), "
                           f"which it needs; move {dep} earlier")
    return out


def dependency_graph(schedule: Schedule, only: Optional[Collection[Action]] = None) -> nx.DiGraph:
    """Nodes: actions (attributes rank, column: 0-based cell index in the row). Edges u -> v mean u must finish before v
    starts; attribute ``kind`` is ``"order"`` (same rank, CSV order) or ``"data"``. `only`: just these actions."""
    import networkx as nx

    g = nx.DiGraph()
    where = _locate(schedule)
    if only is not None:
        where = {a: loc for a, loc in where.items() if a in only}
    for a, (r, c, _) in where.items():
        g.add_node(a, rank=r, column=c)
    for r in range(schedule.n_ranks):
        acts = [a for a in schedule.actions(r) if a in where]
        for u, v in zip(acts, acts[1:]):
            if u != v:
                g.add_edge(u, v, kind="order")
    kinds = _backward_kind(schedule)
    for r, row in enumerate(schedule.rows):
        for cell in row:
            if cell is None:
                continue
            first = cell.parts[0]
            for n, a in enumerate(cell.parts):
                if a not in where:
                    continue
                for dep, _ in producers(a, schedule.n_stages, kinds):
                    if dep not in where:
                        continue
                    if not g.has_edge(dep, a):  # same-rank order edges already say it
                        g.add_edge(dep, a, kind="data")
                    # torch issues an overlap cell once all its parts' inputs are there
                    if n > 0 and first in where and dep not in cell.parts and where[dep][0] != r:
                        g.add_edge(dep, first, kind="data")
    return g


def describe_cycle(g: nx.DiGraph, cycle: list[tuple]) -> str:
    """A cycle of the dependency graph in words: runs of same-rank order edges are merged into
    'rank r runs X before Y', data edges read 'Y (rank q) waits for X'."""
    # start at an order edge that follows a data edge so that the story reads from a rank
    start = 0
    for i, (u, v) in enumerate(cycle):
        if g.edges[u, v]["kind"] == "order" and g.edges[cycle[i - 1]]["kind"] == "data":
            start = i
            break
    edges = cycle[start:] + cycle[:start]
    parts = []
    i = 0
    while i < len(edges):
        u, v = edges[i][0], edges[i][1]
        if g.edges[u, v]["kind"] == "order":
            j = i
            while j + 1 < len(edges) and g.edges[edges[j + 1][0], edges[j + 1][1]]["kind"] == "order":
                j += 1
            last = edges[j][1]
            parts.append(f"rank {g.nodes[u]['rank']} runs {u} before {last}")
            i = j + 1
        else:
            parts.append(f"{v} (rank {g.nodes[v]['rank']}) waits for {u} (rank {g.nodes[u]['rank']})")
            i += 1
    return parts[0] + (", but " + ", ".join(parts[1:]) if len(parts) > 1 else "")


def _deadlock_problems(schedule: Schedule) -> list[str]:
    import networkx as nx

    # a linear walk decides; only a schedule that deadlocks pays for the graph that names the cycle,
    # built on the part of the actions that never start where a cycle lies (Deadlock.stuck: at
    # 10**6 actions the graph of all of them took minutes)
    try:
        walk(schedule)
    except Deadlock as e:
        g = dependency_graph(schedule, only=e.stuck)
        try:
            cycle = nx.find_cycle(g)
        except nx.NetworkXNoCycle:  # cannot happen: what never starts waits in a circle
            return [str(e)]
        return ["the schedule deadlocks: " + describe_cycle(g, [(c[0], c[1]) for c in cycle])
                + " - a cycle, so none of these can start; reorder one of these ranks"]
    return []


def problems(
    schedule: Schedule,
    n_stages: Optional[int] = None,
    n_microbatches: Optional[int] = None,
    n_ranks: Optional[int] = None,
    placement: PlacementSpec = None,
) -> list[str]:
    """Every problem found, each one line without a file prefix; [] when the schedule is valid.
    Order and deadlock checks run only on a structurally complete schedule (their findings
    would otherwise be echoes of the missing actions)."""
    out = _expectation_problems(schedule, n_stages, n_microbatches, n_ranks, placement)
    where = _locate(schedule)
    structural = _structure_problems(schedule, where)
    out += structural
    if structural:
        return out
    order = _order_problems(schedule, where)
    out += order
    if order:
        return out
    return out + _deadlock_problems(schedule)


def validate(
    schedule: Schedule,
    n_stages: Optional[int] = None,
    n_microbatches: Optional[int] = None,
    n_ranks: Optional[int] = None,
    placement: PlacementSpec = None,
    source: str = "",
) -> None:
    """Raise SchedcError with the first problem (and how many more) unless `schedule` is valid.
    `placement` may be 'loop', 'v' or an explicit stage -> rank tuple."""
    found = problems(schedule, n_stages, n_microbatches, n_ranks, placement)
    if found:
        more = f" (and {len(found) - 1} more problem{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
        raise SchedcError(f"{source + ': ' if source else ''}{found[0]}{more}")
