"""Closed loop: run a CSV schedule for real and compare its timeline with the simulator's prediction.

Problem: a compiled schedule is only as good as the profile and the simulator's model of the
runtime (dependencies, one action at a time per rank, communication per boundary). To trust a
prediction we measure the same schedule under ``torch.distributed`` and report, per rank and
overall, how far the predicted step time and action timeline are from the measured ones; the
measured action times can then be written back as a refined profile.

Method: one process per CSV row (rank), launched like ``torchrun`` does (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` in the environment; gloo on CPU, NCCL on GPU).
Each rank builds the built-in GPT, keeps its CSV stages (:func:`schedc.runtime.pipeline.load_pipeline`),
or calls the user's ``MODULE:FUNCTION`` (:mod:`schedc.runtime.user_model`, as ``schedc profile
--model`` does) and keeps its stages of the list it returns, with the function's sample
microbatch repeated for every microbatch of the step; then it runs warm-up steps, then timed steps (the pipeline's ``step()``: forward and backward of
every microbatch; no optimizer update, which the simulator does not model either). Per-action timing uses the labels torch's
``_PipelineScheduleRuntime`` already wraps every action in (``record_function("PP:<action>")``):
for the duration of the run we swap the module's ``record_function`` for a recorder that notes
enter/exit times of ``PP:`` spans (and hands other names to torch's own), and wrap
``_wait_batch_p2p`` to learn how long each action waited for a received tensor, so an action's
compute starts at ``enter + wait``. Ranks start each step after a barrier; ``perf_counter`` is
CLOCK_MONOTONIC, one clock for all processes on a machine, so timelines share an origin (the
earliest rank's start). The parent simulates the schedule with the profile
(:func:`schedc.core.simulate.simulate`) and compares: step time (slowest rank's ``step()`` end),
each rank's finish and busy time, and the mean distance of action starts. The refined profile
takes each stage's median measured F, I, W (a full B is split in the profile's I:W ratio) and
each boundary's median observed transfer delay (consumer's compute start minus producer's end,
over transfers the consumer waited for). Predictions from measured profiles are reported two
ways: the median of the per-step predictions against the median measured step (the two numbers
printed side by side), and the median of each step's prediction against that same step (paired,
so that load changing between steps cancels).

Cost: (warm-up + steps) training steps of the model on every rank, plus process start-up.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

from schedc.core.costs import Profile, StageCost
from schedc.core.formatting import format_ms
from schedc.core.ir import Action, Schedule
from schedc.core.simulate import producers, simulate
from schedc.errors import ParameterError, SchedcError, literal, python_spelling
from schedc.runtime.profiling.spans import COMPUTE_LABEL, timed_actions

MAX_TIMEOUT = 7 * 86400.0  # a week: beyond it a deadline is no deadline (and overflows the ranks' timers)
_COMM_LABEL = re.compile(r"^PP:(\d+)(SEND|RECV)_([FB])(\d+)$")
# torch labels an OVERLAP_F_B cell once, "PP:(0F7;7B3)OVERLAP_F_B", and runs its parts one after another
_OVERLAP_LABEL = re.compile(r"^PP:\((.+)\)OVERLAP_F_B$")
_PART = re.compile(r"^(\d+)([FIWB])(\d+)$")
# torch 2.15 lowers waits into actions of their own: for a send's completion (WAIT_SEND_F/B) and
# for a gradient reduction (WAIT_REDUCE_GRAD); their time is the rank waiting, never compute
_WAIT_LABEL = re.compile(r"^PP:(\d*)(WAIT_SEND_F|WAIT_SEND_B|WAIT_REDUCE_GRAD)(\d*)$")


# ---------------------------------------------------------------- inside each rank


def rank_main(spec: dict) -> dict:
    """Run in one rank (env from torchrun or :func:`launch`); returns what the parent compares."""
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    device = spec.get("device", "cpu")
    backend = "nccl" if device.startswith("cuda") else "gloo"
    from schedc.runtime.launch import init_group

    dev = init_group(backend, timeout=float(spec.get("pg_timeout", 120)))
    if backend == "nccl":
        device = str(dev)
    try:
        if spec.get("user_model"):
            pipe, batch, twin = _user_parts(spec, device)
        else:
            pipe, batch, twin = _gpt_parts(spec, device)
        n_mb = pipe.schedule.schedule.n_microbatches
        steps: list[dict] = []
        sync = (lambda: torch.cuda.synchronize()) if backend == "nccl" else (lambda: None)
        in_situ = []
        if spec.get("in_situ"):
            from schedc.runtime.profiling.stages import measure_stages

            mine = pipe.schedule.schedule.stages_of(rank)
            twin_stages, sample, loss_fn, sample_target = twin()
        for step in range(int(spec["warmup_steps"]) + int(spec["steps"])):
            if spec.get("in_situ") and step >= int(spec["warmup_steps"]):
                # this rank's stages, measured in this process while the other ranks measure
                # theirs: the same threads, the same neighbours as during the step
                dist.barrier()
                in_situ.append([m.to_dict() for m in measure_stages(
                    twin_stages, sample, loss_fn, sample_target, device, warmup=1,
                    repeats=int(spec.get("in_situ_repeats", 3)), optimizer=spec.get("optimizer", "adamw"),
                    only=mine)])
            inputs, targets = batch(step, n_mb)
            for p in pipe.parameters():
                p.grad = None
            sync()
            dist.barrier()
            sync()
            with timed_actions(cuda=backend == "nccl") as rec:
                start_event = rec.event() if rec.cuda else None
                t0 = time.perf_counter()
                pipe.step(inputs, target=targets, losses=[] if pipe.is_last else None)
                sync()
                t1 = time.perf_counter()
            if rec.cuda:
                rec.resolve(t0, start_event)
            if step >= int(spec["warmup_steps"]):
                steps.append({"start": t0, "end": t1, "events": rec.events})
        return {"rank": rank, "world": world, "steps": steps, "in_situ": in_situ}
    finally:
        dist.destroy_process_group()


def _gpt_parts(spec: dict, device: str):
    """The built-in GPT on this rank: its pipeline, ``batch(step, n_mb) -> (inputs, target)`` and
    ``twin() -> (all stages, one microbatch, loss, its target)`` for in-situ profiling."""
    from schedc.runtime.models import GPT, GPTConfig, lm_loss, make_batch
    from schedc.runtime.pipeline import load_pipeline
    from schedc.runtime.split import split_gpt

    cfg = GPTConfig(**spec["config"])
    mbs = int(spec["microbatch_size"])
    pipe = load_pipeline(spec["csv"], GPT(cfg, seed=0), lm_loss, device)

    def batch(step: int, n_mb: int):
        tokens, targets = make_batch(cfg, mbs * n_mb, seed=step, device=device)
        return (tokens,), targets

    def twin():
        n_stages = pipe.schedule.schedule.n_stages
        split = split_gpt(GPT(cfg, seed=0), range(n_stages), n_stages)
        sample, target = make_batch(cfg, mbs, seed=0, device=device)
        return [split[s] for s in range(n_stages)], sample, lm_loss, target

    return pipe, batch, twin


def _user_parts(spec: dict, device: str):
    """The user's ``--model`` on this rank, as :func:`_gpt_parts` returns the GPT: its stages of
    the function's list, and the function's sample microbatch repeated for each microbatch."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage

    from schedc.runtime.pipeline import Pipeline, build_schedule, read_schedule, stages_for_rank
    from schedc.runtime.user_model import build_user_model

    m = spec["user_model"]
    user = build_user_model(m["model"], m.get("sample"), m["offered"])
    schedule = read_schedule(spec["csv"])
    mine = stages_for_rank(schedule, dist.get_rank(), n_ranks=dist.get_world_size())
    check_user_stages(user, schedule, m["model"])
    modules = {s: user.stages[s].to(device) for s in mine}
    stages = [PipelineStage(modules[s], s, schedule.n_stages, torch.device(device)) for s in mine]
    pipe = Pipeline(build_schedule(spec["csv"], stages, loss_fn=user.loss_fn), stages, modules)
    sample = user.sample if isinstance(user.sample, (tuple, list)) else (user.sample,)
    sample = tuple(x.to(device) for x in sample)

    def batch(step: int, n_mb: int):
        inputs = tuple(torch.cat([x] * n_mb) for x in sample)
        # without a target the loss ignores it, but torch's runtime splits one per microbatch
        target = torch.cat([user.target.to(device)] * n_mb) if user.target is not None else torch.zeros(n_mb)
        return inputs, target

    def twin():
        fresh = build_user_model(m["model"], m.get("sample"), m["offered"])
        return fresh.stages, fresh.sample, fresh.loss_fn, fresh.target

    return pipe, batch, twin


