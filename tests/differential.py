"""What the differential fuzzes (``test_fuzz_training_patterns``, ``test_fuzz_nn_layers``)
share: a program written once against a module ``m`` is run with ``m=torch`` and ``m=tl``, its
observables turned into NumPy copies (``norm``) and compared recursively (``assert_same``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import torchlean as tl

torch = pytest.importorskip("torch")  # imported by a test module: that module is skipped


def norm(v: Any) -> Any:
    """Tensors to NumPy copies, recursively (so later in-place changes do not leak in)."""
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if hasattr(v, "detach") and hasattr(v, "numpy"):
        return np.array(v.detach().numpy(), copy=True)
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, list | tuple):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    return v


def _assert_arrays(a: Any, b: Any, path: str, rtol: float, atol: float, strict: bool) -> None:
    if not strict:
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{path}: shape {a.shape} (tl) vs {b.shape} (torch)"
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol,
                                   atol=atol, err_msg=path)
        return
    assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), \
        f"{path}: {type(a).__name__} (tl) vs {type(b).__name__} (torch)"
    assert a.shape == b.shape, f"{path}: shape {a.shape} (tl) vs {b.shape} (torch)"
    assert a.dtype == b.dtype, f"{path}: dtype {a.dtype} (tl) vs {b.dtype} (torch)"
    if a.dtype.kind in "biu":
        np.testing.assert_array_equal(a, b, err_msg=path)
        return
    # atol relative to the array's scale: float32 sums of large terms round in the last bits,
    # differently in each library
    scale = max(1.0, float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0)))
    np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol,
                               atol=atol * scale, err_msg=path)


def assert_same(a: Any, b: Any, path: str, rtol: float, atol: float,
                strict: bool = False) -> None:
    """``a`` (torchlean's) agrees with ``b`` (torch's), recursively. ``strict``: arrays must
    both be arrays of one dtype, integers equal, and ``atol`` scales with ``b``'s magnitude."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        _assert_arrays(a, b, path, rtol, atol, strict)
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: length {len(a)} (tl) vs {len(b)} (torch)"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]", rtol, atol, strict)
    elif isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} (tl) vs {list(b)} (torch)"
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}", rtol, atol, strict)
    elif isinstance(a, float) and isinstance(b, float):
        assert np.isclose(a, b, rtol=rtol, atol=atol), f"{path}: {a} (tl) vs {b} (torch)"
    else:
        assert a == b, f"{path}: {a!r} (tl) vs {b!r} (torch)"


def agree(program: Callable[[Any], Any], rtol: float, atol: float, strict: bool = False) -> None:
    """Run ``program`` with torch and with torchlean; every returned observable agrees."""
    expected = norm(program(torch))
    got = norm(program(tl))
    assert_same(got, expected, "", rtol, atol, strict)
