"""torch's top-level names for tensors: ``torchlean.sin``, ``torchlean.linspace``,
``torchlean.float``, ``torchlean.LongTensor``, ... with torch's signatures.

``torchlean/__init__.py`` re-exports everything here (``__all__``), including the module
``__getattr__`` that turns a torch name torchlean does not have into a ``TorchLeanError``
("torchlean has no torch.X") instead of a bare AttributeError far from the cause. Each function
is a composition of the tensor methods (so gradients, dtypes and errors are the tensor's).
"""

from __future__ import annotations

import builtins
import inspect
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.errors import ShapeError, TorchLeanError
from ..core.rng import Generator, check_generator, default_generator
from . import torch_extra, torch_methods, torch_more, torch_runtime  # noqa: F401  (attach the composite Tensor methods)
from .dtypes import (
    as_dtype,
    bfloat16,
    bool_,
    cdouble,
    cfloat,
    complex64,
    complex128,
    device,
    double,
    float16,
    float32,
    float64,
    get_default_dtype,
    half,
    int8,
    int16,
    int32,
    int64,
    long,
    set_default_dtype,
    short,
    uint8,
)
from .dtypes import float as float  # noqa: PLC0414  (torch.float)
from .dtypes import int as int  # noqa: PLC0414  (torch.int)
from .dtypes import result_type as _result_type
from .tensor import (
    MAX_ELEMENTS,
    MaxResult,
    MissingTorchName,
    Size,
    Tensor,
    _draw,
    _GradMode,
    _leaf,
    _namespace,
    _shape_args,
    _where,
    arange,
    cat,
    checked_signature,
    empty,
    full,
    is_grad_enabled,
    manual_seed,
    no_grad,
    ones,
    stack,
    tensor,
    zeros,
)
from .tensor_format import PRINT_OPTIONS

bool = bool_  # noqa: A001  (torch.bool)


def _t(op: str, x: Any) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray | list | tuple) or isinstance(x, (builtins.int, builtins.float)):
        return tensor(x)
    raise TorchLeanError(f"{op}: expected a Tensor, found {type(x).__name__}")


def is_tensor(x: Any) -> builtins.bool:
    return isinstance(x, Tensor)


def numel(x: Any) -> builtins.int:
    return _t("numel", x).numel()


# --- elementwise -------------------------------------------------------------------------------

def sin(x: Any) -> Tensor:
    return _t("sin", x).sin()


def cos(x: Any) -> Tensor:
    return _t("cos", x).cos()


def exp(x: Any) -> Tensor:
    return _t("exp", x).exp()


def log(x: Any) -> Tensor:
    return _t("log", x).log()


def sqrt(x: Any) -> Tensor:
    return _t("sqrt", x).sqrt()


def rsqrt(x: Any) -> Tensor:
    return _t("rsqrt", x).rsqrt()


def tanh(x: Any) -> Tensor:
    return _t("tanh", x).tanh()


def sigmoid(x: Any) -> Tensor:
    return _t("sigmoid", x).sigmoid()


def relu(x: Any) -> Tensor:
    return _t("relu", x).relu()


def abs(x: Any) -> Tensor:  # noqa: A001
    return _t("abs", x).abs()


def square(x: Any) -> Tensor:
    return _t("square", x).square()


def neg(x: Any) -> Tensor:
    return -_t("neg", x)


def pow(x: Any, exponent: Any) -> Tensor:  # noqa: A001
    if isinstance(x, Tensor):
        return x.pow(exponent)
    return _t("pow", exponent).__rpow__(x)


def add(x: Any, other: Any, alpha: Any = 1, out: Any = None) -> Tensor:
    return _into("add", _t("add", x).add(other, alpha=alpha), out)


def sub(x: Any, other: Any, alpha: Any = 1) -> Tensor:
    return _t("sub", x).sub(other, alpha=alpha)


def mul(x: Any, other: Any, out: Any = None) -> Tensor:
    return _into("mul", _t("mul", x) * other, out)


def _into(op: str, result: Tensor, out: Any) -> Tensor:
    """``result``, copied into ``out`` when given (torch's ``out=``)."""
    if out is None:
        return result
    if not isinstance(out, Tensor):
        raise TorchLeanError(f"{op}: out must be a Tensor, found {type(out).__name__}")
    with no_grad():
        out.copy_(result)
    return out


