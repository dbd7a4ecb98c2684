"""Deprecated old path of ``torchlean.training.distributed`` (kept for existing code)."""

import sys
import warnings
from importlib import import_module

warnings.warn(f"{__name__} moved to torchlean.training.distributed; the old path will be removed",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = import_module("torchlean.training.distributed")
