"""One-GPU check of schedc's measured route, in about five minutes: one table, exit 1 on a miss.

    python benchmarks/gpu_check.py                 # CUDA (bf16, realistic sizes)
    python benchmarks/gpu_check.py --device cpu    # what a CPU can check (float32, small sizes)

Rows, each against its target:
1. ``profile`` of the built-in GPT and of a Llama-style model with grouped-query attention
   (``examples/llama.py``, ``kv_heads`` < ``heads``): I + W against the full backward B of each
   stage (the split should cost what torch's runtime spends, ~1x), W's spread over repeats, memory
   held from I until W against after F (it rises at I under the split backward), the last stage's
   transient peak during F (the loss's logits).
2. ``calibrate`` of a one-rank V (ZB-V, every stage on one rank, 8 microbatches): the step the
   profile predicts against the step torch's runtime takes (target 5% on a GPU; a shared CPU's
   timings are reported, not judged).
3. Loss and gradients of a one-rank V pipeline (``load_pipeline``) against the unsplit model, in
   float64 (to rounding) and bf16 (to bf16's precision).
4. The counted per-unit profile (``schedc.model_costs.unit_profile``, torchtitan's code) against the
   measured one (``profile_units``) for examples/llama.py's layer: held after F, held from I until
   W, static bytes (reported: that layer expands k and v for grouped-query attention, torchtitan's
   does not; ``benchmarks/gpu_layers.py`` checks the counts against the code they describe).
5. The measured route end to end on the case issue 35 measured on an H200 (examples/llama.py at
   Llama-3-8B's layer width, 4 layers in 2 stages, seq 4096): each V schedule on one rank (ZB-V,
   V-Half, V-Min, DualPipeV; 8 microbatches) run by ``load_pipeline``, its step's peak above
   what the rank held before it against ``simulate``'s from the stages' profile (target 5%) and
   from the counted units (reported); what the CUDA process holds outside the allocator.

Sections run in the order peak, counted, profiles, calibrate, gradients; each prints its rows when
it ends (a cut-off run keeps them), and one that raises is a MISS row, not the end of the run.
Cost: three profiles, one per-unit profile, one calibrate run (one rank), twelve pipeline steps.

Offload (issue 49) has its own check, ``benchmarks/gpu_offload.py``: the host link's bandwidth under
compute and a one-rank V offloading stage-0 microbatches against ``simulate``.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))


@dataclass
class Row:
    check: str
    value: str
    target: str
    ok: Optional[bool]  # None: reported, not judged here


SIZES = {
    "cuda": dict(gpt=dict(vocab_size=32000, hidden=2048, layers=8, heads=16, seq_len=2048), mbs=2, stages=4,
                 llama=dict(layers=3, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, seq_len=2048,
                            vocab_size=32000), llama_mbs=1, dtype="bfloat16", repeats=10),
    "cpu": dict(gpt=dict(vocab_size=256, hidden=64, layers=4, heads=4, seq_len=32), mbs=2, stages=4,
                llama=dict(layers=3, hidden=64, heads=4, kv_heads=2, ffn_hidden=0, seq_len=32, vocab_size=256),
                llama_mbs=2, dtype="float32", repeats=5),
}


def profile_rows(label: str, profile, judged: bool) -> list[Row]:
    rows = []
    notes = " ".join(profile.notes or [])
    ratios = []
    for line in profile.notes or []:
        if "(I+W = " in line:
            ratios.append(float(line.split("(I+W = ")[1].split(" x B")[0]))
    if ratios:
        rows.append(Row(f"{label}: (I + W) / B per stage", ", ".join(f"{r:.2f}" for r in ratios), "0.8-1.25",
                        all(0.8 <= r <= 1.25 for r in ratios[1:]) if judged else None))
    rows.append(Row(f"{label}: F/I/W from torch's runtime", str("runtime's own action times" in notes), "True",
                    "runtime's own action times" in notes))
    # middle stages only: the last one's loss frees its fp32 log-probabilities in I (on a GPU its
    # held bytes fall there), and the first runs no I
    rise = [c.weight_grad_bytes / c.activation_bytes for c in profile.stages[1:-1] if c.activation_bytes]
    rows.append(Row(f"{label}: held I..W / after F (middle stages)", ", ".join(f"{r:.2f}" for r in rise) or "none",
                    "> 1 (rises at I)", all(r > 1 for r in rise) if rise else None))
    last = profile.stages[-1]
    rows.append(Row(f"{label}: last stage transient during F / held", f"{(last.transient_bytes or {}).get('F', 0) / max(1, last.activation_bytes):.2f}",
                    "recorded", last.transient_bytes is not None))
    return rows


def check_profiles(device: str, size: dict) -> tuple[list[Row], object]:
    import llama

    from schedc.runtime.models import GPTConfig
    from schedc.runtime.profiling.assemble import profile_stages
    from schedc.runtime.profiling.gpt import profile_gpt

    judged = device == "cuda"
    cfg = GPTConfig(**size["gpt"], dtype=size["dtype"])
    gpt = profile_gpt(cfg, size["stages"], size["mbs"], device=device, warmup=2, repeats=size["repeats"])
    parts = llama.stages(n_stages=3, microbatch_size=size["llama_mbs"], dtype=size["dtype"], **size["llama"])
    from schedc.runtime.user_model import split_by_fqns

    modules = split_by_fqns(parts["model"], parts["split"])
    ll = profile_stages(modules, parts["sample"], parts["loss_fn"], parts["target"], device=device, warmup=2,
                        repeats=size["repeats"], model=parts["name"], microbatch_size=size["llama_mbs"])
    return profile_rows("gpt", gpt, judged) + profile_rows("llama gqa", ll, judged), (cfg, gpt)


def check_calibrate(device: str, size: dict, cfg) -> list[Row]:
    from schedc.core import baselines
    from schedc.io import csvio
    from schedc.runtime.calibrate import calibrate
    from schedc.runtime.profiling.gpt import profile_gpt

    two = profile_gpt(cfg, 2, size["mbs"], device=device, warmup=2, repeats=size["repeats"])
    with tempfile.TemporaryDirectory() as d:
        csv = Path(d) / "zbv1.csv"
        csvio.write_csv(baselines.make_baseline("zb-v", 2, 8, n_ranks=1), csv)
        cal = calibrate(csv, two, cfg, size["mbs"], steps=3, warmup_steps=1, threads=1, device=device, timeout=240)
    return [Row("calibrate one-rank ZB-V x 8: predicted / measured step",
                f"{1e3 * cal.predicted_step:.1f} / {1e3 * cal.measured_step:.1f} ms ({100 * cal.step_error:+.1f}%)",
                "within 5%", abs(cal.step_error) <= 0.05 if device == "cuda" else None)]


def check_gradients(device: str, size: dict) -> list[Row]:
    import dataclasses

    import torch

    from schedc.core import baselines
    from schedc.runtime import GPT, GPTConfig, lm_loss, load_pipeline, make_batch
    from schedc.runtime.one_rank import one_rank_group

    rows = []
    base = GPTConfig(**{**SIZES["cpu"]["gpt"], "layers": 4})
    for dtype, tol in (("float64", 1e-10), ("bfloat16", 2e-2)):
        cfg = dataclasses.replace(base, dtype=dtype)
        x, y = make_batch(cfg, 8, seed=1, device=device)
        unsplit = GPT(cfg, seed=0).to(device)
        loss = torch.stack([lm_loss(unsplit(x[m:m + 1]), y[m:m + 1]) for m in range(8)]).mean()
        loss.backward()
        loss = loss.detach()
        twin = GPT(cfg, seed=0)  # the stages share its parameters: their gradients land under its names
        with one_rank_group(torch.device(device)):
            pipe = load_pipeline(baselines.make_baseline("zb-v", 2, 8, n_ranks=1), twin, lm_loss, device)
            losses: list = []
            pipe.step(x, target=y, losses=losses)
        got = {n: p.grad for n, p in twin.named_parameters()}
        want = dict(unsplit.named_parameters())
        err = max(float((got[n].double() - want[n].grad.double()).norm() / want[n].grad.double().norm().clamp_min(1e-30))
                  for n in got)
        loss_err = abs(float(torch.stack(losses).double().mean()) - float(loss)) / abs(float(loss))
        rows.append(Row(f"one-rank V vs unsplit, {dtype}: loss / worst gradient (relative)",
                        f"{loss_err:.1e} / {err:.1e}", f"<= {tol:g}", loss_err <= tol and err <= tol))
    return rows


PEAK_SIZES = {  # the case issue 35 measured on an H200: examples/llama.py, 4 layers in 2 stages on one rank
    "cuda": dict(layers=4, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, seq_len=4096, vocab_size=32000),
    "cpu": dict(layers=4, hidden=64, heads=4, kv_heads=2, ffn_hidden=0, seq_len=32, vocab_size=256),
}
V_SCHEDULES = ("zb-v", "v-half", "v-min", "dualpipev")


def check_step_peak(device: str, size: dict) -> list[Row]:
    """The measured and the counted route end to end: examples/llama.py's model and Hugging Face's
    LlamaForCausalLM (examples/hf_causal_lm.py, as NeMo AutoModel runs it), each split in 2 stages
    and profiled (``profile_stages``), then each V schedule on one rank (8 microbatches) run by torch's
    runtime: the step's peak above what the rank held before it (``max_memory_allocated``) against
    ``simulate``'s peak minus the bytes held all step (benchmarks/runtime_memory.py's
    ``predicted_step_bytes``), from the measured profile and, for Hugging Face's code, from the counted
    units (``unit_profile(impl="hf")``); and what the CUDA process holds outside torch's allocator
    (context, cuBLAS, NCCL) against the counted route's reserve."""
    import hf_causal_lm
    import llama
    import torch

    from schedc.model_costs import unit_profile

    kind = "cuda" if device.startswith("cuda") else "cpu"
    sz = PEAK_SIZES[kind]
    half = sz["layers"] // 2
    rows = _v_peaks("llama.py", llama.stages(n_stages=2, microbatch_size=1, dtype=size["dtype"], **sz), device, sz["vocab_size"])
    hf = hf_causal_lm.stages(n_stages=2, microbatch_size=1, dtype=size["dtype"], arch="llama", **sz)
    counted = unit_profile(layers=sz["layers"], hidden=sz["hidden"], vocab=sz["vocab_size"],
                           ffn_hidden=hf["model"].config.intermediate_size, heads=sz["heads"], kv_heads=sz["kv_heads"],
                           family="llama", dtype=size["dtype"], seq=sz["seq_len"], impl="hf",
                           device=kind).merge([1 + half, sz["layers"] - half + 1])
    rows += _v_peaks("HF Llama", hf, device, sz["vocab_size"], counted)
    if kind == "cuda":
        from schedc.model_costs import CUDA_RESERVE_BYTES

        free, total = torch.cuda.mem_get_info()
        outside = total - free - torch.cuda.memory_reserved()
        rows.append(Row("CUDA process outside the allocator (NCCL group up)",
                        f"{outside / 2**30:.2f} GiB (counted {CUDA_RESERVE_BYTES / 2**30:.2f})", "reported", None))
    return rows


