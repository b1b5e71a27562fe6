"""The list heuristic with offload: the order and the memory actions built together.

Problem: the list heuristic (schedc.solver.engines.heuristic) admits a forward only while the
rank's held activations leave room for it, so under a cap that binds it runs fewer microbatches
ahead than the uncapped order; choosing offload afterwards (schedc.solver.offload's chooser) can
only move what such an order already holds. Offload frees memory as the schedule is built: a
rank that cannot start its next F may send a held microbatch to host memory, if the copy has left
the device by the time the F starts, and fetch it back on time for its backward (issue 49: "send
out the oldest microbatch a stage holds when the next F would not fit").

Method: the list scheduler's events, with each rank's two copy streams
(schedc.core.host_link.HostLink, first in first out) timed as schedc.core.simulate times them:

- **Offload.** When rank r's next admissible F (stage s, microbatch m) would not fit, it looks
  among the microbatches it holds (F ended, I not started, not offloaded, with bytes to move:
  host_link.offload_bytes; never the last stage's, whose backward follows its forward) for the
  one whose backward is furthest away (the most backwards of its stage still before it; the
  lower stage of a V on a tie), whose fetch is not due yet, whose F ended no earlier than the
  last one the rank offloaded (so the copy joins the device-to-host stream's tail, where the
  simulator puts it: it issues copies out at the F's end), and whose copy out ends by the F's
  earliest start (the rank free and the F's input there: the time the simulator starts the F).
  It offloads such microbatches until the F fits beside the rank's reserve, or none.
- **Wait.** A rank with nothing else to run (no backward ready, no W pending) whose F cannot be
  made to fit so may also take copies out that end after that start, by at most the rank's
  compute per microbatch (a longer wait costs more than running a microbatch fewer in flight):
  the F then waits for the last of them (its ``room_for``, which the simulator honours), as a
  rank's first forwards must where they come faster than the link moves their bytes. Without it
  such a rank idles until a backward reaches it, and under a cap that binds a pipeline's warm-up
  degrades to a few microbatches in flight.
- **Fetch.** A fetch is due once the microbatch's backward has started ``front`` stages above
  (about the copy's time in I's and boundaries, plus a lead of 0 or 1 stage) or, without the
  reserve, when fewer backwards of its stage than the copy's time covers come before it. At the
  start of every action a rank runs it issues at most one due fetch (one: the host-to-device
  stream's order is then the order they are issued in), when its bytes fit beside what the
  action allocates; that action is its ``fetch_at``, and the backward waits for the fetch's end.
  A rank left with nothing to run while its next backward of a stage is away fetches it at the
  action it last started (where no fetch was issued), so that it waits rather than deadlocks.
- **Reserve.** An F is admitted only beside the bytes of the fetches due and, in the careful
  variant, for each microbatch away its bytes less what the backwards before it on the rank
  free (those it holds on the device whose backwards come first: older ones of its stage and,
  on a V, those of its upper stage up to it; the last W's free excluded, as the fetch starts
  with an action): every microbatch away can then come back in its turn. The greedy variant
  keeps only the due fetches' room and never offloads the next backwards the copy's time
  covers; it offloads more and may get stuck (that construction is dropped).
- **Rules.** The list heuristic's deterministic rules without its idle waits (a rank that waits
  would start later than the simulator starts it, and the copies' timing would not hold), each
  with a lead of 0 and of 1, each greedy and careful (offload_rules' order: first the rules that admit
  more microbatches than 1F1B), on the net safe view of the action graph
  (schedc.solver.graph, ``Graph.safe_net``: the safe view keeps a rising I's rise twice, and a
  loss and head whose I keeps more than its F left then has no room for one microbatch). A
  checkpointed stage's I and the W that costs nothing after it become one B at the I's place,
  as torch runs it (a fetch at a dropped W moves to the next action). Every construction becomes
  a schedule and memory actions (schedc.core.memory_actions) and is simulated with them (``simulate(...,
  memory_actions=, link=)``); only one that fits its caps, host memory included, is kept, the
  shortest by the problem's objective (for the makespan, a construction whose own timing is no
  shorter than the best so far is not simulated). A rank's one microbatch need not fit its cap without
  offload: on a V a rank's lower stage can wait in host memory while the microbatch climbs to
  its upper stage (the careful variant).

Cost: per variant (four per rule, at most MAX_RULES rules) one construction (O(A log A) for A
actions, times the microbatches a rank holds per F that does not fit and, for the reserve, per
microbatch away) and one simulation; under a work budget each construction charges its passes
(schedc.solver.deadline), and the deadline stops the variants.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from typing import Optional

from schedc.core.cost_model import fits_room
from schedc.core.host_link import HostLink, offload_bytes
from schedc.core.ir import Action, Kind, Schedule
from schedc.core.memory_actions import MemoryAction
from schedc.core.simulate import SimResult, simulate
from schedc.errors import SchedcError
from schedc.solver.deadline import NEVER, Deadline, charge_passes
from schedc.solver.engines.heuristic import (
    EPS,
    INF,
    ListScheduler,
    Rule,
    list_rules,
    one_f_one_b_warmup,
    to_schedule,
)
from schedc.solver.graph import Graph, graph_of

LEADS = (0, 1)  # stages of lookahead added to the fetch's: how early a fetch is due
# passes over the graph one construction and its simulation count for under a work budget
# (schedc.solver.deadline): measured 1.26e-5 to 1.93e-5 CPU seconds per action per construction
# (Llama-3-8B and Qwen2.5-7B plans at 28 and 40 GiB, uniform 4 x 16 and 8 x 32; 96 constructions
# each), 1.0 to 1.45 passes at a work unit's 2/3 of a CPU second; the list heuristic's
# CONSTRUCTION_PASSES (14) charged ten times that, and a plan's share of the time ended the
# heuristic after two or three constructions. On the stages sized for offload of Qwen2.5-7B at
# 28 GiB (benchmarks/work_charges.py --offload) 1.5 passes ran 0.77 CPU s per unit since the
# charge before, and with two busy processes the wall came within 0.1 s of taking over: 1.8
OFFLOAD_CONSTRUCTION_PASSES = 1.8
MAX_RULES = 24  # deterministic rules tried (each with every lead, careful or not), best first


@dataclass(frozen=True)
class OffloadSchedule:
    """A schedule built with its offloads: the memory actions and the simulation with them."""

    schedule: Schedule
    actions: tuple[MemoryAction, ...]
    sim: SimResult


class _OffloadScheduler(ListScheduler):
    """One construction of the list scheduler whose ranks offload and fetch (module docstring)."""

    def __init__(self, a: Graph, rule: Rule, moved: list[float], copy: list[float], front: list[int],
                 ahead: list[int], careful: bool = True, longest_wait: Optional[list[float]] = None):
        super().__init__(a, rule)
        self.moved, self.copy, self.front, self.ahead, self.careful = moved, copy, front, ahead, careful
        self.longest_wait = longest_wait or [INF] * a.R  # per rank: the most an F waits for copies out
        self.out_free = [0.0] * a.R
        self.in_free = [0.0] * a.R
        self.last_out_f = [-INF] * a.R  # per rank: the F end of the last microbatch it offloaded
        self.away: dict[tuple[int, int], float] = {}  # offloaded, not fetched: (s, m) -> copy out's end
        self.fetched: dict[tuple[int, int], float] = {}  # (s, m) -> fetch's end
        self.fetch_at: dict[tuple[int, int], tuple[int, str, int]] = {}
        self.may_offload = True  # whether the F being looked for would run (choose's order)
        self.may_wait = False  # whether it may wait for copies out (nothing else to run)
        self.wait_for: dict[tuple[int, int], tuple[float, tuple[int, int]]] = {}  # F -> (copy end, offload)
        self.room_for: dict[tuple[int, int], tuple[int, int]] = {}  # offload (s, m) -> the F waiting for it
        self.cached: Optional[tuple[int, float, tuple[Optional[tuple[int, int]], float]]] = None
        # per rank, its last action: (start, (stage, kind, microbatch), a fetch issued at it,
        # the most it held while it ran)
        self.last: list[Optional[tuple[float, tuple[int, str, int], bool, float]]] = [None] * a.R

    def choose(self, r: int, t: float) -> Optional[tuple]:
        # offload only for an F that would run now: none when a W is forced, or when a ready I
        # goes first under the rule
        rule = self.rule
        forced = len(self.pendW[r]) - self.wpos[r] > self.w_lim[r]
        self.cached = None
        ready = self.ready_backward(r, t)
        self.cached = (r, t, ready)  # choose asks again first thing, before anything changes
        i_first = not (rule.f_first or rule.depth_first) and ready[0] is not None
        self.may_offload = not forced and not i_first
        self.may_wait = self.may_offload and ready[0] is None and len(self.pendW[r]) == self.wpos[r]
        picked = super().choose(r, t)
        self.cached = None
        if picked is None:
            self._fetch_late(r, t)
        return picked

    def _fetch_late(self, r: int, t: float) -> None:
        """A rank with nothing to run whose next backward of a stage waits in host memory (its
        fetch was not due when the rank last started an action) fetches it at that last action:
        it idles until the fetch ends, rather than for ever."""
        last = self.last[r]
        if last is None or last[2]:
            return  # nothing to fetch at, or a fetch there already (one per point: the stream's order)
        start, action, _, peak = last
        a = self.a
        for q in self.stages_desc[r]:
            j = self.nextI[q]
            if (q, j) in self.away and self.endF[q][j] <= start + EPS and \
                    (q + 1 == a.S or self.endI[q + 1][j] >= 0) and fits_room(peak + self.moved[q], a.room[r]):
                self._issue(r, q, j, action, start, t)
                self.last[r] = (start, action, True, peak + self.moved[q])
                return

    # ------------------------------------------------------------ offload

    def _due(self, s: int, m: int) -> bool:
        """Whether (s, m)'s fetch is due: its backward has started on stage ``front[s]``, or
        fewer than ``ahead[s]`` backwards of its stage come before it."""
        return self.endI[self.front[s]][m] >= 0 or m - self.nextI[s] < self.ahead[s]

    def _reserve(self, r: int, leaving: tuple = (), admitting: Optional[tuple[int, int]] = None) -> float:
        """The room rank r keeps for its fetches (with `leaving` away too): the fetches due, and
        for each microbatch away its bytes less what the backwards before it on its stage free
        (those it holds on the device whose backwards come first, but the largest: their I and W),
        so that every one can come back in its turn:
        an F that left less could fill the rank with microbatches whose backwards wait behind
        one that cannot return. `admitting`: the F about to run, held too."""
        a = self.a
        away = {(s, m) for (s, m) in self.away if a.stage_rank[s] == r} | set(leaving)
        due = sum(self.moved[s] for (s, m) in away if self._due(s, m))
        worst = 0.0
        for s, m in away if self.careful else ():
            # what the rank holds on the device whose backward comes first: older microbatches of
            # the stage, and those up to m of its stages above (a V: the way down passes them
            # first). The fetch starts with an action, at the latest the last W before the
            # backward, whose own free comes after it: the largest W's does not count
            held = [q for q in a.stages[r] if q >= s
                    for j in range(self.nextI[q], min(self.nextF[q], m + (q > s))) if (q, j) not in away]
            if admitting is not None and admitting[0] >= s and admitting[1] < m + (admitting[0] > s):
                held.append(admitting[0])
            frees = sum(a.act[q] for q in held) - max((a.wg[q] for q in held), default=0.0)
            worst = max(worst, self.moved[s] - frees)
        return max(due, worst)

    def _fits_f(self, r: int, s: int, m: int) -> bool:
        return fits_room(self.held[r] + self.a.act[s] + self._reserve(r, admitting=(s, m)), self.a.room[r])

    def _make_room(self, r: int, s: int, m: int) -> bool:
        """Offload held microbatches of rank r until F(s, m) fits at its earliest start, or, where
        the rank may wait (module docstring, "Wait"), once the copies it waits for have ended;
        whether it does (nothing is offloaded when it cannot be made to fit)."""
        return self._offload_for(r, s, m, wait=False) or (self.may_wait and self._offload_for(r, s, m, wait=True))

    def _offload_for(self, r: int, s: int, m: int, wait: bool) -> bool:
        a = self.a
        start = self.rank_free[r] if s == 0 else max(self.rank_free[r], self.endF[s - 1][m] + a.comm[s - 1])
        room = a.room[r] - a.act[s]  # what the held bytes and the reserve must come down to
        pool = []
        for q in a.stages[r]:
            if self.moved[q] <= 0:
                continue
            for j in range(self.nextI[q], self.nextF[q]):
                if (q, j) not in self.away and (q, j) not in self.fetched and not self._due(q, j):
                    pool.append((j - self.nextI[q], -q, j, q))
        pool.sort(reverse=True)  # furthest backward first
        picks: list[tuple[int, int, float]] = []
        out_free, last_f, freed = self.out_free[r], self.last_out_f[r], 0.0
        for _, _, j, q in pool:
            f_end = self.endF[q][j]
            if f_end < last_f - EPS:
                continue  # the copy would not join the stream's tail
            end = max(f_end, out_free) + self.copy[q]
            if end > start + (self.longest_wait[r] if wait else 0.0) + EPS:
                continue
            picks.append((q, j, end))
            out_free, last_f, freed = end, f_end, freed + self.moved[q]
            if fits_room(self.held[r] - freed + self._reserve(r, tuple((q, j) for q, j, _ in picks), (s, m)), room):
                break
        if not picks or not fits_room(self.held[r] - freed + self._reserve(r, tuple((q, j) for q, j, _ in picks),
                                                                           (s, m)), room):
            return False
        for q, j, end in picks:
            self.away[(q, j)] = end
            self.held[r] -= self.moved[q]
            if self.use_banker:
                self.mb_held[j][r] -= self.moved[q]
        self.out_free[r], self.last_out_f[r] = out_free, last_f
        q, j, end = picks[-1]  # the stream is first in first out: the last copy ends last
        if end > start - EPS:
            # the F waits for it (room_for), also where it ends as the F starts: the simulator
            # counts a copy out's leave after what starts at the same moment unless the F waits
            self.wait_for[(s, m)] = (end, (q, j))
        return True

    def forward_fits(self, r: int, s: int, m: int) -> bool:
        """F(s, m) fits with the reserve, or after offloading held microbatches (:meth:`_make_room`)."""
        return self._fits_f(r, s, m) or (self.may_offload and self._make_room(r, s, m))

    # ------------------------------------------------------------ fetch

    def ready_backward(self, r: int, t: float) -> tuple[Optional[tuple[int, int]], float]:
        if self.cached is not None and self.cached[0] == r and self.cached[1] == t:
            return self.cached[2]
        return super().ready_backward(r, t)

    def backward_ready_at(self, s: int, m: int, inputs_at: float) -> Optional[float]:
        """An offloaded microbatch's I waits for its fetch, and one still away is not chosen."""
        if (s, m) in self.away:
            return None
        return max(inputs_at, self.fetched.get((s, m), 0.0))

    def _fetch(self, r: int, s: int, kind: str, m: int, start: float) -> None:
        """Issue at most one due fetch at the start of action (s, kind, m) of rank r."""
        a = self.a
        if kind == Kind.W and a.dW[s] == 0 and a.wg[s] == 0:
            return  # a W the schedule drops (a stage without weights): no point to fetch at
        due = sorted((j - self.nextI[q], -q, q, j) for (q, j) in self.away
                     if a.stage_rank[q] == r and self._due(q, j))
        if not due:
            return
        _, _, q, j = due[0]
        rise = a.act[s] if kind == Kind.F else 0.0
        if not fits_room(self.held[r] + self.moved[q] + rise, a.room[r]):
            return
        self._issue(r, q, j, (s, kind, m), start, start)

    def _issue(self, r: int, q: int, j: int, at: tuple[int, str, int], start: float, t: float) -> None:
        """The fetch of (q, j) issued with the action `at` of rank r, which starts at `start`, as
        the rank decides at `t` (later for a late fetch: it wakes no earlier)."""
        begin = max(start, self.in_free[r], self.away.pop((q, j)))
        end = self.in_free[r] = begin + self.copy[q]
        self.fetched[(q, j)] = end
        self.fetch_at[(q, j)] = at
        self.held[r] += self.moved[q]
        if self.use_banker:
            self.mb_held[j][r] += self.moved[q]
        heapq.heappush(self.heap, (max(end, t), r))  # its backward may start then

    def _ran(self, r: int, at: tuple[int, str, int], start: float, before: float, fetches: int) -> None:
        self.last[r] = (start, at, len(self.fetch_at) > fetches, max(before, self.held[r]))

    def run_F(self, r: int, s: int, m: int, start: float) -> None:
        waited = self.wait_for.pop((s, m), None)
        if waited is not None:  # the F starts once the copy out that makes its room has ended
            start = max(start, waited[0])
            self.room_for[waited[1]] = (s, m)
        n = len(self.fetch_at)
        self._fetch(r, s, Kind.F, m, start)
        before = self.held[r]
        super().run_F(r, s, m, start)
        self._ran(r, (s, Kind.F, m), start, before, n)

    def run_I(self, r: int, s: int, m: int, start: float) -> None:
        n = len(self.fetch_at)
        self._fetch(r, s, Kind.I, m, start)
        before = self.held[r]
        super().run_I(r, s, m, start)
        self._ran(r, (s, Kind.I, m), start, before, n)

    def run_W(self, r: int, s: int, m: int, start: float) -> None:
        n = len(self.fetch_at)
        self._fetch(r, s, Kind.W, m, start)
        before = self.held[r]
        super().run_W(r, s, m, start)
        if not (self.a.dW[s] == 0 and self.a.wg[s] == 0):  # a W the schedule drops is no fetch point
            self._ran(r, (s, Kind.W, m), start, before, n)


