"""Whether a profile's timings can be trusted: spread between repeats and busy cores.

Problem: the compiler optimizes whatever the numbers say, noise included. Method: a spread above
:data:`NOISY_SPREAD` in an F, I or W that matters (:func:`timing_warning`), or more threads than
cores (:func:`cpu_contention`), becomes a ``warning:`` note that ``schedc profile`` prints with
what to do (:func:`profile_warnings`). Cost: none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import torch

from schedc.core.costs import Profile

if TYPE_CHECKING:
    from schedc.runtime.profiling.stages import StageMeasurement

NOISY_SPREAD = 0.5  # (max - min) / median above which the repeats disagree too much to trust


def timing_warning(measured: Sequence[StageMeasurement]) -> Optional[str]:
    """A warning when the repeats of some F, I or W spread more than NOISY_SPREAD (None if not)."""
    noisy = []
    for m in measured:
        total = m.forward.median + m.backward_input.median + m.backward_weight.median
        for kind, stat in (("F", m.forward), ("I", m.backward_input), ("W", m.backward_weight)):
            if stat.median >= 0.05 * total and stat.spread > NOISY_SPREAD:
                noisy.append(f"stage {m.index} {kind} ±{100 * stat.spread:.0f}%")
    if not noisy:
        return None
    samples = min(len(m.backward_input.samples) for m in measured)
    return (f"warning: timings vary a lot between repeats ({', '.join(noisy[:6])}{', ...' if len(noisy) > 6 else ''}); "
            f"the compiler would optimize noise: profile again with more repeats than the {samples} timed here "
            f"(e.g. --repeats {max(20, 2 * samples)}), --threads as the ranks will use, on a quiet machine "
            f"(other processes share the cores)")


def cpu_contention(threads: int, processes: int = 1) -> Optional[str]:
    """A warning when this host's CPUs are oversubscribed for a CPU profile (None if not).

    Timings taken while more threads want the cores than there are (this profile's own
    ``processes x threads``, or other programs: the 1-minute load average before measuring) come
    out many times slower than on a quiet host, consistently, so the spread of the repeats does
    not show it; a profile measured so describes the contention, not the model."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    wanted = threads * processes
    if wanted > cores:
        return (f"warning: {processes} process(es) x {threads} thread(s) want {wanted} cores but {cores} are here: "
                f"oversubscribed, so every timing includes waiting for a core; use --threads "
                f"{max(1, cores // processes)} or fewer")
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    if load + wanted > cores + 0.5:
        return (f"warning: the machine was busy before profiling (load average {load:.1f} on {cores} cores, "
                f"{wanted} more thread(s) for this profile): the timings include waiting for a core and describe "
                f"this load; profile on a quiet machine for the model's own costs")
    return None


def profile_warnings(profile: Profile) -> list[str]:
    """The profile's notes that are warnings (e.g. from :func:`timing_warning`), without the prefix."""
    return [n.removeprefix("warning: ") for n in profile.notes or [] if n.startswith("warning: ")]



def contention_note(dev: torch.device, processes: int) -> list[str]:
    """:func:`cpu_contention` before measuring on a CPU, as profile notes."""
    if dev.type != "cpu":
        return []
    warning = cpu_contention(torch.get_num_threads(), processes)
    return [warning] if warning else []