def _v_peaks(label: str, parts: dict, device: str, vocab: int, counted=None, mb: int = 8) -> list[Row]:
    import torch
    from runtime_memory import predicted_step_bytes
    from torch.distributed.pipelining import PipelineStage

    from schedc.core import baselines
    from schedc.io import csvio
    from schedc.runtime.one_rank import one_rank_group
    from schedc.runtime.pipeline import Pipeline, build_schedule
    from schedc.runtime.profiling.assemble import profile_stages
    from schedc.runtime.user_model import split_by_fqns

    judged = device.startswith("cuda")
    model, split = parts["model"], parts["split"]
    profile = profile_stages(split_by_fqns(model, split), parts["sample"], parts["loss_fn"], parts["target"],
                             device=device, warmup=1, repeats=3, model=parts["name"], microbatch_size=1)
    seq = parts["sample"].shape[1]
    tokens = torch.randint(0, vocab, (mb, seq + 1), generator=torch.Generator().manual_seed(1))
    x, y = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
    rows = []
    with one_rank_group(torch.device(device)), tempfile.TemporaryDirectory() as d:
        for name in V_SCHEDULES:
            schedule = baselines.make_baseline(name, 2, mb, n_ranks=1)
            csv = Path(d) / f"{name}.csv"
            csvio.write_csv(schedule, csv)
            modules = [m.to(device) for m in split_by_fqns(model, split)]
            stages = [PipelineStage(m, s, 2, torch.device(device)) for s, m in enumerate(modules)]
            pipe = Pipeline(build_schedule(csv, stages, loss_fn=parts["loss_fn"]), stages, dict(enumerate(modules)))
            pipe.step(x, target=y, losses=[])  # the parameters' gradients exist from here on
            for m in modules:
                m.zero_grad(set_to_none=False)
            measured = _step_peak(functools.partial(pipe.step, x, target=y, losses=[]), device)
            for source, prof in (("profile", profile), ("counted units", counted)):
                if prof is None:
                    continue
                predicted = predicted_step_bytes(schedule, prof)[0] - _local_buffers(schedule, prof, device)
                err = predicted / measured - 1
                rows.append(Row(f"{label}, one-rank {name} x {mb}: step peak from the {source} / measured",
                                f"{predicted / 2**20:.1f} / {measured / 2**20:.1f} MiB ({100 * err:+.1f}%)",
                                "within 5%", abs(err) <= 0.05 if judged else None))
            del pipe, stages, modules
    return rows


