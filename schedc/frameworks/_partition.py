"""Is a CSV launched on the partition it was planned for?

A plan's CSV is only as fast, and only fits its cap, on the partition ``schedc plan`` chose (its
report's ``"partition"``); a framework given the CSV without that partition builds its own split.
Cost: reading the CSV and one or two small JSON files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from schedc.errors import SchedcError
from schedc.frameworks._fit import read_partition


def plan_partition_of(csv: Union[str, Path]) -> Optional[tuple[list[list[str]], Path]]:
    """The partition a plan report beside the CSV (``NAME.json`` from ``schedc plan``) names, with the
    report's path; None when there is no report or it is not a plan's."""
    from schedc import csvio

    report_file = csvio.report_path(csv)
    if not report_file.is_file():
        return None
    report = csvio.read_report(csv)  # refuses a report whose recorded CSV hash is not this CSV's
    partition = report.get("partition")
    return (partition, report_file) if isinstance(partition, list) and partition else None


def sizes(partition: list[list[str]]) -> str:
    """'[5, 4, 4, 3] modules per stage'."""
    return f"[{', '.join(str(len(stage)) for stage in partition)}] modules per stage"


def check_partition(csv: Union[str, Path], n_stages: int, partition_file: Union[str, Path]) -> str:
    """One line saying the CSV (of ``n_stages`` stages) is launched on the partition in
    ``partition_file``; SchedcError when it has another stage count or was planned for another one."""
    partition = read_partition(partition_file)
    if len(partition) != n_stages:
        raise SchedcError(f"--partition {partition_file}: {len(partition)} stages, but {csv} has {n_stages}; "
                          "give the plan report written with this CSV")
    own = plan_partition_of(csv)
    if own is not None and own[0] != partition:
        raise SchedcError(f"{csv} was planned for the partition in {own[1]} ({sizes(own[0])}), not the one in "
                          f"--partition {partition_file} ({sizes(partition)}); launch it with --partition {own[1]}")
    return f"launched on the partition of {partition_file} ({sizes(partition)})"
