"""User-provided text (run, metric, file names; messages that quote them) made inert for Streamlit's
Markdown, so a name like ``![b](http://host/beacon.png)`` is shown as typed and never becomes an
image, link, colour directive, LaTeX or HTML.

``md_text`` backslash-escapes every ASCII punctuation character (CommonMark lets any of them be
escaped) and flattens line breaks and control characters; ``md_code`` shows a name as an inline code
span, with a backtick fence longer than any run of backticks inside it. Pages pass every string they
did not write themselves through one of the two before it reaches ``st.markdown``, ``st.caption``,
``st.success``/``st.error``/``st.warning``, widget labels or help texts; plain-text elements
(``st.text``, ``st.code``, ``st.json``, dataframe cells, selectbox options) need neither.
"""

from __future__ import annotations

import re
import string

_PUNCTUATION = set(string.punctuation)
_BACKTICKS = re.compile(r"`+")


def _printable(text: object) -> str:
    return "".join(c if c.isprintable() else " " if c in "\t\n\r\v\f" else "\ufffd" for c in str(text))


def md_text(text: object, limit: int = 2000) -> str:
    """``text`` as Markdown that renders exactly as the characters typed (cut to ``limit``)."""
    plain = _printable(text)
    if len(plain) > limit:
        plain = plain[:limit] + " ..."
    return "".join("\\" + c if c in _PUNCTUATION else c for c in plain)


def md_lines(lines, limit: int = 2000) -> str:
    """Several messages, one paragraph each, every one escaped by ``md_text``."""
    return "\n\n".join(md_text(line, limit) for line in lines)


def md_code(text: object, limit: int = 300) -> str:
    """``text`` as an inline code span (monospace, shown literally, cut to ``limit``)."""
    plain = _printable(text)
    if len(plain) > limit:
        plain = plain[:limit] + "..."
    fence = "`" * (max((len(m) for m in _BACKTICKS.findall(plain)), default=0) + 1)
    pad = " " if plain[:1] in ("`", " ") or plain[-1:] in ("`", " ") or not plain else ""
    return f"{fence}{pad}{plain}{pad}{fence}"


def md_failure(exc: BaseException) -> str:
    """One escaped line for a failed action: the project's errors as they are, anything else
    (RecursionError, OverflowError, OSError from a hostile file) prefixed with its type."""
    from moeproxy.errors import MoeproxyError

    text = str(exc) if isinstance(exc, MoeproxyError) else f"{type(exc).__name__}: {exc}"
    lines = [line for line in text.splitlines() if line.strip()]
    return md_text(lines[0] if lines else type(exc).__name__, limit=500)


def verdict_badge(verdict: str | None) -> str:
    """Streamlit Markdown for a verdict badge in the library's verdict colour
    (``moeproxy.figures.verdict_colour``); a verdict that is not ours is shown as typed."""
    from moeproxy.figures import VERDICT_COLOURS, verdict_colour

    label = verdict if verdict in VERDICT_COLOURS else "not diagnosed" if not verdict else md_text(verdict, limit=100)
    return f":{verdict_colour(verdict)}-badge[{label}]"
