"""Regenerate the pictures the README and docs/results.md show (docs/*.png). Never edit those files by hand.

    python scripts/make_docs_images.py            # writes docs/compare_4x8.png, docs/v_8x16.png
    python scripts/make_docs_images.py --no-compile   # skip the compiled panel (no solver run)

Every input is fixed (identical stages, F = I = W = 1, 0.1 of communication per boundary) and
the PNG carries no date, so a rerun gives the same bytes as long as the compiler proves its
answer optimal (it does for 4 x 8 in about a second) and matplotlib's version is unchanged.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.core.costs import MemoryLimit, Profile  # noqa: E402
from schedc.core.simulate import simulate  # noqa: E402
from schedc.show.plot import plot_schedules  # noqa: E402

COSTS = dict(forward=1.0, backward_input=1.0, backward_weight=1.0, comm=0.1)


def compare_4x8(out: Path, compile_too: bool, time_limit: float) -> str:
    """1F1B vs ZB-H1 vs the compiled schedule, 4 ranks x 8 microbatches, memory 1.5p."""
    profile, memory = Profile.uniform(4, **COSTS), MemoryLimit.parse("1.5p")
    schedules = [make_baseline("1f1b", 4, 8), make_baseline("zb-h1", 4, 8)]
    titles = ["1F1B", "ZB-H1"]
    note = ""
    if compile_too:
        try:
            from schedc.solver import compile_schedule
        except ImportError as e:  # the solver's driver is optional for this picture
            note = f" (compiled panel skipped: {e})"
        else:
            result = compile_schedule(4, 8, profile=profile, memory=memory, time_limit=time_limit, seed=0)
            schedules.append(result.schedule)
            titles.append(f"schedc compile ({result.status})")
    path = out / "compare_4x8.png"
    plot_schedules(schedules, profile, memory, titles=titles, path=path)
    spans = ", ".join(f"{t} {simulate(s, profile).makespan:.4g}" for t, s in zip(titles, schedules))
    return f"{path}: {spans}{note}"


def v_8x16(out: Path) -> str:
    """ZB-V (V placement) vs interleaved 1F1B (loop placement), 16 stages on 8 ranks, 16 mb, 1p."""
    profile, memory = Profile.uniform(16, **COSTS), MemoryLimit.parse("1p")
    schedules = [make_baseline("zb-v", 16, 16, n_ranks=8), make_baseline("interleaved-1f1b", 16, 16, n_ranks=8)]
    titles = ["ZB-V (V placement)", "interleaved 1F1B (loop placement)"]
    path = out / "v_8x16.png"
    plot_schedules(schedules, profile, memory, titles=titles, path=path)
    spans = ", ".join(f"{t} {simulate(s, profile).makespan:.4g}" for t, s in zip(titles, schedules))
    return f"{path}: {spans}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs", help="folder for the images (default: docs/)")
    p.add_argument("--no-compile", action="store_true", help="leave out the compiled schedule's panel")
    p.add_argument("--time-limit", type=float, default=60.0, help="solver seconds for the compiled panel")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(compare_4x8(args.out, not args.no_compile, args.time_limit))
    print(v_8x16(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
