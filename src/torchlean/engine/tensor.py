"""``tl.Tensor``: the define-by-run, PyTorch-shaped front door on the same engine.

A ``Tensor`` holds its value and, when it needs a gradient, the primitive that made it, its
parent tensors and the op's attributes: PyTorch's autograd graph. Ops are recorded by one owner
(``RECORDER``, a ``ops_interface.Owner``), so ``F.*``, operators, ``nn`` layers and the torch-style
methods of ``functional.Ref`` all work on tensors unchanged, and each op is checked by its
primitive's shape rule before anything is computed (``core.kernels.run_checked``, the same check the
tape makes).

``backward()`` and ``autograd.grad`` collect the graph behind an output, number its tensors in
creation order (which is a topological order) and run the one reverse driver of
``torchlean.autodiff`` over it, with the same plan builder and rules as the eager tape and the
compiled graph. Tensors run the fast kernels (``ops.fast``) by default, as PyTorch's eager mode
runs its own: each op that has a fast forward, and each reverse pass on arrays, turns them on
for that call (``_fast_call``); ``fast_kernels(False)`` / ``set_tensor_kernels(False)`` give the
reference. With ``create_graph=True`` the rules run on an interpreter that records tensors
(``TENSOR_OPS``), so gradients are tensors with a history and can be differentiated again.

Conventions follow PyTorch: leaves accumulate ``.grad`` (a tensor; a parameter, ``Param`` /
``nn.Parameter``, is itself a leaf tensor, so layers record it directly and optimisers read its
``.grad``); a graph is freed by ``backward`` unless ``retain_graph=True``, and a second backward
through it is an error; ``no_grad()`` stops recording. Data of integer or bool dtype is carried
(labels, masks, indices) but never requires gradient.

torch's type system: dtypes are NumPy dtypes under torch's names (``engine/dtypes.py``), and
every operator computes its result dtype with ``torch.result_type`` (an int tensor plus 1 stays
int64; plus 0.5, or divided, it is the default float); integer and bool arithmetic runs without a
history, float ops on the registry's primitives. Indexing follows torch (``torch_index``).

In-place ops (``add_``, ``+=``, ``x[i] = v``, ``zero_``, ...) write into the tensor's own storage
(``detach()``/``.data`` aliases see the change) and bump its version counter, shared with those
aliases. With a history, the tensor becomes the node of the in-place op, whose input is a
snapshot of its old node (a copy of the old value, the old history), so gradients through it are
exact; a backward that needs a value changed since it was recorded raises torch's "modified by
an inplace operation" error (checked by creation order: no per-op cost). torch names the
registry lacks (sin, cos, a general power, where, indexed assignment) are tensor-only primitives
(``torch_prims``): recorded and differentiated like the others, but not traceable.

Devices, as in PyTorch: a tensor lives on one device (``.device``: "cpu" or "cuda"); factories
take ``device=``; ``.to(device)``, ``.cuda()`` and ``.cpu()`` are the explicit transfers (with a
history, the gradient flows back across the copy); an op on tensors of two devices is a
``DeviceError``; ``.numpy()`` of a device tensor asks for ``.cpu()`` first; ``.item()``,
``float()`` and printing read back explicitly.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import itertools
import math
import operator
import threading
import weakref
from collections.abc import Callable, Sequence
from sys import getrefcount
from typing import Any

import numpy as np

from ..core import alloc
from ..core.autodiff import (
    TARGETS_0,
    TARGETS_01,
    TARGETS_1,
    TARGETS_NONE,
    Step,
    run_reverse,
)
from ..core.backend import (
    DEVICES,
    check_device,
    device_of,
    namespace_for,
    namespace_of,
    numeric_array,
    to_device,
    to_host,
)
from ..core.errors import (
    DeviceError,
    IndexRangeError,
    ShapeError,
    SignatureError,
    TapeError,
    TorchLeanError,
    TraceError,
    device_mismatch,
)
from ..core.kernels import array_on, run_checked
from ..core.registry import ARRAY_OPS, KERNELS, REGISTRY, Primitive
from ..core.rng import Generator, check_generator, default_generator, init_generator
from ..core.shape import as_shape
from ..ops.fast import residuals
from . import ops_interface as F
from . import torch_prims as TP
from .dtypes import as_dtype, get_default_dtype, result_type
from .ops_interface import MaxResult, Ref
from .tape import RELU_POOLS, fused_relu_pool_rule
from .tensor_format import format_values, grad_fn_name
from .torch_index import torch_steps
from .transforms import Compiled

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)

_sequence = itertools.count()  # creation order: parents always get smaller numbers


class _GradState(threading.local):
    """The grad mode, per thread. The class attribute is every thread's default, so reading it
    (once per recorded op) never takes ``getattr``'s missing-attribute path (0.35 us)."""

    grad_enabled = True


_state = _GradState()


def is_grad_enabled() -> bool:
    """Whether ops record a history for gradients (``no_grad`` turns it off, per thread)."""
    return _state.grad_enabled


class _GradMode:
    """``no_grad()`` / ``enable_grad()``: a context manager and a decorator, as in PyTorch."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._saved: list[bool] = []

    def __enter__(self) -> None:
        self._saved.append(is_grad_enabled())
        _state.grad_enabled = self.enabled

    def __exit__(self, *exc: Any) -> None:
        _state.grad_enabled = self._saved.pop()

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isgeneratorfunction(fn):
            return self._generator(fn)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with _GradMode(self.enabled):
                return fn(*args, **kwargs)

        wrapped.__name__ = getattr(fn, "__name__", "wrapped")
        wrapped.__doc__ = fn.__doc__
        return wrapped

    def _generator(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A generator function whose body runs in this mode at every step (as torch's
        decorator does): the mode is entered around each resumption, not once around the
        call that only creates the generator."""
        enabled = self.enabled

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            gen = fn(*args, **kwargs)
            try:
                with _GradMode(enabled):
                    response = gen.send(None)
                while True:
                    try:
                        request = yield response
                    except GeneratorExit:
                        with _GradMode(enabled):
                            gen.close()
                        raise
                    except BaseException as exc:
                        with _GradMode(enabled):
                            response = gen.throw(exc)
                    else:
                        with _GradMode(enabled):
                            response = gen.send(request)
            except StopIteration as stop:
                return stop.value

        return wrapped


def no_grad() -> _GradMode:
    """Ops inside record no history (for evaluation and parameter updates)."""
    return _GradMode(False)


def enable_grad() -> _GradMode:
    """Re-enable recording inside a ``no_grad`` block."""
    return _GradMode(True)


