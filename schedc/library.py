"""The schedule library: precompiled schedules for common set-ups, rebuilt and checked by one command.

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
start (:func:`default_budget`: 746 s for the 64 defaults; most end early with a proof, ~5 minutes
measured on a busy 2-core machine); checking is a validation, a re-simulation (of the file and
of the baselines) and torch's schedule checks per file: about 15-25 s for the 64 defaults.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence, Union

from schedc.costs import DEFAULT_RUNTIME, MemoryLimit, Profile, StageCost, format_bytes
from schedc.errors import SchedcError

PathLike = Union[str, Path]

INDEX_NAME = "README.md"
ENV_VAR = "SCHEDC_LIBRARY"
LIBRARY_SEED = 0
LIBRARY_OBJECTIVE = "makespan"
# Time limit (seconds) of the largest default set-up; smaller ones get proportionally less.
DEFAULT_MAX_TIME_LIMIT = 60.0
_REFERENCE_ACTIONS = 32 * 64 * 3  # actions of the largest default set-up (16 ranks, V, 64 mb)
_MIN_TIME_LIMIT = 2.0
_REL_TOL = 1e-9

BUILD_COMMAND = "schedc library build schedules/"

# ---------------------------------------------------------------- the transformer-like profile

# Sources of the formulas in transformer_profile (cited in its docstring).
_NOTES = [
    "per-layer forward FLOPs 2bs(4h^2 + 2hf) + 4bs^2h (linears + attention core; Narayanan et al. 2021, "
    "'Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM', sec. 5.1: 24bsh^2 + 4bs^2h "
    "for f = 4h)",
    "backward: I = linears again + attention core twice, W = linears again, the attention core has no weights; "
    "LM head F = I = W = 2bshV",
    "activation bytes per layer 18bsh + 4bsf (= 34bsh for f = 4h; Korthikanti et al. 2022, 'Reducing Activation "
    "Recomputation in Large Transformer Models', eq. 1 without the 5as^2b score term, i.e. flash attention); "
    "LM head: logits 6bsV (bf16 + fp32 for the loss) + 4bsh",
    "held between I and W: everything (torch's split backward keeps the graph until W; measured by "
    "benchmarks/split_backward_memory.py); with held='paper' per layer 16bsh + 4bsf (inputs of the linears + "
    "gradients of their outputs; = 32bsh for f = 4h, the zero-bubble paper's M_W, Qi et al. 2023, table 1), "
    "LM head 2bsh + 2bsV",
    "static bytes 18 per parameter (bf16 weights 2 + fp32 gradients 4 + fp32 master weights 4 + Adam moments 8)",
]


def _split_layers(layers: int, n_stages: int) -> list[int]:
    """As even as possible; the first stages take the extra layers (the last already has the head)."""
    base, extra = divmod(layers, n_stages)
    return [base + (1 if s < extra else 0) for s in range(n_stages)]


def transformer_profile(
    n_stages: int,
    layers: int = 32,
    hidden: int = 4096,
    vocab: int = 128256,
    seq: int = 4096,
    microbatch_size: int = 1,
    ffn_hidden: Optional[int] = None,
    flops_per_second: float = 400e12,
    bandwidth: float = 40e9,
    tied_embeddings: bool = False,
    held: str = "torch",
) -> Profile:
    """Costs of a GPT/Llama-like decoder split into `n_stages` pipeline stages, from arithmetic.

    The model: `layers` transformer layers (hidden h, FFN width f = `ffn_hidden` or 4h, full
    multi-head attention), a token embedding on the first stage and the final norm + LM head +
    cross-entropy loss on the last; layers are split as evenly as possible (earlier stages take
    the remainder), so the last stage is the heaviest. The defaults are Llama-3-8B's depth,
    width and vocabulary with a GPT-style MLP (about 7.5 B parameters), sequence 4096, one
    sequence per microbatch, bf16.

    Per layer, with b = `microbatch_size`, s = `seq`:

    - forward FLOPs ``2bs(4h^2 + 2hf) + 4bs^2h`` (= 24bsh^2 + 4bs^2h for f = 4h; Narayanan et al.
      2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
      sec. 5.1). Backward for inputs (I) repeats the linears and doubles the attention core;
      backward for weights (W) repeats the linears only (the attention core has no weights), so
      with the defaults I = 1.14 F and W = 0.86 F.
    - activation bytes ``18bsh + 4bsf`` (= 34bsh; Korthikanti et al. 2022, "Reducing Activation
      Recomputation in Large Transformer Models", eq. 1 without the 5as^2b attention-score term,
      which flash attention does not store).
    - bytes held between I and W: with `held` = ``"torch"`` (default) the whole activation, since
      torch's split backward (``stage_backward_input`` with ``retain_graph=True``) keeps the graph
      until W; with ``"paper"`` ``16bsh + 4bsf`` (= 32bsh: the inputs of the linear layers plus
      the gradients of their outputs, which W needs; the zero-bubble paper's M_W, Qi et al. 2023,
      "Zero Bubble Pipeline Parallelism", table 1), what a runtime that frees the rest could reach.
    - parameters ``4h^2 + 2hf``; static bytes 18 per parameter (bf16 weights, fp32 gradients,
      fp32 master weights and two fp32 Adam moments; Rajbhandari et al. 2020, ZeRO, count 16 for
      fp16 weights and gradients, fp32 gradients add 2).

    LM head (last stage): F = I = W = ``2bshV`` FLOPs; activation ``6bsV`` (bf16 logits plus the
    fp32 copy the loss works on) + ``4bsh`` (inputs of the final norm and of the head); held
    between I and W ``2bsh + 2bsV`` (its input and the logits' gradient); parameters hV. The
    embedding (first stage) costs no FLOPs worth counting and hV parameters unless
    `tied_embeddings`.

    Times are FLOPs / `flops_per_second` (default 400e12: an H100's 989 TFLOP/s of dense bf16 at
    about 40 % utilisation); the communication per stage boundary is one bf16 activation,
    ``2bsh`` bytes, over `bandwidth` bytes/s (default 40e9: a 400 Gb/s NIC at 80 %).
    """
    if n_stages < 1:
        raise SchedcError(f"transformer_profile: n_stages must be >= 1, got {n_stages}")
    if layers < n_stages:
        raise SchedcError(f"transformer_profile: {layers} layers cannot fill {n_stages} stages (need >= 1 layer "
                          "per stage); use more layers or fewer stages")
    for name, value in (("hidden", hidden), ("vocab", vocab), ("seq", seq), ("microbatch_size", microbatch_size)):
        if value < 1:
            raise SchedcError(f"transformer_profile: {name} must be >= 1, got {value}")
    if not flops_per_second > 0 or not bandwidth > 0:
        raise SchedcError("transformer_profile: flops_per_second and bandwidth must be > 0")
    if held not in ("torch", "paper"):
        raise SchedcError(f"transformer_profile: held must be 'torch' or 'paper', got {held!r}")
    h, s, b, V = float(hidden), float(seq), float(microbatch_size), float(vocab)
    f = float(ffn_hidden if ffn_hidden is not None else 4 * hidden)

    linear = 2 * b * s * (4 * h * h + 2 * h * f)
    attention = 4 * b * s * s * h
    layer_f, layer_i, layer_w = linear + attention, linear + 2 * attention, linear
    layer_act = 18 * b * s * h + 4 * b * s * f
    layer_held = 16 * b * s * h + 4 * b * s * f
    layer_params = 4 * h * h + 2 * h * f
    head = 2 * b * s * h * V
    head_act = 6 * b * s * V + 4 * b * s * h
    head_held = 2 * b * s * h + 2 * b * s * V

    stages = []
    counts = _split_layers(layers, n_stages)
    for st, n in enumerate(counts):
        fl, il, wl = n * layer_f, n * layer_i, n * layer_w
        act, kept, params = n * layer_act, n * layer_held, n * layer_params
        if st == 0 and not tied_embeddings:
            params += V * h
        if st == n_stages - 1:
            fl, il, wl = fl + head, il + head, wl + head
            act, kept, params = act + head_act, kept + head_held, params + V * h
        stages.append(StageCost(
            forward=fl / flops_per_second,
            backward_input=il / flops_per_second,
            backward_weight=wl / flops_per_second,
            activation_bytes=act,
            weight_grad_bytes=act if held == "torch" else kept,
            static_bytes=18 * params,
        ))
    comm = 2 * b * s * h / bandwidth
    return Profile(
        stages=stages,
        comm=comm,
        device=f"arithmetic model: {flops_per_second / 1e12:g} TFLOP/s effective, {bandwidth / 1e9:g} GB/s per link",
        model=(f"transformer: {layers} layers, hidden {hidden}, ffn {int(f)}, vocab {vocab}, seq {seq}"
               + (", tied embeddings" if tied_embeddings else "") + f"; layers per stage {counts}"),
        microbatch_size=microbatch_size,
        dtype="bfloat16",
        notes=list(_NOTES),
    )


# ---------------------------------------------------------------- set-ups and their names

COSTS = ("uniform", "transformer")
PLACEMENTS = ("loop", "v")
_NAME_RE = re.compile(r"r(\d+)_mb(\d+)_mem(\d+(?:\.\d+)?)p_(loop|v)_(uniform|transformer)")


@dataclass(frozen=True)
class Setup:
    """One library entry: `ranks`, microbatches `mb`, `memory` ('1p', '2p', ...), `placement`
    ('loop': one stage per rank; 'v': two stages per rank in a V), `costs` ('uniform' or
    'transformer')."""

    ranks: int
    mb: int
    memory: str = "1p"
    placement: str = "loop"
    costs: str = "uniform"

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.mb < 1:
            raise SchedcError(f"library set-up: ranks and mb must be >= 1, got ranks={self.ranks} mb={self.mb}")
        if self.placement not in PLACEMENTS:
            raise SchedcError(f"library set-up: placement must be loop or v, got {self.placement!r}")
        if self.costs not in COSTS:
            raise SchedcError(f"library set-up: costs must be uniform or transformer, got {self.costs!r}")
        limit = MemoryLimit.parse(self.memory)
        if limit.kind != "relative":
            raise SchedcError(f"library set-up: memory must be Kp (e.g. 1p, 2p), got {self.memory!r}")
        object.__setattr__(self, "memory", str(limit))

    @property
    def stages_per_rank(self) -> int:
        return 2 if self.placement == "v" else 1

    @property
    def stages(self) -> int:
        return self.ranks * self.stages_per_rank

    @property
    def name(self) -> str:
        return f"r{self.ranks}_mb{self.mb}_mem{self.memory}_{self.placement}_{self.costs}"

    @property
    def n_actions(self) -> int:
        return 3 * self.stages * self.mb

    def profile(self) -> Profile:
        if self.costs == "uniform":
            return Profile.uniform(self.stages)
        return transformer_profile(self.stages)

    def sort_key(self) -> tuple:
        return (COSTS.index(self.costs), PLACEMENTS.index(self.placement), self.ranks, self.mb,
                MemoryLimit.parse(self.memory).value)

    @classmethod
    def parse(cls, name: str) -> "Setup":
        """'r8_mb16_mem1p_v_uniform' (a trailing .csv/.json is ignored) -> Setup."""
        stem = Path(str(name)).name
        for ext in (".csv", ".json"):
            if stem.endswith(ext):
                stem = stem[: -len(ext)]
        m = _NAME_RE.fullmatch(stem)
        if not m:
            raise SchedcError(f"{name!r} is not a library set-up name; names look like r8_mb16_mem1p_v_uniform "
                              "(r{ranks}_mb{microbatches}_mem{K}p_{loop|v}_{uniform|transformer})")
        setup = cls(int(m.group(1)), int(m.group(2)), m.group(3) + "p", m.group(4), m.group(5))
        if setup.name != stem:
            raise SchedcError(f"{name!r}: write the set-up as {setup.name!r} (canonical spelling)")
        return setup


def default_setups() -> list[Setup]:
    """Ranks 2, 4, 8, 16; microbatches 2R and 4R; memory 1p and 2p; loop and V; uniform and
    transformer: 64 set-ups (8 ranks x 16 microbatches is the 2R case of 8 ranks)."""
    out = []
    for costs in COSTS:
        for placement in PLACEMENTS:
            for ranks in (2, 4, 8, 16):
                for mb in (2 * ranks, 4 * ranks):
                    for memory in ("1p", "2p"):
                        out.append(Setup(ranks, mb, memory, placement, costs))
    return out


DEFAULT_SETUPS: tuple[Setup, ...] = tuple(default_setups())


def time_limit_for(setup: Setup, max_time_limit: float = DEFAULT_MAX_TIME_LIMIT) -> float:
    """Seconds for one set-up: proportional to its number of actions, `max_time_limit` for the
    largest default set-up (16 ranks, V, 64 microbatches), at least 2 s, at most `max_time_limit`."""
    scaled = max_time_limit * setup.n_actions / _REFERENCE_ACTIONS
    return round(min(max_time_limit, max(min(_MIN_TIME_LIMIT, max_time_limit), scaled)), 3)


def default_budget(setups: Iterable[Setup] = DEFAULT_SETUPS, max_time_limit: float = DEFAULT_MAX_TIME_LIMIT) -> float:
    """Upper bound on the build's solver time (seconds): the sum of the time limits."""
    return sum(time_limit_for(s, max_time_limit) for s in setups)


def select(setups: Iterable[Setup], only: Optional[str] = None) -> list[Setup]:
    """Set-ups whose name matches the glob `only` (comma-separated globs allowed)."""
    setups = list(setups)
    if not only:
        return setups
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    chosen = [s for s in setups if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]
    if not chosen:
        example = setups[0].name if setups else "r8_mb16_mem1p_v_uniform"
        raise SchedcError(f"--only {only!r} matches no set-up; names look like {example}")
    return chosen


# ---------------------------------------------------------------- where the library lives


def _package_repo_library() -> Optional[Path]:
    """``schedules/`` of the checkout this package runs from (editable installs, source trees)."""
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file():
        return root / "schedules"
    return None


def _installed_library() -> Optional[Path]:
    """``share/schedc/schedules`` under the installation prefixes (pyproject's data-files)."""
    import site
    import sysconfig

    prefixes = [sys.prefix, sys.base_prefix, sysconfig.get_paths().get("data", ""),
                getattr(site, "USER_BASE", "") or ""]
    for prefix in dict.fromkeys(p for p in prefixes if p):
        path = Path(prefix) / "share" / "schedc" / "schedules"
        if path.is_dir():
            return path
    return None


def find_library(directory: Optional[PathLike] = None, for_build: bool = False) -> Path:
    """The library directory: `directory` if given, else $SCHEDC_LIBRARY, else the ``schedules/``
    folder of the source checkout the package runs from, else the installed copy
    (``<prefix>/share/schedc/schedules``). With `for_build` the directory need not exist yet."""
    if directory:
        path = Path(directory)
        if not for_build and not path.is_dir():
            raise SchedcError(f"{path}: no such schedule library directory")
        return path
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env)
        if not for_build and not path.is_dir():
            raise SchedcError(f"${ENV_VAR}={env}: no such directory")
        return path
    repo = _package_repo_library()
    if repo is not None and (for_build or any(repo.glob("*.csv"))):
        return repo
    installed = _installed_library()
    if installed is not None and not for_build:
        return installed
    if for_build:
        raise SchedcError("no library directory: give one (e.g. `schedc library build schedules/`)")
    raise SchedcError(f"no schedule library found: pass --dir DIR or set ${ENV_VAR} (looked in the source "
                      "checkout's schedules/ and <prefix>/share/schedc/schedules)")


