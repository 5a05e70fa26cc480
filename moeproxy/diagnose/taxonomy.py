"""The failure taxonomy: category names, severities and the Finding record (the causal order is
shared/LABELS.md's, in ``rules.CHAIN``).

A Finding is one rule that fired on one metric. It serialises to exactly the findings contract of
shared/DESIGN.md: ``{"category", "onset_step", "severity", "metric", "rule", "evidence"}``.
Main categories come from the issue; secondary ones (length_blowup, vanishing_gradient) are
reported but only become the verdict when no main category lasted. ``kl_explosion`` is kept so that
findings stored before LABELS.md filed KL blow-ups under divergence still read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

HEALTHY = "healthy"
OVERFLOW = "overflow"
DIVERGENCE = "divergence"
PRECISION_MISMATCH = "precision_mismatch"
ROUTING_COLLAPSE = "routing_collapse"
ENTROPY_COLLAPSE = "entropy_collapse"
REWARD_COLLAPSE = "reward_collapse"
KL_EXPLOSION = "kl_explosion"
LENGTH_BLOWUP = "length_blowup"
VANISHING_GRADIENT = "vanishing_gradient"

MAIN_CATEGORIES: tuple[str, ...] = (
    OVERFLOW,
    DIVERGENCE,
    PRECISION_MISMATCH,
    ROUTING_COLLAPSE,
    ENTROPY_COLLAPSE,
    REWARD_COLLAPSE,
)
SECONDARY_CATEGORIES: tuple[str, ...] = (KL_EXPLOSION, LENGTH_BLOWUP, VANISHING_GRADIENT)
CATEGORIES: tuple[str, ...] = (HEALTHY, *MAIN_CATEGORIES, *SECONDARY_CATEGORIES)

CRITICAL = "critical"
WARNING = "warning"
INFO = "info"
SEVERITIES: tuple[str, ...] = (CRITICAL, WARNING, INFO)


@dataclass(frozen=True)
class Finding:
    """One fired rule: what category, from which step, how bad, on which metric, and why."""

    category: str
    onset_step: int | None
    severity: str
    metric: str
    rule: str
    evidence: str

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES or self.category == HEALTHY:
            raise ValueError(f"unknown failure category {self.category!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["onset_step"] = None if self.onset_step is None else int(self.onset_step)
        return out
