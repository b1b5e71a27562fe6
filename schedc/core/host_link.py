"""The link between a GPU and its host's memory, as offload uses it.

Problem: an offloaded microbatch (schedc.core.memory_actions) leaves the device on a copy stream
and comes back on another; how long each copy takes, how many bytes it moves, and how much pinned
host memory the copies hold decide whether offload is free, slow or impossible.

Method: each rank has two copy streams, device to host and host to device (CUDA's copy engines
run beside compute), each first-in first-out. A copy of ``n`` bytes takes ``latency + n /
(bandwidth / shared_by)``: ``bandwidth`` is one GPU's link in one direction (PCIe Gen5 x16 moves
about 50 GB/s each way, the default), and ``shared_by`` GPUs behind one PCIe switch split it
evenly when they copy at once (counted as always at once: an upper estimate of the time). What a
copy moves is the stage's held activation less the stage's input (:func:`offload_bytes`): torch
keeps a stage's input tensors on the device for its backward (they are the received buffer, not
the stage's own allocation), so schedc's runtime (schedc.runtime.offload) leaves them there.
Host memory is a cap per node of ``ranks_per_node`` ranks, holding an offloaded microbatch from
the start of its copy out (the pinned buffer is allocated then) until its fetch ends.

Cost: O(1) per question.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schedc.errors import SchedcError

# PCIe Gen5 x16, one direction, as H100/H200 nodes give each GPU (64 GB/s raw, about 50 usable)
DEFAULT_BANDWIDTH = 50e9
# one cudaMemcpyAsync's launch and completion as the copy engine sees it, order of magnitude
DEFAULT_LATENCY = 10e-6


@dataclass(frozen=True)
class HostLink:
    """One GPU's link to host memory (module docstring). ``host_memory`` is the pinned memory one
    node may give offload, in bytes (inf: no cap)."""

    bandwidth: float = DEFAULT_BANDWIDTH
    latency: float = DEFAULT_LATENCY
    shared_by: int = 1
    host_memory: float = math.inf
    ranks_per_node: int = 8

    def __post_init__(self) -> None:
        for name in ("bandwidth", "latency", "host_memory"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
                raise SchedcError(f"host link: {name} must be a number, got {value!r}")
        if not (0 < self.bandwidth < math.inf):
            raise SchedcError(f"host link: bandwidth must be a positive number of bytes per second, got {self.bandwidth!r}")
        if not (0 <= self.latency < math.inf):
            raise SchedcError(f"host link: latency must be a number of seconds >= 0, got {self.latency!r}")
        if not self.host_memory >= 0:
            raise SchedcError(f"host link: host_memory must be bytes >= 0, got {self.host_memory!r}")
        for name in ("shared_by", "ranks_per_node"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SchedcError(f"host link: {name} must be a whole number >= 1, got {value!r}")

    @property
    def per_gpu_bandwidth(self) -> float:
        """Bytes per second one GPU moves in one direction, the switch's share taken."""
        return self.bandwidth / self.shared_by

    def seconds(self, nbytes: float) -> float:
        """How long one copy of `nbytes` takes on one direction of the link."""
        return self.latency + nbytes * self.shared_by / self.bandwidth

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def assumes(self) -> dict:
        """What a report records of the link (its ``assumes``)."""
        out = {"host_bandwidth": self.bandwidth, "host_latency": self.latency, "host_link_shared_by": self.shared_by,
               "ranks_per_node": self.ranks_per_node}
        if math.isfinite(self.host_memory):
            out["host_memory"] = self.host_memory
        return out


def offload_bytes(profile, stage: int) -> float:
    """Bytes one offloaded microbatch of `stage` moves each way: what its F holds less the stage's
    input, which stays on the device (module docstring). Stage 0's input is token ids: nothing."""
    held = profile.stages[stage].activation_bytes
    kept = profile.boundary_after(stage - 1) if stage > 0 and profile.boundary_bytes is not None else 0.0
    return max(0.0, held - kept)
