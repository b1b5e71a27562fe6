"""One-GPU check of offload (issue 49, "Checks"): the host link under compute, and a one-rank V
whose first stage offloads chosen microbatches, measured against ``simulate``. One table, a JSON
file, exit 1 on a miss; under 5 minutes on one H100/H200.

    python benchmarks/gpu_offload.py --json offload.json                # CUDA, bf16
    python benchmarks/gpu_offload.py --device cpu --json /tmp/o.json    # dry run, tiny sizes

Problem: offload is free only if its copies hide behind compute, and the plan decides that from a
host link bandwidth (:class:`schedc.core.host_link.HostLink`, 50 GB/s per direction by default)
and from ``simulate``'s copy streams. Both need a GPU to be believed.

Method:
1. ``link``: a pinned host buffer and a device buffer of ``--link-bytes`` each; device to host
   and host to device copies (``non_blocking``) on two side streams, timed with CUDA events,
   alone and while a bf16 matmul loop runs on the default stream. The GB/s during compute (the
   smaller direction) is the link the next section simulates with, and the number to record as
   that GPU's ``HostLink(bandwidth=...)``.
2. ``offload``: schedc's built-in GPT at Llama-3-8B's width (4 layers, 2 stages on one rank, bf16,
   8 microbatches), its stages profiled (``profile_gpt``). The schedule is a V on one rank: every
   forward (0F0 1F0 0F1 1F1 ...) then every backward in reverse (1B7 0B7 ...), so stage 0's early
   microbatches wait longest. Which of them to offload and where to fetch each is chosen with
   ``simulate`` and the measured link: greedily from microbatch 0, the latest fetch point whose
   simulated step stays within 0.5% of keeping. The pipeline (``load_pipeline``) then runs
   keeping everything and with those memory actions: (a) the measured peak drop (above what the
   rank held before the step, ``max_memory_allocated``) against ``simulate``'s drop (the bytes off
   the device at the peak; target 5%), and against the bytes the runtime moved (reported); (b) the
   measured step with offload against without (target 3%, judged where ``simulate`` says the
   transfers hide).

On CPU (``--device cpu``) the same code runs with tiny sizes: the copies are plain CPU copies,
the host copy of an offload is a second CPU buffer, and nothing is judged (every row reported).
Cost: two GiB of copies four times, three profile repeats of two stages, eight pipeline steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_check import Row  # noqa: E402  (the GPU checks' one row type)

SIZES = {
    "cuda": dict(gpt=dict(vocab_size=32000, hidden=4096, layers=4, heads=32, seq_len=2048, dtype="bfloat16"),
                 link_bytes=1 << 30, matmul=8192, steps=3),
    "cpu": dict(gpt=dict(vocab_size=128, hidden=64, layers=4, heads=4, seq_len=64, dtype="float32"),
                link_bytes=8 << 20, matmul=256, steps=2),
}
MB = 8  # microbatches
HIDE_SLACK = 0.005  # a fetch "hides" when the simulated step grows by at most this fraction


# ------------------------------------------------------------------------------- host link
def measure_link(device: str, nbytes: int, matmul: int) -> dict:
    """GB/s device to host and host to device, each alone and both at once while a matmul loop
    runs on the default stream (the copies start after the loop is queued, so they overlap it)."""
    import torch

    if not device.startswith("cuda"):
        return _cpu_link(nbytes)
    dev = torch.device(device)
    n = nbytes // 2  # bf16 elements
    host = torch.empty(n, dtype=torch.bfloat16, pin_memory=True)
    back = torch.empty(n, dtype=torch.bfloat16, pin_memory=True)
    dbuf = torch.ones(n, dtype=torch.bfloat16, device=dev)
    dbuf2 = torch.empty(n, dtype=torch.bfloat16, device=dev)
    a = torch.randn(matmul, matmul, dtype=torch.bfloat16, device=dev)
    b = torch.randn(matmul, matmul, dtype=torch.bfloat16, device=dev)
    d2h, h2d = torch.cuda.Stream(dev), torch.cuda.Stream(dev)

    def copies() -> tuple[float, float]:
        out = []
        for stream, dst, src in ((d2h, back, dbuf), (h2d, dbuf2, host)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                start.record(stream)
                dst.copy_(src, non_blocking=True)
                end.record(stream)
            out.append((start, end))
        torch.cuda.synchronize(dev)
        return tuple(nbytes / (s.elapsed_time(e) * 1e-3) / 1e9 for s, e in out)

    def matmuls(k: int) -> None:
        for _ in range(k):
            torch.mm(a, b)

    torch.cuda.synchronize(dev)  # the buffers exist before any copy (the side streams do not wait)
    copies()  # warm: the copy engines and the pinned pages
    alone = copies()
    # a matmul loop long enough to outlast both copies (four times one copy alone)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    matmuls(10)
    end.record()
    torch.cuda.synchronize(dev)
    per = start.elapsed_time(end) / 10 * 1e-3
    copy_s = nbytes / (min(alone) * 1e9)
    # queued at once (well under the launch queue's depth), so the copies start mid-loop
    matmuls(min(800, max(10, int(4 * copy_s / per))))
    during = copies()
    tflops = 2 * matmul**3 / per / 1e12
    return {"d2h_alone_gbs": alone[0], "h2d_alone_gbs": alone[1], "d2h_compute_gbs": during[0],
            "h2d_compute_gbs": during[1], "bytes": nbytes, "matmul_tflops": tflops}


def _cpu_link(nbytes: int) -> dict:
    """A CPU dry run: a plain copy each way, timed on the wall clock (no compute beside it)."""
    import torch

    src, dst = torch.ones(nbytes // 4), torch.empty(nbytes // 4)
    dst.copy_(src)
    t = time.perf_counter()
    dst.copy_(src)
    one = nbytes / (time.perf_counter() - t) / 1e9
    t = time.perf_counter()
    src.copy_(dst)
    two = nbytes / (time.perf_counter() - t) / 1e9
    return {"d2h_alone_gbs": one, "h2d_alone_gbs": two, "d2h_compute_gbs": one, "h2d_compute_gbs": two,
            "bytes": nbytes, "matmul_tflops": None}


def link_rows(link: dict, judged: bool) -> list[Row]:
    rows = [Row(f"host link {d}: alone / during compute", f"{link[f'{k}_alone_gbs']:.1f} / "
                f"{link[f'{k}_compute_gbs']:.1f} GB/s", "reported", None)
            for d, k in (("device->host", "d2h"), ("host->device", "h2d"))]
    if judged:  # reported: how much compute slows the copy engines (1.0: not at all)
        worst = min(link["d2h_compute_gbs"] / link["d2h_alone_gbs"], link["h2d_compute_gbs"] / link["h2d_alone_gbs"])
        rows.append(Row("host link during compute / alone (worse direction)", f"{worst:.2f}", "reported", None))
        rows.append(Row("matmul loop beside the copies", f"{link['matmul_tflops']:.0f} TFLOP/s (bf16)", "reported", None))
    return rows


# ------------------------------------------------------------------------------- one-rank V
def v_schedule():
    """Every forward of both stages, then every backward in reverse: a V on one rank."""
    from schedc.io.csvio import parse_csv_text

    row = [f"{s}F{m}" for m in range(MB) for s in (0, 1)] + [f"{s}B{m}" for m in reversed(range(MB)) for s in (1, 0)]
    return parse_csv_text(",".join(row) + "\n")


def choose_offloads(schedule, profile, link) -> tuple[list[dict], object, object]:
    """Stage 0's microbatches to offload and each one's fetch point (module docstring, 2), with
    ``simulate``'s result for keeping and for the chosen actions."""
    from schedc.core.simulate import simulate

    keep = simulate(schedule, profile)
    row = [str(a) for a in schedule.rows[0]]
    chosen: list[dict] = []
    best = keep
    for m in range(MB):
        first, last = row.index(f"0F{m}") + 1, row.index(f"0B{m}")
        for at in reversed(range(first, last)):  # the latest fetch point that hides
            trial = chosen + [{"stage": 0, "microbatch": m, "action": "offload", "fetch_at": row[at]}]
            sim = simulate(schedule, profile, memory_actions=trial, link=link)
            if sim.makespan <= keep.makespan * (1 + HIDE_SLACK) and sim.peak_memory[0] < best.peak_memory[0]:
                chosen, best = trial, sim
                break
    return chosen, keep, best


