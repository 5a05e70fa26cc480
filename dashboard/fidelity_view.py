"""The fidelity card on the Compare page and in the report: ``moeproxy.fidelity.compare_runs`` (the
JSON that ``moeproxy compare --json`` prints), shown as headline numbers plus the full JSON.

Only formatting lives here; the comparison itself is ``moeproxy.fidelity``'s.
Headlines: verdict match, onset delta (steps, from the two sides' onsets, and the relative
difference the card reports), the correlations of the triage metrics first, and every cost ratio.
"""

from __future__ import annotations

from moeproxy.fidelity import compare_runs

HEADLINE_CORRELATIONS = ("grad_norm", "loss", "routing_entropy", "reward_mean", "policy_entropy", "kl")


def compute_card(store, full: str, proxy: str) -> dict:
    """The fidelity card of ``proxy`` against ``full`` (``NotFound`` for an unknown run)."""
    return compare_runs(store, full, proxy)


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3g}"
    return "n/a" if value is None else str(value)


def card_metrics(card: dict) -> list[tuple[str, str]]:
    """(label, value) pairs for the headline numbers of a fidelity card."""
    rows: list[tuple[str, str]] = [("verdict match", _fmt(card.get("verdict_match")))]
    full_onset = (card.get("full") or {}).get("onset_step")
    proxy_onset = (card.get("proxy") or {}).get("onset_step")
    delta = None if full_onset is None or proxy_onset is None else int(proxy_onset) - int(full_onset)
    rows.append(("onset delta (steps)", _fmt(f"{delta:+d}" if delta is not None else None)))
    rows.append(("onset relative difference", _fmt(card.get("onset_relative_difference"))))
    correlations = card.get("correlations") or {}
    ordered = [m for m in HEADLINE_CORRELATIONS if m in correlations]
    for metric in ordered[:5]:
        rows.append((f"r {metric}", _fmt(correlations[metric])))
    for name, entry in (card.get("cost") or {}).items():
        if isinstance(entry, dict) and entry.get("ratio") is not None:
            rows.append((f"cost ratio {name} (proxy/full)", _fmt(entry["ratio"])))
    return rows
