"""What every framework module shares: torch's schedule names, what a framework builds, the plug-in record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from schedc.core.costs import FRAMEWORK_AC
from schedc.errors import SchedcError, shown

# torch's get_schedule_class map, in its order; True = a PipelineScheduleSingle subclass
SCHEDULE_NAMES: dict[str, bool] = {
    "1F1B": True,
    "Interleaved1F1B": False,
    "GPipe": True,
    "LoopedBFS": False,
    "InterleavedZeroBubble": False,
    "PipelineScheduleSingle": True,
    "PipelineScheduleMulti": False,
    "ZBVZeroBubble": False,
    "DualPipeV": False,
}
AC_MODES = FRAMEWORK_AC  # what torchtitan and NeMo apply, one mode for every layer


def fsdp_shortfall(assumes: dict, dtypes: Optional[tuple[str, str]]) -> Optional[str]:
    """What a framework that wraps every block in FSDP2 holds beyond what the plan counted, in
    words, or None when the plan counted it: with the run's (compute, reduce) dtypes, the bytes
    per parameter :func:`schedc.model_costs.fsdp_held` says torch's pipelining keeps unsharded;
    without them (a dtype the framework does not take, a warning of its own) only whether the plan
    counted any. Cost: O(1)."""
    from schedc.model_costs import DTYPE_BYTES, fsdp_held

    counted = float(assumes.get("fsdp_unsharded_bytes_per_param") or 0.0) if assumes.get("fsdp") else 0.0
    if dtypes is None:
        return None if counted else "bytes the plan did not count"
    held = fsdp_held(dtypes[0], dtypes[1], DTYPE_BYTES[dtypes[1]], **({"torch": str(assumes["torch"])}
                                                                     if assumes.get("torch") else {}))
    return None if held <= counted else f"{held:g} bytes per parameter where the plan counted {counted:g}"


def count_advice(framework: str, label: str, assumes: dict, dtypes: Optional[tuple[str, str]] = None) -> str:
    """What to do about bytes a plan did not count for `framework`, for whoever reads it: a plan
    made for another target is told to plan for this one; one already made for it (``--for
    FRAMEWORK``) from a measured profile, which that flag only names, to count the profile from its
    config or measure it as the framework runs; one counted for it with other dtypes, to count with
    the framework's (`dtypes`: compute, reduce). Cost: O(1)."""
    if assumes.get("framework") != framework:
        return (f"count the profile for {framework} (schedc plan --for {framework}; "
                f"count_profile(..., framework={framework!r})) before launching")
    if assumes.get("fsdp") and dtypes is not None:
        return (f"the plan was counted for {framework} with other dtypes: count it with those {label} runs "
                f"(compute {dtypes[0]}, gradients reduced in {dtypes[1]}: --dtype, --grad-dtype) before launching")
    return (f"--for {framework} only names the target of a measured profile, which holds what it measured: "
            f"count the profile from the model's config (schedc plan --config config.json --for {framework}) or "
            f"measure it as {label} runs it before launching")


@dataclass(frozen=True)
class Build:
    """What a framework builds: ``n_stages`` stages, ``placement`` 'loop' or 'v', and (when the
    batch settings were given) ``n_microbatches``."""

    framework: str
    schedule: str  # torch's spelling of the name
    n_ranks: int
    n_stages: int
    placement: str
    n_microbatches: Optional[int]

    @property
    def stages_per_rank(self) -> int:
        return self.n_stages // self.n_ranks

    def describe(self) -> str:
        mb = "" if self.n_microbatches is None else f", {self.n_microbatches} microbatches"
        return (f"{self.n_stages} stages ({self.placement}, {self.stages_per_rank} per rank) on "
                f"{self.n_ranks} ranks{mb}")


@dataclass(frozen=True)
class FitReport:
    """``ok``: the CSV fits what the framework builds; ``message``: one line saying so, or what
    differs and which schedule name or setting would fit."""

    ok: bool
    message: str
    build: Optional[Build] = None
    error: Optional[SchedcError] = None  # a setting's ParameterError, so that the CLI spells it as its flag

    def raise_unless_ok(self) -> None:
        if not self.ok:
            raise self.error or SchedcError(self.message)


