"""The reference definitions of the conv, pool, norm and attention primitives (torchlean.spec).

Each spec is compared with its primitive's forward kernel on every registry sample: to float64
round-off on Python floats, and over ``Fraction`` for the rational ones (exactly where the kernel
is exact by construction, within the standard rounding bound of a floating-point sum otherwise).
Deliberately wrong kernels show the comparison catches real semantic slips (convolution instead
of cross-correlation, ties to the last maximum, padding left out of the average, unbiased
variance), and sympy differentiates specs evaluated on symbols.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import sympy
import torch

import torchlean  # noqa: F401  (registers every primitive)
import torchlean.spec as spec
from torchlean.core.errors import DomainError, ShapeError, SignatureError
from torchlean.core.registry import REGISTRY, Primitive, Sample
from torchlean.spec import SPECS, get_spec

FAMILY_B = (
    "conv_core", "conv_transpose_core", "conv_weight_grad", "conv", "conv2d", "conv_transpose",
    "conv_transpose2d", "max_pool_backward", "max_pool_gather", "pool_unfold", "pool_fold",
    "max_pool", "max_pool2d", "max_pool2d_pad", "avg_pool", "avg_pool2d", "avg_pool2d_pad",
    "smooth_max_pool", "smooth_max_pool2d", "standardize", "standardize_backward",
    "norm_param_grad", "layer_norm", "batch_norm", "masked_softmax", "multi_head_attention",
)
# Any primitive a module of these families declares later needs a spec too.
FAMILY_MODULES = ("conv", "pool", "norm", "attention")
NAMES = sorted(set(FAMILY_B) | {
    p.name for p in REGISTRY.values() if p.forward.__module__.rsplit(".", 1)[-1] in FAMILY_MODULES
})
TRANSCENDENTAL = {"smooth_max_pool", "smooth_max_pool2d", "standardize", "standardize_backward",
                  "norm_param_grad", "layer_norm", "batch_norm", "masked_softmax",
                  "multi_head_attention"}
RATIONAL = sorted(set(NAMES) - TRANSCENDENTAL)
# Kernels that only select or copy entries (no rounding): exact over Fraction.
EXACT = {"max_pool", "max_pool2d", "max_pool2d_pad", "max_pool_gather", "pool_unfold"}
# Inputs in which a rational op is (multi)linear: their absolute values give the magnitude
# sum(|term|) that bounds the kernel's rounding. Other inputs (x of the max-pool helpers) only
# select positions and keep their sign.
MAGNITUDE_INPUTS = {"max_pool_backward": (1,)}

UNIT = 2.0 ** -53


def objects(x: np.ndarray, convert: Callable[[float], Any]) -> np.ndarray:
    """``x`` as an object array of ``convert(entry)``."""
    out = np.empty(x.shape, dtype=object)
    for i in np.ndindex(*x.shape):
        out[i] = convert(float(x[i]))
    return out


def spec_of(name: str) -> Callable[..., np.ndarray]:
    fn = SPECS[name].fn
    assert fn is not None, f"{name}: no spec"
    return fn


def samples(name: str) -> list[Sample]:
    return REGISTRY[name].samples(np.random.default_rng(0))


def kernel_and_spec(prim: Primitive, sample: Sample, convert: Callable[[float], Any]
                    ) -> tuple[np.ndarray, np.ndarray]:
    kernel = np.asarray(prim.forward(*sample.inputs, **sample.attrs), dtype=np.float64)
    assert prim.name in SPECS
    ref = SPECS[prim.name].fn(*(objects(x, convert) for x in sample.inputs), **sample.attrs)
    assert isinstance(ref, np.ndarray) and ref.dtype == object, f"{prim.name}: not an object array"
    assert ref.shape == kernel.shape, (
        f"{prim.name}: spec shape {ref.shape}, kernel shape {kernel.shape} ({sample.attrs})")
    return kernel, ref


def float_mismatch(ref: np.ndarray, kernel: np.ndarray, rtol: float = 1e-12) -> float:
    """Largest ``|ref - kernel|`` beyond ``rtol * (|kernel| + max|kernel|)``, 0 if none."""
    values = np.asarray(ref, dtype=np.float64)
    scale = float(np.abs(kernel).max()) if kernel.size else 0.0
    excess = np.abs(values - kernel) - rtol * (np.abs(kernel) + scale)
    return float(max(excess.max(), 0.0)) if kernel.size else 0.0


# --- Every primitive of the families has a spec ------------------------------------------------


def test_every_primitive_of_the_families_has_a_spec() -> None:
    missing = [n for n in NAMES if get_spec(n) is None]
    assert not missing, f"primitives without a spec: {missing}"
    for name in NAMES:
        entry = spec.get_spec(name)
        assert entry is not None and entry.fn is SPECS[name].fn
        assert entry.rational == (name not in TRANSCENDENTAL), name
        assert entry.fn.__doc__ and len(entry.fn.__doc__) > 40, f"{name}: no docstring"


# --- (a) floats: the spec agrees with the kernel to float64 round-off --------------------------


@pytest.mark.parametrize("name", NAMES)
def test_spec_on_floats_matches_kernel(name: str) -> None:
    prim = REGISTRY[name]
    # Seed 0 is the registry's sample set; two more seeds draw fresh values on the same shapes.
    for sample in [s for seed in (0, 1, 2) for s in prim.samples(np.random.default_rng(seed))]:
        kernel, ref = kernel_and_spec(prim, sample, float)
        bad = float_mismatch(ref, kernel)
        assert bad == 0.0, f"{name} {sample.attrs} {sample.note}: spec and kernel differ by {bad}"


# --- (b) Fraction: exact for the rational ones -------------------------------------------------


def fraction_error_bound(prim: Primitive, sample: Sample) -> np.ndarray:
    """Per entry, ``gamma * sum(|term|)``: the classic bound on a float64 sum of products of at
    most ``m`` terms is ``(m + 1) u sum|term|``; ``m`` is at most the largest input's size."""
    which = MAGNITUDE_INPUTS.get(prim.name, range(len(sample.inputs)))
    inputs = [objects(np.abs(x) if i in which else x, Fraction)
              for i, x in enumerate(sample.inputs)]
    assert prim.name in SPECS
    magnitude = SPECS[prim.name].fn(*inputs, **sample.attrs)
    terms = max(x.size for x in sample.inputs)
    gamma = Fraction(2 * (terms + 1)) * Fraction(UNIT)
    return np.vectorize(lambda v: gamma * abs(v), otypes=[object])(magnitude)