# ---------------------------------------------------------------- building


@dataclass
class Entry:
    """One library file pair as read back: its set-up, CSV path and report."""

    setup: Setup
    csv: Path
    report: dict


def setup_problem(setup: Setup):
    """The compile request a set-up stands for (schedc.solver.Problem)."""
    from schedc.solver.problem import Problem

    return Problem.build(setup.stages, setup.mb, n_ranks=setup.ranks, placement=setup.placement,
                         profile=setup.profile(), memory=setup.memory, objective=LIBRARY_OBJECTIVE)


def library_warm_start(problem, time_limit: float, candidates: Sequence[tuple[str, object]] = ()):
    """The compiler's warm start (schedc.solver.heuristic.warm_start, same budget as
    compile_problem gives it), with two library rules:

    - a hand-made schedule that fits and is as good as the heuristic's answer wins the tie (the
      first such in BASELINE_NAMES order). Reason: reproducibility. The heuristic's local search
      is time-budgeted, so among equally good orders it may return a different one on another
      machine; a hand-made schedule is the same everywhere, and where it meets the lower bound
      the compiler stops at once with a proof.
    - `candidates` ((name, Schedule) pairs, e.g. the library's answer for the same set-up under a
      smaller memory limit) are used when they fit and are strictly better, so a looser memory
      limit never gets a slower schedule than a tighter one, even when both solves stop at
      their time limits."""
    from schedc.simulate import simulate
    from schedc.solver.heuristic import feasible_baselines, warm_start

    sched, sim, source = warm_start(problem, time_budget=min(1.0, 0.1 * time_limit))
    obj = problem.objective
    best = (sched, sim, source)
    for name, b_sched, b_sim in feasible_baselines(problem):
        if b_sim.objective(obj) <= sim.objective(obj) * (1 + 1e-9) + 1e-12:
            best = (b_sched, b_sim, name)
            break
    for name, cand in candidates:
        try:
            c_sim = simulate(cand, problem.profile, problem.memory)
        except SchedcError:
            continue
        if c_sim.fits and c_sim.objective(obj) < best[1].objective(obj) * (1 - 1e-9):
            best = (cand, c_sim, name)
    return best


