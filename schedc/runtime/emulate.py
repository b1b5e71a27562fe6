"""Emulate: run CSV schedules in torch's own pipeline runtime with stages that sleep their costs.

Problem: every number the compiler prints comes from schedc's simulator. To know that a schedule
is as fast in torch as predicted we must run it in torch's ``_PipelineScheduleRuntime`` (its
lowering into compute + send/recv actions, its step, its I/W split) with stage times we control,
on any machine, at 8 or 16 ranks.

Method: one local gloo process per CSV row (:mod:`schedc.runtime.launch`). Each rank builds, for
its CSV stages, a module whose forward sleeps F x ``scale`` and whose backward meets sleeps of
I and W placed where torch's split finds the real work (:class:`SleepStage`): the output is
``SleepI(x * p1) + SleepW(p2)``. torch's ``stage_backward_input`` differentiates only the path
from the output to the stage input (``SleepI``'s backward sleeps I); ``stage_backward_weight``
then walks from the saved intermediates to the parameters (``SleepW``'s backward sleeps W).
``p1`` makes stage 0's output require grad although its input does not, so torch treats stage 0
as it treats a real first stage: its I is skipped and its W runs the whole backward (I + W).
The stages are wrapped as ``PipelineStage``s and the CSV is loaded with
:func:`schedc.runtime.pipeline.build_schedule` (world size, microbatch count and placement are
checked before any collective; a deadlocking CSV is refused before launching, and the launcher's
deadline stops anything that still hangs). Tensors are tiny and every rank runs one thread,
so sleeping ranks need no CPU and many ranks fit on a small machine.

Every CSV is first run with every sleep cut to 1 us (the overhead run): what its actions then
take is the runtime's own per-action overhead (Python, autograd bookkeeping, posting sends and
receives, and the wake-up a rank pays after giving its core away, which a loaded host makes
larger), and each boundary's transfer delay is what localhost gloo adds. The prediction is
``simulate(schedule, P)`` where P is ``profile.executed("torch")`` (stage 0's I empty, its W
= I + W) scaled, plus, per stage and kind, the median overhead-run duration of that stage's
actions of that kind (measured in torch, so already in torch's form), and per boundary ``comm``
(default 0) plus the median overhead-run transfer delay. Communication
time itself is not emulated (nothing sleeps for it), so the default ``comm=0`` predicts exactly
what is emulated; ``comm=None`` puts the profile's comm into the prediction to show its share.
Steps start together after a barrier; the measured step is the median over the timed steps
(after ``warmup`` untimed ones) of the slowest rank's ``step()``, on the common monotonic clock.

With memory actions (offloads, schedc.core.memory_actions) each rank also runs its two copy
streams (:class:`CopyStreams`): one thread per direction, each first in first out, sleeping
scale x the link's time of each copy (schedc.core.host_link), as the simulator's rule has them:
a copy out starts when its F has run (``forward_one_chunk`` returned) and its stream is free; a
fetch is issued when the rank starts its ``fetch_at`` action and starts once its copy out has
ended and its stream is free; the I or B of an offloaded microbatch waits for its fetch, and an
F named as an offload's ``room_for`` for that copy out; what moves after I (an offload after I,
or the second move of one with ``refetch_at``) is copied out once the I has run and its W waits
for its fetch. The
hooks wrap the three per-action methods of the rank's ``PipelineStage`` instances, so torch's
runtime runs unchanged between them. The prediction simulates the same actions over the link
with every copy's time scaled. Nothing is copied (the tensors are tiny): the emulation times
the streams, the CPU run of schedc.runtime.offload checks the bookkeeping.

Cost: per launch, process start-up (importing torch) on every rank; then per CSV
(1 + overhead_steps) overhead-run steps and (warmup + steps) emulated steps of about the
predicted step time each. CSVs with the same rank count share one launch.
"""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

from schedc.core.costs import UNIT_SECONDS, Profile  # noqa: F401 (UNIT_SECONDS: read from here too)
from schedc.core.formatting import format_ms  # noqa: F401 (UNIT_SECONDS: read from here too)
from schedc.core.host_link import HostLink
from schedc.core.ir import Schedule
from schedc.core.simulate import SimResult, simulate
from schedc.errors import ParameterError, SchedcError, literal, printable, python_spelling

