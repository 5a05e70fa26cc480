"""Imports every format module so that each registers itself; one line per module, in priority order."""

from moeproxy.ingest import jsonl, verl_console, megatron, printed_dicts, tensorboard, csvfmt, text, tables, golden_values  # noqa: F401
