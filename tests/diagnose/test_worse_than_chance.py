"""A loss that starts at ln 2 - DPO's, exactly, while the policy is the reference; a binary
classifier's at initialisation - and ends well above it, staying there, ranks the pairs worse than a
coin: a divergence even when the rise is too slow or noisy to double its best. A DPO loss that falls,
or a loss that never started at chance, is not judged by it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeproxy.diagnose import diagnose_series

LN2 = float(np.log(2.0))


def _dpo(tail_level: float, n: int = 200, seed: int = 3) -> pd.Series:
    rng = np.random.default_rng(seed)
    level = np.r_[np.linspace(LN2, 0.63, 50), np.linspace(0.63, tail_level, 60), np.full(n - 110, tail_level)]
    loss = level * rng.lognormal(0.0, 0.15, n)
    loss[:2] = LN2                                       # the reference policy: exactly ln 2
    return pd.Series(loss, index=np.arange(1, n + 1))


def _rules(res):
    return {f["rule"] for f in res["findings"]}


def test_a_dpo_loss_that_climbs_above_ln2_and_stays_is_a_divergence():
    res = diagnose_series({"loss": _dpo(1.15)})
    assert res["verdict"] == "divergence" and "worse_than_chance" in _rules(res), res["findings"][:3]
    assert 60 <= res["onset_step"] <= 130, res["onset_step"]


def test_a_dpo_loss_that_falls_or_a_loss_that_never_started_at_chance_is_not_judged_by_it():
    assert "worse_than_chance" not in _rules(diagnose_series({"loss": _dpo(0.3)}))
    shifted = _dpo(1.15) + 1.6                           # starts at 2.3: no two-way chance level to compare with
    assert "worse_than_chance" not in _rules(diagnose_series({"loss": shifted}))
