"""schedc's front door: the README's workflow as typed, keyword-only functions.

Problem: a user who wants to compile, check, time and draw a pipeline schedule should need one
import and one vocabulary, not twelve modules with positional parameters and string flags.

Method: each function here checks its choices up front (a bad one is a
:class:`~schedc.errors.SchedcError` naming the parameter), calls the engine function that does
the work, and returns a frozen result (:mod:`schedc.results`). The engine modules keep their
own signatures; this layer only resolves arguments and freezes answers. The solver and
matplotlib load on the first call that needs them, so ``import schedc`` stays light.

Cost: that of the engine function called (a compile runs for up to ``time_limit`` seconds).

>>> import schedc
>>> zbh1 = schedc.baseline("zb-h1", stages=4, microbatches=8)
>>> schedc.validate(zbh1)
>>> schedc.simulate(zbh1, profile=schedc.Profile.uniform(4)).makespan
27.0
"""

from __future__ import annotations

import math
import os
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, Union

from schedc.choices import (
    Budget,
    CountedDevice,
    Execution,
    Implementation,
    Objective,
    Placement,
    PlacementName,
    Solver,
    Status,
    UnitNames,
    check_choice,
)
from schedc.core.baselines import BASELINE_NAMES, make_baseline
from schedc.core.costs import MemoryLimit, Profile
from schedc.core.ir import Schedule
from schedc.core.settings import RunSettings
from schedc.errors import ParameterError, SchedcError, literal
from schedc.errors import python_spelling as _python_spelling
from schedc.results import BaselineSchedules, Compiled, Report, Simulation

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from schedc.core.host_link import HostLink

__all__ = ["compile", "simulate", "validate", "baseline", "plot", "write_trace", "read_csv", "write_csv", "read_report",
           "count_profile", "with_framework", "BASELINES", "DEFAULT_MEMORY", "FRAMEWORK_COUNTS"]

PathLike = Union[str, "os.PathLike[str]"]

BASELINES: tuple[str, ...] = BASELINE_NAMES
"""The hand-made schedules :func:`baseline` builds, by canonical name."""

DEFAULT_MEMORY = "1p"
"""The memory limit :func:`compile` compiles for when given none (what 1F1B holds): the command
line also judges a CSV against it (``schedc simulate``, ``plot``, ``trace``) when ``--memory`` is
not given, so that "fits" means the same there."""


