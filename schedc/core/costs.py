"""What a schedule costs: the profile file (``schedc.profile/v1``) and the memory limit.

A profile gives, per stage, the seconds of F, I and W and the bytes a microbatch holds (see
docs/design.md). ``Profile.uniform`` builds the identical-stage profile behind ``--costs F,I,W``:
1 unit of activation per microbatch, of which ``HELD_FRACTION`` is still held between I and W.
``MemoryLimit`` parses ``--memory`` (``1.5p``, ``40GiB``, ``none``) and turns it into a per-rank
byte cap for a given placement.

What ``Kp`` means. One cap for every rank (the GPUs are the same size): what 1F1B needs on its
most loaded rank, everything it holds all step included (static bytes, torch's receive buffers
and held sends, the reserve: schedc.core.cost_model's ``fixed``), with the rest scaled by K::

    cap(K) = max over ranks r of (fixed_r + K x peak1F1B_r)

``peak1F1B_r`` (:func:`one_f_one_b_peaks`) is 1F1B's peak on rank r (its largest F or B
transient included; schedc.core.cost_model states the memory rule) when 1F1B runs
each rank's stages as one stage: the ranks form a chain in the order of their first stages
(rank r is at position r for loop and V placements), a rank at position q holds R - q
microbatches of all its stages at once (its R-1-q warm-up forwards plus one), so
``peak1F1B_r = (R - q) x (activation bytes of r's stages)``. 1F1B's order is fixed, so this is
exact whatever the stage times; it is what ZB-V's "same memory as 1F1B" means for two stages per
rank. 1F1B needs M >= R microbatches (as torch's ``Schedule1F1B``), so the cap is its steady
state and does not depend on M: with fewer microbatches ``Kp`` means what it means with R. ``1p`` therefore fits wherever 1F1B fits, also on uneven stages: a heavy
LM-head stage on the last rank is not allowed R of its own microbatches just because rank 0
holds R of its own. For identical stages the cap is R microbatches of a rank's stages, as
before. :func:`p_needed` inverts the cap: the smallest K under which given peaks fit.

Runtime models. A profile's numbers are the real work of each stage; how a runtime executes them
is a separate choice (``RUNTIMES``):

- ``torch`` (the default everywhere): torch's ``_PipelineScheduleRuntime``. Its first stage never
  computes a backward for inputs (``_PipelineStageBase.backward_one_chunk`` skips it when
  ``is_first``) and ``backward_weight_one_chunk`` then runs the whole backward. So stage 0's I
  takes no time and frees nothing, and its W takes I + W and frees the whole activation. A full
  backward B on stage 0 costs the same I + W and frees the same, so either spelling of stage 0's
  backward in a CSV is timed alike.
- ``ideal``: the zero-bubble paper's model, every stage's I and W as given (other runtimes).

``Profile.executed(runtime)`` returns the costs as that runtime executes them; the simulator, the
solver, the baselines and the plots all read those. The conversion is idempotent and the result
says which runtime it follows (``Profile.runtime``), so a profile measured under torch, which the
profiler marks ``"runtime": "torch"``, is never corrected twice, and asking for the ideal model of
such a profile is an error (its stage 0 never had a separate I to recover).
"""

from __future__ import annotations

import math
import numbers
import re
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Optional, Sequence, Union, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from schedc.core import limits
from schedc.core.cost_model import held_delta, torch_first_stage
from schedc.core.formatting import format_bytes
from schedc.core.ir import KIND_TABLE, TORCH_KINDS, Kind
from schedc.errors import ParameterError, SchedcError, literal

