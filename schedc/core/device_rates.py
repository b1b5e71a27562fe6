"""Per-operation rates of GPUs: what the counted route prices an action's GEMMs, attention,
memory-bound ops and kernel launches at when a run names its GPU (``--gpu``).

Problem: one effective FLOP rate for every action (``flops_per_second``, 400e12 by default) cannot
say that a GPU runs a layer's forward, its input gradient (I) and its weight gradient (W) at
different rates: the weight gradients are large GEMMs only, the input gradient adds attention's
backward and the elementwise backward, and short sequences are bound by the host's kernel launches.

Method: a table of cards, each with a GEMM rate per pass (forward, input gradient ``dgrad``,
weight gradient ``wgrad``), a causal flash attention rate forward and backward, an HBM rate for
memory-bound ops and a time per kernel launch, and the ``source`` of the numbers: a fit of the
project's GPU measurements by ``benchmarks/time_fit.py`` (re-running it prints the same values).
A rate the data do not determine is None and named in ``absent``; the count then refuses the
card for what needs it (:func:`schedc.model_costs.timing.check_rates`). Cost: O(1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from schedc.errors import ParameterError, literal


@dataclass(frozen=True)
class DeviceRates:
    """One card's rates (FLOP/s, B/s, s per kernel) and where they come from."""

    name: str
    gemm_f: float  # FLOP/s of the forward's GEMMs
    gemm_i: float  # FLOP/s of the input-gradient (dgrad) GEMMs
    gemm_w: float  # FLOP/s of the weight-gradient (wgrad) GEMMs
    attention_f: float  # FLOP/s of causal flash attention's forward (causal FLOPs)
    attention_b: float  # FLOP/s of its backward (2.5 x the forward's FLOPs)
    memory: float  # B/s of the memory-bound ops
    launch: float  # the host's s per kernel of a forward (eager dispatch, the modules' Python)
    launch_backward: float  # the host's s per kernel of I and W (autograd's engine, the split backward)
    source: str
    moe_gemm: Optional[float] = None  # FLOP/s of routed experts' GEMMs (a per-expert loop)
    absent: str = ""  # what the table has no measured rate for


_FIT = ("fit of the H100 80GB HBM3 Llama-3-8B layer F and B at seq 1024, 4096, 8192 (docs/results.md, 'On a GPU') "
        "and of the H200 Llama-3-8B layer, Qwen2.5-7B layer and Llama-3-8B head F, I, W at seq 4096 (issue 50, "
        "today's one-rate count / its counted-over-measured ratios) by benchmarks/time_fit.py: Hugging Face layers, "
        "bf16, sdpa, one sequence per microbatch, no checkpointing; one least squares of both cards' relative "
        "residuals (largest 3.5%), GEMM, attention and host rates shared (the same GH100 compute), memory per card, "
        "every rate under the datasheet peak; derived, not measured op by op: the data fix each pass's total, not "
        "how I splits among its GEMMs (986 TFLOP/s, near the peak), attention's backward and the memory-bound ops, "
        "and attention's forward sits at the peak (989.4 TFLOP/s) because no point bounds it")
_ABSENT = ("no measured rate for routed experts' GEMMs (MoE), for dtypes other than bfloat16 and float16 (flash "
           "attention), or for CPU kernels")
RATES = {r.name: r for r in (
    DeviceRates("h100-80gb", gemm_f=6.6983e+14, gemm_i=9.8583e+14, gemm_w=6.8011e+14, attention_f=9.8940e+14,
                attention_b=2.8733e+14, memory=2.4896e+12, launch=3.7179e-05,
                launch_backward=4.9638e-05, source=_FIT, absent=_ABSENT),
    DeviceRates("h200", gemm_f=6.6983e+14, gemm_i=9.8583e+14, gemm_w=6.8011e+14, attention_f=9.8940e+14,
                attention_b=2.8733e+14, memory=2.5017e+12, launch=3.7179e-05,
                launch_backward=4.9638e-05, source=_FIT, absent=_ABSENT),
)}
ALIASES = {"h100": "h100-80gb", "h100-sxm": "h100-80gb", "h200-141gb": "h200"}


def device_rates(name: str) -> DeviceRates:
    """The rates of the card named `name` (case, spaces and underscores ignored); one line
    listing the cards the table has for any other name."""
    key = str(name).strip().lower().replace(" ", "").replace("_", "-")
    found = RATES.get(ALIASES.get(key, key))
    if found is None:
        raise ParameterError("gpu", f"{literal(repr(str(name)[:40]))} has no rates in schedc's device table; give "
                                    f"one of {', '.join(sorted(RATES))}, or leave it out to price time at one FLOP rate")
    return found
