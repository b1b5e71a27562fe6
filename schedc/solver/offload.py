"""Offload chosen by the compiler: which microbatches a schedule sends to host memory, and where
it fetches them back, so that every rank fits its cap.

Problem: a schedule that is short but over the memory cap (the uncapped optimum, ZB-H1) may fit
once some of the microbatches its ranks hold at their peaks wait in host memory
(schedc.core.memory_actions, schedc.core.host_link). The choice is which (stage, microbatch)
pairs to offload and at which action of the rank to fetch each back: too early and the bytes
are back before the peak, too late and the backward waits for its fetch.

Method (:func:`choose_offload`), one simulation per round (schedc.core.simulate with the
memory actions chosen so far): on each rank over its cap (one offload per rank per round; one
per round after several together put a node over its host memory), take the moment of its peak;
among the microbatches of its stages held then (their F's copy out, as estimated from the F's
end, ends before the peak; their backward starts after it) offload the one held longest (the
largest gap from F's end to the backward's start), fetched at the latest action of that rank
whose fetch still ends before the backward's predicted start, or, if no fetch hides, the
earliest action after the peak. An offload that pushes a node's pinned host memory over its cap,
or raises the rank's peak, is undone and that pair is not tried again. It stops when every rank
fits, or when no rank over its cap has a candidate left (then it says it cannot fit). Each
(stage, microbatch) is added or refused at most once, so there are at most 2 S x M rounds.

:func:`compile_with_offload` is ``--offload auto``: it compiles under the cap, without one, and
under the cap with a quarter, half and three quarters of each offloadable microbatch's bytes
counted as away (every stage but the last: a relaxed cap only where offload can act; the
uncapped order makes activations faster than a 50 GB/s link moves them, these orders leave
the link time), then, in CHOOSER_SHARE of the time limit (what the compiles leave, at least),
runs the choosers on the compiles' answers and on the hand-made schedules over the cap
(:func:`choose_among`: a share of every microbatch per rank, with forwards that wait for
copies out, schedc.solver.offload_fractions; shares moved after I as well, for the bytes a
deferred W holds; then whole microbatches, the rule above) in
1 - HEURISTIC_SHARE of that, then the offload heuristic (schedc.solver.engines.offload_heuristic:
the order and the offloads built together) in what is left (on a problem of at most CPSAT_ACTIONS
actions, CPSAT_SHARE of it goes last to CP-SAT with the order and the offloads in one model,
schedc.solver.engines.cpsat_offload, hinted with the best so far), and keeps the shortest that fits
(the capped answer with no offload among them, so it is never worse than ``--offload none``).
The chooser's simulations
stop at the deadline and, under a work budget, charge a pass each (schedc.solver.deadline), on
one work clock with the compiles: the command ends within its budget. Offload only adds waits to
a schedule, so the uncapped problem's certified bound bounds every schedule with offload; the
capped bound does not (offload relaxes memory). What offload cannot move raises it where the cap
binds (:func:`offload_stage_bound`, schedc.core.offload_bound: every forward holds what it makes
until its copy out, a moved byte is on the device during F, both copies and I), and the report
says which bound it states.

Recompute per microbatch is chosen only where the caller gives the stages' checkpointed costs
(``checkpointed=``, as ``plan --ac auto --offload auto`` does, and ``compile --offload auto
--recompute-profile``): the choosers then also mix recomputed microbatches with shares
(schedc.solver.recompute_choice), whose schedule runs those backwards as B, and CP-SAT chooses
keep, offload or recompute per microbatch with the order. A recomputed B lasts at least I + W, so the uncapped bound still holds.

Cost: at most S x M simulations of O(S x M) each per schedule tried and the offload
heuristic's constructions, within CHOOSER_SHARE of the time limit, plus up to five compiles
sharing the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from schedc.choices import Status
from schedc.core.costs import MemoryLimit, Profile
from schedc.core.host_link import HostLink, offload_bytes
from schedc.core.ir import Action, Kind, Schedule
from schedc.core.memory_actions import MemoryAction, to_json
from schedc.core.simulate import SimResult, simulate
from schedc.errors import ParameterError
from schedc.solver.deadline import NEVER, Deadline, charge_passes, counting_work, n_actions, now
from schedc.solver.engine import close
from schedc.solver.offload_fractions import choose_after_i, choose_fractions, peak_time

OFFLOAD_CHOICES = ("none", "auto")
CAPPED_SHARE = 0.35  # of the time limit, for the compile under the cap (--offload none's answer)
UNCAPPED_SHARE = 0.15  # for the compile without a cap (its bound is the answer's)
LOOSENED_SHARE = 0.2  # for the compiles of the discounted problems, shared
CHOOSER_SHARE = 0.3  # for the offload heuristic and the chooser's rounds (at least; what the compiles leave)
HEURISTIC_SHARE = 0.3  # of the choosers' time, for the offload heuristic after them (the choosers find more)
SIZED_HEURISTIC_SHARE = 0.7  # of it, for the heuristic first, where the stages are sized for offload
CPSAT_SHARE = 0.3  # of it, on a small problem, for CP-SAT with the order and the offloads in one model
# the most actions for which that model improves on the choosers in seconds: on 8 identical stages
# x 16 microbatches (384 actions) it did in 10 s, on 8 x 32 (768) it found nothing in 10 s, nor in
# 30 s on an 8-rank Llama-3-8B (schedc.solver.engines.cpsat_offload)
CPSAT_ACTIONS = 400
CPSAT_SOURCE = "cp-sat (the order and the offloads in one model)"
DISCOUNTS = (0.25, 0.5, 0.75)  # the discounted problems: this share of each offloadable microbatch away
UNCAPPED_SOURCE = "uncapped problem (offload relaxes the memory cap)"
HELD_SOURCE = "what offload cannot move (schedc.core.offload_bound)"
HELD_ASSUMES = ("the cap, with any offload over the link: every forward holds what it makes until its copy out, "
                "and a moved byte is on the device during F, both copies and I")
HEURISTIC_SOURCE = "the offload heuristic (the order and its offloads built together)"


@dataclass(frozen=True)
class OffloadChoice:
    """The chooser's answer for one schedule: its offloads, the simulation with them, whether it
    fits, and, when it does not, why not."""

    schedule: Schedule
    actions: tuple[MemoryAction, ...]
    sim: SimResult
    fits: bool
    why: str = ""

    def to_json(self) -> list[dict]:
        return to_json(self.actions)


def _candidate(schedule: Schedule, sim: SimResult, profile: Profile, link: HostLink, rank: int,
               chosen: dict, refused: set) -> Optional[MemoryAction]:
    """The offload the module docstring's rule picks on `rank` at its peak, or None."""
    t_peak = peak_time(sim, rank)
    row = schedule.actions(rank)
    index = {a: k for k, a in enumerate(row)}
    best, best_held = None, -math.inf
    for s in (s for s, r in enumerate(schedule.placement) if r == rank):
        nbytes = offload_bytes(profile, s)
        if nbytes <= 0:
            continue
        copy = link.seconds(nbytes)
        for m in range(schedule.n_microbatches):
            if (s, m) in chosen or (s, m) in refused:
                continue
            forward = Action(s, Kind.F, m)
            backward = next((b for b in (Action(s, Kind.I, m), Action(s, Kind.B, m)) if b in index), None)
            if forward not in index or backward is None:
                continue
            f_end, b_start = sim.timings[forward].end, sim.timings[backward].start
            if not (f_end + copy < t_peak < b_start):
                continue
            # the fetch points after the peak and before the backward: the latest whose fetch
            # ends before the backward's predicted start, else the earliest
            points = [a for a in row[index[forward] + 1:index[backward]] if sim.timings[a].start > t_peak]
            if not points:
                continue
            hidden = [a for a in points if sim.timings[a].start + copy <= b_start]
            fetch = hidden[-1] if hidden else points[0]
            held = b_start - f_end
            if held > best_held:
                best, best_held = MemoryAction(s, m, "offload", fetch), held
    return best


