"""Run a function on N gloo ranks in subprocesses, with a deadline; never hang a test run.

``run_ranks(fn, world_size, timeout=..., **kwargs)`` starts ``world_size`` Python processes (this
file as a script), each of which joins a gloo process group on a free localhost port (process-
group timeout a little under the deadline), calls ``fn(rank, world_size, **kwargs)`` and writes
its JSON-serialisable return value, or the SchedcError / exception it raised, to a file. The
parent waits until the deadline, kills every rank still running, and returns one result per
rank: ``{"ok": value}`` or ``{"error": message, "type": exception class name, "seconds": t}``.
A rank that crashed or timed out raises AssertionError with its stderr tail.

``fn`` must be a module-level function of an importable file (it is loaded by file path).
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    # One thread per rank: the ranks share a few cores, and oversubscription makes gloo slow.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.update(extra or {})
    return env


def run_ranks(
    fn: Callable[..., Any], world_size: int, timeout: float = 90.0, **kwargs: Any
) -> list[dict]:
    source = Path(sys.modules[fn.__module__].__file__).resolve()
    port = free_port()
    pg_timeout = max(5.0, timeout - 10.0)
    with tempfile.TemporaryDirectory(prefix="schedc-dist-") as tmp:
        args_file = Path(tmp) / "args.json"
        args_file.write_text(json.dumps(kwargs))
        procs, logs = [], []
        for rank in range(world_size):
            log = open(Path(tmp) / f"rank{rank}.log", "w+")
            logs.append(log)
            cmd = [
                sys.executable, str(Path(__file__).resolve()), str(source), fn.__name__,
                str(rank), str(world_size), str(port), str(args_file),
                str(Path(tmp) / f"rank{rank}.json"), str(pg_timeout),
            ]
            procs.append(
                subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=worker_env())
            )
        deadline = time.monotonic() + timeout
        try:
            for p in procs:
                remaining = deadline - time.monotonic()
                try:
                    p.wait(timeout=max(0.1, remaining))
                except subprocess.TimeoutExpired:
                    pass
        finally:
            timed_out = [r for r, p in enumerate(procs) if p.poll() is None]
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        results = []
        for rank, (p, log) in enumerate(zip(procs, logs)):
            log.seek(0)
            tail = log.read()[-3000:]
            log.close()
            out = Path(tmp) / f"rank{rank}.json"
            if rank in timed_out:
                raise AssertionError(f"rank {rank} still running after {timeout:.0f}s; log:\n{tail}")
            if p.returncode != 0 or not out.exists():
                raise AssertionError(f"rank {rank} exited with {p.returncode}; log:\n{tail}")
            results.append(json.loads(out.read_text()))
        return results


def capture(fn: Callable[[], Any]) -> dict:
    """Run ``fn`` on a rank; ``{"ok": value}`` or the error it raised, with the time taken."""
    t0 = time.monotonic()
    try:
        return {"ok": fn(), "seconds": time.monotonic() - t0}
    except Exception as e:  # noqa: BLE001 - reported to the parent, which asserts on it
        return {
            "error": str(e), "type": type(e).__name__, "seconds": time.monotonic() - t0,
            "traceback": traceback.format_exc()[-2000:],
        }


def _main(argv: list[str]) -> int:
    source, name, rank, world, port, args_file, out_file, pg_timeout = argv
    rank, world = int(rank), int(world)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location(f"_dist_target_{Path(source).stem}", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=float(pg_timeout)),
    )
    try:
        result = capture(lambda: fn(rank, world, **json.loads(Path(args_file).read_text())))
    finally:
        dist.destroy_process_group()
    Path(out_file).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
