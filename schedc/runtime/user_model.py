"""A user's model for the profiler: ``MODULE:FUNCTION`` factories and splitting by module names.

Problem: ``schedc profile`` must measure the user's own model (a torchtitan Llama, a Hugging Face
model, ...), not only the built-in GPT, without schedc knowing its class. Method: the user names a
function (``pkg.mod:fn`` or ``path/to/file.py:fn``) that returns either the stage modules in order,
or the whole model with a split rule in torchtitan's ``module_fqns_per_model_part`` form (one list
of module names per stage, e.g. ``[["tok_embeddings", "layers.0"], ["layers.1", "norm", "lm_head"]]``).
It may return a dict to add the sample microbatch and the loss:

    {"stages": [...]} or {"model": m, "split": [[...], ...]},
    plus optional "sample" (stage 0's input), "target", "loss_fn" (loss_fn(output, target)), "name"

A separate ``--sample MODULE:FUNCTION`` returns the sample (or ``(sample, target)``). The CLI
offers the functions ``n_stages``, ``microbatch_size`` and ``dtype`` (dropped where a function does
not name them) and passes what the user gives explicitly (``--model-arg KEY=VALUE``, and the
shape flags ``--layers``, ``--hidden``, ``--heads``, ``--kv-heads``, ``--ffn``, ``--seq``, ``--vocab``
as ``layers``, ``hidden``, ``heads``, ``kv_heads``, ``ffn_hidden``, ``seq_len``, ``vocab_size``, the
parameter names the examples use); an explicit argument that no function takes is an error naming
the parameters they do take (:func:`check_arguments`).

Per-unit profiles (:func:`units_from_split`) read the units from the split: each name ending in
``.N`` (an entry of a ModuleList/ModuleDict: ``layers.3``, ``model.layers.3``) is one unit, the
names before the first such form the first unit (the embedding), those after the last one the
last unit (final norm, head), and a name that several stages keep (Hugging Face's
``model.rotary_emb``, which NeMo puts on every stage) is kept by every unit. Splitting
copies, per stage, the modules it keeps and the containers on the path to them, and sets every
module a stage does not keep to None (entries of a ModuleList/ModuleDict are dropped, a container
with none kept becomes an empty ModuleDict, as in torchtitan's and NeMo's splits), so the model's
``forward`` must skip parts that are None, as torchtitan's models do. Without a loss the last
stage's output is summed: its backward costs what any loss's does, less the loss itself. Cost:
about one deep copy of the model over all stages (or all units) together.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, cast

import torch.nn as nn

from schedc.errors import ParameterError, SchedcError, literal


@dataclass
class UserModel:
    stages: list[nn.Module]
    sample: Any = None
    target: Any = None
    loss_fn: Optional[Callable] = None
    name: str = ""
    model: Optional[nn.Module] = None  # the whole model, when the function returned 'model' + 'split'
    split: Optional[list[list[str]]] = None


def load_function(spec: str, flag: str = "--model") -> Callable:
    """'pkg.mod:fn' or 'path/file.py:fn' -> the function. Its errors name the parameter `flag`
    stands for (``--model``: ``model``), so that each front door spells it."""
    param = flag.removeprefix("--").replace("-", "_")

    def bad(detail: str) -> ParameterError:
        return ParameterError(param, f"{{name}}{literal(repr(spec))}: {literal(detail)}", flag=flag)

    module_name, sep, fn_name = spec.rpartition(":")
    if not sep or not module_name or not fn_name:
        raise bad("expected MODULE:FUNCTION, e.g. examples/llama.py:stages or pkg.models:build")
    try:
        if module_name.endswith(".py") or "/" in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise bad(f"{path} is not a file")
            loader_spec = importlib.util.spec_from_file_location(f"_schedc_user_{path.stem}", path)
            if loader_spec is None or loader_spec.loader is None:  # a suffix no importer reads (not .py)
                raise bad(f"{path} is not a Python file: give a .py file")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[loader_spec.name] = module  # dataclasses and pickling look modules up here
            loader_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except SchedcError:
        raise
    except ImportError as e:
        raise bad(f"cannot import {module_name}: {e}") from None
    except Exception as e:  # the user's code: one line here, the traceback with --debug
        raise bad(f"importing {module_name} raised {type(e).__name__}: {e}") from e
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise bad(f"{module_name} has no function {fn_name}")
    return fn


def call_with(fn: Callable, offered: dict, label: str = "", param: str = "") -> Any:
    """Call ``fn`` with those of ``offered`` its signature names (the CLI offers n_stages,
    microbatch_size, dtype and every --model-arg), dropping what it does not take. An error it
    raises is told with `label`, or as the parameter `param` (``model``) with the value `label`."""
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    try:
        return fn(**{k: v for k, v in offered.items() if takes_any or k in params})
    except SchedcError:
        raise
    except Exception as e:  # the user's code: one line here, the traceback with --debug
        if param:
            raise ParameterError(param, f"{{name}}{literal(label)} raised {literal(type(e).__name__)}: {literal(e)}") from e
        raise SchedcError(f"{label or fn.__name__} raised {type(e).__name__}: {e}") from e


def takes(fn: Callable) -> tuple[list[str], bool]:
    """(the keyword parameters ``fn`` names, whether it takes ``**kwargs``)."""
    params = inspect.signature(fn).parameters.values()
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return names, any(p.kind == p.VAR_KEYWORD for p in params)


def check_arguments(functions: Sequence[tuple[str, Callable]], explicit: dict[str, str]) -> None:
    """Every argument the user gave (``explicit``: parameter name -> how it was given, e.g.
    ``{"vocab": "--model-arg vocab=32000"}``) must be a parameter of one of ``functions``
    (``(label, fn)`` pairs); otherwise a SchedcError naming the parameters they do take."""
    accepted: set[str] = set()
    for _, fn in functions:
        names, any_kw = takes(fn)
        if any_kw:
            return
        accepted.update(names)
    for name, given in explicit.items():
        if name not in accepted:
            offers = "; ".join(f"{label} takes {', '.join(takes(fn)[0]) or 'no parameters'}" for label, fn in functions)
            raise SchedcError(f"{given}: no parameter {name!r} to pass it to ({offers})")


def units_from_split(split: Sequence[Sequence[str]]) -> tuple[list[list[str]], list[str]]:
    """(module names per unit in model order, names every unit keeps): the module docstring's rule."""
    counts: dict[str, int] = {}
    for stage in split:
        for name in dict.fromkeys(stage):
            counts[name] = counts.get(name, 0) + 1
    shared = [n for n, c in counts.items() if c > 1]
    own = [n for n in counts if counts[n] == 1]
    if not any(_LAYER.search(n) for n in own):
        return [[n] for n in own], shared
    units: list[list[str]] = []
    pending: list[str] = []
    for name in own:
        if not _LAYER.search(name):
            pending.append(name)
            continue
        if pending and units:
            units[-1].extend(pending)  # between two layers: part of the layer before
        elif pending:
            units.append(pending)  # before the first layer: the embedding
        units.append([name])
        pending = []
    if pending:
        units.append(pending)  # after the last layer: final norm, head
    return units, shared


