"""Numbers people read: counts and byte sizes in the unit that fits them, three significant digits.

One formatter for the CLI (``plan``, ``build``, ``evaluate``) and the dashboard's Proxy page, so a
tiny model shows ``635 K`` parameters and a large one ``235 B``, never ``0.0006353 B``.
``human_count`` uses K, M, B, T (powers of 1000, as model sizes are quoted); ``human_bytes`` uses
KiB, MiB, GiB, TiB (powers of 1024, as memory is sized).
"""

from __future__ import annotations

import math

COUNT_UNITS = (("", 1), ("K", 1e3), ("M", 1e6), ("B", 1e9), ("T", 1e12))
BYTE_UNITS = (("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40), ("PiB", 2**50))


def _scaled(value: float, units: tuple[tuple[str, float], ...], digits: int) -> tuple[str, str]:
    """(number, unit): the largest unit the value reaches, bumped up when rounding reaches the next."""
    magnitude = abs(value)
    index = 0
    while index + 1 < len(units) and magnitude >= units[index + 1][1]:
        index += 1
    while True:
        name, scale = units[index]
        scaled = value / scale
        text = f"{scaled:.{digits}g}"
        if abs(float(text)) < 1000 or index + 1 == len(units):
            break
        index += 1
    if "e" in text:  # beyond the largest unit: digits without an exponent
        text = f"{scaled:,.0f}"
    return text, name


def human_count(n: float | int | None, digits: int = 3) -> str:
    """``635 K``, ``1.2 M``, ``235 B``; counts under 1000 as they are (``12``); ``n/a`` for None."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "n/a"
    if abs(n) < 1000 and float(n).is_integer():
        return str(int(n))
    text, unit = _scaled(float(n), COUNT_UNITS, digits)
    return f"{text} {unit}".rstrip()


def human_bytes(n: float | int | None, digits: int = 3) -> str:
    """``512 B``, ``635 KiB``, ``2.59 GiB``; ``n/a`` for None."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "n/a"
    text, unit = _scaled(float(n), BYTE_UNITS, digits)
    return f"{text} {unit}"
