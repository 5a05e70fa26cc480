"""Turning the text of a logged value into a float, keeping NaN and +-inf as values.

Frameworks print non-finite numbers in many spellings: ``nan``, ``NaN``, ``inf``, ``-inf``, ``INF``
(Megatron's ``{:E}``), ``Infinity`` (Python's json), ``null``/``None`` (orjson and TRL write NaN as
null), ``np.float64(nan)`` and ``tensor(inf)`` (reprs). All of them are values here, never dropped.
"""

from __future__ import annotations

import math
import re

NONFINITE_WORDS: dict[str, float] = {
    "nan": math.nan,
    "+nan": math.nan,
    "-nan": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "-inf": -math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-infinity": -math.inf,
    "null": math.nan,
    "none": math.nan,
}

# np.float64(0.12), np.float32(nan), tensor(1.5), tensor(inf, device='cuda:0'), torch.tensor(2.)
_WRAPPED = re.compile(r"^(?:np\.|numpy\.)?(?:float\d*|int\d*|double|tensor|torch\.tensor)\(\s*([^,)\s]+)")
_SUFFIX = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(%|ms|s)?$")


def parse_number(token: str) -> float | None:
    """Return the float a token stands for, or None when it is not a number.

    Accepts plain numbers, the non-finite spellings above, numpy/torch reprs and a trailing
    unit of ``%`` (kept as written), ``ms`` or ``s`` (the number itself, unit dropped).
    """
    t = token.strip().rstrip(",;|")
    if not t:
        return None
    try:
        return float(t)
    except ValueError:
        pass
    low = t.lower()
    if low in NONFINITE_WORDS:
        return NONFINITE_WORDS[low]
    m = _WRAPPED.match(t)
    if m:
        return parse_number(m.group(1))
    m = _SUFFIX.match(t)
    if m:
        return float(m.group(1))
    return None


def coerce_json_value(value: object) -> float | None:
    """A JSON-decoded value in a metric position: numbers and null are values; text like 'nan' too."""
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:  # beyond the float range: +-inf, as float("1e400") reads a spelled-out number
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        return parse_number(value)
    return None
