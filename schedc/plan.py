"""Plan a model: the partition of its units into stages, the placement and the schedule, together.

Problem: given a per-unit profile (embedding, each layer, norm + head + loss, in model order),
R ranks, M microbatches and a per-rank memory cap in bytes (static bytes of the rank's stages
included), find the contiguous partition of the units into stages (every stage at least one
unit), the placement (``loop``: one stage per rank; ``v``: two, in a V) and the schedule with the
shortest step, and certify how far it can be from the best plan.

Method (``plan``):
1. Per placement, ``schedc.partition`` gives by dynamic programming the smallest cap any partition
   fits (else a one-line error with that cap), the bound over partitions and the partition whose
   relaxed per-rank terms reach it.
2. Candidates: that partition, the compute-balanced split, torchtitan's default and the even split,
   then a best-first search over their neighbours (one unit moved from one stage to another, the
   stages between keeping their counts), each scored by its own lower bound (``own_bound``:
   ``schedc.solver.bounds.lower_bound`` and the one-rank relaxation of
   ``schedc.solver.rank_relaxation``, milliseconds each), up to 1000 of them. Under a tight cap
   (below) one boundary moved by one unit: there the own bound ranks partitions poorly.
3. The 12 best by bound and the comparison splits are screened by their best hand-made schedule
   that fits (simulated: milliseconds). Up to three per placement are compiled with short time
   limits (``schedc.solver.compile.compile_problem``, 25% of the time in all): the
   compute-balanced split, then alternately the best by bound and the best by hand-made step; a
   partition whose bound is not below the best step found so far cannot win and is skipped, and
   so is one whose first two-rank relaxation (``schedc.solver.pair_relaxation``) is not. The
   two best go on from their answers for 10% of the time each (a second round). Under a tight
   cap (the best so far leaves some rank room for fewer than two microbatches of each of its
   stages) two short compiles and no second round: there step 4 ranks the partitions better.
4. The certificate (at most 30% of the time, or 90% as below; it often ends early): every partition
   whose relaxed terms stay below the best step found (``schedc.partition.partitions_below``: no
   other partition can beat it) gets its own bound, the closed-form terms and the one-rank
   relaxation (``schedc.solver.rank_relaxation``), in the order of their relaxed values; the bound
   over partitions is the least of those and the relaxed value of the first partition not reached.
   Skipped where step 2 found a partition whose own bound is the dynamic program's bound: nothing
   can raise it, and the compiles get the time. The dynamic program's relaxation alone left gaps of
   4-30% where memory is tight or stages sit in a V. The one-rank relaxation's bound is within 2%
   of the step found on most of those partitions, not all: V partitions with few microbatches per
   stage stay 5-8% apart. A partition's bound may stop at the first rank that reaches the current
   least (``own_bound``'s `enough`): it cannot lower it, and the listing is cut at 20000
   partitions, not 5000, so partitions tied at the threshold are reached instead of cut off. The
   partition whose own bound is the least then gets the two-rank relaxation, one pair of ranks at a
   time (CP-SAT; 5% of the time, or up to 90% of it when the best partition is proven optimal):
   Llama 16 ranks in a V at 80 GiB, 28 partitions at 727.8-737.9 ms by one rank each, 755.2 or more
   by two: gap 3.8% -> 1.6-1.7%. Under a tight cap the block relaxation (``schedc.solver.blocks``:
   the whole problem on 3, then 4 microbatches) comes first, for at least 40% of the time: it is
   within 0.5% of the partition's optimum there, where the one-rank bounds leave 5-20%, so the
   least bound it leaves also names the partition to compile (4b).
4b. The partition whose own bound was the least sets the bound; where the best step found is more
   than 1% above it, it gets a compile of its own (25% of the time; it goes on from its short
   compile if it had one, and takes all the time left when the best is already proven optimal
   for its partition): the bound-guided search from the dynamic program's partition can miss it
   (Llama 8 ranks in a V at 40 GiB: 1242.6 ms found, 1174.3 ms on the partition with the least
   bound, 1170.6; Llama 4 ranks in a V at 40 GiB, 16 microbatches: 3257.7 ms found, the block
   relaxation's least 2897.7 on 4,1,5,1,8,4,9,2, whose compile proves 2909.8 optimal). Under a
   tight cap it is the least among the partitions the block relaxation ranked in full. Skipped
   when a short compile already tried another partition with as low a bound (the one step 4
   took it to) and it lost: there the bound is loose, not unreached.
5. The best partition gets the time left but a tenth, warm-started from the better of its short
   compile's answer and a fresh warm start with a fifth of that time (two seconds at most).
6. A comparison split whose hand-made schedule is shorter (a time limit too short for the cap)
   replaces the answer; then, with the plan's step fixed, the last tenth looks for a schedule
   with a lower peak (``least_memory_at_step``), and ``plan_limiter`` says what limits the step
   (memory, against the uncapped problem's hand-made schedules; else one rank's work or the
   fill and drain). ``torchtitan_rows`` adds torchtitan's default split with its own classes.
Under ``budget="work"`` every share above is read on the work clock of schedc.solver.deadline
(the search charges a fixed cost per partition bounded, listed or screened) and the two-rank and
block relaxations, which run on the wall clock, are left out: the same inputs give the same plan.
``plan_ac`` makes activation checkpointing a choice of the plan (its docstring).
Measured (benchmarks/plan_quality.py): ranking by bound alone lost to a plain compile of the
compute-balanced split by 7-16% in V rows, where per-partition bounds are loose; the screening and
the forced balanced candidate fixed those rows.
The report compares torchtitan's default split, the even split and the compute-balanced split,
each with the best hand-made schedule (``schedc.baselines``) that fits the same cap.

Cost: the time limit (the search before compiling takes well under a second at 34 units x 8 ranks,
a few seconds for the V of 16 ranks).
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Sequence, Union

from schedc.costs import MemoryLimit, Profile, format_bytes
from schedc.errors import SchedcError
from schedc.partition import (
    PLACEMENTS, Units, balanced, check_units, even_counts, min_cap, n_stages_for, partition_bound, partitions_below,
    stage_modules, torchtitan_default_counts,
)
from schedc.tolerances import REL, TIE

PLAN_PLACEMENTS = PLACEMENTS + ("auto",)
SEARCH_SHARE = 0.1  # of the time limit, for the bound-guided search over partitions
SEARCH_EVALUATIONS = 1000  # partitions scored by their lower bound, at most, per placement
SCREEN = 12  # partitions per placement (the best by lower bound) screened by their hand-made schedules
CANDIDATES = 3  # partitions per placement compiled with a short time limit
TIGHT_CANDIDATES = 2  # ... where the best so far leaves a rank room for fewer than two microbatches
SHORT_SHARE = 0.25  # of the time limit, for all the short compiles together
FINALISTS = 2  # partitions that go on to a second round of compiling
SECOND_SHARE = 0.2  # of the time limit, for the second round
CERTIFY_SHARE = 0.3  # of the time limit, for bounding the partitions that could beat the answer one by one
TIGHT_CERTIFY_SHARE = 0.4  # ... under a tight cap at least this (the block relaxation, one solve a partition)
TIGHT_CERTIFY_END = 0.75  # ... but no later than this, which leaves step 4b a compile
PAIR_SHARE = 0.05  # of the time limit, for two-rank relaxations while the final compile still has work
CERTIFY_BLOCKS = (3, 4)  # block sizes of the block relaxation in the certificate (schedc.solver.blocks)
CERTIFY_LIMIT = 20000  # partitions listed at most per placement (else the threshold is lowered)
SETTER_SHARE = 0.25  # of the time limit, for compiling the partition whose own bound is the least
SETTER_MARGIN = 0.01  # ... when the best step found is more than this above that bound
OWN_BOUND_WORK = 2e-3  # work units (schedc.solver.deadline) charged per partition's own bound
LISTING_WORK = 2e-5  # ... per partition listed below a threshold (schedc.partition.partitions_below)
SIMULATION_PASSES = 1.0  # ... passes over the actions charged per simulation of a hand-made schedule
SEARCH_END = 0.4  # of the time limit: the search over partitions never runs past it
FINAL_END = 0.9  # of the time limit: the final compile ends here when the least-memory pass follows it
TAIL_SHARE = 0.03  # of the time limit, kept for the comparisons and the report
MEMORY_TRIES = 3  # compiles under a lowered cap in the least-memory pass, at most
MEMORY_TRY_SHARE = 0.025  # of the time limit, for each of them at most
# how far step 4 has taken a partition's bound: only as far as the least then needed (own_bound's
# `enough`), its own bound in full, one or more relaxation steps, final
OWN_SO_FAR, OWN, RELAXED, FINAL = 0, 1, 2, 3


@dataclass
class Comparison:
    """One split with the best hand-made schedule that fits the cap (None: nothing fits)."""

    split: str
    placement: str
    counts: list[int]
    schedule: Optional[str]
    value: Optional[float]
    note: str = ""
    peak: Optional[float] = None  # the schedule's largest per-rank peak, where known

    def as_dict(self) -> dict:
        return {"split": self.split, "placement": self.placement, "units_per_stage": self.counts,
                "best_hand_made": self.schedule, "step": self.value, "note": self.note, "peak": self.peak}


@dataclass(frozen=True)
class PlanResult:
    """What :func:`plan` chose: the partition (``counts`` units per stage, ``partition`` module
    names per stage), the placement, the compiled schedule of that partition, the bound over
    every partition and its gap, and the comparison rows; ``report`` is what ``plan.json`` holds."""

    compiled: object  # schedc.solver.compile.CompileResult of the chosen partition
    units: Profile
    counts: list[int]  # units per stage
    placement: str
    bound: float  # over every partition (and placement tried) and schedule under the cap
    bounds: dict[str, float]  # per placement tried
    certified: dict[str, int]  # per placement: partitions whose own bound entered `bounds`
    comparisons: list[Comparison]
    candidates: list[dict]
    notes: list[str]
    solve_time: float
    report: dict = field(default_factory=dict)
    interrupted: bool = False  # Ctrl-C or SIGTERM (schedc.solver.interrupt) ended the search early
    least_memory: Optional["LeastMemory"] = None  # the same step under a lower peak (least_memory_at_step)
    limiter: Optional["PlanLimiter"] = None  # what limits the step (plan_limiter)
    assumes: dict = field(default_factory=dict)  # what the plan took about the run (the report's "assumes")
    ac: Optional["ACChoice"] = None  # the activation checkpointing chosen (plan_ac)
    budget: str = "time"  # what the time limit counted: wall-clock seconds or work units
    cut_by_wall: bool = False  # work mode: the wall-clock safety net ended it (the plan may differ)

    @property
    def value(self) -> float:
        return self.compiled.value

    @property
    def schedule(self):
        return self.compiled.schedule

    @property
    def profile(self) -> Profile:
        """The merged per-stage profile of the chosen partition."""
        return self.compiled.problem.given_profile

    @property
    def partition(self) -> list[list[str]]:
        return stage_modules(self.units, self.counts)

    @property
    def gap(self) -> float:
        return max(0.0, (self.value - self.bound) / self.value) if self.value > 0 else 0.0


def _now() -> float:
    """The clock every share of the time limit is read on: the wall clock, or under a work
    budget the work clock (schedc.solver.deadline.now), imported here so that ``import schedc``
    does not load the solver."""
    from schedc.solver.deadline import now

    return now()


def _counting_work() -> bool:
    from schedc.solver.deadline import counting_work_on

    return counting_work_on()


def _charge(units: float) -> None:
    """Charge the work clock (nothing under a wall-clock budget)."""
    from schedc.solver.deadline import charge

    charge(units)


def stop_requested() -> bool:
    """Ctrl-C or SIGTERM inside ``schedc.solver.interrupt.stop_on_sigint`` (imported here, not at
    the top: ``import schedc`` must not load the solver)."""
    from schedc.solver.interrupt import requested

    return requested()


def parse_cap(memory: Union[str, MemoryLimit]) -> MemoryLimit:
    """A byte size or none; ``Kp`` is relative to one partition's 1F1B and means nothing here."""
    limit = memory if isinstance(memory, MemoryLimit) else MemoryLimit.parse(memory)
    if limit.kind == "relative":
        raise SchedcError(f"--memory {limit}: Kp is relative to 1F1B on a fixed partition, and plan moves the "
                          "partition; give the GPU's memory in bytes, e.g. --memory 80GiB")
    return limit


