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
compiled graph. With ``create_graph=True`` the rules run on an interpreter that records tensors
(``TENSOR_OPS``), so gradients are tensors with a history and can be differentiated again.

Conventions follow PyTorch: leaves accumulate ``.grad`` (a tensor; a leaf made from a ``Param``
by a layer also accumulates into ``param.grad``, which optimisers read); a graph is freed by
``backward`` unless ``retain_graph=True``, and a second backward through it is an error;
``no_grad()`` stops recording. Data of integer or bool dtype is carried (labels, masks, indices)
but never requires gradient.

Devices, as in PyTorch: a tensor lives on one device (``.device``: "cpu" or "cuda"); factories
take ``device=``; ``.to(device)``, ``.cuda()`` and ``.cpu()`` are the explicit transfers (with a
history, the gradient flows back across the copy); an op on tensors of two devices is a
``DeviceError``; ``.numpy()`` of a device tensor asks for ``.cpu()`` first; ``.item()``,
``float()`` and printing read back explicitly.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.autodiff import reverse_plan, run_reverse
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
from ..core.errors import DeviceError, ShapeError, TapeError, TorchLeanError, device_mismatch
from ..core.kernels import array_on, run_checked
from ..core.node import Node
from ..core.registry import ARRAY_OPS, Primitive
from ..core.rng import Generator, check_generator, default_generator, init_generator
from ..core.shape import as_shape
from . import ops_interface as F
from .ops_interface import MaxResult, Ref
from .params import Param
from .transforms import Compiled

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)

_sequence = itertools.count()  # creation order: parents always get smaller numbers
_state = threading.local()


def is_grad_enabled() -> bool:
    """Whether ops record a history for gradients (``no_grad`` turns it off, per thread)."""
    return getattr(_state, "grad_enabled", True)


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
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with _GradMode(self.enabled):
                return fn(*args, **kwargs)

        wrapped.__name__ = getattr(fn, "__name__", "wrapped")
        wrapped.__doc__ = fn.__doc__
        return wrapped


def no_grad() -> _GradMode:
    """Ops inside record no history (for evaluation and parameter updates)."""
    return _GradMode(False)


def enable_grad() -> _GradMode:
    """Re-enable recording inside a ``no_grad`` block."""
    return _GradMode(True)


