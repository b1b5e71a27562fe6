"""Old spellings that keep working for one release, with a DeprecationWarning that names the new one.

Problem: ``schedc.simulate``, ``schedc.validate`` and ``schedc.plot`` are now the front door's
functions (:mod:`schedc.api`), which take the names the modules of the same name had as
attributes of the package. Code written against the modules through the package
(``from schedc import simulate; simulate.simulate(s, p)``, as the README showed) would break.

Second problem: the modules moved into layers (``schedc.costs`` is ``schedc.core.costs``,
``schedc.solver.model`` is ``schedc.solver.engines.mip``, ...: ``MOVED``); code that imports them by
their old dotted names would break. (``schedc.solver.bounds`` is now the package of the bounds; the
old module's functions are reached through it: schedc/solver/bounds/__init__.py.)

Method: the modules' entry points that were documented through the package are hung on the front
door's functions as attributes that warn, then call the module's function unchanged. An old dotted
name is found by a finder on ``sys.meta_path`` (``install_moved_modules``) that warns once and
hands back the module at its new name, the same object, so ``isinstance`` and patches agree.

Cost: one warning per call of a front-door alias; one per import of an old module name.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any, Callable

__all__ = ["deprecated_alias", "attach_module_aliases", "install_moved_modules", "MOVED"]

_CORE = ("ir", "costs", "cost_model", "simulate", "validate", "diagnose", "partition", "baselines",
         "tolerances", "limits")
_COMMANDS = ("baseline", "calibrate", "common", "compile", "emulate", "library", "plan", "plot", "profile",
             "simulate", "trace", "validate")
_ENGINES = {"model": "mip", "cpsat": "cpsat", "greedy": "zb_greedy", "paper_greedy": "zb_rounds",
            "heuristic": "heuristic", "periodic": "periodic", "cooldown": "cooldown", "windows": "windows",
            "v_list": "v_list", "warm": "warm"}
_BOUNDS = {"anchored": "anchored", "blocks": "blocks", "pair_relaxation": "pair",
           "rank_relaxation": "rank"}

MOVED = {  # old dotted module name -> where it lives now
    **{f"schedc.{m}": f"schedc.core.{m}" for m in _CORE if m not in ("simulate", "validate")},
    "schedc.csvio": "schedc.io.csvio", "schedc.fileio": "schedc.io.fileio", "schedc.trace": "schedc.show.trace",
    "schedc.commands": "schedc.cli",  # a package, so that its old submodule names resolve below it
    **{f"schedc.commands.{c}": f"schedc.cli.{c}" for c in _COMMANDS},
    **{f"schedc.solver.{old}": f"schedc.solver.engines.{new}" for old, new in _ENGINES.items()},
    **{f"schedc.solver.{old}": f"schedc.solver.bounds.{new}" for old, new in _BOUNDS.items()},
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name of ``MOVED`` and loads it as the module at its new name."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(f"module {spec.name} is deprecated and will be removed in the next release; use {new}",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module ran under its new name already."""


def install_moved_modules(front_door_modules: dict[str, ModuleType]) -> None:
    """Let ``import schedc.<old name>`` keep working for one release (see module doc).

    ``schedc.simulate``, ``schedc.validate`` and ``schedc.plot`` are also the front door's functions:
    a finder would replace the function on the package with the module it loads, so those three
    old names go straight into ``sys.modules`` (``front_door_modules``: old name -> module), without
    a warning, as they were documented before the move."""
    sys.modules.update(front_door_modules)
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules())  # before the path finder, which would load a second copy


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