@_python_spelling
def compile(
    *,
    stages: int,
    microbatches: int,
    ranks: Optional[int] = None,
    placement: Placement = "loop",
    profile: Union[Profile, PathLike, None] = None,
    memory: Union[str, MemoryLimit] = DEFAULT_MEMORY,
    objective: Objective = "makespan",
    execution: Execution = "torch",
    time_limit: float = 60.0,
    solver: Solver = "auto",
    seed: int = 0,
    progress: Optional[Callable[[dict], None]] = None,
    budget: Budget = "time",
    offload: str = "none",
    host_link: Optional["HostLink"] = None,
    recompute_profile: Union[Profile, PathLike, None] = None,
) -> Compiled:
    """Compile the shortest schedule that fits the memory limit, with a lower bound and gap.

    Parameters
    ----------
    stages : int
        Pipeline stages N (a multiple of `ranks`).
    microbatches : int
        Microbatches M per training step.
    ranks : int, optional
        Ranks R; default N for ``loop`` placement, N/2 for ``v``.
    placement : {"loop", "v"} or sequence of int
        Stage to rank: ``loop`` (stage s on rank s % R), ``v`` (rank r holds r and 2R-1-r), or
        explicit (``placement[stage] = rank``).
    profile : Profile or path, optional
        Per-stage costs (a :class:`Profile` or a ``schedc.profile/v1`` file); default identical
        stages with F = I = W = 1 (``Profile.uniform(stages)``).
    memory : str or MemoryLimit
        Per-rank limit: ``Kp`` (K times what 1F1B holds), a byte size with static bytes
        (``40GiB``), or ``none``. Default ``1p``: fits wherever 1F1B fits.
    objective : {"makespan", "span"}
        What to minimize: the synchronized step (``makespan``) or the longest per-rank span.
    execution : {"torch", "ideal"}
        The execution model the times follow: torch's runtime (stage 0's backward all in W) or
        the zero-bubble paper's (the CLI's ``--runtime``).
    time_limit : float
        Seconds to search; the best schedule found by then is returned.
    solver : {"auto", "highs", "cbc", "cpsat"}
        ``auto``: CP-SAT (when installed), then the integer program; else one engine alone.
    seed : int
        Seed of the randomized parts (heuristic, CP-SAT).
    progress : callable, optional
        Called with ``{"elapsed", "best", "bound", "gap", "phase"}`` as the search goes.
    budget : {"time", "work"}
        What `time_limit` counts: wall-clock seconds, or work units that make the result the
        same on any machine however loaded (:data:`~schedc.choices.Budget`; the CLI's
        ``--budget``). The report's ``budget`` says which ran.
    offload : {"none", "auto"}
        ``auto``: the compiler may also send microbatches' activations to host memory and fetch
        them back (schedc.solver.offload; the CLI's ``--offload``), and returns the shortest
        schedule that then fits, never one slower than ``none``'s; the report adds
        ``memory_actions``, ``offload`` and ``assumes``, and its bound is the uncapped one.
    host_link : HostLink, optional
        The link offload uses (:class:`schedc.core.host_link.HostLink`; default 50 GB/s per
        direction, 10 us per copy, no host memory cap).
    recompute_profile : Profile or path, optional
        With ``offload="auto"``: the same stages' costs under full activation checkpointing (a
        profile ``schedc profile --ac full`` measures, or a plan or report whose
        ``offload.recompute_profile`` records them),
        so that the compiler may also recompute single microbatches (their backward then runs as
        B; schedc.solver.recompute_choice). The CLI's ``--recompute-profile``.

    Returns
    -------
    Compiled
        The schedule, its :class:`Simulation`, ``status`` (:class:`Status`), ``lower_bound``,
        ``gap``, the hand-made ``baselines`` under the same costs, and the ``report``.

    Raises
    ------
    SchedcError
        A bad argument (named), a memory limit too small for one microbatch per stage (with the
        smallest that works), or a missing solver.

    Examples
    --------
    >>> import schedc
    >>> res = schedc.compile(stages=4, microbatches=8, memory="1p", time_limit=5)
    >>> res.status, res.simulation.makespan, res.baselines["1f1b"].makespan
    (<Status.OPTIMAL: 'optimal'>, 27.0, 33.0)
    """
    from schedc.solver.compile import compile_schedule
    from schedc.solver.offload import compile_schedule_offloading

    _check_sizes(stages, microbatches, ranks)  # before a profile of that many stages is built
    placement = _check_placement(placement)
    check_choice("objective", objective, Objective)
    check_choice("execution", execution, Execution)
    check_choice("solver", solver, Solver)
    check_choice("budget", budget, Budget)
    _check_time_limit(time_limit)
    _check_progress(progress)
    _check_host_link(offload, host_link)
    how: dict[str, Any] = dict(n_ranks=ranks, placement=placement, profile=_profile(profile, stages),
                               memory=_memory(memory),
                               objective=objective, time_limit=float(time_limit),
                               solver=None if solver == "auto" else solver, progress=progress, seed=seed,
                               runtime=execution, budget=budget)
    checkpointed = _recompute_profile(recompute_profile, offload, how["profile"])
    if offload == "auto":
        res = compile_schedule_offloading(stages, microbatches, host_link, checkpointed=checkpointed, **how)
    else:
        res = compile_schedule(stages, microbatches, **how)
    report = Report.from_dict(res.report)
    return Compiled(
        schedule=res.schedule, simulation=Simulation.from_sim(res.sim), status=Status(res.status),
        lower_bound=res.lower_bound, gap=res.gap, solve_time=res.solve_time, objective=objective,
        execution=execution, memory=res.problem.memory, profile=res.problem.given_profile,
        baselines=MappingProxyType(dict(report.baselines)), warm_start=res.warm_start_source,
        interrupted=res.interrupted, report=report,
        baseline_schedules=BaselineSchedules(tuple(report.baselines), _baselines_of(res.problem)),
        budget=res.budget, memory_actions=tuple(res.report.get("memory_actions", ())))


def _recompute_profile(given: Any, offload: str, profile: Profile) -> Optional[Profile]:
    """The checkpointed stages' costs as the compiler times a recomputed microbatch with them: B
    whole (schedc.planning.ac.checkpointed_form against `profile`), or as given where a plan
    already recorded them so (no split backward)."""
    from schedc.planning.ac import checkpointed_form

    if given is None:
        return None
    if offload != "auto":
        raise ParameterError("recompute_profile", "{param} lets offload recompute single microbatches; give "
                                                  "{name:offload}auto with it")
    ck = _recorded_or_profile(given, profile.n_stages)
    if ck.n_stages != profile.n_stages:
        raise ParameterError("recompute_profile", f"{{param}} describes {ck.n_stages} stages but the profile "
                                                  f"{profile.n_stages}; give the same stages checkpointed")
    if (ck.assumes or {}).get("split_backward") is False:
        return ck
    return checkpointed_form(ck, profile)


def _recorded_or_profile(given: Any, n_stages: int) -> Profile:
    """`given` as a profile: a plan's or report's recorded checkpointed costs
    (``"offload"."recompute_profile"``) where the file is one, else as :func:`_profile` reads it."""
    from schedc.core.memory_actions import recorded_recompute
    from schedc.io.fileio import read_json

    if isinstance(given, (str, os.PathLike)):
        data = read_json(os.fspath(given), "a profile, or a plan or report that records one")
        recorded = recorded_recompute(data, os.fspath(given))
        if recorded is not None:
            return recorded
        if isinstance(data, dict) and data.get("format") == "schedc.report/v1":
            what = "plan" if "plan" in data else "compile report"
            raise ParameterError("recompute_profile", f"{{param}} {literal(os.fspath(given))} is a {what} that records "
                                                      f"no checkpointed costs (\"offload\".\"recompute_profile\": it "
                                                      f"recomputes no microbatch); give the same stages profiled with "
                                                      f"--ac full, or a plan or report that recomputes some")
    return _profile(given, n_stages)


