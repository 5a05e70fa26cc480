"""A module imported on first use: ``pd = LazyModule("pandas")`` reads like ``import pandas as pd``
but costs nothing until an attribute is read (pandas takes ~0.8 CPU-seconds to import, and
``moeproxy ingest`` stores a parse without it)."""

from __future__ import annotations

import importlib


class LazyModule:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported on first use>"
