"""moeproxy formats: list the log formats ingest recognises."""

from __future__ import annotations

HELP = "list the log formats that ingest recognises (sniffed by content)"


def add_arguments(parser) -> None:
    pass


def run(args) -> int:
    from moeproxy.ingest import FORMATS
    from moeproxy.ingest.detect import detect_format  # noqa: F401  (registers every format)

    width = max(len(name) for name in FORMATS)
    for name, fmt in FORMATS.items():
        print(f"{name:<{width}}  {fmt.description}")
    return 0