def plan(*, profile: Profile, ranks: int, microbatches: int, memory: Union[str, MemoryLimit] = "80GiB",
         placement: str = "auto", objective: str = "makespan", time_limit: float = 60.0,
         progress: Optional[Callable[[str], None]] = None, seed: int = 0, source: str = "profile",
         least_memory: bool = True, budget: str = "time") -> PlanResult:
    """The best partition + placement + schedule found in `time_limit` seconds (module docstring).

    Parameters
    ----------
    profile : Profile
        A per-unit profile: one entry per unit of the model in model order (embedding, each
        layer, norm + head + loss), ideally each with ``modules`` (the names handed to the
        frameworks); ``schedc profile --units`` or :func:`schedc.model_costs.unit_profile` make one.
    ranks, microbatches : int
        Pipeline ranks R and microbatches per step M.
    memory : str or MemoryLimit
        The per-rank cap in bytes, static bytes included (``"80GiB"``), or ``"none"``; ``Kp`` is
        refused (it is relative to one partition's 1F1B).
    placement : "loop", "v" or "auto"
        One stage per rank, two in a V, or both tried and the better kept.
    objective : "makespan" or "span"
    time_limit : float
        Seconds for the whole search, compiles included.
    progress : callable, optional
        Called with one line per step of the search.
    budget : "time" or "work"
        What `time_limit` counts: wall-clock seconds, or work units (schedc.solver.deadline: the
        solvers' deterministic time and counted constructions, and here a fixed charge per
        partition bounded, listed or screened), so that the same inputs give the same plan on any
        machine; the two-rank and block relaxations, which run on the wall clock, are left out.
    least_memory : bool
        After the search, look for a schedule of the chosen partition with the same step and a
        lower peak (``least_memory_at_step``, the last 10% of the time) and report the margin.

    Returns
    -------
    PlanResult
        ``counts`` (units per stage), ``partition`` (module names per stage), ``placement``,
        ``schedule``, ``value``, ``profile`` (the merged per-stage profile), ``bound`` (over
        every partition and schedule under the cap), ``gap``, ``comparisons``, ``report``.

    Raises
    ------
    SchedcError
        A bad argument, a unit that alone exceeds the cap, or a cap no partition fits (each
        names the smallest cap that works).

    Examples
    --------
    >>> import schedc
    >>> from schedc.library import transformer_profile
    >>> units = transformer_profile(6, layers=6, hidden=256, vocab=32000, seq=256)  # one unit per layer
    >>> res = schedc.plan(profile=units, ranks=2, microbatches=4, memory="80GiB", placement="loop",
    ...                   time_limit=4)
    >>> sum(res.counts), len(res.counts), res.value >= res.bound
    (6, 2, True)
    """
    if budget not in ("time", "work"):
        raise SchedcError(f"--budget must be time or work, got {budget!r}")
    if budget == "work" and not _counting_work():
        return _on_work_clock(plan, time_limit, profile=profile, ranks=ranks, microbatches=microbatches,
                              memory=memory, placement=placement, objective=objective, progress=progress, seed=seed,
                              source=source, least_memory=least_memory, budget="work")
    t0 = _now()
    say = progress or (lambda line: None)
    limit = parse_cap(memory)
    cap = math.inf if limit.kind == "none" else limit.value
    _check_arguments(ranks, microbatches, placement, objective, time_limit)
    notes = check_units(profile, source)
    units = Units.of(profile)
    placements = _placements(placement, ranks, profile.n_stages, source)
    _check_units_fit(profile, units, cap, limit, source)

    searches, bounds = _bounds_over_partitions(profile, units, ranks, microbatches, limit, cap, objective,
                                               placements, notes, say, t0)
    pools, forced, memo = {}, {}, {}
    for pl, pb in searches:
        pools[pl], forced[pl] = _screened_candidates(profile, units, pl, pb, ranks, microbatches, limit, cap,
                                                     objective, SEARCH_SHARE * time_limit / len(searches), say, t0,
                                                     hard=t0 + SEARCH_END * time_limit, memo=memo)
    paired: dict = {}  # (placement, counts) -> a two-rank bound at least the best step when it was found
    best, candidates, results = _short_compiles(profile, pools, forced, ranks, microbatches, limit, objective,
                                                time_limit, seed, paired, say, t0)
    theta = best[0] if best[1] is not None else math.inf
    proven = best[1] is not None and best[1].status == "optimal"  # for its partition: the final compile is done
    scored = {pl: min(c[0] for c in pool) for pl, pool in pools.items() if pool}  # the least own bound seen
    bounds, certified, setters, reached = _certified_bounds(profile, searches, ranks, microbatches, limit, cap,
                                                            objective, theta, proven, time_limit, paired,
                                                            _tight(best), say, t0, scored,
                                                            end=FINAL_END if least_memory else 0.9)
    final_share = FINAL_END if least_memory else 1.0
    best = _compile_bound_setter(profile, best, setters, candidates, results, ranks, microbatches, limit, objective,
                                 final_share * time_limit, seed, say, t0, reached)
    res, pl, counts = _final_compile(profile, best, ranks, microbatches, limit, objective, final_share * time_limit,
                                     seed, say, t0)
    comparisons = compare_splits(profile, units, ranks, microbatches, limit, cap, objective, placements, memo)
    res, pl, counts = _adopt_faster_row(profile, res, pl, counts, comparisons, ranks, microbatches, limit, objective,
                                        seed)
    lowered = None
    if least_memory and not stop_requested():
        lowered = least_memory_at_step(res, t0 + (1 - TAIL_SHARE) * time_limit, seed, say, t0,
                                       per_try=max(0.5, MEMORY_TRY_SHARE * time_limit))
        res = _with_schedule(res, lowered.compiled)
    comparisons += torchtitan_rows(profile, ranks, microbatches, limit, objective)
    out = PlanResult(compiled=res, units=profile, counts=list(counts), placement=pl,
                     bound=min(min(bounds.values()), res.value), bounds=bounds, certified=certified,
                     comparisons=comparisons, candidates=candidates, notes=notes, solve_time=_now() - t0,
                     interrupted=stop_requested(), least_memory=lowered)
    out = replace(out, limiter=plan_limiter(out, cap))
    return replace(out, report=build_plan_report(out))


def _on_work_clock(fn, time_limit: float, **kwargs) -> PlanResult:
    """`fn` (plan or plan_ac) run on one work clock for `time_limit` work units
    (schedc.solver.deadline.counting_work); the result says so, and whether the wall-clock
    safety net cut it."""
    from schedc.solver.deadline import counting_work

    with counting_work(time_limit) as clock:
        out = fn(time_limit=time_limit, **kwargs)
    out = replace(out, budget="work", cut_by_wall=clock.cut_by_wall)
    return replace(out, report=build_plan_report(out))


def _check_arguments(ranks: int, microbatches: int, placement: str, objective: str, time_limit: float) -> None:
    for ok, message in ((ranks >= 1, f"--ranks must be >= 1, got {ranks}"),
                        (microbatches >= 1, f"--mb must be >= 1, got {microbatches}"),
                        (placement in PLAN_PLACEMENTS,
                         f"--placement must be one of {', '.join(PLAN_PLACEMENTS)}, got {placement!r}"),
                        (objective in ("makespan", "span"), f"--objective must be makespan or span, got {objective!r}")):
        if not ok:
            raise SchedcError(message)
    if not time_limit or not 0 < time_limit < math.inf:
        raise SchedcError(f"--time-limit must be a finite number of seconds > 0, got {time_limit}")


