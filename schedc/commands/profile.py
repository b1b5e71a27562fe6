"""`schedc profile`: measure each stage of schedc's GPT and write a profile JSON."""

from __future__ import annotations

import os
import sys
from typing import Optional

from schedc.commands import common
from schedc.costs import MemoryLimit, format_bytes, format_seconds
from schedc.errors import SchedcError


def register(sub) -> None:
    p = sub.add_parser("profile", help="measure each stage's F, I, W time and memory; write a profile JSON")
    p.set_defaults(handler=run)
    common.add_gpt_args(p)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    p.add_argument("--optimizer", default="adamw", help="optimizer whose state counts in static bytes: "
                   "adamw, adam, sgd, sgd-momentum, none (default adamw)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs per stage (default 2)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per stage; the median is kept (default 5)")
    p.add_argument("--comm-bandwidth", metavar="B/s", default=None,
                   help="link bandwidth for boundary activations, e.g. 25GB/s (default: comm is free)")
    p.add_argument("--comm-latency", metavar="S", type=float, default=0.0, help="seconds per transfer (default 0)")
    p.add_argument("--comm-measure", action="store_true",
                   help="measure send/recv between ranks 0 and 1 (run under torchrun --nproc-per-node 2)")
    p.add_argument("--concurrent", type=int, default=1, metavar="N",
                   help="CPU: measure in N processes at once, as N ranks sharing this host will run (default 1)")
    p.add_argument("-o", "--output", metavar="P.json", required=True, help="profile file to write")
    g = p.add_argument_group("your own model (instead of the built-in GPT; schedc.runtime.user_model)")
    g.add_argument("--model", metavar="MODULE:FUNCTION",
                   help="returns the stage modules, or {'model': m, 'split': [[module names], ...]} with optional "
                        "'sample', 'target', 'loss_fn'; it is passed n_stages (--stages), microbatch_size (--mbs), "
                        "dtype (--dtype) if it takes them; e.g. examples/llama.py:stages")
    g.add_argument("--sample", metavar="MODULE:FUNCTION", help="returns one microbatch for stage 0 (or (sample, target))")
    g.add_argument("--model-arg", metavar="KEY=VALUE", action="append", default=[],
                   help="extra keyword argument for the --model/--sample functions (repeatable)")


def _model_args(pairs: list[str]) -> dict:
    import ast

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise SchedcError(f"--model-arg {pair!r}: expected KEY=VALUE, e.g. layers=8")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def run(args) -> int:
    common.require_torch("schedc profile")
    common.check_outputs(args, (args.output, "-o"))  # before minutes of measuring
    import torch

    from schedc.runtime.profiler import StderrProgress, profile_gpt, profile_stages, profile_warnings

    if args.threads is not None:
        if args.threads < 1:
            raise SchedcError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    bandwidth = _parse_bandwidth(args.comm_bandwidth)
    cfg = common.gpt_config_from_args(args)
    rank = 0
    progress = StderrProgress()
    if args.comm_measure:
        import torch.distributed as dist

        if "RANK" not in os.environ:
            raise SchedcError("--comm-measure: launch with torchrun --nproc-per-node 2 (RANK is not set)")
        dist.init_process_group("nccl" if args.device.startswith("cuda") else "gloo")
        rank = dist.get_rank()
        if args.device.startswith("cuda") and torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    try:
        if args.model:
            if args.concurrent != 1:
                raise SchedcError("--concurrent measures the built-in GPT only; drop it with --model")
            from schedc.runtime.user_model import build_user_model

            offered = {"n_stages": args.stages, "microbatch_size": args.mbs, "dtype": args.dtype,
                       **_model_args(args.model_arg)}
            user = build_user_model(args.model, args.sample, offered)
            profile = profile_stages(
                user.stages, user.sample, user.loss_fn, user.target, device=args.device, warmup=args.warmup,
                repeats=args.repeats, optimizer=args.optimizer, comm="measure" if args.comm_measure else None,
                comm_bandwidth=bandwidth, comm_latency=args.comm_latency, model=f"{user.name}/{len(user.stages)} stages",
                microbatch_size=args.mbs, progress=progress if rank == 0 else None,
            )
        else:
            profile = profile_gpt(
                cfg, args.stages, args.mbs, device=args.device, warmup=args.warmup, repeats=args.repeats,
                optimizer=args.optimizer, comm="measure" if args.comm_measure else None,
                comm_bandwidth=bandwidth, comm_latency=args.comm_latency,
                progress=progress if rank == 0 else None, concurrent=args.concurrent,
            )
    finally:
        progress.done()
        if args.comm_measure:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
    if rank != 0:
        return 0
    profile.save(args.output)
    for warning in profile_warnings(profile):
        print(f"schedc profile: warning: {warning}", file=sys.stderr)
    print(f"wrote {args.output}: {profile.n_stages} stages of {profile.model} on {profile.device}, "
          f"microbatch {profile.microbatch_size}, {profile.dtype}")
    print(f"  {'stage':>5}  {'F':>9}  {'I':>9}  {'W':>9}  {'activation':>10}  {'held I..W':>10}  {'static':>10}")
    for s, c in enumerate(profile.stages):
        print(f"  {s:>5}  {format_seconds(c.forward):>9}  {format_seconds(c.backward_input):>9}  "
              f"{format_seconds(c.backward_weight):>9}  {format_bytes(c.activation_bytes):>10}  "
              f"{format_bytes(c.weight_grad_bytes):>10}  {format_bytes(c.static_bytes):>10}")
    comm = profile.comm if isinstance(profile.comm, list) else [profile.comm]
    print(f"  comm per boundary: {', '.join(format_seconds(c) for c in comm)}")
    return 0


def _parse_bandwidth(text: Optional[str]) -> Optional[float]:
    """'25e9', '25GB', '25GB/s', '100MiB/s' -> bytes per second."""
    if text is None:
        return None
    t = text.strip()
    if t.lower().endswith("/s"):
        t = t[:-2]
    try:
        value = float(t)
    except ValueError:
        try:
            limit = MemoryLimit.parse(t)
        except SchedcError:
            limit = None
        if limit is None or limit.kind != "bytes":
            raise SchedcError(f"--comm-bandwidth: expected bytes per second (e.g. 25e9 or 25GB/s), got {text!r}")
        value = limit.value
    if value <= 0:
        raise SchedcError(f"--comm-bandwidth must be > 0, got {text!r}")
    return value