_LAYER = re.compile(r"\.\d+$")


def split_by_fqns(model: nn.Module, split: Sequence[Sequence[str]]) -> list[nn.Module]:
    """One piece of ``model`` per stage keeping only that stage's named modules.

    Each piece deep-copies only what it keeps (:func:`_copy_kept`), with one ``copy.deepcopy``
    memo per piece, so weights tied between two kept parts stay tied inside the piece and
    ``model`` is never changed. Cost: about one copy of the model's weights over all pieces
    together (plus, per piece, the containers' own tensors and what several pieces keep),
    whatever the number of pieces, instead of one whole copy per piece."""
    known = dict(model.named_modules())
    for s, names in enumerate(split):
        for name in names:
            if name not in known:
                raise SchedcError(f"split: stage {s} names {name!r}, which the model does not have")
    return [_copy_kept(model, set(names), "", {}) for names in split]


def _copy_kept(module: nn.Module, names: set[str], prefix: str, memo: dict) -> nn.Module:
    """A copy of ``module`` with only the named parts (and what contains them) left.

    A named child is deep-copied whole; a child on the path to a named part is rebuilt the same
    way; an entry of a ModuleList/ModuleDict that holds none is dropped, another container child
    becomes an empty ModuleDict (as torchtitan's and NeMo's splits leave it: ``for layer in
    self.layers...`` still runs) and any other child None. ``module``'s own state (parameters,
    buffers, hooks, attributes) is deep-copied as ``copy.deepcopy`` copies a module
    (``__getstate__``/``__setstate__``) but without its submodules; a ModuleList becomes a
    ModuleDict keyed by the original indices, so parameter names stay those of the whole model."""
    if isinstance(module, nn.ModuleList):
        # cast: torch annotates ModuleDict's argument Mapping[str, Module], yet each entry goes
        # to add_module, which takes None (an entry the list holds as None)
        return nn.ModuleDict(cast("dict[str, nn.Module]", _kept_children(module, names, prefix, memo)))
    cls = type(module)
    new = cls.__new__(cls)
    # registered before anything below is copied: a kept part that points back at this container
    # gets this copy, as in one whole deepcopy, not a copy of the whole container
    memo[id(module)] = new
    state = dict(module.__getstate__())
    del state["_modules"]
    state = copy.deepcopy(state, memo)
    state["_modules"] = _kept_children(module, names, prefix, memo)
    new.__setstate__(state)
    return new