class Tensor(Ref):
    """A value with an optional autograd history. Make one with ``tl.tensor`` or a factory."""

    __slots__ = ("_value", "_op", "_parents", "_attrs", "requires_grad", "grad", "_param",
                 "_param_version", "_freed")
    __hash__ = Ref.__hash__  # tensors are dict keys (as in torch); == is elementwise

    def __init__(self, value: Any, requires_grad: bool = False) -> None:
        arr = value if isinstance(value, np.ndarray) else _as_value(value)
        if requires_grad and arr.dtype.kind != "f":
            raise TorchLeanError(f"tensor: only float tensors can require gradients, found "
                                 f"dtype {arr.dtype}")
        super().__init__(RECORDER, next(_sequence), tuple(arr.shape), arr.dtype)
        self._value = arr
        self._op: Primitive | None = None
        self._parents: tuple[Tensor, ...] = ()
        self._attrs: dict[str, Any] = {}
        self.requires_grad = bool(requires_grad)
        self.grad: Tensor | None = None
        self._param: Param | None = None
        self._param_version = 0
        self._freed = False

    @classmethod
    def _result(cls, value: Any, prim: Primitive | None, parents: tuple[Tensor, ...],
                attrs: dict[str, Any]) -> Tensor:
        """A computed tensor (``prim`` None: no history). Built slot by slot: this is the
        per-op path, and ``value`` is already a fresh array of a float dtype."""
        if type(value) is not np.ndarray:  # a kernel may return a NumPy scalar (or a device array)
            value = _as_value(value)
        t = object.__new__(cls)
        t._owner = RECORDER
        t._id = next(_sequence)
        t.shape = value.shape
        t.dtype = value.dtype
        t._value = value
        t._op = prim
        t._parents = parents
        t._attrs = attrs
        t.requires_grad = prim is not None
        t.grad = None
        t._param = None
        t._param_version = 0
        t._freed = False
        return t

    # --- reading ------------------------------------------------------------------------------
    @property
    def is_leaf(self) -> bool:
        return self._op is None

    @property
    def grad_fn(self) -> str | None:
        """The name of the primitive that made this tensor (``None`` for a leaf)."""
        return None if self._op is None else self._op.name

    @property
    def data(self) -> Tensor:
        """The same values, detached from the graph."""
        return self.detach()

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

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def detach(self) -> Tensor:
        """A new leaf sharing this value, with no history."""
        return Tensor(self._value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if not self.is_leaf:
            raise TorchLeanError("requires_grad_: only leaf tensors can change requires_grad; "
                                 "use .detach() first")
        if requires_grad and self.dtype.kind != "f":
            raise TorchLeanError(f"requires_grad_: only float tensors can require gradients, "
                                 f"found dtype {self.dtype}")
        self.requires_grad = bool(requires_grad)
        return self

    def zero_(self) -> Tensor:
        """Zero the values in place (for ``x.grad.zero_()``); leaves only."""
        if not self.is_leaf:
            raise TorchLeanError("zero_: in-place updates of a recorded tensor would change its "
                                 "gradient; only leaves can be zeroed")
        self._value[...] = 0
        return self

    def __repr__(self) -> str:
        body = np.array2string(self._host(), separator=", ", prefix="tensor(")
        extra = "" if self.device == "cpu" else f", device='{self.device}'"
        extra += f", dtype={self.dtype.name}" if self.dtype != float32 else ""
        if self._op is not None:
            extra += f", grad_fn=<{self._op.name}>"
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
        else:
            rhs = other
            if xp is not np and isinstance(rhs, np.ndarray):
                raise device_mismatch(name, "cpu", self.device, "a NumPy array")
        if xp is np:
            return Tensor(np.asarray(getattr(np, name)(value, rhs)))
        return Tensor(getattr(xp, name)(value, rhs))

    def __lt__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare(other, "less")

    def __le__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare(other, "less_equal")

    def __gt__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare(other, "greater")

    def __ge__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare(other, "greater_equal")

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare(other, "equal")

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return self._compare(other, "not_equal")

    def float(self) -> Tensor:
        return self.to(float32)

    def double(self) -> Tensor:
        return self.to(float64)

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
        target = self.dtype if dtype is None else _dtype(dtype)
        value = self._value
        src = np if type(value) is np.ndarray else namespace_of(value)
        xp = src if device is None else _namespace(device)
        if target != self.dtype and self.requires_grad:
            raise TorchLeanError(f"to: cannot cast a tensor that requires grad from "
                                 f"{self.dtype} to {target}; cast the leaves instead")
        if xp is src:
            return self if target == self.dtype else Tensor(value.astype(target))
        moved = to_device(value, xp)  # the explicit transfer
        if target != self.dtype:
            moved = moved.astype(target)
        if self.requires_grad and is_grad_enabled():
            return Tensor._result(moved, _copy_between(src), (self,), {})
        return Tensor(moved)

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
            seed = Tensor(seed)
        leaves_and_grads = _reverse([self], [seed], create_graph, retain_graph or create_graph)
        for t, g in leaves_and_grads:
            if t.is_leaf and t.requires_grad:
                _accumulate(t, g)

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        """Indices of the largest entries (int64, no gradient); over all entries for None."""
        return _arg("argmax", self, dim, keepdim)

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        return _arg("argmin", self, dim, keepdim)

    def __getitem__(self, index: Any) -> Tensor:
        if self.dtype.kind != "f":  # integer / bool data: array indexing, no history
            value = self._value
            if isinstance(value, np.ndarray):
                return Tensor(np.array(value[F._index_values(index)]))
            return Tensor(value[_device_index(index, namespace_of(value))].copy())
        return super().__getitem__(index)  # type: ignore[return-value]

    def retain_grad(self) -> None:
        raise TorchLeanError("retain_grad: not supported; use tl.autograd.grad(out, [t]) for the "
                             "gradient of a non-leaf tensor")


def _as_value(value: Any) -> Any:
    """A tensor's value: device arrays as they are, anything else as a NumPy array."""
    if hasattr(value, "__array_namespace__") and namespace_of(value) is not np:
        return value
    return np.asarray(value)


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
    xp = np if isinstance(value, np.ndarray) else namespace_of(value)
    fn = getattr(xp, op)
    if dim is None:
        if xp is np:
            return Tensor(np.asarray(fn(value), dtype=np.int64))
        return Tensor(fn(value).astype(np.int64))
    axis = F._axis(op, dim, t.ndim)
    out = fn(value, axis=axis)
    return Tensor((xp.expand_dims(out, axis) if keepdim else out).astype(np.int64))


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


def _graph_of(outputs: Sequence[Tensor]) -> list[Tensor]:
    """The tensors behind ``outputs`` in creation order (a topological order): every tensor
    with a history, and the inputs of their ops (tensors without one are leaves here; the
    rules read their values)."""
    seen: dict[int, Tensor] = {}
    stack = [t for t in outputs if t.requires_grad]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        if t._freed:
            raise TapeError("backward: trying to backward through the graph a second time (or "
                            "after its values were freed); pass retain_graph=True to the first "
                            "backward if you need to")
        seen[id(t)] = t
        for p in t._parents:
            if p._param is not None and p._param.version != p._param_version:
                raise TapeError(f"backward: parameter {p._param.name or '(unnamed)'} was "
                                "updated in place (an optimiser step) after this graph used it; "
                                "call backward before opt.step(), then run a new forward pass")
            if id(p) not in seen:
                stack.append(p)
    return sorted(seen.values(), key=lambda t: t._id)


def _reverse(outputs: Sequence[Tensor], seeds: Sequence[Any], create_graph: bool,
             retain_graph: bool) -> list[tuple[Tensor, Any]]:
    """Run the one reverse driver over the graph behind ``outputs``; ``(tensor, cotangent)``."""
    nodes = _graph_of(outputs)
    if not nodes:
        raise TorchLeanError("backward: none of the outputs requires grad (did you compute it "
                             "under no_grad, or from tensors without requires_grad=True?)")
    position = {id(t): k for k, t in enumerate(nodes)}
    views = [Node(t._op, tuple(position[id(p)] for p in t._parents), t._attrs, t.requires_grad,
                  t.shape) for t in nodes]
    # The driver starts from one output; with several (autograd.grad), run it once per output
    # over the same plan and add the cotangents (outputs are few, usually one).
    ops: Any = TENSOR_OPS if create_graph else ARRAY_OPS
    values: list[Any] = nodes if create_graph else [t._value for t in nodes]
    plan = reverse_plan(views)
    total: list[Any] = [None] * len(nodes)
    for out, seed in zip(outputs, seeds, strict=True):
        if not out.requires_grad:
            continue
        k = position[id(out)]
        grads = run_reverse(plan, values, k, seed, True, ops)
        for i, g in enumerate(grads):
            if g is not None:
                total[i] = g if total[i] is None else ops.add(total[i], g)
    if not retain_graph:
        for t in nodes:
            if t._op is not None:
                t._freed = True
                t._parents = ()
    return [(t, g) for t, g in zip(nodes, total, strict=True) if g is not None]


def _seed(op: str, out: Tensor, gradient: Any) -> Any:
    if not isinstance(out, Tensor):
        raise TorchLeanError(f"{op}: expected a Tensor output, found {type(out).__name__}")
    if gradient is None:
        if out.shape != ():
            raise ShapeError(f"{op}: grad can be implicitly created only for scalar outputs; "
                             f"output has shape {out.shape}, pass gradient=")
        value = out._value
        xp = np if isinstance(value, np.ndarray) else namespace_of(value)
        return xp.ones((), dtype=out.dtype)
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
    value = g._value if isinstance(g, Tensor) else g
    if leaf._param is not None:
        leaf._param.accumulate_grad(value)
    if isinstance(g, Tensor):
        leaf.grad = g if leaf.grad is None else leaf.grad + g  # type: ignore[assignment]
    else:
        leaf.grad = Tensor(g.copy()) if leaf.grad is None else Tensor(leaf.grad._value + g)


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
            seeds = [Tensor(s) for s in seeds]
        retain = create_graph if retain_graph is None else retain_graph
        found = {id(t): g for t, g in _reverse(outs, seeds, create_graph, retain)}
        result = []
        for k, t in enumerate(ins):
            g = found.get(id(t))
            if g is None and not allow_unused:
                raise TorchLeanError(f"autograd.grad: input {k} was not used to compute the "
                                     "outputs (pass allow_unused=True to get None)")
            result.append(g if g is None or isinstance(g, Tensor) else Tensor(g))
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
        out = run_checked(prim, values, attrs)
        if history and not prim.nondiff and getattr(_state, "grad_enabled", True):
            return Tensor._result(out, prim, tuple(tensors), attrs)
        return Tensor._result(out, None, (), {})

    def _record_data(self, prim: Primitive, tensors: Sequence[Tensor], attrs: dict[str, Any]
                     ) -> Tensor:
        """An op with integer or bool inputs (labels, masks, indices)."""
        floats = [t for t in tensors if t.dtype.kind == "f"]
        if not floats:  # data only: computed, no history
            return Tensor(run_checked(prim, [t._value for t in tensors], attrs))
        # Mixed with float tensors, data takes their dtype (as PyTorch promotes).
        dtype = floats[0].dtype
        return self.record(prim, [t if t.dtype.kind == "f" else Tensor(t._value.astype(dtype))
                                  for t in tensors], attrs)

    def const(self, array: Any) -> Tensor:
        return tensor(array)

    def use(self, param: Param) -> Tensor:
        """A parameter as a leaf of the current computation; its gradient also accumulates into
        ``param.grad``. The value is the parameter's own array (no copy)."""
        if not isinstance(param, Param):
            raise TorchLeanError(f"use: expected a Param, found {type(param).__name__}")
        t = Tensor(param.data, requires_grad=param.requires_grad and is_grad_enabled())
        t._param = param
        t._param_version = param.version
        return t

    def value(self, ref: Ref) -> Any:
        return ref._value  # type: ignore[attr-defined]

    def dropout(self, x: Ref, p: float, training: bool = True) -> Ref:
        def mask_of(keep: float) -> Tensor:
            xp = namespace_of(x._value)  # type: ignore[attr-defined]
            draw = _draw(default_generator, "uniform", x.shape, x.dtype, xp)
            return Tensor((draw < keep).astype(x.dtype))

        return F.inverted_dropout(x, p, training, mask_of)  # type: ignore[no-any-return]


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
            if namespace_of(p.data) is not xp:
                raise device_mismatch(f"compiled module: parameter {p.name or '(unnamed)'}",
                                      p.device, x.device, "a parameter")
        values = c._values("compiled module", [x._value])
        out = values[c.graph.output]
        params = c.params
        if not is_grad_enabled() or not (x.requires_grad or any(p.requires_grad for p in params)):
            return Tensor(out)
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




def _dtype(dtype: Any, default: np.dtype = float32) -> np.dtype:
    if dtype is None:
        return default
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TorchLeanError(f"dtype: expected a NumPy dtype or its name, found {dtype!r}") \
            from None


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
        arr = arr.astype(float32)
    xp = src if device is None else _namespace(device)
    if xp is not src:
        return Tensor(to_device(arr, xp), requires_grad=requires_grad)  # a fresh copy there
    copied = np.array(arr, copy=True) if src is np else arr.copy()
    return Tensor(copied, requires_grad=requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """``data`` as a tensor, without a copy when it already is one of that dtype and device."""
    if isinstance(data, Tensor) and (dtype is None or np.dtype(dtype) == data.dtype) and (
            device is None or _device_name(device) == data.device):
        return data
    return tensor(data, dtype, device=device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing ``array``'s memory."""
    if not isinstance(array, np.ndarray):
        raise TorchLeanError(f"from_numpy: expected a NumPy array, found {type(array).__name__}")
    return Tensor(array)


def _shape_args(op: str, size: Any) -> tuple[int, ...]:
    shape = size[0] if len(size) == 1 and not isinstance(size[0], int | np.integer) else size
    return as_shape(op, shape)


def zeros(*size: Any, dtype: Any = None, requires_grad: bool = False,
          device: str | None = None) -> Tensor:
    xp = _namespace(device)
    return Tensor(xp.zeros(_shape_args("zeros", size), _dtype(dtype)), requires_grad)


def ones(*size: Any, dtype: Any = None, requires_grad: bool = False,
         device: str | None = None) -> Tensor:
    xp = _namespace(device)
    return Tensor(xp.ones(_shape_args("ones", size), _dtype(dtype)), requires_grad)


def full(size: Any, fill_value: float, dtype: Any = None, requires_grad: bool = False,
         device: str | None = None) -> Tensor:
    xp = _namespace(device)
    return Tensor(xp.full(_shape_args("full", (size,)), fill_value, _dtype(dtype)),
                  requires_grad)


def zeros_like(t: Tensor, dtype: Any = None, requires_grad: bool = False,
               device: str | None = None) -> Tensor:
    """Zeros of ``t``'s shape, dtype and device (unless given)."""
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad,
                 device=device or t.device)


def ones_like(t: Tensor, dtype: Any = None, requires_grad: bool = False,
              device: str | None = None) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad,
                device=device or t.device)


def arange(start: float, end: float | None = None, step: float = 1, dtype: Any = None,
           requires_grad: bool = False, device: str | None = None) -> Tensor:
    """Values from ``start`` (0 if only one bound is given) up to ``end`` by ``step``; int64 when
    all three are ints, float32 otherwise (as PyTorch)."""
    lo, hi = (0, start) if end is None else (start, end)
    ints = all(isinstance(v, int | np.integer) for v in (lo, hi, step))
    default = int64 if ints else float32
    xp = _namespace(device)
    return Tensor(xp.arange(lo, hi, step).astype(_dtype(dtype, default)), requires_grad)


def rand(*size: Any, generator: Generator | None = None, dtype: Any = None,
         requires_grad: bool = False, device: str | None = None) -> Tensor:
    """U[0, 1) draws from ``generator`` (default: the one ``tl.manual_seed`` seeds); the same
    numbers on every device."""
    gen = check_generator("rand", generator)
    return Tensor(_draw(gen, "uniform", _shape_args("rand", size), _dtype(dtype),
                        _namespace(device)), requires_grad)


def randn(*size: Any, generator: Generator | None = None, dtype: Any = None,
          requires_grad: bool = False, device: str | None = None) -> Tensor:
    """Standard normal draws from ``generator`` (default: the one ``tl.manual_seed`` seeds)."""
    gen = check_generator("randn", generator)
    return Tensor(_draw(gen, "normal", _shape_args("randn", size), _dtype(dtype),
                        _namespace(device)), requires_grad)


def manual_seed(seed: int) -> None:
    """Seed parameter initialisation (``tl.nn``) and the default generator of ``rand``/``randn``
    together, as ``torch.manual_seed`` does."""
    init_generator.manual_seed(seed)
    default_generator.manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# Functions on several tensors


def cat(tensors: Sequence[Any], dim: int = 0) -> Any:
    """Concatenate along ``dim`` (works on any refs: tensors, session refs, graph variables)."""
    return F.cat(tensors, dim)


def stack(tensors: Sequence[Any], dim: int = 0) -> Any:
    """Stack along a new axis ``dim``."""
    return F.stack(tensors, dim)


__all__ = [
    "Tensor", "tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "zeros_like",
    "ones_like", "arange", "rand", "randn", "manual_seed",
    "no_grad", "enable_grad", "is_grad_enabled", "autograd", "cat", "stack", "float32",
    "float64", "int64", "bool_", "MaxResult",
]
