"""ONNX to torchlean: every ONNX node becomes registry primitives in one compiled graph.

Loading walks the ONNX graph once, inside ``trace``: each value is either a traced ``Var`` or a
``_Static`` array known at load time (constants, initialisers, shapes). Integer shape arithmetic
that PyTorch's exporter emits (``Shape``, ``Gather``, ``Concat``, ``Cast`` ...) is folded with
NumPy, so only real tensor computation reaches the graph. Float initialisers become named
``Param``s the first time a node uses them as tensors, so gradients reach them like any model's
parameters. Integer inputs (token ids) are carried as float leaves without gradients and may
only feed embedding lookups (``Gather`` -> ``embedding``), casts and reshapes. A node that
cannot be translated is recorded, not raised at once: the nodes after it
that depend on it are skipped, and one ``UnsupportedOnnxError`` lists every problem at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.errors import ShapeError, TorchLeanError
from ..core.registry import REGISTRY
from ..core.shape import as_shape
from ..engine import ops_interface as F
from ..engine.graph import GraphBuilder, Var
from ..engine.params import Param
from ..engine.transforms import Compiled
from ..nn import Module
from ..ops.general import inverse_perm
from . import codec, limits
from .errors import OnnxError, OnnxLimitError, UnsupportedOnnxError, require_onnx
from .files import read_model

_FLOAT_ELEM: dict[int, np.dtype] = {1: np.dtype(np.float32), 11: np.dtype(np.float64)}
_INDEX_ELEM = (6, 7)  # INT32, INT64: index inputs (token ids), carried as floats in the graph
_ELEM_NAMES = {0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16",
               6: "INT32", 7: "INT64", 8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE",
               12: "UINT32", 13: "UINT64", 16: "BFLOAT16"}
_NUMPY_OF_ELEM = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
                  7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32,
                  13: np.uint64}


class Unsupported(Exception):
    """Raised by a node handler: this node cannot be translated, for ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Static:
    """A value known at load time; ``param`` names the float initialiser it came from."""

    __slots__ = ("array", "param")

    def __init__(self, array: Any, param: str | None = None) -> None:
        self.array = np.asarray(array)
        self.param = param

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)


_BAD = object()  # the value of an output whose node could not be translated
Value = Any  # Var | _Static


class _Context:
    """What node handlers need: the graph builder, the graph dtype and the parameters."""

    def __init__(self, builder: GraphBuilder, dtype: np.dtype, opset: int,
                 frozen: set[str]) -> None:
        self.builder = builder
        self.ops = builder.ops
        self.dtype = dtype
        self.opset = opset
        self.frozen = frozen  # initialisers that never receive gradients (running statistics)
        self.params: dict[str, Param] = {}

    def var(self, value: Value) -> Var:
        """``value`` as a graph variable: parameters are used, other statics become consts."""
        if isinstance(value, Var):
            return value
        array = value.array
        if array.dtype.kind not in "biuf":
            raise Unsupported(f"a {array.dtype} constant cannot be a tensor operand")
        if value.param is not None:
            param = self.params.get(value.param)
            if param is None:
                param = Param(array.astype(self.dtype), name=value.param,
                              requires_grad=value.param not in self.frozen)
                self.params[value.param] = param
            return self.builder.use(param)
        return self.builder.const(array.astype(self.dtype))

    def static(self, value: Value, what: str) -> np.ndarray:
        if isinstance(value, _Static):
            return value.array
        raise Unsupported(f"{what} must be known when loading (a constant or initialiser), "
                          "found a tensor computed by the graph")


def _scalar_of(value: Value) -> float | None:
    """The number a constant one-entry static holds (not a parameter), else ``None``."""
    if isinstance(value, _Static) and value.param is None and value.array.size == 1 \
            and value.array.dtype.kind in "biuf":
        return float(value.array.reshape(()))
    return None


# ---------------------------------------------------------------------------------------------
# Layout helpers on variables (composed from primitives).


def reshape(ctx: _Context, x: Var, shape: Sequence[int]) -> Var:
    target = tuple(int(d) for d in shape)
    return x if target == x.shape else ctx.ops.reshape(x, shape=target)


def permute(ctx: _Context, x: Var, perm: Sequence[int]) -> Var:
    order = tuple(int(p) for p in perm)
    return x if order == tuple(range(len(order))) else ctx.ops.permute(x, perm=order)


def _front(axis: int, ndim: int) -> tuple[int, ...]:
    """The permutation that moves ``axis`` to the front, keeping the others in order."""
    return (axis,) + tuple(a for a in range(ndim) if a != axis)


def _axis(op: str, axis: Any, ndim: int) -> int:
    a = int(axis)
    if not -ndim <= a < max(ndim, 1):
        raise Unsupported(f"{op}: axis {a} out of range for a {ndim}-D tensor")
    return a + ndim if a < 0 else a


def take(ctx: _Context, x: Var, axis: int, idx: np.ndarray) -> Var:
    """``x`` indexed by static in-range indices ``idx`` (1-D) along ``axis``."""
    perm = _front(axis, x.ndim)
    moved = permute(ctx, x, perm)
    rest = moved.shape[1:]
    flat = reshape(ctx, moved, (moved.shape[0], int(np.prod(rest, dtype=np.int64))))
    rows = ctx.ops.gather_rows_nat(flat, idx=np.asarray(idx, dtype=np.int64))
    back = reshape(ctx, rows, (len(idx),) + rest)
    return permute(ctx, back, inverse_perm(perm))


def slice_axis(ctx: _Context, x: Var, axis: int, start: int, length: int) -> Var:
    if start == 0 and length == x.shape[axis]:
        return x
    perm = _front(axis, x.ndim)
    moved = permute(ctx, x, perm)
    cut = ctx.ops.slice_range0(moved, start=start, length=length)
    return permute(ctx, cut, inverse_perm(perm))


def concat(ctx: _Context, parts: list[Var], axis: int) -> Var:
    if len(parts) == 1:
        return parts[0]
    perm = _front(axis, parts[0].ndim)
    moved = [permute(ctx, p, perm) for p in parts]
    out = moved[0]
    for p in moved[1:]:
        out = ctx.ops.concat_dim0(out, p)
    return permute(ctx, out, inverse_perm(perm))


def along_last(ctx: _Context, x: Var, axis: int, fn: Callable[[Var], Var]) -> Var:
    """``fn`` (an op over the last axis) applied along ``axis``."""
    if axis == x.ndim - 1:
        return fn(x)
    perm = tuple(a for a in range(x.ndim) if a != axis) + (axis,)
    return permute(ctx, fn(permute(ctx, x, perm)), inverse_perm(perm))


# ---------------------------------------------------------------------------------------------
# Static folding (NumPy on load-time values: shape arithmetic, constants).


def _ints(values: Any) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _reshape_target(op: str, shape: tuple[int, ...], spec: Any, allowzero: int) -> tuple[int, ...]:
    dims = _ints(spec)
    out = []
    for k, d in enumerate(dims):
        if d == 0 and not allowzero:
            if k >= len(shape):
                raise Unsupported(f"{op}: dimension 0 at position {k} copies an axis the input "
                                  f"{shape} lacks")
            out.append(shape[k])
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise Unsupported(f"{op}: more than one -1 in shape {dims}")
    total = int(np.prod(shape, dtype=np.int64))
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or total % known:
            raise Unsupported(f"{op}: cannot reshape {shape} to {dims}")
        out[out.index(-1)] = total // known
    if int(np.prod(out, dtype=np.int64)) != total:
        raise Unsupported(f"{op}: cannot reshape {shape} ({total} entries) to {tuple(out)}")
    return tuple(out)