def choose_offload(schedule: Schedule, profile: Profile, memory: Optional[MemoryLimit], link: HostLink,
                   runtime: Optional[str] = None, deadline: Deadline = NEVER) -> OffloadChoice:
    """Offloads that make `schedule` fit `memory` on `link` (module docstring); `profile` as
    :func:`schedc.core.simulate.simulate` takes it, `runtime` the runtime it is timed as. It
    stops at `deadline` (each simulation charged as one pass under a work budget), with what it
    chose so far: then it fits only if that is enough."""
    chosen: dict[tuple[int, int], MemoryAction] = {}
    refused: set[tuple[int, int]] = set()
    size = sum(len(schedule.actions(r)) for r in range(schedule.n_ranks))

    def run() -> SimResult:
        charge_passes(size)
        return simulate(schedule, profile, memory, runtime, memory_actions=list(chosen.values()) or None, link=link)

    sim = run()
    executed = profile.executed(runtime)
    single = False  # one offload per round (after several together put a node over its host memory)
    for _ in range(2 * schedule.n_stages * schedule.n_microbatches + 2):
        if sim.fits:
            return OffloadChoice(schedule, tuple(chosen.values()), sim, True)
        if deadline.expired():
            return OffloadChoice(schedule, tuple(chosen.values()), sim, False, "the time limit ended the search")
        over = sorted(sim.ranks_over, key=lambda r: -(sim.peak_memory[r] - sim.memory_limit[r]))
        picks = []
        for rank in over:
            pick = _candidate(schedule, sim, executed, link, rank, chosen, refused)
            if pick is not None:
                picks.append(pick)
                if single:
                    break
        if not picks:
            why = (f"host memory over its cap on node(s) {', '.join(map(str, sim.nodes_over))}" if sim.nodes_over
                   else f"rank(s) {', '.join(map(str, sim.ranks_over))} hold no microbatch at their peak that "
                        f"offload can move out and back in time")
            return OffloadChoice(schedule, tuple(chosen.values()), sim, False, why)
        for pick in picks:
            chosen[(pick.stage, pick.microbatch)] = pick
        tried = run()
        if tried.nodes_over and not sim.nodes_over and len(picks) > 1:
            # which of them filled the host memory is not known: one at a time from here
            for pick in picks:
                del chosen[(pick.stage, pick.microbatch)]
            single = True
            continue
        undone = [pick for pick in picks
                  if tried.nodes_over and not sim.nodes_over
                  or tried.peak_memory[schedule.placement[pick.stage]] > sim.peak_memory[schedule.placement[pick.stage]]]
        for pick in undone:
            del chosen[(pick.stage, pick.microbatch)]
            refused.add((pick.stage, pick.microbatch))
        if undone and len(undone) < len(picks):
            tried = run()  # the kept ones alone
        if len(undone) < len(picks):
            sim = tried
    return OffloadChoice(schedule, tuple(chosen.values()), sim, sim.fits,
                         "" if sim.fits else "every (stage, microbatch) was tried")


