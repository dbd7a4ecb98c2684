"""Deprecated old path of ``torchlean.engine.graph`` (kept for existing code)."""

import sys
import warnings
from importlib import import_module

warnings.warn(f"{__name__} moved to torchlean.engine.graph; the old path will be removed",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = import_module("torchlean.engine.graph")
