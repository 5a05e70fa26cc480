"""Hypothesis: ``read_header`` accepts exactly the safetensors files the safetensors library opens,
and refuses the rest with one ``InputError`` (never another exception)."""

from __future__ import annotations

import json
import math
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeproxy.errors import InputError
from moeproxy.proxy.checkpoint import DTYPE_BYTES, read_header

safetensors = pytest.importorskip("safetensors")

DTYPES = ["F32", "F16", "BF16", "I8", "U8", "F64", "BOOL", "I64", "F8_E4M3", "X9"]
PERTURB = ["none", "begin", "end", "swap", "gap", "truncate", "trailing", "shape", "negative", "float"]


@st.composite
def safetensors_files(draw):
    tensors = draw(st.lists(st.tuples(st.sampled_from(DTYPES[:-1]), st.lists(st.integers(0, 4), max_size=3)),
                            max_size=4))
    header, offset = {}, 0
    for i, (dtype, shape) in enumerate(tensors):
        size = math.prod(shape) * DTYPE_BYTES[dtype]
        header[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    data_len = offset
    how = draw(st.sampled_from(PERTURB))
    names = list(header)
    if names and how != "none":
        victim = header[draw(st.sampled_from(names))]
        delta = draw(st.integers(-3, 3).filter(bool))
        if how == "begin":
            victim["data_offsets"][0] += delta
        elif how == "end":
            victim["data_offsets"][1] += delta
        elif how == "swap" and len(names) > 1:
            other = header[names[0]] if victim is not header[names[0]] else header[names[-1]]
            victim["data_offsets"], other["data_offsets"] = other["data_offsets"], victim["data_offsets"]
        elif how == "gap":
            data_len += abs(delta)
            for t in header.values():
                if t["data_offsets"][0] >= victim["data_offsets"][1] and t is not victim:
                    t["data_offsets"] = [o + abs(delta) for o in t["data_offsets"]]
        elif how == "shape":
            victim["shape"] = victim["shape"] + [draw(st.integers(0, 3))]
        elif how == "negative":
            victim["data_offsets"] = [-1, victim["data_offsets"][1]]
        elif how == "float":
            victim["dtype"] = "X9"
    if how == "truncate":
        data_len = max(0, data_len - draw(st.integers(1, 4)))
    elif how == "trailing":
        data_len += draw(st.integers(1, 4))
    if draw(st.booleans()):
        header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header).encode()
    blob += b" " * draw(st.integers(0, 7))
    return struct.pack("<Q", len(blob)) + blob + bytes(data_len)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=safetensors_files())
def test_read_header_agrees_with_the_safetensors_library(raw, tmp_path):
    from safetensors import safe_open

    path = tmp_path / "f.safetensors"
    path.write_bytes(raw)
    try:
        ours = read_header(path)[0]
    except InputError:
        ours = None
    try:
        with safe_open(path, "np") as f:
            theirs = {k: (f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception:
        theirs = None
    assert (ours is None) == (theirs is None), (raw[8:200], ours, theirs)
    if ours is not None:
        assert {k: list(r.shape) for k, r in ours.items()} == {k: list(s) for k, (_, s) in theirs.items()}