WIDTH = 4  # elements per microbatch row: transfers stay tiny, so they cost no more than latency
# the overhead run sleeps this long wherever the emulation sleeps: a rank that sleeps gives its
# core away and pays a wake-up (more on a loaded host), which belongs to the overhead
TOKEN_SLEEP = 1e-6
STARTUP_SECONDS = 120.0  # deadline allowance for starting the ranks and importing torch
MAX_TIMEOUT_SECONDS = 7 * 86400.0  # a longer deadline is a unit mistake; torch's process-group timeout stays in range


# ---------------------------------------------------------------- inside each rank


OVERSHOOT: list[float] = []  # how much longer than asked each sleep of the timed steps took


def _sleep(seconds: float) -> None:
    if seconds > 0:
        t0 = time.perf_counter()
        time.sleep(seconds)
        OVERSHOOT.append(time.perf_counter() - t0 - seconds)


def _sleep_function():
    import torch

    class SleepBackward(torch.autograd.Function):
        """Identity whose backward sleeps ``seconds`` (read when the backward runs)."""

        @staticmethod
        def forward(ctx, x, box):
            ctx.box = box
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            _sleep(ctx.box[0])
            return grad, None

    return SleepBackward


def sleep_stage(forward: float, backward_input: float, backward_weight: float):
    """A stage module whose forward sleeps ``forward`` s and whose torch-split backward sleeps
    ``backward_input`` s on the input path and ``backward_weight`` s on the weight path.
    ``.set_seconds(f, i, w)`` changes the times (a mutable box the autograd nodes read)."""
    import torch
    import torch.nn as nn

    sleep_backward = _sleep_function()

    class SleepStage(nn.Module):
        def __init__(self):
            super().__init__()
            self.p1 = nn.Parameter(torch.ones(WIDTH))  # input path: x * p1 needs grad on stage 0 too
            self.p2 = nn.Parameter(torch.zeros(WIDTH))  # weight path only
            self.set_seconds(forward, backward_input, backward_weight)

        def set_seconds(self, f: float, i: float, w: float) -> None:
            self.forward_seconds = f
            self.input_box, self.weight_box = [i], [w]

        def forward(self, x):
            _sleep(self.forward_seconds)
            h = sleep_backward.apply(x * self.p1, self.input_box)
            return h + sleep_backward.apply(self.p2, self.weight_box)

    return SleepStage()


def _loss(output, target):
    return (output * target).mean()


