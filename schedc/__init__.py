"""schedc: a pipeline-schedule compiler for PyTorch training.

The README's workflow from one import::

    import schedc

    prof = schedc.Profile.uniform(4, 1, 1.1, 0.9, comm=0.1)     # or schedc.Profile.load("prof.json")
    res = schedc.compile(stages=4, microbatches=16, profile=prof, memory="1.5p", time_limit=30)
    schedc.write_csv(res.schedule, "s.csv", report=res.report)
    sim = schedc.simulate(schedc.baseline("zb-h1", stages=4, microbatches=16), profile=prof)

Functions (:mod:`schedc.api`): :func:`compile`, :func:`simulate`, :func:`validate`,
:func:`baseline`, :func:`plot`, :func:`read_csv`, :func:`write_csv`, :func:`read_report`;
:func:`plan` (:mod:`schedc.planning`) chooses the partition of a per-unit profile too.
Results (:mod:`schedc.results`) are frozen; choices (:mod:`schedc.choices`) are ``Literal`` types
and the :class:`Status` enum. Running a CSV in torch and profiling a model live in
:mod:`schedc.runtime` (needs ``pip install 'schedc[torch]'``). Importing schedc loads neither
torch nor the solvers nor matplotlib; those load on the first call that needs them.
"""

from schedc._version import __version__
from schedc.api import (
    BASELINES,
    baseline,
    compile,
    count_profile,
    plot,
    read_csv,
    read_report,
    simulate,
    validate,
    write_csv,
    write_trace,
)
from schedc.choices import Execution, Objective, Placement, Solver, Status
from schedc.core.costs import MemoryLimit, Profile, StageCost
from schedc.core.ir import Action, Schedule
from schedc.errors import SchedcError
from schedc.planning import PlanResult, plan
from schedc.results import ActionTime, BaselineResult, Compiled, Report, Simulation

__all__ = [
    # functions
    "compile",
    "simulate",
    "validate",
    "baseline",
    "plot",
    "write_trace",
    "count_profile",
    "read_csv",
    "write_csv",
    "read_report",
    "plan",
    "BASELINES",
    # inputs
    "Profile",
    "StageCost",
    "MemoryLimit",
    "Schedule",
    "Action",
    # results
    "Compiled",
    "Simulation",
    "ActionTime",
    "BaselineResult",
    "Report",
    "PlanResult",
    # choices
    "Status",
    "Objective",
    "Execution",
    "Solver",
    "Placement",
    # errors
    "SchedcError",
]

