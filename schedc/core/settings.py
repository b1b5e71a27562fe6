"""One run's settings: the sequence, microbatch, dtypes, optimizer, parallel degrees,
checkpointing, the code that runs it, the reserve and the machine's speeds.

Problem: the counted route (``schedc.api.count_profile`` -> ``schedc.model_costs``), the profiler
and the plan all need the same description of the run, and each spelled it as its own list of
keywords (21, 25 and 23 positional arguments). Method: one frozen dataclass, built once by the
command line or the Python API and handed down; its fields are the keywords of
:func:`schedc.model_costs.unit_profile` with that function's defaults. Checking and filling the
derived values (an fp32 master copy, the reserve of CUDA, FSDP2's unsharded bytes) is the
counted route's (:func:`schedc.model_costs.profile.resolve`), which records the profile's
``assumes`` from the one object it resolves. Cost: none.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Optional, Sequence, Union

from schedc.errors import SchedcError

COUNTED_FOR_TORCH = "2.14"  # the torch release whose kernels' saved tensors the counts follow


@dataclass(frozen=True)
class RunSettings:
    """A training run as schedc counts it. ``None`` where the default is derived from other
    settings or the model (``impl``: the framework of ``names``; ``names``: the framework's
    module names, else torchtitan's; ``param_dtype``: the activation dtype; ``master_weights``: an
    fp32 copy when the parameters are narrower and there is an optimizer; ``reserve_bytes``:
    CUDA's measured reserve on CUDA, 0 on CPU; ``fsdp``: when ``dp_shard`` > 1; ``dtype``: the
    model's)."""

    seq: Optional[int] = None  # tokens per sequence
    microbatch_size: int = 1  # sequences per microbatch
    activation_checkpoint: Union[str, Sequence[str]] = "none"  # a mode, or one per layer
    impl: Optional[str] = None  # whose model code runs: hf, torchtitan, paper
    device: str = "cuda"  # whose kernels: cuda or cpu
    dtype: Optional[str] = None  # the activation dtype, over the model's own
    param_dtype: Optional[str] = None
    grad_dtype: str = "float32"
    optimizer: str = "adamw"
    optimizer_dtype: str = "float32"
    master_weights: Optional[bool] = None
    grad_bytes_per_param: Optional[float] = None
    optimizer_bytes_per_param: Optional[float] = None
    dp_shard: int = 1  # FSDP2 degree
    tp: int = 1  # tensor-parallel degree
    fsdp: Optional[bool] = None  # whether FSDP2 wraps the blocks
    reserve_bytes: Optional[float] = None  # what a process holds outside torch's allocator
    flops_per_second: float = 400e12  # effective
    gpu: Optional[str] = None  # a card of schedc.core.device_rates: per-op rates price time instead of one rate
    memory_bandwidth: float = 2e12  # B/s
    bandwidth: float = 40e9  # B/s of the link between stages
    latency: float = 0.0  # s per transfer between stages
    tp_bandwidth: float = 450e9  # B/s of a tensor-parallel collective within a node
    tp_latency: float = 10e-6  # s per tensor-parallel collective
    # data-parallel collectives (FSDP2 with dp_shard > 1) across nodes: a 400 Gb/s NIC per GPU, and an
    # assumed NCCL launch-and-sync cost per collective (schedc.model_costs.step)
    dp_bandwidth: float = 50e9  # B/s per GPU
    dp_latency: float = 10e-6  # s per collective
    held: str = "torch"  # what is held from I to W: torch's runtime, or the paper's M_W
    names: Optional[str] = None  # the units' module names: the framework's, else torchtitan's
    framework: str = "schedc"  # the framework that runs the plan
    torch: str = COUNTED_FOR_TORCH

    @classmethod
    def of(cls, **settings: Any) -> "RunSettings":
        """The settings given as keywords, the defaults for the rest; a None is the default
        (callers pass what their users left out as None); an unknown name is one line."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise SchedcError(f"run settings: unknown setting {unknown[0]!r}; the settings are {', '.join(sorted(known))}")
        return cls(**{k: v for k, v in settings.items() if v is not None})

    def but(self, **settings: Any) -> "RunSettings":
        """These settings with some replaced (None: left as it is)."""
        RunSettings.of(**settings)  # the names checked
        return replace(self, **{k: v for k, v in settings.items() if v is not None})

    def given(self) -> dict:
        """The settings as keywords, None ones left out."""
        return {k: v for k, v in asdict(self).items() if v is not None}
