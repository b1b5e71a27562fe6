"""schedc's torch side: run a CSV schedule, split a model into stages, the small GPT model.

Everything that imports torch lives in this package. Without torch installed, importing it (or
any of its modules) fails with one ImportError that names the extra to install,
``pip install 'schedc[torch]'``; ``import schedc`` never imports it.

The names below are imported explicitly for type checkers and IDEs (the ``TYPE_CHECKING``
block), and at run time on first use: the launcher, the emulation and the calibration import
their own modules without torch's pipelining, whose import costs seconds per process (measured:
docs/design.md, "Runtime contract").

    from schedc.runtime import stages_for_rank, build_schedule, csv_schedule_factory, load_pipeline
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if importlib.util.find_spec("torch") is None:  # looks torch up without importing it
    raise ImportError("schedc.runtime needs torch, which is not installed: pip install 'schedc[torch]'",
                      name="torch")

if TYPE_CHECKING:
    from schedc.runtime.models import GPT, GPTConfig, lm_loss, make_batch
    from schedc.runtime.pipeline import (
        CsvSchedule,
        Pipeline,
        build_schedule,
        check_stages,
        csv_schedule_factory,
        load_pipeline,
        load_torch_pipeline,
        read_schedule,
        stages_for_rank,
    )
    from schedc.runtime.split import split_gpt, split_model, stage_layer_ranges

# name -> the module that defines it (the same names as the TYPE_CHECKING block above)
_HOME = {
    "GPT": "models", "GPTConfig": "models", "lm_loss": "models", "make_batch": "models",
    "CsvSchedule": "pipeline", "Pipeline": "pipeline", "build_schedule": "pipeline", "check_stages": "pipeline",
    "csv_schedule_factory": "pipeline", "load_pipeline": "pipeline", "load_torch_pipeline": "pipeline",
    "read_schedule": "pipeline", "stages_for_rank": "pipeline",
    "split_gpt": "split", "split_model": "split", "stage_layer_ranges": "split",
}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'schedc.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"schedc.runtime.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
