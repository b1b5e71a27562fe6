"""Reading inputs with a size bound, and writing outputs all-or-nothing without harming what is there.

Reading (:func:`read_input`): only regular files, at most ``limits.MAX_INPUT_BYTES``. A FIFO, a
terminal or ``/dev/zero`` would otherwise block or grow without end; each is refused in one line
(save the data to a file first).

Writing (:func:`write_all`): every file goes to a temporary file beside its target, and only when
all are written are they renamed into place, so a failure leaves none of them. What is at the
target path decides how it is replaced:

- a regular file: replaced, keeping its permission bits and (where allowed) its owner; one whose
  mode says read-only (no write bit, even for root) is refused;
- a symlink: the file it points to is written (the link stays a link);
- a character device or FIFO (``/dev/null``, ``/dev/stdout``, a pipe): written through, never
  replaced by a regular file; a FIFO that no process reads is refused after a moment instead of
  blocking; a block device, socket or directory is refused.

Temporary names cut the target's name so that any legal name (up to 255 bytes) can be written;
each is ``tempfile.mkstemp``'s (a random part, created with ``O_EXCL``), so two processes writing
one path (``baseline -o s.csv`` twice at once) never share a temporary file: the path ends up as
one writer's whole output, never a mix or a part.

:func:`check_writable` runs before long work starts, :func:`check_not_input` refuses an output
that is one of the command's inputs (``compile --profile p.json -o p.csv`` would write its report
over the profile).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, TypeVar, Union

from schedc.core import limits

PathLike = Union[str, os.PathLike[str]]  # a Path is one
# a mapping is invariant in its key: a dict of Paths or of strs is a Mapping[_P, bytes]
_P = TypeVar("_P", bound=PathLike)


def _error(message: str):
    from schedc.errors import SchedcError

    return SchedcError(message)


# ---------------------------------------------------------------- reading


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_input(path: PathLike, what: str) -> bytes:
    """The bytes of the input file `path` (`what` names it in messages, e.g. 'a CSV schedule').

    Refused in one line: a missing or unreadable path, a directory, anything but a regular file
    (it could block or never end), a file over ``limits.MAX_INPUT_BYTES``."""
    path = Path(path)
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise _error(f"{path}: is a directory, expected {what}")
        if not stat.S_ISREG(st.st_mode):
            raise _error(f"{path}: is {_kind(st.st_mode)}, not a regular file; schedc reads {what} from a "
                         f"file (save the data to one first)")
        too_big = _error(f"{path}: larger than {limits.describe_bytes(limits.MAX_INPUT_BYTES)}, more than "
                         f"{what} can hold; check that this is the right file")
        if st.st_size > limits.MAX_INPUT_BYTES:
            raise too_big
        with open(path, "rb") as f:
            data = f.read(limits.MAX_INPUT_BYTES + 1)
    except FileNotFoundError:
        raise _error(f"{path}: no such file") from None
    except NotADirectoryError:
        raise _error(f"{path}: no such file (a part of the path is not a directory)") from None
    except PermissionError:
        raise _error(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise _error(f"{path}: is a directory, expected {what}") from None
    except OSError as e:
        raise _error(f"{path}: cannot read it: {e.strerror or e}") from None
    if len(data) > limits.MAX_INPUT_BYTES:  # it grew while we read
        raise too_big
    return data


def read_json(path: PathLike, what: str) -> Any:
    """A JSON input file (`what` names it in messages), read with schedc's size bound: one line
    for bytes that are not UTF-8, invalid JSON, or nesting too deep for Python's parser."""
    raw = read_input(path, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _error(f"{path}: not UTF-8 text (byte {e.start}: {raw[e.start:e.start + 1]!r}); JSON files are "
                     "UTF-8: re-save it as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
    if text.startswith("\ufeff"):  # Windows editors add one; json.loads names only Python's way around it
        raise _error(f"{path}: starts with a UTF-8 byte-order mark (BOM), which JSON readers refuse: save the file "
                     f"without BOM (e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' {path})")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise _error(f"{path}: line {e.lineno} column {e.colno}: not valid JSON: {e.msg}") from None
    except ValueError as e:  # Python reads integers of at most 4,300 digits (sys.get_int_max_str_digits)
        raise _error(f"{path}: {_digits_message(e)}") from None
    except RecursionError:
        raise _error(f"{path}: JSON nested too deeply to read; {what} is a few levels deep: check that this "
                     "is the right file") from None


def _digits_message(e: ValueError) -> str:
    import re

    m = re.search(r"value has (\d+) digits", str(e))
    return (f"a number of {m.group(1) if m else 'over 4300'} digits, more than any count or size "
            "can be (Python reads at most 4,300); check that this is the right file")


# ---------------------------------------------------------------- writing


def atomic_write_text(path: PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    write_all({path: data})


def _default_mode() -> int:
    # mkstemp creates files readable by their owner only; new outputs get the usual umask mode.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _named(e: OSError, path: Path) -> OSError:
    """The same error, naming the file the user asked for rather than our temporary one."""
    return OSError(e.errno, e.strerror or str(e), str(path))


def _temp_beside(path: Path) -> tuple[int, str]:
    directory = path.parent if str(path.parent) else Path(".")
    try:
        # a legal name of up to NAME_MAX (255) bytes leaves no room for the temporary name's own
        # 14 characters: cut the name in it (the final name is the user's, whole)
        return tempfile.mkstemp(prefix=f".{path.name[:200]}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise _named(e, path) from None


def _resolve(path: Path) -> tuple[Path, bool]:
    """(where the bytes go, whether to write through instead of replacing). A symlink's target is
    written, not the link; a character device or FIFO is written through."""
    try:
        st = os.stat(path)  # follows symlinks
    except FileNotFoundError:
        # nothing there yet, or a dangling link: create what the link names
        return (Path(os.path.realpath(path)) if path.is_symlink() else path), False
    except OSError:
        return path, False  # let the write report it, naming the path
    if stat.S_ISREG(st.st_mode):
        if _read_only(path, st):
            raise _error(f"{path}: the file exists and is read-only (mode {stat.filemode(st.st_mode)}); "
                         "remove it, make it writable, or choose another name")
        return (Path(os.path.realpath(path)) if path.is_symlink() else path), False
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return path, True
    if stat.S_ISDIR(st.st_mode):
        raise _error(f"{path}: is a directory; give a file name")
    raise _error(f"{path}: is {_kind(st.st_mode)}; schedc writes only files, character devices and pipes")


def _not_a_directory_name(path: PathLike, option: str = "") -> None:
    """Refuse ``out/`` (Path() would drop the slash and write a file named ``out``)."""
    text = os.fspath(path)
    if text.endswith(os.sep) or bool(os.altsep and text.endswith(os.altsep)):
        raise _error(f"{option + ' ' if option else ''}{text}: ends in '/', a directory; give a file name")


def _read_only(path: Path, st: os.stat_result) -> bool:
    """Whether the file's mode says no: no write permission for us, or no write bit at all (root
    may write anything, but a 0444 file was made read-only on purpose, and it is replaced, not
    written, so the mode would not stop the rename)."""
    return not os.access(path, os.W_OK) or not st.st_mode & 0o222


def _open_through(path: Path) -> int:
    """A file descriptor to write a device or FIFO through. A FIFO no process reads would block
    the open forever: it is opened without waiting, retried for a moment (a reader may be just
    starting), then refused."""
    import errno
    import time

    deadline = time.monotonic() + 2.0
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            if time.monotonic() > deadline:
                raise _error(f"{path}: a FIFO (named pipe) that no process is reading; start its reader first "
                             "(schedc does not wait for one)") from None
            time.sleep(0.05)
            continue
        os.set_blocking(fd, True)
        return fd


def _keep_mode_and_owner(tmp: str, target: Path) -> None:
    try:
        st = os.stat(target)
    except FileNotFoundError:
        os.chmod(tmp, _default_mode())
        return
    os.chmod(tmp, stat.S_IMODE(st.st_mode))
    own = os.stat(tmp)
    if (own.st_uid, own.st_gid) != (st.st_uid, st.st_gid):
        try:
            os.chown(tmp, st.st_uid, st.st_gid)
        except PermissionError:
            pass  # only root may give a file away; the file then belongs to whoever writes it


def write_all(files: Mapping[_P, bytes]) -> None:
    """Write several files all-or-nothing (see the module docstring). Files are renamed into place
    in the order given, so a reader that sees the last one sees all of them (schedc.io.csvio writes
    a report after its CSV and records the CSV's hash in it)."""
    temps: list[tuple[str, Path]] = []
    through: list[tuple[Path, bytes]] = []
    try:
        for given, data in files.items():
            _not_a_directory_name(given)
            path = Path(given)
            target, write_through = _resolve(path)
            if write_through:
                through.append((path, data))
                continue
            fd, tmp = _temp_beside(target)
            temps.append((tmp, target))
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                _keep_mode_and_owner(tmp, target)
            except OSError as e:  # e.g. the disk is full: say which file could not be written
                raise _named(e, path) from None
        for path, data in through:
            try:
                with os.fdopen(_open_through(path), "wb") as f:  # a device or pipe: no rename over it
                    f.write(data)
            except OSError as e:
                raise _named(e, path) from None
        for tmp, target in temps:
            try:
                os.replace(tmp, target)
            except OSError as e:
                raise _named(e, target) from None
    finally:
        for tmp, _ in temps:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def check_writable(path: PathLike, option: str) -> None:
    """Fail now, before any long work, when `path` cannot be written: its directory is missing or
    read-only, the path is a directory or a node schedc does not write. `option` names the flag."""
    _not_a_directory_name(path, option)
    path = Path(path)
    if path.is_dir():
        raise _error(f"{option} {path}: is a directory; give a file name")
    try:
        target, write_through = _resolve(path)
    except Exception as e:
        raise _error(f"{option} {e}") from None
    if write_through:
        if not os.access(path, os.W_OK):
            raise _error(f"{option} {path}: not writable; choose another place")
        return
    directory = target.parent if str(target.parent) else Path(".")
    if directory.exists() and not directory.is_dir():
        raise _error(f"{option} {path}: {directory} is a file, not a directory")
    if not directory.is_dir():
        raise _error(f"{option} {path}: directory {directory} does not exist; create it first (mkdir -p {directory})")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise _error(f"{option} {path}: directory {directory} is not writable; choose another place")



def check_not_input(path: PathLike, option: str, inputs: Iterable[tuple[PathLike, str]]) -> None:
    """Refuse to write `path` when it is one of the command's inputs (the same file, also through
    a link). `inputs` pairs each input path with how the user gave it, e.g. ('p.json', '--profile')."""
    path = Path(path)
    if not path.exists():
        return
    for other, given_as in inputs:
        if other is None:
            continue
        try:
            same = os.path.samefile(path, other)
        except OSError:
            continue
        if same and os.path.isfile(path):
            raise _error(f"{option} {path} would overwrite the input {given_as} {other}; "
                         "write the output under another name")