def _depth(g: Graph, s: int, copy: float) -> int:
    """How many stages above s the backward of a microbatch must have reached for its fetch on
    stage s to end in time: the least D >= 1 whose stages' I's and transfers take the copy's
    time (the backward wave descends one stage per I and boundary)."""
    total, d = 0.0, 0
    while s + d < g.S - 1:
        d += 1
        total += g.dI[s + d] + g.comm[s + d - 1]
        if total >= copy:
            break
    return max(1, d)


def _memory_actions(fetch_at: dict, room_for: dict) -> tuple[MemoryAction, ...]:
    """The offloads of a construction as memory actions, its fetch points already named as its
    schedule runs them (:func:`_whole_backwards`: B on a merged stage, a stage without weights
    among them), each with the F that waits for its copy out, if any."""
    out = []
    for (s, m), (q, kind, j) in sorted(fetch_at.items()):
        waits = room_for.get((s, m))
        out.append(MemoryAction(s, m, "offload", Action(q, kind, j),
                                room_for=None if waits is None else Action(waits[0], Kind.F, waits[1])))
    return tuple(out)


def _whole_backwards(a: Graph, orders: list, fetch_at: dict) -> tuple[list, dict]:
    """The construction's `orders` and fetch points (``fetch_at``) with every merged stage's
    backward one B at its I's place (the list scheduler runs I, then a W that costs nothing and
    frees the bytes held for it: a checkpointed stage, which torch runs whole, or one without
    weights, whose W would be an empty call); a fetch at a dropped W moves to the rank's next
    action, or its previous one where that next is the fetched microbatch's own backward. No byte is held longer (B frees at I's end what the W
    freed later); a moved fetch may start later, and the construction is simulated after this."""
    merged = {s for s in range(a.S) if a.backward[s] == Kind.B}
    if not any(s in merged and k in (Kind.I, Kind.W) for row in orders for s, k, _ in row):
        return orders, fetch_at
    renamed: dict[tuple[int, str, int], tuple[int, str, int]] = {}
    rows = []
    for row in orders:
        out: list[tuple[int, str, int]] = []
        dropped: list[tuple[int, str, int]] = []  # Ws since the last action kept: their fetches go to the next
        for s, k, m in row:
            if s in merged and k == Kind.W:
                dropped.append((s, k, m))
                continue
            kept = (s, Kind.B, m) if s in merged and k == Kind.I else (s, k, m)
            renamed[(s, k, m)] = kept
            for w in dropped:
                renamed[w] = kept
            dropped = []
            out.append(kept)
        for w in dropped:  # Ws at the row's end: no fetch can be for after them
            renamed[w] = out[-1]
        rows.append(out)
    fixed = {}
    for (s, m), at in fetch_at.items():
        at = renamed.get(at, at)
        if at[0] == s and at[2] == m and at[1] != Kind.F:  # its own backward: the action before it
            row = rows[a.stage_rank[s]]
            at = row[row.index(at) - 1]
        fixed[(s, m)] = at
    return rows, fixed


