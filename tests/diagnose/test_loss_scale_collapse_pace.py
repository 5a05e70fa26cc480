"""LABELS.md: the loss scale collapses (halving far below its start-up search in a few steps); an
occasional overflow tens of steps after the last, each halving the scale once, is the dynamic
scaler at work (it grows the scale back after a clean window)."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def _run(scale_at: dict[int, float], steps: int = 300) -> dict:
    rng = np.random.default_rng(5)
    loss = {s: 2.0 - s / 1000 + 0.02 * rng.standard_normal() for s in range(1, steps + 1)}
    return diagnose_series({"loss": loss, "loss_scale": scale_at})


def _collapse(result: dict) -> bool:
    return any(f["rule"] == "loss_scale_collapse" for f in result["findings"] if f["severity"] == "critical")


def test_halvings_tens_of_steps_apart_are_occasional_overflows():
    scale = {1: 65536.0, 2: 32768.0, 3: 16384.0, 60: 8192.0, 100: 4096.0, 140: 2048.0, 180: 1024.0}
    scale.update({s: 1024.0 for s in range(190, 301, 10)})
    assert not _collapse(_run(scale))


def test_halvings_on_consecutive_steps_after_the_search_are_a_collapse():
    scale = {s: 16384.0 for s in range(1, 150)}
    scale.update({150: 8192.0, 151: 4096.0, 152: 2048.0, 153: 1024.0})
    scale.update({s: 1024.0 for s in range(154, 301)})
    result = _run(scale)
    assert _collapse(result) and result["verdict"] == "overflow" and result["onset_step"] == 150
