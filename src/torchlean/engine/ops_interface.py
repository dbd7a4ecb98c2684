"""``F``: the backend-generic op namespace (TorchLean's Ops interface) and the derived ops.

The same user function runs on eager session refs and on graph variables: ``F.relu(x)`` finds
the one owner of its refs (``owner_of``: the single ownership check) and asks it to record the
``relu`` primitive. Owners implement the ``Owner`` protocol below: a session's eager or compiled
backend, or a graph builder. With plain arrays and no ref at all, ``F.relu(array)`` simply computes
the value, with inputs converted and checked as the tape checks them (no autodiff).

There is one function here per registered primitive that takes inputs, generated from the
registry (nullary primitives such as ``rand_uniform`` need an owner to draw from: use
``Session.rand_uniform``), plus derived ops built only from primitives (silu,
global_avg_pool2d, cross_entropy, nll, mean, the torch-style ``cat``, ``sum_dims``, ...): they
have no rules of their own, so their derivatives are whatever the primitives' rules compose to.
(``gelu`` was one of those; it is a primitive now, whose ``approximate="tanh"`` default is the
old derived op, bit for bit.)

``Ref`` is the base of every recorded value (session refs, graph variables, ``tl.Tensor``); it
gives them the Python operators ``+ - * / @ **``, NumPy/PyTorch indexing, and torch-style
methods (``sum(dim=, keepdim=)``, ``reshape(-1)``, ``permute``, ``softmax(dim)``, ...), all
compositions of primitives, so the same code runs eager, traced or define-by-run.
"""

from __future__ import annotations

import builtins  # F defines max, min, sum and abs as primitives: builtins are named
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from .. import ops as _ops  # noqa: F401  (registers every primitive)
from ..core.backend import device_of, namespace_of, operand_arrays, to_host
from ..core.errors import (
    DTypeError,
    ShapeError,
    SignatureError,
    TraceError,
    device_mismatch,
)
from ..core.kernels import device_kernel_check
from ..core.registry import REGISTRY, Primitive
from ..core.registry import get as get_primitive
from ..core.shape import as_shape
from ..ops.general import inverse_perm
from ..ops.take import normalize_index


class Owner(Protocol):
    """What records refs: a session backend (eager tape or compiled graph) or a graph builder.

    ``record`` is called with refs the caller has already checked belong to this owner (F does
    it once per op, in ``owner_of``); the owner checks shapes and attributes (the primitive's
    shape rule) and appends one node. The other methods are what layers ask of an owner.
    """

    def record(self, prim: Primitive, refs: Sequence[Ref], attrs: dict[str, Any]) -> Ref:
        """Record one primitive over ``refs`` with static attributes ``attrs``."""
        ...

    def const(self, array: Any) -> Ref:
        """A constant leaf (no gradient)."""
        ...

    def use(self, param: Any) -> Ref:
        """A ``Param`` as a leaf of this pass (the same ref if used twice)."""
        ...

    def value(self, ref: Ref) -> Any:
        """The value of ``ref`` (a graph builder, which has none while tracing, raises)."""
        ...

    def dropout(self, x: Ref, p: float, training: bool = True) -> Ref:
        """Inverted dropout of ``x`` (a graph builder refuses a random mask while tracing)."""
        ...


class RecordingOps:
    """The Ops interpreter that records on an owner: ``ops.mul(a, b)`` asks the owner to record
    a ``mul``. VJP rules run on it record the backward pass itself (graph nodes for a graph
    builder, tensors with a history for ``tl.Tensor``), so it can be differentiated again."""

    def __init__(self, owner: Owner, name: str) -> None:
        self._owner = owner
        self.name = name

    def __getattr__(self, name: str) -> Callable[..., Any]:
        prim = REGISTRY.get(name)
        if prim is None:
            raise AttributeError(f"no primitive named {name!r} is registered")
        owner = self._owner

        def record(*inputs: Any, **attrs: Any) -> Any:  # the owner's kind of ref
            return owner.record(prim, inputs, attrs)

        setattr(self, name, record)  # cache: later lookups skip __getattr__
        return record


