"""Measuring a pipeline's stages: memory, times, and the times inside torch's runtime.

Problem: the profile's F, I, W must be what torch's ``_PipelineScheduleRuntime`` executes.
Method: each stage's memory from one traced pass (:mod:`.stage_memory`) and its times from
back-to-back rounds (:mod:`.timing`); then F, I and W are replaced by torch's runtime's own action
times in a one-rank schedule of all stages (:func:`schedc.runtime.one_rank.runtime_action_times`)
where that can run (not under torchrun), a note saying which. Cost: (1 + warmup + repeats) x
(2 forwards + 1 split backward + 1 full backward) per stage, plus (1 + repeats) microbatches of
the whole pipeline in the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import torch
import torch.nn as nn

from schedc.errors import SchedcError
from schedc.runtime.one_rank import runtime_action_times
from schedc.runtime.profiling.device import resolve_device
from schedc.runtime.profiling.memory import optimizer_factor, static_bytes_of
from schedc.runtime.profiling.runner import StageRunner, stage_samples
from schedc.runtime.profiling.stage_memory import measure_memory
from schedc.runtime.profiling.timing import Stat, time_repeats

ProgressFn = Callable[[str], None]


@dataclass
class StageMeasurement:
    """Everything measured for one stage; :func:`profile_stages` turns a list of them into a Profile."""

    index: int
    forward: Stat
    backward_input: Stat
    backward_weight: Stat
    backward_full: Stat
    activation_bytes: int
    weight_grad_bytes: int
    static_bytes: int
    param_bytes: int
    output_bytes: int
    n_params: int
    notes: list[str] = field(default_factory=list)
    cuda_after_forward: Optional[int] = None
    cuda_after_input: Optional[int] = None
    # transient peak of each action kind above what it started and ended with (allocator's view)
    transient: dict[str, int] = field(default_factory=dict)

    _TIMES = ("forward", "backward_input", "backward_weight", "backward_full")

    def to_dict(self) -> dict:
        """JSON-ready (timings as their samples), e.g. to send from a rank to its parent."""
        d = {k: v for k, v in self.__dict__.items() if k not in self._TIMES}
        d.update({k: getattr(self, k).samples for k in self._TIMES})
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "StageMeasurement":
        d = dict(d)
        for k in cls._TIMES:
            d[k] = Stat(list(d[k]))
        return cls(**d)

    def merged(self, other: "StageMeasurement") -> "StageMeasurement":
        """The same stage measured again: samples pooled (bytes are deterministic)."""
        out = StageMeasurement.from_dict(self.to_dict())
        for k in self._TIMES:
            getattr(out, k).samples.extend(getattr(other, k).samples)
        return out


def _measure_stage(
    index: int,
    module: nn.Module,
    sample: tuple,
    is_first: bool,
    is_last: bool,
    loss_fn: Optional[Callable],
    target,
    device: torch.device,
    warmup: int,
    repeats: int,
    optimizer: Optional[str],
) -> StageMeasurement:
    """Memory from one untimed pass, then the timed repeats (module docstring)."""
    run = StageRunner(index, module, is_first, is_last, loss_fn, target, device)
    memory = measure_memory(run, sample)
    times = time_repeats(run, sample, warmup, repeats)
    notes = list(memory.notes)
    if is_first:
        notes.append(
            f"stage {index}: first stage: torch's runtime skips I here (its input needs no gradient) "
            f"and runs the whole backward in W; I is the bookkeeping time only"
        )
    w_stat = Stat(times["W"])
    if not run.has_params:
        notes.append(f"stage {index}: no parameters: W = 0 (nothing to compute for weights)")
        w_stat = Stat([0.0])
    static, p_bytes, n_params = static_bytes_of(module, optimizer)
    return StageMeasurement(
        index=index,
        forward=Stat(times["F"]),
        backward_input=Stat([max(x, 1e-7) for x in times["I"]]),  # the file wants I > 0; a skipped I is still an action
        backward_weight=w_stat,
        backward_full=Stat(times["B"]),
        activation_bytes=int(memory.activation),
        weight_grad_bytes=int(memory.weight_grad),
        static_bytes=int(static),
        param_bytes=int(p_bytes),
        output_bytes=int(memory.output_bytes),
        n_params=int(n_params),
        notes=notes,
        cuda_after_forward=memory.cuda_after_forward,
        cuda_after_input=memory.cuda_after_input,
        transient=dict(memory.transient),
    )


def measure_stages(
    stage_modules: Sequence[nn.Module],
    sample_input,
    loss_fn: Optional[Callable] = None,
    target=None,
    device: Union[str, torch.device, None] = "cpu",
    warmup: int = 2,
    repeats: int = 5,
    optimizer: Optional[str] = "adamw",
    progress: Optional[ProgressFn] = None,
    only: Optional[Sequence[int]] = None,
) -> list[StageMeasurement]:
    """Measure every stage (see the module docstring); modules and inputs are moved to `device`.

    ``only`` restricts the measurement to those stage indices (the others still run one
    forward to produce the sample inputs); the result then holds only those stages."""
    if not stage_modules:
        raise SchedcError("profile: give at least one stage module")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (warmup, repeats)) or warmup < 0 or repeats < 1:
        raise SchedcError(f"profile: need warmup >= 0 and repeats >= 1 (integers), got {warmup!r:.40} and {repeats!r:.40}")
    optimizer_factor(optimizer)  # fail before measuring, not after
    dev = resolve_device(device)
    for i, m in enumerate(stage_modules):
        if not isinstance(m, nn.Module):
            raise SchedcError(f"stage {i}: expected a torch.nn.Module, got {type(m).__name__}")
        m.to(dev)
    if isinstance(target, torch.Tensor):
        target = target.to(dev)

    samples = stage_samples(stage_modules, sample_input, dev)
    n = len(stage_modules)
    results = []
    for i, m in enumerate(stage_modules):
        if only is not None and i not in only:
            continue
        if progress:
            progress(f"profiling stage {i + 1}/{n} on {dev} ({warmup} warm-up + {repeats} runs)")
        results.append(
            _measure_stage(i, m, samples[i], i == 0, i == n - 1, loss_fn, target, dev, warmup, repeats, optimizer)
        )
    return _timed_in_runtime(results, stage_modules, samples[0], loss_fn, target, dev, warmup, repeats, progress)


def _timed_in_runtime(results: list[StageMeasurement], stage_modules, sample, loss_fn, target, dev, warmup,
                      repeats, progress) -> list[StageMeasurement]:
    """`results` with F, I and W replaced by torch's runtime's own action times
    (:func:`schedc.runtime.one_rank.runtime_action_times`), where it can run here; B stays the
    stage's own (it only checks I + W ~ B)."""

    if progress:
        progress(f"timing F, I, W of {len(stage_modules)} stages inside torch's runtime ({repeats} microbatches)")
    try:
        times = runtime_action_times(stage_modules, sample, loss_fn, target, dev, warmup, repeats)
    except Exception as e:  # noqa: BLE001 - the stage-by-stage timings stand; the note says why
        times = None
        reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    else:
        reason = "a process group already exists (torchrun), or the sample is not batch-split tensors"
    for m in results:
        for p in stage_modules[m.index].parameters():
            p.grad = None
        if times is None or not all(times.get((m.index, k)) for k in ("F", "I", "W")):
            m.notes.append(f"stage {m.index}: F, I, W timed back to back outside torch's runtime ({reason})")
            continue
        m.forward = Stat(times[(m.index, "F")])
        m.backward_input = Stat([max(x, 1e-7) for x in times[(m.index, "I")]])
        if m.backward_weight.samples != [0.0]:
            m.backward_weight = Stat(times[(m.index, "W")])
        if times.get((m.index, "B")):
            m.backward_full = Stat(times[(m.index, "B")])
        m.notes.append(f"stage {m.index}: F, I, W are torch's runtime's own action times (a one-rank schedule of "
                       f"all stages, W right after its I, B on every other microbatch)")
    return results