def _check_host_link(offload: Any, host_link: Any) -> None:
    from schedc.core.host_link import HostLink
    from schedc.solver.offload import check_offload

    check_offload(offload)
    if host_link is not None and not isinstance(host_link, HostLink):
        raise ParameterError("host_link", f"{{param}} must be a schedc.core.host_link.HostLink, got "
                                          f"{type(host_link).__name__}")


def _baselines_of(problem) -> Callable[[], Mapping[str, Schedule]]:
    """The hand-made schedules of `problem` by name, built when first asked for: the result keeps
    the (small) problem, not the compile's graph, which held them."""

    def build() -> Mapping[str, Schedule]:
        from schedc.solver.engines.warm import build_baselines

        return MappingProxyType({name: sched for name, sched, _ in build_baselines(problem)})

    return build


@_python_spelling
def simulate(
    schedule: Schedule,
    *,
    profile: Union[Profile, PathLike, None] = None,
    memory: Union[str, MemoryLimit, None] = None,
    execution: Optional[Execution] = None,
    memory_actions: Optional[Sequence[Any]] = None,
    host_link: Optional["HostLink"] = None,
) -> Simulation:
    """Time every action of `schedule` and track each rank's memory.

    Every action starts as soon as its rank is free and its inputs have arrived (plus the
    boundary's communication time when they cross ranks); all ranks start at 0.

    Parameters
    ----------
    schedule : Schedule
        What each rank runs, in order (from :func:`read_csv`, :func:`baseline` or a compile).
    profile : Profile or path, optional
        The costs; default identical stages with F = I = W = 1.
    memory : str or MemoryLimit, optional
        The limit to judge ``fits`` against; default none.
    execution : {"torch", "ideal"}, optional
        The execution model; default the one `profile` follows, else torch's.
    memory_actions : list, optional
        Offloads to run with it (a report's ``"memory_actions"``, schedc.core.memory_actions),
        on the copy streams of `host_link` (default :class:`~schedc.core.host_link.HostLink`).

    Returns
    -------
    Simulation
        Makespan, span, bubble, peak memory per rank, ``fits``, every action's time.

    Raises
    ------
    SchedcError
        The profile has another stage count, an action waits for one no rank runs, or the
        ranks wait on each other in a circle (deadlock; the message says who waits for what).

    Examples
    --------
    >>> import schedc
    >>> sim = schedc.simulate(schedc.baseline("1f1b", stages=2, microbatches=4), memory="1p")
    >>> sim.makespan, sim.peak_memory, sim.fits
    (15.0, (2.0, 1.0), True)
    """
    from schedc.core.simulate import simulate as simulate_schedule

    _check_schedule("schedule", schedule)
    if execution is not None:
        check_choice("execution", execution, Execution)
    prof = _profile(profile, schedule.n_stages)
    mem = None if memory is None else _memory(memory)
    _check_host_link("none", host_link)
    return Simulation.from_sim(simulate_schedule(schedule, prof, mem, runtime=execution,
                                                 memory_actions=memory_actions or None, link=host_link))


@_python_spelling
def validate(
    schedule: Schedule,
    *,
    stages: Optional[int] = None,
    microbatches: Optional[int] = None,
    ranks: Optional[int] = None,
    placement: Optional[Placement] = None,
) -> None:
    """Check that torch's runtime can run `schedule`; raise on the first problem.

    Checks: every stage runs one forward and one backward (B, or I then W) per microbatch, each
    on the rank that holds its stage; no rank runs an action before one of its own that it
    needs; the ranks cannot wait on each other in a circle. Given expectations (`stages`,
    `microbatches`, `ranks`, `placement`) are checked too.

    Parameters
    ----------
    schedule : Schedule
        The schedule to check.
    stages, microbatches, ranks : int, optional
        What the schedule must have.
    placement : {"loop", "v"} or sequence of int, optional
        The placement it must use.

    Returns
    -------
    None

    Raises
    ------
    SchedcError
        The first problem (with the position of the action) and how many more were found.

    Examples
    --------
    >>> import schedc
    >>> schedc.validate(schedc.baseline("zb-v", stages=4, microbatches=4), placement="v")
    >>> schedc.validate(schedc.baseline("1f1b", stages=2, microbatches=4), microbatches=8)
    Traceback (most recent call last):
        ...
    schedc.errors.SchedcError: expected 8 microbatches, the schedule has 4
    """
    from schedc.core.validate import validate as validate_schedule

    _check_schedule("schedule", schedule)
    validate_schedule(schedule, n_stages=stages, n_microbatches=microbatches, n_ranks=ranks,
                      placement=None if placement is None else _check_placement(placement),
                      source=str(schedule.meta.get("source", "")))


