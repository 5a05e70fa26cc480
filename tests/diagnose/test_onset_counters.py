"""The onset in the log's own counters: a whole-numbered epoch above batch-numbered steps (Keras'
``Epoch 9/80`` over its batches' lines) is such a counter; a fractional one is ``onset_epoch``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.diagnose import diagnose_series


def _run(epoch):
    steps = np.arange(1, 201)
    loss = np.where(steps < 120, 0.5 - 0.001 * steps, 5.0 + 0.05 * (steps - 120))  # x12 from step 120, staying
    return {"loss": pd.Series(loss, index=steps), "epoch": pd.Series(epoch(steps), index=steps)}


def test_a_whole_numbered_epoch_dates_the_onset_beside_the_step():
    res = diagnose_series(_run(lambda s: (s - 1) // 20 + 1))  # 20 batches an epoch
    assert res["verdict"] == "divergence" and res["onset_step"] == 120, res["findings"]
    assert res["onset_counters"] == {"epoch": 6} and "onset_epoch" not in res


def test_a_fractional_epoch_is_the_onset_epoch_not_a_counter():
    res = diagnose_series(_run(lambda s: s / 20))
    assert res["onset_epoch"] == 6.0 and "epoch" not in res.get("onset_counters", {})
