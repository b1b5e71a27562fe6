"""One compile request, resolved: costs per stage, placement, microbatches, memory caps, objective.

Plain data that knows no algorithm: the engines read it through the problem graph
(schedc.solver.graph.graph_of), which lowers it once, so that they all read the same numbers. ``Problem.profile`` holds the costs as the chosen runtime
executes them (``Profile.executed``: torch's by default); ``given_profile`` is what the user gave,
which reports write down together with the runtime's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Optional, Sequence, Union

from schedc.core.cost_model import CostModel
from schedc.core.costs import DEFAULT_RUNTIME, MemoryLimit, Profile
from schedc.core.ir import make_placement, placement_name
from schedc.errors import ParameterError, SchedcError, literal
from schedc.solver.deadline import check_size

OBJECTIVES = ("makespan", "span")


@dataclass(frozen=True)
class Problem:
    given_profile: Profile  # the costs as the user gave them
    placement: tuple[int, ...]  # placement[stage] = rank
    n_microbatches: int
    memory: MemoryLimit = field(default_factory=lambda: MemoryLimit(kind="relative", value=1.0))
    objective: str = "makespan"
    runtime: str = DEFAULT_RUNTIME

    @cached_property
    def profile(self) -> Profile:
        """The costs as `runtime` executes them: what the heuristic, model and bounds read."""
        return self.given_profile.executed(self.runtime)

    @property
    def n_stages(self) -> int:
        return len(self.placement)

    @property
    def n_ranks(self) -> int:
        return max(self.placement) + 1

    @property
    def placement_name(self) -> str:
        return placement_name(self.placement)

    def stages_of(self, rank: int) -> list[int]:
        return [s for s, r in enumerate(self.placement) if r == rank]

    def with_memory(self, memory: MemoryLimit) -> "Problem":
        """The same problem under another cap (``MemoryLimit(kind="none")``: without one)."""
        return replace(self, memory=memory)

    @cached_property
    def costs(self) -> CostModel:
        """The one cost model of this problem (schedc.core.cost_model): durations, held deltas,
        transients, per-rank caps and room."""
        return CostModel.build(self.profile, self.placement, self.n_microbatches, self.memory)

    @property
    def memory_caps(self) -> list[float]:
        """Per-rank byte cap, everything included (inf when uncapped; ``Kp``: one cap for every
        rank, schedc.core.cost_model.caps)."""
        return list(self.costs.caps)

    @property
    def static_bytes(self) -> list[float]:
        """Per rank: bytes held all step (params, grads, optimizer state) of its stages."""
        return list(self.costs.static)

    @property
    def fixed_bytes(self) -> list[float]:
        """Per rank: static bytes + receive buffers and held sends + reserve (schedc.core.cost_model)."""
        return self.costs.fixed

    @property
    def activation_room(self) -> list[float]:
        """Per rank: what the cap leaves for the running sum of held bytes (cap - static -
        buffers - reserve; inf when uncapped)."""
        return list(self.costs.room)

    def duration(self, stage: int, kind: str) -> float:
        return self.profile.duration(stage, kind)

    def comm(self, boundary: int) -> float:
        """Delay across the boundary stage -> stage+1: its comm time if the two stages sit on
        different ranks, else 0."""
        if self.placement[boundary] == self.placement[boundary + 1]:
            return 0.0
        return self.profile.comm_after(boundary)

    @classmethod
    def build(
        cls,
        n_stages: int,
        n_microbatches: int,
        n_ranks: Optional[int] = None,
        placement: Union[str, Sequence[int]] = "loop",
        profile: Optional[Profile] = None,
        memory: Union[str, MemoryLimit] = "1p",
        objective: str = "makespan",
        runtime: str = DEFAULT_RUNTIME,
    ) -> "Problem":
        if n_stages < 1:
            raise ParameterError("stages", f"{{param}} must be >= 1, got {n_stages}")
        if n_microbatches < 1:
            raise ParameterError("microbatches", f"{{param}} must be >= 1, got {n_microbatches}")
        check_size(n_stages, n_microbatches)  # before a profile of that many stages is built
        if objective not in OBJECTIVES:
            raise ParameterError("objective", f"{{param}} must be one of {', '.join(OBJECTIVES)}, got {literal(repr(objective))}")
        if isinstance(placement, str):
            if n_ranks is None:
                n_ranks = n_stages // 2 if placement == "v" else n_stages
            if n_ranks < 1 or n_stages % n_ranks:
                raise ParameterError("ranks", f"{{name:stages}}{n_stages} must be a multiple of {{name}}{n_ranks}")
            if placement == "v" and n_stages % (2 * n_ranks):
                raise ParameterError("placement", f"{{name}}v needs an even number of stages on each rank; "
                                     f"{{name:stages}}{n_stages} on {n_ranks} rank{'s' if n_ranks > 1 else ''} "
                                     f"is not: make {{param:stages}} a multiple of twice {{param:ranks}}, or give {{name}}loop")
            try:
                placement = make_placement(placement, n_stages, n_ranks)
            except ValueError as e:
                raise ParameterError("placement", literal(e)) from e
        placement = tuple(int(r) for r in placement)
        if len(placement) != n_stages:
            raise ParameterError("placement", f"{{param}} names {len(placement)} stages but {{param:stages}} is {n_stages}")
        ranks_used = sorted(set(placement))
        if ranks_used != list(range(len(ranks_used))):
            raise SchedcError(f"placement {list(placement)} must use ranks 0..R-1 without gaps")
        if n_ranks is not None and len(ranks_used) != n_ranks:
            raise ParameterError("placement", f"{{param}} uses {len(ranks_used)} ranks but {{param:ranks}} is {n_ranks}")
        if profile is None:
            profile = Profile.uniform(n_stages)
        if profile.n_stages != n_stages:
            raise ParameterError("stages", f"the profile describes {profile.n_stages} stages but {{param}} is {n_stages}")
        if isinstance(memory, str):
            memory = MemoryLimit.parse(memory)
        problem = cls(given_profile=profile, placement=placement, n_microbatches=n_microbatches, memory=memory,
                      objective=objective, runtime=runtime)
        _ = problem.profile  # an impossible runtime conversion fails here, before any solving
        return problem