def _local_buffers(schedule, profile, device: str) -> float:
    """Rank 0's buffers between its own adjacent stages, which torch up to 2.14 allocates per
    microbatch and direction (schedc.core.cost_model) and which hold the last step's local tensors
    when a step starts: the CUDA allocator sees each freed as this step's tensor replaces it, so they
    are part of the level before the step. (A CPU trace misses frees of blocks allocated before it
    starts, and runtime_memory.py counts them in the step.)"""
    from schedc.core.cost_model import boundary_buffers, preallocates, torch_version

    version = torch_version(profile)
    if not device.startswith("cuda") or not preallocates(version):
        return 0.0
    placement = schedule.placement
    return sum(boundary_buffers(profile.boundary_after(b), schedule.n_microbatches, version, same_rank=True)
               for b in range(len(placement) - 1) if placement[b] == placement[b + 1] == 0)


def _step_peak(step, device: str) -> float:
    """Bytes the step allocates above what was allocated before it, at its peak."""
    import torch

    from schedc.runtime.allocator import AllocatorTrace

    with AllocatorTrace(torch.device(device)) as trace:
        with trace.action("step"):
            step()
    return max(trace.peak, trace.levels["step"].peak)


def counted_llama(model, sz: dict, dtype: str, mbs: int, device: str):
    """The counted per-unit profile of examples/llama.py's model (torchtitan's layer code), with the
    measured route's static bytes: AdamW's states and the gradients in the parameters' dtype."""
    from schedc.model_costs import unit_profile

    ffn = model.layers["0"].feed_forward.w1.out_features
    return unit_profile(dict(layers=sz["layers"], hidden=sz["hidden"], vocab=sz["vocab_size"], ffn_hidden=ffn,
                             heads=sz["heads"], kv_heads=sz["kv_heads"], family="llama", dtype=dtype),
                        seq=sz["seq_len"], microbatch_size=mbs, impl="torchtitan",
                        device="cuda" if device.startswith("cuda") else "cpu", grad_dtype=dtype,
                        optimizer_dtype=dtype, master_weights=False)