def check_fraction(prim: Primitive, sample: Sample) -> None:
    """The spec over exact Fraction inputs: every entry a Fraction, equal to the kernel for the
    exact kernels, within the float rounding bound of the kernel otherwise."""
    kernel, ref = kernel_and_spec(prim, sample, Fraction)
    name = prim.name
    for i in np.ndindex(*ref.shape):
        assert isinstance(ref[i], Fraction), f"{name}: entry {i} is {type(ref[i]).__name__}"
    if name in EXACT:
        wrong = [i for i in np.ndindex(*ref.shape) if ref[i] != Fraction(float(kernel[i]))]
        assert not wrong, f"{name} {sample.attrs}: kernel is not exact at {wrong[:5]}"
        return
    bound = fraction_error_bound(prim, sample)
    for i in np.ndindex(*ref.shape):
        error = abs(Fraction(float(kernel[i])) - ref[i])
        assert error <= bound[i], (
            f"{name} {sample.attrs} at {i}: kernel {kernel[i]!r}, exact {float(ref[i])!r}, "
            f"error {float(error):.3g} > rounding bound {float(bound[i]):.3g}")


@pytest.mark.parametrize("name", RATIONAL)
def test_rational_spec_is_exact_over_fractions(name: str) -> None:
    for sample in samples(name):
        check_fraction(REGISTRY[name], sample)


def test_max_pooling_ties_go_to_the_first_maximum() -> None:
    """Inputs full of ties (values -1 and -2 only), with padding and all-negative windows: the
    spec's first-maximum rule and ignored padding agree with the kernels over Fraction."""
    rng = np.random.default_rng(1)
    x = -rng.integers(1, 3, size=(2, 5, 4)).astype(np.float64)  # values -1 and -2 only
    geom = {"kernel_size": (3, 2), "stride": (1, 2), "padding": (1, 1)}
    g = rng.standard_normal(REGISTRY["max_pool_gather"].forward(x, x, **geom).shape)
    h = rng.standard_normal(x.shape)
    cases = [
        ("max_pool", (x,), {"kernel_size": (3, 2), "stride": (1, 2), "padding": (1, 1)}),
        ("max_pool_backward", (x, g), geom),
        ("max_pool_gather", (x, h), geom),
    ]
    for name, inputs, attrs in cases:
        check_fraction(REGISTRY[name], Sample(inputs, attrs))
    # Padded cells never win, so an all-negative input pools to negative values, never 0.
    pooled = spec_of("max_pool")(objects(x, Fraction), **cases[0][2])
    assert all(v < 0 for v in pooled.flat)


# --- (c) the comparison catches wrong kernels --------------------------------------------------


def test_spec_catches_convolution_instead_of_cross_correlation() -> None:
    prim = REGISTRY["conv2d"]
    sample = samples("conv2d")[0]
    w, b, x = sample.inputs
    kernel, ref = kernel_and_spec(prim, sample, float)
    assert float_mismatch(ref, kernel) == 0.0
    flipped = prim.forward(w[:, :, ::-1, ::-1].copy(), b, x, **sample.attrs)
    assert float_mismatch(ref, flipped) > 1e-3