def offload_rules(a: Graph, objective: str, one_f_one_b_first: bool = False) -> list[Rule]:
    """The list heuristic's rules without idle waits, at most MAX_RULES: first those that admit
    more microbatches than 1F1B on some rank (what offload is for: under a cap that binds, the
    list heuristic alone already runs 1F1B's warm-up or less) with each W right after its I (the
    bytes held for W leave soonest), then the others that admit more, then the rest; in each
    group those that run a ready F before a ready I first (more forwards in flight), then the
    list heuristic's order. On the plan's Llama-3-8B and Qwen2.5-7B rows at 28 GiB the shortest
    constructions came from the first group, 16 and 20 rules down the list heuristic's order,
    past what a plan's share of the time reached. With `one_f_one_b_first` the rules with 1F1B's
    warm-up go first: on stages sized to hold fewer microbatches than 1F1B's, the rest offloaded
    (schedc.planning.offload.offload_sized_candidates), those built the shortest schedules, 16
    rules down this order on Qwen2.5-7B at 28 GiB."""
    base = one_f_one_b_warmup(a)
    rules = list(dict.fromkeys(replace(r, protect_i=False, protect_f=False) for r in list_rules(a, objective)))
    rules = rules[:MAX_RULES]  # the list heuristic's best, then reordered: a longer budget tries the same ones

    def group(rule: Rule) -> tuple[bool, int, bool]:
        deeper = any(math.isfinite(w) and w > b for w, b in zip(rule.warmup, base))
        at_once = rule.w_limit == 0 or isinstance(rule.w_limit, tuple) and not any(rule.w_limit)
        later = one_f_one_b_first and list(rule.warmup) != base
        return later, (0 if deeper and at_once else 1 if deeper else 2), not rule.f_first
    return sorted(rules, key=group)


