"""More of torch's top-level names: the math of ``torch_math`` as functions, in-place function
forms (``torch.sin_``), ``torch.linalg``, ``torch.special``, ``torch.backends``,
``torch.testing``, ``finfo``/``iinfo``, RNG state, and joining/indexing helpers
(``atleast_2d``, ``block_diag``, ``kron``, ``tril_indices``, ``searchsorted``, ...).

``torch_api`` re-exports everything in ``__all__``; the namespaces are module objects
(``types.ModuleType``) registered as ``torchlean.linalg`` etc., so ``from torchlean import
linalg`` and ``torch.linalg.norm`` work as in torch, and a name a namespace lacks raises the
same "torchlean has no torch.X" error as the package.
"""

from __future__ import annotations

import builtins
import math
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.errors import ShapeError, TorchLeanError
from ..core.rng import default_generator, init_generator
from . import torch_math
from .dtypes import as_dtype, get_default_dtype
from .tensor import MissingTorchName, Size, Tensor, cat, stack, tensor, zeros


def _install_methods() -> None:
    for key, fn in torch_math.METHODS.items():
        if not hasattr(Tensor, key):
            setattr(Tensor, key, fn)
    # in-place forms of the new elementwise methods (x.asin_(), ...)
    for key in ("asin", "acos", "atan", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv",
                "deg2rad", "rad2deg", "nan_to_num", "logit", "sinc", "xlogy", "atan2",
                "hypot", "lgamma"):
        name = f"{key}_"
        if not hasattr(Tensor, name):
            setattr(Tensor, name, _inplace_method(key))
    if not hasattr(Tensor, "mT"):
        Tensor.mT = property(lambda self: self.transpose(-2, -1))  # type: ignore[attr-defined]
    extra: dict[str, Any] = {
        "short": lambda self: self.to(np.int16), "char": lambda self: self.to(np.int8),
        "byte": lambda self: self.to(np.uint8),
        "get_device": lambda self: -1 if self.device == "cpu" else 0,
        "data_ptr": lambda self: builtins.int(self.numpy().__array_interface__["data"][0])
        if self.device == "cpu" else 0,
        "element_size": lambda self: self.dtype.itemsize,
    }
    for key, fn in extra.items():
        if not hasattr(Tensor, key):
            setattr(Tensor, key, fn)
    for key in ("itemsize", "nbytes"):
        if not hasattr(Tensor, key):
            setattr(Tensor, key, property(
                (lambda self: self.dtype.itemsize) if key == "itemsize"
                else (lambda self: self.numel() * self.dtype.itemsize)))


