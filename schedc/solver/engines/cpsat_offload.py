"""Offload inside CP-SAT: the order of every action and which microbatches go to host memory,
with their copies on each rank's two copy streams, in one model.

Problem: the choosers of schedc.solver.offload take an order as given and pick offloads for it;
the order they are given was found without the link in view (without a cap, under the cap, or
under a cap with a share of the bytes counted as away). Here the order and the offloads are
chosen together under the true cap: an F may wait for a copy out to make room, a backward for
its fetch, and a short order that holds too much may move enough of it in time.

Formulation: the model of schedc.solver.engines.cpsat (one interval per action, precedences,
NoOverlap per rank, the memory cumulative, the objective) on the problem *without* its cap's
forced orders (schedc.solver.graph.memory_arcs assume nothing leaves the device) but with the
cap's room per rank, and for every (stage, microbatch) of every stage but the last whose rank
moves a share f (``fractions``, the incumbent's, else all) of its offloadable bytes
(schedc.core.host_link.offload_bytes):

* ``moved``, a Boolean;
* a copy out, an optional interval (present iff moved) of the link's time for those bytes on the
  rank's device-to-host stream (NoOverlap), starting no earlier than the F's end;
* a fetch, an optional interval of the same length on the host-to-device stream (NoOverlap),
  starting no earlier than the copy out's end and ending no later than the backward's start;
* the moved bytes, carved out of what the F holds for its backward (first from the part its I
  frees, then from the part W frees): held from the F's start to the backward's release when not
  moved, from the F's start to the copy out's end and from the fetch's start to the release when
  moved (optional intervals of the same cumulative); the fetched bytes count from the rank's
  longest action before the fetch, since the runtime issues a fetch at an action's start, which
  may come up to one action earlier than the model's instant.

With the stages' checkpointed costs (``checkpointed``, schedc.planning.ac.checkpointed_form),
every (stage, microbatch), the last stage's too, also gets ``recomputed``, a Boolean (exactly one
of kept, moved, recomputed where it may move): its I then lasts the checkpointed stage's B and
its W nothing (extraction runs that backward whole, as B at its I's place:
schedc.solver.recompute_choice.run_as_b), and its F holds what the checkpointed stage keeps,
from the F's start to the B's end, with the checkpointed F's and B's transients while they run,
in place of the holds above (present only when not recomputed). A recomputed microbatch never
moves.

Times are in the engine's integer units (copy lengths rounded up), bytes moved rounded down
(both on the safe side); the units are chosen over the checkpointed costs too. Extraction: each
rank's order by start; for each moved microbatch the
first F of its rank starting at or after its copy out's end waits for that copy (``room_for``),
so the simulator's earliest starts keep the model's room, and it is fetched at the first action
between its F and its backward that starts at or after the model's fetch, or, a second try, at
the last that starts at or before it; the caller's choosers (schedc.solver.offload.choose_among)
on the model's order are a third. Each is simulated (schedc.core.simulate with the memory
actions) and the shortest that fits is kept when it is shorter than the incumbent: the model is
freer than the simulator (copies in any order), so its answers are checked, not trusted. Its
bound is not reported: it bounds only these fractions. Whole microbatches are solved first,
then, where the incumbent moves a share, its shares, each in half the time.

It improves on the choosers in seconds up to a few hundred actions and finds nothing in tens of
seconds at 8 ranks x 32 microbatches (docs/results.md, "The order and the offloads in one CP-SAT
model"), so ``--offload auto`` runs it on small problems only
(schedc.solver.offload.CPSAT_ACTIONS).

Cost: the base model's O(actions) intervals plus 2 + 3 optional intervals and one Boolean per
offloadable (stage, microbatch), with recompute two Booleans and three optional intervals more
per (stage, microbatch); CP-SAT's search within the time given (its deterministic time
charged under a work budget, as schedc.solver.engines.cpsat charges).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

from schedc.core.costs import MemoryLimit, Profile
from schedc.core.host_link import HostLink, offload_bytes
from schedc.core.ir import KIND_TABLE, Action, Kind, Schedule
from schedc.core.memory_actions import MemoryAction
from schedc.core.simulate import SimResult, Timing, simulate
from schedc.solver.deadline import Deadline, now
from schedc.solver.engines.cpsat import (
    _add_objective,
    _add_precedences,
    _durations,
    _horizon,
    _intervals,
    _lags,
    _memory_events,
    _orders,
    _scales,
    _units,
    import_cp_model,
    new_solver,
    run_solver,
)
from schedc.solver.graph import graph_of, schedule_from_orders
from schedc.solver.recompute_choice import run_as_b


@dataclass(frozen=True)
class Found:
    """An order, its memory actions and the simulation with them (which fits)."""

    schedule: Schedule
    actions: tuple[MemoryAction, ...]
    sim: SimResult


# the choosers on an order (schedc.solver.offload.choose_among), given by the caller: (order, step
# to beat, deadline) -> a fitting answer with .schedule, .actions and .sim, or None
Chooser = Callable[[Schedule, float, Deadline], Optional[Any]]


def offload_cpsat(problem, link: HostLink, incumbent, deadline: Deadline, choose: Optional[Chooser] = None,
                  seed: int = 0, checkpointed: Optional[Profile] = None) -> Optional[Any]:
    """A shorter order with its offloads (module docstring) than `incumbent` (an answer with
    .schedule, .actions and .sim that fits `problem`'s cap, or None), found by CP-SAT until
    `deadline`, `choose` the choosers tried on its order; a :class:`Found` (or `choose`'s answer),
    or None when it finds nothing shorter that fits. Whole microbatches first, then, where the
    incumbent moves a share, its shares, each in half the time. With `checkpointed` (the stages'
    costs checkpointed, schedc.planning.ac.checkpointed_form) any microbatch may instead be
    recomputed."""
    import_cp_model()
    # the graph without the cap's forced orders (they assume nothing leaves the device), the
    # cap's room per rank: built once for every mix
    inst = graph_of(problem.with_memory(MemoryLimit(kind="none")))
    room = graph_of(problem).room
    best = incumbent
    mixes = [[1.0] * problem.n_ranks]
    if incumbent is not None and _fractions(problem, incumbent) != mixes[0]:
        mixes.append(_fractions(problem, incumbent))
    for k, fractions in enumerate(mixes):
        left = deadline.left() / (len(mixes) - k)
        if left <= 0.2:
            break
        found = _solve(problem, inst, room, link, fractions, best, Deadline(min(deadline.at, now() + left)),
                       choose, seed, checkpointed)
        if found is not None:
            best = found
    return None if best is incumbent else best


def _solve(problem, inst, room_of: list[float], link: HostLink, fractions: list[float], incumbent,
           deadline: Deadline, choose: Optional[Chooser], seed: int, checkpointed: Optional[Profile] = None):
    """One model at `fractions` per rank, hinted with `incumbent`; the shortest fitting answer
    found from it (the model's own fetch points, later or earlier, and the choosers on its order)
    if shorter than `incumbent`, else None."""
    cp_model = import_cp_model()
    ck = None if checkpointed is None else checkpointed.executed(problem.profile.runtime)
    # a recomputed microbatch's B and what it holds count in the units the model chooses
    ts, bs = _scales(inst, [] if ck is None else [KIND_TABLE[Kind.B].seconds(c) for c in ck.stages],
                     [] if ck is None else [x for c in ck.stages for x in (c.activation_bytes, c.transient(Kind.F),
                                                                         c.transient(Kind.B)) if x > 0])
    beat = math.inf if incumbent is None else incumbent.sim.objective(problem.objective)
    dur = _durations(inst, ts)
    lags = _lags(inst, ts)
    # without an incumbent, every action one after another bounds an optimum's end
    best_units = ts.ceil(beat) + 1 if math.isfinite(beat) else sum(dur) + sum(lags.values()) + 1
    horizon = _horizon(inst, dur, lags, problem.objective, best_units)
    m, starts, ends, moved, copies, redone = _model(inst, problem, link, fractions, ts, bs, dur, lags, horizon,
                                                    room_of, ck)
    obj = _add_objective(m, inst, starts, ends, problem.objective, best_units, 0, inst.by_rank)
    if incumbent is not None:
        _hint_offloads(m, inst, ts, starts, obj, incumbent, moved, copies, redone, problem.objective)
    solver = new_solver(deadline.left(), 2, seed)
    status = run_solver(solver, m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    start_vals = [solver.value(v) for v in starts]
    end_vals = [solver.value(v) for v in ends]
    order = schedule_from_orders(inst, _orders(inst, start_vals, end_vals), name="schedc-cpsat-offload")
    # a recomputed microbatch's backward runs whole, as B at its I's place
    keys = [key for key, rc in redone.items() if solver.value(rc)]
    schedule = run_as_b(order, keys)
    recomputes = [MemoryAction(s, mb, "recompute") for s, mb in keys]
    # the model fetches at any instant, the runtime at an action's start: the fetch points at or
    # after the model's fetch (later: the backward may wait) or at or before it (earlier: the
    # bytes are back sooner), and the choosers on the model's order; the shortest that fits
    tried = []
    for late in (True, False):
        actions = recomputes + _memory_actions(inst, schedule, start_vals, solver, moved, copies, fractions, late)
        sim = simulate(schedule, problem.profile, problem.memory, memory_actions=actions or None, link=link,
                       recompute=checkpointed if recomputes else None)
        if sim.fits:
            tried.append(Found(schedule, tuple(actions), sim))
    chosen = None if choose is None else choose(order, beat, deadline)
    if chosen is not None:
        tried.append(chosen)
    best = min(tried, key=lambda c: c.sim.objective(problem.objective), default=None)
    if best is None or best.sim.objective(problem.objective) >= beat * (1 - 1e-12):
        return None
    return best


def _fractions(problem, incumbent) -> list[float]:
    """Per rank, the share of each moved microbatch's bytes: the incumbent's where it moves
    some, else all of them."""
    out = [1.0] * problem.n_ranks
    if incumbent is not None:
        for a in incumbent.actions:
            if a.action == "offload":
                out[problem.placement[a.stage]] = a.fraction
    return out


def _model(inst, problem, link: HostLink, fractions, ts, bs, dur, lags, horizon, room_of, ck=None):
    """The model (module docstring): (model, starts, ends, {(s, m): moved}, {(s, m): (out start,
    in start, length)}, {(s, m): recomputed}); `ck` the checkpointed stages' costs as executed,
    None where nothing may be recomputed."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    starts, ends, intervals = _intervals(m, inst, dur, horizon)
    redone = _recompute_choices(m, inst, ts, dur, horizon, starts, ends, intervals, ck) if ck is not None else {}
    _add_precedences(m, inst, starts, ends, lags)
    for acts in inst.by_rank:
        m.add_no_overlap([intervals[i] for i in acts])
    deltas, _ = _memory_events(inst, bs)
    room = [math.inf if math.isinf(left) else bs.floor(left) for left in room_of]
    last = inst.S - 1
    moved: dict = {}
    copies: dict = {}
    for r, acts in enumerate(inst.by_rank):
        held, demands = [], []
        outs, ins = [], []
        # the runtime fetches at an action's start, which may come up to one action before the
        # model's fetch: the fetched bytes count from that long before it
        early = max((dur[i] for i in acts), default=0)

        def hold(start, end, amount: int, present=None) -> None:
            if amount <= 0:
                return
            size = m.new_int_var(0, horizon, "")
            iv = m.new_interval_var(start, size, end, "") if present is None else \
                m.new_optional_interval_var(start, size, end, present, "")
            held.append(iv)  # noqa: B023 (called within this iteration)
            demands.append(amount)  # noqa: B023

        for f in acts:
            a = inst.actions[f]
            if a.kind != Kind.F:
                continue
            s, mb = a.stage, a.microbatch
            i = inst.id(s, Kind.I, mb)
            rise = i is not None and deltas[i] > 0
            back = i if i is not None else inst.id(s, Kind.B, mb)
            rc = redone.get((s, mb))
            plain = None if rc is None else ~rc  # the microbatch runs as the graph has it
            if rc is not None:  # recomputed: F keeps what the checkpointed stage keeps until its B ends
                c = ck.stages[s]
                hold(starts[f], ends[back], _units(c.activation_bytes, bs), rc)
                hold(starts[f], ends[f], _units(c.transient(Kind.F), bs), rc)
                hold(starts[back], ends[back], _units(c.transient(Kind.B), bs), rc)
            parts = []  # (release action, bytes the F holds until it ends)
            for kind in (Kind.I, Kind.W, Kind.B):
                j = inst.id(s, kind, mb)
                if j is None or deltas[j] >= 0:
                    continue
                parts.append((j, deltas[f] if rise else -deltas[j]))
                if rise and i is not None:
                    hold(starts[i], ends[j], deltas[i], plain)
            nbytes = fractions[r] * offload_bytes(problem.profile, s)
            away = min(sum(amount for _, amount in parts), int(math.floor(nbytes / bs.unit))) \
                if s != last and back is not None and not math.isinf(room[r]) else 0
            if away <= 0:
                for j, amount in parts:
                    hold(starts[f], ends[j], amount, plain)
                continue
            length = max(1, ts.ceil(link.seconds(nbytes)))
            o = m.new_bool_var(f"moved_{a}")
            if rc is None:
                kept = ~o
            else:  # kept, moved or recomputed: one of the three
                kept = m.new_bool_var(f"kept_{a}")
                m.add_exactly_one(kept, o, rc)
            out_start = m.new_int_var(0, horizon, "")
            in_start = m.new_int_var(0, horizon, "")
            outs.append(m.new_optional_fixed_size_interval_var(out_start, length, o, ""))
            ins.append(m.new_optional_fixed_size_interval_var(in_start, length, o, ""))
            m.add(out_start >= ends[f]).only_enforce_if(o)
            m.add(in_start >= out_start + length).only_enforce_if(o)
            m.add(in_start + length <= starts[back]).only_enforce_if(o)
            moved[(s, mb)], copies[(s, mb)] = o, (out_start, in_start, length)
            left = away
            for j, amount in parts:  # the moved bytes come out of the part I frees first
                carved = min(left, amount)
                left -= carved
                hold(starts[f], ends[j], amount - carved, plain)
                hold(starts[f], ends[j], carved, kept)
                hold(starts[f], out_start + length, carved, o)
                hold(in_start - early, ends[j], carved, o)
        for j in acts:
            a = inst.actions[j]
            t = inst.trans[a.kind][a.stage] if inst.trans else 0.0
            if t > 0 and inst.dur[j] > 0:
                rc = redone.get((a.stage, a.microbatch))
                hold(starts[j], ends[j], _units(t, bs), None if rc is None else ~rc)
        if outs:
            m.add_no_overlap(outs)
            m.add_no_overlap(ins)
        if held and not math.isinf(room[r]):
            m.add_cumulative(held, demands, int(room[r]))
    return m, starts, ends, moved, copies, redone


def _recompute_choices(m, inst, ts, dur, horizon, starts, ends, intervals, ck) -> dict:
    """A Boolean per (stage, microbatch), recomputed: its backward then runs whole at its I's
    place with the checkpointed stage's B (`ck`) and its W lasts nothing (dropped on extraction,
    schedc.solver.recompute_choice.run_as_b). Rewrites those actions' ends and intervals in
    place; returns {(s, m): Boolean}."""
    redone = {}
    for a in inst.actions:
        if a.kind != Kind.F:
            continue
        s, mb = a.stage, a.microbatch
        back = inst.id(s, Kind.I, mb)
        back = back if back is not None else inst.id(s, Kind.B, mb)
        if back is None:
            continue
        rc = m.new_bool_var(f"recomputed_{a}")
        redone[(s, mb)] = rc
        whole = ts.floor(KIND_TABLE[Kind.B].seconds(ck.stages[s]))
        _resize(m, inst, starts, ends, intervals, horizon, back, dur[back], whole, rc)
        w = inst.id(s, Kind.W, mb)
        if w is not None and dur[w] > 0:
            _resize(m, inst, starts, ends, intervals, horizon, w, dur[w], 0, rc)
    return redone


def _resize(m, inst, starts, ends, intervals, horizon: int, i: int, plain: int, redone: int, rc) -> None:
    """Action `i` lasts `plain` units, or `redone` where `rc` holds: its end and interval become
    variables (CP-SAT's intervals take one variable each for size and end)."""
    size = m.new_int_var(min(plain, redone), max(plain, redone), "")
    m.add(size == plain + (redone - plain) * rc)
    end = m.new_int_var(0, horizon, "")
    m.add(end == starts[i] + size)
    ends[i] = end
    intervals[i] = m.new_interval_var(starts[i], size, end, f"iv_{inst.actions[i]}")


def _hint_offloads(m, inst, ts, starts, obj, incumbent, moved, copies, redone, objective) -> None:
    """The incumbent's times, offloads, copies and recomputes as the solution hint (CP-SAT repairs
    a hint the rounding makes infeasible, or ignores it); a recomputed microbatch's I starts at
    its B, its W at its B's end."""
    timings = incumbent.sim.timings
    hinted = []
    for a in inst.actions:
        whole = timings.get(Action(a.stage, Kind.B, a.microbatch))
        t = timings.get(a) or (None if whole is None or a.kind not in (Kind.I, Kind.W) else
                               whole if a.kind == Kind.I else Timing(whole.rank, whole.end, whole.end))
        if t is None:
            return  # another vocabulary: its times name other actions
        hinted.append(t.start)
    for i, start in enumerate(hinted):
        m.add_hint(starts[i], ts.floor(start))
    m.add_hint(obj, ts.ceil(incumbent.sim.objective(objective)))
    out = {(c.stage, c.microbatch): c for c in incumbent.sim.copies if c.direction == "out" and c.after == "F"}
    back = {(c.stage, c.microbatch): c for c in incumbent.sim.copies if c.direction == "in" and c.after == "F"}
    for key, o in moved.items():
        m.add_hint(o, key in out and key in back)
        if key in out and key in back:
            m.add_hint(copies[key][0], ts.ceil(out[key].start))
            m.add_hint(copies[key][1], ts.ceil(back[key].start))
    recomputed = {(a.stage, a.microbatch) for a in incumbent.actions if a.action == "recompute"}
    for key, rc in redone.items():
        m.add_hint(rc, key in recomputed)


def _id(inst, a) -> int:
    """`a`'s action in the graph: a B that a recompute made of an I is that I."""
    i = inst.id(a.stage, a.kind, a.microbatch)
    return inst.id(a.stage, Kind.I, a.microbatch) if i is None else i


def _memory_actions(inst, schedule, start_vals, solver, moved, copies, fractions, late: bool) -> list[MemoryAction]:
    """The model's offloads as memory actions on `schedule` (module docstring: waits), each fetched
    at the first action between its F and its backward that starts at or after the model's fetch
    (`late`; else the last one) or at the last that starts at or before it."""
    out = []
    for (s, mb), o in moved.items():
        if not solver.value(o):
            continue
        rank = inst.stage_rank[s]
        row = schedule.actions(rank)
        times = {a: start_vals[_id(inst, a)] for a in row}
        f_at = next(k for k, a in enumerate(row) if a.stage == s and a.microbatch == mb and a.kind == Kind.F)
        b_at = next(k for k, a in enumerate(row) if a.stage == s and a.microbatch == mb and a.kind in (Kind.I, Kind.B))
        if b_at <= f_at + 1:
            continue  # nothing between F and its backward to fetch at
        out_start, in_start = solver.value(copies[(s, mb)][0]), solver.value(copies[(s, mb)][1])
        length = copies[(s, mb)][2]
        between = row[f_at + 1:b_at]
        if late:
            fetch = next((a for a in between if times[a] >= in_start), between[-1])
        else:
            fetch = next((a for a in reversed(between) if times[a] <= in_start), between[0])
        room = next((a for a in row[f_at + 1:] if a.kind == Kind.F and times[a] >= out_start + length), None)
        out.append(MemoryAction(s, mb, "offload", fetch, fractions[rank], room))
    return out