@_python_spelling
def baseline(
    name: str,
    *,
    stages: int,
    microbatches: int,
    ranks: Optional[int] = None,
    placement: Optional[PlacementName] = None,
) -> Schedule:
    """A hand-made schedule (GPipe, 1F1B, ZB-H1, ZB-H2, interleaved 1F1B, ZB-V, DualPipeV, ...).

    Parameters
    ----------
    name : str
        One of :data:`BASELINES`; case, dashes and underscores are ignored, and torch's class
        names (``ScheduleInterleaved1F1B``, ``ZBVZeroBubble``) work too.
    stages : int
        Pipeline stages N.
    microbatches : int
        Microbatches M.
    ranks : int, optional
        Ranks R; default N for one-stage-per-rank schedules, N/2 for the others.
    placement : {"loop", "v"}, optional
        May only confirm the schedule's own placement.

    Returns
    -------
    Schedule

    Raises
    ------
    SchedcError
        An unknown name (with the known ones), or a shape the schedule does not exist for.

    Examples
    --------
    >>> import schedc
    >>> s = schedc.baseline("ZBVZeroBubble", stages=4, microbatches=4)
    >>> s.name, s.n_ranks, s.placement
    ('zb-v', 2, (0, 1, 1, 0))
    """
    if placement is not None:
        check_choice("placement", placement, PlacementName)
    _check_sizes(stages, microbatches, ranks)
    return make_baseline(name, stages, microbatches, n_ranks=ranks, placement=placement)


@_python_spelling
def plot(
    schedules: Union[Schedule, Sequence[Schedule]],
    *,
    profile: Union[Profile, PathLike, Sequence[Profile], None] = None,
    memory: Union[str, MemoryLimit, None] = None,
    titles: Optional[Sequence[str]] = None,
    execution: Optional[Execution] = None,
    path: Optional[PathLike] = None,
    memory_actions: Optional[Sequence[Any]] = None,
    host_link: Optional["HostLink"] = None,
) -> "Figure":
    """Gantt chart and memory curves of one or more schedules on a shared time axis.

    Parameters
    ----------
    schedules : Schedule or sequence of Schedule
        One panel each, top to bottom.
    profile : Profile, path or sequence of Profile, optional
        One profile for all, or one per schedule; default identical stages (F = I = W = 1).
    memory : str or MemoryLimit, optional
        Drawn as a dashed line per rank and judged in each title.
    titles : sequence of str, optional
        One per schedule; default the schedules' names.
    execution : {"torch", "ideal"}, optional
        The execution model; default the one each profile follows, else torch's.
    path : str or path, optional
        Also write the picture (``.png``, ``.svg`` or ``.pdf``), all-or-nothing.
    memory_actions, host_link : optional
        As :func:`simulate` takes them, for every schedule: each rank's copy streams are drawn
        under its Gantt row, recomputed microbatches hatched.

    Returns
    -------
    matplotlib.figure.Figure
        Rendered headless (never through pyplot).

    Raises
    ------
    SchedcError
        No schedules, counts that do not match, or an unknown picture format.

    Examples
    --------
    >>> import schedc
    >>> fig = schedc.plot(schedc.baseline("zb-h1", stages=2, microbatches=4), titles=["ZB-H1"])
    >>> len(fig.axes)  # a Gantt chart and a memory axes per schedule
    2
    """
    from schedc.show.plot import plot_schedules

    if execution is not None:
        check_choice("execution", execution, Execution)
    items = [schedules] if isinstance(schedules, Schedule) else list(schedules)
    for i, s in enumerate(items):
        _check_schedule(f"schedules[{i}]", s)
    if profile is None or isinstance(profile, (Profile, str, os.PathLike)):
        profiles = [_profile(profile, s.n_stages) for s in items]
    else:
        profiles = list(profile)
        if len(profiles) != len(items):
            raise SchedcError(f"profile: {len(items)} schedules but {len(profiles)} profiles; give one, or one "
                              f"per schedule")
        profiles = [_profile(p, s.n_stages) for p, s in zip(profiles, items)]
    profiles = [p.executed(execution) for p in profiles]
    _check_host_link("none", host_link)
    return plot_schedules(items, profiles, None if memory is None else _memory(memory), titles=titles,
                          path=None if path is None else os.fspath(path),
                          memory_actions=memory_actions or None, link=host_link)


@_python_spelling
def write_trace(
    schedule: Schedule,
    path: PathLike,
    *,
    profile: Union[Profile, PathLike, None] = None,
    memory: Union[str, MemoryLimit, None] = None,
    execution: Optional[Execution] = None,
    memory_actions: Optional[Sequence[Any]] = None,
    host_link: Optional["HostLink"] = None,
) -> dict[str, Any]:
    """Write a Chrome trace of `schedule` (Perfetto, ``chrome://tracing``) as JSON: one process
    per rank, one slice per action, and each rank's held memory as a counter, timed as
    :func:`simulate` times it. Written all-or-nothing.

    Parameters
    ----------
    schedule : Schedule
        The schedule.
    path : str or path
        The trace file.
    profile : Profile or path, optional
        The costs; default identical stages with F = I = W = 1. One second of the profile is one
        second of the trace.
    memory : str or MemoryLimit, optional
        The limit the simulation judges against; default none.
    execution : {"torch", "ideal"}, optional
        The execution model; default the one `profile` follows, else torch's.
    memory_actions, host_link : optional
        As :func:`simulate` takes them: each rank's copy streams become two threads of their own.

    Returns
    -------
    dict
        The trace as written (``{"traceEvents": [...], ...}``).

    Raises
    ------
    SchedcError
        As :func:`simulate`.
    OSError
        The place cannot be written.

    Examples
    --------
    >>> import os, schedc, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "trace.json")
    >>> t = schedc.write_trace(schedc.baseline("1f1b", stages=2, microbatches=2), path)
    >>> sum(1 for e in t["traceEvents"] if e["ph"] == "X")  # F and B of 2 microbatches on 2 stages
    8
    """
    from schedc.show.trace import write_trace as write

    _check_schedule("schedule", schedule)
    if execution is not None:
        check_choice("execution", execution, Execution)
    _check_path("path", path)
    if os.path.splitext(os.fspath(path))[1].lower() == ".csv":  # as `schedc trace -o` refuses it
        raise SchedcError(f"path {path}: a Chrome trace is JSON, and a .csv name is a schedule's; give a .json name")
    prof = _profile(profile, schedule.n_stages).executed(execution)
    _check_host_link("none", host_link)
    return write(schedule, prof, os.fspath(path), None if memory is None else _memory(memory),
                 memory_actions=memory_actions or None, link=host_link)


