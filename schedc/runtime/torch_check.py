"""Ask torch itself whether it accepts a schedule, the way its runtime would load it.

Problem: schedc promises that every CSV it writes runs under
``torch.distributed.pipelining``'s ``_PipelineScheduleRuntime``. The runtime checks a loaded
compute-only schedule with ``_validate_schedule``, lowers it with ``_add_send_recv`` (which
fails when sends/receives cannot be ordered), and torch's tests dry-run the lowered schedule
with ``_simulate_comms_compute`` (which fails on a deadlock).

Method: convert each cell through torch's own parser (``_Action.from_str(str(cell))``), then
call those torch functions in that order with the schedule's placement as ``stage_to_rank``;
the lowering runs the passes the installed torch's runtime runs (:func:`lower_like_runtime`:
2.15 adds a WAIT_SEND_F / WAIT_SEND_B per send and a WAIT_REDUCE_GRAD per reduction, checked
by its ``_validate_send_waits``). ``_simulate_comms_compute`` has no rule for ``OVERLAP_F_B``
containers, so for that last step (only) an overlap cell is replaced by its parts run back to
back, which is how schedc's simulator treats it. Any torch failure becomes a SchedcError naming
the step. Where torch has its activation-liveness analysis (2.15), :func:`check_liveness_with_torch`
compares its slots per rank with schedc's memory rule; :func:`torchtitan_ready` says whether the
installed torch can run torchtitan's training step at all.

Cost: linear-ish in the number of actions (torch's passes rescan per step; fine for CSV sizes).
"""

from __future__ import annotations

import contextlib
import io
from typing import Callable, Optional

from schedc.core import limits
from schedc.core.ir import Schedule
from schedc.errors import ParameterError, SchedcError, literal, python_spelling

_TORCH_FAILURES = (AssertionError, KeyError, ValueError, RuntimeError, IndexError)


def to_torch_order(schedule: Schedule) -> dict:
    """``{rank: [_Action | None, ...]}`` parsed by torch's ``_Action.from_str``."""
    from torch.distributed.pipelining.schedules import _Action

    return {r: [None if c is None else _Action.from_str(str(c)) for c in row] for r, row in enumerate(schedule.rows)}


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def check_with_torch(schedule: Schedule, source: Optional[str] = None, lower: bool = True) -> dict:
    """Raise SchedcError unless torch's validation, send/recv lowering and comms simulation all
    accept `schedule` (`lower` False: its validation only). Returns the lowered order
    (``{rank: [_Action, ...]}``, with sends and receives; {} without lowering) for callers that
    want to inspect it."""
    from torch.distributed.pipelining import schedules as ts

    prefix = f"{source}: " if source else ""
    n_ranks, n_stages, n_mb = schedule.n_ranks, schedule.n_stages, schedule.n_microbatches
    order = to_torch_order(schedule)

    try:
        mapping = ts._validate_schedule(order, n_ranks, n_stages, n_mb)
    except (AssertionError, KeyError, ValueError, RuntimeError) as e:
        raise SchedcError(f"{prefix}torch's _validate_schedule rejects the schedule: {_first_line(e)}") from e
    placement = tuple(schedule.placement)
    torch_placement = tuple(mapping.get(s) for s in range(n_stages))
    if torch_placement != placement:
        raise SchedcError(f"{prefix}torch places stages on ranks {torch_placement}, the schedule says {placement}")
    if not lower:
        return {}

    def stage_to_rank(s: int) -> int:
        return placement[s]

    lowered = lower_like_runtime(order, stage_to_rank, n_stages, n_mb, prefix)

    # gradient reduction is rank-local (no peer waits on it) and 2.14's simulator has no rule for it
    local = {"REDUCE_GRAD", "WAIT_REDUCE_GRAD"}
    flat = {r: [p for a in acts for p in (a.sub_actions if a.sub_actions is not None else (a,))
                if p.computation_type.name not in local]
            for r, acts in lowered.items()}
    try:
        # torch prints the half-built schedule before raising; keep that out of the user's output
        with contextlib.redirect_stdout(io.StringIO()):
            ts._simulate_comms_compute(flat, stage_to_rank, n_stages)
    except (AssertionError, KeyError, ValueError, RuntimeError, IndexError) as e:
        raise SchedcError(f"{prefix}torch's _simulate_comms_compute fails on the schedule: {_first_line(e)}") from e
    return lowered


