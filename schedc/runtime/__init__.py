"""schedc's torch side: run a CSV schedule, split a model into stages, the small GPT model.

Everything that imports torch lives in this package, and importing it imports torch: without
torch, ``import schedc.runtime`` (or any of its modules) fails with one ImportError that names
the extra to install, ``pip install 'schedc[torch]'``. ``import schedc`` never imports it.

    from schedc.runtime import stages_for_rank, build_schedule, csv_schedule_factory, load_pipeline
"""

try:
    import torch as _torch  # noqa: F401
except ImportError as e:  # one line that says what to do, instead of a failure deep in a submodule
    raise ImportError(f"schedc.runtime needs torch, which cannot be imported ({e}): "
                      "pip install 'schedc[torch]'", name="torch") from e

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

__all__ = [
    "CsvSchedule",
    "GPT",
    "GPTConfig",
    "Pipeline",
    "build_schedule",
    "check_stages",
    "csv_schedule_factory",
    "lm_loss",
    "load_pipeline",
    "load_torch_pipeline",
    "make_batch",
    "read_schedule",
    "split_gpt",
    "split_model",
    "stage_layer_ranges",
    "stages_for_rank",
]
