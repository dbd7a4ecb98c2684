"""The fast softmax's shift (``ops.fast.softmax.exp_rows``, also the fast attention's): the
maximum of the whole array where every row keeps its terms, each row's own maximum where a row
lies far below the rest or anything is infinite or NaN; the reference within ``FAST_RTOL``
either way, and the NaNs and infinities where the reference puts them."""

from __future__ import annotations

import numpy as np
import pytest

from torchlean.core.registry import ARRAY_OPS, FAST_RTOL, REGISTRY, fast_kernels
from torchlean.ops.fast import softmax as fast_softmax


def _close(got: np.ndarray, want: np.ndarray) -> None:
    rtol = FAST_RTOL[want.dtype.name]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 1e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_spread_up_to_the_floor_keep_the_global_shift(dtype: type) -> None:
    """Rows offset by up to 55 (float32: terms down to exp(-55 - spread), over the floor) take
    the global shift and stay within tolerance of the reference."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((8, 4, 32, 32)) * 2).astype(dtype)
    x += np.linspace(-55, 0, 32, dtype=dtype)[None, None, :, None]
    x2 = x.reshape(-1, 32)
    e, r = fast_softmax.exp_rows(x2)
    top = x2.max()
    np.testing.assert_array_equal(e, np.exp(x2 - top))  # the global shift was taken
    _close(fast_softmax.forward(x), REGISTRY["softmax"].reference_forward(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_row_far_below_the_rest_takes_the_rows_own_maxima(dtype: type) -> None:
    """One row 1,000 below the others (its terms would all underflow under the global shift):
    each row is shifted by its own maximum, and the far row is a proper distribution."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((256, 32)).astype(dtype)
    x[7] -= 1000
    e, r = fast_softmax.exp_rows(x)
    np.testing.assert_array_equal(e, np.exp(x - x.max(axis=1, keepdims=True)))
    got = fast_softmax.forward(x)
    _close(got, REGISTRY["softmax"].reference_forward(x))
    assert np.isclose(got[7].sum(), 1.0)


@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan])
def test_infinities_and_nans_land_where_the_reference_puts_them(special: float) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((256, 32)).astype(np.float32)
    x[5, 3] = special
    with np.errstate(invalid="ignore"):
        got = fast_softmax.forward(x)
        want = REGISTRY["softmax"].reference_forward(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    _close(got[keep], want[keep])


def test_the_attention_softmax_uses_the_shift_and_matches_the_reference() -> None:
    """multi_head_attention's fast forward and VJP (its softmax from ``exp_rows``) against the
    reference on W5's shapes, one batch row far below the others included."""
    prim = REGISTRY["multi_head_attention"]
    rng = np.random.default_rng(4)
    dm = 64
    ws = [(rng.standard_normal((dm, dm)) / 8).astype(np.float32) for _ in range(4)]
    x = rng.standard_normal((8, 32, dm)).astype(np.float32)
    x[3] *= 40  # large scores in one batch entry: the other rows fall far below its maximum
    inputs = [*ws, x]
    want = prim.reference_forward(*inputs, num_heads=4)
    g = rng.standard_normal(want.shape).astype(np.float32)
    want_g = prim.reference_vjp(ARRAY_OPS, g, inputs, want, num_heads=4)
    with fast_kernels(True):
        got = prim.forward(*inputs, num_heads=4)
        got_g = prim.vjp(ARRAY_OPS, g, inputs, got, num_heads=4)
    rtol = FAST_RTOL["float32"]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())
    for a, b in zip(got_g, want_g, strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.abs(b).max())