def check_counted(device: str, size: dict) -> list[Row]:
    import llama

    from schedc.runtime.profiling.assemble import profile_units
    from schedc.runtime.user_model import split_by_fqns

    sz = size["llama"]
    parts = llama.stages(n_stages=1, microbatch_size=size["llama_mbs"], dtype=size["dtype"], **sz)
    model = parts["model"]
    names = [["tok_embeddings"]] + [[f"layers.{i}"] for i in range(sz["layers"])] + [["norm", "lm_head"]]
    units = split_by_fqns(model, names)
    measured = profile_units(units, names, parts["sample"], parts["loss_fn"], parts["target"], device=device,
                             warmup=1, repeats=2, microbatch_size=size["llama_mbs"], reuse_layers=True)
    try:
        counted = counted_llama(model, sz, size["dtype"], size["llama_mbs"], device)
    except Exception as e:  # noqa: BLE001 - the counted route is another part's; say why it is missing
        return [Row("counted vs measured llama layer", f"counted route failed: {type(e).__name__}: {e}"[:90],
                    "within 5%", None)]
    rows = []
    m, c = measured.stages[1], counted.stages[1]
    for field in ("activation_bytes", "weight_grad_bytes", "static_bytes"):
        ratio = getattr(c, field) / max(1.0, getattr(m, field))
        # reported, not judged: llama.py is torchtitan-like, not torchtitan's code (it expands k and v
        # for grouped-query attention, which SDPA then saves); benchmarks/gpu_layers.py judges the
        # counts against the code they describe
        rows.append(Row(f"llama.py layer {field}: counted (torchtitan's) / measured", f"{ratio:.3f}",
                        "reported", None))
    return rows