def _slice_params(node_op: str, shape: tuple[int, ...], starts: Any, ends: Any, axes: Any,
                  steps: Any) -> list[tuple[int, int, int, int]]:
    """Per sliced axis: (axis, start, stop, step) with ONNX's clamping rules applied."""
    starts, ends = _ints(starts), _ints(ends)
    axes_l = list(range(len(starts))) if axes is None else _ints(axes)
    steps_l = [1] * len(starts) if steps is None else _ints(steps)
    out = []
    for a, s, e, st in zip(axes_l, starts, ends, steps_l, strict=True):
        axis = _axis(node_op, a, len(shape))
        n = shape[axis]
        if st == 0:
            raise Unsupported(f"{node_op}: step 0")
        start, stop, step = slice(s, e, st).indices(n)
        out.append((axis, start, stop, step))
    return out


def _onnx_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.trunc(a / b).astype(np.result_type(a, b))  # ONNX integer Div truncates
    return np.divide(a, b)


def _static_kernels() -> dict[str, Callable[..., list[np.ndarray]]]:
    def unsq(x: np.ndarray, axes: Any) -> np.ndarray:
        out = x
        rank = x.ndim + len(_ints(axes))
        for a in sorted(_axis("Unsqueeze", a, rank) for a in _ints(axes)):
            out = np.expand_dims(out, a)
        return out

    def sq(x: np.ndarray, axes: Any) -> np.ndarray:
        if axes is None:
            return np.squeeze(x)
        return np.squeeze(x, axis=tuple(_axis("Squeeze", a, x.ndim) for a in _ints(axes)))

    def slc(x: np.ndarray, starts: Any, ends: Any, axes: Any = None, steps: Any = None
            ) -> np.ndarray:
        out = x
        for axis, start, stop, step in _slice_params("Slice", x.shape, starts, ends, axes, steps):
            # Index arrays, not slice(start, stop, step): a normalised stop of -1 (before the
            # first entry, for negative steps) would read as "the last entry" in a slice.
            out = np.take(out, np.arange(start, stop, step, dtype=np.int64), axis=axis)
        return out

    def cast(x: np.ndarray, to: int) -> np.ndarray:
        if to not in _NUMPY_OF_ELEM:
            raise Unsupported(f"Cast to {_ELEM_NAMES.get(to, to)}")
        return x.astype(_NUMPY_OF_ELEM[to])

    def reduce(fn: Any) -> Any:
        def kernel(x: np.ndarray, axes: Any = None, keepdims: int = 1) -> np.ndarray:
            ax = None if axes is None or not len(_ints(axes)) else tuple(
                _axis("Reduce", a, x.ndim) for a in _ints(axes))
            return fn(x, axis=ax, keepdims=bool(keepdims))

        return kernel

    return {
        "Add": lambda a, b: [np.add(a, b)], "Sub": lambda a, b: [np.subtract(a, b)],
        "Mul": lambda a, b: [np.multiply(a, b)], "Div": lambda a, b: [_onnx_div(a, b)],
        "Mod": lambda a, b, fmod=0: [np.fmod(a, b) if fmod else np.mod(a, b)],
        "Neg": lambda a: [np.negative(a)], "Abs": lambda a: [np.abs(a)],
        "Sqrt": lambda a: [np.sqrt(a)], "Floor": lambda a: [np.floor(a)],
        "Ceil": lambda a: [np.ceil(a)], "Pow": lambda a, b: [np.power(a, b).astype(a.dtype)],
        "Equal": lambda a, b: [np.equal(a, b)], "Less": lambda a, b: [np.less(a, b)],
        "Greater": lambda a, b: [np.greater(a, b)], "Not": lambda a: [np.logical_not(a)],
        "And": lambda a, b: [np.logical_and(a, b)], "Or": lambda a, b: [np.logical_or(a, b)],
        "Where": lambda c, a, b: [np.asarray(np.where(c, a, b))],
        "Trilu": lambda x, k=None, upper=1: [
            (np.triu if upper else np.tril)(x, 0 if k is None else int(np.asarray(k)))],
        "Min": lambda *xs: [np.asarray(np.minimum.reduce(list(np.broadcast_arrays(*xs))))],
        "Max": lambda *xs: [np.asarray(np.maximum.reduce(list(np.broadcast_arrays(*xs))))],
        "Cast": lambda x, to: [cast(x, to)],
        "Unsqueeze": lambda x, axes: [unsq(x, axes)],
        "Squeeze": lambda x, axes=None: [sq(x, axes)],
        "Concat": lambda *xs, axis: [np.concatenate(list(xs), axis=axis)],
        "Gather": lambda x, i, axis=0: [np.take(x, i.astype(np.int64), axis=axis)],
        "Slice": lambda x, *rest: [slc(x, *rest)],
        "Reshape": lambda x, s, allowzero=0: [
            x.reshape(_reshape_target("Reshape", x.shape, s, allowzero))],
        "Transpose": lambda x, perm=None: [np.transpose(x, perm)],
        "Expand": lambda x, s: [np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(_ints(s))))
                                .copy()],
        "ConstantOfShape": lambda s, value=None: [np.full(
            tuple(_ints(s)), 0.0 if value is None else value.reshape(-1)[0],
            dtype=np.float32 if value is None else value.dtype)],
        "Range": lambda a, b, d: [np.arange(a.reshape(()), b.reshape(()), d.reshape(()))
                                  .astype(a.dtype)],
        "ReduceProd": lambda x, axes=None, keepdims=1: [reduce(np.prod)(x, axes, keepdims)],
        "ReduceSum": lambda x, axes=None, keepdims=1: [reduce(np.sum)(x, axes, keepdims)],
        "Size": lambda x: [np.array(x.size, dtype=np.int64)],
    }


_STATIC = _static_kernels()

# ---------------------------------------------------------------------------------------------
# Node handlers on graph variables: handler(ctx, inputs, attrs, node) -> outputs.

Handler = Callable[[_Context, list[Any], dict[str, Any], Any], list[Value]]
HANDLERS: dict[str, Handler] = {}