def compile_setup(
    setup: Setup,
    time_limit: float,
    progress: Optional[Callable[[dict], None]] = None,
    candidates: Sequence[tuple[str, object]] = (),
):
    """Compile one set-up exactly as the library does; returns the CompileResult. `candidates`:
    see :func:`library_warm_start`."""
    from schedc.solver.compile import compile_problem

    problem = setup_problem(setup)
    return compile_problem(problem, time_limit=time_limit, progress=progress, seed=LIBRARY_SEED,
                           warm=library_warm_start(problem, time_limit, candidates))


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
    from schedc import csvio

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    setups = list(DEFAULT_SETUPS if setups is None else setups)
    max_limit = DEFAULT_MAX_TIME_LIMIT if time_limit is None else float(time_limit)
    if not max_limit > 0:
        raise SchedcError(f"--time-limit must be > 0 seconds, got {time_limit}")
    entries = []
    # tighter memory limits first, so that their answers can seed the looser ones
    order = sorted(range(len(setups)), key=lambda i: (_group(setups[i]), MemoryLimit.parse(setups[i].memory).value, i))
    solved: dict[tuple, list[tuple[str, object]]] = {}
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


def write_index(directory: PathLike) -> Path:
    from schedc.fileio import atomic_write_text

    path = Path(directory) / INDEX_NAME
    atomic_write_text(path, index_markdown(directory))
    return path


