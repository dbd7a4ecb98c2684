"""Reference definitions of the seeded random primitives (``torchlean.ops.random``).

Randomness is a pure function of (seed, counter, entry position), written here as plain integer
arithmetic on Python ints taken mod 2**64 (TorchLean's counter-based SplitMix64):

- ``splitmix64(z)``: z = z + 0x9e3779b97f4a7c15; z = (z xor z >> 30) * 0xbf58476d1ce4e5b9;
  z = (z xor z >> 27) * 0x94d049bb133111eb; result z xor z >> 31, every step mod 2**64;
- ``key = splitmix64(seed + counter)``;
- entry k (row-major position) draws ``bits_k = splitmix64(key + k) mod 2**32`` and
  ``u_k = bits_k / 2**32``, a multiple of 2**-32 in [0, 1).

rand_uniform's values are exact ``Fraction``s (it has no input whose scalar type they could
follow); bernoulli_mask's 0s and 1s take keep_prob's scalar type.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from ..core.errors import ShapeError
from ._arrays import as_shape, empty, prepare
from .defs import define
from .scalar import constant, select

_MOD = 2**64


def splitmix64(z: int) -> int:
    """One SplitMix64 step on a 64-bit unsigned integer (arithmetic mod 2**64)."""
    z = (z + 0x9E3779B97F4A7C15) % _MOD
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % _MOD
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % _MOD
    return z ^ (z >> 31)


def draw_bits(seed: int, counter: int, k: int) -> int:
    """bits_k = splitmix64(key + k) mod 2**32 with key = splitmix64(seed + counter)."""
    key = splitmix64((seed + counter) % _MOD)
    return splitmix64((key + k) % _MOD) % 2**32


def round_to_format(value: Fraction, dtype: Any) -> Fraction:
    """``value`` (0 <= value <= 1) rounded to the nearest number of a binary float format.

    The format's precision p (significand bits) and least normal exponent come from the dtype.
    Near v with 2**e <= v < 2**(e+1) the format's numbers are the multiples of
    2**(max(e, emin) - p + 1); a value halfway between two of them goes to the one whose
    multiple is even (IEEE round-half-to-even).
    """
    try:
        fmt = np.dtype(dtype)
    except TypeError:
        fmt = np.dtype(object)  # not a dtype at all: rejected just below
    if fmt.kind != "f":
        raise ShapeError(f"rand_uniform: dtype must be a float dtype such as 'float32', "
                         f"found {dtype!r}")
    info = np.finfo(fmt)
    precision, emin = info.nmant + 1, info.minexp
    if value == 0:
        return value
    e = value.numerator.bit_length() - value.denominator.bit_length()
    if Fraction(2) ** e > value:  # make 2**e <= value < 2**(e + 1)
        e -= 1
    quantum = Fraction(2) ** (max(e, emin) - precision + 1)
    units = value / quantum
    lower = units.numerator // units.denominator
    rest = units - lower
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and lower % 2 == 1):
        lower += 1
    return lower * quantum


@define("rand_uniform", rational=True)
def rand_uniform(shape: Any = None, seed: Any = None, counter: int = 0,
                 dtype: Any = "float32") -> np.ndarray:
    """out[i] = u_k rounded to ``dtype``, with k the row-major position of i (see module doc).

    u_k = (splitmix64(splitmix64(seed + counter) + k) mod 2**32) / 2**32 lies in [0, 1);
    rounding to float32 can carry a u_k just below 1 up to 1.0.
    """
    prepare("rand_uniform", shape=shape, seed=seed, counter=counter, dtype=dtype)
    dims = as_shape("rand_uniform", shape)
    out = empty(dims)
    for k, i in enumerate(np.ndindex(dims)):
        u = Fraction(draw_bits(int(seed), int(counter), k), 2**32)
        out[i] = round_to_format(u, dtype)
    return out


@define("bernoulli_mask", rational=True)
def bernoulli_mask(keep_prob: Any, shape: Any = None, seed: Any = None,
                   counter: int = 0) -> np.ndarray:
    """out[i] = 1 if keep_prob > u_k else 0, with u_k the rand_uniform draw at position k.

    keep_prob is a scalar. Here u_k is the exact value bits_k / 2**32, which is what a float64
    kernel compares against; a float32 kernel compares with u_k rounded to float32 first.
    """
    (p,) = prepare("bernoulli_mask", keep_prob, shape=shape, seed=seed, counter=counter)
    keep = p[()]
    dims = as_shape("bernoulli_mask", shape)
    out = empty(dims)
    for k, i in enumerate(np.ndindex(dims)):
        u = Fraction(draw_bits(int(seed), int(counter), k), 2**32)
        out[i] = select(keep > constant(u, keep), constant(1, keep), constant(0, keep))
    return out