def check_user_stages(user, schedule: Schedule, model_spec: str) -> None:
    if len(user.stages) != schedule.n_stages:
        raise ParameterError("model", f"{{name}}{literal(model_spec)} returns {len(user.stages)} stages but the CSV "
                             f"has {schedule.n_stages}; pass n_stages through (it is offered) or a CSV of "
                             f"{len(user.stages)} stages")


def _worker_entry() -> int:
    """``python -m schedc.runtime.calibrate``: what each rank :func:`launch` starts runs."""
    from schedc.runtime import launch as launcher

    return launcher.run_rank(lambda: rank_main(launcher.read_spec()))


# ---------------------------------------------------------------- launching the ranks


def launch(spec: dict, n_ranks: int, timeout: float) -> list[dict]:
    """Start `n_ranks` processes as torchrun would, wait (killing all at the deadline), return their results."""
    from schedc.runtime import launch as launcher

    spec = dict(spec, pg_timeout=max(10.0, timeout - 10.0))
    return launcher.launch(launcher.python_module("schedc.runtime.calibrate"), n_ranks, timeout=timeout,
                           spec=spec, label="calibrate", threads=spec.get("threads"))


# ---------------------------------------------------------------- comparing


@dataclass
class RankComparison:
    rank: int
    predicted_finish: float
    measured_finish: float
    predicted_busy: float
    measured_busy: float
    measured_waiting: float = 0.0  # in WAIT_SEND_F / WAIT_SEND_B / WAIT_REDUCE_GRAD actions (torch 2.15)

    @property
    def finish_error(self) -> float:
        return _rel(self.predicted_finish, self.measured_finish)

    @property
    def busy_error(self) -> float:
        return _rel(self.predicted_busy, self.measured_busy)


