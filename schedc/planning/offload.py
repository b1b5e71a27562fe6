"""Offload to host memory as a choice of the plan (``schedc plan --offload auto``).

Problem: under a cap that binds, the plan's step is longer than the same model's step without a
cap; offloading microbatches' activations to host memory (schedc.core.memory_actions over a
schedc.core.host_link.HostLink) may make a shorter schedule fit, and the partition worth offloading
is not the one worth planning under the cap (offload relaxes memory, so the partition balanced
for compute gains most), nor need checkpointing stay what the plan chose without offload.

Method (:func:`plan_offload`): the plan without offload runs first (``plan``, or ``plan_ac`` with
``--ac auto``) in the whole time limit, as ``--offload none`` runs it. Its candidates are then
offloaded, in ``OFFLOAD_SHARE`` of the time limit more, each
profile form apart: the plan's own units (with ``--ac auto`` the checkpointing it chose) and,
under ``--ac auto``, the units without checkpointing. For each form the partitions are the plan's
(in every form: offload may take the place of the checkpointing it chose there), the comparison
rows' and, per placement tried, the partition that reaches the bound over partitions without a
cap. Each (form, partition), the plan's own first
(its compile is the capped one of its partition), its partition in the other form next, and then
by uncapped own bound, the first
MAX_CANDIDATES of them (a share split further leaves the choosers no time after the compiles),
gets the compiles of ``--offload auto`` (schedc.solver.offload: without a cap and the discounted
problems) in its share of the time less CHOOSER_SHARE, then the choosers on their answers and
the hand-made schedules over the cap (with `recompute_units`, on the units without
checkpointing, also recompute of single microbatches: schedc.solver.recompute_choice) and the
offload heuristic (``offload_result``) until the
candidate's share ends; an order that splits a checkpointed stage's backward is merged into B and offloaded
again. A candidate that cannot hold one microbatch even with its offloadable bytes away
(:func:`may_fit_with_offload`: offload moves only what F made, and on one stage per rank the F
holds it all while it runs), or whose uncapped own bound cannot beat the shortest step so far,
is skipped. With ``--ac auto`` (`stage_forms`) the candidates also include partitions with
checkpointing per stage sized for offload (:func:`offload_sized_candidates`: on a loop and, under
placement auto, on an interleaved loop of two stages a rank), tried right after the plan's own.
The plan keeps the shortest that fits, and the plan without offload where nothing is
shorter: never worse than ``--offload none``. Where nothing fits without offload (the plan
refuses the cap), the plan without a cap stands in for it: its partitions and placements are
offloaded under the cap (the units without checkpointing and, with ``--ac auto`` or a
checkpointed profile, the most checkpointed form), the rows without offload say that nothing
fits, and the refusal stands when no offload fits either (on one stage per rank offload cannot
lower the one microbatch a rank needs; on a V it can). The rows "nothing", "checkpointing only", "offload only" and "both" are the
best of each kind found on the way. Bound (:func:`offload_bound`): over every partition of the units
without checkpointing, with any offload over the link and any checkpointing per unit and
microbatch among the plan's modes, under the cap (schedc.core.offload_bound: a forward holds all
it makes until its copy out starts, so a stage that cannot keep one microbatch must recompute;
a moved byte is on the device during F, both copies and I, so the cap still bounds the
byte-seconds; where an interleaved candidate was tried, :func:`interleaved_offload_bound` too);
at least the bound without a cap, and the report says what it assumes.

Cost: the plan's, then up to four compiles per candidate in ``OFFLOAD_SHARE`` of the time more,
the offload heuristic and the chooser's simulations inside each candidate's share (they stop at
its end and charge their work under a work budget); one dynamic program per placement for the
bound (schedc.core.offload_bound: O(S U^2) for a loop, O(R U^4) for a V, which takes the bound
without a cap where its estimate is over BOUND_SHARE of the offload's time).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

from schedc.core.costs import AC_MODES, MemoryLimit, Profile
from schedc.core.host_link import HostLink
from schedc.core.partition import Units, min_cap, partition_bound
from schedc.core.tolerances import REL
from schedc.errors import ParameterError, SchedcError
from schedc.frameworks import launchable_modes
from schedc.planning.clock import clock_now, compile_within, stop_requested
from schedc.planning.problem import INTERLEAVED, holds_one_microbatch, own_bound, problem_for
from schedc.planning.result import PlanResult

OFFLOAD_SHARE = 0.5  # of the time limit, after it, for offloading the plan's candidates
MAX_CANDIDATES = 4  # offloaded, the plan's own and the best bounds: more leaves the choosers no time
# microbatches a stage but the last is sized to hold on the device when offload keeps the others
# in host memory (offload_sized_candidates: why three)
OFFLOAD_HOLDS = (3, 4)
# Stages sized for offload in an interleaved loop (stage s on rank s mod R): the share of its rank's
# cap each of a rank's two stages is sized under (offload_sized_candidates: why shares). From a
# sweep of 0.50-0.62 on issue 49's rows (benchmarks/plan_offload.py): 0.56 is the best of the
# seq-4096 Qwen2.5-7B row at 28 GiB and of the seq-8192 one at 40 GiB, 0.5 of the row at 34 GiB
# (where at 0.56 the stages keep more than the link moves in time); from 0.59 on every row's
# steps wait on the copies (3.3-19.7 s against 2.4-5.4).
INTERLEAVED_SHARES = (0.56, 0.5)
# of the offload's time, at most, for the V's bound with offload, by its program's estimate (a few
# times the uncapped program's terms; the estimate, not the clock, so the plan is reproducible);
# past it the V's bound without a cap
BOUND_SHARE = 0.1
ROWS = ("nothing", "checkpointing only", "offload only", "both")
BOUND_SOURCE = ("over every partition, schedule, offload over the link and checkpointing per unit and "
                "microbatch among the plan's modes, under the cap: every forward holds what it makes until "
                "its copy out, and a moved byte is on the device during F, both copies and I "
                "(schedc.core.offload_bound); where the plan tried the interleaved loop, over it too: its busiest "
                "rank's work, each stage on a rank of its own")


def may_fit_with_offload(problem) -> bool:
    """Whether some schedule with offload may fit the partition's cap: on a rank of one stage,
    one microbatch as it is (holds_one_microbatch's rule: the F holds all it makes while it
    runs); on a rank of several stages (a V), one microbatch with, on every stage but the last,
    the bytes offload moves away (schedc.solver.offload.discounted_problem with all of them:
    the lower stage's can wait in host memory while the microbatch climbs to the upper one).
    A necessary condition: the candidates it keeps are offloaded, and only those that then fit
    count."""
    from schedc.core.cost_model import fits
    from schedc.solver.offload import discounted_problem

    if holds_one_microbatch(problem):
        return True
    alone = problem.costs
    away = discounted_problem(problem, 1.0).costs
    several = [sum(1 for q in problem.placement if q == r) > 1 for r in range(problem.n_ranks)]
    return all(fits((away if multi else alone).least_caps[r], alone.caps[r]) for r, multi in enumerate(several))


def _splits_backward(compiled) -> bool:
    """Whether the schedule runs I and W on a stage the compiler merges into B (a checkpointed
    stage), which torch refuses under checkpointing."""
    from schedc.solver.graph import graph_of

    g = graph_of(compiled.problem)
    return any(g.backward[a.stage] == "B" and a.kind in ("I", "W") for _, a in compiled.schedule.all_actions())


def offload_partition(problem, link: HostLink, seconds: float, seed: int = 0, capped=None,
                      checkpointed: Optional[Profile] = None, sized: bool = False):
    """``--offload auto`` on one partition's problem (schedc.solver.offload) in `seconds`:
    the compile without a cap and those of the discounted problems, then the chooser on their
    answers, the hand-made schedules and `capped` (the plan's compile of this partition, if any);
    with `checkpointed` (the partition's stages checkpointed) the choosers may also recompute
    microbatches (schedc.solver.recompute_choice). `sized`: the stages are sized for offload
    (:func:`offload_sized_candidates`): no discounted compiles (they offload part of what
    partitions sized without offload hold), the offload heuristic first (schedc.solver.offload,
    ``offload_result``).
    The CompileResult with ``memory_actions`` and ``offload`` in its report; None when nothing
    fits, with offload or without."""
    from schedc.solver.deadline import Deadline
    from schedc.solver.offload import (
        CHOOSER_SHARE,
        DISCOUNTS,
        LOOSENED_SHARE,
        UNCAPPED_SHARE,
        discounted_problem,
        offload_result,
    )

    end = Deadline(clock_now() + seconds)  # the chooser's simulations stop there too
    # the compiles' shares; sized for offload, what the discounted ones would take goes to the
    # heuristic and the choosers
    share = seconds * (1 - CHOOSER_SHARE) / (UNCAPPED_SHARE + LOOSENED_SHARE)
    try:
        relaxed = compile_within(problem.with_memory(MemoryLimit(kind="none")), time_limit=max(0.2, share * UNCAPPED_SHARE), seed=seed)
    except SchedcError:
        return None
    loosened = []
    for fraction in () if sized else DISCOUNTS:
        if stop_requested():
            break
        try:
            res = compile_within(discounted_problem(problem, fraction), seed=seed,
                                 time_limit=max(0.2, share * LOOSENED_SHARE / len(DISCOUNTS)))
        except SchedcError:  # the cap holds less than one microbatch even so
            continue
        loosened.append((f"{100 * fraction:g}% offloaded", res))
    # the compiles' untimed steps (bound, warm start, action graph) can run past their shares:
    # the heuristic and the chooser keep theirs, or a longer limit could find less
    end = Deadline(max(end.at, clock_now() + CHOOSER_SHARE * seconds))
    try:
        out = offload_result(problem, link, capped, relaxed, seconds, loosened, end, checkpointed, sized)
    except ParameterError as e:
        if e.param != "memory":
            raise
        return None
    return _whole_backwards(out, problem, link, end)


def _whole_backwards(out, problem, link: HostLink, deadline=None):
    """`out` with every checkpointed stage's backward whole (B at I's place, as torch runs it;
    schedc.planning.ac.whole_backwards), where its order, a hand-made one, splits them; its
    offloads chosen again on the merged order (their fetch points may name the merged I's and
    W's). None when they no longer make it fit. Cost: the chooser's, once."""
    from schedc.planning.ac import whole_backwards
    from schedc.solver.offload import offload_order, offload_summary

    if not _splits_backward(out):
        return out
    merged = whole_backwards(out)
    if not out.report["memory_actions"]:
        return merged if merged.sim.fits else None
    from schedc.solver.deadline import NEVER

    choice = offload_order(merged.schedule, problem.profile, problem.memory, link, problem.runtime,
                           problem.objective, deadline or NEVER)
    if not choice.fits:
        return None
    report = dict(merged.report)
    before = out.report["offload"]
    report["memory_actions"] = choice.to_json()
    report["offload"] = dict(before, **offload_summary(choice, problem.profile, before["step_without_offload"],
                                                       problem.objective))
    report["predicted"] = dict(report.get("predicted", {}), makespan=choice.sim.makespan, span=choice.sim.span,
                               peak_memory_per_rank=list(choice.sim.peak_memory), fits_memory=True)
    value = choice.sim.objective(problem.objective)
    return replace(merged, sim=choice.sim, report=report, gap=max(0.0, (value - merged.lower_bound) / value))


def _candidates(form: Profile, plan: PlanResult, own: bool, placements, objective) -> list:
    """(placement, counts) for `form`: the plan's own partition (balanced under the cap: where
    `form` is not the plan's units, the units without checkpointing, offload takes the place of
    the checkpointing the plan chose on it), the comparison rows' and per placement the uncapped
    bound's partition and the partition that needs the least memory (where the cap binds hardest,
    the one whose stages offload can bring under it); only the plan's own where `own` and its
    checkpointing is per stage (its units' modes belong to its stages)."""
    p = plan.compiled.problem
    out = [(plan.placement, tuple(plan.counts))] if own or len(form.stages) == len(plan.units.stages) else []
    if own and plan.ac is not None and not isinstance(plan.ac.chosen, str):
        return out
    out += [(c.placement, tuple(c.counts)) for c in plan.comparisons if c.counts and c.placement in placements]
    units = Units.of(form, p.n_microbatches)
    for pl in placements:
        if pl == INTERLEAVED:  # no dynamic program lists its partitions
            continue
        pb = partition_bound(form, p.n_ranks, p.n_microbatches, math.inf, pl, objective)
        if pb.counts is not None:
            out.append((pl, tuple(int(c) for c in pb.counts)))
        _, least = min_cap(units, pl, p.n_ranks, p.n_microbatches)
        if least is not None:
            out.append((pl, tuple(int(c) for c in least)))
    return list(dict.fromkeys(out))


def offload_sized_candidates(stage_forms: dict, ranks: int, microbatches: int, cap: float,
                             interleaved: bool = False) -> list:
    """[(units, units per stage, modes per stage, placement)]: the partitions and per-stage
    checkpointing of ``--ac auto``'s dynamic program (schedc.planning.ac.stage_candidates, on a
    loop, 1F1B's depth) with every stage but the last sized to hold at most k of
    ``OFFLOAD_HOLDS`` microbatches on the device, the others offloaded; with `interleaved` (and at
    least one unit per stage) also 2R stages interleaved on the R ranks, sized to hold at most
    ``OFFLOAD_HOLDS[0]``.

    Stages sized for offload: sized for 1F1B's R - s microbatches, the early stages of a tight cap
    checkpoint most, though they hold each microbatch longest and offload could keep it instead.
    A stage whose microbatches go to host memory still holds, while it runs one backward, that
    microbatch, the previous forward's microbatch until its copy out ends and the next backward's
    from the start of its fetch (the bytes leave when a copy out ends and are back when a fetch
    starts, as the allocator holds them): three, unless a copy is shorter than a forward, so k = 3
    and the looser 4.

    Interleaved: such stages run their backward whole (B), so a loop keeps 1F1B's bubble, about
    R - 1 of a stage's F + B; two stages a rank halve it (Megatron's interleaved 1F1B). The two
    stages of a rank share its cap, which the loop's program over 2R stages cannot see (its
    stages are independent); each is sized under a share of the cap (``INTERLEAVED_SHARES``, more
    than half where the stages' peaks do not meet), and the candidate's offload, simulated under
    the rank's whole cap, decides. Cost: one loop dynamic program per k and share (O(S U^2 K) for
    K forms)."""
    from schedc.planning.ac import runtime_modes, spec_units, stage_candidates

    sizings = [("loop", ranks, k, cap) for k in OFFLOAD_HOLDS]
    if interleaved and ranks > 1 and stage_forms["none"].n_stages >= 2 * ranks:
        sizings += [(INTERLEAVED, 2 * ranks, OFFLOAD_HOLDS[0], share * cap) for share in INTERLEAVED_SHARES]
    out, seen = [], set()
    for placement, stages, k, room in sizings:
        for _, counts, specs in stage_candidates(stage_forms, "loop", stages, microbatches, room, depths=(1.0,),
                                                 hold_at_most=k):
            if (placement, counts, specs) not in seen:
                seen.add((placement, counts, specs))
                out.append((spec_units(stage_forms, counts, specs), counts,
                            runtime_modes(stage_forms, counts, specs), placement))
    return out


def offload_bound(form: Profile, plan: PlanResult, placements, link: HostLink, cap: float,
                  modes=(), seconds: float = math.inf) -> float:
    """The bound over every partition of `form` (the units without checkpointing) onto the plan's
    ranks in `placements`, any schedule, any offload over `link` and any checkpointing per unit
    and microbatch among `modes` under the per-rank cap `cap` (schedc.core.offload_bound). The
    interleaved loop's is :func:`interleaved_offload_bound`; a V's is its bound without a cap
    where its dynamic program is estimated (schedc.core.partition.v_bound_seconds, not the clock:
    the same on any machine) to take over BOUND_SHARE of `seconds`, the time the offload has."""
    from schedc.core.offload_bound import offload_partition_bound
    from schedc.core.partition import v_bound_seconds

    p = plan.compiled.problem
    R, M = p.n_ranks, p.n_microbatches

    def one(pl: str) -> float:
        if pl == INTERLEAVED:
            return interleaved_offload_bound(form, modes, R, M, cap, p.objective, link.per_gpu_bandwidth)
        if pl == "v" and v_bound_seconds(form.n_stages, R) > BOUND_SHARE * seconds:
            return partition_bound(form, R, M, math.inf, pl, p.objective).value
        return offload_partition_bound(form, modes, R, M, cap, pl, p.objective, link.per_gpu_bandwidth).value
    return min(one(pl) for pl in placements)


def interleaved_offload_bound(form: Profile, modes, ranks: int, microbatches: int, cap: float,
                              objective: str = "makespan", bandwidth: float = math.inf) -> float:
    """:func:`offload_bound` over every partition of `form` into 2R stages interleaved on R ranks
    (stage s on rank s mod R): the larger of the busiest rank's work however the units are dealt
    to the ranks (schedc.planning.search.busiest_rank_work_bound) and the bound with offload of a
    loop of 2R ranks, where each stage has a cap and a link of its own and every interleaved
    schedule runs as it is (schedc.planning.search.interleaved_bound's relaxation). Cost: the
    loop's dynamic program on 2R ranks."""
    from schedc.core.offload_bound import offload_partition_bound
    from schedc.planning.search import busiest_rank_work_bound

    own = offload_partition_bound(form, modes, 2 * ranks, microbatches, cap, "loop", objective, bandwidth)
    return max(busiest_rank_work_bound(Units.of(form, microbatches), ranks, microbatches), own.value)


def checkpointing_modes(profiles: dict) -> list:
    """The checkpointed forms (schedc.planning.ac.checkpointed_form) of every mode in `profiles`
    but "none": what :func:`offload_bound` lets each unit choose per microbatch, every
    checkpointing ``--ac auto`` could choose."""
    from schedc.planning.ac import checkpointed_form

    return [checkpointed_form(p, profiles["none"]) for m, p in profiles.items() if m != "none"]


def plan_offload(plan: PlanResult, link: HostLink, time_limit: float, forms: dict, seed: int = 0,
                 say=None, refused: Optional[ParameterError] = None, memory: Optional[MemoryLimit] = None,
                 recompute_units: Optional[Profile] = None, modes: Optional[list] = None,
                 stage_forms: Optional[dict] = None, interleaved: bool = False) -> PlanResult:
    """`plan` (the plan without offload) with offload chosen over its candidates (module
    docstring) in `time_limit`; `forms` maps the rows' kinds ("offload only": the units without
    checkpointing, "both": the plan's checkpointed units, when it checkpoints) to per-unit
    profiles. The result's ``offload`` holds the rows and the summary; its compile report the
    memory actions. Where nothing fits `memory` without offload, `plan` is the plan without a
    cap (its partitions, placements and bound), offloaded under `memory`, and `refused` the
    error that said nothing fits: raised again when offload fits nothing either. With
    `recompute_units` (the units checkpointed, schedc.planning.ac.checkpointed_form) the choosers
    on the units without checkpointing may also recompute chosen microbatches; such a candidate
    is a "both" row (checkpointing per microbatch, the stages themselves not checkpointed).
    `modes`: the checkpointed per-unit forms the plan could choose from (the bound's,
    :func:`offload_bound`); default the checkpointed forms among `forms` and `recompute_units`.
    `stage_forms`: with ``--ac auto``, its forms per mode (schedc.planning.ac.mode_forms), from
    which :func:`offload_sized_candidates` adds "both" candidates with checkpointing per stage, on
    a loop and, with `interleaved` (the plan's placement is auto), interleaved."""
    say = say or (lambda line: None)
    t0 = clock_now()
    end = t0 + time_limit
    p = plan.compiled.problem
    fits = refused is None
    placements = [pl for pl in plan.bounds if pl in ("loop", "v")] or [plan.placement]
    limit, ranks, M, objective = memory or p.memory, p.n_ranks, p.n_microbatches, p.objective
    queue = []
    for kind, form in forms.items():
        own = form is plan.units
        for pl, counts in _candidates(form, plan, own, placements, objective):
            problem = plan.compiled.problem if fits and own and (pl, counts) == (plan.placement, tuple(plan.counts)) \
                else problem_for(form, counts, pl, ranks, M, limit, objective)
            if not may_fit_with_offload(problem):
                continue
            queue.append((own_bound(problem.with_memory(MemoryLimit(kind="none"))), kind, form, pl, counts, problem))
    sized_modes: dict = {}  # id of a candidate's units sized for offload -> its checkpointing per stage
    cap = limit.value if limit.kind == "bytes" else math.inf
    if stage_forms is not None and fits and "loop" in placements and math.isfinite(cap):
        for form, counts, stage_modes, pl in offload_sized_candidates(stage_forms, ranks, M, cap, interleaved):
            problem = problem_for(form, counts, pl, ranks, M, limit, objective)
            if may_fit_with_offload(problem):
                sized_modes[id(form)] = stage_modes
                queue.append((own_bound(problem.with_memory(MemoryLimit(kind="none"))), "both", form, pl, counts,
                              problem))
    # the plan's own problem first (its compile is the capped one already), then the stages
    # sized for offload, then its partition in the other forms, then by bound: the first
    # candidates are the ones sure to be tried
    queue.sort(key=lambda q: (q[5] is not plan.compiled.problem, id(q[2]) not in sized_modes,
                              (q[3], q[4]) != (plan.placement, tuple(plan.counts)), q[0]))
    # a share too small for the choosers finds nothing: the first few, each with time to choose
    queue = queue[:MAX_CANDIDATES]
    if any(q[3] == INTERLEAVED for q in queue):  # the bound covers every placement the plan may take
        # (the plan's own, where it is interleaved, among them)
        placements = placements + [INTERLEAVED]
    best: dict = {}  # kind -> (compiled, form, placement, counts)
    shortest = plan.value if fits else math.inf
    for k, (lb, kind, form, pl, counts, problem) in enumerate(queue):
        left = end - clock_now()
        if stop_requested() or left <= 0:
            break
        if lb >= shortest * (1 - REL) and kind in best:
            continue
        capped = plan.compiled if problem is plan.compiled.problem else None
        checkpointed = None if recompute_units is None or form is not forms.get("offload only") else \
            problem_for(recompute_units, counts, pl, ranks, M, limit, objective).profile
        res = offload_partition(problem, link, left / (len(queue) - k), seed, capped, checkpointed,
                                sized=id(form) in sized_modes)
        if res is None:
            say(f"[{clock_now() - t0:6.1f}s] offload, {kind}: {pl} {list(counts)}: nothing fits")
            continue
        redone = sum(1 for a in res.report["memory_actions"] if a["action"] == "recompute")
        if redone:
            kind = "both"  # checkpointing (per microbatch) and offload
        say(f"[{clock_now() - t0:6.1f}s] offload, {kind}: {pl} {list(counts)}: {res.value:.6g} "
            f"({len(res.report['memory_actions']) - redone} microbatches moved, {redone} recomputed)")
        if kind not in best or res.value < best[kind][0].value:
            best[kind] = (res, form, pl, counts)
        shortest = min(shortest, res.value)
    from schedc.planning.limiter import plan_limiter
    from schedc.planning.report import build_plan_report

    if not fits and not best:
        raise refused  # type: ignore[misc]  # nothing fits with offload either: the plan's own refusal
    if modes is None:
        modes = [f for f in (forms.get("both"), recompute_units) if f is not None and f is not forms.get("offload only")]
    bound = offload_bound(forms.get("offload only", plan.units), plan, placements, link, cap, modes, time_limit)
    out = replace(_adopt(plan, best, link, forms, placements, bound, fits, sized_modes),
                  solve_time=plan.solve_time + clock_now() - t0)
    out = replace(out, limiter=plan_limiter(out))
    return replace(out, report=build_plan_report(out))


def _adopt(plan: PlanResult, best: dict, link: HostLink, forms: dict, placements, bound: float,
           fits: bool = True, sized_modes: Optional[dict] = None) -> PlanResult:
    """The plan with the shortest offload that beats it, or the plan itself; either with the
    rows, the summary and `bound` (:func:`offload_bound`; its limiter and report still to be rebuilt).
    With `fits` false `plan` is the plan without a cap (nothing fits without offload) and the
    shortest offload wins, its rows without offload empty. `sized_modes`: the checkpointing per
    stage of the candidates sized for offload, by id of their units (the winner's replaces the
    plan's, which the runtime reads from ``assumes``)."""
    # a candidate that fits with no memory action is a shorter order that the compiles of
    # --offload auto found: kept too (never worse than --offload none)
    found = [(res.value, kind) for kind, (res, *_) in best.items()]
    win = min(found)[1] if found and (not fits or min(found)[0] < plan.value * (1 - REL)) else None
    rows = offload_rows(plan, best, forms)
    if not fits:
        rows = [r if r["row"] not in ("nothing", "checkpointing only") else dict(r, step=None, fits=False, launchable_step=None,
                                                what="nothing fits the cap without offload")
                for r in rows]
        plan = replace(plan, comparisons=[replace(c, schedule=None, value=None, peak=None,
                                                  note="nothing fits the cap without offload")
                                          for c in plan.comparisons],
                       notes=plan.notes + ["nothing fits the cap without offload: every partition was offloaded "
                                           "from the plan without a cap"])
    bound = min(bound, plan.value)
    if win is None:
        out = plan
        summary = {"chosen": False, "why": "no plan with offload is shorter than the plan without it",
                   "step_with_offload": None, "step_without_offload": plan.value, "stages": [], "link_busy": []}
        actions: list = []
    else:
        res, form, pl, counts = best[win]
        stage_modes = (sized_modes or {}).get(id(form))
        entry = {"placement": pl, "units_per_stage": list(counts), "offload": win, "step": res.value}
        out = replace(plan, compiled=res, units=form, counts=list(counts), placement=pl, least_memory=None,
                      candidates=plan.candidates + [entry if stage_modes is None else
                                                    dict(entry, sized_for_offload=True, modes=stage_modes)])
        if stage_modes is not None:  # sized for offload: its own checkpointing per stage
            out = replace(out, assumes={**plan.assumes, "activation_checkpoint": stage_modes})
            if plan.ac is not None:
                out = replace(out, ac=replace(plan.ac, chosen=stage_modes))
        elif form is forms.get("offload only") and plan.ac is not None and plan.ac.chosen != "none":
            # the units without checkpointing won (offloaded, some microbatches recomputed): the
            # stages run without checkpointing, the memory actions recompute per microbatch
            out = replace(out, ac=replace(plan.ac, chosen="none"),
                          assumes={**plan.assumes, "activation_checkpoint": "none"})
        actions = res.report["memory_actions"]
        summary = dict(res.report["offload"], chosen=bool(actions), row=win,
                       step_without_offload=plan.value if fits else None)
        if not actions:
            summary["why"] = "an order found without a cap fits as it is: no microbatch moves"
    bound = min(bound, out.value)
    summary.update(rows=rows, lower_bound_assumes=BOUND_SOURCE, link=link.assumes())
    launch = launchable_row(summary)
    mode = plan.assumes.get("activation_checkpoint", (plan.units.assumes or {}).get("activation_checkpoint"))
    mode = mode if isinstance(mode, str) else None
    # torchtitan and NeMo run no memory actions: what they can launch, where the plan offloads
    summary["frameworks_launch"] = None if not summary["chosen"] else {
        "row": None if launch is None else launch["row"],
        "activation_checkpoint": None if launch is None else "none" if launch["row"] == "nothing" else
        launch.get("launchable_mode", mode),
        "step": None if launch is None else launch["launchable_step"],
        "longer_by": None if launch is None else launch["launchable_step"] - out.value}
    summary["memory_actions"] = len(actions)
    out = replace(out, bound=bound, bounds={pl: bound for pl in placements}, offload=summary,
                  assumes={**out.assumes, **link.assumes(), "offload": "auto"})
    return out


def offload_rows(plan: PlanResult, best: dict, forms: dict) -> list[dict]:
    """The side-by-side rows: nothing, checkpointing only, offload only, both; each its step
    (None: nothing of that kind fits or it was not planned), whether it fits and what it is;
    `forms` the kinds offloaded (plan_offload's)."""
    ac = plan.ac
    mode = plan.assumes.get("activation_checkpoint", (plan.units.assumes or {}).get("activation_checkpoint"))
    checkpoints = mode not in (None, "none")
    rows = []
    if ac is not None:
        none_step = ac.global_steps.get("none")
        rows.append(_row("nothing", none_step, "no checkpointing, no offload"))
        others = [v for m, v in ac.global_steps.items() if m != "none" and v is not None]
        others += [plan.value] if _checkpoints([ac.chosen]) else []
        if ac.per_stage is not None and _checkpoints(ac.per_stage.get("modes", [])):
            others.append(ac.per_stage["step"])
        ckpt = _row("checkpointing only", min(others, default=None),
                    f"--ac auto chose {ac.chosen}" if others else
                    "no checkpointing mode planned beats no checkpointing (--ac auto)")
        # torchtitan and NeMo launch one of their modes for every layer: this row's best of those
        ckpt["launchable_step"], ckpt["launchable_mode"] = min(
            ((v, m) for m, v in ac.global_steps.items() if m != "none" and v is not None and m in launchable_modes()),
            default=(None, None))
        rows.append(ckpt)
    elif checkpoints:
        rows.append(_row("nothing", None, "not planned: the profile checkpoints (--ac auto plans both)"))
        ckpt = _row("checkpointing only", plan.value, f"activation checkpointing {mode}")
        if mode not in launchable_modes():  # light: schedc's runtime only
            ckpt["launchable_step"] = None
        rows.append(ckpt)
    else:
        rows.append(_row("nothing", plan.value, "no checkpointing, no offload"))
        rows.append(_row("checkpointing only", None, "not planned: give --ac auto"))
    for kind in ("offload only", "both"):
        if kind not in best:
            rows.append(_row(kind, None, "nothing fits with offload" if kind in forms else
                             "not planned: --ac auto chose no checkpointing" if ac is not None else
                             "not planned: give --ac auto"))
            continue
        res, _, pl, counts = best[kind]
        redone = sum(1 for a in res.report["memory_actions"] if a["action"] == "recompute")
        what = f"{len(res.report['memory_actions']) - redone} microbatches moved" + \
            (f", {redone} recomputed (the stages not checkpointed)" if redone else "")
        rows.append(dict(_row(kind, res.value, what),
                         placement=pl, units_per_stage=list(counts)))
    return rows


def _checkpoints(modes) -> bool:
    """Whether a list of modes (per stage, an entry per block where it is a list) checkpoints."""
    flat = [m for entry in modes for m in (entry if isinstance(entry, (list, tuple)) else [entry])]
    return any(m not in ("none", "none-b", None) for m in flat)


def _row(kind: str, step: Optional[float], what: str) -> dict:
    """One row; ``launchable_step``: the step of the row that torchtitan and NeMo can launch (no
    memory actions, one of their checkpointing modes for every layer), None where they cannot."""
    launchable = step if kind in ("nothing", "checkpointing only") else None
    return {"row": kind, "step": step, "fits": step is not None, "what": what, "launchable_step": launchable}


def launchable_row(summary: Optional[dict]) -> Optional[dict]:
    """Of a plan's offload summary's rows, the one whose ``launchable_step`` (what torchtitan and
    NeMo can launch of it) is the least; None when they can launch none."""
    rows = [r for r in (summary or {}).get("rows", []) if r.get("launchable_step") is not None]
    return min(rows, key=lambda r: r["launchable_step"], default=None)


def plan_with_offload(profiles: dict, link: HostLink, *, time_limit: float, budget: str = "time",
                      none: Optional[Profile] = None, seed: int = 0, progress=None, **kwargs) -> PlanResult:
    """``schedc plan --offload auto``: the plan ``--offload none`` makes with the same arguments
    (``plan_ac`` for several `profiles`, one per checkpointing mode; else ``plan_mode`` of the one,
    `none` its no-checkpointing counterpart), in the whole `time_limit`, then :func:`plan_offload`
    in ``OFFLOAD_SHARE`` of `time_limit` more (on a work clock of its own under
    ``budget="work"``). So it is never worse than ``--offload none`` with the same time limit, and
    takes up to 1 + OFFLOAD_SHARE times as long. Where nothing fits without offload, the plan
    without a cap (the profile without checkpointing, or the one given) takes the place of the
    first, its partitions are offloaded under the cap (with ``--ac auto`` also those of the
    most checkpointed mode), and the refusal stands when none of them fits either."""
    from contextlib import nullcontext

    from schedc.planning.ac import checkpointed_form, plan_mode
    from schedc.planning.report import build_plan_report
    from schedc.solver.deadline import counting_work

    refused, cap, most = None, None, None
    args = dict(time_limit=time_limit, budget=budget, seed=seed, progress=progress)
    # with --ac auto the choosers may recompute single microbatches: the runtime checkpoints the
    # whole stage module for one (schedc.runtime.offload), one forward again as --ac full does,
    # keeping its input only, no more than full's block inputs
    recompute_units = checkpointed_form(profiles["full"], profiles["none"]) \
        if len(profiles) > 1 and "full" in profiles and "none" in profiles else None
    try:
        if len(profiles) > 1:
            from schedc.planning.ac import plan_ac

            res = plan_ac(profiles, **args, **kwargs)
            forms = {"offload only": profiles["none"]} if "none" in profiles else {}
            if res.ac is not None and res.ac.chosen != "none":
                forms["both"] = res.units
        else:
            mode, units = next(iter(profiles.items()))
            res = plan_mode(units, mode, none, **args, **kwargs)
            forms = {"offload only" if mode in (None, "none") else "both": res.units}
    except ParameterError as e:
        if e.param != "memory":
            raise
        # nothing fits without offload: the plan without a cap gives the partitions to offload
        refused, cap = e, kwargs["memory"]
        cap = cap if isinstance(cap, MemoryLimit) else MemoryLimit.parse(cap)
        uncapped = dict(kwargs, memory="none")
        if len(profiles) > 1:
            res = plan_mode(profiles["none"], "none", None, **args, **uncapped)
            forms = {"offload only": res.units}
            most = next((m for m in ("full", "selective", "light") if m in profiles), None)
            if most is not None:
                forms["both"] = checkpointed_form(profiles[most], profiles["none"])
        else:
            mode, units = next(iter(profiles.items()))
            res = plan_mode(units, mode, none, **args, **uncapped)
            most = mode if mode not in (None, "none") else None
            forms = {"offload only" if most is None else "both": res.units}
    modes = checkpointing_modes(profiles) if len(profiles) > 1 and "none" in profiles else None
    seconds = OFFLOAD_SHARE * time_limit
    stage_forms = None
    if len(profiles) > 1 and "none" in profiles and refused is None:
        from schedc.planning.ac import mode_forms

        stage_forms = mode_forms({m: p for m, p in profiles.items() if m in AC_MODES})
    with counting_work(seconds) if budget == "work" else nullcontext() as clock:
        out = plan_offload(res, link, seconds, forms, seed, progress, refused, cap, recompute_units, modes,
                           stage_forms, interleaved=kwargs.get("placement", "auto") == "auto")
    if refused is not None and (out.offload or {}).get("row") == "both" and most is not None \
            and out.units is forms.get("both"):  # not the units without checkpointing, some microbatches recomputed
        out = replace(out, assumes={**out.assumes, "activation_checkpoint": most})
        out = replace(out, report=build_plan_report(out))
    if clock is None:
        return out
    out = replace(out, budget="work", cut_by_wall=res.cut_by_wall or clock.cut_by_wall)
    return replace(out, report=build_plan_report(out))
