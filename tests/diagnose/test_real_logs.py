"""Diagnosis on real public logs (tests/fixtures/real): the scores must not fall back, every log
is read without a traceback, and every label names where its log comes from."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "real"
# bench/real_logs.py by its path: bench/ on sys.path would shadow the dashboard package with bench/dashboard.py
_spec = importlib.util.spec_from_file_location("bench_real_logs", ROOT / "bench" / "real_logs.py")
real_logs = sys.modules["bench_real_logs"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(real_logs)
evaluate, load_labels = real_logs.evaluate, real_logs.load_labels


@pytest.fixture(scope="module")
def shared_cases():
    return evaluate(REAL / "shared")


@pytest.fixture(scope="module")
def collected_cases():
    return evaluate(REAL / "collected")


@pytest.mark.parametrize("folder", ["shared", "collected", "blind"])
def test_every_label_names_an_existing_log_and_its_source(folder):
    labels = load_labels(REAL / folder)
    assert len(labels) >= (5 if folder == "blind" else 25)
    for entry in labels:
        assert (REAL / folder / entry["file"]).is_file(), entry["file"]
        assert entry["source_url"].startswith("https://github.com/"), entry["file"]
        assert entry["label"] in ("healthy", "overflow", "divergence", "precision_mismatch",
                                  "entropy_collapse", "reward_collapse", "routing_collapse")
        assert (entry["onset_step"] is None) == (entry["label"] == "healthy"), entry["file"]


def test_shared_real_set_scores(shared_cases):
    verdicts = sum(c.verdict_ok for c in shared_cases)
    onsets = [c.onset_ok for c in shared_cases if c.onset_ok is not None]
    assert len(shared_cases) == 28
    assert verdicts >= 26, [(c.file, c.label, c.verdict) for c in shared_cases if not c.verdict_ok]
    assert sum(onsets) >= 13, [(c.file, c.onset, c.accept) for c in shared_cases if c.onset_ok is False]


def test_no_real_log_ends_in_an_error(shared_cases, collected_cases):
    errors = [(c.file, c.error) for c in shared_cases + collected_cases + evaluate(REAL / "blind")
              + evaluate(REAL / "blind2") if c.error]
    assert not errors


def test_collected_real_set_does_not_fall_back(collected_cases):
    # the score measured when this floor was set (see the README's real-log table); raise it as
    # the detectors improve, never lower it to pass
    verdicts = sum(c.verdict_ok for c in collected_cases)
    assert verdicts / len(collected_cases) >= 0.9, [(c.file, c.label, c.verdict) for c in collected_cases
                                                    if not c.verdict_ok]


def test_every_verdict_carries_a_confidence(shared_cases):
    assert {c.confidence for c in shared_cases} <= {"high", "medium", "low"}
    # short pasted logs are not called certain
    by_file = {c.file: c for c in shared_cases}
    assert by_file["019_entrenar-qwen3-4b-qlora-divergence.log"].confidence != "high"


def test_labels_json_is_valid_json():
    for labels in REAL.rglob("labels*.json"):
        json.loads(labels.read_text())
