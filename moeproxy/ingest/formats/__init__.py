"""The log formats: every module (or package, as the TensorBoard family) in this folder registers
its formats when imported, and this package imports them all. Adding a format is adding its module
(with its fixture and its test); its ``priority`` places it among the others."""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
