"""What a feature method takes and yields (below both ``features`` and ``calibration``, so neither
imports the other's module for its types)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeproxy.proxy.arch import FamilyAdapter
from moeproxy.proxy.checkpoint import Checkpoint
from moeproxy.proxy.layout import MoeLayout


@dataclass
class LayerFeatures:
    features: np.ndarray  # [E, D]
    frequency: np.ndarray | None = None  # [E] routed-token counts (calibration only)
    saliency: np.ndarray | None = None  # [E] mean gate-weighted output norm over routed tokens
    kind: str = ""


@dataclass
class FeatureContext:
    ckpt: Checkpoint
    adapter: FamilyAdapter
    layout: MoeLayout
    seed: int = 0
    device: str = "cpu"
    calibration: str | None = None
    max_calibration_tokens: int = 4096
