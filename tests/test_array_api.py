"""Array API standard conformance: the primitives whose computation the standard covers run on
``array_api_strict`` arrays, forward, VJP and JVP, and give NumPy's results.

``array_api_strict`` offers exactly the standard (no array methods such as ``x.sum()``, no
``einsum``, no ``out=``, no NumPy scalars mixed in, no integer-array index beside a slice), so a
kernel that passes here is written against the namespace in the standard's spelling, and serves
NumPy, CuPy and any other conforming library alike. It runs NumPy underneath, so where the kernel
takes the same NumPy routine on both paths the bits are equal; the few primitives whose standard
path uses another routine (``vecdot`` where NumPy takes ``einsum``) agree to rtol 1e-12.

Every registered primitive is classified: covered, or excluded with the reason the standard
cannot express it. A new primitive fails ``test_every_primitive_is_classified`` until it is.
"""

from __future__ import annotations

from typing import Any

import array_api_strict as xps
import numpy as np
import pytest

import torchlean  # noqa: F401  (registers every primitive)
from torchlean.core.backend import namespace_of
from torchlean.core.registry import ARRAY_OPS, REGISTRY, Primitive
from torchlean.ops import array_api

_WINDOWS = ("strided windows (as_strided views of overlapping patches) and their strided-add "
            "adjoint have no counterpart in the standard")
_POOL_ADJOINT = "its adjoint scatters into strided windows (im2col / col2im), not in the standard"

# Primitive -> why the array API standard cannot express it.
EXCLUDED: dict[str, str] = {
    **{name: _WINDOWS for name in (
        "conv", "conv2d", "conv_core", "conv_transpose", "conv_transpose2d",
        "conv_transpose_core", "conv_weight_grad", "avg_pool", "avg_pool2d", "avg_pool2d_pad",
        "max_pool", "max_pool2d", "max_pool2d_pad", "max_pool_gather", "smooth_max_pool",
        "smooth_max_pool2d", "pool_unfold")},
    "max_pool_backward": _POOL_ADJOINT,
    "pool_fold": _POOL_ADJOINT,
    "erf": "erf is not a function of the standard (the device path also reinterprets float64 "
           "bits as uint64, which the standard cannot)",
    "gelu": "its exact form (approximate='none') and that form's derivative use erf, not a "
            "function of the standard",
    "scatter_add_nat": "scatter-add with repeated indices (ufunc add.at) is not in the standard",
    "gather_vec_nat": "its VJP is scatter_add_nat, a scatter-add (add.at) the standard lacks",
    "gather_rows_nat": "its VJP is scatter_add_nat, a scatter-add (add.at) the standard lacks",
    "embedding": "its VJP is embedding_scatter, a scatter-add (add.at) the standard lacks",
    "embedding_scatter": "scatter-add with repeated run-time ids (ufunc add.at) is not in the "
                         "standard",
    "take_adjoint": "scatter-add at integer-array indices (add.at) is not in the standard",
    "take": "NumPy advanced indexing (integer arrays beside slices, None and Ellipsis, broadcast "
            "together) goes beyond the standard's integer-array indexing",
    "rand_uniform": "SplitMix64 needs wrapping uint64 multiplication; the standard leaves integer "
                    "overflow unspecified",
    "bernoulli_mask": "draws SplitMix64 bits (wrapping uint64 multiplication; the standard "
                      "leaves integer overflow unspecified)",
}

COVERED: tuple[str, ...] = (
    # elementwise arithmetic, activations and masks
    "add", "sub", "mul", "max", "min", "max_weight", "scale", "add_scalar", "sign",
    "positive_mask", "interval_mask", "zeros_like", "detach", "square", "abs", "relu",
    "sqrt_deriv", "sqrt", "clamp", "sigmoid", "tanh", "exp", "softplus", "log", "inv",
    "safe_log",
    # reductions and normalised exponentials
    "reduce_sum", "reduce_mean", "sum", "softmax", "log_softmax", "mse_loss", "masked_softmax",
    # layout
    "reshape", "flatten", "transpose2d", "transpose3d_first_to_last",
    "transpose3d_last_to_first", "transpose3d_last_two", "swap_adjacent_at_depth",
    "broadcast_to", "sum_to", "permute",
    # linear algebra and attention
    "linear", "matmul", "bmm", "matmul_nd", "multi_head_attention",
    # recurrent scans
    "lstm_scan", "rnn_scan",
    # indexing along axis 0 with static ints, concatenation, slicing
    "gather_scalar", "gather_row", "scatter_add_vec", "scatter_add_row", "gather_scalar_nat",
    "concat_vectors", "concat_dim0", "slice_range0", "pad_range0",
    # normalisation and encoding
    "standardize", "standardize_backward", "norm_param_grad", "layer_norm", "batch_norm",
    "one_hot",
)

