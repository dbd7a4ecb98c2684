"""The fast 2-D convolution's input gradient and max pooling on the shapes training meets.

``test_fast_kernels`` checks every fast kernel against its reference on random geometry; these
add what those do not pin down: the stride-1 input gradient's two routes (the centre offset's
block as the accumulator under "same" padding, a zero-filled array otherwise) agree with the
reference in float32 and float64 on the W3 layer shapes, and a forward op's value
(``conv_transpose_core``) never keeps the GEMM's nine-times-larger output alive. The max
pooling tests run twice: with the NumPy kernels, and with the compiled loops of ``pool_jit``
(numba, a test dependency) on every size.
"""

from __future__ import annotations

import numpy as np
import pytest

from torchlean.core.registry import ARRAY_OPS, FAST_RTOL, REGISTRY, fast_kernels
from torchlean.ops.fast import conv as fast_conv
from torchlean.ops.fast import pool as fast_pool
from torchlean.ops.fast import pool_jit


@pytest.fixture(params=["numpy", "numba"])
def pool_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which max pooling kernels run: NumPy's (the loops' size floor out of reach) or the
    compiled loops on every size (their floor at 0)."""
    if request.param == "numba":
        assert pool_jit.kernels() is not None  # numba is in the test extra
        monkeypatch.setattr(pool_jit, "MIN_SIZE", 0)
    else:
        monkeypatch.setattr(pool_jit, "MIN_SIZE", 1 << 62)
    return str(request.param)


def _channels_last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("k,p", [((3, 3), (1, 1)), ((3, 3), (0, 0)), ((3, 2), (2, 1)),
                                 ((1, 1), (0, 0))])
def test_input_gradient_routes_equal_the_reference(dtype: str, k: tuple[int, int],
                                                   p: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(k) + 3 * sum(p))
    x = _channels_last(rng.standard_normal((4, 6, 9, 8)).astype(dtype))
    w = rng.standard_normal((5, 6) + k).astype(dtype)
    b = rng.standard_normal(5).astype(dtype)
    prim = REGISTRY["conv2d"]
    out = prim.reference_forward(w, b, x, stride=1, padding=p)
    g = _channels_last(rng.standard_normal(out.shape).astype(dtype))
    want = prim.reference_vjp(ARRAY_OPS, g, [w, b, x], out, stride=1, padding=p)[2]
    with fast_kernels(True):
        got = prim.vjp(ARRAY_OPS, g, [w, b, x], prim.forward(w, b, x, stride=1, padding=p),
                       stride=1, padding=p)[2]
    fresh = fast_conv._input_grad2d(w, g, p, fresh=True)
    rtol = FAST_RTOL[dtype]
    scale = float(np.abs(want).max())
    for a in (got, fresh):
        assert a.shape == x.shape and a.dtype == x.dtype
        np.testing.assert_allclose(a, want, rtol=rtol, atol=rtol * scale)


def test_transposed_convolution_value_owns_its_memory() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    y = _channels_last(rng.standard_normal((2, 4, 7, 7)).astype(np.float32))
    with fast_kernels(True):
        out = REGISTRY["conv_transpose_core"].forward(w, y, stride=1, padding=1)
    want = REGISTRY["conv_transpose_core"].reference_forward(w, y, stride=1, padding=1)
    np.testing.assert_allclose(out, want, rtol=FAST_RTOL["float32"],
                               atol=FAST_RTOL["float32"] * float(np.abs(want).max()))
    owner = out if out.base is None else out.base
    assert owner.nbytes == out.nbytes  # not a view into the (K, ...) GEMM output


def _special(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Relu'd normals (many tied zeros) with -0.0, NaN, +-inf and repeated maxima planted."""
    x = np.maximum(rng.standard_normal(shape), 0.0).astype(dtype)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=(5, max(1, flat.size // 12)), replace=False)
    flat[picks[0]] = -0.0
    flat[picks[1]] = np.nan
    flat[picks[2]] = -np.inf
    flat[picks[3]] = np.inf
    flat[picks[4]] = 1.5  # equal maxima in one window
    return x


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,attrs,shape", [
    ("max_pool2d", {"kernel_size": 2}, (3, 4, 8, 6)),
    ("max_pool2d", {"kernel_size": (3, 2), "stride": (1, 2)}, (2, 3, 7, 8)),
    ("max_pool", {"kernel_size": 3, "stride": 2, "padding": 1}, (2, 3, 7, 8)),
    ("max_pool", {"kernel_size": (2,), "stride": (3,)}, (2, 3, 11)),  # gaps between windows
])
def test_max_pool_winner_code_is_bitwise_the_reference(dtype: str, name: str,
                                                       attrs: dict, shape: tuple,
                                                       pool_path: str) -> None:
    """The forward's winner code routes the VJP to the reference's cells, bit for bit, on
    ties (0.0 against -0.0 included), NaN windows and infinities, for a channels-last input
    too; and the route without a code (a missed residual) gives the same bits."""
    rng = np.random.default_rng(len(shape) + len(attrs))
    prim = REGISTRY[name]
    with np.errstate(invalid="ignore"):
        _compare_routes(rng, prim, name, attrs, shape, dtype)


