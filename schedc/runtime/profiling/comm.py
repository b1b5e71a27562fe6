"""Seconds of each stage boundary's transfer: computed, or measured between two ranks.

Problem: the schedule needs each boundary's communication time. Method: ``latency + bytes /
bandwidth`` of each boundary's activation (:func:`comm_seconds`), or a send/recv ping-pong between
ranks 0 and 1 under torchrun (:func:`measure_p2p_seconds`). Cost: ``warmup + repeats`` ping-pongs
per boundary when measured.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Optional, Sequence, Union

import torch

from schedc.errors import ParameterError, SchedcError


def comm_seconds(boundary_bytes: Sequence[int], bandwidth: Optional[float], latency: float = 0.0) -> list[float]:
    """latency + bytes / bandwidth (bytes per second) for each boundary; latency only without a bandwidth."""
    if bandwidth is not None and bandwidth <= 0:
        raise ParameterError("comm_bandwidth", f"{{param}} must be > 0 bytes/s, got {bandwidth:g}")
    if latency < 0:
        raise ParameterError("comm_latency", f"{{param}} must be >= 0 seconds, got {latency:g}")
    return [latency + (b / bandwidth if bandwidth else 0.0) for b in boundary_bytes]


def measure_p2p_seconds(
    boundary_bytes: Sequence[int],
    device: Union[str, torch.device] = "cpu",
    repeats: int = 10,
    warmup: int = 3,
    group=None,
) -> list[float]:
    """One-way time of sending each boundary's activation from rank 0 to rank 1 (half a ping-pong).

    Every rank of the (initialized) process group must call this with the same arguments; ranks
    other than 0 and 1 only wait. The result (median per boundary) is the same on every rank.
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise SchedcError("measuring communication needs torch.distributed initialized (launch with torchrun)")
    world = dist.get_world_size(group)
    if world < 2:
        raise SchedcError("measuring communication needs at least 2 ranks (torchrun --nproc-per-node 2)")
    rank = dist.get_rank(group)
    dev = torch.device(device)
    results = []
    for nbytes in boundary_bytes:
        buf = torch.zeros(max(1, int(math.ceil(nbytes / 4))), dtype=torch.float32, device=dev)
        samples = []
        for rep in range(warmup + repeats):
            if rank in (0, 1):
                t0 = time.perf_counter()
                if rank == 0:
                    dist.send(buf, 1, group=group)
                    dist.recv(buf, 1, group=group)
                else:
                    dist.recv(buf, 0, group=group)
                    dist.send(buf, 0, group=group)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                if rep >= warmup:
                    samples.append((time.perf_counter() - t0) / 2)
        value = torch.tensor([statistics.median(samples) if samples else 0.0], dtype=torch.float64)
        if dev.type == "cuda":
            value = value.to(dev)
        dist.broadcast(value, 0, group=group)
        results.append(float(value.item()))
    return results
