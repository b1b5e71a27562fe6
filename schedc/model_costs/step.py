"""The step around the actions: the optimizer step, FSDP2's collectives and the links between
stages, counted per unit.

Problem: a pipeline step is more than its F, I and W. After the schedule's last backward each rank
scales its gradients and, with FSDP2 (``dp_shard`` > 1), reduce-scatters them; before its first
forward it all-gathers its weights; after ``schedule.step`` the optimizer updates every parameter
it holds; and each stage boundary sends an activation over a link inside a node (NVLink) or across
nodes (the NIC). The simulated step counts none of the first three, and prices every boundary at
one ``bandwidth``.

Method, per unit (the embedding, each layer, the head), as torch 2.14.1 runs it:

- optimizer: torch's default implementation on CUDA is ``foreach`` (``torch/optim/optimizer.py``
  170-195, ``_default_to_fused_or_foreach``: fused only when asked), a chain of ``torch._foreach_*``
  ops over the rank's shard (:data:`FOREACH`): AdamW's ``_multi_tensor_adam`` (``adam.py`` 691
  weight decay, 704 lerp, 708 mul, 721 addcmul, then without ``capturable`` 790 sqrt, 792 div, 793
  add, 794 addcdiv) reads and writes, per element, 4 bytes of the parameter's dtype, 3 of the
  gradient's and 14 of the states' (the sqrt's temporary included); with an fp32 master copy the
  optimizer's parameter is the master and the copy back reads it and writes the stored one. The
  elements are the unit's parameters / (tp x dp_shard). Seconds: those bytes at the memory
  bandwidth, or the host's kernel launches where longer: each foreach op launches once per
  ``320 x 65536`` elements (``ATen/native/cuda/MultiTensorApply.cuh`` 18, 42-43, CUDA 12 builds;
  a unit's few tensors stay under its 30-110 tensors per launch), at the card's ``launch`` (none
  without ``gpu``). Plus the gradient scaling at REDUCE_GRAD (``pipelining/stage.py`` 857-871,
  one ``div_`` per gradient, called by ``perform_reduce_grad`` 1290-1293): 2 bytes of the
  gradient's dtype per element.
- FSDP2 (``dp_shard`` > 1, one FSDP group per unit): once per step per stage, not per
  microbatch. torch's runtime lowers a compute-only CSV with ``_add_unshard_reshard``
  (``pipelining/schedules.py`` 1496-1576): a stage is UNSHARDed (an all-gather) when it enters
  the window of the next 3 stages the rank runs and RESHARDed when it leaves, so a rank with at
  most 3 stages gathers each once per step; ``_add_reduce_grad`` (1463-1493) adds one
  REDUCE_GRAD per stage after its last W or B, whose ``post_backward`` reduce-scatters the
  gradients accumulated unreduced over all microbatches (``stage.py`` 1262-1289). Each a ring of
  ``(d - 1) / d`` of the unsharded tensor (weights in the activation dtype, FSDP's
  ``param_dtype``; gradients in ``grad_dtype``, the reduce dtype) at ``dp_bandwidth`` plus
  ``dp_latency`` (:func:`schedc.model_costs.units.tp_collective_seconds`). Exposed: every
  reduce-scatter (the compute stream waits on it, ``fsdp/_fully_shard/_fsdp_state.py`` 434-436,
  from ``stage.py`` 1289) and the all-gather of the stage a rank runs first (issued at its first
  action, nothing to hide under; ``schedules.py`` 2652-2662 waits on it); the other all-gathers
  are prefetched on NCCL's stream under compute (:func:`unshard_counts` counts them all).
- point to point: ``comm`` prices every boundary at ``bandwidth`` + ``latency`` (default 40e9,
  a NIC-class link: across nodes); within a node NVLink (``tp_bandwidth``, ``tp_latency``) and
  across nodes the NIC (``dp_bandwidth``, ``dp_latency``) are recorded beside it. The profile
  cannot say which boundary crosses nodes (that is where ranks sit), so the solver's model keeps
  the one value.

:func:`outside_actions` records all of it in a counted profile's
``assumes["step_outside_actions"]``; :func:`step_with_extras` adds, to a simulated step, the
largest rank's optimizer and exposed collectives (all ranks run their optimizer at once after the
step, which gradient clipping synchronizes). Cost: O(units + actions).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional, Sequence

from schedc.core.costs import StageCost
from schedc.core.settings import RunSettings
from schedc.model_costs.shape import DTYPE_BYTES, ModelShape
from schedc.model_costs.units import tp_collective_seconds

if TYPE_CHECKING:
    from schedc.model_costs.profile import Run

# optimizer -> (bytes of the parameter, of the gradient, of the states per element of one step,
# foreach ops), read off torch 2.14.1's foreach implementations (defaults: AdamW's weight decay
# 1e-2 scales the parameter, adam.py 691; Adam's and SGD's 0 does not; no amsgrad, no nesterov):
# adam.py 704-794 (lerp 2s+g, mul 2s, addcmul 2s+2g, sqrt 2s, div 2s, add 2s, addcdiv 2p+2s);
# sgd.py 445-446 (mul 2s, add 2s+g) and 472 (add 2p+s, or 2p+g without momentum)
FOREACH = {"adamw": (4, 3, 14, 8), "adam": (2, 3, 14, 7), "sgd-momentum": (2, 1, 5, 3), "sgd": (2, 1, 0, 1),
           "none": (0, 0, 0, 0)}
ELEMENTS_PER_LAUNCH = 320 * 65536  # MultiTensorApply.cuh: depth_to_max_blocks x kChunkSize (CUDA 12)
MAX_ACTIVE_STAGES = 3  # schedules.py _add_unshard_reshard's default window
WHAT = ("counted, not simulated: per unit, the optimizer's foreach step over the rank's shard (bytes at the memory "
        "bandwidth, or the host's launches where longer) and the gradient scaling at REDUCE_GRAD; with dp_shard > 1 "
        "one all-gather (activation dtype) and one reduce-scatter (grad_dtype) per unit per step, ring at "
        "dp_bandwidth + dp_latency; exposed per rank: its optimizer, scaling and reduce-scatters and the all-gather "
        "of the stage it runs first (schedc.model_costs.step)")


def optimizer_bytes_per_element(optimizer: str, param_bytes: float, grad_bytes: float, state_bytes: float,
                                master_weights: bool) -> float:
    """Bytes one step of `optimizer`'s foreach implementation reads and writes per element of the
    rank's shard (:data:`FOREACH`), the master copy's write-back included."""
    p, g, s, _ = FOREACH[optimizer]
    if not p:
        return 0.0
    own = 4.0 if master_weights else param_bytes  # the master copy is what the optimizer updates
    return p * own + g * grad_bytes + s * state_bytes + ((4.0 + param_bytes) if master_weights else 0.0)


def optimizer_seconds(elements: float, per_element: float, foreach_ops: int, bandwidth: float,
                      launch: float) -> tuple[float, int]:
    """(seconds, kernels) of one optimizer step over `elements`: the bytes at `bandwidth`, or the
    host's launches at `launch` s each where longer."""
    if not foreach_ops or elements <= 0:
        return 0.0, 0
    kernels = foreach_ops * max(1, math.ceil(elements / ELEMENTS_PER_LAUNCH))
    return max(per_element * elements / bandwidth, kernels * launch), kernels


