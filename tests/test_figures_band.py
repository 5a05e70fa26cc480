"""The healthy runs' reference band behind a run's line on the triage figure."""

from __future__ import annotations

import pandas as pd

from moeproxy.figures import triage_figure


def _series() -> pd.DataFrame:
    steps = list(range(100, 201))
    return pd.DataFrame({"metric": "loss", "step": steps, "value": [2.0 - s / 200 for s in steps],
                         "attempt": 0, "latest": True, "kind": "finite"})


def _band() -> pd.DataFrame:
    return pd.DataFrame({"position": [0.25, 0.75], "median": [1.5, 1.2], "p05": [1.4, 1.1],
                         "p95": [1.6, 1.3], "runs": [3, 3]})


def test_band_by_fraction_lands_on_this_runs_steps():
    fig = triage_figure(_series(), ["loss"], bands={"loss": _band()}, span=(100, 200))
    names = [t.name for t in fig.data]
    assert names.index("healthy runs 5-95 %") < names.index("loss")  # drawn behind the line
    median = next(t for t in fig.data if t.name == "healthy runs median")
    assert list(median.x) == [125.0, 175.0] and list(median.y) == [1.5, 1.2]


def test_band_by_step_is_drawn_where_it_is_and_a_missing_band_draws_nothing():
    band = _band().assign(position=[120.0, 180.0])
    fig = triage_figure(_series(), ["loss"], bands={"loss": band})
    assert list(next(t for t in fig.data if t.name == "healthy runs median").x) == [120.0, 180.0]
    plain = triage_figure(_series(), ["loss"], bands={"grad_norm": band})
    assert [t.name for t in plain.data] == ["loss"]