@_python_spelling
def count_profile(
    model: Union[PathLike, Mapping[str, Any]],
    *,
    seq: Optional[int] = None,
    microbatch_size: Optional[int] = None,
    dtype: Optional[str] = None,
    activation_checkpoint: Union[str, Sequence[str], None] = None,
    impl: Optional[Implementation] = None,
    device: Optional[CountedDevice] = None,
    optimizer: Optional[str] = None,
    optimizer_bytes_per_param: Optional[float] = None,
    param_dtype: Optional[str] = None,
    dp_shard: Optional[int] = None,
    tp: Optional[int] = None,
    reserve_bytes: Optional[float] = None,
    flops_per_second: Optional[float] = None,
    memory_bandwidth: Optional[float] = None,
    bandwidth: Optional[float] = None,
    latency: Optional[float] = None,
    names: Optional[UnitNames] = None,
    grad_dtype: Optional[str] = None,
    optimizer_dtype: Optional[str] = None,
    framework: Optional[TargetFramework] = None,
    tp_bandwidth: Optional[float] = None,
    tp_latency: Optional[float] = None,
    settings: Optional[RunSettings] = None,
    calibrate: Union[Profile, PathLike, None] = None,
    gpu: Optional[str] = None,
) -> Profile:
    """The per-unit profile of a decoder counted from arithmetic: no GPU, nothing downloaded.

    Units are the embedding, each layer, and the final norm + head + loss, each with its module
    names, so that :func:`schedc.plan` can choose a partition (``Profile.merge`` gives any
    contiguous one). Times come from FLOPs over `flops_per_second` (and bytes over
    `memory_bandwidth` for the embedding); memory from the tensors the kernels save, the
    parameters, gradients and optimizer state (method: :mod:`schedc.model_costs`). What the run
    must be told to match is recorded in the profile's ``assumes``. The CLI's ``schedc profile
    --config``/``--flops``.

    Parameters
    ----------
    model : path or mapping
        A Hugging Face ``config.json`` (read, never downloaded), or the shape as keywords:
        ``layers``, ``hidden``, ``vocab`` (needed), ``heads``, ``kv_heads``, ``head_dim``,
        ``ffn_hidden``, ``mlp`` (``swiglu`` or ``gelu``), ``tied_embeddings``, ...
    seq : int
        Tokens per sequence.
    microbatch_size, dtype, activation_checkpoint, impl, device : optional
        The run (see below).
    optimizer, optimizer_bytes_per_param, param_dtype, dp_shard, tp, reserve_bytes : optional
        What each rank holds (see below).
    flops_per_second, memory_bandwidth, bandwidth, latency, names : optional
        The device, the link and the units' module names. All these settings are
        :func:`schedc.model_costs.unit_profile`'s; one left out
        (None) takes its default there: 1 sequence per microbatch, the config's dtype (else
        bfloat16), no activation checkpointing (``"light"``, ``"selective"``, ``"full"``, or one mode
        per layer), the framework of `names` (:data:`~schedc.choices.Implementation`), CUDA's kernels
        (:data:`~schedc.choices.CountedDevice`), AdamW with fp32 master weights, no sharding
        (`dp_shard` FSDP degree, `tp` tensor-parallel degree), CUDA's measured reserve, an H100 at
        about 40% (400e12 FLOP/s), 2 TB/s memory, a 40 GB/s link with no latency, and
        torchtitan's module names (:data:`~schedc.choices.UnitNames`).
    grad_dtype, optimizer_dtype : optional
        The gradients' and optimizer states' dtypes (default float32).
    tp_bandwidth, tp_latency : optional
        A tensor-parallel collective's bandwidth within a node (B/s, default 450e9) and its
        latency (s, default 10e-6).
    settings : RunSettings, optional
        The run as one :class:`schedc.core.settings.RunSettings` (every setting above, `seq` and
        `framework` included); a keyword given beside it replaces its field. The profile's
        ``assumes`` is recorded from the one object so built.
    calibrate : Profile or path, optional
        A measured per-unit profile (``schedc profile --units --model ...``) of this model truncated
        to a few layers, at the same `seq`, `microbatch_size` and `dtype`: every unit's F, I and W
        are scaled per unit kind (embedding, layer, head) and action by measured over counted
        seconds of the measured model's own count; memory stays as counted; the factors and the
        file's sha256 go into ``assumes["calibrated"]`` (:mod:`schedc.model_costs.calibration`).
    gpu : str, optional
        A card of :data:`schedc.core.device_rates.RATES` (``"h100"``, ``"h200"``): F, I and W are
        priced from their operations at its per-op rates (:mod:`schedc.model_costs.timing`)
        instead of at `flops_per_second`; ``assumes["time_model"]`` records which. An MoE model,
        a dtype other than bfloat16/float16 or CPU kernels, for which the table has no measured
        rate, are refused.
    framework : {"schedc", "torchtitan", "nemo"}
        The framework that will run the plan, whose memory the count follows
        (:data:`FRAMEWORK_COUNTS`): torchtitan 0.3.0 and NeMo AutoModel 0.7.0 wrap every block in
        FSDP2 at data-parallel shard degree 1 too, which under torch's pipelining holds the
        stage's weights again in the compute dtype and its gradients unsharded all step
        (``unit_profile(fsdp=True)``), and each runs its own model code (torchtitan's, or Hugging
        Face transformers' for NeMo: the default `names`, which sets `impl`). ``"schedc"``
        (default): schedc's runtime, plain torch modules, no FSDP2 unless `dp_shard` > 1: the count
        schedc has always made. Recorded in ``assumes["framework"]``.

    Returns
    -------
    Profile
        One stage per unit, in seconds and bytes.

    Raises
    ------
    SchedcError
        An unreadable config (file and field named), an architecture schedc does not model, or
        a setting out of range (named).

    Examples
    --------
    >>> import schedc
    >>> p = schedc.count_profile({"layers": 2, "hidden": 64, "vocab": 100, "heads": 4}, seq=8)
    >>> [unit.modules for unit in p.stages]
    [['tok_embeddings'], ['layers.0'], ['layers.1'], ['norm', 'lm_head']]
    """
    from schedc.model_costs import UNIT_NAMES
    from schedc.model_costs.profile import count_units
    from schedc.model_costs.shape import OWN_CODE

    if settings is not None and not isinstance(settings, RunSettings):
        raise SchedcError(f"settings: expected a schedc.core.settings.RunSettings, got {type(settings).__name__}")
    # the keywords over the object (None: the object's, else RunSettings' defaults)
    run = (settings or RunSettings()).but(
        seq=seq, microbatch_size=microbatch_size, dtype=dtype, activation_checkpoint=activation_checkpoint, impl=impl,
        device=device, optimizer=optimizer, optimizer_bytes_per_param=optimizer_bytes_per_param,
        param_dtype=param_dtype, dp_shard=dp_shard, tp=tp, reserve_bytes=reserve_bytes,
        flops_per_second=flops_per_second, memory_bandwidth=memory_bandwidth, bandwidth=bandwidth, latency=latency,
        names=names, grad_dtype=grad_dtype, optimizer_dtype=optimizer_dtype, framework=framework,
        tp_bandwidth=tp_bandwidth, tp_latency=tp_latency, gpu=gpu)
    given = settings.given() if settings is not None else {}
    impl = impl if impl is not None else given.get("impl")
    names = names if names is not None else given.get("names")
    framework = run.framework
    # names: every vocabulary a registered framework speaks (schedc.frameworks.register adds its own)
    for parameter, value, choices in (("impl", impl, Implementation), ("device", device, CountedDevice),
                                      ("names", names, tuple(UNIT_NAMES))):
        if value is not None:
            check_choice(parameter, value, choices)
    target = _check_framework(framework)
    fsdp, framework_names = FRAMEWORK_COUNTS[target]
    framework_impl = _framework_code(target)
    for parameter, value, runs in (("names", names, framework_names), ("impl", impl, framework_impl)):
        if runs is not None and value is not None and value != runs:
            raise ParameterError(parameter, f"{{param}} {literal(ascii(value))} contradicts {{param:framework}} "
                                            f"{framework!r}, which runs {runs!r} model code; leave "
                                            f"{{param}} out")
    # what the framework runs, where the caller left it to the framework
    run = run.but(impl=framework_impl if impl is None else None, names=framework_names if names is None else None,
                  fsdp=fsdp if run.fsdp is None else None)
    if isinstance(model, (str, os.PathLike)):
        counted = count_units(os.fspath(model), run)
    elif not isinstance(model, Mapping):
        raise SchedcError(f"model: expected the path of a config.json or the shape as a dict (layers, hidden, "
                          f"vocab, ...); got {type(model).__name__}")
    else:
        counted = count_units(None, run, **model)
    refused = OWN_CODE.get((target, (counted.assumes or {}).get("model_type")))
    if refused:
        raise ParameterError("framework", f"{refused}; measure the model (schedc profile --units --model "
                                          f"MODULE:FUNCTION) or count it for another {{param}}")
    if calibrate is not None:
        from schedc.model_costs.calibration import calibrate as calibrated

        if isinstance(model, (str, os.PathLike)):
            counted = calibrated(counted, calibrate, os.fspath(model), run)
        else:
            counted = calibrated(counted, calibrate, None, run, **model)
    return with_framework(counted, framework)


