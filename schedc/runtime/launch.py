"""Start N local ranks, wait with a deadline, collect what each returned: the one local launcher.

Problem: calibrate, the profiler's concurrent mode, emulate and the distributed tests all start
several Python processes on this host, and each must never hang: a rank that fails leaves its
peers blocked in a collective, a deadlocking schedule blocks every rank in recv, and a process
that never ends would stall a test run or a user's terminal.

Method: :func:`launch` starts ``cmd`` once per rank with the environment ``torchrun`` gives
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT`` on a free port) plus ``PYTHONPATH`` (this checkout first),
``OMP_NUM_THREADS`` (one thread per rank by default: the ranks share the host's cores and
oversubscription makes gloo slow) and ``GLOO_SOCKET_IFNAME=lo``. A rank learns where to read its
input and write its result from ``SCHEDC_SPEC`` / ``SCHEDC_RESULT``; inside it,
:func:`read_spec`, :func:`init_group` (process-group timeout a little under the deadline) and
:func:`run_rank` (writes ``{"ok": value}`` or ``{"error": one line}`` atomically) do the rest.
The parent polls: once a rank has failed its peers get ``grace`` seconds to fail on their own,
then every rank still running is killed, as is every rank still running at the deadline.
Failures become one :class:`LaunchError` naming the rank that failed first (by the time its
failure was seen; a rank that only lost its peer connection is named only when no rank reported
its own error) with its message or the last line of its output; ``.log_tail`` keeps the
rank's whole output tail for tests and ``--debug``.

Ranks never outlive their leader and never run code from the working directory:

- :func:`python_module` starts a rank with the working directory off ``sys.path`` (``-P`` on
  Python >= 3.11; a bootstrap that drops ``''`` from the path on 3.10), and the inherited
  ``PYTHONPATH`` loses its empty entries (``PYTHONPATH=$PYTHONPATH:/x`` with nothing set means
  the working directory), so a ``torch.py`` or ``pydantic.py`` where the user stands is never
  imported by a rank.
- Each rank runs in its own session (a process group the leader kills whole, so what a rank
  started dies too) and asks the kernel for SIGKILL when its leader dies (``PR_SET_PDEATHSIG``
  on Linux; elsewhere a thread watching the parent pid), so killing the leader, even with
  SIGKILL, ends every rank at once instead of leaving them to time out in a collective.
- The launch directory (``schedc-launch-*`` in the temp directory) holds the spec, the logs and
  the results; the leader removes it on every exit path it sees. While a launch runs
  with the default SIGTERM action, SIGTERM is turned into :class:`~schedc.errors.Terminated`
  so the ranks are killed and the directory removed, then the signal is delivered again. A
  leader killed outright (SIGKILL) cannot clean up: its directory is held by an ``flock`` on
  ``leader.lock`` while it lives, and the next launch removes directories whose lock is free.

Cost: process start-up (an interpreter and whatever the rank imports) per rank, in parallel.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from schedc.errors import SchedcError, Terminated, printable, raise_terminated, signals_held

ROOT = Path(__file__).resolve().parents[2]  # the directory that holds the schedc package
POLL_SECONDS = 0.05
# torch keeps a process group's timeout in milliseconds of a C int in places (about 24.8 days): a
# longer launch deadline gets a group timeout of three weeks, not an OverflowError in every rank
MAX_GROUP_TIMEOUT = 21 * 86400.0
DIR_PREFIX = "schedc-launch-"
LOCK_NAME = "leader.lock"
# peers of a failed rank typically fail with a connection error of their own: say those last
_PEER_SYMPTOMS = ("Connection", "connection", "peer", "Broken pipe", "stopped after")


class LaunchError(SchedcError):
    """A rank failed or ran past the deadline. ``str(e)`` is one line; ``rank`` names the rank,
    ``log_tail`` holds the end of its output (stdout and stderr)."""

    def __init__(self, message: str, rank: int, log_tail: str = ""):
        super().__init__(message)
        self.rank = rank
        self.log_tail = log_tail


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(extra: Optional[dict[str, str]] = None, threads: Optional[int] = 1) -> dict[str, str]:
    """This process's environment as a rank needs it (see the module docstring); ``extra`` wins."""
    env = dict(os.environ)
    # an empty entry means the working directory: keep only the named ones
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if threads:  # None: keep the caller's OMP_NUM_THREADS
        env["OMP_NUM_THREADS"] = str(threads)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.update(extra or {})
    return env


