"""How a profile is measured, apart from the run it describes.

Problem: a measured profile takes two kinds of input. What the run is (the sequence, microbatch,
dtypes, optimizer, checkpointing, the reserve, the bytes per parameter) is
:class:`schedc.core.settings.RunSettings`, the same object the counted route and the plan take,
and it is recorded as the profile's ``assumes``. Where and how long to measure (the device, warm-up
and timed runs, the processes sharing the host, how communication is taken) changes the numbers'
noise, not what they describe, and is recorded nowhere but the notes. Method: one small frozen
dataclass for the second kind, and :func:`split_options`, which sorts a caller's keywords between
the two objects (keywords over the objects, as ``schedc.api.count_profile`` takes them). Cost: none.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Optional, Sequence, Union

import torch

from schedc.core.settings import RunSettings
from schedc.errors import SchedcError


@dataclass(frozen=True)
class Measurement:
    """Where and how a profile is measured. ``comm``: seconds per boundary (a number or one per
    boundary), ``"measure"`` for a ping-pong between ranks 0 and 1 (under torchrun), or None for
    ``comm_latency + bytes / comm_bandwidth`` of each boundary (free without either: a measured
    profile does not guess a link, unlike the counted route's ``RunSettings.bandwidth``).
    ``concurrent`` processes at once (CPU hosts) each measure everything within ``timeout`` s."""

    device: Union[str, torch.device, None] = "cpu"
    warmup: int = 2  # untimed runs per stage
    repeats: int = 5  # timed runs per stage; the median is kept
    comm: Union[None, float, Sequence[float], str] = None
    comm_bandwidth: Optional[float] = None  # B/s
    comm_latency: float = 0.0  # s per transfer
    concurrent: int = 1
    timeout: float = 1800.0  # s for the concurrent measurers together

    def but(self, **knobs: Any) -> "Measurement":
        """These knobs with some replaced (None: left as it is)."""
        return replace(self, **{k: v for k, v in knobs.items() if v is not None})


MEASUREMENT_FIELDS = frozenset(f.name for f in fields(Measurement))
SETTING_FIELDS = frozenset(f.name for f in fields(RunSettings))


def split_options(function: str, settings: Optional[RunSettings], measurement: Optional[Measurement],
                  options: dict) -> tuple[RunSettings, Measurement]:
    """`settings` and `measurement` (None: the defaults) with `options` over them: a keyword that
    names a :class:`Measurement` field goes there (``device`` included: where to measure), one that
    names a ``RunSettings`` field to the settings; a None is the object's. Anything else is one line
    naming `function` and the keyword."""
    if settings is not None and not isinstance(settings, RunSettings):
        raise SchedcError(f"{function}: settings must be a schedc.core.settings.RunSettings, got "
                          f"{type(settings).__name__}")
    if measurement is not None and not isinstance(measurement, Measurement):
        raise SchedcError(f"{function}: measurement must be a schedc.runtime.profiling.measurement.Measurement, got "
                          f"{type(measurement).__name__}")
    unknown = sorted(set(options) - MEASUREMENT_FIELDS - SETTING_FIELDS)
    if unknown:
        raise SchedcError(f"{function}: unknown keyword {unknown[0]!r}; it takes the fields of RunSettings "
                          f"(settings=) and of Measurement (measurement=): {', '.join(sorted(MEASUREMENT_FIELDS))}")
    knobs = {k: v for k, v in options.items() if k in MEASUREMENT_FIELDS}
    run = {k: v for k, v in options.items() if k not in MEASUREMENT_FIELDS}
    return (settings or RunSettings()).but(**run), (measurement or Measurement()).but(**knobs)
