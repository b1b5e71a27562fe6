"""The choices schedc's functions take, as types a checker sees, and their one-line check.

Problem: every choice (what to minimize, how a runtime executes a CSV, which solver, where
stages sit, how sure a result is) is a string a caller can mistype; checked deep inside, a typo
surfaces late, or as a message that names a CLI flag the caller never used.

Method: each choice is a ``Literal`` type (so IDEs complete it and type checkers catch a typo),
or an ``Enum`` for what schedc returns (:class:`Status`). :func:`check_choice` checks a value
against the type's members at the front door and raises :class:`~schedc.errors.SchedcError`
naming the parameter, the value and the members.

Cost: O(members) per check.

>>> check_choice("objective", "span", Objective)
'span'
>>> check_choice("objective", "fastest", Objective)
Traceback (most recent call last):
    ...
schedc.errors.SchedcError: objective: must be one of 'makespan', 'span'; got 'fastest'
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal, Sequence, Union, get_args

from schedc.errors import SchedcError

__all__ = ["Objective", "Execution", "Solver", "Budget", "PlacementName", "Placement", "Status", "Implementation",
           "UnitNames", "CountedDevice", "check_choice"]

Objective = Literal["makespan", "span"]
"""``makespan``: all ranks start together and the step ends when the last one finishes (the
optimizer step synchronizes ranks). ``span``: the longest per-rank first-to-last-action time,
the zero-bubble paper's objective."""

Execution = Literal["torch", "ideal"]
"""The execution model: how a runtime times and frees a CSV's actions. ``torch``: as torch's
``_PipelineScheduleRuntime`` runs them (stage 0's I is empty, its W runs the whole backward).
``ideal``: the zero-bubble paper's model, every stage's I and W as given. The CLI spells it
``--runtime``; reports and profiles store it as ``"runtime"``."""

Solver = Literal["auto", "highs", "cbc", "cpsat"]
"""``auto``: CP-SAT for part of the time when OR-Tools is installed, then the integer program
(HiGHS, else CBC). ``highs`` / ``cbc``: the integer program alone with that MIP solver.
``cpsat``: OR-Tools' CP-SAT alone. The names of schedc.solver.compile.SOLVERS, which checks
this list when it is imported; the CLI's ``--solver`` offers them (``auto`` is its default)."""

Budget = Literal["time", "work"]
"""What a time limit counts. ``time``: wall-clock seconds (the default; results can move with the
machine's load). ``work``: work units (CP-SAT's deterministic time, node and check counts, counted
constructions; about a second each on an idle machine), so the same inputs give the same
schedule, value and bound on any machine; a wall-clock cap of 10 x the limit + 60 s stays as a
safety net (the report says when it fired)."""

PlacementName = Literal["loop", "v"]
"""``loop``: stage s on rank s % R. ``v``: rank r holds stages r and 2R-1-r (ZB-V)."""

Placement = Union[PlacementName, Sequence[int]]
"""A placement by name, or explicitly: ``placement[stage] = rank``."""


Implementation = Literal["hf", "torchtitan", "paper"]
"""Whose code runs a counted model, which decides what it keeps for the backward: ``hf`` (Hugging
Face transformers' modules, as NeMo AutoModel trains them), ``torchtitan`` (its own model code),
``paper`` (the textbook count). The CLI's ``--impl``."""

UnitNames = Literal["torchtitan", "hf"]
"""The module names of a per-unit profile's units: torchtitan's (``tok_embeddings``, ``layers.N``,
``norm``, ``lm_head``) or Hugging Face / NeMo AutoModel's (``model.embed_tokens``, ...). These two
are built in; a framework registered with a vocabulary of its own (``Framework.names``) adds its
name to ``schedc.model_costs.UNIT_NAMES``, which the front doors check at run time."""

CountedDevice = Literal["cuda", "cpu"]
"""Whose kernels a counted profile follows: CUDA's, or the CPU's (to compare with CPU measurements)."""


class Status(str, Enum):
    """How sure a compiled result is. A ``str`` enum: ``Status.OPTIMAL == "optimal"``."""

    OPTIMAL = "optimal"
    """A lower bound proves that no schedule under the same rules is shorter."""
    FEASIBLE = "feasible"
    """A solver answered, but the gap to the best proven bound is open."""
    HEURISTIC = "heuristic"
    """The warm start (heuristic or a hand-made schedule); no solver answered in time."""
    NONE = "none"
    """An engine's answer when it found nothing (schedc.solver.engine); never a compile's."""

    def __str__(self) -> str:
        return self.value


def check_choice(parameter: str, value: Any, choices: Any) -> Any:
    """Return `value` when it is a member of `choices` (a ``Literal`` type or a sequence).

    Parameters
    ----------
    parameter : str
        The parameter's name, for the message.
    value : object
        What the caller passed.
    choices : Literal type or sequence
        The allowed values.

    Returns
    -------
    object
        `value`, unchanged.

    Raises
    ------
    SchedcError
        When `value` is not one of `choices`: one line naming `parameter`, the members and `value`.
    """
    allowed = get_args(choices) or tuple(choices)
    if not isinstance(value, (str, int)) or isinstance(value, bool) or value not in allowed:
        members = ", ".join(repr(a) for a in allowed)
        raise SchedcError(f"{parameter}: must be one of {members}; got {value!r}")
    return value