# ---------------------------------------------------------------- reading back


def load_entries(directory: PathLike) -> tuple[list[Entry], list[str]]:
    """Every ``NAME.csv`` with its report, sorted as the index lists them, and the problems met
    reading them (unparseable names, missing or unreadable reports, orphan reports)."""
    from schedc import csvio

    directory = Path(directory)
    entries, problems = [], []
    csvs = sorted(directory.glob("*.csv"))
    for csv_path in csvs:
        try:
            setup = Setup.parse(csv_path.name)
        except SchedcError as e:
            problems.append(f"{csv_path}: {e}")
            continue
        try:
            report = csvio.read_report(csv_path)
        except SchedcError as e:
            problems.append(str(e))
            continue
        entries.append(Entry(setup, csv_path, report))
    stems = {p.stem for p in csvs}
    for json_path in sorted(directory.glob("*.json")):
        if json_path.stem not in stems:
            problems.append(f"{json_path}: a report without its schedule {json_path.stem}.csv; delete it or rebuild")
    entries.sort(key=lambda e: e.setup.sort_key())
    return entries, problems


def find_entry(name: str, directory: Optional[PathLike] = None) -> Entry:
    """The entry called `name` (with or without .csv) in the library."""
    import difflib

    from schedc import csvio

    lib = find_library(directory)
    stem = Path(name).name
    if stem.endswith(".csv") or stem.endswith(".json"):
        stem = stem.rsplit(".", 1)[0]
    csv_path = lib / f"{stem}.csv"
    if not csv_path.is_file():
        names = sorted(p.stem for p in lib.glob("*.csv"))
        close = difflib.get_close_matches(stem, names, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else "; `schedc library list` shows them"
        raise SchedcError(f"{stem}: no such schedule in {lib}{hint}")
    return Entry(Setup.parse(stem), csv_path, csvio.read_report(csv_path))


# ---------------------------------------------------------------- the index


def _get(report: dict, *keys, default=None):
    cur = report
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            return default
        cur = cur[k]
    return cur


def peak_in_p(report: dict) -> Optional[float]:
    """The largest per-rank peak of activations in p units (1p = R microbatches of the rank's own
    stages), from the report's costs and peak memory; None if the report lacks them."""
    try:
        profile = Profile.model_validate(report["inputs"]["costs"])
        placement = report["inputs"]["stage_to_rank"]
        peaks = report["predicted"]["peak_memory_per_rank"]
    except (KeyError, TypeError, ValueError):
        return None
    n_ranks = max(placement) + 1
    worst = 0.0
    for r, peak in enumerate(peaks):
        own = [s for s, rr in enumerate(placement) if rr == r]
        static = sum(profile.stages[s].static_bytes for s in own)
        act = sum(profile.stages[s].activation_bytes for s in own)
        if act > 0:
            worst = max(worst, (peak - static) / (n_ranks * act))
    return worst


def format_makespan(x: Optional[float], costs: str) -> str:
    """Uniform costs in units, transformer costs (seconds) in ms."""
    if x is None:
        return "-"
    if costs == "transformer":
        return f"{1e3 * x:.1f} ms"
    return f"{x:.4g}"


def _vs(value: float, base: Optional[dict]) -> str:
    if not base or not base.get("fits") or not base.get("makespan"):
        return "-"
    ratio = value / base["makespan"] - 1
    if abs(ratio) < 0.0005:
        return "0.0%"
    return f"{100 * ratio:+.1f}%"


def _best_fitting(report: dict) -> Optional[tuple[str, dict]]:
    fitting = {k: v for k, v in (report.get("baselines") or {}).items() if isinstance(v, dict) and v.get("fits")}
    if not fitting:
        return None
    name = min(fitting, key=lambda k: (fitting[k]["makespan"], k))
    return name, fitting[name]


def index_row(entry: Entry) -> str:
    """One Markdown table row of the index, from the entry's report only."""
    rep, setup = entry.report, entry.setup
    makespan = _get(rep, "predicted", "makespan")
    bubble = _get(rep, "predicted", "bubble")
    baselines = rep.get("baselines") or {}
    peak = peak_in_p(rep)
    peak_bytes = _get(rep, "predicted", "peak_memory_per_rank") or []
    peak_txt = "-" if peak is None else f"{peak:.2f}p / {setup.memory}"
    if setup.costs == "transformer" and peak_bytes:
        peak_txt += f" ({format_bytes(max(peak_bytes))})"
    zb_name = "zb-v" if setup.placement == "v" else "zb-h1"
    best = _best_fitting(rep)
    best_txt = "-" if best is None else f"{best[0]} {_vs(makespan, best[1])}"
    status = rep.get("status", "?")
    gap = rep.get("gap")
    status_txt = status if status == "optimal" or gap is None else f"{status} (gap {100 * gap:.2f}%)"
    cells = [
        f"[{setup.name}]({setup.name}.csv)",
        str(setup.stages),
        format_makespan(makespan, setup.costs),
        "-" if bubble is None else f"{100 * bubble:.1f}%",
        peak_txt,
        _vs(makespan, baselines.get("1f1b")) if setup.placement == "loop" else "-",
        _vs(makespan, baselines.get(zb_name)),
        best_txt,
        status_txt,
    ]
    return "| " + " | ".join(cells) + " |"


_INDEX_HEADER = """\
# Schedule library

Precompiled pipeline schedules (torch's compute-only CSV notation) for common set-ups, each with
its JSON report (inputs, costs, predicted makespan, bubble, peak memory per rank, the hand-made
schedules under the same costs, lower bound, gap, solver status). Generated by

    {command}

(one command; `schedc library check schedules/` verifies, without solving, that every file
validates, loads in torch, matches its report when re-simulated, and that this index is current).

Names: `r{{ranks}}_mb{{microbatches}}_mem{{K}}p_{{placement}}_{{costs}}`. `loop` = one stage per rank;
`v` = two stages per rank in a V (rank r holds stages r and 2R-1-r, as ZB-V and DualPipeV).
`mem1p` = each rank may hold R microbatches of its stages' activations (what 1F1B holds),
`mem2p` = twice that. Every schedule is timed as torch's `_PipelineScheduleRuntime` runs it (stage 0's
backward all in W; I frees nothing until W, as torch's split backward keeps the graph).
`uniform` = identical stages, F = I = W = 1 (unit-less), no communication time;
`transformer` = `schedc.library.transformer_profile` (32 layers, hidden 4096, vocab 128256,
sequence 4096, bf16; the last stage carries the LM head and loss; times in ms at 400 TFLOP/s
effective, 40 GB/s between stages). Objective: makespan (all ranks start and end the step together).

Columns: *makespan* and *bubble* (idle share of all ranks over the step) as simulated; *peak*
is the largest per-rank activation peak in p units against the limit (transformer: bytes with
static memory); *vs 1F1B*, *vs ZB* (ZB-H1 for `loop`, ZB-V for `v`) and *vs best hand-made* are
the makespan difference to that schedule under the same costs (negative = schedc faster; `-`
where it does not exist for the placement or exceeds the memory limit); *status* is `optimal`
when a lower bound proves it, else the gap to the best lower bound.

Load one in training (every rank reads the same file; the stages a rank builds come from the CSV):

    from schedc.runtime import build_schedule, stages_for_rank
    csv = "schedules/r8_mb16_mem1p_v_uniform.csv"
    my_stages = stages_for_rank(csv, rank)            # e.g. [r, 2R-1-r] for v
    schedule = build_schedule(csv, [PipelineStage(...) for s in my_stages], loss_fn=loss_fn)
    schedule.step(inputs, target=target, losses=losses)

| set-up | stages | makespan | bubble | peak | vs 1F1B | vs ZB | vs best hand-made | status |
|---|---:|---:|---:|---|---:|---:|---|---|
"""


def index_markdown(directory: PathLike) -> str:
    """The index (``README.md``) for the reports in `directory`; no solving, no timings."""
    entries, _ = load_entries(directory)
    text = _INDEX_HEADER.format(command=BUILD_COMMAND)
    text += "".join(index_row(e) + "\n" for e in entries)
    text += f"\n{len(entries)} schedules.\n"
    return text


# ---------------------------------------------------------------- checking


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=_REL_TOL, abs_tol=1e-12)


def _torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def check_entry(entry: Entry, torch: bool = True) -> list[str]:
    """Problems of one library file pair (see :func:`check_library`)."""
    from schedc import csvio
    from schedc.validate import validate
    from schedc.simulate import simulate

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
        over = [r for r, (p, lim) in enumerate(zip(sim.peak_memory, sim.memory_limit)) if p > lim * (1 + 1e-9)]
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
    if isinstance(lb, (int, float)) and lb > sim.objective(LIBRARY_OBJECTIVE) * (1 + 1e-9) + 1e-12:
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
        torch = _torch_available()
    elif torch and not _torch_available():
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