def unit_parameters(stages: Sequence[StageCost], run: "Run") -> list[float]:
    """Each unit's parameters, as its static bytes count them (``units.build_units``:
    bytes per parameter x parameters / tp)."""
    per_param = run.static_per_param / run.dp_shard + run.fsdp_held_per_param
    return [u.static_bytes * run.tp / per_param for u in stages]


def outside_actions(s: ModelShape, run: "Run", settings: RunSettings, stages: Sequence[StageCost],
                    boundary_bytes: float) -> dict:
    """The ``assumes["step_outside_actions"]`` record of a counted profile (module docstring):
    the formula's inputs and, per unit, the optimizer's, the scaling's and the collectives' seconds."""
    a = run.assumes
    e = DTYPE_BYTES[s.dtype]
    grad = settings.grad_bytes_per_param if settings.grad_bytes_per_param is not None else DTYPE_BYTES[a["grad_dtype"]]
    state = DTYPE_BYTES[a["optimizer_dtype"]]
    bandwidth = run.rates.memory if run.rates is not None else run.memory_bandwidth
    launch = run.rates.launch if run.rates is not None else 0.0
    per_element = optimizer_bytes_per_element(run.assumes["optimizer"], run.param_bytes, grad, state,
                                              bool(a["master_weights"]))
    ops = FOREACH[a["optimizer"]][3]
    d, bw, lat = run.dp_shard, settings.dp_bandwidth, settings.dp_latency
    params = unit_parameters(stages, run)
    local = [n / run.tp for n in params]  # what one rank of the tensor-parallel group holds
    timed = [optimizer_seconds(n / d, per_element, ops, bandwidth, launch) for n in local]
    return {
        "counted": WHAT,
        "optimizer": a["optimizer"],
        "optimizer_implementation": "torch foreach (the default on CUDA; torch/optim/optimizer.py 170-195)",
        "optimizer_bytes_per_element": per_element,
        "optimizer_kernels_per_unit": [k for _, k in timed],
        "memory_bandwidth": bandwidth,
        "launch_seconds": launch,
        "elements_per_unit": [n / d for n in local],
        "optimizer_seconds": [t for t, _ in timed],
        "grad_scale_seconds": [2 * grad * n / d / bandwidth for n in local],
        "dp_shard": d,
        "dp_bandwidth": bw,
        "dp_latency": lat,
        "all_gather_seconds": [tp_collective_seconds(e * n, d, bw, lat) for n in local],
        "reduce_scatter_seconds": [tp_collective_seconds(grad * n, d, bw, lat) for n in local],
        "p2p": {"boundary_bytes": boundary_bytes,
                "counted": {"bandwidth": run.bandwidth, "latency": run.latency,
                            "seconds": boundary_bytes / run.bandwidth + run.latency},
                "within_node": {"bandwidth": run.tp_bandwidth, "latency": run.tp_latency,
                                "seconds": boundary_bytes / run.tp_bandwidth + run.tp_latency},
                "across_nodes": {"bandwidth": bw, "latency": lat, "seconds": boundary_bytes / bw + lat},
                "note": "comm prices every boundary at bandwidth + latency (the across-nodes kind by default); "
                        "which boundaries stay within a node depends on where ranks sit, which a profile "
                        "does not say"},
    }


