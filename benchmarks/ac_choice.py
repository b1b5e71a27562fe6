"""What choosing activation checkpointing buys: `schedc plan --ac auto` against one mode for the whole model.

For Llama-3-8B- and Qwen2.5-7B-shaped decoders (the Hugging Face config fields are written below,
nothing is downloaded), 8 pipeline ranks, 32 microbatches of one 4096-token sequence, and caps of
80 and 40 GiB per rank, it prints the step of

- ``schedc plan`` with each activation-checkpointing mode for the whole model (none, selective,
  full: what torchtitan and NeMo launch), each counted by ``schedc.model_costs.unit_profile``;
- the per-stage choice on the best global plan's partition (what schedc's own runtime applies);
- ``--ac auto`` (the best of those), its margin over the best global mode;
- torchtitan 0.3.0's default split with its own schedule classes (1F1B, Interleaved1F1B,
  ZBVZeroBubble) and the checkpointing it defaults to (selective), under the same memory model;
  "over" where the cap is exceeded.

Step times are the simulator's (counted costs at 400 TFLOP/s effective), not measurements.

    python benchmarks/ac_choice.py                  # the table (about 2 minutes per row here)
    python benchmarks/ac_choice.py --time-limit 10  # shorter searches
    python benchmarks/ac_choice.py --match qwen --match 40GiB
    python benchmarks/ac_choice.py --budget work    # work units: the same table on any machine
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from schedc.errors import SchedcError
from schedc.model_costs import unit_profile
from schedc.plan import AC_MODES, TORCHTITAN_AC, plan_ac, torchtitan_rows

CONFIGS = {
    "llama3-8b": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                  "torch_dtype": "bfloat16", "tie_word_embeddings": False},
    "qwen2.5-7b": {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944,
                   "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                   "torch_dtype": "bfloat16", "tie_word_embeddings": False},
}
RANKS, MICROBATCHES, SEQ = 8, 32, 4096
CAPS = ("80GiB", "40GiB")


def profiles_of(name: str, tmp: Path) -> dict:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(CONFIGS[name]))
    return {mode: unit_profile(path, seq=SEQ, activation_checkpoint=mode) for mode in AC_MODES}


def ms(x) -> str:
    return "—" if x is None else f"{1000 * x:.1f}"


def row(name: str, cap: str, profiles: dict, time_limit: float, budget: str = "time") -> str:
    t0 = time.monotonic()
    try:
        res = plan_ac(profiles, ranks=RANKS, microbatches=MICROBATCHES, memory=cap, time_limit=time_limit,
                      budget=budget)
    except SchedcError as e:
        return f"| {name} | {cap} | {str(e)[:80]} |"
    steps = res.ac.global_steps
    best_global = min((v for v in steps.values() if v is not None), default=None)
    mix = res.ac.per_stage
    titan = torchtitan_rows(profiles[TORCHTITAN_AC], RANKS, MICROBATCHES, res.compiled.problem.memory, "makespan")
    titan_cells = [ms(r.value) if r.value is not None else "over" for r in titan]
    titan_best = min((r.value for r in titan if r.value is not None), default=None)
    margin = "—" if best_global is None else f"{100 * (best_global - res.value) / best_global:.1f}%"
    vs_titan = "—" if titan_best is None else f"{100 * (titan_best - res.value) / titan_best:.1f}%"
    chosen = res.ac.chosen if isinstance(res.ac.chosen, str) else ",".join(m[0] for m in res.ac.chosen)
    mix_cell = "—" if mix is None else f"{ms(mix['step'])} ({','.join(m[0] for m in mix['modes'])})"
    return (f"| {name} | {cap} | {' | '.join(ms(steps.get(m)) for m in AC_MODES)} | {mix_cell} | "
            f"**{ms(res.value)}** ({chosen}) | {margin} | {' | '.join(titan_cells)} | {vs_titan} | "
            f"{time.monotonic() - t0:.0f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per --ac auto plan (default 60)")
    ap.add_argument("--budget", choices=["time", "work"], default="time",
                    help="work: --time-limit in work units, the same table on any machine (schedc plan --budget)")
    ap.add_argument("--match", action="append", default=[], metavar="TEXT",
                    help="keep the rows whose model and cap contain every TEXT")
    args = ap.parse_args(argv)
    print(f"{RANKS} ranks, {MICROBATCHES} microbatches, seq {SEQ}, microbatch size 1; step in ms (simulated); "
          f"torchtitan columns: its default split, {TORCHTITAN_AC} AC")
    print("| model | cap | none | selective | full | per stage (n/s/f) | **--ac auto** | auto vs best global | "
          "torchtitan 1F1B | Interleaved1F1B | ZBVZeroBubble | auto vs torchtitan | plan s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in CONFIGS:
            profiles = None
            for cap in CAPS:
                if not all(text in f"| {name} | {cap} |" for text in args.match):
                    continue
                profiles = profiles or profiles_of(name, Path(tmp))
                print(row(name, cap, profiles, args.time_limit, args.budget), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
