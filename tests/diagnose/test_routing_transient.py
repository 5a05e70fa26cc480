"""LABELS.md: routing collapse is a load-balancing loss that rises and stays; one that jumps at
start-up and falls back below where it began (toward its balanced value) is not one."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series


def test_a_start_up_bump_of_the_balance_loss_that_falls_back_is_healthy():
    aux = [1.83, 1.83, 3.2, 3.77, 3.89, 3.55, 3.15, 2.79, 2.62, 2.37, 2.19, 2.04, 1.94] + list(np.linspace(1.9, 1.15, 47))
    loss = list(np.linspace(12.4, 6.0, len(aux)))
    result = diagnose_series({"aux_loss": dict(enumerate(aux, 1)), "loss": dict(enumerate(loss, 1))})
    assert result["verdict"] == "healthy", result["findings"]


def test_a_balance_loss_that_rises_and_stays_is_routing_collapse():
    aux = [1.05] * 20 + list(np.linspace(1.05, 2.6, 10)) + [2.6 + 0.01 * (i % 3) for i in range(30)]
    result = diagnose_series({"aux_loss": dict(enumerate(aux, 1))})
    assert result["verdict"] == "routing_collapse"