def _kept_children(module: nn.Module, names: set[str], prefix: str, memo: dict) -> dict[str, Optional[nn.Module]]:
    """The children of :func:`_copy_kept`'s copy of ``module``, in their order."""
    children: dict[str, Optional[nn.Module]] = {}
    seen: set[int] = set()
    for child_name, child in module._modules.items():
        full = prefix + child_name
        if child is None or id(child) in seen:
            # named_modules() does not list these, so no name selects them: copied as they are
            children[child_name] = copy.deepcopy(child, memo)
            continue
        seen.add(id(child))
        if full in names:
            children[child_name] = copy.deepcopy(child, memo)
        elif any(n.startswith(full + ".") for n in names):
            children[child_name] = _copy_kept(child, names, full + ".", memo)
        elif isinstance(module, (nn.ModuleDict, nn.ModuleList)):
            continue
        elif isinstance(child, (nn.ModuleDict, nn.ModuleList)):
            children[child_name] = nn.ModuleDict()
        else:
            children[child_name] = None
    return children


def build_user_model(model_spec: str, sample_spec: Optional[str], offered: dict,
                     explicit: Optional[dict[str, str]] = None) -> UserModel:
    """Call the ``--model`` (and ``--sample``) functions and put their answer in one shape.

    ``offered`` are the keyword arguments; those named in ``explicit`` (name -> how the user gave
    it) must be taken by one of the functions (:func:`check_arguments`), the others are dropped
    where a function does not name them."""
    model_fn = load_function(model_spec)
    sample_fn = load_function(sample_spec, "--sample") if sample_spec else None
    check_arguments([(f"--model {model_spec}", model_fn)] + ([(f"--sample {sample_spec}", sample_fn)] if sample_fn else []),
                    explicit or {})
    made = call_with(model_fn, offered, model_spec, "model")
    if not isinstance(made, dict):
        made = {"stages": made}
    model, split = None, None
    if "stages" in made:
        stages = made["stages"]
        if not isinstance(stages, (list, tuple)):  # an int, a bare module, a generator: not a list of stages
            raise ParameterError("model", f"{{name}}{literal(model_spec)}: returned {type(stages).__name__}; return a "
                                 "list of torch.nn.Module stages, or a dict with 'stages' or 'model' + 'split'")
        stages = list(stages)
    elif "model" in made and "split" in made:
        model, split = made["model"], [list(names) for names in made["split"]]
        stages = split_by_fqns(model, split)
    else:
        raise ParameterError("model", f"{{name}}{literal(model_spec)}: return the stage modules, or a dict with "
                             "'stages' or 'model' + 'split'")
    if not stages or not all(isinstance(s, nn.Module) for s in stages):
        raise ParameterError("model", f"{{name}}{literal(model_spec)}: expected a non-empty list of torch.nn.Module "
                             "stages")
    sample, target = made.get("sample"), made.get("target")
    if sample_fn is not None:
        assert sample_spec is not None  # sample_fn is loaded from it
        got = call_with(sample_fn, offered, sample_spec, "sample")
        sample, target = got if isinstance(got, tuple) and len(got) == 2 else (got, target)
    if sample is None:
        raise ParameterError("model", f"{{name}}{literal(model_spec)}: no sample microbatch; return 'sample' from it "
                             "or pass {param:sample}")
    loss_fn = made.get("loss_fn")
    if loss_fn is None:
        loss_fn, target = (lambda out, _target: out.sum()), None
    return UserModel(stages, sample, target, loss_fn, made.get("name") or model_spec, model, split)


def unit_modules(user: UserModel, spec: str) -> tuple[list[nn.Module], list[list[str]], list[str]]:
    """(one module per unit, each unit's module names, the names every unit keeps) of a user's
    model that came with a split (:func:`units_from_split`)."""
    if user.model is None or user.split is None:
        raise ParameterError("units", f"{{param}} needs module names: return {{{{'model': m, 'split': [[names], ...]}}}} "
                             f"from {literal(spec)} (a list of stage modules cannot be cut into units)")
    units, shared = units_from_split(user.split)
    return split_by_fqns(user.model, [names + shared for names in units]), units, shared
