"""What schedc's front door returns: frozen results with named fields.

Problem: the engine's results are working objects (``SimResult`` with its dicts of timings,
``CompileResult`` with the report and the baselines as plain dicts) that the solver fills in as
it goes. A user wants answers that say what they hold, that cannot be changed by accident, and
that read the same from a fresh compile and from a report on disk.

Method: :class:`Simulation` and :class:`Compiled` are frozen dataclasses built once from the
engine's objects (mappings are read-only views, sequences tuples). :class:`Report` and
:class:`BaselineResult` are frozen pydantic models of the JSON report beside a compiled CSV
(format ``schedc.report/v1``): reading a report validates it, and :meth:`Report.to_dict` gives
back exactly the JSON that was read or written (fields it does not name, such as a plan's
``partition``, are kept).

Cost: freezing a simulation takes time independent of its size (its timings are a view whose
:class:`ActionTime` objects are made on access).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict

from schedc.choices import Budget, Execution, Objective, Status, check_choice
from schedc.core.costs import MemoryLimit, Profile
from schedc.core.ir import Action, Schedule

if TYPE_CHECKING:
    from schedc.core.simulate import SimResult

__all__ = ["ActionTime", "Simulation", "BaselineResult", "ReportInputs", "ReportPrediction", "Report", "Compiled"]

Number = Union[int, float]  # as written: an int stays an int, so a report reads back unchanged


@dataclass(frozen=True)
class ActionTime:
    """When one action runs: its rank, start and end (in the profile's time unit)."""

    rank: int
    start: float
    end: float


class _ActionTimes(Mapping):
    """A read-only view of the engine's timings that makes each :class:`ActionTime` when asked:
    copying them all cost a second of a one-million-action compile."""

    __slots__ = ("_timings",)

    def __init__(self, timings: Mapping) -> None:
        self._timings = timings

    def __getitem__(self, action: Action) -> ActionTime:
        t = self._timings[action]
        return ActionTime(t.rank, t.start, t.end)

    def __iter__(self) -> Iterator[Action]:
        return iter(self._timings)

    def __len__(self) -> int:
        return len(self._timings)

    def __repr__(self) -> str:
        return f"<{len(self)} action times>"


@dataclass(frozen=True)
class Simulation:
    """A schedule timed under a profile: every action's start and end, step time, memory.

    ``makespan``: all ranks start at 0, the step ends when the last one finishes. ``span``: the
    longest per-rank first-to-last-action time. ``bubble``: idle fraction of all ranks over the
    makespan (``span_bubble``: over the span). Memory is in the profile's bytes (identical
    stages from ``Profile.uniform``: in microbatch activations), static bytes included.
    """

    makespan: float
    span: float
    bubble: float
    span_bubble: float
    busy: tuple[float, ...]  # per rank: time spent computing
    span_per_rank: tuple[float, ...]
    bubble_per_rank: tuple[float, ...]
    peak_memory: tuple[float, ...]  # per rank
    memory_limit: tuple[float, ...]  # per rank; inf when uncapped
    fits: bool  # every rank's peak within its limit
    execution: Execution  # the execution model the times follow
    timings: Mapping[Action, ActionTime]
    order: tuple[tuple[Action, ...], ...]  # per rank, in execution order
    memory_curve: tuple[tuple[tuple[float, float], ...], ...]  # per rank: (time, bytes held) steps
    # with memory actions: per rank the fraction of the step its copy streams moved data (out to
    # host, in from it), and per node the most pinned host memory they held
    link_busy: tuple[tuple[float, float], ...] = ()
    host_peak: tuple[float, ...] = ()

    @property
    def n_ranks(self) -> int:
        return len(self.order)

    @property
    def ranks_over(self) -> tuple[int, ...]:
        """The ranks whose peak exceeds their limit (schedc.core.cost_model.fits, the one tolerance)."""
        from schedc.core.cost_model import fits

        return tuple(r for r, (peak, cap) in enumerate(zip(self.peak_memory, self.memory_limit)) if not fits(peak, cap))

    def objective(self, name: Objective) -> float:
        """The step time `name` measures: ``makespan`` or ``span``."""
        return self.makespan if check_choice("objective", name, Objective) == "makespan" else self.span

    @classmethod
    def from_sim(cls, sim: "SimResult") -> "Simulation":
        """Freeze the engine's :class:`schedc.core.simulate.SimResult`."""
        return cls(
            makespan=sim.makespan, span=sim.span, bubble=sim.bubble, span_bubble=sim.span_bubble,
            busy=tuple(sim.busy), span_per_rank=tuple(sim.span_per_rank),
            bubble_per_rank=tuple(sim.bubble_per_rank), peak_memory=tuple(sim.peak_memory),
            memory_limit=tuple(sim.memory_limit), fits=bool(sim.fits),
            execution=check_choice("execution", sim.runtime, Execution),
            timings=_ActionTimes(sim.timings),
            order=tuple(tuple(row) for row in sim.order),
            memory_curve=tuple(tuple(curve) for curve in sim.memory_curve),
            link_busy=tuple((sim.link_busy(r, "out"), sim.link_busy(r, "in")) for r in range(sim.n_ranks))
            if sim.copies else (),
            host_peak=tuple(sim.host_peak),
        )


class BaselineSchedules(Mapping):
    """A read-only view of the hand-made schedules a compile compared against, built again on
    first access (most callers never ask for them, and keeping the compile's own copies would keep
    its whole problem graph alive)."""

    __slots__ = ("_names", "_build", "_built")

    def __init__(self, names: tuple[str, ...], build: Callable[[], Mapping[str, Schedule]]) -> None:
        self._names = names
        self._build: Optional[Callable[[], Mapping[str, Schedule]]] = build
        self._built: Optional[Mapping[str, Schedule]] = None

    def _schedules(self) -> Mapping[str, Schedule]:
        if self._built is None:
            assert self._build is not None  # dropped only once _built holds what it built
            self._built = self._build()
            self._build = None
        return self._built

    def __getitem__(self, name: str) -> Schedule:
        if name not in self._names:
            raise KeyError(name)
        return self._schedules()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"<hand-made schedules {', '.join(self._names)}>"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")


class BaselineResult(_Frozen):
    """A hand-made schedule under the same costs as a compiled one."""

    makespan: Number
    span: Number
    peak_memory: list[Number]  # per rank, static bytes included
    fits: bool  # within the memory limit on every rank


class ReportInputs(_Frozen):
    """What a schedule was compiled for (the report's ``inputs``)."""

    stages: int
    ranks: int
    placement: str  # loop, v or explicit
    stage_to_rank: list[int]
    microbatches: int
    costs: dict[str, Any]  # the profile as given (schedc.profile/v1)
    runtime: Optional[str] = None  # the execution model
    memory_limit: str
    objective: str
    solver: str
    time_limit: Number


class ReportPrediction(_Frozen):
    """The compiled schedule's simulated numbers (the report's ``predicted``)."""

    makespan: Number
    span: Number
    bubble: Number
    span_bubble: Number
    bubble_per_rank: list[Number]
    peak_memory_per_rank: list[Number]
    memory_limit_per_rank: list[Optional[Number]]  # None: no cap
    fits_memory: bool


class ReportLimiter(_Frozen):
    """What bounds the step (schedc.core.diagnose.Limiter as the report writes it)."""

    kind: Literal["rank", "critical-path"]
    rank: int
    busy_fraction: Number
    imbalance: Number
    stages: list[int]
    carries: str
    message: str


class Report(_Frozen):
    """The JSON report beside a compiled CSV (``NAME.json``, format ``schedc.report/v1``).

    >>> import schedc
    >>> res = schedc.compile(stages=2, microbatches=4, time_limit=2)
    >>> rep = res.report
    >>> rep.status, rep.inputs.stages, rep.baselines["1f1b"].fits
    (<Status.OPTIMAL: 'optimal'>, 2, True)
    >>> Report.from_dict(rep.to_dict()) == rep
    True
    """

    format: str = "schedc.report/v1"
    schedc_version: str
    inputs: ReportInputs
    predicted: ReportPrediction
    limiter: Optional[ReportLimiter] = None  # reports before 0.2 have none
    same_as_baseline: Optional[str] = None  # the hand-made schedule the compiled one equals
    baselines: dict[str, BaselineResult]
    lower_bound: Number
    lower_bound_source: str
    lower_bound_details: dict[str, Any] = {}
    gap: Number
    status: Status
    solve_time: Number
    warm_start: str = ""
    interrupted: bool = False
    progress: list[dict[str, Any]] = []

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "report") -> "Report":
        """Validate a report's JSON object; a bad field is one :class:`SchedcError` line naming it."""
        from pydantic import ValidationError

        from schedc.core.costs import describe_validation_error
        from schedc.errors import SchedcError

        try:
            return cls.model_validate(dict(data))
        except ValidationError as e:
            raise SchedcError(f"{source}: {describe_validation_error(e)}") from None

    def to_dict(self) -> dict[str, Any]:
        """The report as the JSON object schedc writes (what was read, field for field)."""
        return self.model_dump(mode="json", exclude_unset=True)