TargetFramework = str
"""What a plan is counted for and launched with (``schedc plan --for``): ``"schedc"`` (its own
runtime) or the name of a registered framework (:data:`schedc.frameworks.REGISTRY`: ``"torchtitan"``,
``"nemo"``), optionally with ``==VERSION`` where its flags depend on its release (``"torchtitan==main"``)."""


class _FrameworkCounts(Mapping):
    """:data:`FRAMEWORK_COUNTS`: read from the registry each time, so that a framework registered
    later is counted too."""

    def _table(self) -> dict:
        from schedc.frameworks import REGISTRY, SCHEDC

        # schedc's runtime: plain torch modules; FSDP2 only where dp_shard > 1 (unit_profile's default)
        return {SCHEDC: (None, None), **{name: (f.fsdp, f.vocabulary) for name, f in REGISTRY.items()}}

    def __getitem__(self, key):
        return self._table()[key]

    def __iter__(self):
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


FRAMEWORK_COUNTS: Mapping[str, tuple[Optional[bool], Optional[str]]] = _FrameworkCounts()
"""Per framework: ``fsdp`` for :func:`schedc.model_costs.unit_profile` (whether FSDP2 wraps every
block at data-parallel shard degree 1; None: only when sharding) and the module names, so the model
code, it runs (None: unit_profile's default); each framework's record says both
(``Framework.fsdp``, ``Framework.vocabulary``)."""


