"""``nn.init``: torch.nn.init's in-place initialisers, drawn from ``tl.nn``'s seeded generator.

Each function overwrites a parameter (a ``Param``, or a tensor with ``copy_``) in place and
returns it, with torch's formulas for the bounds and standard deviations (``calculate_gain``,
fan-in and fan-out from the weight's shape, Glorot's and He's scalings). The numbers come from
the same counter-based generator the layers' default initialisation uses (``tl.manual_seed``
seeds it, and ``generator=`` takes a ``tl.Generator``), so they are reproducible here, though not
the numbers torch's generator would draw.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.errors import ShapeError, TorchLeanError
from ..engine.tensor import Tensor, no_grad, tensor
from .modules import normal_init, uniform_init

__all__ = [
    "calculate_gain", "constant_", "eye_", "kaiming_normal_", "kaiming_uniform_", "normal_",
    "ones_", "uniform_", "xavier_normal_", "xavier_uniform_", "zeros_",
]


def _shape(op: str, target: Any) -> tuple[int, ...]:
    shape = getattr(target, "shape", None)
    if shape is None or not (hasattr(target, "assign") or hasattr(target, "copy_")
                             or isinstance(target, Tensor)):
        raise TorchLeanError(f"nn.init.{op}: expected a parameter or tensor, found "
                             f"{type(target).__name__}")
    return tuple(int(s) for s in shape)


def _write(op: str, target: Any, values: np.ndarray) -> Any:
    """Overwrite ``target`` in place with ``values`` (in its dtype) and return it."""
    if hasattr(target, "assign"):  # a Param (the layers' parameters)
        target.assign(values)
    elif hasattr(target, "copy_"):
        with no_grad():
            target.copy_(tensor(np.asarray(values, dtype=target.dtype)))
    else:
        raise TorchLeanError(f"nn.init.{op}: this {type(target).__name__} cannot be changed in "
                             "place (it has no copy_)")
    return target


def _dtype(target: Any) -> np.dtype:
    dtype = np.dtype(getattr(target, "dtype", np.float32))
    if dtype.kind != "f":
        raise TorchLeanError(f"nn.init: only float tensors can be initialised, found {dtype}")
    return dtype


def _number(op: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TorchLeanError(f"nn.init.{op}: {name} must be a number, found {value!r}")
    return float(value)


def calculate_gain(nonlinearity: str, param: Any = None) -> float:
    """torch's recommended gain for a nonlinearity (``leaky_relu`` takes its slope)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else _number("calculate_gain", "param", param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise TorchLeanError(f"nn.init.calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _fans(op: str, shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) < 2:
        raise ShapeError(f"nn.init.{op}: fan in and fan out can not be computed for a tensor "
                         f"with fewer than 2 dimensions (shape {shape})")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def _fan(op: str, shape: tuple[int, ...], mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise TorchLeanError(f"nn.init.{op}: mode must be 'fan_in' or 'fan_out', found {mode!r}")
    fan_in, fan_out = _fans(op, shape)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Any, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Any:
    """U(a, b)."""
    shape = _shape("uniform_", tensor)
    lo, hi = _number("uniform_", "a", a), _number("uniform_", "b", b)
    if lo > hi:
        raise TorchLeanError(f"nn.init.uniform_: expected a <= b, found a={lo}, b={hi}")
    u = uniform_init(shape, 0.5, np.float64, generator) + 0.5  # U(0, 1)
    return _write("uniform_", tensor, (lo + (hi - lo) * u).astype(_dtype(tensor)))


def normal_(tensor: Any, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Any:
    """N(mean, std^2)."""
    shape = _shape("normal_", tensor)
    m, s = _number("normal_", "mean", mean), _number("normal_", "std", std)
    if s < 0:
        raise TorchLeanError(f"nn.init.normal_: std must be >= 0, found {s}")
    z = normal_init(shape, np.float64, generator)
    return _write("normal_", tensor, (m + s * z).astype(_dtype(tensor)))


def constant_(tensor: Any, val: float) -> Any:
    """Every entry ``val``."""
    shape = _shape("constant_", tensor)
    value = _number("constant_", "val", val)
    return _write("constant_", tensor, np.full(shape, value, dtype=_dtype(tensor)))


def zeros_(tensor: Any) -> Any:
    return constant_(tensor, 0.0)


def ones_(tensor: Any) -> Any:
    return constant_(tensor, 1.0)


def eye_(tensor: Any) -> Any:
    """The identity matrix (2-D only)."""
    shape = _shape("eye_", tensor)
    if len(shape) != 2:
        raise ShapeError(f"nn.init.eye_: only 2-D tensors are supported, found shape {shape}")
    return _write("eye_", tensor, np.eye(*shape, dtype=_dtype(tensor)))


def xavier_uniform_(tensor: Any, gain: float = 1.0, generator: Any = None) -> Any:
    """Glorot uniform: U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans("xavier_uniform_", _shape("xavier_uniform_", tensor))
    std = _number("xavier_uniform_", "gain", gain) * math.sqrt(2.0 / float(fan_in + fan_out))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Any, gain: float = 1.0, generator: Any = None) -> Any:
    """Glorot normal: N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans("xavier_normal_", _shape("xavier_normal_", tensor))
    std = _number("xavier_normal_", "gain", gain) * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(tensor: Any, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator: Any = None) -> Any:
    """He uniform: U(-b, b), b = gain * sqrt(3 / fan)."""
    fan = _fan("kaiming_uniform_", _shape("kaiming_uniform_", tensor), mode)
    if fan == 0:
        raise ShapeError("nn.init.kaiming_uniform_: initializing a zero-element tensor")
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Any, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator: Any = None) -> Any:
    """He normal: N(0, std^2), std = gain / sqrt(fan)."""
    fan = _fan("kaiming_normal_", _shape("kaiming_normal_", tensor), mode)
    if fan == 0:
        raise ShapeError("nn.init.kaiming_normal_: initializing a zero-element tensor")
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


def trunc_normal_(tensor: Any, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator: Any = None) -> Any:
    """N(mean, std^2) truncated to [a, b], torch's inverse-CDF method: a uniform draw between
    the normal CDF at a and at b, mapped through the inverse CDF (``scipy.special.erfinv``,
    imported here so that ``import torchlean`` does not load SciPy)."""
    from scipy.special import erfinv  # optional third-party, loaded on first use

    shape = _shape("trunc_normal_", tensor)
    m, s = _number("trunc_normal_", "mean", mean), _number("trunc_normal_", "std", std)
    lo, hi = _number("trunc_normal_", "a", a), _number("trunc_normal_", "b", b)
    if s <= 0 or lo >= hi:
        raise TorchLeanError(f"nn.init.trunc_normal_: needs std > 0 and a < b, found std={s}, "
                             f"a={lo}, b={hi}")

    def cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    lo_u, hi_u = 2 * cdf((lo - m) / s) - 1, 2 * cdf((hi - m) / s) - 1
    u = uniform_init(shape, 0.5, np.float64, generator) + 0.5  # U(0, 1)
    z = erfinv(lo_u + (hi_u - lo_u) * u) * (s * math.sqrt(2.0)) + m
    return _write("trunc_normal_", tensor, np.clip(z, lo, hi).astype(_dtype(tensor)))


def orthogonal_(tensor: Any, gain: float = 1.0, generator: Any = None) -> Any:
    """A (semi-)orthogonal matrix from the QR decomposition of a normal draw, as torch's
    (sign-corrected so the distribution is uniform), scaled by ``gain``."""
    shape = _shape("orthogonal_", tensor)
    if len(shape) < 2:
        raise ShapeError("nn.init.orthogonal_: only tensors with 2 or more dimensions are "
                         "supported")
    rows, cols = shape[0], int(np.prod(shape[1:]))
    flat = normal_init((rows, cols), np.float64, generator)
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    g = _number("orthogonal_", "gain", gain)
    return _write("orthogonal_", tensor, (g * q).reshape(shape).astype(_dtype(tensor)))


def dirac_(tensor: Any, groups: int = 1) -> Any:
    """The identity of a convolution: weight[i, i, centre] = 1 (3-, 4- or 5-D)."""
    shape = _shape("dirac_", tensor)
    if len(shape) not in (3, 4, 5):
        raise ShapeError("nn.init.dirac_: only 3, 4 or 5-D tensors are supported")
    out_per = shape[0] // groups
    values = np.zeros(shape, _dtype(tensor))
    centre = tuple(k // 2 for k in shape[2:])
    for g in range(groups):
        for i in range(min(out_per, shape[1])):
            values[(g * out_per + i, i) + centre] = 1
    return _write("dirac_", tensor, values)


__all__ += ["trunc_normal_", "orthogonal_", "dirac_"]


def sparse_(tensor: Any, sparsity: float, std: float = 0.01, generator: Any = None) -> Any:
    """A 2-D tensor drawn from N(0, std^2) with ``ceil(sparsity * rows)`` entries of each
    column set to zero (rows chosen at random, as torch's ``randperm`` per column)."""
    shape = _shape("sparse_", tensor)
    if len(shape) != 2:
        raise ShapeError(f"nn.init.sparse_: only 2-D tensors are supported, found {shape}")
    frac, s = _number("sparse_", "sparsity", sparsity), _number("sparse_", "std", std)
    if not 0.0 <= frac <= 1.0:
        raise TorchLeanError(f"nn.init.sparse_: sparsity must be in [0, 1], found {frac}")
    rows, cols = shape
    values = s * normal_init(shape, np.float64, generator)
    # a random permutation of the rows per column: the order of uniform draws
    order = np.argsort(uniform_init(shape, 1.0, np.float64, generator), axis=0, kind="stable")
    zeros = order[:int(math.ceil(frac * rows))]
    values[zeros, np.arange(cols)[None, :]] = 0.0
    return _write("sparse_", tensor, values.astype(_dtype(tensor)))


def _deprecated(new: Callable[..., Any]) -> Callable[..., Any]:
    """torch's old name without the trailing underscore: warns, then calls the new one."""
    old = new.__name__[:-1]

    def alias(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"`nn.init.{old}` is now deprecated in favor of `nn.init.{new.__name__}`.",
                      FutureWarning, stacklevel=2)
        return new(*args, **kwargs)

    alias.__name__ = alias.__qualname__ = old
    alias.__doc__ = f"Deprecated alias of ``{new.__name__}``."
    return alias


uniform = _deprecated(uniform_)
normal = _deprecated(normal_)
constant = _deprecated(constant_)
xavier_uniform = _deprecated(xavier_uniform_)
xavier_normal = _deprecated(xavier_normal_)
kaiming_uniform = _deprecated(kaiming_uniform_)
kaiming_normal = _deprecated(kaiming_normal_)
orthogonal = _deprecated(orthogonal_)
sparse = _deprecated(sparse_)
dirac = _deprecated(dirac_)

__all__ += ["sparse_", "uniform", "normal", "constant", "xavier_uniform", "xavier_normal",
            "kaiming_uniform", "kaiming_normal", "orthogonal", "sparse", "dirac"]