def test_spec_catches_ties_routed_to_the_last_maximum() -> None:
    prim = REGISTRY["max_pool_backward"]
    x = np.array([[[1.0, 1.0, 0.0, 2.0], [0.0, 1.0, 2.0, 2.0],
                   [3.0, 0.0, 1.0, 1.0], [3.0, 3.0, 1.0, 1.0]]])
    g = np.array([[[1.0, 2.0], [3.0, 4.0]]])
    attrs = {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0)}
    kernel, ref = kernel_and_spec(prim, Sample((x, g), attrs), Fraction)
    assert float_mismatch(ref, kernel) == 0.0
    # Flipping both spatial axes turns "first maximum" into "last maximum" for these windows.
    last = prim.forward(x[:, ::-1, ::-1].copy(), g[:, ::-1, ::-1].copy(), **attrs)[:, ::-1, ::-1]
    assert float_mismatch(ref, last) > 0.5


def test_spec_catches_padding_left_out_of_the_average() -> None:
    prim = REGISTRY["avg_pool2d_pad"]
    sample = next(s for s in samples("avg_pool2d_pad") if s.attrs["padding"])
    kernel, ref = kernel_and_spec(prim, sample, float)
    assert float_mismatch(ref, kernel) == 0.0
    a = sample.attrs
    wrong = torch.nn.functional.avg_pool2d(
        torch.from_numpy(sample.inputs[0])[None], a["kernel_size"], a["stride"], a["padding"],
        count_include_pad=False)[0].numpy()
    assert float_mismatch(ref, wrong) > 1e-3


def test_spec_catches_unbiased_variance_in_layer_norm() -> None:
    prim = REGISTRY["layer_norm"]
    sample = samples("layer_norm")[0]
    x, gamma, beta = sample.inputs
    kernel, ref = kernel_and_spec(prim, sample, float)
    assert float_mismatch(ref, kernel) == 0.0
    centred = x - x.mean(axis=-1, keepdims=True)
    unbiased = (centred ** 2).sum(axis=-1, keepdims=True) / (x.shape[-1] - 1)
    wrong = gamma * centred / np.sqrt(unbiased + sample.attrs["eps"]) + beta
    assert float_mismatch(ref, wrong) > 1e-3


# --- (d) sympy differentiates the specs ---------------------------------------------------------


def test_sympy_jacobian_of_standardize_matches_standardize_backward() -> None:
    """Smooth: the exact Jacobian of the standardize spec, applied to a cotangent, equals the
    standardize_backward kernel (J is symmetric) at a sample point."""
    symbols = sympy.symbols("x0:4")
    attrs = {"axes": (0,), "eps": 1e-3}
    out = spec_of("standardize")(np.array(symbols, dtype=object), **attrs)
    point = np.array([0.3, -1.2, 0.7, 2.0])
    g = np.array([1.0, -0.5, 0.25, 2.0])
    at = dict(zip(symbols, point, strict=True))
    jacobian = np.array([[float(sympy.diff(out[i], s).subs(at)) for s in symbols]
                         for i in range(4)])
    expected = REGISTRY["standardize_backward"].forward(point, g, **attrs)
    np.testing.assert_allclose(jacobian.T @ g, expected, rtol=1e-12, atol=1e-12)


def test_sympy_derivative_of_max_pool_follows_the_first_maximum() -> None:
    """Piecewise: d out / d x of the max_pool spec on symbols is 1 at each window's first
    maximum (ties included) and 0 elsewhere, as max_pool_backward routes a unit cotangent."""
    symbols = sympy.symbols("x0:6")
    attrs = {"kernel_size": (3,), "stride": 2, "padding": 1}
    out = spec_of("max_pool")(np.array([symbols], dtype=object), **attrs)
    assert all(v.has(sympy.Piecewise) for v in out.flat)
    helper = {"kernel_size": (3,), "stride": (2,), "padding": (1,)}
    for point in ([0.5, -1.0, 2.0, 2.0, -3.0, 1.5], [1.0, 1.0, 1.0, 0.0, 4.0, 4.0]):
        at = dict(zip(symbols, point, strict=True))
        for w in range(out.shape[1]):
            derivative = [float(sympy.diff(out[0, w], s).subs(at)) for s in symbols]
            unit = np.zeros((1, out.shape[1]))
            unit[0, w] = 1.0
            routed = REGISTRY["max_pool_backward"].forward(np.array([point]), unit, **helper)
            assert derivative == list(routed[0]), (point, w)


# --- bad calls ---------------------------------------------------------------------------------


def test_spec_rejects_bad_calls_like_the_primitive() -> None:
    conv_core = spec_of("conv_core")
    w, x = samples("conv_core")[0].inputs
    with pytest.raises(ShapeError, match="conv_core"):
        conv_core(w[:, :1], x, stride=1, padding=1)  # channel mismatch
    with pytest.raises(SignatureError, match="conv_core"):
        conv_core(w, x, strides=2)
    layer_norm = spec_of("layer_norm")
    bad = np.array(["a", "b"], dtype=object)
    with pytest.raises(DomainError, match="layer_norm"):
        layer_norm(bad, np.ones(2), np.zeros(2))
