"""Checking the library without solving: every file validates, loads in torch, re-simulates to its report.

Method and cost: see :func:`check_library` (torch's schedule checks are the slow part; timings:
docs/design.md, "Compiler output").
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Optional

from schedc.core.costs import DEFAULT_RUNTIME, MemoryLimit, Profile
from schedc.core.tolerances import REL, TIE
from schedc.errors import SchedcError
from schedc.library.build import setup_problem
from schedc.library.catalog import (
    BUILD_COMMAND,
    INDEX_NAME,
    LIBRARY_OBJECTIVE,
    Entry,
    PathLike,
    Setup,
    find_library,
    load_entries,
)
from schedc.library.index import index_markdown


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=REL, abs_tol=TIE)


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def check_entry(entry: Entry, torch: bool = True) -> list[str]:
    """Problems of one library file pair (see :func:`check_library`)."""
    from schedc.core.simulate import simulate
    from schedc.core.validate import validate
    from schedc.io import csvio

    setup, rep, csv_path = entry.setup, entry.report, entry.csv
    json_path = csvio.report_path(csv_path)
    out: list[str] = []
    inputs = rep.get("inputs")
    if not isinstance(inputs, dict):
        return [f"{json_path}: no 'inputs' section; rebuild with `{BUILD_COMMAND}`"]
    # what the name promises vs what the report says was compiled
    expected = {"ranks": setup.ranks, "stages": setup.stages, "microbatches": setup.mb,
                "placement": setup.placement, "memory_limit": setup.memory, "objective": LIBRARY_OBJECTIVE,
                "runtime": DEFAULT_RUNTIME}
    for key, want in expected.items():
        if inputs.get(key) != want:
            out.append(f"{json_path}: inputs.{key} is {inputs.get(key)!r} but the name {setup.name} means {want!r}")
    try:
        profile = Profile.model_validate(inputs.get("costs"))
    except Exception as e:  # pydantic's ValidationError or a wrong type
        return out + [f"{json_path}: inputs.costs is not a valid profile ({str(e).splitlines()[0]})"]
    if profile.model_dump(mode="json", exclude_none=True) != setup.profile().model_dump(mode="json", exclude_none=True):
        out.append(f"{json_path}: inputs.costs differ from the {setup.costs} costs schedc uses today; rebuild with "
                   f"`schedc library build --only {setup.name}`")
    if out:
        return out

    try:
        sched = csvio.read_csv(csv_path)
        validate(sched, n_stages=setup.stages, n_microbatches=setup.mb, n_ranks=setup.ranks,
                 placement=setup.placement, source=str(csv_path))
    except SchedcError as e:
        return [str(e)]
    if torch:
        from schedc.runtime.torch_check import check_with_torch

        try:
            check_with_torch(sched, source=str(csv_path))
        except SchedcError as e:
            out.append(str(e))

    memory = MemoryLimit.parse(setup.memory)
    sim = simulate(sched, profile, memory, runtime=DEFAULT_RUNTIME)
    predicted = rep.get("predicted") or {}
    for key, got in (("makespan", sim.makespan), ("span", sim.span), ("bubble", sim.bubble)):
        if not _close(predicted.get(key), got):
            out.append(f"{csv_path}: re-simulated {key} {got:.9g} differs from the report's "
                       f"{predicted.get(key)!r} in {json_path.name}")
    peaks = predicted.get("peak_memory_per_rank")
    if not isinstance(peaks, list) or len(peaks) != len(sim.peak_memory) or not all(
            _close(a, b) for a, b in zip(peaks, sim.peak_memory)):
        out.append(f"{csv_path}: re-simulated peak memory per rank {[float(f'{p:.6g}') for p in sim.peak_memory]} "
                   f"differs from the report's {peaks!r} in {json_path.name}")
    if not sim.fits:
        over = [r for r, (p, lim) in enumerate(zip(sim.peak_memory, sim.memory_limit)) if p > lim * (1 + REL)]
        out.append(f"{csv_path}: exceeds the {setup.memory} memory limit on rank(s) {over}")
    if predicted.get("fits_memory") is not True:
        out.append(f"{json_path}: predicted.fits_memory is {predicted.get('fits_memory')!r}, expected true")

    # the baselines the index compares with, re-simulated under the same costs
    from schedc.solver.compile import all_baselines

    fresh = all_baselines(setup_problem(setup))  # its costs are `profile` (checked above)
    recorded = rep.get("baselines") or {}
    for name in sorted(set(fresh) | set(recorded)):
        a, b = recorded.get(name), fresh.get(name)
        if a is None or b is None:
            out.append(f"{json_path}: baseline {name} is {'missing from' if a is None else 'extra in'} the report")
            continue
        if not _close(a.get("makespan"), b["makespan"]) or bool(a.get("fits")) != b["fits"]:
            out.append(f"{json_path}: baseline {name}: report says makespan {a.get('makespan')!r} "
                       f"fits {a.get('fits')!r}, re-simulated {b['makespan']:.9g} fits {b['fits']}")
    lb = rep.get("lower_bound")
    if isinstance(lb, (int, float)) and lb > sim.objective(LIBRARY_OBJECTIVE) * (1 + REL) + TIE:
        out.append(f"{json_path}: lower bound {lb} is above the schedule's makespan {sim.makespan:.9g}")
    if rep.get("status") == "optimal" and isinstance(lb, (int, float)) and not _close(lb, sim.makespan):
        out.append(f"{json_path}: status optimal but the lower bound {lb} differs from the makespan {sim.makespan:.9g}")
    return out


def check_index(directory: PathLike) -> list[str]:
    """[] if ``README.md`` is what :func:`index_markdown` renders now, else where it differs."""
    directory = Path(directory)
    path = directory / INDEX_NAME
    fresh = index_markdown(directory)
    try:
        current = path.read_text()
    except FileNotFoundError:
        return [f"{path}: missing; regenerate it with `schedc library build {directory} --index-only`"]
    if current == fresh:
        return []
    old, new = current.splitlines(), fresh.splitlines()
    for i in range(max(len(old), len(new))):
        a = old[i] if i < len(old) else "<end of file>"
        b = new[i] if i < len(new) else "<end of file>"
        if a != b:
            return [f"{path}: line {i + 1} is out of date: has {a[:120]!r}, the reports give {b[:120]!r}; "
                    f"regenerate it with `schedc library build {directory} --index-only`"]
    return [f"{path}: out of date (line endings); regenerate it with `schedc library build {directory} --index-only`"]


def check_library(
    directory: Optional[PathLike] = None,
    torch: Optional[bool] = None,
    setups: Optional[Iterable[Setup]] = None,
) -> list[str]:
    """Every problem of the library in `directory` (default :func:`find_library`), one line each;
    [] when it is sound. Per file pair: the name parses; the report's inputs match the name and
    its costs are today's costs for that name; the CSV validates for that set-up; torch accepts
    it (`torch`: True requires torch, None checks when torch is installed, False skips); its
    re-simulation gives the report's makespan, span, bubble and per-rank peak memory within the
    limit; the baselines re-simulate to the report's numbers; the lower bound is not above the
    makespan. Then: `setups` (if given) are all present, and the index is current. No solving."""
    directory = find_library(directory)
    if torch is None:
        torch = torch_available()
    elif torch and not torch_available():
        return ["torch is not installed: cannot check that torch loads the schedules (pip install torch, or skip "
                "the torch check)"]
    entries, problems = load_entries(directory)
    if not entries and not problems:
        return [f"{directory}: no schedules (*.csv) here; build them with `{BUILD_COMMAND}`"]
    for entry in entries:
        problems += check_entry(entry, torch=torch)
    if setups is not None:
        present = {e.setup.name for e in entries}
        missing = [s.name for s in setups if s.name not in present]
        if missing:
            problems.append(f"{directory}: {len(missing)} set-up(s) missing: {', '.join(missing[:8])}"
                            + (" ..." if len(missing) > 8 else "") + f"; build them with `schedc library build "
                            f"{directory} --only NAME`")
    problems += check_index(directory)
    return problems