class CopyStreams:
    """One rank's two copy streams in the emulation (module docstring): threads that sleep each
    copy's time in the order the copies are issued, hooked into the rank's stages by
    :meth:`install`. ``copies``: per offloaded (stage, microbatch) of this rank, its ``fetch_at``
    action and the seconds one copy takes, listed in the order their backwards run (the order the
    fetches at one point are issued). ``deadline``: seconds any wait may take before the step is
    refused (a hook that waits forever would hang the rank). Cost: two threads per rank, one
    queue item and one event per copy."""

    def __init__(self, copies: list[dict], deadline: float):
        from schedc.core.ir import Action
        from schedc.core.memory_actions import parse_fetch_at

        self.deadline = deadline
        # a copy is (stage, microbatch, "F") for the bytes between F and I (or B), (.., "I") for
        # those between I and W (an offload after I, or the second move of one with a refetch)
        self.seconds = {_move(c): float(c["seconds"]) for c in copies}
        self.token: Optional[float] = None  # the overhead run: every copy sleeps this instead
        self.due: dict[Action, list[tuple[int, int, str]]] = {}
        self.waits: dict[Action, list[tuple[int, int, str]]] = {}  # an F -> the copies out it waits for (room_for)
        for c in copies:
            self.due.setdefault(parse_fetch_at(c["fetch_at"]), []).append(_move(c))
            if c.get("room_for"):
                self.waits.setdefault(parse_fetch_at(c["room_for"]), []).append(_move(c))
        self.queues: dict[str, queue.Queue] = {"out": queue.Queue(), "in": queue.Queue()}
        self.out_done: dict[tuple[int, int, str], threading.Event] = {}
        self.in_done: dict[tuple[int, int, str], threading.Event] = {}
        self.failed: list[str] = []
        self.threads = [threading.Thread(target=self._serve, args=(d,), name=f"copy-{d}", daemon=True)
                        for d in self.queues]
        for t in self.threads:
            t.start()

    def install(self, stages) -> None:
        """Wrap each stage's ``forward_one_chunk``, ``backward_one_chunk`` and
        ``backward_weight_one_chunk`` on the instance (torch's runtime calls them once per F, I or
        B, and W)."""
        from schedc.core.ir import Action

        for stage in stages:
            index = stage.stage_index
            forward_one_chunk = stage.forward_one_chunk
            backward_one_chunk = stage.backward_one_chunk
            backward_weight_one_chunk = stage.backward_weight_one_chunk

            def forward(mb, *args, _index=index, _run=forward_one_chunk, **kwargs):
                self._start(Action(_index, "F", mb))
                for key in self.waits.get(Action(_index, "F", mb), ()):
                    self._wait(self.out_done[key], f"the copy out of stage {key[0]}, microbatch {key[1]}")
                out = _run(mb, *args, **kwargs)
                if (_index, mb, "F") in self.seconds:
                    self.queues["out"].put((_index, mb, "F"))
                return out

            def backward(mb, loss=None, full_backward=True, last_backward=False, _index=index,
                         _run=backward_one_chunk):
                self._start(Action(_index, "B" if full_backward else "I", mb))
                if (_index, mb, "F") in self.seconds:
                    self._wait(self.in_done[_index, mb, "F"], f"the fetch of stage {_index}, microbatch {mb}")
                out = _run(mb, loss=loss, full_backward=full_backward, last_backward=last_backward)
                if not full_backward and (_index, mb, "I") in self.seconds:
                    self.queues["out"].put((_index, mb, "I"))
                return out

            def backward_weight(mb, last_backward=False, _index=index, _run=backward_weight_one_chunk):
                self._start(Action(_index, "W", mb))
                if (_index, mb, "I") in self.seconds:
                    self._wait(self.in_done[_index, mb, "I"], f"the fetch for W of stage {_index}, microbatch {mb}")
                return _run(mb, last_backward=last_backward)

            stage.forward_one_chunk = forward
            stage.backward_one_chunk = backward
            stage.backward_weight_one_chunk = backward_weight

    def begin_step(self) -> None:
        if self.failed:
            raise SchedcError(f"emulate: {self.failed[0]}")
        self.out_done = {key: threading.Event() for key in self.seconds}
        self.in_done = {key: threading.Event() for key in self.seconds}

    def close(self) -> None:
        for q in self.queues.values():
            q.put(None)
        for t in self.threads:
            t.join(timeout=self.deadline)

    def _start(self, action) -> None:
        for key in self.due.get(action, ()):
            self.queues["in"].put(key)

    def _wait(self, event: threading.Event, what: str) -> None:
        if not event.wait(self.deadline):
            raise SchedcError(f"emulate: {what} did not end within {self.deadline:g} s; the copy streams are stuck")

    def _serve(self, direction: str) -> None:
        q = self.queues[direction]
        while True:
            key = q.get()
            if key is None:
                return
            try:
                if direction == "in":  # first in first out: a fetch waiting for its copy out holds the stream
                    self._wait(self.out_done[key], f"the copy out of stage {key[0]}, microbatch {key[1]}")
                time.sleep(self.seconds[key] if self.token is None else self.token)
            except SchedcError as e:
                self.failed.append(str(e).removeprefix("emulate: "))
            (self.out_done if direction == "out" else self.in_done)[key].set()


def rank_main(spec: dict) -> list[dict]:
    """Run every CSV of ``spec["runs"]`` on this rank; per run the timed overhead-run and emulated steps."""
    import torch
    import torch.distributed as dist

    from schedc.runtime import launch as launcher

    torch.set_num_threads(1)
    launcher.init_group("gloo")
    try:
        return [_emulate_one(run, spec, dist.get_rank(), dist.get_world_size()) for run in spec["runs"]]
    finally:
        dist.destroy_process_group()