def div(x: Any, other: Any, rounding_mode: str | None = None) -> Tensor:
    return _t("div", x).div(other, rounding_mode=rounding_mode)


def clamp(x: Any, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    return _t("clamp", x).clamp(min, max)


clip = clamp


def where(condition: Any, x: Any = None, y: Any = None) -> Any:
    """``where(cond, x, y)``; ``where(cond)`` gives the indices of the True entries."""
    if x is None and y is None:
        return nonzero(condition, as_tuple=True)
    return _where(_t("where", condition), x, y)


def nonzero(x: Any, as_tuple: builtins.bool = False) -> Any:
    idx = np.nonzero(_t("nonzero", x)._host())
    if as_tuple:
        return tuple(_leaf(np.asarray(i, np.int64)) for i in idx)
    return _leaf(np.stack(idx, axis=1).astype(np.int64))


def eq(x: Any, other: Any) -> Tensor:
    return _t("eq", x).eq(other)


def equal(x: Any, other: Any) -> builtins.bool:
    return _t("equal", x).equal(other)


def allclose(x: Any, other: Any, rtol: builtins.float = 1e-5, atol: builtins.float = 1e-8,
             equal_nan: builtins.bool = False) -> builtins.bool:
    return _t("allclose", x).allclose(other, rtol, atol, equal_nan)


def isnan(x: Any) -> Tensor:
    return _t("isnan", x).isnan()


def masked_fill(x: Any, mask: Any, value: Any) -> Tensor:
    return _t("masked_fill", x).masked_fill(mask, value)


# --- reductions ----------------------------------------------------------------------------

def sum(x: Any, dim: Any = None, keepdim: builtins.bool = False, dtype: Any = None) -> Tensor:  # noqa: A001
    return _t("sum", x).sum(dim, keepdim, dtype=dtype)


def mean(x: Any, dim: Any = None, keepdim: builtins.bool = False, dtype: Any = None) -> Tensor:
    return _t("mean", x).mean(dim, keepdim, dtype=dtype)


def std(x: Any, dim: Any = None, unbiased: builtins.bool = True,
        keepdim: builtins.bool = False) -> Tensor:
    return _t("std", x).std(dim, unbiased, keepdim)


def var(x: Any, dim: Any = None, unbiased: builtins.bool = True,
        keepdim: builtins.bool = False) -> Tensor:
    return _t("var", x).var(dim, unbiased, keepdim)


def prod(x: Any, dim: Any = None, keepdim: builtins.bool = False) -> Tensor:
    return _t("prod", x).prod(dim, keepdim)


def max(x: Any, dim: Any = None, keepdim: builtins.bool = False) -> Any:  # noqa: A001
    """The largest entry; ``(values, indices)`` along ``dim``; with a tensor as second
    argument, the elementwise maximum (torch.maximum)."""
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    return _t("max", x).max(dim, keepdim)


def min(x: Any, dim: Any = None, keepdim: builtins.bool = False) -> Any:  # noqa: A001
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    return _t("min", x).min(dim, keepdim)


def maximum(x: Any, other: Any) -> Tensor:
    a, b = _t("maximum", x), _t("maximum", other)
    return _where(a >= b, a, b)


def minimum(x: Any, other: Any) -> Tensor:
    a, b = _t("minimum", x), _t("minimum", other)
    return _where(a <= b, a, b)


def argmax(x: Any, dim: Any = None, keepdim: builtins.bool = False) -> Tensor:
    return _t("argmax", x).argmax(dim, keepdim)


def argmin(x: Any, dim: Any = None, keepdim: builtins.bool = False) -> Tensor:
    return _t("argmin", x).argmin(dim, keepdim)


def softmax(x: Any, dim: builtins.int) -> Tensor:
    return _t("softmax", x).softmax(dim)  # type: ignore[return-value]


def log_softmax(x: Any, dim: builtins.int) -> Tensor:
    return _t("log_softmax", x).log_softmax(dim)  # type: ignore[return-value]


def sort(x: Any, dim: builtins.int = -1, descending: builtins.bool = False, *,
         stable: builtins.bool = False) -> Any:
    """``(values, indices)`` sorted along ``dim`` (values by gathering, so they keep the
    gradient). Always stable (equal entries keep their order), which ``stable=False`` allows."""
    t = _t("sort", x)
    idx = argsort(t, dim, descending)
    return _sorted(t, idx, dim)


def argsort(x: Any, dim: builtins.int = -1, descending: builtins.bool = False, *,
            stable: builtins.bool = False) -> Tensor:
    t = _t("argsort", x)
    value = t._host()
    order = np.argsort(-value if descending else value, axis=dim, kind="stable")
    return _leaf(order.astype(np.int64))


def topk(x: Any, k: builtins.int, dim: builtins.int = -1, largest: builtins.bool = True,
         sorted: builtins.bool = True) -> Any:  # noqa: A002
    t = _t("topk", x)
    n = t.shape[dim] if t.ndim else 1
    if not 0 <= k <= n:
        raise ShapeError(f"topk: k ({k}) out of range for dimension {dim} of size {n}")
    idx = argsort(t, dim, descending=largest)
    idx = _leaf(np.take(idx._value, np.arange(k), axis=dim))
    return _sorted(t, idx, dim)


def _sorted(t: Tensor, idx: Tensor, dim: builtins.int) -> Any:
    axis = dim % builtins.max(t.ndim, 1)
    grids = list(np.indices(idx.shape, sparse=True))
    grids[axis] = idx._value
    values = t[tuple(_leaf(np.broadcast_to(g, idx.shape).copy()) for g in grids)]
    return MaxResult(values, idx)


# --- shapes --------------------------------------------------------------------------------

def flatten(x: Any, start_dim: builtins.int = 0, end_dim: builtins.int = -1) -> Tensor:
    return _t("flatten", x).flatten(start_dim, end_dim)  # type: ignore[return-value]


def reshape(x: Any, shape: Any) -> Tensor:
    return _t("reshape", x).reshape(shape)  # type: ignore[return-value]


def squeeze(x: Any, dim: Any = None) -> Tensor:
    return _t("squeeze", x).squeeze(dim)  # type: ignore[return-value]


def unsqueeze(x: Any, dim: builtins.int) -> Tensor:
    return _t("unsqueeze", x).unsqueeze(dim)  # type: ignore[return-value]


def transpose(x: Any, dim0: builtins.int, dim1: builtins.int) -> Tensor:
    return _t("transpose", x).transpose(dim0, dim1)  # type: ignore[return-value]


def permute(x: Any, dims: Sequence[builtins.int]) -> Tensor:
    return _t("permute", x).permute(*dims)  # type: ignore[return-value]


def t(x: Any) -> Tensor:
    return _t("t", x).t()  # type: ignore[return-value]


def matmul(x: Any, other: Any, out: Any = None) -> Tensor:
    result = _t("matmul", x).matmul(other)
    if out is not None:
        if not isinstance(out, Tensor):
            raise TorchLeanError(f"matmul: out must be a Tensor, found {type(out).__name__}")
        with no_grad():
            out.copy_(result)
        return out
    return result


def set_default_device(device: Any) -> None:
    """torch.set_default_device: only the host is a default here ("cpu", None); factories take
    ``device=`` for the GPU."""
    name = None if device is None else str(getattr(device, "type", device))
    if name not in (None, "cpu"):
        raise TorchLeanError(f"set_default_device: only 'cpu' can be the default device in "
                             f"torchlean, found {device!r}; pass device= to factories and "
                             ".to(device) to modules instead")


def mm(x: Any, other: Any) -> Tensor:
    a, b = _t("mm", x), _t("mm", other)
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"mm: expects two 2-D tensors, found shapes {a.shape} and {b.shape}")
    return a.matmul(b)


