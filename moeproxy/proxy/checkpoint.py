"""Read safetensors checkpoints as a directory of byte ranges, and write shards by streaming bytes.

A safetensors file is an 8-byte little-endian header length, a JSON header (name -> dtype, shape,
data_offsets) and the raw tensor bytes. The pruner never needs the values of a tensor it copies, so
``write_shard`` assembles each output tensor from byte ranges of the input files (a whole tensor, or
the kept slices along the expert dimension) and copies them with ``os.copy_file_range`` where the
kernel allows it. Memory stays at a few megabytes however large the checkpoint; tensors are copied
byte for byte, so the output keeps the source dtype and quantisation (FP8, MXFP4) exactly.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from moeproxy.errors import InputError, NotFound

DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
    "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
}
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
COPY_CHUNK = 64 << 20


@dataclass(frozen=True)
class TensorRef:
    """Where one tensor's bytes live: file, dtype, shape and absolute byte range."""

    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def read_header(path: Path) -> tuple[dict[str, TensorRef], dict]:
    """Parse one safetensors file's header; returns (tensors, __metadata__)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise InputError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", raw)
            if n > 100 << 20:
                raise InputError(f"{path}: not a safetensors file (header length {n} is implausible)")
            header = json.loads(fh.read(n))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: corrupt safetensors header ({exc})") from exc
    base = 8 + n
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        begin, stop = info["data_offsets"]
        tensors[name] = TensorRef(name, Path(path), info["dtype"], tuple(info["shape"]), base + begin, base + stop)
    return tensors, meta


@dataclass
class Checkpoint:
    """A checkpoint directory: config dict, every tensor's location, and the shard files in order."""

    path: Path
    config: dict
    tensors: dict[str, TensorRef]
    shards: list[str]
    shard_metadata: dict[str, dict]
    index_metadata: dict

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def load_config(path: Path) -> dict:
    path = Path(path)
    cfg_file = path / "config.json" if path.is_dir() else path
    if not cfg_file.exists():
        raise NotFound(f"{cfg_file}: no config.json")
    try:
        return json.loads(cfg_file.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{cfg_file}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc


def open_checkpoint(path: Path) -> Checkpoint:
    """Index a checkpoint directory (sharded with index.json, or a single model.safetensors)."""
    path = Path(path)
    if not path.is_dir():
        raise NotFound(f"{path}: not a checkpoint directory")
    config = load_config(path)
    index_file = path / INDEX_NAME
    if index_file.exists():
        index = json.loads(index_file.read_text())
        weight_map = index.get("weight_map") or {}
        shards = sorted(set(weight_map.values()))
        index_metadata = index.get("metadata", {}) or {}
    elif (path / SINGLE_NAME).exists():
        shards, weight_map, index_metadata = [SINGLE_NAME], None, {}
    else:
        raise InputError(f"{path}: no {INDEX_NAME} or {SINGLE_NAME} (moeproxy works on safetensors checkpoints)")
    tensors: dict[str, TensorRef] = {}
    shard_metadata = {}
    for shard in shards:
        if not (path / shard).exists():
            raise NotFound(f"{index_file}: shard {shard} listed in weight_map is missing")
        found, meta = read_header(path / shard)
        shard_metadata[shard] = meta
        for name, ref in found.items():
            if weight_map is not None and weight_map.get(name) != shard:
                continue
            tensors[name] = ref
    if weight_map is not None:
        missing = [k for k in weight_map if k not in tensors]
        if missing:
            raise InputError(f"{index_file}: {len(missing)} tensors not found in their shard, e.g. {missing[0]}")
    return Checkpoint(path, config, tensors, shards, shard_metadata, index_metadata)


def slice_ranges(ref: TensorRef, dim: int, keep: list[int]) -> list[tuple[int, int]]:
    """Byte ranges (absolute, merged) holding ``ref`` restricted to indices ``keep`` along ``dim``."""
    shape = ref.shape
    dim = dim % len(shape)
    item = DTYPE_BYTES.get(ref.dtype)
    if item is None:
        raise InputError(f"{ref.file}: tensor {ref.name} has dtype {ref.dtype}, which cannot be sliced")
    outer = math.prod(shape[:dim])
    inner = math.prod(shape[dim + 1:]) * item
    ranges: list[tuple[int, int]] = []
    for o in range(outer):
        for k in keep:
            if not 0 <= k < shape[dim]:
                raise InputError(f"{ref.name}: index {k} out of range for dim {dim} of shape {shape}")
            begin = ref.start + (o * shape[dim] + k) * inner
            if ranges and ranges[-1][1] == begin:
                ranges[-1] = (ranges[-1][0], begin + inner)
            else:
                ranges.append((begin, begin + inner))
    return ranges


@dataclass
class OutputTensor:
    """One tensor of an output shard: its new name and shape, assembled from source byte ranges."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    source: Path
    ranges: list[tuple[int, int]]

    @property
    def nbytes(self) -> int:
        return sum(b - a for a, b in self.ranges)


def _copy_range(src_fd: int, dst, begin: int, end: int) -> None:
    remaining = end - begin
    offset = begin
    dst.flush()
    dst_fd = dst.fileno()
    while remaining > 0:
        n = min(remaining, COPY_CHUNK)
        try:
            done = os.copy_file_range(src_fd, dst_fd, n, offset)
        except (OSError, AttributeError):
            done = 0
        if done <= 0:  # fall back to a bounded read/write
            data = os.pread(src_fd, n, offset)
            if not data:
                raise InputError(f"unexpected end of file while copying bytes {offset}..{end}")
            os.write(dst_fd, data)
            done = len(data)
        offset += done
        remaining -= done


def write_shard(path: Path, tensors: list[OutputTensor], metadata: dict | None = None) -> int:
    """Write a safetensors file from byte ranges; returns the data bytes written."""
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    open_fds: dict[Path, int] = {}
    try:
        with open(path, "wb") as out:
            out.write(struct.pack("<Q", len(blob)))
            out.write(blob)
            for t in tensors:
                fd = open_fds.get(t.source)
                if fd is None:
                    fd = open_fds[t.source] = os.open(t.source, os.O_RDONLY)
                for begin, end in t.ranges:
                    _copy_range(fd, out, begin, end)
    finally:
        for fd in open_fds.values():
            os.close(fd)
    return offset


_TORCH_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                 "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
                 "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def torch_dtype(ref: TensorRef):
    """The torch dtype of a stored tensor (InputError for dtypes torch cannot hold)."""
    import torch

    if ref.dtype not in _TORCH_DTYPES:
        raise InputError(f"{ref.file}: tensor {ref.name} has dtype {ref.dtype}, which moeproxy cannot read")
    return getattr(torch, _TORCH_DTYPES[ref.dtype])


def _pread_exact(ref: TensorRef, begin: int, view: memoryview) -> None:
    fd = os.open(ref.file, os.O_RDONLY)
    try:
        got = 0
        while got < len(view):
            n = os.preadv(fd, [view[got:]], begin + got)
            if n <= 0:
                raise InputError(f"{ref.file}: unexpected end of file reading {ref.name}")
            got += n
    finally:
        os.close(fd)


def _bytes_of(tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's storage."""
    import torch

    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy()).cast("B")


