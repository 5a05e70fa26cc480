"""Pick the compute device for heavy work: Ascend NPU, CUDA GPU, Apple MPS or CPU.

This is the only module in moeproxy that names ``torch.cuda`` or ``torch_npu``. Detection never
raises when a backend is missing or broken: ``torch_npu`` is used only if it imports cleanly, and a
CUDA build without a visible GPU falls back to the CPU. Callers ask ``resolve_device("auto")`` and get
a ``torch.device``; ``available_devices()`` lists what this host offers (for the CLI and dashboard).
"""

from __future__ import annotations

import functools
from typing import Literal, get_args

from moeproxy.errors import InputError

# The one spelling of the device kinds: options, job specs, build specs and pages use these.
DeviceKind = Literal["cpu", "cuda", "npu", "mps"]
DeviceChoice = Literal["auto", DeviceKind]  # auto: NPU, then CUDA, else CPU
DEVICE_KINDS: tuple[str, ...] = get_args(DeviceKind)
DEVICE_CHOICES: tuple[str, ...] = get_args(DeviceChoice)
DEVICE_NAMES = {"npu": "Ascend NPU", "cuda": "CUDA GPU", "mps": "Apple MPS", "cpu": "CPU"}


@functools.lru_cache(maxsize=1)
def _npu_ready() -> bool:
    """True when torch_npu imports cleanly and reports at least one NPU."""
    try:
        import torch  # noqa: F401
        import torch_npu  # noqa: F401  (registers torch.npu)
    except Exception:  # any failure (missing CANN, ABI mismatch) means: no NPU here
        return False
    try:
        import torch

        return bool(torch.npu.is_available()) and torch.npu.device_count() > 0
    except Exception:
        return False


def _cuda_ready() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except Exception:
        return False


def _mps_ready() -> bool:
    try:
        import torch

        return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    except Exception:
        return False


def available_devices() -> list[str]:
    """Device kinds usable on this host, best first; always ends with ``cpu``."""
    found = []
    if _npu_ready():
        found.append("npu")
    if _cuda_ready():
        found.append("cuda")
    if _mps_ready():
        found.append("mps")
    found.append("cpu")
    return found


def has_accelerator() -> bool:
    """True when a CUDA GPU or an Ascend NPU is usable (the ``accelerator`` test marker)."""
    return _npu_ready() or _cuda_ready()


def auto_device_kind() -> str:
    """The kind ``auto`` resolves to: ``npu``, then ``cuda``, else ``cpu`` (MPS only by name)."""
    if _npu_ready():
        return "npu"
    if _cuda_ready():
        return "cuda"
    return "cpu"


def resolve_device(choice: str = "auto"):
    """Turn ``auto|cpu|cuda|npu|mps`` into a ``torch.device``.

    ``auto`` prefers NPU, then CUDA, then CPU (MPS only when asked for by name: several MoE kernels
    are missing there). Asking for a backend that is absent raises ``InputError`` naming what exists.
    """
    import torch

    if choice not in DEVICE_CHOICES:
        raise InputError(f"unknown device {choice!r}; choose one of {', '.join(DEVICE_CHOICES)}")
    if choice == "auto":
        kind = auto_device_kind()
        return torch.device(kind, 0) if kind != "cpu" else torch.device("cpu")
    if choice != "cpu" and choice not in available_devices():
        raise InputError(
            f"device {choice!r} is not available on this host; available: {', '.join(available_devices())}"
        )
    return torch.device(choice if choice in ("cpu", "mps") else f"{choice}:0")


def synchronize(device) -> None:
    """Wait for queued kernels on ``device`` (no-op on CPU); used before timing or peak-memory reads."""
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        torch.cuda.synchronize()
    elif kind == "npu":
        torch.npu.synchronize()


def peak_accelerator_bytes(device) -> int | None:
    """Peak allocated bytes on an accelerator since start (None on CPU / unknown)."""
    import torch

    kind = torch.device(device).type
    try:
        if kind == "cuda":
            return int(torch.cuda.max_memory_allocated())
        if kind == "npu":
            return int(torch.npu.max_memory_allocated())
    except Exception:
        return None
    return None