class Tensor(Ref):
    """A value with an optional autograd history. Make one with ``tl.tensor`` or a factory;
    ``tl.Tensor(data)`` and ``tl.Tensor(*sizes)`` are torch's legacy constructors (the default
    float dtype; sizes give zeros, where torch leaves memory uninitialised)."""

    # ``_retains`` (set by ``retain_grad`` only, read with a default) is never initialised: the
    # per-op constructor stays as short as it was; nor is ``_former`` (set by ``detach_`` only),
    # nor ``_hooks`` (``register_hook`` only: the gradient hooks, a dict id -> function).
    # ``_base``: the tensor whose storage a view shares (torch's views), else None.
    __slots__ = ("_value", "_op", "_parents", "_attrs", "requires_grad", "grad", "_vc",
                 "_freed", "_retains", "_former", "_base", "_hooks", "__weakref__")
    __hash__ = Ref.__hash__  # tensors are dict keys (as in torch); == is elementwise
    _value: Any
    _op: Primitive | None
    _parents: tuple[Tensor, ...]
    _attrs: dict[str, Any]
    _hooks: dict[int, Any]
    requires_grad: bool
    grad: Tensor | None
    # [version, sequence number of the last change, of the last recorded change that left
    # other aliases' histories stale, weak references to the storage's views (or None)]: one
    # list shared by every alias of one storage (detach, .data, views).
    _vc: list[Any] | None
    _freed: bool
    _base: Tensor | None
    _former: list[tuple[int, Tensor]]  # (unset until detach_: ``_keep_former_node``)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The reverse pass keys its graph by the tensors themselves (``_graph_of``), which is
        # right only for the identity hash: a subclass that defines ``__eq__`` alone keeps it
        # (Python would make it unhashable), one that redefines ``__hash__`` is refused by name
        # rather than risk two tensors meeting as one key.
        super().__init_subclass__(**kwargs)
        if cls.__hash__ is not Tensor.__hash__:
            if cls.__dict__.get("__hash__", 0) is not None:
                raise TorchLeanError(f"{cls.__name__}: a Tensor subclass cannot redefine "
                                     "__hash__ (tensors hash by identity, as in torch; the "
                                     "reverse pass keys its graph by tensor)")
            cls.__hash__ = Tensor.__hash__  # type: ignore[method-assign]

    def __init__(self, *data: Any, device: Any = None) -> None:
        if len(data) == 1 and not isinstance(data[0], int | np.integer):
            arr = tensor(data[0], dtype=get_default_dtype() if not isinstance(
                data[0], Tensor) or data[0].dtype.kind != "f" else None, device=device)._value
        else:
            arr = zeros(*data, device=device)._value
        _init_slots(self, arr, None, (), {})

    @classmethod
    def _result(cls, value: Any, prim: Primitive | None, parents: tuple[Tensor, ...],
                attrs: dict[str, Any], shape: tuple[int, ...] | None = None) -> Tensor:
        """A computed tensor (``prim`` None: no history). Built slot by slot: this is the
        per-op path, and ``value`` is already a fresh array of a float dtype. ``shape``: the
        shape rule's result, kept when the value has it (an elementwise op's is its input's
        tuple: one tuple fewer per op, fewer garbage-collector passes)."""
        if type(value) is not np.ndarray:  # a kernel may return a NumPy scalar (or a device array)
            value = _as_value(value)
        t = object.__new__(cls)
        t._owner = RECORDER
        t._id = next(_sequence)
        vs = value.shape
        t.shape = vs if shape is None or shape != vs else shape
        t.dtype = value.dtype
        t._value = value
        t._op = prim
        t._parents = parents
        t._attrs = attrs
        t.requires_grad = prim is not None
        t.grad = None
        t._vc = None
        t._freed = False
        t._base = None
        return t

    # --- reading ------------------------------------------------------------------------------
    @property
    def is_leaf(self) -> bool:
        return self._op is None

    @property
    def grad_fn(self) -> GradFn | None:
        """The node that made this tensor (``None`` for a leaf): its ``name()`` is the
        primitive's, and ``next_functions`` lead to its inputs' nodes, as in torch."""
        return None if self._op is None else GradFn(self)

    @property
    def data(self) -> Tensor:
        """The same values (the same storage) without history: changing it changes this
        tensor, and is not recorded (torch's ``.data``)."""
        return self.detach()

    @data.setter
    def data(self, new: Any) -> None:
        value = new._value if isinstance(new, Tensor) else _as_value(new)
        self._value = value
        self.shape = tuple(value.shape)
        self.dtype = value.dtype
        self._bump()

    @property
    def device(self) -> str:
        """Where the value lives: "cpu" or "cuda"."""
        return "cpu" if isinstance(self._value, np.ndarray) else "cuda"

    @property
    def is_cuda(self) -> bool:
        return not isinstance(self._value, np.ndarray)

    def numpy(self) -> np.ndarray:
        """The value as a NumPy array (the tensor's own storage, as torch's ``.numpy()``)."""
        if not isinstance(self._value, np.ndarray):
            raise DeviceError(f"numpy: the tensor is on device '{self.device}'; call .cpu() "
                              "first to copy it to the host (as in PyTorch)")
        if self.requires_grad:
            raise TorchLeanError("numpy: call .detach().numpy() on a tensor that requires grad "
                                 "(as in PyTorch)")
        return self._value

    def _host(self) -> np.ndarray:
        """The value on the host: the array itself, or an explicit readback from a device."""
        value = self._value
        return value if isinstance(value, np.ndarray) else to_host(value)

    def item(self) -> Any:
        if self._value.size != 1:
            raise ShapeError(f"item: needs a tensor with one element, found shape {self.shape}")
        return self._host().item()

    def tolist(self) -> Any:
        return self._host().tolist()

    def numel(self) -> int:
        return int(self._value.size)

    nelement = numel

    def size(self, dim: int | None = None) -> Any:
        if dim is None:
            return Size(self.shape)
        return self.shape[F._axis("size", dim, self.ndim)]

    def dim(self) -> int:
        return self.ndim

    ndimension = dim

    def detach(self) -> Tensor:
        """A new leaf sharing this value (and its version counter), with no history."""
        t = _leaf(self._value)
        t._vc = _counter(self)
        return t

    def detach_(self) -> Tensor:
        """This tensor, made a leaf without history in place. As in torch, only later uses see
        the leaf: results computed from it before keep their graph, through its former node
        (``_keep_former_node``). A view is refused, as in torch."""
        if self._base is not None:
            raise TorchLeanError("detach_: can't detach views in-place; use detach() instead "
                                 "(as in PyTorch)")
        if self._op is not None:
            _keep_former_node(self)
        self._op, self._parents, self._attrs = None, (), {}
        self.requires_grad = False
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if not self.is_leaf:
            raise TorchLeanError("requires_grad_: only leaf tensors can change requires_grad; "
                                 "use .detach() first")
        if requires_grad and self.dtype.kind != "f":
            raise TorchLeanError(f"requires_grad_: only float tensors can require gradients, "
                                 f"found dtype {self.dtype}")
        self.requires_grad = bool(requires_grad)
        return self

    def __repr__(self) -> str:
        body = _format(self._host())
        extra = "" if self.device == "cpu" else f", device='{self.device}'"
        default = get_default_dtype()
        if self.dtype != default and self.dtype not in (int64, bool_):
            extra += f", dtype=torch.{self.dtype.name}"
        if self._op is not None:
            extra += f", grad_fn=<{grad_fn_name(self._op.name)}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    # Values exist here (unlike a traced ref), so Python may read them.
    def __bool__(self) -> bool:
        if self._value.size != 1:
            raise ShapeError(f"bool: the truth value of a tensor with {self._value.size} "
                             "elements is ambiguous")
        return bool(self._host())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise TorchLeanError(f"only integer tensors can be used as an index, found "
                                 f"{self.dtype}")
        return int(self.item())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if not isinstance(self._value, np.ndarray):
            raise DeviceError(f"a tensor on device '{self.device}' cannot become a NumPy array "
                              "implicitly; call .cpu() first (as in PyTorch)")
        return self._value if dtype is None else self._value.astype(dtype)

    # Comparisons give bool tensors with no gradient (as in PyTorch).
    def _compare(self, other: Any, name: str) -> Tensor:
        value = self._value
        xp = np if type(value) is np.ndarray else namespace_of(value)
        if isinstance(other, Tensor):
            rhs = other._value
            if namespace_of(rhs) is not xp:
                raise device_mismatch(name, other.device, self.device, "a tensor")
        elif isinstance(other, Ref):
            raise TraceError(f"{name}: a tensor and a session or graph ref were mixed in one op")
        else:
            rhs = _operand(name, other)
            if isinstance(rhs, Tensor):
                rhs = rhs._value
            if xp is not np and isinstance(rhs, np.ndarray):
                raise device_mismatch(name, "cpu", self.device, "a NumPy array")
        try:
            out = getattr(xp, name)(value, rhs)
        except ValueError:
            raise ShapeError(f"{name}: the shapes {self.shape} and {tuple(np.shape(rhs))} do "
                             "not broadcast") from None
        return _leaf(np.asarray(out) if xp is np else out)

    def __lt__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare(other, "less")

    def __le__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare(other, "less_equal")

    def __gt__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare(other, "greater")

    def __ge__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare(other, "greater_equal")

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        if other is None or isinstance(other, str):
            return False  # as torch: a tensor never equals None or a string
        return self._compare(other, "equal")

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        if other is None or isinstance(other, str):
            return True
        return self._compare(other, "not_equal")

    def float(self) -> Tensor:
        return self.to(float32)

    def double(self) -> Tensor:
        return self.to(float64)

    def square(self) -> Tensor:  # type: ignore[override]
        if self.dtype.kind == "b":
            return self.long().square()  # torch: a bool tensor squares to int64
        return Ref.square(self)  # type: ignore[return-value]

    def long(self) -> Tensor:
        return self.to(int64)

    def to(self, *args: Any, dtype: Any = None, device: str | None = None) -> Tensor:
        """This tensor on another device and/or of another dtype, as torch's ``.to``:
        ``.to(dtype)``, ``.to(device)``, ``.to(device, dtype)``, ``.to(other_tensor)`` or the
        keywords. ``self`` when nothing changes. A move between devices is an explicit
        transfer; with a history the gradient flows back across it (to the source device). A
        cast of a tensor that requires grad is refused (every op runs in one float dtype)."""
        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif _is_device(a):
                device = a
            else:
                dtype = a
        target = self.dtype if dtype is None else as_dtype("to", dtype)
        value = self._value
        src = np if type(value) is np.ndarray else namespace_of(value)
        xp = src if device is None else _namespace(device)
        if target != self.dtype and self.requires_grad and is_grad_enabled():
            if target.kind != "f":
                return _leaf(value.astype(target))  # as torch: an integer copy has no history
            cast = _cast(self, target)
            return cast if xp is src else cast.to(device=device)
        if xp is src:
            return self if target == self.dtype else _leaf(value.astype(target))
        moved = to_device(value, xp)  # the explicit transfer
        if target != self.dtype:
            moved = moved.astype(target)
        if self.requires_grad and is_grad_enabled():
            return Tensor._result(moved, _copy_between(src), (self,), {})
        return _leaf(moved)

    def cuda(self) -> Tensor:
        """This tensor on the CUDA device (``.to("cuda")``)."""
        return self.to(device="cuda")

    def cpu(self) -> Tensor:
        """This tensor on the host (``.to("cpu")``): an explicit readback from a device."""
        return self.to(device="cpu")

    # --- reverse mode -------------------------------------------------------------------------
    def backward(self, gradient: Any = None, retain_graph: bool = False,
                 create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (and its ``Param``'s)."""
        seed = _seed("backward", self, gradient)
        if create_graph:
            seed = _leaf(seed)
        alloc.another_pass()  # (a training loop keeps its freed buffers: core/alloc.py)
        _reverse([self], [seed], create_graph, retain_graph or create_graph, accumulate=True)

    # max/min/amax/amin without a history to record (no_grad, or no input needs a gradient)
    # are one NumPy reduction; with one they are the general path's tree of binary maxima
    # (``ops_interface._fold_extremum``: its gradient splits ties evenly), which costs two ops
    # per entry (a 32 x 27 tensor: 1,700 ops, 126 ms) and is only needed for the gradient.
    def amax(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        out = _plain_extremum(self, dim, keepdim, np.max)
        return out if out is not None else Ref.amax(self, dim, keepdim)  # type: ignore[return-value]

    def amin(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        out = _plain_extremum(self, dim, keepdim, np.min)
        return out if out is not None else Ref.amin(self, dim, keepdim)  # type: ignore[return-value]

    def max(self, dim: Any = None, keepdim: bool = False) -> Any:
        """The largest entry, or ``(values, indices)`` along ``dim``; ties share the gradient."""
        out = _plain_extremum(self, dim, keepdim, np.max)
        if out is None:
            return Ref.max(self, dim, keepdim)
        return out if dim is None else MaxResult(out, self.argmax(dim, keepdim))

    def min(self, dim: Any = None, keepdim: bool = False) -> Any:
        out = _plain_extremum(self, dim, keepdim, np.min)
        if out is None:
            return Ref.min(self, dim, keepdim)
        return out if dim is None else MaxResult(out, self.argmin(dim, keepdim))

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        """Indices of the largest entries (int64, no gradient); over all entries for None."""
        return _arg("argmax", self, dim, keepdim)

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        return _arg("argmin", self, dim, keepdim)

    def __getitem__(self, index: Any) -> Tensor:  # type: ignore[override]
        """torch's indexing (``torch_index``): integers select first, masks must match, every
        index is range-checked. One int or slice on a float tensor records the registry's
        Fin-checked gathers."""
        if not (self.requires_grad and is_grad_enabled()):
            return _getitem(self, index)  # a view (torch's basic indexing) or a copy
        if type(index) is int and self.dtype.kind == "f" and self.shape:
            n = self.shape[0]
            if not -n <= index < n:
                raise IndexRangeError(f"indexing: index {index} is out of bounds for dimension "
                                      f"0 with size {n}")
            if type(self._value) is np.ndarray:
                return _viewed(_lean_row(self, index + n if index < 0 else index), self, index)
            return _viewed(Ref.__getitem__(self, index), self, index)  # type: ignore[arg-type]
        if type(index) is slice and self.dtype.kind == "f" and self.shape:
            if type(self._value) is np.ndarray and index.step in (None, 1):
                start, stop, _ = index.indices(self.shape[0])
                length = stop - start if stop > start else 0
                out = _record_shaped(_SLICE_RANGE0, self, {"start": start, "length": length},
                                     (length,) + self.shape[1:])
                return _viewed(out, self, index)
            return _viewed(Ref.__getitem__(self, index), self, index)  # type: ignore[arg-type]
        return _getitem(self, index)

    # --- torch's type promotion on the operators ------------------------------------------------
    # The hot path (float tensors of one dtype, Python numbers) goes straight to Ref's operators;
    # anything else (integer or bool data, mixed dtypes, 0-d tensors) through ``_promoted``.
    # The per-op hot path records the primitive directly (both operands are this recorder's:
    # no ownership check to make, no attribute binding).
    def __add__(self, other: Any) -> Tensor:  # type: ignore[override]
        if self.dtype.kind == "f":
            kind = type(other)
            if (kind is Tensor or isinstance(other, Tensor)) and other.dtype is self.dtype:
                return _record2(_ADD, self, other)
            if kind is int or (kind is float and other - other == 0.0):  # finite
                return _record_c(_ADD_SCALAR, self, float(other))
        return _promoted("add", self, other)

    def __radd__(self, other: Any) -> Tensor:  # type: ignore[override]
        if self.dtype.kind == "f":
            kind = type(other)
            if kind is int or (kind is float and other - other == 0.0):  # finite
                return _record_c(_ADD_SCALAR, self, float(other))
        return _promoted("add", other, self)

    def __sub__(self, other: Any) -> Tensor:  # type: ignore[override]
        if self.dtype.kind == "f":
            kind = type(other)
            if (kind is Tensor or isinstance(other, Tensor)) and other.dtype is self.dtype:
                return _record2(_SUB, self, other)
            if kind is int or (kind is float and other - other == 0.0):  # finite
                return _record_c(_ADD_SCALAR, self, -float(other))
        return _promoted("sub", self, other)

    def __rsub__(self, other: Any) -> Tensor:  # type: ignore[override]
        if self.dtype.kind == "f":
            kind = type(other)
            if kind is int or (kind is float and other - other == 0.0):  # finite
                return _record_c(_ADD_SCALAR, _record_c(_SCALE, self, -1.0), float(other))
        return _promoted("sub", other, self)

    def __mul__(self, other: Any) -> Tensor:  # type: ignore[override]
        if self.dtype.kind == "f":
            kind = type(other)
            if (kind is Tensor or isinstance(other, Tensor)) and other.dtype is self.dtype:
                return _record2(_MUL, self, other)
            if kind is int or (kind is float and other - other == 0.0):  # finite
                return _record_c(_SCALE, self, float(other))
        return _promoted("mul", self, other)

    def __rmul__(self, other: Any) -> Tensor:  # type: ignore[override]
        if self.dtype.kind == "f":
            kind = type(other)
            if kind is int or (kind is float and other - other == 0.0):  # finite
                return _record_c(_SCALE, self, float(other))
        return _promoted("mul", other, self)

    def __truediv__(self, other: Any) -> Tensor:  # type: ignore[override]
        if self.dtype.kind == "f":
            kind = type(other)
            if (kind is Tensor or isinstance(other, Tensor)) and other.dtype is self.dtype:
                return Ref.__truediv__(self, other)  # type: ignore[return-value]
            if (kind is int or kind is float) and other != 0 and math.isfinite(1.0 / other):
                return _record_c(_SCALE, self, 1.0 / other)
        return _promoted("div", self, other)

    def __rtruediv__(self, other: Any) -> Tensor:  # type: ignore[override]
        if self.dtype.kind == "f":
            kind = type(other)
            if kind is int or (kind is float and other - other == 0.0):
                return Ref.__rtruediv__(self, other)  # type: ignore[return-value]
        return _promoted("div", other, self)

    def __floordiv__(self, other: Any) -> Tensor:
        return _promoted("floordiv", self, other)

    def __rfloordiv__(self, other: Any) -> Tensor:
        return _promoted("floordiv", other, self)

    def __mod__(self, other: Any) -> Tensor:
        return _promoted("mod", self, other)

    def __rmod__(self, other: Any) -> Tensor:
        return _promoted("mod", other, self)

    def __pow__(self, exponent: Any) -> Tensor:  # type: ignore[override]
        if type(exponent) is int and exponent > 1 and self.dtype.kind == "f" \
                and type(self._value) is np.ndarray:
            return _lean_power(self, exponent)
        return _promoted("pow", self, exponent)

    def __rpow__(self, base: Any) -> Tensor:
        return _promoted("pow", base, self)

    def __neg__(self) -> Tensor:  # type: ignore[override]
        if self.dtype.kind == "b":
            raise TorchLeanError("neg: negation, the `-` operator, on a bool tensor is not "
                                 "supported (as in PyTorch); use ~ or logical_not() instead")
        if self.dtype.kind != "f":
            return _leaf(-self._value)
        return Ref.__neg__(self)  # type: ignore[return-value]

    def __invert__(self) -> Tensor:
        if self.dtype.kind == "f":
            raise TorchLeanError("bitwise_not (~): only integer and bool tensors, found "
                                 f"{self.dtype.name}")
        return _leaf(~self._value)

    def __and__(self, other: Any) -> Tensor:
        return _bitwise("and", self, other)

    def __or__(self, other: Any) -> Tensor:
        return _bitwise("or", self, other)

    def __xor__(self, other: Any) -> Tensor:
        return _bitwise("xor", self, other)

    __rand__ = __and__
    __ror__ = __or__
    __rxor__ = __xor__

    def __matmul__(self, other: Any) -> Tensor:  # type: ignore[override]
        return _matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:  # type: ignore[override]
        return _matmul(other, self)

    def add(self, other: Any, alpha: builtins.float = 1) -> Tensor:
        return self + (other if alpha == 1 else other * alpha)

    def sub(self, other: Any, alpha: builtins.float = 1) -> Tensor:
        return self - (other if alpha == 1 else other * alpha)

    def mul(self, other: Any) -> Tensor:
        return self * other

    def div(self, other: Any, rounding_mode: str | None = None) -> Tensor:
        if rounding_mode is None:
            return self / other
        if rounding_mode == "floor":
            return self // other
        if rounding_mode == "trunc":
            q = self / other
            return _leaf(np.trunc(q._value).astype(_promote_of("div", self, other, True)))
        raise TorchLeanError(f"div: rounding_mode must be None, 'trunc' or 'floor', found "
                             f"{rounding_mode!r}")

    multiply = mul
    subtract = sub
    divide = div
    true_divide = __truediv__

    def pow(self, exponent: Any) -> Tensor:  # type: ignore[override]
        return _promoted("pow", self, exponent)

    def matmul(self, other: Any) -> Tensor:  # type: ignore[override]
        return _matmul(self, other)

    mm = matmul

    def dot(self, other: Any) -> Tensor:
        if self.ndim != 1 or not isinstance(other, Tensor) or other.ndim != 1:
            raise ShapeError(f"dot: expects two 1-D tensors, found shapes {self.shape} and "
                             f"{getattr(other, 'shape', type(other).__name__)}")
        return (self * other).sum()

    # --- comparisons -----------------------------------------------------------------------------
    def eq(self, other: Any) -> Tensor:
        return self._compare(other, "equal")

    def ne(self, other: Any) -> Tensor:
        return self._compare(other, "not_equal")

    def lt(self, other: Any) -> Tensor:
        return self._compare(other, "less")

    def le(self, other: Any) -> Tensor:
        return self._compare(other, "less_equal")

    def gt(self, other: Any) -> Tensor:
        return self._compare(other, "greater")

    def ge(self, other: Any) -> Tensor:
        return self._compare(other, "greater_equal")

    def equal(self, other: Any) -> bool:
        """True when both have the same shape and values (torch.equal)."""
        return (isinstance(other, Tensor) and other.shape == self.shape
                and bool(np.all(self._host() == other._host())))

    def allclose(self, other: Any, rtol: builtins.float = 1e-5, atol: builtins.float = 1e-8,
                 equal_nan: bool = False) -> bool:
        return bool(np.allclose(self._host(), _host_of(other), rtol, atol, equal_nan))

    def isnan(self) -> Tensor:
        return _leaf(namespace_of(self._value).isnan(self._value))

    def isfinite(self) -> Tensor:
        return _leaf(namespace_of(self._value).isfinite(self._value))

    def logical_not(self) -> Tensor:
        return _leaf(namespace_of(self._value).logical_not(self._value))

    def any(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        axis = None if dim is None else F._axis("any", dim, self.ndim)
        return _leaf(np.asarray(namespace_of(self._value).any(self._value, axis=axis,
                                                              keepdims=keepdim)))

    def all(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        axis = None if dim is None else F._axis("all", dim, self.ndim)
        return _leaf(np.asarray(namespace_of(self._value).all(self._value, axis=axis,
                                                              keepdims=keepdim)))

    # --- unary functions (integer input promotes to the default float, as in torch) -------------
    def _float_input(self, op: str) -> Tensor:
        if self.dtype.kind == "f":
            return self
        return _leaf(self._value.astype(get_default_dtype()))

    # The unary methods of the per-op hot path take their (absent) arguments themselves instead
    # of through ``checked_signature`` (a wrapper call per op, ~0.2 us): any argument is the same
    # named ``SignatureError``.
    def exp(self, *args: Any, **kwargs: Any) -> Tensor:  # type: ignore[override]
        if args or kwargs:
            _takes_no_arguments("exp", args, kwargs)
        return _record1(_EXP, self if self.dtype.kind == "f" else self._float_input("exp"))

    def log(self) -> Tensor:  # type: ignore[override]
        return _unary("log", self._float_input("log"))

    def sqrt(self) -> Tensor:  # type: ignore[override]
        return _unary("sqrt", self._float_input("sqrt"))

    def tanh(self, *args: Any, **kwargs: Any) -> Tensor:  # type: ignore[override]
        if args or kwargs:
            _takes_no_arguments("tanh", args, kwargs)
        return _record1(_TANH, self if self.dtype.kind == "f" else self._float_input("tanh"))

    def sigmoid(self, *args: Any, **kwargs: Any) -> Tensor:  # type: ignore[override]
        if args or kwargs:
            _takes_no_arguments("sigmoid", args, kwargs)
        return _record1(_SIGMOID,
                        self if self.dtype.kind == "f" else self._float_input("sigmoid"))

    def sin(self) -> Tensor:
        return _unary("sin", self._float_input("sin"))

    def cos(self) -> Tensor:
        return _unary("cos", self._float_input("cos"))

    def rsqrt(self) -> Tensor:
        return 1.0 / self.sqrt()

    def reciprocal(self) -> Tensor:
        return 1.0 / self._float_input("reciprocal")

    def neg(self) -> Tensor:
        return -self

    def t(self) -> Tensor:  # type: ignore[override]
        if self.ndim < 2:
            return self  # as torch: 0-d and 1-D tensors are their own transpose
        return self.T

    @property
    def T(self) -> Tensor:  # type: ignore[override]  # noqa: N802  (PyTorch's name)
        if self.ndim == 2:
            return self.transpose(0, 1)
        return Ref.T.fget(self)  # type: ignore[attr-defined,no-any-return]

    def floor(self) -> Tensor:
        return _rounded(self, "floor")

    def ceil(self) -> Tensor:
        return _rounded(self, "ceil")

    def round(self) -> Tensor:  # type: ignore[override]
        return _rounded(self, "round")

    def trunc(self) -> Tensor:
        return _rounded(self, "trunc")

    def sign(self) -> Tensor:
        return _rounded(self, "sign")

    def cumsum(self, dim: builtins.int) -> Tensor:
        """Running sums along ``dim`` (a product with a triangle of ones: differentiable)."""
        axis = F._axis("cumsum", dim, builtins.max(self.ndim, 1))
        if self.dtype.kind != "f" or not self.ndim:
            value = self._host() if self.ndim else self._host().reshape(1)
            out = np.cumsum(value, axis=axis)
            out = out.astype(np.int64 if self.dtype.kind != "f" else self.dtype)
            return _leaf(out.reshape(self.shape))
        n = self.shape[axis]
        upper = _leaf(np.triu(np.ones((n, n), self.dtype)))
        moved = self.transpose(axis, -1) if axis != self.ndim - 1 else self
        summed = moved @ upper
        return summed.transpose(axis, -1) if axis != self.ndim - 1 else summed  # type: ignore

    def norm(self, p: Any = 2, dim: Any = None, keepdim: builtins.bool = False) -> Tensor:
        """The p-norm (2 or 1; "fro" is 2) over ``dim`` (every entry for None)."""
        if p in (2, "fro"):
            return (self * self).sum(dim, keepdim).sqrt()
        if p == 1:
            return self.abs().sum(dim, keepdim)
        raise TorchLeanError(f"norm: p must be 1, 2 or 'fro', found {p!r}")

    def sort(self, dim: builtins.int = -1, descending: builtins.bool = False, *,
             stable: builtins.bool = False) -> Any:
        # always stable (NumPy's stable argsort), which torch's stable=False allows
        return _sort(self, dim, descending, None)

    def topk(self, k: builtins.int, dim: builtins.int = -1, largest: builtins.bool = True,
             sorted: builtins.bool = True) -> Any:  # noqa: A002
        return _sort(self, dim, largest, k)

    def argsort(self, dim: builtins.int = -1, descending: builtins.bool = False, *,
                stable: builtins.bool = False) -> Tensor:
        return _sort(self, dim, descending, None).indices  # type: ignore[no-any-return]

    def relu(self, *args: Any, **kwargs: Any) -> Tensor:  # type: ignore[override]
        if args or kwargs:
            _takes_no_arguments("relu", args, kwargs)
        if self.dtype.kind != "f":
            return _leaf(np.maximum(self._value, 0).astype(self.dtype))
        return _record1(_RELU, self)

    def abs(self) -> Tensor:  # type: ignore[override]
        if self.dtype.kind != "f":
            return _leaf(abs(self._value))
        return Ref.abs(self)  # type: ignore[return-value]

    def clamp(self, min: Any = None, max: Any = None) -> Tensor:  # type: ignore[override]  # noqa: A002
        if min is None and max is None:
            raise TorchLeanError("clamp: at least one of 'min' or 'max' must not be None")
        if isinstance(min, Tensor) or isinstance(max, Tensor):
            out = self
            if min is not None:
                out = _where(out < min, min, out)
            if max is not None:
                out = _where(out > max, max, out)
            return out
        if self.dtype.kind != "f":
            value = np.clip(self._value, min, max)
            return _leaf(value.astype(_promote_of("clamp", self, min if min is not None else
                                                  max, False)))
        return Ref.clamp(self, min, max)  # type: ignore[return-value]

    clip = clamp

    def sum(self, dim: Any = None, keepdim: bool = False, dtype: Any = None, *,  # type: ignore[override]
            keepdims: bool | None = None) -> Tensor:
        if keepdims is not None:  # NumPy's spelling, which torch also accepts
            keepdim = keepdims
        if isinstance(dim, tuple | list) and len(dim) == 0:
            dim = None  # torch: an empty dim list reduces everything
        if dtype is not None:
            return self.to(as_dtype("sum", dtype)).sum(dim, keepdim)
        if (dim is None or type(dim) is int) and self.dtype.kind == "f":
            out = _lean_reduce(_REDUCE_SUM, self, dim, keepdim)
            if out is not None:
                return out
        if self.dtype.kind != "f":
            axes = None if dim is None else F._axes("sum", dim, self.ndim)
            if self.ndim == 0:
                axes, keepdim = None, False  # dim 0 or -1 of a 0-d tensor: the value itself
            value = self._value.sum(axis=axes, keepdims=keepdim)
            xp = namespace_of(self._value)
            return _leaf(xp.asarray(value).astype(np.int64))
        return Ref.sum(self, dim, keepdim)  # type: ignore[return-value]

    def mean(self, dim: Any = None, keepdim: bool = False, dtype: Any = None, *,  # type: ignore[override]
             keepdims: bool | None = None) -> Tensor:
        if keepdims is not None:
            keepdim = keepdims
        if isinstance(dim, tuple | list) and len(dim) == 0:
            dim = None
        if dtype is not None:
            return self.to(as_dtype("mean", dtype)).mean(dim, keepdim)
        if (dim is None or type(dim) is int) and self.dtype.kind == "f":
            out = _lean_reduce(_REDUCE_MEAN, self, dim, keepdim)
            if out is not None:
                return out
        if self.dtype.kind != "f":
            raise TorchLeanError(f"mean: could not infer output dtype; the input dtype must be a "
                                 f"floating point dtype, found {self.dtype.name} (as in PyTorch; "
                                 "use .float() first)")
        return Ref.mean(self, dim, keepdim)  # type: ignore[return-value]

    def var(self, dim: Any = None, unbiased: bool = True, keepdim: bool = False, *,
            correction: int | None = None) -> Tensor:
        """Variance over ``dim`` (all entries for None) with Bessel's correction by default."""
        if self.dtype.kind != "f":
            raise TorchLeanError(f"var: std and var only support floating point dtypes, found "
                                 f"{self.dtype.name} (as in PyTorch)")
        x = self
        axes = None if dim is None else F._axes("var", dim, builtins.max(x.ndim, 1))
        n = x.numel() if axes is None or not x.ndim else int(np.prod([x.shape[a] for a in axes]))
        ddof = (1 if unbiased else 0) if correction is None else int(correction)
        if not x.ndim:
            dim = None
        if not (x.requires_grad and _state.grad_enabled):
            plain = _plain_var(x, dim, keepdim, n - ddof)
            if plain is not None:
                return plain
        centred = x - x.mean(dim, keepdim=True)
        squares = (centred * centred).sum(dim, keepdim)
        if n - ddof > 0:  # the registry's scale (the lean scalar path; the same product)
            return _record_c(_SCALE, squares, 1.0 / (n - ddof))
        return _scaled(squares, float("nan"))

    def std(self, dim: Any = None, unbiased: bool = True, keepdim: bool = False, *,
            correction: int | None = None) -> Tensor:
        return self.var(dim, unbiased, keepdim, correction=correction).sqrt()

    def prod(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        if self.requires_grad and is_grad_enabled():
            raise TorchLeanError("prod: not differentiable in torchlean; compute it under "
                                 "no_grad or use exp(log(x).sum())")
        axis = None if dim is None else F._axis("prod", dim, self.ndim)
        return _leaf(np.asarray(np.prod(self._host(), axis=axis, keepdims=keepdim)))

    # --- shapes -----------------------------------------------------------------------------
    # The layout methods below take a lean path for the common call on a float host tensor
    # (int arguments that are valid here): the result shape is computed once, here, and the
    # primitive recorded with its attributes already in normal form (``_record_shaped``),
    # about 2 us instead of 7-9 through ``F.apply``. Anything else (lists of NumPy ints, an
    # axis out of range, a device tensor) takes the general path, which checks everything and
    # raises its errors.
    def reshape(self, *shape: Any) -> Tensor:  # type: ignore[override]
        dims = shape[0] if len(shape) == 1 and type(shape[0]) in _DIM_SEQUENCES else shape
        target = _lean_shape(dims, self.shape)
        if target is None or type(self._value) is not np.ndarray or self.dtype.kind != "f":
            return Ref.reshape(self, *shape)  # type: ignore[return-value]
        return _record_shaped(_RESHAPE, self, {"shape": target}, target)

    view = reshape  # type: ignore[assignment]

    def permute(self, *dims: Any) -> Tensor:  # type: ignore[override]
        perm = dims[0] if len(dims) == 1 and type(dims[0]) in _DIM_SEQUENCES else dims
        n = len(self.shape)
        if (len(perm) == n and all(type(d) is int and -n <= d < n for d in perm)
                and type(self._value) is np.ndarray and self.dtype.kind == "f"):
            axes = tuple([d % n for d in perm])
            if len(set(axes)) == n:
                shape = self.shape
                return _permuted(self, axes, tuple([shape[a] for a in axes]))
        return Ref.permute(self, *dims)  # type: ignore[return-value]

    def transpose(self, dim0: int, dim1: int) -> Tensor:  # type: ignore[override]
        n = len(self.shape)
        if (type(dim0) is int and type(dim1) is int and n and -n <= dim0 < n
                and -n <= dim1 < n and type(self._value) is np.ndarray
                and self.dtype.kind == "f"):
            a, b = dim0 % n, dim1 % n
            if a == b:
                return self
            perm = list(range(n))
            perm[a], perm[b] = b, a
            shape = list(self.shape)
            shape[a], shape[b] = shape[b], shape[a]
            return _permuted(self, tuple(perm), tuple(shape))
        return Ref.transpose(self, dim0, dim1)  # type: ignore[return-value]

    def softmax(self, dim: int) -> Tensor:  # type: ignore[override]
        n = len(self.shape)
        if type(dim) is int and n and (dim == -1 or dim == n - 1) and self.dtype.kind == "f":
            return _record1(_SOFTMAX, self)  # (its shape rule checks the last axis)
        return Ref.softmax(self, dim)  # type: ignore[return-value]

    def view_as(self, other: Any) -> Tensor:
        return self.reshape(tuple(other.shape))  # type: ignore[return-value]

    def reshape_as(self, other: Any) -> Tensor:
        return self.reshape(tuple(other.shape))  # type: ignore[return-value]

    def expand(self, *sizes: Any) -> Tensor:
        """This tensor broadcast to ``sizes`` (-1 keeps a dimension), as torch's ``expand``."""
        shape = F._shape_arg(sizes)
        shape = tuple(shape) if isinstance(shape, tuple | list) else (shape,)
        lead = len(shape) - self.ndim
        if lead < 0:
            raise ShapeError(f"expand: the number of sizes provided ({len(shape)}) must be at "
                             f"least the number of dimensions ({self.ndim})")
        target = tuple(self.shape[k - lead] if s == -1 and k >= lead else int(s)
                       for k, s in enumerate(shape))
        for k, n in enumerate(self.shape):
            if n != 1 and n != target[k + lead]:
                raise ShapeError(f"expand: the expanded size of the tensor ({target[k + lead]}) "
                                 f"must match the existing size ({n}) at non-singleton "
                                 f"dimension {k + lead}; target sizes {list(shape)}")
        if target == self.shape:
            return self
        if self.dtype.kind != "f":
            return _leaf(namespace_of(self._value).broadcast_to(self._value, target).copy())
        return F.broadcast_to(self, shape=target)  # type: ignore[no-any-return]

    def expand_as(self, other: Any) -> Tensor:
        return self.expand(tuple(other.shape))

    def repeat(self, *sizes: Any) -> Tensor:
        reps = F._shape_arg(sizes)
        reps = tuple(reps) if isinstance(reps, tuple | list) else (reps,)
        if self.requires_grad and is_grad_enabled():
            out = self
            for _ in range(len(reps) - self.ndim):
                out = out.unsqueeze(0)  # type: ignore[assignment]
            for axis, r in enumerate(reps):
                if r != 1:
                    out = cat([out] * int(r), dim=axis)
            return out
        return _leaf(np.tile(self._value, reps))

    def contiguous(self) -> Tensor:
        """``self`` when its value is in row-major order, else a row-major copy (recorded as
        the identity permutation, whose reference forward copies), as torch's."""
        v = self._value
        if v.flags.c_contiguous:
            return self
        if self.dtype.kind != "f":  # data: a fresh row-major copy, no history to keep
            return _leaf(v.copy())
        return _record_shaped(_PERMUTE, self, {"perm": tuple(range(self.ndim))}, self.shape)

    def clone(self) -> Tensor:
        """A copy with the same history (gradients flow back through it)."""
        if self.requires_grad and is_grad_enabled():
            return self * 1.0 if self.dtype.kind == "f" else _leaf(self._value.copy())
        return _leaf(self._value.copy())

    def type(self, dtype: Any = None) -> Any:
        """The type name (``"torch.FloatTensor"``) without an argument, else a cast (torch's
        ``.type(dtype)``)."""
        if dtype is None:
            return _TYPE_NAMES.get(self.dtype.name, f"torch.{self.dtype.name}")
        if isinstance(dtype, str) and dtype in _NAMED_TYPES:
            dtype = _NAMED_TYPES[dtype]
        return self.to(as_dtype("type", dtype))

    def int(self) -> Tensor:
        return self.to(np.dtype(np.int32))

    def bool(self) -> Tensor:
        return self.to(np.dtype(np.bool_))

    def element_size(self) -> builtins.int:
        return int(self.dtype.itemsize)

    def is_floating_point(self) -> builtins.bool:
        return self.dtype.kind == "f"

    def masked_fill(self, mask: Any, value: Any) -> Tensor:
        """``value`` where ``mask`` (a bool tensor) is True; the result has the two shapes'
        broadcast shape, as torch's out-of-place form (``masked_fill_`` keeps this one's)."""
        mask_shape = tuple(getattr(mask, "shape", ()))
        if mask_shape != self.shape and len(mask_shape) >= len(self.shape):
            try:
                shape = np.broadcast_shapes(self.shape, mask_shape)
            except ValueError:
                shape = self.shape  # _masked_fill names the mismatch
            if shape != self.shape:
                return _masked_fill(self.expand(*shape), mask, value)
        return _masked_fill(self, mask, value)

    def new_zeros(self, *size: Any, dtype: Any = None) -> Tensor:
        return zeros(*size, dtype=dtype or self.dtype, device=self.device)

    def new_ones(self, *size: Any, dtype: Any = None) -> Tensor:
        return ones(*size, dtype=dtype or self.dtype, device=self.device)

    def new_tensor(self, data: Any, dtype: Any = None) -> Tensor:
        return tensor(data, dtype=dtype or self.dtype, device=self.device)

    def new_full(self, size: Any, fill_value: Any, dtype: Any = None) -> Tensor:
        return full(size, fill_value, dtype=dtype or self.dtype, device=self.device)

    # --- versions and in-place operations ----------------------------------------------------
    @property
    def _version(self) -> builtins.int:
        """How many times this value was changed in place (torch's ``_version``)."""
        return 0 if self._vc is None else self._vc[0]

    def _bump(self) -> None:
        vc = _counter(self)
        vc[0] += 1
        vc[1] = next(_sequence)

    def _stale_hint(self) -> str:
        return ("Hint: use .clone() (or an out-of-place op) before changing a tensor that a "
                "recorded op still needs.")

    def mark_updated(self) -> None:
        """Record an in-place change of ``array`` made outside the tensor API (optimisers)."""
        self._bump()

    @property
    def array(self) -> Any:
        """The value where it lives (NumPy or CuPy), shared, not copied: changes made to it are
        changes of this tensor (call ``mark_updated`` after one)."""
        return self._value

    def add_(self, other: Any, alpha: builtins.float = 1) -> Tensor:
        if alpha == 1 and _lean_update(self, other, _ADD):
            return self
        return _inplace("add_", self, lambda a, b: a + (b if alpha == 1 else b * alpha), other)

    def sub_(self, other: Any, alpha: builtins.float = 1) -> Tensor:
        if alpha == 1 and _lean_update(self, other, _SUB):
            return self
        return _inplace("sub_", self, lambda a, b: a - (b if alpha == 1 else b * alpha), other)

    def mul_(self, other: Any) -> Tensor:
        if _lean_update(self, other, _MUL):
            return self
        return _inplace("mul_", self, lambda a, b: a * b, other)

    def div_(self, other: Any) -> Tensor:
        return _inplace("div_", self, lambda a, b: a / b, other)

    def pow_(self, exponent: Any) -> Tensor:
        return _inplace("pow_", self, lambda a, b: a ** b, exponent)

    def clamp_(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        return _inplace("clamp_", self, lambda a: a.clamp(min, max))

    clip_ = clamp_

    def neg_(self) -> Tensor:
        return _inplace("neg_", self, lambda a: -a)

    def exp_(self) -> Tensor:
        return _inplace("exp_", self, lambda a: a.exp())

    def sqrt_(self) -> Tensor:
        return _inplace("sqrt_", self, lambda a: a.sqrt())

    def relu_(self) -> Tensor:
        return _inplace("relu_", self, lambda a: a.relu())

    def sigmoid_(self) -> Tensor:
        return _inplace("sigmoid_", self, lambda a: a.sigmoid())

    def tanh_(self) -> Tensor:
        return _inplace("tanh_", self, lambda a: a.tanh())

    def abs_(self) -> Tensor:
        return _inplace("abs_", self, lambda a: a.abs())

    def masked_fill_(self, mask: Any, value: Any) -> Tensor:
        return _inplace("masked_fill_", self, lambda a, v: _masked_fill(a, mask, v), value)

    def addcmul_(self, t1: Any, t2: Any, value: builtins.float = 1) -> Tensor:
        return _inplace("addcmul_", self, lambda a, b: a + b * value, t1 * t2)

    def addcdiv_(self, t1: Any, t2: Any, value: builtins.float = 1) -> Tensor:
        return _inplace("addcdiv_", self, lambda a, b: a + b * value, t1 / t2)

    def zero_(self) -> Tensor:
        """Set every entry to 0 in place."""
        return self.fill_(0)

    def fill_(self, value: Any) -> Tensor:
        """Set every entry to ``value`` (a number or a 0-d tensor) in place."""
        if isinstance(value, Tensor):
            if value.ndim:
                raise ShapeError(f"fill_: only supports 0-dimension value tensor but got tensor "
                                 f"with {value.ndim} dimensions")
            return _inplace("fill_", self, lambda a, v: a * 0 + v, value)
        _check_number("fill_", value)
        return _inplace("fill_", self, lambda a: _filled(a, value))

    def copy_(self, src: Any) -> Tensor:
        """Copy ``src`` (broadcast to this shape, cast to this dtype) into this tensor."""
        src_t = src if isinstance(src, Tensor) else tensor(src)
        return _inplace("copy_", self, lambda a, b: _copied(a, b), src_t, cast=True)

    def uniform_(self, a: builtins.float = 0.0, b: builtins.float = 1.0,
                 generator: Generator | None = None) -> Tensor:
        gen = check_generator("uniform_", generator)
        draw = _draw(gen, "uniform", self.shape, self.dtype, namespace_of(self._value))
        return _inplace("uniform_", self, lambda t: _filled(t, draw * (b - a) + a))

    def normal_(self, mean: builtins.float = 0.0, std: builtins.float = 1.0,
                generator: Generator | None = None) -> Tensor:
        gen = check_generator("normal_", generator)
        draw = _draw(gen, "normal", self.shape, self.dtype, namespace_of(self._value))
        return _inplace("normal_", self, lambda t: _filled(t, draw * std + mean))

    def __iadd__(self, other: Any) -> Tensor:
        return self.add_(other)

    def __isub__(self, other: Any) -> Tensor:
        return self.sub_(other)

    def __imul__(self, other: Any) -> Tensor:
        return self.mul_(other)

    def __itruediv__(self, other: Any) -> Tensor:
        return self.div_(other)

    def __setitem__(self, index: Any, value: Any) -> None:
        _setitem(self, index, value)

    def __format__(self, spec: str) -> str:
        if spec and self._value.size == 1:
            return format(self.item(), spec)  # f"{loss:.4f}", as torch formats a one-element tensor
        return repr(self) if not spec else format(repr(self), spec)

    def scatter_(self, dim: builtins.int, index: Any, src: Any = None, value: Any = None,
                 ) -> Tensor:
        """Write ``src`` (or the number ``value``) at ``index`` along ``dim`` in place; a float
        ``src`` or ``self`` with a history is differentiated through, as torch's."""
        if not isinstance(index, Tensor) or index.dtype.kind not in "iu":
            raise TorchLeanError("scatter_: index must be an integer tensor")
        if (src is None) == (value is None):
            raise TorchLeanError("scatter_: give exactly one of src or value")
        axis = F._axis("scatter_", dim, builtins.max(self.ndim, 1))
        idx = index._host()
        if idx.ndim == 0:
            idx = idx.reshape(1)  # a 0-d index (one position), as torch accepts it
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= self.shape[axis]):
            raise IndexRangeError(f"scatter_: index out of range for dimension {axis} of size "
                                  f"{self.shape[axis]}")
        if (isinstance(src, Tensor) and src.ndim == idx.ndim == self.ndim
                and builtins.all(a >= b for a, b in zip(src.shape, idx.shape, strict=True))
                and self.dtype.kind == "f" and (src.requires_grad or self.requires_grad)
                and is_grad_enabled()):
            # Differentiable: an indexed assignment of src's leading block at the scattered
            # positions. Its VJP is torch's scatter backward: g with the written entries zeroed
            # for self, g gathered at index for src (a duplicate that lost the write included).
            grids: list[Any] = list(np.indices(idx.shape, sparse=True))
            grids[axis] = idx
            where = tuple(_leaf(np.broadcast_to(g, idx.shape).astype(np.int64)) for g in grids)
            _setitem(self, where, src[tuple(slice(0, n) for n in idx.shape)])
            return self
        fill = src._host() if isinstance(src, Tensor) else np.full(idx.shape, value)

        def compute(t: Tensor) -> Tensor:
            out = t._host().copy()
            np.put_along_axis(out, idx.reshape(idx.shape if out.ndim else (1,)),
                              np.broadcast_to(fill, idx.shape).astype(out.dtype), axis)
            return _leaf(out)

        return _inplace("scatter_", self, compute)

    def __copy__(self) -> Tensor:
        """``copy.copy``: torch's shallow copy, a new leaf over the same storage with the same
        ``requires_grad``; no ``.grad`` and no history, even when this tensor has one (as
        torch's). ``copy.deepcopy`` copies the data. Unlike torch's, the copy shares the
        version counter too (torch's starts a counter of its own), so a write through it
        still makes a backward that needs the old value refuse rather than go wrong."""
        t = self.detach()
        t.requires_grad = self.requires_grad
        return t

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickling and ``copy.deepcopy`` keep the value and ``requires_grad`` (a copy is a
        leaf, as torch's deepcopy of a leaf; a tensor with a history is refused, as in torch)."""
        if self._op is not None:
            raise TorchLeanError("deepcopy/pickle: only leaf tensors can be copied this way "
                                 "(as in PyTorch); use .detach() or .clone() first")
        return (_rebuild_leaf, (to_host(self._value), self.requires_grad))

    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup fails: a torch method torchlean does not have
        if name.startswith("__") or name.startswith("_"):
            raise AttributeError(name)
        raise MissingTorchName(f"torchlean's Tensor has no method or attribute '{name}' (torch's "
                               f"Tensor.{name} is not implemented)")

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in ``.grad`` at every ``backward()`` that reaches
        it (a leaf keeps it anyway), as torch's."""
        global _ANY_RETAINED
        if not self.requires_grad:
            raise TorchLeanError("retain_grad: can't retain_grad on a tensor that has "
                                 "requires_grad=False (as in torch)")
        if self._op is not None:
            # A flag on the tensor, not a registry: nothing outlives the tensor (a module-level
            # table kept every flagged tensor alive until a backward reached it).
            self._retains = True
            _ANY_RETAINED = True

    def register_hook(self, hook: Callable[[Any], Any]) -> TensorHookHandle:
        """Call ``hook(grad)`` each time this tensor's gradient is computed, before it flows on
        (a non-leaf) or accumulates into ``.grad`` (a leaf); a returned tensor replaces it. As
        torch's, including the handle's ``remove()``."""
        global _ANY_HOOKS
        if not callable(hook):
            raise TorchLeanError(f"register_hook: expected a callable, found "
                                 f"{type(hook).__name__}")
        if not self.requires_grad:
            raise TorchLeanError("register_hook: cannot register a hook on a tensor that doesn't "
                                 "require gradient (as in torch)")
        hooks: dict[int, Any] | None = getattr(self, "_hooks", None)
        if hooks is None:
            hooks = self._hooks = {}
        handle = TensorHookHandle(hooks)
        hooks[handle.id] = hook
        _ANY_HOOKS = True
        return handle

    @property
    def retains_grad(self) -> builtins.bool:
        """Whether ``backward()`` keeps this non-leaf tensor's gradient (``retain_grad``)."""
        return self._op is not None and getattr(self, "_retains", False)


# ---------------------------------------------------------------------------------------------
# torch semantics of the operators: promotion, integer arithmetic, in-place ops, indexing


_TYPE_NAMES = {"float32": "torch.FloatTensor", "float64": "torch.DoubleTensor",
               "int64": "torch.LongTensor", "int32": "torch.IntTensor",
               "int16": "torch.ShortTensor", "int8": "torch.CharTensor",
               "uint8": "torch.ByteTensor", "bool": "torch.BoolTensor"}
_NAMED_TYPES = {v: np.dtype(k) for k, v in _TYPE_NAMES.items()}


def _check_number(op: str, value: Any) -> None:
    if isinstance(value, bool | int | float | np.number | np.bool_):
        return
    raise TorchLeanError(f"{op}: expected a number, found {type(value).__name__} {value!r}")


def _operand(op: str, x: Any) -> Any:
    """A Tensor stays; numbers stay; NumPy arrays become tensors (dtype kept); anything else is
    refused naming the op."""
    if isinstance(x, Tensor) or isinstance(x, bool | int | float | np.number | np.bool_):
        return x
    if isinstance(x, np.ndarray):
        return _leaf(x)
    raise TorchLeanError(f"{op}: expected a tensor or a number, found {type(x).__name__}")


def _promote_of(op: str, a: Any, b: Any, divide: bool) -> np.dtype:
    dt = result_type(op, (a, b))
    if divide and dt.kind != "f":
        dt = get_default_dtype()
    return dt


def _as_float_operand(x: Any, dt: np.dtype) -> Any:
    """``x`` ready for a float op of dtype ``dt``: numbers as Python floats, tensors cast (with
    a differentiable cast for float tensors that require grad)."""
    if not isinstance(x, Tensor):
        return float(x)
    if x.dtype == dt:
        return x
    if x.dtype.kind == "f" and x.requires_grad and is_grad_enabled():
        return _cast(x, dt)
    return _leaf(x._value.astype(dt))


def _cast(x: Tensor, dt: np.dtype) -> Tensor:
    return RECORDER.record(TP.cast(x.dtype, dt), (x,), {})


_NUMPY_BINARY = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "true_divide",
                 "floordiv": "floor_divide", "mod": "remainder", "pow": "power"}


def _promoted(op: str, a: Any, b: Any) -> Tensor:
    """``a <op> b`` (one of them a Tensor) with torch's result dtype."""
    if (isinstance(a, Ref) and not isinstance(a, Tensor)) or (
            isinstance(b, Ref) and not isinstance(b, Tensor)):
        raise TraceError(f"{op}: a tensor and a session or graph ref were mixed in one op")
    a = _operand(op, a)
    b = _operand(op, b)
    _check_broadcast(op, a, b)
    dt = _promote_of(op, a, b, op == "div")
    if op == "sub" and any(isinstance(v, bool | np.bool_) or (isinstance(v, Tensor) and
                                                             v.dtype.kind == "b") for v in (a, b)):
        raise TorchLeanError("sub: subtraction, the `-` operator, with two bool tensors is not "
                             "supported (as in PyTorch); use the `^` or logical_xor() operator "
                             "instead")
    if dt.kind != "f":
        return _integer_op(op, a, b, dt)
    x = _as_float_operand(a, dt)
    y = _as_float_operand(b, dt)
    if op == "pow":
        return _power(x, y, dt)
    if op == "div":
        if not isinstance(y, Tensor):
            if y == 0:  # x / 0 is inf, -inf or nan, as in torch
                return _scaled(x, float("inf") if y == 0 and not np.signbit(y) else -math.inf)
            return x * (1.0 / y)  # type: ignore[no-any-return]
        if not isinstance(x, Tensor):
            return x * y.reciprocal()
        return x * y.reciprocal()  # type: ignore[no-any-return]
    if op in ("floordiv", "mod"):
        if (isinstance(x, Tensor) and x.requires_grad) or (isinstance(y, Tensor) and
                                                           y.requires_grad):
            if op == "floordiv":
                raise TorchLeanError("floor_divide: not differentiable (as in PyTorch)")
            q = _leaf(np.floor(_host_of(x / y)).astype(dt))
            return x - q * y  # type: ignore[no-any-return]
        xv, yv = _values(x, dt), _values(y, dt)
        with np.errstate(all="ignore"):
            return _leaf(np.asarray(getattr(np, _NUMPY_BINARY[op])(xv, yv), dtype=dt))
    if isinstance(x, float) and not math.isfinite(x):  # the registry's constants are finite
        x = _leaf(np.full((), x, dtype=dt))
    if isinstance(y, float) and not math.isfinite(y):
        y = _leaf(np.full((), y, dtype=dt))
    if isinstance(x, Tensor) and isinstance(y, Tensor):  # one dtype now: record directly
        return RECORDER.record({"add": _ADD, "sub": _SUB, "mul": _MUL}[op], (x, y), {})
    t, c = (x, y) if isinstance(x, Tensor) else (y, x)
    if op == "add":
        return RECORDER.record(_ADD_SCALAR, (t,), {"c": float(c)})
    if op == "mul":
        return RECORDER.record(_SCALE, (t,), {"c": float(c)})
    if t is x:  # tensor - number
        return RECORDER.record(_ADD_SCALAR, (x,), {"c": -float(c)})
    negated = RECORDER.record(_SCALE, (t,), {"c": -1.0})
    return RECORDER.record(_ADD_SCALAR, (negated,), {"c": float(c)})


def _rounded(x: Tensor, op: str) -> Tensor:
    """floor/ceil/round/trunc/sign: piecewise constant, so no gradient flows (torch's is
    zero); integer input is returned as it is (sign: its sign)."""
    xp = namespace_of(x._value)
    if x.dtype.kind == "b" or (x.dtype.kind != "f" and op != "sign"):
        return x
    fn = {"round": xp.round, "floor": xp.floor, "ceil": xp.ceil, "trunc": xp.trunc,
          "sign": xp.sign}[op]
    out = _leaf(fn(x._value).astype(x.dtype))
    if x.requires_grad and is_grad_enabled():
        return RECORDER.record(TP.where(xp.ones(x.shape, np.bool_)), (out, x), {})
    return out


def _sort(t: Tensor, dim: int, descending: bool, k: int | None) -> Any:
    """``(values, indices)`` along ``dim``, all of them or the first ``k``; the values are
    gathered with ``take`` (they keep the gradient)."""
    if t.dtype.kind == "b" and k is not None:
        raise TorchLeanError("topk: not implemented for bool tensors (as in PyTorch)")
    if not t.ndim:
        return MaxResult(t, _leaf(np.zeros((), np.int64)))
    axis = F._axis("sort", dim, t.ndim)
    value = t._host()
    order = np.argsort(-value if descending and t.dtype.kind != "b" else value, axis=axis,
                       kind="stable")
    if descending and t.dtype.kind == "b":
        order = np.flip(np.argsort(value, axis=axis, kind="stable"), axis=axis)
    if k is not None:
        n = t.shape[axis]
        if not 0 <= k <= n:
            raise ShapeError(f"topk: k ({k}) out of range for dimension {dim} of size {n}")
        order = np.take(order, np.arange(k), axis=axis)
    grids: list[Any] = list(np.indices(order.shape, sparse=True))
    grids[axis] = order
    index = tuple(np.broadcast_to(g, order.shape) for g in grids)
    values = Ref.__getitem__(t, index) if t.dtype.kind == "f" and t.requires_grad else \
        _leaf(t._value[index])
    return MaxResult(values, _leaf(order.astype(np.int64)))


def _scaled(x: Tensor, c: float) -> Tensor:
    """``x * c`` for a possibly infinite c (x / 0): 0 * inf is nan, as torch's 0 / 0."""
    return RECORDER.record(TP.scale_any(c), (x,), {})


def _values(x: Any, dt: np.dtype) -> Any:
    if isinstance(x, Tensor):
        return x._value
    with np.errstate(all="ignore"):  # a Python int wraps into uint8 as in torch
        return np.asarray(x).astype(dt)


def _host_of(x: Any) -> Any:
    return x._host() if isinstance(x, Tensor) else x


def _integer_op(op: str, a: Any, b: Any, dt: np.dtype) -> Tensor:
    """Integer or bool arithmetic (no gradient: such tensors never require one)."""
    av, bv = _values(a, dt), _values(b, dt)
    xp = namespace_of(av) if isinstance(a, Tensor) else namespace_of(bv)
    try:
        out_shape = np.broadcast_shapes(tuple(av.shape), tuple(bv.shape))
    except ValueError:
        raise ShapeError(f"{op}: the shapes {tuple(av.shape)} and {tuple(bv.shape)} do not "
                         "broadcast") from None
    # an empty result divides nothing (torch answers it)
    if op in ("floordiv", "mod") and math.prod(out_shape) and bool(xp.any(bv == 0)):
        raise TorchLeanError(f"{op}: integer division by zero (ZeroDivisionError in PyTorch)")
    if op == "pow" and dt.kind != "b" and not isinstance(b, Tensor) and b < 0:
        raise TorchLeanError("pow: integers to negative integer powers are not allowed (as in "
                             "PyTorch); use a float base")
    if dt.kind == "b":
        fn = {"add": xp.logical_or, "mul": xp.logical_and}.get(op)
        if op == "pow" and not isinstance(b, Tensor):  # torch: bool ** True is itself
            return _leaf(xp.power(av.astype(np.int64), int(b)).astype(np.bool_))
        if fn is None:
            raise TorchLeanError(f"{op}: not implemented for bool tensors (as in PyTorch); "
                                 "convert with .long() or .float() first")
        return _leaf(fn(av, bv))
    fn = getattr(xp, _NUMPY_BINARY[op])
    if op == "pow" and bool(xp.any(bv < 0)):  # torch: 0 unless the base is 1 or -1
        with np.errstate(all="ignore"):
            value = xp.trunc(xp.power(av.astype(np.float64), bv.astype(np.float64)))
            value = xp.where(xp.isfinite(value), value, 0.0)  # 0 ** -k: torch gives 0
        return _leaf(value.astype(dt))
    with np.errstate(all="ignore"):
        value = fn(av.astype(dt, copy=False), bv.astype(dt, copy=False))
    return _leaf(xp.asarray(value).astype(dt, copy=False))


def _power(x: Any, y: Any, dt: np.dtype) -> Tensor:
    """``x ** y`` in float dtype ``dt``: integer and 0.5 exponents through the registry's
    primitives (they trace and verify), anything else through the tensor-only ``pow``."""
    if isinstance(x, Tensor) and not isinstance(y, Tensor):
        if y == 2:
            return x.square()  # type: ignore[return-value]
        if y == int(y) if math.isfinite(y) else False:
            return F.power(x, y)  # type: ignore[no-any-return]
        if y == 0.5:
            return x.sqrt()  # type: ignore[no-any-return]
        y = _leaf(np.asarray(y, dtype=dt))
    elif not isinstance(x, Tensor):
        x = _leaf(np.asarray(x, dtype=dt))
    return RECORDER.record(TP.POW, (x, y), {})


def _lean_power(x: Tensor, n: int) -> Tensor:
    """``x ** n`` for a float host tensor and a Python int ``n > 1`` (``x ** 2``, ``x ** 3`` in
    polynomial fits): the square-and-multiply records of ``ops_interface.power`` (what the
    general path reaches through ``_promoted``, whose checks a float tensor and an int pass:
    the dtype stays x's), recorded directly."""
    result: Tensor | None = None
    square = x
    k = n
    while k:
        if k & 1:
            result = square if result is None else _record2(_MUL, result, square)
        k >>= 1
        if k:
            square = _record1(_SQUARE, square)
    assert result is not None
    return result


def _check_broadcast(op: str, a: Any, b: Any) -> None:
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise ShapeError(f"{op}: shapes {list(a.shape)} and {list(b.shape)} do not "
                             f"broadcast") from None


def _bitwise(op: str, a: Any, b: Any) -> Tensor:
    a = _operand(op, a)
    b = _operand(op, b)
    _check_broadcast(f"bitwise_{op}", a, b)
    dt = result_type(op, (a, b))
    if dt.kind == "f":
        raise TorchLeanError(f"bitwise_{op}: only integer and bool tensors, found {dt.name}")
    av, bv = _values(a, dt), _values(b, dt)
    xp = namespace_of(av) if isinstance(a, Tensor) else namespace_of(bv)
    return _leaf(getattr(xp, f"bitwise_{op}")(av.astype(dt), bv.astype(dt)))


def _matmul(a: Any, b: Any) -> Tensor:
    for x in (a, b):
        if not isinstance(x, Tensor):
            raise TorchLeanError(f"matmul: expected tensors, found {type(x).__name__}")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: both arguments need at least 1 dimension, found shapes "
                         f"{list(a.shape)} and {list(b.shape)}")
    if a.dtype != b.dtype or a.dtype.kind != "f":
        if a.dtype.kind != "f" and b.dtype.kind != "f":
            if a.dtype != b.dtype:
                raise TorchLeanError(f"matmul: expected both tensors of one dtype, found "
                                     f"{a.dtype.name} and {b.dtype.name}")
            try:
                return _leaf(np.asarray(a._value @ b._value))
            except ValueError:
                raise ShapeError(f"matmul: shapes {list(a.shape)} and {list(b.shape)} cannot "
                                 f"be multiplied") from None
        raise TorchLeanError(f"matmul: expected both tensors of one dtype, found "
                             f"{a.dtype.name} and {b.dtype.name} (as in PyTorch; cast one)")
    sa, sb = a.shape, b.shape
    if type(a._value) is np.ndarray and type(b._value) is np.ndarray and len(sb) >= 2:
        # The lean forms of ``matmul_any``'s cases (the same primitives, so the same graph and
        # bits); each primitive's shape rule checks the inner dimensions.
        if len(sa) == 2 and len(sb) == 2:
            return _record2(_MATMUL, a, b, infer=True)
        if len(sb) == 2 and len(sa) > 2 and sa[-1] == sb[0]:
            lead = sa[:-1]
            flat = (math.prod(lead), sa[-1])
            out = _record2(_MATMUL, _record_shaped(_RESHAPE, a, {"shape": flat}, flat), b,
                           infer=True)
            shape = lead + (sb[1],)
            return _record_shaped(_RESHAPE, out, {"shape": shape}, shape)
        if len(sa) == len(sb) and len(sa) > 2:
            prim = _BMM if len(sa) == 3 and sa[0] == sb[0] else _MATMUL_ND
            return _record2(prim, a, b, infer=True)
    return F.matmul_any(a, b)  # type: ignore[no-any-return]


def _unary(op: str, x: Tensor) -> Tensor:
    if op == "sin":
        return _record1(TP.SIN, x)
    if op == "cos":
        return _record1(TP.COS, x)
    if op == "log":
        return RECORDER.record(TP.LOG, (x,), {})
    if op == "sqrt":
        value = x._value
        if bool(namespace_of(value).any(value < 0)):  # torch's NaN, not the registry's total 0
            return RECORDER.record(TP.SQRT, (x,), {})
    return getattr(Ref, op)(x)  # type: ignore[no-any-return]


def _where(cond: Any, a: Any, b: Any) -> Tensor:
    """torch.where(cond, a, b) with torch's promotion and gradients for a and b."""
    if not isinstance(cond, Tensor) or cond.dtype.kind != "b":
        raise TorchLeanError(f"where: the condition must be a bool tensor, found "
                             f"{getattr(cond, 'dtype', type(cond).__name__)}")
    a = _operand("where", a)
    b = _operand("where", b)
    dt = result_type("where", (a, b))
    try:
        shape = np.broadcast_shapes(cond.shape, getattr(a, "shape", ()), getattr(b, "shape", ()))
    except ValueError:
        raise ShapeError(f"where: the shapes {cond.shape}, {getattr(a, 'shape', ())} and "
                         f"{getattr(b, 'shape', ())} do not broadcast") from None
    if dt.kind != "f" or not any(isinstance(t, Tensor) and t.requires_grad for t in (a, b)) \
            or not is_grad_enabled():
        xp = namespace_of(cond._value)
        value = xp.where(cond._value, _values(a, dt), _values(b, dt)).astype(dt)
        return _leaf(xp.asarray(value).reshape(shape))
    ta = a if isinstance(a, Tensor) else _leaf(np.asarray(a, dt))
    tb = b if isinstance(b, Tensor) else _leaf(np.asarray(b, dt))
    ta, tb = (_as_float_operand(t, dt) for t in (ta, tb))
    return RECORDER.record(TP.where(cond._value), (ta, tb), {})


def _masked_fill(x: Tensor, mask: Any, value: Any) -> Tensor:
    if isinstance(mask, np.ndarray) and mask.dtype.kind == "b":
        mask = _leaf(mask)  # a module buffer compared with a number
    if not isinstance(mask, Tensor) or mask.dtype.kind != "b":
        raise TorchLeanError(f"masked_fill: expected a bool mask tensor, found "
                             f"{getattr(mask, 'dtype', type(mask).__name__)}")
    try:
        if np.broadcast_shapes(mask.shape, x.shape) != x.shape:
            raise ValueError
    except ValueError:
        raise ShapeError(f"masked_fill: the mask of shape {mask.shape} does not broadcast to "
                         f"the tensor's shape {x.shape}") from None
    if isinstance(value, Tensor):
        if value.ndim:
            raise ShapeError(f"masked_fill: only supports a 0-dimensional value tensor, but got "
                             f"one with {value.ndim} dimensions")
    else:
        _check_number("masked_fill", value)
        value = _leaf(np.asarray(value, dtype=x.dtype))
    if value.dtype != x.dtype:
        value = _leaf(value._value.astype(x.dtype)) if not value.requires_grad else \
            _as_float_operand(value, x.dtype)
    return _where(mask, value, x).expand(x.shape) if x.shape != np.broadcast_shapes(
        mask.shape, x.shape) else _where(mask, value, x)


def _filled(t: Tensor, value: Any) -> Tensor:
    """A tensor of t's shape and dtype holding ``value`` (a number or an array)."""
    xp = namespace_of(t._value)
    return _leaf(xp.broadcast_to(xp.asarray(value, dtype=t.dtype), t.shape).copy())


def _copied(dst: Tensor, src: Tensor) -> Tensor:
    """``src`` broadcast to dst's shape in dst's dtype (differentiable for float data)."""
    if src.dtype != dst.dtype:
        src = _as_float_operand(src, dst.dtype) if dst.dtype.kind == "f" and \
            src.dtype.kind == "f" else _leaf(src._value.astype(dst.dtype))
    if src.shape != dst.shape:
        src = src.expand(dst.shape)
    return src if src is not dst else src.clone()


def _inplace(op: str, self: Tensor, compute: Callable[..., Tensor], *others: Any,
             cast: bool = False) -> Tensor:
    """Run ``compute(self, *others)`` out of place and write the result into ``self``'s storage
    (aliases see it), bumping its version. With a history, ``self`` becomes the result's node
    and its old self lives on as a snapshot (a copy of the old value with the old history), so
    gradients through the in-place op are exact; later backwards through ops that used the old
    value are refused with torch's error."""
    grad_on = is_grad_enabled()
    if grad_on and self.requires_grad and self._op is None:
        raise TorchLeanError(f"{op}: a leaf Variable that requires grad is being used in an "
                             "in-place operation (as in PyTorch: wrap the update in "
                             "tl.no_grad(), or change .data)")
    storage = self._base
    if grad_on and storage is not None and storage.requires_grad:
        # torch's two refusals for views: the write would change a leaf's value behind its
        # gradient, or (a view made without history) leave the base's history ambiguous.
        if storage._op is None:
            raise TorchLeanError(f"{op}: a view of a leaf Variable that requires grad is being "
                                 "used in an in-place operation (as in PyTorch: wrap the "
                                 "update in tl.no_grad(), or change .data)")
        if self._op is None:
            raise TorchLeanError(f"{op}: a view created in no_grad mode is being modified in "
                                 "place with grad mode enabled (as in PyTorch, this ambiguous "
                                 "use is forbidden: clone() the view first)")
    record = grad_on and (self.requires_grad or any(
        isinstance(o, Tensor) and o.requires_grad for o in others))
    # A recorded write through a view rewrites the base's history too (torch's CopySlices):
    # the base becomes "its old value with the view's entries replaced by the new ones", and
    # the view's old value is read from the base's old node, not through the view's own
    # history (which leads to the base object, whose node changes here). Every other view
    # then becomes a gather of the base's new node (``_regenerate_views``).
    rebase = _rebase_plan(self, storage) if record and storage is not None else None
    if record:
        base = (_snapshot(self) if rebase is None
                else RECORDER.record(TP.TAKE(rebase[0]), (rebase[1],), {}))
        out = compute(base, *[base if o is self else o for o in others])
    else:
        with _GradMode(False):
            out = compute(self, *others)
    if not isinstance(out, Tensor):
        out = _leaf(np.asarray(out))
    if record and out._op is None and out.dtype == self.dtype and out.shape == self.shape:
        # a value that does not depend on the old one (fill_, zero_, normal_): recorded as a
        # selection of the new value, so the gradient to the old history is zero, as in torch
        keep = namespace_of(self._value).ones(self.shape, np.bool_)
        out = RECORDER.record(TP.where(keep), (out, base), {})
    if out.shape != self.shape:
        raise ShapeError(f"{op}: output with shape {list(self.shape)} doesn't match the "
                         f"broadcast shape {list(out.shape)}")
    if out.dtype != self.dtype and not cast and not np.can_cast(out.dtype, self.dtype,
                                                                "same_kind"):
        raise TorchLeanError(f"{op}: result type {out.dtype.name} can't be cast to the desired "
                             f"output type {self.dtype.name} (as in PyTorch)")
    _write(op, self, out._value)
    self._bump()
    if record and out._op is not None:
        self._op, self._parents, self._attrs = out._op, out._parents, out._attrs
        self.requires_grad = True
        self._id = next(_sequence)
        current = storage is None or rebase is not None
        if rebase is not None and storage is not None:
            # (``out``, not ``self``: the view object may take a later write's node, and this
            # node must keep reading this write's value)
            index, old_base = rebase
            _renode(storage, RECORDER.record(TP.setitem(index, storage.shape),
                                             (old_base, out), {}))
        if current and not _regenerate_views(storage if storage is not None else self, self):
            current = False
        if not current:
            # Aliases whose histories could not be rewritten (device arrays): ``_graph_of``
            # refuses to differentiate through them for ops recorded after now.
            vc = self._vc
            vc[2] = vc[1]  # type: ignore[index]
    return self


def _lean_update(t: Tensor, other: Any, prim: Primitive) -> bool:
    """``t op= other`` for two float host tensors of one dtype when nothing is recorded or
    refused (no grad mode, or no operand needing a gradient and no base that does): the
    primitive's forward, written into the storage with one version bump, as ``_inplace``
    does for it; False (nothing done) for anything else, a shape the result cannot keep
    included."""
    if type(other) is not Tensor or other.dtype is not t.dtype or t.dtype.kind != "f":
        return False
    va, vb = t._value, other._value
    if type(va) is not np.ndarray or type(vb) is not np.ndarray:
        return False
    if _state.grad_enabled:
        base = t._base
        if t.requires_grad or other.requires_grad or (base is not None and base.requires_grad):
            return False
    if vb.shape != va.shape:
        try:
            if np.broadcast_shapes(va.shape, vb.shape) != va.shape:
                return False
        except ValueError:
            return False
    out = (prim.forward(va, vb) if prim.fast_forward is None
           else _fast_forward(False, prim.forward, va, vb))
    try:
        va[...] = out
    except ValueError:  # read-only storage: the general path raises its error
        return False
    t._bump()
    return True


def _renode(t: Tensor, node: Tensor) -> None:
    """``t`` takes ``node``'s history (its value, the storage, is already ``node``'s)."""
    t._op, t._parents, t._attrs = node._op, node._parents, node._attrs
    t.requires_grad = node.requires_grad
    t._id = next(_sequence)


# Whether any tensor with a history was ever detached in place: until then the reverse pass
# skips the per-node lookup of former nodes (``_inputs_as_made``).
_ANY_DETACHED = False


def _keep_former_node(t: Tensor) -> None:
    """Before ``t.detach_()``: its node as it is now (the same value, storage and version
    counter, history and creation number) kept in ``t._former`` with the creation number from
    which ``t`` is a leaf, for the results already computed from it. A tensor is its own graph
    node, so those results name ``t`` among their inputs; the reverse pass reads the former
    node in its place (``_inputs_as_made``). torch refuses a backward that unpacks a saved
    tensor detached in place; here its value is the one the op used (a later in-place change
    is refused by the shared version counter), so the gradient is exact and is given."""
    global _ANY_DETACHED
    node = Tensor._result(t._value, t._op, t._parents, t._attrs, t.shape)
    node._id = t._id
    node._vc = _counter(t)
    node._freed = t._freed
    t._id = next(_sequence)
    former = getattr(t, "_former", None)
    if former is None:
        former = t._former = []
    former.append((t._id, node))
    _ANY_DETACHED = True


def _inputs_as_made(t: Tensor) -> tuple[Tensor, ...]:
    """``t``'s inputs, each the node it was when ``t`` was made: an input detached in place
    since (``detach_``) is replaced by its former node, once (``t._parents`` is rewritten)."""
    parents = t._parents
    if not any(getattr(p, "_former", None) for p in parents):
        return parents
    resolved = []
    for p in parents:
        for detached_at, node in getattr(p, "_former", None) or ():
            if t._id < detached_at:  # (the first such: ``t`` used this node, or an older one
                p = node             # that an in-place op replaced, which its checks refuse)
                break
        resolved.append(p)
    t._parents = tuple(resolved)
    return t._parents


def _regenerate_views(base: Tensor, writer: Tensor) -> bool:
    """After a recorded write into ``base``'s storage: every other live view with a history
    becomes a gather of the base's current node (torch regenerates a view's history the same
    way once its version changed), so no alias keeps a history that no longer makes its
    value. False where some view's entries cannot be located in the base."""
    views = base._vc[3] if base._vc is not None else None
    for entry in views or ():
        v = entry[0]()
        if v is None or v is writer or v._op is None:
            continue
        if entry[1] is None:  # located once: a view's place in its base never changes
            positions = (_positions(v._value, base._value)
                         if type(v._value) is np.ndarray and type(base._value) is np.ndarray
                         else None)
            if positions is None:
                return False
            entry[1] = TP.TAKE(np.unravel_index(positions, base.shape))
        # the node alone: the view's value is already the gather's (its storage)
        _renode(v, Tensor._result(v._value, entry[1], (base,), _NO_ATTRS, v.shape))
    return True


def _rebase_plan(view: Tensor, base: Tensor) -> tuple[Any, Tensor] | None:
    """For a recorded in-place op on ``view``: the NumPy index of its entries in ``base`` and
    a snapshot of ``base``'s old node, or None where the entries cannot be located (device
    arrays; then other aliases are refused after the write instead)."""
    v, b = view._value, base._value
    if type(v) is not np.ndarray or type(b) is not np.ndarray or v.dtype != b.dtype:
        return None
    positions = _positions(v, b)
    if positions is None:
        return None
    return np.unravel_index(positions, b.shape), _snapshot(base)


def _addresses(a: np.ndarray) -> np.ndarray:
    """The memory address of every entry of ``a`` (its shape, int64)."""
    addr = np.full((1,) * a.ndim, a.__array_interface__["data"][0], dtype=np.int64)
    for k, (n, st) in enumerate(zip(a.shape, a.strides, strict=True)):
        step = np.arange(n, dtype=np.int64) * st
        addr = addr + step.reshape((1,) * k + (n,) + (1,) * (a.ndim - k - 1))
    return np.broadcast_to(addr, a.shape)


def _positions(view: np.ndarray, base: np.ndarray) -> np.ndarray | None:
    """The row-major flat position in ``base`` of each entry of ``view`` (``view``'s shape),
    matched by address; None where ``base`` overlaps itself or an entry of ``view`` is not
    one of ``base``'s."""
    if base.flags.c_contiguous:  # the common case: positions are offsets, no sort
        offsets = _addresses(view) - base.__array_interface__["data"][0]
        if np.any(offsets % base.itemsize) or (
                offsets.size and (offsets.min() < 0 or offsets.max() >= base.nbytes)):
            return None
        return (offsets // base.itemsize).reshape(view.shape)
    at_base = _addresses(base).reshape(-1)
    order = np.argsort(at_base, kind="stable")
    ordered = at_base[order]
    if ordered.size and np.any(ordered[1:] == ordered[:-1]):
        return None
    at_view = _addresses(view).reshape(-1)
    if not ordered.size:
        return None if at_view.size else np.zeros(view.shape, np.int64)
    k = np.clip(np.searchsorted(ordered, at_view), 0, ordered.size - 1)
    if not np.array_equal(ordered[k], at_view):
        return None
    return order[k].reshape(view.shape)


def _write(op: str, t: Tensor, value: Any) -> None:
    try:
        t._value[...] = value
    except ValueError as exc:  # read-only storage (a broadcast view, a frozen array)
        raise TorchLeanError(f"{op}: cannot write into this tensor's storage ({exc})") from None


def _permuted(x: Tensor, axes: tuple[int, ...], shape: tuple[int, ...]) -> Tensor:
    """torch's ``permute`` / ``transpose`` of a float host tensor: a view of ``x``'s storage
    (writes through either reach the other, one version counter), recorded as the permute
    primitive, whose reference forward gives the same values copied into row-major order.
    The copy is left to the consumer that needs one (a reshape; a matrix product reads the
    strided operand as it is), as in torch."""
    out = x._value.transpose(axes)
    if x.requires_grad and _state.grad_enabled:
        res = Tensor._result(out, _PERMUTE, (x,), {"perm": axes}, shape)
    else:
        res = Tensor._result(out, None, (), _NO_ATTRS, shape)
    _share_storage(res, x)
    return res


def _counter(t: Tensor) -> list[Any]:
    """``t``'s version counter, made on first use (most tensors never need one)."""
    vc = t._vc
    if vc is None:
        vc = t._vc = [0, 0, 0, None]
    return vc


def _share_storage(view: Tensor, source: Tensor) -> None:
    """``view``'s value is (part of) ``source``'s storage: one version counter for both, so a
    change through either is seen by the other's checks, and the base remembered for the
    in-place refusals (torch's views)."""
    vc = view._vc = _counter(source)
    base = source._base
    view._base = source if base is None else base
    if view._op is None:
        return  # (only views with a history are regenerated after a write: no entry needed)
    views = vc[3]
    if views is None:
        views = vc[3] = []
    elif len(views) >= 32 and len(views) & (len(views) - 1) == 0:
        views[:] = [e for e in views if e[0]() is not None]  # (at powers of two: amortised)
    views.append([weakref.ref(view), None])  # [the view, its gather from the base, once made]


def _owner(a: np.ndarray) -> np.ndarray:
    """The array whose memory ``a`` views (``a`` itself when it owns it, or when its base is a
    foreign buffer: bytes, a memoryview). NumPy points a view's ``base`` at the owner, except
    through arrays over foreign buffers and ``as_strided``'s wrapper object, hence the walk."""
    b = a.base
    while b is not None:
        if isinstance(b, np.ndarray):
            a, b = b, b.base
        elif isinstance(getattr(b, "base", None), np.ndarray):  # as_strided's DummyArray
            b = b.base
        else:
            break
    return a


def _link_view(out: Tensor, inputs: Sequence[Tensor]) -> Tensor:
    """``out`` linked to the input whose storage its value shares, if any: called where a
    kernel returned a NumPy view (``.base`` set), as reshape and the identity casts do, or a
    reshaped fresh result (its owner is no input's); anything else costs one attribute
    test."""
    v = out._value
    if type(v) is np.ndarray:
        owner = _owner(v)
        for t in inputs:
            if type(t._value) is np.ndarray and _owner(t._value) is owner:
                _share_storage(out, t)
                break
    return out


def _snapshot(t: Tensor) -> Tensor:
    """t's node as it is now (a copy of the value, the same history and creation number)."""
    snap = Tensor._result(t._value.copy(), t._op, t._parents, t._attrs)
    snap._id = t._id
    if t._vc is not None:  # its changes so far (a frozen copy: the snapshot has no aliases)
        snap._vc = [*t._vc[:3], None]
    snap.requires_grad = t.requires_grad
    snap._freed = t._freed
    return snap


def _index_entries(index: Any) -> Any:
    """Tensor entries of an index as host arrays (0-d integer tensors as ints, as torch reads
    them); lists as arrays."""
    entries = index if isinstance(index, tuple) else (index,)
    out = []
    for e in entries:
        if isinstance(e, Tensor):
            v = e._host()
            out.append(int(v) if v.ndim == 0 and v.dtype.kind in "iu" else v)
        elif isinstance(e, Ref):
            raise TraceError("indexing: a session or graph ref cannot index a tensor")
        elif isinstance(e, list):
            out.append(np.asarray([_host_of(v) for v in e]) if e else np.zeros(0, np.int64))
        else:
            out.append(e)
    return tuple(out)


def _int_entries(index: Any, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """An index of integers only (Python ints, 0-d integer host tensors), at most one per axis
    and each in range, as non-negative ints; None for any other index (the general path
    checks it and raises torch's errors)."""
    entries = index if type(index) is tuple else (index,)
    if len(entries) > len(shape):
        return None
    out = []
    for n, e in zip(shape, entries, strict=False):
        kind = type(e)
        if kind is int:
            i = e
        elif (kind is Tensor and e.dtype.kind in "iu" and type(e._value) is np.ndarray
              and e._value.ndim == 0):
            i = int(e._value)
        else:
            return None
        if not -n <= i < n:
            return None
        out.append(i + n if i < 0 else i)
    return tuple(out)


def _getitem(t: Tensor, index: Any) -> Tensor:
    value = t._value
    if type(value) is np.ndarray and (t.dtype.kind != "f"
                                      or not (t.requires_grad and is_grad_enabled())):
        # Integers only (``x[k, j]``, ``x[ix]`` with a 0-d index tensor, in loops): the step
        # the general path builds is this tuple itself; the same view or 0-d copy below.
        ints = _int_entries(index, t.shape)
        if ints is not None:
            picked = value[ints]
            if type(picked) is not np.ndarray:
                return _leaf(np.asarray(picked))  # every axis indexed: a 0-d copy
            return _link_view(_leaf(picked), (t,))
    if not t.shape and index is not None and index is not Ellipsis and not (
            isinstance(index, tuple) and all(e is None or e is Ellipsis for e in index)):
        raise IndexRangeError(f"indexing: a 0-d tensor has no dimension to index, found index "
                              f"{index!r}")
    steps = torch_steps(_index_entries(index), t.shape)
    value = t._value
    if t.dtype.kind != "f" or not (t.requires_grad and is_grad_enabled()):
        xp = namespace_of(value)
        for step in steps:
            value = value[_device_index(step, xp) if xp is not np else step]
        if len(steps) == 1:  # basic indexing is a view, as in torch: writes reach t
            view = _leaf(value if hasattr(value, "shape") and value.shape != () or
                         not isinstance(value, np.generic) else np.asarray(value))
            return _link_view(view, (t,))
        return _leaf(value.copy() if isinstance(value, np.ndarray) else xp.asarray(value))
    out: Any = t
    for step in steps:
        if all(isinstance(e, slice) and e == slice(None) for e in step):
            continue
        out = Ref.__getitem__(out, step)
    return _viewed(out, t, steps[0]) if len(steps) == 1 and out is not t else out


def _viewed(out: Tensor, t: Tensor, index: Any) -> Tensor:
    """``out`` (``t[index]`` recorded by its gather) holding the same entries as a view of
    ``t``'s storage where NumPy's ``index`` is basic (a view), as torch's basic indexing is,
    history or not: the gather keeps its rule, writes through either reach the other."""
    value = t._value
    return adopt_view(out, t, value[index]) if type(value) is np.ndarray else out


def adopt_view(out: Tensor, t: Tensor, view: Any) -> Tensor:
    """``out`` (recorded from ``t`` by an op that copies) given ``view`` as its value where
    ``view`` is a NumPy view of ``t``'s storage with the same entries: torch's view ops
    (indexing, ``diagonal``) share storage, and writes through either reach the other."""
    if (type(view) is np.ndarray and view.base is not None and view.shape == out.shape
            and view.dtype == out.dtype and _owner(view) is _owner(t._value)):
        out._value = view
        _share_storage(out, t)
    return out


def _lean_setitem(t: Tensor, index: Any, value: Any) -> bool:
    """``t[ints] = value`` written straight into the storage (what ``_inplace`` does when it
    records nothing: the same NumPy assignment, one version bump) for an all-integer index on
    a host tensor, a float tensor or a host tensor value that broadcasts, and nothing to
    record or refuse; False (nothing done) for anything else."""
    target = t._value
    if type(target) is not np.ndarray:
        return False
    if type(value) is Tensor:
        src = value._value
        if type(src) is not np.ndarray or (value.requires_grad and is_grad_enabled()):
            return False
    elif type(value) is float and t.dtype.kind == "f":
        src = value
    else:
        return False
    if is_grad_enabled():
        base = t._base
        if t.requires_grad or (base is not None and base.requires_grad):
            return False
    ints = _int_entries(index, t.shape)
    if ints is None:
        return False
    if type(src) is np.ndarray:
        rest = t.shape[len(ints):]
        vs = src.shape
        if len(vs) > len(rest) or any(a != 1 and a != b for a, b in
                                      zip(reversed(vs), reversed(rest), strict=False)):
            return False  # the general path names the mismatch
    try:
        target[ints] = src
    except ValueError:  # read-only storage: the general path raises its error
        return False
    t._bump()
    return True


def _setitem(t: Tensor, index: Any, value: Any) -> None:
    if _lean_setitem(t, index, value):
        return
    steps = torch_steps(_index_entries(index), t.shape)
    # One NumPy index for the whole assignment: the first step's view, then the second's
    # entries, is the same as indexing a view; a two-step index is applied through it.
    if not isinstance(value, Tensor):
        if isinstance(value, list | tuple | np.ndarray):
            value = tensor(np.asarray(value), dtype=t.dtype)
        else:
            _check_number("setitem", value)
            if (t.dtype.kind in "iu" and isinstance(value, float | np.floating)
                    and not math.isfinite(value)):
                raise TorchLeanError(f"setitem: value {value} cannot be converted to the "
                                     f"tensor's dtype {t.dtype} (as in PyTorch)")
    if isinstance(value, Tensor):
        target_shape = np.broadcast_to(np.empty(()), t.shape)
        for step in steps:
            target_shape = target_shape[step]
        try:
            np.broadcast_to(np.empty(()), value.shape) + target_shape
            np.broadcast_to(np.empty(value.shape), target_shape.shape)
        except ValueError:
            raise ShapeError(f"setitem: shape mismatch: value tensor of shape "
                             f"{list(value.shape)} cannot be broadcast to indexing result of "
                             f"shape {list(target_shape.shape)}") from None

    def compute(base: Tensor, v: Any = None) -> Tensor:
        if isinstance(v, Tensor) and v.requires_grad and base.dtype.kind == "f":
            x = base
            vv = _as_float_operand(v, base.dtype)
            index_np = _single_index(steps, base.shape)
            return RECORDER.record(TP.setitem(index_np, base.shape), (x, vv), {})
        if base.requires_grad and is_grad_enabled():
            index_np = _single_index(steps, base.shape)
            vv = v if isinstance(v, Tensor) else _leaf(np.asarray(value, dtype=base.dtype))
            vv = _leaf(vv._value.astype(base.dtype))
            return RECORDER.record(TP.setitem(index_np, base.shape), (base, vv), {})
        out = base._value.copy()
        view = out
        src = v._value if isinstance(v, Tensor) else value
        if len(steps) == 1:
            out[steps[0]] = src
        else:
            view = out[steps[0]]
            view[steps[1]] = src
        return _leaf(out)

    if isinstance(value, Tensor):
        _inplace("setitem", t, compute, value, cast=True)
    else:
        _inplace("setitem", t, compute, cast=True)


def _single_index(steps: list[Any], shape: tuple[int, ...]) -> Any:
    """One NumPy index equal to applying ``steps`` in turn (for a recorded assignment): the
    basic first step made of positions the second can address, by building the flat positions
    the two steps select."""
    if len(steps) == 1:
        return steps[0]
    flat = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    chosen = flat[steps[0]][steps[1]]
    return np.unravel_index(chosen, shape)


class MissingTorchName(TorchLeanError, AttributeError):
    """A torch name torchlean does not provide (also an ``AttributeError``, so ``hasattr``,
    ``getattr(..., default)`` and submodule imports behave as Python expects)."""

    __str__ = Exception.__str__


def checked_signature(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` whose wrong arguments (unknown keywords, too many) raise ``SignatureError`` naming
    it, as a torch user expects an error naming the function, not a bare TypeError. No cost
    when the call binds: the signature is checked only after a TypeError."""
    signature = inspect.signature(fn)
    name = fn.__name__

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TypeError as exc:
            if isinstance(exc, TorchLeanError):
                raise
            try:
                signature.bind(*args, **kwargs)
            except TypeError as bad:
                raise SignatureError(f"{name}: {bad}; expected {name}{signature}") from None
            raise

    return wrapped


# Accessors called many times per step keep their plain signatures (the wrapper is one more
# Python call, about 0.2 us); they take no arguments a torch user gets wrong in practice.
# Every op method is checked (issue 25: an unknown keyword is a named error, not a TypeError).
_HOT_METHODS = frozenset({"item", "numel", "size", "dim", "detach", "numpy", "tolist",
                          "exp", "tanh", "sigmoid", "relu"})  # (these check their own)


def _takes_no_arguments(name: str, args: Any, kwargs: Any) -> None:
    """The ``SignatureError`` of a method that takes no arguments, called with some."""
    given = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    raise SignatureError(f"{name}: takes no arguments, found {', '.join(given)}; expected "
                         f"{name}()")


def _check_method_signatures(cls: type) -> None:
    """Every public method of ``cls``, its own or inherited (from ``Ref``), gets
    ``checked_signature``."""
    chosen = {key: value for klass in cls.__mro__[:-1] for key, value in vars(klass).items()
              if not key.startswith("_") and key not in _HOT_METHODS
              and inspect.isfunction(value) and inspect.getattr_static(cls, key) is value}
    for key, value in chosen.items():
        setattr(cls, key, checked_signature(value))


def _as_value(value: Any) -> Any:
    """A tensor's value: device arrays as they are, anything else as a NumPy array."""
    if hasattr(value, "__array_namespace__") and namespace_of(value) is not np:
        return value
    return np.asarray(value)


def _format(value: np.ndarray) -> str:
    """The values as torch prints them (``tensor_format``: one width, 4 decimals or scientific
    notation, integer-valued floats as ``1.``)."""
    return format_values(value)


def _rebuild_leaf(value: Any, requires_grad: bool) -> Tensor:
    return _leaf(np.array(value, copy=True), requires_grad)


def _init_slots(t: Tensor, value: Any, prim: Primitive | None, parents: tuple[Tensor, ...],
                attrs: dict[str, Any]) -> None:
    Ref.__init__(t, RECORDER, next(_sequence), tuple(value.shape), value.dtype)
    t._value = value
    t._op = prim
    t._parents = parents
    t._attrs = attrs
    t.requires_grad = prim is not None
    t.grad = None
    t._vc = None
    t._freed = False
    t._base = None


def _leaf(value: Any, requires_grad: bool = False) -> Tensor:
    """A leaf tensor holding ``value`` as it is (no copy, dtype kept): the internal constructor
    (``Tensor(...)`` is torch's legacy one)."""
    t = Tensor._result(value, None, (), {})
    if requires_grad:
        if t.dtype.kind != "f":
            raise TorchLeanError(f"tensor: only float tensors can require gradients, found "
                                 f"dtype {t.dtype}")
        t.requires_grad = True
    return t


def _device_index(index: Any, xp: Any) -> Any:
    """An index for a device array: tensor entries by their values (on that device), host
    index arrays and lists uploaded explicitly, slices and numbers as they are."""
    entries = index if isinstance(index, tuple) else (index,)
    out = []
    for e in entries:
        if isinstance(e, Tensor):
            if namespace_of(e._value) is not xp:
                e = e.to(device_of(xp))
            out.append(e._value)
        elif isinstance(e, list | np.ndarray):
            out.append(to_device(np.asarray(e), xp))
        else:
            out.append(e)
    return tuple(out)


def _arg(op: str, t: Tensor, dim: int | None, keepdim: bool) -> Tensor:
    value = t._value
    # only reducing an empty axis (or an empty tensor as a whole) has no answer
    if value.size == 0 and (dim is None or t.ndim == 0 or t.shape[F._axis(op, dim, t.ndim)] == 0):
        raise ShapeError(f"{op}: expected a non-empty tensor, found shape {t.shape} (as in "
                         "PyTorch, the reduction has no identity)")
    xp = np if isinstance(value, np.ndarray) else namespace_of(value)
    fn = getattr(xp, op)
    if dim is None:
        if xp is np:
            return _leaf(np.asarray(fn(value), dtype=np.int64))
        return _leaf(fn(value).astype(np.int64))
    axis = F._axis(op, dim, t.ndim)
    if t.ndim == 0:
        return _leaf(np.zeros((), np.int64))  # dim 0 or -1 of a 0-d tensor: the value itself
    out = fn(value, axis=axis)
    return _leaf((xp.expand_dims(out, axis) if keepdim else out).astype(np.int64))


def _copy_between(src: Any) -> Primitive:
    """A one-off primitive (not registered) for ``.to(device)`` of a tensor with a history:
    its VJP moves the cotangent back to the source namespace ``src`` (PyTorch's
    ``ToCopyBackward``). First order only."""

    def vjp(ops: Any, g: Any, inputs: Any, out: Any) -> tuple[Any, ...]:
        if ops is not ARRAY_OPS:
            raise TorchLeanError("a copy between devices supports first-order backward only; "
                                 "move the leaves before recording for create_graph")
        return (to_device(g, src),)

    return Primitive("to_device", ("x",), lambda shape: shape, lambda x: x, vjp=vjp,
                     reverse_only=True, semantics="A copy of a tensor to another device (VJP: "
                     "the cotangent copied back).", samples=lambda rng: [])


class Size(tuple):  # type: ignore[type-arg]
    """``tensor.size()``: a tuple of ints (torch.Size) with ``numel``."""

    def numel(self) -> int:
        return int(np.prod(self, dtype=np.int64))

    def __repr__(self) -> str:
        return f"torch.Size({list(self)})"


class GradFn:
    """``tensor.grad_fn``: the recorded op behind a tensor, shaped like torch's node objects
    (``name()``, ``next_functions``: ``(node, 0)`` pairs, an ``AccumulateGrad`` stand-in for a
    leaf that requires grad, ``None`` for one that does not)."""

    __slots__ = ("_tensor",)

    def __init__(self, t: Tensor) -> None:
        self._tensor = t

    def name(self) -> str:
        op = self._tensor._op
        return "AccumulateGrad" if op is None else grad_fn_name(op.name)

    @property
    def next_functions(self) -> tuple[tuple[Any, int], ...]:
        return tuple((GradFn(p) if p.requires_grad else None, 0)
                     for p in _inputs_as_made(self._tensor))

    @property
    def variable(self) -> Tensor:
        return self._tensor

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GradFn) and other._tensor is self._tensor

    def __hash__(self) -> int:
        return id(self._tensor)

    def __repr__(self) -> str:
        return f"<{self.name()}>"


def _graph_of(outputs: Sequence[Tensor]) -> tuple[list[Tensor], bool]:
    """The tensors behind ``outputs`` in a topological order (creation order, unless a view's
    base had its node replaced since: ``_parents_first``): every tensor with a history, and
    the inputs of their ops (tensors without one are leaves here; the rules read their
    values); and whether every op's output is as it made it (``False`` when
    an op of ``OUTPUT_FREE`` had its output changed in place since, which the reference rules
    allow but a fast VJP that reads the output (max pooling's) does not: that backward then
    runs the reference kernels).

    Tensors are the keys themselves (their hash is ``object``'s, by identity, and a dict never
    calls ``==`` on a key of another hash), which saves an ``id()`` call per visit."""
    seen: dict[Tensor, None] = {}
    clean = True
    ordered = True
    stack = [t for t in outputs if t.requires_grad]
    pop = stack.pop
    push = stack.append
    detached = _ANY_DETACHED
    while stack:  # once per tensor of every backward
        t = pop()
        if t in seen:
            continue
        if t._freed:
            raise TapeError("backward: trying to backward through the graph a second time (or "
                            "after its values were freed); pass retain_graph=True to the first "
                            "backward if you need to")
        seen[t] = None
        if detached:
            _inputs_as_made(t)
        vc = t._vc
        if vc is not None and vc[1] > t._id and t._op is not None:
            if t._op.name not in OUTPUT_FREE:
                raise _modified(t, t, vc)
            clean = False
        for p in t._parents:
            vc = p._vc
            if vc is not None:
                # Changed after t used it: an error where t's rule reads the value, or where
                # p's own node was replaced since (a recorded in-place op renews p's creation
                # number) and t is not a view of p (a view's value is p's storage, which the
                # new node makes: torch regenerates a view's history the same way), so the
                # gradient would flow through the wrong node.
                if vc[1] > t._id and (t._op is None or t._op.name not in INPUT_FREE
                                      or (p._id > t._id and t._vc is not vc)):
                    raise _modified(p, t, vc)
                if vc[2] > p._id and t._id > vc[2] and p.requires_grad:
                    raise _rewritten(p, t)
                if p._id > t._id:
                    ordered = False  # a view of a node replaced since: no creation order
            if p not in seen:
                push(p)
    nodes = list(seen)
    if ordered:
        nodes.sort(key=_CREATED)
        return nodes, clean
    return _parents_first(nodes), clean


def _parents_first(nodes: list[Tensor]) -> list[Tensor]:
    """``nodes`` (closed under parents) with every tensor after its parents: a depth-first
    post-order, for the graphs where creation order is not one (a view recorded before its
    base's node was replaced by an in-place op)."""
    order: list[Tensor] = []
    visited: dict[Tensor, None] = {}
    for root in nodes:
        if root in visited:
            continue
        stack: list[tuple[Tensor, bool]] = [(root, False)]
        while stack:
            t, finished = stack.pop()
            if finished:
                order.append(t)
                continue
            if t in visited:
                continue
            visited[t] = None
            stack.append((t, True))
            stack.extend((p, False) for p in t._parents if p not in visited)
    return order


_CREATED = operator.attrgetter("_id")


def _sole_owner() -> int:
    """``getrefcount`` of an array that only a list slot and a local name hold, measured the
    way ``_reverse`` reads its cotangents (3 on CPython 3.11: the slot, the name, the call's
    argument); any other holder (another node's cotangent, a kernel's buffer) counts above it.
    Measured, not assumed, so an interpreter that counts otherwise can only make it copy."""
    total = [np.empty(1)]
    for i in range(1):
        g = total[i]
        return getrefcount(g)
    raise AssertionError("unreachable")


_SOLE_OWNER = _sole_owner()
_FIRST = operator.itemgetter(0)


def _plan_of(nodes: Sequence[Tensor], position: dict[Tensor, int], fuse: bool = False
             ) -> list[Step | None]:
    """``autodiff.reverse_plan`` of the tensors ``nodes`` (in creation order; ``position`` maps
    each tensor to its index), built straight from the tensors: ``reverse_step`` spelled out
    for one and two parents without a ``Node`` view per tensor (the view cost as much as the
    step). The same ``Primitive.vjp_rule`` decides every rule that it changes (a selective rule,
    a broadcast cotangent to sum back); for the rest it returns the primitive's own ``vjp`` and
    attributes, taken here without the call. A test keeps this equal to ``reverse_plan`` over
    ``Node`` views.

    ``fuse`` (a ``backward()`` on the fast kernels): a max pooling of ``relu(c)``, where the
    relu's result feeds nothing else in the graph and nobody asked for its gradient, takes the
    pooling's relu-fused VJP straight to ``c`` (``_relu_pool_step``), as generated code does;
    the relu's own step then receives nothing and is skipped."""
    plan: list[Step | None] = []
    append = plan.append
    i = -1
    for t in nodes:  # once per tensor of every backward
        i += 1
        op = t._op
        if op is None or op.nondiff or not t.requires_grad:
            append(None)
            continue
        ps = t._parents
        arity = len(ps)
        if arity == 1:
            a = ps[0]
            parents: tuple[int, ...] = (position[a],)
            targets = TARGETS_0 if a.requires_grad else TARGETS_NONE
            reduce = op.broadcasting and a.shape != t.shape
        elif arity == 2:
            a, b = ps
            parents = (position[a], position[b])
            if a.requires_grad:
                targets = TARGETS_01 if b.requires_grad else TARGETS_0
            else:
                targets = TARGETS_1 if b.requires_grad else TARGETS_NONE
            reduce = op.broadcasting and (a.shape != t.shape or b.shape != t.shape)
        else:
            parents = tuple([position[p] for p in ps])
            targets = tuple([k for k, p in enumerate(ps) if p.requires_grad])
            reduce = op.broadcasting and any(p.shape != t.shape for p in ps)
        if reduce or op.selective:
            rule, kwargs = op.vjp_rule(t._attrs, tuple([p.requires_grad for p in ps]), reduce)
        else:  # what ``vjp_rule`` returns here (a differentiable op has a vjp)
            rule, kwargs = op.vjp, t._attrs  # type: ignore[assignment]
        if fuse and arity == 1 and op in RELU_POOLS:
            fused = _relu_pool_step(i, t, rule, kwargs, nodes, position, plan)
            if fused is not None:
                append(fused)
                continue
        append((i, rule, kwargs, parents, targets))
    return plan


def _relu_pool_step(i: int, pool: Tensor, rule: Any, kwargs: Any, nodes: Sequence[Tensor],
                    position: dict[Tensor, int], plan: list[Step | None]) -> Step | None:
    """The fused reverse step of ``pool = max_pool(relu(c))`` (see ``_plan_of``; the eager
    tape's ``fused_relu_pool_rule``), or ``None`` where it does not apply: the pooling's step
    takes ``(x, c)`` as parents and gives ``c`` its cotangent, the same bits as the two steps
    (``ops.fast.pool.relu_vjp``)."""
    r = pool._parents[0]
    if r._op is not _RELU or getattr(r, "_retains", False) or type(r._value) is not np.ndarray:
        return None
    c = r._parents[0]
    k = position[r]
    relu_step = plan[k]
    if not c.requires_grad or relu_step is None:
        return None
    for u in nodes[k + 1:]:  # the relu's consumers in this graph: the pooling alone
        if u is not pool and any(p is r for p in u._parents):
            return None
    fused = RELU_POOLS[pool._op]  # type: ignore[index]
    return (i, fused_relu_pool_rule(fused, rule, relu_step), kwargs, (k, position[c]), TARGETS_1)


# Whether any tensor was ever flagged by ``retain_grad``: until then ``backward()`` skips the
# per-node flag lookup (the W1 hot path).
_ANY_RETAINED = False
_ANY_HOOKS = False  # set by the first register_hook: until then backward never looks for hooks
_HOOK_IDS = itertools.count()


class TensorHookHandle:
    """What ``Tensor.register_hook`` returns: ``remove()`` unregisters the hook."""

    def __init__(self, table: dict[int, Any]) -> None:
        self.id = next(_HOOK_IDS)
        self._table = table

    def remove(self) -> None:
        self._table.pop(self.id, None)

    def __enter__(self) -> TensorHookHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def _run_hooks(t: Tensor, g: Any, create_graph: bool) -> Any:
    """``g`` through ``t``'s gradient hooks, in registration order (arrays in, arrays out on a
    first-order pass; tensors on a ``create_graph`` pass)."""
    for hook in list(t._hooks.values()):
        given = g if create_graph else _leaf(g)
        new = hook(given)
        if new is None:
            continue
        if not isinstance(new, Tensor) or tuple(new.shape) != tuple(t.shape):
            found = tuple(new.shape) if isinstance(new, Tensor) else type(new).__name__
            raise ShapeError(f"register_hook: a hook must return None or a tensor shaped as the "
                             f"gradient {tuple(t.shape)}, found {found}")
        g = new if create_graph else new._value.astype(t.dtype, copy=False)
    return g


def _hooked_plan(plan: list[Step | None], nodes: Sequence[Tensor], create_graph: bool
                 ) -> tuple[list[Step | None], dict[int, Any]]:
    """``plan`` with each hooked non-leaf's step running its hooks on the cotangent first; the
    hooked cotangents are recorded in the returned dict (by node), which the caller reports
    in place of the raw ones."""
    seen: dict[int, Any] = {}
    plan = list(plan)
    for i, t in enumerate(nodes):
        if not getattr(t, "_hooks", None) or plan[i] is None:
            continue
        j, rule, kwargs, parents, targets = plan[i]  # type: ignore[misc]

        def hooked(ops: Any, g: Any, ins: Any, out: Any, *, _t: Tensor = t, _i: int = i,
                   _rule: Any = rule, **kw: Any) -> Any:
            g = seen[_i] = _run_hooks(_t, g, create_graph)
            return _rule(ops, g, ins, out, **kw)

        plan[i] = (j, hooked, kwargs, parents, targets)
    return plan, seen


def _reverse(outputs: Sequence[Tensor], seeds: Sequence[Any], create_graph: bool,
             retain_graph: bool, accumulate: bool = False) -> list[tuple[Tensor, Any]]:
    """Run the one reverse driver over the graph behind ``outputs``; ``(tensor, cotangent)``
    for every tensor reached, or (``accumulate``: ``backward()``) nothing, each leaf that
    requires grad having accumulated its cotangent into ``.grad`` instead."""
    nodes, clean = _graph_of(outputs)
    if not nodes:
        raise TorchLeanError("backward: none of the outputs requires grad (did you compute it "
                             "under no_grad, or from tensors without requires_grad=True?)")
    position = dict(zip(nodes, range(len(nodes)), strict=True))  # (tensor keys: see ``_graph_of``)
    # Several outputs (autograd.grad): one pass from the last of them, every other output's
    # seed placed before the walk (reverse mode is linear in its seeds).
    ops: Any = TENSOR_OPS if create_graph else ARRAY_OPS
    values: list[Any] = nodes if create_graph else [t._value for t in nodes]
    # The fast VJPs run on arrays only (``create_graph`` records the reference rules).
    fast = clean and not create_graph and KERNELS.tensors and not KERNELS.fast
    hooked = _ANY_HOOKS and any(getattr(t, "_hooks", None) for t in nodes)
    # (the relu-pool fusion skips the relu's own step: not where that step has hooks)
    plan = _plan_of(nodes, position, fast and accumulate and not hooked)
    seen: dict[int, Any] = {}
    if hooked:
        plan, seen = _hooked_plan(plan, nodes, create_graph)
    live = sorted([(position[out], seed) for out, seed in zip(outputs, seeds, strict=True)
                   if out.requires_grad], key=_FIRST)
    k, seed = live[-1]
    if fast:
        total = _fast_call(run_reverse, plan, values, k, seed, True, ops, None, live[:-1])
    else:
        total = run_reverse(plan, values, k, seed, True, ops, None, live[:-1])
    found: list[tuple[Tensor, Any]] = []
    for i in range(len(nodes)):  # one pass: free the graph, hand out gradients
        t = nodes[i]
        g = total[i]  # (by index, not zip: see ``_sole_owner``)
        if hooked and g is not None and getattr(t, "_hooks", None):
            g = seen[i] if i in seen else _run_hooks(t, g, create_graph)  # (a leaf: here)
        if t._op is not None:
            if not retain_graph:
                t._freed = True
                t._parents = ()
            if accumulate:
                if _ANY_RETAINED and g is not None and getattr(t, "_retains", False):
                    _accumulate(t, g)  # retain_grad() on a non-leaf
                continue
        elif accumulate:
            if g is not None and t.requires_grad:
                if (t.grad is None and type(g) is np.ndarray and g.base is None
                        and getrefcount(g) <= _SOLE_OWNER):
                    # No other name holds this array (not another node's cotangent, not a
                    # kernel's buffer, not a view): it becomes ``.grad`` without the copy, as
                    # torch steals a gradient nothing else references (W2: 2.7 MB a step).
                    t.grad = _leaf(g)
                else:
                    _accumulate(t, g)
            continue
        if g is not None:
            found.append((t, g))
    return found


def _seed(op: str, out: Tensor, gradient: Any) -> Any:
    if not isinstance(out, Tensor):
        raise TorchLeanError(f"{op}: expected a Tensor output, found {type(out).__name__}")
    if gradient is None:
        if out._value.size != 1:  # torch: any one-element output (shape () or (1,), ...)
            raise ShapeError(f"{op}: grad can be implicitly created only for scalar outputs; "
                             f"output has shape {out.shape}, pass gradient=")
        value = out._value
        xp = np if isinstance(value, np.ndarray) else namespace_of(value)
        return xp.ones(out.shape, dtype=out.dtype)
    if isinstance(gradient, Tensor):
        arr = gradient._value
        if namespace_of(arr) is not namespace_of(out._value):
            raise device_mismatch(f"{op} gradient", gradient.device, out.device, "a tensor")
    else:  # host data goes to the output's device explicitly
        arr = array_on(f"{op} gradient", gradient, namespace_of(out._value))
    if tuple(arr.shape) != out.shape:
        raise ShapeError(f"{op}: gradient has shape {tuple(arr.shape)}, output has {out.shape}")
    return arr.astype(out.dtype, copy=False)


def _accumulate(leaf: Tensor, g: Any) -> None:
    """``leaf.grad += g``: a differentiable gradient (``create_graph``) out of place, as torch;
    an array into the existing ``.grad`` in place, as torch, so that a reference to it (``g =
    p.grad``, one that ``zero_grad(set_to_none=False)`` zeroed, one the user assigned) sees
    the sum."""
    held = leaf.grad
    if isinstance(g, Tensor):
        leaf.grad = g if held is None else held + g
        return
    if held is None:
        leaf.grad = _leaf(g.copy())
        return
    v = held._value
    if (type(v) is type(g) and v.shape == g.shape and v.dtype == g.dtype
            and not held.requires_grad and getattr(v.flags, "writeable", True)):
        v += g
        held._bump()
    else:
        leaf.grad = _leaf(v + g)


def _rewritten(p: Tensor, user: Tensor) -> TapeError:
    """The error for a value changed by a recorded in-place op through another alias (a view
    or the view's base) and used after: its own history no longer makes its value. torch
    rewrites the base's history (``CopySlices``); torchlean refuses rather than differentiate
    through the stale one."""
    op = user._op.name if user._op is not None else "an op"
    return TapeError(
        f"backward: a [{p.dtype.name} tensor of shape {list(p.shape)}] used by {op} was changed "
        "by an in-place operation on a view of the same storage (or on the view's base) after "
        "it was computed; torchlean does not rewrite its history through the view. Hint: "
        "clone() the view before changing it in place, or use out-of-place ops.")


def _modified(p: Tensor, user: Tensor, vc: list[int]) -> TapeError:
    """torch's error for a value a recorded backward needs that was changed in place since."""
    op = user._op.name if user._op is not None else "an op"
    return TapeError(
        f"backward: one of the variables needed for gradient computation has been modified by "
        f"an inplace operation: [{p.dtype.name} tensor of shape {list(p.shape)}] is at version "
        f"{vc[0]}, changed after {op} used it. " + p._stale_hint())


# Ops whose backward reads no input value (only shapes and the cotangent), and ops whose
# backward does not read their own output: an in-place change of those values after the op
# is harmless, as torch only checks the values it saved.
INPUT_FREE = frozenset({
    "add", "sub", "add_scalar", "scale", "reshape", "flatten", "transpose2d", "permute",
    "broadcast_to", "sum", "reduce_sum", "reduce_mean", "sum_to", "take", "slice_range0",
    "gather_row", "gather_scalar", "concat_dim0", "concat_vectors", "detach", "to_device",
    "transpose3d_first_to_last", "transpose3d_last_to_first", "transpose3d_last_two"})
OUTPUT_FREE = INPUT_FREE | frozenset({
    "mul", "matmul", "bmm", "matmul_nd", "linear", "square", "abs", "clamp", "conv", "conv2d",
    "log", "sin", "cos", "pow", "max_pool2d", "avg_pool2d", "setitem", "masked_fill"})


class _AutogradNamespace:
    """``tl.autograd``: ``grad`` and the grad-mode switches, under torch's names."""

    no_grad = staticmethod(no_grad)
    enable_grad = staticmethod(enable_grad)

    @staticmethod
    def grad(outputs: Tensor | Sequence[Tensor], inputs: Tensor | Sequence[Tensor],
             grad_outputs: Any = None, retain_graph: bool | None = None,
             create_graph: bool = False, allow_unused: bool = False) -> tuple[Any, ...]:
        """Gradients of ``outputs`` w.r.t. ``inputs`` (leaves or not), one per input, without
        touching any ``.grad``. ``create_graph=True`` makes them differentiable again."""
        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        if not ins or any(not isinstance(t, Tensor) for t in ins + outs):
            raise TorchLeanError("autograd.grad: outputs and inputs must be Tensors (or "
                                 "sequences of them)")
        seed_list: list[Any]
        if grad_outputs is None:
            seed_list = [None] * len(outs)
        elif isinstance(grad_outputs, Tensor | np.ndarray) or hasattr(grad_outputs,
                                                                       "__array_namespace__"):
            seed_list = [grad_outputs]
        else:
            seed_list = list(grad_outputs)
        if len(seed_list) != len(outs):
            raise TorchLeanError(f"autograd.grad: {len(seed_list)} grad_outputs for "
                                 f"{len(outs)} outputs")
        seeds = [_seed("autograd.grad", o, g) for o, g in zip(outs, seed_list, strict=True)]
        if create_graph:
            seeds = [_leaf(s) for s in seeds]
        retain = create_graph if retain_graph is None else retain_graph
        found = {id(t): g for t, g in _reverse(outs, seeds, create_graph, retain)}
        result = []
        for k, t in enumerate(ins):
            g = found.get(id(t))
            if g is None and not allow_unused:
                raise TorchLeanError(f"autograd.grad: input {k} was not used to compute the "
                                     "outputs (pass allow_unused=True to get None)")
            result.append(g if g is None or isinstance(g, Tensor) else _leaf(g))
        return tuple(result)


autograd = _AutogradNamespace()


class _Recorder:
    """The owner of every tensor (``ops_interface.Owner``): runs an op now and, under grad mode,
    remembers how it was made."""

    def record(self, prim: Primitive, refs: Sequence[Ref], attrs: dict[str, Any]) -> Tensor:
        tensors: Sequence[Tensor] = refs  # type: ignore[assignment]
        if attrs:
            attrs = prim.check_attrs(attrs)  # kinds checked and normalised before any compute
        values = []
        history = False
        for t in tensors:  # the per-op hot path: one pass over the inputs
            if t.dtype.kind != "f":
                return self._record_data(prim, tensors, attrs)
            values.append(t._value)
            if t.requires_grad:
                history = True
        if len(values) > 1:  # one device per op (one type test per input when they agree)
            kind = type(values[0])
            for v in values:
                if type(v) is not kind:
                    _check_one_device(prim.name, tensors)
                    break
        if not values and "dtype" in prim.attrs and attrs.get("dtype") is None:
            attrs = {**attrs, "dtype": float32}
        history = history and not prim.nondiff and _state.grad_enabled
        out = (run_checked(prim, values, attrs) if prim.fast_forward is None
               else _fast_forward(history, run_checked, prim, values, attrs))
        res = (Tensor._result(out, prim, tuple(tensors), attrs) if history
               else Tensor._result(out, None, (), {}))
        return res if res._value.base is None else _link_view(res, tensors)

    def _record_data(self, prim: Primitive, tensors: Sequence[Tensor], attrs: dict[str, Any]
                     ) -> Tensor:
        """An op with integer or bool inputs (labels, masks, indices)."""
        floats = [t for t in tensors if t.dtype.kind == "f"]
        if not floats:  # data only: computed, no history
            if prim.name not in INTEGER_OPS:  # sigmoid, exp, mean, ... of integers are floats
                dt = get_default_dtype()
                return _leaf(run_checked(prim, [t._value.astype(dt) for t in tensors], attrs))
            return _leaf(run_checked(prim, [t._value for t in tensors], attrs))
        # Mixed with float tensors, data takes their dtype (as PyTorch promotes).
        dtype = floats[0].dtype
        return self.record(prim, [t if t.dtype.kind == "f" else _leaf(t._value.astype(dtype))
                                  for t in tensors], attrs)

    def const(self, array: Any) -> Tensor:
        return tensor(array)

    def use(self, param: Any) -> Tensor:
        """A parameter as a leaf of the current computation: the parameter itself (a tensor),
        so its gradient accumulates into ``param.grad``."""
        if not isinstance(param, Tensor):
            raise TorchLeanError(f"use: expected a Param, found {type(param).__name__}")
        return param

    def value(self, ref: Ref) -> Any:
        return ref._value  # type: ignore[attr-defined]

    def dropout(self, x: Ref, p: float, training: bool = True) -> Ref:
        def mask_of(keep: float) -> Tensor:
            xp = namespace_of(x._value)  # type: ignore[attr-defined]
            draw = _draw(default_generator, "uniform", x.shape, x.dtype, xp)
            return _leaf((draw < keep).astype(x.dtype))

        return F.inverted_dropout(x, p, training, mask_of)  # type: ignore[no-any-return]


def _fast_call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with the fast kernels on for this one call: how tensors run a
    primitive that has a fast forward, and their reverse pass (``KERNELS.tensors``, on by
    default, as PyTorch's eager mode runs its fast kernels; ``fast_kernels(False)`` or
    ``set_tensor_kernels(False)`` gives the reference). Not a ``fast_kernels`` block: a block
    clears the fast kernels' residual store at its edges, and a forward's residual must
    survive until its ``backward()`` (it lives as long as the op's output array)."""
    KERNELS.fast = True
    try:
        return fn(*args, **kwargs)
    finally:
        KERNELS.fast = False


def _fast_forward(history: bool, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The forward ``fn`` of a primitive that has a fast one: ``_fast_call`` where tensors run
    the fast kernels (``KERNELS.tensors``, and not already inside a fast block), else ``fn``
    as it is. Its residuals are dropped at once when the op records no history (``no_grad``,
    inference): no backward will read them, and a convolution's im2col matrix would otherwise
    live as long as the output. (Callers test ``prim.fast_forward`` first: the per-op path of
    every other primitive makes no call here.)"""
    if not KERNELS.tensors or KERNELS.fast:
        return fn(*args, **kwargs)
    out = _fast_call(fn, *args, **kwargs)
    if not history:
        residuals.discard(out)
    return out


def _check_one_device(op: str, tensors: Sequence[Tensor]) -> None:
    """``DeviceError`` when the tensors of one op live on different devices."""
    first = tensors[0]
    xp = namespace_of(first._value)
    for t in tensors[1:]:
        if namespace_of(t._value) is not xp:
            raise DeviceError(f"{op}: expected all tensors on the same device, found "
                              f"'{first.device}' and '{t.device}' (as PyTorch, torchlean never "
                              "copies between devices implicitly; use .to(device))")


RECORDER = _Recorder()


# The per-op hot path of the operators and the unary methods: ``RECORDER.record`` spelled out
# for float host tensors (the caller has checked the float dtype, and for two inputs that they
# share it), so no input list, no attribute check, no device scan. The same checks and kernels
# run (the shape rule, then the forward), except a shape rule that cannot refuse: the identity
# of the elementwise primitives in ``_IDENTITY_SHAPED`` (a test keeps each one's rule the
# identity) and of a binary op on two equal shapes. Its result has as many entries as an input
# that already exists, so the allocation limit it would also check cannot be newly passed.
# (Skipping the call saves three Python frames per op.) Anything else (a device array) takes
# ``record``.
# The attributes of every attribute-free op recorded here: one shared empty dict, never written
# (nothing mutates a tensor's ``_attrs``), instead of a new one per op (each new dict counts
# towards the garbage collector's next pass).
_NO_ATTRS: dict[str, Any] = {}


def _record1(prim: Primitive, x: Tensor) -> Tensor:
    """``RECORDER.record(prim, (x,), {})`` for an attribute-free op of a float tensor."""
    v = x._value
    if type(v) is not np.ndarray:
        return RECORDER.record(prim, (x,), {})
    shape = x.shape if prim in _IDENTITY_SHAPED else prim.infer(x.shape)
    history = x.requires_grad and _state.grad_enabled and not prim.nondiff
    out = (prim.forward(v) if prim.fast_forward is None
           else _fast_forward(history, prim.forward, v))
    res = (Tensor._result(out, prim, (x,), _NO_ATTRS, shape) if history
           else Tensor._result(out, None, (), _NO_ATTRS, shape))
    return res if res._value.base is None else _link_view(res, (x,))


def _record2(prim: Primitive, a: Tensor, b: Tensor, infer: bool = False) -> Tensor:
    """``RECORDER.record(prim, (a, b), {})`` for float tensors of one dtype. The shape rule of
    an elementwise op cannot refuse two equal shapes, and is skipped for them; ``infer``: run
    it always (a matrix product's inner dimensions)."""
    va = a._value
    vb = b._value
    if type(va) is not np.ndarray or type(vb) is not np.ndarray:
        return RECORDER.record(prim, (a, b), {})
    shape = a.shape
    if infer or shape != b.shape:
        shape = prim.infer(shape, b.shape)
    history = (a.requires_grad or b.requires_grad) and _state.grad_enabled and not prim.nondiff
    out = (prim.forward(va, vb) if prim.fast_forward is None
           else _fast_forward(history, prim.forward, va, vb))
    res = (Tensor._result(out, prim, (a, b), _NO_ATTRS, shape) if history
           else Tensor._result(out, None, (), _NO_ATTRS, shape))
    return res if res._value.base is None else _link_view(res, (a, b))


def record_floats(prim: Primitive, tensors: tuple[Tensor, ...],
                  attrs: dict[str, Any] = _NO_ATTRS) -> Tensor | None:
    """``RECORDER.record(prim, tensors, attrs)`` for a primitive whose inputs are float host
    tensors of one dtype, or ``None`` (nothing done) for any other inputs: the lean path of
    ``nn.functional``'s hot layers (``linear``, ``layer_norm``), which have checked the shapes
    and put ``attrs`` in normal form in their own words first. The primitive's shape rule
    still runs (and the allocation limit with it)."""
    dtype = tensors[0].dtype
    history = False
    for t in tensors:
        if type(t._value) is not np.ndarray or t.dtype != dtype:
            return None
        if t.requires_grad:
            history = True
    if dtype.kind != "f":
        return None
    shape = prim.infer(*[t.shape for t in tensors], **attrs)
    history = history and _state.grad_enabled and not prim.nondiff
    values = [t._value for t in tensors]
    out = (prim.forward(*values, **attrs) if prim.fast_forward is None
           else _fast_forward(history, prim.forward, *values, **attrs))
    res = (Tensor._result(out, prim, tensors, attrs, shape) if history
           else Tensor._result(out, None, (), _NO_ATTRS, shape))
    return res if res._value.base is None else _link_view(res, tensors)


def _plain_extremum(x: Tensor, dim: Any, keepdim: Any, reduce: Callable[..., Any]
                    ) -> Tensor | None:
    """``reduce`` (``np.max`` / ``np.min``) of a float host tensor with entries over ``dim``
    (None: every axis; an int in range) when no history is recorded, and over every entry with
    one, or ``None`` for the general path (which checks and raises). A maximum is exact: the
    general path's values."""
    if type(x._value) is not np.ndarray or x.dtype.kind != "f" or not x.shape or \
            not x._value.size or type(keepdim) is not bool:
        return None
    if x.requires_grad and _state.grad_enabled:
        if dim is not None or keepdim:
            return None  # the general path's tree over one axis
        # every entry: one op whose ties share the gradient evenly, as torch's max() (the
        # tree would be two ops per entry, and split three ties 1/2, 1/4, 1/4)
        v = x._value
        top = reduce(v)
        mask = (v == top) | (np.isnan(v) & np.isnan(top))
        prim = TP.extremum_all(mask, reduce is np.max)
        return Tensor._result(np.asarray(top), prim, (x,), _NO_ATTRS, ())
    if dim is None:
        return Tensor._result(np.asarray(reduce(x._value, keepdims=keepdim)), None, (),
                              _NO_ATTRS)
    n = len(x.shape)
    if type(dim) is not int or not -n <= dim < n:
        return None
    value = reduce(x._value, axis=dim, keepdims=keepdim)
    return Tensor._result(value, None, (), _NO_ATTRS, value.shape)


def _lean_reduce(prim: Primitive, x: Tensor, dim: int | None, keepdim: Any) -> Tensor | None:
    """``x.sum(dim)`` / ``x.mean(dim)`` over one int axis, or all axes, of a float host tensor
    with at least one axis: the records of ``ops_interface._reduce`` (each reduction with its
    axis in normal form, highest axis first, then the keep-dims reshape; over everything
    without keep-dims the whole-tensor ``sum``, scaled for a mean), or ``None`` for the general
    path (which checks and raises). The primitives' shape rules run (``record_floats``)."""
    shape = x.shape
    n = len(shape)
    if not n or type(keepdim) is not bool:
        return None
    if dim is None:
        if not keepdim:
            total = math.prod(shape)
            if prim is _REDUCE_MEAN and not total:
                return None
            whole = record_floats(_SUM, (x,))
            if prim is _REDUCE_MEAN and whole is not None:
                whole = record_floats(_SCALE, (whole,), {"c": 1.0 / total})
            return whole
        axes: Sequence[int] = range(n - 1, -1, -1)
    elif -n <= dim < n:
        axes = (dim + n if dim < 0 else dim,)
    else:
        return None
    out = x
    for axis in axes:
        step = record_floats(prim, (out,), {"axis": axis})
        if step is None:
            return None
        out = step
    if not keepdim:
        return out
    kept = tuple(1 if k in axes else d for k, d in enumerate(shape))
    return _record_shaped(_RESHAPE, out, {"shape": kept}, kept)


def _plain_var(x: Tensor, dim: Any, keepdim: Any, denominator: int) -> Tensor | None:
    """``x.var(dim)`` of a float host tensor without a history, over one int axis or all of
    them: the forwards of the primitives the general path records (the keep-dims mean, axis by
    axis from the highest, the centred squares, their sum, the scale), run on the arrays with
    nothing recorded; ``None`` for the general path (which checks and raises). Statistics in
    loops (``(lr * p.grad).std()`` per parameter per step) pay no per-op wrappers."""
    v = x._value
    shape = x.shape
    n = len(shape)
    if (type(v) is not np.ndarray or not n or type(keepdim) is not bool or denominator <= 0
            or not v.size):
        return None
    if dim is None:
        axes: Sequence[int] = range(n - 1, -1, -1)
    elif type(dim) is int and -n <= dim < n:
        axes = (dim + n if dim < 0 else dim,)
    else:
        return None
    kept = tuple(1 if k in axes else d for k, d in enumerate(shape))
    mean = v
    for axis in axes:
        mean = _REDUCE_MEAN.forward(mean, axis=axis)
    centred = _SUB.forward(v, mean.reshape(kept))
    squares = _MUL.forward(centred, centred)
    if dim is None and not keepdim:
        total = _SUM.forward(squares)
    else:
        total = squares
        for axis in axes:
            total = _REDUCE_SUM.forward(total, axis=axis)
        if keepdim:
            total = total.reshape(kept)
    return _leaf(np.asarray(_SCALE.forward(total, c=1.0 / denominator)))


def _lean_row(x: Tensor, i: int) -> Tensor:
    """``x[i]`` (``0 <= i < len(x)``, checked) for a float host tensor with a history: the
    primitives ``Ref.__getitem__`` records, with the same attributes, without its generic
    dispatch (12.8 -> 4 us per ``emb[t]`` in a recurrent loop)."""
    shape = x.shape
    if len(shape) == 1:
        return _record_shaped(_GATHER_SCALAR, x, {"i": i}, ())
    if len(shape) == 2:
        return _record_shaped(_GATHER_ROW, x, {"i": i}, shape[1:])
    row = _record_shaped(_SLICE_RANGE0, x, {"start": i, "length": 1}, (1,) + shape[1:])
    return _record_shaped(_RESHAPE, row, {"shape": shape[1:]}, shape[1:])


def _record_shaped(prim: Primitive, x: Tensor, attrs: dict[str, Any], shape: tuple[int, ...]
                   ) -> Tensor:
    """``RECORDER.record(prim, (x,), attrs)`` for a float host tensor whose attributes the
    caller has put in normal form and checked, and whose result ``shape`` it has computed by
    the primitive's rule (the lean layout methods of ``Tensor``: reshape, permute)."""
    history = x.requires_grad and _state.grad_enabled and not prim.nondiff
    out = (prim.forward(x._value, **attrs) if prim.fast_forward is None
           else _fast_forward(history, prim.forward, x._value, **attrs))
    res = (Tensor._result(out, prim, (x,), attrs, shape) if history
           else Tensor._result(out, None, (), _NO_ATTRS, shape))
    return res if res._value.base is None else _link_view(res, (x,))


# What a shape or permutation argument may be on the lean paths (torch.Size is a tuple).
_DIM_SEQUENCES = (tuple, list, Size)


def _lean_shape(dims: Any, source: tuple[int, ...]) -> tuple[int, ...] | None:
    """``dims`` (Python ints, at most one -1) as the reshape target of ``source``, or ``None``
    where the general path must check it (and raise what it raises)."""
    known = 1
    free = -1
    k = 0
    for d in dims:
        if type(d) is not int:
            return None
        if d < 0:
            if d != -1 or free >= 0:
                return None
            free = k
        else:
            known *= d
        k += 1
    total = math.prod(source)
    if free < 0:
        return tuple(dims) if known == total else None
    if known == 0 or total % known:
        return None
    out = list(dims)
    out[free] = total // known
    return tuple(out)


def _record_c(prim: Primitive, x: Tensor, c: float) -> Tensor:
    """``RECORDER.record(prim, (x,), {"c": c})`` for a float tensor and a finite float ``c``
    (the caller has checked it: the attribute's kind, a finite real, holds)."""
    v = x._value
    if type(v) is not np.ndarray:
        return RECORDER.record(prim, (x,), {"c": c})
    # (``c`` is a finite float: all that scale's and add_scalar's shape rules check.)
    shape = x.shape if prim in _IDENTITY_SHAPED else prim.infer(x.shape, c=c)
    history = x.requires_grad and _state.grad_enabled and not prim.nondiff
    out = (prim.forward(v, c=c) if prim.fast_forward is None
           else _fast_forward(history, prim.forward, v, c=c))
    if history:
        return Tensor._result(out, prim, (x,), {"c": c}, shape)
    return Tensor._result(out, None, (), _NO_ATTRS, shape)


_EXP = REGISTRY["exp"]
_ADD = REGISTRY["add"]
_SUB = REGISTRY["sub"]
_MUL = REGISTRY["mul"]
_SQUARE = REGISTRY["square"]
_SCALE = REGISTRY["scale"]
_ADD_SCALAR = REGISTRY["add_scalar"]
_TANH = REGISTRY["tanh"]
_RELU = REGISTRY["relu"]
_SIGMOID = REGISTRY["sigmoid"]
# Primitives whose shape rule is the identity (given a checked scalar ``c``): see ``_record1``.
_RESHAPE = REGISTRY["reshape"]
_PERMUTE = REGISTRY["permute"]
_SLICE_RANGE0 = REGISTRY["slice_range0"]
_CONCAT0 = REGISTRY["concat_dim0"]
_REDUCE_SUM = REGISTRY["reduce_sum"]
_REDUCE_MEAN = REGISTRY["reduce_mean"]
_SUM = REGISTRY["sum"]
_GATHER_SCALAR = REGISTRY["gather_scalar"]
_GATHER_ROW = REGISTRY["gather_row"]
_SOFTMAX = REGISTRY["softmax"]
_MATMUL = REGISTRY["matmul"]
_BMM = REGISTRY["bmm"]
_MATMUL_ND = REGISTRY["matmul_nd"]
_IDENTITY_SHAPED = frozenset({_EXP, _TANH, _RELU, _SIGMOID, TP.SIN, TP.COS, _SCALE, _ADD_SCALAR})
_check_method_signatures(Tensor)

# Primitives whose result on integer (or bool) data stays integer, as torch's do; every other
# primitive computes integer inputs in the default float dtype (sigmoid of an int is a float).
INTEGER_OPS = frozenset({
    "add", "sub", "mul", "abs", "relu", "max", "min", "sum", "reduce_sum", "reshape", "flatten",
    "permute", "transpose2d", "take", "gather_row", "gather_scalar", "slice_range0",
    "concat_dim0", "concat_vectors", "broadcast_to", "sign", "clamp", "square", "sum_to",
    "one_hot", "transpose3d_first_to_last", "transpose3d_last_to_first",
    "transpose3d_last_two", "pad_range0", "zeros_like", "detach"})


# The interpreter ``create_graph=True`` runs the VJP rules on: gradients get a history.
TENSOR_OPS = F.RecordingOps(RECORDER, "tensor")


# ---------------------------------------------------------------------------------------------
# Compiled modules on tensors


class CompiledModule:
    """``model.compile()``: the module's forward traced once per input shape, dtype and mode into
    a graph and run compiled. Called on a tensor, it records one node whose backward is the
    graph's backprop (the same reverse driver), so ``loss.backward()`` fills the parameters'
    ``.grad`` as the eager module does. Other refs (sessions, traced graphs) call the module
    itself. First-order only: for higher derivatives use the module uncompiled."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self._compiled: dict[tuple[Any, ...], Compiled] = {}
        self._make = Compiled

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)  # parameters(), train(), eval(), state_dict(), ...

    def __call__(self, x: Any) -> Any:
        if not isinstance(x, Tensor):
            return self.module(x)
        key = (x.shape, x.dtype, bool(getattr(self.module, "training", False)), x.requires_grad)
        c = self._compiled.get(key)
        if c is None:
            c = self._compiled[key] = self._make(lambda ref: self.module(ref), [x.shape],
                                                 dtype=x.dtype,
                                                 wrt=None if x.requires_grad else ())
        xp = namespace_of(x._value)
        for p in c.params:  # a compiled run would move them; eager ops refuse to mix devices
            if namespace_of(p.array) is not xp:
                raise device_mismatch(f"compiled module: parameter {p.name or '(unnamed)'}",
                                      p.device, x.device, "a parameter")
        values = c._values("compiled module", [x._value])
        out = values[c.graph.output]
        params = c.params
        if not is_grad_enabled() or not (x.requires_grad or any(p.requires_grad for p in params)):
            return _leaf(out)
        parents = (x,) + tuple(RECORDER.use(p) for p in params)
        return Tensor._result(out, _compiled_call(c, values), parents, {})


def _compiled_call(c: Any, values: list[Any]) -> Primitive:
    """A one-off primitive (not registered) for one call of a compiled module on tensors: its
    VJP is the graph's backprop from this call's values."""

    def vjp(ops: Any, g: Any, inputs: Any, out: Any) -> tuple[Any, ...]:
        if ops is not ARRAY_OPS:
            raise TorchLeanError("a compiled module supports first-order backward only; use the "
                                 "module uncompiled for create_graph / higher derivatives")
        return c._cotangents(values, g)

    n = len(c.graph.inputs)
    return Primitive(
        "compiled_module", tuple(f"input{k}" for k in range(n)),
        lambda *shapes: c.out_shape, lambda *xs: values[c.graph.output], vjp=vjp,
        reverse_only=True, semantics="One call of a compiled module (its graph's forward; VJP: "
        "the graph's backprop).", samples=lambda rng: [])


# ---------------------------------------------------------------------------------------------
# Creation




def _dtype(dtype: Any, default: np.dtype | None = None) -> np.dtype:
    return as_dtype("dtype", dtype, default)


def _device_name(device: Any) -> str:
    """"cpu" or "cuda" from a device argument ("cuda:0" and ``torch.device``-like objects with
    a ``type`` are accepted, as torch accepts them)."""
    name = getattr(device, "type", device)
    if not isinstance(name, str):
        raise DeviceError(f"device: expected 'cpu' or 'cuda', found {device!r}")
    return check_device(name.split(":")[0])


def _is_device(value: Any) -> bool:
    name = getattr(value, "type", value)
    return isinstance(name, str) and name.split(":")[0] in DEVICES


def _namespace(device: Any) -> Any:
    """The array namespace of a ``device=`` argument (``None``: the host)."""
    return np if device is None else namespace_for(_device_name(device))


def _draw(gen: Generator, method: str, shape: tuple[int, ...], dtype: Any, xp: Any) -> Any:
    """``gen.<method>(shape, dtype)`` drawn in namespace ``xp`` (on a device, by the device's
    SplitMix64 kernel: the same bits as on the host, and no upload)."""
    fn = getattr(gen, method)
    return fn(shape, dtype) if xp is np else fn(shape, dtype, xp=xp)


@checked_signature
def tensor(data: Any, dtype: Any = None, requires_grad: bool = False,
           device: str | None = None) -> Tensor:
    """A new leaf tensor holding a copy of ``data``. Python floats become float32 (PyTorch's
    default), NumPy arrays keep their dtype, Python ints become int64, bools bool. ``device``
    ("cpu" or "cuda"): where it lives (default: where ``data`` is; host data on the host)."""
    if isinstance(data, Tensor):
        data = data._value
    elif isinstance(data, Ref):
        raise TorchLeanError("tensor: a session or graph ref has no value here; use "
                             "session.value(ref) first")
    src = namespace_of(data)
    arr = numeric_array("tensor", data, src)
    if dtype is not None:
        arr = arr.astype(_dtype(dtype))
    elif src is np and not isinstance(data, np.ndarray | np.generic) and arr.dtype == float64:
        arr = arr.astype(get_default_dtype())
    xp = src if device is None else _namespace(device)
    if xp is not src:
        return _leaf(to_device(arr, xp), requires_grad=requires_grad)  # a fresh copy there
    copied = np.array(arr, copy=True) if src is np else arr.copy()
    return _leaf(copied, requires_grad=requires_grad)


@checked_signature
def as_tensor(data: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """``data`` as a tensor, without a copy when it already is one of that dtype and device, or
    a host NumPy array of a tensor dtype (then sharing its memory, as torch's)."""
    if isinstance(data, Tensor) and (dtype is None or np.dtype(dtype) == data.dtype) and (
            device is None or _device_name(device) == data.device):
        return data
    if (type(data) is np.ndarray and data.dtype in _SHAREABLE
            and (dtype is None or as_dtype("as_tensor", dtype) == data.dtype)
            and (device is None or _device_name(device) == "cpu")):
        return _leaf(data)
    return tensor(data, dtype, device=device)


# The dtypes a host array keeps as a tensor (``as_tensor`` shares such an array's memory).
_SHAREABLE = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int64, np.bool_))


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing ``array``'s memory."""
    if not isinstance(array, np.ndarray):
        raise TorchLeanError(f"from_numpy: expected a NumPy array, found {type(array).__name__}")
    return _leaf(array)


# The most elements one factory call may allocate (2**34: 64 GiB of float32); beyond it the
# request is refused by name instead of failing inside NumPy.
MAX_ELEMENTS = 2 ** 34


def _shape_args(op: str, size: Any) -> tuple[int, ...]:
    shape = size[0] if len(size) == 1 and not isinstance(size[0], int | np.integer) else size
    if isinstance(shape, Tensor):
        shape = shape.tolist()
    dims = as_shape(op, shape)
    total = 1
    for n in dims:
        total *= n
    if total > MAX_ELEMENTS:
        raise ShapeError(f"{op}: size {list(dims)} has {total} elements, more than the "
                         f"{MAX_ELEMENTS} one tensor may hold")
    return dims


@checked_signature
def zeros(*size: Any, dtype: Any = None, requires_grad: bool = False,
          device: str | None = None) -> Tensor:
    xp = _namespace(device)
    return _leaf(xp.zeros(_shape_args("zeros", size), _dtype(dtype)), requires_grad)


@checked_signature
def ones(*size: Any, dtype: Any = None, requires_grad: bool = False,
         device: str | None = None) -> Tensor:
    xp = _namespace(device)
    return _leaf(xp.ones(_shape_args("ones", size), _dtype(dtype)), requires_grad)


@checked_signature
def empty(*size: Any, dtype: Any = None, requires_grad: bool = False,
          device: str | None = None) -> Tensor:
    """torch.empty: zeros here (torchlean never hands out uninitialised memory)."""
    return zeros(*size, dtype=dtype, requires_grad=requires_grad, device=device)


@checked_signature
def full(size: Any, fill_value: Any, dtype: Any = None, requires_grad: bool = False,
         device: str | None = None) -> Tensor:
    """``size`` filled with ``fill_value``; the dtype follows the value (bool, int64 or the
    default float) unless given, as in torch."""
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    if not isinstance(fill_value, bool | int | float | np.number | np.bool_):
        raise TorchLeanError(f"full: fill_value must be a number, found "
                             f"{type(fill_value).__name__} {fill_value!r}")
    default = bool_ if isinstance(fill_value, bool | np.bool_) else (
        int64 if isinstance(fill_value, int | np.integer) else None)
    xp = _namespace(device)
    shape = _shape_args("full", (size,) if not isinstance(size, int | np.integer) else (size,))
    return _leaf(xp.full(shape, fill_value, _dtype(dtype, default)), requires_grad)


@checked_signature
def zeros_like(t: Tensor, dtype: Any = None, requires_grad: bool = False,
               device: str | None = None) -> Tensor:
    """Zeros of ``t``'s shape, dtype and device (unless given)."""
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad,
                 device=device or t.device)


@checked_signature
def ones_like(t: Tensor, dtype: Any = None, requires_grad: bool = False,
              device: str | None = None) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad,
                device=device or t.device)


@checked_signature
def arange(start: float, end: float | None = None, step: float = 1, dtype: Any = None,
           requires_grad: bool = False, device: str | None = None) -> Tensor:
    """Values from ``start`` (0 if only one bound is given) up to ``end`` by ``step``; int64 when
    all three are ints, float32 otherwise (as PyTorch)."""
    lo, hi = (0, start) if end is None else (start, end)
    for v in (lo, hi, step):
        if isinstance(v, Tensor):
            v = v.item()
        if not isinstance(v, int | float | np.integer | np.floating) or isinstance(v, bool) \
                or not math.isfinite(v):
            raise TorchLeanError(f"arange: start, end and step must be finite numbers, found "
                                 f"{v!r}")
    if step == 0:
        raise TorchLeanError("arange: step must be nonzero")
    if (hi - lo) * step < 0:
        raise TorchLeanError(f"arange: upper bound and larger bound inconsistent with step sign "
                             f"(start {lo}, end {hi}, step {step})")
    if abs((hi - lo) / step) > MAX_ELEMENTS:
        raise ShapeError(f"arange: {abs((hi - lo) / step):.0f} elements, more than the "
                         f"{MAX_ELEMENTS} one tensor may hold")
    ints = all(isinstance(v, int | np.integer) for v in (lo, hi, step))
    default = int64 if ints else None
    xp = _namespace(device)
    return _leaf(xp.arange(lo, hi, step).astype(_dtype(dtype, default)), requires_grad)


@checked_signature
def rand(*size: Any, generator: Generator | None = None, dtype: Any = None,
         requires_grad: bool = False, device: str | None = None) -> Tensor:
    """U[0, 1) draws from ``generator`` (default: the one ``tl.manual_seed`` seeds); the same
    numbers on every device."""
    gen = check_generator("rand", generator)
    return _leaf(_draw(gen, "uniform", _shape_args("rand", size), _dtype(dtype),
                        _namespace(device)), requires_grad)


@checked_signature
def randn(*size: Any, generator: Generator | None = None, dtype: Any = None,
          requires_grad: bool = False, device: str | None = None) -> Tensor:
    """Standard normal draws from ``generator`` (default: the one ``tl.manual_seed`` seeds)."""
    gen = check_generator("randn", generator)
    return _leaf(_draw(gen, "normal", _shape_args("randn", size), _dtype(dtype),
                        _namespace(device)), requires_grad)


def manual_seed(seed: int) -> None:
    """Seed parameter initialisation (``tl.nn``) and the default generator of ``rand``/``randn``
    together, as ``torch.manual_seed`` does."""
    init_generator.manual_seed(seed)
    default_generator.manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# Functions on several tensors


@checked_signature
def cat(tensors: Sequence[Any], dim: int = 0) -> Any:
    """Concatenate along ``dim`` (works on any refs: tensors, session refs, graph variables)."""
    _check_sequence("cat", tensors)
    if dim == 0:
        out = _lean_join(tensors, stacked=False)
        if out is not None:
            return out
    return F.cat(tensors, dim)


@checked_signature
def stack(tensors: Sequence[Any], dim: int = 0) -> Any:
    """Stack along a new axis ``dim``."""
    _check_sequence("stack", tensors)
    if dim == 0:
        out = _lean_join(tensors, stacked=True)
        if out is not None:
            return out
    return F.stack(tensors, dim)


def _lean_join(tensors: Sequence[Any], stacked: bool) -> Tensor | None:
    """``cat`` (or ``stack``) along axis 0 of float host tensors of one dtype and agreeing
    shapes, or ``None`` (nothing done: the general path checks and raises). Without a history
    it is one NumPy call; with one, the ``concat_dim0`` records form a balanced tree (each
    entry copied about log2(n) times, where a left-to-right chain copies the growing prefix
    n - 1 times: quadratic in a recurrent loop's ``stack(outputs)``), and ``stack`` is their
    concatenation reshaped to the new leading axis (one record, not one unsqueeze per item).
    Concatenation is exact, so the values and gradients are the general path's."""
    if not tensors or not isinstance(tensors[0], Tensor):
        return None
    first = tensors[0]
    dtype, shape = first.dtype, first.shape
    if dtype.kind != "f" or not shape or (not stacked and shape == (0,)):
        return None
    rest = shape if stacked else shape[1:]
    history = False
    for t in tensors:
        if (not isinstance(t, Tensor) or type(t._value) is not np.ndarray or t.dtype != dtype
                or (t.shape if stacked else t.shape[1:]) != rest or not t.shape):
            return None
        if t.requires_grad:
            history = True
    if not (history and _state.grad_enabled):
        values = [t._value for t in tensors]
        joined = np.stack(values) if stacked else np.concatenate(values)
        return Tensor._result(joined, None, (), _NO_ATTRS, joined.shape)
    level: list[Tensor] = list(tensors)
    while len(level) > 1:
        pairs = [_record_join(level[k], level[k + 1]) for k in range(0, len(level) - 1, 2)]
        level = pairs + level[len(level) & ~1:]
    if not stacked:
        return level[0]
    new_shape = (len(tensors),) + shape
    return _record_shaped(_RESHAPE, level[0], {"shape": new_shape}, new_shape)


def _record_join(a: Tensor, b: Tensor) -> Tensor:
    """``concat_dim0(a, b)`` recorded for float host tensors whose shapes the caller checked."""
    shape = (a.shape[0] + b.shape[0],) + a.shape[1:]
    history = (a.requires_grad or b.requires_grad) and _state.grad_enabled
    out = _CONCAT0.forward(a._value, b._value)
    return (Tensor._result(out, _CONCAT0, (a, b), _NO_ATTRS, shape) if history
            else Tensor._result(out, None, (), _NO_ATTRS, shape))


def _check_sequence(op: str, tensors: Any) -> None:
    """torch takes a list or tuple of tensors here: a number or a string among them is refused."""
    if not isinstance(tensors, list | tuple):
        raise SignatureError(f"{op}: expected a list or tuple of tensors, found "
                             f"{type(tensors).__name__}")
    for k, item in enumerate(tensors):
        if item is None or isinstance(item, int | float | complex | str | bytes):
            raise SignatureError(f"{op}: expected a tensor as element {k}, found "
                                 f"{type(item).__name__}")


__all__ = [
    "Tensor", "tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "zeros_like",
    "ones_like", "arange", "rand", "randn", "manual_seed",
    "no_grad", "enable_grad", "is_grad_enabled", "autograd", "cat", "stack", "float32",
    "float64", "int64", "bool_", "MaxResult",
]