def bmm(x: Any, other: Any) -> Tensor:
    a, b = _t("bmm", x), _t("bmm", other)
    if a.ndim != 3 or b.ndim != 3:
        raise ShapeError(f"bmm: expects two 3-D tensors, found shapes {a.shape} and {b.shape}")
    return a.matmul(b)


def dot(x: Any, other: Any) -> Tensor:
    return _t("dot", x).dot(other)


def outer(x: Any, other: Any) -> Tensor:
    a, b = _t("outer", x), _t("outer", other)
    return a.reshape(-1, 1) * b.reshape(1, -1)  # type: ignore[return-value]


def tril(x: Any, diagonal: builtins.int = 0) -> Tensor:
    return _triangle("tril", x, diagonal, np.tril)


def triu(x: Any, diagonal: builtins.int = 0) -> Tensor:
    return _triangle("triu", x, diagonal, np.triu)


def _triangle(op: str, x: Any, diagonal: builtins.int, fn: Any) -> Tensor:
    t_ = _t(op, x)
    if t_.ndim < 2:
        raise ShapeError(f"{op}: input tensor must have at least 2 dimensions, found "
                         f"{t_.ndim}")
    mask = fn(np.ones(t_.shape[-2:], np.bool_), diagonal)
    if t_.requires_grad:
        return _where(_leaf(mask), t_, 0.0)
    return _leaf(np.where(mask, t_._host(), np.zeros((), t_.dtype)).astype(t_.dtype))


