"""Text from logs and users, made safe to print on a terminal.

A run name, a metric name or a file name can hold ANSI escape sequences or bidirectional overrides
(``\\x1b[2J``, U+202E) that rewrite what a terminal shows. ``shown(text)`` writes every control
character (C0, DEL, C1) and every bidirectional formatting character as a visible escape; other
text, non-ASCII letters included, is kept as it is.
"""

from __future__ import annotations

import unicodedata

BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text) -> str:
    text = str(text)
    if text.isprintable() and not BIDI.intersection(text):
        return text
    return "".join(_escape(ch) if (unicodedata.category(ch) == "Cc" or ch in BIDI) else ch for ch in text)
