"""schedc: a pipeline-schedule compiler for PyTorch training.

The README's workflow from one import::

    import schedc

    prof = schedc.Profile.uniform(4, 1, 1.1, 0.9, comm=0.1)     # or schedc.Profile.load("prof.json")
    res = schedc.compile(stages=4, microbatches=16, profile=prof, memory="1.5p", time_limit=30)
    schedc.write_csv(res.schedule, "s.csv", report=res.report)
    sim = schedc.simulate(schedc.baseline("zb-h1", stages=4, microbatches=16), profile=prof)

Functions (:mod:`schedc.api`): :func:`compile`, :func:`simulate`, :func:`validate`,
:func:`baseline`, :func:`plot`, :func:`read_csv`, :func:`write_csv`, :func:`read_report`;
:func:`plan` (:mod:`schedc.plan`) chooses the partition of a per-unit profile too.
Results (:mod:`schedc.results`) are frozen; choices (:mod:`schedc.choices`) are ``Literal`` types
and the :class:`Status` enum. Running a CSV in torch and profiling a model live in
:mod:`schedc.runtime` (needs ``pip install 'schedc[torch]'``). Importing schedc loads neither
torch nor the solvers nor matplotlib; those load on the first call that needs them.
"""

from schedc._version import __version__

# schedc.plan is a package and a front-door function: imported first, so that the attribute its
# import sets on the package is replaced below once and for all (a later import finds it in
# sys.modules and sets nothing); its submodules then hang on the function (_reach_submodules).
from schedc import plan as _plan_module

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
from schedc.errors import SchedcError
from schedc.core.ir import Action, Schedule
from schedc.plan import PlanResult, plan
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


def _reach_submodules(front, package) -> None:
    """Hang each submodule of `package` on `front`, the function that took the package's name.

    ``import schedc.plan.ac as a`` imports the module, then reads ``schedc.plan`` and ``.ac`` as
    attributes: ``schedc.plan`` is the function, so without these it fails ("cannot import name
    'ac' from 'plan'"). Every submodule is loaded by the package already (none needs torch)."""
    import importlib
    import pkgutil

    for sub in pkgutil.iter_modules(package.__path__):
        setattr(front, sub.name, importlib.import_module(f"{package.__name__}.{sub.name}"))


_reach_submodules(plan, _plan_module)
del _plan_module, _reach_submodules