def launch(
    cmd: Sequence[str],
    n_ranks: int,
    *,
    timeout: float,
    spec: Any = None,
    label: str = "launch",
    threads: Optional[int] = 1,
    env: Optional[dict[str, str]] = None,
    grace: float = 5.0,
    hint: str = "raise --timeout",
) -> list[Any]:
    """Run ``cmd`` as ranks 0..n_ranks-1 and return each rank's value (what it passed to
    :func:`run_rank`), in rank order. ``spec`` (JSON-serialisable) is what :func:`read_spec`
    returns inside every rank. Raises :class:`LaunchError` (message prefixed by ``label``) when
    a rank fails, exits without a result or is still running at ``timeout`` seconds."""
    if n_ranks < 1:
        raise SchedcError(f"{label}: need at least one rank, got {n_ranks}")
    if not 0 < timeout < float("inf"):  # nan or inf: a deadline that never fires
        raise SchedcError(f"{label}: the timeout must be a finite number of seconds > 0, got {timeout!r}")
    remove_stale_dirs()
    with _sigterm_cleans_up(), _launch_dir() as tmpdir:
        (tmpdir / "spec.json").write_text(json.dumps(spec))
        procs: list[subprocess.Popen] = []  # filled as the ranks start, so a signal at any point finds them
        logs: list = []
        try:
            _start(cmd, n_ranks, tmpdir, timeout, threads, env, procs, logs)
            exited_at, deadline_hit = _wait(procs, timeout, grace)
        except BaseException:
            for log in logs:
                log.close()
            raise
        finally:  # also on Ctrl-C and SIGTERM: nothing of this launch stays behind
            _kill_all(procs)
        return _collect(procs, logs, tmpdir, exited_at, deadline_hit, timeout, label, hint)


@contextmanager
def _launch_dir() -> Iterator[Path]:
    """A private directory, locked by this leader while it lives and removed on the way out."""
    tmpdir = Path(tempfile.mkdtemp(prefix=DIR_PREFIX))
    lock = None
    try:
        # locked before it takes its name: another launch's sweep never sees it unlocked
        lock = open(tmpdir / (LOCK_NAME + ".new"), "w")
        _try_lock(lock)
        os.rename(tmpdir / (LOCK_NAME + ".new"), tmpdir / LOCK_NAME)
        yield tmpdir
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
        if lock is not None:
            lock.close()


def _try_lock(f) -> bool:
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, nothing is ever taken for stale
        return False
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def remove_stale_dirs(where: Optional[str] = None) -> list[Path]:
    """Remove launch directories (in ``where``, default the temp directory) whose leader died
    without cleaning up: their ``leader.lock`` is not held. Returns what was removed."""
    removed: list[Path] = []
    root = Path(where or tempfile.gettempdir())
    try:
        candidates = [d for d in root.glob(DIR_PREFIX + "*") if d.is_dir() and not d.is_symlink()]
    except OSError:
        return removed
    for d in candidates:
        try:
            if d.stat().st_uid != os.getuid():
                continue
            with open(d / LOCK_NAME, "r") as f:  # a fresh directory has no lock file yet: skipped
                if not _try_lock(f):
                    continue
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
        except OSError:
            continue
    return removed


@contextmanager
def _sigterm_cleans_up() -> Iterator[None]:
    """With the default SIGTERM action (a script calling :func:`launch`; the CLI installs its own
    handler), turn SIGTERM into an exception while the ranks run, so that they are killed and
    the launch directory removed, then die of the signal as the caller expected."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    except Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _kill_all(procs: list[subprocess.Popen]) -> None:
    """Kill each rank still running with everything it started (its session), and reap it."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                p.kill()
    for p in procs:
        try:
            p.wait()
        except BaseException:  # a second Ctrl-C: the ranks are dead or dying, go on
            pass


