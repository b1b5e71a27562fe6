"""Hand-made pipeline schedules: the baselines every compiled schedule is compared with.

Problem: emit, for given stages N, ranks R and microbatches M, the per-rank action order of the
well-known schedules (GPipe, 1F1B, ZB-H1, ZB-H2, interleaved 1F1B, ZB-V, looped BFS, interleaved
zero bubble, DualPipeV, the controllable-memory V-Half and V-Min) as a :class:`schedc.core.ir.Schedule`,
so they can be simulated, validated, written as torch CSV and run by torch's
``_PipelineScheduleRuntime``.

Method: each schedule is a short rule over counters (warm-up length, steady F/B alternation,
cool-down), written from the papers' descriptions; where torch ships the same schedule the rules
are torch's (so warm-up lengths and microbatch-count restrictions agree with what torch users
know) and tests compare the two by simulation. Orders only: idle cells are not emitted, since the
simulator and torch's runtime both wait for data anyway. ZB-H2, V-Half and V-Min are defined by
construction rather than a formula: ZB-H2 as a unit-time list schedule (:func:`_zb_h2`), V-Half
and V-Min as their authors' generator builds them (:func:`_v_controllable`).

Known torch quirk (torch 2.13): ``Schedule1F1B._get_pipeline_order`` (what
``get_schedule_ops`` and the visualizer show) starts the last rank's forwards at microbatch 1
(``1F1 1B0 1F2 ...`` ending in ``F{M}``), so its last rank never runs F0 and runs a
microbatch that does not exist. torch's real 1F1B execution (``_step_microbatches``) is correct;
only the reported order is off by one. schedc's 1F1B is the correct order (``F0 B0 F1 B1 ...``
on the last rank); tests pin this.

Cost: O(N x M) actions; ZB-H2's construction steps through about 6M + 2R unit time steps x R
ranks; V-Half's and V-Min's reorderings try O(R) earlier slots for each of the 5RM passes, each
checked in O(M log M).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from schedc.core.ir import Action, Cell, Kind, Overlap, Schedule, loop_placement, v_placement
from schedc.errors import ParameterError, SchedcError, literal


@dataclass(frozen=True)
class BaselineInfo:
    name: str
    placement: str  # "loop" or "v"
    description: str
    stages_per_rank: str  # "1", ">=2" or "2"
    torch_class: Optional[str] = None  # torch.distributed.pipelining class with the same order


_SINGLE, _MULTI, _TWO = "1", ">=2", "2"

_INFOS = (
    BaselineInfo("gpipe", "loop", "all forwards, then all backwards (B); holds M microbatches",
                 _SINGLE, "ScheduleGPipe"),
    BaselineInfo("1f1b", "loop", "one forward one backward (B) after R-1-r warm-up forwards; holds R",
                 _SINGLE, "Schedule1F1B"),
    BaselineInfo("zb-h1", "loop", "zero-bubble H1: 1F1B with I/W split, rank r delays its first r W's "
                 "into the tail; 1F1B memory, bubble (R-1)(F+I-W)", _SINGLE),
    BaselineInfo("zb-h2", "loop", "zero-bubble H2: 2R-1-2r warm-up forwards, W's fill the tail; "
                 "~2R memory, bubble (R-1)(F+I-2W)", _SINGLE),
    BaselineInfo("interleaved-1f1b", "loop", "Megatron interleaved 1F1B over >=2 stages per rank (B)",
                 _MULTI, "ScheduleInterleaved1F1B"),
    BaselineInfo("zb-v", "v", "zero-bubble ZB-V: 2 stages per rank in a V, I/W split, 1F1B memory",
                 _TWO, "ScheduleZBVZeroBubble"),
    BaselineInfo("looped-bfs", "loop", "breadth-first: every forward of each local stage, then every "
                 "backward in reverse (B)", _MULTI, "ScheduleLoopedBFS"),
    BaselineInfo("interleaved-zb", "loop", "interleaved zero bubble (ZB1P): interleaved 1F1B with I/W "
                 "split and W's delayed into the bubbles", _MULTI, "ScheduleInterleavedZeroBubble"),
    BaselineInfo("dualpipev", "v", "DeepSeek DualPipeV: 2 stages per rank in a V, overlapped F+B cells",
                 _TWO, "ScheduleDualPipeV"),
    BaselineInfo("v-half", "v", "controllable-memory V-Half as its authors generate it: V building "
                 "block repeated, squeezed and reordered; (R+2)//2 microbatches, about 1/2 of 1F1B's "
                 "memory", _TWO),
    BaselineInfo("v-min", "v", "controllable-memory V-Min as its authors generate it: forwards 1 apart; "
                 "(R+4)//3 microbatches, about 1/3 of 1F1B's activation memory", _TWO),
)

BASELINE_NAMES: tuple[str, ...] = tuple(i.name for i in _INFOS)
_BY_NAME = {i.name: i for i in _INFOS}

# Squashed spelling (lower case, no dashes/underscores/spaces, no "schedule" prefix) -> name.
_ALIASES = {
    "gpipe": "gpipe",
    "1f1b": "1f1b",
    "zbh1": "zb-h1",
    "zbh2": "zb-h2",
    "interleaved1f1b": "interleaved-1f1b",
    "interleaved": "interleaved-1f1b",
    "zbv": "zb-v",
    "zbvzerobubble": "zb-v",
    "loopedbfs": "looped-bfs",
    "interleavedzb": "interleaved-zb",
    "interleavedzerobubble": "interleaved-zb",
    "dualpipev": "dualpipev",
    "vhalf": "v-half",
    "zbvhalf": "v-half",
    "vmin": "v-min",
    "zbvmin": "v-min",
}


def list_baselines() -> list[BaselineInfo]:
    return list(_INFOS)


def normalize_name(name: str) -> str:
    """The canonical name of a baseline: case, dashes, underscores and spaces are ignored, and
    torch's class names (``ScheduleInterleaved1F1B``, ``ZBVZeroBubble``, ...) are accepted."""
    key = re.sub(r"[\s_\-.]", "", str(name)).lower()
    if key.startswith("schedule") and key != "schedule":
        key = key[len("schedule"):]
    if key in _ALIASES:
        return _ALIASES[key]
    raise SchedcError(f"unknown schedule {name!r}; choose one of {', '.join(BASELINE_NAMES)}")