# Covered primitives whose standard path takes another NumPy routine than the NumPy path
# (xp.vecdot where NumPy takes einsum for row and column dot products): equal to rtol 1e-12 in
# float64, to a few float32 ulps in float32.
NOT_BITWISE = {"standardize", "standardize_backward", "norm_param_grad", "layer_norm",
               "batch_norm"}

DTYPES = {"float64": (np.float64, xps.float64), "float32": (np.float32, xps.float32)}


def test_every_primitive_is_classified() -> None:
    covered, excluded = set(COVERED), set(EXCLUDED)
    assert len(covered) == len(COVERED), "a primitive is listed twice in COVERED"
    assert not covered & excluded, f"both covered and excluded: {sorted(covered & excluded)}"
    unknown = (covered | excluded) - set(REGISTRY)
    assert not unknown, f"not registered: {sorted(unknown)}"
    missing = set(REGISTRY) - covered - excluded
    assert not missing, (f"classify these primitives for the array API standard (COVERED, or "
                         f"EXCLUDED with the reason): {sorted(missing)}")
    assert all(reason.strip() for reason in EXCLUDED.values())
    assert NOT_BITWISE <= covered


def _is_strict(x: Any) -> bool:
    get = getattr(x, "__array_namespace__", None)
    return get is not None and get() is xps


def _same(got: Any, want: Any, bitwise: bool, what: str) -> None:
    """``got`` (array_api_strict results) equals ``want`` (NumPy's), structure included."""
    if want is None:
        assert got is None, f"{what}: expected no result, found {type(got).__name__}"
        return
    if isinstance(want, tuple | list):
        assert isinstance(got, tuple | list) and len(got) == len(want), what
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, bitwise, f"{what}[{k}]")
        return
    assert _is_strict(got), f"{what}: result is {type(got).__module__}.{type(got).__name__}, " \
                            "not an array_api_strict array"
    host, ref = np.asarray(got), np.asarray(want)
    assert host.shape == ref.shape, f"{what}: shape {host.shape} != {ref.shape}"
    assert host.dtype == ref.dtype, f"{what}: dtype {host.dtype} != {ref.dtype}"
    if bitwise:
        assert host.tobytes() == ref.tobytes(), (
            f"{what}: bits differ\n got {host!r}\nwant {ref!r}")
    else:
        # float64: rtol 1e-12; float32: a few ulps (rounding differences grow where
        # standardize_backward subtracts nearly equal terms, hence the small atol).
        tol = {"rtol": 1e-12, "atol": 0.0} if ref.dtype == np.float64 else \
            {"rtol": 1e-5, "atol": 1e-6}
        np.testing.assert_allclose(host, ref, err_msg=what, **tol)


def _up(x: np.ndarray) -> Any:
    return xps.asarray(x)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", COVERED)
def test_kernels_on_array_api_strict_match_numpy(name: str, dtype: str) -> None:
    prim: Primitive = REGISTRY[name]
    np_dtype, _ = DTYPES[dtype]
    bitwise = name not in NOT_BITWISE
    for seed in (0, 1):
        rng = np.random.default_rng(100 + seed)
        for k, sample in enumerate(prim.samples(np.random.default_rng(seed))):
            what = f"{name} {dtype} seed {seed} sample {k} {sample.note}".strip()
            attrs = prim.check_attrs(dict(sample.attrs))
            host = tuple(np.asarray(x, dtype=np_dtype) for x in sample.inputs)
            strict = tuple(_up(x) for x in host)

            out = prim.forward(*host, **attrs)
            got = prim.forward(*strict, **attrs)
            _same(got, out, bitwise, f"{what}: forward")
            if prim.nondiff:
                continue

            g = np.asarray(rng.standard_normal(np.shape(out)), dtype=np_dtype)
            want_vjp = prim.apply_vjp(ARRAY_OPS, g, host, out, attrs)
            got_vjp = prim.apply_vjp(ARRAY_OPS, _up(g), strict, got, attrs)
            _same(tuple(got_vjp), tuple(want_vjp), bitwise, f"{what}: vjp")

            if prim.reverse_only:
                continue
            tangents = tuple(np.asarray(rng.standard_normal(x.shape), dtype=np_dtype)
                             for x in host)
            want_jvp = prim.apply_jvp(ARRAY_OPS, tangents, host, out, attrs)
            got_jvp = prim.apply_jvp(ARRAY_OPS, tuple(_up(t) for t in tangents), strict, got,
                                     attrs)
            _same(got_jvp, want_jvp, bitwise, f"{what}: jvp")


