"""Activation checkpointing as a choice of the plan (``schedc plan --ac auto``).

Problem: checkpointing trades recompute for memory; under a tight cap the fastest plan may
checkpoint some stages and not others, and a checkpointed stage should hold fewer layers. Two
facts of torch's runtime bound what a plan may assume: a selectively checkpointed region cannot
run torch's split backward (W after I raises "Trying to backward an extra time"), and a fully
checkpointed one under the split backward recomputes its forward once in I and once per
parameter group in W. So every checkpointed stage here runs its backward whole (B, one
recompute), which the compiler schedules for a stage whose W costs nothing
(:func:`checkpointed_form`); stage 0 is the exception torch makes itself: its I runs nothing and
its W the whole backward. Method and cost: :func:`plan_ac`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence, Union

import numpy as np

from schedc.core.cost_model import fits
from schedc.core.costs import AC_MODES, PER_OP_AC, Profile, block_modes
from schedc.core.partition import (
    INF,
    Units,
    loop_buffers,
    minmax,
    n_stages_for,
    one_microbatch_need,
    partition_bound,
    v_buffers,
)
from schedc.core.tolerances import REL
from schedc.errors import ParameterError, SchedcError, printable, python_spelling
from schedc.frameworks import launchable_modes
from schedc.planning.clock import bounded_program, clock_now, stop_requested, work_budget_on
from schedc.planning.comparisons import torchtitan_rows
from schedc.planning.limiter import plan_limiter
from schedc.planning.planner import on_work_clock, plan
from schedc.planning.problem import problem_for
from schedc.planning.report import build_plan_report
from schedc.planning.request import V_SHARE, parse_cap, placements_tried
from schedc.planning.result import PlanResult
from schedc.solver.interrupt import Cut

CHECKPOINTING = AC_MODES[1:]  # fastest first: each keeps less and recomputes more
AC_SHARE = 0.6  # of the time limit, for one plan per global mode; the rest for the per-stage choice
TORCHTITAN_AC = "selective"  # what torchtitan 0.3.0's llama3 configs launch with
# microbatches a stage is sized to hold, as multiples of what 1F1B holds there (R - s on a loop):
# zero-bubble schedules want more in flight, a tight cap fewer
DEPTHS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)
TRY_WORK = 0.25  # time budget of one heuristic schedule of a candidate (seconds or work units)
# A stage whose layers take two modes, "lower+upper": every layer the lower mode, the first k
# upgraded to the upper one. Where the lower mode saves more bytes per second of recompute than
# the upper (the usual case: light recomputes only memory-bound ops, selective adds half the
# matmuls, full the whole forward), a stage that must save more than the lower mode saves on every
# layer saves the rest most cheaply by upgrading layers one at a time; two modes suffice, as the
# cheapest mix of modes meeting one byte target is a vertex of a two-constraint linear program.
STACKED = "selective+full"  # the pair torchtitan's two modes make


@dataclass(frozen=True)
class ACChoice:
    """The checkpointing the plan chose: ``chosen`` (one mode for the whole model, or one per
    stage), the best step of each global mode (None: not planned or nothing fits), and the best
    per-stage choice found (``per_stage``: modes, units per stage, placement and step; None when
    no candidate fits)."""

    chosen: Union[str, list]
    global_steps: dict
    per_stage: Optional[dict] = None
    memory_binds: Optional[dict] = None  # per global mode planned: whether memory binds its step (plan_limiter)
    per_stage_missing: Optional[str] = None  # why there is no per-stage choice: none fits, or the time ran out

    def as_dict(self) -> dict:
        return {"chosen": self.chosen, "global": self.global_steps, "per_stage": self.per_stage,
                "memory_binds": self.memory_binds, "per_stage_missing": self.per_stage_missing,
                "checkpointed_stages_run": "B (one full backward: one recompute)"}


def checkpointed_form(profile: Profile, none: Optional[Profile] = None) -> Profile:
    """`profile` (one checkpointing mode's per-unit costs) as its stages run under torch: every
    unit's backward whole in B (I = B, W = 0), B = the `none` profile's I + W plus what the mode
    adds to I (its one recompute; without `none`, the mode's I + W). After F a unit holds what the
    mode keeps; while B runs, B's peak above that (``StageCost.transient("B")``: measured or counted
    where the profile has it, else I's peak with the rise to the bytes held until W, or W's).
    Cost: linear in the units."""
    base = none.stages if none is not None and none.n_stages == profile.n_stages else None
    stages = []
    for k, u in enumerate(profile.stages):
        b = u.backward if base is None else base[k].backward + max(0.0, u.backward_input - base[k].backward_input)
        during = u.transient("B")
        stages.append(u.model_copy(update={
            "backward_input": b, "backward_weight": 0.0, "weight_grad_bytes": u.activation_bytes,
            "transient_bytes": {"F": u.transient("F"), "I": during, "B": during}}))
    return profile.model_copy(update={"stages": stages, "assumes": {**(profile.assumes or {}), "split_backward": False}})


def plan_mode(profile: Profile, mode: Optional[str], none: Optional[Profile] = None, **kwargs) -> PlanResult:
    """:func:`plan` with one activation-checkpointing mode for the whole model (``--ac MODE``):
    a checkpointed profile runs as torch runs it (:func:`checkpointed_form`, B = `none`'s I + W
    plus one recompute; without `none`, the mode's I + W) and its schedule never splits those
    stages (:func:`whole_backwards`); ``assumes`` records the mode. Cost: :func:`plan`'s."""
    if mode in (None, "none"):
        res = plan(profile=profile, **kwargs)
    else:
        res = plan(profile=checkpointed_form(profile, none), **kwargs)
        res = replace(res, compiled=whole_backwards(res.compiled))
    if mode is None:
        return res
    return replace(res, assumes={**res.assumes, "activation_checkpoint": mode},
                   comparisons=_label_rows(res.comparisons, mode))


def _label_rows(rows: list, mode: str) -> list:
    """torchtitan's classes compared under a mode it does not have (light) say so in their split."""
    if mode in launchable_modes("torchtitan"):
        return list(rows)
    return [replace(r, split=f"torchtitan default, {mode} AC") if r.peak is not None and r.split == "torchtitan default"
            else r for r in rows]


def mode_forms(profiles: dict) -> dict:
    """Each mode's per-unit profile as it runs: ``none`` split (I, then W), the others in B; and
    ``none-b``: no checkpointing in B (a stage that checkpoints some of its layers runs the
    others so)."""
    none = profiles.get("none")
    forms = {m: (p if m == "none" else checkpointed_form(p, none)) for m, p in profiles.items()}
    if none is not None:
        forms["none-b"] = checkpointed_form(none, none)
    return forms


_MODE_KEYS = ("activation_checkpoint", "split_backward")  # what differs between one run's per-mode profiles


def check_same_run(profiles: dict) -> None:
    """Per-mode profiles must count the same units of one model and run (the per-stage search
    mixes their units); a SchedcError naming the mode and what differs. Cost: O(units)."""
    (first, a), *rest = list(profiles.items()) or [(None, None)]
    for mode, b in rest:
        differs = _difference(a, b, first)
        if differs:
            raise SchedcError(f"the {mode} profile has {differs}: the profiles of --ac auto count one model and run "
                              f"in each mode; count them with the same config, --seq and settings")


def _difference(a: Profile, b: Profile, first: str) -> Optional[str]:
    if len(a.stages) != len(b.stages):
        return f"{len(b.stages)} units, the {first} profile {len(a.stages)}"
    if [u.modules for u in a.stages] != [u.modules for u in b.stages]:
        return f"other modules than the {first} profile"
    ran = [{k: v for k, v in (p.assumes or {}).items() if k not in _MODE_KEYS} for p in (a, b)]
    for key in sorted(set(ran[0]) & set(ran[1])):
        if ran[0][key] != ran[1][key]:
            return f"{key} {printable(str(ran[1][key]))[:40]}, the {first} profile {printable(str(ran[0][key]))[:40]}"
    for key in ("model", "device"):  # device: the arithmetic model's FLOP rate and bandwidth, or the GPU measured
        mine, theirs = getattr(a, key), getattr(b, key)
        if mine and theirs and mine != theirs:
            return f"{key} {printable(str(theirs))[:80]!r}, the {first} profile {printable(str(mine))[:80]!r}"
    return None


def mixed_units(profiles: dict, counts: Sequence[int], stage_modes: Sequence[str]) -> Profile:
    """The per-unit profile whose units in stage s come from ``profiles[stage_modes[s]]``."""
    base = next(iter(profiles.values()))
    stages, start = [], 0
    for n, mode in zip(counts, stage_modes):
        stages += profiles[mode].stages[start:start + n]
        start += n
    return base.model_copy(update={"stages": stages, "assumes": {
        **(base.assumes or {}), "activation_checkpoint": list(stage_modes),
        "split_backward": [m == "none" for m in stage_modes]}})  # checkpointed stages run B


@python_spelling
def plan_ac(profiles: dict, *, time_limit: float = 60.0, progress: Optional[Callable[[str], None]] = None,
            **kwargs) -> PlanResult:
    """The plan with the activation checkpointing that gives the shortest step under the cap.

    `profiles` maps modes (``none``, ``selective``, ``full``) to per-unit profiles of the same
    units, each run as :func:`mode_forms` says (checkpointed units in B). Method: one :func:`plan`
    per global mode (``AC_SHARE`` of the time, shared; a mode whose bound over partitions cannot
    beat the best plan so far is skipped), then the per-stage choice made with the partition
    (:func:`stage_candidates`: a dynamic program over stage boundaries that gives each stage the
    fastest form whose bytes fit the microbatches it is sized to hold, on a loop checkpointing as
    few of its layers as fit, one candidate per depth and placement), each candidate scored by
    the heuristic warm start, the best improved by one-move local search (a layer more or fewer
    checkpointed, a stage's form, a boundary by one unit) and compiled with the time left; kept
    when shorter than the best global mode. torchtitan and NeMo launch one mode for the whole
    model, one of its ``Framework.ac_modes``: for profiles counted for one of them (``assumes["framework"]``)
    only those global modes are planned and the per-stage choice is reported, not adopted.
    schedc's runtime (``load_pipeline(activation_checkpoint=[...])``) applies every mode, one per
    stage, or one per block of a stage. Cost: the time limit."""
    check_same_run(profiles)
    if kwargs.get("budget") == "work" and not work_budget_on():
        return on_work_clock(plan_ac, time_limit, profiles=profiles, progress=progress, **kwargs)
    say = progress or (lambda line: None)
    framework = next((p.assumes or {} for p in profiles.values()), {}).get("framework")
    one_mode = framework not in (None, "schedc")  # torchtitan, NeMo: one mode of theirs for the whole model
    modes = [m for m in AC_MODES if m in profiles and (m in launchable_modes(framework) or not one_mode)]
    if not modes:
        raise SchedcError(f"activation checkpointing 'auto' needs a profile per mode ({', '.join(AC_MODES)}); "
                          f"got {', '.join(profiles)}")
    forms = mode_forms({m: p for m, p in profiles.items() if m in AC_MODES})  # the per-stage search reads every mode
    t0 = clock_now()
    results, errors, floors = _global_plans(forms, modes, time_limit, progress, say, t0, kwargs)
    best_mode = min(results, key=lambda m: results[m].value)
    best = results[best_mode]
    steps = {m: (results[m].value if m in results else None) for m in modes}
    binds = {m: r.limiter.kind == "memory" for m, r in results.items() if r.limiter is not None}
    notes = list(best.notes) + [f"activation checkpointing {m}: {e}" for m, e in errors.items()]
    notes += [f"activation checkpointing {m}: not planned for the whole model, {framework} has no such mode (only "
              f"schedc's runtime)" for m in AC_MODES if m in profiles and m not in modes]
    mix: Optional[dict] = None
    missing: list[str] = []
    if len(modes) > 1 and "none" in forms and not stop_requested():
        mix = _per_stage_choice(forms, best, best_mode, kwargs, t0 + time_limit, say, t0, missing)
    elif len(modes) > 1:
        missing.append("stopped before the per-stage search" if stop_requested() else
                       "not searched: the per-stage search starts from the none profile")
    global_bound = min([results[m].bound for m in results] + [floors[m] for m in errors if m in floors])
    # the per-stage choice where it is shorter than the best global mode
    shorter = mix if mix is not None and mix["compiled"].value < best.value * (1 - REL) else None
    launchable = not one_mode or shorter is not None and len(set(map(str, shorter["modes"]))) == 1 \
        and shorter["modes"][0] in launchable_modes(framework)
    if shorter is not None and not launchable:
        notes.append(f"per-stage checkpointing under schedc's runtime: step {shorter['compiled'].value:.6g} s "
                     f"({shorter['modes']}); {framework} applies one mode to every layer, so the plan keeps {best_mode}")
    if shorter is not None and launchable:
        out, choice = _adopt_mix(best, shorter, forms, steps, binds, notes, global_bound)
    else:
        choice = ACChoice(best_mode, steps, None if mix is None else _mix_dict(mix), binds,
                          per_stage_missing=missing[0] if mix is None and missing else None)
        out = replace(best, bound=min(global_bound, best.value), notes=notes + (
            ["bound: over every partition with one mode for the whole model; per-stage choices are searched, "
             "not bounded"] if len(modes) > 1 else []))
    return _finish(out, choice, forms, best_mode, t0)


def _adopt_mix(best: PlanResult, mix: dict, forms: dict, steps: dict, binds, notes: list, global_bound: float):
    """(plan, choice) of a per-stage choice shorter than the best global plan. One mode on every
    stage is a global plan on a partition the global search missed: that mode's step, bounded over
    partitions; a real mix is bounded on its own partition and modes only."""
    compiled = mix["compiled"]
    units = spec_units(forms, mix["counts"], mix["specs"])
    out = replace(best, compiled=compiled, units=units, counts=list(mix["counts"]), placement=mix["placement"],
                  least_memory=None, candidates=best.candidates + [_mix_dict(mix)])
    if all(m == mix["modes"][0] and isinstance(m, str) for m in mix["modes"]):
        mode = mix["modes"][0]
        steps = {**steps, mode: compiled.value}
        bound = min(global_bound, compiled.value)
        note = f"the per-stage search found a shorter partition for {mode} on every stage"
        return replace(out, bound=bound, bounds={mix["placement"]: bound}, notes=notes + [note]), \
            ACChoice(mode, steps, _mix_dict(mix), binds)
    note = (f"bound: the chosen partition and per-stage checkpointing only; over every partition with one mode for "
            f"the whole model: {global_bound:.6g}")
    return replace(out, bound=compiled.lower_bound, bounds={mix["placement"]: compiled.lower_bound}, certified={},
                   notes=notes + [note]), ACChoice(list(mix["modes"]), steps, _mix_dict(mix), binds)


def _finish(out: PlanResult, choice: ACChoice, forms: dict, best_mode: str, t0: float) -> PlanResult:
    out = replace(out, compiled=whole_backwards(out.compiled))
    rows = _label_rows(out.comparisons, best_mode)
    if TORCHTITAN_AC in forms and TORCHTITAN_AC != best_mode:
        p = out.compiled.problem
        for row in torchtitan_rows(forms[TORCHTITAN_AC], p.n_ranks, p.n_microbatches, p.memory, p.objective):
            rows.append(replace(row, split=f"torchtitan default, {TORCHTITAN_AC} AC"))
    out = replace(out, comparisons=rows, ac=choice, solve_time=clock_now() - t0,
                  assumes={**out.assumes, "activation_checkpoint": choice.chosen}, notes=out.notes + _counted_per_op(
                      choice.chosen, forms))
    out = replace(out, limiter=plan_limiter(out))
    return replace(out, report=build_plan_report(out))


def _counted_per_op(chosen, forms: dict) -> list[str]:
    """A note when the plan chose a per-op mode from counted times: they leave out the host's
    per-op dispatch of torch's selective checkpointing, which a GPU showed can set a layer's F."""
    counted = [m for m in PER_OP_AC if m in block_modes(chosen) and "implementation" in (forms[m].assumes or {})]
    if not counted:
        return []
    return [f"{' and '.join(counted)}: counted times leave out the host's per-op dispatch of torch's selective "
            f"checkpointing, which on a GPU can make an eager layer's F as slow as with full checkpointing at seq "
            f"4096 and below (docs/results.md, 'On a GPU'); measure the modes' unit profiles on the GPU "
            f"(schedc profile --units --ac MODE) and plan from them (docs/profile.md)"]


def whole_backwards(compiled):
    """`compiled` whose schedule runs B, never I then W, on every stage the compiler merges (W
    costs nothing: checkpointed stages, schedc.solver.graph); a hand-made schedule adopted as is
    may split them, which torch refuses under selective checkpointing. B takes I's place, so the
    step is the same and the bytes held until W are released at once. Cost: one simulation."""
    from types import SimpleNamespace

    from schedc.planning.least_memory import with_schedule
    from schedc.solver.graph import graph_of, orders_from_schedule, schedule_from_orders

    g = graph_of(compiled.problem)
    sched = compiled.schedule
    if not any(g.backward[a.stage] == "B" and a.kind in ("I", "W") for _, a in sched.all_actions()):
        return compiled
    merged = schedule_from_orders(g, orders_from_schedule(g, sched), name=sched.name)
    return with_schedule(compiled, SimpleNamespace(schedule=merged))


def _global_plans(forms, modes, time_limit, progress, say, t0, kwargs):
    """({mode: plan}, {mode: why not planned}, {mode: bound over partitions}) of one mode for the
    whole model, each in AC_SHARE of the time shared; SchedcError when none fits."""
    results, errors, floors = {}, {}, {}
    for k, mode in enumerate(modes):
        share = (t0 + AC_SHARE * time_limit - clock_now()) / (len(modes) - k)
        floors[mode] = _mode_floor(forms[mode], kwargs, max(share, 0.5))
        best_so_far = min((r.value for r in results.values()), default=math.inf)
        if results and floors[mode] >= best_so_far * (1 - REL):  # no plan in this mode can be shorter
            errors[mode] = f"cannot beat {best_so_far:.6g} s (its bound over partitions is {floors[mode]:.6g} s)"
            say(f"[{clock_now() - t0:6.1f}s] activation checkpointing {mode}: {errors[mode]}")
            continue
        say(f"[{clock_now() - t0:6.1f}s] activation checkpointing {mode}: {share:.1f}s")
        try:
            results[mode] = plan(profile=forms[mode], time_limit=max(share, 0.5), progress=progress, **kwargs)
        except SchedcError as e:
            last = e
            # plan spells a ParameterError as Python's keyword; the note reads as the flag (str's
            # default), and the error raised below keeps its type so each front door spells it
            errors[mode] = str(ParameterError(e.param, e.detail, flag=e.flag) if isinstance(e, ParameterError) else e)
            floors.pop(mode)  # nothing fits: no bound to report
    if not results:
        raise last
    return results, errors, floors


def _mode_floor(profile: Profile, kwargs: dict, time_limit: float) -> float:
    """The least step any plan with this mode's profile can reach (schedc.core.partition's bound over
    partitions, per placement tried); inf when no partition fits, 0 when it cannot be told."""
    try:
        limit = parse_cap(kwargs.get("memory", "80GiB"))
        cap = math.inf if limit.kind == "none" else limit.value
        ranks, M = kwargs["ranks"], kwargs["microbatches"]
        with bounded_program("v", profile.n_stages, ranks, clock_now() + V_SHARE * time_limit):  # the V's reads no clock
            return min(partition_bound(profile, ranks, M, cap, pl, kwargs.get("objective", "makespan")).value
                       for pl in _placements(kwargs, ranks, profile.n_stages, time_limit)
                       if n_stages_for(pl, ranks) <= profile.n_stages)
    except (SchedcError, KeyError, ValueError, Cut):
        return 0.0  # plan itself says what is wrong; cut for time, it cannot be told


def _placements(kwargs: dict, ranks: int, n_units: int, time_limit: float) -> list[str]:
    """The placements plan itself tries in `time_limit` (schedc.planning.request.placements_tried)."""
    return placements_tried(kwargs.get("placement", "auto"), ranks, n_units, time_limit)


# ---------------------------------------------------------------- the per-stage choice
#
# A candidate is a partition (units per stage) and one spec per stage, (form, k): "none" (no
# checkpointing, I then W), "none-b" (no checkpointing, B), a mode ("light", "selective", "full")
# with the stage's first k layers checkpointed and its other units in B (k beyond its layers: all
# of them), or a pair "lower+upper": every layer in the lower mode, the first k in the upper, in B.


def checkpointing_forms(forms: dict) -> list[str]:
    """The checkpointing forms a stage may take: the modes profiled, then every pair
    "lower+upper" of them (slower mode second)."""
    modes = [m for m in CHECKPOINTING if m in forms]
    return modes + [f"{lo}+{hi}" for i, lo in enumerate(modes) for hi in modes[i + 1:]]


def _pair_modes(form: str) -> Optional[tuple[str, str]]:
    """(lower, upper) of a two-mode form, None for a one-mode form."""
    lo, plus, hi = form.partition("+")
    return (lo, hi) if plus else None


def _layer_mode(form: str, k: int, b: int) -> str:
    """The mode of layer b (counted from 0) of a stage with spec (form, k)."""
    pair = _pair_modes(form)
    if pair is not None:
        return pair[1] if b < k else pair[0]
    return form if form in CHECKPOINTING and b < k else "none"


def layer_units(forms: dict) -> list[bool]:
    """Which units checkpointing changes (the layers; not the embedding, nor the head)."""
    none = forms["none"].stages
    return [any(f.stages[u].activation_bytes != none[u].activation_bytes for m, f in forms.items()
                if m not in ("none", "none-b")) for u in range(len(none))]


def spec_units(forms: dict, counts: Sequence[int], specs: Sequence[tuple]) -> Profile:
    """The per-unit profile of a candidate (the section comment above), with its runtime modes
    (:func:`runtime_modes`) in ``assumes``."""
    layers = layer_units(forms)
    stages, start = [], 0
    for s, (n, (form, k)) in enumerate(zip(counts, specs)):
        b = 0
        for u in range(start, start + n):
            use = "none" if form == "none" or (s == 0 and form == "none-b") else "none-b"
            if layers[u]:
                mode, b = _layer_mode(form, k, b), b + 1
                use = use if mode == "none" else mode
            stages.append(forms[use].stages[u])
        start += n
    base = forms["none"]
    return base.model_copy(update={"stages": stages, "assumes": {
        **(base.assumes or {}), "activation_checkpoint": runtime_modes(forms, counts, specs),
        "split_backward": [form == "none" or s == 0 for s, (form, _) in enumerate(specs)]}})


def runtime_modes(forms: dict, counts: Sequence[int], specs: Sequence[tuple]) -> list:
    """Per stage, what ``load_pipeline(activation_checkpoint=...)`` applies: one mode, or one per
    block where the stage checkpoints some of its blocks."""
    layers = layer_units(forms)
    out, start = [], 0
    for n, (form, k) in zip(counts, specs):
        blocks = sum(layers[start:start + n])
        per_block = [_layer_mode(form, k, b) for b in range(blocks)]
        out.append(per_block[0] if len(set(per_block)) == 1 else per_block if per_block else "none")
        start += n
    return out


def _mix_dict(mix: dict) -> dict:
    return {"modes": list(mix["modes"]), "units_per_stage": list(mix["counts"]), "placement": mix["placement"],
            "backward": ["I+W" if f == "none" or s == 0 else "B" for s, (f, _) in enumerate(mix["specs"])],
            "step": mix["compiled"].value, "heuristic_step": mix["heuristic"], "depth": mix["depth"],
            "candidates_tried": mix["tried"]}


def _per_stage_choice(forms: dict, best: PlanResult, best_mode: str, kwargs: dict, end: float, say,
                      t0, missing: Optional[list] = None) -> Optional[dict]:
    """The best per-stage choice found: candidates from :func:`stage_candidates` (and the best
    global plan's partition with its mode), scored by the heuristic warm start, the best polished
    by :func:`_local_moves` and compiled; None when no candidate fits or no time is left, and
    then `missing` gets which, in words."""
    from schedc.solver.compile import compile_problem

    p = best.compiled.problem
    limit, objective = p.memory, p.objective
    ranks, M = p.n_ranks, p.n_microbatches
    cap = math.inf if limit.kind == "none" else limit.value
    scored, seen = [], set()
    start = clock_now()  # the shares below are of the per-stage search's own time
    all_layers = forms["none"].n_stages
    # the best global plan's partition first: scored even when the candidates run out of time
    cands = [(best.placement, None, tuple(best.counts), ((best_mode, all_layers),) * len(best.counts))]
    cands += [(pl, d, c, sp) for pl in _placements(kwargs, ranks, all_layers, end - start) if n_stages_for(pl, ranks) <= all_layers
              for d, c, sp in stage_candidates(forms, pl, ranks, M, cap)]
    cut = False  # a candidate left unscored for want of time
    for pl, depth, counts, specs in cands:
        if (pl, counts, specs) in seen:
            continue
        if clock_now() > start + (end - start) * 0.4 or stop_requested():
            cut = True
            continue
        seen.add((pl, counts, specs))
        found = heuristic_step(forms, counts, specs, pl, ranks, M, limit, objective)
        if found is not None:
            scored.append((found[0], pl, depth, counts, specs, found[1]))
    if not scored:
        if missing is not None:
            missing.append("stopped before a per-stage candidate was scored" if stop_requested() else
                           f"the time limit ran out after {len(seen)} of {len({(c[0], c[2], c[3]) for c in cands})} candidates, "
                           "none of which fits; raise the time limit (--time-limit) to score the rest" if cut else
                           f"none of the {len(seen)} candidates fits the cap")
        return None
    # local moves from the best candidate and from the best global plan's partition (where the
    # heuristic misjudges a mode, the global plan's own neighbourhood is the safer start)
    starts = [min(scored, key=lambda c: c[0])] + [c for c in scored if c[2] is None][:1]
    starts = starts[:1] if starts[-1] is starts[0] else starts
    climbed = []
    for k, (step, pl, depth, counts, specs, warm) in enumerate(starts):
        say(f"[{clock_now() - t0:6.1f}s] per-stage checkpointing: from {runtime_modes(forms, counts, specs)} on "
            f"{list(counts)} ({pl}), heuristic step {step:.6g}")
        until = start + (end - start) * (0.4 + 0.45 * (k + 1) / len(starts))
        climbed.append((*_local_moves(forms, (step, counts, specs, warm), pl, ranks, M, limit, objective, until,
                                      seen), pl, depth))
    done = []  # each start's climb compiled (the heuristic alone can misjudge one mode against another)
    for k, (step, counts, specs, warm, pl, depth) in enumerate(climbed):
        problem = problem_for(spec_units(forms, counts, specs), counts, pl, ranks, M, limit, objective)
        share = max(0.5, (end - clock_now()) / (len(climbed) - k))
        done.append((compile_problem(problem, time_limit=share, warm=warm), step, counts, specs, pl, depth))
    compiled, step, counts, specs, pl, depth = min(done, key=lambda c: c[0].value)
    modes = runtime_modes(forms, counts, specs)
    say(f"[{clock_now() - t0:6.1f}s] per-stage checkpointing {modes} on {list(counts)}: {compiled.value:.6g}")
    return {"compiled": compiled, "counts": counts, "specs": specs, "modes": modes, "placement": pl,
            "heuristic": step, "depth": depth, "tried": len(seen)}


def per_stage_search(forms: dict, best: PlanResult, best_mode: str, time_limit: float,
                     placement: str = "auto") -> Optional[dict]:
    """The per-stage search of :func:`plan_ac` alone, from the plan `best` (its problem, partition
    and global mode), for `time_limit` on the current clock (the work clock inside
    ``schedc.solver.deadline.counting_work``): {"compiled", "counts", "modes", "placement", ...}
    or None. For asking what other costs (`forms`) would buy on the same problem."""
    t0 = clock_now()
    return _per_stage_choice(forms, best, best_mode, {"placement": placement}, t0 + time_limit, lambda line: None,
                             t0)


def heuristic_step(forms, counts, specs, pl, ranks, M, limit, objective):
    """(step, warm start) of the heuristic warm start (schedc.solver.engines.warm) on the partition
    `counts` with stage specs `specs` (:func:`spec_units`); None if nothing fits. Cost: TRY_WORK."""
    from schedc.solver.engines.warm import warm_start

    try:
        p = problem_for(spec_units(forms, counts, specs), list(counts), pl, ranks, M, limit, objective)
        warm = warm_start(p, time_budget=TRY_WORK)
    except SchedcError:
        return None
    return (warm[1].objective(objective), warm) if warm[1].fits else None


def _local_moves(forms, current, pl, ranks, M, limit, objective, end, seen):
    """Hill climbing from `current` (step, counts, specs, warm): one layer more or fewer
    checkpointed in a stage, a stage to another form, one unit across one boundary; the first move
    that shortens the heuristic step is taken, until none does or `end` passes."""
    improved = True
    while improved and clock_now() < end and not stop_requested():
        improved = False
        step, counts, specs, _ = current
        for c, sp in _neighbours(forms, counts, specs):
            if (pl, c, sp) in seen or clock_now() >= end:
                continue
            seen.add((pl, c, sp))
            found = heuristic_step(forms, c, sp, pl, ranks, M, limit, objective)
            if found is not None and found[0] < step * (1 - REL):
                current, improved = (found[0], c, sp, found[1]), True
                break
    return current


def _canonical(form: str, k: int, n: int) -> tuple:
    """One spelling per stage choice: no layer checkpointed is "none-b"; a two-mode form with no
    layer upgraded is all the lower mode, with every layer upgraded all the upper one."""
    pair = _pair_modes(form)
    if pair is not None:
        return (pair[0], n) if k == 0 else (pair[1], n) if k >= n else (form, k)
    return ("none-b", 0) if form in CHECKPOINTING and k == 0 else (form, k)


def _neighbours(forms, counts, specs):
    layers = layer_units(forms)
    checkpointing = checkpointing_forms(forms)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    for s, (form, k) in enumerate(specs):
        n = int(sum(layers[bounds[s]:bounds[s + 1]]))
        k = min(k, n)
        options = [(form, k + 1), (form, k - 1)] if form in checkpointing else [(m, 1) for m in checkpointing]
        options += [(m, k) for m in checkpointing if m != form and k > 0]
        options += [("none", 0), ("none-b", 0)] + [(m, n) for m in checkpointing if _pair_modes(m) is None]
        for option in options:
            if 0 <= option[1] <= n:
                new = _canonical(*option, n)
                if new != _canonical(form, k, n):
                    yield tuple(counts), tuple(new if t == s else specs[t] for t in range(len(specs)))
    for k in range(len(counts) - 1):
        for d in (1, -1):
            c = list(counts)
            c[k] += d
            c[k + 1] -= d
            if min(c) >= 1:
                yield tuple(c), tuple(specs)


def stage_candidates(forms: dict, placement: str, ranks: int, microbatches: int, cap: float,
                     depths: Sequence[float] = DEPTHS, hold_at_most: Optional[int] = None) -> list:
    """[(depth, units per stage, stage specs)]: for each depth d of `depths`, the partition
    whose busiest rank does the least compute when every stage takes its fastest spec whose bytes
    (static, the reserve, the receive buffers of its boundaries, one microbatch's peak and
    ceil(d x h_s) - 1 more microbatches held) fit the cap, h_s = R - s on a loop and (2R - s) / 2
    in a V (1F1B's microbatches in flight), at most `hold_at_most` on every stage but the last
    where given (offload keeps the rest in host memory:
    schedc.planning.offload.offload_sized_candidates; those stages of a loop then run their
    backward whole); on a loop a stage may checkpoint as few of its layers
    as fit (each layer's saving and recompute taken as the stage's mean), in one mode or in two
    (every layer the faster mode, the fewest upgraded to the slower), in a V all or none. Method: schedc.core.partition's min-max
    dynamic program with those terms, read from per-form tables of every segment's work and
    bytes. Cost: O(K U^2) for the tables, then one dynamic program per depth (O(S U^2 K) on a
    loop, O(R U^4 K^2) in a V, K forms)."""
    units = Units.of(forms["none"], microbatches)
    tables = {m: _segments(Units.of(p, microbatches)) for m, p in forms.items()}
    layers = np.concatenate([[0], np.cumsum(layer_units(forms))])
    n_layers = layers[None, :] - layers[:, None]
    S = n_stages_for(placement, ranks)
    idx = np.arange(units.n + 1)
    loop_room = cap - loop_buffers(units, microbatches, idx[:, None], idx[None, :])  # per segment [i, j)

    def v_room(r, i, a, b, j):
        return cap - v_buffers(units, microbatches, ranks, r, i, a, b, j)

    out = []
    for depth in depths:
        held = [min(microbatches, max(1, math.ceil(depth * ((ranks - s) if placement == "loop" else (S - s) / 2)
                                                     - REL))) for s in range(S)]
        if hold_at_most is not None:
            held = [h if s == S - 1 else min(h, hold_at_most) for s, h in enumerate(held)]
        # minmax calls the cost functions before it returns, so they read this depth's tables
        if placement == "loop":
            # sized for offload, a stage but the last runs no split backward: the offload heuristic
            # holds each microbatch's bytes for W from its F on (schedc.solver.graph, Graph.safe_net)
            opts = [_loop_options(tables, n_layers, held[s], loop_room, split=hold_at_most is None or s == S - 1)
                    for s in range(S)]
            value, counts = minmax(units, placement, ranks,
                                   lambda k, i, j: _least(w for w, _ in opts[k].values()), None)  # noqa: B023
        else:
            value, counts = minmax(units, placement, ranks, None, lambda r, i, a, b, j: _pair(
                tables, i, a, b, j, held[r], held[S - 1 - r], v_room(r, i, a, b, j))[0])  # noqa: B023
        if counts is None or not math.isfinite(value):
            continue
        out.append((depth, tuple(int(c) for c in counts), _specs_of(
            tables, counts, placement, ranks, held, opts if placement == "loop" else None, v_room)))
    return out


def _loop_options(tables: dict, n_layers, n: int, cap, split: bool = True) -> dict:
    """{form: (work, layers checkpointed)} tables of one loop stage holding n microbatches under
    `cap` (a number, or a table per segment): the fewest layers checkpointed that fit (INF work
    where none do); for a pair "lower+upper", every layer the lower mode and the fewest upgraded.
    `split` False: no split backward (the form "none" fits nowhere)."""
    out = {}
    b = tables.get("none-b", tables["none"])
    for form, t in tables.items():
        if form == "none":
            out[form] = (np.where(fits(t["base"] + n * t["act"], cap) & split, t["work"], INF), 0)
        elif form != "none-b":
            out[form] = _fewest_layers(b, t, n_layers, n, cap, np.maximum(b["base"], t["base"]))
    for form in checkpointing_forms(tables):
        pair = _pair_modes(form)
        if pair is not None:
            lo, hi = tables[pair[0]], tables[pair[1]]
            base = np.maximum(np.maximum(b["base"], lo["base"]), hi["base"])
            out[form] = _fewest_layers(lo, hi, n_layers, n, cap, base)
    return out


def _fewest_layers(b: dict, t: dict, n_layers, n: int, cap, base) -> tuple:
    """(work, k) tables: the fewest of a segment's layers to move from form `b` to form `t` (each
    saving and adding the segment's mean per layer) so that `base` and n microbatches fit `cap`."""
    with np.errstate(divide="ignore", invalid="ignore"):
        saving = np.where(n_layers > 0, (b["act"] - t["act"]) / np.maximum(n_layers, 1), 0.0)
        extra = np.where(n_layers > 0, (t["work"] - b["work"]) / np.maximum(n_layers, 1), 0.0)
        over = base + n * b["act"] - cap * (1 + REL)
        k = np.where(over <= 0, 0.0, np.ceil(np.where(saving > 0, over / (n * saving), INF) - REL))
    ok = k <= n_layers
    return np.where(ok, b["work"] + np.where(ok, k, 0) * extra, INF), np.where(ok, k, 0).astype(int)


def _specs_of(tables, counts, placement, ranks, held, opts, v_room) -> tuple:
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    S = len(counts)
    specs: list[Optional[tuple]] = [None] * S
    for r in range(ranks if placement == "v" else S):
        if placement == "loop":
            i, j = bounds[r], bounds[r + 1]
            form = min(opts[r], key=lambda m: opts[r][m][0][i, j])
            k = int(opts[r][form][1][i, j]) if form != "none" else 0
            specs[r] = (form, k) if k > 0 or form == "none" or _pair_modes(form) else ("none-b", 0)
        else:
            b = S - 1 - r
            ends = (bounds[r], bounds[r + 1], bounds[b], bounds[b + 1])
            front, back = _pair(tables, *ends, held[r], held[b], v_room(r, *ends))[1]
            specs[r], specs[b] = _uniform(front), _uniform(back)
    return tuple(specs)


def _uniform(form: str) -> tuple:
    return (form, 0) if form in ("none", "none-b") else (form, 10**9)


def _segments(u: Units) -> dict:
    """Per segment [i, j) of units, as (U+1) x (U+1) tables: ``work`` (F + I + W), ``act`` (bytes
    held per microbatch after F), ``base`` (static, the reserve and one microbatch's peak above
    what it holds after F: transients, the rise at I)."""
    idx = np.arange(u.n + 1)
    i, j = idx[:, None], idx[None, :]
    act = u.seg(u.act, i, j)
    extra = one_microbatch_need(u, [(i, j)]) - act if u.extra is not None else 0.0
    return {"work": u.seg(u.F, i, j) + u.seg_i(i, j) + u.seg_w(i, j), "act": act,
            "static": u.seg(u.static, i, j), "extra": extra * np.ones_like(act), "reserve": u.reserve,
            "base": u.seg(u.static, i, j) + u.reserve + extra}


def _least(arrays):
    out = None
    for a in arrays:
        out = a if out is None else np.minimum(out, a)
    return out


def _pair(tables: dict, i, a, b, j, n_front: int, n_back: int, cap):
    """(least work, (front mode, back mode)) of a V rank holding stages [i, a) and [b, j), each
    in its mode, whose bytes fit `cap` (less the rank's receive buffers) together (the larger of
    the two one-microbatch peaks)."""
    best: Union[float, np.ndarray] = INF  # an array where the ends are arrays (a whole table)
    pair: Optional[tuple[str, str]] = None
    for mf, tf in tables.items():
        for mb, tb in tables.items():
            need = (tf["static"][i, a] + tb["static"][b, j] + tf["reserve"] + n_front * tf["act"][i, a]
                    + n_back * tb["act"][b, j] + np.maximum(tf["extra"][i, a], tb["extra"][b, j]))
            work = np.where(fits(need, cap), tf["work"][i, a] + tb["work"][b, j], INF)
            if pair is None or np.ndim(work) == 0 and work < best:
                pair = (mf, mb)
            best = np.minimum(best, work)
    return best, pair