def check_offload(offload: object) -> str:
    """``none`` or ``auto``; anything else is one ParameterError naming ``offload``."""
    if offload not in OFFLOAD_CHOICES:
        raise ParameterError("offload", f"{{param}} must be one of {', '.join(OFFLOAD_CHOICES)}, got {offload!r}")
    return str(offload)


def best_offload(candidates: Sequence[tuple[str, Schedule]], problem, link: HostLink, beat: float = math.inf,
                 deadline: Deadline = NEVER, checkpointed: Optional[Profile] = None
                 ) -> Optional[tuple[str, OffloadChoice]]:
    """The shortest (by the problem's objective) fitting answer for the candidate schedules, with
    its candidate's name, if shorter than `beat`; None when none is (:func:`choose_among` on the
    problem's costs, cap and objective)."""
    found, _ = choose_among(candidates, problem.profile, problem.memory, link, None, problem.objective, beat,
                            deadline, checkpointed)
    return found


def offload_order(schedule: Schedule, profile: Profile, memory: Optional[MemoryLimit], link: HostLink,
                  runtime: Optional[str] = None, objective: str = "makespan",
                  deadline: Deadline = NEVER) -> OffloadChoice:
    """The offloads that make one `schedule` fit (:func:`choose_among`); where none fits, the
    last chooser's answer says why."""
    found, last = choose_among([("", schedule)], profile, memory, link, runtime, objective, math.inf, deadline)
    if found is not None:
        return found[1]
    if last is None:  # the deadline had passed: nothing was tried
        sim = simulate(schedule, profile, memory, runtime)
        return OffloadChoice(schedule, (), sim, sim.fits, "" if sim.fits else "the time limit ended the search")
    return last


