"""Registries by name: log formats, detectors, model families, feature methods, job kinds, baselines.

A ``Registry`` is a dict (name -> entry) that says what it holds, refuses a name registered twice,
and names what is known when asked for an unknown name. Each registry stays in its own module; this
is only the shared behaviour. Lifecycle: filled at import time by one ``add`` (or ``register``
decorator) per entry, read-only afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from moeproxy.errors import InputError

T = TypeVar("T")


class Registry(dict[str, T]):
    """name -> entry, for entries of one kind (``what``: "log format", "detector", ...)."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` under ``name``; a second entry of the same name is a programming error."""
        if name in self:
            raise ValueError(f"{self.what} {name!r} registered twice")
        self[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """``@REGISTRY.register("name")`` on a function: ``add`` as a decorator."""
        return lambda entry: self.add(name, entry)

    def lookup(self, name: str) -> T:
        """The entry of ``name``, else ``InputError`` naming the known ones."""
        if name not in self:
            raise InputError(f"unknown {self.what} {name!r}; known: {', '.join(sorted(self)) or 'none'}")
        return self[name]