PROFILE_FORMAT: Final = "schedc.profile/v1"
RUNTIMES = ("torch", "ideal")
# Activation checkpointing of a layer, fastest first: each keeps fewer bytes after F and recomputes
# more inside the backward. "light" saves every matmul's and attention's output and recomputes the
# norms, activations and rotary embeddings (schedc's runtime only); "selective" is torchtitan's
# op-level policy; "full" keeps the layer's input. One list for the runtime, the counts and the plan.
AC_MODES = ("none", "light", "selective", "full")
# modes that checkpoint per op (torch's selective-checkpoint contexts): torch's split backward
# cannot go twice through such a region, so their layers run their backward whole (B)
PER_OP_AC = ("light", "selective")
# what torchtitan and NeMo AutoModel apply: one of these for every layer of the model
FRAMEWORK_AC = ("none", "selective", "full")
DEFAULT_RUNTIME = "torch"


def block_modes(choice) -> list:
    """The modes in a checkpointing choice: one mode, a stage's list (one per block), or a plan's
    list of those (one per stage), flattened."""
    if isinstance(choice, str):
        return [choice]
    return [b for entry in choice for b in block_modes(entry)]


# Fraction of a microbatch's activation still held between I and W when a profile does not say.
# torch's split backward (stage_backward_input with retain_graph=True) keeps the whole graph until
# W; benchmarks/split_backward_memory.py measures it for GPT, MLP and attention stages.
HELD_FRACTION = 1.0

# Seconds one unit of unit-less costs (--costs) sleeps when `schedc emulate` runs it without --scale.
UNIT_SECONDS = 0.02


def _not_a_number(value) -> str:
    """What a JSON value that pydantic would coerce into a number is, when it is not one: '' for a number."""
    if isinstance(value, bool):
        return "true or false"
    return "a string" if isinstance(value, str) else ""


def _numbers_only(value):
    """A profile's numbers are JSON numbers: pydantic's lax mode took `true` as 1 and `"1"` as 1.0,
    which hides a hand edit's or another tool's mistake; a list (one per boundary) is checked per item."""
    if _not_a_number(value):
        raise ValueError(f"expected a number, not {_not_a_number(value)}")
    for i, item in enumerate(value if isinstance(value, list) else []):
        if _not_a_number(item):
            raise ValueError(f"expected a number at [{i}], not {_not_a_number(item)} ({item!r})")
    return value


Number = Annotated[float, BeforeValidator(_numbers_only)]  # an int or a float, never a bool or a string
WholeNumber = Annotated[int, BeforeValidator(_numbers_only)]
NumberOrList = Annotated[Union[float, list[float]], BeforeValidator(_numbers_only)]  # per boundary or for all


class StageCost(BaseModel):
    """What one stage (or, in a per-unit profile, one unit of the model) costs per microbatch."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    forward: Number = Field(gt=0, description="seconds of F for one microbatch")
    backward_input: Number = Field(ge=0, description="seconds of I (backward for inputs); 0 for a unit with no input gradient (the embedding)")
    backward_weight: Number = Field(ge=0, description="seconds of W; 0 for a stage without parameters")
    activation_bytes: Number = Field(ge=0, description="bytes one microbatch holds after F")
    weight_grad_bytes: Optional[Number] = Field(
        default=None, ge=0, description="bytes still held between I and W; default HELD_FRACTION x activation_bytes")
    static_bytes: Number = Field(default=0, ge=0, description="params + grads + optimizer state")
    # in a per-unit profile (input of `schedc plan`): the module names this unit holds, in
    # torchtitan's / NeMo's module_fqns_per_model_part vocabulary, e.g. ["layers.0"]
    modules: Optional[list[str]] = None

    # bytes live only while one action of this stage runs, on top of what the rank holds (the
    # loss's fp32 logits on the last stage, attention and matmul workspaces); keys F, I, W, B
    transient_bytes: Optional[dict[Literal["F", "I", "W", "B"], Number]] = None

    @model_validator(mode="after")
    def _defaults(self) -> "StageCost":
        # weight_grad_bytes may exceed activation_bytes: torch's split backward keeps the whole
        # graph plus the output gradients W consumes, so memory can rise at I (docs/design.md)
        if self.weight_grad_bytes is None:
            self.weight_grad_bytes = HELD_FRACTION * self.activation_bytes
        for kind, value in (self.transient_bytes or {}).items():
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"transient_bytes.{kind} must be a finite number >= 0, got {value!r}")
        return self

    def transient(self, kind: str) -> float:
        """Bytes live only while this stage's `kind` action runs. A full backward B that no
        profile measured runs I then W back to back: the larger of the two, I's counted on top of
        what I adds to the held bytes."""
        t = cast("dict[str, float]", self.transient_bytes or {})
        if kind == Kind.B and Kind.B not in t:
            rise = max(0.0, _held(self) - self.activation_bytes)
            return max(t.get(Kind.I, 0.0) + rise, t.get(Kind.W, 0.0))
        return float(t.get(kind, 0.0))

    @property
    def backward(self) -> float:
        """Seconds of a full backward B = I + W."""
        return self.backward_input + self.backward_weight


def _held(cost: StageCost) -> float:
    """weight_grad_bytes, which StageCost's validator fills when a profile leaves it out."""
    assert cost.weight_grad_bytes is not None, "StageCost._defaults fills weight_grad_bytes"
    return cost.weight_grad_bytes