def make_baseline(
    name: str,
    n_stages: int,
    n_microbatches: int,
    n_ranks: Optional[int] = None,
    placement: Optional[str] = None,
) -> Schedule:
    """The hand-made schedule `name` for N stages, M microbatches on R ranks.

    R defaults to N for one-stage-per-rank schedules and N/2 for the others. `placement`
    ("loop"/"v") may only confirm the schedule's own placement (with one stage per rank the two
    coincide)."""
    canonical = normalize_name(name)
    info = _BY_NAME[canonical]
    n, m = int(n_stages), int(n_microbatches)
    if n < 1:
        raise ParameterError("stages", f"{canonical}: {{param}} must be >= 1, got {n}")
    if m < 1:
        raise ParameterError("microbatches", f"{canonical}: {{param}} must be >= 1, got {m}")
    r = _ranks_for(info, n, n_ranks)
    v = n // r
    if placement is not None and placement not in ("loop", "v"):
        raise ParameterError("placement", f"{canonical}: {{param}} must be loop or v, got {literal(repr(placement))}")
    if placement is not None and placement != info.placement and v > 1:
        raise ParameterError(
            "placement", f"{canonical} uses {info.placement} placement, not {placement}; drop {{param}}"
            + (" or use zb-v/dualpipev for v placement" if placement == "v" else
               " or use interleaved-1f1b/looped-bfs/interleaved-zb for loop placement")
        )
    rows = _GENERATORS[canonical](r, v, m)
    place = v_placement(n, r) if info.placement == "v" else loop_placement(n, r)
    schedule = Schedule(rows=[list(row) for row in rows], placement=place, n_microbatches=m, name=canonical)
    schedule.meta["baseline"] = canonical
    if info.torch_class:
        schedule.meta["torch_class"] = info.torch_class
    return schedule


def baselines_for(
    n_stages: int, n_microbatches: int, n_ranks: int, placement: Optional[str] = None
) -> dict[str, Schedule]:
    """Every hand-made schedule that exists for this shape (stages, microbatches, ranks, and
    placement when given), by name in BASELINE_NAMES order; the others are skipped. For reports
    that compare a compiled schedule with the baselines under the same costs."""
    found: dict[str, Schedule] = {}
    for info in _INFOS:
        try:
            found[info.name] = make_baseline(info.name, n_stages, n_microbatches, n_ranks=n_ranks, placement=placement)
        except SchedcError:
            continue
    return found


