"""The failure detectors: every module in this folder is one detector, imported here so that it
registers itself (its ``@register_detector``, its rules and its thresholds). Adding a detector is
adding its module (and its test); nothing else names it."""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