def chunk(x: Any, chunks: builtins.int, dim: builtins.int = 0) -> tuple[Tensor, ...]:
    return _t("chunk", x).chunk(chunks, dim)


def split(x: Any, split_size_or_sections: Any, dim: builtins.int = 0) -> tuple[Tensor, ...]:
    return _t("split", x).split(split_size_or_sections, dim)


# --- creation ------------------------------------------------------------------------------

def linspace(start: Any, end: Any, steps: builtins.int, dtype: Any = None,
             requires_grad: builtins.bool = False, device: Any = None) -> Tensor:
    if isinstance(steps, builtins.bool) or not isinstance(steps, builtins.int) or steps < 0:
        raise TorchLeanError(f"linspace: number of steps must be a non-negative int, found "
                             f"{steps!r}")
    if steps > MAX_ELEMENTS:
        raise ShapeError(f"linspace: {steps} steps, more than {MAX_ELEMENTS}")
    dt = as_dtype("linspace", dtype)
    value = np.linspace(builtins.float(start), builtins.float(end), steps).astype(dt)
    return tensor(value, dtype=dt, requires_grad=requires_grad, device=device)


def logspace(start: Any, end: Any, steps: builtins.int, base: builtins.float = 10.0,
             dtype: Any = None) -> Tensor:
    dt = as_dtype("logspace", dtype)
    return tensor(np.logspace(start, end, steps, base=base).astype(dt), dtype=dt)


def eye(n: builtins.int, m: builtins.int | None = None, dtype: Any = None,
        requires_grad: builtins.bool = False, device: Any = None) -> Tensor:
    shape = _shape_args("eye", (n, n if m is None else m))
    return tensor(np.eye(*shape, dtype=as_dtype("eye", dtype)), requires_grad=requires_grad,
                  device=device)


def full_like(x: Any, fill_value: Any, dtype: Any = None, device: Any = None) -> Tensor:
    t_ = _t("full_like", x)
    return full(t_.shape, fill_value, dtype=dtype or t_.dtype, device=device or t_.device)


def empty_like(x: Any, dtype: Any = None, device: Any = None) -> Tensor:
    t_ = _t("empty_like", x)
    return zeros(t_.shape, dtype=dtype or t_.dtype, device=device or t_.device)


def rand_like(x: Any, dtype: Any = None, generator: Generator | None = None) -> Tensor:
    t_ = _t("rand_like", x)
    dt = as_dtype("rand_like", dtype or t_.dtype)
    if dt.kind != "f":
        raise TorchLeanError(f"rand_like: expected a float dtype, found {dt.name}")
    gen = check_generator("rand_like", generator)
    return _leaf(_draw(gen, "uniform", t_.shape, dt, _namespace(t_.device)))


def randn_like(x: Any, dtype: Any = None, generator: Generator | None = None) -> Tensor:
    t_ = _t("randn_like", x)
    dt = as_dtype("randn_like", dtype or t_.dtype)
    if dt.kind != "f":
        raise TorchLeanError(f"randn_like: expected a float dtype, found {dt.name}")
    gen = check_generator("randn_like", generator)
    return _leaf(_draw(gen, "normal", t_.shape, dt, _namespace(t_.device)))


