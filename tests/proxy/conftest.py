"""Session-scoped tiny MoE checkpoints, one per supported family, shared read-only by the proxy tests."""

from __future__ import annotations

import pytest
from tiny_moe_models import FAMILIES, make_tiny


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    base = tmp_path_factory.mktemp("tiny_moe")
    return {family: make_tiny(family, base / family) for family in FAMILIES}
