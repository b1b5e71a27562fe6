"""The schedule model every other part of schedc speaks.

An :class:`Action` is one unit of pipeline work: a forward (F), a backward for inputs (I), a
backward for weights (W) or a full backward (B = I and W in one call) of one microbatch on one
stage. An :class:`Overlap` is torch's ``OVERLAP_F_B`` cell (DualPipeV): several actions issued as
one, which schedc treats as its parts run back to back.

A :class:`Schedule` is, for every rank, the ordered list of cells that rank executes (``None`` is
an idle slot, kept so that a CSV round-trips cell for cell), plus the stage-to-rank placement and
the microbatch count. Placement conventions (``loop``, ``v``) are the ones torchtitan and NeMo
AutoModel use to build stages; any explicit mapping is legal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence, Union

KINDS = ("F", "I", "W", "B")


# slots: a million actions take 56 MB instead of 340 MB, and hash faster
@dataclass(frozen=True, order=True, slots=True)
class Action:
    """One unit of pipeline work: kind F (forward), I (backward for inputs), W (backward for
    weights) or B (full backward) of one microbatch on one stage; ``str()`` is torch's CSV
    cell, e.g. ``3F0``."""

    stage: int
    kind: str  # one of KINDS
    microbatch: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"action kind must be one of {'/'.join(KINDS)}, got {self.kind!r}")
        if self.stage < 0 or self.microbatch < 0:
            raise ValueError(f"stage and microbatch must be >= 0, got {self.stage}, {self.microbatch}")

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"

    @property
    def parts(self) -> tuple["Action", ...]:
        return (self,)


@dataclass(frozen=True, slots=True)
class Overlap:
    """Several actions in one cell (torch's ``(0F7;7B3)OVERLAP_F_B``), run back to back."""

    actions: tuple[Action, ...]
    label: str = "OVERLAP_F_B"

    def __str__(self) -> str:
        return "(" + ";".join(str(a) for a in self.actions) + ")" + self.label

    @property
    def parts(self) -> tuple[Action, ...]:
        return self.actions


Cell = Union[Action, Overlap, None]


def loop_placement(n_stages: int, n_ranks: int) -> tuple[int, ...]:
    """Stage s on rank s % R (GPipe, 1F1B, interleaved 1F1B)."""
    _check_divisible(n_stages, n_ranks)
    return tuple(s % n_ranks for s in range(n_stages))


def v_placement(n_stages: int, n_ranks: int) -> tuple[int, ...]:
    """Rank r holds stages r and 2R-1-r (ZB-V, DualPipeV); generalised as a zig-zag for more
    than two stages per rank."""
    _check_divisible(n_stages, n_ranks)
    placement = []
    for s in range(n_stages):
        lap, offset = divmod(s, n_ranks)
        placement.append(offset if lap % 2 == 0 else n_ranks - 1 - offset)
    return tuple(placement)


def make_placement(kind: str, n_stages: int, n_ranks: int) -> tuple[int, ...]:
    if kind == "loop":
        return loop_placement(n_stages, n_ranks)
    if kind == "v":
        return v_placement(n_stages, n_ranks)
    raise ValueError(f"placement must be 'loop' or 'v', got {kind!r}")


def placement_name(placement: Sequence[int]) -> str:
    """'loop', 'v' or 'explicit'. One stage per rank in order counts as 'loop'."""
    n_stages, n_ranks = len(placement), max(placement) + 1
    if n_stages % n_ranks == 0:
        if tuple(placement) == loop_placement(n_stages, n_ranks):
            return "loop"
        if tuple(placement) == v_placement(n_stages, n_ranks):
            return "v"
    return "explicit"


def _check_divisible(n_stages: int, n_ranks: int) -> None:
    if n_ranks < 1 or n_stages < 1:
        raise ValueError(f"need at least one stage and one rank, got stages={n_stages} ranks={n_ranks}")
    if n_stages % n_ranks:
        raise ValueError(f"stages ({n_stages}) must be a multiple of ranks ({n_ranks})")


@dataclass
class Schedule:
    """Ordered cells per rank plus placement. ``rows[r]`` is what rank r runs, in order."""

    rows: list[list[Cell]]
    placement: tuple[int, ...]  # placement[stage] = rank
    n_microbatches: int
    name: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def n_ranks(self) -> int:
        return len(self.rows)

    @property
    def n_stages(self) -> int:
        return len(self.placement)

    def stages_of(self, rank: int) -> list[int]:
        return [s for s, r in enumerate(self.placement) if r == rank]

    def actions(self, rank: int) -> list[Action]:
        """The rank's actions in execution order, idle slots dropped, overlaps flattened."""
        return [a for cell in self.rows[rank] if cell is not None for a in cell.parts]

    def all_actions(self) -> Iterator[tuple[int, Action]]:
        for rank in range(self.n_ranks):
            for a in self.actions(rank):
                yield rank, a

    def compact(self) -> "Schedule":
        """The same schedule with idle slots removed."""
        return Schedule(
            rows=[[c for c in row if c is not None] for row in self.rows],
            placement=self.placement,
            n_microbatches=self.n_microbatches,
            name=self.name,
            meta=dict(self.meta),
        )

    @classmethod
    def from_actions(
        cls,
        per_rank: Sequence[Sequence[Cell]],
        n_microbatches: int | None = None,
        placement: Sequence[int] | None = None,
        name: str = "",
    ) -> "Schedule":
        """Build a schedule, inferring placement and microbatch count from the actions when not
        given (the stage of every action tells which rank holds it)."""
        rows = [list(r) for r in per_rank]
        if placement is None:
            owner: dict[int, int] = {}
            for r, row in enumerate(rows):
                for cell in row:
                    if cell is not None:
                        for a in cell.parts:
                            owner.setdefault(a.stage, r)
            n_stages = max(owner) + 1 if owner else 0
            missing = [s for s in range(n_stages) if s not in owner]
            if missing:
                raise ValueError(f"stages {missing} have no actions, so their rank is unknown")
            placement = [owner[s] for s in range(n_stages)]
        if n_microbatches is None:
            mbs = [a.microbatch for row in rows for c in row if c is not None for a in c.parts]
            n_microbatches = max(mbs) + 1 if mbs else 0
        return cls(rows=rows, placement=tuple(placement), n_microbatches=n_microbatches, name=name)
