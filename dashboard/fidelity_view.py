"""The fidelity card on the Compare page and in the report: computed by ``moeproxy.fidelity`` (the
module behind ``moeproxy compare``), shown here as a few headline numbers plus the full JSON.

This module only finds the fidelity entry point and formats its card; the comparison itself lives
in ``moeproxy.fidelity``. Headline keys read when present: ``verdict_match``, ``onset_delta``
(or ``onset_delta_steps``/``onset_delta_fraction``), ``correlations`` (metric -> r) and
``cost_ratio``; anything else stays visible in the JSON.
"""

from __future__ import annotations

import importlib

from moeproxy.errors import MoeproxyError

_ENTRY_POINTS = ("compare_runs", "fidelity_card", "compare", "compare_store_runs")


def compute_card(store, full: str, proxy: str) -> dict:
    """The fidelity card of ``proxy`` against ``full``; ``MoeproxyError`` when unavailable."""
    try:
        fidelity = importlib.import_module("moeproxy.fidelity")
    except ImportError:
        raise MoeproxyError("fidelity card unavailable: moeproxy.fidelity is not part of this install yet") from None
    for name in _ENTRY_POINTS:
        entry = getattr(fidelity, name, None)
        if callable(entry):
            card = entry(store, full, proxy)
            return card if isinstance(card, dict) else dict(card)
    raise MoeproxyError(f"fidelity card unavailable: moeproxy.fidelity has none of {', '.join(_ENTRY_POINTS)}")


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    return "—" if value is None else str(value)


def card_metrics(card: dict) -> list[tuple[str, str]]:
    """(label, value) pairs for the headline numbers present in ``card``."""
    rows: list[tuple[str, str]] = []
    if "verdict_match" in card:
        rows.append(("verdict match", _fmt(card["verdict_match"])))
    for key, label in (("onset_delta", "onset delta (steps)"), ("onset_delta_steps", "onset delta (steps)"),
                       ("onset_delta_fraction", "onset delta (fraction)")):
        if key in card:
            rows.append((label, _fmt(card[key])))
    correlations = card.get("correlations")
    if isinstance(correlations, dict):
        for metric, r in list(correlations.items())[:6]:
            rows.append((f"corr {metric}", _fmt(r if not isinstance(r, dict) else r.get("pearson", r.get("r")))))
    for key in ("cost_ratio", "accelerator_ratio", "step_cost_ratio"):
        if key in card:
            rows.append((key.replace("_", " "), _fmt(card[key])))
    return rows
