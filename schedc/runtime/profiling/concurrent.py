"""Measuring in N processes at once: what each of N ranks sharing a CPU host sees.

Problem: ranks on one host share its cores and memory bandwidth, so a stage measured alone is
faster than it will run. Method: :func:`measure_concurrently` starts N measurers
(:mod:`.worker`, through :mod:`schedc.runtime.launch`, isolated from the working directory),
each timing every stage, and pools their samples. Cost: N processes, each the whole measurement.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from schedc.core.settings import RunSettings
from schedc.runtime import launch as launcher
from schedc.runtime.profiling.measurement import Measurement
from schedc.runtime.profiling.stages import StageMeasurement


def measure_concurrently(config, n_stages: int, run: RunSettings, how: Measurement, units: bool = False,
                         reuse_layers: bool = True) -> list[StageMeasurement]:
    """The GPT's stages (or units) measured by ``how.concurrent`` processes at once, within
    ``how.timeout`` s, for the run's microbatch and optimizer; each stage's samples pooled."""
    threads = torch.get_num_threads()
    spec = {"config": dataclasses.asdict(config), "n_stages": n_stages, "mbs": run.microbatch_size,
            "warmup": how.warmup, "repeats": how.repeats, "optimizer": run.optimizer,
            "threads": threads, "units": units, "reuse_layers": reuse_layers}
    results = launcher.launch(launcher.python_module("schedc.runtime.profiling.worker"), how.concurrent,
                              timeout=how.timeout, spec=spec, label="profile --concurrent", threads=threads)
    pooled: Optional[list[StageMeasurement]] = None
    for got in results:
        got = [StageMeasurement.from_dict(d) for d in got]
        pooled = got if pooled is None else [a.merged(b) for a, b in zip(pooled, got)]
    return pooled or []