def measure_v(device: str, cfg, memory_actions, steps: int) -> dict:
    """Peak above the level before the step and the step time (median of `steps`, after one)."""
    import torch

    from schedc.runtime import GPT, lm_loss, load_pipeline, make_batch

    cuda = device.startswith("cuda")
    x, y = make_batch(cfg, MB, seed=3, device=device)
    pipe = load_pipeline(v_schedule(), GPT(cfg, seed=1), lm_loss, device, memory_actions=memory_actions or None)
    times, peaks = [], []
    for k in range(steps + 1):
        for p in pipe.parameters():
            p.grad = None
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        t = time.perf_counter()
        pipe.step(x, target=y)
        if cuda:
            torch.cuda.synchronize()
            peaks.append(torch.cuda.max_memory_allocated() - before)
        if k:
            times.append(time.perf_counter() - t)
    memory = getattr(pipe.schedule, "memory", None)
    moved = memory.stats.offloaded_bytes if memory is not None else 0
    late = memory.stats.late_fetches if memory is not None else 0
    del pipe
    return {"step_s": statistics.median(times), "peak_bytes": peaks[-1] if peaks else None,
            "offloaded_bytes": moved, "late_fetches": late}


def check_offload(device: str, size: dict, link: dict, out: dict) -> list[Row]:
    import gc

    import torch

    from schedc.core.host_link import HostLink, offload_bytes
    from schedc.runtime import GPTConfig
    from schedc.runtime.one_rank import one_rank_group
    from schedc.runtime.profiling.gpt import profile_gpt

    judged = device.startswith("cuda")
    cfg = GPTConfig(**size["gpt"])
    profile = profile_gpt(cfg, 2, 1, device=device, warmup=1, repeats=3)
    host = HostLink(bandwidth=1e9 * min(link["d2h_compute_gbs"], link["h2d_compute_gbs"]))
    schedule = v_schedule()
    actions, keep_sim, off_sim = choose_offloads(schedule, profile, host)
    out["memory_actions"] = actions
    out["offload_bytes_per_microbatch"] = offload_bytes(profile, 0)
    rows = [Row("offload: microbatches of stage 0 chosen (fetch points)",
                ", ".join(f"{a['microbatch']}@{a['fetch_at']}" for a in actions) or "none", "reported", None)]
    if not actions:
        rows.append(Row("offload: a hiding offload exists at this link", "none", ">= 1", False if judged else None))
        return rows
    with one_rank_group(torch.device(device)):
        keep = measure_v(device, cfg, None, size["steps"])
        gc.collect()
        off = measure_v(device, cfg, actions, size["steps"])
    out["keep"], out["offload"] = keep, off
    sim_drop = keep_sim.peak_memory[0] - off_sim.peak_memory[0]
    sim_hides = off_sim.makespan <= keep_sim.makespan * (1 + HIDE_SLACK)
    out["simulate"] = {"keep_step_s": keep_sim.makespan, "offload_step_s": off_sim.makespan,
                       "keep_peak_bytes": keep_sim.peak_memory[0], "offload_peak_bytes": off_sim.peak_memory[0],
                       "peak_drop_bytes": sim_drop, "transfers_hide": sim_hides}
    counted = len(actions) * offload_bytes(profile, 0)  # what simulate moves
    rows.append(Row("offload: bytes moved per step, runtime / simulate",
                    f"{off['offloaded_bytes'] / 2**20:.1f} / {counted / 2**20:.1f} MiB", "reported", None))
    rows.append(Row("offload: late fetches (needed before their fetch point)", str(off["late_fetches"]),
                    "0", off["late_fetches"] == 0))
    if keep["peak_bytes"] is not None:
        drop = keep["peak_bytes"] - off["peak_bytes"]
        err = drop / sim_drop - 1 if sim_drop else float("inf")
        rows.append(Row("offload: peak drop measured / simulated", f"{drop / 2**20:.1f} / {sim_drop / 2**20:.1f} MiB "
                        f"({100 * err:+.1f}%)", "within 5%", abs(err) <= 0.05 if judged else None))
        rows.append(Row("offload: peak drop / bytes moved", f"{drop / max(1, off['offloaded_bytes']):.3f}",
                        "reported", None))
    slow = off["step_s"] / keep["step_s"] - 1
    rows.append(Row("offload: step with / without (measured)", f"{1e3 * off['step_s']:.1f} / {1e3 * keep['step_s']:.1f}"
                    f" ms ({100 * slow:+.1f}%)", "within 3% (hidden)" if sim_hides else "reported",
                    (slow <= 0.03) if judged and sim_hides else None))
    rows.append(Row("offload: step with / without (simulate)", f"{1e3 * off_sim.makespan:.1f} / "
                    f"{1e3 * keep_sim.makespan:.1f} ms", "reported", None))
    return rows