def _emulate_one(run: dict, spec: dict, rank: int, world: int) -> dict:
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage

    from schedc.runtime.pipeline import build_schedule, read_schedule, stages_for_rank

    schedule = read_schedule(run["csv"])
    mine = stages_for_rank(schedule, rank, n_ranks=world)  # a world-size mismatch stops here
    modules = {s: sleep_stage(TOKEN_SLEEP, TOKEN_SLEEP, TOKEN_SLEEP) for s in mine}
    stages = [PipelineStage(modules[s], s, schedule.n_stages, torch.device("cpu")) for s in mine]
    runtime = build_schedule(run["csv"], stages, loss_fn=_loss)
    copies = [c for c in run.get("copies", ()) if c["stage"] in mine]
    streams = CopyStreams(copies, float(spec.get("deadline", STARTUP_SECONDS))) if copies else None
    if streams is not None:
        streams.install(stages)
        streams.token = TOKEN_SLEEP
    n_mb = schedule.n_microbatches
    inputs = torch.ones(n_mb, WIDTH)
    target = torch.ones(n_mb, WIDTH)

    def steps(count: int) -> list[dict]:
        return [_timed_step(runtime, modules, stages, inputs, target, dist, streams) for _ in range(count)]

    try:
        steps(1)  # shape inference and the first transfers happen in the first step
        zero = steps(int(spec["overhead_steps"]))
        for s, module in modules.items():
            module.set_seconds(*run["seconds"][s])
        if streams is not None:
            streams.token = None
        steps(int(spec["warmup"]))
        OVERSHOOT.clear()
        timed = steps(int(spec["steps"]))
        if streams is not None:
            streams.begin_step()  # a copy stream that failed in the last step says so here
    finally:
        if streams is not None:
            streams.close()
    return {"rank": rank, "zero": zero, "sleep": timed, "overshoot": list(OVERSHOOT)}


def _timed_step(runtime, modules, stages, inputs, target, dist, streams: Optional[CopyStreams] = None) -> dict:
    from schedc.runtime.profiling.spans import timed_actions

    if streams is not None:
        streams.begin_step()
    for module in modules.values():
        for p in module.parameters():
            p.grad = None
    first = any(s.is_first for s in stages)
    last = any(s.is_last for s in stages)
    dist.barrier()
    with timed_actions() as rec:
        t0 = time.perf_counter()
        runtime.step(*((inputs,) if first else ()), target=target if last else None, losses=[] if last else None)
        t1 = time.perf_counter()
    return {"start": t0, "end": t1, "events": rec.events}


def _worker_entry() -> int:
    """``python -m schedc.runtime.emulate``: what each rank :func:`emulate` launches runs."""
    from schedc.runtime import launch as launcher

    return launcher.run_rank(lambda: rank_main(launcher.read_spec()))


# ---------------------------------------------------------------- in the parent


@dataclass
class Emulation:
    """One CSV emulated: seconds; medians over the timed steps."""

    csv: str
    schedule: Schedule
    scale: float
    measured_steps: list[float]
    zero_steps: list[float]  # the overhead run (every sleep 1 us): the runtime's own cost
    prediction: SimResult  # simulate(...) of the costs as torch runs them, the measured overhead added
    plain_prediction: SimResult  # the same without the overhead (scale x profile, comm as asked)
    measured_finish: list[float]  # per rank: when its last action ended
    overhead: dict[str, float]  # kind -> median overhead-run seconds of one action of that kind
    transfer: float  # median overhead-run delay of a waited-for transfer
    overshoot: float  # median of how much longer than asked a sleep took (host load shows here)
    action_seconds: dict[tuple[int, str], float] = field(default_factory=dict)  # (stage, kind) -> median

    @property
    def measured_step(self) -> float:
        return statistics.median(self.measured_steps)

    @property
    def predicted_step(self) -> float:
        return self.prediction.makespan

    @property
    def ratio(self) -> float:
        return self.measured_step / self.predicted_step if self.predicted_step else math.nan

    @property
    def step_spread(self) -> float:
        """Run-to-run noise: the slowest timed step minus the fastest."""
        return max(self.measured_steps) - min(self.measured_steps)

    @property
    def zero_step(self) -> float:
        return statistics.median(self.zero_steps)

    @property
    def predicted_finish(self) -> list[float]:
        return _rank_finish(self.prediction)

    def to_dict(self) -> dict:
        return {
            "csv": self.csv, "scale": self.scale, "measured_step": self.measured_step,
            "predicted_step": self.predicted_step, "plain_predicted_step": self.plain_prediction.makespan,
            "ratio": self.ratio, "zero_step": self.zero_step, "measured_steps": self.measured_steps,
            "step_spread": self.step_spread,
            "measured_finish": self.measured_finish, "predicted_finish": self.predicted_finish,
            "overhead_per_action": self.overhead, "transfer_delay": self.transfer,
            "copies_per_step": len(self.prediction.copies),
        }


