"""unit_profile: the per-unit profile of a decoder from its shape and the run's settings."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, Optional, Sequence, Union, cast

from schedc.core.costs import AC_MODES, PER_OP_AC, Profile
from schedc.core.device_rates import DeviceRates, device_rates
from schedc.core.settings import COUNTED_FOR_TORCH, RunSettings
from schedc.errors import ParameterError, SchedcError, literal
from schedc.model_costs.shape import DTYPE_BYTES, EXPERT_PARALLEL, ModelShape, dtype_name, finite, read_hf_config
from schedc.model_costs.step import outside_actions
from schedc.model_costs.timing import check_rates
from schedc.model_costs.units import build_units

UNIT_NAMES = {
    "torchtitan": ("tok_embeddings", "layers.{}", ("norm", "lm_head")),
    "hf": ("model.embed_tokens", "model.layers.{}", ("model.norm", "lm_head")),
}
Names = Literal["torchtitan", "hf"]
OPTIMIZER_STATES = {"adamw": 2, "adam": 2, "sgd-momentum": 1, "sgd": 0, "none": 0}
# What a CUDA process holds outside torch's allocator: the CUDA context, cuBLAS/cuDNN workspaces
# and one NCCL group. It varies from run to run (an H200 1.21 GiB, an H100 1.16-1.54 GiB in three
# runs; docs/design.md); the most measured, since a plan that counts less stops on out-of-memory
CUDA_RESERVE_BYTES = 1.54 * 2**30
MAX_TOKENS = 2**40          # sequence x microbatch: far beyond any run, keeps every count finite
# the flag of each keyword not spelt --KEYWORD on the command lines that count a profile (schedc profile
# --config/--flops, schedc plan --config): an error names the flag there and the keyword in Python
_FLAGS = {"microbatch_size": "--mbs", "activation_checkpoint": "--ac", "flops_per_second": "--flops",
          "bandwidth": "--comm-bandwidth", "latency": "--comm-latency", "optimizer_bytes_per_param": "--optimizer-bytes",
          "reserve_bytes": "--reserve"}


def unit_names(layers: int, names: Names = "torchtitan") -> list[list[str]]:
    """The module names of each unit: ``[[embedding], [layer 0], ..., [norm, head]]``."""
    if names not in UNIT_NAMES:
        raise _bad("names", f"{{param}} must be one of {', '.join(UNIT_NAMES)}, got {_shown(names)}")
    embed, layer, head = UNIT_NAMES[names]
    return [[embed]] + [[layer.format(i)] for i in range(layers)] + [list(head)]


def unit_profile(
    shape: Union[ModelShape, dict, str, Path, None] = None,
    *,
    seq: Optional[int] = None,
    seq_len: Optional[int] = None,
    microbatch_size: int = 1,
    activation_checkpoint: Union[str, Sequence[str]] = "none",
    impl: Optional[Literal["hf", "torchtitan", "paper"]] = None,
    device: Literal["cuda", "cpu"] = "cuda",
    optimizer: str = "adamw",
    param_dtype: Optional[str] = None,
    grad_dtype: str = "float32",
    optimizer_dtype: str = "float32",
    master_weights: Optional[bool] = None,
    grad_bytes_per_param: Optional[float] = None,
    optimizer_bytes_per_param: Optional[float] = None,
    dp_shard: int = 1,
    tp: int = 1,
    reserve_bytes: Optional[float] = None,
    flops_per_second: float = 400e12,
    memory_bandwidth: float = 2e12,
    bandwidth: float = 40e9,
    latency: float = 0.0,
    tp_bandwidth: float = 450e9,
    tp_latency: float = 10e-6,
    dp_bandwidth: float = 50e9,
    dp_latency: float = 10e-6,
    held: Literal["torch", "paper"] = "torch",
    names: Names = "torchtitan",
    fsdp: Optional[bool] = None,
    torch: str = COUNTED_FOR_TORCH,
    **model,
) -> Profile:
    """Per-unit costs (embedding, each layer, final norm + head + loss) of a decoder as the run
    will hold and spend them (method: :mod:`schedc.model_costs`).

    ``shape``: a :class:`ModelShape`, its dict, a ``config.json`` path, or None with the shape as
    keywords (``layers``, ``hidden``, ``vocab``, ``ffn_hidden``, ``heads``, ``kv_heads``,
    ``head_dim``, ``mlp``, ``tied_embeddings``, ``dropout``, ``family``, ``experts``, ...,
    ``dtype``: the activation dtype). The run: ``seq`` (or ``seq_len``) tokens x
    ``microbatch_size`` sequences; ``activation_checkpoint`` one of :data:`AC_MODES` (``"none"``,
    ``"light"``, ``"selective"``, ``"full"``) or one per layer; ``impl``: whose code runs it (``"hf"``: Hugging Face transformers' modules,
    as NeMo AutoModel trains; ``"torchtitan"``: torchtitan's own; ``"paper"``: the textbook count;
    default: the framework of ``names``); ``device``: whose kernels (``"cuda"``; ``"cpu"`` to
    compare with CPU measurements); static bytes from ``optimizer`` (adamw, adam, sgd-momentum,
    sgd, none), ``param_dtype`` (default the activation dtype), ``grad_dtype``,
    ``optimizer_dtype``, ``master_weights`` (default: an fp32 copy when params are narrower and
    there is an optimizer), or the per-parameter overrides; ``dp_shard`` (FSDP2 degree: divides
    those static bytes and adds what FSDP2 holds unsharded under torch's pipelining,
    :func:`fsdp_held`); ``fsdp``: whether FSDP2 wraps the blocks (default: when ``dp_shard`` > 1;
    True counts :func:`fsdp_held` at degree 1 too, as torchtitan 0.3.0 wraps them at every degree;
    ``torch``: the release the run uses, ``"2.14"`` or ``"2.15.0"``, which sets what it holds) and
    ``tp`` (divides weights, FLOPs and, with sequence parallelism, activations, and adds its
    collectives to F and I: ``TP_ASSUMES``, at ``tp_bandwidth`` B/s, default 450e9, NVLink 4's
    per-direction bandwidth on an H100 SXM, an upper bound for NCCL's ring, and ``tp_latency`` s
    per collective, default 10e-6, an assumed NCCL launch-and-sync cost); ``reserve_bytes``
    (default on CUDA :data:`CUDA_RESERVE_BYTES`, 0 on CPU); the device's speeds and the link's ``bandwidth`` (B/s)
    and ``latency`` (s per transfer); ``dp_bandwidth`` (B/s, default 50e9) and ``dp_latency`` (s, default
    10e-6) of FSDP2's collectives across nodes (:mod:`schedc.model_costs.step`). ``assumes`` records every one
    of these, and the optimizer's and the collectives' seconds per unit (``step_outside_actions``).

    Raises SchedcError naming the first invalid argument. Cost: O(layers).

    >>> p = unit_profile(layers=2, hidden=64, vocab=100, seq=8, heads=4, kv_heads=2)
    >>> [u.modules for u in p.stages]
    [['tok_embeddings'], ['layers.0'], ['layers.1'], ['norm', 'lm_head']]
    >>> p.assumes["activation_checkpoint"], p.assumes["implementation"]
    ('none', 'torchtitan')
    """
    settings = RunSettings(
        seq=_seq(seq, seq_len), microbatch_size=microbatch_size, activation_checkpoint=activation_checkpoint,
        impl=impl, device=device, optimizer=optimizer, param_dtype=param_dtype, grad_dtype=grad_dtype,
        optimizer_dtype=optimizer_dtype, master_weights=master_weights, grad_bytes_per_param=grad_bytes_per_param,
        optimizer_bytes_per_param=optimizer_bytes_per_param, dp_shard=dp_shard, tp=tp, fsdp=fsdp,
        reserve_bytes=reserve_bytes, flops_per_second=flops_per_second, memory_bandwidth=memory_bandwidth,
        bandwidth=bandwidth, latency=latency, tp_bandwidth=tp_bandwidth, tp_latency=tp_latency, dp_bandwidth=dp_bandwidth,
        dp_latency=dp_latency, held=held, names=names, torch=torch)
    return count_units(shape, settings, **model)


def count_units(shape: Union[ModelShape, dict, str, Path, None], settings: RunSettings, **model) -> Profile:
    """:func:`unit_profile` of a shape (or ``config.json``; `model`: shape keywords over it) and
    one :class:`~schedc.core.settings.RunSettings`: checked and filled once (:func:`resolve`), counted
    by :func:`schedc.model_costs.units.build_units`, its ``assumes`` taken from the resolved settings.
    Raises SchedcError naming the first invalid setting (its keyword). Cost: O(layers)."""
    if not isinstance(settings, RunSettings):
        raise SchedcError(f"settings: expected a schedc.core.settings.RunSettings, got {type(settings).__name__}")
    if settings.dtype is not None:
        model = {**model, "dtype": settings.dtype}
    try:
        s = _shape(shape, model)
        run = resolve(s, settings)
    except ParameterError as e:  # the keyword here; a command line that called this names its flag
        raise e.for_python() from None
    # after the checks, which refuse names outside Names: build_units only multiplies
    stages, boundary = build_units(s, run, unit_names(s.layers, cast(Names, run.names)))
    element_bytes = DTYPE_BYTES[s.dtype]
    return Profile(
        stages=stages,
        comm=boundary / run.bandwidth + run.latency,
        boundary_bytes=boundary,
        reserve_bytes=run.reserve_bytes,
        device=((f"arithmetic model: {run.flops / 1e12:g} TFLOP/s effective, memory "
                 f"{run.memory_bandwidth / 1e12:g} TB/s" if run.rates is None else
                 f"arithmetic model: {run.rates.name}'s per-op rates (schedc.core.device_rates)")
                + f", {run.bandwidth / 1e9:g} GB/s per link" + (f" + {run.latency:g} s per transfer" if run.latency else "")),
        model=f"{_label(s)}; seq {run.seq}; per unit",
        microbatch_size=run.mbs,
        dtype=s.dtype,
        notes=_notes(run, element_bytes),
        # the optimizer, FSDP2's collectives and the links, outside the actions (schedc.model_costs.step)
        assumes={**run.assumes, "step_outside_actions": outside_actions(s, run, settings, stages, boundary)},
    )


def _label(s: ModelShape) -> str:
    attn = "MHA" if s.heads is None else f"heads {s.heads}/{s.kv_heads} x {s.head_dim}"
    return s.model or (f"decoder: {s.layers} layers, hidden {s.hidden}, ffn {s.ffn_hidden} ({s.mlp}), {attn}, "
                       f"vocab {s.vocab}" + (", tied embeddings" if s.tied_embeddings else ""))


def _shape(shape, model: dict) -> ModelShape:
    known = {f.name for f in fields(ModelShape)}
    unknown = sorted(set(model) - known)
    if unknown:
        raise SchedcError(f"unit_profile: unknown argument {unknown[0]!r}")
    if "dtype" in model:  # given as a keyword, not read from a config.json (which names its own field)
        _dtype(model["dtype"], "dtype")
    if shape is not None and not isinstance(shape, (str, Path, dict, ModelShape)):
        raise SchedcError(f"unit_profile: shape must be a ModelShape, its dict or a config.json path, got "
                          f"{type(shape).__name__}")
    if isinstance(shape, (str, Path)):
        shape = read_hf_config(shape)
    if isinstance(shape, dict):
        shape = ModelShape(**{k: v for k, v in shape.items() if k in known})
    if shape is None:
        missing = [k for k in ("layers", "hidden", "vocab") if model.get(k) is None]
        if missing:
            raise SchedcError(f"unit_profile: give {', '.join(missing)} (or a shape / config.json)")
        shape = ModelShape(**model)
    elif model:
        shape = ModelShape(**{**shape.as_dict(), **model})
    try:
        return shape.resolved()
    except ParameterError:
        raise  # it names the keyword (the flag on a command line) itself
    except SchedcError as err:
        raise SchedcError(f"unit_profile: {err}") from None


def _seq(seq, seq_len) -> Optional[int]:
    if seq is not None and seq_len is not None and seq != seq_len:
        raise SchedcError("unit_profile: give seq or seq_len, not both")
    return seq if seq is not None else seq_len  # None: resolve names it


def _bad(param: str, detail: str) -> ParameterError:
    """The error of keyword `param` (``detail`` as :class:`ParameterError` reads it), with its flag."""
    return ParameterError(param, detail, flag=_FLAGS.get(param, ""))


def _dtype(value, param: str) -> str:
    """:func:`dtype_name` of `value`, an error naming `param` as each front door spells it."""
    try:
        return dtype_name(value, param)
    except SchedcError as e:
        raise _bad(param, literal(str(e).removeprefix(f"{param}: "))) from None


@dataclass(frozen=True)
class Run:
    """:class:`~schedc.core.settings.RunSettings` checked against a shape, with the derived values
    the counts multiply by (bytes per parameter, the per-layer checkpointing) and the ``assumes``
    a profile records of them."""

    seq: int
    mbs: int
    ac: tuple[str, ...]  # one mode per layer
    impl: str
    device: str
    param_bytes: float
    static_per_param: float  # weight + gradient + optimizer bytes, before sharding
    fsdp_held_per_param: float  # what FSDP2 holds unsharded under torch's pipelining (fsdp_held)
    dp_shard: int
    tp: int
    reserve_bytes: float
    flops: float
    memory_bandwidth: float
    bandwidth: float
    latency: float
    tp_bandwidth: float
    tp_latency: float
    held: str
    names: str
    assumes: dict
    # FSDP2 from torch 2.15 on (fsdp_transients): bytes per parameter of the gradient a W adds into
    # the held one (0: it adds none) and the reduce-scatter's rise above the static bytes
    fsdp_w_grad_bytes: float = 0.0
    fsdp_reduce_excess_per_param: float = 0.0
    rates: Optional[DeviceRates] = None  # a card's per-op rates (schedc.model_costs.timing); None: one rate


def resolve(s: ModelShape, settings: RunSettings) -> Run:
    """`settings` checked (a ParameterError naming the first bad one) and filled for shape `s`."""
    r = settings
    seq, mbs, ac, impl, device, names, held = (r.seq, r.microbatch_size, r.activation_checkpoint, r.impl, r.device,
                                                r.names or "torchtitan", r.held)
    dp_shard, tp, fsdp, master_weights = r.dp_shard, r.tp, r.fsdp, r.master_weights
    if seq is None:
        raise _bad("seq", "give the tokens per sequence (e.g. {name}4096)")
    for name, value in (("seq", seq), ("microbatch_size", mbs), ("dp_shard", dp_shard), ("tp", tp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _bad(name, f"must be an integer >= 1, got {_shown(value)}")
    if seq * mbs > MAX_TOKENS:
        raise _bad("microbatch_size", f"{{param:seq}} x {{param}} = {_shown(seq * mbs)} tokens is more than schedc "
                                      f"counts ({MAX_TOKENS})")
    for name in ("flops_per_second", "memory_bandwidth", "bandwidth", "tp_bandwidth", "dp_bandwidth"):
        value = getattr(r, name)
        if not finite(value) or value <= 0:
            raise _bad(name, f"{{param}} must be a finite number > 0, got {_shown(value)}")
    for name in ("latency", "tp_latency", "dp_latency", "grad_bytes_per_param", "optimizer_bytes_per_param",
                 "reserve_bytes"):
        value = getattr(r, name)
        if value is not None and (not finite(value) or value < 0 or value > 2.0**60):
            raise _bad(name, f"{{param}} must be a finite number >= 0, got {_shown(value)}")
    for name, flag in (("fsdp", fsdp), ("master_weights", master_weights)):
        if flag is not None and not isinstance(flag, bool):
            raise SchedcError(f"unit_profile: {name} must be True, False or None, got {_short(flag)}")
    if fsdp is False and dp_shard > 1:
        raise SchedcError(f"unit_profile: fsdp False with dp_shard {dp_shard}: FSDP2 is what shards; give dp_shard 1")
    if held not in ("torch", "paper"):
        raise _bad("held", f"{{param}} must be 'torch' or 'paper', got {_shown(held)}")
    if names not in UNIT_NAMES:
        raise _bad("names", f"{{param}} must be one of {', '.join(UNIT_NAMES)}, got {_shown(names)}")
    impl = impl or names
    if impl not in ("hf", "torchtitan", "paper"):
        raise _bad("impl", f"{{param}} must be 'hf', 'torchtitan' or 'paper', got {_shown(impl)}")
    if device not in ("cuda", "cpu"):
        raise _bad("device", f"{{param}} must be 'cuda' or 'cpu', got {_shown(device)}")
    if r.optimizer not in OPTIMIZER_STATES:
        raise _bad("optimizer", f"{{param}} must be one of {', '.join(OPTIMIZER_STATES)}, got {_shown(r.optimizer)}")
    # the caller's value, each entry checked just below
    per_layer: list[Any] = [ac] * s.layers if isinstance(ac, str) or not isinstance(ac, (list, tuple)) else list(ac)
    if len(per_layer) != s.layers or any(not isinstance(a, str) or a not in AC_MODES for a in per_layer):
        raise _bad("activation_checkpoint", f"{{param}} must be one of {', '.join(AC_MODES)} or a list of them, one "
                                            f"per layer ({s.layers}), got {_shown(ac)}")
    if impl == "paper" and any(a != "none" for a in per_layer):
        raise _bad("activation_checkpoint", "{param:impl} 'paper' counts no activation checkpointing; give "
                                            "{name}none, or {name:impl}hf or torchtitan")
    if tp > 1 and s.heads:
        assert s.kv_heads is not None  # ModelShape.resolved gives kv_heads whenever heads is given
        if s.kv_heads % tp and tp % s.kv_heads or s.heads % tp:
            raise _bad("tp", f"{{param}} {tp} does not divide the {s.heads} heads ({s.kv_heads} kv heads)")
    param_dtype = _dtype(r.param_dtype or s.dtype, "param_dtype")
    grad_dtype = _dtype(r.grad_dtype, "grad_dtype")
    optimizer_dtype = _dtype(r.optimizer_dtype, "optimizer_dtype")
    p_bytes = DTYPE_BYTES[param_dtype]
    if master_weights is None:
        master_weights = r.optimizer != "none" and p_bytes < 4
    states = OPTIMIZER_STATES[r.optimizer]
    opt = (r.optimizer_bytes_per_param if r.optimizer_bytes_per_param is not None
           else 4 * bool(master_weights) + states * DTYPE_BYTES[optimizer_dtype])
    grad = r.grad_bytes_per_param if r.grad_bytes_per_param is not None else DTYPE_BYTES[grad_dtype]
    reserve = r.reserve_bytes if r.reserve_bytes is not None else (CUDA_RESERVE_BYTES if device == "cuda" else 0.0)
    fsdp = dp_shard > 1 if fsdp is None else fsdp
    unsharded = fsdp_held(s.dtype, grad_dtype, grad, r.torch) if fsdp else 0.0
    w_grad, excess = fsdp_transients(s.dtype, grad_dtype, grad, r.torch) if fsdp else (0.0, 0.0)
    summary = per_layer[0] if len(set(per_layer)) == 1 else per_layer
    rates = None
    if r.gpu is not None:
        rates = device_rates(r.gpu)
        check_rates(s, rates, device)
    time_model = (f"{rates.name} per-op rates ({rates.source.split(': ')[0]}; schedc.core.device_rates)"
                  if rates is not None else
                  f"one rate: {r.flops_per_second / 1e12:g} TFLOP/s for every action, the embedding at "
                  f"{r.memory_bandwidth / 1e12:g} TB/s")
    assumes = {"model_type": s.family, "seq_len": seq, "microbatch_size": mbs, "activation_checkpoint": summary,
               "implementation": impl, "device": device, "activation_dtype": s.dtype, "param_dtype": param_dtype,
               "grad_dtype": grad_dtype, "optimizer": r.optimizer, "optimizer_dtype": optimizer_dtype,
               "master_weights": bool(master_weights), "static_bytes_per_param": p_bytes + grad + opt,
               "dp_shard": dp_shard, "tp": tp, "sequence_parallel": tp > 1,
               **({"tp_collectives": TP_ASSUMES, "tp_bandwidth": r.tp_bandwidth, "tp_latency": r.tp_latency}
                  if tp > 1 else {}),
               "reserve_bytes": reserve,
               **({"fsdp": FSDP_ASSUMES if _split_w_keeps_compute_grad(r.torch) else FSDP_ASSUMES_215,
                   "fsdp_unsharded_bytes_per_param": unsharded} if fsdp else {}),
               **({"expert_parallel": EXPERT_PARALLEL} if s.experts else {}),
               "torch": r.torch, "held": held,
               # torch refuses a second backward through a region checkpointed per op (light,
               # selective), which stage_backward_weight is: such layers run their backward whole (B)
               "split_backward": not any(a in PER_OP_AC for a in per_layer), "time_model": time_model}
    return Run(seq=seq, mbs=mbs, ac=tuple(per_layer), impl=impl, device=device, param_bytes=p_bytes,
               static_per_param=p_bytes + grad + opt, fsdp_held_per_param=unsharded, dp_shard=dp_shard, tp=tp,
               reserve_bytes=reserve, flops=r.flops_per_second, memory_bandwidth=r.memory_bandwidth,
               bandwidth=r.bandwidth, latency=r.latency, tp_bandwidth=r.tp_bandwidth, tp_latency=r.tp_latency,
               held=held, names=names, assumes=assumes, fsdp_w_grad_bytes=w_grad,
               fsdp_reduce_excess_per_param=excess, rates=rates)


def fsdp_held(act_dtype: str, grad_dtype: str, grad_bytes: float, torch: str = COUNTED_FOR_TORCH) -> float:
    """Bytes per parameter that FSDP2 (``fully_shard`` per block, as torchtitan and NeMo AutoModel
    apply it) holds unsharded on each rank under torch's pipelining, besides the sharded states.

    The stage's weights in the compute dtype (``MixedPrecisionPolicy.param_dtype``, the activation
    dtype): the schedule's UNSHARD all-gathers them before the first action and torchtitan turns
    ``reshard_after_forward`` off under pipeline parallelism, so they stay until the last
    backward's ``post_backward`` (NeMo AutoModel 0.7.0 reshards every block but the last after each
    forward, its pipeline test reading the dp_shard mesh: there each backward gathers them again
    and they stay until the stage's next forward). Its gradients, unsharded: every backward runs
    with gradient sync off (``stage.py``), so they accumulate unreduced from the first backward
    until REDUCE_GRAD's reduce-scatter, in ``grad_dtype`` (the reduce dtype). Where that differs
    from the compute dtype, `torch` (the release the run uses, ``RunSettings.torch``) decides
    whether a split W's compute-dtype gradient is held beside them (:func:`_split_w_keeps_compute_grad`).
    Counted as held all step (static bytes): exact from the stage's first backward on, an
    over-count before it. The reduce-scatter's input (one FSDP group's gradients in the reduce
    dtype) never rises above it: each group reshards its weights first. Cost: O(1)."""
    e = DTYPE_BYTES[act_dtype]
    upcast = grad_dtype != act_dtype
    return e + grad_bytes + (e if upcast and _split_w_keeps_compute_grad(torch) else 0.0)


def fsdp_transients(act_dtype: str, grad_dtype: str, grad_bytes: float,
                    torch: str = COUNTED_FOR_TORCH) -> tuple[float, float]:
    """(bytes per parameter of the gradient a W adds into the held one, bytes per parameter the
    reduce-scatter rises above the static bytes) under FSDP2 and torch's pipelining; (0, 0) before
    torch 2.15.

    From 2.15 a W after the step's first finds the reduce-dtype ``.grad`` there and adds its own,
    produced in the reduce dtype (``pipelining/_backward.py`` 344-358, ``weight.grad += dw``), as a
    W without FSDP2 adds its gradient (``memory.accumulated_grads``). Before 2.15 the post-backward
    hook has moved ``.grad`` away, so W only sets it (:func:`fsdp_held`). At REDUCE_GRAD each FSDP
    group (one unit: a block, the embedding, the norm and head) reshards its compute-dtype weights,
    then copies its reduce-dtype gradients into the reduce-scatter's input while they are still
    held (``_fsdp_param_group.py`` 2.15.0: ``post_backward`` 720-725, then ``foreach_reduce``):
    ``grad_bytes - e`` per parameter of the group above the static bytes. The groups go last to
    first (``_fsdp_state.py`` 2.15.0 470-471, ``finalize_backward``), each freeing its
    gradients once copied in, so a stage rises most at its first; counted as its largest unit's, a
    bound. Before 2.15 the split W's compute-dtype slot :func:`fsdp_held` counts is empty by then
    and covers it. Cost: O(1)."""
    e = DTYPE_BYTES[act_dtype]
    copy = fsdp_held(act_dtype, grad_dtype, grad_bytes, torch) - e - grad_bytes
    excess = max(0.0, grad_bytes - e - copy)
    if _split_w_keeps_compute_grad(torch):
        return 0.0, excess
    return float(grad_bytes), excess


def _split_w_keeps_compute_grad(torch: str) -> bool:
    """Whether, under FSDP2 with a reduce dtype wider than the compute dtype, a split W's gradient
    stays in ``.grad`` in the compute dtype beside the reduce-dtype accumulator (torch before 2.15)
    rather than being produced in the reduce dtype at once (2.15 on). A release schedc cannot read
    counts as 2.15 on, the newest behaviour.

    torch 2.14.1: the post-backward hook, which runs at the end of each I (the autograd pass through
    the stage's inputs) and never in W, moves ``.grad`` into ``unsharded_accumulated_grad``
    (``fsdp/_fully_shard/_fsdp_param_group.py`` 623-631, ``accumulate_unsharded_grad_if_needed``
    then ``to_accumulated_grad_if_needed``; ``_fsdp_param.py`` 1019-1038, ``.to(reduce_dtype)``);
    the W after it finds ``.grad`` None and sets its compute-dtype gradient there
    (``pipelining/_backward.py`` 337, ``weight.grad = dw``), so it is held until the next I's hook:
    a compute-dtype copy beside the accumulator.

    torch 2.15.0: the unsharded parameter carries ``grad_dtype`` = the reduce dtype
    (``_fsdp_param.py`` 949, ``unsharded_grad_dtype`` 1163-1169), restored by every post-backward
    with sync off (``_fsdp_param_group.py`` 712-714 -> ``_set_unsharded_grad_dtypes`` 934-951), so
    the ``autograd.grad`` of ``stage_backward_weight`` returns W's gradient in the reduce dtype and
    it goes into, or is added to, the one ``.grad`` (``pipelining/_backward.py`` 344-358): no
    compute-dtype copy is held."""
    m = re.match(r"\s*(\d+)\.(\d+)", str(torch))
    return m is not None and (int(m.group(1)), int(m.group(2))) < (2, 15)


# how tensor parallelism's communication is counted (schedc.model_costs.units.TP_COLLECTIVES)
TP_ASSUMES = ("torchtitan's sequence-parallel TP within one node: per layer 2 all-gathers + 2 reduce-scatters of "
              "the b x s x h activation in F and as many in I (plain TP's 2 all-reduces move the same bytes), "
              "1 each for the embedding and the LM head, rerun by a full recompute; each a ring collective of "
              "(tp-1)/tp of the tensor at tp_bandwidth plus tp_latency, not overlapped with compute")
# what `fsdp_held` takes about the run, recorded in a profile's "assumes" when FSDP2 wraps the blocks
FSDP_ASSUMES = ("FSDP2 fully_shard per block under torch's pipelining (reshard_after_forward off in torchtitan; "
                "NeMo AutoModel reshards all blocks but the last after each forward, so this is its most): each "
                "rank holds its stages' weights unsharded in the activation dtype and their gradients unsharded "
                "(grad_dtype accumulator + the activation-dtype gradient a split W leaves) from the first "
                "backward to the reduce-scatter, counted in static bytes")
# the same from torch 2.15 on, where a split W's gradient comes in grad_dtype at once (fsdp_held)
FSDP_ASSUMES_215 = FSDP_ASSUMES.replace("(grad_dtype accumulator + the activation-dtype gradient a split W leaves)",
                                        "(in grad_dtype: torch 2.15 produces a split W's gradient in it at once)")


def _short(value) -> str:
    if isinstance(value, int) and value.bit_length() > 4000:
        return "a number of over 1000 digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _shown(value) -> str:
    """`value` as a :class:`ParameterError`'s detail shows it: cut when long, its braces kept."""
    return literal(_short(value))


def _notes(run: Run, e: int) -> list[str]:
    warnings = []
    per_op = [m for m in PER_OP_AC if m in run.ac]
    if per_op:
        warnings.append(f"warning: {' and '.join(per_op)} activation checkpointing (per op) cannot run torch's split "
                        "backward (I, then W): torch raises 'Trying to backward an extra time'; give these stages a "
                        "full backward (B)")
        warnings.append(f"note: the {' and '.join(per_op)} times count the recomputed FLOPs and bytes, not the host's "
                        "per-op dispatch of torch's selective checkpointing, which on a GPU can set an eager layer's F "
                        "time at short sequences (docs/design.md, 'On a GPU'): check with benchmarks/gpu_layers.py")
    if "expert_parallel" in run.assumes:
        warnings.append(f"note: expert parallelism is {run.assumes['expert_parallel']}")
    if "full" in run.ac:
        warnings.append("warning: with full activation checkpointing torch's split backward recomputes a layer's "
                        "forward once in I and once per parameter group in W (counted in W's time and memory); "
                        "a full backward (B) recomputes it once")
    return warnings + [
        "arithmetic per-unit profile (schedc.model_costs.unit_profile): units are the embedding, each layer, "
        "and the final norm + LM head + loss, in model order",
        f"memory counted as {run.impl}'s code keeps it on {run.device} (torch {COUNTED_FOR_TORCH} kernels): "
        "saved tensors after F; from I until W the retained graph plus the output gradients W consumes and the "
        "input gradient I returns; transients of the loss's fp32 logits, of the new gradients W and B add into "
        "those earlier microbatches left, and B's peak; checked by benchmarks/memory_fidelity.py",
        "layer FLOPs 2bs x params + 4bs^2q (Narayanan et al. 2021, Megatron-LM, sec. 5.1); I = linears + 2 x "
        "attention core, W = linears; checkpointing adds recomputed forwards to I and W; checked by "
        "benchmarks/flop_counts.py",
        "static bytes: weight + gradient + optimizer bytes per parameter (Rajbhandari et al. 2020, ZeRO, sec. 3.1), "
        "divided by the data-parallel shard degree and the tensor-parallel degree",
    ] + ([f"time from operations at {run.rates.name}'s per-op rates (schedc.model_costs.timing): each pass's GEMMs "
          "at its GEMM rate, causal flash attention, the memory-bound ops' bytes, or the host's launches where "
          "longer; the rates are a fit of whole-layer GPU times (benchmarks/time_fit.py), not per-op measurements"]
         if run.rates is not None else []) + ([f"dp_shard {run.dp_shard}: + {run.fsdp_held_per_param:g} bytes per parameter held unsharded all step: "
          + run.assumes["fsdp"].split(': ', 1)[1]] if run.fsdp_held_per_param else [])
