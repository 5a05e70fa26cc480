"""Imports that storing a parse will need (pyarrow, the DuckDB store), started in a thread
while a parser works in numpy or in DuckDB (both release the GIL for their heavy work), so that the
one-shot ``moeproxy ingest`` does not wait for them after the parse.

Start-up of ``moeproxy ingest`` imports the CLI's ingest command, the format sniffers and the
modules of the format detected; pyarrow and the store come in this thread (pandas never: parsed
rows are stored from numpy columns). Only parsers
that fork no process of their own start it (a child forked while another thread imports could
inherit a held import lock); the Megatron reader overlaps the same imports with its forked half
instead. Where the modules are loaded already (a long-lived process), nothing starts.
"""

from __future__ import annotations

import importlib
import sys
import threading

FOR_STORING = ("pyarrow", "moeproxy.store", "moeproxy.ingest.derive")
_started = False


def load(names: tuple[str, ...] = FOR_STORING) -> None:
    """Import ``names`` here and now (an import that fails is raised again by the code that needs it)."""
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  (the importer that needs it raises it again, in its thread)
            return


def import_in_background(names: tuple[str, ...] = FOR_STORING) -> None:
    global _started
    if _started or all(name in sys.modules for name in names):
        return
    _started = True
    threading.Thread(target=load, args=(names,), name="moeproxy-preload", daemon=True).start()