def handles(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            HANDLERS[name] = fn
        return fn

    return register


def _unary(prim: str) -> Handler:
    def handler(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
        return [getattr(ctx.ops, prim)(ctx.var(xs[0]))]

    return handler


for _onnx_name, _prim in {"Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid", "Exp": "exp",
                          "Log": "log", "Sqrt": "sqrt", "Abs": "abs", "Erf": "erf",
                          "Reciprocal": "inv", "Softplus": "softplus", "Sign": "sign"}.items():
    HANDLERS[_onnx_name] = _unary(_prim)


@handles("Identity", "Dropout")
def _identity(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    if node.op_type == "Dropout":
        if len(xs) > 2 and xs[2] is not None and bool(ctx.static(xs[2], "training_mode")):
            raise Unsupported("training-mode dropout (only inference, where it is the identity)")
        if len(node.output) > 1 and node.output[1]:
            raise Unsupported("the dropout mask output is not supported")
    return [xs[0]]


@handles("Neg")
def _neg(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    return [ctx.ops.scale(ctx.var(xs[0]), c=-1.0)]


def _broadcast_ok(x: Var, c: _Static) -> bool:
    return c.array.ndim <= x.ndim


@handles("Add", "Sub", "Mul", "Div")
def _arith(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    a, b = xs
    op = node.op_type
    ca, cb = _scalar_of(a), _scalar_of(b)
    # A constant scalar operand becomes the scalar attribute of scale / add_scalar, which is how
    # torchlean writes x * c and x + c (and how ``export`` writes those primitives).
    if cb is not None and isinstance(a, Var) and _broadcast_ok(a, b):
        if op == "Add":
            return [ctx.ops.add_scalar(a, c=cb)]
        if op == "Sub":
            return [ctx.ops.add_scalar(a, c=-cb)]
        if op == "Mul":
            return [ctx.ops.scale(a, c=cb)]
    if ca is not None and isinstance(b, Var) and _broadcast_ok(b, a):
        if op == "Add":
            return [ctx.ops.add_scalar(b, c=ca)]
        if op == "Mul":
            return [ctx.ops.scale(b, c=ca)]
        if op == "Sub":
            return [ctx.ops.add_scalar(ctx.ops.scale(b, c=-1.0), c=ca)]
    va, vb = ctx.var(a), ctx.var(b)
    if op == "Mul" and va is vb:
        return [ctx.ops.square(va)]
    name = {"Add": "add", "Sub": "sub", "Mul": "mul"}.get(op)
    if name is not None:
        return [getattr(ctx.ops, name)(va, vb)]
    return [ctx.ops.mul(va, ctx.ops.inv(vb))]


def _zero_static(value: Value) -> bool:
    """A one-entry float constant or initialiser holding 0 (a relu written as Max or Clip)."""
    return (isinstance(value, _Static) and value.array.size == 1
            and value.array.dtype.kind == "f" and float(value.array.reshape(())) == 0.0)


@handles("Max", "Min")
def _max_min(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    if node.op_type == "Max" and len(xs) == 2:
        for x, zero in (xs, xs[::-1]):
            if isinstance(x, Var) and _zero_static(zero) and zero.array.ndim <= x.ndim:
                # Max(x, 0) is relu(x), value for value (NumPy's maximum with a zero)
                return [ctx.ops.relu(x)]
    op = getattr(ctx.ops, node.op_type.lower())
    out = ctx.var(xs[0])
    for x in xs[1:]:
        out = op(out, ctx.var(x))
    return [out]


@handles("LeakyRelu")
def _leaky(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    alpha = float(attrs.get("alpha", 0.01))
    # x for x > 0 and alpha x otherwise: (1 - alpha) relu(x) + alpha x.
    return [ctx.ops.add(ctx.ops.scale(ctx.ops.relu(x), c=1.0 - alpha), ctx.ops.scale(x, c=alpha))]


@handles("Pow")
def _pow(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    e = _scalar_of(xs[1])
    if e is None:
        raise Unsupported("the exponent must be a constant number")
    x = ctx.var(xs[0])
    if e == 0.5:
        return [ctx.ops.sqrt(x)]
    if e != int(e) or abs(e) > 64:
        raise Unsupported(f"exponent {e} is not an integer in [-64, 64] (or 0.5)")
    n = abs(int(e))
    if n == 0:
        return [ctx.ops.add_scalar(ctx.ops.scale(x, c=0.0), c=1.0)]
    # Square-and-multiply: x^n with O(log n) products.
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else ctx.ops.mul(result, base)
        n >>= 1
        if n:
            base = ctx.ops.square(base)
    assert result is not None
    return [ctx.ops.inv(result) if e < 0 else result]


@handles("Clip")
def _clip(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    lo = attrs.get("min", -math.inf)
    hi = attrs.get("max", math.inf)
    if len(xs) > 1 and xs[1] is not None:
        lo = float(ctx.static(xs[1], "Clip min").reshape(()))
    if len(xs) > 2 and xs[2] is not None:
        hi = float(ctx.static(xs[2], "Clip max").reshape(()))
    if float(lo) == 0.0 and float(hi) == math.inf and isinstance(xs[0], Var):
        return [ctx.ops.relu(xs[0])]  # Clip(x, 0): relu, value for value
    return [ctx.ops.clamp(ctx.var(xs[0]), lo=float(lo), hi=float(hi))]


@handles("Softmax", "LogSoftmax")
def _softmax(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    axis = _axis(node.op_type, attrs.get("axis", -1 if ctx.opset >= 13 else 1), x.ndim)
    if ctx.opset < 13 and axis != x.ndim - 1:
        raise Unsupported("before opset 13 Softmax flattens the axes from `axis` on; only the "
                          "last axis is supported")
    prim = getattr(ctx.ops, "softmax" if node.op_type == "Softmax" else "log_softmax")
    return [along_last(ctx, x, axis, prim)]


@handles("Gelu")
def _gelu(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    approximate = attrs.get("approximate", "none")
    if approximate not in ("tanh", "none"):
        raise Unsupported(f"approximate={approximate!r}")
    return [ctx.ops.gelu(x, approximate=approximate)]


def _matmul(ctx: _Context, a: Var, b: Var) -> Var:
    if a.ndim == 1 or b.ndim == 1:
        a2 = reshape(ctx, a, (1,) + a.shape) if a.ndim == 1 else a
        b2 = reshape(ctx, b, b.shape + (1,)) if b.ndim == 1 else b
        out = _matmul(ctx, a2, b2)
        shape = out.shape
        if a.ndim == 1:
            shape = shape[:-2] + shape[-1:]
        if b.ndim == 1:
            shape = shape[:-1]
        return reshape(ctx, out, shape)
    if a.ndim == 2 and b.ndim == 2:
        return ctx.ops.matmul(a, b)
    if a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0]:
        return ctx.ops.bmm(a, b)
    return ctx.ops.matmul_nd(a, b)


@handles("MatMul")
def _matmul_node(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    return [_matmul(ctx, ctx.var(xs[0]), ctx.var(xs[1]))]


@handles("Gemm")
def _gemm(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    trans_a, trans_b = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    a, b = ctx.var(xs[0]), ctx.var(xs[1])
    c = xs[2] if len(xs) > 2 else None
    if a.ndim != 2 or b.ndim != 2:
        raise Unsupported(f"Gemm needs 2-D A and B, found {a.shape} and {b.shape}")
    n = b.shape[0] if trans_b else b.shape[1]
    if (not trans_a and trans_b and alpha == 1.0 and beta == 1.0 and c is not None
            and tuple(c.shape) in ((n,), (1, n))):
        # x @ W.T + b: torchlean's linear (one GEMM), as nn.Linear exports.
        return [ctx.ops.linear(b, reshape(ctx, ctx.var(c), (n,)), a)]
    if not trans_a and trans_b and alpha == 1.0 and c is None:
        # x @ W.T (a Linear without bias): linear with a zero bias, so bound chains see a
        # weight, not a transposed constant. Adding +0 changes no value; the product is the
        # same GEMM as matmul's (ONNX fixes no summation order, and the bounds' rounding
        # terms hold for any)
        return [ctx.ops.linear(b, ctx.var(_Static(np.zeros(n, ctx.dtype))), a)]
    a2 = ctx.ops.transpose2d(a) if trans_a else a
    b2 = ctx.ops.transpose2d(b) if trans_b else b
    out = ctx.ops.matmul(a2, b2)
    if alpha != 1.0:
        out = ctx.ops.scale(out, c=alpha)
    if c is not None and beta != 0.0:
        cv = ctx.var(c)
        out = ctx.ops.add(out, cv if beta == 1.0 else ctx.ops.scale(cv, c=beta))
    return [out]


def _spatial_attrs(op: str, attrs: dict[str, Any], d: int, kernel: tuple[int, ...] | None
                   ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(kernel, strides, symmetric padding), or ``Unsupported`` for what torchlean lacks."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad not in ("NOTSET", "VALID"):
        raise Unsupported(f"auto_pad={auto_pad} (only explicit pads are supported)")
    k = tuple(int(v) for v in attrs.get("kernel_shape", kernel or ()))
    if len(k) != d:
        raise Unsupported(f"kernel_shape {k} does not have {d} spatial axes")
    if kernel is not None and k != kernel:
        raise Unsupported(f"kernel_shape {k} differs from the weight's {kernel}")
    dil = tuple(int(v) for v in attrs.get("dilations", (1,) * d))
    if any(v != 1 for v in dil):
        raise Unsupported(f"dilations {dil} (torchlean has no dilated {op.lower()})")
    strides = tuple(int(v) for v in attrs.get("strides", (1,) * d))
    pads = tuple(int(v) for v in attrs.get("pads", (0,) * (2 * d)))
    if auto_pad == "VALID":
        pads = (0,) * (2 * d)
    if pads[:d] != pads[d:]:
        raise Unsupported(f"asymmetric pads {pads} (begin and end padding must agree)")
    if int(attrs.get("ceil_mode", 0)):
        raise Unsupported("ceil_mode=1 (only floor output sizes)")
    return k, strides, pads[:d]


@handles("Conv", "ConvTranspose")
def _conv(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x, w = ctx.var(xs[0]), ctx.var(xs[1])
    d = w.ndim - 2
    if int(attrs.get("group", 1)) != 1:
        raise Unsupported(f"group={attrs['group']} (torchlean has no grouped convolution)")
    if x.ndim != d + 2:
        raise Unsupported(f"input {x.shape} is not (N, C, spatial x{d})")
    _, s, p = _spatial_attrs(node.op_type, attrs, d, tuple(w.shape[2:]))
    b = xs[2] if len(xs) > 2 else None
    if node.op_type == "Conv":
        if b is None:
            return [ctx.ops.conv_core(w, x, stride=s, padding=p)]
        return [ctx.ops.conv(w, ctx.var(b), x, stride=s, padding=p)]
    if "output_shape" in attrs:
        raise Unsupported("output_shape (give pads and output_padding instead)")
    op = tuple(int(v) for v in attrs.get("output_padding", (0,) * d))
    if b is None:
        return [ctx.ops.conv_transpose_core(w, x, stride=s, padding=p, output_padding=op)]
    return [ctx.ops.conv_transpose(w, ctx.var(b), x, stride=s, padding=p, output_padding=op)]


@handles("MaxPool", "AveragePool")
def _pool(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    d = x.ndim - 2
    if d not in (1, 2, 3):
        raise Unsupported(f"input {x.shape} is not (N, C, spatial x1..3)")
    k, s, p = _spatial_attrs(node.op_type, attrs, d, None)
    if node.op_type == "MaxPool":
        if len(node.output) > 1 and node.output[1]:
            raise Unsupported("the Indices output is not supported")
        if int(attrs.get("storage_order", 0)):
            raise Unsupported("storage_order=1")
        if any(pp > kk // 2 for pp, kk in zip(p, k, strict=True)):
            raise Unsupported(f"pads {p} larger than half the kernel {k}")
        return [ctx.ops.max_pool(x, kernel_size=k, stride=s, padding=p)]
    if any(p) and not int(attrs.get("count_include_pad", 0)):
        raise Unsupported("count_include_pad=0 with padding (torchlean's average pooling counts "
                          "padded cells in the divisor)")
    return [ctx.ops.avg_pool(x, kernel_size=k, stride=s, padding=p)]


@handles("GlobalAveragePool")
def _global_avg(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    if x.ndim < 3:
        raise Unsupported(f"input {x.shape} is not (N, C, spatial...)")
    lead = x.shape[:2]
    flat = reshape(ctx, x, lead + (int(np.prod(x.shape[2:], dtype=np.int64)),))
    return [reshape(ctx, ctx.ops.reduce_mean(flat, axis=2), lead + (1,) * (x.ndim - 2))]


@handles("BatchNormalization")
def _batch_norm(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    if int(attrs.get("training_mode", 0)) or any(o for o in node.output[1:]):
        raise Unsupported("training mode (only inference with the stored statistics)")
    x = ctx.var(xs[0])
    if x.ndim < 2:
        raise Unsupported(f"input {x.shape} has no channel axis")
    c = x.shape[1]
    per_channel = (c,) + (1,) * (x.ndim - 2)
    eps = float(attrs.get("epsilon", 1e-5))
    scale, bias, mean, var = (reshape(ctx, ctx.var(v), per_channel) for v in xs[1:5])
    inv_std = ctx.ops.inv(ctx.ops.sqrt(ctx.ops.add_scalar(var, c=eps)))
    centred = ctx.ops.sub(x, mean)
    return [ctx.ops.add(ctx.ops.mul(centred, ctx.ops.mul(inv_std, scale)), bias)]


@handles("LayerNormalization")
def _layer_norm(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    if any(o for o in node.output[1:]):
        raise Unsupported("the Mean / InvStdDev outputs are not supported")
    x = ctx.var(xs[0])
    axis = _axis("LayerNormalization", attrs.get("axis", -1), x.ndim)
    eps = float(attrs.get("epsilon", 1e-5))
    tail = x.shape[axis:]
    d = int(np.prod(tail, dtype=np.int64))
    gamma = ctx.var(xs[1])
    beta = ctx.var(xs[2]) if len(xs) > 2 and xs[2] is not None else \
        ctx.builder.const(np.zeros(tail, dtype=ctx.dtype))
    for name, v in (("Scale", gamma), ("B", beta)):
        if v.shape != tail and v.shape != (d,):
            raise Unsupported(f"{name} of shape {v.shape} is not the normalised shape {tail}")
    flat = reshape(ctx, x, x.shape[:axis] + (d,))
    out = ctx.ops.layer_norm(flat, reshape(ctx, gamma, (d,)), reshape(ctx, beta, (d,)), eps=eps)
    return [reshape(ctx, out, x.shape)]


@handles("Reshape")
def _reshape(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    spec = ctx.static(xs[1], "the target shape")
    return [reshape(ctx, x, _reshape_target("Reshape", x.shape, spec,
                                            int(attrs.get("allowzero", 0))))]


@handles("Flatten")
def _flatten(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    axis = int(attrs.get("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        raise Unsupported(f"axis {attrs.get('axis')} out of range for shape {x.shape}")
    lead = int(np.prod(x.shape[:axis], dtype=np.int64))
    return [reshape(ctx, x, (lead, int(np.prod(x.shape[axis:], dtype=np.int64))))]


@handles("Transpose")
def _transpose(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    perm = tuple(int(p) for p in attrs.get("perm", range(x.ndim - 1, -1, -1)))
    return [permute(ctx, x, perm)]


def _axes_arg(ctx: _Context, xs: list[Any], attrs: dict[str, Any], what: str) -> list[int] | None:
    if len(xs) > 1 and xs[1] is not None:
        return _ints(ctx.static(xs[1], what))
    return None if "axes" not in attrs else [int(a) for a in attrs["axes"]]


@handles("Unsqueeze")
def _unsqueeze(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    axes = _axes_arg(ctx, xs, attrs, "Unsqueeze axes") or []
    rank = x.ndim + len(axes)
    shape = list(x.shape)
    for a in sorted(_axis("Unsqueeze", a, rank) for a in axes):
        shape.insert(a, 1)
    return [reshape(ctx, x, shape)]


@handles("Squeeze")
def _squeeze(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    axes = _axes_arg(ctx, xs, attrs, "Squeeze axes")
    drop = {a for a in range(x.ndim) if x.shape[a] == 1} if axes is None else {
        _axis("Squeeze", a, x.ndim) for a in axes}
    if any(x.shape[a] != 1 for a in drop):
        raise Unsupported(f"cannot squeeze axes {sorted(drop)} of shape {x.shape}")
    return [reshape(ctx, x, [d for a, d in enumerate(x.shape) if a not in drop])]


@handles("Concat")
def _concat(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    parts = [ctx.var(x) for x in xs if x is not None and int(np.prod(x.shape)) > 0]
    if not parts:
        raise Unsupported("all inputs are empty")
    axis = _axis("Concat", attrs.get("axis", 0), parts[0].ndim)
    return [concat(ctx, parts, axis)]


@handles("Slice")
def _slice(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    if ctx.opset < 10:
        starts, ends, axes, steps = attrs.get("starts"), attrs.get("ends"), attrs.get("axes"), None
    else:
        opt = [None if k >= len(xs) or xs[k] is None else ctx.static(xs[k], "Slice " + name)
               for k, name in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps"))]
        starts, ends, axes, steps = opt
    out = x
    for axis, start, stop, step in _slice_params("Slice", x.shape, starts, ends, axes, steps):
        idx = np.arange(start, stop, step)
        if not len(idx):
            raise Unsupported(f"the slice of axis {axis} is empty")
        if step == 1:
            out = slice_axis(ctx, out, axis, start, len(idx))
        else:
            out = take(ctx, out, axis, idx)
    return [out]


@handles("Gather")
def _gather(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    idx = ctx.static(xs[1], "Gather indices").astype(np.int64)
    axis = _axis("Gather", attrs.get("axis", 0), x.ndim)
    n = x.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise Unsupported(f"indices outside [-{n}, {n}) for axis {axis} of shape {x.shape}")
    flat = np.where(idx < 0, idx + n, idx).reshape(-1)
    out = take(ctx, x, axis, flat)
    return [reshape(ctx, out, x.shape[:axis] + idx.shape + x.shape[axis + 1:])]


def _lookup(ctx: _Context, table: Value, ids: Var, attrs: dict[str, Any]) -> Var:
    """Rows of ``table`` picked by run-time integer ids (an embedding): the ``embedding``
    primitive, which gathers (a NaN in one row stays in that row's lookups) and whose table
    gradient is the scatter-add of the upstream rows. An id outside ``[0, n)`` is an
    ``IndexRangeError`` when the graph runs; ONNX's negative ids (counted from the end) are
    refused too, as torch's embedding refuses them."""
    data = ctx.var(table)
    if _axis("Gather", attrs.get("axis", 0), data.ndim) != 0:
        raise Unsupported("run-time indices are supported on axis 0 only (embedding lookups)")
    n = data.shape[0]
    rest = data.shape[1:]
    width = int(np.prod(rest, dtype=np.int64))
    rows = int(np.prod(ids.shape, dtype=np.int64))
    flat = reshape(ctx, ids, (rows,))
    picked = ctx.ops.embedding(reshape(ctx, data, (n, width)), flat)
    return reshape(ctx, picked, ids.shape + rest)


@handles("Split")
def _split(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    axis = _axis("Split", attrs.get("axis", 0), x.ndim)
    n = x.shape[axis]
    count = len(node.output)
    if len(xs) > 1 and xs[1] is not None:
        sizes = _ints(ctx.static(xs[1], "Split sizes"))
    elif "split" in attrs:
        sizes = [int(s) for s in attrs["split"]]
    else:
        parts = int(attrs.get("num_outputs", count))
        step = -(-n // parts)
        sizes = [min(step, n - k * step) for k in range(parts)]
    if sum(sizes) != n or any(s <= 0 for s in sizes):
        raise Unsupported(f"split sizes {sizes} do not partition axis {axis} of length {n}")
    outs, start = [], 0
    for s in sizes:
        outs.append(slice_axis(ctx, x, axis, start, s))
        start += s
    return outs


@handles("ReduceMean", "ReduceSum")
def _reduce(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    axes = _axes_arg(ctx, xs, attrs, f"{node.op_type} axes")
    keep = int(attrs.get("keepdims", 1))
    if not axes:
        if int(attrs.get("noop_with_empty_axes", 0)):
            return [x]
        axes = list(range(x.ndim))
    norm = sorted({_axis(node.op_type, a, x.ndim) for a in axes}, reverse=True)
    if node.op_type == "ReduceSum" and len(norm) == x.ndim and not keep:
        return [ctx.ops.sum(x)]
    prim = ctx.ops.reduce_mean if node.op_type == "ReduceMean" else ctx.ops.reduce_sum
    out = x
    for a in norm:  # last axis first, so the remaining axis numbers stay valid
        out = prim(out, axis=a)
    if keep:
        out = reshape(ctx, out, [1 if a in norm else d for a, d in enumerate(x.shape)])
    return [out]


@handles("Expand")
def _expand(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    target = tuple(_ints(ctx.static(xs[1], "Expand shape")))
    try:
        shape = tuple(np.broadcast_shapes(x.shape, target))
    except ValueError:
        raise Unsupported(f"{x.shape} does not broadcast with {target}") from None
    return [x if shape == x.shape else ctx.ops.broadcast_to(x, shape=shape)]


@handles("Cast")
def _cast(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    to = int(attrs["to"])
    if _FLOAT_ELEM.get(to) != ctx.dtype:
        raise Unsupported(f"cast of a graph tensor to {_ELEM_NAMES.get(to, to)} (the graph is "
                          f"{ctx.dtype.name})")
    return [xs[0]]


@handles("Elu", "Selu")
def _elu(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    if node.op_type == "Elu":
        alpha, gamma = float(attrs.get("alpha", 1.0)), 1.0
    else:
        alpha = float(attrs.get("alpha", 1.6732632423543772))
        gamma = float(attrs.get("gamma", 1.0507009873554805))
    # x for x > 0, alpha (exp(x) - 1) otherwise: relu(x) + alpha (exp(min(x, 0)) - 1).
    negative = ctx.ops.scale(ctx.ops.relu(ctx.ops.scale(x, c=-1.0)), c=-1.0)
    tail = ctx.ops.scale(ctx.ops.add_scalar(ctx.ops.exp(negative), c=-1.0), c=alpha)
    out = ctx.ops.add(ctx.ops.relu(x), tail)
    return [out if gamma == 1.0 else ctx.ops.scale(out, c=gamma)]


@handles("HardSigmoid", "HardSwish")
def _hard_sigmoid(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any
                  ) -> list[Value]:
    x = ctx.var(xs[0])
    alpha = float(attrs.get("alpha", 0.2 if node.op_type == "HardSigmoid" else 1.0 / 6.0))
    beta = float(attrs.get("beta", 0.5))
    gate = ctx.ops.clamp(ctx.ops.add_scalar(ctx.ops.scale(x, c=alpha), c=beta), lo=0.0, hi=1.0)
    return [gate if node.op_type == "HardSigmoid" else ctx.ops.mul(x, gate)]


@handles("PRelu")
def _prelu(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x, slope = ctx.var(xs[0]), ctx.var(xs[1])
    # relu(x) - slope relu(-x): x where positive, slope x elsewhere.
    negative_part = ctx.ops.relu(ctx.ops.scale(x, c=-1.0))
    return [ctx.ops.sub(ctx.ops.relu(x), ctx.ops.mul(slope, negative_part))]


@handles("Softsign")
def _softsign(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    return [ctx.ops.mul(x, ctx.ops.inv(ctx.ops.add_scalar(ctx.ops.abs(x), c=1.0)))]


@handles("Greater", "Less")
def _compare(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    a, b = ctx.var(xs[0]), ctx.var(xs[1])
    # A 0/1 float mask (zero derivative): a > b exactly when a - b > 0 (IEEE subtraction of
    # finite floats is exact in sign, thanks to gradual underflow).
    diff = ctx.ops.sub(a, b) if node.op_type == "Greater" else ctx.ops.sub(b, a)
    return [ctx.ops.positive_mask(diff)]


@handles("Not")
def _not(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    return [ctx.ops.add_scalar(ctx.ops.scale(ctx.var(xs[0]), c=-1.0), c=1.0)]


@handles("Where")
def _where(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    cond, a, b = xs
    shape = tuple(np.broadcast_shapes(cond.shape, a.shape, b.shape))
    va, vb = (ctx.var(v) for v in (a, b))
    va = va if va.shape == shape else ctx.ops.broadcast_to(va, shape=shape)
    vb = vb if vb.shape == shape else ctx.ops.broadcast_to(vb, shape=shape)
    if isinstance(cond, _Static):
        # Exact selection: gather each entry from a or b (no arithmetic, so inf and NaN in the
        # branch not taken cannot leak).
        n = int(np.prod(shape, dtype=np.int64))
        pick = np.where(np.broadcast_to(cond.array.astype(bool), shape).reshape(-1),
                        np.arange(n), n + np.arange(n))
        both = ctx.ops.concat_dim0(reshape(ctx, va, (n,)), reshape(ctx, vb, (n,)))
        return [reshape(ctx, ctx.ops.gather_vec_nat(both, idx=pick), shape)]
    # A mask computed by the graph (Greater / Less): a m + b (1 - m), exact for finite branches.
    m = ctx.var(cond)
    m = m if m.shape == shape else ctx.ops.broadcast_to(m, shape=shape)
    keep_b = ctx.ops.add_scalar(ctx.ops.scale(m, c=-1.0), c=1.0)
    return [ctx.ops.add(ctx.ops.mul(va, m), ctx.ops.mul(vb, keep_b))]


@handles("Pad")
def _pad(ctx: _Context, xs: list[Any], attrs: dict[str, Any], node: Any) -> list[Value]:
    x = ctx.var(xs[0])
    mode = attrs.get("mode", "constant")
    if mode != "constant":
        raise Unsupported(f"mode={mode!r} (only constant padding)")
    pads = _ints(ctx.static(xs[1], "Pad pads")) if len(xs) > 1 and xs[1] is not None \
        else [int(p) for p in attrs.get("pads", ())]
    value = 0.0
    if len(xs) > 2 and xs[2] is not None:
        value = float(np.asarray(ctx.static(xs[2], "Pad value")).reshape(-1)[0]) \
            if np.asarray(ctx.static(xs[2], "Pad value")).size else 0.0
    axes = list(range(x.ndim))
    if len(xs) > 3 and xs[3] is not None:
        axes = [_axis("Pad", a, x.ndim) for a in _ints(ctx.static(xs[3], "Pad axes"))]
    if len(pads) != 2 * len(axes):
        raise Unsupported(f"pads {pads} do not give a begin and an end for axes {axes}")
    out = x
    for k, axis in enumerate(axes):
        before, after = pads[k], pads[k + len(axes)]
        if before < 0 or after < 0:
            n = out.shape[axis]
            out = slice_axis(ctx, out, axis, max(-before, 0), n - max(-before, 0)
                             - max(-after, 0))
            before, after = max(before, 0), max(after, 0)
        if before or after:
            perm = _front(axis, out.ndim)
            moved = permute(ctx, out, perm)
            total = moved.shape[0] + before + after
            padded = ctx.ops.pad_range0(moved, start=before, total=total)
            out = permute(ctx, padded, inverse_perm(perm))
    if value != 0.0:
        # pad_range0 pads with zeros: add the value on the border (0 where the data lies).
        fill = np.full(out.shape, value, dtype=ctx.dtype)
        inner = [slice(None)] * out.ndim
        for k, axis in enumerate(axes):
            before, after = pads[k], pads[k + len(axes)]
            kept = x.shape[axis] - max(-before, 0) - max(-after, 0)
            inner[axis] = slice(max(before, 0), max(before, 0) + kept)
        fill[tuple(inner)] = 0.0
        out = ctx.ops.add(out, ctx.builder.const(fill))
    return [out]


IMPORTED_OPS: tuple[str, ...] = tuple(sorted(set(HANDLERS) | {"Constant", "Shape"}))
"""ONNX operators ``load`` translates (plus integer shape arithmetic folded at load time)."""


# ---------------------------------------------------------------------------------------------
# Reading the model.


def _read(source: Any) -> Any:
    """The checked ``ModelProto`` and its label (``files.read_model`` reads it as hostile)."""
    onnx = require_onnx()
    model, label = read_model(source)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OnnxError(f"onnx load: {label} is not a valid ONNX model: {first}") from None
    return model, label


def _attrs(node: Any) -> dict[str, Any]:
    onnx = require_onnx()
    out: dict[str, Any] = {}
    for a in node.attribute:
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, onnx.TensorProto):
            limits.check_tensor(value, f"attribute {a.name!r}")  # before allocating
            value = onnx.numpy_helper.to_array(value)
        elif isinstance(value, bytes):
            try:
                value = value.decode()
            except UnicodeDecodeError:
                raise Unsupported(f"attribute {a.name!r} is not UTF-8 text") from None
        out[a.name] = value
    return out


def _constant(node: Any, attrs: dict[str, Any]) -> np.ndarray:
    if "value" in attrs:
        return np.asarray(attrs["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise Unsupported(f"Constant with attributes {sorted(attrs)} (only dense values)")


def _input_shapes(graph: Any, inputs: list[Any], given: Any, label: str
                  ) -> tuple[list[tuple[int, ...]], np.dtype]:
    """Concrete input shapes and the graph dtype, or one error naming every bad input."""
    names = [i.name for i in inputs]
    if given is None:
        given_map: dict[str, Any] = {}
    elif isinstance(given, dict):
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise OnnxError(f"onnx load: {label}: input_shapes names {unknown}, the model's "
                            f"inputs are {names}")
        given_map = dict(given)
    else:
        if not isinstance(given, list | tuple):
            raise OnnxError(f"onnx load: {label}: input_shapes must be a dict (input name -> "
                            f"shape) or a list of shapes, found {type(given).__name__}")
        shapes = list(given)
        if len(shapes) != len(names):
            raise OnnxError(f"onnx load: {label}: {len(shapes)} input shapes for "
                            f"{len(names)} inputs {names}")
        given_map = dict(zip(names, shapes, strict=True))
    problems: list[tuple[str, str, str]] = []
    shapes_out: list[tuple[int, ...]] = []
    dtypes: set[np.dtype] = set()
    for inp in inputs:
        t = inp.type.tensor_type
        elem = t.elem_type
        if elem not in _FLOAT_ELEM and elem not in _INDEX_ELEM:
            problems.append((inp.name, "graph input", f"element type "
                             f"{_ELEM_NAMES.get(elem, elem)} (only FLOAT, DOUBLE, or INT32/INT64 "
                             "indices)"))
            continue
        if elem in _FLOAT_ELEM:
            dtypes.add(_FLOAT_ELEM[elem])
        if inp.name in given_map:
            shapes_out.append(as_shape(f"onnx load: input_shapes[{inp.name!r}]",
                                       given_map[inp.name]))
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if not t.HasField("shape") or any(d is None or d <= 0 for d in dims):
            shown = [d.dim_param or "?" if not d.HasField("dim_value") else d.dim_value
                     for d in t.shape.dim]
            problems.append((inp.name, "graph input", f"dynamic shape {shown}: pass a concrete "
                             f"shape with input_shapes={{{inp.name!r}: (...)}}"))
            continue
        shapes_out.append(tuple(int(d) for d in dims if d is not None))
    if len(dtypes) > 1:
        problems.append(("<inputs>", "graph input", "inputs mix FLOAT and DOUBLE"))
    if problems:
        raise UnsupportedOnnxError(f"onnx load: {label}", problems)
    dtype: np.dtype = dtypes.pop() if dtypes else np.dtype(np.float32)
    return shapes_out, dtype


class _Translator:
    """Runs the ONNX nodes on a graph builder; collects every problem before failing."""

    def __init__(self, model: Any, label: str, ctx: _Context) -> None:
        self.model = model
        self.label = label
        self.ctx = ctx
        self.problems: list[tuple[str, str, str]] = []
        self.functions = {(f.domain, f.name): f for f in model.functions}
        # ONNX value names holding integers computed at run time (index inputs and their
        # reshapes): only Gather (as indices), Cast and reshapes may read them.
        self.int_names: set[str] = set()
        self._calls: dict[str, tuple[str, dict[str, Any]]] | None = None
        self.depth = 0  # model-local functions being inlined

    @property
    def calls(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """The torchlean primitive calls recorded in the metadata, decoded (within
        ``limits``) the first time a ``torchlean`` function node asks for them."""
        if self._calls is None:
            text = next((p.value for p in self.model.metadata_props
                         if p.key == codec.METADATA_KEY), None)
            self._calls = {} if text is None else codec.loads(text)
        return self._calls

    def run_nodes(self, nodes: Any, env: dict[str, Any], where: str = "") -> None:
        onnx = require_onnx()
        for k, node in enumerate(nodes):
            name = where + (node.name or f"{node.op_type}_{k}")
            try:
                ins = [None if not i else env[i] for i in node.input]
            except KeyError as exc:
                raise OnnxError(f"onnx load: {self.label}: node {name} ({node.op_type}) reads "
                                f"{exc.args[0]!r}, which no earlier node or input defines"
                                ) from None
            if any(v is _BAD for v in ins):
                # Consequences of an earlier problem are not reported again, but an operator
                # that could never be imported is, so one run lists every unknown operator.
                if not self.knows(node):
                    self.problems.append((name, node.op_type, "no importer for this operator"))
                outs: list[Any] = [_BAD] * len(node.output)
            else:
                try:
                    outs = self.node(node, ins, name)
                except Unsupported as exc:
                    self.problems.append((name, node.op_type, exc.reason))
                    outs = [_BAD] * len(node.output)
                except OnnxLimitError as exc:  # the file asks for too much: stop here
                    raise OnnxLimitError(f"onnx load: {self.label}: node {name} "
                                         f"({node.op_type}): {exc}") from None
                except (TorchLeanError, onnx.onnx_cpp2py_export.checker.ValidationError,
                        ValueError) as exc:
                    self.problems.append((name, node.op_type, _first_line(exc)))
                    outs = [_BAD] * len(node.output)
                except (ArithmeticError, TypeError, LookupError, MemoryError) as exc:
                    # A hostile node's attributes reaching NumPy or a primitive: its problem.
                    self.problems.append((name, node.op_type,
                                          f"{type(exc).__name__}: {_first_line(exc)}"))
                    outs = [_BAD] * len(node.output)
            for o, v in zip(node.output, outs, strict=False):
                if o:
                    env[o] = v

    def node(self, node: Any, ins: list[Any], name: str) -> list[Any]:
        attrs = _attrs(node)
        op = node.op_type
        key = (node.domain, op)
        if key in self.functions:
            return self.function(node, ins, name)
        if node.domain not in ("", "ai.onnx"):
            raise Unsupported(f"operator domain {node.domain!r} is not supported")
        if op == "Constant":
            return [_Static(_constant(node, attrs))]
        if op == "Shape":
            shape = ins[0].shape
            start, end = int(attrs.get("start", 0)), attrs.get("end")
            return [_Static(np.array(shape[start:None if end is None else int(end)],
                                     dtype=np.int64))]
        if any(i in self.int_names for i in node.input if i):
            return self.index_node(node, ins, attrs)
        if (op == "Cast" and int(attrs.get("to", 0)) in _INDEX_ELEM and ins
                and not isinstance(ins[0], _Static)):
            # A float graph tensor cast to integers (torchlean's export of ``embedding``): its
            # values travel on as ids; the lookup refuses non-integers where Cast truncates.
            self.int_names.update(o for o in node.output if o)
            return [ins[0]]
        statics = [v for v in ins if v is not None]
        if op in _STATIC and all(isinstance(v, _Static) and v.param is None for v in statics):
            args = [v.array if v is not None else None for v in ins]
            while args and args[-1] is None:
                args.pop()
            limits.check_fold(op, name, args, attrs)  # before allocating the result
            try:
                return [_Static(a) for a in _STATIC[op](*args, **attrs)]
            except (TypeError, ValueError, IndexError) as exc:
                raise Unsupported(f"cannot evaluate on the constant inputs: {exc}") from None
        handler = HANDLERS.get(op)
        if handler is None:
            raise Unsupported("no importer for this operator")
        outs = handler(self.ctx, ins, attrs, node)
        for o in outs:
            if isinstance(o, Var) and o.dtype != self.ctx.dtype:
                raise Unsupported(f"result dtype {o.dtype}")
        return outs

    def knows(self, node: Any) -> bool:
        """Whether some input could make this node importable (its operator is known)."""
        if (node.domain, node.op_type) in self.functions:
            return True
        return node.domain in ("", "ai.onnx") and (
            node.op_type in HANDLERS or node.op_type in _STATIC
            or node.op_type in ("Constant", "Shape"))

    def index_node(self, node: Any, ins: list[Any], attrs: dict[str, Any]) -> list[Any]:
        """A node reading run-time integers: an embedding lookup, a cast or a reshape."""
        op = node.op_type
        positions = [k for k, i in enumerate(node.input) if i in self.int_names]
        if op == "Gather" and positions == [1]:
            return [_lookup(self.ctx, ins[0], ins[1], attrs)]
        if op == "Cast" and int(attrs["to"]) in _INDEX_ELEM:
            self.int_names.update(o for o in node.output if o)
            return [ins[0]]
        if op == "Cast":
            return _cast(self.ctx, ins, attrs, node)
        if op in ("Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten") and positions == [0]:
            self.int_names.update(o for o in node.output if o)
            return HANDLERS[op](self.ctx, ins, attrs, node)
        raise Unsupported(f"reads the run-time integer tensor {node.input[positions[0]]!r}; "
                          "integer inputs may only be Gather indices (embedding lookups), cast "
                          "or reshaped")

    def function(self, node: Any, ins: list[Any], name: str) -> list[Any]:
        """A model-local function: torchlean's own primitive calls are recorded as that
        primitive; any other function is inlined (its body run on the actual arguments)."""
        call = self.calls.get(node.op_type) if node.domain == codec.DOMAIN else None
        if call is not None:
            prim_name, attrs = call
            prim = REGISTRY.get(prim_name)
            if prim is None:
                raise Unsupported(f"torchlean primitive {prim_name!r} is not registered here")
            args = [self.ctx.var(v) for v in ins]
            try:
                return [getattr(self.ctx.ops, prim.name)(*args, **attrs)]
            except ShapeError as exc:
                raise Unsupported(str(exc)) from None
        fn = self.functions[(node.domain, node.op_type)]
        if fn.attribute or list(getattr(fn, "attribute_proto", [])):
            raise Unsupported("functions with attributes are not inlined")
        if self.depth >= limits.MAX_FUNCTION_DEPTH:
            raise OnnxLimitError(f"model-local functions nest more than "
                                 f"{limits.MAX_FUNCTION_DEPTH} deep (a function calling itself?)")
        env = dict(zip(fn.input, ins, strict=False))
        self.depth += 1
        try:
            self.run_nodes(fn.node, env, where=f"{name}/")
        finally:
            self.depth -= 1
        return [env.get(o, _BAD) for o in fn.output]


class OnnxModel(Compiled):
    """An ONNX model as a compiled torchlean graph.

    ``input_names`` / ``output_names`` are the ONNX ones, ``input_shapes`` the inputs' shapes;
    ``index_inputs`` the positions of INT32/INT64 inputs (token ids: float leaves of the graph
    without gradients, read only by embedding lookups, casts and reshapes);
    ``parameters`` maps each float
    initialiser used as a tensor to its ``Param`` (``requires_grad=False`` for batch-norm running
    statistics), in the order ``vjp`` / ``backward`` return their gradients (after the inputs).
    ``run(*xs)`` returns every output; the ``Compiled`` methods need a single output.
    """

    def __init__(self, model: Any, label: str = "<model>", input_shapes: Any = None) -> None:
        graph = model.graph
        initialisers = {t.name: t for t in graph.initializer}
        inputs = [i for i in graph.input if i.name not in initialisers]
        shapes, dtype = _input_shapes(graph, inputs, input_shapes, label)
        opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")],
                    default=17)
        frozen = {n.input[k] for n in graph.node if n.op_type == "BatchNormalization"
                  for k in (3, 4) if len(n.input) > k}
        self.label = label
        self.input_names = [i.name for i in inputs]
        self.input_shapes: list[tuple[int, ...]] = list(shapes)
        self.output_names = [o.name for o in graph.output]
        self.opset = opset
        self.proto = model
        holder: dict[str, Any] = {}
        index = {i.name for i in inputs if i.type.tensor_type.elem_type in _INDEX_ELEM}
        self.index_inputs = [k for k, name in enumerate(self.input_names) if name in index]

        def build(*leaves: Var) -> Any:
            onnx = require_onnx()
            owner = leaves[0].owner if leaves else _no_inputs(label)
            assert isinstance(owner, GraphBuilder)  # trace() hands graph variables
            ctx = _Context(owner, dtype, opset, frozen)
            holder["ctx"] = ctx
            env: dict[str, Any] = dict(zip(self.input_names, leaves, strict=True))
            for name, tensor in initialisers.items():
                limits.check_tensor(tensor, f"onnx load: {label}: initialiser")
                array = onnx.numpy_helper.to_array(tensor)
                is_float = array.dtype.kind == "f"
                env[name] = _Static(array, param=name if is_float else None)
            translator = _Translator(model, label, ctx)
            translator.int_names.update(index)
            translator.run_nodes(graph.node, env)
            for out in self.output_names:
                if out not in env:
                    raise OnnxError(f"onnx load: {label}: output {out!r} is never computed")
            if translator.problems:
                raise UnsupportedOnnxError(f"onnx load: {label}", translator.problems)
            results = []
            for out in self.output_names:
                try:
                    results.append(ctx.var(env[out]))
                except Unsupported as exc:
                    raise UnsupportedOnnxError(f"onnx load: {label}",
                                               [(out, "graph output", exc.reason)]) from None
            return tuple(results) if len(results) > 1 else results[0]

        if not shapes:
            raise OnnxError(f"onnx load: {label}: the model has no tensor inputs")
        if not self.output_names:
            raise OnnxError(f"onnx load: {label}: the model has no outputs")
        wrt = [k for k in range(len(shapes)) if k not in self.index_inputs]
        super().__init__(build, shapes, dtype, wrt=wrt)
        self.parameters: dict[str, Param] = {p.name: p for p in self.graph.params}

    @property
    def param_names(self) -> list[str]:
        return [p.name for p in self.graph.params]

    def run(self, *xs: Any) -> list[Any]:
        """Every output of the model for inputs ``xs`` (one per ONNX input, in order)."""
        g = self.graph
        values = g.evaluate(g.check_inputs("run", self._full(xs)))
        return [values[o] for o in g.outputs]

    def as_module(self) -> OnnxModule:
        """This model as an ``nn.Module`` sharing its ``Param``s, for APIs that take modules
        (``fit``, ``verify.check_model``, sessions): calling it replays the graph's primitives on
        the caller's refs (other batch sizes load the file again for their shapes)."""
        return OnnxModule(self)

    def __repr__(self) -> str:
        return (f"OnnxModel({self.label!r}, inputs={self.input_names}, "
                f"outputs={self.output_names}, nodes={len(self.graph)}, "
                f"parameters={len(self.graph.params)})")


def _plan_of(model: OnnxModel) -> dict[str, Any]:
    """The loaded graph as plain data: steps (kind, primitive name, parents, attributes),
    constants, input/output ids and the parameter names in input order."""
    graph = model.graph
    steps = [(node.kind, node.op.name if node.op is not None else "", node.parents,
              dict(node.attrs)) for node in graph.nodes]
    return {"steps": steps, "consts": dict(graph.consts), "inputs": list(graph.inputs),
            "outputs": list(graph.outputs), "n": len(graph.inputs) - len(graph.params),
            "params": [p.name for p in graph.params]}


class OnnxModule(Module):
    """An ``OnnxModel``'s graph as a module (see ``OnnxModel.as_module``); its parameters are
    named as the ONNX initialisers.

    It holds the graph as plain data (primitive names, parents, attributes, constants), so a deep
    copy (``verify``'s float64 twin) copies arrays, never primitives; constants follow the dtype
    of the refs it is called on, and parameters are looked up by name in ``_parameters`` on every
    call, so replacing one (as that twin does) takes effect. Called with input shapes other than
    the loaded ones (another batch size), it loads the ONNX file again for those shapes (once per
    shape), which works when the file does not bake the old shapes into its constants.
    """

    def __init__(self, model: OnnxModel) -> None:
        super().__init__()
        object.__setattr__(self, "_names", list(model.input_names))
        object.__setattr__(self, "_proto", model.proto.SerializeToString())
        object.__setattr__(self, "_plans", {tuple(model.input_shapes): _plan_of(model)})
        for p in model.graph.params:
            self._parameters[p.name] = p

    def _plan(self, shapes: tuple[tuple[int, ...], ...]) -> dict[str, Any]:
        plans = self.__dict__["_plans"]
        plan = plans.get(shapes)
        if plan is None:
            names = self.__dict__["_names"]
            try:
                variant = load(self.__dict__["_proto"], dict(zip(names, shapes, strict=True)))
            except TorchLeanError as exc:
                loaded = next(iter(plans))
                raise ShapeError(f"onnx module: inputs of shapes {list(shapes)} do not fit this "
                                 f"model (loaded for {list(loaded)}): {exc}") from None
            plan = plans[shapes] = _plan_of(variant)
            missing = set(plan["params"]) - set(self._parameters)
            if missing:
                raise ShapeError(f"onnx module: the model for inputs {list(shapes)} uses "
                                 f"initialisers {sorted(missing)} the loaded one does not")
        return plan

    def forward(self, *xs: Any) -> Any:
        names = self.__dict__["_names"]
        if len(xs) != len(names):
            raise ShapeError(f"onnx module: takes {len(names)} inputs {names}, found {len(xs)}")
        plan = self._plan(tuple(tuple(int(d) for d in np.shape(x)) if not hasattr(x, "shape")
                                else tuple(x.shape) for x in xs))
        n = plan["n"]
        owner = F.owner_of(xs)
        dtype = next((x.dtype for x in xs if hasattr(x, "dtype") and
                      np.dtype(x.dtype).kind == "f"), None)
        values: list[Any] = [None] * len(plan["steps"])
        for k, i in enumerate(plan["inputs"]):
            if k < n:
                values[i] = xs[k]
            else:
                param = self._parameters[plan["params"][k - n]]
                values[i] = param.array if owner is None else owner.use(param)
        for i, (kind, name, parents, attrs) in enumerate(plan["steps"]):
            if kind == "const":
                const = plan["consts"][i]
                values[i] = const if dtype is None else np.asarray(const).astype(dtype)
            elif kind == "op":
                values[i] = F.apply(REGISTRY[name], *[values[p] for p in parents], **attrs)
        outs = [values[o] for o in plan["outputs"]]
        return outs[0] if len(outs) == 1 else tuple(outs)


def _no_inputs(label: str) -> Any:
    raise OnnxError(f"onnx load: {label}: the model has no tensor inputs")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load(source: Any, input_shapes: Any = None) -> OnnxModel:
    """See ``torchlean.onnx.load``. Whatever the file holds, the only exceptions are
    ``TorchLeanError`` subclasses (``OnnxError``, ``OnnxLimitError``, ...)."""
    model, label = _read(source)
    try:
        return OnnxModel(model, label, input_shapes)
    except TorchLeanError:
        raise
    except RecursionError:
        raise OnnxLimitError(f"onnx load: {label}: the model nests too deeply to import"
                             ) from None
    except MemoryError:
        raise OnnxLimitError(f"onnx load: {label}: importing the model ran out of memory"
                             ) from None
    except Exception as exc:  # a hostile file reaching a path no check above foresaw
        raise OnnxError(f"onnx load: {label}: cannot import the model ({type(exc).__name__}: "
                        f"{_first_line(exc)})") from None
