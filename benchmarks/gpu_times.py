"""F, I, W and B per unit on one GPU, timed with CUDA events: the data that fit and judge the
per-op time model (issue 50, "Check it").

    python benchmarks/gpu_times.py --json gpu_times.json              # CUDA, bf16, real sizes
    python benchmarks/gpu_times.py --device cpu --json /tmp/t.json    # dry run, tiny sizes

Problem: the counted route's per-op rates (:mod:`schedc.core.device_rates`) are fitted by
``benchmarks/time_fit.py`` to whole-pass GPU times, of which the project has few (one model on an
H100, two models at one sequence on an H200). Issue 50's target, counted F, I and W within 10%
for five architectures at seq 1024, 4096 and 8192, needs those times measured on one GPU, in one
run that fits in a lent GPU's minutes.

Method: per model and sequence, Hugging Face transformers' embedding, one decoder layer and the
final norm + LM head + loss at real size on the device (``memory_fidelity.hf_units``, the
builders ``benchmarks/gpu_layers.py`` uses; sdpa, one sequence per microbatch, no
checkpointing). Each unit runs rounds of F then the split backward of torch's pipelining (I by
``stage_backward_input``, W by ``stage_backward_weight``; the embedding has no I, torch skips it
on the first stage, and its W is its whole backward), then F again and a whole backward (B).
Each pass is timed with CUDA events (on CPU, the host's clock: its kernels are synchronous); the
first ``--warmup`` rounds are dropped, the median of the rest is reported, every repeat kept. The
parameters' gradients exist before the first round, as every microbatch after a step's first
finds them: W adds into them. Between models everything is freed (one layer, the embedding and
the head at real size per model). A wall-clock budget (``--budget-s``) skips a model and sequence
whose estimate (the last case's wall time, scaled by the sequence) does not fit what is left, and
lowers the repeats of a unit whose warm-up says they would not; both are printed and recorded.

``--json PATH`` writes the device's name, torch's and transformers' versions, each unit's
Hugging Face config (what the count reads) and per (model, seq, unit) the F, I, W, B medians in
ms and their repeats; ``benchmarks/time_fit.py --measured PATH`` refits the rates with them and
``benchmarks/time_fidelity.py --measured PATH`` judges the count against them.
Cost: on a GPU one build per model and sequence and, per unit, (warm-up + repeats) x 2 rounds:
about two minutes for the defaults (an estimate: no GPU has run this script; the MoE layer's
per-expert loop is most of it); ``--device cpu``: seconds after the imports.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

import torch
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gpu_layers  # noqa: E402,F401  (adds its real-size MoE builders to memory_fidelity.HF)
import memory_fidelity as mf  # noqa: E402

from schedc.io.fileio import atomic_write_text  # noqa: E402

MODELS = ("Llama-3-8B", "Qwen2.5-7B", "Mistral-7B", "Qwen3-8B", "Qwen3-30B-A3B")
SEQS = (1024, 4096, 8192)
UNIT_NAMES = {"embedding": "embedding", "layer": "layer", "norm+head+loss": "head"}  # hf_units' -> time_fit's
PASSES = ("F", "I", "W", "B")
SIZES = {  # per device: the model sizes, sequences and repeats of a run
    "cuda": dict(sizes=mf.HF, seqs=SEQS, repeats=10, warmup=2),
    "cpu": dict(sizes=mf.SMALL, seqs=(16, 32, 64), repeats=2, warmup=1),
}


def _stamp(cuda: bool):
    if cuda:
        mark = torch.cuda.Event(enable_timing=True)
        mark.record()
        return mark
    return time.perf_counter()


def _ms(start, end, cuda: bool) -> float:
    return start.elapsed_time(end) if cuda else 1e3 * (end - start)


def _output_grad(y: torch.Tensor) -> Optional[torch.Tensor]:
    """The gradient a stage is given for `y`: none for the loss, which is its own."""
    return None if y.numel() == 1 else torch.randn_like(y)


def one_round(unit: mf.Unit, cuda: bool) -> dict[str, float]:
    """ms of F, I and W of the split backward, then of F and a whole backward (B)."""
    params = list(unit.module.parameters())
    x = unit.make_input()
    t0 = _stamp(cuda)
    y = unit.forward(x)
    t1 = _stamp(cuda)
    dy = _output_grad(y)
    t2 = _stamp(cuda)
    if unit.first:  # torch runs no I on the first stage: W is the embedding's whole backward
        t3 = _stamp(cuda)
        torch.autograd.backward([y], None if dy is None else [dy])
    else:
        _, groups = stage_backward_input([y], None if dy is None else [dy], [x], iter(params))
        t3 = _stamp(cuda)
        stage_backward_weight(iter(params), groups)
    t4 = _stamp(cuda)
    x = unit.make_input()
    y = unit.forward(x)
    dy = _output_grad(y)
    t5 = _stamp(cuda)
    torch.autograd.backward([y], None if dy is None else [dy])
    t6 = _stamp(cuda)
    if cuda:
        torch.cuda.synchronize()
    return {"F": _ms(t0, t1, cuda), "I": 0.0 if unit.first else _ms(t2, t3, cuda), "W": _ms(t3, t4, cuda),
            "B": _ms(t5, t6, cuda)}


def time_unit(unit: mf.Unit, cuda: bool, warmup: int, repeats: int, left_s: float) -> tuple[dict, int]:
    """Every kept round's ms per pass, and the repeats run: fewer than `repeats` (at least 3)
    where the warm-up's rounds say the rest would not fit `left_s` seconds."""
    for p in unit.module.parameters():  # as every microbatch after a step's first finds them
        p.grad = torch.zeros_like(p)
    start = time.monotonic()
    for _ in range(warmup):
        one_round(unit, cuda)
    per_round = (time.monotonic() - start) / max(warmup, 1)
    fit = repeats if per_round * repeats <= left_s else max(3, int(left_s / max(per_round, 1e-9)))
    runs: dict[str, list[float]] = {k: [] for k in PASSES}
    for _ in range(min(fit, repeats)):
        for k, ms in one_round(unit, cuda).items():
            runs[k].append(ms)
    for p in unit.module.parameters():
        p.grad = None
    return runs, min(fit, repeats)


