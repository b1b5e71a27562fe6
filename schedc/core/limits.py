"""The sizes schedc reads and checks, in one place.

Every input file (CSV schedule, profile, report) is read with a size bound and every count it
declares is bounded, so that a hostile or mistaken input (``/dev/zero``, 50 M blank lines, a
microbatch number with 5000 digits) fails in one line that says the limit, instead of running for
minutes or exhausting memory. The bounds are far above what a real pipeline needs (the largest
published set-ups run a few hundred stages and a few thousand microbatches); the solver's own
size limits for ``compile`` are tighter and live with the solver.
"""

from __future__ import annotations

# seconds: a shorter --time-limit (compile, plan) cannot even build its problem, so nothing would
# be searched; it is refused rather than silently overrun
MIN_TIME_LIMIT = 0.1
# bytes of one input file (CSV schedule, profile JSON, report JSON)
MAX_INPUT_BYTES = 32 * 2**20
# actions (F, I, W, B) in one schedule; validating and simulating one takes seconds per million
MAX_ACTIONS = 2**20
# actions up to which `validate` also runs torch's send/recv lowering and its comms simulation
# (_simulate_comms_compute): the simulation pops each rank's list from its front, so its time
# grows with the square of the actions (4 minutes at 960,000, 2 s at 96,000); above this only
# torch's _validate_schedule runs, and schedc's own dependency and deadlock checks (linear) decide
MAX_TORCH_CHECK_ACTIONS = 2**17
# actions in one `schedc trace`: a trace has an event per action and memory step (200 MB of JSON
# and a minute of work at 960,000 actions, which Perfetto and chrome://tracing then load slowly)
MAX_TRACE_ACTIONS = 2**18
# cells of one CSV, idle ones included
MAX_CELLS = 4 * MAX_ACTIONS
# --memory: a factor K of Kp, a byte size per rank (past these a value is a typo: 400 digits once
# read as "infp"); `none` lifts the cap
MAX_MEMORY_FACTOR = 1e6
MAX_MEMORY_BYTES = float(2**50)
# ranks (CSV rows), stages and microbatches of one schedule
MAX_RANKS = 4096
MAX_STAGES = 8192
MAX_MICROBATCHES = 2**20


def describe_bytes(n: int) -> str:
    """'32 MiB' for the limits above."""
    return f"{n // 2**20} MiB" if n >= 2**20 and n % 2**20 == 0 else f"{n} bytes"


def check_count(value: int, limit: int, what: str, option: str = "") -> None:
    """Raise a ParameterError about `what` (the Python name: stages, microbatches, ranks) when a
    requested count is not 1..limit; `option` is the CLI's flag for it (``--mb``)."""
    from schedc.errors import ParameterError

    if value < 1:
        raise ParameterError(what, f"must be at least 1, got {value}", flag=option)
    if value > limit:
        raise ParameterError(what, f"{value} is more {what} than schedc handles (at most {limit:,}); "
                                   f"give at most {limit}", flag=option)


def check_schedule_size(n_stages: int, n_microbatches: int, n_ranks: int | None = None) -> None:
    """Raise a ParameterError when ``stages``/``microbatches``/``ranks`` ask for a schedule schedc
    could not read back or check (each bound above; at most ``MAX_ACTIONS`` actions in all)."""
    from schedc.errors import ParameterError

    check_count(n_stages, MAX_STAGES, "stages", "--stages")
    check_count(n_microbatches, MAX_MICROBATCHES, "microbatches", "--mb")
    if n_ranks is not None:
        check_count(n_ranks, MAX_RANKS, "ranks", "--ranks")
    actions = 3 * n_stages * n_microbatches  # F, I and W of every stage and microbatch
    if actions > MAX_ACTIONS:
        raise ParameterError("microbatches", f"{{name:stages}}{n_stages} {{name}}{n_microbatches} make {actions:,} "
                                             f"actions, more than schedc handles (at most {MAX_ACTIONS:,}); use "
                                             "fewer stages or microbatches")
