"""The one cost model: what every action costs in time and memory, and what each rank may hold.

Problem: the simulator, the validator, the problem graph (and through it every engine and bound)
and the partition search must agree on one memory rule (docs/design.md, "Dependencies"): per
rank, peak = static bytes + the receive buffers and held sends of the torch version in use + the
reserve + the largest running sum of held bytes, where each action's transient bytes are live on
top while it runs. F allocates ``activation_bytes`` at its start; I moves a microbatch's bytes to
``weight_grad_bytes`` (a rise counts from I's start, like an F); W frees them at its end; B frees
all at its end. Inside an ``OVERLAP_F_B`` cell the allocations of all parts count before any part
frees (torch's liveness analysis counts both actions of a B-first cell as live).

Method: :class:`CostModel` is built once from (profile as the runtime executes it, placement,
microbatches, memory limit) and answers, per (stage, kind): ``duration``, ``held`` (the change
of held bytes), ``over`` (bytes above the held bytes before it while it runs: its allocation at
start plus its transient); per rank: ``static``, ``buffers`` (:func:`buffer_bytes`), ``reserve``,
``fixed`` (the three held all step), ``caps``, ``room`` (cap minus fixed) and ``least_caps`` (the
least cap under which some schedule fits: :func:`least_need`, what the planner filters partitions
and floors its least-memory search with). :func:`fits` is the one "peak fits its cap" test (the
REL tolerance of schedc.core.tolerances). The rules take a StageCost or arrays alike: before a
partition is known, :class:`Segments` gives every run of units of a per-unit profile its merged
stage's bytes, and :func:`microbatch_need`, :func:`segments_need` and :func:`boundary_buffers`
answer for all runs at once (schedc.core.partition's programs over partitions). A memory term is
added here (and in its tests): the engines and the planner read ``held``/``over``/``room``/
``least_caps`` and never a stage field.

Receive buffers and held sends (torch/distributed/pipelining/stage.py and schedules.py):
torch up to 2.14 preallocates, per microbatch, a receive buffer for the activation of every
stage whose previous stage sits on another rank and for the gradient of every stage whose next
stage does, and holds them through the step, and ``_PipelineScheduleRuntime`` keeps every send's
work object, and with it the sent tensor, until the step ends: M activations forward and M
gradients backward per cross-rank boundary. 2.15 allocates a receive buffer just in time (one
per boundary and direction is live) and retires an activation's send right after its local
backward (``_add_wait_send``: a WAIT_SEND_F after the I or B), releasing the stage's reference to
the output; the gradients' sends wait at the step's end (M per boundary, on the later rank), and
a last stage that runs B keeps each microbatch's received input to the end too (the losses it
keeps hold their graphs: counted on the last stage whatever its backward, an upper estimate where
it splits it). The activations' sends are still counted all step on the earlier rank, an upper
estimate: their outputs are held from F to I, and the counted route's activations leave a
stage's output out (the next stage's first norm saves it), so counting them with the microbatches
in flight would take a term per stage and action that this model does not have.
Boundaries between two stages on one rank do not communicate, but up to 2.14 their stage
preallocates both buffers per microbatch anyway (each replaced by the local tensor when its
microbatch arrives; counted all step, an upper estimate). The version is
``profile.assumes["torch"]`` when given, else :data:`NEWEST_TORCH`. A profile without
``boundary_bytes`` has no buffers.

Cost: O(stages + ranks) to build; every query O(1); :class:`Segments` O(units^2).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence, Union

import numpy as np

from schedc.core.ir import KIND_TABLE, Kind, kinds
from schedc.core.tolerances import REL

if TYPE_CHECKING:
    from schedc.core.costs import MemoryLimit, Profile, StageCost

# the newest torch whose pipelining schedc models: receive buffers allocated just in time
NEWEST_TORCH = "2.15"


def fits(peak: float, cap: float) -> bool:
    """The one test of "this peak fits this cap" (schedc.core.tolerances.REL, relative and absolute)."""
    return peak <= cap * (1 + REL) + REL


def fits_room(held: float, room: float) -> bool:
    """The same test where an engine tracks the running sum against a rank's room (cap minus the
    bytes held all step): relative to the room, so huge static bytes cannot hide a small excess."""
    return held <= room + REL * max(1.0, abs(room))


def held_delta(c: "StageCost", kind: str) -> float:
    """Change of a rank's held bytes when it runs this action, the kind's ``held`` rule in
    schedc.core.ir.KIND_TABLE (F +act, I wg - act, W -wg, B -act)."""
    return KIND_TABLE[kind].held(c)


def torch_first_stage(first: "StageCost") -> "StageCost":
    """Stage 0 as torch's ``_PipelineScheduleRuntime`` runs it: it skips stage 0's input
    backward (no stage before it needs the gradient), so I takes no time and frees nothing, W
    runs the whole backward and frees the whole activation, and W and B carry the backward's
    transient (``StageCost.transient("B")``). The one place this rewrite is coded
    (``Profile.merge`` and ``Profile.executed`` and :class:`Segments` call it); idempotent."""
    whole = first.transient(Kind.B)
    transients = None if not first.transient_bytes else {
        Kind.F: first.transient(Kind.F), Kind.I: 0.0, Kind.W: whole, Kind.B: whole}
    return first.model_copy(update={
        "backward_input": 0.0, "backward_weight": first.backward_input + first.backward_weight,
        "weight_grad_bytes": first.activation_bytes, "transient_bytes": transients})


def _max(a, b):
    """max for numbers, elementwise for arrays: the rules below serve one stage or a table of them."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return max(a, b)