def _merged_transients(units: Sequence[StageCost]) -> Optional[dict[Literal["F", "I", "W", "B"], float]]:
    if not any(u.transient_bytes for u in units):
        return None
    merged = {k: max(u.transient(k) for u in units) for k in TORCH_KINDS}
    return cast("dict[Literal['F', 'I', 'W', 'B'], float]", merged)  # TORCH_KINDS are those letters


class Profile(BaseModel):
    """The profile file (``schedc.profile/v1``): per-stage costs, communication per boundary,
    provenance. ``Profile.load(path)`` reads one, ``Profile.uniform(n)`` builds identical stages."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    format: Literal["schedc.profile/v1"] = PROFILE_FORMAT
    stages: list[StageCost] = Field(min_length=1)
    comm: NumberOrList = 0.0
    # bytes of one microbatch's activation sent across each stage boundary (its gradient comes
    # back the same size): what torch's receive buffers and held sends are made of
    boundary_bytes: Optional[NumberOrList] = None
    # bytes a process holds outside torch's allocator (CUDA context, library workspaces, NCCL):
    # counted on every rank against a byte cap
    reserve_bytes: Optional[Number] = Field(default=None, ge=0)
    # which runtime model the numbers already follow: "torch" when measured under torch's runtime
    # (stage 0's I is empty) or converted by executed(); absent: each stage's real I and W
    runtime: Optional[Literal["torch", "ideal"]] = None
    device: Optional[str] = None
    model: Optional[str] = None
    microbatch_size: Optional[WholeNumber] = None
    dtype: Optional[str] = None
    torch_version: Optional[str] = None
    created: Optional[str] = None
    notes: Optional[list[str]] = None
    # what the numbers took about the run that the framework must be told to reproduce them:
    # seq_len, microbatch_size, activation_checkpoint, dtypes, dp_shard, tp, torch, ... (the plan
    # report's "assumes")
    assumes: Optional[dict[str, Any]] = None

    @field_validator("assumes")
    @classmethod
    def _assumed_counts(cls, assumes: Optional[dict]) -> Optional[dict]:
        """The run settings a framework hand-off prints as whole numbers or names, and the
        checkpointing's shape (a mode, or one per stage, each a mode or one per block): refused
        here, naming the field, rather than printed as a flag no framework takes (dp_shard -1,
        seq_len 2.5) or a traceback (an optimizer that is a list)."""
        for key in ("seq_len", "microbatch_size", "dp_shard", "tp"):
            value = (assumes or {}).get(key)
            if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ValueError(f"{key} must be a whole number >= 1, got {repr(value)[:40]}")
        for key in ("dtype", "activation_dtype", "param_dtype", "grad_dtype", "optimizer_dtype", "optimizer",
                    "implementation"):
            value = (assumes or {}).get(key)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{key} must be a name (a string), got {repr(value)[:40]}")
        ac = (assumes or {}).get("activation_checkpoint")
        if ac is not None and not isinstance(ac, str) and not (isinstance(ac, (list, tuple)) and all(
                isinstance(m, str) or isinstance(m, (list, tuple)) and all(isinstance(b, str) for b in m) for m in ac)):
            raise ValueError(f"activation_checkpoint must be a mode, or a list with one per stage (a mode, or a list "
                             f"with one per block), got {repr(ac)[:40]}")
        return assumes

    @model_validator(mode="after")
    def _comm_matches_boundaries(self) -> "Profile":
        values = self.comm if isinstance(self.comm, list) else [self.comm]
        if any(c < 0 or math.isnan(c) for c in values):
            raise ValueError("comm: every communication time must be >= 0")
        if isinstance(self.comm, list) and len(self.comm) != len(self.stages) - 1:
            raise ValueError(
                f"comm: {len(self.comm)} values given but {len(self.stages)} stages have "
                f"{len(self.stages) - 1} boundaries"
            )
        sizes = self.boundary_bytes if isinstance(self.boundary_bytes, list) else [self.boundary_bytes or 0.0]
        if any(not (b >= 0) for b in sizes):
            raise ValueError("boundary_bytes: every boundary's bytes must be >= 0")
        if isinstance(self.boundary_bytes, list) and len(self.boundary_bytes) != len(self.stages) - 1:
            raise ValueError(
                f"boundary_bytes: {len(self.boundary_bytes)} values given but {len(self.stages)} stages have "
                f"{len(self.stages) - 1} boundaries"
            )
        self._check_sums()
        return self

    def boundary_after(self, stage: int) -> float:
        """Bytes of one microbatch's activation sent across the boundary stage -> stage+1."""
        if isinstance(self.boundary_bytes, list):
            return self.boundary_bytes[stage]
        return float(self.boundary_bytes or 0.0)

    def _check_sums(self) -> None:
        """Finite numbers whose sums are not (1e308 + 1e308) would make every makespan inf and
        every bubble nan: refuse them here, naming the field, so no result is ever inf or nan."""
        for k, c in enumerate(self.stages):
            if not math.isfinite(c.forward + c.backward_input + c.backward_weight):
                raise ValueError(f"stages[{k}]: forward + backward_input + backward_weight is too large to add up "
                                 "(not a finite number); give times in a larger unit (e.g. seconds)")
            if not math.isfinite(c.activation_bytes + c.static_bytes):
                raise ValueError(f"stages[{k}]: activation_bytes + static_bytes is too large to add up "
                                 "(not a finite number)")
        if not math.isfinite(self.microbatch_time()):
            raise ValueError("the time of one microbatch through all stages (forward, backward_input and "
                             "backward_weight of every stage plus comm twice per boundary) is too large to add "
                             "up (not a finite number); give times in a larger unit (e.g. seconds)")
        if not math.isfinite(sum(c.activation_bytes + c.static_bytes for c in self.stages)):
            raise ValueError("the bytes of all stages (activation_bytes + static_bytes) are too large to add up "
                             "(not a finite number)")

    def microbatch_time(self) -> float:
        """Seconds of one microbatch's F, I and W on every stage plus its communication both ways:
        with M microbatches, no schedule's step is longer than M times this."""
        comm = sum(self.comm) if isinstance(self.comm, list) else self.comm * (self.n_stages - 1)
        return sum(c.forward + c.backward_input + c.backward_weight for c in self.stages) + 2 * comm

    def check_step_total(self, n_microbatches: int) -> None:
        """Raise SchedcError when `n_microbatches` of this profile's work cannot be added up in
        floating point (the step time or memory would be inf)."""
        per_mb_bytes = sum(c.activation_bytes for c in self.stages)
        if not (math.isfinite(n_microbatches * self.microbatch_time())
                and math.isfinite(n_microbatches * per_mb_bytes + sum(c.static_bytes for c in self.stages))):
            raise SchedcError(f"{n_microbatches} microbatches of these costs are too large to add up (the step "
                              "time or memory is not a finite number); give times and bytes in larger units")

    @property
    def n_stages(self) -> int:
        return len(self.stages)

    def comm_after(self, stage: int) -> float:
        """Seconds to send an activation (or its gradient) across the boundary stage -> stage+1."""
        if isinstance(self.comm, list):
            return self.comm[stage]
        return float(self.comm)

    def merge(self, units_per_stage: Sequence[int]) -> "Profile":
        """The per-stage profile of a contiguous partition of this per-unit profile.

        ``units_per_stage[k]`` consecutive units (in model order) form stage k. A stage costs the
        sums of its units' times and bytes and holds all their module names; the communication
        after a stage is that of the unit boundary where it ends. A profile that already follows
        torch's runtime (its unit 0 has no I) stays in that form: the merged stage 0's whole
        backward is in W.
        """
        if isinstance(units_per_stage, (str, bytes)) or not all(
                isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in units_per_stage):
            raise SchedcError(f"units_per_stage must be a list of unit counts (integers), one per stage, got "
                              f"{literal(repr(units_per_stage)[:60])}")
        counts = [int(n) for n in units_per_stage]
        if any(n < 1 for n in counts) or sum(counts) != self.n_stages:
            raise SchedcError(
                f"a partition of {self.n_stages} units needs positive unit counts summing to "
                f"{self.n_stages}, got {counts}")
        stages, ends, start = [], [], 0
        for n in counts:
            part = self.stages[start:start + n]
            names = [m for u in part for m in (u.modules or [])]
            stages.append(StageCost(
                forward=sum(u.forward for u in part),
                backward_input=sum(u.backward_input for u in part),
                backward_weight=sum(u.backward_weight for u in part),
                activation_bytes=sum(u.activation_bytes for u in part),
                weight_grad_bytes=sum(_held(u) for u in part),
                static_bytes=sum(u.static_bytes for u in part),
                # a unit's transient is live while that unit runs, on top of bytes the stage
                # already counts from its action's start: the largest one bounds the stage's
                transient_bytes=_merged_transients(part),
                modules=names if all(u.modules for u in part) else None,
            ))
            start += n
            ends.append(start - 1)
        if self.runtime == "torch":
            stages[0] = torch_first_stage(stages[0])
        comm = [self.comm_after(u) for u in ends[:-1]] if isinstance(self.comm, list) else self.comm
        boundary = ([self.boundary_after(u) for u in ends[:-1]] if isinstance(self.boundary_bytes, list)
                    else self.boundary_bytes)
        return self.model_copy(update={"stages": stages, "comm": comm, "boundary_bytes": boundary})

    def executed(self, runtime: Optional[str] = None) -> "Profile":
        """The costs as `runtime` executes them (module docstring); None: the runtime this profile
        already follows, else torch's."""
        runtime = runtime or self.runtime or DEFAULT_RUNTIME
        if runtime not in RUNTIMES:
            raise ParameterError("execution", f"{{param}} must be one of {', '.join(RUNTIMES)}, got {literal(repr(runtime))}")
        if runtime == "ideal":
            if self.runtime == "torch":
                raise ParameterError(
                    "execution", "this profile follows torch's runtime (stage 0's backward is all in W), so it "
                    "has no ideal form; use {name}torch, or a profile with every stage's real I and W")
            return self if self.runtime == "ideal" else self.model_copy(update={"runtime": "ideal"})
        if self.runtime == "torch":
            return self
        return self.model_copy(update={"stages": [torch_first_stage(self.stages[0])] + list(self.stages[1:]),
                                       "runtime": "torch"})

    def duration(self, stage: int, kind: str) -> float:
        """Seconds of `kind` on `stage` (the kind's ``seconds`` rule in schedc.core.ir.KIND_TABLE)."""
        return KIND_TABLE[kind].seconds(self.stages[stage])

    def memory_delta(self, stage: int, kind: str) -> float:
        """Change of a rank's held bytes when it runs this action (schedc.core.cost_model.held_delta)."""
        return held_delta(self.stages[stage], kind)

    @classmethod
    def uniform(
        cls,
        n_stages: int,
        forward: float = 1.0,
        backward_input: float = 1.0,
        backward_weight: float = 1.0,
        comm: Union[float, Sequence[float]] = 0.0,
        held_fraction: float = HELD_FRACTION,
    ) -> "Profile":
        """Identical stages: 1 unit of activation per microbatch, `held_fraction` of it held
        between I and W."""
        if isinstance(n_stages, bool) or not isinstance(n_stages, numbers.Integral) or n_stages < 1:
            raise SchedcError(f"n_stages must be a positive integer, got {literal(repr(n_stages)[:40])}")
        stage = StageCost(
            forward=forward,
            backward_input=backward_input,
            backward_weight=backward_weight,
            activation_bytes=1.0,
            weight_grad_bytes=held_fraction,
        )
        comm_value = list(comm) if isinstance(comm, (list, tuple)) else float(comm)
        return cls(stages=[stage] * n_stages, comm=comm_value, model="uniform")

    @classmethod
    def edge_heavy(
        cls, n_stages: int, edge: float = 1.3, input_ratio: float = 1.1, weight_ratio: float = 0.9, comm: float = 0.1,
        held_fraction: float = HELD_FRACTION,
    ) -> "Profile":
        """Unequal stages the way real models are: the first and last stage (embedding; LM head
        and loss) cost ``edge`` times the middle ones; I = input_ratio x F, W = weight_ratio x F;
        ``comm`` per boundary; memory as in :meth:`uniform`. The defaults are the compiler's
        benchmark case (1.3x, 1.1, 0.9, 10% of F)."""
        stages = []
        for s in range(n_stages):
            f = edge if s in (0, n_stages - 1) else 1.0
            stages.append(StageCost(forward=f, backward_input=input_ratio * f, backward_weight=weight_ratio * f,
                                    activation_bytes=1.0, weight_grad_bytes=held_fraction))
        return cls(stages=stages, comm=comm, model="edge-heavy")

    @classmethod
    def load(cls, path: Union[str, Path]) -> "Profile":
        from schedc.io.fileio import read_json

        path = Path(path)
        data = read_json(path, "a profile")
        if not isinstance(data, dict):
            raise SchedcError(f"{path}: a profile is a JSON object with 'format' and 'stages'")
        if data.get("format") != PROFILE_FORMAT:
            raise SchedcError(
                f"{path}: field 'format' must be {PROFILE_FORMAT!r}, got {data.get('format')!r}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise SchedcError(f"{path}: {describe_validation_error(e)}") from None

    def save(self, path: Union[str, Path]) -> None:
        from schedc.io.fileio import atomic_write_text

        atomic_write_text(path, self.model_dump_json(indent=2, exclude_none=True) + "\n")


def describe_validation_error(e: ValidationError) -> str:
    """pydantic's first error as one line: 'field stages[2].forward: must be > 0 (got -1)'."""
    err = e.errors()[0]
    loc = ""
    for part in err["loc"]:
        loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field (remove it or check its spelling)"
    # a scalar is worth echoing; a whole object (model-level checks, missing fields) is not
    scalar = not isinstance(err.get("input"), (dict, list, BaseModel))
    got = f" (got {err['input']!r})" if "input" in err and scalar and err["type"] != "extra_forbidden" else ""
    where = f"field {loc}: " if loc else ""
    return f"{where}{msg}{got}"


def parse_costs(text: str) -> tuple[float, float, float]:
    """'F,I,W' -> three floats, e.g. '1,1.1,0.9'."""
    parts = text.split(",")
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 3 or values[0] <= 0 or values[1] <= 0 or values[2] < 0 or not all(map(math.isfinite, values)):
        raise ParameterError(
            "costs", f"expected three finite numbers F,I,W with F>0, I>0, W>=0 (e.g. 1,1,1), got {literal(repr(text))}"
        )
    if not math.isfinite(sum(values)):
        raise ParameterError("costs", f"{{name}}{text}: F + I + W is too large to add up (not a finite number); "
                                      "give smaller numbers (they are relative: 1,1,1 is the usual)")
    return values  # type: ignore[return-value]


def parse_comm(text: str) -> Union[float, list[float]]:
    """'0.1' (every boundary) or '0.1,0.2,0.1' (one per boundary)."""
    try:
        values = [float(p) for p in text.split(",")]
    except ValueError:
        raise ParameterError("comm", f"expected seconds per boundary (e.g. 0.1 or 0.1,0.2), got {literal(repr(text))}") from None
    if any(v < 0 or not math.isfinite(v) for v in values):
        raise ParameterError("comm", f"communication times must be finite and >= 0, got {text!r}")
    return values[0] if len(values) == 1 else values


def size_unit(unit: str) -> int:
    """Bytes of one ``unit`` of MemoryLimit.parse: b, k/ki/kib (binary), kb (decimal), ..."""
    if unit == "b":
        return 1
    power = "kmgt".index(unit[0]) + 1
    return 10 ** (3 * power) if unit[1:] == "b" else 2 ** (10 * power)


class MemoryLimit(BaseModel):
    """``relative``: ``Kp``, K times 1F1B's need on its most loaded rank (module docstring);
    ``bytes``: an absolute per-rank cap including static bytes; ``none``: no cap."""

    kind: Literal["relative", "bytes", "none"]
    value: float = 0.0

    @classmethod
    def parse(cls, text: str) -> "MemoryLimit":
        """``Kp``, a size or ``none``. Sizes: ``KB``/``MB``/``GB``/``TB`` are decimal (10^9 bytes
        a GB, as disk and cloud vendors count); ``K``/``M``/``G``/``T`` alone, ``Ki``... and
        ``KiB``... are binary (2^30 bytes a G, as ``torch.cuda.memory_summary``, ``free -g`` and
        ``docker --memory 80g`` count), so ``80G`` = ``80GiB`` and ``80GB`` is 7% less. A GPU's name
        (``h100``, ``h200``, ``a100-40gb``, ...: :data:`schedc.core.devices.DEVICES`) is its total as
        CUDA reports it to a process (an H100 80GB: 79.19 GiB). A bad value
        is a :class:`~schedc.errors.ParameterError` about ``memory``."""
        from schedc.core.devices import DEVICES, device_bytes
        from schedc.errors import ParameterError, shown

        t = str(text).strip().lower().replace(" ", "")
        if t in ("none", "inf", "unlimited"):
            return cls(kind="none")
        card = device_bytes(t) if len(t) <= 40 else None  # a GPU's name: its total as CUDA reports it
        if card is not None:
            return cls(kind="bytes", value=card)
        m = re.fullmatch(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)(p|[kmgt]?i?b?)", t) if len(t) <= 10000 else None
        if m is None:
            raise ParameterError("memory", f"expected Kp (e.g. 1p, 1.5p), a size (e.g. 80GiB, 80G, 80GB), a GPU "
                                           f"({', '.join(DEVICES)}) or 'none', got {literal(shown(text))}")
        number, unit = float(m.group(1)), m.group(2)
        if unit in ("", "i") and 2**20 <= number <= 2**50:  # a count of bytes ('80e9'), not a Kp or a GiB
            raise ParameterError("memory", f"{shown(text)} has no unit: for {format_bytes(number)} give "
                                           f"{{name}}{m.group(1)}B, or a size such as {{name}}80GiB")
        if unit in ("", "i"):
            raise ParameterError("memory", f"{shown(text)} has no unit: give Kp (1F1B's need times K, e.g. "
                                           f"{{name}}{m.group(1)}p) or a size (e.g. {{name}}{m.group(1)}GiB)")
        if not number > 0:
            raise ParameterError("memory", f"{shown(text)} must be > 0 (for no cap give {{name}}none)")
        if unit == "p":
            if number > limits.MAX_MEMORY_FACTOR:
                raise ParameterError("memory", f"the factor in {shown(text)} is more than "
                                               f"{limits.MAX_MEMORY_FACTOR:g}; for no cap give {{name}}none")
            return cls(kind="relative", value=number)
        value = number * size_unit(unit)
        if not math.isfinite(value) or value > limits.MAX_MEMORY_BYTES:
            raise ParameterError("memory", f"{shown(text)} is more than {format_bytes(limits.MAX_MEMORY_BYTES)} "
                                           "per rank; for no cap give {name}none")
        if value < 1:
            raise ParameterError("memory", f"{shown(text)} is less than one byte per rank; give e.g. 80GiB")
        return cls(kind="bytes", value=value)

    def __str__(self) -> str:
        if self.kind == "none":
            return "none"
        if self.kind == "relative":
            return f"{self.value:g}p"
        return format_bytes(self.value)

    def per_rank(self, profile: Profile, placement: Sequence[int],
                 n_microbatches: Optional[int] = None) -> list[float]:
        """The cap in bytes for each rank (static bytes, buffers and reserve included); inf when
        there is none. A ``Kp`` cap is the same on every rank: max over r of the bytes r holds all
        step + K x 1F1B's peak on r (module docstring; schedc.core.cost_model.caps)."""
        from schedc.core import cost_model

        return cost_model.caps(self, profile, placement, n_microbatches)


def rank_static_bytes(profile: Profile, placement: Sequence[int]) -> list[float]:
    """Per rank: the static bytes (params, grads, optimizer state) of its stages."""
    from schedc.core import cost_model

    return cost_model.rank_static_bytes(profile, placement)


def one_f_one_b_peaks(profile: Profile, placement: Sequence[int]) -> list[float]:
    """Per rank: 1F1B's peak in bytes above what the rank holds all step, when it runs each
    rank's stages as one stage (M >= R): R - q microbatches of all the rank's stages, q = the
    rank's position in the chain of ranks ordered by their first stage (q = r for loop and V),
    plus the largest F or B transient. See the module docstring and schedc.core.cost_model."""
    from schedc.core import cost_model

    return cost_model.one_f_one_b_peaks(profile, placement)


def p_needed(peak: float, profile: Profile, placement: Sequence[int], n_microbatches: Optional[int] = None) -> float:
    """The smallest K such that a rank peaking at `peak` bytes (everything included) fits under
    ``Kp``: min over ranks r of (peak - fixed_r) / peak1F1B_r, at least 0. Give it the largest
    per-rank peak of a schedule to get the memory that schedule needs in p."""
    from schedc.core import cost_model

    return cost_model.p_needed(peak, profile, placement, n_microbatches)


def format_amount(x: float, profile: Profile) -> str:
    """A memory amount in a message: bytes for a measured profile, 'units' (one microbatch's
    activation of one stage) for identical stages from --costs, whose memory has no bytes."""
    if profile.model == "uniform":
        return f"{x:.4g} unit{'' if x == 1 else 's'}"
    return format_bytes(x)


def format_duration(x: float, profile: Profile, digits: int = 4) -> str:
    """A time as every command prints it: seconds (scaled to s, ms or us) for measured profiles,
    'units' for identical stages from --costs (``Profile.uniform``, model "uniform"), whose times
    are in the unit the user gave F, I and W in."""
    if profile.model == "uniform":
        return f"{x:.{digits}g} units"
    if not math.isfinite(x) or x == 0 or abs(x) >= 1:
        return f"{x:.{digits}g} s"
    return f"{1e3 * x:.{digits}g} ms" if abs(x) >= 1e-3 else f"{1e6 * x:.{digits}g} us"
