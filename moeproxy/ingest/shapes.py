"""Reading the pairs of a text log's lines once per line *shape*, not once per line.

A long text log repeats a few line shapes thousands of times (``Iter [  10/1487] || lr: 0.0099 ||
Loss: 2.35``): only the numbers change. The pair parser (``formats.text.extract_pairs``) costs about
a hundred microseconds a line, most of a 30,000-line log's reading. ``ShapeCache`` wraps such a
parser: a line's shape is the line with each run of digits set to one 0 (``12.28s`` -> ``0.0s``,
``1.93e-05`` -> ``0.0e-0``: every pattern of the parser sees digits only as digits, in runs of any
length, so it matches the shape as it matches the line); a shape's record is its keys, each taken
from the n-th number of the line that starts a word.

The cache never guesses:
- the digits of a word (``g_l1``, ``fc2``) are part of the shape as they are, so a key may hold them;
  a key that holds another digit (``top-1``, ``layer.0``, ``reward (last 100)``) leaves the shape to
  the parser: two lines of one shape may differ there;
- a comma between digits (``1,234``: the parser counts the three digits after it) leaves the line to it;
- a key whose value is not one number of the line (``1.2.3``), or several numbers of equal value,
  leaves the shape to the parser (after a few tries);
- a shape is used only after the parser, run on a second line of that shape, gave exactly what the
  shape predicts. A non-finite value is taken as it was (``nan`` is a word, part of the shape).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

# a number that starts a word (a unit may follow it): ``lr: 1e-4``, ``loss=-0.5``, ``dt: 45.6ms``;
# not the ``1`` of ``top-1`` or ``fc1``, not the total of ``10/1487``
FREE_NUMBER = re.compile(r"(?<![\w./@\-])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\d.])")
ZERO_DIGITS = str.maketrans("123456789", "000000000")
# digits that belong to a word (``g_l1``, ``fc2``): kept beside the shape, so that two lines of one
# shape have the same keys
WORD_DIGITS = re.compile(r"(?<=[A-Za-z_])\d+")
# a digit in a key that is not such a word's (``top-1``, ``layer.0``, ``reward (last 100)``)
LOOSE_DIGIT = re.compile(r"(?<![A-Za-z_\d])\d")
COUNTED_DIGITS = re.compile(r"(?<=\d),(?=\d)")  # ``1,234``: the parser counts the digits after the comma
CONFIRMATIONS = 1  # lines the parser must agree on after the line a shape was learnt from
TRIES = 3  # lines of a shape tried before it is left to the parser
MAX_SHAPES = 4096  # a log of ever-new shapes (free text) stops learning them


def shape_of(text: str) -> str:
    """``text`` with every run of digits set to one 0 (a translation and a few replacements: a
    regex with look-behinds cost as much as the parsing it saves)."""
    shape = text.translate(ZERO_DIGITS)
    while "00" in shape:
        shape = shape.replace("00000000", "0").replace("00", "0")
    return shape


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return list(a) == list(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a.values(), b.values()))


class ShapeCache:
    """``parse(text)`` as ``parse`` gives it, by shape once the shape has proved itself."""

    def __init__(self, parse: Callable[[str], dict[str, float]]):
        self.parse = parse
        self.learnt: dict[tuple, list] = {}  # shape -> [plan or None, confirmations, tries]
        self.by_shape = 0

    def __call__(self, text: str) -> dict[str, float]:
        if COUNTED_DIGITS.search(text):
            return self.parse(text)
        numbers = FREE_NUMBER.findall(text)
        if not numbers:  # no number: nothing to save
            return self.parse(text)
        shape = (shape_of(text), *WORD_DIGITS.findall(text))
        entry = self.learnt.get(shape)
        if entry is not None and entry[0] is not None and entry[1] >= CONFIRMATIONS:
            self.by_shape += 1
            return _apply(entry[0], numbers)
        record = self.parse(text)
        if entry is None:
            if len(self.learnt) < MAX_SHAPES:
                self.learnt[shape] = [_plan(record, numbers), 0, 1]
            return record
        if entry[0] is not None:
            if _same(_apply(entry[0], numbers), record):
                entry[1] += 1
                return record
        entry[2] += 1
        entry[0] = _plan(record, numbers) if entry[2] <= TRIES else None
        entry[1] = 0
        return record


def _apply(plan: list, numbers: list[str]) -> dict[str, float]:
    """The record a shape's plan reads from this line's numbers."""
    return {key: (float(numbers[at]) if at is not None else value) for key, at, value in plan}


def _plan(record: dict[str, float], numbers: list[str]) -> list | None:
    """(key, index of the number it is, or None and its non-finite value) for each key, or None when
    some value is not exactly one number of the line."""
    values = [float(n) for n in numbers]
    plan = []
    for key, value in record.items():
        if LOOSE_DIGIT.search(key):  # a digit the shape sets to 0 is part of the key
            return None
        if not math.isfinite(value):  # a word of the shape (``nan``), never a number of the line
            if not all(math.isfinite(v) for v in values):
                return None
            plan.append((key, None, value))
            continue
        at = [i for i, v in enumerate(values) if v == value]
        if len(at) != 1:
            return None
        plan.append((key, at[0], value))
    return plan
