"""The schedule library: precompiled schedules for common set-ups, rebuilt and checked by one command.

One module per job: :mod:`~schedc.library.transformer` (the transformer cost model),
:mod:`~schedc.library.catalog` (set-up names, where the library lives, reading it back),
:mod:`~schedc.library.build`, :mod:`~schedc.library.index` (the Markdown index) and
:mod:`~schedc.library.check`. Everything is importable from ``schedc.library``.

Problem: a user with a standard set-up (R ranks, M microbatches, 1F1B's memory or twice it, one
stage per rank or two in a V, identical stages or a transformer) should find a good schedule
without running a solver, and a reviewer should be able to trust every file: it validates, torch
loads it, its JSON report says what the simulator says, and the index lists what is there.

Method:
- A set-up is named ``r{R}_mb{M}_mem{K}p_{loop|v}_{uniform|transformer}``
  (:class:`Setup`); the name alone determines the compile request, including the costs:
  ``uniform`` is ``Profile.uniform`` (F = I = W = 1, the activation held until W as torch's split
  backward does, no communication time) and ``transformer`` is :func:`transformer_profile` with its
  defaults. Every set-up is compiled for torch's runtime (stage 0's backward all in W).
- :func:`build_library` compiles each set-up (``schedc.solver.compile_schedule``, makespan
  objective, seed 0) with a time limit scaled by the instance's size (:func:`time_limit_for`),
  writes ``NAME.csv`` and ``NAME.json`` (the compiler's report plus a ``library`` section), then
  regenerates the index ``README.md`` from the JSON reports (:func:`index_markdown`).
- :func:`check_library` never solves: it re-reads every CSV, validates it against the set-up its
  name states, asks torch to load it, re-simulates it with the costs its report records, compares
  makespan / span / peak memory per rank / the baselines' makespans with the report, checks the
  recorded costs are what the name means today, and compares the index with a fresh rendering.

Determinism: the set-up list, the costs, the seed and the per-set-up time limits are fixed, and
the index holds no wall-clock numbers. Where a hand-made schedule that fits is as good as the
heuristic's warm start, the library starts from it (the first such in ``BASELINE_NAMES``
order), so solves that end with a proof reproduce the same file; the heuristic's local search is
time-budgeted, so a set-up where it is strictly better may get another equally good order on
another machine. Solves that hit their time limit
may stop at a different incumbent on a slower or busier machine, or with another HiGHS version,
so such rows (status ``feasible``/``heuristic`` with a gap) can differ between machines; the
JSON's ``solve_time`` and ``progress`` always differ. Checking therefore re-renders the index
from the JSONs and never re-solves.

Cost: building is at most the sum of the time limits plus about 1 s per set-up for the warm
start (:func:`default_budget`; most end early with a proof); checking is a validation, a
re-simulation (of the file and of the baselines) and torch's schedule checks per file, linear in
the set-ups. Measured times: docs/design.md, "Compiler output".
"""

from schedc.library.build import build_library, compile_setup, library_warm_start, setup_problem
from schedc.library.catalog import (
    BUILD_COMMAND,
    COSTS,
    DEFAULT_MAX_TIME_LIMIT,
    DEFAULT_SETUPS,
    ENV_VAR,
    INDEX_NAME,
    LIBRARY_OBJECTIVE,
    LIBRARY_SEED,
    PLACEMENTS,
    Entry,
    Setup,
    default_budget,
    default_setups,
    find_entry,
    find_library,
    load_entries,
    select,
    time_limit_for,
)
from schedc.library.check import check_entry, check_index, check_library, torch_available
from schedc.library.index import (
    format_makespan,
    format_rank_makespan,
    index_markdown,
    index_row,
    peak_in_p,
    write_index,
)
from schedc.library.transformer import transformer_profile

__all__ = [
    "BUILD_COMMAND", "COSTS", "DEFAULT_MAX_TIME_LIMIT", "DEFAULT_SETUPS", "ENV_VAR", "INDEX_NAME",
    "LIBRARY_OBJECTIVE", "LIBRARY_SEED", "PLACEMENTS", "Entry", "Setup", "build_library", "check_entry",
    "check_index", "check_library", "compile_setup", "default_budget", "default_setups", "find_entry",
    "find_library", "format_makespan", "format_rank_makespan", "index_markdown", "index_row", "library_warm_start", "load_entries",
    "peak_in_p", "select", "setup_problem", "time_limit_for", "transformer_profile", "write_index",
]