def _inplace_method(key: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = getattr(Tensor, key)(self, *args, **kwargs)
        return self.copy_(out)

    method.__name__ = f"{key}_"
    return method


_install_methods()


def _function(name: str) -> Callable[..., Any]:
    def fn(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
        t = input if isinstance(input, Tensor) else tensor(input)
        return getattr(t, name)(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"torch.{name}(input, ...): ``input.{name}(...)``."
    return fn


MATH_FUNCTIONS = tuple(torch_math.METHODS) + (
    "sin_", "cos_", "exp_", "log_", "sqrt_", "abs_", "neg_", "tanh_", "sigmoid_", "relu_",
    "clamp_", "floor_", "ceil_", "round_", "trunc_", "reciprocal_", "rsqrt_", "square_",
    "tan_", "sinh_", "cosh_", "log1p_", "expm1_", "fill_", "zero_", "asin_", "acos_",
    "atan_", "erf_",
)
FUNCTIONS: dict[str, Callable[..., Any]] = {
    name: _function(name) for name in MATH_FUNCTIONS if hasattr(Tensor, name)}
FUNCTIONS["svd"] = torch_math.legacy_svd


# --- joining, indexing and shape helpers --------------------------------------------------------

def _tensors(op: str, items: Sequence[Any]) -> list[Tensor]:
    if len(items) == 1 and isinstance(items[0], list | tuple):
        items = items[0]
    return [t if isinstance(t, Tensor) else tensor(t) for t in items]


def atleast_1d(*tensors: Any) -> Any:
    out = [t.reshape(1) if t.ndim == 0 else t for t in _tensors("atleast_1d", tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_2d(*tensors: Any) -> Any:
    out = [t.reshape(1, -1) if t.ndim < 2 else t for t in _tensors("atleast_2d", tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_3d(*tensors: Any) -> Any:
    out = []
    t: Any
    for t in _tensors("atleast_3d", tensors):
        if t.ndim == 0:
            t = t.reshape(1, 1, 1)
        elif t.ndim == 1:
            t = t.reshape(1, -1, 1)
        elif t.ndim == 2:
            t = t.unsqueeze(-1)
        out.append(t)
    return out[0] if len(out) == 1 else tuple(out)


def broadcast_tensors(*tensors: Any) -> tuple[Tensor, ...]:
    ts = _tensors("broadcast_tensors", tensors)
    shape = np.broadcast_shapes(*(t.shape for t in ts))
    return tuple(t.broadcast_to(shape) for t in ts)


def broadcast_shapes(*shapes: Any) -> Any:
    return Size(np.broadcast_shapes(*[tuple(s) if not isinstance(s, builtins.int) else (s,)
                                      for s in shapes]))


def block_diag(*tensors: Any) -> Any:
    ts = [t.reshape(1, -1) if t.ndim < 2 else t for t in _tensors("block_diag", tensors)]
    cols = builtins.sum(t.shape[1] for t in ts)
    rows, start = [], 0
    for t in ts:
        left = zeros(t.shape[0], start, dtype=t.dtype)
        right = zeros(t.shape[0], cols - start - t.shape[1], dtype=t.dtype)
        rows.append(cat([left, t, right], 1))
        start += t.shape[1]
    return cat(rows, 0)


def kron(a: Any, b: Any) -> Any:
    a, b = (t if isinstance(t, Tensor) else tensor(t) for t in (a, b))
    if a.ndim != 2 or b.ndim != 2:
        if a.ndim == 1 and b.ndim == 1:
            return (a.unsqueeze(1) * b.unsqueeze(0)).reshape(-1)
        raise ShapeError("kron: 1-D or 2-D tensors are supported")
    (p, q), (r, s) = a.shape, b.shape
    return (a.reshape(p, 1, q, 1) * b.reshape(1, r, 1, s)).reshape(p * r, q * s)


def tensordot(a: Any, b: Any, dims: Any = 2) -> Any:
    if isinstance(dims, builtins.int):
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([dims[0]] if isinstance(dims[0], builtins.int) else list(dims[0]),
                  [dims[1]] if isinstance(dims[1], builtins.int) else list(dims[1]))
    da = [d % a.ndim for d in da]
    db = [d % b.ndim for d in db]
    fa = [d for d in range(a.ndim) if d not in da]
    fb = [d for d in range(b.ndim) if d not in db]
    k = builtins.int(np.prod([a.shape[d] for d in da])) if da else 1
    am = a.permute(*fa, *da).reshape(-1, k)
    bm = b.permute(*db, *fb).reshape(k, -1)
    return (am @ bm).reshape(*[a.shape[d] for d in fa], *[b.shape[d] for d in fb])


def vdot(a: Any, b: Any) -> Any:
    return (a * b).sum()


def _indices(op: str, row: builtins.int, col: builtins.int, offset: builtins.int,
             fn: Callable[..., Any]) -> Any:
    r, c = np.nonzero(fn(np.ones((row, col), bool), offset))
    return tensor(np.stack([r, c]).astype(np.int64))


def tril_indices(row: builtins.int, col: builtins.int, offset: builtins.int = 0,
                 dtype: Any = None, device: Any = None) -> Any:
    return _indices("tril_indices", row, col, offset, np.tril)


def triu_indices(row: builtins.int, col: builtins.int, offset: builtins.int = 0,
                 dtype: Any = None, device: Any = None) -> Any:
    return _indices("triu_indices", row, col, offset, np.triu)


def column_stack(tensors: Sequence[Any]) -> Any:
    ts = [t.reshape(-1, 1) if t.ndim <= 1 else t for t in _tensors("column_stack", tensors)]
    return cat(ts, 1)


def _split_along(op: str, dim: builtins.int) -> Callable[..., Any]:
    def fn(input: Any, indices_or_sections: Any) -> Any:  # noqa: A002
        d = dim if not (op == "hsplit" and input.ndim == 1) else 0
        return input.tensor_split(indices_or_sections, d)

    fn.__name__ = op
    return fn


hsplit = _split_along("hsplit", 1)
vsplit = _split_along("vsplit", 0)
dsplit = _split_along("dsplit", 2)


def cartesian_prod(*tensors: Any) -> Any:
    ts = _tensors("cartesian_prod", tensors)
    if len(ts) == 1:
        return ts[0]
    grids = [g.reshape(-1) for g in _meshgrid(ts)]
    return stack(grids, 1)


def _meshgrid(ts: list[Any]) -> list[Any]:
    n = len(ts)
    shape = [t.numel() for t in ts]
    out = []
    for i, t in enumerate(ts):
        view = [1] * n
        view[i] = shape[i]
        out.append(t.reshape(*view).expand(*shape))
    return out


def searchsorted(sorted_sequence: Any, values: Any, out_int32: bool = False,
                 right: bool = False, side: Any = None, sorter: Any = None) -> Any:
    seq = sorted_sequence.numpy() if isinstance(sorted_sequence, Tensor) else np.asarray(
        sorted_sequence)
    vals = values.numpy() if isinstance(values, Tensor) else np.asarray(values)
    how: Any = side if side is not None else ("right" if right else "left")
    if seq.ndim == 1:
        out = np.searchsorted(seq, vals, side=how)
    else:
        out = np.stack([np.searchsorted(s, v, side=how)
                        for s, v in zip(seq.reshape(-1, seq.shape[-1]),
                                        vals.reshape(-1, vals.shape[-1]), strict=True)])
        out = out.reshape(vals.shape)
    return tensor(out.astype(np.int32 if out_int32 else np.int64))


def bucketize(input: Any, boundaries: Any, out_int32: bool = False,  # noqa: A002
              right: bool = False) -> Any:
    b = boundaries.numpy() if isinstance(boundaries, Tensor) else np.asarray(boundaries)
    v = input.numpy() if isinstance(input, Tensor) else np.asarray(input)
    out = np.searchsorted(b, v, side="right" if right else "left")
    return tensor(out.astype(np.int32 if out_int32 else np.int64))


def diagflat(input: Any, offset: builtins.int = 0) -> Any:  # noqa: A002
    return input.reshape(-1).diag(offset)


def trapezoid(y: Any, x: Any = None, *, dx: Any = None, dim: builtins.int = -1) -> Any:
    n = y.shape[dim]
    left, right = y.narrow(dim, 0, n - 1), y.narrow(dim, 1, n - 1)
    if x is None:
        return ((left + right) * (0.5 * (1.0 if dx is None else dx))).sum(dim)
    xd = x.diff(dim=dim if x.ndim > 1 else 0)
    return ((left + right) * xd * 0.5).sum(dim)


def histc(input: Any, bins: builtins.int = 100, min: Any = 0, max: Any = 0) -> Any:  # noqa: A002
    v = input.numpy()
    lo, hi = (float(v.min()), float(v.max())) if min == 0 and max == 0 else (min, max)
    counts, _ = np.histogram(v, bins=bins, range=(lo, hi))
    return tensor(counts.astype(v.dtype))


def chain_matmul(*matrices: Any) -> Any:
    out = matrices[0]
    for m in matrices[1:]:
        out = out @ m
    return out


def cov(input: Any, correction: builtins.int = 1, fweights: Any = None,  # noqa: A002
        aweights: Any = None) -> Any:
    if fweights is not None or aweights is not None:
        raise TorchLeanError("cov: fweights and aweights are not supported")
    x = input if input.ndim == 2 else input.reshape(1, -1)
    centred = x - x.mean(1, keepdim=True)
    out = centred @ centred.t() / (x.shape[1] - correction)
    return out if input.ndim == 2 else out.reshape(())


def corrcoef(input: Any) -> Any:  # noqa: A002
    c = cov(input)
    d = c.diagonal().sqrt()
    return c / d.unsqueeze(1) / d.unsqueeze(0)


# --- dtypes and state ----------------------------------------------------------------------------

def finfo(dtype: Any = None) -> Any:
    return np.finfo(as_dtype("finfo", dtype))


def iinfo(dtype: Any) -> Any:
    return np.iinfo(as_dtype("iinfo", dtype))


def is_complex(x: Any) -> bool:
    return False


def typename(x: Any) -> str:
    if isinstance(x, Tensor):
        names = {"float32": "FloatTensor", "float64": "DoubleTensor", "int64": "LongTensor",
                 "int32": "IntTensor", "int16": "ShortTensor", "int8": "CharTensor",
                 "uint8": "ByteTensor", "bool": "BoolTensor"}
        return f"torch.{names.get(x.dtype.name, 'Tensor')}"
    return type(x).__name__


def use_deterministic_algorithms(mode: bool, warn_only: bool = False) -> None:
    """Accepted: torchlean's kernels are deterministic already."""


def are_deterministic_algorithms_enabled() -> bool:
    return True


def get_rng_state() -> Any:
    """The seeds and counters of the default and init generators, as an int64 tensor."""
    return tensor(np.array([default_generator.seed, default_generator.counter,
                            init_generator.seed, init_generator.counter], np.int64))


def set_rng_state(new_state: Any) -> None:
    state = new_state.numpy() if isinstance(new_state, Tensor) else np.asarray(new_state)
    if state.shape != (4,):
        raise TorchLeanError("set_rng_state: expected a state from torchlean.get_rng_state()")
    default_generator.seed, default_generator.counter = builtins.int(state[0]), builtins.int(
        state[1])
    init_generator.seed, init_generator.counter = builtins.int(state[2]), builtins.int(state[3])


def torch_range(start: Any = 0, end: Any = None, step: Any = 1, dtype: Any = None,
                **_: Any) -> Any:
    """The deprecated ``torch.range``: end inclusive, float by default."""
    if end is None:
        start, end = 0, start
    n = builtins.int(math.floor((end - start) / step)) + 1
    values = start + step * np.arange(n)
    return tensor(values.astype(as_dtype("range", dtype, get_default_dtype())))


# --- namespaces ---------------------------------------------------------------------------------

class _Namespace(types.ModuleType):
    """A torch sub-namespace: a missing name raises "torchlean has no torch.<ns>.X"."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise MissingTorchName(f"torchlean has no torch.{self.__name__.split('.', 1)[1]}."
                               f"{name} (it is not implemented)")


def _namespace(name: str, doc: str, **members: Any) -> _Namespace:
    module = _Namespace(f"torchlean.{name}", doc)
    for key, value in members.items():
        setattr(module, key, value)
    sys.modules.setdefault(f"torchlean.{name}", module)
    return module


def _sigmoid(x: Any) -> Any:
    return x.sigmoid()


linalg = _namespace(
    "linalg", "torch.linalg: norms, inverse, determinant, solve and decompositions.",
    norm=torch_math.norm, vector_norm=torch_math.vector_norm,
    matrix_norm=torch_math.matrix_norm, inv=torch_math.inv, det=torch_math.det,
    slogdet=torch_math.slogdet, solve=torch_math.solve, svd=torch_math.svd,
    svdvals=lambda a: torch_math.svd(a, full_matrices=False).S, qr=torch_math.qr,
    eigh=torch_math.eigh, eigvalsh=torch_math.eigvalsh, cholesky=torch_math.cholesky,
    pinv=torch_math.pinv, matrix_rank=torch_math.matrix_rank,
    matrix_power=torch_math.matrix_power, matrix_exp=torch_math.matrix_exp,
    cross=torch_math.cross, vecdot=lambda a, b, dim=-1: (a * b).sum(dim),
    multi_dot=lambda ms: chain_matmul(*ms),
)

special = _namespace(
    "special", "torch.special: the special functions torchlean has.",
    expit=_sigmoid, erf=torch_math.erf, erfc=torch_math.erfc,
    erfinv=torch_math.ELEMENTWISE["erfinv"], logit=torch_math.logit, xlogy=torch_math.xlogy,
    sinc=torch_math.sinc, gammaln=torch_math.ELEMENTWISE["lgamma"],
    logsumexp=lambda x, dim, keepdim=False: x.logsumexp(dim, keepdim),
    softmax=lambda x, dim, dtype=None: x.softmax(dim),
    log_softmax=lambda x, dim, dtype=None: x.log_softmax(dim),
    log1p=lambda x: x.log1p(), expm1=lambda x: x.expm1(), exp2=lambda x: x.exp2(),
    round=lambda x: x.round(),
)


class _Flags(types.SimpleNamespace):
    def is_available(self) -> bool:
        return False

    def is_built(self) -> bool:
        return False


backends = _namespace(
    "backends", "torch.backends: flags accepted and ignored (no cuDNN, MPS or MKL switches).",
    cudnn=_Flags(deterministic=False, benchmark=False, enabled=True, allow_tf32=True),
    mps=_Flags(), mkldnn=_Flags(enabled=False),
    cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=False),
                               is_built=lambda: False),
    openmp=_Flags(),
)


def _assert_close(actual: Any, expected: Any, *, rtol: Any = None, atol: Any = None,
                  equal_nan: bool = False, check_dtype: bool = True, msg: Any = None,
                  **_: Any) -> None:
    a = actual.detach().numpy() if isinstance(actual, Tensor) else np.asarray(actual)
    b = expected.detach().numpy() if isinstance(expected, Tensor) else np.asarray(expected)
    if check_dtype and isinstance(actual, Tensor) and isinstance(expected, Tensor) \
            and a.dtype != b.dtype:
        raise AssertionError(f"The values for attribute 'dtype' do not match: {a.dtype} != "
                             f"{b.dtype}.")
    dt = np.promote_types(a.dtype, b.dtype)
    default = {np.dtype(np.float32): (1.3e-6, 1e-5), np.dtype(np.float64): (1e-7, 1e-7)}
    r, t = default.get(dt, (0.0, 0.0))
    np.testing.assert_allclose(a, b, rtol=r if rtol is None else rtol,
                               atol=t if atol is None else atol, equal_nan=equal_nan,
                               err_msg="" if msg is None else str(msg))


testing = _namespace("testing", "torch.testing: assert_close.", assert_close=_assert_close,
                     assert_allclose=_assert_close)

NAMESPACES = {"linalg": linalg, "special": special, "backends": backends, "testing": testing}

dtype = np.dtype  # torch.dtype: isinstance(x.dtype, torch.dtype) holds

__all__ = [
    *FUNCTIONS, "atleast_1d", "atleast_2d", "atleast_3d", "broadcast_tensors",
    "broadcast_shapes", "block_diag", "kron", "tensordot", "vdot", "tril_indices",
    "triu_indices", "column_stack", "hsplit", "vsplit", "dsplit", "cartesian_prod",
    "searchsorted", "bucketize", "diagflat", "trapezoid", "histc",
    "chain_matmul", "cov", "corrcoef", "finfo", "iinfo", "is_complex", "typename",
    "use_deterministic_algorithms", "are_deterministic_algorithms_enabled", "get_rng_state",
    "set_rng_state", "linalg", "special", "backends", "testing", "dtype",
]
globals().update(FUNCTIONS)
trapz = trapezoid
__all__ += ["trapz"]
