"""Offload a share of every microbatch: the fraction each rank sends to host memory, so that a
fixed order fits its cap.

Problem: a short order over the memory cap (the uncapped optimum, ZB-H2) holds many microbatches
on its early ranks. Sending whole microbatches out (schedc.solver.offload's chooser) needs a link
that moves a whole microbatch's bytes while the rank computes one microbatch: on 8-rank decoders
of 7-8B parameters at 4096 tokens and 50 GB/s the copy of one microbatch takes about as long as
its F, I and W together (docs/results.md, "Offload against checkpointing": link load 0.77 to
0.98), so the copies queue, the bytes leave late and the fetches come back late. A share ``f``
of every microbatch (the largest saved tensors first, schedc.core.memory_actions' ``fraction``)
takes ``f`` of the link's time: the rank holds ``(1 - f)`` of each microbatch it keeps across
the step, and the link keeps up.

Method: the order's timing without a cap decides which microbatches can move. For rank r with
fraction f, every microbatch of its stages (but the last stage, whose backward follows its
forward) whose copy of f of its bytes (schedc.core.host_link.HostLink.seconds) ends before some
action between its F and its backward starts, and whose fetch started there ends before the
backward starts, is offloaded with the latest such action as its fetch point. Each rank over its
cap then gets the least fraction of 1/LEVELS, 2/LEVELS, ..., 1 that brings it under. More is not
always better (a larger copy leaves the device later, queues behind the one before, and can
free less at the peak), so every level is simulated (schedc.core.simulate, with the memory
actions and the link), all the ranks over their caps at once: a rank's memory depends on its own
copies, the others reach it only through a late fetch's delay. Each rank then takes its least
fitting level, one simulation checks them together, and a rank put back over its cap there
takes its next fitting level. Levels 16, 8 and 4 go first: where a rank fits at none of them
and no wait could bring it under (below), the order is given up after three simulations. Where a
rank fits at no level (its first forwards make bytes
faster than the link moves them), forwards wait: at each of WAIT_LEVELS where the rank's excess
over its cap is no more than the bytes on their way out at its peak, the F at the peak waits for
the first copy out still running (``room_for``), one per rank over its cap per simulation, until
the ranks fit or the excess stops falling. The shortest fitting answer is kept; where none fits
it says why (a rank over its cap at every level, pinned host memory over a node's cap).

Moves after I (:func:`choose_after_i`): a rank that defers W (the zero-bubble orders' late
ranks) holds what each I keeps for its W, which the shares above, moved between F and I, do not
touch. For every rank over its cap, a share after F (none or AFTER_F_LEVELS) and a share after I
(AFTER_I_LEVELS) are simulated together (:func:`offloads_after_i`): a microbatch the order runs
as I then W whose copy out after the I and fetch before the W fit between them moves after I,
the same share again (``refetch_at``) where it moved after F, else at its rank's share after I;
the shortest fitting pair wins.

Cost: LEVELS + 2 simulations of O(A + copies) for A actions, and with waits up to MAX_WAITS more
per level of WAIT_LEVELS (a few where the waits help, STALLED_ROUNDS where they do not), each
charged a pass under a work budget (schedc.solver.deadline); it stops at the deadline with what
it has.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from schedc.core.costs import MemoryLimit, Profile
from schedc.core.host_link import HostLink, offload_bytes
from schedc.core.ir import Action, Kind, Schedule
from schedc.core.memory_actions import MemoryAction
from schedc.core.simulate import SimResult, simulate
from schedc.solver.deadline import NEVER, Deadline, charge_passes

LEVELS = 16  # fractions are k / LEVELS: fine enough that the least fitting one wastes little link time
WAIT_LEVELS = (4, 8, 12, 16)  # the levels tried with forwards waiting for copies out
MAX_WAITS = 64  # rounds of added waits per level (one per rank over its cap per round)
STALLED_ROUNDS = 3  # rounds without a lower excess over the caps before the waits stop
AFTER_F_LEVELS = (LEVELS // 4, LEVELS // 2, LEVELS)  # shares after F beside which moves after I are chosen
AFTER_I_LEVELS = (LEVELS // 4, LEVELS // 2, 3 * LEVELS // 4, LEVELS)  # shares after I
# passes charged per pair tried after I under a work budget (its offloads and their simulation):
# at one pass they ran 1.07 CPU s per work unit since the charge before (benchmarks/
# work_charges.py --offload, Qwen2.5-7B at 28 GiB), against the unit's 2/3 of a CPU second
AFTER_I_PASSES = 1.6


@dataclass(frozen=True)
class FractionChoice:
    """Each rank's fraction (0: nothing moves), the memory actions and the simulation with them;
    where nothing fits, no actions, ``sim`` the last simulation tried and ``why`` what did not
    fit."""

    fractions: tuple[float, ...]
    actions: tuple[MemoryAction, ...]
    sim: SimResult
    why: str = ""


def offloads_at(schedule: Schedule, profile: Profile, link: HostLink, fractions: dict[int, float],
                timing: SimResult, waits: Optional[dict[tuple[int, int], Action]] = None,
                skip: frozenset = frozenset()) -> list[MemoryAction]:
    """The offloads of every rank at its fraction (module docstring), timed by `timing` (the
    order's simulation without offload); `waits` gives the F that waits for an offload's copy
    out (its ``room_for``); the (stage, microbatch) pairs in `skip` (recomputed) do not move."""
    out = []
    last = schedule.n_stages - 1
    waits = waits or {}
    for s, rank in enumerate(schedule.placement):
        f = fractions.get(rank, 0.0)
        nbytes = f * offload_bytes(profile, s)
        if s == last or nbytes <= 0:
            continue
        copy = link.seconds(nbytes)
        row = schedule.actions(rank)
        index = {a: k for k, a in enumerate(row)}
        for m in range(schedule.n_microbatches):
            forward = Action(s, Kind.F, m)
            backward = next((b for b in (Action(s, Kind.I, m), Action(s, Kind.B, m)) if b in index), None)
            if forward not in index or backward is None or (s, m) in skip:
                continue
            fetch = _round_trip_fetch(row, index, timing, forward, backward, copy)
            if fetch is not None:
                out.append(MemoryAction(s, m, "offload", fetch, f, waits.get((s, m))))
    return out


def _round_trip_fetch(row: list, index: dict, timing: SimResult, issuer: Action, waiter: Action,
                      copy: float) -> Optional[Action]:
    """The latest action of `row` between `issuer` and `waiter` at whose start, in `timing`, a
    copy out of `copy` seconds issued at `issuer`'s end has ended and from which a fetch as long
    ends before `waiter` starts; None where no action leaves room for the round trip."""
    away_from = timing.timings[issuer].end + copy
    back_by = timing.timings[waiter].start - copy
    fetch = next((a for a in reversed(row[index[issuer] + 1:index[waiter]])
                  if timing.timings[a].start <= back_by), None)
    return fetch if fetch is not None and timing.timings[fetch].start > away_from else None


def offloads_after_i(schedule: Schedule, profile: Profile, link: HostLink, fractions: dict[int, float],
                     timing: SimResult, skip: frozenset = frozenset(),
                     before: Sequence[MemoryAction] = ()) -> list[MemoryAction]:
    """`before` (offloads after F) with, and beside them, the moves after I of every rank at its
    fraction, timed by `timing` (the order's simulation without them): every (stage, microbatch)
    the order runs as I then W whose copy out after the I ends before some action between them
    starts, and whose fetch started there ends before the W starts, is fetched at the latest such
    action: an offload after F moves its own share again (``refetch_at``), any other pair not in
    `skip` (recomputed) becomes an offload after I at its rank's fraction."""
    given = {(a.stage, a.microbatch): a for a in before}
    out = []
    for s, rank in enumerate(schedule.placement):
        row = schedule.actions(rank)
        index = {a: k for k, a in enumerate(row)}
        for m in range(schedule.n_microbatches):
            first = given.pop((s, m), None)
            f = first.fraction if first is not None else fractions.get(rank, 0.0)
            grads, weights = Action(s, Kind.I, m), Action(s, Kind.W, m)
            fetch = None
            if f > 0 and grads in index and weights in index and (s, m) not in skip:
                fetch = _round_trip_fetch(row, index, timing, grads, weights,
                                          link.seconds(f * offload_bytes(profile, s)))
            if first is not None:
                out.append(first if fetch is None else replace(first, refetch_at=fetch))
            elif fetch is not None:
                out.append(MemoryAction(s, m, "offload", fetch, f, None, "I"))
    return out + list(given.values())


def peak_time(sim: SimResult, rank: int) -> float:
    """The first moment `rank`'s memory reaches its peak."""
    curve = sim.memory_curve[rank]
    top = max(level for _, level in curve)
    return next(t for t, level in curve if level == top)


def _wait(schedule: Schedule, sim: SimResult, rank: int, actions: list[MemoryAction],
          waits: dict[tuple[int, int], Action]) -> Optional[tuple[tuple[int, int], Action]]:
    """The wait that lowers `rank`'s peak in `sim`, if its peak is an F's rise: that F waits for
    the first copy out of the rank still running then (the head of its device-to-host stream)."""
    t_peak = peak_time(sim, rank)
    forward = next((a for a in schedule.actions(rank) if a.kind == Kind.F
                    and abs(sim.timings[a].start - t_peak) <= 1e-12), None)
    if forward is None:
        return None
    offloaded = {(a.stage, a.microbatch) for a in actions}
    running = [c for c in sim.copies if c.rank == rank and c.direction == "out" and c.start <= t_peak < c.end
               and (c.stage, c.microbatch) in offloaded and (c.stage, c.microbatch) not in waits]
    if not running:
        return None
    head = min(running, key=lambda c: c.end)
    return (head.stage, head.microbatch), forward


def _in_flight(sim: SimResult, rank: int) -> float:
    """The bytes of `rank` on its way out at its peak (their F ended, their copy not): the most
    that forwards waiting for copies could take off that peak."""
    t_peak = peak_time(sim, rank)
    return sum(c.nbytes for c in sim.copies if c.rank == rank and c.direction == "out" and c.end > t_peak
               and sim.timings[Action(c.stage, Kind.F, c.microbatch)].end <= t_peak)


def choose_fractions(schedule: Schedule, profile: Profile, memory: Optional[MemoryLimit], link: HostLink,
                     runtime: Optional[str] = None, deadline: Deadline = NEVER,
                     fixed: Sequence[MemoryAction] = (), recompute: Optional[Profile] = None) -> FractionChoice:
    """The least fraction per rank that makes `schedule` fit `memory` on `link`, with the waits
    that need (module docstring); `profile` and `runtime` as
    :func:`schedc.core.simulate.simulate` takes them. `fixed` are memory actions kept as they are
    (recomputes, schedc.solver.recompute_choice, with `recompute` their checkpointed costs;
    offloads): their microbatches do not move again, and the answer's actions are the new
    offloads alone."""
    size = sum(len(schedule.actions(r)) for r in range(schedule.n_ranks))
    fixed = list(fixed)
    skip = frozenset((a.stage, a.microbatch) for a in fixed)
    timing = simulate(schedule, profile, None, runtime, memory_actions=fixed or None, recompute=recompute, link=link)
    charge_passes(size)

    def run(levels: dict[int, int], waits=None) -> tuple[list[MemoryAction], SimResult]:
        fractions = {r: k / LEVELS for r, k in levels.items()}
        actions = offloads_at(schedule, profile, link, fractions, timing, waits, skip)
        charge_passes(size)
        return actions, simulate(schedule, profile, memory, runtime, memory_actions=fixed + actions or None,
                                 link=link, recompute=recompute)

    actions, sim = run({})
    over = list(sim.ranks_over)
    if not over:
        return FractionChoice((0.0,) * schedule.n_ranks, (), sim)
    # every level on every rank over its cap at once: the least fraction is not found by
    # bisection, since more is not always better (a larger copy leaves later and may come back
    # no sooner, so it frees less at the peak)
    fitting: dict[int, list[int]] = {r: [] for r in over}
    hopeful: dict[int, set[int]] = {r: set() for r in over}  # levels where waits might bring r under
    probes = [LEVELS, LEVELS // 2, LEVELS // 4]  # first: an order that holds too much fails in three
    for k in probes + [k for k in range(1, LEVELS + 1) if k not in probes]:
        if deadline.expired():
            break
        _, sim = run({r: k for r in over})
        for r in over:
            if r not in sim.ranks_over:
                fitting[r].append(k)
            elif sim.peak_memory[r] - sim.memory_limit[r] <= _in_flight(sim, r):
                hopeful[r].add(k)
        if k == probes[-1] and any(not fitting[r] and not hopeful[r] for r in over):
            break  # a rank fits at none of the probes, and no wait could bring it under
    for r in fitting:
        fitting[r].sort()
    found: list[tuple[float, dict, list[MemoryAction], SimResult]] = []
    if all(fitting.values()):
        # each rank at its least fitting level; a rank that the others' late fetches put back
        # over its cap takes its next one
        levels = {r: ks[0] for r, ks in fitting.items()}
        for _ in range(LEVELS):
            actions, sim = run(levels)
            moved = False
            for r in sim.ranks_over:
                later = [k for k in fitting.get(r, ()) if k > levels[r]]
                if later:
                    levels[r], moved = later[0], True
            if sim.fits or not moved or deadline.expired():
                break
        if sim.fits:
            found.append((sim.makespan, dict(levels), actions, sim))
    # where a rank fits at no level (its first forwards come faster than the link empties it),
    # or to do better, forwards wait for copies out
    for k in WAIT_LEVELS:
        if deadline.expired():
            break
        levels = {r: fitting[r][0] if fitting[r] and fitting[r][0] <= k else k for r in over}
        if any(levels[r] == k and k not in fitting[r] and k not in hopeful[r] for r in over):
            continue  # a rank over its cap by more than waits could free there
        waits: dict[tuple[int, int], Action] = {}
        least, stalled = math.inf, 0
        for _ in range(MAX_WAITS):
            actions, sim = run(levels, waits)
            if sim.fits or deadline.expired():
                break
            excess = sum(sim.peak_memory[r] - sim.memory_limit[r] for r in sim.ranks_over)
            least, stalled = (excess, 0) if excess < least * (1 - 1e-9) else (least, stalled + 1)
            if stalled >= STALLED_ROUNDS:
                break  # waits no longer bring the peaks down: the order holds too much to wait out
            added = [w for r in sim.ranks_over if (w := _wait(schedule, sim, r, actions, waits)) is not None]
            if not added:
                break
            waits.update(added)
        if sim.fits:
            found.append((sim.makespan, dict(levels), actions, sim))
    if found:
        _, levels, actions, sim = min(found, key=lambda f: f[0])
        return FractionChoice(_fractions(schedule, levels), tuple(actions), sim)
    why = (f"host memory over its cap on node(s) {', '.join(map(str, sim.nodes_over))}" if sim.nodes_over else
           f"rank(s) {', '.join(map(str, sim.ranks_over))} stay over the cap at every fraction, with forwards "
           f"waiting for copies out")
    return FractionChoice(_fractions(schedule, {}), (), sim, why)


def _fractions(schedule: Schedule, levels: dict[int, int]) -> tuple[float, ...]:
    return tuple(levels.get(r, 0) / LEVELS for r in range(schedule.n_ranks))


def choose_after_i(schedule: Schedule, profile: Profile, memory: Optional[MemoryLimit], link: HostLink,
                   runtime: Optional[str] = None, objective: str = "makespan",
                   deadline: Deadline = NEVER) -> Optional[FractionChoice]:
    """The shortest fitting mix of moves after F and after I for `schedule`, or None: on every
    rank over its cap, a share after F of 0 or AFTER_F_LEVELS and a share after I of
    AFTER_I_LEVELS (:func:`offloads_after_i`: an offload after F moves its share again after its
    I), each pair simulated. A rank that defers W holds what its I keeps for W, which an offload
    after F alone does not move. At most 16 simulations."""
    size = sum(len(schedule.actions(r)) for r in range(schedule.n_ranks))
    timing = simulate(schedule, profile, None, runtime)
    plain = simulate(schedule, profile, memory, runtime)
    charge_passes(2 * size)
    over = list(plain.ranks_over)
    # where not even the least share fits a round trip between any I and its W, nothing moves
    # after I: no simulation spent (a link far too slow leaves the choosers after this their time)
    if not over or not offloads_after_i(schedule, profile, link, {r: AFTER_I_LEVELS[0] / LEVELS for r in over},
                                        timing):
        return None
    best: Optional[FractionChoice] = None
    for k_f in (0,) + AFTER_F_LEVELS:
        before = offloads_at(schedule, profile, link, {r: k_f / LEVELS for r in over}, timing) if k_f else []
        for k_i in AFTER_I_LEVELS:
            if deadline.expired():
                return best
            actions = offloads_after_i(schedule, profile, link, {r: k_i / LEVELS for r in over}, timing,
                                       before=before)
            charge_passes(size, AFTER_I_PASSES)
            sim = simulate(schedule, profile, memory, runtime, memory_actions=actions or None, link=link)
            if sim.fits and (best is None or sim.objective(objective) < best.sim.objective(objective)):
                fractions = tuple(k_i / LEVELS if r in over else 0.0 for r in range(schedule.n_ranks))
                best = FractionChoice(fractions, tuple(actions), sim)
    return best