def _bounds_over_partitions(profile, units, ranks, microbatches, limit, cap, objective, placements, notes, say, t0):
    """Step 1, per placement: the smallest cap any partition fits (a placement none fits is noted,
    or the error when none fits at all) and the bound over partitions. Returns ([(placement,
    PartitionBound)], {placement: bound})."""
    searches, bounds = [], {}
    for pl in placements:
        need, _ = min_cap(units, pl, ranks)
        if need > cap * (1 + TIE):
            if len(placements) == 1 or pl == placements[-1] and not searches:
                caps = {p: min_cap(units, p, ranks)[0] for p in placements}
                best = min(caps, key=caps.get)
                raise SchedcError(f"--memory {limit}: no partition of the {profile.n_stages} units onto {ranks} ranks "
                                  f"({' or '.join(placements)}) fits; the smallest cap that does is "
                                  f"--memory {_round_up_bytes(caps[best])} ({best})")
            notes.append(f"placement {pl}: no partition fits under {limit} (needs {format_bytes(need)})")
            continue
        pb = partition_bound(profile, ranks, microbatches, cap, pl, objective)
        bounds[pl] = pb.value
        say(f"[{_now() - t0:6.1f}s] {pl}: bound over partitions {pb.value:.6g}, search starts at "
            f"{pb.counts}")
        searches.append((pl, pb))
    if not searches:
        raise SchedcError(f"--memory {limit}: no placement fits")
    return searches, bounds


def _screened_candidates(profile, units, pl, pb, ranks, microbatches, limit, cap, objective, seconds, say, t0,
                         hard=math.inf, memo=None):
    """Step 2 for one placement: the partitions best by their own lower bound and the comparison
    splits, each screened by its best hand-made schedule that fits (an upper bound, milliseconds to
    simulate). Returns (pool of (lower bound, hand-made step, counts), [the balanced split's entry])."""
    S = n_stages_for(pl, ranks)
    splits = [pb.counts, _balanced(units, pl, ranks, cap), torchtitan_default_counts(profile.n_stages, S),
              even_counts(profile.n_stages, S)]
    # under a tight cap the own bound ranks partitions poorly (step 4's block relaxation ranks them),
    # and a search that follows it far from the dynamic program's partition finds partitions that
    # compile worse: Llama 4 ranks x 16 in a V at 40 GiB on a busy machine, 5,1,5,6,3,4,9,1 (own
    # bound 2682.4 ms) compiles to 3600.8 where the dynamic program's 5,1,6,1,8,3,9,1 gives 3257.7
    tight = bool(pb.counts) and _tight_problem(_problem(profile, pb.counts, pl, ranks, microbatches, limit, objective))
    scores = _best_first(profile, units, pl, ranks, microbatches, limit, cap, objective,
                         [s for s in splits if s], _now() + seconds, far=not tight, hard=hard)
    by_lb = sorted(scores, key=scores.get)[:SCREEN]
    shapes = None
    pool = []
    kept = {tuple(s) for s in splits if s and tuple(s) in scores}
    for counts in dict.fromkeys(by_lb + [tuple(s) for s in splits if s and tuple(s) in scores]):
        if counts not in kept and _now() >= hard:
            continue  # the comparison splits are screened; the rest only while the search may run
        problem = _problem(profile, counts, pl, ranks, microbatches, limit, objective)
        shapes = shapes if shapes is not None else _hand_made_shapes(problem)
        found = best_hand_made(problem, shapes)
        if memo is not None:
            memo[(pl, tuple(counts))] = found
        ub = found[1]
        pool.append((scores[counts], math.inf if ub is None else ub, counts))
    # the compute-balanced split is always compiled: where the bounds are loose (tight memory, V)
    # neither the bound nor the hand-made step ranks partitions well, and a plan must not lose to
    # compiling the obvious split
    forced = [c for c in pool if list(c[2]) == list(splits[1] or [])][:1]
    say(f"[{_now() - t0:6.1f}s] {pl}: scored {len(scores)} partitions by their lower bound, screened "
        f"{len(pool)} by hand-made schedules")
    return pool, forced


def _short_compiles(profile, pools, forced, ranks, microbatches, limit, objective, time_limit, seed, paired, say,
                    t0):
    """Step 3: short compiles, alternating the best by lower bound and the best by hand-made step
    in every placement; after the first, a partition whose two-rank bound is not below the best
    step is not compiled. Returns ((value, compile result or None, placement, counts), the
    candidates compiled). `paired` gets the two-rank bounds that showed a partition cannot win."""
    from schedc.solver.compile import compile_problem
    from schedc.solver.deadline import Deadline
    from schedc.solver.pair_relaxation import PairRelaxation

    order = [(pl, c) for pl, cs in forced.items() for c in cs] + _interleave(
        [[(pl, c) for c in sorted(pool, key=key)] for key in (lambda c: (c[0], c[1]), lambda c: (c[1], c[0]))
         for pl, pool in pools.items()])
    candidates, compiled = [], []  # compiled: (value, compile result, placement, counts)
    per_placement = {pl: 0 for pl in pools}
    short = max(0.5, SHORT_SHARE * time_limit / (CANDIDATES * len(pools)))
    tried = set()
    for pl, (lb, ub, counts) in order:
        if (pl, counts) in tried or per_placement[pl] >= CANDIDATES:
            continue
        if per_placement[pl] >= TIGHT_CANDIDATES and _tight(min(compiled, key=lambda c: c[0])):
            # under a tight cap the certificate's block relaxation ranks the partitions better
            # than more short compiles, and the one it ranks first is compiled (step 4b)
            continue
        tried.add((pl, counts))
        if compiled and lb >= min(c[0] for c in compiled) * (1 - REL):
            continue
        if _now() + short > t0 + 0.8 * time_limit or stop_requested():
            break
        per_placement[pl] += 1
        if compiled and not _counting_work():
            # two ranks together often show that a partition with a low own bound cannot beat the
            # best step: in a fraction of a short compile (Llama 16 ranks in a V at 80 GiB, heavy
            # stages early in the V: 0.4 s against 1.7 s, which then lost by 3%)
            least = min(c[0] for c in compiled)
            relaxation = PairRelaxation(_problem(profile, counts, pl, ranks, microbatches, limit, objective), least)
            pair = relaxation.next(Deadline.after(short))  # its first pair: the one that settles it, or not worth it
            if pair >= least * (1 - REL):
                paired[(pl, tuple(counts))] = pair
                say(f"[{_now() - t0:6.1f}s] {pl} {list(counts)}: two ranks together need {pair:.6g} or "
                    f"more (its own bound {lb:.6g}): not compiled")
                continue
        try:
            res = compile_problem(_problem(profile, counts, pl, ranks, microbatches, limit, objective),
                                  time_limit=short, seed=seed)
        except SchedcError:  # nothing found that fits in a short compile: the next candidate
            say(f"[{_now() - t0:6.1f}s] {pl} {list(counts)}: no schedule that fits found in {short:.1f}s")
            continue
        candidates.append({"placement": pl, "units_per_stage": list(counts), "lower_bound": lb,
                           "best_hand_made": None if math.isinf(ub) else ub, "step": res.value, "status": res.status})
        say(f"[{_now() - t0:6.1f}s] {pl} {list(counts)}: step {res.value:.6g} (its bound {lb:.6g}, "
            f"hand-made {ub:.6g}, {res.status})")
        compiled.append((res.value, res, pl, counts))
    if not compiled:  # no time for a short compile: the best-scored partition gets what is left
        pl, (lb, ub, counts) = order[0]
        return (math.inf, None, pl, counts), candidates, {}
    results = {(pl, tuple(counts)): res for _, res, pl, counts in compiled}
    best = min(compiled, key=lambda c: c[0])
    if not _tight(best):  # under a tight cap the time goes to the block relaxation and step 4b
        best = _second_round(compiled, time_limit, seed, say, t0)
    results[(best[2], tuple(best[3]))] = best[1]
    return best, candidates, results


def _tight(best) -> bool:
    """Whether the best partition's cap leaves some rank room for fewer than two microbatches of
    each of its stages (``_tight_problem``): there the block relaxation ranks the partitions in
    step 4, and steps 3 and 4 make room for it."""
    return best[1] is not None and _tight_problem(best[1].problem)


def _tight_problem(problem) -> bool:
    """Whether the cap leaves some rank room for fewer than two microbatches of each of its
    stages (schedc.solver.periodic.worth_trying)."""
    from schedc.solver.graph import graph_of
    from schedc.solver.periodic import worth_trying

    return worth_trying(graph_of(problem))


def _second_round(compiled, time_limit, seed, say, t0):
    """The two best after the short compiles go on from their answers (warm starts) for a while
    more each before one is chosen: a few seconds rank V partitions poorly (a rival can lead after
    two seconds and trail after ten). Returns the best (value, compile result, placement, counts)."""
    from schedc.solver.compile import compile_problem

    finalists = sorted(compiled, key=lambda c: c[0])[:FINALISTS]
    more = SECOND_SHARE * time_limit / FINALISTS
    if len(finalists) < 2 or _now() + len(finalists) * more > t0 + 0.8 * time_limit:
        return finalists[0]
    results = []  # the best is among the finalists, so the best of these is at least as good
    for value, res, pl, counts in finalists:
        if res.status != "optimal" and not stop_requested():
            again = compile_problem(res.problem, time_limit=more, seed=seed,
                                    warm=(res.schedule, res.sim, "plan: short compile"))
            res = again if again.value <= res.value else res
            say(f"[{_now() - t0:6.1f}s] {pl} {list(counts)}: step {res.value:.6g} after a second round "
                f"({res.status})")
        results.append((res.value, res, pl, counts))
    return min(results, key=lambda c: c[0])


