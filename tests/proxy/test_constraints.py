"""Kept-count rules for routers and expert parallelism."""

from __future__ import annotations

import pytest

from moeproxy.errors import InputError
from moeproxy.proxy.constraints import RoutingShape, proxy_top_k, resolve_kept_count, valid_counts, violations

DSV3 = RoutingShape(num_experts=256, top_k=8, n_group=8, topk_group=4)


def test_deepseek_valid_counts():
    valid = valid_counts(DSV3)
    assert 24 in valid and 32 in valid and 256 in valid
    assert 16 not in valid  # 4 groups x 2 = 8 candidates == top-k: degenerate
    assert all(n % 8 == 0 for n in valid)


def test_ratio_to_count_and_errors():
    assert resolve_kept_count(DSV3, keep_ratio=0.125) == 32
    with pytest.raises(InputError, match="exactly one"):
        resolve_kept_count(DSV3)
    with pytest.raises(InputError, match=r"--keep-ratio 0.1 .*divisible by n_group 8.*nearest valid counts: 24 \(ratio 0.09375\)"):
        resolve_kept_count(DSV3, keep_ratio=0.1)


def test_ep_size_and_top_k_scaling():
    shape = RoutingShape(num_experts=16, top_k=4)
    assert violations(shape, 8, ep_size=4) == []
    assert "expert-parallel size 3" in violations(shape, 8, ep_size=3)[0]
    assert proxy_top_k(shape, 4, "scale") == 1
    assert proxy_top_k(shape, 4, "keep") == 4
    assert violations(shape, 4, "keep")  # 4 kept experts with top-4: degenerate
    assert violations(shape, 4, "scale") == []
