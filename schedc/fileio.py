"""Writing output files all-or-nothing: write a temporary file beside the target, then rename;
checking output places before long work starts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Union


def atomic_write_text(path: Union[str, Path], text: str) -> None:
    atomic_write_bytes(path, text.encode())


def _default_mode() -> int:
    # mkstemp creates files readable by their owner only; outputs should get the usual umask mode.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _temp_beside(path: Path) -> tuple[int, str]:
    directory = path.parent if str(path.parent) else Path(".")
    try:
        return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as e:  # name the file the user asked for, not our temporary one
        raise OSError(e.errno, e.strerror, str(path)) from None


def atomic_write_bytes(path: Union[str, Path], data: bytes) -> None:
    write_all({path: data})


def check_writable(path: Union[str, Path], option: str) -> None:
    """Fail now, before any long work, when `path` cannot be written: its directory is missing or
    read-only, or the path is a directory. `option` names the flag in the message."""
    from schedc.errors import SchedcError

    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise SchedcError(f"{option} {path}: is a directory; give a file name")
    if directory.exists() and not directory.is_dir():
        raise SchedcError(f"{option} {path}: {directory} is a file, not a directory")
    if not directory.is_dir():
        raise SchedcError(f"{option} {path}: directory {directory} does not exist; create it first (mkdir -p {directory})")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise SchedcError(f"{option} {path}: directory {directory} is not writable; choose another place")
    if path.exists() and not os.access(path, os.W_OK):
        raise SchedcError(f"{option} {path}: the file exists and is read-only; remove it or choose another name")


def write_all(files: dict[Union[str, Path], bytes]) -> None:
    """Write several files all-or-nothing: every one goes to a temporary file beside its target
    first; only when all are written are they renamed into place, so a failure leaves none."""
    temps: list[tuple[str, Path]] = []
    try:
        for path, data in files.items():
            path = Path(path)
            fd, tmp = _temp_beside(path)
            temps.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, _default_mode())
        for tmp, path in temps:
            os.replace(tmp, path)
    finally:
        for tmp, _ in temps:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
