"""Where torchlean deliberately differs from PyTorch, as data: re-exported from the library
(``torchlean.verify.differences``), where ``torchlean verify``'s torch column reads it.

tests/test_semantics.py tests every entry at the exact points where the convention matters.
"""

from __future__ import annotations

from torchlean.verify.differences import (
    BY_OP,
    INTENDED_DIFFERENCES,
    IntendedDifference,
    torch_skips,
)

__all__ = ["BY_OP", "INTENDED_DIFFERENCES", "IntendedDifference", "torch_skips"]
