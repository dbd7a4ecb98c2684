"""Seeded randomness: rand_uniform and bernoulli_mask, counter-based SplitMix64.

Randomness is a pure function of ``(seed, counter, linear index)``, exactly as TorchLean's
``Runtime.Autograd.TorchLean.Random``: no global generator state, so the same call gives the same
bits on every backend and in every run (the GPU computes the same 64-bit integer arithmetic).

- ``splitmix64(x)``: ``z = x + 0x9e3779b97f4a7c15``,
  then ``z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9``, ``z = (z ^ z >> 27) * 0x94d049bb133111eb``,
  result ``z ^ z >> 31`` (all mod 2**64);
- ``key = splitmix64(seed + counter)``;
- entry i (row-major) is ``u_i = (splitmix64(key + i) mod 2**32) / 2**32``, rounded to the dtype;
- the mask is ``1 if keep_prob > u_i else 0``.

The bits are computed where they are used: ``uniform_bits`` and ``splitmix64`` run on any array
namespace (``xp``), so on a device the draw is a device kernel of uint64 arithmetic (an arange,
shifts, xors and wrapping multiplies), never a host draw uploaded. ``rand_uniform``'s forward
takes the namespace as a keyword (it has no array input to take it from); ``bernoulli_mask``
draws on its keep_prob's.

Both ops are ``nondiff``: their derivatives are zero (the draws do not depend on keep_prob
smoothly, and rand_uniform has no float inputs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import attr_kinds as K
from ..core.backend import namespace_of
from ..core.errors import ShapeError
from ..core.registry import ErrorInput, Primitive, Sample, register
from ..core.shape import Shape, as_shape, size

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB


def splitmix64_int(x: int) -> int:
    """SplitMix64 of one Python int (taken mod 2**64): the reference the arrays are tested by."""
    z = (x + GAMMA) & MASK64
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return z ^ (z >> 31)


def splitmix64(x: Any) -> Any:
    """SplitMix64 of every entry of a uint64 array of any namespace (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
        return z ^ (z >> np.uint64(31))


def key_of(seed: int, counter: int) -> int:
    """The per-call key ``splitmix64(seed + counter)`` (seed and counter taken mod 2**64)."""
    return splitmix64_int((seed + counter) & MASK64)


def uniform_bits(shape: Shape, seed: int, counter: int, xp: Any = np) -> Any:
    """The 32-bit draws ``splitmix64(key + i) mod 2**32`` for i in row-major order (uint64),
    computed in namespace ``xp`` (NumPy by default; on a device, on the device)."""
    n = size(shape)
    with np.errstate(over="ignore"):
        index = xp.arange(n, dtype=np.uint64) + np.uint64(key_of(seed, counter))
    return (splitmix64(index) & np.uint64(0xFFFFFFFF)).reshape(shape)


def _uniform(shape: Shape, seed: int, counter: int, dtype: Any, xp: Any = np) -> Any:
    # u / 2**32 is exact in float64; one rounding to the dtype gives the same value as
    # rounding u first and dividing by the power of two (TorchLean's (u : α) / (2^32 : α)).
    bits = uniform_bits(tuple(shape), seed, counter, xp)
    return (bits.astype(np.float64) / 2.0**32).astype(dtype)


def _check_seed(op: str, seed: Any, counter: Any) -> None:
    for name, v in (("seed", seed), ("counter", counter)):
        if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < 0:
            raise ShapeError(f"{op}: {name} must be a non-negative int, found {v!r}")


def _rand_infer(shape: Any, seed: Any, counter: Any = 0, dtype: Any = None) -> Shape:
    target = as_shape("rand_uniform", shape)
    _check_seed("rand_uniform", seed, counter)
    return target


def _rand_forward(shape: Any, seed: int, counter: int = 0, dtype: Any = "float32", *,
                  xp: Any = np) -> Any:
    """The draws in namespace ``xp`` (the executor's: rand_uniform has no array input)."""
    return _uniform(as_shape("rand_uniform", shape), int(seed), int(counter), dtype, xp)


def _mask_infer(keep_prob: Shape, shape: Any, seed: Any, counter: Any = 0) -> Shape:
    if keep_prob != ():
        raise ShapeError(f"bernoulli_mask: keep_prob must be a scalar (), found {keep_prob}")
    target = as_shape("bernoulli_mask", shape)
    _check_seed("bernoulli_mask", seed, counter)
    return target


def _mask_forward(keep_prob: Any, shape: Any, seed: int, counter: int = 0) -> Any:
    u = _uniform(as_shape("bernoulli_mask", shape), int(seed), int(counter), keep_prob.dtype,
                 namespace_of(keep_prob))
    return (keep_prob > u).astype(keep_prob.dtype)


register(Primitive(
    "rand_uniform", (), _rand_infer, _rand_forward,
    attrs={"shape": None, "seed": None, "counter": 0, "dtype": "float32"},
    attr_kinds={**K.RANDOM, "dtype": K.FLOAT_DTYPE}, nondiff=True,
    semantics="Deterministic uniform draws in [0, 1) on the grid k / 2**32 (float32 rounding can "
              "give 1.0 with probability 2**-25): entry i = (splitmix64(key + i) mod 2**32) / "
              "2**32 with key = splitmix64(seed + counter). Same bits on every backend; no "
              "derivative. The tape supplies its dtype.",
    samples=lambda rng: [Sample((), {"shape": (3, 4), "seed": int(rng.integers(0, 2**31)),
                                     "counter": 0}),
                         Sample((), {"shape": (5,), "seed": 7, "counter": 3})],
    error_inputs=[ErrorInput((), {"shape": (2, -1), "seed": 0}, ShapeError,
                             r"shape must be a shape \(tuple of non-negative ints\)"),
                  ErrorInput((), {"shape": (2,), "seed": -1}, ShapeError,
                             "seed must be a non-negative int, found -1"),
                  ErrorInput((), {"shape": (2,), "seed": 0, "counter": 1.5}, ShapeError,
                             "counter must be a non-negative int, found 1.5")],
))

register(Primitive(
    "bernoulli_mask", ("keep_prob",), _mask_infer, _mask_forward,
    attrs={"shape": None, "seed": None, "counter": 0}, attr_kinds=K.RANDOM, nondiff=True,
    semantics="Dropout-style keep mask: 1 where keep_prob > u_i else 0, with u_i the "
              "rand_uniform draws of (shape, seed, counter) in keep_prob's dtype. keep_prob is a "
              "scalar node. No derivative (zero almost everywhere).",
    samples=lambda rng: [Sample((np.array(0.7),), {"shape": (4, 5), "seed": 11}),
                         Sample((np.array(rng.uniform(0.1, 0.9)),),
                                {"shape": (6,), "seed": 3, "counter": 2})],
    error_inputs=[ErrorInput(((2,),), {"shape": (2,), "seed": 0}, ShapeError,
                             r"keep_prob must be a scalar \(\), found \(2,\)"),
                  ErrorInput(((),), {"shape": (2,), "seed": True}, ShapeError,
                             "seed must be a non-negative int, found True")],
))
