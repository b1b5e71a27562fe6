"""The training frameworks schedc hands schedules to: torchtitan 0.3.0 and NeMo AutoModel 0.7.0.

One module per framework (:mod:`schedc.frameworks.torchtitan`, :mod:`schedc.frameworks.nemo`), each
building a :class:`Framework` record that carries everything framework-specific: what it builds from
its settings (``build``), how a plan becomes its settings (``settings``) and how they print
(``render``), its module names (``vocabulary``, and ``names`` for a vocabulary schedc does not
know), whose model code it runs, whether FSDP2 wraps every block at shard degree 1, the
activation-checkpointing modes it applies and the one it runs when told none, its schedule names
for a loop and a V, the flag set of a release (torchtitan 0.3.0's or main's), how ``validate --for``
offers it. :func:`register` adds one to :data:`REGISTRY`; ``schedc.api.count_profile`` /
``with_framework`` (``FRAMEWORK_COUNTS``), ``plan``'s hand-off (:func:`framework_settings`), ``schedc
plan --for``, ``schedc profile --for`` / ``--names`` and ``schedc validate --for`` read the registry
when they run, and :func:`launchable_modes` answers which checkpointing a plan for it may choose.
Adding a framework is one module plus one :func:`register` call (tests/test_frameworks_records.py
registers a toy one). :func:`check_csv_for` says whether a CSV fits what one builds,
:func:`check_partition` whether a CSV is launched on its plan's partition. Nothing here imports
torch.
"""

from __future__ import annotations

from typing import Any, Optional

from schedc.frameworks._base import AC_MODES, SCHEDULE_NAMES, Build, FitReport, Framework, Handoff, schedule_name
from schedc.frameworks._fit import check_csv_for, framework_build, parse_spec, read_partition
from schedc.frameworks._names import VOCABULARIES, check_module_names
from schedc.frameworks._partition import check_partition, is_default_split, plan_partition_of
from schedc.frameworks._registry import REGISTRY, SCHEDC, launchable_modes, parse_target, register, targets, unregister
from schedc.frameworks.nemo import build as nemo_build
from schedc.frameworks.nemo import yaml_text as _nemo_yaml_text
from schedc.frameworks.torchtitan import build as torchtitan_build

__all__ = ["AC_MODES", "Build", "FitReport", "Framework", "Handoff", "REGISTRY", "SCHEDULE_NAMES", "VOCABULARIES",
           "check_csv_for", "check_module_names", "check_partition", "framework_build", "framework_settings",
           "handoff_of", "is_default_split", "launchable_modes", "nemo_build", "nemo_yaml", "parse_spec", "plan_partition_of",
           "parse_target", "read_partition", "register", "render_handoff", "SCHEDC", "schedule_name", "targets",
           "torchtitan_build", "unregister"]

def handoff_of(result, csv: str = "plan.csv", assumes: Optional[dict[str, Any]] = None) -> Handoff:
    """The facts a framework needs from a :class:`schedc.planning.PlanResult`. ``assumes``: what the plan
    took about the run; by default its report's ``"assumes"``, else the unit profile's."""
    problem = result.compiled.problem
    if assumes is None:  # the profile's, then the plan's own choices (e.g. its activation checkpointing)
        assumes = {**(getattr(result.units, "assumes", None) or {}), **(getattr(result, "assumes", None) or {}),
                   **((result.report or {}).get("assumes") or {})}
    assumes = dict(assumes)
    assumes.setdefault("microbatch_size", result.units.microbatch_size or 1)
    ac = getattr(result, "ac", None)  # --ac auto: the steps of the modes it planned for every layer
    return Handoff(partition=result.partition, placement=result.placement, n_ranks=problem.n_ranks,
                   n_microbatches=problem.n_microbatches, csv=csv, assumes=assumes, step=result.value,
                   ac_steps=dict(ac.global_steps) if ac is not None else {})


def framework_settings(result, csv: str = "plan.csv", assumes: Optional[dict[str, Any]] = None) -> dict:
    """Each registered framework's settings for the plan (``plan.json``'s ``"frameworks"``), in its own
    module names; module names a framework's parser would misread are refused (SchedcError)."""
    handoff = handoff_of(result, csv, assumes)
    return {name: f.settings(handoff) for name, f in REGISTRY.items()}


def render_handoff(settings: dict) -> str:
    """What ``schedc plan`` prints: each framework's block as its users paste it."""
    return "\n".join(REGISTRY[name].render(block) for name, block in settings.items() if name in REGISTRY)


def nemo_yaml(settings: dict) -> str:
    """NeMo's block of :func:`framework_settings` as YAML text."""
    return _nemo_yaml_text(settings["nemo"])