def _ranks_for(info: BaselineInfo, n: int, n_ranks: Optional[int]) -> int:
    name = info.name
    if n_ranks is not None and n_ranks < 1:
        raise ParameterError("ranks", f"{name}: {{param}} must be >= 1, got {n_ranks}")
    if info.stages_per_rank == _SINGLE:
        if n_ranks is not None and n_ranks != n:
            raise ParameterError(
                "ranks", f"{name} runs one stage per rank, so {{param}} must equal {{param:stages}} ({n}); for several "
                f"stages per rank use interleaved-1f1b, looped-bfs or interleaved-zb (loop) or zb-v (v)"
            )
        return n
    if info.stages_per_rank == _TWO:
        if n % 2 or (n_ranks is not None and n != 2 * n_ranks):
            param, want = ("ranks", f"{{name}}{n // 2}") if n % 2 == 0 else ("stages", "an even {param}")
            raise ParameterError(
                param, f"{name} needs exactly 2 stages per rank (stages = 2 x ranks); got {n} stages"
                + (f" on {n_ranks} ranks" if n_ranks else "") + f"; use {want}"
            )
        return n // 2
    # two or more stages per rank, loop placement
    if n_ranks is None:
        if n % 2 or n < 2:
            raise ParameterError(
                "ranks", f"{name} needs >= 2 stages per rank; give {{name}}R with {{param:stages}} a multiple of R "
                f"and at least 2R (got {n} stages)"
            )
        return n // 2
    if n % n_ranks or n // n_ranks < 2:
        raise ParameterError(
            "ranks", f"{name} needs >= 2 stages per rank (stages a multiple of ranks, at least 2 x ranks); got "
            f"{n} stages on {n_ranks} ranks; use e.g. {{name}}{max(1, n // 2)}"
            + ("" if n % 2 == 0 else " with an even {param:stages}")
            + (", or 1f1b / zb-h1 for one stage per rank" if n == n_ranks else "")
        )
    return n_ranks


# ---------------------------------------------------------------- one stage per rank


def _gpipe(p: int, v: int, m: int) -> Sequence[Sequence[Cell]]:
    return [[Action(r, Kind.F, k) for k in range(m)] + [Action(r, Kind.B, k) for k in range(m)] for r in range(p)]


def _1f1b(p: int, v: int, m: int) -> Sequence[Sequence[Cell]]:
    if m < p:
        raise ParameterError("microbatches", f"1f1b needs {{param}} >= {{param:stages}} ({p}) like torch's "
                                             f"Schedule1F1B; got {m} (use gpipe, or more microbatches)")
    rows = []
    for r in range(p):
        warm = min(p - 1 - r, m)
        row: list[Cell] = [Action(r, Kind.F, k) for k in range(warm)]
        for k in range(m - warm):
            row += [Action(r, Kind.F, warm + k), Action(r, Kind.B, k)]
        row += [Action(r, Kind.B, k) for k in range(m - warm, m)]
        rows.append(row)
    return rows


def _zb_h1(p: int, v: int, m: int) -> Sequence[Sequence[Cell]]:
    """1F1B with B split into I and W. Rank r keeps 1F1B's R-1-r warm-up forwards and runs I
    where 1F1B runs B; the W of its first r backwards is postponed (W of microbatch j follows
    I of microbatch j + r), so every rank keeps R microbatches in flight at most, and the
    postponed W's fill the cool-down bubble: per-rank bubble (R-1)(F+I-W). This is also what
    torch's ScheduleInterleavedZeroBubble does with one stage per rank (tests check it)."""
    rows = []
    for r in range(p):
        warm = min(p - 1 - r, m)
        row: list[Cell] = [Action(r, Kind.F, k) for k in range(warm)]
        next_w = 0
        for k in range(m):
            if k < m - warm:
                row.append(Action(r, Kind.F, warm + k))
            row.append(Action(r, Kind.I, k))
            if k >= r:
                row.append(Action(r, Kind.W, next_w))
                next_w += 1
        row += [Action(r, Kind.W, j) for j in range(next_w, m)]
        rows.append(row)
    return rows