@dataclass(frozen=True)
class Compiled:
    """A compiled schedule with its certificate.

    ``schedule`` is the best schedule found; ``simulation`` its simulated numbers. ``status`` is
    :attr:`Status.OPTIMAL` only when ``lower_bound`` proves it; ``gap`` is
    ``(value - lower_bound) / value`` for ``value`` the objective's step time. ``baselines``:
    every hand-made schedule (and zb-greedy) that exists for this shape, under the same costs.
    ``report`` is the JSON report that :func:`schedc.write_csv` writes beside the CSV.
    ``baseline_schedules``: the schedules behind ``baselines``, by the same names (built on first
    access), e.g. to draw the compiled schedule next to the best one that fits. ``budget``: what
    the time limit counted (``time`` or ``work``). ``memory_actions``: the offloads the schedule
    runs with (``offload="auto"``; empty otherwise), to pass to :func:`schedc.simulate`.
    """

    schedule: Schedule
    simulation: Simulation
    status: Status
    lower_bound: float
    gap: float
    solve_time: float  # seconds
    objective: Objective
    execution: Execution
    memory: MemoryLimit
    profile: Profile  # the costs as given
    baselines: Mapping[str, BaselineResult]
    warm_start: str  # where the search started (heuristic, a hand-made schedule's name, ...)
    interrupted: bool  # Ctrl-C ended the search early
    report: Report
    baseline_schedules: Mapping[str, Schedule] = field(default_factory=lambda: MappingProxyType({}))
    budget: Budget = "time"
    # with offload="auto": the report's "memory_actions" (schedc.core.memory_actions' JSON form)
    memory_actions: tuple[dict, ...] = ()

    def best_baseline(self) -> Optional[str]:
        """The name of the hand-made schedule that fits and is shortest by this compile's
        objective (the first listed on a tie); None when none fits."""
        fitting = [(name, b) for name, b in self.baselines.items() if b.fits]
        if not fitting:
            return None
        return min(fitting, key=lambda nb: nb[1].makespan if self.objective == "makespan" else nb[1].span)[0]

    @property
    def value(self) -> float:
        """The step time the compiler minimized (``simulation.makespan`` or ``.span``)."""
        return self.simulation.objective(self.objective)