def lower_like_runtime(order: dict, stage_to_rank, n_stages: int, n_mb: int, prefix: str = "") -> dict:
    """The compute-only `order` lowered as ``_PipelineScheduleRuntime._prepare_schedule_with_comms``
    lowers it, with the passes the installed torch has: ``_add_reduce_grad`` (2.15 pairs each
    REDUCE_GRAD with a WAIT_REDUCE_GRAD), ``_add_send_recv``, then on 2.15 ``_add_wait_send``
    (a WAIT_SEND_F / WAIT_SEND_B for every send) checked by ``_validate_send_waits``. FSDP's
    UNSHARD / RESHARD pass is left out: it adds no dependency between ranks."""
    from torch.distributed.pipelining import schedules as ts

    passes: list[tuple[str, Callable[[dict], dict]]] = [
        ("_add_send_recv", lambda o: ts._add_send_recv(o, stage_to_rank=stage_to_rank, num_stages=n_stages))]
    if hasattr(ts, "_add_reduce_grad"):
        passes.insert(0, ("_add_reduce_grad", lambda o: {r: ts._add_reduce_grad(a, n_mb) for r, a in o.items()}))
    if hasattr(ts, "_add_wait_send"):
        passes.append(("_add_wait_send", ts._add_wait_send))
    validate = getattr(ts, "_validate_send_waits", None)  # torch 2.15 on
    if validate is not None:
        passes.append(("_validate_send_waits", lambda o: validate(o) or o))
    lowered = {r: list(actions) for r, actions in order.items()}
    for name, run in passes:
        try:
            lowered = run(lowered)
        except _TORCH_FAILURES as e:
            raise SchedcError(f"{prefix}torch's {name} rejects the schedule while lowering it: {_first_line(e)}") from e
    return lowered


# -------------------------------------------------------------- what a framework's step needs


def torch_version() -> tuple[int, ...]:
    """The installed torch's release as numbers (``2.14.1+cu130`` -> (2, 14, 1))."""
    import torch

    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:3] if p.isdigit())


def torchtitan_ready() -> Optional[str]:
    """None when the installed torch can run torchtitan's pipeline training step, else one line
    saying why and what to install.

    torchtitan 0.3.0's ``Trainer.pp_forward_backward_step`` hands the schedule microbatches it
    split itself: ``step(arg_mbs=..., kwarg_mbs=..., target_mbs=..., loss_kwargs=...)``. torch's
    pipelining takes those from 2.14.1 on; 2.13 fails the first step on every rank ("Expecting 4
    arg_mbs but got 1"). The test reads the installed ``step``'s signature, not a version string."""
    import inspect

    try:
        from torch.distributed.pipelining.schedules import _PipelineSchedule
    except ImportError as e:
        return f"torch's pipelining cannot be imported ({_first_line(e)}): pip install 'torch>=2.14.1'"
    params = inspect.signature(_PipelineSchedule.step).parameters
    missing = [p for p in ("arg_mbs", "kwarg_mbs", "target_mbs", "loss_kwargs") if p not in params]
    if missing:
        import torch

        return (f"torch {torch.__version__} cannot run torchtitan's training step (its schedule.step() has "
                f"no {', '.join(missing)}): pip install 'torch>=2.14.1'")
    return None


# -------------------------------------------------------------- torch's own liveness analysis


