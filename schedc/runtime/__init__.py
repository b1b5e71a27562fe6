"""schedc's torch side: run a CSV schedule, split a model into stages, the small GPT model.

Everything that imports torch lives in this package; names are exported lazily so that
``import schedc.runtime`` itself stays cheap and importing a submodule pulls in only what it needs.

    from schedc.runtime import stages_for_rank, build_schedule, csv_schedule_factory, load_pipeline
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "stages_for_rank": "pipeline",
    "build_schedule": "pipeline",
    "csv_schedule_factory": "pipeline",
    "load_pipeline": "pipeline",
    "load_torch_pipeline": "pipeline",
    "check_stages": "pipeline",
    "read_schedule": "pipeline",
    "CsvSchedule": "pipeline",
    "Pipeline": "pipeline",
    "split_model": "split",
    "split_gpt": "split",
    "stage_layer_ranges": "split",
    "GPT": "models",
    "GPTConfig": "models",
    "lm_loss": "models",
    "make_batch": "models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'schedc.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"schedc.runtime.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
