"""Plan a model: the partition of its units into stages, the placement and the schedule, together.

Problem: given a per-unit profile (embedding, each layer, norm + head + loss, in model order),
R ranks, M microbatches and a per-rank memory cap in bytes (static bytes of the rank's stages
included), find the contiguous partition of the units into stages (every stage at least one
unit), the placement (``loop``: one stage per rank; ``v``: two, in a V) and the schedule with the
shortest step, and certify how far it can be from the best plan.

Method (:func:`plan`, one module per step):
0. ``request``: the inputs checked once into a frozen :class:`PlanRequest`.
1. ``search``: per placement, ``schedc.core.partition`` gives by dynamic programming the smallest cap
   any partition fits (else a one-line error with that cap), the bound over partitions and the
   partition whose relaxed per-rank terms reach it.
2. ``search``: candidates are that partition, the compute-balanced split, torchtitan's default and
   the even split, then a best-first search over their neighbours (one unit moved from one stage
   to another, the stages between keeping their counts), each scored by its own lower bound
   (``problem.own_bound``), up to ``SEARCH_EVALUATIONS`` of them; under a tight cap only one
   boundary moves by one unit, where the own bound ranks partitions poorly. The best by bound and
   the comparison splits are screened by their best hand-made schedule that fits (``handmade``).
3. ``compiles``: up to ``CANDIDATES`` partitions per placement are compiled with short time
   limits: the compute-balanced split, then alternately the best by bound and the best by
   hand-made step; a partition whose bound, or first two-rank relaxation, is not below the best
   step found cannot win and is skipped. The two best go on from their answers (a second round).
   Under a tight cap (the best so far leaves some rank room for fewer than two microbatches of
   each of its stages) two short compiles and no second round: there step 4 ranks better.
4. ``certificate``: every partition whose relaxed terms stay below the best step found gets its own
   bound in the order of their relaxed values, and the least gets more relaxation steps (the
   block relaxation under a tight cap, then two ranks together); the bound over partitions is the
   least left and the relaxed value of the first partition not reached. Skipped where step 2
   found a partition whose own bound is the dynamic program's bound: nothing can raise it.
4b. ``compiles``: the partition whose own bound was the least gets a compile of its own where the
   best step found is more than ``SETTER_MARGIN`` above it, unless a short compile already tried a
   partition with as low a bound and it lost (there the bound is loose, not unreached).
5. ``compiles``: the best partition gets the time left, warm-started from the better of its short
   compile's answer and a fresh warm start.
6. ``compiles``: a comparison split whose hand-made schedule is shorter replaces the answer; then
   ``least_memory`` looks for a schedule with the plan's step and a lower peak, ``limiter`` says
   what limits the step, ``comparisons`` adds torchtitan's default split with its own classes and
   ``report`` writes ``plan.json``'s fields. ``ac.plan_ac`` makes activation checkpointing a choice
   of the plan, ``offload.plan_with_offload`` offload to host memory. docs/design.md ("The plan") gives the measurements behind these rules.
Under ``budget="work"`` every share of the time is read on the work clock of
schedc.solver.deadline (``clock``; the search charges a fixed cost per partition bounded, listed or
screened) and the two-rank and block relaxations, which run on the wall clock, are left out: the
same inputs give the same plan.

Cost: the time limit; the search before compiling is a fraction of it.
"""

from __future__ import annotations

from schedc.planning.ac import AC_MODES, AC_SHARE, TORCHTITAN_AC, ACChoice, mixed_units, plan_ac
from schedc.planning.clock import stop_requested
from schedc.planning.comparisons import TORCHTITAN_CLASSES, compare_splits, comparison_pictures, torchtitan_rows
from schedc.planning.handmade import best_hand_made
from schedc.planning.least_memory import LeastMemory, least_memory_at_step
from schedc.planning.limiter import PlanLimiter, plan_limiter, rank_work
from schedc.planning.planner import plan
from schedc.planning.problem import own_bound, problem_for
from schedc.planning.report import build_plan_report, framework_settings, nemo_yaml, plan_assumes, plan_status
from schedc.planning.request import PLAN_PLACEMENTS, PlanRequest, parse_cap
from schedc.planning.result import Comparison, PlanResult

__all__ = [
    "plan", "plan_ac", "PlanResult", "PlanRequest", "Comparison", "LeastMemory", "PlanLimiter", "ACChoice",
    "build_plan_report", "framework_settings", "nemo_yaml", "plan_status", "plan_assumes", "parse_cap",
    "problem_for", "own_bound", "best_hand_made", "compare_splits", "torchtitan_rows", "comparison_pictures",
    "least_memory_at_step", "plan_limiter", "rank_work", "mixed_units", "stop_requested",
    "AC_MODES", "AC_SHARE", "TORCHTITAN_AC", "TORCHTITAN_CLASSES", "PLAN_PLACEMENTS",
]