def hf_config(sizes: dict, name: str, dtype: str) -> dict:
    """The Hugging Face config the count reads for the units of `name` (one layer: the count is per unit)."""
    kind, fields = sizes[name]
    return {"model_type": kind, "num_hidden_layers": 1, **fields, "torch_dtype": dtype, "tie_word_embeddings": False}


def measure_case(name: str, seq: int, device: str, size: dict, left_s: float) -> tuple[list[dict], list[dict]]:
    """The points of one model at one sequence (per unit: medians and repeats), and what failed."""
    cuda = device.startswith("cuda")
    units: Optional[list[mf.Unit]] = mf.hf_units(name, size["sizes"], seq, dtype=torch.bfloat16, device=device)[0]
    points, failed = [], []
    config = hf_config(size["sizes"], name, "bfloat16")
    start = time.monotonic()
    unit: Optional[mf.Unit] = None
    try:
        for unit in units or ():
            label = UNIT_NAMES[unit.name]
            try:
                runs, repeats = time_unit(unit, cuda, size["warmup"], size["repeats"],
                                          left_s - (time.monotonic() - start))
            except (RuntimeError, torch.OutOfMemoryError) as err:  # one unit's failure is a row, not the run's end
                failed.append({"model": name, "seq": seq, "unit": label, "why": f"{type(err).__name__}: {str(err)[:160]}"})
                print(f"{name:<15} {seq:>6} {label:<10} failed: {type(err).__name__}: {str(err)[:100]}", flush=True)
                continue
            med = {k: statistics.median(v) for k, v in runs.items()}
            points.append({"model": name, "seq": seq, "unit": label, "config": config, "ms": med,
                           "repeats": runs, "n": repeats})
            split = f"{(med['I'] + med['W']) / med['B']:.2f}" if med["B"] else "-"
            note = "" if repeats == size["repeats"] else f"  ({repeats} repeats: the budget)"
            print(f"{name:<15} {seq:>6} {label:<10} " + " ".join(f"{med[k]:>9.3f}" for k in PASSES)
                  + f" {split:>7}{note}", flush=True)
    finally:
        units = unit = None  # the model's last references: freed before the next model is built
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    return points, failed


