"""What a measured profile assumes about the run outside the measured modules.

Problem: the modules measured hold their gradients and optimizer state in the parameters' dtype
and nothing outside torch's allocator; a mixed-precision run or a CUDA process holds more.
Method: :class:`RunSettings` states it once, in the counted route's terms
(``schedc.model_costs``), and the profile's ``assumes`` records it. Cost: none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class RunSettings:
    """What the run holds per parameter and outside the allocator, as the counted route
    (``schedc.model_costs``) takes it: ``None`` means what the measured modules hold (the
    gradient in the parameter's dtype, the optimizer's state tensors in it too).
    ``grad_bytes_per_param`` / ``optimizer_bytes_per_param`` describe a mixed-precision run
    instead (e.g. 4 and 12: fp32 gradients, fp32 master weights and Adam's two moments)."""

    grad_bytes_per_param: Optional[float] = None
    optimizer_bytes_per_param: Optional[float] = None
    reserve_bytes: Optional[float] = None
    seq_len: Optional[int] = None
    activation_checkpoint: Any = "none"

