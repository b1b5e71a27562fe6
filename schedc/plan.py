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
5. The best partition gets the time left, warm-started from the better of its short compile's
   answer and a fresh warm start with a fifth of that time (two seconds at most).
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
import json
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
# how far step 4 has taken a partition's bound: only as far as the least then needed (own_bound's
# `enough`), its own bound in full, one or more relaxation steps, final
OWN_SO_FAR, OWN, RELAXED, FINAL = 0, 1, 2, 3
# torch's schedule names that build each placement (schedc.frameworks.V_NAMES / SCHEDULE_NAMES)
FRAMEWORK_NAMES = {"torchtitan": {"loop": "1F1B", "v": "ZBVZeroBubble"},
                   "nemo": {"loop": "1F1B", "v": "ZBVZeroBubble"}}


@dataclass
class Comparison:
    """One split with the best hand-made schedule that fits the cap (None: nothing fits)."""

    split: str
    placement: str
    counts: list[int]
    schedule: Optional[str]
    value: Optional[float]
    note: str = ""

    def as_dict(self) -> dict:
        return {"split": self.split, "placement": self.placement, "units_per_stage": self.counts,
                "best_hand_made": self.schedule, "step": self.value, "note": self.note}


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
         progress: Optional[Callable[[str], None]] = None, seed: int = 0, source: str = "profile") -> PlanResult:
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
    t0 = time.monotonic()
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
    pools, forced = {}, {}
    for pl, pb in searches:
        pools[pl], forced[pl] = _screened_candidates(profile, units, pl, pb, ranks, microbatches, limit, cap,
                                                     objective, SEARCH_SHARE * time_limit / len(searches), say, t0)
    paired: dict = {}  # (placement, counts) -> a two-rank bound at least the best step when it was found
    best, candidates, results = _short_compiles(profile, pools, forced, ranks, microbatches, limit, objective,
                                                time_limit, seed, paired, say, t0)
    theta = best[0] if best[1] is not None else math.inf
    proven = best[1] is not None and best[1].status == "optimal"  # for its partition: the final compile is done
    scored = {pl: min(c[0] for c in pool) for pl, pool in pools.items() if pool}  # the least own bound seen
    bounds, certified, setters, reached = _certified_bounds(profile, searches, ranks, microbatches, limit, cap,
                                                            objective, theta, proven, time_limit, paired,
                                                            _tight(best), say, t0, scored)
    best = _compile_bound_setter(profile, best, setters, candidates, results, ranks, microbatches, limit, objective,
                                 time_limit, seed, say, t0, reached)
    res, pl, counts = _final_compile(profile, best, ranks, microbatches, limit, objective, time_limit, seed, say, t0)
    comparisons = compare_splits(profile, units, ranks, microbatches, limit, cap, objective, placements)
    bound = min(bounds.values())
    out = PlanResult(compiled=res, units=profile, counts=list(counts), placement=pl, bound=min(bound, res.value),
                     bounds=bounds, certified=certified, comparisons=comparisons, candidates=candidates, notes=notes,
                     solve_time=time.monotonic() - t0, interrupted=stop_requested())
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
        say(f"[{time.monotonic() - t0:6.1f}s] {pl}: bound over partitions {pb.value:.6g}, search starts at "
            f"{pb.counts}")
        searches.append((pl, pb))
    if not searches:
        raise SchedcError(f"--memory {limit}: no placement fits")
    return searches, bounds


