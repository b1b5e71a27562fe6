"""The bytes a step adds in torch's runtime against `simulate`'s prediction, for the installed
torch (benchmarks/runtime_memory.py at its default size: CPU allocator, 2 gloo ranks).

torch 2.14 and 2.15 hold different things across a step: 2.14 preallocates a receive buffer per
microbatch and keeps every send to the step's end; 2.15 allocates receives just in time, retires
an activation's send after its local backward, keeps the gradients' sends, and a last stage that
runs B keeps its received inputs (schedc.core.cost_model). The prediction must never be low:
a plan that fits by it must fit in the runtime. The CI job on torch 2.15 runs this file
too, so each version's rule is checked against that version's runtime.
"""

from __future__ import annotations

import pytest
from _benchmarks import load_benchmark

torch = pytest.importorskip("torch")


def test_a_loops_step_peak_is_predicted_never_low_and_within_twelve_percent():
    from schedc.runtime.models import GPTConfig

    bench = load_benchmark("runtime_memory")
    cfg = GPTConfig(vocab_size=512, hidden=64, layers=4, heads=4, seq_len=64)
    rows = bench.run(cfg, 2, 2, 8, 1.0, "gpt", names=("1f1b", "zb-h1"))
    assert len(rows) == 4
    for _, name, rank, predicted, measured in rows:
        # under torch 2.15, before the rule counted a last stage's inputs (which the losses keep),
        # 1F1B's rank 1 read -7.5%; rank 0 reads +10.9% there (its activations' sends, counted all
        # step, retire after each backward: an upper estimate, schedc.core.cost_model), 2.5% under 2.14
        assert measured * 0.99 <= predicted <= measured * 1.12, (torch.__version__, name, rank, predicted, measured)
