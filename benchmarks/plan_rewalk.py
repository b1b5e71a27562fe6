"""A plan's memory re-walked with bytes measured on a GPU: does the plan fit the GPU it was made for?

Problem: ``schedc plan`` reports each rank's peak from counted per-unit bytes
(``schedc.model_costs.unit_profile``). A plan is only as good as those counts: with the textbook
counts, a Llama-3-8B plan that reported 79.9 of 80 GiB needed about 140 GiB on its worst rank
once re-walked with what the layers really hold. This re-walks plans made from today's counts.

Method: per case (a Hugging Face config, ranks, microbatches, sequence, cap, and a checkpointing
mode for the whole model), plan from the counted units as ``schedc plan --config C --names hf
--ac MODE`` does (Hugging Face's code, as NeMo AutoModel trains it; CUDA's kernels). Then replace
every unit's bytes (held after F, held from I until W, the F, I and W transients) with those
measured on a GPU (``benchmarks/gpu_layers.py --json``: the allocator around F, the split I and W
of the real layer, embedding and head at real size and the same sequence) and the reserve with the
most a CUDA process held outside the allocator there; keep the static bytes (parameters, their
gradients and optimizer states: arithmetic, matched to the byte on the GPU) and the receive
buffers and held sends (the cost model's torch rule, checked end to end on the GPU by
benchmarks/gpu_check.py); and simulate the plan's own schedule on its own partition. A
checkpointed plan's units run their backward whole, as the plan assumed (``checkpointed_form``
of the measured units, with B's peak as measured: a file without it re-walks no checkpointed plan). A file measured with no gradients before W (``"w_after_gradients"``
false: a step's first W) gets what every later W adds into them, as counted
(``schedc.model_costs.memory.accumulated_grads``). The per-op modes (light, selective) are not re-walked: torch refuses
their split backward, so the GPU measured nothing held from I until W for them.

It prints per case the plan's peak (its largest rank, as reported), the re-walked peak of the same
rank and of the largest, the largest difference over the ranks (and with the plan's own reserve:
the units' bytes alone), and whether the re-walked plan fits the cap. ``--textbook`` adds the
cases planned from the textbook count (``impl="paper"``), what schedc planned with before it
counted what the code keeps. Target:
the re-walk within 5 % of the plan on every rank, and under the cap.
Cost: one plan per case (``--time-limit`` work units: the same plan on any machine) and two
simulations.

    python benchmarks/plan_rewalk.py --textbook                  # H100 bytes in benchmarks/data
    python benchmarks/plan_rewalk.py --measured mine.json --time-limit 5 --modes none full
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import ac_choice  # noqa: E402

from schedc.core.costs import Profile  # noqa: E402
from schedc.core.simulate import simulate  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.model_costs import unit_profile  # noqa: E402
from schedc.planning.ac import checkpointed_form, plan_mode  # noqa: E402

MEASURED = Path(__file__).resolve().parent / "data" / "h100_hf_units.json"
GiB = 2.0 ** 30
# the configs benchmarks/ac_choice.py plans (Hugging Face config.json fields; nothing is
# downloaded), under the names the measured file gives the layers
CONFIGS = {"Llama-3-8B": ac_choice.CONFIGS["llama3-8b"], "Qwen2.5-7B": ac_choice.CONFIGS["qwen2.5-7b"]}
# the planning issue's cases: 8 ranks, 32 microbatches of one sequence of 4096, 80 and 40 GiB
CASES = [(name, 8, 32, 4096, cap) for name in CONFIGS for cap in ("80GiB", "40GiB")]
FIELDS = {"after F": "activation_bytes", "I..W": "weight_grad_bytes"}
TRANSIENTS = {"F transient": "F", "I transient": "I", "W transient": "W"}


def counted_units(name: str, seq: int, mode: str, tmp: Path, textbook: bool = False, fsdp: bool = False) -> Profile:
    """The per-unit profile ``schedc plan --config --names hf --ac MODE`` counts (`textbook`: the
    textbook count schedc planned with before it counted what the code keeps, ``impl="paper"``)."""
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(CONFIGS[name]))
    if textbook:
        return unit_profile(path, seq=seq, names="hf", impl="paper", held="paper")
    return unit_profile(path, seq=seq, names="hf", activation_checkpoint=mode, fsdp=fsdp)


def accumulation(name: str, seq: int, mode: str, tmp: Path) -> list[float]:
    """Per unit, what the count's W transient adds for the new gradients a W adds into those of
    earlier microbatches (``memory.accumulated_grads``): the count less the same count under FSDP2,
    whose hook empties .grad before every W (all else equal)."""
    with_grads, without = (counted_units(name, seq, mode, tmp, fsdp=f) for f in (False, True))
    return [a.transient("W") - b.transient("W") for a, b in zip(with_grads.stages, without.stages)]


def measured_units(counted: Profile, measured: dict, mode: str, reserve: float,
                   added_w: Optional[list[float]] = None) -> Profile:
    """`counted` with every unit's bytes those `measured` (``{unit: {mode: {quantity: bytes}}}``,
    benchmarks/gpu_layers.py's ``--json``) and the reserve `reserve`; times and static bytes kept;
    `added_w` (per unit) added to the measured W transients."""
    n = counted.n_stages
    stages = []
    for k, unit in enumerate(counted.stages):
        kind, unit_mode = ("embedding", "none") if k == 0 else ("norm+head+loss", "none") if k == n - 1 else \
            ("layer", mode)
        try:
            got = measured[kind][unit_mode]
            update = {field: got[q] for q, field in FIELDS.items()}
            update["transient_bytes"] = {key: got[q] for q, key in TRANSIENTS.items()}
            update["transient_bytes"]["W"] += added_w[k] if added_w else 0.0
            if kind == "layer" and (unit_mode != "none" or "B transient" in got):
                update["transient_bytes"]["B"] = got["B transient"]  # a checkpointed layer runs B
        except KeyError as missing:
            raise SchedcError(f"the measured bytes have no {missing} for the {kind} ({unit_mode})") from None
        stages.append(unit.model_copy(update=update))
    return counted.model_copy(update={"stages": stages, "reserve_bytes": reserve})


def rewalk(res, units_form: Profile) -> list[float]:
    """Each rank's peak when the plan `res` (its schedule on its partition) runs with `units_form`."""
    return list(simulate(res.schedule, units_form.merge(res.counts)).peak_memory)