def read_tensor(ref: TensorRef, index: int | None = None):
    """Read a tensor (or row ``index`` along dim 0) with ``os.pread`` into a fresh tensor.

    Unlike a memory map, nothing of the file stays resident after the tensor is dropped, so the
    process's resident set holds only what the caller keeps.
    """
    import torch

    dtype = torch_dtype(ref)
    if index is None:
        begin, end, shape = ref.start, ref.end, ref.shape
    else:
        ((begin, end),) = slice_ranges(ref, 0, [index])
        shape = ref.shape[1:]
    out = torch.empty(shape, dtype=dtype)
    if out.numel():
        view = _bytes_of(out)
        if len(view) != end - begin:
            raise InputError(f"{ref.file}: tensor {ref.name} holds {end - begin} bytes, its shape needs {len(view)}")
        _pread_exact(ref, begin, view)
    return out


def read_tensor_into(ref: TensorRef, out) -> None:
    """Read ``ref`` straight into ``out`` (a contiguous CPU tensor of its dtype and element count), no copy.

    Used to fill one expert's slot of a preallocated fused tensor; anything else goes through
    ``read_tensor`` and a copy.
    """
    if out.dtype != torch_dtype(ref) or not out.is_contiguous() or out.device.type != "cpu":
        raise InputError(f"{ref.name}: cannot read {ref.dtype} bytes into a {out.dtype} tensor on {out.device}")
    if out.numel() != ref.numel:
        raise InputError(f"{ref.name}: shape {list(ref.shape)} does not fit a slot of shape {list(out.shape)}")
    if out.numel():
        _pread_exact(ref, ref.start, _bytes_of(out))