class Ref:
    """A value recorded by an owner (see ``Owner``). Subclasses set the slots."""

    __slots__ = ("_owner", "_id", "shape", "dtype")
    __array_priority__ = 1000  # so ndarray + ref defers to Ref.__radd__

    def __init__(self, owner: Any, node_id: int, shape: tuple[int, ...], dtype: Any) -> None:
        self._owner = owner
        self._id = node_id
        self.shape = shape
        self.dtype = dtype

    @property
    def id(self) -> int:
        return self._id

    @property
    def owner(self) -> Owner:
        """The session backend or graph builder that recorded this value."""
        return self._owner  # type: ignore[no-any-return]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self._id}, shape={self.shape}, dtype={self.dtype})"

    # Python control flow on traced values cannot be recorded: say so, and what to do instead.
    def __bool__(self) -> bool:
        raise TraceError(
            "a traced value was used in Python control flow (if/while/and/or/bool()); its value "
            "is not known while tracing. Use ops instead (F.max, F.min, F.clamp, masks from "
            "comparisons you compute outside the function), or trace one graph per branch."
        )

    def __float__(self) -> float:
        raise TraceError("float() of a traced value: read values after running, e.g. s.value(ref)")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TraceError("a traced value cannot become a NumPy array inside the traced function; "
                         "use F.* ops on it, and read values after running")

    def __len__(self) -> int:
        if not self.shape:
            raise ShapeError("len() of a scalar ref")
        return self.shape[0]

    # --- arithmetic --------------------------------------------------------------------------
    def __add__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return _op("add_scalar", (self,), c=float(other))
        return _op("add", (self, other))

    def __radd__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return _op("add_scalar", (self,), c=float(other))
        return _op("add", (other, self))

    def __sub__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return _op("add_scalar", (self,), c=-float(other))
        return _op("sub", (self, other))

    def __rsub__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return _op("add_scalar", (_op("scale", (self,), c=-1.0),), c=float(other))
        return _op("sub", (other, self))

    def __mul__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return _op("scale", (self,), c=float(other))
        return _op("mul", (self, other))

    def __rmul__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return _op("scale", (self,), c=float(other))
        return _op("mul", (other, self))

    def __truediv__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return _op("scale", (self,), c=1.0 / float(other))
        return _op("mul", (self, _op("inv", (other,))))

    def __rtruediv__(self, other: Any) -> Ref:
        inverse = _op("inv", (self,))
        if _is_scalar(other):
            return _op("scale", (inverse,), c=float(other))
        return _op("mul", (other, inverse))

    def __neg__(self) -> Ref:
        return _op("scale", (self,), c=-1.0)

    def __pos__(self) -> Ref:
        return self

    def __pow__(self, exponent: Any) -> Ref:
        return power(self, exponent)

    def __matmul__(self, other: Any) -> Ref:
        return matmul_any(self, other)

    def __rmatmul__(self, other: Any) -> Ref:
        return matmul_any(other, self)

    @property
    def T(self) -> Ref:  # noqa: N802  (PyTorch's name)
        if self.ndim != 2:
            raise ShapeError(f"T: needs a 2-D ref, found shape {self.shape}")
        return apply("transpose2d", self)

    def __getitem__(self, index: Any) -> Ref:
        """Indexing as in NumPy and PyTorch. ``x[i]`` and ``x[a:b]`` on axis 0 record the
        Fin-checked gathers and ``slice_range0``; anything else (several axes, steps, ``None``,
        ``...``, integer or boolean index arrays and tensors) records ``take``."""
        if not self.shape:
            raise ShapeError(f"indexing: a scalar ref (shape ()) has no axis 0 to index, found "
                             f"index {index!r}")
        if isinstance(index, int | np.integer) and not isinstance(index, bool):
            n = self.shape[0]
            i = int(index) + n if index < 0 else int(index)
            if self.ndim == 1:
                return apply("gather_scalar", self, i=i)
            if self.ndim == 2:
                return apply("gather_row", self, i=i)
            return apply("reshape", apply("slice_range0", self, start=i, length=1),
                         shape=self.shape[1:])
        if isinstance(index, slice) and index.step in (None, 1):
            start, stop, _ = index.indices(self.shape[0])
            return apply("slice_range0", self, start=start, length=builtins.max(stop - start, 0))
        return apply("take", self, index=normalize_index("indexing", _index_values(index),
                                                          self.shape))

    # --- torch-style methods: compositions of primitives, for every kind of ref ---------------

    def reshape(self, *shape: Any) -> Ref:
        """The same entries in a new shape; one dimension may be -1 (inferred)."""
        return reshape(self, _shape_arg(shape))

    view = reshape

    def sum(self, dim: Any = None, keepdim: bool = False) -> Ref:
        return sum_dims(self, dim, keepdim)

    def mean(self, dim: Any = None, keepdim: bool = False) -> Ref:
        return mean_dims(self, dim, keepdim)

    def amax(self, dim: Any = None, keepdim: bool = False) -> Ref:
        return amax(self, dim, keepdim)

    def amin(self, dim: Any = None, keepdim: bool = False) -> Ref:
        return amin(self, dim, keepdim)

    def max(self, dim: Any = None, keepdim: bool = False) -> Any:
        """The largest entry, or ``(values, indices)`` along ``dim`` (indices need values, so
        traced graphs use ``amax``). Ties share the gradient equally, as ``F.max`` does."""
        return _extremum(self, dim, keepdim, largest=True)

    def min(self, dim: Any = None, keepdim: bool = False) -> Any:
        return _extremum(self, dim, keepdim, largest=False)

    def softmax(self, dim: int) -> Ref:
        return softmax_dim(self, dim)

    def log_softmax(self, dim: int) -> Ref:
        return log_softmax_dim(self, dim)

    def permute(self, *dims: Any) -> Ref:
        perm = dims[0] if len(dims) == 1 and not isinstance(dims[0], int | np.integer) else dims
        return apply("permute", self, perm=tuple(_axis("permute", d, self.ndim) for d in perm))

    def transpose(self, dim0: int, dim1: int) -> Ref:
        return transpose(self, dim0, dim1)

    def t(self) -> Ref:
        return self.T

    def unsqueeze(self, dim: int) -> Ref:
        return unsqueeze(self, dim)

    def squeeze(self, dim: int | None = None) -> Ref:
        return squeeze(self, dim)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Ref:
        return flatten_dims(self, start_dim, end_dim)

    def relu(self) -> Ref:
        return apply("relu", self)

    def exp(self) -> Ref:
        return apply("exp", self)

    def log(self) -> Ref:
        return apply("log", self)

    def tanh(self) -> Ref:
        return apply("tanh", self)

    def sigmoid(self) -> Ref:
        return apply("sigmoid", self)

    def sqrt(self) -> Ref:
        return apply("sqrt", self)

    def abs(self) -> Ref:
        return apply("abs", self)

    def square(self) -> Ref:
        return apply("square", self)

    def pow(self, exponent: Any) -> Ref:
        return power(self, exponent)

    def clamp(self, min: float | None = None, max: float | None = None) -> Ref:  # noqa: A002
        lo = -math.inf if min is None else float(min)
        hi = math.inf if max is None else float(max)
        return apply("clamp", self, lo=lo, hi=hi)

    def matmul(self, other: Any) -> Ref:
        return matmul_any(self, other)