def randint(low: Any, high: Any = None, size: Any = None, generator: Generator | None = None,
            dtype: Any = None, device: Any = None) -> Tensor:
    """Integers uniform in [low, high) (``randint(high, size)`` with low = 0), int64 unless
    given, drawn from ``generator`` (default: the one ``manual_seed`` seeds)."""
    if size is None:
        if high is None or isinstance(high, builtins.int):
            raise TorchLeanError("randint: expected randint(low=0, high, size), found no size")
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    for v in (low, high):
        if isinstance(v, builtins.bool) or not isinstance(v, builtins.int | np.integer):
            raise TorchLeanError(f"randint: low and high must be ints, found {v!r}")
    if high <= low:
        raise TorchLeanError(f"randint: expected low < high, found low={low}, high={high}")
    shape = _shape_args("randint", (size,))
    gen = check_generator("randint", generator)
    u = gen.uniform(shape, np.float64)
    value = (np.floor(u * (high - low)) + low).astype(as_dtype("randint", dtype, int64))
    return tensor(value, device=device)


def randint_like(input: Any, low: Any = 0, high: Any = None, dtype: Any = None,  # noqa: A002
                 generator: Generator | None = None) -> Tensor:
    """Integers in [low, high) shaped like ``input`` (``randint_like(x, high)``: low = 0)."""
    if high is None:
        low, high = 0, low
    return randint(low, high, tuple(_t("randint_like", input).shape), generator=generator,
                   dtype=dtype if dtype is not None else input.dtype)


def randperm(n: builtins.int, generator: Generator | None = None, dtype: Any = None,
             device: Any = None) -> Tensor:
    """A random permutation of 0..n-1 (int64), drawn from ``generator`` (default: the one
    ``manual_seed`` seeds)."""
    if isinstance(n, builtins.bool) or not isinstance(n, builtins.int | np.integer) or n < 0:
        raise TorchLeanError(f"randperm: n must be a non-negative int, found {n!r}")
    _shape_args("randperm", (n,))
    gen = check_generator("randperm", generator)
    keys = gen.uniform((builtins.int(n),), np.float64)
    order = np.argsort(keys, kind="stable").astype(as_dtype("randperm", dtype, int64))
    return tensor(order, device=device)


def multinomial(probs: Any, num_samples: builtins.int, replacement: builtins.bool = False,
                generator: Generator | None = None) -> Tensor:
    """Draw ``num_samples`` category indices per row from (unnormalised) non-negative weights
    ``probs`` (1-D or 2-D), with or without replacement."""
    p = _t("multinomial", probs)
    if p.ndim not in (1, 2):
        raise ShapeError(f"multinomial: prob_dist must be 1 or 2 dim, found {p.ndim}")
    w = p._host().astype(np.float64).reshape(-1, p.shape[-1])
    if not np.all(np.isfinite(w)) or np.any(w < 0) or np.any(w.sum(axis=1) <= 0):
        raise TorchLeanError("multinomial: probabilities must be finite, non-negative and sum "
                             "to more than 0 in every row")
    n = w.shape[1]
    if not replacement and num_samples > n:
        raise TorchLeanError(f"multinomial: cannot sample {num_samples} > {n} categories "
                             "without replacement")
    gen = check_generator("multinomial", generator)
    rows = []
    for row in w:
        row = row.copy()
        picks = []
        for _ in builtins.range(num_samples):
            c = np.cumsum(row / row.sum())
            k = builtins.int(np.searchsorted(c, gen.uniform((), np.float64), side="right"))
            k = builtins.min(k, n - 1)
            picks.append(k)
            if not replacement:
                row[k] = 0.0
        rows.append(picks)
    out = np.asarray(rows, dtype=np.int64)
    return _leaf(out[0] if p.ndim == 1 else out)


def _legacy(dtype: Any, name: str) -> Any:
    def make(*data: Any, device: Any = None) -> Tensor:
        if len(data) == 1 and not isinstance(data[0], builtins.int | np.integer):
            return tensor(data[0], dtype=dtype, device=device)
        return zeros(*data, dtype=dtype, device=device)

    make.__name__ = name
    make.__doc__ = f"torch.{name}(data) / torch.{name}(*sizes): a {np.dtype(dtype).name} tensor."
    return make


FloatTensor = _legacy(float32, "FloatTensor")
DoubleTensor = _legacy(float64, "DoubleTensor")
LongTensor = _legacy(int64, "LongTensor")
IntTensor = _legacy(int32, "IntTensor")
BoolTensor = _legacy(bool_, "BoolTensor")
ByteTensor = _legacy(uint8, "ByteTensor")


