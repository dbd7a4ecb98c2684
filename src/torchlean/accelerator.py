"""``torch.accelerator``'s questions, for torchlean: which accelerator (if any) a script can use.

PyTorch's device-agnostic scripts ask ``torch.accelerator.is_available()`` and then
``current_accelerator().type`` for the device name; torchlean's only accelerator is CUDA through
CuPy, so the answers follow ``tl.cuda``.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import cuda

__all__ = ["AcceleratorDevice", "current_accelerator", "device_count", "is_available"]


@dataclass(frozen=True)
class AcceleratorDevice:
    """The accelerator as torch names it: ``.type`` ("cuda") and ``.index``."""

    type: str
    index: int | None = None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


def is_available() -> bool:
    """Whether an accelerator (a usable CUDA GPU with CuPy) is present."""
    return cuda.is_available()


def device_count() -> int:
    """The number of accelerator devices (0 without one)."""
    return cuda.device_count()


def current_accelerator(check_available: bool = False) -> AcceleratorDevice | None:
    """The accelerator's device (``.type == "cuda"``), or None when there is none."""
    return AcceleratorDevice("cuda", 0) if cuda.is_available() else None