def torch_liveness_slots(schedule: Schedule, lowered: Optional[dict] = None) -> Optional[list[int]]:
    """Per rank, the activation slots torch's ``analyze_pipeline_activation_liveness`` (torch
    2.15+) assigns to `schedule` as the runtime finalizes it (stage_microbatch granularity: an
    activation is live from its F through its W or B, both ends inclusive, an overlap cell's
    parts at one position); None when the installed torch has no such analysis. The analysis
    reads only the finalized order and the microbatch count of a constructed runtime schedule,
    so it runs on an instance given those two without stages. O(actions) per rank."""
    from torch.distributed.pipelining import schedules as ts

    analyze = getattr(ts, "analyze_pipeline_activation_liveness", None)
    if analyze is None:
        return None
    if lowered is None:
        lowered = check_with_torch(schedule)
    runtime = ts._PipelineScheduleRuntime.__new__(ts._PipelineScheduleRuntime)
    runtime.pipeline_order_with_comms = lowered
    runtime._n_microbatches = schedule.n_microbatches
    return [analyze(runtime, pp_rank=r, stage_indices=schedule.stages_of(r), granularity="stage_microbatch").num_slots
            for r in range(schedule.n_ranks)]


def schedc_activation_slots(schedule: Schedule) -> list[int]:
    """Per rank, the peak number of microbatch activations schedc's cost model holds at once
    (every stage: 1 unit from F's start through W's or B's end; I keeps it), read from
    schedc's simulator."""
    from schedc.core.costs import Profile, StageCost
    from schedc.core.simulate import simulate

    unit = StageCost(forward=1, backward_input=1, backward_weight=1, activation_bytes=1, weight_grad_bytes=1)
    res = simulate(schedule, Profile(stages=[unit] * schedule.n_stages))
    return [round(p) for p in res.peak_memory]


def check_liveness_with_torch(schedule: Schedule, source: Optional[str] = None,
                              lowered: Optional[dict] = None) -> Optional[list[int]]:
    """Raise SchedcError unless torch's liveness analysis and schedc's memory rule count the same
    activation slots on every rank; returns those counts, or None when torch has no analysis."""
    theirs = torch_liveness_slots(schedule, lowered)
    if theirs is None:
        return None
    ours = schedc_activation_slots(schedule)
    if theirs != ours:
        prefix = f"{source}: " if source else ""
        ranks = ", ".join(f"rank {r}: torch {t}, schedc {o}" for r, (t, o) in enumerate(zip(theirs, ours)) if t != o)
        raise SchedcError(f"{prefix}torch's liveness analysis counts other activation slots than schedc ({ranks})")
    return theirs


@python_spelling
def check_for_launch(schedule: Schedule, source: Optional[str] = None, framework: Optional[str] = None) -> str:
    """What ``schedc validate`` asks torch before a launch: for ``framework == "torchtitan"`` that
    the installed torch can run its training step (:func:`torchtitan_ready`), then torch's own
    validation and lowering (:func:`check_with_torch`) and, on a torch with the analysis, that
    its liveness slots equal schedc's; above ``limits.MAX_TORCH_CHECK_ACTIONS`` actions torch's
    validation only (its comms simulation is quadratic in the actions), and the note says so.
    Raises SchedcError (one line); returns a note for the report ("" when torch has no liveness
    analysis)."""
    if framework == "torchtitan":
        why = torchtitan_ready()
        if why is not None:
            raise ParameterError("framework", f"{{name}}torchtitan: {literal(why)}", flag="--for")
    n_actions = sum(len(cell.parts) for row in schedule.rows for cell in row if cell is not None)
    if n_actions > limits.MAX_TORCH_CHECK_ACTIONS:
        check_with_torch(schedule, source, lower=False)
        return (f"torch's _validate_schedule accepts it; its lowering and comms simulation were not run: "
                f"{n_actions:,} actions, more than {limits.MAX_TORCH_CHECK_ACTIONS:,} (schedc's dependency "
                "and deadlock checks cover them)")
    lowered = check_with_torch(schedule, source)
    slots = check_liveness_with_torch(schedule, source, lowered)
    return "" if slots is None else f"torch's liveness analysis agrees (activation slots per rank {slots})"
