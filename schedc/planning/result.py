"""What a plan returns: :class:`PlanResult` and its comparison rows (:class:`Comparison`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from schedc.core.costs import Profile
from schedc.core.partition import stage_modules

if TYPE_CHECKING:
    from schedc.core.ir import Schedule
    from schedc.planning.ac import ACChoice
    from schedc.planning.least_memory import LeastMemory
    from schedc.planning.limiter import PlanLimiter
    from schedc.solver.compile import CompileResult


@dataclass
class Comparison:
    """One split with the best hand-made schedule that fits the cap (None: nothing fits)."""

    split: str
    placement: str
    counts: list[int]
    schedule: Optional[str]
    value: Optional[float]
    note: str = ""
    peak: Optional[float] = None  # the schedule's largest per-rank peak, where known

    def as_dict(self) -> dict:
        return {"split": self.split, "placement": self.placement, "units_per_stage": self.counts,
                "best_hand_made": self.schedule, "step": self.value, "note": self.note, "peak": self.peak}


@dataclass(frozen=True)
class PlanResult:
    """What :func:`plan` chose: the partition (``counts`` units per stage, ``partition`` module
    names per stage), the placement, the compiled schedule of that partition, the bound over
    every partition and its gap, and the comparison rows; ``report`` is what ``plan.json`` holds."""

    compiled: "CompileResult"  # of the chosen partition
    units: Profile
    counts: list[int]  # units per stage
    placement: str
    bound: float  # over every partition (and placement tried) and schedule under the cap
    bounds: dict[str, float]  # per placement tried
    certified: dict[str, int]  # per placement: partitions whose own bound entered `bounds`
    comparisons: list[Comparison]
    candidates: list[dict]
    notes: list[str]
    solve_time: float
    report: dict = field(default_factory=dict)
    interrupted: bool = False  # Ctrl-C or SIGTERM (schedc.solver.interrupt) ended the search early
    least_memory: Optional["LeastMemory"] = None  # the same step under a lower peak (least_memory_at_step)
    limiter: Optional["PlanLimiter"] = None  # what limits the step (plan_limiter)
    assumes: dict = field(default_factory=dict)  # what the plan took about the run (the report's "assumes")
    ac: Optional["ACChoice"] = None  # the activation checkpointing chosen (plan_ac)
    offload: Optional[dict] = None  # --offload auto: the rows and the summary (schedc.planning.offload)
    budget: str = "time"  # what the time limit counted: wall-clock seconds or work units
    cut_by_wall: bool = False  # work mode: the wall-clock safety net ended it (the plan may differ)

    @property
    def value(self) -> float:
        return self.compiled.value

    @property
    def schedule(self) -> "Schedule":
        return self.compiled.schedule

    @property
    def profile(self) -> Profile:
        """The merged per-stage profile of the chosen partition."""
        return self.compiled.problem.given_profile

    @property
    def partition(self) -> list[list[str]]:
        return stage_modules(self.units, self.counts)

    @property
    def gap(self) -> float:
        return max(0.0, (self.value - self.bound) / self.value) if self.value > 0 else 0.0
