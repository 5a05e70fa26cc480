"""The detectors' thresholds: each declared next to the code that reads it, read through one
validated, immutable ``DiagnoseConfig`` (JSON round-trip, stored with the findings).

A module declares its thresholds at import with one call, beside its rules::

    thresholds(
        kl_factor=(10.0, "new-vs-old KL rise (times its early level) that counts, staying"),
    )

and reads them as ``cfg.kl_factor``. ``DiagnoseConfig(**overrides)`` takes every declared
threshold's default unless overridden; an unknown name, a value that is not a number or is below 0,
or a broken ``constraint`` is a ``ValueError`` naming it. Adding a detector with new thresholds
therefore touches only the detector's module (and its test).

Defaults follow shared/research/logs-and-failures.md §2 (sources there) and shared/LABELS.md: NIST
modified-z 3.5, fp16 max 65504 and msprobe's 1e10 magnitude alarm, verl's rollout_probs_diff 0.01,
rollout IS window [0.5, 2.0], router entropy drop 30%, entropy collapse below 10-20% of the start.
Where each is declared: the shared ones (robust z, history) with the detector contract
(``registry.py``), the verdict's tie window in ``diagnosis.py``, the confidence's run lengths in
``confidence.py``, the rest in the detector that reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from moeproxy.registry import Registry


@dataclass(frozen=True)
class Threshold:
    name: str
    default: float
    doc: str
    module: str  # the module that declared it (and reads it)


THRESHOLDS: Registry[Threshold] = Registry("threshold")
CONSTRAINTS: list[tuple[Callable[["DiagnoseConfig"], bool], str]] = []


def thresholds(**specs: tuple[float, str]) -> None:
    """Declare thresholds: ``name=(default, what it means)``; the caller's module is recorded."""
    import sys

    module = sys._getframe(1).f_globals.get("__name__", "?")
    for name, (default, doc) in specs.items():
        if not isinstance(default, (int, float)) or isinstance(default, bool) or default < 0:
            raise ValueError(f"threshold {name}: default {default!r} must be a number >= 0")
        THRESHOLDS.add(name, Threshold(name, default, doc, module))


def constraint(check: Callable[["DiagnoseConfig"], bool], message: str) -> None:
    """A relation between thresholds that every config must keep (``message`` says which)."""
    CONSTRAINTS.append((check, message))


class DiagnoseConfig:
    """Every declared threshold's value; immutable, compared and hashed by its values."""

    __slots__ = ("_values",)

    def __init__(self, **overrides: float) -> None:
        unknown = sorted(set(overrides) - set(THRESHOLDS))
        if unknown:
            raise ValueError(f"diagnose config: unknown key(s) {', '.join(unknown)}")
        values = {}
        for name, spec in THRESHOLDS.items():
            value = overrides.get(name, spec.default)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ValueError(f"diagnose config {name}={value!r}: expected a number")
            if value < 0:
                raise ValueError(f"diagnose config {name}={value!r}: must be >= 0")
            values[name] = value
        object.__setattr__(self, "_values", values)
        for check, message in CONSTRAINTS:
            if not check(self):
                raise ValueError(f"diagnose config: {message}")

    def __getattr__(self, name: str) -> float:
        try:
            return object.__getattribute__(self, "_values")[name]
        except KeyError:
            raise AttributeError(f"no diagnose threshold {name!r}") from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("DiagnoseConfig is immutable: make a new one with the changed values")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DiagnoseConfig) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        changed = {k: v for k, v in self._values.items() if v != THRESHOLDS[k].default}
        return f"DiagnoseConfig({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

    @classmethod
    def from_dict(cls, data: dict) -> "DiagnoseConfig":
        return cls(**data)

    def to_dict(self) -> dict:
        return dict(self._values)