@dataclass
class Calibration:
    """Predicted vs measured; times in seconds, medians over the timed steps, errors relative.

    The refined and in-situ predictions are paired with the step they came from (step k's
    measured action times, or the stage timings taken just before step k), so a change of
    machine load between steps does not count as a prediction error.
    """

    csv: str
    predicted_step: float
    measured_step: float
    ranks: list[RankComparison]
    start_error: float  # mean |measured - predicted action start| / measured step time
    steps: int
    measured_steps: list[float] = field(default_factory=list)
    refined_steps: list[float] = field(default_factory=list)  # simulate(refined from step k)
    in_situ_steps: list[float] = field(default_factory=list)  # simulate(in-situ profile before step k)
    refined: Optional[Profile] = None  # refined from all timed steps
    in_situ: Optional[Profile] = None  # stages profiled inside the ranks, all rounds pooled

    @property
    def step_error(self) -> float:
        return _rel(self.predicted_step, self.measured_step)

    @property
    def refined_step(self) -> float:
        return statistics.median(self.refined_steps) if self.refined_steps else math.nan

    @property
    def refined_error(self) -> float:
        """The refined prediction (median over steps) against the measured step (median)."""
        return _rel(self.refined_step, self.measured_step)

    @property
    def refined_paired_error(self) -> float:
        """Median over steps of each step's refined prediction against that step."""
        return _paired(self.refined_steps, self.measured_steps)

    @property
    def in_situ_step(self) -> Optional[float]:
        return statistics.median(self.in_situ_steps) if self.in_situ_steps else None

    @property
    def in_situ_error(self) -> Optional[float]:
        step = self.in_situ_step
        return None if step is None else _rel(step, self.measured_step)

    @property
    def in_situ_paired_error(self) -> Optional[float]:
        return _paired(self.in_situ_steps, self.measured_steps) if self.in_situ_steps else None

    def to_dict(self) -> dict:
        return {
            "csv": self.csv,
            "steps": self.steps,
            "predicted_step": self.predicted_step,
            "measured_step": self.measured_step,
            "step_error": self.step_error,
            "refined_step": self.refined_step,
            "refined_error": self.refined_error,
            "refined_paired_error": self.refined_paired_error,
            "in_situ_step": self.in_situ_step,
            "in_situ_error": self.in_situ_error,
            "in_situ_paired_error": self.in_situ_paired_error,
            "action_start_error": self.start_error,
            "measured_steps": self.measured_steps,
            "refined_steps": self.refined_steps,
            "in_situ_steps": self.in_situ_steps,
            "ranks": [dict(asdict(r), finish_error=r.finish_error, busy_error=r.busy_error) for r in self.ranks],
        }


