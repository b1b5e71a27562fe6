"""Run a test function on N gloo ranks through schedc's launcher; never hang a test run.

``run_ranks(fn, world_size, timeout=..., **kwargs)`` starts ``world_size`` ranks with
:func:`schedc.runtime.launch.launch` (this file as the rank's script); each joins a gloo process
group (timeout a little under the deadline), calls ``fn(rank, world_size, **kwargs)`` and returns,
per rank, ``{"ok": value}`` or ``{"error": message, "type": exception class name, ...}`` (see
:func:`capture`). A rank that crashed or ran past the deadline raises AssertionError with its
output tail.

``fn`` must be a module-level function of an importable file (it is loaded by file path).
"""

from __future__ import annotations

import importlib.util
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from schedc.runtime import launch as launcher
from schedc.runtime.launch import ROOT, free_port, worker_env  # noqa: F401 - used by the tests

__all__ = ["ROOT", "capture", "free_port", "run_ranks", "worker_env"]


def run_ranks(
    fn: Callable[..., Any], world_size: int, timeout: float = 90.0, **kwargs: Any
) -> list[Any]:
    source = str(Path(sys.modules[fn.__module__].__file__).resolve())
    spec = {"source": source, "name": fn.__name__, "kwargs": kwargs}
    try:
        return launcher.launch([sys.executable, str(Path(__file__).resolve())], world_size,
                               timeout=timeout, spec=spec, label="run_ranks")
    except launcher.LaunchError as e:
        raise AssertionError(f"{e}; log:\n{e.log_tail}") from None


def capture(fn: Callable[[], Any]) -> dict:
    """Run ``fn`` on a rank; ``{"ok": value}`` or the error it raised, with the time taken."""
    t0 = time.monotonic()
    try:
        return {"ok": fn(), "seconds": time.monotonic() - t0}
    except Exception as e:  # noqa: BLE001 - reported to the parent, which asserts on it
        return {
            "error": str(e), "type": type(e).__name__, "seconds": time.monotonic() - t0,
            "traceback": traceback.format_exc()[-2000:],
        }


def _rank_body() -> Any:
    import torch
    import torch.distributed as dist

    spec = launcher.read_spec()
    torch.set_num_threads(1)
    module_spec = importlib.util.spec_from_file_location(f"_dist_target_{Path(spec['source']).stem}",
                                                         spec["source"])
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    fn = getattr(module, spec["name"])
    launcher.init_group("gloo")
    try:
        return capture(lambda: fn(launcher.rank(), launcher.world_size(), **spec["kwargs"]))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(launcher.run_rank(_rank_body))
