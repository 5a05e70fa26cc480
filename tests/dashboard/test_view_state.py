"""A link's zoom range is read as written or ignored: never a crash, never a reversed range."""

from __future__ import annotations

import pytest

from dashboard.view_state import parse_range


@pytest.mark.parametrize(("text", "expected"), [("290-330", (290, 330)), ("-5--1", (-5, -1)), ("-5-3", (-5, 3)),
                                                ("330-290", None), ("7-7", None), ("", None), ("a-b", None),
                                                ("1-2-3", None), ("12", None)])
def test_a_zoom_range_in_a_link(text, expected):
    assert parse_range(text) == expected
