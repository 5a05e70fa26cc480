"""Routing-collapse detector: the MoE router concentrates tokens on few experts.

Rules (shared/research/logs-and-failures.md §2 row 4): normalised router entropy (mean over
layers, or any single layer) dropping by > 30% of its early level and staying there; load
imbalance (max/mean expert load, ~1 when balanced) rising 2x and staying; the unscaled
load-balancing (aux) loss (~1.0 balanced) above 1.5x its early level for several records; z-loss
growth. Onset is where the move began (see robust.py).
"""

from __future__ import annotations

from moeproxy.vocabulary import LAYER_PREFIX

import re

import numpy as np

from moeproxy.diagnose import evidence as ev
from moeproxy.diagnose.config import DiagnoseConfig, thresholds
from moeproxy.diagnose.registry import register_detector
from moeproxy.diagnose.robust import fmt, head_level, holds_from, tail_level
from moeproxy.diagnose.series import RunSeries
from moeproxy.diagnose.shifts import sustained_shift
from moeproxy.diagnose.taxonomy import CRITICAL, ROUTING_COLLAPSE, Finding
from moeproxy.diagnose.rules import declare

thresholds(
    routing_entropy_drop=(0.30, "router entropy drop, as a share of its early level, that makes a collapse"),
    load_imbalance_factor=(2.0, "max/mean expert load rise (times its early level) that makes a collapse"),
    aux_loss_factor=(1.5, "load-balancing loss rise (times its early level; ~1 when balanced)"),
)

RULES = declare(ROUTING_COLLAPSE, {
    "routing_entropy_drop": "router entropy down 30% of its early level and staying",
    "layer_routing_entropy_drop": "one layer's router entropy down 30% and staying",
    "load_imbalance_rise": "max/mean expert load doubled and staying",
    "aux_loss_rise": "the load-balancing loss 1.5x its early level and staying",
    "z_loss_rise": "router z-loss 3x and staying",
}, thresholds={"routing_entropy_drop": ("routing_entropy_drop",), "load_imbalance_rise": ("load_imbalance_factor",),
               "aux_loss_rise": ("aux_loss_factor",)})

_LAYER = re.compile("^" + re.escape(LAYER_PREFIX) + r"(\d+)$")
_MAX_VIOLATION = re.compile(r"(?:^|[/_ ])max[_ ]?vio(?:lation)?$", re.IGNORECASE)


def _entropy_drop(name: str, series, cfg: DiagnoseConfig) -> Finding | None:
    s = series[np.isfinite(series.to_numpy())]
    if len(s) <= cfg.min_history:
        return None
    start, end = head_level(s.to_numpy()), tail_level(s.to_numpy())
    if not start > 0 or end > start * (1 - cfg.routing_entropy_drop):
        return None
    shift = sustained_shift(s, -1, delta=start * cfg.routing_entropy_drop / 3, z=cfg.robust_z, visible=cfg.onset_visible_share,
                            min_history=cfg.min_history)
    onset = shift.onset_step if shift else int(s.index[np.argmax(s.to_numpy() < start * (1 - cfg.routing_entropy_drop / 2))])
    return Finding(ROUTING_COLLAPSE, onset, CRITICAL, name, "routing_entropy_drop",
                   f"{name} fell {ev.move(s, onset)}; {ev.median_of(ev.head(s))} vs {ev.median_of(ev.tail(s))} "
                   f"({fmt(100 * (1 - end / start))}% drop, limit {fmt(100 * cfg.routing_entropy_drop)}%)")