SECTIONS = ("peak", "counted", "profiles", "calibrate", "gradients")


def run_section(name: str, device: str, size: dict) -> list[Row]:
    from schedc.runtime.models import GPTConfig

    cfg = GPTConfig(**size["gpt"], dtype=size["dtype"])
    try:
        if name == "profiles":
            return check_profiles(device, size)[0]
        if name == "calibrate":
            return check_calibrate(device, size, cfg)
        if name == "gradients":
            return check_gradients(device, size)
        return check_counted(device, size) if name == "counted" else check_step_peak(device, size)
    except Exception as e:  # noqa: BLE001 - a GPU session is short: report the section, run the rest
        return [Row(f"{name}: failed", f"{type(e).__name__}: {e}"[:200], "runs", False)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--skip", action="append", default=[], choices=SECTIONS,
                    help="leave a section out (repeatable)")
    args = ap.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    kind = "cuda" if device.startswith("cuda") else "cpu"
    size = SIZES[kind]
    if kind == "cpu":
        torch.set_num_threads(1)
    label = torch.cuda.get_device_name(device) if kind == "cuda" else "cpu"
    print(f"schedc gpu check on {label} (torch {torch.__version__}, {size['dtype']})", flush=True)
    width = 64
    print(f"{'check':<{width}}  {'value':<32}  {'target':<18}  result", flush=True)
    missed = False
    for name in (s for s in SECTIONS if s not in args.skip):
        for r in run_section(name, device, size):  # printed as each section ends: a cut-off run keeps its rows
            verdict = "ok" if r.ok else ("reported" if r.ok is None else "MISS")
            print(f"{r.check:<{width}}  {r.value:<32}  {r.target:<18}  {verdict}", flush=True)
            missed = missed or r.ok is False
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