def _rel(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured if measured > 0 else math.nan


def _paired(predicted: list[float], measured: list[float]) -> float:
    return statistics.median(_rel(p, m) for p, m in zip(predicted, measured)) if predicted else math.nan


@dataclass
class _Measured:
    """One timed step on a common origin: action -> (rank, compute start, end, waited, work).

    ``work`` is the seconds the action occupied its rank: its compute plus the posting of the
    send/recv actions that serve it (torch lowers each transfer into SEND_*/RECV_* actions that
    run on the rank between compute actions), waiting for data excluded.
    """

    actions: dict[Action, tuple[int, float, float, float, float]]
    rank_end: list[float]  # when step() returned on each rank
    waiting: list[float] = field(default_factory=list)  # per rank: seconds in WAIT_* actions


def _backward_kinds(schedule: Schedule) -> dict[tuple[int, int], str]:
    """(stage, microbatch) -> the kind of its backward action that consumes a gradient: I or B."""
    return {(a.stage, a.microbatch): a.kind for _, a in schedule.all_actions() if a.kind in ("I", "B")}


def parse_steps(results: list[dict], schedule: Schedule,
                 weight: Optional[Callable[[Action], float]] = None) -> list[_Measured]:
    """Per timed step, every action's (rank, start, end, wait, work). An OVERLAP_F_B cell is timed
    as one; its interval is shared among its parts in proportion to `weight` (their expected
    durations; equal shares without it), in cell order, the cell's wait charged to its first part."""
    by_rank = sorted(results, key=lambda r: r["rank"])
    n_steps = min(len(r["steps"]) for r in by_rank)
    backward_kind = _backward_kinds(schedule)
    out = []
    for k in range(n_steps):
        origin = min(r["steps"][k]["start"] for r in by_rank)
        actions: dict[Action, tuple[int, float, float, float, float]] = {}
        comm_work: dict[Action, float] = {}
        waiting = [0.0] * len(by_rank)
        for n, r in enumerate(by_rank):
            for label, enter, wait, exit_ in r["steps"][k]["events"]:
                if _WAIT_LABEL.match(label):
                    waiting[n] += max(0.0, exit_ - enter)
                    continue
                m = COMPUTE_LABEL.match(label)
                if m:
                    a = Action(int(m.group(1)), m.group(2), int(m.group(3)))
                    start = enter + wait - origin
                    actions[a] = (r["rank"], start, exit_ - origin, wait, exit_ - origin - start)
                    continue
                o = _OVERLAP_LABEL.match(label)
                if o:
                    parts = [Action(int(p.group(1)), p.group(2), int(p.group(3)))
                             for p in map(_PART.match, o.group(1).split(";")) if p]
                    shares = [max(0.0, weight(a)) for a in parts] if weight else [1.0] * len(parts)
                    if not sum(shares):
                        shares = [1.0] * len(parts)
                    t = enter + wait - origin
                    span = exit_ - origin - t
                    for n, (a, share) in enumerate(zip(parts, shares)):
                        work = span * share / sum(shares)
                        actions[a] = (r["rank"], t, t + work, wait if n == 0 else 0.0, work)
                        t += work
                    continue
                c = _COMM_LABEL.match(label)
                if c:  # a transfer serves the forward (F) or the backward (I or B) of that stage and microbatch
                    s, mb = int(c.group(1)), int(c.group(4))
                    kind = "F" if c.group(3) == "F" else backward_kind.get((s, mb), "B")
                    a = Action(s, kind, mb)
                    comm_work[a] = comm_work.get(a, 0.0) + max(0.0, exit_ - enter - wait)
        for a, extra in comm_work.items():
            if a in actions:
                rank, start, end, wait, work = actions[a]
                actions[a] = (rank, start, end, wait, work + extra)
        missing = [a for _, a in schedule.all_actions() if a not in actions]
        if missing:
            raise SchedcError(f"calibrate: no timing for {len(missing)} action(s), e.g. {missing[0]}; "
                              f"was the schedule run with torch's _PipelineScheduleRuntime?")
        out.append(_Measured(actions, [r["steps"][k]["end"] - origin for r in by_rank], waiting))
    return out


def refine_profile(profile: Profile, schedule: Schedule, measured: list[_Measured]) -> Profile:
    """The profile with each stage's F/I/W and each boundary's comm replaced by the measured medians."""
    durations: dict[tuple[int, str], list[float]] = {}
    for meas in measured:
        for a, (_, _, _, _, work) in meas.actions.items():
            durations.setdefault((a.stage, a.kind), []).append(max(0.0, work))
    stages = []
    for s, old in enumerate(profile.stages):
        f = _median(durations.get((s, "F")), old.forward)
        i = _median(durations.get((s, "I")), None)
        w = _median(durations.get((s, "W")), None)
        b = _median(durations.get((s, "B")), None)
        if i is None or w is None:
            total = b if b is not None else old.backward
            share = old.backward_input / old.backward if old.backward > 0 else 1.0
            i = i if i is not None else total * share
            w = w if w is not None else total - i
        stages.append(old.model_copy(update={
            "forward": max(f, 1e-9), "backward_input": max(i, 1e-9),
            "backward_weight": 0.0 if old.backward_weight == 0 else max(w, 0.0),
        }))
    where = {a: r for r, a in schedule.all_actions()}
    backward_kind = _backward_kinds(schedule)
    delays: dict[int, list[float]] = {}
    for meas in measured:
        for a, (rank, start, _, waited, _) in meas.actions.items():
            if waited <= 0:
                continue
            for dep, boundary in producers(a, schedule.n_stages, backward_kind):
                if boundary >= 0 and where.get(dep, rank) != rank and dep in meas.actions:
                    _, d_start, d_end, _, d_work = meas.actions[dep]
                    # the producer's send posting already counts in its work (its duration)
                    posted = d_end + max(0.0, d_work - (d_end - d_start))
                    delays.setdefault(boundary, []).append(max(0.0, start - posted))
    n_bound = profile.n_stages - 1
    comm = [_median(delays.get(b), profile.comm_after(b)) for b in range(n_bound)]
    notes = list(profile.notes or []) + [
        f"refined by schedc calibrate from {len(measured)} measured step(s) of {schedule.name or 'a schedule'} "
        f"on {schedule.n_ranks} ranks: F/I/W are measured medians, comm the median delay of waited-for transfers"
    ]
    return profile.model_copy(update={
        "stages": [StageCost.model_validate(s.model_dump()) for s in stages],
        "comm": comm if n_bound else 0.0,
        "notes": notes,
        "runtime": "torch",  # measured inside torch's runtime: stage 0's backward is already all in W
    })


def _median(values, default):
    return statistics.median(values) if values else default


def compare(csv_label: str, schedule: Schedule, profile: Profile, results: list[dict]) -> Calibration:
    """Predicted (simulate with `profile`) vs measured (per-rank results of :func:`rank_main`)."""
    measured = parse_steps(results, schedule)
    if not measured:
        raise ParameterError("steps", "calibrate: no timed steps came back; use {param} >= 1")
    pred = simulate(schedule, profile)
    refined = refine_profile(profile, schedule, measured)
    refined_steps = [simulate(schedule, refine_profile(profile, schedule, [m])).makespan for m in measured]
    order = [schedule.actions(r) for r in range(schedule.n_ranks)]

    step_times = [max(m.rank_end) for m in measured]
    ranks = []
    for r in range(schedule.n_ranks):
        finishes = [max(m.actions[a][2] for a in order[r]) for m in measured] if order[r] else [0.0]
        busy = [sum(m.actions[a][4] for a in order[r]) for m in measured]
        ranks.append(RankComparison(
            rank=r,
            predicted_finish=max((pred.timings[a].end for a in order[r]), default=0.0),
            measured_finish=statistics.median(finishes),
            predicted_busy=pred.busy[r],
            measured_busy=statistics.median(busy),
            measured_waiting=statistics.median(m.waiting[r] if m.waiting else 0.0 for m in measured),
        ))
    measured_step = statistics.median(step_times)
    start_err = statistics.median(
        statistics.fmean(abs(m.actions[a][1] - pred.timings[a].start) for a in pred.timings) / max(m.rank_end)
        for m in measured
    )
    n_rounds = min((len(r.get("in_situ") or []) for r in results), default=0)
    in_situ_steps = []
    for k in range(n_rounds):
        round_profile = _in_situ_profile(profile, results, rounds=[k])
        # every result holds round k (n_rounds is the fewest any holds), each a measurement per stage
        assert round_profile is not None
        in_situ_steps.append(simulate(schedule, round_profile).makespan)
    return Calibration(
        in_situ=_in_situ_profile(profile, results) if n_rounds else None,
        in_situ_steps=in_situ_steps,
        refined_steps=refined_steps,
        csv=csv_label,
        predicted_step=pred.makespan,
        measured_step=measured_step,
        ranks=ranks,
        start_error=start_err,
        steps=len(measured),
        measured_steps=step_times,
        refined=refined,
    )


def _in_situ_profile(profile: Profile, results: list[dict], rounds: Optional[list[int]] = None) -> Optional[Profile]:
    """The stages the ranks measured between steps (all rounds, or those in `rounds`), as one
    profile; communication is taken from `profile`."""
    from schedc.runtime.profiling.assemble import to_profile
    from schedc.runtime.profiling.stages import StageMeasurement

    pooled: dict[int, StageMeasurement] = {}
    for r in results:
        for k, round_ in enumerate(r.get("in_situ") or []):
            if rounds is not None and k not in rounds:
                continue
            for d in round_:
                m = StageMeasurement.from_dict(d)
                pooled[m.index] = pooled[m.index].merged(m) if m.index in pooled else m
    if not pooled:
        return None
    if sorted(pooled) != list(range(profile.n_stages)):
        raise SchedcError(f"calibrate: in-situ profile covers stages {sorted(pooled)}, expected all "
                          f"{profile.n_stages}")
    return to_profile(
        [pooled[s] for s in range(profile.n_stages)], comm=profile.comm, device=profile.device,
        model=profile.model, microbatch_size=profile.microbatch_size, dtype=profile.dtype,
        extra_notes=["measured in-situ by schedc calibrate: each rank profiled its own stages between timed steps"],
    )


@python_spelling
def calibrate(
    csv: Union[str, os.PathLike],
    profile: Profile,
    config,
    microbatch_size: int,
    steps: int = 3,
    warmup_steps: int = 1,
    threads: Optional[int] = 1,
    device: str = "cpu",
    timeout: float = 300.0,
    n_ranks: Optional[int] = None,
    in_situ: bool = False,
    optimizer: str = "adamw",
    model: Optional[str] = None,
    sample: Optional[str] = None,
    model_args: Optional[dict] = None,
) -> Calibration:
    """Run `csv` on the built-in GPT (``GPTConfig`` `config`), or on the stages the user's
    ``model`` function (``MODULE:FUNCTION``, with ``sample`` and ``model_args`` as ``schedc
    profile --model`` takes them) returns, with one process per rank and compare with the
    prediction from `profile`. ``n_ranks`` (default: the CSV's rows) must match."""
    from schedc.core.validate import validate
    from schedc.io.csvio import read_csv

    schedule = read_csv(csv)
    validate(schedule, source=str(csv))
    if profile.n_stages != schedule.n_stages:
        raise SchedcError(f"{csv}: the schedule has {schedule.n_stages} stages but the profile describes "
                          f"{profile.n_stages}; profile the model as {schedule.n_stages} stages")
    if n_ranks is not None and n_ranks != schedule.n_ranks:
        raise ParameterError("n_ranks", f"{literal(csv)}: the CSV has {schedule.n_ranks} rows (ranks); {{param}} is "
                             f"{n_ranks}", flag="--nproc")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT):
        raise ParameterError("timeout", f"calibrate: {{param}} must be a finite number of seconds > 0 and at most "
                             f"{MAX_TIMEOUT:g} (a week), got {literal(repr(timeout)[:40])}")
    for param, value, least in (("steps", steps, 1), ("warmup_steps", warmup_steps, 0)):
        if value < least:
            raise ParameterError(param, f"calibrate: need {{param}} >= {least}, got {literal(value)}")
    if microbatch_size < 1:
        raise ParameterError("microbatch_size", f"calibrate: {{param}} must be >= 1, got {literal(microbatch_size)}",
                             flag="--mbs")
    from schedc.runtime.profiling.device import resolve_device

    dev = resolve_device(device)
    if dev.type == "cuda":
        import torch

        if torch.cuda.device_count() < schedule.n_ranks:
            raise ParameterError("device", f"{{name}}cuda: {schedule.n_ranks} ranks need {schedule.n_ranks} GPUs, "
                                 f"this machine has {torch.cuda.device_count()}")
    elif dev.type != "cpu":
        raise ParameterError("device", f"{{name}}{literal(device)}: calibrate runs on cpu (gloo) or cuda (NCCL)")
    user_model = None
    if model is not None:
        from schedc.runtime.user_model import build_user_model

        # "path/file.py:fn" is read by the ranks from their own working directory: make it absolute
        model, sample = _absolute_spec(model), None if sample is None else _absolute_spec(sample)
        offered = {"n_stages": schedule.n_stages, "microbatch_size": microbatch_size, **(model_args or {})}
        # built once here so that a wrong function or stage count is one line before any rank starts
        check_user_stages(build_user_model(model, sample, offered), schedule, model)
        user_model = {"model": model, "sample": sample, "offered": offered}
    spec = {
        "csv": str(Path(csv).resolve()),
        "user_model": user_model,
        "config": asdict(config),
        "microbatch_size": microbatch_size,
        "steps": steps,
        "warmup_steps": warmup_steps,
        "threads": threads,
        "device": device,
        "in_situ": in_situ,
        "optimizer": optimizer,
    }
    results = launch(spec, schedule.n_ranks, timeout=timeout)
    return compare(str(csv), schedule, profile, results)


