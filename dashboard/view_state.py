"""The view in the URL: a page reads its starting state (run, metrics, zoom, smoothing ...) from the
query string and writes what it shows back, so a copied link opened in a fresh browser shows the
same view. Values are plain text; anything malformed is ignored (the page's default is used)."""

from __future__ import annotations

import math
import re

import streamlit as st

_RANGE = re.compile(r"(-?\d+)-(-?\d+)")


def url_text(name: str) -> str | None:
    value = st.query_params.get(name)
    return value if isinstance(value, str) and value != "" else None


def url_list(name: str) -> list[str]:
    """A comma-separated list (empty when absent)."""
    value = url_text(name)
    return [v for v in value.split(",") if v] if value else []


def url_float(name: str, default: float) -> float:
    try:
        value = float(url_text(name) or "")
    except ValueError:
        return default
    return value if math.isfinite(value) else default


def url_range(name: str) -> tuple[int, int] | None:
    return parse_range(url_text(name) or "")


def parse_range(text: str) -> tuple[int, int] | None:
    """``lo-hi`` (integers, negative ones allowed: ``-5--1``) -> (lo, hi) with lo < hi, else None."""
    m = _RANGE.fullmatch(text)
    if not m:
        return None
    lo, hi = int(m.group(1)), int(m.group(2))
    return (lo, hi) if lo < hi else None


def write_url(**values: str | None) -> None:
    """Set the query string to these values (None or empty: left out); untouched when unchanged."""
    wanted = {k: str(v) for k, v in values.items() if v not in (None, "")}
    if dict(st.query_params) != wanted:
        st.query_params.from_dict(wanted)
