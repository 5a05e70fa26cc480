"""One file's parsed rows as its run stores them: expert loads moved to the routing table, names
mapped as the run maps them, units applied, series derived, attempts offset past a restart.

``rows_to_store`` decides; ``moeproxy.ingest.batch`` (many files in one transaction) and the
watcher (new lines of followed files) both call it before they write, so a value is stored one way
whichever path read it.
"""

from __future__ import annotations

from dataclasses import replace

from moeproxy.columns import as_columns
from moeproxy.ingest.names import resolve_names


def rows_to_store(tx, run_id: int, rows, known: dict[str, str] | None = None, extent: tuple | None = None,
                  repeats=None, takeover: bool = False):
    """(scalars as Columns, routing rows or None, {original: stored name}) of parsed rows (Columns
    or a long DataFrame) as the run stores them: expert loads moved to routing, names mapped, units
    applied, series derived, and the attempts offset past the run's latest when the rows repeat a
    stored step (a restart). ``known`` (the run's name mapping) and ``extent`` (its latest attempt
    and last step) spare a query each when the caller read them already; ``repeats`` answers
    whether rows repeat a stored step (``Transaction.attempt_offset``) when the caller knows.
    ``takeover`` (the watcher, whose earlier rows of the run are all stored): a higher-priority alias
    takes its canonical name over from the one that held it (``resolve_names``), renaming the rows."""
    from moeproxy.ingest.derive import apply_units, derive_series, split_routing

    rows, routing = split_routing(as_columns(rows))
    known = tx.metric_mapping(run_id) if known is None else known
    mapping = resolve_names(list(rows.names), known, takeover=takeover)
    for original, stored in mapping.items():  # a name taken over (``takeover``): its stored rows follow
        if original in known and known[original] != stored:
            tx.rename_metric(run_id, original, known[original], stored)
    rows = apply_units(rows.renamed(mapping), mapping)
    rows, derived = derive_series(rows, routing)
    offset = tx.attempt_offset(run_id, rows, extent, repeats)
    if offset:
        rows = replace(rows, attempt=rows.attempt + offset)
        if routing is not None:
            routing = routing.assign(attempt=routing["attempt"] + offset)
    return rows, routing, mapping | derived