def _framework_code(name: str) -> Optional[str]:
    """Whose model code framework `name` runs (``Framework.implementation``; None: schedc's runtime,
    unit_profile's default)."""
    from schedc.frameworks import REGISTRY

    f = REGISTRY.get(name)
    return None if f is None else f.implementation or f.vocabulary


def _check_framework(framework: Any) -> str:
    """The name of `framework` (:data:`TargetFramework`, a version after ``==`` dropped) when schedc
    counts for it; else one line naming it."""
    from schedc.frameworks import parse_target

    return parse_target(framework)[0]


@_python_spelling
def with_framework(profile: Profile, framework: TargetFramework) -> Profile:
    """`profile` with ``assumes["framework"]`` set: the framework a plan of it is for (and
    ``assumes["framework_version"]`` for ``"NAME==VERSION"``, whose flags the hand-off prints). For a
    measured profile this only names the target (it holds what it measured); the framework's
    hand-off then warns about what the profile did not count (FSDP2's unsharded bytes: its
    ``"fsdp"`` assumption). Cost: a copy of the profile's header."""
    from schedc.frameworks import parse_target

    if not isinstance(profile, Profile):
        raise SchedcError(f"profile: expected a Profile, got {type(profile).__name__}")
    name, version = parse_target(framework)
    assumes = {k: v for k, v in (profile.assumes or {}).items() if k != "framework_version"}
    assumes["framework"] = name
    if version is not None:
        assumes["framework_version"] = version
    return profile.model_copy(update={"assumes": assumes})


def read_csv(path: PathLike, *, microbatches: Optional[int] = None) -> Schedule:
    """Read a schedule CSV in torch's notation (schedc's or torch's ``_dump_csv``).

    One row per rank, cells ``<stage><kind><microbatch>`` (``3F0``, ``0I7``, ``5W2``), empty =
    idle. The reader is strict where torch's is lax: ``0F0x`` is an error naming row and column.

    Parameters
    ----------
    path : str or path
        The CSV file.
    microbatches : int, optional
        The microbatch count; default one more than the largest microbatch index.

    Returns
    -------
    Schedule
        Placement inferred from the rank each stage appears on. Completeness is
        :func:`validate`'s job.

    Raises
    ------
    SchedcError
        A missing or unreadable file, or a cell that is not an action (row and column named).

    Examples
    --------
    >>> import os, schedc, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "1f1b.csv")
    >>> schedc.write_csv(schedc.baseline("1f1b", stages=2, microbatches=2), path)
    >>> print(open(path).read(), end="")
    0F0,0F1,0B0,0B1
    1F0,1B0,1F1,1B1
    >>> schedc.read_csv(path).n_ranks
    2
    """
    from schedc.io.csvio import read_csv as read_schedule

    _check_path("path", path)
    if microbatches is not None:
        _check_count("microbatches", microbatches, flag="--mb")
    return read_schedule(path, n_microbatches=microbatches)


def write_csv(schedule: Schedule, path: PathLike, *, report: Union[Report, Mapping[str, Any], None] = None) -> None:
    """Write `schedule` as torch's CSV and, when given, `report` beside it as ``NAME.json``.

    Both files are written all-or-nothing: to temporary files first, renamed only when all are
    written, so a failure leaves neither. The report records the CSV's SHA-256, so
    :func:`read_report` refuses a report whose CSV was rewritten since.

    Parameters
    ----------
    schedule : Schedule
        The schedule.
    path : str or path
        The CSV file; a report goes to the same name with ``.json``.
    report : Report or dict, optional
        A compile's report (``Compiled.report``).

    Returns
    -------
    None

    Raises
    ------
    SchedcError
        The report has no JSON form.
    OSError
        The place cannot be written.

    Examples
    --------
    >>> import os, schedc, tempfile
    >>> res = schedc.compile(stages=2, microbatches=4, time_limit=2)
    >>> path = os.path.join(tempfile.mkdtemp(), "s.csv")
    >>> schedc.write_csv(res.schedule, path, report=res.report)
    >>> schedc.read_report(path).status
    <Status.OPTIMAL: 'optimal'>
    """
    from schedc.io import csvio
    from schedc.io.fileio import write_all

    _check_schedule("schedule", schedule)
    _check_path("path", path)
    if report is None:
        write_all({path: csvio.to_csv_text(schedule).encode()})
    else:  # the report records the CSV's hash, so it is never read as another CSV's
        data = report.to_dict() if isinstance(report, Report) else dict(report)
        data.pop(csvio.CSV_HASH_KEY, None)
        write_all(csvio.schedule_files(schedule, data, path))