def test_covered_rules_reach_only_covered_primitives() -> None:
    """A covered primitive's VJP and JVP call only covered primitives (through ARRAY_OPS):
    recorded with a spy interpreter over every sample."""
    calls: set[str] = set()

    class Spy:
        def __getattr__(self, op: str) -> Any:
            fn = getattr(ARRAY_OPS, op)

            def call(*args: Any, **kwargs: Any) -> Any:
                calls.add(op)
                return fn(*args, **kwargs)

            return call

    spy = Spy()
    for name in COVERED:
        prim = REGISTRY[name]
        if prim.nondiff:
            continue
        for sample in prim.samples(np.random.default_rng(0)):
            attrs = prim.check_attrs(dict(sample.attrs))
            out = prim.forward(*sample.inputs, **attrs)
            prim.apply_vjp(spy, np.ones(np.shape(out)), sample.inputs, out, attrs)
            if not prim.reverse_only:
                prim.apply_jvp(spy, tuple(np.ones(np.shape(x)) for x in sample.inputs),
                               sample.inputs, out, attrs)
    assert calls, "the spy saw no call"
    assert calls <= set(COVERED), f"rules call excluded primitives: {sorted(calls - set(COVERED))}"


# ---------------------------------------------------------------------------------------------
# The helpers: NumPy's methods on the host (same object kinds as before), the standard's
# functions elsewhere.


def test_helpers_keep_numpy_results_and_speak_the_standard_elsewhere() -> None:
    a = np.arange(12.0).reshape(3, 4)
    s = _up(a)
    cases = [
        (lambda x: array_api.asum(x), a.sum()),
        (lambda x: array_api.asum(x, 1, True), a.sum(axis=1, keepdims=True)),
        (lambda x: array_api.amax(x, -1, True), a.max(axis=-1, keepdims=True)),
        (lambda x: array_api.amean(x, (0, 1)), a.mean(axis=(0, 1))),
        (lambda x: array_api.reshape(x, (2, 6)), a.reshape(2, 6)),
        (lambda x: array_api.permute_dims(x, (1, 0)), a.T),
        (lambda x: array_api.swapaxes(x, 0, 1), a.swapaxes(0, 1)),
        (lambda x: array_api.copy(x), a.copy()),
        (lambda x: array_api.contiguous(array_api.permute_dims(x, (1, 0))),
         np.ascontiguousarray(a.T)),
        (lambda x: array_api.astype(x > 5, x.dtype), (a > 5).astype(a.dtype)),
        (lambda x: array_api.take0(x, namespace_of(x).asarray([2, 0, 2])), a[[2, 0, 2]]),
    ]
    for k, (f, want) in enumerate(cases):
        host = f(a)
        assert type(host) is type(want), f"case {k}: {type(host)} on NumPy"
        assert np.array_equal(host, want), f"case {k}"
        _same(f(s), want, True, f"case {k} on array_api_strict")
    # A full NumPy sum stays a NumPy scalar (callers that did x.sum() see no change); a NumPy
    # scalar goes through its own methods.
    assert isinstance(array_api.asum(a), np.float64)
    assert array_api.astype(np.float64(1.5), np.float32) == np.float32(1.5)
    # copy never aliases its input, nor does contiguous when it has to reorder.
    for fresh in (array_api.copy(a), array_api.contiguous(a.T)):
        assert not np.shares_memory(fresh, a)
        assert fresh.flags.c_contiguous