def _start(cmd, n_ranks, tmpdir: Path, timeout, threads, env, procs: list[subprocess.Popen], logs: list) -> None:
    """Start the ranks, appending each to `procs` (and its log to `logs`) as it starts."""
    port = str(free_port())
    for rank in range(n_ranks):
        rank_env = worker_env(env, threads)
        rank_env.update(
            RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n_ranks),
            LOCAL_WORLD_SIZE=str(n_ranks), MASTER_PORT=port,
            SCHEDC_SPEC=str(tmpdir / "spec.json"), SCHEDC_RESULT=str(tmpdir / f"rank{rank}.json"),
            SCHEDC_PG_TIMEOUT=str(min(MAX_GROUP_TIMEOUT, max(5.0, timeout - 10.0))), SCHEDC_LEADER_PID=str(os.getpid()),
        )
        log = open(tmpdir / f"rank{rank}.log", "w+")
        logs.append(log)
        # a signal after the fork and before Popen returns would lose the rank: none kills it
        with signals_held(signal.SIGINT, signal.SIGTERM):
            procs.append(subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=rank_env,
                                          stdin=subprocess.DEVNULL, start_new_session=True))


def _wait(procs: list[subprocess.Popen], timeout: float, grace: float) -> tuple[dict[int, float], bool]:
    """Poll until all exit, a failure's grace period ends, or the deadline; when each exited."""
    start = time.monotonic()
    deadline = start + timeout
    exited_at: dict[int, float] = {}
    failed_at: Optional[float] = None
    while len(exited_at) < len(procs):
        now = time.monotonic()
        for rank, p in enumerate(procs):
            if rank not in exited_at and p.poll() is not None:
                exited_at[rank] = now - start
                if p.returncode != 0 and failed_at is None:
                    failed_at = now
        if len(exited_at) == len(procs):
            break
        if now >= deadline:
            return exited_at, True
        if failed_at is not None and now - failed_at > grace:
            break
        time.sleep(POLL_SECONDS)
    return exited_at, False


def _collect(procs, logs, tmpdir: Path, exited_at, deadline_hit, timeout, label, hint) -> list[Any]:
    values, failures = [], []  # failure: (own error?, exit time, rank, message, tail)
    for rank, (p, log) in enumerate(zip(procs, logs)):
        log.seek(0)
        tail = log.read()[-4000:]
        log.close()
        result = _read_result(tmpdir / f"rank{rank}.json")
        when = exited_at.get(rank, float("inf"))
        if result is not None and "ok" in result:
            values.append(result["ok"])
        elif result is not None:
            own = not any(s in result["error"] for s in _PEER_SYMPTOMS)
            failures.append((own, when, rank, result["error"], tail))
        elif rank not in exited_at:
            why = (f"still running after {timeout:g}s, killed ({hint})" if deadline_hit
                   else "stopped after another rank failed")
            failures.append((False, when, rank, why, tail))
        else:
            last = _last_line(tail)
            failures.append((True, when, rank, f"exited with code {p.returncode}"
                             + (f": {last}" if last else " and no output"), tail))
    if failures:
        own, when, rank, message, tail = min(failures, key=lambda f: (not f[0], f[1], f[2]))
        raise LaunchError(f"{label}: rank {rank}: {message}", rank, tail)
    return values


