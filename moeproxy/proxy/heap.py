"""Make memory freed by streamed tensors go back to the operating system (glibc malloc settings).

Streaming a checkpoint allocates and frees thousands of 1-3 MB buffers (one expert's tensors, its
float32 copy, a pread buffer). glibc serves such sizes from its heap once a freed block of that size
has raised its *dynamic* mmap threshold, and a heap fragmented by a few long-lived small objects is
never shrunk: on a 302 MB-per-layer checkpoint the clustering pass alone left about 200-270 MB of
freed memory resident, which the verification pass then stacked its layer on top of.

``bound_heap_growth()`` fixes the mmap threshold at 1 MiB (which also turns off the dynamic
adjustment), so every buffer of 1 MiB or more is its own mapping and is unmapped when freed.
``trim_heap()`` hands back whatever free memory the heap still holds. Both are process-wide,
idempotent, cheap, and do nothing on a C library without these calls (musl, macOS, Windows).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_MMAP_THRESHOLD = -3  # glibc malloc.h
MMAP_THRESHOLD_BYTES = 1 << 20


@functools.lru_cache(maxsize=1)
def _glibc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


@functools.lru_cache(maxsize=1)
def bound_heap_growth() -> bool:
    """Serve allocations of 1 MiB and more by their own mappings; True where glibc accepted it."""
    libc = _glibc()
    return bool(libc is not None and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1)


def trim_heap() -> None:
    """Return free heap memory to the operating system (after a layer is dropped)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
