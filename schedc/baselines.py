"""Hand-made pipeline schedules: the baselines every compiled schedule is compared with.

Problem: emit, for given stages N, ranks R and microbatches M, the per-rank action order of the
well-known schedules (GPipe, 1F1B, ZB-H1, ZB-H2, interleaved 1F1B, ZB-V, looped BFS, interleaved
zero bubble, DualPipeV, the controllable-memory V-Half and V-Min) as a :class:`schedc.ir.Schedule`,
so they can be simulated, validated, written as torch CSV and run by torch's
``_PipelineScheduleRuntime``.

Method: each schedule is a short rule over counters (warm-up length, steady F/B alternation,
cool-down), written from the papers' descriptions; where torch ships the same schedule the rules
are torch's (so warm-up lengths and microbatch-count restrictions agree with what torch users
know) and tests compare the two by simulation. Orders only: idle cells are not emitted, since the
simulator and torch's runtime both wait for data anyway. ZB-H2 and V-Half are defined by
construction rather than a formula: unit-time list schedules (see :func:`_zb_h2`, :func:`_v_half`).

Known torch quirk (torch 2.13): ``Schedule1F1B._get_pipeline_order`` (what
``get_schedule_ops`` and the visualizer show) starts the last rank's forwards at microbatch 1
(``1F1 1B0 1F2 ...`` ending in ``F{M}``), so its last rank never runs F0 and runs a
microbatch that does not exist. torch's real 1F1B execution (``_step_microbatches``) is correct;
only the reported order is off by one. schedc's 1F1B is the correct order (``F0 B0 F1 B1 ...``
on the last rank); tests pin this.

Cost: O(N x M) actions; ZB-H2's and V-Half's constructions step through about 6M + 2R unit time
steps x R ranks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

from schedc.errors import SchedcError
from schedc.ir import Action, Cell, Overlap, Schedule, loop_placement, v_placement


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
    BaselineInfo("v-half", "v", "controllable-memory V-Half: V building block squeezed and reordered "
                 "(I first, W fills gaps) within (R+2)//2 microbatches, about 1/2 of 1F1B's memory", _TWO),
    BaselineInfo("v-min", "v", "controllable-memory V-Min: V building block with all offsets 1; about "
                 "1/3 of 1F1B's activation memory", _TWO),
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
        raise SchedcError(f"{canonical}: --stages must be >= 1, got {n}")
    if m < 1:
        raise SchedcError(f"{canonical}: --mb must be >= 1, got {m}")
    r = _ranks_for(info, n, n_ranks)
    v = n // r
    if placement is not None and placement not in ("loop", "v"):
        raise SchedcError(f"{canonical}: --placement must be loop or v, got {placement!r}")
    if placement is not None and placement != info.placement and v > 1:
        raise SchedcError(
            f"{canonical} uses {info.placement} placement, not {placement}; drop --placement"
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
        raise SchedcError(f"{name}: --ranks must be >= 1, got {n_ranks}")
    if info.stages_per_rank == _SINGLE:
        if n_ranks is not None and n_ranks != n:
            raise SchedcError(
                f"{name} runs one stage per rank, so --ranks must equal --stages ({n}); for several "
                f"stages per rank use interleaved-1f1b, looped-bfs or interleaved-zb (loop) or zb-v (v)"
            )
        return n
    if info.stages_per_rank == _TWO:
        if n % 2 or (n_ranks is not None and n != 2 * n_ranks):
            want = f"--ranks {n // 2}" if n % 2 == 0 else "an even --stages"
            raise SchedcError(
                f"{name} needs exactly 2 stages per rank (stages = 2 x ranks); got {n} stages"
                + (f" on {n_ranks} ranks" if n_ranks else "") + f"; use {want}"
            )
        return n // 2
    # two or more stages per rank, loop placement
    if n_ranks is None:
        if n % 2 or n < 2:
            raise SchedcError(
                f"{name} needs >= 2 stages per rank; give --ranks R with --stages a multiple of R "
                f"and at least 2R (got {n} stages)"
            )
        return n // 2
    if n % n_ranks or n // n_ranks < 2:
        raise SchedcError(
            f"{name} needs >= 2 stages per rank (stages a multiple of ranks, at least 2 x ranks); got "
            f"{n} stages on {n_ranks} ranks; use e.g. --ranks {max(1, n // 2)}"
            + ("" if n % 2 == 0 else " with an even --stages")
            + (", or 1f1b / zb-h1 for one stage per rank" if n == n_ranks else "")
        )
    return n_ranks


# ---------------------------------------------------------------- one stage per rank


def _gpipe(p: int, v: int, m: int) -> list[list[Cell]]:
    return [[Action(r, "F", k) for k in range(m)] + [Action(r, "B", k) for k in range(m)] for r in range(p)]


def _1f1b(p: int, v: int, m: int) -> list[list[Cell]]:
    if m < p:
        raise SchedcError(f"1f1b needs --mb >= --stages ({p}) like torch's Schedule1F1B; got {m} "
                          f"(use gpipe, or more microbatches)")
    rows = []
    for r in range(p):
        warm = min(p - 1 - r, m)
        row: list[Cell] = [Action(r, "F", k) for k in range(warm)]
        for k in range(m - warm):
            row += [Action(r, "F", warm + k), Action(r, "B", k)]
        row += [Action(r, "B", k) for k in range(m - warm, m)]
        rows.append(row)
    return rows


def _zb_h1(p: int, v: int, m: int) -> list[list[Cell]]:
    """1F1B with B split into I and W. Rank r keeps 1F1B's R-1-r warm-up forwards and runs I
    where 1F1B runs B; the W of its first r backwards is postponed (W of microbatch j follows
    I of microbatch j + r), so every rank keeps R microbatches in flight at most, and the
    postponed W's fill the cool-down bubble: per-rank bubble (R-1)(F+I-W). This is also what
    torch's ScheduleInterleavedZeroBubble does with one stage per rank (tests check it)."""
    rows = []
    for r in range(p):
        warm = min(p - 1 - r, m)
        row: list[Cell] = [Action(r, "F", k) for k in range(warm)]
        next_w = 0
        for k in range(m):
            if k < m - warm:
                row.append(Action(r, "F", warm + k))
            row.append(Action(r, "I", k))
            if k >= r:
                row.append(Action(r, "W", next_w))
                next_w += 1
        row += [Action(r, "W", j) for j in range(next_w, m)]
        rows.append(row)
    return rows


