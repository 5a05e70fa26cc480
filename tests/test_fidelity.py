import numpy as np
import pandas as pd
import pytest

from moeproxy.errors import NotFound
from moeproxy.fidelity import compare_frames, compare_runs, correlations, onset_relative_difference, smooth_series


def _long(series: dict[str, list[float]], steps=None) -> pd.DataFrame:
    rows = []
    for metric, values in series.items():
        for i, v in enumerate(values):
            rows.append({"step": (steps[i] if steps is not None else i + 1), "metric": metric, "value": float(v)})
    return pd.DataFrame(rows).astype({"step": "int64", "value": "float64"})


def _healthy(n=40, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    trend = np.linspace(1.0, 0.5, n)
    return {
        "grad_norm": (trend + 0.05 * rng.standard_normal(n)) * scale,
        "loss": trend * 0.3 + 0.01 * rng.standard_normal(n),
        "reward_mean": np.linspace(0.4, 0.7, n) + 0.02 * rng.standard_normal(n),
        "step_time": np.full(n, 0.2 * scale),
    }


def test_tracking_curves_correlate_and_verdicts_match():
    full, proxy = _long(_healthy(seed=0)), _long(_healthy(seed=1, scale=0.5))
    result = compare_frames(full, proxy)
    assert result["verdict_match"] is True
    assert result["full"]["verdict"] == result["proxy"]["verdict"]
    assert result["correlations"]["grad_norm"] > 0.9
    assert result["correlations"]["reward_mean"] > 0.9
    assert "step_time" not in result["correlations"]
    assert result["cost"]["step_time_s"]["ratio"] == pytest.approx(0.5)


def test_overflow_in_one_run_only_is_a_verdict_mismatch():
    full_series = _healthy()
    full_series["grad_norm"] = np.array(full_series["grad_norm"])
    full_series["grad_norm"][25:] = np.inf
    result = compare_frames(_long(full_series), _long(_healthy(seed=1)))
    assert result["full"]["verdict"] == "overflow"
    assert result["full"]["onset_step"] == 26
    assert result["verdict_match"] is False


def test_non_finite_points_are_left_out_of_smoothing_not_zero_filled():
    s = pd.Series([1.0, 2.0, np.inf, 4.0, np.nan, 6.0])
    out = smooth_series(s, 3)
    assert np.isnan(out.iloc[2]) and np.isnan(out.iloc[4])
    assert out.iloc[1] == pytest.approx(1.5)


def test_runs_on_different_step_grids_are_aligned_by_progress():
    a = _long({"grad_norm": np.linspace(0, 1, 50) ** 2})
    b = _long({"grad_norm": np.linspace(0, 1, 10) ** 2}, steps=list(range(100, 1100, 100)))
    wide_a = a.pivot(index="step", columns="metric", values="value")
    wide_b = b.pivot(index="step", columns="metric", values="value")
    assert correlations(wide_a, wide_b, smooth=1)["grad_norm"] > 0.99


def test_constant_or_short_series_give_no_correlation():
    full = _long({"grad_norm": [1.0] * 10, "loss": [1, 2, 3]})
    proxy = _long({"grad_norm": np.arange(10.0), "loss": [1, 2, 3]})
    r = correlations(full.pivot(index="step", columns="metric", values="value"),
                     proxy.pivot(index="step", columns="metric", values="value"))
    assert r["grad_norm"] is None and r["loss"] is None


def test_onset_relative_difference():
    assert onset_relative_difference(100, 120) == pytest.approx(0.2)
    assert onset_relative_difference(None, 5) is None


def test_compare_runs_reads_the_store_and_names_unknown_runs(tmp_path):
    from moeproxy.store import Store
    from moeproxy.ingest import ingest_paths

    store = Store(":memory:")
    for name, seed in (("full", 0), ("proxy", 1)):
        path = tmp_path / f"{name}.jsonl"
        series = _healthy(seed=seed)
        lines = []
        for i in range(40):
            data = {"actor/grad_norm": float(series["grad_norm"][i]), "critic/score/mean": float(series["reward_mean"][i])}
            lines.append('{"step": %d, "data": %s}' % (i + 1, pd.io.json.ujson_dumps(data)))
        path.write_text("\n".join(lines) + "\n")
        ingest_paths(store, [path], run=name, role="full" if name == "full" else "proxy")
    result = compare_runs(store, "full", "proxy")
    assert result["full"]["run"] == "full" and result["correlations"]["grad_norm"] > 0.9
    with pytest.raises(NotFound):
        compare_runs(store, "full", "nope")


def test_card_headlines_come_from_the_library():
    from moeproxy.fidelity import card_metrics

    card = {"verdict_match": True, "full": {"onset_step": 120}, "proxy": {"onset_step": 100},
            "onset_relative_difference": 1 / 6, "correlations": {"kl": 0.5, "loss": 0.98765, "other": 0.1},
            "cost": {"step_time": {"full": 2.0, "proxy": 0.5, "ratio": 0.25}, "params": {"full": 1}}}
    assert card_metrics(card) == [("verdict match", "yes"), ("onset delta (steps)", "-20"),
                                  ("onset relative difference", "0.167"), ("r loss", "0.988"), ("r kl", "0.5"),
                                  ("cost ratio step_time (proxy/full)", "0.25")]
    assert card_metrics({})[:3] == [("verdict match", "n/a"), ("onset delta (steps)", "n/a"),
                                    ("onset relative difference", "n/a")]


def test_a_kept_grid_pair_is_read_again_with_the_current_diagnosis(tmp_path):
    import json

    from moeproxy.repro.grid import rediagnose

    def log(path, nan_from=None):
        with open(path, "w") as fh:
            for step in range(1, 41):
                loss = float("nan") if nan_from is not None and step >= nan_from else 2.0 - step / 100
                fh.write(json.dumps({"step": step, "loss": loss, "grad_norm": 1.0}) + "\n")

    log(tmp_path / "full.jsonl", nan_from=25)
    log(tmp_path / "proxy.jsonl", nan_from=24)
    kept = {"full": {"verdict": "divergence", "onset_step": 3, "run": "f"}, "proxy": {"verdict": "healthy", "onset_step": None},
            "verdict_match": False, "onset_relative_difference": None, "correlations": {"loss": 0.9}}
    again = rediagnose(tmp_path, kept)
    assert again["full"]["verdict"] == again["proxy"]["verdict"] == "overflow"
    assert (again["full"]["onset_step"], again["proxy"]["onset_step"]) == (25, 24)
    assert again["verdict_match"] and again["onset_relative_difference"] == pytest.approx(0.04)
    assert again["full"]["run"] == "f" and again["correlations"] == {"loss": 0.9}  # the run's own figures stay
    (tmp_path / "proxy.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="proxy.jsonl"):
        rediagnose(tmp_path, kept)