def case_row(case: tuple, mode: str, data: dict, reserve: float, time_limit: float, tmp: Path,
             textbook: bool = False) -> tuple:
    """(case label, the plan's largest peak, its rank, re-walked there, re-walked largest, the
    largest difference over ranks (signed: re-walked above the plan is +), the same with the
    plan's own reserve (the units' bytes alone), the plan's step)."""
    name, ranks, mb, seq, cap = case
    model = data["models"].get(name)
    if model is None or model["seq"] != seq:
        raise SchedcError(f"the measured bytes have no {name} at seq {seq}")
    counted = counted_units(name, seq, mode, tmp, textbook)
    none = counted_units(name, seq, "none", tmp) if mode != "none" else None
    res = plan_mode(counted, mode, none, ranks=ranks, microbatches=mb, memory=cap, time_limit=time_limit,
                    budget="work")
    # a file measured with no gradients before W (a step's first W) lacks what every later W adds
    # into them: added as counted
    first_w = not data.get("w_after_gradients", False)
    added = accumulation(name, seq, mode, tmp) if first_w else None
    added_none = accumulation(name, seq, "none", tmp) if first_w and none is not None else None
    measured = measured_units(counted, model["units"], mode, reserve, added)
    measured_none = measured_units(none, model["units"], "none", reserve, added_none) if none is not None else None
    form = (lambda p, base: p) if mode == "none" else checkpointed_form
    planned = rewalk(res, form(counted, none))
    walked = rewalk(res, form(measured, measured_none))
    own = float(counted.reserve_bytes or 0.0)
    units_only = [w - reserve + own for w in walked]
    rank = max(range(len(planned)), key=planned.__getitem__)
    worst = max(((w - p) / p for w, p in zip(walked, planned)), key=abs)
    worst_units = max(((w - p) / p for w, p in zip(units_only, planned)), key=abs)
    label = f"{name}, {ranks} x {mb}, seq {seq}, {cap}, {'textbook counts' if textbook else mode}"
    return label, planned[rank], rank, walked[rank], max(walked), worst, worst_units, res.value


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measured", type=Path, default=MEASURED,
                    help="measured bytes per unit (benchmarks/gpu_layers.py --json; default: an H100's)")
    ap.add_argument("--modes", nargs="+", default=["none"], choices=["none", "full"],
                    help="checkpointing for the whole model (full: when the file has B's peak, gpu_layers.py's "
                         "since it measures B)")
    ap.add_argument("--time-limit", type=float, default=10.0, help="work units per plan (default 10)")
    ap.add_argument("--reserve", type=float, help="GiB outside the allocator (default: the measured file's)")
    ap.add_argument("--textbook", action="store_true",
                    help="also plan the cases from the textbook count (impl paper) and re-walk them")
    args = ap.parse_args(argv)
    try:
        data = json.loads(args.measured.read_text())
    except (OSError, ValueError) as e:
        print(f"plan_rewalk.py: error: --measured {args.measured}: {e}", file=sys.stderr)
        return 2
    reserve = args.reserve * GiB if args.reserve is not None else float(data.get("outside_allocator_bytes", 0.0))
    print(f"Plans re-walked with the bytes measured on {data.get('device', '?')} (torch {data.get('torch', '?')}; "
          f"{args.measured.name}), reserve {reserve / GiB:.2f} GiB; plan --names hf, counted for CUDA, "
          f"--time-limit {args.time_limit:g} --budget work")
    print("| case | plan's peak (rank) | re-walked there | re-walked, largest rank | worst rank difference "
          "(units' bytes alone) | fits the cap | step (ms) |")
    print("|---|---|---|---|---|---|---|")
    runs = [(case, mode, False) for case in CASES for mode in args.modes]
    if args.textbook:
        runs += [(case, "none", True) for case in CASES]
    with tempfile.TemporaryDirectory() as tmp:
        for case, mode, textbook in runs:
            try:
                label, peak, rank, there, top, worst, worst_units, step = case_row(
                    case, mode, data, reserve, args.time_limit, Path(tmp), textbook)
            except SchedcError as e:
                print(f"| {case[0]}, {case[4]}, {mode} | {str(e)[:90]} | | | | | |", flush=True)
                continue
            cap = float(case[4].removesuffix("GiB")) * GiB
            print(f"| {label} | {peak / GiB:.2f} GiB ({rank}) | {there / GiB:.2f} GiB | {top / GiB:.2f} GiB | "
                  f"{100 * worst:+.1f}% ({100 * worst_units:+.1f}%) | {'yes' if top <= cap else 'no'} | "
                  f"{1000 * step:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