def promote_types(a: Any, b: Any) -> Any:
    return np.promote_types(as_dtype("promote_types", a), as_dtype("promote_types", b))


def result_type(a: Any, b: Any) -> Any:
    return _result_type("result_type", (a, b))


def is_floating_point(x: Any) -> builtins.bool:
    return _t("is_floating_point", x).is_floating_point()


def set_printoptions(precision: Any = None, threshold: Any = None, edgeitems: Any = None,
                     linewidth: Any = None, profile: Any = None, sci_mode: Any = None) -> None:
    """torch.set_printoptions: how tensors print (``tensor_format.PRINT_OPTIONS``); also sets
    NumPy's matching options."""
    if profile is not None:
        presets = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80),
                   "full": (4, 2 ** 63 - 1, 3, 80)}
        if profile not in presets:
            raise TorchLeanError(f"set_printoptions: profile must be one of {sorted(presets)}, "
                                 f"found {profile!r}")
        for key, value in zip(("precision", "threshold", "edgeitems", "linewidth"),
                              presets[profile], strict=True):
            PRINT_OPTIONS[key] = value
    for key, value in (("precision", precision), ("threshold", threshold),
                       ("edgeitems", edgeitems), ("linewidth", linewidth)):
        if value is not None:
            if isinstance(value, builtins.bool) or not isinstance(value, builtins.int) \
                    or value < 0:
                raise TorchLeanError(f"set_printoptions: {key} must be a non-negative int, "
                                     f"found {value!r}")
            PRINT_OPTIONS[key] = value
    PRINT_OPTIONS["sci_mode"] = sci_mode
    np.set_printoptions(precision=PRINT_OPTIONS["precision"],
                        threshold=builtins.min(PRINT_OPTIONS["threshold"], sys.maxsize),
                        edgeitems=PRINT_OPTIONS["edgeitems"],
                        linewidth=PRINT_OPTIONS["linewidth"])


# --- methods as functions: torch.f(x, ...) is x.f(...) ------------------------------------------

