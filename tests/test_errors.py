"""Bad input raises a TorchLeanError naming the op, before any state changes (DESIGN section 7).

Regression tests for inputs that used to escape as KeyError, TypeError, AttributeError or NumPy
errors, or that changed state (a tape node, a Param) before failing.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
import torchlean.functional as F


def test_unknown_op_name_is_a_torchlean_error() -> None:
    tape = tl.Tape()
    x = tape.leaf(np.ones(3))
    with pytest.raises(tl.UnknownOpError, match="no primitive named 'nope'"):
        tape.apply("nope", x)
    with pytest.raises(tl.TorchLeanError):
        F.apply("nope", np.ones(3))
    with pytest.raises(KeyError):  # still a KeyError for generic handlers
        tape.apply("nope", x)
    assert tape.size == 1