def _rank_finish(sim: SimResult) -> list[float]:
    return [max((sim.timings[a].end for a in row), default=0.0) for row in sim.order]


@python_spelling
def emulate(
    csv_paths: Sequence[Union[str, os.PathLike]],
    profile: Union[Profile, Sequence[Profile]],
    scale: float = 1.0,
    steps: int = 5,
    warmup: int = 1,
    overhead_steps: int = 10,
    comm: Union[None, float, Sequence[float]] = 0.0,
    ranks: Optional[int] = None,
    timeout: Optional[float] = None,
    memory_actions=None,
    link: Optional[HostLink] = None,
) -> list[Emulation]:
    """Emulate each CSV (one profile for all, or one per CSV) and compare with the prediction.

    ``scale`` multiplies every profile time (units -> seconds); ``comm`` is the prediction's
    communication per boundary in profile units (0: what is emulated; None: the profile's). ``ranks`` launches
    that many processes instead of the CSV's rows (a mismatch then fails in the ranks' own
    pre-collective check). ``timeout`` (seconds per launch) defaults to start-up plus three
    times the predicted work. ``memory_actions`` (offloads, checked against every CSV) run on
    each rank's copy streams over ``link`` (default :class:`~schedc.core.host_link.HostLink`),
    every copy sleeping scale x its time on the link, and the prediction simulates them."""
    if isinstance(csv_paths, (str, os.PathLike)):  # one path, not its characters
        csv_paths = [csv_paths]
    if not csv_paths:
        raise SchedcError("emulate: give at least one CSV schedule")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
        raise ParameterError("scale", f"emulate: {{param}} must be a finite number > 0, got {literal(repr(scale)[:40])}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout <= MAX_TIMEOUT_SECONDS):
        raise ParameterError("timeout", f"emulate: {{param}} must be a number of seconds > 0 and at most "
                                        f"{MAX_TIMEOUT_SECONDS:.0f} (a week), got {literal(repr(timeout)[:40])}")
    for param, value, least in (("steps", steps, 1), ("warmup", warmup, 0), ("overhead_steps", overhead_steps, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ParameterError(param, f"emulate: need {{param}} >= {least}, got {literal(repr(value)[:40])}")
    if not isinstance(profile, Profile) and (isinstance(profile, (str, os.PathLike)) or not all(
            isinstance(p, Profile) for p in profile)):
        raise ParameterError("profile", "emulate: {param} must be a schedc.Profile (schedc.Profile.load(PATH)) or "
                                        f"one per CSV, got {literal(type(profile).__name__)}")
    profiles = [profile] * len(csv_paths) if isinstance(profile, Profile) else list(profile)
    if len(profiles) != len(csv_paths):
        raise SchedcError(f"emulate: {len(csv_paths)} CSVs but {len(profiles)} profiles")
    runs = [_prepare(str(path), prof, scale) for path, prof in zip(csv_paths, profiles)]
    if link is not None and not isinstance(link, HostLink):
        raise ParameterError("link", f"emulate: {{param}} must be a schedc.core.host_link.HostLink, got "
                                     f"{literal(type(link).__name__)}")
    link = link or HostLink()
    moves = [_offloads(path, schedule, prof, scale, memory_actions, link) if memory_actions else ([], [])
             for path, schedule, prof, _ in runs]
    for path, schedule, prof, _ in runs:
        _check_scaled(path, schedule, prof, scale)
        if isinstance(comm, (list, tuple)) and len(comm) != schedule.n_stages - 1:
            raise ParameterError("comm", f"{len(comm)} values given but {literal(path)} has {schedule.n_stages - 1} "
                                 f"stage boundaries; give one number or one per boundary")
    groups: dict[int, list[int]] = {}
    for k, (_, schedule, _, _) in enumerate(runs):
        groups.setdefault(ranks or schedule.n_ranks, []).append(k)
    out: list[Optional[Emulation]] = [None] * len(runs)
    for n, members in groups.items():
        results = _launch([runs[k] for k in members], n, scale, steps, warmup, overhead_steps, timeout,
                          [moves[k][1] for k in members])
        for j, k in enumerate(members):
            path, schedule, prof, _ = runs[k]
            out[k] = _compare(path, schedule, prof, scale, comm, [r[j] for r in results], moves[k][0],
                              _scaled_link(link, scale))
    return out  # type: ignore[return-value]


def _prepare(path: str, profile: Profile, scale: float) -> tuple[str, Schedule, Profile, list]:
    from schedc.core.validate import validate
    from schedc.io.csvio import read_csv

    schedule = read_csv(path)
    validate(schedule, source=path)  # a deadlocking CSV is refused here, before any rank starts
    if profile.n_stages != schedule.n_stages:
        raise SchedcError(f"{path}: the schedule has {schedule.n_stages} stages but the profile describes "
                          f"{profile.n_stages}; give a profile with {schedule.n_stages} stages")
    seconds = [[scale * c.forward, scale * c.backward_input, scale * c.backward_weight] for c in profile.stages]
    return str(Path(path).resolve()), schedule, profile, seconds


def _scaled_link(link: HostLink, scale: float) -> HostLink:
    """`link` with every copy taking `scale` times as long: what the emulation sleeps."""
    return dataclasses.replace(link, bandwidth=link.bandwidth / scale, latency=link.latency * scale)


def _offloads(path: str, schedule: Schedule, profile: Profile, scale: float, memory_actions,
              link: HostLink) -> tuple[list, list[dict]]:
    """(the actions checked against the CSV at `path`, what the ranks' copy streams run: per
    offload its fetch point and the seconds one copy sleeps, in the order the backwards run on
    the rank, the order the simulator issues fetches at one point). A recompute is refused: its
    checkpointed stage costs are not in the profile the stages sleep."""
    from schedc.core.host_link import offload_bytes
    from schedc.core.memory_actions import PlannedActions, check_memory_actions

    source = getattr(memory_actions, "source", None)
    named = PlannedActions(memory_actions, f"{source} (against {path})") if source else memory_actions
    chosen = check_memory_actions(named, schedule, where="" if source else path)
    recomputed = sorted(key for key, ma in chosen.items() if ma.action == "recompute")
    if recomputed:
        s, m = recomputed[0]
        raise SchedcError(f"emulate: {source or path}: stage {s}, microbatch {m} is recomputed; the emulation "
                          f"sleeps the profile's stage times and runs offloads only; emulate the plan's offloads "
                          f"(drop its recompute entries) or emulate the stages checkpointed")
    order: dict[tuple[int, int, str], tuple[int, int]] = {}  # a copy -> its waiter's (rank, index)
    for rank in range(schedule.n_ranks):
        for k, a in enumerate(schedule.actions(rank)):
            if a.kind in ("I", "B"):
                order.setdefault((a.stage, a.microbatch, "F"), (rank, k))
            elif a.kind == "W":
                order.setdefault((a.stage, a.microbatch, "I"), (rank, k))
    scaled = _scaled_link(link, scale)
    copies = []
    for key, ma in chosen.items():
        seconds = scaled.seconds(ma.fraction * offload_bytes(profile, key[0]))
        if ma.after == "F":
            copies.append({"stage": key[0], "microbatch": key[1], "after": "F", "fetch_at": str(ma.fetch_at),
                           "room_for": None if ma.room_for is None else str(ma.room_for), "seconds": seconds})
        again = ma.fetch_at if ma.after == "I" else ma.refetch_at
        if again is not None:
            copies.append({"stage": key[0], "microbatch": key[1], "after": "I", "fetch_at": str(again),
                           "room_for": None, "seconds": seconds})
    copies.sort(key=lambda c: order[_move(c)])
    return list(chosen.values()), copies


def _move(copy: dict) -> tuple[int, int, str]:
    return copy["stage"], copy["microbatch"], copy.get("after", "F")


def _check_scaled(path: str, schedule: Schedule, profile: Profile, scale: float) -> None:
    """Refuse a `scale` whose sleeps do not add up to a finite step (``--scale 1e308``), naming
    the scale rather than the costs when the costs alone add up."""
    try:
        simulate(schedule, scaled_costs(profile, scale, [0.0] * (profile.n_stages - 1)))
    except SchedcError:
        simulate(schedule, profile.executed())  # the costs' own error, when they are the cause
        raise ParameterError("scale", f"emulate: {{param}} {scale:g} times the costs of {literal(path)} makes "
                                      "sleeps too long to add up; give a smaller {param}") from None


def _launch(runs, n_ranks, scale, steps, warmup, overhead_steps, timeout, copies) -> list[list[dict]]:
    from schedc.runtime import launch as launcher

    if timeout is None:
        work = sum(simulate(s, scaled_costs(p, scale, [0.0] * (p.n_stages - 1))).makespan
                   for _, s, p, _ in runs)
        work += sum(2 * c["seconds"] for run in copies for c in run)  # copies that hide nothing, at worst
        timeout = STARTUP_SECONDS + 3.0 * (warmup + steps) * work + 5.0 * len(runs) * (1 + overhead_steps)
    spec = {"runs": [{"csv": path, "seconds": sec, "copies": cp} for (path, _, _, sec), cp in zip(runs, copies)],
            "steps": steps, "warmup": warmup, "overhead_steps": overhead_steps, "deadline": timeout}
    return launcher.launch(launcher.python_module("schedc.runtime.emulate"), n_ranks, timeout=timeout,
                           spec=spec, label="emulate", threads=1)


def _compare(path, schedule: Schedule, profile: Profile, scale, comm, results: list[dict], memory_actions=(),
             link: Optional[HostLink] = None) -> Emulation:
    from schedc.runtime.calibrate import parse_steps, refine_profile

    by_rank = sorted(results, key=lambda r: r["rank"])
    # an overlap cell's parts share its interval as their sleeps do (the overhead run: equally)
    as_run = profile.executed()  # converted once, not per overlapped part
    zero = parse_steps([{"rank": r["rank"], "steps": r["zero"]} for r in by_rank], schedule)
    slept = parse_steps([{"rank": r["rank"], "steps": r["sleep"]} for r in by_rank], schedule,
                         lambda a: as_run.duration(a.stage, a.kind))
    base = profile.model_copy(update={"comm": 0.0})
    overhead = refine_profile(base, schedule, zero)  # each stage's F/I/W: median overhead-run work
    scaled_comm = [scale * (profile.comm_after(b) if comm is None else _comm_at(comm, b))
                   for b in range(profile.n_stages - 1)]
    plain = scaled_costs(profile, scale, scaled_comm)
    pooled = [x for r in by_rank for x in r["overshoot"]]
    overshoot = statistics.median(pooled) if pooled else 0.0
    predicted = scaled_costs(profile, scale, [c + overhead.comm_after(b) for b, c in enumerate(scaled_comm)],
                          add=overhead)
    kinds: dict[str, list[float]] = {}
    for m in zero:
        for a, (_, _, _, _, work) in m.actions.items():
            kinds.setdefault(a.kind, []).append(work)
    per_action: dict[tuple[int, str], list[float]] = {}
    for m in slept:
        for a, (_, _, _, _, work) in m.actions.items():
            per_action.setdefault((a.stage, a.kind), []).append(work)
    return Emulation(
        csv=path, schedule=schedule, scale=scale,
        measured_steps=[max(m.rank_end) for m in slept],
        zero_steps=[max(m.rank_end) for m in zero],
        prediction=simulate(schedule, predicted, memory_actions=list(memory_actions) or None, link=link),
        plain_prediction=simulate(schedule, plain, memory_actions=list(memory_actions) or None, link=link),
        measured_finish=[statistics.median(max(m.actions[a][2] for a in schedule.actions(r)) for m in slept)
                         for r in range(schedule.n_ranks)],
        overhead={k: statistics.median(v) for k, v in sorted(kinds.items())},
        transfer=statistics.median([overhead.comm_after(b) for b in range(profile.n_stages - 1)] or [0.0]),
        overshoot=overshoot,
        action_seconds={k: statistics.median(v) for k, v in per_action.items()},
    )


def _comm_at(comm: Union[float, list[float], tuple[float, ...]], boundary: int) -> float:
    return float(comm[boundary]) if isinstance(comm, (list, tuple)) else float(comm)


def scaled_costs(profile: Profile, scale: float, comm: list[float], add: Optional[Profile] = None) -> Profile:
    """scale x the costs as torch executes them (stage 0's I empty, its W = I + W), plus ``add``'s
    per-stage times (measured in torch, so already in that form), with ``comm`` per boundary."""
    torch_costs = profile.executed("torch")
    stages = []
    for s, c in enumerate(torch_costs.stages):
        extra = add.stages[s] if add is not None else None
        stages.append(c.model_copy(update={
            "forward": scale * c.forward + (extra.forward if extra else 0.0),
            "backward_input": scale * c.backward_input + (extra.backward_input if extra else 0.0),
            "backward_weight": scale * c.backward_weight + (extra.backward_weight if extra else 0.0),
        }))
    return torch_costs.model_copy(update={"stages": stages, "comm": comm or 0.0})


# ---------------------------------------------------------------- printing


def format_emulations(runs: Sequence[Emulation], comm_note: str) -> str:
    """The side-by-side comparison the CLI prints: one row per CSV, then per-rank finish times."""
    import torch

    first = runs[0]
    names = [printable(Path(r.csv).name) for r in runs]
    width = max(8, *(len(n) for n in names))
    lines = [
        f"emulated in torch {torch.__version__}'s _PipelineScheduleRuntime, one gloo process per rank; stages "
        f"sleep scale x F/I/W (scale {first.scale:g}); step = median of {len(first.measured_steps)} steps after "
        f"a warm-up",
        f"communication is not emulated (nothing sleeps for it): {comm_note}",
        "predicted = simulate() of scale x the costs as torch runs them (stage 0's backward all in W), each "
        "action + the median time that stage's "
        "actions of that kind took in the overhead run (every sleep 1 us), each boundary + its overhead-run "
        "transfer delay; plain = without the overhead",
        *([f"copy streams: each rank sleeps its offloads' copies (scale x the link's time) on two threads, one "
           f"per direction, first in first out; {', '.join(f'{len(r.prediction.copies)}' for r in runs)} copies "
           f"per step, simulated with them"] if any(r.prediction.copies for r in runs) else []),
        "",
        f"{'schedule':<{width}}  {'measured':>9}  {'predicted':>9}  {'ratio':>6}  {'plain':>9}  "
        f"{'overhead run':>12}  {'overhead per action F/I/W/B':>28}  {'transfer':>8}  {'sleep over':>10}",
    ]
    for name, r in zip(names, runs):
        per = "/".join(format_ms(r.overhead[k]) if k in r.overhead else "-" for k in "FIWB")
        lines.append(
            f"{name:<{width}}  {format_ms(r.measured_step):>9}  {format_ms(r.predicted_step):>9}  {r.ratio:>6.3f}  "
            f"{format_ms(r.plain_prediction.makespan):>9}  {format_ms(r.zero_step):>12}  {per:>28}  {format_ms(r.transfer):>8}  "
            f"{format_ms(r.overshoot):>10}")
    lines += ["", "per-rank finish, measured / predicted:",
              f"{'rank':>4}  " + "  ".join(f"{n:>{max(19, len(n))}}" for n in names)]
    for rank in range(max(r.schedule.n_ranks for r in runs)):
        cells = [(f"{format_ms(r.measured_finish[rank])} / {format_ms(r.predicted_finish[rank])}"
                  if rank < r.schedule.n_ranks else "-") for r in runs]
        lines.append(f"{rank:>4}  " + "  ".join(f"{c:>{max(19, len(n))}}" for c, n in zip(cells, names)))
    verdict = winner_line(runs)
    return "\n".join(lines + (["", verdict] if verdict else []))


def winner_line(runs: Sequence[Emulation]) -> Optional[str]:
    """Which schedule measured fastest, by how much over the runner-up, and whether that margin
    exceeds the run-to-run noise (the larger spread of the two schedules' timed steps); None for
    fewer than two schedules."""
    if len(runs) < 2:
        return None
    first, second = sorted(runs, key=lambda r: r.measured_step)[:2]
    margin = second.measured_step - first.measured_step
    noise = max(first.step_spread, second.step_spread)
    head = (f"fastest: {Path(first.csv).name} at {format_ms(first.measured_step)} per step, "
            f"{format_ms(margin)} ({100 * margin / second.measured_step:.1f}%) ahead of {Path(second.csv).name}")
    if min(len(first.measured_steps), len(second.measured_steps)) < 2:
        return f"{head}; one timed step each, so no run-to-run spread to judge the margin by (use --steps 5)"
    if margin > noise:
        return (f"{head}: above the run-to-run spread of their timed steps ({format_ms(noise)}), "
                f"a difference the measurement shows")
    return (f"{head}: within the run-to-run spread of their timed steps ({format_ms(noise)}), "
            f"not a clear win; run more --steps on a quieter machine")


if __name__ == "__main__":
    sys.exit(_worker_entry())
