"""GPU names as memory caps, and the margin under which a plan's fit is a warning.

Problem: ``--memory 80GiB`` is not what an "80 GB" H100 gives a process: the card's total as
CUDA reports it (``torch.cuda.mem_get_info``'s second value, the "total capacity" of torch's
out-of-memory message) is 79.19 GiB, and a plan made for 80 GiB can stop on out-of-memory.
Method: a table of cards, each with the total CUDA (or HIP) reports and where that number comes
from; ``--memory h100`` reads it (:func:`device_bytes`). schedc's reserve (what a process holds
outside the allocator) is counted on top of the plan's bytes, so the cap is the card's whole total.
Where the total varies with the driver and ECC setting, the table holds the smallest one found,
and a total printed with two decimals is taken 0.005 GiB lower, so the cap never exceeds it.
Cost: O(1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from schedc.core.formatting import format_bytes
from schedc.errors import ParameterError

GiB = 2**30
PRINTED = 0.005 * GiB  # half a unit of the last decimal torch prints


@dataclass(frozen=True)
class Device:
    """A card: its total bytes as the runtime reports them to a process, and the source."""

    name: str
    total_bytes: float
    source: str


def _printed(gib: float) -> float:
    return float(math.floor(gib * GiB - PRINTED))


_OOM = "torch's out-of-memory message ('GPU 0 has a total capacity of {} GiB'), the smallest in public reports"
DEVICES = {d.name: d for d in (
    Device("h100-80gb", 85_029_158_912.0,
           "torch.cuda.mem_get_info on an H100 80GB HBM3 (79.19 GiB; public out-of-memory reports give 79.18-79.25)"),
    Device("h200", _printed(139.72), _OOM.format("139.72") + " (139.72-139.83)"),
    Device("b200", _printed(178.35), _OOM.format("178.35") + " (178.35-178.36)"),
    Device("a100-80gb", _printed(79.15), _OOM.format("79.15")),
    Device("a100-40gb", _printed(39.38), _OOM.format("39.38") + " (39.38-39.56)"),
    Device("mi300x", _printed(191.69), "torch's HIP out-of-memory message ('total capacity of 191.69 GiB'), the "
                                       "smallest in public reports (191.69-191.98)"),
)}
ALIASES = {"h100": "h100-80gb", "h100-sxm": "h100-80gb", "h200-141gb": "h200", "b200-192gb": "b200",
           "mi300x-192gb": "mi300x"}
AMBIGUOUS = {"a100": "a100-80gb or a100-40gb"}

# A plan closer to its cap than this is warned about: the larger of 512 MiB (the CUDA reserve
# schedc counts varied by 0.38 GiB between three runs on an H100, schedc.model_costs.CUDA_RESERVE_BYTES)
# and 1% of the cap (the allocator's rounding and fragmentation grow with the bytes it holds)
THIN_MARGIN_BYTES = 512 * 2**20
THIN_MARGIN_SHARE = 0.01


def device(name: str) -> Optional[Device]:
    """The card named `name` (case and spaces ignored), None when it is not a card's name; a
    name that could be two cards (``a100``) is a ParameterError about ``memory``."""
    key = str(name).strip().lower().replace(" ", "").replace("_", "-")
    if key in AMBIGUOUS:
        raise ParameterError("memory", f"{key} is two cards; give {{name}}" + AMBIGUOUS[key].replace(" or ", " or {name}"))
    return DEVICES.get(ALIASES.get(key, key))


def device_bytes(name: str) -> Optional[float]:
    """The cap of the card named `name` (:data:`DEVICES`), None when it names no card."""
    found = device(name)
    return None if found is None else found.total_bytes


def thin_margin(cap: float) -> float:
    """The margin under which a plan's fit is warned about (:data:`THIN_MARGIN_BYTES`, :data:`THIN_MARGIN_SHARE`)."""
    return max(THIN_MARGIN_BYTES, THIN_MARGIN_SHARE * cap)


def margin_warning(peaks, caps) -> Optional[str]:
    """One line when some rank's peak comes within :func:`thin_margin` of its cap, else None.
    `peaks`, `caps`: bytes per rank (a cap of inf: none)."""
    ranks = [(cap - peak, r, cap) for r, (peak, cap) in enumerate(zip(peaks, caps)) if cap != float("inf")]
    if not ranks:
        return None
    margin, rank, cap = min(ranks)
    if margin >= thin_margin(cap):
        return None
    return (f"rank {rank} peaks {format_bytes(margin)} under its cap of {format_bytes(cap)}, less than the "
            f"{format_bytes(thin_margin(cap))} margin schedc asks (the larger of 512 MiB and 1% of the cap: the "
            f"process's reserve outside the allocator varies by about 0.4 GiB between runs); the plan may stop on "
            f"out-of-memory: plan with a lower --memory, or measure the reserve (schedc profile --device cuda)")
