"""Steps 3, 4b, 5 and 6 of the plan: the compiles, from short ones to the final one.

Problem: share the time limit between compiling several candidate partitions (a few seconds rank
them) and compiling the best one for long (where the step improves). Method: short compiles
alternating the best by lower bound and the best by hand-made step, skipping partitions whose
bound or two-rank relaxation cannot beat the best step; a second round for the two best; a compile
of the partition whose own bound is the least when the best step is well above it (step 4b); the
final compile of the best, warm-started from the better of its answer and a fresh warm start; and a
comparison split whose hand-made schedule is shorter replaces the answer (step 6). Cost: the
compiles' shares of the time limit (``SHORT_SHARE``, ``SECOND_SHARE``, ``SETTER_SHARE``, the rest).
"""

from __future__ import annotations

import math

from schedc.core.tolerances import REL
from schedc.errors import SchedcError
from schedc.planning.clock import clock_now, compile_within, stop_requested, work_budget_on
from schedc.planning.comparisons import TORCHTITAN_CLASSES
from schedc.planning.handmade import hand_made_warm
from schedc.planning.problem import is_tight, problem_for

CANDIDATES = 3  # partitions per placement compiled with a short time limit
TIGHT_CANDIDATES = 2  # ... where the best so far leaves a rank room for fewer than two microbatches
SHORT_SHARE = 0.25  # of the time limit, for all the short compiles together
FINALISTS = 2  # partitions that go on to a second round of compiling
SECOND_SHARE = 0.2  # of the time limit, for the second round
SETTER_SHARE = 0.25  # of the time limit, for compiling the partition whose own bound is the least
SETTER_MARGIN = 0.01  # ... when the best step found is more than this above that bound


def short_compiles(profile, pools, forced, ranks, microbatches, limit, objective, time_limit, seed, paired, say,
                    t0):
    """Step 3: short compiles, alternating the best by lower bound and the best by hand-made step
    in every placement; after the first, a partition whose two-rank bound is not below the best
    step is not compiled. Returns ((value, compile result or None, placement, counts), the
    candidates compiled). `paired` gets the two-rank bounds that showed a partition cannot win."""
    from schedc.solver.bounds.pair import PairRelaxation
    from schedc.solver.deadline import Deadline

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
        if per_placement[pl] >= TIGHT_CANDIDATES and is_tight(min(compiled, key=lambda c: c[0])):
            # under a tight cap the certificate's block relaxation ranks the partitions better
            # than more short compiles, and the one it ranks first is compiled (step 4b)
            continue
        tried.add((pl, counts))
        if compiled and lb >= min(c[0] for c in compiled) * (1 - REL):
            continue
        if clock_now() + short > t0 + 0.8 * time_limit or stop_requested():
            break
        per_placement[pl] += 1
        if compiled and not work_budget_on():
            # two ranks together often show that a partition with a low own bound cannot beat the
            # best step, in a fraction of a short compile (docs/design.md, "The plan")
            least = min(c[0] for c in compiled)
            relaxation = PairRelaxation(problem_for(profile, counts, pl, ranks, microbatches, limit, objective), least)
            pair = relaxation.next(Deadline.after(short))  # its first pair: the one that settles it, or not worth it
            if pair >= least * (1 - REL):
                paired[(pl, tuple(counts))] = pair
                say(f"[{clock_now() - t0:6.1f}s] {pl} {list(counts)}: two ranks together need {pair:.6g} or "
                    f"more (its own bound {lb:.6g}): not compiled")
                continue
        try:
            res = compile_within(problem_for(profile, counts, pl, ranks, microbatches, limit, objective),
                                  time_limit=short, seed=seed)
        except SchedcError:  # nothing found that fits in a short compile: the next candidate
            say(f"[{clock_now() - t0:6.1f}s] {pl} {list(counts)}: no schedule that fits found in {short:.1f}s")
            continue
        candidates.append({"placement": pl, "units_per_stage": list(counts), "lower_bound": lb,
                           "best_hand_made": None if math.isinf(ub) else ub, "step": res.value, "status": res.status})
        say(f"[{clock_now() - t0:6.1f}s] {pl} {list(counts)}: step {res.value:.6g} (its bound {lb:.6g}, "
            f"hand-made {ub:.6g}, {res.status})")
        compiled.append((res.value, res, pl, counts))
    if not compiled:  # no time for a short compile: the best-scored partition gets what is left
        pl, (lb, ub, counts) = order[0]
        return (math.inf, None, pl, counts), candidates, {}
    results = {(pl, tuple(counts)): res for _, res, pl, counts in compiled}
    best = min(compiled, key=lambda c: c[0])
    if not is_tight(best):  # under a tight cap the time goes to the block relaxation and step 4b
        best = _second_round(compiled, time_limit, seed, say, t0)
    results[(best[2], tuple(best[3]))] = best[1]
    return best, candidates, results