def _zb_h2(p: int, v: int, m: int) -> Sequence[Sequence[Cell]]:
    """ZB-H2, built as the unit-time list schedule the paper draws (Figure 3, bottom): all
    passes take one time unit; at every step each rank runs, in priority, the next I if its
    inputs are there, else the next F if its inputs are there and the rank holds fewer than
    2R-1 microbatches' activations (F adds 1, I and W each release 1/2: the paper's
    M_W = M_B/2), else its oldest pending W. This gives rank r 2R-1-2r warm-up forwards (7/5/3/1
    for R=4, as in the paper), 1F1B-like alternation and the W's at the tail, a parallelogram
    with no idle time inside any rank's span when F=I=W (bubble (R-1)(F+I-2W) = 0)."""
    cap = 2 * p - 1
    order: list[list[Cell]] = [[] for _ in range(p)]
    done_f: list[list[float]] = [[float("inf")] * m for _ in range(p)]
    done_i: list[list[float]] = [[float("inf")] * m for _ in range(p)]
    nf, ni, nw = [0] * p, [0] * p, [0] * p
    held = [0.0] * p
    t = 0
    while any(nw[r] < m for r in range(p)):
        if t > 10 * (3 * m + 2 * p):  # cannot happen for cap >= 1; a guard against a silent hang
            raise SchedcError(f"zb-h2: construction did not finish for {p} stages, {m} microbatches")
        finished: list[tuple[list[float], int]] = []
        for r in range(p):
            i, f = ni[r], nf[r]
            if i < m and done_f[r][i] <= t and (r == p - 1 or done_i[r + 1][i] <= t):
                order[r].append(Action(r, Kind.I, i))
                finished.append((done_i[r], i))
                ni[r] += 1
                held[r] -= 0.5
            elif f < m and (r == 0 or done_f[r - 1][f] <= t) and held[r] + 1 <= cap:
                order[r].append(Action(r, Kind.F, f))
                finished.append((done_f[r], f))
                nf[r] += 1
                held[r] += 1
            elif nw[r] < ni[r]:
                order[r].append(Action(r, Kind.W, nw[r]))
                nw[r] += 1
                held[r] -= 0.5
        for table, k in finished:  # visible to the others from the next step on
            table[k] = t + 1
        t += 1
    return order


# ---------------------------------------------------------------- several stages per rank, loop placement