def _certified_bounds(profile, searches, ranks, microbatches, limit, cap, objective, theta, proven, time_limit,
                      paired, tight, say, t0, scored=None, end=0.9):
    """Step 4, per placement: the bound over partitions tightened partition by partition.

    ``schedc.partition.partitions_below`` lists every partition whose relaxed terms stay below
    `theta` (the best step found: no other partition can beat it), by relaxed value (or below a
    lower threshold, with too many). The bound is the least of the relaxed value of the first
    partition not reached and the bounds of those reached; each step raises the least of them:

    * the next listed partition gets its own bound (``own_bound``: the closed-form terms of
      schedc.solver.bounds and the one-rank relaxation of schedc.solver.rank_relaxation,
      milliseconds) while its relaxed value is the least: at first with the current least as
      `enough` (it may stop early at a value that cannot lower it), in full when it becomes the
      least;
    * the partition whose bound is the least gets one more relaxation step with `theta` as its
      target: under a tight cap (`tight`) first the block relaxation (schedc.solver.blocks:
      the whole problem on blocks of 3, then 4 microbatches, CP-SAT, a tenth of a second each),
      then the two-rank relaxations (schedc.solver.pair_relaxation, CP-SAT, a fraction of a
      second each); once it reaches `theta` or has nothing left to try its bound is final, and
      so is the bound over partitions when it is still the least.

    For 30% of the time (under a tight cap at least 40%, until 75% of it at the latest), the
    two-rank relaxations for 5% of it; when the best partition's compile is proven optimal
    (`proven`) the final compile has nothing to do, and both go on until 90% of the time. `paired`:
    the two-rank bounds step 3 already found. `scored`: per placement, the least own bound step 2
    found; where it is the dynamic program's bound already, no partition can raise the bound over
    partitions and step 4 gives its time to the compiles (Llama 8 ranks x 32 in a V at 40 GiB: 1944
    partitions bounded in 3.2 s, the bound unmoved at 2320.3 ms). Llama 16 ranks in a V at 80 GiB:
    288 partitions are below the best step, 756.1 ms; the one-rank bounds leave 85 below it, 28 of
    them at 727.8-737.9 ms (two heavy stages early in the V), and two ranks together put those at
    755.2 ms or more (0.4 s each where the target is out of reach). Llama 4 ranks in a V at 40 GiB,
    16 microbatches: the one-rank bounds leave the bound at 2682.4 ms against a best step of
    3257.7; blocks of microbatches on 94 partitions (8 s) put it at 2897.7 and rank 4,1,5,1,8,4,9,2
    units per stage first, whose optimum is 2909.8.

    Returns ({placement: bound}, {placement: partitions bounded one by one}, [(bound, placement,
    counts)]: per placement the partition to compile in step 4b, the least bound among those the
    block relaxation ranked in full, else the least, {(placement, counts): the bound reached})."""
    from schedc.solver.blocks import BlockRelaxation
    from schedc.solver.deadline import Deadline
    from schedc.solver.pair_relaxation import PairRelaxation

    # with the best partition proven optimal the final compile has nothing to do: the bound gets its time
    deadline = t0 + end * time_limit if proven else min(t0 + 0.8 * time_limit,
                                                           _now() + CERTIFY_SHARE * time_limit)
    if tight:
        # the block relaxation ranks the partitions: its share comes from the compiles after it
        deadline = max(deadline, min(t0 + TIGHT_CERTIFY_END * time_limit,
                                     _now() + TIGHT_CERTIFY_SHARE * time_limit))
    bounds, certified, setters, reached = {}, {}, [], {}
    for k, (pl, pb) in enumerate(searches):
        if scored is not None and scored.get(pl, math.inf) <= pb.value * (1 + REL):
            bounds[pl], certified[pl] = pb.value, 0
            say(f"[{_now() - t0:6.1f}s] {pl}: bound over partitions {pb.value:.6g} (a partition's own "
                f"bound meets it: none can raise it)")
            continue
        ends = Deadline(_now() + (deadline - _now()) / (len(searches) - k))  # a share each
        if ends.expired():  # no time to list the partitions (a fraction of a second on a V of 8 ranks)
            bounds[pl], certified[pl] = pb.value, 0
            continue
        pairs_end = ends if proven else Deadline(min(ends.at, _now() + PAIR_SHARE * time_limit
                                                     / len(searches)))
        threshold, found = partitions_below(profile, ranks, microbatches, cap, pl, objective, theta, CERTIFY_LIMIT)
        _charge(LISTING_WORK * max(1, len(found)))
        listing = iter(found)
        upcoming = next(listing, None)  # (relaxed value, counts) of the first partition not reached
        heap: list[tuple[float, int, tuple[int, ...]]] = []  # (bound, how far, counts)
        done, n_blocks, two_rank = 0, 0, 0
        # partitions with steps still to take: under a tight cap the block relaxation first, then
        # two ranks together; `ranked`: those whose block steps are all taken
        blocks: dict[tuple[int, ...], BlockRelaxation] = {}
        ranked: set[tuple[int, ...]] = set()
        pairs: dict[tuple[int, ...], PairRelaxation] = {}

        def problem_of(counts):
            return _problem(profile, counts, pl, ranks, microbatches, limit, objective)

        while not stop_requested():
            waiting = upcoming[0] if upcoming is not None else threshold
            least = heap[0][0] if heap else math.inf
            if min(waiting, least) >= theta * (1 - REL) or (heap and heap[0][1] == FINAL and least <= waiting):
                break  # nothing left that could lower the bound, or the least is final
            if ends.expired():
                if upcoming is not None and waiting < least:
                    # out of time: the partition the bound stops at is the next to compile when
                    # its own bound is the least seen (one more bound, milliseconds)
                    own = own_bound(problem_of(upcoming[1]), min(least, threshold))
                    heapq.heappush(heap, (own, OWN if own < min(least, threshold) else OWN_SO_FAR, upcoming[1]))
                break
            if upcoming is not None and waiting <= least:
                enough = min(least, threshold)  # nothing at or above the threshold can lower the bound
                own = own_bound(problem_of(upcoming[1]), enough)
                heapq.heappush(heap, (own, OWN if own < enough else OWN_SO_FAR, upcoming[1]))
                done += 1
                upcoming = next(listing, None)
                continue
            value, how_far, counts = heapq.heappop(heap)
            if how_far == OWN_SO_FAR:
                heapq.heappush(heap, (max(value, own_bound(problem_of(counts))), OWN, counts))
                continue
            if (pl, counts) in paired and paired[(pl, counts)] >= theta * (1 - REL):
                heapq.heappush(heap, (max(value, paired[(pl, counts)]), FINAL, counts))
                continue
            if how_far == OWN and tight and not _counting_work():
                # the whole problem on a few microbatches: near the partition's optimum where the
                # cap is tight, so the least bound left is the partition to compile (step 4b)
                blocks[counts] = BlockRelaxation(problem_of(counts), theta, CERTIFY_BLOCKS)
                n_blocks += 1
            if counts in blocks:
                relaxation = blocks[counts]
                if not relaxation.settled and value < theta * (1 - REL):
                    value = max(value, relaxation.next(ends))  # one step, then the least is weighed again
                    if relaxation.settled and relaxation.solved:
                        ranked.add(counts)
                    heapq.heappush(heap, (value, FINAL if value >= theta * (1 - REL) else RELAXED, counts))
                    continue
                del blocks[counts]
            if value >= theta * (1 - REL) or pairs_end.expired() or _counting_work():
                # no time for two ranks together: the bound so far is final
                heapq.heappush(heap, (value, FINAL, counts))
                continue
            if counts not in pairs:
                pairs[counts] = PairRelaxation(problem_of(counts), theta)
                two_rank += 1
            relaxation = pairs[counts]
            value = max(value, relaxation.next(pairs_end))  # one pair, then the least is weighed again
            heapq.heappush(heap, (value, FINAL if relaxation.settled else RELAXED, counts))
            if relaxation.settled:
                del pairs[counts]
        waiting = upcoming[0] if upcoming is not None else threshold
        bound = min(waiting, threshold, heap[0][0] if heap else math.inf)
        bounds[pl], certified[pl] = max(pb.value, bound), done
        # the partition to compile: the least bound, among those the block relaxation ranked when
        # it ran (out of time, the least may be one it has not reached, whose bound says little);
        # among equal bounds one bounded in full, then the fewest units on the first stages (in a
        # V the first microbatch's climb through them is the warm-up's critical path: Llama 8
        # ranks in a V at 80 GiB, 1264 partitions at 1165.8 ms, 1,2,2,1,1,1,1,1,3,... proven
        # optimal at it, 2,1,2,2,3,3,3,2,... 1223.1 ms)
        chosen = min((e for e in heap if e[2] in ranked), default=None, key=_setter_key) \
            or min(heap, default=None, key=_setter_key)
        if chosen is not None:
            setters.append((chosen[0], pl, chosen[2]))
        reached.update(((pl, counts), value) for value, _, counts in heap)
        say(f"[{_now() - t0:6.1f}s] {pl}: bound over partitions {bounds[pl]:.6g} ({done} of the "
            f"{len(found)} partitions whose relaxed bound is below {threshold:.6g} bounded one by one"
            + (f", {n_blocks} with blocks of microbatches" if n_blocks else "")
            + (f", {two_rank} with two ranks together)" if two_rank else ")"))
    return bounds, certified, setters, reached


def _setter_key(entry: tuple[float, int, tuple[int, ...]]):
    value, how_far, counts = entry
    return value, how_far == OWN_SO_FAR, counts


