"""moeproxy.sparklines: M4-downsampled series drawn as SVG with non-finite steps marked."""

from __future__ import annotations

import json

from moeproxy.ingest import ingest_paths
from moeproxy.sparklines import points_in, run_sparklines
from moeproxy.store import Store


def test_a_runs_sparklines_keep_its_spike_and_mark_its_nan(tmp_path):
    log = tmp_path / "spiky.jsonl"
    rows = [{"step": s, "loss": 2.0 - s / 1000 if s != 700 else float("nan"), "grad_norm": 50.0 if s == 333 else 1.0}
            for s in range(1, 1001)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "noloss.jsonl").write_text("".join(json.dumps({"step": s, "kl": 0.1}) + "\n" for s in range(5)))
    store = Store(tmp_path / "runs.duckdb")
    ingest_paths(store, [log], run="spiky <b>")
    ingest_paths(store, [tmp_path / "noloss.jsonl"], run="noloss")
    drawn = run_sparklines(store, ["spiky <b>", "noloss"], buckets=30)
    loss, grad = drawn["spiky <b>"]["loss"], drawn["spiky <b>"]["grad_norm"]
    assert loss.startswith("<svg") and "<b>" not in loss and "spiky" not in loss  # numbers only
    assert loss.count("<line") == 1 and 'aria-label="' in loss and ", 1 non-finite" in loss
    assert grad.count("<line") == 0 and 30 <= points_in(grad) <= 4 * 30
    ys = [float(p.split(",")[1]) for p in grad.split('points="')[1].split('"')[0].split()]
    assert min(ys) <= 3  # the one spike at step 333 reaches the top: it survived the downsampling
    assert drawn["noloss"] == {"loss": None, "grad_norm": None}
