"""The registered failure detectors: one module each, one import line here registers it."""

from moeproxy.diagnose.detectors import (  # noqa: F401  (each import registers a detector)
    divergence,
    entropy,
    gradient,
    kl,
    length,
    overflow,
    precision,
    reward,
    routing,
)