@dataclass(frozen=True)
class Handoff:
    """What a plan hands to a framework: the partition in the profile's module names, the
    placement, the sizes, the CSV's file name and what the plan assumed about the run
    (its report's ``"assumes"``: seq_len, microbatch_size, activation_checkpoint, dp_shard, tp, ...)."""

    partition: list[list[str]]
    placement: str  # 'loop' (1 stage per rank) or 'v' (2 per rank)
    n_ranks: int
    n_microbatches: int
    csv: str = "plan.csv"
    assumes: dict[str, Any] = field(default_factory=dict)
    # the plan's step, and the step of each mode for every layer that it planned (its
    # activation_checkpoint "global"; None: not planned), so that a block can say what it launches
    step: Optional[float] = None
    ac_steps: dict[str, Optional[float]] = field(default_factory=dict)

    @property
    def microbatch_size(self) -> int:
        return int(self.assumes.get("microbatch_size") or 1)

    def common_warnings(self, framework: str, implementation: str, label: str) -> list[str]:
        """What every framework's block warns about: memory counted for another implementation of
        the model, and activation checkpointing that differs between stages or layers."""
        out = []
        counted = self.assumes.get("implementation")
        if counted in ("hf", "torchtitan") and counted != implementation:
            names = {"hf": "Hugging Face transformers' modules", "torchtitan": "torchtitan's model code"}
            out.append(f"the profile counts memory as {names[counted]} keep it; {label} runs {names[implementation]}, "
                       f"which keep other bytes: {count_advice(framework, label, self.assumes)}")
        return out

    def ac_summary(self) -> str:
        """'none x 10, full x 22' for a list of modes, in order of first use."""
        modes = self.assumes.get("activation_checkpoint")
        if not isinstance(modes, list):
            return ascii(modes)[:60]

        def key(m) -> str:  # a stage's per-block list as its blocks' counts: [full x 3, none x 1]
            if isinstance(m, list) and all(isinstance(b, str) for b in m):
                return "[" + tally(m) + "]"
            return ascii(m)[:20].strip(chr(39))

        def tally(items) -> str:
            counts: dict = {}
            for m in items:
                counts[key(m)] = counts.get(key(m), 0) + 1
            return ", ".join(f"{k} x {n}" for k, n in counts.items())

        return tally(modes)

    def ac_mode(self, modes: tuple[str, ...] = AC_MODES) -> Optional[str]:
        """The one activation-checkpointing mode of the run (default none: what schedc counts
        without one) when a framework can apply it (one of `modes`); None when it differs between
        stages or layers, or is a mode only schedc's runtime has."""
        mode = self._one_ac_mode()
        return mode if mode in modes else None

    def _one_ac_mode(self) -> Optional[str]:
        mode = self.assumes.get("activation_checkpoint") or "none"
        if isinstance(mode, list):  # an entry may list its blocks' modes: one mode when every block has it
            flat = [b for m in mode for b in (m if isinstance(m, list) else [m])]
            mode = flat[0] if flat and all(b == flat[0] for b in flat) else None
        return mode if isinstance(mode, str) else None

    def ac_warning(self, label: str, modes: tuple[str, ...] = AC_MODES, default: str = "none") -> str:
        """Why `label` cannot apply the plan's activation checkpointing (when :meth:`ac_mode` is None),
        the mode it runs instead (`default`: what it runs when its settings name none) and the best
        plan it can launch: the shortest of the plan's steps with one of `modes` for every layer."""
        mode = self._one_ac_mode()
        if mode is not None:
            why = (f"the plan checkpoints every layer with {shown(mode)}, a mode only schedc's runtime applies; "
                   f"{label} has {', '.join(modes)}")
        else:
            why = (f"the plan checkpoints activations differently per stage or layer ({self.ac_summary()}); {label} "
                   "applies one mode to every layer")
        why += f"; these settings name no mode, so {label} runs {default}, not what the plan's step assumes"
        steps = {m: v for m, v in self.ac_steps.items() if m in modes and v is not None}
        if not steps:
            return (f"{why}: run the plan under schedc's runtime, or plan with one mode for every layer "
                    f"({'/'.join(modes)}) for a plan {label} launches")
        best = min(steps, key=lambda m: steps[m])
        longer = "" if not self.step else f", {100 * (steps[best] - self.step) / self.step:+.1f}% against this plan's"
        return (f"{why}: run the plan under schedc's runtime; the best plan {label} can launch checkpoints every layer "
                f"with {best}, step {steps[best]:.6g} s{longer} (schedc plan --ac {best})")


