"""heap: with the mmap threshold fixed, freed expert-sized buffers leave the resident set."""

from __future__ import annotations

import platform

import pytest

from moeproxy.proxy.heap import bound_heap_growth, trim_heap


def resident_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_expert_sized_buffers_are_returned_to_the_os():
    assert bound_heap_growth() is True
    before = resident_bytes()
    keep, big = [], []
    for i in range(200):  # 300 MB of 1.5 MB buffers, each followed by a small object that stays alive
        buf = bytearray(3 << 19)
        buf[::4096] = b"x" * len(buf[::4096])  # touch every page
        big.append(buf)
        keep.append(bytes(64))
    grown = resident_bytes() - before
    del big
    left = resident_bytes() - before  # unmapped at free, before any trim
    assert grown > 250e6
    assert left < 20e6, f"{left / 1e6:.0f} MB of freed buffers still resident"
    trim_heap()
    assert resident_bytes() - before < 20e6


def test_calls_are_idempotent_and_safe():
    first = bound_heap_growth()
    assert bound_heap_growth() == first
    trim_heap()