def read_report(csv_path: PathLike) -> Report:
    """The report beside a compiled CSV (``NAME.json`` next to ``NAME.csv``), validated.

    Parameters
    ----------
    csv_path : str or path
        The CSV (or the report itself).

    Returns
    -------
    Report

    Raises
    ------
    SchedcError
        No report, not JSON, or a field of the wrong type (named).

    Examples
    --------
    See :func:`write_csv`.
    """
    from schedc.io.csvio import CSV_HASH_KEY, report_path
    from schedc.io.csvio import read_report as read_json

    _check_path("csv_path", csv_path)
    data = read_json(csv_path)  # checks the CSV's hash the report records, then drops it:
    data.pop(CSV_HASH_KEY, None)  # it pairs the files, it is not part of the compile's report
    return Report.from_dict(data, source=str(report_path(csv_path)))


# ---------------------------------------------------------------- argument checks


def _check_count(parameter: str, value: Any, flag: str = "", least: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ParameterError(parameter, f"must be an integer >= 1; got {literal(repr(value))}", flag=flag)


def _check_sizes(stages: Any, microbatches: Any, ranks: Any) -> None:
    """Counts that are integers >= 1 and within what schedc reads back (schedc.core.limits)."""
    from schedc.core import limits

    least = -2**63  # a small or negative integer: schedc.core.limits says what the least is
    _check_count("stages", stages, least=least)
    _check_count("microbatches", microbatches, flag="--mb", least=least)
    if ranks is not None:
        _check_count("ranks", ranks, least=least)
    limits.check_schedule_size(stages, microbatches, ranks)


def _check_time_limit(time_limit: Any) -> None:
    """A finite number of seconds > 0, and no shorter than the least compile takes."""
    from schedc.core.limits import MIN_TIME_LIMIT

    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not 0 < time_limit < math.inf:
        raise ParameterError("time_limit", f"must be a finite number of seconds > 0 (e.g. {{name}}60, or "
                                           f"{{name}}3600 for a long search); got {literal(repr(time_limit))}")
    if time_limit < MIN_TIME_LIMIT:  # less than building the least problem takes: nothing is searched
        raise ParameterError("time_limit", f"{time_limit:g} s is shorter than any compile takes; give "
                                           f"{{name}}{MIN_TIME_LIMIT:g} or more (1 for a quick answer)")


def _check_path(parameter: str, value: Any) -> None:
    if not isinstance(value, (str, os.PathLike)):
        raise SchedcError(f"{parameter}: expected a file name (str or pathlib.Path); got {type(value).__name__}")


def _check_progress(progress: Any) -> None:
    # called only once the search runs: a value that is not a function would fail there, mid-search
    if progress is not None and not callable(progress):
        raise ParameterError("progress", f"must be a function (called with each step's record) or None; got "
                                         f"{type(progress).__name__}")


def _check_schedule(parameter: str, value: Any) -> None:
    if not isinstance(value, Schedule):
        raise SchedcError(f"{parameter}: expected a schedc.Schedule (from schedc.read_csv, schedc.baseline or "
                          f"schedc.compile(...).schedule); got {type(value).__name__}")


def _check_placement(placement: Any) -> Placement:
    if isinstance(placement, str):
        return check_choice("placement", placement, PlacementName)
    if not isinstance(placement, Sequence) or not all(isinstance(r, int) and r >= 0 for r in placement):
        raise SchedcError(f"placement: must be 'loop', 'v' or one rank (int >= 0) per stage; got {placement!r}")
    return tuple(placement)


def _profile(profile: Any, n_stages: int) -> Profile:
    """The given profile, one read from a file, or identical stages (F = I = W = 1)."""
    if profile is None:
        return Profile.uniform(n_stages)
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, (str, os.PathLike)):
        return Profile.load(os.fspath(profile))
    raise SchedcError(f"profile: expected a schedc.Profile or the path of a profile file; "
                      f"got {type(profile).__name__}")


def _memory(memory: Any) -> MemoryLimit:
    if isinstance(memory, MemoryLimit):
        return memory
    if not isinstance(memory, str):
        raise SchedcError(f"memory: expected Kp (e.g. '1.5p'), a size (e.g. '40GiB'), 'none' or a "
                          f"schedc.MemoryLimit; got {memory!r}")
    try:
        return MemoryLimit.parse(memory)
    except ParameterError as e:  # the parser's error names the CLI flag; here the caller passed `memory=`
        raise e.for_python() from None
