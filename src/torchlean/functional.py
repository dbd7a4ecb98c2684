"""``F``: the backend-generic op namespace (TorchLean's Ops interface) and the derived ops.

The same user function runs on eager session refs and on graph variables: ``F.relu(x)`` finds
the one owner of its refs (``owner_of``: the single ownership check) and asks it to record the
``relu`` primitive. Owners implement the ``Owner`` protocol below: a session's eager or compiled
backend, or a graph builder. With plain arrays and no ref at all, ``F.relu(array)`` simply computes
the value, with inputs converted and checked as the tape checks them (no autodiff).

There is one function here per registered primitive, generated from the registry, plus derived
ops built only from primitives (silu, gelu, global_avg_pool2d, cross_entropy, nll, mean, ...): they
have no rules of their own, so their derivatives are whatever the primitives' rules compose to.

``Ref`` is the base of every traced value; it gives both kinds of ref the Python operators
``+ - * / @``, unary ``-``, ``**2``, ``.T`` and simple indexing.
"""

from __future__ import annotations

import builtins  # F defines max, min, sum and abs as primitives: builtins are named
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from . import ops as _ops  # noqa: F401  (registers every primitive)
from .backend import operand_arrays
from .errors import ShapeError, TraceError
from .ops.registry import REGISTRY, Primitive
from .ops.registry import get as get_primitive
from .shape import as_shape


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
            return apply("add_scalar", self, c=float(other))
        return apply("add", self, other)

    def __radd__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return apply("add_scalar", self, c=float(other))
        return apply("add", other, self)

    def __sub__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return apply("add_scalar", self, c=-float(other))
        return apply("sub", self, other)

    def __rsub__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return apply("add_scalar", apply("scale", self, c=-1.0), c=float(other))
        return apply("sub", other, self)

    def __mul__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return apply("scale", self, c=float(other))
        return apply("mul", self, other)

    def __rmul__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return apply("scale", self, c=float(other))
        return apply("mul", other, self)

    def __truediv__(self, other: Any) -> Ref:
        if _is_scalar(other):
            return apply("scale", self, c=1.0 / float(other))
        return apply("mul", self, apply("inv", other))

    def __rtruediv__(self, other: Any) -> Ref:
        inverse = apply("inv", self)
        if _is_scalar(other):
            return apply("scale", inverse, c=float(other))
        return apply("mul", other, inverse)

    def __neg__(self) -> Ref:
        return apply("scale", self, c=-1.0)

    def __pos__(self) -> Ref:
        return self

    def __pow__(self, exponent: Any) -> Ref:
        if not _is_scalar(exponent):
            raise ShapeError(f"pow: the exponent must be a number (2, 1, 0.5 or -1), found "
                             f"{type(exponent).__name__}")
        if exponent == 2:
            return apply("square", self)
        if exponent == 1:
            return self
        if exponent == 0.5:
            return apply("sqrt", self)
        if exponent == -1:
            return apply("inv", self)
        raise ShapeError(f"pow: only exponents 2, 1, 0.5 and -1 are primitives, found {exponent}; "
                         "compose others with exp/log")

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
        """x[i] (Fin-checked gather on axis 0) and x[a:b] (slice_range0)."""
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
        raise ShapeError(f"indexing: only x[int] and x[a:b] on axis 0 are supported, found "
                         f"{index!r}; use F.gather_* / F.slice_range0 / F.reshape")

    def reshape(self, *shape: Any) -> Ref:
        target = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return apply("reshape", self, shape=as_shape("reshape", target))

    def sum(self) -> Ref:
        return apply("sum", self)

    def mean(self) -> Ref:
        return mean(self)


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
    """Apply a primitive to refs (recorded by their owner) or to plain arrays (computed now)."""
    prim = name if isinstance(name, Primitive) else get_primitive(name)
    for v in attrs.values():
        if isinstance(v, NatRef):  # integer inputs travel as plain attribute values
            attrs = {k: w.value if isinstance(w, NatRef) else w for k, w in attrs.items()}
            break
    owner = owner_of(inputs)
    if owner is None:
        arrays = operand_arrays(prim.name, inputs)
        prim.infer(*[a.shape for a in arrays], **attrs)
        return prim.forward(*arrays, **attrs)
    if all(isinstance(x, Ref) for x in inputs):
        return owner.record(prim, inputs, attrs)
    # Arrays among the inputs become const leaves of the owner: check the op's shape rule first,
    # so a failing call leaves no orphan constants behind (nothing changes when a check fails).
    shapes = [x.shape if isinstance(x, Ref) else _data_shape(prim.name, x) for x in inputs]
    prim.infer(*shapes, **attrs)
    refs = [x if isinstance(x, Ref) else owner.const(x) for x in inputs]
    return owner.record(prim, refs, attrs)


def _data_shape(op: str, x: Any) -> tuple[int, ...]:
    try:
        return tuple(np.shape(x))
    except ValueError:  # ragged nested lists
        raise ShapeError(f"{op}: input data is not a rectangular array: {x!r}") from None


