"""Shared test helpers: a builder of valid schedules that does not depend on schedc.core.baselines."""

from __future__ import annotations

import random
import signal
from typing import Callable, Collection, Optional, Sequence, Union

import pytest

from schedc.core.ir import Action, Schedule
from schedc.core.simulate import producers

# A test run launched in the background (nohup, `cmd &` in a script) starts with SIGINT ignored,
# and every process a test spawns would inherit that; the tests that send Ctrl-C need Python's
# own handler in them (a Python handler is reset to the default at exec, SIG_IGN is not).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items) -> None:
    if not any(item.get_closest_marker("cuda") for item in items):
        return
    try:
        import torch

        have = torch.cuda.is_available()
    except ImportError:
        have = False
    if have:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(skip)


@pytest.fixture(scope="module")
def keep_torch_threads():
    """torch's intra-op thread count as it was before the module: `schedc profile` on a CPU sets
    one thread in the test process (cli.main runs in it)."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def build_schedule(
    placement: Sequence[int],
    n_microbatches: int,
    split_backward: Union[bool, Collection[tuple[int, int]]] = False,
    prefer: str = "backward",
    rng: Optional[random.Random] = None,
    idle_prob: float = 0.0,
    name: str = "",
) -> Schedule:
    """A valid schedule made by round-based list scheduling: every round each rank runs one
    action whose inputs finished in earlier rounds, or idles (an empty cell). Deadlock-free by
    construction (the rounds are a global topological order).

    split_backward: True for I + W everywhere, or the (stage, microbatch) pairs that use I + W
    (the others use B).
    prefer: "forward" (GPipe-like: lowest-microbatch F first), "backward" (1F1B-like: pending
    backwards/W first) or "random" (uses rng; with idle_prob a ready rank may also idle)."""
    n_stages = len(placement)
    n_ranks = max(placement) + 1
    pairs = [(s, m) for s in range(n_stages) for m in range(n_microbatches)]
    split = set(pairs) if split_backward is True else set(split_backward or ())
    bk = {p: ("I" if p in split else "B") for p in pairs}
    todo = {Action(s, k, m) for (s, m) in pairs for k in ("FIW" if (s, m) in split else "FB")}
    deps = {a: [d for d, _ in producers(a, n_stages, bk)] for a in todo}
    done: set[Action] = set()
    rows: list[list] = [[] for _ in range(n_ranks)]
    rank_key = {"F": 1, "I": 0, "B": 0, "W": 2} if prefer == "backward" else {"F": 0, "I": 1, "B": 1, "W": 2}
    while todo:
        ready_now = [a for a in todo if all(d in done for d in deps[a])]
        finished = []
        for r in range(n_ranks):
            mine = [a for a in ready_now if placement[a.stage] == r]
            if not mine or (rng is not None and idle_prob and rng.random() < idle_prob):
                rows[r].append(None)
                continue
            if prefer == "random":
                a = rng.choice(sorted(mine))
            else:
                a = min(mine, key=lambda a: (rank_key[a.kind], a.microbatch, a.stage))
            rows[r].append(a)
            finished.append(a)
        for a in finished:
            todo.discard(a)
            done.add(a)
    # trailing idle cells say nothing; torch's own dumps end each row with its last action
    for row in rows:
        while row and row[-1] is None:
            row.pop()
    return Schedule(rows=rows, placement=tuple(placement), n_microbatches=n_microbatches, name=name)


@pytest.fixture
def make_schedule() -> Callable[..., Schedule]:
    return build_schedule


def gpipe_order(placement: Sequence[int], n_microbatches: int, split: bool = True, name: str = "gpipe") -> Schedule:
    """All forwards (stage, mb), then all backwards by reverse stage: each rank runs a subsequence
    of one global topological order, so it never deadlocks, whatever the placement."""
    stages = range(len(placement))
    order = [Action(s, "F", m) for s in stages for m in range(n_microbatches)]
    if split:
        order += [Action(s, "I", m) for s in reversed(stages) for m in range(n_microbatches)]
        order += [Action(s, "W", m) for s in reversed(stages) for m in range(n_microbatches)]
    else:
        order += [Action(s, "B", m) for s in reversed(stages) for m in range(n_microbatches)]
    n_ranks = max(placement) + 1
    rows = [[a for a in order if placement[a.stage] == r] for r in range(n_ranks)]
    return Schedule(rows=rows, placement=tuple(placement), n_microbatches=n_microbatches, name=name)


# tiny instances the relaxations' tests compare with the exact optimum (tests/exhaustive.py): loop
# and V, caps of 0.3p to 1p, uniform costs with and without W or comm, and heavy end stages (None)
TINY_SHAPES = [(3, 3, "loop", None), (4, 2, "v", 2), (4, 3, "v", 2), (4, 2, "loop", None)]
TINY_MEMORIES = ["0.3p", "0.5p", "1p"]
TINY_COSTS = [(1.0, 1.0, 1.0, 0.0), (1.0, 2.0, 0.5, 0.3), (2.0, 1.0, 0.0, 0.5), None]


@pytest.fixture(params=[(shape, memory, costs) for costs in TINY_COSTS for memory in TINY_MEMORIES
                        for shape in TINY_SHAPES])
def tiny_instance(request):
    """(problem, exact optimum) of one instance of the grid above; skipped where the cap holds no
    microbatch of some stage."""
    from exhaustive import tiny_optimum

    (n_stages, n_mb, placement, n_ranks), memory, costs = request.param
    instance = tiny_optimum(n_stages, n_mb, placement, n_ranks, memory, costs)
    if instance is None:
        pytest.skip("the cap holds no microbatch of some stage")
    return instance