def _zb_h2(p: int, v: int, m: int) -> list[list[Cell]]:
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
                order[r].append(Action(r, "I", i))
                finished.append((done_i[r], i))
                ni[r] += 1
                held[r] -= 0.5
            elif f < m and (r == 0 or done_f[r - 1][f] <= t) and held[r] + 1 <= cap:
                order[r].append(Action(r, "F", f))
                finished.append((done_f[r], f))
                nf[r] += 1
                held[r] += 1
            elif nw[r] < ni[r]:
                order[r].append(Action(r, "W", nw[r]))
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
        raise SchedcError(
            f"{name} needs --mb to be a multiple of max(1, mb // ranks) = {rounds}, like torch's "
            f"interleaved schedules; got {m} (use e.g. {lower} or {higher})"
        )
    return m // rounds


def _interleaved(p: int, v: int, m: int, zero_bubble: bool) -> list[list[Cell]]:
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
    bwd_kind = "I" if zero_bubble else "B"
    rows = []
    for r in range(p):
        warm = min((v - 1) * per_round + (1 if zero_bubble else 2) * (p - 1 - r), total)

        def f_stage(op: int) -> int:
            return ((op // per_round) % v) * p + r

        def b_stage(j: int) -> int:
            return (v - 1 - (j // per_round) % v) * p + r

        f_count: dict[int, int] = {}
        b_count: dict[int, int] = {}
        w_count: dict[int, int] = {}
        b_stages: list[int] = []
        row: list[Cell] = []

        def take(counter: dict[int, int], stage: int) -> int:
            counter[stage] = counter.get(stage, 0) + 1
            return counter[stage] - 1

        def add_w() -> None:
            s = b_stages[sum(w_count.values())]
            row.append(Action(s, "W", take(w_count, s)))

        for op in range(warm):
            s = f_stage(op)
            row.append(Action(s, "F", take(f_count, s)))
        for j in range(total):
            if warm + j < total:
                s = f_stage(warm + j)
                row.append(Action(s, "F", take(f_count, s)))
            s = b_stage(j)
            row.append(Action(s, bwd_kind, take(b_count, s)))
            b_stages.append(s)
            if zero_bubble and j >= r:
                add_w()
        while zero_bubble and sum(w_count.values()) < total:
            add_w()
        rows.append(row)
    return rows


def _interleaved_1f1b(p: int, v: int, m: int) -> list[list[Cell]]:
    return _interleaved(p, v, m, zero_bubble=False)


def _interleaved_zb(p: int, v: int, m: int) -> list[list[Cell]]:
    return _interleaved(p, v, m, zero_bubble=True)


def _looped_bfs(p: int, v: int, m: int) -> list[list[Cell]]:
    """Breadth-first: every microbatch through local stage 0, then local stage 1, ...; then the
    backwards from the last local stage down, newest microbatch first (as torch orders them)."""
    rows = []
    for r in range(p):
        stages = [c * p + r for c in range(v)]
        row: list[Cell] = [Action(s, "F", k) for s in stages for k in range(m)]
        row += [Action(s, "B", k) for s in reversed(stages) for k in reversed(range(m))]
        rows.append(row)
    return rows


# ---------------------------------------------------------------- two stages per rank, V placement


def _zb_v(p: int, v: int, m: int) -> list[list[Cell]]:
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
        row: list[Cell] = []

        def add(*steps: tuple[int, str]) -> None:
            for s, kind in steps:
                row.append(Action(s, kind, cnt[(s, kind)]))
                cnt[(s, kind)] += 1

        for _ in range(2 * (p - r) - 1):
            add((s0, "F"))
        for _ in range(r):
            add((s1, "F"), (s0, "F"))
        for _ in range(p - r):
            add((s1, "F"), (s1, "I"), (s1, "W"))
        while cnt[(s1, "F")] < cnt[(s0, "F")] or cnt[(s0, "F")] < mm:
            if cnt[(s0, "F")] < mm:
                add((s0, "F"))
            add((s0, "I"), (s0, "W"), (s1, "F"), (s1, "I"), (s1, "W"))
        for _ in range(r):
            add((s0, "I"), (s1, "I"))
        for _ in range(p - r):
            add((s0, "I"), (s0, "W"))
        while cnt[(s1, "W")] < cnt[(s1, "I")]:
            add((s1, "W"))
        while cnt[(s0, "W")] < cnt[(s0, "I")]:
            add((s0, "W"))
        rows.append([a for a in row if a.microbatch < m])
    return rows


def _dualpipev(p: int, v: int, m: int) -> list[list[Cell]]:
    """DeepSeek's DualPipeV as torch orders it (ScheduleDualPipeV). Rank r holds stages r and
    2R-1-r. Phases: 2(R-1-r) chunk-0 F's; r+1 pairs (F0, F1); R-1-r triples (I1, W, F1); the
    main phase of M-2R+r+1 pairs of overlapped cells (F0 with B1, F1 with B0; the last rank
    runs its first F0, B1 unoverlapped); R-1-r of (B1, F1 with B0); r+1 pairs of backwards
    (B1, B0) switching to I halfway; R-1-r of (W, chunk-0 backward); r+1 W's. A W always
    takes the oldest pending I. Overlapped cells are Overlap cells: torch runs their parts as
    one step, schedc's simulator back to back."""
    if m < 2 * p:
        raise SchedcError(f"dualpipev needs --mb >= --stages ({2 * p}) like torch's ScheduleDualPipeV; got {m}")
    n = 2 * p
    rows = []
    for r in range(p):
        s0, s1 = r, n - 1 - r
        f = {s0: 0, s1: 0}
        b = {s0: 0, s1: 0}  # I and B share one counter: both are "the backward of microbatch k"
        pending_w: list[Action] = []
        row: list[Cell] = []

        def fwd(s: int) -> Action:
            f[s] += 1
            return Action(s, "F", f[s] - 1)

        def bwd(s: int, kind: str) -> Action:
            b[s] += 1
            a = Action(s, kind, b[s] - 1)
            if kind == "I":
                pending_w.append(Action(s, "W", a.microbatch))
            return a

        def w() -> None:
            if pending_w:
                row.append(pending_w.pop(0))

        row += [fwd(s0) for _ in range(2 * (p - 1 - r))]
        for _ in range(r + 1):
            row += [fwd(s0), fwd(s1)]
        for _ in range(p - 1 - r):
            row.append(bwd(s1, "I"))
            w()
            row.append(fwd(s1))
        for i in range(m - 2 * p + r + 1):
            if i == 0 and r == p - 1:
                row += [fwd(s0), bwd(s1, "B")]
            else:
                row.append(Overlap((fwd(s0), bwd(s1, "B"))))
            row.append(Overlap((fwd(s1), bwd(s0, "B"))))
        for _ in range(p - 1 - r):
            row.append(bwd(s1, "B"))
            row.append(Overlap((fwd(s1), bwd(s0, "B"))))
        split = False
        half = (r + 1) // 2
        for i in range(r + 1):
            if i == half and r % 2 == 1:
                split = True
            row.append(bwd(s1, "I" if split else "B"))
            if i == half and r % 2 == 0:
                split = True
            row.append(bwd(s0, "I" if split else "B"))
        for _ in range(p - 1 - r):
            w()
            row.append(bwd(s0, "I" if split else "B"))
        for _ in range(r + 1):
            w()
        rows.append(row)
    return rows


def _v_block(p: int, forward_offset: int) -> dict[tuple[str, int], int]:
    """The building block of Qi et al. 2024 ("Pipeline Parallelism with Controllable Memory",
    section 4) for the V placement, in unit time (F = I = W = 1): the start of F, I and W of one
    microbatch on every stage. Consecutive forwards are `forward_offset` apart (1 at the V's
    turn, where both stages sit on the last rank), consecutive backwards 1 apart, and each W
    takes the first slot after its I. Repeated every T = 6 units (two stages x F, I, W per rank)
    the blocks must not collide, so each pass takes the first time whose residue mod 6 is still
    free on its rank. A rank's activation memory is set by the block's lifespan (F start to W
    end, summed over its two stages) divided by T: about (2R-1)(offset_F + offset_B) / 6 stage
    activations, i.e. 1/3 of 1F1B's for offsets (1, 1)."""
    n, period = 2 * p, 6
    rank = v_placement(n, p)
    used: list[set[int]] = [set() for _ in range(p)]
    start: dict[tuple[str, int], int] = {}

    def place(kind: str, s: int, earliest: int) -> None:
        t = earliest
        while t % period in used[rank[s]]:
            t += 1
        used[rank[s]].add(t % period)
        start[(kind, s)] = t

    place("F", 0, 0)
    for s in range(1, n):
        place("F", s, start[("F", s - 1)] + (1 if s == p else forward_offset))
    place("I", n - 1, start[("F", n - 1)] + 1)
    for s in range(n - 2, -1, -1):
        place("I", s, start[("I", s + 1)] + 1)
    for s in range(n):
        place("W", s, start[("I", s)] + 1)
    return start


def _v_repeated(p: int, m: int, forward_offset: int) -> list[list[Cell]]:
    """The block repeated every 6 units for each microbatch; each rank runs its passes in the
    order of their nominal start times. The simulator's earliest-start timing then squeezes out
    the warm-up and cool-down gaps (the paper's "squeezing"); the nominal times form a valid
    unit-time schedule, so the order cannot deadlock."""
    block = _v_block(p, forward_offset)
    rank = v_placement(2 * p, p)
    timed: list[list[tuple[int, Action]]] = [[] for _ in range(p)]
    for k in range(m):
        for (kind, s), t in block.items():
            timed[rank[s]].append((t + 6 * k, Action(s, kind, k)))
    return [[a for _, a in sorted(row, key=lambda x: x[0])] for row in timed]


def _v_half(p: int, v: int, m: int) -> list[list[Cell]]:
    """V-Half (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory", section 4, V-Shape
    building blocks, and its memory table): a V schedule holding at most (R+2)//2 microbatches
    of a rank's two stages, about half of 1F1B's activation memory, counted the paper's way (a
    microbatch's activation lives from its F to the end of its W, so I frees nothing; any
    accounting where I frees part of it only lowers the peak).

    Problem: an order per rank that keeps that memory bound and loses as little time as
    possible in warm-up and cool-down. Repeating the V-Half building block (forward offsets 2,
    backward offsets 1) and keeping each rank's passes in block order, as :func:`_v_repeated`
    does for V-Min, leaves gaps the paper removes by squeezing *and reordering* (its figure 18):
    passes that are ready move ahead of passes that are not.

    Method: a unit-time list schedule (F = I = W = 1) that does that squeezing directly. At
    every time step each rank runs, among its ready passes, the first by (I before F before W,
    oldest microbatch, first stage of the V before the second): I's are on the critical path
    back down the V; W's fill the time nothing else can use. A forward runs only while the rank
    stays within the memory bound, and the first stage's forwards leave room for the second
    stage's microbatches in flight: ceil((r+1)/2) on rank r, the lifespan of the building
    block's second-stage pass there (3(r+1) units: r forward hops of 2, the backward hops of 1,
    I and W) over the period of 6, so the V's turn is never starved. Memory depends only on
    each rank's order (F allocates, W frees), so the bound holds under any costs and runtime;
    the order comes from a valid unit-time execution, so it cannot deadlock. With 4 ranks it
    meets the lower bound 6M + 5 (53 / 101 for 8 / 16 microbatches).

    Cost: O((6M + R) x R) steps of at most 6 candidates each."""
    n = 2 * p
    cap = 2 * ((p + 2) // 2)  # stage activations = (R+2)//2 microbatches of both stages
    done: dict[tuple[str, int], int] = {}  # (kind, stage) -> microbatches finished
    ends: dict[Action, int] = {}
    held = [[0, 0] for _ in range(p)]  # per rank: activations of its first / second stage
    rows: list[list[Cell]] = [[] for _ in range(p)]
    t, total = 0, 3 * n * m
    while len(ends) < total:
        if t > 6 * m * n + 4 * n:  # a unit-time order finishes well before this
            raise SchedcError(f"v-half: no order found for {p} ranks and {m} microbatches")
        for r in range(p):
            ready = [a for a in _v_half_candidates(r, n, m, done) if _v_half_ready(a, n, ends, t)]
            ready = [a for a in ready if a.kind != "F" or _v_half_fits(a, r, held[r], cap)]
            if not ready:
                continue
            a = min(ready, key=lambda a: ("IFW".index(a.kind), a.microbatch, a.stage != r))
            rows[r].append(a)
            ends[a] = t + 1
            done[(a.kind, a.stage)] = a.microbatch + 1
            held[r][a.stage != r] += {"F": 1, "I": 0, "W": -1}[a.kind]
        t += 1
    return rows


def _v_half_candidates(r: int, n: int, m: int, done: dict[tuple[str, int], int]) -> list[Action]:
    """The next F, I and W of each of rank r's stages (each kind runs microbatches in order)."""
    out = []
    for s in (r, n - 1 - r):
        for kind in "FIW":
            k = done.get((kind, s), 0)
            if k < m:
                out.append(Action(s, kind, k))
    return out


def _v_half_ready(a: Action, n: int, ends: dict[Action, int], t: int) -> bool:
    s, k = a.stage, a.microbatch
    if a.kind == "F":
        deps = [Action(s - 1, "F", k)] if s else []
    elif a.kind == "I":
        deps = [Action(s, "F", k)] + ([Action(s + 1, "I", k)] if s < n - 1 else [])
    else:
        deps = [Action(s, "I", k)]
    return all(ends.get(d, t + 1) <= t for d in deps)


def _v_half_fits(a: Action, r: int, held: list[int], cap: int) -> bool:
    if held[0] + held[1] + 1 > cap:
        return False
    reserve = (r + 2) // 2  # ceil((r+1)/2): the second stage's in-flight microbatches
    return a.stage != r or held[0] + 1 <= cap - reserve


def _v_min(p: int, v: int, m: int) -> list[list[Cell]]:
    return _v_repeated(p, m, forward_offset=1)


_GENERATORS: dict[str, Callable[[int, int, int], list[list[Cell]]]] = {
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