def _compare_routes(rng: np.random.Generator, prim: object, name: str, attrs: dict,
                    shape: tuple, dtype: str) -> None:
    for layout in ("c", "last") if len(shape) == 4 else ("c",):
        x = _special(rng, shape, dtype)
        x = _channels_last(x) if layout == "last" else x
        want_out = prim.reference_forward(x, **attrs)
        g = rng.standard_normal(want_out.shape).astype(dtype)
        g.reshape(-1)[::7] = np.inf  # g * 0 is NaN there: the zero factors must match too
        want = prim.reference_vjp(ARRAY_OPS, g, [x], want_out, **attrs)[0]
        with fast_kernels(True):
            out = prim.forward(x, **attrs)
            assert fast_pool.residuals.load(out, fast_pool._CODE, _code_key(x, attrs, name)) \
                is not None
            got = prim.vjp(ARRAY_OPS, g, [x], out, **attrs)[0]
            k, s, p = fast_pool._attrs("max_pool", x, attrs, 2 if name == "max_pool2d" else None)
            without = fast_pool._backward(x, g, out, k, s, p)
        assert out.tobytes() == want_out.tobytes()
        for a in (got, without):
            assert a.shape == want.shape
            assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(want).tobytes()


def _code_key(x: np.ndarray, attrs: dict, name: str) -> tuple:
    k, s, p = fast_pool._attrs("max_pool", x, attrs, 2 if name == "max_pool2d" else None)
    return fast_pool._key(x, k, s, p)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,attrs,shape", [
    ("max_pool2d", {"kernel_size": 2}, (3, 4, 8, 6)),                       # tiled: one pass
    ("max_pool2d", {"kernel_size": (3, 2), "stride": (1, 2)}, (2, 3, 7, 8)),  # overlapping
    ("max_pool", {"kernel_size": 3, "stride": 2, "padding": 1}, (2, 3, 7, 8)),
])
def test_fused_relu_pool_vjp_is_bitwise_the_two_rules(dtype: str, name: str, attrs: dict,
                                                      shape: tuple, pool_path: str) -> None:
    """``relu_vjp`` (what generated code calls for relu -> max pool) gives the bits of
    ``mul(max_pool_vjp(g), positive_mask(c))``, the reference rules, with NaN, +-inf, -0.0 and
    ties in ``c`` and infinities in ``g``; with and without the forward's winner code."""
    rng = np.random.default_rng(len(shape) + 11)
    prim = REGISTRY[name]
    c = _special(rng, shape, dtype) - np.asarray(0.5, dtype)  # negatives: relu zeroes them
    c.reshape(-1)[::9] = -0.0
    with np.errstate(invalid="ignore"):
        x = np.maximum(c, np.zeros((), dtype))
        out = prim.reference_forward(x, **attrs)
        g = rng.standard_normal(out.shape).astype(dtype)
        g.reshape(-1)[::5] = -np.inf
        pooled = prim.reference_vjp(ARRAY_OPS, g, [x], out, **attrs)[0]
        want = np.multiply(pooled, REGISTRY["positive_mask"].forward(c))
        fused = fast_pool.RELU_FUSED[name]
        with fast_kernels(True):
            kept = prim.forward(x, **attrs)
            got = fused(g, x, kept, **attrs)
        missed = fused(g, x, out, **attrs)  # no code kept for this array
    for a in (got, missed):
        assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(want).tobytes()
