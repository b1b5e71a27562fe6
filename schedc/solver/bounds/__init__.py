"""Lower bounds on the step of every schedule of a problem: the certificate behind a gap.

``chains``: combinatorial terms from chains of work that must run one after another; ``rank``:
each rank alone, every other rank free; ``pair``: two ranks together; ``anchored``: every rank's
memory at once; ``blocks``: the whole problem on a few microbatches. Each is valid for every
schedule, so the driver keeps the largest.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``schedc.solver.bounds.lower_bound`` and the other names of the module this package replaced,
    for one release, with a DeprecationWarning (schedc.deprecation)."""
    import importlib
    import warnings

    chains = importlib.import_module("schedc.solver.bounds.chains")
    if name.startswith("__") or not hasattr(chains, name):
        raise AttributeError(f"module 'schedc.solver.bounds' has no attribute {name!r}")
    warnings.warn(f"schedc.solver.bounds.{name} is deprecated and will be removed in the next release; use "
                  f"schedc.solver.bounds.chains.{name}", DeprecationWarning, stacklevel=2)
    return getattr(chains, name)