# ------------------------------------------------------------------------------- driver
def _write_json(path: Path, data: dict) -> None:
    """Temp file then rename: a cut-off run never leaves half a file at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.write("\n")
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu (a dry run, tiny sizes)")
    ap.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the rows and measurements here")
    ap.add_argument("--link-bytes", type=int, default=None, metavar="N",
                    help="bytes each copy moves (default 1 GiB on CUDA, 8 MiB on CPU)")
    args = ap.parse_args(argv)
    if args.link_bytes is not None and args.link_bytes < 1 << 20:
        ap.error(f"--link-bytes must be at least 1 MiB (1048576), got {args.link_bytes}")
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    kind = "cuda" if device.startswith("cuda") else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no GPU here; use --device cpu for the dry run")
    size = SIZES[kind]
    if kind == "cpu":
        torch.set_num_threads(1)
    label = torch.cuda.get_device_name(device) if kind == "cuda" else "cpu (dry run)"
    print(f"schedc offload check on {label} (torch {torch.__version__}, {size['gpt']['dtype']})", flush=True)
    out: dict = {"device": label, "torch": torch.__version__}
    rows: list[Row] = []
    width = 58
    print(f"{'check':<{width}}  {'value':<34}  {'target':<18}  result", flush=True)

    def show(new: list[Row]) -> None:
        for r in new:
            verdict = "PASS" if r.ok else ("reported" if r.ok is None else "FAIL")
            print(f"{r.check:<{width}}  {r.value:<34}  {r.target:<18}  {verdict}", flush=True)
        rows.extend(new)

    link = None
    for name in ("link", "offload"):
        try:
            if name == "link":
                link = measure_link(device, args.link_bytes or size["link_bytes"], size["matmul"])
                out["link"] = link
                show(link_rows(link, kind == "cuda"))
            elif link is not None:
                show(check_offload(device, size, link, out))
        except Exception as e:  # noqa: BLE001 - a GPU session is short: report the section, run the rest
            show([Row(f"{name}: failed", f"{type(e).__name__}: {e}"[:200], "runs", False)])
    if link is not None:
        out["host_link_bandwidth"] = 1e9 * min(link["d2h_compute_gbs"], link["h2d_compute_gbs"])
    out["rows"] = [asdict(r) for r in rows]
    if args.json:
        _write_json(args.json, out)
        print(f"wrote {args.json}", flush=True)
    return 1 if any(r.ok is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
