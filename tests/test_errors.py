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


@pytest.mark.parametrize("backend", ["eager", "compiled"])
def test_array_operand_with_bad_shape_records_nothing(backend: str) -> None:
    s = tl.Session(tl.Options(backend=backend))
    x = s.input(np.ones(3))
    size = len(s.graph) if backend == "compiled" else s.tape.size
    with pytest.raises(tl.ShapeError, match="add: shapes do not broadcast"):
        F.add(x, np.ones(5))
    with pytest.raises(tl.ShapeError, match="add"):
        x + np.ones((5,))
    with pytest.raises(tl.ShapeError, match="linear"):
        F.linear(np.ones((2, 4)), np.ones(2), x)
    with pytest.raises(tl.ShapeError, match="not a rectangular array"):
        F.add(x, [[1.0], [1.0, 2.0]])
    assert (len(s.graph) if backend == "compiled" else s.tape.size) == size
    # Arrays that fit still become constants, NatRefs still work as attributes.
    assert s.value(x + np.ones(3)).tolist() == [2.0, 2.0, 2.0]
    assert F.gather_vec_nat(x, idx=s.nat_vec([0, 7])).shape == (2,)