def _compile_bound_setter(profile, best, setters, candidates, results, ranks, microbatches, limit, objective,
                          time_limit, seed, say, t0, reached=None):
    """Step 4b: the partition whose own bound is the least sets the bound over partitions; where
    the best step found is well above it (over 1%), it gets a compile of its own, or goes on from
    its short compile (it is often a partition the bound-guided search never reached: Llama 8
    ranks in a V at 40 GiB, embedding + one layer on stage 0, 1242.6 ms found before vs 1174.3 ms
    on it, its bound 1170.6). It is skipped when a short compile already tried another partition
    whose own bound is as low and lost: there the bound is loose, not unreached (Llama 4 ranks in
    a V at 40 GiB: partitions with a bound of 5132 ms compile to 7100, the best to 6900), and the
    final compile gets the time. When the best is proven optimal for its partition the final
    compile has nothing to do, and this one gets all the time left. `results`: the compile results so
    far by (placement, counts); `reached`: the bounds step 4 took partitions to, by (placement,
    counts): a compiled partition whose bound the certificate raised above the setter's is no
    sign of a loose bound. Returns the best (value, compile result, placement, counts)."""
    from schedc.solver.compile import compile_problem

    reached = reached or {}

    def bound_of(c: dict) -> float:
        return max(c["lower_bound"], reached.get((c["placement"], tuple(c["units_per_stage"])), 0.0))

    for own, pl, counts in sorted(setters, key=lambda c: c[0]):
        before = results.get((pl, tuple(counts)))
        done = best[1] is not None and best[1].status == "optimal"
        # the final compile keeps at least 5% of the time (it goes on from the better answer)
        end = t0 + (time_limit - min(0.05 * time_limit, 5.0) if done else 0.95 * time_limit)
        seconds = end - _now() if done else min(SETTER_SHARE * time_limit, end - _now())
        if (before is not None and before.status == "optimal") or own >= best[0] * (1 - SETTER_MARGIN) \
                or stop_requested() or seconds < 0.05 * time_limit:
            continue
        if before is None and any(bound_of(c) <= own * (1 + SETTER_MARGIN)
                                  and (c["placement"], c["units_per_stage"]) != (best[2], list(best[3]))
                                  for c in candidates):
            # a partition with as low a bound was compiled and lost: there the bound is loose
            # (tight memory in a V), not unreached, and the final compile makes better use of it
            continue
        warm = None if before is None else (before.schedule, before.sim, "plan: short compile")
        res = compile_problem(_problem(profile, counts, pl, ranks, microbatches, limit, objective),
                              time_limit=seconds, seed=seed, warm=warm)
        if before is not None and before.value < res.value:
            res = before
        candidates.append({"placement": pl, "units_per_stage": list(counts), "lower_bound": own,
                           "best_hand_made": None, "step": res.value, "status": res.status})
        say(f"[{_now() - t0:6.1f}s] {pl} {list(counts)}: step {res.value:.6g} (the least own bound, "
            f"{own:.6g}; {res.status})")
        if res.value < best[0]:
            best = (res.value, res, pl, counts)
    return best


def _final_compile(profile, best, ranks, microbatches, limit, objective, time_limit, seed, say, t0):
    """Step 5: the best partition gets the rest of `time_limit`, warm-started from the better of
    its short compile and a fresh warm start (schedc.solver.warm) with a fifth of that time, two
    seconds at most. A short compile gives its list heuristic a tenth of its few seconds, and on a
    V the rules it did not reach can be the better ones: Llama 4 ranks x 16 at 40 GiB, 3525.5 ms
    after the short compiles, 3491.8 from a 1 s warm start; 8 ranks x 32 in a V at 40 GiB, the
    heuristic's best rule is its 26th (2366.3 ms, 2359.1 after its local search), which a tenth of
    seven seconds reached in one run of two (2378.4 ms otherwise, and the step 2373.6 at the end).
    A compile's own warm start stays at a tenth: there the engines after it have the time. Returns
    (compile result, placement, counts)."""
    from schedc.solver.compile import compile_problem
    from schedc.solver.deadline import Deadline
    from schedc.solver.warm import warm_start

    value, res, pl, counts = best
    left = t0 + time_limit - _now()
    if res is None or (res.status != "optimal" and left > min(1.0, 0.1 * time_limit) and not stop_requested()):
        problem = _problem(profile, counts, pl, ranks, microbatches, limit, objective)
        warm = None
        if res is not None:
            warm = (res.schedule, res.sim, "plan: short compile")
            try:
                fresh = warm_start(problem, time_budget=min(2.0, 0.2 * left),
                                   deadline=Deadline.after(0.3 * left))
            except SchedcError:  # nothing fits by the deadline: the short compile's answer stays
                fresh = None
            if fresh is not None and fresh[1].fits and fresh[1].objective(objective) < res.value * (1 - REL):
                warm = fresh
            left = t0 + time_limit - _now()
        if warm is None:  # no short compile ran (a short time limit): a hand-made schedule that fits starts it
            warm = _hand_made_warm(problem)
        final = compile_problem(problem, time_limit=max(0.1 if warm is not None else 1.0, left), seed=seed, warm=warm)
        if res is None or final.value <= res.value:
            res = final
        say(f"[{_now() - t0:6.1f}s] final {pl} {list(counts)}: step {res.value:.6g} ({res.status})")
    return res, pl, counts


def _adopt_faster_row(profile, res, pl, counts, comparisons, ranks, microbatches, limit, objective, seed):
    """A plan never loses to a comparison it prints: where a hand-made schedule on a comparison
    split is shorter than the search's answer (a time limit too short for a tight cap), that
    partition and schedule become the plan (one short compile warm-started from it)."""
    from schedc.solver.compile import compile_problem
    from schedc.simulate import simulate

    rows = [c for c in comparisons if c.value is not None and c.value < res.value * (1 - REL)]
    if not rows:
        return res, pl, counts
    row = min(rows, key=lambda c: c.value)
    problem = _problem(profile, row.counts, row.placement, ranks, microbatches, limit, objective)
    sched = _hand_made_shapes(problem)[row.schedule]
    sim = simulate(sched, problem.profile, problem.memory)
    better = compile_problem(problem, time_limit=0.5, seed=seed, warm=(sched, sim, f"plan: {row.split} split"))
    return better, row.placement, list(row.counts)


def _hand_made_warm(problem):
    """(schedule, simulation, name) of the shortest hand-made schedule that fits, else None."""
    from schedc.simulate import simulate

    name, _ = best_hand_made(problem)
    if name is None:
        return None
    sched = _hand_made_shapes(problem)[name]
    return sched, simulate(sched, problem.profile, problem.memory), name


def _placements(placement: str, ranks: int, n_units: int, source: str) -> list[str]:
    wanted = list(PLACEMENTS) if placement == "auto" else [placement]
    ok = [pl for pl in wanted if n_stages_for(pl, ranks) <= n_units]
    if not ok:
        pl = wanted[0]
        raise SchedcError(f"{source}: {n_units} units cannot fill {n_stages_for(pl, ranks)} stages ({pl} on {ranks} "
                          f"ranks); every stage needs at least one unit: use fewer ranks or split the model finer")
    return ok


def _check_units_fit(profile: Profile, units: Units, cap: float, limit: MemoryLimit, source: str) -> None:
    """A unit that alone (static bytes + one microbatch) exceeds the cap: no partition can fit."""
    for k, unit in enumerate(profile.stages):
        need = unit.static_bytes + unit.activation_bytes
        if need > cap * (1 + TIE):
            names = ", ".join(unit.modules) if unit.modules else "no module names"
            raise SchedcError(f"{source}: unit {k} ({names}) alone needs {format_bytes(need)} (static "
                              f"{format_bytes(unit.static_bytes)} + one microbatch {format_bytes(unit.activation_bytes)}) "
                              f"but --memory is {limit}; the smallest cap it fits is --memory {_round_up_bytes(need)}")


