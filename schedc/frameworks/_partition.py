"""Is a CSV launched on the partition it was planned for?

A plan's CSV is only as fast, and only fits its cap, on the partition ``schedc plan`` chose (its
report's ``"partition"``); a framework given the CSV without that partition builds its own split.
Cost: reading the CSV and one or two small JSON files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, TypeGuard, Union

from schedc.errors import ParameterError, literal, python_spelling
from schedc.frameworks._fit import partition_in


def plan_partition_of(csv: Union[str, Path]) -> Optional[tuple[list[list[str]], Path]]:
    """The partition a CSV was made for, with the file that says so: a plan report beside it
    (``NAME.json`` with ``"partition"``), else the per-stage costs beside it (``NAME.profile.json``,
    or the report's ``inputs.costs``) when every stage names its modules; None when nothing does."""
    from schedc.io import csvio
    from schedc.io.fileio import read_json

    report_file = csvio.report_path(csv)
    report = csvio.read_report(csv) if report_file.is_file() else {}  # checks the recorded CSV hash
    partition = report.get("partition")
    if _is_partition(partition):
        return partition, report_file
    profile_file = Path(csv).with_suffix(".profile.json")
    if profile_file.is_file():
        costs = read_json(profile_file, "per-stage costs")
        found = _modules(costs)
        return (found, profile_file) if found else None
    found = _modules((report.get("inputs") or {}).get("costs"))
    return (found, report_file) if found else None


def _is_report_of(partition_file: Union[str, Path], csv: Union[str, Path]) -> bool:
    """Whether `partition_file` is the report written with this very CSV (it records the CSV's SHA-256)."""
    from schedc.io import csvio
    from schedc.io.fileio import read_json

    data = read_json(partition_file, "a partition")
    recorded = data.get(csvio.CSV_HASH_KEY) if isinstance(data, dict) else None
    return isinstance(recorded, str) and recorded == csvio.csv_sha256(Path(csv).read_bytes())


def _is_partition(value) -> TypeGuard[list[list[str]]]:
    return isinstance(value, list) and bool(value) and all(
        isinstance(stage, list) and stage and all(isinstance(m, str) for m in stage) for stage in value)


def _modules(costs) -> Optional[list[list[str]]]:
    stages = costs.get("stages") if isinstance(costs, dict) else None
    found = [stage.get("modules") for stage in stages] if isinstance(stages, list) and all(
        isinstance(stage, dict) for stage in stages) else None
    return found if _is_partition(found) else None


def sizes(partition: list[list[str]]) -> str:
    """'[5, 4, 4, 3] modules per stage'."""
    return f"[{', '.join(str(len(stage)) for stage in partition)}] modules per stage"


@python_spelling
def check_partition(csv: Union[str, Path], n_stages: int, partition_file: Union[str, Path]) -> str:
    """One line saying the CSV (of ``n_stages`` stages) is launched on the partition in
    ``partition_file``; a ParameterError (``partition_file``, the CLI's ``--partition``) when it
    has another stage count or was planned for another one."""
    partition = partition_in(partition_file, "partition_file")
    if len(partition) != n_stages:
        raise ParameterError("partition_file", f"{{name}}{literal(partition_file)}: {len(partition)} stages, but "
                             f"{literal(csv)} has {n_stages}; give the plan report written with this CSV",
                             flag="--partition")
    own = plan_partition_of(csv)
    if own is None and not _is_report_of(partition_file, csv):
        # a stage count alone matches many splits: passing here let a CSV of one plan launch on another's
        raise ParameterError("partition_file", f"{{name}}{literal(partition_file)}: nothing says which partition "
                             f"{literal(csv)} was made for; keep the plan report {literal(Path(csv).stem)}.json (or "
                             f"{literal(Path(csv).stem)}.profile.json) that `schedc plan` wrote beside it, or give "
                             "the plan report written with this CSV", flag="--partition")
    if own is not None and own[0] != partition:
        raise ParameterError("partition_file", f"{{name}}{literal(partition_file)}: {literal(csv)} was made for the "
                             f"partition in {literal(own[1])} ({sizes(own[0])}), not this one ({sizes(partition)}); "
                             f"launch it with {{name}}{literal(own[1])}", flag="--partition")
    return f"launched on the partition of {partition_file} ({sizes(partition)})"


def is_default_split(framework: str, partition: list[list[str]], **settings) -> bool:
    """Does ``framework`` build this partition by itself (without ``module_fqns_per_model_part``)
    under ``settings`` (layers_per_stage, first_less, last_less)? Compared in its own module names."""
    from schedc.frameworks._names import in_own_names
    from schedc.frameworks._registry import REGISTRY

    f = REGISTRY[framework]
    own = in_own_names(partition, f.vocabulary, f.label)[0]
    prefix = f.unit_names[1].split("{}")[0]
    layers = sum(name.startswith(prefix) for stage in own for name in stage)
    return own == f.default_split(len(own), layers, **settings)