def _where(cond, a, b):
    if isinstance(cond, np.ndarray):
        return np.where(cond, a, b)
    return a if cond else b


def over(c: "StageCost", kind: str) -> float:
    """Bytes above what the rank held before this action, while it runs: what it allocates at its
    start (F's activation, I's rise) plus its transient bytes."""
    return _max(0.0, held_delta(c, kind)) + c.transient(kind)


def cell_over(parts: Sequence[tuple["StageCost", str]]) -> float:
    """`over` of an overlap cell: the allocations of all parts count before any part frees, and
    the largest transient on top (its parts run one after another)."""
    alloc = sum(max(0.0, held_delta(c, k)) for c, k in parts)
    return alloc + max((c.transient(k) for c, k in parts), default=0.0)


def torch_version(profile: "Profile") -> str:
    """The torch whose pipelining the run uses: ``assumes["torch"]``, else :data:`NEWEST_TORCH`."""
    given = (profile.assumes or {}).get("torch")
    return str(given) if given else NEWEST_TORCH


def preallocates(version: str) -> bool:
    """True for torch versions that preallocate a receive buffer per microbatch (before 2.15)."""
    m = re.match(r"\s*(\d+)\.(\d+)", version)
    if not m:
        return False
    return (int(m.group(1)), int(m.group(2))) < (2, 15)


def boundary_buffers(size, n_microbatches: int, version: str, same_rank=False, into_last=False):
    """Bytes a boundary of `size` bytes per microbatch holds all step (module docstring) on each
    of its two ranks, or with `into_last` on the later one of the boundary into the pipeline's
    last stage (from 2.15 it also keeps that stage's inputs); on one rank (`same_rank`) the
    rank's whole. Elementwise over arrays."""
    M = n_microbatches
    if preallocates(version):
        # across ranks: M activations received (gradients sent back) on the later rank, M
        # gradients received (activations sent) on the earlier one. On one rank nothing is sent,
        # but the stage still preallocates both buffers per microbatch
        # (PipelineStage._setup_forward_recv_info, _create_grad_recv_info); each is replaced by
        # the local tensor when its microbatch gets there: counted all step (an upper estimate)
        return _where(same_rank, 2 * M * size, M * size + M * size)
    # one receive live and M sends on each side (the earlier side's retire after each local
    # backward: counted all step, module docstring); a last stage's M inputs on the later side
    return _where(same_rank, 0.0 * size, 1 * size + M * size + _where(into_last, M * size, 0.0 * size))


def buffer_bytes(profile: "Profile", placement: Sequence[int], n_microbatches: int,
                 version: Optional[str] = None) -> list[float]:
    """Per rank: receive buffers plus held sends (module docstring), in bytes."""
    out = [0.0] * (max(placement) + 1)
    if profile.boundary_bytes is None:
        return out
    version = version or torch_version(profile)
    last = len(placement) - 2  # the boundary into the last stage
    for b in range(len(placement) - 1):
        lo, hi = placement[b], placement[b + 1]
        size = profile.boundary_after(b)
        if lo == hi:
            out[lo] += boundary_buffers(size, n_microbatches, version, same_rank=True)
            continue
        out[lo] += boundary_buffers(size, n_microbatches, version)
        out[hi] += boundary_buffers(size, n_microbatches, version, into_last=b == last)
    return out


def rank_static_bytes(profile: "Profile", placement: Sequence[int]) -> list[float]:
    """Per rank: the static bytes (params, grads, optimizer state) of its stages."""
    out = [0.0] * (max(placement) + 1)
    for s, r in enumerate(placement):
        out[r] += profile.stages[s].static_bytes
    return out