def _round_up_bytes(n: float) -> str:
    """A byte size a user can type back that is >= n: GiB with two decimals, rounded up."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{math.ceil(n / size * 100 - REL) / 100:.2f}{unit}"
    return f"{math.ceil(n)}B"


def _problem(profile: Profile, counts, placement: str, ranks: int, microbatches: int, limit: MemoryLimit,
             objective: str):
    from schedc.solver.problem import Problem

    merged = profile.merge(counts)
    return Problem.build(merged.n_stages, microbatches, n_ranks=ranks, placement=placement, profile=merged,
                         memory=limit, objective=objective)


def own_bound(problem, enough: float = math.inf) -> float:
    """A partition's own lower bound: the closed-form terms (schedc.solver.bounds) and the one-rank
    relaxation (schedc.solver.rank_relaxation), about 2 ms for 16 stages x 16 microbatches. With
    `enough` it may stop early at a value >= enough (still a bound): for callers that only keep
    the least bound below it."""
    from schedc.solver.bounds import lower_bound
    from schedc.solver.graph import graph_of
    from schedc.solver.rank_relaxation import rank_relaxation_bound

    _charge(OWN_BOUND_WORK)
    graph = graph_of(problem)  # both bounds read its stage level: built once
    closed = lower_bound(graph)
    if closed >= enough:
        return closed
    return max(closed, rank_relaxation_bound(graph, enough) or 0.0)


def _fits(units: Units, counts: Sequence[int], placement: str, ranks: int, cap: float) -> bool:
    """Every rank holds its static bytes and one microbatch of its stages under the cap."""
    need = [0.0] * ranks
    start = 0
    S = len(counts)
    for k, n in enumerate(counts):
        r = k if placement == "loop" else (k if k < ranks else 2 * ranks - 1 - k)
        need[r] += units.seg(units.static, start, start + n) + units.seg(units.act, start, start + n)
        start += n
    return max(need) <= cap * (1 + TIE) and S == n_stages_for(placement, ranks)


def _best_first(profile, units, placement, ranks, microbatches, limit, cap, objective, starts, deadline,
                far: bool = True, hard: float = math.inf) -> dict:
    """Partitions (units per stage) -> their lower bound, exploring from `starts` the neighbours
    of the best-scored partition first: one unit moved from one stage to another, the stages
    between keeping their counts (every boundary between them moves by one), nearest first; with
    `far` False only to the next stage (one boundary moved).

    Why not only adjacent boundaries: the bound is a maximum over ranks, and in a V a layer moved
    from the middle of the pipeline to rank 0 crosses ranks whose terms would rise on the way, so
    a search by single boundary moves stops short (Llama 8 ranks in a V at 40 GiB, 16
    microbatches: 1203.0 ms after 405 partitions, where these moves reach 1170.6 ms, the bound
    over partitions, after 920). Cost: S (S - 1) partitions scored per expansion (2 (S - 1)
    without `far`), one ``own_bound`` each, until `deadline` or SEARCH_EVALUATIONS; never past
    `hard` (the plan's own time limit would not hold otherwise)."""
    scores: dict[tuple[int, ...], float] = {}
    heap: list[tuple[float, tuple[int, ...]]] = []

    def score(counts: tuple[int, ...]) -> None:
        if counts in scores or min(counts) < 1 or not _fits(units, counts, placement, ranks, cap):
            return
        scores[counts] = own_bound(_problem(profile, counts, placement, ranks, microbatches, limit, objective))
        heapq.heappush(heap, (scores[counts], counts))

    for s in starts:
        score(tuple(s))
    expanded = set()
    S = len(starts[0]) if starts else 0
    moves = sorted(((a, b) for a in range(S) for b in range(S) if a != b and (far or abs(a - b) == 1)),
                   key=lambda ab: abs(ab[0] - ab[1]))
    least = min(SEARCH_EVALUATIONS, 6 * S)  # at least this many (the nearest moves first), however busy the machine

    def finished() -> bool:  # SEARCH_EVALUATIONS scored, or past the deadline with at least `least`
        now = _now()
        return len(scores) >= SEARCH_EVALUATIONS or (now >= deadline and len(scores) >= least) or now >= hard \
            or stop_requested()

    while heap and not finished():
        _, counts = heapq.heappop(heap)
        if counts in expanded:
            continue
        expanded.add(counts)
        for a, b in moves:
            if finished():  # one expansion scores S (S - 1) partitions: 992 for a V of 16 ranks
                break
            c = list(counts)
            c[a] -= 1
            c[b] += 1
            score(tuple(c))
    return scores


# ---------------------------------------------------------------- comparisons


def _hand_made_shapes(problem) -> dict:
    """The hand-made schedules (schedc.baselines) of the problem's shape and placement: they do not
    depend on costs, so one set serves every partition."""
    from schedc.baselines import baselines_for

    key = (problem.n_stages, problem.n_microbatches, problem.n_ranks, problem.placement_name, tuple(problem.placement))
    if key not in _SHAPES:
        found = baselines_for(problem.n_stages, problem.n_microbatches, problem.n_ranks, problem.placement_name)
        if len(_SHAPES) > 64:
            _SHAPES.clear()
        _SHAPES[key] = {k: v for k, v in found.items() if tuple(v.placement) == tuple(problem.placement)}
    return _SHAPES[key]


def _balanced(units: Units, placement: str, ranks: int, cap: float):
    """``schedc.partition.balanced``'s partition, computed once per plan (a dynamic program that
    takes a fraction of a second on a V of 8 ranks, asked for by the screening, the comparisons
    and the limiter)."""
    key = (id(units), placement, ranks, cap)
    if key not in _BALANCED:
        if len(_BALANCED) > 64:
            _BALANCED.clear()
        _BALANCED[key] = (units, balanced(units, placement, ranks, cap)[1])  # units kept: its id stays its own
    return _BALANCED[key][1]


_BALANCED: dict = {}
_SHAPES: dict = {}  # the hand-made schedules by shape: built once per process (they are never modified)


def best_hand_made(problem, shapes: Optional[dict] = None) -> tuple[Optional[str], Optional[float]]:
    """(name, step) of the hand-made schedule (schedc.baselines) with the shortest step that fits
    the problem's cap; (None, None) when none fits."""
    from schedc.simulate import simulate

    from schedc.solver.deadline import charge_passes

    best = (None, None)
    for name, sched in (shapes if shapes is not None else _hand_made_shapes(problem)).items():
        charge_passes(3 * problem.n_stages * problem.n_microbatches, SIMULATION_PASSES)
        try:
            sim = simulate(sched, problem.profile, problem.memory)
        except SchedcError:
            continue
        value = sim.objective(problem.objective)
        if sim.fits and (best[1] is None or value < best[1]):
            best = (name, value)
    return best


def _interleave(lists: list[list]) -> list:
    """The items of `lists`, taking one from each list in turn."""
    out = []
    for k in range(max(map(len, lists), default=0)):
        for lst in lists:
            if k < len(lst):
                out.append(lst[k])
    return out


def compare_splits(profile, units, ranks, microbatches, limit, cap, objective, placements,
                   memo: Optional[dict] = None) -> list[Comparison]:
    """torchtitan's default, the even and the compute-balanced split, each with its best hand-made
    schedule that fits, per placement."""
    rows = []
    for pl in placements:
        S = n_stages_for(pl, ranks)
        splits = [("torchtitan default", torchtitan_default_counts(profile.n_stages, S)),
                  ("even", even_counts(profile.n_stages, S)),
                  ("compute-balanced", _balanced(units, pl, ranks, cap))]
        for name, counts in splits:
            if counts is None:
                continue
            if not _fits(units, counts, pl, ranks, cap):
                rows.append(Comparison(name, pl, list(counts), None, None, "a rank cannot hold one microbatch"))
                continue
            key = (pl, tuple(counts))  # `memo`: what the screening already found for this split
            sched, value = memo[key] if memo and key in memo else \
                best_hand_made(_problem(profile, counts, pl, ranks, microbatches, limit, objective))
            rows.append(Comparison(name, pl, list(counts), sched, value, "" if sched else "no hand-made schedule fits"))
    return rows


# ---------------------------------------------------------------- least memory, limiter, torchtitan rows


@dataclass(frozen=True)
class LeastMemory:
    """The plan's step under the lowest peak found: ``peak`` (the largest per-rank peak, static bytes
    included), ``found_peak`` (that of the schedule the search ended with), ``compiled`` (the
    compile result that reaches the step at ``peak``; None when the first schedule was kept)."""

    peak: float
    found_peak: float
    compiled: object = field(default=None, repr=False)
    tries: int = 0


def least_memory_at_step(res, end: float, seed: int = 0, say=None, t0: float = 0.0,
                         per_try: float = math.inf) -> LeastMemory:
    """Among schedules of the chosen partition with the plan's step, one with a lower peak.

    Problem: the search minimises the step only, so its schedule sits at whatever peak it found,
    often at the cap, although the same step may fit in much less. Method: the cap is lowered
    from the found peak by one microbatch of the largest stage on the peak rank, and each probe
    compiles the partition under it: an answer with the plan's step (within ``REL``) is kept and
    the next decrement doubles; otherwise the cap it tried becomes the floor and the decrement
    halves. The floor starts at the least any schedule of the partition needs (static bytes and
    one microbatch of each stage, per rank). Cost: at most ``MEMORY_TRIES`` compiles of at most
    `per_try` seconds each, all before `end` (the plan's clock)."""
    problem = res.problem
    found = max(res.sim.peak_memory)
    best = LeastMemory(peak=found, found_peak=found)
    if not math.isfinite(found) or not res.sim.fits:
        return best
    profile = problem.given_profile
    lo, step_down = _memory_floor(problem)
    hi, tries = found, 0
    while tries < MEMORY_TRIES and not stop_requested():
        left = end - _now()
        seconds = min(per_try, left / (MEMORY_TRIES - tries) if left / (MEMORY_TRIES - tries) >= 0.3 else left)
        probe = max(lo, hi - step_down)
        if seconds < 0.2 or hi - probe <= 0.001 * hi:
            break
        tries += 1
        again = _compile_under(problem, profile, probe, seconds, seed)
        if again is not None and again.sim.fits and again.value <= res.value * (1 + REL):
            hi, step_down = max(again.sim.peak_memory), 2 * step_down
            best = LeastMemory(peak=hi, found_peak=found, compiled=again)
        else:
            lo, step_down = probe, step_down / 2
        if say:
            say(f"[{_now() - t0:6.1f}s] least memory: under {format_bytes(probe)} "
                + ("the same step" if best.compiled is again and again is not None else "a longer step or none"))
        if seconds >= left:
            break
    return replace(best, tries=tries)


def _memory_floor(problem) -> tuple[float, float]:
    """(the least cap any schedule of the problem fits: per rank static bytes and one microbatch
    of each stage; one microbatch of the largest stage on the rank that needs the most)."""
    from schedc.costs import rank_static_bytes

    profile = problem.given_profile
    static = rank_static_bytes(profile, problem.placement)
    need = [static[r] + sum(profile.stages[s].activation_bytes for s in problem.stages_of(r))
            for r in range(problem.n_ranks)]
    r = max(range(problem.n_ranks), key=lambda k: need[k])
    return need[r], max(profile.stages[s].activation_bytes for s in problem.stages_of(r))


def _compile_under(problem, profile, cap: float, seconds: float, seed: int):
    """The compile of `problem` under a per-rank cap of `cap` bytes; None when nothing fits."""
    from schedc.solver.compile import compile_problem
    from schedc.solver.problem import Problem

    lowered = Problem.build(problem.n_stages, problem.n_microbatches, n_ranks=problem.n_ranks,
                            placement=problem.placement_name, profile=profile,
                            memory=MemoryLimit(kind="bytes", value=cap), objective=problem.objective)
    try:
        return compile_problem(lowered, time_limit=seconds, seed=seed)
    except SchedcError:
        return None


def _with_schedule(res, lowered):
    """The chosen partition's compile result with the schedule of `lowered` (the same step under a
    lower cap), simulated and reported under the user's cap; `res` itself when `lowered` is None.
    The status, bound and gap stay: they are about the step, which is the same."""
    from schedc.diagnose import limiter
    from schedc.simulate import simulate

    if lowered is None:
        return res
    sim = simulate(lowered.schedule, res.problem.profile, res.problem.memory)
    report = dict(res.report)
    predicted = dict(report.get("predicted", {}))
    predicted.update({"makespan": sim.makespan, "span": sim.span, "bubble": sim.bubble,
                      "span_bubble": sim.span_bubble, "bubble_per_rank": list(sim.bubble_per_rank),
                      "peak_memory_per_rank": list(sim.peak_memory), "fits_memory": bool(sim.fits)})
    report["predicted"] = predicted
    report["limiter"] = limiter(sim, res.problem.profile).as_dict()
    report["same_as_baseline"] = None
    return replace(res, schedule=lowered.schedule, sim=sim, report=report)


# torchtitan 0.3.0's own schedule classes on its default split: (class, schedc's baseline, stages per rank)
TORCHTITAN_CLASSES = (("1F1B", "1f1b", 1), ("Interleaved1F1B", "interleaved-1f1b", 2), ("ZBVZeroBubble", "zb-v", 2))


def torchtitan_rows(profile: Profile, ranks: int, microbatches: int, limit: MemoryLimit,
                    objective: str) -> list[Comparison]:
    """What a torchtitan user runs by default: its default split (``torchtitan_default_counts``)
    with each of its schedule classes (schedc's baselines that build the same order), simulated
    under the plan's memory model; a row that exceeds the cap says by how much."""
    from schedc.baselines import make_baseline
    from schedc.simulate import simulate

    rows = []
    for cls, name, per_rank in TORCHTITAN_CLASSES:
        n = per_rank * ranks
        pl = "v" if name == "zb-v" else "loop"
        if n > profile.n_stages:
            rows.append(Comparison("torchtitan default", pl, [], cls, None, f"{n} stages need {n} units"))
            continue
        counts = torchtitan_default_counts(profile.n_stages, n)
        try:
            sim = simulate(make_baseline(name, n, microbatches, ranks), profile.merge(counts), limit)
        except SchedcError as e:
            rows.append(Comparison("torchtitan default", pl, counts, cls, None, str(e)))
            continue
        peak = max(sim.peak_memory)
        value = sim.objective(objective)
        note = "" if sim.fits else f"does not fit: peak {format_bytes(peak)} over the cap (step {value:.6g})"
        rows.append(Comparison("torchtitan default", pl, counts, cls, value if sim.fits else None, note, peak=peak))
    return rows


@dataclass(frozen=True)
class PlanLimiter:
    """What limits the plan's step: ``memory`` (with no cap a known schedule is shorter:
    ``uncapped_step`` at ``uncapped_peak``), else ``rank`` or ``critical-path``
    (schedc.diagnose.limiter on the chosen schedule); ``why_partition`` compares the busiest
    rank's work with the comparison splits'."""

    kind: str
    message: str
    why_partition: str
    uncapped_step: Optional[float] = None
    uncapped_peak: Optional[float] = None

    def as_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "why_partition": self.why_partition,
                "uncapped_step": self.uncapped_step, "uncapped_peak": self.uncapped_peak}


