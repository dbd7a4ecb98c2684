"""Test helper shared by the exact-enumeration oracles (tests/test_relu_bab.py,
tests/test_lp_bounds.py): which relu neurons plain interval arithmetic fixes on a box."""

from __future__ import annotations

import numpy as np


def interval_signs(layers, lo, hi):
    """Per relu layer in ``layers`` (``(w, b)`` pairs), each neuron's sign over the box by
    interval arithmetic widened by 1e-9: 1 always on, 0 always off, -1 free (to enumerate)."""
    fixed, l, u = [], lo, hi
    for w, b in layers:
        c, r = (l + u) / 2, (u - l) / 2
        zl, zu = w @ c + b - np.abs(w) @ r - 1e-9, w @ c + b + np.abs(w) @ r + 1e-9
        fixed.append(np.where(zl >= 0, 1, np.where(zu <= 0, 0, -1)))
        l, u = np.maximum(zl, 0), np.maximum(zu, 0)
    return fixed