def offload_heuristic(problem, link: HostLink, deadline: Deadline = NEVER,
                      beat: float = math.inf, one_f_one_b_first: bool = False) -> Optional[OffloadSchedule]:
    """The shortest schedule with offloads that the rules build (module docstring) and that fits
    `problem`'s caps on `link`, if shorter than `beat`; None when none is, or the deadline passes
    first. `one_f_one_b_first`: the rules in offload_rules' order for stages sized for offload."""
    g = graph_of(problem)
    problem = g.problem
    safe = g.safe_net()  # safe() keeps a rising I's rise twice: no room for the head's one microbatch
    profile = problem.profile
    # the last stage's backward follows its forward: nothing of it moves
    moved = [min(offload_bytes(profile, s), safe.act[s]) if s < g.S - 1 else 0.0 for s in range(g.S)]
    copy = [link.seconds(b) if b > 0 else 0.0 for b in moved]
    depth = [_depth(g, s, copy[s]) for s in range(g.S)]
    per_mb = [sum(g.dF[q] + g.dI[q] + g.dW[q] for q in own) or 1.0 for own in g.stages]
    best: Optional[OffloadSchedule] = None
    best_val = beat
    # rule by rule in offload_rules' order, each with both leads (on the plan's Qwen2.5-7B row at
    # 28 GiB the shortest construction needs the longer one), each lead without the reserve (the
    # better on the benchmarks' rows) and then with it (which a V's one microbatch needs): a short
    # budget reaches every form of the most promising rules
    rules = offload_rules(safe, problem.objective, one_f_one_b_first)
    variants = [(rule, extra, careful) for rule in rules for extra in LEADS for careful in (False, True)]
    for rule, extra, careful in variants:
        if deadline.expired():
            return best
        front = [min(g.S - 1, s + d + extra) for s, d in enumerate(depth)]
        # without the reserve of `careful`, the next backwards the copy's time covers stay (the
        # rank would wait for them); with it, a rank of one microbatch (a V) may move its next
        ahead = [0 if careful else max(1, math.ceil(copy[s] / per_mb[g.stage_rank[s]] - EPS)) + extra
                 for s in range(g.S)]
        sched = _OffloadScheduler(safe, rule, moved, copy, front, ahead, careful, per_mb)
        orders = sched.run(deadline)
        charge_passes(g.n, OFFLOAD_CONSTRUCTION_PASSES)
        if orders is None or not sched.fetch_at:
            continue  # stuck, or nothing offloaded: the list heuristic's own answer
        if problem.objective == "makespan" and max(sched.rank_free) >= best_val * (1 + 1e-6):
            continue  # its own timing (the simulator's, but for rounding) is no shorter: not simulated
        orders, fetch_at = _whole_backwards(safe, orders, sched.fetch_at)
        schedule = to_schedule(safe, orders, "schedc-offload-heuristic", {"source": "offload-heuristic",
                                                                          "rule": rule.describe(),
                                                                          "lead": extra,
                                                                          "careful": careful})
        actions = _memory_actions(fetch_at, sched.room_for)
        try:
            sim = simulate(schedule, profile, problem.memory, memory_actions=list(actions), link=link)
        except SchedcError:
            continue  # a fetch point the schedule does not run where the rule assumed it
        value = sim.objective(problem.objective)
        if sim.fits and value < best_val * (1 - EPS):
            best, best_val = OffloadSchedule(schedule, actions, sim), value
    return best
