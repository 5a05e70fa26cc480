"""Kept-count rules for routers and expert parallelism."""

from __future__ import annotations

import pytest

from moeproxy.errors import InputError
from moeproxy.proxy.constraints import (RoutingShape, proxy_top_k, resolve_kept_count, routing_notes, valid_counts,
                                        violations)

DSV3 = RoutingShape(num_experts=256, top_k=8, n_group=8, topk_group=4)


def test_deepseek_valid_counts():
    valid = valid_counts(DSV3)
    assert 24 in valid and 32 in valid and 256 in valid
    assert 16 in valid  # 4 groups x 2 = 8 candidates == top-k: every candidate chosen, groups still routed
    assert 8 not in valid  # 1 expert per group: the top-2 group score needs two
    assert all(n % 8 == 0 for n in valid)
    assert routing_notes(DSV3, 32) == []
    assert "top-k 8 candidates" in routing_notes(DSV3, 16)[0]
    shape = RoutingShape(num_experts=8, top_k=2, n_group=4, topk_group=1)  # 4 kept: 1 candidate < top-k 2
    assert "1 candidates must be at least top-k 2" in " ".join(violations(shape, 8 // 2))


def test_ratio_to_count_and_errors():
    assert resolve_kept_count(DSV3, keep_ratio=0.125) == 32
    with pytest.raises(InputError, match="exactly one"):
        resolve_kept_count(DSV3)
    with pytest.raises(InputError, match=r"--keep-ratio 0.1 .*divisible by n_group 8.*nearest valid counts: 16 \(ratio 0.0625\), 24 \(ratio 0.09375\)"):
        resolve_kept_count(DSV3, keep_ratio=0.1)


def test_ep_size_and_top_k_scaling():
    shape = RoutingShape(num_experts=16, top_k=4)
    assert violations(shape, 8, ep_size=4) == []
    assert "expert-parallel size 3" in violations(shape, 8, ep_size=3)[0]
    assert proxy_top_k(shape, 4, "scale") == 1
    assert proxy_top_k(shape, 4, "keep") == 4
    assert violations(shape, 4, "keep")  # 4 kept experts with top-4: degenerate
    assert violations(shape, 4, "scale") == []