def matmul_any(a: Any, b: Any) -> Any:
    """``a @ b`` for 2-D @ 2-D (matmul), 3-D @ 3-D (bmm), and batched (..., n) @ (n, p)."""
    sa, sb = np.shape(a) if not isinstance(a, Ref) else a.shape, (
        np.shape(b) if not isinstance(b, Ref) else b.shape)
    if len(sa) == 2 and len(sb) == 2:
        return apply("matmul", a, b)
    if len(sa) == 3 and len(sb) == 3:
        return apply("bmm", a, b)
    if len(sa) >= 1 and len(sb) == 2:
        # (..., n) @ (n, p): one GEMM over the flattened leading axes.
        if sa[-1] != sb[0]:
            raise ShapeError(f"matmul: inner dimensions differ: {tuple(sa)} @ {tuple(sb)}")
        lead = tuple(sa[:-1])
        flat = apply("reshape", a, shape=(int(np.prod(lead, dtype=int)), sa[-1]))
        return apply("reshape", apply("matmul", flat, b), shape=lead + (sb[1],))
    raise ShapeError(f"matmul: unsupported shapes {tuple(sa)} @ {tuple(sb)} (use 2-D @ 2-D, "
                     "3-D @ 3-D, or (..., n) @ (n, p))")


def _make_function(prim: Primitive) -> Callable[..., Any]:
    def function(*args: Any, **kwargs: Any) -> Any:
        inputs, attrs = prim.split_call(args, kwargs, "tensor inputs")
        return apply(prim, *inputs, **attrs)

    function.__name__ = prim.name
    function.__qualname__ = prim.name
    function.__doc__ = (f"F.{prim.name}({', '.join(prim.inputs + tuple(prim.attrs))})\n\n"
                        f"{prim.semantics}")
    return function


# One function per primitive (nullary ones, like rand_uniform, need an owner: see Session).
for _name, _prim in REGISTRY.items():
    if _prim.inputs:
        globals()[_name] = _make_function(_prim)


def __getattr__(name: str) -> Callable[..., Any]:
    # Primitives registered after import (plugins) are still reachable as F.<name>.
    if name in REGISTRY:
        function = _make_function(REGISTRY[name])
        globals()[name] = function
        return function
    raise AttributeError(f"torchlean.functional has no op {name!r}")


# ---------------------------------------------------------------------------------------------
# Derived ops: compositions of primitives, no rules of their own.


def neg(x: Any) -> Any:
    return apply("scale", x, c=-1.0)


def div(a: Any, b: Any) -> Any:
    return apply("mul", a, apply("inv", b))


def mean(x: Any) -> Any:
    """Mean of all entries (a scalar)."""
    shape = x.shape if isinstance(x, Ref) else np.shape(x)
    n = int(np.prod(shape, dtype=int))
    if n == 0:
        raise ShapeError(f"mean: needs at least one entry, found shape {tuple(shape)}")
    return apply("scale", apply("sum", x), c=1.0 / n)


def silu(x: Any) -> Any:
    """x * sigmoid(x)."""
    return apply("mul", x, apply("sigmoid", x))


_GELU_C = math.sqrt(2.0 / math.pi)


def gelu(x: Any) -> Any:
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    cube = apply("mul", apply("square", x), x)
    inner = apply("scale", apply("add", x, apply("scale", cube, c=0.044715)), c=_GELU_C)
    return apply("scale", apply("mul", x, apply("add_scalar", apply("tanh", inner), c=1.0)), c=0.5)


def global_avg_pool2d(x: Any) -> Any:
    """Mean over the two spatial axes: (C, H, W) -> (C,) and (N, C, H, W) -> (N, C)."""
    shape = tuple(x.shape if isinstance(x, Ref) else np.shape(x))
    if len(shape) not in (3, 4) or shape[-1] * shape[-2] == 0:
        raise ShapeError(f"global_avg_pool2d: expected (C, H, W) or (N, C, H, W) with H*W > 0, "
                         f"found {shape}")
    flat = apply("reshape", x, shape=shape[:-2] + (shape[-2] * shape[-1],))
    return apply("reduce_mean", flat, axis=-1)


def one_hot_array(labels: Any, num_classes: int, dtype: Any = np.float32) -> np.ndarray:
    """Integer labels (any shape) to a one-hot float array with a trailing class axis."""
    idx = np.asarray(labels)
    if idx.dtype.kind not in "iu":
        raise ShapeError(f"one_hot_array: labels must be integers, found dtype {idx.dtype}")
    if idx.size and (idx.min() < 0 or idx.max() >= num_classes):
        raise ShapeError(f"one_hot_array: labels must lie in [0, {num_classes}), found range "
                         f"[{idx.min()}, {idx.max()}]")
    return np.eye(num_classes, dtype=dtype)[idx]


def _targets_as_probabilities(op: str, logits: Any, targets: Any) -> Any:
    """Targets as class probabilities of the logits' shape.

    Accepted: integer labels (array or NatRef-like ``.value``), a ref of class indices stored as
    floats (shape without the class axis), or probabilities (a ref or array of the logits' shape).
    """
    shape = tuple(logits.shape if isinstance(logits, Ref) else np.shape(logits))
    if isinstance(targets, Ref):
        if targets.shape == shape[:-1]:
            return apply("one_hot", targets, num_classes=shape[-1])
        if targets.shape != shape:
            raise ShapeError(f"{op}: targets of shape {targets.shape} fit neither labels "
                             f"{shape[:-1]} nor probabilities {shape}")
        return targets
    labels = np.asarray(getattr(targets, "value", targets))
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
    shape = tuple(log_probs.shape if isinstance(log_probs, Ref) else np.shape(log_probs))
    batch = int(np.prod(shape[:-1], dtype=int)) if len(shape) > 1 else 1
    return apply("scale", apply("sum", apply("mul", log_probs, probs)), c=-1.0 / batch)


def cross_entropy(logits: Any, targets: Any) -> Any:
    """Softmax cross-entropy on logits (last axis = classes), mean reduction over the batch."""
    return nll(apply("log_softmax", logits), targets)
