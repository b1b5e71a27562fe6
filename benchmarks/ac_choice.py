"""What choosing activation checkpointing buys: `schedc plan --ac auto` against one mode for the whole model.

For Llama-3-8B- and Qwen2.5-7B-shaped decoders (the Hugging Face config fields are written below,
nothing is downloaded), microbatches of one sequence, per case (ranks, microbatches, sequence
length, cap per rank), it prints the step of

- ``schedc plan --ac MODE`` with each activation-checkpointing mode for the whole model (none,
  selective, full: what torchtitan and NeMo launch; light: schedc's runtime only), each with the
  same time limit as ``--ac auto`` (what a user choosing that mode gets), each counted by
  ``schedc.model_costs.unit_profile`` and run as torch runs it: a checkpointed stage's backward whole (B, one recompute; torch refuses
  the split backward under selective checkpointing, and under full checkpointing recomputes the
  forward once per parameter group in W);
- the per-stage choice made with the partition (what schedc's runtime applies), its modes
  (n/l/s/f per stage) and units per stage;
- ``--ac auto`` (its own global plans, in a share of the same time limit, and the per-stage
  choice), its margin over the best global mode torchtitan and NeMo launch and over the best
  global mode of all four, and whether memory
  binds: the step without checkpointing under the cap is over 1% longer than without a cap (a
  plan with a fifth of the time, in brackets) or does not fit;
- "free recompute" (where memory binds): the per-stage search's step, same share of the time,
  if checkpointing kept what it keeps but recomputed nothing: what the per-stage choice would buy
  if recompute cost nothing (checkpointed stages still run B);
- torchtitan 0.3.0's default split with its own schedule classes (1F1B, Interleaved1F1B,
  ZBVZeroBubble) and the checkpointing it defaults to (selective, run as B), under the same
  memory model; "over" where the cap is exceeded.

Step times are the simulator's (counted costs at 400 TFLOP/s effective), not measurements.

    python benchmarks/ac_choice.py --budget work --time-limit 30   # the table, the same on any machine
    python benchmarks/ac_choice.py --match qwen --match 40GiB      # some rows
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from schedc.core.costs import FRAMEWORK_AC
from schedc.core.settings import COUNTED_FOR_TORCH
from schedc.errors import SchedcError
from schedc.model_costs import unit_profile
from schedc.planning import AC_MODES, TORCHTITAN_AC, plan, plan_ac, torchtitan_rows
from schedc.planning.ac import AC_SHARE, checkpointed_form, mode_forms, per_stage_search, plan_mode
from schedc.solver.deadline import counting_work

CONFIGS = {
    "llama3-8b": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                  "torch_dtype": "bfloat16", "tie_word_embeddings": False},
    "qwen2.5-7b": {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944,
                   "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                   "torch_dtype": "bfloat16", "tie_word_embeddings": False},
}
# (model, ranks, microbatches, seq, cap): the planning issue's four, then tighter memory
CASES = [(name, 8, 32, 4096, cap) for name in CONFIGS for cap in ("80GiB", "40GiB")] + \
        [(name, 8, 32, seq, cap) for name in CONFIGS for seq, cap in ((4096, "28GiB"), (8192, "40GiB"))] + \
        [("qwen2.5-7b", 8, 32, 4096, "34GiB")]


UNCAPPED_SHARE = 0.2  # of --time-limit, for the plan without checkpointing and without a cap


def profiles_of(name: str, tmp: Path, seq: int = 4096, torch: str = COUNTED_FOR_TORCH) -> dict:
    """Per checkpointing mode, the per-unit profile counted for `name`'s config at `seq`, for the
    release `torch` (what its runtime holds: schedc.core.cost_model)."""
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(CONFIGS[name]))
    return {mode: unit_profile(path, seq=seq, activation_checkpoint=mode, torch=torch) for mode in AC_MODES}


def ms(x) -> str:
    return "—" if x is None else f"{1000 * x:.1f}"


def free_recompute(profiles: dict, res, time_limit: float, budget: str):
    """The per-stage search of --ac auto (its share of the time, on the same clock) from the
    plan `res` if checkpointed units recomputed nothing (their I and W those of no
    checkpointing) but kept what they keep; None if nothing fits."""
    none = profiles["none"]
    forms = {"none": none, "none-b": checkpointed_form(none, none)}
    for mode in AC_MODES[1:]:
        free = [u.model_copy(update={"backward_input": n.backward_input, "backward_weight": n.backward_weight})
                for u, n in zip(profiles[mode].stages, none.stages)]
        forms[mode] = checkpointed_form(profiles[mode].model_copy(update={"stages": free}), none)
    share = (1 - AC_SHARE) * time_limit
    with counting_work(share) if budget == "work" else nullcontext():
        mix = per_stage_search(forms, res, res.ac.chosen if isinstance(res.ac.chosen, str) else "none", share)
    return None if mix is None else mix["compiled"].value


def global_step(profiles: dict, mode: str, ranks: int, mb: int, cap: str, time_limit: float, budget: str):
    """The step of ``schedc plan --ac MODE`` (None where nothing fits)."""
    try:
        return plan_mode(profiles[mode], mode, profiles["none"], ranks=ranks, microbatches=mb, memory=cap,
                         time_limit=time_limit, budget=budget).value
    except SchedcError:
        return None


def short(mode) -> str:
    """n / l / s / f for a stage's mode; s1/3: one of its three blocks checkpointed selectively;
    f1s2/3: one fully and two selectively."""
    if isinstance(mode, str):
        return mode[0]
    used = "".join(f"{m[0]}{mode.count(m)}" for m in reversed(AC_MODES[1:]) if m in mode)
    return f"{used or 'n'}/{len(mode)}"


def row(case: tuple, profiles: dict, time_limit: float, budget: str = "time") -> str:
    name, ranks, mb, seq, cap = case
    head = f"| {name} | {ranks} x {mb}, seq {seq} | {cap} |"
    t0 = time.monotonic()
    try:
        res = plan_ac(profiles, ranks=ranks, microbatches=mb, memory=cap, time_limit=time_limit, budget=budget)
    except SchedcError as e:
        return f"{head} {str(e)[:100]} |"
    steps = {m: global_step(profiles, m, ranks, mb, cap, time_limit, budget) for m in AC_MODES}
    best_global = min((v for v in steps.values() if v is not None), default=None)
    best_framework = min((v for m, v in steps.items() if v is not None and m in FRAMEWORK_AC), default=None)
    mix = res.ac.per_stage
    titan = torchtitan_rows(mode_forms(profiles)[TORCHTITAN_AC], ranks, mb, res.compiled.problem.memory, "makespan")
    titan_cells = [ms(r.value) if r.value is not None else "over" for r in titan]
    titan_best = min((r.value for r in titan if r.value is not None), default=None)
    margin = " | ".join("—" if b is None else f"{100 * (b - res.value) / b:.1f}%" for b in (best_framework, best_global))
    vs_titan = "—" if titan_best is None else f"{100 * (titan_best - res.value) / titan_best:.1f}%"
    chosen = res.ac.chosen if isinstance(res.ac.chosen, str) else "per stage"
    mix_cell = "—" if mix is None else (f"{ms(mix['step'])} ({' '.join(map(short, mix['modes']))} on "
                                        f"{','.join(map(str, mix['units_per_stage']))})")
    uncapped = plan(profile=profiles["none"], ranks=ranks, microbatches=mb, memory="none",
                    time_limit=UNCAPPED_SHARE * time_limit, budget=budget).value
    none = steps.get("none")
    binds = none is None or none > uncapped * 1.01
    free = free_recompute(profiles, res, time_limit, budget) if binds else None
    free_cell = "—" if free is None or best_framework is None else \
        f"{ms(free)} ({100 * (best_framework - free) / best_framework:.1f}%)"
    bound_by = f"{'yes' if binds else 'no'} ({ms(uncapped)})"
    return (f"{head} {' | '.join(ms(steps.get(m)) for m in AC_MODES)} | {mix_cell} | **{ms(res.value)}** ({chosen}) | "
            f"{margin} | {bound_by} | {free_cell} | {' | '.join(titan_cells)} | {vs_titan} | {time.monotonic() - t0:.0f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=30.0, help="seconds per --ac auto plan (default 30)")
    ap.add_argument("--budget", choices=["time", "work"], default="time",
                    help="work: --time-limit in work units, the same table on any machine (schedc plan --budget)")
    ap.add_argument("--match", action="append", default=[], metavar="TEXT",
                    help="keep the rows whose model, shape and cap contain every TEXT")
    args = ap.parse_args(argv)
    print(f"step in ms (simulated); microbatch size 1; torchtitan columns: its default split, {TORCHTITAN_AC} AC")
    print("| model | ranks x microbatches | cap | none | light | selective | full | per stage (modes on units per stage; "
          "s1/3: 1 of 3 blocks selective, f1s2/3: 1 full and 2 selective) | **--ac auto** | auto vs best of none, "
          "selective, full | auto vs best global mode | memory binds (none without a cap) | free recompute (vs best of "
          "none, selective, full) | torchtitan 1F1B | Interleaved1F1B | ZBVZeroBubble | auto vs torchtitan | plan s |")
    print("|---" * 19 + "|")
    cache: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            name, ranks, mb, seq, cap = case
            if not all(text in f"| {name} | {ranks} x {mb}, seq {seq} | {cap} |" for text in args.match):
                continue
            if (name, seq) not in cache:
                cache[(name, seq)] = profiles_of(name, Path(tmp), seq)
            print(row(case, cache[(name, seq)], args.time_limit, args.budget), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