def _second_round(compiled, time_limit, seed, say, t0):
    """The two best after the short compiles go on from their answers (warm starts) for a while
    more each before one is chosen: a few seconds rank V partitions poorly (a rival can lead after
    two seconds and trail after ten). Returns the best (value, compile result, placement, counts)."""

    finalists = sorted(compiled, key=lambda c: c[0])[:FINALISTS]
    more = SECOND_SHARE * time_limit / FINALISTS
    if len(finalists) < 2 or clock_now() + len(finalists) * more > t0 + 0.8 * time_limit:
        return finalists[0]
    results = []  # the best is among the finalists, so the best of these is at least as good
    for _value, res, pl, counts in finalists:
        if res.status != "optimal" and not stop_requested():
            again = compile_within(res.problem, time_limit=more, seed=seed,
                                    warm=(res.schedule, res.sim, "plan: short compile"))
            res = again if again.value <= res.value else res
            say(f"[{clock_now() - t0:6.1f}s] {pl} {list(counts)}: step {res.value:.6g} after a second round "
                f"({res.status})")
        results.append((res.value, res, pl, counts))
    return min(results, key=lambda c: c[0])


def compile_bound_setter(profile, best, setters, candidates, results, ranks, microbatches, limit, objective,
                          time_limit, seed, say, t0, reached=None):
    """Step 4b: the partition whose own bound is the least sets the bound over partitions; where
    the best step found is well above it (over ``SETTER_MARGIN``), it gets a compile of its own, or
    goes on from its short compile (it is often a partition the bound-guided search never
    reached). It is skipped when a short compile already tried another partition whose own bound
    is as low and lost: there the bound is loose, not unreached, and the final compile gets the
    time. When the best is proven optimal for its partition the final
    compile has nothing to do, and this one gets all the time left. `results`: the compile results so
    far by (placement, counts); `reached`: the bounds step 4 took partitions to, by (placement,
    counts): a compiled partition whose bound the certificate raised above the setter's is no
    sign of a loose bound. Returns the best (value, compile result, placement, counts)."""

    reached = reached or {}

    def bound_of(c: dict) -> float:
        return max(c["lower_bound"], reached.get((c["placement"], tuple(c["units_per_stage"])), 0.0))

    for own, pl, counts in sorted(setters, key=lambda c: c[0]):
        before = results.get((pl, tuple(counts)))
        done = best[1] is not None and best[1].status == "optimal"
        # the final compile keeps at least 5% of the time (it goes on from the better answer)
        end = t0 + (time_limit - min(0.05 * time_limit, 5.0) if done else 0.95 * time_limit)
        seconds = end - clock_now() if done else min(SETTER_SHARE * time_limit, end - clock_now())
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
        res = compile_within(problem_for(profile, counts, pl, ranks, microbatches, limit, objective),
                              time_limit=seconds, seed=seed, warm=warm)
        if before is not None and before.value < res.value:
            res = before
        candidates.append({"placement": pl, "units_per_stage": list(counts), "lower_bound": own,
                           "best_hand_made": None, "step": res.value, "status": res.status})
        say(f"[{clock_now() - t0:6.1f}s] {pl} {list(counts)}: step {res.value:.6g} (the least own bound, "
            f"{own:.6g}; {res.status})")
        if res.value < best[0]:
            best = (res.value, res, pl, counts)
    return best