def choose_among(candidates: Sequence[tuple[str, Schedule]], profile: Profile, memory: Optional[MemoryLimit],
                 link: HostLink, runtime: Optional[str], objective: str, beat: float = math.inf,
                 deadline: Deadline = NEVER, checkpointed: Optional[Profile] = None
                 ) -> tuple[Optional[tuple[str, OffloadChoice]], Optional[OffloadChoice]]:
    """(the shortest fitting answer for the candidate schedules with its candidate's name, if
    shorter than `beat`, else None; the last answer tried, for why nothing fits). The choosers in
    passes: a share of every microbatch on every candidate first (schedc.solver.offload_fractions;
    a few simulations each, three for an order that holds too much); with `checkpointed` (the
    stages' costs checkpointed) recompute per microbatch mixed with shares
    (schedc.solver.recompute_choice: its answer's schedule runs the recomputed backwards as B);
    shares moved after I too (choose_after_i, at most 16 simulations, none where no share fits
    between an I and its W); then whole microbatches (:func:`choose_offload`, up to S x M simulations each) in the time
    left, so that one order no chooser can fit does not spend the time of the others. A candidate
    whose shares hide every transfer is done: no other chooser can beat the order's uncapped step.
    Offload only adds waits, so a candidate whose step without a cap is no shorter than the best
    so far is skipped (candidates go shortest first); recompute adds work, which the same rule,
    on the safe side, also skips. Stops at `deadline`."""
    n = n_actions(candidates[0][1].n_stages, candidates[0][1].n_microbatches) if candidates else 0
    steps = []
    for k, (_, schedule) in enumerate(candidates):
        if deadline.expired():
            break
        charge_passes(n)
        steps.append((simulate(schedule, profile, None, runtime).objective(objective), k))
    best, last = None, None
    hidden = set()  # candidates whose shares hide every transfer: the other choosers cannot do better
    passes = ("shares", "after I", "mixed", "whole") if checkpointed is not None else ("shares", "after I", "whole")
    for chooser in passes:
        for step, k in sorted(steps):
            limit = beat if best is None else best[1].sim.objective(objective)
            if step >= limit or deadline.expired():
                break
            if chooser != "shares" and k in hidden:
                continue
            name, schedule = candidates[k]
            if chooser == "whole":
                choice = choose_offload(schedule, profile, memory, link, runtime, deadline)
            elif chooser == "after I":
                both = choose_after_i(schedule, profile, memory, link, runtime, objective, deadline)
                if both is None:
                    continue
                choice = OffloadChoice(schedule, both.actions, both.sim, True)
            elif chooser == "mixed":
                from schedc.solver.recompute_choice import recompute_then_offload

                assert checkpointed is not None  # the pass runs only with them
                mix = recompute_then_offload(schedule, profile, checkpointed, memory, link, runtime, objective,
                                             deadline)
                if mix is None:
                    continue
                choice = OffloadChoice(mix.schedule, mix.actions, mix.sim, mix.fits, mix.why)
            else:
                shares = choose_fractions(schedule, profile, memory, link, runtime, deadline)
                choice = OffloadChoice(schedule, shares.actions, shares.sim, shares.sim.fits, shares.why)
                if choice.fits and close(choice.sim.objective(objective), step):
                    hidden.add(k)
            last = choice
            if choice.fits and choice.sim.objective(objective) < limit:
                best = (name, choice)
    return best, last