def run(models, seqs, device: str, budget_s: float, repeats: Optional[int] = None) -> dict:
    """Every (model, seq) that fits `budget_s`, in order; the report :func:`main` writes."""
    size: dict = dict(SIZES["cuda" if device.startswith("cuda") else "cpu"])
    if repeats is not None:
        size["repeats"] = repeats
    seqs = list(seqs or size["seqs"])
    start = time.monotonic()
    points, failed, skipped = [], [], []
    last: Optional[tuple[int, float]] = None  # (seq, wall s) of the last case measured
    print(f"{'model':<15} {'seq':>6} {'unit':<10} {'F ms':>9} {'I ms':>9} {'W ms':>9} {'B ms':>9} {'(I+W)/B':>7}",
          flush=True)
    for name in models:
        for seq in seqs:
            left = budget_s - (time.monotonic() - start)
            estimate = 0.0 if last is None else last[1] * seq / last[0]
            if left <= 0 or estimate > left:
                why = f"skipped: the budget (--budget-s {budget_s:g}) has {max(left, 0):.0f} s left, this case needs an " \
                      f"estimated {estimate:.0f} s"
                skipped.append({"model": name, "seq": seq, "why": why})
                print(f"{name:<15} {seq:>6} {why}", flush=True)
                continue
            case_start = time.monotonic()
            got, bad = measure_case(name, seq, device, size, left)
            points += got
            failed += bad
            last = (seq, time.monotonic() - case_start)
    import transformers

    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    return {"source": "benchmarks/gpu_times.py", "device": name, "torch": torch.__version__,
            "transformers": transformers.__version__, "dtype": "bfloat16", "attention": "sdpa", "microbatch_size": 1,
            "activation_checkpoint": "none", "timer": "CUDA events" if device.startswith("cuda") else "host clock",
            "warmup": size["warmup"], "repeats": size["repeats"], "w_after_gradients": True, "budget_s": budget_s,
            "wall_s": round(time.monotonic() - start, 1), "points": points, "skipped": skipped, "failed": failed}


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
        return value
    return parse


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (a dry run at tiny sizes)")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=sorted(set(mf.HF) - {"GPT-2"}))
    ap.add_argument("--seqs", nargs="+", type=_positive(int), help="default 1024 4096 8192 (cpu: 16 32 64)")
    ap.add_argument("--repeats", type=_positive(int), help="timed rounds per unit after the warm-up (default 10; cpu 2)")
    ap.add_argument("--budget-s", type=_positive(float), default=300.0,
                    help="wall-clock seconds for every case (default 300): what does not fit is skipped, and said")
    ap.add_argument("--json", type=Path, help="write the device, versions and per (model, seq, unit) F, I, W, B here")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_times: --device cuda: no CUDA device here; give --device cpu for the dry run", file=sys.stderr)
        return 2
    if not args.device.startswith(("cuda", "cpu")):
        print(f"gpu_times: --device {args.device!r}: give cuda, cuda:N or cpu", file=sys.stderr)
        return 2
    if args.device == "cpu":
        args.models = [m for m in args.models if m in mf.SMALL]
        torch.set_num_threads(1)  # the dry run checks the path, not the speed: a shared CPU's threads only contend
    label = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu (a dry run at tiny sizes: nothing judged)"
    print(f"F, I, W, B per unit on {label} (torch {torch.__version__}, bfloat16, sdpa, microbatch 1, no "
          f"checkpointing; medians, ms)", flush=True)
    report = run(args.models, args.seqs, args.device, args.budget_s, args.repeats)
    print(f"{len(report['points'])} units timed, {len(report['skipped'])} cases skipped, {len(report['failed'])} failed, "
          f"in {report['wall_s']:.0f} s")
    if args.json:
        atomic_write_text(args.json, json.dumps(report, indent=1) + "\n")
    bad = [p for p in report["points"] if any(not math.isfinite(v) for v in p["ms"].values())]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