def _uncapped_best(profile: Profile, units: Units, splits, ranks: int, microbatches: int, objective: str):
    """(step, peak, schedule name, split name, placement, counts) of the shortest hand-made
    schedule with no cap over the given splits."""
    from schedc.simulate import simulate

    none = MemoryLimit(kind="none")
    best = None
    for split, pl, counts in splits:
        problem = _problem(profile, counts, pl, ranks, microbatches, none, objective)
        for name, sched in _hand_made_shapes(problem).items():
            try:
                sim = simulate(sched, problem.profile, none)
            except SchedcError:
                continue
            value = sim.objective(objective)
            if best is None or value < best[0]:
                best = (value, max(sim.peak_memory), name, split, pl, list(counts))
    return best


def rank_work(units: Units, counts: Sequence[int], placement: str, ranks: int) -> list[float]:
    """Per rank: F + I + W of one microbatch of its stages (its busy time per microbatch)."""
    work, start = [0.0] * ranks, 0
    for k, n in enumerate(counts):
        r = k % ranks if placement == "loop" else (k if k < ranks else 2 * ranks - 1 - k)
        work[r] += float(units.F[start + n] - units.F[start] + units.I[start + n] - units.I[start]
                         + units.W[start + n] - units.W[start])
        start += n
    return work


def plan_limiter(result: "PlanResult", cap: float) -> PlanLimiter:
    """Memory-bound when some rank has no room for one more microbatch and, with no cap, a
    hand-made schedule on the chosen, the compute-balanced or torchtitan's split is over 1% shorter
    than the plan (the step then shortens with more memory, and more microbatches do not help);
    otherwise what ``schedc.diagnose.limiter`` says of the
    chosen schedule. Cost: one simulation per hand-made schedule and split (milliseconds each)."""
    from schedc.diagnose import limiter

    units = Units.of(result.units)
    ranks, M = result.compiled.problem.n_ranks, result.compiled.problem.n_microbatches
    objective = result.compiled.problem.objective
    splits = [("the chosen", result.placement, result.counts)]
    for pl in result.bounds:
        S = n_stages_for(pl, ranks)
        splits += [("the compute-balanced", pl, next((c.counts for c in result.comparisons if c.placement == pl
                                                      and c.split == "compute-balanced"), None)),
                   ("torchtitan's default", pl, torchtitan_default_counts(result.units.n_stages, S))]
    splits = [x for x in splits if x[2] is not None]
    best = _uncapped_best(result.units, units, splits, ranks, M, objective) if _cap_binds(result.compiled) else None
    why = _why_partition(result, units, ranks)
    if best is not None and best[0] < result.value * 0.99:
        value, peak, name, split, pl, counts = best
        message = (f"memory: with no cap {name} on {split} split {counts} ({pl}) takes {value:.6g} s, "
                   f"{100 * (1 - value / result.value):.0f}% shorter, at a peak of {format_bytes(peak)}; more memory "
                   "per rank or activation checkpointing shortens the step, more microbatches do not")
        return PlanLimiter("memory", message, why, value, peak)
    diag = limiter(result.compiled.sim, result.compiled.problem.profile)
    return PlanLimiter(diag.kind, diag.message, why)


def _cap_binds(compiled) -> bool:
    """Whether some rank's peak leaves no room for one more microbatch of its largest stage: only
    then can more memory shorten the step."""
    problem, sim = compiled.problem, compiled.sim
    for r in range(problem.n_ranks):
        room = sim.memory_limit[r] - sim.peak_memory[r] if r < len(sim.memory_limit) else math.inf
        biggest = max((problem.profile.stages[s].activation_bytes for s in problem.stages_of(r)), default=0.0)
        if room < biggest:
            return True
    return False


def _why_partition(result: "PlanResult", units: Units, ranks: int) -> str:
    """One sentence: the fastest comparison row, how much longer it takes, and whether the plan
    wins on its busiest rank's work or on the order of the same work (fill, drain, memory)."""
    rows = [c for c in result.comparisons if c.value is not None and c.counts
            and (list(c.counts), c.placement) != (list(result.counts), result.placement)]
    mine = rank_work(units, result.counts, result.placement, ranks)
    text = f"its busiest rank computes {max(mine):.4g} s per microbatch"
    if not rows:
        return text + "; no comparison split fits the cap"
    c = min(rows, key=lambda row: row.value)
    pl = c.placement if len(c.counts) == n_stages_for(c.placement, ranks) else "loop"
    theirs = max(rank_work(units, c.counts, pl, ranks))
    if c.value < result.value:
        return (f"{c.split} split {c.counts} ({c.placement}) with {c.schedule} is "
                f"{100 * (1 - c.value / result.value):.1f}% shorter: the plan does not build {len(c.counts)} stages "
                f"in a loop on {ranks} ranks, or its search needs a longer --time-limit")
    lead = (f"the fastest comparison, {c.split} split {c.counts} ({c.placement}) with {c.schedule}, takes "
            f"{100 * (c.value / result.value - 1):.1f}% longer; ")
    if max(mine) < theirs * (1 - 0.005):
        return lead + text + f", {theirs:.4g} s there: less work on the busiest rank"
    return lead + text + f", {theirs:.4g} s there: the plan wins on the order (fill, drain, memory), not the balance"


# ---------------------------------------------------------------- hand-off and report


def framework_settings(result: PlanResult, csv: str = "plan.csv", assumes: Optional[dict] = None) -> dict:
    """What to give each framework (schedc.frameworks.REGISTRY) to launch the plan."""
    from schedc.frameworks import framework_settings as settings_of

    return settings_of(result, csv, assumes)


def nemo_yaml(settings: dict) -> str:
    """NeMo's block of :func:`framework_settings` as YAML text."""
    from schedc.frameworks import nemo_yaml as yaml_of

    return yaml_of(settings)


def build_plan_report(result: PlanResult, csv: str = "plan.csv") -> dict:
    """The compile report of the chosen partition plus the plan's own fields (docs/design.md, "The plan")."""
    report = dict(result.compiled.report)
    best_row = min((c for c in result.comparisons if c.value is not None), key=lambda c: c.value, default=None)
    report["plan"] = {
        "placement": result.placement,
        "units_per_stage": result.counts,
        "step": result.value,
        "bound_over_partitions": result.bound,
        "bound_per_placement": result.bounds,
        "partitions_bounded_one_by_one": result.certified,
        "gap_over_partitions": result.gap,
        "comparisons": [c.as_dict() for c in result.comparisons],
        "margin_over_best_comparison": (None if best_row is None else (best_row.value - result.value) / best_row.value),
        "candidates": result.candidates,
        "notes": result.notes,
        "solve_time": result.solve_time,
        "status": plan_status(result),
        "budget": {"mode": result.budget, "cut_by_wall_clock": result.cut_by_wall,
                   "reproducible": result.budget == "work" and not result.cut_by_wall},
        "limiter": None if result.limiter is None else result.limiter.as_dict(),
        "least_memory": _least_memory_dict(result),
        "activation_checkpoint": None if result.ac is None else result.ac.as_dict(),
    }
    report["assumes"] = plan_assumes(result)
    report["partition"] = result.partition
    report["profile"] = result.profile.model_dump(mode="json", exclude_none=True)
    report["frameworks"] = framework_settings(result, csv)
    return report


def plan_status(result: PlanResult) -> str:
    """'optimal' only when no partition and schedule can be shorter (the gap over partitions
    within the compiler's own tolerance, ``schedc.tolerances.PROVEN``); else what the chosen
    partition's compile proved."""
    from schedc.tolerances import PROVEN

    if result.gap <= PROVEN:
        return "optimal"
    if result.compiled.status == "optimal":
        return "optimal for its partition"
    return result.compiled.status


def _least_memory_dict(result: PlanResult) -> Optional[dict]:
    lm = result.least_memory
    if lm is None:
        return None
    caps = result.compiled.sim.memory_limit
    cap = max(caps) if caps else math.inf
    return {"peak": lm.peak, "found_peak": lm.found_peak, "tries": lm.tries,
            "margin_to_cap": None if math.isinf(cap) else cap - lm.peak}


def plan_assumes(result: PlanResult) -> dict:
    """The profile's ``assumes`` (what its numbers took about the run) merged with the plan's own
    choices (microbatches, placement, activation checkpointing where the plan chose it)."""
    out = dict(result.units.assumes or {})
    if result.units.microbatch_size and "microbatch_size" not in out:
        out["microbatch_size"] = result.units.microbatch_size
    out.update(result.assumes)
    out["pipeline_parallel_degree"] = result.compiled.problem.n_ranks
    out["microbatches"] = result.compiled.problem.n_microbatches
    out["placement"] = result.placement
    return out


# ---------------------------------------------------------------- activation checkpointing as a plan choice

