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
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from moeproxy.errors import InputError, NotFound

DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
    "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
}
# every dtype the safetensors format defines, in bits per element (sub-byte ones can be copied, not sliced)
DTYPE_BITS = {**{k: 8 * v for k, v in DTYPE_BYTES.items()}, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
MAX_HEADER_BYTES = 100 << 20
MAX_JSON_BYTES = 256 << 20
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


def _shown(value, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: names from a hostile file can be megabytes long."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def open_regular(path: Path, what: str = "file"):
    """Open ``path`` for binary reading if it is a regular file; ``InputError`` otherwise.

    Opened with O_NONBLOCK and checked on the open descriptor, so a FIFO or device swapped in
    cannot block the reader, and the check and the read see the same file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except ValueError as exc:  # an embedded NUL byte
        raise InputError(f"{what} {_shown(str(path))}: {exc}") from None
    except OSError as exc:
        raise InputError(f"{what} {_shown(str(path))}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (FIFO, device or socket)"
            raise InputError(f"{what} {_shown(str(path))}: {kind}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def parse_json_bytes(raw: bytes, where: str):
    """JSON from bytes with every failure (encoding, syntax, depth, giant numbers) as one ``InputError``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(f"{where}: invalid JSON ({str(exc)[:120]})") from None


def read_json_file(path: Path, what: str, limit: int = MAX_JSON_BYTES) -> dict:
    """A JSON object from a regular file of at most ``limit`` bytes (config.json, the index)."""
    with open_regular(path, what) as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise InputError(f"{path}: larger than {limit >> 20} MiB; not a {what}")
    data = parse_json_bytes(raw, str(path))
    if not isinstance(data, dict):
        raise InputError(f"{path}: holds a JSON {type(data).__name__}, not an object")
    return data


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor_ref(path: Path, name: str, info, base: int) -> TensorRef:
    """One header entry, checked: known dtype, non-negative integer shape and offsets, byte length
    equal to the element count times the dtype size."""
    where = f"{path}: tensor {_shown(name)}"
    if not isinstance(info, dict):
        raise InputError(f"{where}: entry is a JSON {type(info).__name__}, not an object")
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in info]
    if missing:
        raise InputError(f"{where}: no {', '.join(missing)}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise InputError(f"{where}: unknown dtype {_shown(dtype)}")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise InputError(f"{where}: shape {_shown(shape)} is not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        raise InputError(f"{where}: data_offsets {_shown(offsets)} is not [begin, end] with 0 <= begin <= end")
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits != (offsets[1] - offsets[0]) * 8:
        raise InputError(f"{where}: {dtype} shape {_shown(shape)} needs {_shown(bits / 8 if bits % 8 else bits // 8)} "
                         f"bytes, data_offsets hold {_shown(offsets[1] - offsets[0])}")
    return TensorRef(name, Path(path), dtype, tuple(shape), base + offsets[0], base + offsets[1])


def read_header(path: Path) -> tuple[dict[str, TensorRef], dict]:
    """Parse and check one safetensors file's header; returns (tensors, __metadata__).

    Checked as the safetensors library checks it, before any byte is copied: a JSON object of
    tensor entries (plus an optional ``__metadata__`` of strings), each with a known dtype, a shape
    and ``data_offsets`` whose length matches; the tensors tile the data section exactly, from 0 to
    the end of the file, without gaps or overlaps. Any failure is one ``InputError`` naming the file.
    """
    with open_regular(path, "safetensors file") as fh:
        size = os.fstat(fh.fileno()).st_size
        raw = fh.read(8)
        if len(raw) != 8:
            raise InputError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", raw)
        if n > MAX_HEADER_BYTES or n > size - 8:
            raise InputError(f"{path}: not a safetensors file (header length {n} is implausible for a file of "
                             f"{size} bytes)")
        blob = fh.read(n)
    header = parse_json_bytes(blob, f"{path}: safetensors header")
    if not isinstance(header, dict):
        raise InputError(f"{path}: safetensors header is a JSON {type(header).__name__}, not an object")
    meta = header.pop("__metadata__", None)
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise InputError(f"{path}: safetensors __metadata__ is not an object of strings")
    base = 8 + n
    tensors = {name: _tensor_ref(path, name, info, base) for name, info in header.items()}
    expected = base
    for ref in sorted(tensors.values(), key=lambda t: (t.start, t.end)):
        if ref.start != expected:
            problem = "overlaps the tensor before it" if ref.start < expected else "leaves a gap before it"
            raise InputError(f"{path}: tensor {_shown(ref.name)} at data_offsets "
                             f"[{ref.start - base}, {ref.end - base}] {problem} (expected to begin at {expected - base})")
        expected = ref.end
    if expected != size:
        raise InputError(f"{path}: the tensors' data ends at byte {expected} but the file holds {size} bytes "
                         f"({'truncated' if expected > size else 'trailing bytes'})")
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
    """config.json of a checkpoint directory (or the file itself) as a dict; ``InputError`` if it is not one."""
    path = Path(path)
    try:
        cfg_file = path / "config.json" if path.is_dir() else path
        exists = cfg_file.exists() or cfg_file.is_symlink()
    except (OSError, ValueError) as exc:
        raise InputError(f"{_shown(str(path))}: {exc}") from None
    if not exists:
        raise NotFound(f"{cfg_file}: no config.json")
    return read_json_file(cfg_file, "config.json")


def check_shard_name(name, index_file: Path) -> str:
    """A shard name from an index: a plain ``*.safetensors`` file name in the checkpoint directory.

    Absolute names, ``..``, subdirectories and NUL bytes are refused: they would read (and, mirrored
    into the proxy, write) outside the checkpoint and output directories.
    """
    if not isinstance(name, str):
        raise InputError(f"{index_file}: weight_map value {_shown(name)} is not a file name")
    if ("/" in name or "\\" in name or "\x00" in name or name in ("", ".", "..") or len(name.encode()) > 255
            or not name.endswith(".safetensors")):
        raise InputError(f"{index_file}: shard name {_shown(name)} is not a plain *.safetensors file name in the "
                         "checkpoint directory (absolute paths, '..' and subdirectories are refused)")
    return name


def open_checkpoint(path: Path, inside=None) -> Checkpoint:
    """Index a checkpoint directory (sharded with index.json, or a single model.safetensors).

    Every file is checked before any byte of tensor data is read: config.json and the index are
    JSON objects, shard names are plain file names, and each shard's header passes ``read_header``.
    ``inside(path, what)``, when given, is called on each file read (the dashboard's allowed roots).
    """
    path = Path(path)
    try:
        is_dir = path.is_dir()
    except (OSError, ValueError) as exc:
        raise InputError(f"{_shown(str(path))}: {exc}") from None
    if not is_dir:
        raise NotFound(f"{path}: not a checkpoint directory")
    check = inside or (lambda p, what: p)
    check(path / "config.json", "config.json")
    config = load_config(path)
    index_file = path / INDEX_NAME
    if index_file.exists() or index_file.is_symlink():
        check(index_file, INDEX_NAME)
        index = read_json_file(index_file, INDEX_NAME)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise InputError(f"{index_file}: weight_map is not a non-empty object of tensor name -> shard file")
        shards = sorted({check_shard_name(v, index_file) for v in weight_map.values()})
        index_metadata = index.get("metadata") or {}
        if not isinstance(index_metadata, dict):
            raise InputError(f"{index_file}: metadata is a JSON {type(index_metadata).__name__}, not an object")
    elif (path / SINGLE_NAME).exists() or (path / SINGLE_NAME).is_symlink():
        shards, weight_map, index_metadata = [SINGLE_NAME], None, {}
    else:
        raise InputError(f"{path}: no {INDEX_NAME} or {SINGLE_NAME} (moeproxy works on safetensors checkpoints)")
    tensors: dict[str, TensorRef] = {}
    shard_metadata = {}
    for shard in shards:
        if not (path / shard).exists() and not (path / shard).is_symlink():
            raise NotFound(f"{index_file}: shard {shard} listed in weight_map is missing")
        check(path / shard, "shard")
        found, meta = read_header(path / shard)
        shard_metadata[shard] = meta
        for name, ref in found.items():
            if weight_map is not None and weight_map.get(name) != shard:
                continue
            tensors[name] = ref
    if weight_map is not None:
        missing = [k for k in weight_map if k not in tensors]
        if missing:
            raise InputError(f"{index_file}: {len(missing)} tensors not found in their shard, e.g. {_shown(missing[0])}")
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