@dataclass(frozen=True)
class Framework:
    """One framework as schedc knows it: everything framework-specific, in one record that its
    module builds and :func:`schedc.frameworks.register` adds.

    ``build(schedule, n_ranks, **settings)`` says what it builds from its settings; ``settings(handoff)``
    turns a plan into its settings (a dict, with ``"warnings"``); ``render(settings)`` prints them in
    the form its users paste; ``vocabulary`` names its module names (a key of
    ``schedc.model_costs.UNIT_NAMES``: embedding, layer pattern, head modules), which a counted
    profile for it is written in and whose model code it runs; ``fsdp`` whether it wraps every block
    in FSDP2 at shard degree 1 too (``unit_profile(fsdp=...)``; None: only when sharding);
    ``implementation`` whose model code it runs (``unit_profile(impl=...)``); ``ac_modes``
    the activation-checkpointing modes it applies (one for every layer) and ``ac_default`` what it
    runs when told none; ``fields`` name each setting the way its users write it; ``default_split``
    the partition it builds when given none; ``release(version)`` the flag set of a version
    (``--for NAME==VERSION``; None: one set); ``spec_help`` how ``validate --for`` offers it."""

    name: str
    label: str  # name and the release whose sources the rules were read from
    v_names: tuple[str, ...]  # schedule names that place stages in a V
    plan_names: dict[str, str]  # the schedule name that builds a plan's placement
    fields: dict[str, str]
    vocabulary: str
    build: Callable[..., Build]
    settings: Callable[[Handoff], dict]
    render: Callable[[dict], str]
    fsdp: Optional[bool] = None
    ac_modes: tuple[str, ...] = ("none",)
    ac_default: str = "none"
    # the module names per stage it builds by itself for a model of `layers` layers (None: schedc
    # does not restate that framework's default split)
    default_split: Callable[..., Optional[list[list[str]]]] = lambda n_stages, layers, **settings: None
    release: Optional[Callable[[Optional[str]], str]] = None
    spec_help: str = ""
    # (embedding, layer pattern, head modules) of a vocabulary schedc does not know yet: register
    # adds it to schedc.model_costs.UNIT_NAMES under `vocabulary`
    names: Optional[tuple[str, str, tuple[str, ...]]] = None
    # whose model code it runs, which decides what a layer keeps for the backward
    # (schedc.choices.Implementation; None: the one its vocabulary is named after)
    implementation: Optional[str] = None

    @property
    def unit_names(self) -> tuple[str, str, tuple[str, ...]]:
        """(embedding, layer pattern, head modules) in its own module names."""
        from schedc.model_costs import UNIT_NAMES

        return UNIT_NAMES[self.vocabulary]


def schedule_name(name: str) -> str:
    """torch's spelling of a schedule name; matched case-insensitively, as get_schedule_class does."""
    by_lower = {n.lower(): n for n in SCHEDULE_NAMES}
    try:
        return by_lower[name.strip().lower()]
    except KeyError:
        raise SchedcError(f"unknown schedule name {name!r}; torch knows {', '.join(SCHEDULE_NAMES)} "
                          "(case does not matter)") from None


def check_per_rank(fw: str, name: str, single: bool, n_stages: int, n_ranks: int, why: str) -> None:
    if n_stages < 1 or n_stages % n_ranks:
        raise SchedcError(f"{fw}: {why} gives {n_stages} stages, not a multiple of the {n_ranks} PP ranks")
    per_rank = n_stages // n_ranks
    if single and per_rank != 1:
        raise SchedcError(f"{fw}: {name} needs exactly 1 stage per rank but {why} gives {per_rank}")
    if not single and per_rank < 2:
        raise SchedcError(f"{fw}: {name} needs at least 2 stages per rank but {why} gives {per_rank}")


def check_v(fw: str, name: str, placement: str, n_stages: int, n_ranks: int) -> None:
    if placement == "v" and n_stages != 2 * n_ranks:
        raise SchedcError(f"{fw}: {name} builds V stages, exactly 2 per rank, not {n_stages} on {n_ranks} ranks")


def microbatches(fw: str, fields: dict, local_batch_size: Optional[int], microbatch_size: int) -> Optional[int]:
    if microbatch_size < 1:
        raise SchedcError(f"{fw}: {fields['microbatch_size']} must be >= 1, got {microbatch_size}")
    if local_batch_size is None:
        return None
    if local_batch_size < 1:
        raise SchedcError(f"{fw}: {fields['local_batch_size']} must be >= 1, got {local_batch_size}")
    if local_batch_size % microbatch_size:
        raise SchedcError(f"{fw}: {fields['local_batch_size']} {local_batch_size} is not divisible by "
                          f"{fields['microbatch_size']} {microbatch_size}")
    return local_batch_size // microbatch_size


def check_positive(fw: str, fields: dict, **values: Optional[int]) -> None:
    """Settings that count something (layers, layers per stage) must be >= 1; the 'less' weights >= 0."""
    for key, value in values.items():
        if value is None:
            continue
        least = 0 if key.endswith("_less") else 1
        if value < least:
            raise SchedcError(f"{fw}: {fields.get(key, key)} must be >= {least}, got {value}")
