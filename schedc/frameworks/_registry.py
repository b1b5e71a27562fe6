"""The frameworks schedc hands schedules to, by name; ``plan``, ``validate`` and the CLI iterate over it.

A framework is one module that builds a :class:`~schedc.frameworks.Framework` record and one
:func:`register` call (this module registers torchtitan's and NeMo's). Everything that offers a
framework (``schedc.api.count_profile(framework=...)``, ``plan``'s hand-off, ``schedc plan --for``,
``schedc validate --for``) reads this dictionary when it runs, so a framework registered later is
offered too. Cost: a dictionary lookup.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from schedc.core.costs import AC_MODES
from schedc.errors import ParameterError, literal
from schedc.frameworks import nemo, torchtitan
from schedc.frameworks._base import Framework
from schedc.frameworks._names import VOCABULARIES
from schedc.model_costs import UNIT_NAMES

REGISTRY: dict[str, Framework] = {}
_ADDED: dict[str, str] = {}  # framework -> the vocabulary its registration added to UNIT_NAMES
SCHEDC = "schedc"  # schedc's own runtime: a target of `plan --for`, no hand-off of its own


def register(framework: Framework) -> Framework:
    """Add `framework` under its name (a SchedcError when the name is taken or not a plain word)."""
    if not isinstance(framework, Framework):
        raise ParameterError("framework", f"expected a Framework record, got {type(framework).__name__}", python=True)
    if not re.fullmatch(r"[a-z][a-z0-9_]*", framework.name) or framework.name in (*REGISTRY, SCHEDC):
        raise ParameterError("framework", f"{literal(framework.name)}: a framework name must be a new lower-case "
                                          f"word (taken: {', '.join((SCHEDC, *REGISTRY))})", python=True)
    if framework.vocabulary not in UNIT_NAMES:
        if framework.names is None:
            raise ParameterError("framework", f"{literal(framework.name)}: vocabulary "
                                              f"{literal(framework.vocabulary)} is none of {', '.join(UNIT_NAMES)}; "
                                              "give its names (embedding, layer pattern, head modules)", python=True)
        VOCABULARIES[framework.vocabulary] = framework.names
        _ADDED[framework.name] = framework.vocabulary
    REGISTRY[framework.name] = framework
    return framework


def unregister(name: str) -> None:
    """Remove a framework :func:`register` added, and the vocabulary it brought (nothing when none
    has that name)."""
    REGISTRY.pop(name, None)
    vocabulary = _ADDED.pop(name, None)
    if vocabulary is not None and not any(f.vocabulary == vocabulary for f in REGISTRY.values()):
        UNIT_NAMES.pop(vocabulary, None)


def targets() -> tuple[str, ...]:
    """What a plan can be made for: schedc's runtime and every registered framework."""
    return (SCHEDC, *REGISTRY)


def launchable_modes(framework: Optional[str] = None) -> tuple[str, ...]:
    """The activation-checkpointing modes `framework` applies to every layer (its record's
    ``ac_modes``); for schedc's runtime, None or a name not registered, those any registered
    framework applies (a mode outside them runs under schedc's runtime only), in
    :data:`schedc.core.costs.AC_MODES`' order."""
    if framework in REGISTRY:
        return REGISTRY[framework].ac_modes
    return tuple(m for m in AC_MODES if any(m in f.ac_modes for f in REGISTRY.values()))


def parse_target(value: Any) -> tuple[str, Optional[str]]:
    """``"torchtitan"`` -> (``"torchtitan"``, None); ``"torchtitan==main"`` -> (``"torchtitan"``, ``"main"``)
    for a framework whose flags depend on its release (``Framework.release``); else one line naming
    ``framework`` (``--for``)."""
    name, sep, version = value.partition("==") if isinstance(value, str) else (value, "", "")
    if not isinstance(name, str) or name.strip() not in targets():
        raise ParameterError("framework", f"{literal(ascii(value)[:40])} is not a framework schedc counts for; give one "
                                          f"of {', '.join(targets())}", flag="--for")
    name = name.strip()
    if not sep:
        return name, None
    f = REGISTRY.get(name)
    if f is None or f.release is None:
        raise ParameterError("framework", f"{literal(ascii(value)[:40])}: {name} takes no version; give {name}",
                             flag="--for")
    f.release(version)  # refuses what is not a version
    return name, version.strip()


register(torchtitan.FRAMEWORK)
register(nemo.FRAMEWORK)