def unshard_counts(stages_in_order: Sequence[int], max_active: int = MAX_ACTIVE_STAGES) -> dict[int, int]:
    """How many times torch's ``_add_unshard_reshard`` (``pipelining/schedules.py`` 1496-1576)
    UNSHARDs (all-gathers) each stage of one rank whose actions run these stages in this order:
    before each action the next `max_active` distinct stages are fetched and the others evicted."""
    # the first `max_active` distinct stages from each position on, built from the end: O(n x max_active)
    windows: list[list[int]] = [[] for _ in stages_in_order]
    after: list[int] = []
    for i in range(len(stages_in_order) - 1, -1, -1):
        st = stages_in_order[i]
        after = ([st] + [x for x in after if x != st])[:max_active]
        windows[i] = after
    counts: dict[int, int] = {}
    active: set[int] = set()
    for upcoming in windows:
        active -= {st for st in active if st not in upcoming}
        for st in upcoming:
            if st not in active:
                active.add(st)
                counts[st] = counts.get(st, 0) + 1
    return counts


def step_with_extras(step: float, assumes: Optional[dict], units_per_stage: Sequence[int],
                     stages_run: Sequence[Sequence[int]]) -> Optional[dict]:
    """The simulated `step` plus the largest rank's optimizer and exposed collectives, from a
    counted profile's ``assumes`` (None when it has no ``step_outside_actions``).
    `units_per_stage`: the partition; `stages_run[r]`: the stages of rank r's actions in the order
    it runs them. Per rank: the optimizer, scaling and reduce-scatter seconds of its stages' units
    and the all-gather of the stage it runs first; the other all-gathers are counted (how many
    torch issues) but hidden."""
    rec = (assumes or {}).get("step_outside_actions")
    if not isinstance(rec, dict) or len(rec.get("optimizer_seconds", ())) != sum(units_per_stage):
        return None
    per_stage: list[dict[str, float]] = []
    start = 0
    for n in units_per_stage:
        part = range(start, start + n)
        per_stage.append({k: float(sum(rec[k + "_seconds"][u] for u in part))
                          for k in ("optimizer", "grad_scale", "all_gather", "reduce_scatter")})
        start += n
    per_rank = []
    for order in stages_run:
        mine = sorted(set(order))
        gathers = unshard_counts(order)
        first = per_stage[order[0]]["all_gather"] if order else 0.0
        optimizer = sum(per_stage[st]["optimizer"] + per_stage[st]["grad_scale"] for st in mine)
        reduce = sum(per_stage[st]["reduce_scatter"] for st in mine)
        per_rank.append({"optimizer": optimizer, "reduce_scatter": reduce, "first_all_gather": first,
                         "all_gathers": sum(gathers.values()), "extra": optimizer + reduce + first})
    worst = max(range(len(per_rank)), key=lambda r: per_rank[r]["extra"], default=0)
    extra = per_rank[worst]["extra"] if per_rank else 0.0
    return {"seconds": step + extra, "step": step, "rank": worst, "extra": extra, "per_rank": per_rank,
            "counted": "simulated step + the largest rank's optimizer, gradient scaling, reduce-scatters and "
                       "first all-gather (assumes.step_outside_actions), added, not simulated"}
