"""A loss that climbs past 65504 before it turns NaN (fp32/bf16) against one clamped at fp16's maximum."""

from __future__ import annotations


def test_a_loss_that_climbs_past_the_fp16_maximum_before_nan_is_divergence():
    """LABELS.md: a loss that climbs for several records and then turns NaN is divergence. A finite
    value above 65504 in an fp32/bf16 run is a real value, not a saturated half-precision one."""
    import numpy as np

    from moeproxy.diagnose import diagnose_series

    steps = list(range(50, 1001, 50))
    loss = list(np.linspace(4.5, 2.1, 11)) + [2.33, 1.4e7, 1.55e9, 1.88e8, 2.14e9] + [np.nan] * 4
    result = diagnose_series({"loss": dict(zip(steps, loss))})
    assert (result["verdict"], result["onset_step"]) == ("divergence", 650)
    clamped = list(np.linspace(4.5, 2.1, 11)) + [65504.0] * 5 + [np.nan] * 4  # fp16 saturation: overflow
    assert diagnose_series({"loss": dict(zip(steps, clamped))})["verdict"] == "overflow"