def final_compile(profile, best, ranks, microbatches, limit, objective, time_limit, seed, say, t0):
    """Step 5: the best partition gets the rest of `time_limit`, warm-started from the better of
    its short compile and a fresh warm start (schedc.solver.engines.warm) with a fifth of that time, two
    seconds at most. A short compile gives its list heuristic a tenth of its few seconds, and on a
    V the rules it did not reach can be the better ones (docs/design.md, "The plan", step 5). A
    compile's own warm start stays at a tenth: there the engines after it have the time. Cost:
    the rest of `time_limit`. Returns (compile result, placement, counts)."""
    from schedc.solver.deadline import Deadline
    from schedc.solver.engines.warm import warm_start

    value, res, pl, counts = best
    left = t0 + time_limit - clock_now()
    if res is None or (res.status != "optimal" and left > min(1.0, 0.1 * time_limit) and not stop_requested()):
        problem = problem_for(profile, counts, pl, ranks, microbatches, limit, objective)
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
            left = t0 + time_limit - clock_now()
        if warm is None:  # no short compile ran (a short time limit): a hand-made schedule that fits starts it
            warm = hand_made_warm(problem)
        final = compile_within(problem, time_limit=max(0.1 if warm is not None else 1.0, left), seed=seed, warm=warm)
        if res is None or final.value <= res.value:
            res = final
        say(f"[{clock_now() - t0:6.1f}s] final {pl} {list(counts)}: step {res.value:.6g} ({res.status})")
    return res, pl, counts


def adopt_faster_row(profile, res, pl, counts, comparisons, ranks, microbatches, limit, objective, seed,
                      placements=("loop", "v", "interleaved")):
    """A plan never loses to a comparison it prints: where a comparison row (a hand-made schedule on
    a comparison split, or torchtitan's class on its default split) that fits the cap is shorter
    than the search's answer (a time limit too short, or a placement the search did not reach),
    that partition, placement and schedule become the plan (one short compile warm-started from
    it, kept only where it is no longer than the row). Rows of `placements` only: a placement
    asked for (``--placement loop``) is kept, and a faster row of another stays a printed row."""
    from schedc.core.baselines import make_baseline
    from schedc.core.simulate import simulate

    baseline = {cls: name for cls, name, _ in TORCHTITAN_CLASSES}
    rows = [c for c in comparisons if c.value is not None and c.counts and c.value < res.value * (1 - REL)
            and c.placement in placements]
    for row in sorted(rows, key=lambda c: c.value):
        problem = problem_for(profile, row.counts, row.placement, ranks, microbatches, limit, objective)
        try:
            sched = make_baseline(baseline.get(row.schedule, row.schedule), problem.n_stages, microbatches, ranks,
                                  placement=problem.placement_name)
            sim = simulate(sched, problem.profile, problem.memory)
        except SchedcError:
            continue
        if not sim.fits or sim.objective(objective) >= res.value * (1 - REL):
            continue
        better = compile_within(problem, time_limit=0.5, seed=seed, warm=(sched, sim, f"plan: {row.split} split"))
        if better.value <= sim.objective(objective) * (1 + REL):
            return better, row.placement, list(row.counts)
    return res, pl, counts


def _interleave(lists: list[list]) -> list:
    """The items of `lists`, taking one from each list in turn."""
    out = []
    for k in range(max(map(len, lists), default=0)):
        for lst in lists:
            if k < len(lst):
                out.append(lst[k])
    return out
