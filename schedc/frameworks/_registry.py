"""The frameworks schedc hands schedules to, by name; ``plan``, ``validate`` and the CLI iterate over it."""

from __future__ import annotations

from schedc.frameworks import nemo, torchtitan
from schedc.frameworks._base import Framework

REGISTRY: dict[str, Framework] = {f.name: f for f in (torchtitan.FRAMEWORK, nemo.FRAMEWORK)}
