"""The schedule model every other part of schedc speaks.

An :class:`Action` is one unit of pipeline work: a forward (F), a backward for inputs (I), a
backward for weights (W) or a full backward (B = I and W in one call) of one microbatch on one
stage. An :class:`Overlap` is torch's ``OVERLAP_F_B`` cell (DualPipeV): several actions issued as
one, which schedc treats as its parts run back to back.

A :class:`Schedule` is, for every rank, the ordered list of cells that rank executes (``None`` is
an idle slot, kept so that a CSV round-trips cell for cell), plus the stage-to-rank placement and
the microbatch count. Placement conventions (``loop``, ``v``) are the ones torchtitan and NeMo
AutoModel use to build stages; any explicit mapping is legal.

Action kinds are one table (:data:`KIND_TABLE`, torch's ``_ComputationType`` as the model): a
:class:`Kind` is a CSV letter, and its :class:`KindInfo` row says everything the other parts ask
of a kind (what it waits for and sends, its seconds and its change of held bytes, split or merged
backward, plot and trace names). The simulator, the cost model, the problem graph, csvio and
``show/`` read the row; a new kind is :func:`register_kind` plus the engines that emit it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Literal, Optional, Sequence, Union


class Kind(str):
    """An action kind: its CSV letter (``Kind.F == "F"``, so it hashes, sorts and serialises as
    the letter). A str whose values are the rows of :data:`KIND_TABLE` rather than an ``Enum``,
    because an Enum is closed and a kind registered later must be a value of this type too.
    ``Kind("F")`` is the registered instance; an unknown letter is a ValueError."""

    __slots__ = ()
    F: ClassVar["Kind"]
    I: ClassVar["Kind"]  # noqa: E741 - torch's letter for the backward for inputs
    W: ClassVar["Kind"]
    B: ClassVar["Kind"]

    def __new__(cls, letter: str) -> "Kind":
        info = KIND_TABLE.get(letter)
        if info is None:
            raise ValueError(f"action kind must be one of {'/'.join(KIND_TABLE)}, got {letter!r}")
        return info.kind

    def __reduce__(self):
        return (Kind, (str(self),))

    @property
    def info(self) -> "KindInfo":
        return KIND_TABLE[self]


# what an action hands to a neighbouring stage: a forward's output activation to the next stage,
# a backward's input gradient to the previous one
Payload = Literal["activation", "gradient"]


@dataclass(frozen=True)
class KindInfo:
    """Everything schedc knows about one action kind.

    ``after``: kinds of the same stage and microbatch it waits for; ``receives``: what it waits
    for from the neighbouring stage (an activation from stage s-1, a gradient from stage s+1, of
    the same microbatch); ``sends``: what it produces for a neighbour. ``seconds(c)`` and
    ``held(c)`` read a StageCost (or the array form of schedc.core.cost_model.Segments): its
    duration and the change of the rank's held bytes (``memory`` names the sign: allocates at its
    start, moves bytes from one form to another, frees at its end, or none). ``backward``: part of
    the split backward (I, W), the merged one (B), or neither."""

    letter: str
    name: str  # torch's _ComputationType name
    seconds: Callable[[Any], float]
    held: Callable[[Any], float]
    memory: Literal["allocates", "moves", "frees", "none"]
    after: tuple[str, ...] = ()
    receives: Optional[Payload] = None
    sends: Optional[Payload] = None
    backward: Optional[Literal["split", "merged"]] = None
    plot_label: str = ""
    plot_colormap: str = "Greys"  # a matplotlib colormap: the box's hue, shaded per stage slot
    trace_category: str = ""
    kind: Kind = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.letter) != 1 or not self.letter.isupper():
            raise ValueError(f"an action kind is one upper-case letter, got {self.letter!r}")
        object.__setattr__(self, "kind", str.__new__(Kind, self.letter))


KIND_TABLE: dict[str, KindInfo] = {}  # letter -> row; the keys are the Kind instances


def kinds() -> tuple[Kind, ...]:
    """Every registered kind, in table order (F, I, W, B, then registered ones)."""
    return tuple(info.kind for info in KIND_TABLE.values())


def senders(payload: Payload) -> tuple[Kind, ...]:
    """The kinds that send `payload` to a neighbour (F the activation; I and B the gradient)."""
    return tuple(info.kind for info in KIND_TABLE.values() if info.sends == payload)


def register_kind(info: KindInfo) -> Kind:
    """Add a kind to the table (its letter must be new) and return it; the simulator, the cost
    model, csvio and the plots read it from there. :func:`unregister_kind` takes it out."""
    if info.letter in KIND_TABLE:
        raise ValueError(f"action kind {info.letter!r} is already registered")
    unknown = [k for k in info.after if k not in KIND_TABLE]
    if unknown:
        raise ValueError(f"action kind {info.letter!r} comes after {', '.join(map(repr, unknown))}, which "
                         "is not registered; register that kind first")
    # the registered instances, so the simulator's (stage, kind, microbatch) keys compare by identity
    object.__setattr__(info, "after", tuple(KIND_TABLE[k].kind for k in info.after))
    KIND_TABLE[info.kind] = info  # keyed by the instance: a lookup with it matches by identity
    return info.kind


def unregister_kind(letter: str) -> None:
    """Remove a kind :func:`register_kind` added (the four torch kinds stay)."""
    if letter in TORCH_KINDS:
        raise ValueError(f"action kind {letter!r} is one of torch's and cannot be removed")
    KIND_TABLE.pop(letter, None)


@contextmanager
def registered_kind(info: KindInfo) -> Iterator[Kind]:
    """:func:`register_kind` for the duration of a with-block."""
    kind = register_kind(info)
    try:
        yield kind
    finally:
        unregister_kind(info.letter)


for _info in (
    KindInfo("F", "FORWARD", seconds=lambda c: c.forward, held=lambda c: c.activation_bytes,
             memory="allocates", receives="activation", sends="activation",
             plot_label="forward", plot_colormap="Blues", trace_category="forward"),
    # I keeps the weight-gradient inputs and frees the rest of the activation
    KindInfo("I", "BACKWARD_INPUT", seconds=lambda c: c.backward_input,
             held=lambda c: -(c.activation_bytes - c.weight_grad_bytes), memory="moves",
             after=("F",), receives="gradient", sends="gradient", backward="split",
             plot_label="backward (inputs)", plot_colormap="Oranges", trace_category="backward_input"),
    KindInfo("W", "BACKWARD_WEIGHT", seconds=lambda c: c.backward_weight, held=lambda c: -c.weight_grad_bytes,
             memory="frees", after=("I",), backward="split",
             plot_label="backward (weights)", plot_colormap="Greens", trace_category="backward_weight"),
    KindInfo("B", "FULL_BACKWARD", seconds=lambda c: c.backward, held=lambda c: -c.activation_bytes,
             memory="frees", after=("F",), receives="gradient", sends="gradient", backward="merged",
             plot_label="full backward", plot_colormap="Purples", trace_category="backward"),
):
    register_kind(_info)
    setattr(Kind, _info.letter, _info.kind)
# the four kinds torch's runtime executes (its _ComputationType F, I, W, B), always in the table
TORCH_KINDS = kinds()


# slots: a million actions take 56 MB instead of 340 MB, and hash faster
@dataclass(frozen=True, order=True, slots=True)
class Action:
    """One unit of pipeline work: kind F (forward), I (backward for inputs), W (backward for
    weights) or B (full backward) of one microbatch on one stage; ``str()`` is torch's CSV
    cell, e.g. ``3F0``."""

    stage: int
    kind: Kind  # a letter is accepted and turned into its Kind
    microbatch: int

    if TYPE_CHECKING:
        # the generated __init__ with the letter that __post_init__ accepts (not defined at run time)
        def __init__(self, stage: int, kind: str, microbatch: int) -> None: ...

    def __post_init__(self) -> None:
        if self.kind.__class__ is not Kind:
            object.__setattr__(self, "kind", Kind(self.kind))
        if self.stage < 0 or self.microbatch < 0:
            raise ValueError(f"stage and microbatch must be >= 0, got {self.stage}, {self.microbatch}")

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"

    @property
    def parts(self) -> tuple["Action", ...]:
        return (self,)


# torch's labels for a cell of several actions issued as one (its _ComputationType OVERLAP_F_B)
OVERLAP_LABELS = ("OVERLAP_F_B",)


@dataclass(frozen=True, slots=True)
class Overlap:
    """Several actions in one cell (torch's ``(0F7;7B3)OVERLAP_F_B``), run back to back."""

    actions: tuple[Action, ...]
    label: str = OVERLAP_LABELS[0]

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

    rows: Sequence[Sequence[Cell]]  # per rank; a list of lists is one
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