AC_MODES = ("none", "selective", "full")  # fastest first: each keeps less and recomputes more inside I
AC_SHARE = 0.75  # of the time limit, for one plan per global mode; the rest for the per-stage choice
TORCHTITAN_AC = "selective"  # what torchtitan 0.3.0's llama3 configs launch with


@dataclass(frozen=True)
class ACChoice:
    """The checkpointing the plan chose: ``chosen`` (one mode for the whole model, or one per
    stage), the best step of each global mode (None: nothing fits), and the per-stage choice on
    the best global plan's partition (``per_stage``: modes and step; None when no mix was tried)."""

    chosen: Union[str, list]
    global_steps: dict
    per_stage: Optional[dict] = None

    def as_dict(self) -> dict:
        return {"chosen": self.chosen, "global": self.global_steps, "per_stage": self.per_stage}


def plan_ac(profiles: dict, *, time_limit: float = 60.0, progress: Optional[Callable[[str], None]] = None,
            **kwargs) -> PlanResult:
    """The plan with the activation checkpointing that gives the shortest step under the cap.

    Problem: checkpointing trades recompute (each checkpointed layer's forward again inside I) for
    memory; under a tight cap the fastest plan may checkpoint some stages and not others.
    `profiles` maps modes (``none``, ``selective``, ``full``) to per-unit profiles of the same
    units. Method: one :func:`plan` per mode (``AC_SHARE`` of the time, shared), then, on the
    partition of the best of them, a greedy per-stage choice: each stage in turn, those on ranks
    with the most room first, is moved to a faster mode when a heuristic schedule
    (schedc.solver.warm.warm_start) of the mixed profile fits and is shorter; the best mix is
    compiled with the time left and kept when it beats the best global mode. torchtitan and NeMo
    launch one mode for the whole model; schedc's runtime applies one per stage. Cost: the time
    limit; the greedy step takes one heuristic run per stage and faster mode."""
    if kwargs.get("budget") == "work" and not _counting_work():
        return _on_work_clock(plan_ac, time_limit, profiles=profiles, progress=progress, **kwargs)
    say = progress or (lambda line: None)
    modes = [m for m in AC_MODES if m in profiles]
    if not modes:
        raise SchedcError(f"--ac auto needs a profile per mode ({', '.join(AC_MODES)}); got {', '.join(profiles)}")
    t0 = _now()
    results, errors = {}, {}
    for k, mode in enumerate(modes):
        share = (t0 + AC_SHARE * time_limit - _now()) / (len(modes) - k)
        floor = _mode_floor(profiles[mode], kwargs)
        best_so_far = min((r.value for r in results.values()), default=math.inf)
        if floor >= best_so_far * (1 - REL):  # no plan in this mode can be shorter: its time goes to the rest
            errors[mode] = f"cannot beat {best_so_far:.6g} s (its bound over partitions is {floor:.6g} s)"
            say(f"[{_now() - t0:6.1f}s] activation checkpointing {mode}: {errors[mode]}")
            continue
        say(f"[{_now() - t0:6.1f}s] activation checkpointing {mode}: {share:.1f}s")
        try:
            results[mode] = plan(profile=profiles[mode], time_limit=max(share, 0.5), progress=progress, **kwargs)
        except SchedcError as e:
            errors[mode] = str(e)
    if not results:
        raise SchedcError(next(reversed(errors.values())))
    best_mode = min(results, key=lambda m: results[m].value)
    best = results[best_mode]
    steps = {m: (results[m].value if m in results else None) for m in modes}
    per_stage = None
    if len(modes) > 1 and not stop_requested():
        per_stage = _per_stage_choice(best, best_mode, profiles, modes, t0 + time_limit, say, t0)
    notes = list(best.notes) + [f"activation checkpointing {m}: {e}" for m, e in errors.items()]
    if per_stage is not None and per_stage[0].value < best.value * (1 - REL):
        compiled, units, stage_modes = per_stage
        choice = ACChoice(stage_modes, steps, {"modes": stage_modes, "step": compiled.value})
        out = replace(best, compiled=compiled, units=units, least_memory=None, notes=notes)
    else:
        mix = None if per_stage is None else {"modes": per_stage[2], "step": per_stage[0].value}
        choice = ACChoice(best_mode, steps, mix)
        out = replace(best, notes=notes)
    rows = list(out.comparisons)
    if TORCHTITAN_AC in profiles and TORCHTITAN_AC != best_mode:
        for row in torchtitan_rows(profiles[TORCHTITAN_AC], out.compiled.problem.n_ranks,
                                   out.compiled.problem.n_microbatches, out.compiled.problem.memory,
                                   out.compiled.problem.objective):
            rows.append(replace(row, split=f"torchtitan default, {TORCHTITAN_AC} AC"))
    out = replace(out, comparisons=rows, ac=choice, solve_time=_now() - t0,
                  assumes={**out.assumes, "activation_checkpoint": choice.chosen})
    out = replace(out, limiter=plan_limiter(out, max(out.compiled.sim.memory_limit)))
    return replace(out, report=build_plan_report(out))


def _heuristic_step(profiles, counts, stage_modes, problem, end):
    """(step, warm start) of the heuristic warm start on the mixed profile; None if none fits."""
    from schedc.solver.warm import warm_start

    p = _problem(mixed_units(profiles, counts, stage_modes), counts, problem.placement_name, problem.n_ranks,
                 problem.n_microbatches, problem.memory, problem.objective)
    try:
        warm = warm_start(p, time_budget=min(0.3, max(0.05, end - _now())))
    except SchedcError:
        return None
    return (warm[1].objective(problem.objective), warm) if warm[1].fits else None


def _mode_floor(profile: Profile, kwargs: dict) -> float:
    """The least step any plan with this mode's profile can reach (schedc.partition's bound over
    partitions, per placement tried); inf when no partition fits, 0 when it cannot be told."""
    try:
        limit = parse_cap(kwargs.get("memory", "80GiB"))
        cap = math.inf if limit.kind == "none" else limit.value
        ranks, M = kwargs["ranks"], kwargs["microbatches"]
        wanted = list(PLACEMENTS) if kwargs.get("placement", "auto") == "auto" else [kwargs["placement"]]
        return min(partition_bound(profile, ranks, M, cap, pl, kwargs.get("objective", "makespan")).value
                   for pl in wanted if n_stages_for(pl, ranks) <= profile.n_stages)
    except (SchedcError, KeyError, ValueError):
        return 0.0  # plan itself says what is wrong


def mixed_units(profiles: dict, counts: Sequence[int], stage_modes: Sequence[str]) -> Profile:
    """The per-unit profile whose units in stage s come from ``profiles[stage_modes[s]]``."""
    base = next(iter(profiles.values()))
    stages, start = [], 0
    for n, mode in zip(counts, stage_modes):
        stages += profiles[mode].stages[start:start + n]
        start += n
    return base.model_copy(update={"stages": stages,
                                   "assumes": {**(base.assumes or {}), "activation_checkpoint": list(stage_modes)}})


def _per_stage_choice(best: PlanResult, best_mode: str, profiles: dict, modes: list, end: float, say, t0):
    """(compile result, mixed per-unit profile, modes per stage) of the greedy per-stage choice on
    `best`'s partition (plan_ac): moves are judged by the heuristic warm start's step
    (schedc.solver.warm), each against the heuristic step of the mix so far, and the final mix is
    compiled; None when no move helped or no time is left."""
    from schedc.solver.compile import compile_problem

    problem = best.compiled.problem
    counts, pl = best.counts, best.placement
    room = [lim - pk for pk, lim in zip(best.compiled.sim.peak_memory, best.compiled.sim.memory_limit)]
    # faster modes where a rank has room, first on the roomiest ranks; where it has none, stages on
    # the tightest ranks checkpoint more, which can free room for more microbatches in flight
    k = modes.index(best_mode)
    moves = [(s, m) for s in sorted(range(len(counts)), key=lambda s: -room[problem.placement[s]]) for m in modes[:k]]
    moves += [(s, m) for s in sorted(range(len(counts)), key=lambda s: room[problem.placement[s]])
              for m in modes[k + 1:]]
    stage_modes = [best_mode] * len(counts)
    current = _heuristic_step(profiles, counts, stage_modes, problem, end)
    if current is None:
        return None
    for s, mode in moves:
        if _now() > t0 + (end - t0) * 0.9 or stop_requested():
            break
        if stage_modes[s] != best_mode:
            continue
        trial = stage_modes[:s] + [mode] + stage_modes[s + 1:]
        found = _heuristic_step(profiles, counts, trial, problem, end)
        if found is not None and found[0] < current[0] * (1 - REL):
            stage_modes, current = trial, found
            say(f"[{_now() - t0:6.1f}s] stage {s} with activation checkpointing {mode}: heuristic step "
                f"{found[0]:.6g}")
    if stage_modes == [best_mode] * len(counts):
        return None
    units = mixed_units(profiles, counts, stage_modes)
    p = _problem(units, counts, pl, problem.n_ranks, problem.n_microbatches, problem.memory, problem.objective)
    compiled = compile_problem(p, time_limit=max(0.5, end - _now()), warm=current[1])
    return compiled, units, stage_modes


def comparison_pictures(result: PlanResult) -> list[tuple[str, object, Profile]]:
    """(title, schedule, merged profile) of the plan and of the fastest torchtitan class on its
    default split that fits (else the fastest that does not), for one picture."""
    from schedc.baselines import make_baseline

    out = [(f"plan {result.placement} {result.counts} ({plan_status(result)})", result.schedule, result.profile)]
    rows = [c for c in result.comparisons if c.split == "torchtitan default" and c.peak is not None]
    row = min(rows, key=lambda c: (c.value is None, c.value or 0.0), default=None)
    if row is not None:
        name = {cls: base for cls, base, _ in TORCHTITAN_CLASSES}[row.schedule]
        M, R = result.compiled.problem.n_microbatches, result.compiled.problem.n_ranks
        fits = "" if row.value is not None else ", over the cap"
        out.append((f"torchtitan {row.schedule} {row.counts}{fits}", make_baseline(name, len(row.counts), M, R),
                    result.units.merge(row.counts)))
    return out
