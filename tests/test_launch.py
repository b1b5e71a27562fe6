"""The local launcher: values come back in rank order; a failing, silent or hanging rank becomes
one line naming it, and nothing is left running."""

from __future__ import annotations

import time

import pytest

from schedc.runtime.launch import LaunchError, launch, python_code

# a rank's body, run as `python -c` (the working directory off the path): the launcher's helpers give it its rank and spec
BODY = """
import os, sys, time
from schedc.runtime import launch as L
spec = L.read_spec()
def body():
    r = L.rank()
    action = spec.get(str(r), "ok")
    if action == "raise":
        from schedc.errors import SchedcError
        raise SchedcError("x.csv: row 2 is broken; fix it")
    if action == "crash":
        print("something went wrong in C", file=sys.stderr, flush=True)
        os._exit(3)
    if action == "hang":
        time.sleep(3600)
    return {"rank": r, "world": L.world_size(), "threads": os.environ["OMP_NUM_THREADS"],
            "port": os.environ["MASTER_PORT"]}
sys.exit(L.run_rank(body))
"""


def run(spec: dict, n: int = 3, timeout: float = 30.0, grace: float = 5.0):
    return launch(python_code(BODY), n, timeout=timeout, spec=spec, label="test", grace=grace)


def test_values_come_back_in_rank_order_with_torchrun_env():
    values = run({})
    assert [v["rank"] for v in values] == [0, 1, 2]
    assert {v["world"] for v in values} == {3}
    assert {v["threads"] for v in values} == {"1"}
    assert len({v["port"] for v in values}) == 1


def test_a_rank_error_is_one_line_naming_the_rank():
    with pytest.raises(LaunchError) as e:
        run({"1": "raise"})
    assert str(e.value) == "test: rank 1: x.csv: row 2 is broken; fix it"
    assert e.value.rank == 1


def test_a_crash_names_the_rank_and_its_last_output_line():
    with pytest.raises(LaunchError, match=r"^test: rank 2: exited with code 3: something went wrong in C$"):
        run({"2": "crash"})


def test_peers_of_a_failed_rank_are_stopped_after_the_grace_period():
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match="rank 0: x.csv"):
        run({"0": "raise", "1": "hang", "2": "hang"}, timeout=60, grace=0.5)
    assert time.monotonic() - t0 < 20


def test_a_hanging_rank_is_killed_at_the_deadline():
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"^test: rank 1: still running after 2s, killed \(raise --timeout\)$"):
        run({"1": "hang"}, n=2, timeout=2)
    assert time.monotonic() - t0 < 15


def test_nccl_sets_the_device_first_and_passes_device_id(monkeypatch):
    # NCCL guesses the GPU from the global rank without device_id ("this can cause a hang"):
    # the rank's GPU is made current before the group starts and named in it
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from schedc.runtime import launch as L

    calls = []
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(("set_device", d)))
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: calls.append((backend, kw)))
    device = L.init_group("nccl", timeout=30)
    assert device == torch.device("cuda", 1)
    assert calls[0] == ("set_device", torch.device("cuda", 1))
    assert calls[1][0] == "nccl" and calls[1][1]["device_id"] == torch.device("cuda", 1)


def test_more_ranks_than_gpus_is_one_line_naming_them(monkeypatch):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from schedc.errors import SchedcError
    from schedc.runtime import launch as L

    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: pytest.fail("the group must not start"))
    with pytest.raises(SchedcError, match=r"rank 2 .* 2 \(cuda:0\.\.cuda:1\).*--nproc-per-node 2"):
        L.init_group("nccl")