def fixed_bytes(profile: "Profile", placement: Sequence[int], n_microbatches: Optional[int] = None) -> list[float]:
    """Per rank: bytes held all step: static + buffers + reserve. ``n_microbatches`` None: as many
    as ranks (1F1B's steady state, what ``Kp`` refers to)."""
    m = n_microbatches if n_microbatches is not None else max(placement) + 1
    reserve = profile.reserve_bytes or 0.0
    return [st + bu + reserve for st, bu in zip(rank_static_bytes(profile, placement),
                                                buffer_bytes(profile, placement, m))]


def one_f_one_b_peaks(profile: "Profile", placement: Sequence[int]) -> list[float]:
    """Per rank: 1F1B's peak above the fixed bytes when it runs each rank's stages as one stage
    (M >= R): R - q microbatches of all the rank's stages (q: the rank's position in the chain of
    ranks ordered by first stage), plus the largest transient of an F or a full backward B while
    that many are held (1F1B runs full backwards, so I's rise is inside B's transient)."""
    n_ranks = max(placement) + 1
    first = [min(s for s, r in enumerate(placement) if r == rank) for rank in range(n_ranks)]
    position = {rank: q for q, rank in enumerate(sorted(range(n_ranks), key=lambda rank: first[rank]))}
    act = [0.0] * n_ranks
    top = [0.0] * n_ranks
    for s, r in enumerate(placement):
        c = profile.stages[s]
        act[r] += c.activation_bytes
        top[r] = max(top[r], c.transient(Kind.F), c.transient(Kind.B))
    return [(n_ranks - position[r]) * act[r] + top[r] for r in range(n_ranks)]


def caps(memory: Optional["MemoryLimit"], profile: "Profile", placement: Sequence[int],
         n_microbatches: Optional[int] = None) -> list[float]:
    """The cap in bytes for each rank, everything included (inf when none). A byte cap is the
    GPU's size; ``Kp`` is max over r of fixed_r + K x 1F1B's peak on r, one cap for every rank."""
    n_ranks = max(placement) + 1
    if memory is None or memory.kind == "none":
        return [math.inf] * n_ranks
    if memory.kind == "bytes":
        return [memory.value] * n_ranks
    fixed = fixed_bytes(profile, placement, n_microbatches)
    peaks = one_f_one_b_peaks(profile, placement)
    return [max(fx + memory.value * pk for fx, pk in zip(fixed, peaks))] * n_ranks


def p_needed(peak: float, profile: "Profile", placement: Sequence[int],
             n_microbatches: Optional[int] = None) -> float:
    """The smallest K such that a rank peaking at `peak` bytes (everything included) fits under
    ``Kp``: min over ranks r of (peak - fixed_r) / peak1F1B_r, at least 0."""
    fixed = fixed_bytes(profile, placement, n_microbatches)
    peaks = one_f_one_b_peaks(profile, placement)
    if any(pk == 0 and fx >= peak for fx, pk in zip(fixed, peaks)):
        return 0.0
    ks = [(peak - fx) / pk for fx, pk in zip(fixed, peaks) if pk > 0]
    return max(0.0, min(ks)) if ks else math.inf


def one_microbatch_need(profile: "Profile", stages: Sequence[int]) -> float:
    """The least running-sum peak of any schedule on a rank holding `stages`
    (:func:`microbatch_need` of them in stage order)."""
    return float(microbatch_need([profile.stages[s] for s in sorted(stages)]))


def microbatch_need(stages: Sequence) -> float:
    """The least running-sum peak of any schedule on a rank holding `stages` (in stage order):
    one microbatch's forwards through them in order, then each backward from the last stage down
    (I then W, or B where W costs nothing) -- every schedule passes through this state for some
    microbatch, and running microbatches one at a time needs no more. A stage is a StageCost or
    anything with its byte fields, ``backward_weight`` and ``transient(kind)``; with arrays for
    them (:meth:`Segments.stage`) the answer is elementwise."""
    held = peak = 0.0
    for c in stages:
        peak = _max(peak, held + over(c, Kind.F))
        held = held + held_delta(c, Kind.F)
    for c in reversed(stages):
        after_i = held + held_delta(c, Kind.I)
        split_peak = _max(held + over(c, Kind.I), after_i + over(c, Kind.W))
        split = c.backward_weight > 0
        peak = _max(peak, _where(split, split_peak, held + over(c, Kind.B)))
        held = _where(split, after_i + held_delta(c, Kind.W), held + held_delta(c, Kind.B))
    return peak


