"""Small shared constants of the data contracts (no heavy imports: the ingest command reads them
before pandas and DuckDB are loaded)."""

ROLES = ("full", "proxy", "other")
GLOBAL_RANK = -1  # scalars that are not per-rank
