"""Numbers people read (moeproxy.units): the unit that fits, three significant digits, no exponent."""

from __future__ import annotations

import pytest

from moeproxy.units import human_bytes, human_count


@pytest.mark.parametrize("n, text", [
    (0, "0"), (12, "12"), (999, "999"), (12.5, "12.5"), (635_300, "635 K"), (999_700, "1 M"),
    (1_234_567, "1.23 M"), (235_090_000_000, "235 B"), (6.7e14, "670 T"), (-4500, "-4.5 K"), (None, "n/a"),
])
def test_counts(n, text):
    assert human_count(n) == text


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (512, "512 B"), (1023.9, "1 KiB"), (650_000, "635 KiB"), (int(2.59 * 2**30), "2.59 GiB"),
    (2**30 - 1, "1 GiB"), (3 * 2**50, "3 PiB"), (None, "n/a"),
])
def test_bytes(n, text):
    assert human_bytes(n) == text


def test_no_exponent_beyond_the_largest_unit():
    assert human_count(1e18) == "1,000,000 T" and "e" not in human_bytes(3e20)
