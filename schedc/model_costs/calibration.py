"""calibrate: a count's times corrected by one GPU's measurement of a few of its units.

Problem: the counted route prices every action at one FLOP rate (and one memory bandwidth),
while a GPU runs a layer's F, its split I and its W at different rates, and an eager head or
embedding at others again; the ratio F : I : W decides the schedule. A user who has one GPU can
measure a truncated copy of the model (the embedding, one or two layers, the head:
``schedc profile --units --model ...``) but not the whole model on the cluster it will train on.

Method: the measured model is counted with the full count's settings (its own number of layers,
its own activation-checkpointing mode, one GPU: no tensor parallelism), so that measured and
counted seconds describe the same work. Units are matched by kind and position (the first unit
is the embedding, the last the norm + head + loss, every unit between a layer) and, per kind and
per action, the factor is the measured seconds over the counted seconds, summed over that kind's
units. Actions are compared apart (F, I, W) where both sides split them; where one side cannot
(a per-op checkpointed layer runs its backward whole; torch's runtime runs the first stage's
whole backward in W; torchtitan's chunked loss runs the head's backward inside F), the actions
that side lumps together are compared as one (``B`` = I + W, ``F+B`` = the whole unit). Every
unit of a kind in the full count is scaled by its kind's factors; the tensor-parallel
collectives a count adds (none in the measurement) are kept as counted. Memory is not rescaled:
the count already follows what the GPU holds (docs/design.md, "Counted memory"), and a
measurement on another device (a CPU) would hold other bytes. The factors, the measured file's
name and sha256, its device and torch release go into ``assumes["calibrated"]``.

Refused in one line naming ``calibrate`` (``--calibrate``): a file that is not a measured
per-unit profile, one without a unit of some kind (embedding, layer, head: the count of that
kind would stay uncalibrated), one measured at another sequence length, microbatch size, dtype
or with no checkpointing mode recorded, layers of another size (their parameters), and factors
outside :data:`FACTOR_RANGE` (a wrong file, or a count's rate far from the device's).

Cost: one count of the measured model's few layers (and one more of the full model under tensor
parallelism) and O(units) arithmetic.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, NoReturn, Optional, Union

from schedc.core.costs import AC_MODES, PER_OP_AC, Profile, StageCost
from schedc.core.formatting import format_seconds
from schedc.core.settings import RunSettings
from schedc.errors import ParameterError, SchedcError, literal
from schedc.model_costs.profile import count_units

# measured / counted seconds outside this range come from another model or device, or from a
# count whose FLOP rate is far from the device's (then give the count the device's rate)
FACTOR_RANGE = (0.1, 10.0)
# how far a measured layer's parameters may be from a counted layer's (norms and biases the two
# codes hold differently) before the measurement is taken for another model's
PARAM_TOLERANCE = 0.05
KINDS = ("embedding", "layer", "head")
FIELDS = {"F": "forward", "I": "backward_input", "W": "backward_weight"}
# the actions compared as one, by the name assumes["calibrated"]["factors"] gives them
GROUPS = {"F": ("F",), "I": ("I",), "W": ("W",), "B": ("I", "W"), "F+B": ("F", "I", "W")}
_BLOCK = re.compile(r"(^|\.)\w+\.\d+$")  # "layers.3", "model.layers.3", "blocks.0": one layer
# how a counted profile's device begins (count_units); a counted profile also records its "implementation"
_COUNTED = "arithmetic model"


@dataclass(frozen=True)
class Measured:
    """A measured per-unit profile and where it came from: ``file`` its name (None for a
    :class:`Profile` given in Python), ``sha256`` of its bytes (of its JSON for a Profile)."""

    profile: Profile
    sha256: str
    file: Optional[str] = None
    shown: str = ""  # how messages name it


def read_measured(measured: Union[Profile, str, os.PathLike]) -> Measured:
    """The measured profile `measured` (a path or a :class:`Profile`) with its hash; one line
    naming ``calibrate`` for a file that cannot be read as a profile."""
    if isinstance(measured, Profile):
        text = measured.model_dump_json(exclude_none=True).encode()
        return Measured(measured, hashlib.sha256(text).hexdigest())
    if not isinstance(measured, (str, os.PathLike)):
        raise ParameterError("calibrate", f"{{param}} must be a measured per-unit Profile or the path of its JSON "
                                          f"file, got {type(measured).__name__}")
    from schedc.io.fileio import read_input

    path = Path(measured)
    try:
        raw = read_input(path, "a measured per-unit profile")
        profile = Profile.load(path)
    except SchedcError as e:
        raise ParameterError("calibrate", "{param} " + literal(str(e))) from None
    return Measured(profile, hashlib.sha256(raw).hexdigest(), path.name, str(path))


def calibrate(counted: Profile, measured: Union[Profile, str, os.PathLike, Measured], shape: Any,
              settings: RunSettings, **model) -> Profile:
    """`counted` (:func:`count_units` of `shape` and `model` under `settings`) with its times
    scaled per unit kind and action by `measured`, a measured per-unit profile of the same model
    truncated to a few layers (module docstring). Memory is as counted. Cost: see the module."""
    m = measured if isinstance(measured, Measured) else read_measured(measured)
    head = "{param} " + literal(m.shown) if m.shown else "{param}"
    kinds = _unit_kinds(m.profile, head)
    mode = _check_run(m.profile, counted, head)
    own = count_units(shape, settings.but(activation_checkpoint=mode, tp=1, dp_shard=1, fsdp=False),
                      **{**model, "layers": kinds.count("layer")})
    _check_layer_params(m.profile, own, head)
    factors = kind_factors(m.profile, own, whole_backward=mode in PER_OP_AC, head=head)
    kept = _collectives(counted, shape, settings, model)
    stages = [_scaled(unit, factors[_kind(i, counted.n_stages)], kept[i] if kept else None)
              for i, unit in enumerate(counted.stages)]
    record = {**({"file": m.file} if m.file else {}), "sha256": m.sha256,
              **({"device": m.profile.device} if m.profile.device else {}),
              **({"torch": _torch(m.profile)} if _torch(m.profile) else {}),
              **({"model": m.profile.model} if m.profile.model else {}),
              "layers": kinds.count("layer"), "activation_checkpoint": mode, "factors": factors}
    return counted.model_copy(update={
        "stages": stages,
        "device": f"{counted.device}; times calibrated to a measurement on {m.profile.device or 'a device'}",
        "assumes": {**(counted.assumes or {}), "calibrated": record},
        "notes": list(counted.notes or []) + [_note(m, record, counted, mode)],
    })


def kind_factors(measured: Profile, own: Profile, *, whole_backward: bool = False,
                 head: str = "{param}") -> dict[str, dict[str, float]]:
    """Per unit kind, per action group (:data:`GROUPS`): measured seconds / counted seconds of
    the same units (`own`: the measured model counted; both in model order, one unit each).
    `whole_backward`: the measured layers ran their backward whole (a per-op checkpointing
    mode), so their I and W are compared as B. A factor outside :data:`FACTOR_RANGE` is one line."""
    out: dict[str, dict[str, float]] = {}
    n = measured.n_stages
    for kind in KINDS:
        units = [i for i in range(n) if _kind(i, n) == kind]
        mine = _sums([measured.stages[i] for i in units])
        counted = _sums([own.stages[i] for i in units])
        factors = {}
        for group in _groups(mine, counted, whole_backward and kind == "layer"):
            actions = GROUPS[group]
            m, c = sum(mine[a] for a in actions), sum(counted[a] for a in actions)
            if m == c == 0:
                continue  # neither spends time here: nothing to scale
            factor = m / c
            low, high = FACTOR_RANGE
            if not low <= factor <= high:
                raise ParameterError("calibrate", f"{head}: the {kind}'s {group} takes {format_seconds(m)} measured "
                                                  f"against {format_seconds(c)} counted (x{factor:.3g}), outside "
                                                  f"{low:g}-{high:g}: a measurement of another model or device, or "
                                                  f"a count at a FLOP rate far from the device's (count at a rate "
                                                  f"near it)")
            factors[group] = factor
        out[kind] = factors
    return out


def _groups(measured: Mapping[str, float], counted: Mapping[str, float], whole_backward: bool) -> list[str]:
    """The action groups compared for one unit kind: F, I, W apart; I + W as B where the layers
    ran whole or one side spends time in I or W where the other spends none (torch's runtime
    runs the first stage's whole backward in W); the whole unit where the count has no backward
    at all that the measurement has (torchtitan's chunked loss: the head's backward inside F)."""

    def lumped(actions) -> bool:  # the measurement spends time where the count spends none
        return sum(counted[a] for a in actions) == 0 < sum(measured[a] for a in actions)

    groups = ["F", "B"] if whole_backward or lumped("I") or lumped("W") else ["F", "I", "W"]
    return ["F+B"] if "B" in groups and lumped(("I", "W")) else groups


def _sums(units: list[StageCost]) -> dict[str, float]:
    return {a: sum(float(getattr(u, f)) for u in units) for a, f in FIELDS.items()}


def _kind(index: int, n: int) -> str:
    return "embedding" if index == 0 else "head" if index == n - 1 else "layer"


def _unit_kinds(p: Profile, head: str) -> list[str]:
    """The kind of each unit of a measured per-unit profile, by position, checked against its
    module names (a layer's is one name ending in an index); one line for a per-stage profile
    or a kind missing."""
    n = p.n_stages
    bare = next((i for i, u in enumerate(p.stages) if not u.modules), None)
    if n < 2 or bare is not None:
        what = "one unit is not" if n < 2 else f"unit {bare} names no modules: it is not"
        raise ParameterError("calibrate", f"{head}: {what} a per-unit profile (schedc profile --units --model ...: "
                                          f"one unit for the embedding, each layer and the head, each naming its "
                                          f"modules)")
    kinds = [_kind(i, n) for i in range(n)]
    for i, (unit, kind) in enumerate(zip(p.stages, kinds)):
        names = list(unit.modules or [])
        blocks = [name for name in names if _BLOCK.search(name)]
        if kind == "layer" and len(names) == len(blocks) == 1 or kind != "layer" and not blocks:
            continue
        if kind != "layer" and len(blocks) == len(names):  # a layer where the embedding or the head belongs
            _missing(p, kind, head)
        raise ParameterError("calibrate", f"{head}: unit {i} holds {literal(', '.join(names)[:80])}, not one "
                                          f"{kind}: a per-unit profile has one unit per layer (schedc profile "
                                          f"--units --model ...)")
    if n == 2:
        _missing(p, "layer", head)
    return kinds


def _missing(p: Profile, kind: str, head: str) -> NoReturn:
    raise ParameterError("calibrate", f"{head}: it has no {kind} unit (its units hold {literal(_listed(p))}), so "
                                      f"the count's {kind} would stay uncalibrated; measure the embedding, one or "
                                      f"more layers and the head (schedc profile --units --model ...)")


def _listed(p: Profile) -> str:
    return "; ".join(", ".join(u.modules or []) for u in p.stages)[:80]


def _check_run(p: Profile, counted: Profile, head: str) -> str:
    """The measured profile's activation-checkpointing mode, after checking that it was
    measured (not counted) at the count's sequence length, microbatch size and dtype."""
    if "implementation" in (p.assumes or {}) or (p.device or "").startswith(_COUNTED):
        raise ParameterError("calibrate", f"{head}: is a counted profile (it records the implementation it "
                                          f"counted); give one measured on a device (schedc profile --units "
                                          f"--model ...)")
    a, mine = p.assumes or {}, counted.assumes or {}
    for label, field, theirs, ours in (
            ("sequence length", "assumes.seq_len", a.get("seq_len"), mine.get("seq_len")),
            ("microbatch size", "microbatch_size", p.microbatch_size or a.get("microbatch_size"),
             counted.microbatch_size),
            ("dtype", "dtype", p.dtype or a.get("dtype"), counted.dtype)):
        if theirs is None:
            raise ParameterError("calibrate", f"{head}: field {field} is missing, so its {label} is unknown; "
                                              f"measure with it given (schedc profile --units --model ... --seq N "
                                              f"--mbs N --dtype NAME)")
        if theirs != ours:
            raise ParameterError("calibrate", f"{head}: measured at {label} {literal(repr(theirs))[:40]} (field "
                                              f"{field}), the count at {literal(repr(ours))[:40]}: measure at the "
                                              f"count's {label}, or count at the measurement's")
    mode = a.get("activation_checkpoint")
    if not isinstance(mode, str) or mode not in AC_MODES:
        raise ParameterError("calibrate", f"{head}: field assumes.activation_checkpoint is "
                                          f"{literal(repr(mode))[:40]}; a measured per-unit profile records one of "
                                          f"{', '.join(AC_MODES)}")
    return mode


def _check_layer_params(p: Profile, own: Profile, head: str) -> None:
    """One line when the measured layers hold another number of parameters than the counted
    ones (beyond :data:`PARAM_TOLERANCE`): a measurement of another model. Parameters are static
    bytes over the bytes per parameter each profile records; skipped where one does not."""
    per_m = (p.assumes or {}).get("static_bytes_per_param")
    per_c = (own.assumes or {}).get("static_bytes_per_param")
    layers = range(1, p.n_stages - 1)
    if not (isinstance(per_m, (int, float)) and per_m > 0 and isinstance(per_c, (int, float)) and per_c > 0):
        return
    measured = sum(p.stages[i].static_bytes for i in layers) / per_m / len(layers)
    counted = sum(own.stages[i].static_bytes for i in layers) / per_c / len(layers)
    if measured > 0 and counted > 0 and abs(measured - counted) > PARAM_TOLERANCE * counted:
        raise ParameterError("calibrate", f"{head}: its layers hold {measured:,.0f} parameters each, the count's "
                                          f"{counted:,.0f}: a measurement of another model; measure this model "
                                          f"truncated to a few layers")


def _collectives(counted: Profile, shape: Any, settings: RunSettings, model: Mapping) -> Optional[list[dict]]:
    """Per unit and action, the seconds of the tensor-parallel collectives in `counted` (the
    count less the same count with free collectives); None without tensor parallelism."""
    if settings.tp == 1:
        return None
    free = count_units(shape, settings.but(tp_latency=0.0, tp_bandwidth=1e300), **model)
    return [{a: max(0.0, float(getattr(c, f)) - float(getattr(z, f))) for a, f in FIELDS.items()}
            for c, z in zip(counted.stages, free.stages)]


def _scaled(unit: StageCost, factors: Mapping[str, float], kept: Optional[Mapping[str, float]]) -> StageCost:
    update = {}
    for group, factor in factors.items():
        for action in GROUPS[group]:
            field = FIELDS[action]
            seconds, fixed = float(getattr(unit, field)), (kept or {}).get(action, 0.0)
            update[field] = factor * (seconds - fixed) + fixed
    return unit.model_copy(update=update)


def _torch(p: Profile) -> Optional[str]:
    given = (p.assumes or {}).get("torch") or p.torch_version
    return str(given) if given else None


def _note(m: Measured, record: dict, counted: Profile, mode: str) -> str:
    factors = "; ".join(f"{kind} " + ", ".join(f"{g} x{f:.3g}" for g, f in groups.items())
                        for kind, groups in record["factors"].items() if groups)
    modes = (counted.assumes or {}).get("activation_checkpoint")
    other = (f"; measured with activation checkpointing {mode!r}, counted with {modes!r}: a recomputed forward is "
             f"scaled by the factor of the action it runs in" if modes not in (None, mode) else "")
    return (f"times calibrated by {m.file or 'a measured profile'} (sha256 {m.sha256[:12]}, measured on "
            f"{m.profile.device or 'an unnamed device'}): per unit kind and action, measured over counted seconds "
            f"of the measured model's own {record['layers']}-layer count: {factors}{other}; memory as counted")
