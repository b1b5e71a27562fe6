"""Timing one stage's actions back to back, as the runtime runs them on one stream.

Problem: timing each action between synchronizes adds the launch latency to every action (on a
GPU most of a short W). Method: :class:`Marks` records time points between actions with no
synchronize in between (CUDA events, or ``perf_counter``); :func:`time_repeats` runs F, I, W and
F, B of one stage per round, :func:`time_b` F and B (a unit checkpointed per op); :class:`Stat`
keeps the samples (median and spread). Cost: ``warmup + repeats`` rounds.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from schedc.core.formatting import format_seconds
from schedc.runtime.profiling.runner import StageRunner


@dataclass
class Stat:
    """Median and spread of repeated timings, in seconds."""

    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """(max - min) / median: 0.05 means the repeats lie within 5% of the median's size."""
        m = self.median
        return (max(self.samples) - min(self.samples)) / m if m > 0 else 0.0

    def __str__(self) -> str:
        return f"{format_seconds(self.median)} ±{100 * self.spread:.0f}%"


class Marks:
    """Time points between the actions of one round, as torch's runtime runs them: one after
    another on the device's current stream with no synchronize in between (CUDA events recorded
    back to back; perf_counter on CPU, and on MPS after synchronizing). Synchronizing around
    every action instead would add launch latency to each, most of a short W's time."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.points: list = []

    def mark(self) -> None:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record(torch.cuda.current_stream(self.device))
            self.points.append(e)
            return
        if self.device.type == "mps":
            torch.mps.synchronize()
        self.points.append(time.perf_counter())

    def seconds(self) -> list[float]:
        """Seconds between consecutive marks (synchronizes on CUDA)."""
        if self.cuda:
            self.points[-1].synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.points, self.points[1:])]
        return [b - a for a, b in zip(self.points, self.points[1:])]


def time_repeats(run: StageRunner, sample: tuple, warmup: int, repeats: int) -> dict[str, list[float]]:
    """Seconds of F, I, W and of F, B, after `warmup` untimed rounds: {'F', 'I', 'W', 'B'} -> samples.

    Each round runs F, I, W of one microbatch and then F, B of another back to back, as a
    one-rank schedule of this stage would; the device synchronizes only at the round's start and
    end (:class:`Marks`)."""
    times: dict[str, list[float]] = {"F": [], "I": [], "W": [], "B": []}
    for rep in range(warmup + repeats):
        inputs, inputs2 = run.inputs(sample), run.inputs(sample)
        if run.device.type == "cuda":
            torch.cuda.synchronize(run.device)
        marks = Marks(run.device)
        marks.mark()
        outs, roots = run.forward(inputs)
        marks.mark()
        pg = run.run_input(roots, inputs)
        marks.mark()
        run.detach_last(outs)
        run.run_weight(roots, inputs, pg)
        marks.mark()
        outs2, roots2 = run.forward(inputs2)
        marks.mark()
        run.run_full(roots2, inputs2)
        marks.mark()
        tf, ti, tw, tf2, tb = marks.seconds()
        del outs, roots, pg, outs2, roots2
        if rep >= warmup:
            times["F"] += [tf, tf2]
            times["I"].append(ti)
            times["W"].append(tw)
            times["B"].append(tb)
    for p in run.module.parameters():
        p.grad = None
    return times


def time_b(run: StageRunner, sample: tuple, warmup: int, repeats: int) -> dict[str, list[float]]:
    """Seconds of F and B, back to back, after `warmup` untimed rounds (:class:`Marks`)."""
    times: dict[str, list[float]] = {"F": [], "B": []}
    for rep in range(warmup + repeats):
        inputs = run.inputs(sample)
        if run.device.type == "cuda":
            torch.cuda.synchronize(run.device)
        marks = Marks(run.device)
        marks.mark()
        outs, roots = run.forward(inputs)
        marks.mark()
        run.run_full(roots, inputs)
        marks.mark()
        tf, tb = marks.seconds()
        del outs, roots
        if rep >= warmup:
            times["F"].append(tf)
            times["B"].append(tb)
    for p in run.module.parameters():
        p.grad = None
    return times