def offload_summary(choice: OffloadChoice, profile: Profile, without: Optional[float], objective: str,
                    recompute: Optional[Profile] = None) -> dict:
    """The report's ``"offload"``: per stage the microbatches moved and their bytes, each rank's
    link busy fraction per direction, the step with and without offload (None: nothing fits
    without), and whether every fetch ends before its backward is ready to start."""
    sim = choice.sim
    stages: dict[int, list[MemoryAction]] = {}
    recomputed: dict[int, list[int]] = {}
    for a in choice.actions:
        if a.action == "offload":
            stages.setdefault(a.stage, []).append(a)
        elif a.action == "recompute":
            recomputed.setdefault(a.stage, []).append(a.microbatch)
    per_stage = [{"stage": s, "microbatches": sorted(a.microbatch for a in moved),
                  "bytes_each": offload_bytes(profile, s),
                  "fractions": sorted({a.fraction for a in moved}),
                  "bytes": sum(a.fraction for a in moved) * offload_bytes(profile, s),
                  # those whose bytes also (refetch_at) or only (after I) move between I and W
                  "after_i": sorted(a.microbatch for a in moved if a.after == "I" or a.refetch_at is not None)}
                 for s, moved in sorted(stages.items())]
    # the order with its recomputes (`recompute` their costs) and nothing moved: whether the copies hide
    redone = [a for a in choice.actions if a.action == "recompute"]
    plain = simulate(choice.schedule, profile, None, memory_actions=redone or None, recompute=recompute)
    hides = math.isclose(plain.objective(objective), sim.objective(objective), rel_tol=1e-9, abs_tol=1e-12)
    return {
        "stages": per_stage,
        "bytes_per_rank": [sum(c.nbytes for c in sim.copies if c.rank == r and c.direction == "out")
                           for r in range(sim.n_ranks)],
        "link_busy": [{"rank": r, "out": sim.link_busy(r, "out"), "in": sim.link_busy(r, "in")}
                      for r in range(sim.n_ranks)],
        "host_peak_per_node": list(sim.host_peak),
        "step_with_offload": sim.objective(objective),
        "step_without_offload": without,
        "step_of_this_order_uncapped": plain.objective(objective),
        "transfers_hide": hides,
        "recomputed": [{"stage": st, "microbatches": sorted(ms)} for st, ms in sorted(recomputed.items())],
    }


def compile_with_offload(problem, link: HostLink, time_limit: float, solver, progress: Optional[Callable],
                         seed: int, budget: str, checkpointed: Optional[Profile] = None):
    """``--offload auto`` (module docstring): a CompileResult whose report also holds
    ``memory_actions``, ``offload`` and ``assumes``; with `checkpointed` (the stages' costs
    checkpointed, as schedc.planning.ac.checkpointed_form gives them) it may also recompute
    single microbatches."""
    from contextlib import nullcontext

    # under a work budget one clock for the compiles and the chooser's simulations (nested
    # compiles keep it), so the whole command ends within its budget
    with counting_work(time_limit) if budget == "work" else nullcontext():
        end = now() + time_limit - min(0.05 * time_limit, 5.0)  # a reserve for the report, as a compile keeps
        compiles = offload_compiles(problem, time_limit, solver, progress, seed, budget)
        return compiles.result(problem, link, time_limit, Deadline(end), checkpointed)


def compile_schedule_offloading(n_stages: int, n_microbatches: int, link: Optional[HostLink] = None, *,
                                time_limit: float = 60.0, solver: Optional[str] = None,
                                progress: Optional[Callable] = None, seed: int = 0, budget: str = "time",
                                checkpointed: Optional[Profile] = None, **problem):
    """schedc.solver.compile.compile_schedule with offload allowed over `link` (default
    :class:`HostLink`), and with `checkpointed` recompute of single microbatches: `problem` holds
    its problem's keywords (n_ranks, placement, profile, memory, objective, runtime)."""
    from schedc.solver.problem import Problem

    built = Problem.build(n_stages, n_microbatches, **problem)
    if checkpointed is not None and checkpointed.n_stages != built.n_stages:
        raise ParameterError("recompute_profile", f"{{param}} describes {checkpointed.n_stages} stages but the "
                                                  f"schedule has {built.n_stages}; give the same stages checkpointed")
    return compile_with_offload(built, link or HostLink(), time_limit, solver, progress, seed, budget, checkpointed)


