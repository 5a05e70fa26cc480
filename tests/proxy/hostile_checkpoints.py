"""Hostile variants of a tiny checkpoint for ``moeproxy build``: corrupt headers, bad offsets, bad
index and config files, escaping shard names, special files. Each case mutates a fresh copy of a
valid single-file checkpoint in place; every one must give exit status 2 and one error line.

Shared by tests/proxy/test_hostile_checkpoints.py (which runs them all) and anyone counting them.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

ST = "model.safetensors"
INDEX = "model.safetensors.index.json"
SHARD = "model-00001-of-00001.safetensors"


def read_st(path: Path) -> tuple[dict, bytes]:
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path: Path, header: dict | bytes, data: bytes) -> None:
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    Path(path).write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def _edit_header(edit):
    """A case that edits the header dict in place (data kept as is)."""
    def case(ckpt: Path) -> None:
        header, data = read_st(ckpt / ST)
        edit(header)
        write_st(ckpt / ST, header, data)
    return case


def _first_tensor(header: dict) -> dict:
    return next(v for k, v in header.items() if k != "__metadata__")


def _tensor(header: dict, index: int) -> dict:
    return [v for k, v in header.items() if k != "__metadata__"][index]


def _raw(blob: bytes):
    def case(ckpt: Path) -> None:
        _, data = read_st(ckpt / ST)
        write_st(ckpt / ST, blob, data)
    return case


def _file_bytes(content: bytes):
    def case(ckpt: Path) -> None:
        (ckpt / ST).write_bytes(content)
    return case


def _sharded(weight_map_edit=None, index_text: str | bytes | None = None):
    """Turn the checkpoint into index + one shard; then spoil the index."""
    def case(ckpt: Path) -> None:
        header, _ = read_st(ckpt / ST)
        (ckpt / ST).rename(ckpt / SHARD)
        weight_map = {k: SHARD for k in header if k != "__metadata__"}
        index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
        if weight_map_edit is not None:
            index = weight_map_edit(index) or index
        text = index_text if index_text is not None else json.dumps(index)
        (ckpt / INDEX).write_bytes(text if isinstance(text, bytes) else text.encode())
    return case


def _retarget(shard_name: str):
    def edit(index):
        key = next(iter(index["weight_map"]))
        index["weight_map"][key] = shard_name
    return edit


def _config(text: str | bytes | None = None, edit=None):
    def case(ckpt: Path) -> None:
        if edit is not None:
            cfg = json.loads((ckpt / "config.json").read_text())
            edit(cfg)
            (ckpt / "config.json").write_text(json.dumps(cfg))
        else:
            (ckpt / "config.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    return case


def _swap_offsets(header: dict) -> None:
    """Two tensors of different byte lengths trade data_offsets: the lengths no longer fit the shapes."""
    tensors = [v for k, v in header.items() if k != "__metadata__"]
    size = lambda t: t["data_offsets"][1] - t["data_offsets"][0]  # noqa: E731
    a = tensors[0]
    b = next(t for t in tensors if size(t) != size(a))
    a["data_offsets"], b["data_offsets"] = b["data_offsets"], a["data_offsets"]


def _overlap(header: dict) -> None:
    t = _tensor(header, 1)
    t["data_offsets"] = [t["data_offsets"][0] - 4, t["data_offsets"][1] - 4]


def _gap(header: dict) -> None:
    for k, v in header.items():
        if k != "__metadata__" and v["data_offsets"][0] > 0:
            v["data_offsets"] = [v["data_offsets"][0] + 8, v["data_offsets"][1] + 8]


def _special(kind: str, name: str):
    def case(ckpt: Path) -> None:
        target = ckpt / name
        target.unlink()
        if kind == "fifo":
            os.mkfifo(target)
        elif kind == "loop":
            os.symlink(name + ".b", target)
            os.symlink(name, ckpt / (name + ".b"))
        elif kind == "dir":
            target.mkdir()
    return case


def _side_fifo(ckpt: Path) -> None:
    os.mkfifo(ckpt / "tokenizer.json")


DEEP = 100_000
CASES = {
    # the safetensors file itself
    "empty file": _file_bytes(b""),
    "4 bytes": _file_bytes(b"\x01\x02\x03\x04"),
    "header length 2**63": _file_bytes(struct.pack("<Q", 2**63) + b"{}"),
    "header length past the end": _file_bytes(struct.pack("<Q", 5000) + b"{}"),
    "header bytes not UTF-8": _raw(b'{"a\xff\xfe": 1}'),
    "header is a JSON list": _raw(b"[1, 2, 3]"),
    "header is a JSON string": _raw(b'"hello"'),
    "header is null": _raw(b"null"),
    "header truncated JSON": _raw(b'{"lm_head.weight": {"dtype": "F32"'),
    "header nested 100,000 deep": _raw(b"[" * DEEP + b"]" * DEEP),
    "header object nested 100,000 deep": _raw(b'{"a":' * DEEP + b"1" + b"}" * DEEP),
    "tensor entry is a list": _edit_header(lambda h: h.update({"lm_head.weight": [1, 2]})),
    "tensor entry is a number": _edit_header(lambda h: h.update({"lm_head.weight": 7})),
    "missing data_offsets": _edit_header(lambda h: _first_tensor(h).pop("data_offsets")),
    "missing dtype": _edit_header(lambda h: _first_tensor(h).pop("dtype")),
    "missing shape": _edit_header(lambda h: _first_tensor(h).pop("shape")),
    "negative data_offsets": _edit_header(lambda h: _first_tensor(h).update(data_offsets=[-16384, 0])),
    "data_offsets end before begin": _edit_header(lambda h: _first_tensor(h).update(data_offsets=[16384, 0])),
    "data_offsets past the end": _edit_header(lambda h: _tensor(h, -1).update(
        data_offsets=[o + 4096 for o in _tensor(h, -1)["data_offsets"]])),
    "data_offsets overlap": _edit_header(_overlap),
    "data_offsets leave a gap": _edit_header(_gap),
    "data_offsets swapped between tensors": _edit_header(_swap_offsets),
    "data_offsets three numbers": _edit_header(lambda h: _first_tensor(h).update(data_offsets=[0, 8, 16384])),
    "data_offsets strings": _edit_header(lambda h: _first_tensor(h).update(data_offsets=["0", "16384"])),
    "data_offsets floats": _edit_header(lambda h: _first_tensor(h).update(data_offsets=[0.0, 16384.0])),
    "data_offsets booleans": _edit_header(lambda h: _first_tensor(h).update(data_offsets=[False, True])),
    "data_offsets 400-digit": _edit_header(lambda h: _first_tensor(h).update(data_offsets=[0, 10**400])),
    "unknown dtype": _edit_header(lambda h: _first_tensor(h).update(dtype="X99")),
    "dtype is a list": _edit_header(lambda h: _first_tensor(h).update(dtype=["F32"])),
    "dtype inconsistent with bytes": _edit_header(lambda h: _first_tensor(h).update(dtype="F16")),
    "shape inconsistent with bytes": _edit_header(lambda h: _first_tensor(h).update(shape=[128, 31])),
    "shape negative": _edit_header(lambda h: _first_tensor(h).update(shape=[-128, -32])),
    "shape huge": _edit_header(lambda h: _first_tensor(h).update(shape=[2**62, 2**62])),
    "shape is a string": _edit_header(lambda h: _first_tensor(h).update(shape="128x32")),
    "shape of floats": _edit_header(lambda h: _first_tensor(h).update(shape=[128.0, 32.0])),
    "__metadata__ is a list": _edit_header(lambda h: h.update({"__metadata__": [1]})),
    "file truncated mid-data": lambda ckpt: (ckpt / ST).write_bytes((ckpt / ST).read_bytes()[:-1000]),
    "trailing bytes after data": lambda ckpt: (ckpt / ST).write_bytes((ckpt / ST).read_bytes() + b"\0" * 64),
    # the index
    "index invalid JSON": _sharded(index_text="{not json"),
    "index not UTF-8": _sharded(index_text=b'{"weight_map": {"a\xff": 1}}'),
    "index is a list": _sharded(index_text="[]"),
    "index weight_map is a list": _sharded(index_text='{"weight_map": ["model-00001-of-00001.safetensors"]}'),
    "index weight_map value is a number": _sharded(_retarget(7)),  # type: ignore[arg-type]
    "index metadata is a list": _sharded(lambda i: i.update(metadata=[1])),
    "index nested 100,000 deep": _sharded(index_text="[" * DEEP + "]" * DEEP),
    "index names an absolute shard": _sharded(_retarget("/etc/passwd")),
    "index names a ../ shard": _sharded(_retarget("../outside/model.safetensors")),
    "index names a shard with a NUL byte": _sharded(_retarget("model\x00.safetensors")),
    "index names the directory itself": _sharded(_retarget(".")),
    "index names a missing shard": _sharded(_retarget("model-00002-of-00002.safetensors")),
    "index names a 5,000-character shard": _sharded(_retarget("x" * 5000 + ".safetensors")),
    # config.json
    "config invalid JSON": _config("{not json"),
    "config not UTF-8": _config(b'{"model_type": "\xff"}'),
    "config is a list": _config("[1, 2]"),
    "config is a string": _config('"qwen3_moe"'),
    "config nested 100,000 deep": _config("[" * DEEP + "]" * DEEP),
    "config without model_type": _config(edit=lambda c: c.pop("model_type")),
    "config model_type is a list": _config(edit=lambda c: c.update(model_type=["qwen3_moe"])),
    "config num_experts is a string": _config(edit=lambda c: c.update(num_experts="8")),
    "config num_experts negative": _config(edit=lambda c: c.update(num_experts=-8)),
    "config num_experts 400-digit": _config(edit=lambda c: c.update(num_experts=10**400)),
    "config num_experts_per_tok is null": _config(edit=lambda c: c.update(num_experts_per_tok=None)),
    "config num_hidden_layers is a float": _config(edit=lambda c: c.update(num_hidden_layers=2.5)),
    # special files
    "config.json is a FIFO": _special("fifo", "config.json"),
    "model.safetensors is a FIFO": _special("fifo", ST),
    "config.json is a symlink loop": _special("loop", "config.json"),
    "model.safetensors is a symlink loop": _special("loop", ST),
    "config.json is a directory": _special("dir", "config.json"),
    "model.safetensors is a directory": _special("dir", ST),
    "side file is a FIFO": _side_fifo,
}
