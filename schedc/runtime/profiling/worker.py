"""``python -m schedc.runtime.profiling.worker``: one of the measurers :mod:`.concurrent` starts.

Problem: a measurer process must rebuild the same GPT split from the spec its parent sent.
Method: read the spec (:func:`schedc.runtime.launch.read_spec`), measure every stage or unit on
the CPU, return the measurements as dicts. Cost: one measurement.
"""

from __future__ import annotations

import sys

import torch

from schedc.runtime import launch as launcher
from schedc.runtime.models import GPTConfig, lm_loss, make_batch
from schedc.runtime.profiling.gpt import gpt_stages, gpt_units
from schedc.runtime.profiling.stages import measure_stages
from schedc.runtime.profiling.units import measure_units


def main() -> int:
    """``python -m schedc.runtime.profiling.worker``: one of the concurrent measurers :func:`launch` starts."""

    return launcher.run_rank(lambda: _measure_one(launcher.read_spec()))


def _measure_one(spec: dict) -> list[dict]:

    torch.set_num_threads(int(spec["threads"]))
    cfg = GPTConfig(**spec["config"])
    tokens, targets = make_batch(cfg, int(spec["mbs"]), seed=0)
    options = dict(device="cpu", warmup=int(spec["warmup"]), repeats=int(spec["repeats"]), optimizer=spec["optimizer"])
    if spec.get("units"):
        measured = measure_units(gpt_units(cfg)[0], tokens, lm_loss, targets,
                                 reuse_layers=bool(spec.get("reuse_layers", True)), **options)
    else:
        measured = measure_stages(gpt_stages(cfg, int(spec["n_stages"])), tokens, lm_loss, targets, **options)
    return [m.to_dict() for m in measured]


if __name__ == "__main__":
    sys.exit(main())
