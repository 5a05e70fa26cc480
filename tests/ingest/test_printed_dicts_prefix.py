"""``printed_dicts.step_prefix`` skips the search on lines without its words; it must find what
``STEP_PREFIX.search`` finds on any line (mixed case, Unicode look-alikes such as the long s)."""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from moeproxy.ingest.formats.printed_dicts import STEP_PREFIX, step_prefix

PIECES = st.sampled_from(["step", "STEP", "Step", "ſtep", "global step", "GLOBAL STEP", "perf", "PERF", "eval", "Eval",
                          "rollout", "ROLLOUT", "roll", "out", "ste", "p", " ", "  ", "12", "3", ":", ": ", "{", "{'a': 1}",
                          "K", "ß", "İ", "ﬆ", "x", "✨ Global step 4: {"])


@given(st.lists(PIECES, max_size=12).map("".join))
@example("ſtep 3: {'loss': 1.0}")  # the long s: the pattern matches it to s, and it case-folds to s
@example("ＳＴＥＰ 3: {")
@example("eval 3: {'a': 1}")  # each word of the pattern
@example("PERF 2 : {'a': 1}")
@example("rollout 5: {'a': 1}")
@example("✨ Global step 4: {'a': 1}")
def test_the_prefilter_finds_what_the_pattern_finds(line):
    want, got = STEP_PREFIX.search(line), step_prefix(line)
    assert (want and want.span()) == (got and got.span())


def test_every_character_the_pattern_matches_to_a_letter_case_folds_to_it():
    """The fact the prefilter stands on, over a sample of code points around every cased script
    (the whole of Unicode takes seconds; it was checked once when the prefilter was written)."""
    letters = set("globalsteprfvu")
    patterns = {letter: re.compile(letter, re.IGNORECASE) for letter in letters}
    for cp in list(range(0, 0x3000)) + list(range(0xFB00, 0xFB10)) + list(range(0xFF00, 0xFF60)):
        c = chr(cp)
        for letter, pattern in patterns.items():
            if pattern.fullmatch(c):
                assert c.casefold() == letter, (hex(cp), letter)