def _screened_candidates(profile, units, pl, pb, ranks, microbatches, limit, cap, objective, seconds, say, t0):
    """Step 2 for one placement: the partitions best by their own lower bound and the comparison
    splits, each screened by its best hand-made schedule that fits (an upper bound, milliseconds to
    simulate). Returns (pool of (lower bound, hand-made step, counts), [the balanced split's entry])."""
    S = n_stages_for(pl, ranks)
    splits = [pb.counts, balanced(units, pl, ranks, cap)[1], torchtitan_default_counts(profile.n_stages, S),
              even_counts(profile.n_stages, S)]
    # under a tight cap the own bound ranks partitions poorly (step 4's block relaxation ranks them),
    # and a search that follows it far from the dynamic program's partition finds partitions that
    # compile worse: Llama 4 ranks x 16 in a V at 40 GiB on a busy machine, 5,1,5,6,3,4,9,1 (own
    # bound 2682.4 ms) compiles to 3600.8 where the dynamic program's 5,1,6,1,8,3,9,1 gives 3257.7
    tight = bool(pb.counts) and _tight_problem(_problem(profile, pb.counts, pl, ranks, microbatches, limit, objective))
    scores = _best_first(profile, units, pl, ranks, microbatches, limit, cap, objective,
                         [s for s in splits if s], time.monotonic() + seconds, far=not tight)
    by_lb = sorted(scores, key=scores.get)[:SCREEN]
    shapes = None
    pool = []
    for counts in dict.fromkeys(by_lb + [tuple(s) for s in splits if s and tuple(s) in scores]):
        problem = _problem(profile, counts, pl, ranks, microbatches, limit, objective)
        shapes = shapes if shapes is not None else _hand_made_shapes(problem)
        ub = best_hand_made(problem, shapes)[1]
        pool.append((scores[counts], math.inf if ub is None else ub, counts))
    # the compute-balanced split is always compiled: where the bounds are loose (tight memory, V)
    # neither the bound nor the hand-made step ranks partitions well, and a plan must not lose to
    # compiling the obvious split
    forced = [c for c in pool if list(c[2]) == list(splits[1] or [])][:1]
    say(f"[{time.monotonic() - t0:6.1f}s] {pl}: scored {len(scores)} partitions by their lower bound, screened "
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
        if time.monotonic() + short > t0 + 0.8 * time_limit or stop_requested():
            break
        per_placement[pl] += 1
        if compiled:
            # two ranks together often show that a partition with a low own bound cannot beat the
            # best step: in a fraction of a short compile (Llama 16 ranks in a V at 80 GiB, heavy
            # stages early in the V: 0.4 s against 1.7 s, which then lost by 3%)
            least = min(c[0] for c in compiled)
            relaxation = PairRelaxation(_problem(profile, counts, pl, ranks, microbatches, limit, objective), least)
            pair = relaxation.next(Deadline.after(short))  # its first pair: the one that settles it, or not worth it
            if pair >= least * (1 - REL):
                paired[(pl, tuple(counts))] = pair
                say(f"[{time.monotonic() - t0:6.1f}s] {pl} {list(counts)}: two ranks together need {pair:.6g} or "
                    f"more (its own bound {lb:.6g}): not compiled")
                continue
        res = compile_problem(_problem(profile, counts, pl, ranks, microbatches, limit, objective),
                              time_limit=short, seed=seed)
        candidates.append({"placement": pl, "units_per_stage": list(counts), "lower_bound": lb,
                           "best_hand_made": None if math.isinf(ub) else ub, "step": res.value, "status": res.status})
        say(f"[{time.monotonic() - t0:6.1f}s] {pl} {list(counts)}: step {res.value:.6g} (its bound {lb:.6g}, "
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
    if len(finalists) < 2 or time.monotonic() + len(finalists) * more > t0 + 0.8 * time_limit:
        return finalists[0]
    results = []  # the best is among the finalists, so the best of these is at least as good
    for value, res, pl, counts in finalists:
        if res.status != "optimal" and not stop_requested():
            again = compile_problem(res.problem, time_limit=more, seed=seed,
                                    warm=(res.schedule, res.sim, "plan: short compile"))
            res = again if again.value <= res.value else res
            say(f"[{time.monotonic() - t0:6.1f}s] {pl} {list(counts)}: step {res.value:.6g} after a second round "
                f"({res.status})")
        results.append((res.value, res, pl, counts))
    return min(results, key=lambda c: c[0])


def _certified_bounds(profile, searches, ranks, microbatches, limit, cap, objective, theta, proven, time_limit,
                      paired, tight, say, t0, scored=None):
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
    deadline = t0 + 0.9 * time_limit if proven else min(t0 + 0.8 * time_limit,
                                                           time.monotonic() + CERTIFY_SHARE * time_limit)
    if tight:
        # the block relaxation ranks the partitions: its share comes from the compiles after it
        deadline = max(deadline, min(t0 + TIGHT_CERTIFY_END * time_limit,
                                     time.monotonic() + TIGHT_CERTIFY_SHARE * time_limit))
    bounds, certified, setters, reached = {}, {}, [], {}
    for k, (pl, pb) in enumerate(searches):
        if scored is not None and scored.get(pl, math.inf) <= pb.value * (1 + REL):
            bounds[pl], certified[pl] = pb.value, 0
            say(f"[{time.monotonic() - t0:6.1f}s] {pl}: bound over partitions {pb.value:.6g} (a partition's own "
                f"bound meets it: none can raise it)")
            continue
        ends = Deadline(time.monotonic() + (deadline - time.monotonic()) / (len(searches) - k))  # a share each
        pairs_end = ends if proven else Deadline(min(ends.at, time.monotonic() + PAIR_SHARE * time_limit
                                                     / len(searches)))
        threshold, found = partitions_below(profile, ranks, microbatches, cap, pl, objective, theta, CERTIFY_LIMIT)
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
            if how_far == OWN and tight:
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
            if value >= theta * (1 - REL) or pairs_end.expired():
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
        say(f"[{time.monotonic() - t0:6.1f}s] {pl}: bound over partitions {bounds[pl]:.6g} ({done} of the "
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
        seconds = end - time.monotonic() if done else min(SETTER_SHARE * time_limit, end - time.monotonic())
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
        say(f"[{time.monotonic() - t0:6.1f}s] {pl} {list(counts)}: step {res.value:.6g} (the least own bound, "
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
    left = t0 + time_limit - time.monotonic()
    if res is None or (res.status != "optimal" and left > 1.0 and not stop_requested()):
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
            left = t0 + time_limit - time.monotonic()
        final = compile_problem(problem, time_limit=max(0.5, left), seed=seed, warm=warm)
        if res is None or final.value <= res.value:
            res = final
        say(f"[{time.monotonic() - t0:6.1f}s] final {pl} {list(counts)}: step {res.value:.6g} ({res.status})")
    return res, pl, counts


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
                far: bool = True) -> dict:
    """Partitions (units per stage) -> their lower bound, exploring from `starts` the neighbours
    of the best-scored partition first: one unit moved from one stage to another, the stages
    between keeping their counts (every boundary between them moves by one), nearest first; with
    `far` False only to the next stage (one boundary moved).

    Why not only adjacent boundaries: the bound is a maximum over ranks, and in a V a layer moved
    from the middle of the pipeline to rank 0 crosses ranks whose terms would rise on the way, so
    a search by single boundary moves stops short (Llama 8 ranks in a V at 40 GiB, 16
    microbatches: 1203.0 ms after 405 partitions, where these moves reach 1170.6 ms, the bound
    over partitions, after 920). Cost: S (S - 1) partitions scored per expansion (2 (S - 1)
    without `far`), one ``own_bound`` each, until `deadline` or SEARCH_EVALUATIONS."""
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
        return len(scores) >= SEARCH_EVALUATIONS or (time.monotonic() >= deadline and len(scores) >= least) \
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

    found = baselines_for(problem.n_stages, problem.n_microbatches, problem.n_ranks, problem.placement_name)
    return {k: v for k, v in found.items() if tuple(v.placement) == tuple(problem.placement)}


def best_hand_made(problem, shapes: Optional[dict] = None) -> tuple[Optional[str], Optional[float]]:
    """(name, step) of the hand-made schedule (schedc.baselines) with the shortest step that fits
    the problem's cap; (None, None) when none fits."""
    from schedc.simulate import simulate

    best = (None, None)
    for name, sched in (shapes if shapes is not None else _hand_made_shapes(problem)).items():
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


def compare_splits(profile, units, ranks, microbatches, limit, cap, objective, placements) -> list[Comparison]:
    """torchtitan's default, the even and the compute-balanced split, each with its best hand-made
    schedule that fits, per placement."""
    rows = []
    for pl in placements:
        S = n_stages_for(pl, ranks)
        splits = [("torchtitan default", torchtitan_default_counts(profile.n_stages, S)),
                  ("even", even_counts(profile.n_stages, S)),
                  ("compute-balanced", balanced(units, pl, ranks, cap)[1])]
        for name, counts in splits:
            if counts is None:
                continue
            if not _fits(units, counts, pl, ranks, cap):
                rows.append(Comparison(name, pl, list(counts), None, None, "a rank cannot hold one microbatch"))
                continue
            sched, value = best_hand_made(_problem(profile, counts, pl, ranks, microbatches, limit, objective))
            rows.append(Comparison(name, pl, list(counts), sched, value, "" if sched else "no hand-made schedule fits"))
    return rows


# ---------------------------------------------------------------- hand-off and report


def framework_settings(result: PlanResult, csv: str = "plan.csv") -> dict:
    """What to give torchtitan 0.3.0 and NeMo AutoModel 0.7.0 to build the plan's stages and run its
    CSV. torchtitan: ParallelismConfig / TrainingConfig fields, and the same as command-line flags
    (its tyro rule reads a ``list[str]`` as one comma-separated argument, so the list of lists is one
    argument per stage). The schedule name only selects how stages are placed (V for ZBVZeroBubble,
    a loop otherwise; single-stage names for one stage per rank); the CSV gives the order."""
    partition = result.partition
    problem = result.compiled.problem
    ranks, M = problem.n_ranks, problem.n_microbatches
    mbs = result.units.microbatch_size or 1
    name = FRAMEWORK_NAMES["torchtitan"][result.placement]
    config = {
        "parallelism.pipeline_parallel_degree": ranks,
        "parallelism.pipeline_parallel_schedule": name,
        "parallelism.pipeline_parallel_schedule_csv": csv,
        "parallelism.pipeline_parallel_microbatch_size": mbs,
        "parallelism.module_fqns_per_model_part": partition,
        "training.local_batch_size": M * mbs,
    }
    args = []
    for key, value in config.items():
        args.append(f"--{key}")
        args += [",".join(stage) for stage in value] if isinstance(value, list) else [str(value)]
    return {
        "torchtitan": {"config": config, "command_line": args},
        "nemo": {
            "distributed": {"pp_size": ranks, "pipeline": {
                "pp_schedule": FRAMEWORK_NAMES["nemo"][result.placement], "pp_schedule_csv": csv,
                "pp_microbatch_size": mbs, "module_fqns_per_model_part": partition}},
            "step_scheduler": {"local_batch_size": M * mbs},
        },
    }


def nemo_yaml(settings: dict) -> str:
    """NeMo's block as YAML text (flow-style lists for the partition)."""
    d = settings["nemo"]["distributed"]
    p = d["pipeline"]
    lines = ["distributed:", f"  pp_size: {d['pp_size']}", "  pipeline:",
             f"    pp_schedule: {p['pp_schedule']}", f"    pp_schedule_csv: {p['pp_schedule_csv']}",
             f"    pp_microbatch_size: {p['pp_microbatch_size']}", "    module_fqns_per_model_part:"]
    if any(name.startswith("model.") for stage in p["module_fqns_per_model_part"] for name in stage):
        # per-unit profiles leave out modules every stage keeps (a merge would repeat them)
        lines.append("      # NeMo's own split also puts model.rotary_emb on every stage: add it to each list "
                     "if your model has one")
    lines += [f"      - {json.dumps(stage)}" for stage in p["module_fqns_per_model_part"]]
    lines += ["step_scheduler:", f"  local_batch_size: {settings['nemo']['step_scheduler']['local_batch_size']}"]
    return "\n".join(lines)


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
    }
    report["partition"] = result.partition
    report["profile"] = result.profile.model_dump(mode="json", exclude_none=True)
    report["frameworks"] = framework_settings(result, csv)
    return report
