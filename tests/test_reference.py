"""moeproxy.reference: bands and percentiles from the healthy runs of a real store."""

from __future__ import annotations

import json

import pytest

from moeproxy.ingest import ingest_paths
from moeproxy.reference import reference_band, verdict_metric, where_normal
from moeproxy.store import Store


def _run(tmp_path, store, name, grad, steps=100, verdict="healthy"):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"step": s, "grad_norm": grad(s), "loss": 3.0 - 0.01 * s}) + "\n"
                            for s in range(1, steps + 1)))
    ingest_paths(store, [path], run=name)
    if verdict is not None:
        store.save_findings(name, {"verdict": verdict, "onset_step": None, "findings": []}, "test")


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "runs.duckdb")
    for i in range(10):  # healthy runs at 1.0, 1.1, ... 1.9; one with twice the steps
        _run(tmp_path, store, f"ok{i}", lambda s, i=i: 1.0 + i / 10, steps=200 if i == 3 else 100)
    _run(tmp_path, store, "failed", lambda s: 9.0, verdict="overflow")  # not healthy: not in any band
    _run(tmp_path, store, "undiagnosed", lambda s: 9.0, verdict=None)
    return store


def test_the_band_is_the_healthy_runs_median_and_5_95_percent(store):
    band = reference_band(store, "grad_norm", bins=10)
    assert list(band.columns) == ["position", "median", "p05", "p95", "runs"]
    assert len(band) == 10 and band["runs"].tolist() == [10] * 10
    assert band["median"].tolist() == pytest.approx([1.45] * 10)
    assert band["p05"].tolist() == pytest.approx([1.045] * 10)
    assert band["p95"].tolist() == pytest.approx([1.855] * 10)
    assert band["position"].tolist() == pytest.approx([0.05 + k / 10 for k in range(10)])
    by_step = reference_band(store, "grad_norm", by="step", bins=50)
    assert by_step["runs"].tolist() == [10, 10, 10, 1, 1]  # steps 1-49, 50-99, 100-149 (ok3 alone past 100)
    assert reference_band(store, "no_such_metric").empty


def test_a_run_sits_at_a_percentile_of_the_healthy_runs(store, tmp_path):
    _run(tmp_path, store, "probe", lambda s: 1.45 if s < 60 else float("inf"), verdict="overflow")
    at50 = where_normal(store, "probe", "grad_norm", 50)
    assert at50["percentile"] == pytest.approx(50.0) and at50["healthy_runs"] == 10
    assert at50["median"] == pytest.approx(1.45)
    at80 = where_normal(store, "probe", "grad_norm", 80)
    assert (at80["value"], at80["percentile"]) == ("inf", 100.0)
    assert where_normal(store, "ok0", "grad_norm", 50)["percentile"] == pytest.approx(0.0)  # lowest of the other 9
    assert where_normal(store, "probe", "no_such_metric") is None


def test_the_verdicts_metric():
    result = {"verdict": "overflow", "findings": [{"category": "divergence", "metric": "loss"},
                                                  {"category": "overflow", "metric": "grad_norm"}]}
    assert verdict_metric(result) == "grad_norm"
    assert verdict_metric({"verdict": "healthy", "findings": []}) is None


def test_diagnose_json_says_where_the_verdicts_metric_sits_among_healthy_runs(store, tmp_path):
    import subprocess
    import sys

    _run(tmp_path, store, "probe", lambda s: 1.45 if s < 60 else float("inf"), verdict=None)
    proc = subprocess.run([sys.executable, "-m", "moeproxy", "diagnose", "probe", "--json", "--db",
                           str(tmp_path / "runs.duckdb")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["verdict"], result["onset_step"]) == ("overflow", 60)
    assert result["normal"] == {"metric": "grad_norm", "step": 60, "value": "inf", "percentile": 100.0,
                                "healthy_runs": 10, "median": pytest.approx(1.45), "p05": pytest.approx(1.045),
                                "p95": pytest.approx(1.855)}
    healthy = json.loads(subprocess.run([sys.executable, "-m", "moeproxy", "diagnose", "ok1", "--json", "--db",
                                         str(tmp_path / "runs.duckdb")], capture_output=True, text=True).stdout)
    assert healthy["verdict"] == "healthy" and healthy["normal"] is None


def test_the_band_a_view_draws_is_binned_trimmed_to_the_run_and_needs_three_runs():
    import pandas as pd

    from moeproxy.reference import BAND_BINS, MIN_BAND_RUNS, band_bins, bands_to_draw

    assert band_bins("fraction", (0, 10**6)) == BAND_BINS
    assert [band_bins("step", (0, end)) for end in (50, 999, 1_000, 25_000, 10**6)] == [1, 1, 10, 100, 10_000]
    band = pd.DataFrame({"position": [0, 100, 200, 300, 900], "median": 1.0, "p05": 0.5, "p95": 1.5,
                         "runs": [MIN_BAND_RUNS, MIN_BAND_RUNS - 1, 5, 4, 6]})
    drawn = bands_to_draw({"loss": band, "kl": band.assign(runs=1)}, "step", (0, 250), 100)
    assert list(drawn) == ["loss"]  # a band of fewer runs than MIN_BAND_RUNS everywhere is not drawn
    assert drawn["loss"]["position"].tolist() == [0, 200, 300]  # thin bin out, beyond the run's span (+1 bin) out
    assert bands_to_draw({"loss": band}, "fraction", (0, 250), 50)["loss"]["position"].tolist() == [0, 200, 300, 900]