def _absolute_spec(spec: str) -> str:
    module, sep, fn = spec.rpartition(":")
    if sep and (module.endswith(".py") or "/" in module):
        return f"{Path(module).resolve()}:{fn}"
    return spec


def format_calibration(cal: Calibration) -> str:
    def measured_profile(what: str, step: float, error: float, paired: float) -> str:
        return (f"  with {what}: {format_ms(step)} ({100 * error:+.1f}% against the measured "
                f"{format_ms(cal.measured_step)}; step by step, each step's prediction against that step: "
                f"median {100 * paired:+.1f}%)")

    in_situ = []
    step, error, paired = cal.in_situ_step, cal.in_situ_error, cal.in_situ_paired_error
    if step is not None:
        assert error is not None and paired is not None  # all three are None exactly when no in-situ step ran
        in_situ.append(measured_profile("the in-situ profile (stages measured inside the ranks between steps)",
                                        step, error, paired))
    lines = [
        f"{cal.csv}: {cal.steps} timed step(s); times are medians over them",
        f"  step time: predicted {format_ms(cal.predicted_step)}, measured {format_ms(cal.measured_step)} "
        f"(error {100 * cal.step_error:+.1f}%)",
        measured_profile("the refined profile (the measured action times)", cal.refined_step, cal.refined_error,
                         cal.refined_paired_error),
        *in_situ,
        f"  action starts: mean distance from prediction {100 * cal.start_error:.1f}% of the step",
        f"  {'rank':>4}  {'finish pred':>11}  {'measured':>9}  {'error':>7}  {'busy pred':>9}  {'measured':>9}  {'error':>7}",
    ]
    for r in cal.ranks:
        lines.append(
            f"  {r.rank:>4}  {format_ms(r.predicted_finish):>11}  {format_ms(r.measured_finish):>9}  {100 * r.finish_error:>+6.1f}%  "
            f"{format_ms(r.predicted_busy):>9}  {format_ms(r.measured_busy):>9}  {100 * r.busy_error:>+6.1f}%"
        )
    if any(r.measured_waiting > 0 for r in cal.ranks):
        lines.append("  waiting in WAIT_SEND_F / WAIT_SEND_B / WAIT_REDUCE_GRAD actions (not compute): "
                     + ", ".join(f"rank {r.rank} {format_ms(r.measured_waiting)}" for r in cal.ranks))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(_worker_entry())