def least_need(profile: "Profile", stages: Sequence[int], buffers: float = 0.0) -> float:
    """The least cap (bytes, everything included) under which a rank holding `stages` runs some
    schedule: their static bytes, its `buffers` (receive buffers and held sends, which depend on
    the placement: :func:`buffer_bytes`), the reserve, and :func:`one_microbatch_need` -- every
    schedule reaches that peak, and running the microbatches one at a time reaches no more. With
    ``buffers`` left at 0 it is a lower bound for every placement of these stages."""
    static = sum(profile.stages[s].static_bytes for s in stages)
    return static + buffers + float(profile.reserve_bytes or 0.0) + one_microbatch_need(profile, stages)


def segments_need(segs: "Segments", segments: Sequence[tuple], buffers=0.0):
    """:func:`least_need` of a rank holding the stages made of the unit runs `segments` ((i, j)
    boundary arrays, in stage order) of :class:`Segments`, elementwise."""
    static = sum(segs.static[j] - segs.static[i] for i, j in segments)
    return static + buffers + segs.reserve + microbatch_need([segs.stage(i, j) for i, j in segments])


@dataclass(frozen=True)
class SegmentStage:
    """The byte fields of the stages made of unit runs [i, j) (arrays), as the rules above read a
    StageCost."""

    segs: "Segments"
    i: Union[int, np.ndarray]
    j: Union[int, np.ndarray]

    def _at(self, table: np.ndarray):
        return table[self.i, self.j]

    @property
    def activation_bytes(self):
        return self._at(self.segs.act)

    @property
    def weight_grad_bytes(self):
        return self._at(self.segs.wg)

    @property
    def backward_weight(self):
        return self._at(self.segs.bw)

    def transient(self, kind: str):
        return self._at(self.segs.top[kind])


@dataclass(frozen=True)
class Segments:
    """A per-unit profile's stages before the partition is known: for every run of units
    [i, j), the byte fields of the stage a partition makes of it (``Profile.merge``, as torch
    executes it), as (U+1) x (U+1) tables, so the rules above (:func:`microbatch_need`,
    :func:`segments_need`, :func:`boundary_buffers`) answer for all partitions at once.

    Method: prefix sums for the bytes and W's seconds; per kind the running maximum of the units'
    transients (a merged stage's transient is its largest unit's; one with no unit measured has
    none but B's, its rise, as ``StageCost.transient`` says); the runs starting at unit 0 (torch's
    stage 0: its whole backward in W, its activation held until then) by merging them.
    ``static`` holds prefix sums, ``cut[x]`` the bytes at the boundary before unit x (0 at both
    ends). Cost: O(U^2) time and memory."""

    act: np.ndarray
    wg: np.ndarray
    bw: np.ndarray
    top: dict
    static: np.ndarray
    cut: np.ndarray
    reserve: float
    version: str

    @classmethod
    def of(cls, profile: "Profile") -> "Segments":
        units, n = profile.stages, profile.n_stages

        def table(values):
            prefix = np.concatenate([[0.0], np.cumsum(np.asarray(values, dtype=float))])
            return np.triu(prefix[None, :] - prefix[:, None], 1)

        act = table([c.activation_bytes for c in units])
        wg = table([c.weight_grad_bytes for c in units])
        bw = table([c.backward_weight for c in units])
        measured = table([1.0 if c.transient_bytes else 0.0 for c in units]) > 0
        top = {}
        for k in kinds():
            values = np.array([c.transient(k) for c in units], dtype=float)
            t = np.zeros((n + 1, n + 1))
            for i in range(n):  # row i: the running maximum over units i, i+1, ...
                t[i, i + 1:] = np.maximum.accumulate(values[i:])
            top[k] = np.where(measured, t, np.maximum(wg - act, 0.0) if k == Kind.B else 0.0)
        for j in range(1, n + 1):  # runs from unit 0: the merged stage itself
            first = torch_first_stage(profile.merge([j] + ([n - j] if j < n else [])).stages[0])
            act[0, j], wg[0, j], bw[0, j] = first.activation_bytes, first.weight_grad_bytes, first.backward_weight
            for k in kinds():
                top[k][0, j] = first.transient(k)
        cut = np.zeros(n + 1)
        if profile.boundary_bytes is not None:
            cut[1:n] = [profile.boundary_after(x) for x in range(n - 1)]
        return cls(act=act, wg=wg, bw=bw, top=top, static=np.concatenate(
            [[0.0], np.cumsum([c.static_bytes for c in units])]), cut=cut,
            reserve=float(profile.reserve_bytes or 0.0), version=torch_version(profile))

    @property
    def has_buffers(self) -> bool:
        return bool(self.cut.any())

    def stage(self, i, j) -> SegmentStage:
        return SegmentStage(self, i, j)

    def buffers(self, x, n_microbatches: int, same_rank=False, into_last=False):
        """:func:`boundary_buffers` of the boundary before unit `x` (arrays: elementwise)."""
        return boundary_buffers(self.cut[x], n_microbatches, self.version, same_rank, into_last)


