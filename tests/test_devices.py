"""Device detection never crashes, and nothing but moeproxy/devices.py names torch.cuda."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from moeproxy.devices import available_devices, has_accelerator, resolve_device
from moeproxy.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def test_auto_resolves_to_a_usable_device():
    device = resolve_device("auto")
    assert torch.zeros(2, device=device).sum().item() == 0
    assert available_devices()[-1] == "cpu"
    if not has_accelerator():
        assert device.type == "cpu"


def test_missing_backend_is_a_clear_error():
    if "npu" not in available_devices():
        with pytest.raises(InputError, match="not available on this host; available: .*cpu"):
            resolve_device("npu")
    with pytest.raises(InputError, match="unknown device"):
        resolve_device("tpu")


def test_only_devices_module_names_torch_cuda():
    offenders = []
    for folder in ("moeproxy", "dashboard"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "devices.py" and path.parent.name == "moeproxy":
                continue
            if re.search(r"torch\.cuda\b", path.read_text(encoding="utf-8", errors="replace")):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


@pytest.mark.accelerator
@pytest.mark.skipif(not has_accelerator(), reason="no CUDA GPU or Ascend NPU here")
def test_auto_prefers_an_accelerator():
    assert resolve_device("auto").type in ("npu", "cuda")
