"""Ask torch itself whether it accepts a schedule, the way its runtime would load it.

Problem: schedc promises that every CSV it writes runs under
``torch.distributed.pipelining``'s ``_PipelineScheduleRuntime``. The runtime checks a loaded
compute-only schedule with ``_validate_schedule``, lowers it with ``_add_send_recv`` (which
fails when sends/receives cannot be ordered), and torch's tests dry-run the lowered schedule
with ``_simulate_comms_compute`` (which fails on a deadlock).

Method: convert each cell through torch's own parser (``_Action.from_str(str(cell))``), then
call those three torch functions in that order with the schedule's placement as
``stage_to_rank``. ``_simulate_comms_compute`` has no rule for ``OVERLAP_F_B`` containers, so
for that last step (only) an overlap cell is replaced by its parts run back to back, which is
how schedc's simulator treats it. Any torch failure becomes a SchedcError naming the step.

Cost: linear-ish in the number of actions (torch's passes rescan per step; fine for CSV sizes).
"""

from __future__ import annotations

import contextlib
import io
from typing import Optional

from schedc.errors import SchedcError
from schedc.ir import Schedule


def to_torch_order(schedule: Schedule) -> dict:
    """``{rank: [_Action | None, ...]}`` parsed by torch's ``_Action.from_str``."""
    from torch.distributed.pipelining.schedules import _Action

    return {r: [None if c is None else _Action.from_str(str(c)) for c in row] for r, row in enumerate(schedule.rows)}


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def check_with_torch(schedule: Schedule, source: Optional[str] = None) -> dict:
    """Raise SchedcError unless torch's validation, send/recv lowering and comms simulation all
    accept `schedule`. Returns the lowered order (``{rank: [_Action, ...]}``, with sends and
    receives) for callers that want to inspect it."""
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

    def stage_to_rank(s: int) -> int:
        return placement[s]

    compute = {r: list(actions) for r, actions in order.items()}
    try:
        lowered = ts._add_send_recv(compute, stage_to_rank=stage_to_rank, num_stages=n_stages)
    except (AssertionError, KeyError, ValueError, RuntimeError, IndexError) as e:
        raise SchedcError(f"{prefix}torch's _add_send_recv cannot order the sends and receives: "
                          f"{_first_line(e)}") from e

    flat = {r: [p for a in acts for p in (a.sub_actions if a.sub_actions is not None else (a,))]
            for r, acts in lowered.items()}
    try:
        # torch prints the half-built schedule before raising; keep that out of the user's output
        with contextlib.redirect_stdout(io.StringIO()):
            ts._simulate_comms_compute(flat, stage_to_rank, n_stages)
    except (AssertionError, KeyError, ValueError, RuntimeError, IndexError) as e:
        raise SchedcError(f"{prefix}torch's _simulate_comms_compute fails on the schedule: {_first_line(e)}") from e
    return lowered