def _as_function(name: str) -> Any:
    def fn(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
        return getattr(_t(name, input), name)(*args, **kwargs)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"torch.{name}(input, ...): ``input.{name}(...)``."
    return fn


_FUNCTION_METHODS = (
    "all", "any", "clone", "cumsum", "cumprod", "diag", "diagonal", "diag_embed", "trace",
    "flip", "fliplr", "flipud", "roll", "gather", "index_select", "masked_select", "take",
    "take_along_dim", "narrow", "select", "unbind", "tensor_split", "tile", "repeat_interleave",
    "movedim", "moveaxis", "swapaxes", "swapdims", "unflatten", "ravel", "broadcast_to",
    "logsumexp", "log1p", "expm1", "log2", "log10", "exp2", "tan", "sinh", "cosh", "floor",
    "ceil", "round", "trunc", "frac", "sign", "reciprocal", "clamp_min", "clamp_max", "lerp",
    "addmm", "addmv", "baddbmm", "addbmm", "addcmul", "addcdiv", "mv", "inner", "ger",
    "remainder", "fmod", "floor_divide", "fmax", "fmin", "isinf", "isfinite", "isposinf",
    "isneginf", "isclose", "logical_and", "logical_or", "logical_xor", "logical_not",
    "not_equal", "ne", "gt", "lt", "ge", "le", "greater", "less", "greater_equal", "less_equal",
    "signbit", "count_nonzero", "argwhere", "unique", "bincount", "median", "kthvalue", "diff",
    "dist", "amax", "amin", "norm", "bernoulli", "scatter", "scatter_add", "cumsum",
    "true_divide", "subtract", "multiply", "divide", "negative", "absolute",
)
for _name in _FUNCTION_METHODS:
    if _name not in globals():
        globals()[_name] = _as_function(_name)


def concat(tensors: Sequence[Any], dim: builtins.int = 0) -> Tensor:
    return cat(tensors, dim)


concatenate = concat


def hstack(tensors: Sequence[Any]) -> Tensor:
    ts = [_t("hstack", x) for x in tensors]
    return cat(ts, 0 if ts and ts[0].ndim == 1 else 1)


def vstack(tensors: Sequence[Any]) -> Tensor:
    return cat([t_ if t_.ndim > 1 else t_.reshape(1, -1)
                for t_ in (_t("vstack", x) for x in tensors)], 0)


def dstack(tensors: Sequence[Any]) -> Tensor:
    ts = [_t("dstack", x) for x in tensors]
    return cat([t_.reshape(1, -1, 1) if t_.ndim == 1 else t_.unsqueeze(-1) if t_.ndim == 2
                else t_ for t_ in ts], 2)


def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    if len(tensors) == 1 and isinstance(tensors[0], list | tuple):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise TorchLeanError(f"meshgrid: indexing must be 'ij' or 'xy', found {indexing!r}")
    ts = [_t("meshgrid", x).reshape(-1) for x in tensors]
    shape = [t_.shape[0] for t_ in ts]
    if indexing == "xy" and len(ts) >= 2:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, t_ in enumerate(ts):
        axis = i if indexing == "ij" or len(ts) < 2 else {0: 1, 1: 0}.get(i, i)
        view = [1] * len(ts)
        view[axis] = t_.shape[0]
        out.append(t_.reshape(*view).expand(*shape))  # type: ignore[attr-defined]
    return tuple(out)


def normal(mean: Any, std: Any = 1.0, size: Any = None, generator: Generator | None = None,
           dtype: Any = None) -> Tensor:
    """torch.normal: draws with the given means and standard deviations (tensors or numbers;
    with numbers, ``size`` gives the shape)."""
    if size is not None:
        shape = tuple(size)
    else:
        shape = np.broadcast_shapes(*(tuple(v.shape) for v in (mean, std)
                                      if isinstance(v, Tensor)))
    dt = as_dtype("normal", dtype) if dtype is not None else next(
        (v.dtype for v in (mean, std) if isinstance(v, Tensor)), get_default_dtype())
    noise = zeros(*shape, dtype=dt).normal_(generator=generator)
    with no_grad():
        return noise * std + mean  # type: ignore[no-any-return]


def set_grad_enabled(mode: builtins.bool) -> Any:
    """Turns recording on or off: as a call (now) and as a context manager (for the block)."""
    return _SetGradEnabled(builtins.bool(mode))


class _SetGradEnabled(_GradMode):
    def __init__(self, enabled: builtins.bool) -> None:
        super().__init__(enabled)
        self._previous = is_grad_enabled()
        _GradMode(enabled).__enter__()  # takes effect at the call, as torch's

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        _GradMode(self._previous).__enter__()


def inference_mode(mode: builtins.bool = True) -> Any:
    """torch.inference_mode: ``no_grad`` here (no separate inference tensors)."""
    return _GradMode(not mode)


def einsum(equation: str, *operands: Any) -> Any:
    """torch.einsum for equations of at most two operands, as broadcast products and sums of
    the tensor ops (so gradients flow); ``...`` is not supported."""
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    if "..." in eq:
        raise TorchLeanError("einsum: '...' is not supported by torchlean")
    lhs, _, rhs = eq.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(operands) or not 1 <= len(inputs) <= 2:
        raise TorchLeanError(f"einsum: {equation!r} names {len(inputs)} operands, found "
                             f"{len(operands)} (torchlean supports one or two)")
    if not rhs and "->" not in eq:
        letters = "".join(inputs)
        rhs = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    ts = [_t("einsum", x) for x in operands]
    every = "".join(dict.fromkeys("".join(inputs) + rhs))
    expanded = []
    for spec, t_ in zip(inputs, ts, strict=True):
        if len(spec) != t_.ndim or len(set(spec)) != len(spec):
            raise TorchLeanError(f"einsum: operand subscripts {spec!r} do not fit a tensor of "
                                 f"{t_.ndim} dimensions (repeated letters are not supported)")
        order = sorted(builtins.range(len(spec)), key=lambda i: every.index(spec[i]))
        moved = t_.permute(*order) if order != list(builtins.range(len(spec))) else t_
        present = sorted(spec, key=every.index)
        shape = [moved.shape[present.index(c)] if c in present else 1 for c in every]
        expanded.append(moved.reshape(*shape))
    out = expanded[0] if len(expanded) == 1 else expanded[0] * expanded[1]
    summed = tuple(i for i, c in enumerate(every) if c not in rhs)
    if summed:
        out = out.sum(dim=summed)
    kept = [c for c in every if c in rhs]
    order = [kept.index(c) for c in rhs]
    return out.permute(*order) if order != list(builtins.range(len(order))) else out


def cdist(x1: Any, x2: Any, p: builtins.float = 2.0) -> Any:
    a, b = _t("cdist", x1), _t("cdist", x2)
    diff = a.unsqueeze(-2) - b.unsqueeze(-3)
    if p == 2.0:
        return (diff * diff).sum(-1).sqrt()
    return diff.abs().pow(p).sum(-1).pow(1.0 / p)


def cosine_similarity(x1: Any, x2: Any, dim: builtins.int = 1, eps: builtins.float = 1e-8
                      ) -> Tensor:
    a, b = _t("cosine_similarity", x1), _t("cosine_similarity", x2)
    na = a.norm(dim=dim).clamp(min=eps)
    nb = b.norm(dim=dim).clamp(min=eps)
    return (a * b).sum(dim) / (na * nb)  # type: ignore[no-any-return]


def is_nonzero(x: Any) -> builtins.bool:
    return builtins.bool(_t("is_nonzero", x).item())


def seed() -> builtins.int:
    entropy: Any = np.random.SeedSequence().entropy
    value = builtins.int(entropy) % (2 ** 63)
    manual_seed(value)
    return value


def initial_seed() -> builtins.int:
    value: Any = getattr(default_generator, "seed", 0)
    return builtins.int(value or 0)


def _check_signatures() -> None:
    """Wrong arguments to any function here raise ``SignatureError`` naming it."""
    space = globals()
    for key in __all__:
        value = space.get(key)
        if inspect.isfunction(value) and value.__module__ == __name__:
            space[key] = checked_signature(value)


# torch_extra's names (linalg, special, backends, testing, the math functions, ...), and torch's
# deprecated ``range`` (bound last: this module's own code calls ``builtins.range``).
for _name in torch_extra.__all__:
    if _name not in globals():
        globals()[_name] = getattr(torch_extra, _name)
for _module in (torch_more, torch_runtime):  # order statistics, ...; runtime switches
    for _name in _module.__all__:
        if _name not in globals():
            globals()[_name] = getattr(_module, _name)
range = torch_extra.torch_range  # noqa: A001


def missing_torch_name(name: str) -> Any:
    """A torch name torchlean does not provide: a ``TorchLeanError`` naming it (the package's
    module ``__getattr__`` calls this for names it does not have)."""
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    raise MissingTorchName(f"torchlean has no torch.{name} (it is not implemented; see the README "
                         "for the torch names torchlean provides)")


__all__ = [
    "float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool_", "bool", "float",
    "double", "long", "int", "short", "half", "float16", "bfloat16", "complex64", "complex128",
    "cfloat", "cdouble", "device", "get_default_dtype", "set_default_dtype", "Size",
    "is_tensor", "numel", "sin", "cos", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu",
    "abs", "square", "neg", "pow", "add", "sub", "mul", "div", "clamp", "clip", "where",
    "nonzero", "eq", "equal", "allclose", "isnan", "masked_fill", "sum", "mean", "std", "var",
    "prod", "max", "min", "maximum", "minimum", "argmax", "argmin", "softmax", "log_softmax",
    "sort", "argsort", "topk", "flatten", "reshape", "squeeze", "unsqueeze", "transpose",
    "permute", "t", "matmul", "mm", "bmm", "dot", "outer", "tril", "triu", "chunk", "split",
    "linspace", "logspace", "eye", "full_like", "empty_like", "rand_like", "randn_like",
    "randint", "randperm", "multinomial", "set_default_device",
    "FloatTensor", "DoubleTensor", "LongTensor", "IntTensor",
    "BoolTensor", "ByteTensor", "promote_types", "result_type", "is_floating_point",
    "set_printoptions", "MissingTorchName", "cat", "stack", "arange", "ones", "zeros", "full",
    "empty", "concat", "concatenate", "hstack", "vstack", "dstack", "meshgrid", "normal",
    "set_grad_enabled", "inference_mode", "einsum", "cdist", "cosine_similarity", "is_nonzero",
    "seed", "initial_seed", "randint_like", "range",
] + list(dict.fromkeys(_FUNCTION_METHODS + tuple(n for n in torch_extra.__all__
                                                  if n not in _FUNCTION_METHODS)
                      + tuple(torch_more.__all__) + tuple(torch_runtime.__all__)))

_check_signatures()