def _rise(name: str, series, cfg: DiagnoseConfig, factor: float, rule: str, what: str,
          shown: str | None = None) -> Finding | None:
    """A rise of ``factor`` that lasts; ``shown``: how the evidence names the series read (``name``
    unless it was transformed: one more than DeepSeek's max violation)."""
    shown = shown or name
    s = series[np.isfinite(series.to_numpy())]
    if len(s) <= cfg.min_history:
        return None
    shift = sustained_shift(s, +1, factor=factor, z=cfg.robust_z, visible=cfg.onset_visible_share, min_history=cfg.min_history)
    if shift is None:
        return _ramp(name, s, factor, rule, what, shown)
    if tail_level(s.to_numpy()) <= head_level(s.to_numpy()):
        return None  # back at or below where it started by the end: a start-up transient, not lasting
    base = ev.baseline(s, shift, positive=True)
    return Finding(ROUTING_COLLAPSE, shift.onset_step, CRITICAL, name, rule,
                   f"{shown} rose {ev.move(s, shift.onset_step)}, peak {ev.rec(s, shift.peak_step)} "
                   f"({ev.ratio(shift.peak, ev.median_value(base))} the {ev.median_of(base, ev.baseline(s, shift))} "
                   f"before, limit {fmt(factor)}x): {what}")


def _ramp(name: str, s, factor: float, rule: str, what: str, shown: str) -> Finding | None:
    """A rise from the first records on, with no calm stretch before it to measure a shift against
    (experts starving one after another from the first step): its last records' level ``factor``
    times its first records' and more, dated from the record after which it stays above the midway
    level (LABELS.md: a level crossed for good)."""
    v = s.to_numpy(dtype=float)
    start, end = head_level(v), tail_level(v)
    if not (start > 0 and end >= factor * start):
        return None
    stays = holds_from(v > start * (1 + factor) / 2, 1.0)
    if not stays.size:
        return None
    onset = int(s.index[int(stays[0])])
    return Finding(ROUTING_COLLAPSE, onset, CRITICAL, name, rule,
                   f"{shown} rose from {ev.median_of(ev.head(s))} to {ev.median_of(ev.tail(s))} "
                   f"({fmt(end / start)}x, limit {fmt(factor)}x), above {fmt(start * (1 + factor) / 2)} from "
                   f"{ev.rec(s, onset)} on: {what}")


@register_detector("routing_collapse", "router entropy drop, load imbalance, aux/z-loss blow-up")
def detect_routing_collapse(run: RunSeries, cfg: DiagnoseConfig) -> list[Finding]:
    out: list[Finding] = []
    s = run.get("routing_entropy")
    if s is not None:
        f = _entropy_drop("routing_entropy", s, cfg)
        if f:
            out.append(f)
    layer_hits = []
    for name, series in run.matching(lambda n: bool(_LAYER.match(n))):
        f = _entropy_drop(name, series, cfg)
        if f:
            layer_hits.append(f)
    if layer_hits:
        first = min(layer_hits, key=lambda f: f.onset_step)
        out.append(Finding(first.category, first.onset_step, first.severity, first.metric,
                           "layer_routing_entropy_drop",
                           first.evidence + f" ({len(layer_hits)} layer(s) collapsed)"))
    found = run.get("load_imbalance")
    if found is not None:
        f = _rise("load_imbalance", found, cfg, cfg.load_imbalance_factor, "load_imbalance_rise",
                  "tokens concentrate on few experts")
        if f:
            out.append(f)
    for name, series in run.matching(lambda n: _MAX_VIOLATION.search(n) is not None and n != "load_imbalance"):
        # DeepSeek's maximal load violation, max load / mean load - 1 (0 when balanced): the
        # imbalance is one more than it
        f = _rise(name, series + 1.0, cfg, cfg.load_imbalance_factor, "load_imbalance_rise",
                  "tokens concentrate on few experts", shown=f"1 + {name} (max/mean expert load)")
        if f:
            out.append(f)
            break
    found = run.resolve("aux_loss")
    if found:
        f = _rise(found[0], found[1], cfg, cfg.aux_loss_factor, "aux_loss_rise",
                  "the load-balancing loss is about one when balanced")
        if f:
            out.append(f)
    for name in ("z_loss", "moe/z_loss"):
        s = run.get(name)
        if s is not None:
            f = _rise(name, s, cfg, 3.0, "z_loss_rise", "router logits are growing")
            if f:
                out.append(f)
    return out