@dataclass
class OffloadCompiles:
    """The compiles ``--offload auto`` chooses among: under the cap (None where the cap holds less
    than one microbatch per stage, `refusal` the error that said so), without a cap, and of the
    discounted problems (name, result)."""

    capped: Optional[object]
    refusal: Optional[ParameterError]
    relaxed: object
    loosened: list

    def result(self, problem, link: HostLink, time_limit: float, deadline: Optional[Deadline] = None,
               checkpointed: Optional[Profile] = None):
        """The chooser over these compiles for `link` (:func:`offload_result`, until `deadline`:
        by default CHOOSER_SHARE of `time_limit` from now; `checkpointed` as it takes them); with
        nothing fitting, the capped compile's refusal where there was one."""
        try:
            return offload_result(problem, link, self.capped, self.relaxed, time_limit, self.loosened, deadline,
                                  checkpointed)
        except ParameterError:
            if self.refusal is not None:
                raise self.refusal from None
            raise


def offload_compiles(problem, time_limit: float, solver=None, progress: Optional[Callable] = None, seed: int = 0,
                     budget: str = "time", relaxed=None) -> OffloadCompiles:
    """The compiles of ``--offload auto``, sharing the time limit: the uncapped one
    UNCAPPED_SHARE (or `relaxed`, already compiled), the capped one CAPPED_SHARE, the discounted
    problems LOOSENED_SHARE among them; the offload heuristic and the chooser's rounds run after
    them (:meth:`OffloadCompiles.result`)."""
    from schedc.solver.compile import compile_problem

    def tagged(tag: str):
        if progress is None:
            return None
        return lambda e: progress(dict(e, phase=f"{tag}: {e['phase']}"))

    def attempt(p, seconds: float, tag: str):
        try:
            return compile_problem(p, seconds, solver, tagged(tag), seed, budget=budget), None
        except ParameterError as e:
            # a cap below one microbatch per stage, or none found in its share: offload may still fit
            if e.param not in ("memory", "time_limit"):
                raise
            return None, e

    if relaxed is None:
        relaxed, _ = attempt(problem.with_memory(MemoryLimit(kind="none")), time_limit * UNCAPPED_SHARE, "uncapped")
    capped, refusal = attempt(problem, time_limit * CAPPED_SHARE, "capped")
    loosened = []
    for share in DISCOUNTS:
        name = f"{100 * share:g}% offloaded"
        res, _ = attempt(discounted_problem(problem, share), time_limit * LOOSENED_SHARE / len(DISCOUNTS), name)
        if res is not None:
            loosened.append((name, res))
    return OffloadCompiles(capped, refusal, relaxed, loosened)


def discounted_problem(problem, share: float):
    """`problem` as if `share` of every offloadable microbatch's bytes (host_link.offload_bytes)
    were away from its F to its backward, on every stage but the last (whose backward follows its
    forward at once in any schedule worth running: the loss): the order a compile finds for it
    leaves room for offload that the chooser then fills in under the true costs."""
    from schedc.solver.problem import Problem

    given = problem.given_profile
    stages = [stage if s == given.n_stages - 1 else
              stage.model_copy(update={"activation_bytes": stage.activation_bytes - share * offload_bytes(given, s)})
              for s, stage in enumerate(given.stages)]
    return Problem(given_profile=given.model_copy(update={"stages": stages}), placement=problem.placement,
                   n_microbatches=problem.n_microbatches, memory=problem.memory, objective=problem.objective,
                   runtime=problem.runtime)


def cpsat_offload_runs(problem) -> bool:
    """Whether ``--offload auto`` gives CP-SAT's offload model a share: OR-Tools is installed and the
    problem has at most CPSAT_ACTIONS actions."""
    from schedc.solver.engines.cpsat import cpsat_available

    return n_actions(problem.n_stages, problem.n_microbatches) <= CPSAT_ACTIONS and cpsat_available()


