"""How schedc prints bytes and seconds: one formatter for each, used by every message and table.

Byte sizes are binary (KiB, MiB, GiB, TiB: ``torch.cuda.memory_summary``'s units); a size a
message suggests as a cap is rounded up so that it holds what it names.
"""

from __future__ import annotations

import math

from schedc.core.tolerances import REL


def format_bytes(n: float, round_up: bool = False) -> str:
    """`n` bytes in the largest binary unit it reaches, two decimals; `round_up`: never below `n`
    (the two decimals rounded up, whole bytes below a KiB), so that a cap a message suggests
    (``--memory 4.89KiB`` for 5000 bytes, not 4.88) holds `n`. The one byte formatter."""
    if math.isinf(n):
        return "inf"
    if abs(n) >= 1e6 * 2**40:  # a profile of 1e300 bytes printed 290 digits per cell
        return f"{n / 2**40:.3g}TiB"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{math.ceil(n / size * 100 - REL) / 100 if round_up else n / size:.2f}{unit}"
    if round_up:
        return f"{math.ceil(n)}B"
    return f"{n:g}B" if n != int(n) else f"{int(n)}B"


def format_seconds(x: float) -> str:
    """A measured duration, 3 significant digits: '19.2ms', '840us', '1.02s' ('0' for none); never
    an exponent ('1.02e+03ms')."""
    if x == 0:
        return "0"
    if abs(x) >= 0.9995:
        value, unit = x, "s"
    elif abs(x) >= 1e-4:
        value, unit = 1e3 * x, "ms"
    else:
        value, unit = 1e6 * x, "us"
    return f"{value:.3g}{unit}" if abs(value) < 999.5 else f"{value:.0f}{unit}"


def format_ms(x: float) -> str:
    """A step or finish time for a table column: '1504.0ms', '8.25ms' (two decimals below 10 ms)."""
    return f"{1e3 * x:.1f}ms" if x >= 0.01 else f"{1e3 * x:.2f}ms"


def format_memory(x: float) -> str:
    """A memory amount as the CLI and plots print it: 'none' for no cap, bytes from 1 KiB up,
    else the bare number (uniform costs count memory in stage activations, not bytes)."""
    if math.isinf(x):
        return "none"
    return format_bytes(x) if x >= 1024 else f"{x:.4g}"