class NatRef:
    """A non-differentiable integer input (an index or index vector) for the ``*_nat`` gathers.

    Made by ``Session.nat`` / ``Session.nat_vec``; an attribute, not a recorded value.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"NatRef({self.value!r})"


def _is_scalar(x: Any) -> bool:
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


def owner_of(args: Any) -> Owner | None:
    """The owner shared by the refs among ``args`` (None when there are none): the one place
    ownership is checked per op."""
    owner = None
    for a in args:
        if isinstance(a, Ref):
            if owner is None:
                owner = a._owner
            elif a._owner is not owner:
                raise TraceError("refs from two different sessions or graphs were mixed in one op")
    return owner


def apply(name: str | Primitive, *inputs: Any, **attrs: Any) -> Any:
    """Apply a primitive to refs (recorded by their owner) or to plain arrays (computed now).

    The number of inputs and the attributes are checked (defaults filled) before anything is
    recorded or computed."""
    prim = name if isinstance(name, Primitive) else get_primitive(name)
    if len(inputs) != len(prim.inputs):
        raise SignatureError(f"{prim.name}: expected {len(prim.inputs)} tensor inputs "
                             f"{list(prim.inputs)}, found {len(inputs)}")
    if prim.attrs:
        attrs = prim.bind_attrs((), attrs)
    elif attrs:
        prim.split_call(inputs, attrs)  # raises, naming the unexpected attributes
    return _apply_bound(prim, inputs, attrs)


def _op(name: str, inputs: tuple[Any, ...], **attrs: Any) -> Any:
    """The Python operators' path: their primitives and attributes are fixed and well formed,
    so no lookup by name through ``get`` and no attribute binding (the per-op hot path of
    define-by-run tensors and traced code)."""
    return _apply_bound(REGISTRY[name], inputs, attrs)


def _apply_bound(prim: Primitive, inputs: Sequence[Any], attrs: dict[str, Any]) -> Any:
    owner = None
    all_refs = True
    for x in inputs:  # owner_of, inlined: the one ownership check of the op
        if isinstance(x, Ref):
            if owner is None:
                owner = x._owner
            elif x._owner is not owner:
                raise TraceError("refs from two different sessions or graphs were mixed in one op")
        else:
            all_refs = False
    for v in attrs.values():
        if isinstance(v, NatRef):  # integer inputs travel as plain attribute values
            attrs = {k: w.value if isinstance(w, NatRef) else w for k, w in attrs.items()}
            break
    if all_refs and owner is not None:
        return owner.record(prim, inputs, attrs)  # every owner checks attributes and shapes
    attrs = prim.check_attrs(attrs)  # kinds checked and normalised before anything else
    if owner is None:
        xp = _plain_namespace(prim, inputs)
        arrays = operand_arrays(prim.name, inputs, xp)
        prim.infer(*[a.shape for a in arrays], **attrs)
        return prim.forward(*arrays, **attrs)
    # Arrays among the inputs become const leaves of the owner: check the op's shape rule first,
    # so a failing call leaves no orphan constants behind (nothing changes when a check fails).
    shapes = [x.shape if isinstance(x, Ref) else _data_shape(prim.name, x) for x in inputs]
    prim.infer(*shapes, **attrs)
    refs = [x if isinstance(x, Ref) else owner.const(x) for x in inputs]
    return owner.record(prim, refs, attrs)


def _plain_namespace(prim: Primitive, inputs: Sequence[Any]) -> Any:
    """The namespace an op on plain arrays runs in: that of its device arrays (all on one
    device; a host NumPy array among them is a ``DeviceError``, as PyTorch refuses to mix
    devices: Python numbers and lists are uploaded), else NumPy. On a device the op must have
    a device kernel (``registry.check_device_kernel``)."""
    xp: Any = np
    for x in inputs:
        if type(x) is np.ndarray:
            continue
        src = namespace_of(x)
        if src is not np:
            if xp is not np and src is not xp:
                raise device_mismatch(prim.name, device_of(src), device_of(xp))
            xp = src
    if xp is np:
        return xp
    for x in inputs:
        if isinstance(x, np.ndarray):
            raise device_mismatch(prim.name, "cpu", device_of(xp), "a NumPy array")
    check = device_kernel_check(xp)
    if check is not None:
        check(prim, xp)
    return xp


def _data_shape(op: str, x: Any) -> tuple[int, ...]:
    if hasattr(x, "__array_namespace__"):
        return tuple(x.shape)
    try:
        return tuple(np.shape(x))
    except ValueError:  # ragged nested lists
        raise ShapeError(f"{op}: input data is not a rectangular array: {x!r}") from None


def matmul_any(a: Any, b: Any) -> Any:
    """``a @ b`` with torch.matmul's rules: 2-D @ 2-D (matmul), 3-D @ 3-D (bmm), (..., n) @
    (n, p) as one GEMM, batch axes broadcast otherwise (matmul_nd); a 1-D operand is a row
    (left) or column (right) vector whose axis is removed from the result."""
    sa = _shape_of(a)
    sb = _shape_of(b)
    if not sa or not sb:
        raise ShapeError(f"matmul: both operands need at least one axis, found {sa} @ {sb}")
    if len(sa) == 1 or len(sb) == 1:
        left = reshape(a, (1, sa[0])) if len(sa) == 1 else a
        right = reshape(b, (sb[0], 1)) if len(sb) == 1 else b
        out = matmul_any(left, right)
        shape = _shape_of(out)
        drop = shape[:-2] + ((shape[-2],) if len(sa) > 1 else ()) + (
            (shape[-1],) if len(sb) > 1 else ())
        return reshape(out, drop)
    if sa[-1] != sb[-2]:
        raise ShapeError(f"matmul: inner dimensions differ: {sa} @ {sb}")
    if len(sa) == 2 and len(sb) == 2:
        return apply("matmul", a, b)
    if len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0]:
        return apply("bmm", a, b)
    if len(sb) == 2:
        # (..., n) @ (n, p): one GEMM over the flattened leading axes.
        lead = sa[:-1]
        flat = apply("reshape", a, shape=(int(math.prod(lead)), sa[-1]))
        return apply("reshape", apply("matmul", flat, b), shape=lead + (sb[1],))
    return apply("matmul_nd", a, b)


# ---------------------------------------------------------------------------------------------
# Torch-style derived ops (any kind of ref, or plain arrays): axes, reductions, layout, cat.


def _shape_of(x: Any) -> tuple[int, ...]:
    """The shape of a ref, an array of any namespace, or nested lists / numbers."""
    if isinstance(x, Ref) or hasattr(x, "__array_namespace__"):
        return tuple(x.shape)
    return tuple(np.shape(x))


def _axis(op: str, dim: Any, ndim: int) -> int:
    """``dim`` (negative counts from the end) as an axis of an ``ndim``-axis value."""
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer):
        raise ShapeError(f"{op}: dim must be an int, found {dim!r}")
    # a 0-d value accepts dims 0 and -1, as in torch
    if not -builtins.max(ndim, 1) <= dim < builtins.max(ndim, 1):
        raise ShapeError(f"{op}: dim {dim} is out of range for {ndim} axes")
    return int(dim) % builtins.max(ndim, 1)


def _axes(op: str, dim: Any, ndim: int) -> tuple[int, ...]:
    dims = dim if isinstance(dim, tuple | list) else (dim,)
    axes = tuple(_axis(op, d, ndim) for d in dims)
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{op}: dim {dim!r} names an axis twice")
    return axes


def _shape_arg(shape: tuple[Any, ...]) -> Any:
    return shape[0] if len(shape) == 1 and not isinstance(shape[0], int | np.integer) else shape


def _index_values(index: Any) -> Any:
    """Index entries that are refs (tensors) replaced by their values (they carry no
    gradient: an index is data). An index is a static attribute of the op (its shape decides
    the result's), so a device index is read back explicitly, as PyTorch synchronises for one."""
    entries = index if isinstance(index, tuple) else (index,)
    out = []
    for e in entries:
        if isinstance(e, Ref):
            out.append(to_host(e.owner.value(e)))
        elif hasattr(e, "__array_namespace__") and type(e) is not np.ndarray:
            out.append(to_host(e))
        elif isinstance(e, list):
            out.append(np.asarray(e))
        else:
            out.append(e)
    return tuple(out)


def reshape(x: Any, shape: Any) -> Any:
    """``x`` with a new shape; one entry may be -1 and is inferred (torch.reshape)."""
    source = _shape_of(x)
    dims: list[Any]
    if isinstance(shape, int | np.integer):
        dims = [shape]
    elif isinstance(shape, tuple | list | np.ndarray):
        dims = [int(d) if isinstance(d, np.integer) else d for d in shape]
    else:
        raise ShapeError(f"reshape: shape must be a tuple of ints, found {shape!r}")
    if any(isinstance(d, bool) or not isinstance(d, int | np.integer) for d in dims):
        raise ShapeError(f"reshape: shape entries must be ints, found {shape!r}")
    if dims.count(-1) > 1:
        raise ShapeError(f"reshape: only one dimension can be -1, found {tuple(dims)}")
    if -1 in dims:
        known = int(math.prod([d for d in dims if d != -1]))
        total = int(math.prod(source))
        if known == 0 or total % known:
            raise ShapeError(f"reshape: cannot reshape {source} into {tuple(dims)}")
        dims[dims.index(-1)] = total // known
    return apply("reshape", x, shape=as_shape("reshape", dims))


def sum_dims(x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    """Sum over ``dim`` (an axis, a tuple of axes, or None for all), as torch.sum."""
    return _reduce("sum", "reduce_sum", x, dim, keepdim)


def mean_dims(x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    """Mean over ``dim`` (an axis, a tuple of axes, or None for all), as torch.mean."""
    return _reduce("mean", "reduce_mean", x, dim, keepdim)


def _reduce(op: str, prim: str, x: Any, dim: Any, keepdim: bool) -> Any:
    shape = _shape_of(x)
    if not shape and dim is not None:
        _axes(op, dim, 0)  # a 0-d value: dim 0 or -1 names the value itself (torch)
        dim, keepdim = None, False
    if dim is None and not keepdim:
        return apply("sum", x) if op == "sum" else mean(x)
    axes = tuple(range(len(shape))) if dim is None else _axes(op, dim, len(shape))
    out = x
    for axis in sorted(axes, reverse=True):  # highest first: lower axis numbers stay valid
        out = apply(prim, out, axis=axis)
    if keepdim:
        out = reshape(out, tuple(1 if k in axes else d for k, d in enumerate(shape)))
    return out


def transpose(x: Any, dim0: int, dim1: int) -> Any:
    """Swap two axes (torch.transpose)."""
    n = len(_shape_of(x))
    a, b = _axis("transpose", dim0, n), _axis("transpose", dim1, n)
    if n == 0:
        return x
    perm = list(range(n))
    perm[a], perm[b] = perm[b], perm[a]
    return x if a == b else apply("permute", x, perm=tuple(perm))


def _move_last(op: str, x: Any, dim: int) -> tuple[Any, tuple[int, ...] | None]:
    n = len(_shape_of(x))
    axis = _axis(op, dim, n)
    if axis == n - 1:
        return x, None
    perm = tuple(k for k in range(n) if k != axis) + (axis,)
    return apply("permute", x, perm=perm), perm


def _move_back(x: Any, perm: tuple[int, ...] | None) -> Any:
    if perm is None:
        return x
    return apply("permute", x, perm=inverse_perm(perm))


def softmax_dim(x: Any, dim: int) -> Any:
    """Softmax along ``dim`` (the primitive works on the last axis; others are permuted)."""
    moved, perm = _move_last("softmax", x, dim)
    return _move_back(apply("softmax", moved), perm)


def log_softmax_dim(x: Any, dim: int) -> Any:
    """Log-softmax along ``dim``."""
    moved, perm = _move_last("log_softmax", x, dim)
    return _move_back(apply("log_softmax", moved), perm)


def unsqueeze(x: Any, dim: int) -> Any:
    shape = _shape_of(x)
    axis = _axis("unsqueeze", dim, len(shape) + 1)
    return reshape(x, shape[:axis] + (1,) + shape[axis:])


def squeeze(x: Any, dim: int | None = None) -> Any:
    shape = _shape_of(x)
    if dim is None:
        return reshape(x, tuple(d for d in shape if d != 1))
    axis = _axis("squeeze", dim, len(shape))
    if not shape:
        return x
    return x if shape[axis] != 1 else reshape(x, shape[:axis] + shape[axis + 1:])


def flatten_dims(x: Any, start_dim: int = 0, end_dim: int = -1) -> Any:
    """Merge axes ``start_dim..end_dim`` into one (torch.flatten)."""
    shape = _shape_of(x)
    if not shape:
        return reshape(x, (1,))
    a, b = _axis("flatten", start_dim, len(shape)), _axis("flatten", end_dim, len(shape))
    if a > b:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    merged = int(math.prod(shape[a:b + 1]))
    return reshape(x, shape[:a] + (merged,) + shape[b + 1:])


def power(x: Any, exponent: Any) -> Any:
    """``x ** exponent`` for integer exponents (repeated products; negative ones invert) and
    0.5 (sqrt)."""
    if not _is_scalar(exponent):
        raise ShapeError(f"pow: the exponent must be a number, found {type(exponent).__name__}")
    if exponent == 0.5:
        return apply("sqrt", x)
    if float(exponent) != int(exponent):
        raise ShapeError(f"pow: only integer exponents and 0.5 are supported, found {exponent}; "
                         "compose others with exp/log")
    n = int(exponent)
    if n == 0:
        return apply("add_scalar", apply("zeros_like", x), c=1.0)
    base = x if n > 0 else apply("inv", x)
    result = None
    square = base
    k = builtins.abs(n)
    while k:  # square-and-multiply: about log2(k) products
        if k & 1:
            result = square if result is None else apply("mul", result, square)
        k >>= 1
        if k:
            square = apply("square", square)
    return result


def amax(x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    """The largest entries over ``dim`` (all axes for None); ties share the gradient."""
    return _fold_extremum("amax", "max", x, dim, keepdim)


def amin(x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    """The smallest entries over ``dim`` (all axes for None); ties share the gradient."""
    return _fold_extremum("amin", "min", x, dim, keepdim)


def _fold_extremum(op: str, prim: str, x: Any, dim: Any, keepdim: bool) -> Any:
    shape = _shape_of(x)
    if not shape:
        return x
    axes = tuple(range(len(shape))) if dim is None else _axes(op, dim, len(shape))
    # Move the reduced axes to the front as one axis, then fold the binary primitive over its
    # entries (a tree, so ties split evenly between the two halves at each level).
    rest = tuple(k for k in range(len(shape)) if k not in axes)
    moved = x if axes + rest == tuple(range(len(shape))) else apply(
        "permute", x, perm=axes + rest)
    count = int(math.prod([shape[k] for k in axes]))
    if count == 0:
        raise ShapeError(f"{op}: cannot reduce over an empty axis (shape {shape})")
    flat = reshape(moved, (count,) + tuple(shape[k] for k in rest))
    out = _tree_fold(prim, flat, count)
    out = reshape(out, tuple(shape[k] for k in rest))
    if keepdim:
        out = reshape(out, tuple(1 if k in axes else d for k, d in enumerate(shape)))
    return out


def _tree_fold(prim: str, x: Any, n: int) -> Any:
    """``prim`` folded over axis 0 (length n) as a balanced tree of binary ops on halves."""
    if n == 1:
        return apply("slice_range0", x, start=0, length=1)
    half = n // 2
    left = _tree_fold(prim, apply("slice_range0", x, start=0, length=half), half)
    right = _tree_fold(prim, apply("slice_range0", x, start=half, length=n - half), n - half)
    return apply(prim, left, right)


class MaxResult(NamedTuple):
    """``values, indices`` of ``max(dim=)`` / ``min(dim=)``."""

    values: Any
    indices: Any


def _extremum(x: Ref, dim: Any, keepdim: bool, largest: bool) -> Any:
    values = (amax if largest else amin)(x, dim, keepdim)
    if dim is None:
        return values
    # Only a ref that holds its values (a Tensor) can say where the extremum is.
    arg = getattr(x, "argmax" if largest else "argmin", None)
    if arg is None:
        raise TraceError(f"{'max' if largest else 'min'}(dim=...): the indices need values; on "
                         "sessions and traced graphs use amax/amin for the values")
    return MaxResult(values, arg(dim, keepdim))


def cat(xs: Any, dim: int = 0) -> Any:
    """Concatenate refs along ``dim`` (torch.cat); other axes must agree."""
    if not isinstance(xs, list | tuple):
        raise SignatureError(f"cat: expected a list or tuple of tensors, found "
                             f"{type(xs).__name__}")
    items = list(xs)
    if not items:
        raise ShapeError("cat: needs at least one tensor")
    for k, item in enumerate(items):
        if not _shape_of(item):
            raise ShapeError(f"cat: zero-dimensional tensor (at position {k}) cannot be "
                             "concatenated (as in PyTorch; use stack)")
    # torch's legacy rule: a 1-d empty tensor joins anything (it is skipped)
    kept = [item for item in items if _shape_of(item) != (0,)]
    if kept and len(kept) < len(items):
        items = kept
    shape = _shape_of(items[0])
    axis = _axis("cat", dim, len(shape))
    for k, item in enumerate(items[1:], 1):
        other = _shape_of(item)
        if len(other) != len(shape) or any(a != b for j, (a, b) in enumerate(
                zip(other, shape, strict=True)) if j != axis):
            raise ShapeError(f"cat: tensor {k} has shape {other}, which differs from {shape} "
                             f"outside dim {dim}")
    if len(items) == 1:
        return items[0]
    perm = None
    if axis != 0:
        perm = (axis,) + tuple(k for k in range(len(shape)) if k != axis)
        items = [apply("permute", item, perm=perm) for item in items]
    out = items[0]
    for item in items[1:]:
        out = apply("concat_dim0", out, item)
    return _move_back(out, perm)


def stack(xs: Any, dim: int = 0) -> Any:
    """Stack refs of one shape along a new axis ``dim`` (torch.stack)."""
    items = list(xs)
    if not items:
        raise ShapeError("stack: needs at least one tensor")
    shape = _shape_of(items[0])
    for k, item in enumerate(items[1:], 1):
        if _shape_of(item) != shape:
            raise ShapeError(f"stack: tensor {k} has shape {_shape_of(item)}, expected {shape}")
    return cat([unsqueeze(item, dim) for item in items], dim)


# Ops whose seed argument order differs from PyTorch's: a shape error gets a hint naming both.
_TORCH_ORDER = {"linear", "conv", "conv2d", "conv_transpose", "conv_transpose2d"}


def _make_function(prim: Primitive) -> Callable[..., Any]:
    arity = len(prim.inputs)
    plain = not prim.attrs
    hint = (f"; note torchlean.engine.ops_interface takes the seed's order {prim.name}"
            f"({', '.join(prim.inputs)}, ...), while PyTorch's (input, weight, bias, ...) is "
            f"torchlean.nn.functional.{prim.name}") if prim.name in _TORCH_ORDER else ""

    def function(*args: Any, **kwargs: Any) -> Any:
        if plain and not kwargs and len(args) == arity:
            # The common call (refs of one owner, no attributes): the one ownership check, then
            # straight to the owner; this is the per-op hot path of eager sessions. One and two
            # inputs are spelled out (no generator per call), and three (``linear``).
            if arity == 1:
                a = args[0]
                if isinstance(a, Ref):
                    return a._owner.record(prim, args, {})
            elif arity == 2:
                a, b = args
                if isinstance(a, Ref) and isinstance(b, Ref):
                    owner = a._owner
                    if b._owner is owner:
                        return owner.record(prim, args, {})
            elif arity == 3:  # linear(w, b, x): every layer of an MLP
                a, b, c = args
                if isinstance(a, Ref) and isinstance(b, Ref) and isinstance(c, Ref):
                    owner = a._owner
                    if b._owner is owner and c._owner is owner:
                        return owner.record(prim, args, {})
            else:
                owner = owner_of(args)
                if owner is not None and all(isinstance(a, Ref) for a in args):
                    return owner.record(prim, args, {})
        inputs, attrs = prim.split_call(args, kwargs, "tensor inputs")
        return _apply_bound(prim, inputs, attrs)

    if hint:
        unhinted = function

        def function(*args: Any, **kwargs: Any) -> Any:
            try:
                return unhinted(*args, **kwargs)
            except DTypeError:
                raise  # the order of the arguments has nothing to do with their dtypes
            except ShapeError as exc:
                raise type(exc)(f"{exc}{hint}") from None

    function.__name__ = prim.name
    function.__qualname__ = prim.name
    function.__doc__ = (f"F.{prim.name}({', '.join(prim.inputs + tuple(prim.attrs))})\n\n"
                        f"{prim.semantics}")
    return function


# One function per primitive that takes inputs (see the module docstring for nullary ones).
# ``reshape`` is the one derived op that keeps a primitive's name: it resolves a -1 entry first.
_DERIVED = {"reshape": reshape}
for _name, _prim in REGISTRY.items():
    if _prim.inputs and _name not in _DERIVED:
        globals()[_name] = _make_function(_prim)
reshape.__doc__ = f"{reshape.__doc__}\n\n{REGISTRY['reshape'].semantics}"


def __getattr__(name: str) -> Callable[..., Any]:
    # Primitives registered after import (plugins) are still reachable as F.<name>.
    prim = REGISTRY.get(name)
    if prim is not None and prim.inputs:
        function = _make_function(prim)
        globals()[name] = function
        return function
    if prim is not None:
        raise AttributeError(f"torchlean.engine.ops_interface has no {name!r}: a primitive "
                             f"without inputs needs an owner to draw from (Session.{name}, or "
                             "tl.rand)")
    raise AttributeError(f"torchlean.engine.ops_interface has no op {name!r}")


# ---------------------------------------------------------------------------------------------
# Derived ops: compositions of primitives, no rules of their own.


def inverted_dropout(x: Any, p: float, training: bool, mask_of: Callable[[float], Any]) -> Any:
    """Inverted dropout, the part every owner shares: ``p`` checked, then ``x * mask / (1 - p)``
    with the owner's {0, 1} mask ``mask_of(keep_probability)`` (drawn its own way)."""
    if isinstance(p, bool) or not isinstance(p, int | float | np.integer | np.floating) \
            or not 0 <= p < 1:
        raise ShapeError(f"dropout: p must be a number in [0, 1), found {p!r}")
    if not training or p == 0:
        return x
    return apply("scale", apply("mul", x, mask_of(1.0 - float(p))), c=1.0 / (1.0 - p))


def neg(x: Any) -> Any:
    return apply("scale", x, c=-1.0)


def div(a: Any, b: Any) -> Any:
    return apply("mul", a, apply("inv", b))


def mean(x: Any) -> Any:
    """Mean of all entries (a scalar)."""
    shape = _shape_of(x)
    n = int(math.prod(shape))
    if n == 0:
        raise ShapeError(f"mean: needs at least one entry, found shape {tuple(shape)}")
    return apply("scale", apply("sum", x), c=1.0 / n)


def silu(x: Any) -> Any:
    """x * sigmoid(x)."""
    return apply("mul", x, apply("sigmoid", x))


def global_avg_pool2d(x: Any) -> Any:
    """Mean over the two spatial axes: (C, H, W) -> (C,) and (N, C, H, W) -> (N, C)."""
    shape = _shape_of(x)
    if len(shape) not in (3, 4) or shape[-1] * shape[-2] == 0:
        raise ShapeError(f"global_avg_pool2d: expected (C, H, W) or (N, C, H, W) with H*W > 0, "
                         f"found {shape}")
    flat = apply("reshape", x, shape=shape[:-2] + (shape[-2] * shape[-1],))
    return apply("reduce_mean", flat, axis=-1)


def one_hot_array(labels: Any, num_classes: int, dtype: Any = np.float32) -> Any:
    """Integer labels (any shape) to a one-hot float array with a trailing class axis, in the
    labels' namespace (device labels: the range check reads back one flag)."""
    xp = namespace_of(labels)
    idx = np.asarray(labels) if xp is np else labels
    if idx.dtype.kind not in "iu":
        raise ShapeError(f"one_hot_array: labels must be integers, found dtype {idx.dtype}")
    if idx.size:
        out_of_range = (idx.min() < 0 or idx.max() >= num_classes) if xp is np else bool(
            to_host(((idx < 0) | (idx >= num_classes)).any()))
        if out_of_range:
            host = to_host(idx)
            raise ShapeError(f"one_hot_array: labels must lie in [0, {num_classes}), found "
                             f"range [{host.min()}, {host.max()}]")
    return xp.eye(num_classes, dtype=dtype)[idx]


def _targets_as_probabilities(op: str, logits: Any, targets: Any) -> Any:
    """Targets as class probabilities of the logits' shape.

    Accepted: integer labels (array or NatRef-like ``.value``), a ref of class indices stored as
    floats (shape without the class axis), or probabilities (a ref or array of the logits' shape).
    """
    shape = _shape_of(logits)
    if isinstance(targets, Ref) and np.dtype(targets.dtype).kind in "iub":
        targets = targets.owner.value(targets)  # integer labels (a tensor's) are data
    if isinstance(targets, Ref):
        if targets.shape == shape[:-1]:
            return _op("one_hot", (targets,), num_classes=shape[-1])
        if targets.shape != shape:
            raise ShapeError(f"{op}: targets of shape {targets.shape} fit neither labels "
                             f"{shape[:-1]} nor probabilities {shape}")
        return targets
    labels = getattr(targets, "value", targets)
    if namespace_of(labels) is np:
        labels = np.asarray(labels)
    if labels.dtype.kind not in "iu":
        probs = labels
    else:
        if labels.shape != shape[:-1]:
            raise ShapeError(f"{op}: labels shape {labels.shape} must be the logits shape "
                             f"{shape} without its class axis")
        probs = one_hot_array(labels, shape[-1], dtype=logits.dtype)
    if probs.shape != shape:
        raise ShapeError(f"{op}: target shape {probs.shape} must match {shape}")
    return probs


def nll(log_probs: Any, targets: Any) -> Any:
    """Negative log-likelihood, mean over the batch: -mean_b sum_k target[b, k] log_probs[b, k].

    ``targets`` are integer labels (shape without the class axis) or a ref / array of class
    probabilities (one-hot or soft labels) of the same shape as ``log_probs``.
    """
    probs = _targets_as_probabilities("nll", log_probs, targets)
    shape = _shape_of(log_probs)
    batch = int(math.prod(shape[:-1])) if len(shape) > 1 else 1
    # (``_op``: fixed primitives, arities and attributes, so no lookup by name or binding;
    # the same records and checks: a W2 step's loss is five ops.)
    return _op("scale", (_op("sum", (_op("mul", (log_probs, probs)),)),), c=-1.0 / batch)


def cross_entropy(logits: Any, targets: Any) -> Any:
    """Softmax cross-entropy on logits (last axis = classes), mean reduction over the batch."""
    return nll(_op("log_softmax", (logits,)), targets)