def offload_stage_bound(problem, link: HostLink, checkpointed: Optional[Profile] = None) -> float:
    """The bound of schedc.core.offload_bound on the problem's own partition (each stage one unit
    of a partition that has no other choice), for any order, offload over `link` and recompute
    per microbatch at `checkpointed`'s costs; 0 (no bound) where it does not apply: a placement
    other than one stage per rank or a V, or a runtime other than torch's."""
    from schedc.core.offload_bound import offload_partition_bound

    S, R = problem.n_stages, problem.n_ranks
    kind = problem.placement_name if S in (R, 2 * R) else "explicit"
    if problem.runtime != "torch" or kind not in ("loop", "v") or (kind == "v") != (S == 2 * R):
        return 0.0
    modes = [] if checkpointed is None else [checkpointed]
    return offload_partition_bound(problem.given_profile, modes, R, problem.n_microbatches, problem.memory_caps,
                                   kind, problem.objective, link.per_gpu_bandwidth).value


def offload_result(problem, link: HostLink, capped, relaxed, time_limit: float, loosened: Sequence = (),
                   deadline: Optional[Deadline] = None, checkpointed: Optional[Profile] = None,
                   sized: bool = False):
    """The answer of ``--offload auto`` from the compile under the cap (`capped`, None where the
    cap holds less than one microbatch per stage), the one without a cap (`relaxed`) and those
    under `loosened` caps ((name, CompileResult) pairs): the choosers on their schedules and the
    hand-made ones over the cap (1 - HEURISTIC_SHARE of the time to `deadline`), then the offload
    heuristic (schedc.solver.engines.offload_heuristic) until `deadline` (default: CHOOSER_SHARE
    of `time_limit` from now); the shortest that fits, with its report. With `checkpointed` (the
    stages' costs checkpointed) the choosers may also recompute microbatches (best_offload).
    `sized`: the stages are sized for offload (schedc.planning.offload.offload_sized_candidates),
    so on one stage per rank the heuristic, which builds the order for the offloads, runs first,
    its rules with 1F1B's warm-up first, in SIZED_HEURISTIC_SHARE of the time; the choosers then
    start from its answer. With two stages a rank (interleaved) 1F1B's warm-up is not the order's,
    and the choosers on the compile without a cap find the shorter step (on issue 49's rows,
    benchmarks/plan_offload.py): there the choosers run first, as without `sized`.
    ParameterError about memory when nothing fits."""
    from dataclasses import replace

    from schedc.solver.compile import all_baselines, build_report, relative_gap
    from schedc.solver.engines.offload_heuristic import offload_heuristic
    from schedc.solver.engines.warm import matching_baselines

    deadline = deadline or Deadline.after(CHOOSER_SHARE * time_limit)
    without = None if capped is None else capped.value
    beat = math.inf if without is None else without
    candidates = [("uncapped", relaxed.schedule)] + [(name, res.schedule) for name, res in loosened]
    if capped is not None:
        candidates.append(("capped", capped.schedule))
    candidates += [(name, sched) for name, sched, sim in matching_baselines(problem, deadline) if not sim.fits]
    # the choosers first (the shares chooser finds the most per simulation), the heuristic in
    # HEURISTIC_SHARE of the time, and whatever they left; on a small problem CP-SAT with the
    # order and the offloads in one model takes CPSAT_SHARE of it, hinted with the best so far
    exact = cpsat_offload_runs(problem)
    start, left = now(), max(0.0, deadline.left())
    found = None
    heuristic_first = sized and problem.n_stages == problem.n_ranks
    if heuristic_first:
        built = offload_heuristic(problem, link, Deadline(start + SIZED_HEURISTIC_SHARE * left), beat,
                                  one_f_one_b_first=True)
        if built is not None:
            found = ("offload heuristic", OffloadChoice(built.schedule, built.actions, built.sim, True))
            beat = built.sim.objective(problem.objective)
        start, left = now(), max(0.0, deadline.left())
    choosers = 1 - (0.0 if heuristic_first else HEURISTIC_SHARE) - (CPSAT_SHARE if exact else 0.0)
    chosen = best_offload(candidates, problem, link, beat, Deadline(start + choosers * left), checkpointed)
    if chosen is not None:
        found, beat = chosen, chosen[1].sim.objective(problem.objective)
    built = None if heuristic_first else \
        offload_heuristic(problem, link, Deadline(deadline.at - CPSAT_SHARE * left) if exact else deadline, beat)
    if built is not None:  # shorter than what the choosers found
        found = ("offload heuristic", OffloadChoice(built.schedule, built.actions, built.sim, True))
    if exact:
        from schedc.solver.engines.cpsat_offload import offload_cpsat

        def choose(order: Schedule, step: float, until: Deadline) -> Optional[OffloadChoice]:
            chosen, _ = choose_among([("cpsat", order)], problem.profile, problem.memory, link, None,
                                     problem.objective, step, until, checkpointed)
            return None if chosen is None else chosen[1]

        solved = offload_cpsat(problem, link, None if found is None else found[1], deadline, choose,
                               checkpointed=checkpointed)
        if solved is not None:
            found = (CPSAT_SOURCE, OffloadChoice(solved.schedule, solved.actions, solved.sim, True))
    if found is None and capped is None:
        raise ParameterError("memory", f"{{name}}{problem.memory}: no schedule fits, with offload over this link "
                                       f"or without")
    if found is None or (capped is not None and found[1].sim.objective(problem.objective) >= capped.value):
        # offload does not help: the capped answer, with the offload fields saying so
        choice = OffloadChoice(capped.schedule, (), capped.sim, True)
        source = "capped"
    else:
        source, choice = found
    value = choice.sim.objective(problem.objective)
    held = offload_stage_bound(problem, link, checkpointed)
    bound = min(max(relaxed.lower_bound, held), value)
    answered = any(r is not None and r.status != Status.HEURISTIC for r in (capped, relaxed))
    status = Status.OPTIMAL if close(value, bound) else Status.FEASIBLE if answered else Status.HEURISTIC
    base = capped if capped is not None else relaxed
    result = replace(base, schedule=choice.schedule, sim=choice.sim, problem=problem, status=status,
                     lower_bound=bound, gap=0.0 if status == Status.OPTIMAL else relative_gap(value, bound),
                     solve_time=sum(r.solve_time for r in (capped, relaxed, *(res for _, res in loosened))
                                    if r is not None),
                     baselines=capped.baselines if capped is not None else all_baselines(problem),
                     warm_start_source=(HEURISTIC_SOURCE if source == "offload heuristic" else CPSAT_SOURCE
                                        if source == CPSAT_SOURCE else f"offload of the {source} answer")
                     if choice.actions else base.warm_start_source,
                     interrupted=relaxed.interrupted or bool(capped and capped.interrupted), graph=None)
    log = (capped.report["progress"] if capped is not None else []) + \
        [dict(e, phase=f"uncapped: {e['phase']}") for e in relaxed.report["progress"]]
    by_memory = held > relaxed.lower_bound
    details = dict(relaxed.report["lower_bound_details"], offload_memory_bound=held)
    report = build_report(result, lb_details=details, bound_source=HELD_SOURCE if by_memory else UNCAPPED_SOURCE,
                          solver=relaxed.report["inputs"]["solver"], time_limit=time_limit, log=log)
    report["progress"] = log  # already JSON (each compile's report wrote it)
    report["memory_actions"] = choice.to_json()
    report["offload"] = dict(offload_summary(choice, problem.profile, without, problem.objective, checkpointed),
                             from_schedule=source,
                             lower_bound_assumes=HELD_ASSUMES if by_memory else "no memory cap (offload relaxes it)")
    if checkpointed is not None and any(a.action == "recompute" for a in choice.actions):
        # what `schedc simulate` and `validate --memory-actions` time the recomputes with
        report["offload"]["recompute_profile"] = checkpointed.model_dump(mode="json", exclude_none=True)
    report["assumes"] = dict(link.assumes(), offload="auto")
    result.report = report
    return result
