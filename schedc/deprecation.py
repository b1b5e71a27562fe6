"""Old spellings that keep working for one release, with a DeprecationWarning that names the new one.

Problem: ``schedc.simulate``, ``schedc.validate`` and ``schedc.plot`` are now the front door's
functions (:mod:`schedc.api`), which take the names the modules of the same name had as
attributes of the package. Code written against the modules through the package
(``from schedc import simulate; simulate.simulate(s, p)``, as the README showed) would break.

Method: the modules' entry points that were documented that way are hung on the front door's
functions as attributes that warn, then call the module's function unchanged. Importing the
modules by their dotted names (``from schedc.simulate import simulate``) is not deprecated:
that reaches the engine modules directly and does not warn.

Cost: one warning per call.
"""

from __future__ import annotations

import functools
import warnings
from types import ModuleType
from typing import Any, Callable

__all__ = ["deprecated_alias", "attach_module_aliases"]


def deprecated_alias(func: Callable[..., Any], old: str, new: str) -> Callable[..., Any]:
    """`func`, warning on each call that `old` is deprecated in favour of `new`."""

    @functools.wraps(func)
    def alias(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}",
                      DeprecationWarning, stacklevel=2)
        return func(*args, **kwargs)

    return alias


def attach_module_aliases(front: Callable[..., Any], module: ModuleType, names: dict[str, str]) -> None:
    """Hang ``module.NAME`` on `front` as a warning alias for each NAME -> replacement in `names`,
    so that ``schedc.<module>.NAME(...)`` written before the front door keeps working."""
    package = module.__name__
    for name, new in names.items():
        setattr(front, name, deprecated_alias(getattr(module, name), f"{package}.{name} reached through the "
                                              f"package (from schedc import {package.split('.')[-1]})", new))
