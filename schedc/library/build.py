"""Building the library: compile each set-up as the library does and write its file pair and the index.

Problem: reproducible files for every set-up within a laptop's time budget. Method and cost: see
:func:`build_library` and :func:`library_warm_start` (the package docstring has the whole story).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from schedc.core.costs import MemoryLimit
from schedc.core.ir import Schedule
from schedc.core.tolerances import REL, TIE
from schedc.errors import SchedcError
from schedc.library.catalog import (
    BUILD_COMMAND,
    COSTS,
    DEFAULT_MAX_TIME_LIMIT,
    DEFAULT_SETUPS,
    LIBRARY_OBJECTIVE,
    LIBRARY_SEED,
    PLACEMENTS,
    Entry,
    PathLike,
    Setup,
    time_limit_for,
)
from schedc.library.index import check_index_is_ours, write_index


def setup_problem(setup: Setup):
    """The compile request a set-up stands for (schedc.solver.Problem)."""
    from schedc.solver.problem import Problem

    return Problem.build(setup.stages, setup.mb, n_ranks=setup.ranks, placement=setup.placement,
                         profile=setup.profile(), memory=setup.memory, objective=LIBRARY_OBJECTIVE)


def library_warm_start(problem, time_limit: float, candidates: Sequence[tuple[str, Schedule]] = ()):
    """The compiler's warm start (schedc.solver.engines.warm.warm_start, same budget as
    compile_problem gives it), with two library rules:

    - a hand-made schedule that fits and is as good as the heuristic's answer wins the tie (the
      first such in BASELINE_NAMES order). Reason: reproducibility. The heuristic's local search
      is time-budgeted, so among equally good orders it may return a different one on another
      machine; a hand-made schedule is the same everywhere, and where it meets the lower bound
      the compiler stops at once with a proof.
    - `candidates` ((name, Schedule) pairs, e.g. the library's answer for the same set-up under a
      smaller memory limit) are used when they fit and are strictly better, so a looser memory
      limit never gets a slower schedule than a tighter one, even when both solves stop at
      their time limits.

    `problem` may be its Graph (schedc.solver.graph), which keeps the baselines built here."""
    from schedc.core.simulate import simulate
    from schedc.solver.engines.warm import feasible_baselines, warm_start
    from schedc.solver.graph import graph_of

    graph = graph_of(problem)
    problem = graph.problem
    sched, sim, source = warm_start(graph, time_budget=min(1.0, 0.1 * time_limit))
    obj = problem.objective
    best = (sched, sim, source)
    for name, b_sched, b_sim in feasible_baselines(graph):
        if b_sim.objective(obj) <= sim.objective(obj) * (1 + REL) + TIE:
            best = (b_sched, b_sim, name)
            break
    for name, cand in candidates:
        try:
            c_sim = simulate(cand, problem.profile, problem.memory)
        except SchedcError:
            continue
        if c_sim.fits and c_sim.objective(obj) < best[1].objective(obj) * (1 - REL):
            best = (cand, c_sim, name)
    return best


def compile_setup(
    setup: Setup,
    time_limit: float,
    progress: Optional[Callable[[dict], None]] = None,
    candidates: Sequence[tuple[str, Schedule]] = (),
):
    """Compile one set-up exactly as the library does; returns the CompileResult. `candidates`:
    see :func:`library_warm_start`."""
    from schedc.solver.compile import compile_problem
    from schedc.solver.graph import graph_of

    graph = graph_of(setup_problem(setup))  # one graph: the warm start's baselines serve the report
    return compile_problem(graph, time_limit=time_limit, progress=progress, seed=LIBRARY_SEED,
                           warm=library_warm_start(graph, time_limit, candidates))


def build_library(
    directory: PathLike,
    setups: Optional[Sequence[Setup]] = None,
    time_limit: Optional[float] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> list[Entry]:
    """Compile `setups` (default :data:`DEFAULT_SETUPS`) into `directory`: ``NAME.csv`` and
    ``NAME.json`` per set-up, then the index ``README.md`` over every report in the directory.
    `time_limit` is the time limit of the largest default set-up (default
    :data:`DEFAULT_MAX_TIME_LIMIT`); each set-up gets :func:`time_limit_for`. Set-ups that differ
    only in memory are compiled tightest first and each answer is offered to the looser ones
    (:func:`library_warm_start`). `progress` receives one line per finished set-up. Each file
    is written all-or-nothing, so an interrupted build leaves complete pairs (rerun with
    ``--only`` to finish)."""
    from schedc.io import csvio

    directory = Path(directory)
    check_index_is_ours(directory)  # before any solving: the index at the end would replace it
    directory.mkdir(parents=True, exist_ok=True)
    setups = list(DEFAULT_SETUPS if setups is None else setups)
    max_limit = DEFAULT_MAX_TIME_LIMIT if time_limit is None else float(time_limit)
    if not max_limit > 0:
        raise SchedcError(f"--time-limit must be > 0 seconds, got {time_limit}")
    entries = []
    # tighter memory limits first, so that their answers can seed the looser ones
    order = sorted(range(len(setups)), key=lambda i: (_group(setups[i]), MemoryLimit.parse(setups[i].memory).value, i))
    solved: dict[tuple, list[tuple[str, Schedule]]] = {}
    for k, setup in enumerate([setups[i] for i in order], 1):
        limit = time_limit_for(setup, max_limit)
        t0 = time.monotonic()
        res = compile_setup(setup, limit, candidates=solved.get(_group(setup), ()))
        solved.setdefault(_group(setup), []).append((f"library {setup.name}", res.schedule))
        report = dict(res.report)
        report["library"] = {
            "setup": setup.name, "ranks": setup.ranks, "microbatches": setup.mb, "memory": setup.memory,
            "placement": setup.placement, "costs": setup.costs, "objective": LIBRARY_OBJECTIVE,
            "seed": LIBRARY_SEED, "time_limit": limit, "command": BUILD_COMMAND,
        }
        csv_path = directory / f"{setup.name}.csv"
        # the report first: a CSV without its report is what check_library flags
        csvio.write_report(report, csv_path)
        csvio.write_csv(res.schedule, csv_path)
        entries.append(Entry(setup, csv_path, report))
        if progress is not None:
            gap = "" if res.status == "optimal" else f" gap {100 * res.gap:.2f}%"
            progress(f"[{k}/{len(setups)}] {setup.name}: {res.status}{gap}, makespan {res.sim.makespan:.6g}, "
                     f"limit {limit:g}s, took {time.monotonic() - t0:.1f}s")
    write_index(directory)
    return entries


def _group(setup: Setup) -> tuple:
    """Set-ups that differ only in their memory limit."""
    return (COSTS.index(setup.costs), PLACEMENTS.index(setup.placement), setup.ranks, setup.mb)
