"""Confidence levels come from what each basis measured on the real labelled logs
(``confidence_table.json``, written by ``bench/calibrate_confidence.py``), not from a guess."""

from __future__ import annotations

import json

import numpy as np

from moeproxy.diagnose import diagnose_series
from moeproxy.diagnose.confidence import DESIGNED, TABLE, level_of
from moeproxy.diagnose.config import DiagnoseConfig

CFG = DiagnoseConfig()


def test_a_bases_level_is_its_measured_share_of_right_verdicts():
    table = {"one_rule": {"right": 85, "total": 100}, "decisive": {"right": 70, "total": 100},
             "healthy_long": {"right": 40, "total": 100}, "agreeing": {"right": 9, "total": 10}}
    assert level_of("one_rule", CFG, table) == "high"       # 85 % >= 80 %
    assert level_of("decisive", CFG, table) == "medium"     # 70 % >= 60 %
    assert level_of("healthy_long", CFG, table) == "low"
    assert level_of("agreeing", CFG, table) == DESIGNED["agreeing"]  # 10 logs are too few to move it
    assert level_of("first_record", CFG, table) == DESIGNED["first_record"]  # not measured


def test_other_readings_are_low_and_a_handful_of_records_never_high_whatever_was_measured():
    table = {b: {"right": 100, "total": 100} for b in DESIGNED}
    assert level_of("alternatives", CFG, table) == "low"
    assert {level_of(b, CFG, table) for b in ("short", "short_decisive", "healthy_short")} == {"medium"}


def test_the_shipped_table_is_measured_counts_for_known_bases():
    data = json.loads(TABLE.read_text())
    assert "real labelled logs" in data["measured_on"]
    assert set(data["bases"]) <= set(DESIGNED)
    assert sum(e["total"] for e in data["bases"].values()) >= 1000
    assert all(0 <= e["right"] <= e["total"] for e in data["bases"].values())


def test_every_diagnosis_names_its_basis():
    rng = np.random.default_rng(1)
    steps = range(1, 61)
    loss = np.r_[2.0 - 0.01 * np.arange(40), np.full(20, np.nan)] + 0.01 * rng.random(60)
    res = diagnose_series({"loss": dict(zip(steps, loss.tolist()))})
    assert res["verdict"] == "overflow" and res["confidence_basis"] == "decisive_overflow"
    assert res["confidence"] == level_of("decisive_overflow", CFG)
    healthy = diagnose_series({"loss": dict(zip(steps, (2.0 - 0.01 * np.arange(60) + 0.01 * rng.random(60)).tolist()))})
    assert healthy["confidence_basis"] == "healthy_long"