def _rounds(name: str, p: int, m: int) -> int:
    """Microbatches per round of torch's interleaved schedules (Megatron's rule relaxed: M must
    be a multiple of the number of rounds max(1, M // R))."""
    rounds = max(1, m // p)
    if m % rounds:
        ok = [x for x in range(1, m + p + 1) if x % max(1, x // p) == 0]
        lower = max(x for x in ok if x < m)
        higher = min(x for x in ok if x > m)
        raise ParameterError(
            "microbatches", f"{name} needs {{param}} to be a multiple of max(1, mb // ranks) = {rounds}, like torch's "
            f"interleaved schedules; got {m} (use e.g. {lower} or {higher})"
        )
    return m // rounds


def _interleaved(p: int, v: int, m: int, zero_bubble: bool) -> Sequence[Sequence[Cell]]:
    """Megatron's interleaved 1F1B as torch runs it (ScheduleInterleaved1F1B), and its
    zero-bubble variant (ScheduleInterleavedZeroBubble, the paper's ZB1P).

    Forwards walk the local stages in rounds of `per_round` microbatches (depth first);
    backwards walk them in reverse. Rank r warms up with (v-1) x per_round + 2(R-1-r)
    forwards (1F1B) or (v-1) x per_round + (R-1-r) (zero bubble), then alternates F and B (I),
    then drains the backwards. In the zero-bubble variant the W of the j-th backward follows
    the (j+r)-th backward, and the last r W's close the rank's order."""
    name = "interleaved-zb" if zero_bubble else "interleaved-1f1b"
    per_round = _rounds(name, p, m)
    total = v * m
    bwd_kind = Kind.I if zero_bubble else Kind.B
    rows = []
    for r in range(p):
        warm = min((v - 1) * per_round + (1 if zero_bubble else 2) * (p - 1 - r), total)

        def f_stage(op: int) -> int:
            return ((op // per_round) % v) * p + r  # noqa: B023 (called within this iteration)

        def b_stage(j: int) -> int:
            return (v - 1 - (j // per_round) % v) * p + r  # noqa: B023 (called within this iteration)

        f_count: dict[int, int] = {}
        b_count: dict[int, int] = {}
        w_count: dict[int, int] = {}
        b_stages: list[int] = []
        row: list[Cell] = []

        def take(counter: dict[int, int], stage: int) -> int:
            counter[stage] = counter.get(stage, 0) + 1
            return counter[stage] - 1

        def add_w() -> None:
            s = b_stages[sum(w_count.values())]  # noqa: B023 (called within this iteration)
            row.append(Action(s, Kind.W, take(w_count, s)))  # noqa: B023 (called within this iteration)

        for op in range(warm):
            s = f_stage(op)
            row.append(Action(s, Kind.F, take(f_count, s)))
        for j in range(total):
            if warm + j < total:
                s = f_stage(warm + j)
                row.append(Action(s, Kind.F, take(f_count, s)))
            s = b_stage(j)
            row.append(Action(s, bwd_kind, take(b_count, s)))
            b_stages.append(s)
            if zero_bubble and j >= r:
                add_w()
        while zero_bubble and sum(w_count.values()) < total:
            add_w()
        rows.append(row)
    return rows


def _interleaved_1f1b(p: int, v: int, m: int) -> Sequence[Sequence[Cell]]:
    return _interleaved(p, v, m, zero_bubble=False)


def _interleaved_zb(p: int, v: int, m: int) -> Sequence[Sequence[Cell]]:
    return _interleaved(p, v, m, zero_bubble=True)


def _looped_bfs(p: int, v: int, m: int) -> Sequence[Sequence[Cell]]:
    """Breadth-first: every microbatch through local stage 0, then local stage 1, ...; then the
    backwards from the last local stage down, newest microbatch first (as torch orders them)."""
    rows = []
    for r in range(p):
        stages = [c * p + r for c in range(v)]
        row: list[Cell] = [Action(s, Kind.F, k) for s in stages for k in range(m)]
        row += [Action(s, Kind.B, k) for s in reversed(stages) for k in reversed(range(m))]
        rows.append(row)
    return rows


# ---------------------------------------------------------------- two stages per rank, V placement


def _zb_v(p: int, v: int, m: int) -> Sequence[Sequence[Cell]]:
    """ZB-V (zero-bubble paper, section 6; torch's ScheduleZBVZeroBubble). Rank r holds stage
    r (chunk 0, going down the V) and 2R-1-r (chunk 1, coming back up). Warm-up: 2(R-r)-1
    chunk-0 forwards, then r pairs (chunk-1 F, chunk-0 F), then R-r triples (chunk-1 F I W).
    Steady: chunk-0 F I W then chunk-1 F I W. Cool-down: r pairs of I's (chunk 0, chunk 1),
    R-r chunk-0 I W, then the remaining W's, chunk 1 first. The rule needs 2R-1 microbatches
    to fill the V; with fewer, it is generated for 2R-1 and the extra microbatches dropped."""
    n = 2 * p
    mm = max(2 * p - 1, m)
    rows = []
    for r in range(p):
        s0, s1 = r, n - 1 - r
        cnt = {(s, k): 0 for s in (s0, s1) for k in "FIW"}
        row: list[Action] = []

        def add(*steps: tuple[int, str]) -> None:
            for s, kind in steps:
                row.append(Action(s, kind, cnt[(s, kind)]))  # noqa: B023 (called within this iteration)
                cnt[(s, kind)] += 1  # noqa: B023 (called within this iteration)

        for _ in range(2 * (p - r) - 1):
            add((s0, Kind.F))
        for _ in range(r):
            add((s1, Kind.F), (s0, Kind.F))
        for _ in range(p - r):
            add((s1, Kind.F), (s1, Kind.I), (s1, Kind.W))
        while cnt[(s1, Kind.F)] < cnt[(s0, Kind.F)] or cnt[(s0, Kind.F)] < mm:
            if cnt[(s0, Kind.F)] < mm:
                add((s0, Kind.F))
            add((s0, Kind.I), (s0, Kind.W), (s1, Kind.F), (s1, Kind.I), (s1, Kind.W))
        for _ in range(r):
            add((s0, Kind.I), (s1, Kind.I))
        for _ in range(p - r):
            add((s0, Kind.I), (s0, Kind.W))
        while cnt[(s1, Kind.W)] < cnt[(s1, Kind.I)]:
            add((s1, Kind.W))
        while cnt[(s0, Kind.W)] < cnt[(s0, Kind.I)]:
            add((s0, Kind.W))
        rows.append([a for a in row if a.microbatch < m])
    return rows


def _dualpipev(p: int, v: int, m: int) -> Sequence[Sequence[Cell]]:
    """DeepSeek's DualPipeV as torch orders it (ScheduleDualPipeV). Rank r holds stages r and
    2R-1-r. Phases: 2(R-1-r) chunk-0 F's; r+1 pairs (F0, F1); R-1-r triples (I1, W, F1); the
    main phase of M-2R+r+1 pairs of overlapped cells (F0 with B1, F1 with B0; the last rank
    runs its first F0, B1 unoverlapped); R-1-r of (B1, F1 with B0); r+1 pairs of backwards
    (B1, B0) switching to I halfway; R-1-r of (W, chunk-0 backward); r+1 W's. A W always
    takes the oldest pending I. Overlapped cells are Overlap cells: torch runs their parts as
    one step, schedc's simulator back to back."""
    if m < 2 * p:
        raise ParameterError("microbatches", f"dualpipev needs {{param}} >= {{param:stages}} ({2 * p}) like torch's "
                                             f"ScheduleDualPipeV; got {m}")
    n = 2 * p
    rows = []
    for r in range(p):
        s0, s1 = r, n - 1 - r
        f = {s0: 0, s1: 0}
        b = {s0: 0, s1: 0}  # I and B share one counter: both are "the backward of microbatch k"
        pending_w: list[Action] = []
        row: list[Cell] = []

        def fwd(s: int) -> Action:
            f[s] += 1  # noqa: B023 (called within this iteration)
            return Action(s, Kind.F, f[s] - 1)  # noqa: B023 (called within this iteration)

        def bwd(s: int, kind: str) -> Action:
            b[s] += 1  # noqa: B023 (called within this iteration)
            a = Action(s, kind, b[s] - 1)  # noqa: B023 (called within this iteration)
            if kind == Kind.I:
                pending_w.append(Action(s, Kind.W, a.microbatch))  # noqa: B023 (called within this iteration)
            return a

        def w() -> None:
            if pending_w:  # noqa: B023 (called within this iteration)
                row.append(pending_w.pop(0))  # noqa: B023 (called within this iteration)

        row += [fwd(s0) for _ in range(2 * (p - 1 - r))]
        for _ in range(r + 1):
            row += [fwd(s0), fwd(s1)]
        for _ in range(p - 1 - r):
            row.append(bwd(s1, Kind.I))
            w()
            row.append(fwd(s1))
        for i in range(m - 2 * p + r + 1):
            if i == 0 and r == p - 1:
                row += [fwd(s0), bwd(s1, Kind.B)]
            else:
                row.append(Overlap((fwd(s0), bwd(s1, Kind.B))))
            row.append(Overlap((fwd(s1), bwd(s0, Kind.B))))
        for _ in range(p - 1 - r):
            row.append(bwd(s1, Kind.B))
            row.append(Overlap((fwd(s1), bwd(s0, Kind.B))))
        split = False
        half = (r + 1) // 2
        for i in range(r + 1):
            if i == half and r % 2 == 1:
                split = True
            row.append(bwd(s1, Kind.I if split else Kind.B))
            if i == half and r % 2 == 0:
                split = True
            row.append(bwd(s0, Kind.I if split else Kind.B))
        for _ in range(p - 1 - r):
            w()
            row.append(bwd(s0, Kind.I if split else Kind.B))
        for _ in range(r + 1):
            w()
        rows.append(row)
    return rows


# ---------------------------------------------------------------- controllable memory: V-Half and V-Min
#
# The authors' generator (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"; code in
# sail-sg/zero-bubble-pipeline-parallelism, its V-Half / V-Min ``PipelineGraph``:
# ``stable_pattern_v_half`` / ``stable_pattern_v_min``, ``put_w``, ``mem_of_stage``, ``reorder``,
# ``eager_execution_time``, ``schedule_from_pattern``), re-derived step by step; the tests pin
# the makespans their code gives at several sizes. All times are unit slots (F = I = W = 1).
# A rank's passes are numbered as there: 0 F of its first stage (down the V), 1 F of its second
# stage, 2 I of its second stage, 3 I of its first stage, then W's: one list (4) while the order
# is being built, two at the end (4 of the second stage, 5 of the first).

_Slots = list[list[int]]  # per pass kind, the slot of each microbatch


def _v_pattern(p: int, memory: str) -> list[list[int]]:
    """Per rank, the slots of microbatch 0's four passes in the stable building block; every
    later microbatch repeats it 6 slots on. V-Half spaces forwards 2 apart (1 at the turn) and
    backwards 1 apart, V-Min both 1; the gap g keeps the repeated blocks from colliding."""
    if memory == "half":
        g = 3 if p % 2 == 0 else 0
        return [[2 * r, 3 * p - r - 2, 3 * p + g + 2 * r - 1, 6 * p + g - r - 2] for r in range(p)]
    g = 2 if p % 3 == 0 else 0
    return [[r, 2 * p - r - 1, 2 * p + g + r, 4 * p + g - r - 1] for r in range(p)]


def _v_with_w(kinds: _Slots, split: bool) -> _Slots:
    """Kinds 0-3 plus their W's: walking the slots, each I leaves a W pending (of its own stage
    when `split`, the second stage's first) and each empty slot takes a pending one; W's still
    pending at the last pass follow it back to back."""
    heads, pending = [0] * 4, [0, 0]
    w: _Slots = [[], []]
    t = last = max(lst[-1] for lst in kinds)
    for t in range(last + 1):
        when, k = min((kinds[k][heads[k]], k) for k in range(4) if heads[k] < len(kinds[k]))
        if when == t:
            heads[k] += 1
            if k >= 2:
                pending[k - 2 if split else 0] += 1
            continue
        j = next((j for j in (0, 1) if pending[j]), None)
        if j is not None:
            w[j].append(t)
            pending[j] -= 1
    for j in (0, 1):
        for _ in range(pending[j]):
            t += 1
            w[j].append(t)
    return [list(lst) for lst in kinds] + (w if split else [w[0]])


def _v_peak(lists: _Slots, explicit_w: bool) -> int:
    """Most stage activations the rank holds (F adds one, W frees one, I nothing: the authors'
    accounting). Without explicit W's, each empty slot frees one pending W, as :func:`_v_with_w`
    would place it."""
    events = sorted((t, k) for k, lst in enumerate(lists) for t in lst)
    cur = peak = pending = 0
    prev = -1
    for t, k in events:
        if not explicit_w:
            freed = min(pending, t - prev - 1)
            cur, pending = cur - freed, pending - freed
        cur += 1 if k < 2 else -1 if k >= 4 else 0
        pending += 1 if k in (2, 3) else 0
        peak, prev = max(peak, cur), t
    return peak


def _v_after(ranks: list[_Slots], r: int, k: int, i: int) -> int:
    """The latest slot among the predecessors of pass kind k, microbatch i on rank r (-1 if
    none), as the authors count them: the same pass on the neighbouring rank it comes from, the
    previous kind on this rank, the previous microbatch, and for a W the i-th I of the rank."""
    lists, before = ranks[r], [-1]
    if k in (0, 2) and r > 0:
        before.append(ranks[r - 1][k][i])
    if k in (1, 3) and r < len(ranks) - 1:
        before.append(ranks[r + 1][k][i])
    if 0 < k < 4:
        before.append(lists[k - 1][i])
    if k == 4:
        before.append(sorted(lists[2] + lists[3])[i])
    if i > 0:
        before.append(lists[k][i - 1])
    return max(before)


def _v_squeeze(ranks: list[_Slots]) -> list[_Slots]:
    """Each pass as early as its predecessors and its rank's previous pass allow, in the order
    of the given slots (the paper's squeezing; the authors' ``eager_execution_time`` at unit
    costs)."""
    p = len(ranks)
    out = [[[0] * len(lst) for lst in lists] for lists in ranks]
    free = [0] * p
    order = sorted((t, r, k, i) for r, lists in enumerate(ranks) for k, lst in enumerate(lists)
                   for i, t in enumerate(lst))
    for _, r, k, i in order:
        start = free[r]
        if k in (0, 2) and r > 0:
            start = max(start, out[r - 1][k][i] + 1)
        if k in (1, 3) and r < p - 1:
            start = max(start, out[r + 1][k][i] + 1)
        if 0 < k < 4:
            start = max(start, out[r][k - 1][i] + 1)
        if i > 0:
            start = max(start, out[r][k][i - 1] + 1)
        out[r][k][i], free[r] = start, start + 1
    return out


def _v_reorder(ranks: list[_Slots], explicit_w: bool) -> list[_Slots]:
    """Move passes into earlier empty slots without raising any rank's peak above the order's
    peak (the paper's reordering), then squeeze. Passes are visited by slot; those of the steady
    phase (from the first microbatch's last I on rank 0 to the last microbatch's first F) keep
    theirs, and without explicit W's so do the warm-up's."""
    if explicit_w:
        ranks = [_v_with_w(lists, split=False) for lists in ranks]
    limit = max(_v_peak(lists, explicit_w) for lists in ranks)
    m = len(ranks[0][0])
    order = sorted((t, r, k, i) for r, lists in enumerate(ranks) for k, lst in enumerate(lists)
                   for i, t in enumerate(lst))
    taken: list[set[int]] = [set() for _ in ranks]
    phase = 0
    for nominal, r, k, i in order:
        if phase == 0 and k == 3 and r == 0:
            phase = 1
        if phase == 1 and k == 0 and i == m - 1:
            phase = 2
            taken[r].add(nominal)
            continue
        if phase == 1 or (phase == 0 and not explicit_w):
            taken[r].add(nominal)
            continue
        lists = ranks[r]
        for t in range(_v_after(ranks, r, k, i) + 1, nominal):
            if t not in taken[r]:
                lists[k][i] = t
                if _v_peak(lists, explicit_w) <= limit:
                    break
        else:
            lists[k][i] = nominal
        taken[r].add(lists[k][i])
    if not explicit_w:
        ranks = [_v_with_w(lists, split=False) for lists in ranks]
    return _v_squeeze(ranks)


def _v_controllable(p: int, m: int, memory: str) -> Sequence[Sequence[Cell]]:
    """The building block repeated for every microbatch, reordered with explicit W's, reordered
    again with the W's left to fill gaps, the W's split back to their stages; each rank runs its
    passes in slot order."""
    pattern = _v_pattern(p, memory)
    ranks = [[[t + 6 * i for i in range(m)] for t in offsets] for offsets in pattern]
    ranks = [lists[:4] for lists in _v_reorder(ranks, explicit_w=True)]
    ranks = [lists[:4] for lists in _v_reorder(ranks, explicit_w=False)]
    rows: list[list[Cell]] = []
    for r, lists in enumerate(ranks):
        up = 2 * p - 1 - r
        kind_of = [(r, Kind.F), (up, Kind.F), (up, Kind.I), (r, Kind.I), (up, Kind.W), (r, Kind.W)]
        timed = sorted((t, k, i) for k, lst in enumerate(_v_with_w(lists, split=True)) for i, t in enumerate(lst))
        rows.append([Action(kind_of[k][0], kind_of[k][1], i) for _, k, i in timed])
    return rows


def _v_half(p: int, v: int, m: int) -> Sequence[Sequence[Cell]]:
    """V-Half: forwards 2 slots apart, about half of 1F1B's activation memory."""
    return _v_controllable(p, m, "half")


def _v_min(p: int, v: int, m: int) -> Sequence[Sequence[Cell]]:
    """V-Min: forwards 1 slot apart, about a third of 1F1B's activation memory."""
    return _v_controllable(p, m, "min")


_GENERATORS: dict[str, Callable[[int, int, int], Sequence[Sequence[Cell]]]] = {
    "gpipe": _gpipe,
    "1f1b": _1f1b,
    "zb-h1": _zb_h1,
    "zb-h2": _zb_h2,
    "interleaved-1f1b": _interleaved_1f1b,
    "zb-v": _zb_v,
    "looped-bfs": _looped_bfs,
    "interleaved-zb": _interleaved_zb,
    "dualpipev": _dualpipev,
    "v-half": _v_half,
    "v-min": _v_min,
}