def _read_result(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


# ---------------------------------------------------------------- inside a launched rank


def rank() -> int:
    return int(os.environ["RANK"])


def world_size() -> int:
    return int(os.environ["WORLD_SIZE"])


def read_spec() -> Any:
    """What the parent passed to :func:`launch` as ``spec``."""
    return json.loads(Path(os.environ["SCHEDC_SPEC"]).read_text())


def init_group(backend: str = "gloo", timeout: Optional[float] = None):
    """Join the launch's process group (torchrun's env; timeout a little under the deadline) and
    return this rank's device. On NCCL the rank's GPU is ``LOCAL_RANK`` (else ``RANK``): it is made
    current *before* the group starts and passed as ``device_id``, so NCCL binds the right GPU
    instead of guessing from the global rank (which can hang), and a rank without a GPU of its own
    is one line naming the GPUs, before any collective."""
    import datetime

    import torch
    import torch.distributed as dist

    seconds = timeout if timeout is not None else float(os.environ.get("SCHEDC_PG_TIMEOUT", "120"))
    kwargs: dict = {"timeout": datetime.timedelta(seconds=seconds)}
    device = torch.device("cpu")
    if backend == "nccl":
        device = rank_cuda_device()
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    dist.init_process_group(backend, **kwargs)
    return device


def rank_cuda_device():
    """``cuda:LOCAL_RANK`` for this rank, or a SchedcError naming the GPUs when there are fewer."""
    import torch

    from schedc.errors import SchedcError

    local = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if local >= count:
        have = f"cuda:0..cuda:{count - 1}" if count else "none"
        raise SchedcError(f"rank {os.environ.get('RANK', local)} (local rank {local}) needs its own GPU but this "
                          f"machine has {count} ({have}); start at most {count} rank(s) per machine "
                          f"(--nproc-per-node {count}) or use gloo on CPU")
    return torch.device("cuda", local)


_bound = False  # die_with_leader() already ran in this process


def die_with_leader() -> None:
    """In a rank: be killed as soon as the leader (the process that launched it) dies.

    Linux: the kernel sends SIGKILL on the parent's death (``PR_SET_PDEATHSIG``); elsewhere a
    daemon thread polls the parent pid. Either way a leader already gone ends the rank here."""
    global _bound
    leader = int(os.environ.get("SCHEDC_LEADER_PID", "0"))
    if not leader or _bound:
        return
    _bound = True
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            armed = libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != leader:  # it died before the kernel was asked to tell us
        os._exit(1)
    if not armed:
        def watch() -> None:
            while os.getppid() == leader:
                time.sleep(0.2)
            os._exit(1)

        threading.Thread(target=watch, name="schedc-leader-watch", daemon=True).start()


def run_rank(fn: Callable[[], Any], full_error: bool = False) -> int:
    """Run ``fn`` in this rank and hand its JSON-serialisable value (or its error, one line;
    with ``full_error`` the whole message) to the parent; the exit code to return.

    A SchedcError's message is the user's; any other exception is prefixed by its type."""
    die_with_leader()
    try:
        result = {"ok": fn()}
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises LaunchError
        text = printable(e) if isinstance(e, SchedcError) else f"{type(e).__name__}: {e}"  # one line, all of it
        result = {"error": text if full_error else (text.strip().splitlines() or [""])[0][:1000]}
        traceback.print_exc()
    _write_result(result)
    return 0 if "ok" in result else 1


def _write_result(result: dict) -> None:
    out = Path(os.environ["SCHEDC_RESULT"])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, out)


# Python 3.10 has no -P: drop the '' (working directory) that -c puts first, then run the module
_RUN_MODULE = ("import sys\nif sys.path and sys.path[0] == '': del sys.path[0]\n"
               "from schedc.runtime.launch import _run_module\n_run_module()")
# run before the rank's own code, whatever imports it starts with
_SAFE_PREFIX = "import sys\nif sys.path and sys.path[0] == '': del sys.path[0]\n"


def _safe_flag() -> list[str]:
    return ["-P"] if sys.version_info >= (3, 11) else []


def python_module(module: str) -> list[str]:
    """The command that runs ``module`` as ``__main__`` (like ``python -m``) with this interpreter,
    the working directory not on ``sys.path`` and the rank bound to its leader from the start."""
    return [sys.executable, *_safe_flag(), "-c", _RUN_MODULE, module]


def python_code(code: str) -> list[str]:
    """The command that runs ``code`` (like ``python -c``), the working directory not on ``sys.path``."""
    return [sys.executable, *_safe_flag(), "-c", _SAFE_PREFIX + code]


def _run_module() -> None:
    import runpy

    module = sys.argv[1]
    del sys.argv[1]
    die_with_leader()
    runpy.run_module(module, run_name="__main__", alter_sys=True)