def has_new_terms(profile: "Profile") -> bool:
    """True when some action allocates at I (weight_grad_bytes > activation_bytes) or has
    transient bytes: the relaxations that assume neither use their fallback."""
    return any((c.weight_grad_bytes or 0.0) > c.activation_bytes or c.transient_bytes for c in profile.stages)


def _room(memory: Optional["MemoryLimit"], profile: "Profile", placement: Sequence[int], fixed: list[float],
          cap: list[float]) -> list[float]:
    """cap - fixed per rank, without cancelling: under ``Kp`` each rank's room is formed from the
    differences of fixed bytes and K x 1F1B's peaks, so huge static bytes cannot round a small
    activation part away (the cap itself is a sum where they can)."""
    if memory is None or memory.kind != "relative":
        return [c - fx for c, fx in zip(cap, fixed)]
    peaks = one_f_one_b_peaks(profile, placement)
    return [max((fq - fx) + memory.value * pq for fq, pq in zip(fixed, peaks)) for fx in fixed]


@dataclass(frozen=True)
class CostModel:
    """One problem's costs (module docstring). ``profile`` is as the runtime executes it."""

    profile: "Profile"
    placement: tuple[int, ...]
    n_microbatches: int
    caps: tuple[float, ...]
    static: tuple[float, ...]
    buffers: tuple[float, ...]
    reserve: float
    room: tuple[float, ...]  # per rank: what the cap leaves for the running sum (cap - fixed)

    @classmethod
    def build(cls, profile: "Profile", placement: Sequence[int], n_microbatches: int,
              memory: Optional["MemoryLimit"] = None) -> "CostModel":
        placement = tuple(placement)
        static = rank_static_bytes(profile, placement)
        buffers = buffer_bytes(profile, placement, n_microbatches)
        reserve = float(profile.reserve_bytes or 0.0)
        fixed = [st + bu + reserve for st, bu in zip(static, buffers)]
        cap = caps(memory, profile, placement, n_microbatches)
        return cls(profile=profile, placement=placement, n_microbatches=n_microbatches, caps=tuple(cap),
                   static=tuple(static), buffers=tuple(buffers), reserve=reserve,
                   room=tuple(_room(memory, profile, placement, fixed, cap)))

    @property
    def n_ranks(self) -> int:
        return len(self.caps)

    @property
    def fixed(self) -> list[float]:
        """Per rank: static + buffers + reserve, held all step."""
        return [st + bu + self.reserve for st, bu in zip(self.static, self.buffers)]

    def stages_of(self, rank: int) -> list[int]:
        return [s for s, r in enumerate(self.placement) if r == rank]

    @property
    def least_caps(self) -> list[float]:
        """Per rank: the least cap under which some schedule fits (:func:`least_need` with the
        rank's buffers): a cap below it on any rank leaves no schedule."""
        return [least_need(self.profile, self.stages_of(r), self.buffers[r]) for r in range(self.n_ranks)]

    def duration(self, stage: int, kind: str) -> float:
        return self.profile.duration(stage, kind)

    def activation(self, stage: int) -> float:
        """Bytes one microbatch of `stage` holds from its F's start until its backward frees them."""
        return held_delta(self.profile.stages[stage], Kind.F)

    def weight_grad(self, stage: int) -> float:
        """Bytes one microbatch of `stage` holds between the end of its I and the end of its W
        (what the W frees)."""
        return -held_delta(self.profile.stages[stage], Kind.W)

    def held(self, stage: int, kind: str) -> float:
        return held_delta(self.profile.stages[stage], kind)

    def over(self, stage: int, kind: str) -> float:
        return over(self.profile.stages[stage], kind)

    def transient(self, stage: int, kind: str) -> float:
        return self.profile.stages[stage].transient(kind)

    def cell_over(self, parts: Sequence[tuple[int, str]]) -> float:
        """:func:`cell_over` of the (stage, kind) parts of one cell."""
        return cell_over([(self.profile.stages[s], k) for s, k in parts])

    @property
    def new_terms(self) -> bool:
        return has_new_terms(self.profile)
