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

Cost: process start-up (an interpreter and whatever the rank imports) per rank, in parallel.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from schedc.errors import SchedcError

ROOT = Path(__file__).resolve().parents[2]  # the directory that holds the schedc package
POLL_SECONDS = 0.05
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
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
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
    with tempfile.TemporaryDirectory(prefix="schedc-launch-") as tmp:
        tmpdir = Path(tmp)
        (tmpdir / "spec.json").write_text(json.dumps(spec))
        procs, logs = _start(cmd, n_ranks, tmpdir, timeout, threads, env)
        try:
            exited_at, deadline_hit = _wait(procs, timeout, grace)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        return _collect(procs, logs, tmpdir, exited_at, deadline_hit, timeout, label, hint)


def _start(cmd, n_ranks, tmpdir: Path, timeout, threads, env) -> tuple[list[subprocess.Popen], list]:
    port = str(free_port())
    procs, logs = [], []
    try:
        for rank in range(n_ranks):
            rank_env = worker_env(env, threads)
            rank_env.update(
                RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n_ranks),
                LOCAL_WORLD_SIZE=str(n_ranks), MASTER_PORT=port,
                SCHEDC_SPEC=str(tmpdir / "spec.json"), SCHEDC_RESULT=str(tmpdir / f"rank{rank}.json"),
                SCHEDC_PG_TIMEOUT=str(max(5.0, timeout - 10.0)),
            )
            log = open(tmpdir / f"rank{rank}.log", "w+")
            logs.append(log)
            procs.append(subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=rank_env,
                                          stdin=subprocess.DEVNULL))
    except BaseException:
        for p in procs:
            p.kill()
            p.wait()
        for log in logs:
            log.close()
        raise
    return procs, logs


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


def init_group(backend: str = "gloo") -> None:
    """Join the launch's process group (torchrun's env), timeout a little under the deadline."""
    import datetime

    import torch.distributed as dist

    seconds = float(os.environ.get("SCHEDC_PG_TIMEOUT", "120"))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=seconds))


def run_rank(fn: Callable[[], Any], full_error: bool = False) -> int:
    """Run ``fn`` in this rank and hand its JSON-serialisable value (or its error, one line;
    with ``full_error`` the whole message) to the parent; the exit code to return.

    A SchedcError's message is the user's; any other exception is prefixed by its type."""
    try:
        result = {"ok": fn()}
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises LaunchError
        text = str(e) if isinstance(e, SchedcError) else f"{type(e).__name__}: {e}"
        result = {"error": text if full_error else (text.strip().splitlines() or [""])[0][:1000]}
        traceback.print_exc()
    _write_result(result)
    return 0 if "ok" in result else 1


def _write_result(result: dict) -> None:
    out = Path(os.environ["SCHEDC_RESULT"])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, out)


def python_module(module: str) -> list[str]:
    """The command that runs ``python -m module`` with this interpreter."""
    return [sys.executable, "-m", module]
