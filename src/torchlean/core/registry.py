"""The op registry: one declaration per primitive, every rule side by side.

A ``Primitive`` holds an op's whole story: its shape rule, forward kernel, VJP rule, JVP rule (or
the reverse-only marker), documented semantics and sample inputs. The eager tape, the compiled
graph, the tests and the docs all read this one record.

Rules are written against an *Ops interpreter* ``ops`` rather than NumPy: ``ops.mul(g, b)`` runs
the ``mul`` kernel when ``ops`` is ``ARRAY_OPS``, and records a ``mul`` node when it is a graph
builder's interpreter. That is what makes the backward pass of a graph itself a differentiable
graph (hvp = jvp of grad).

Conventions for rules (``ops`` is the interpreter, values are arrays or graph variables):

- ``vjp(ops, g, inputs, out, **attrs) -> tuple`` with one cotangent per input, ``None`` for an
  input that receives nothing (the driver skips it). For ``broadcasting`` primitives a cotangent may
  have the output's shape; the driver reduces it to the input's shape in one central place.
- ``jvp(ops, tangents, inputs, out, **attrs) -> tangent | None`` where ``tangents`` holds ``None``
  for zero tangents. ``linear`` primitives get theirs for free (apply the op to the tangents);
  ``nondiff`` primitives (masks, comparisons, random draws) have zero derivatives everywhere they
  are defined, so both rules return nothing.
- A ``selective`` VJP rule also takes ``needed`` (one bool per input) and may return ``None``
  for inputs that need nothing, so the driver never pays for a gradient nobody receives (the
  input cotangent of a first layer, say). Rules per input, with "no gradient" as a value.

Each primitive also lists ``error_inputs``: calls it must refuse and the error each raises
(``ErrorInput``), so every check an op makes is exercised on every entry point.

Fast kernels (TorchLean's ``Options.fastKernels``). A primitive may also carry a ``fast_forward``
and/or a ``fast_vjp``: runtime-only kernels for hot ops that compute the same function in another
way (another GEMM layout, a saved residual instead of a recomputation), equal to the reference
within a stated tolerance (``FAST_RTOL``), never bitwise. The reference kernels stay the
definition: ``forward`` and ``vjp`` dispatch to the fast ones only while ``KERNELS.fast`` is set
(inside ``fast_kernels(True)``, what training does when ``Options(fast_kernels=True)``, the
default; and around each call ``tl.Tensor`` makes, while ``KERNELS.tensors``) and only on NumPy
arrays; everywhere else (the spec checks, the bound engine, ``to_tape``, verification) the
reference runs. ``reference_forward`` / ``reference_vjp`` are always the reference;
``torchlean verify`` compares each fast kernel with them on the samples.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import attr_kinds
from .backend import device_of, to_device
from .errors import (
    DeviceError,
    SignatureError,
    TapeError,
    TorchLeanError,
    UnknownOpError,
    UnsupportedJvpError,
)

Array = Any
Rule = Callable[..., Any]


@dataclass(frozen=True)
class Sample:
    """One sample call of a primitive: input arrays (float64) and static attributes."""

    inputs: tuple[np.ndarray, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class ErrorInput:
    """One call a primitive must refuse, and how (as PyTorch's OpInfo ``error_inputs``).

    ``inputs`` are arrays, or shapes (tuples of ints) standing for arrays of that shape whose
    values the check does not read. Every entry point raises ``error`` with a message that names
    the op and matches the regex ``match``. Two entry points differ by design, and say so here:
    ``tape_error`` is the class the tape raises instead, where it differs (the tape counts node
    ids, so a wrong number of inputs is a ``TapeError`` there); ``at_run`` marks a check of
    input values, which a traced graph cannot make while tracing and makes when it runs.
    """

    inputs: tuple[Any, ...]
    attrs: dict[str, Any]
    error: type[TorchLeanError]
    match: str
    tape_error: type[TorchLeanError] | None = None
    at_run: bool = False

    def arrays(self) -> tuple[np.ndarray, ...]:
        """Fresh float64 arrays for the inputs (a shape becomes an array of 0.5s)."""
        return tuple(np.full(x, 0.5) if isinstance(x, tuple) else np.array(x, dtype=np.float64)
                     for x in self.inputs)

    def shapes(self) -> tuple[tuple[int, ...], ...]:
        """The inputs' shapes."""
        return tuple(x if isinstance(x, tuple) else tuple(np.shape(x)) for x in self.inputs)


def arity_error(prim_inputs: Sequence[str]) -> ErrorInput:
    """The record every primitive without attributes can give: one input too many."""
    n = len(prim_inputs)
    return ErrorInput(((2,),) * (n + 1), {}, SignatureError,
                      rf"expected {n} .*{re.escape(str(list(prim_inputs)))}, found {n + 1} "
                      "positional", tape_error=TapeError)


_REQUIRED = object()
_TORCH_HINT = ("; these are the seed's primitives (softmax and log_softmax act on the last "
               "axis). For torch-style dim= use the methods (x.softmax(dim), x.sum(dim=1, "
               "keepdim=True)) or torchlean.nn.functional")


class Primitive:
    """The declaration of one primitive op. See the module docstring for the rule conventions."""

    __slots__ = (
        "name", "inputs", "attrs", "infer", "forward", "vjp", "jvp", "semantics", "samples",
        "broadcasting", "linear", "nondiff", "reverse_only", "float_inputs", "torch_ref",
        "fd_smooth", "selective", "error_inputs", "attr_kinds", "_attr_checks",
        "device_kernel", "index_inputs", "reference_forward", "reference_vjp", "fast_forward",
        "fast_vjp",
    )

    def __init__(
        self,
        name: str,
        inputs: Sequence[str],
        infer: Rule,
        forward: Rule,
        *,
        attrs: dict[str, Any] | Sequence[str] = (),
        vjp: Rule | None = None,
        jvp: Rule | None = None,
        semantics: str,
        samples: Callable[[np.random.Generator], list[Sample]],
        broadcasting: bool = False,
        linear: bool = False,
        nondiff: bool = False,
        reverse_only: bool = False,
        torch_ref: Rule | None = None,
        fd_smooth: bool = True,
        selective: bool = False,
        error_inputs: Sequence[ErrorInput] = (),
        attr_kinds: dict[str, Callable[[str, str, Any], Any]] | None = None,
        device_kernel: bool = True,
        index_inputs: Sequence[str] = (),
        fast_forward: Rule | None = None,
        fast_vjp: Rule | None = None,
    ) -> None:
        self.name = name
        self.inputs = tuple(inputs)
        self.attrs = (
            dict(attrs) if isinstance(attrs, dict) else {a: _REQUIRED for a in attrs}
        )
        self.infer = _size_limited(name, infer)
        # The reference kernels (the definition) and the optional fast ones; ``forward`` and
        # ``vjp`` are what every executor calls: the reference itself, or a dispatcher choosing
        # the fast kernel inside ``fast_kernels(True)`` (see the module docstring).
        self.reference_forward = forward
        self.reference_vjp = vjp
        self.fast_forward = fast_forward
        self.fast_vjp = fast_vjp
        self.forward = forward if fast_forward is None else _dispatch_forward(forward, fast_forward)
        self.vjp = vjp if fast_vjp is None or vjp is None else _dispatch_vjp(vjp, fast_vjp)
        self.jvp = jvp
        self.semantics = semantics.strip()
        self.samples = samples
        self.broadcasting = broadcasting
        self.linear = linear
        self.nondiff = nondiff
        self.reverse_only = reverse_only
        self.torch_ref = torch_ref
        # Whether central finite differences are meaningful on random samples (false for ops whose
        # forward is piecewise constant in a way that random samples can straddle).
        self.fd_smooth = fd_smooth
        self.selective = selective
        # Whether the forward and derivative kernels run on a device namespace (CuPy) as well as
        # on NumPy. Executors call ``check_device_kernel`` before running a node on a device: an
        # op without a device kernel is a ``DeviceError`` there, never a silent host fallback.
        self.device_kernel = device_kernel
        # Inputs that carry integer indices as integer-valued floats (as labels travel), read at
        # run time: the VJP gives them no cotangent, and checks never perturb them (a finite
        # difference step would make them non-integer, which the kernel refuses).
        self.index_inputs = tuple(index_inputs)
        unknown_index = set(self.index_inputs) - set(self.inputs)
        if unknown_index:
            raise TypeError(f"primitive {name}: index_inputs {sorted(unknown_index)} are not "
                            "inputs")
        # Never called by the runtime kernels: ``error_inputs`` (bad calls and the error each
        # must raise) is declared with the op. What higher layers know of an op lives in their
        # own side tables, keyed by its name: the reference definition in ``torchlean.spec.SPECS``
        # and the interval rule in ``torchlean.bounds.ibp.RULES``.
        records = tuple(error_inputs)
        self.error_inputs: Callable[[], list[ErrorInput]] | None = (
            (lambda: list(records)) if records else None)
        # The kind of each attribute (``attr_kinds``): checked and normalised by ``check_attrs``
        # on every entry point, declared with the primitive (``attr_kinds=``).
        self.attr_kinds: dict[str, Callable[[str, str, Any], Any]] = {}
        self._attr_checks: tuple[tuple[str, Callable[[str, str, Any], Any]], ...] = ()
        if attr_kinds:
            self.declare_attr_kinds(attr_kinds)
        if not nondiff and vjp is None:
            raise TypeError(f"primitive {name}: a differentiable op needs a vjp rule")
        if not (nondiff or linear or reverse_only) and jvp is None:
            raise TypeError(f"primitive {name}: declare a jvp rule, linear=True or reverse_only")

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"

    def declare_attr_kinds(self, kinds: dict[str, Callable[[str, str, Any], Any]]) -> None:
        """Declare the kind of each attribute (see ``attr_kinds``); unknown names are refused."""
        unknown = set(kinds) - set(self.attrs)
        if unknown:
            raise TypeError(f"primitive {self.name}: kinds for unknown attributes "
                            f"{sorted(unknown)}")
        self.attr_kinds = dict(kinds)
        self._attr_checks = tuple(kinds.items())

    def check_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """``attrs`` checked against their declared kinds and normalised (NumPy scalars become
        Python numbers, lists tuples): the one attribute validator of every entry point, run
        before any shape rule or kernel. Returns ``attrs`` itself when nothing changed."""
        checks = self._attr_checks
        if not checks or not attrs:
            return attrs
        out = attrs
        name = self.name
        for key, kind in checks:
            if key in attrs:
                value = attrs[key]
                normal = kind(name, key, value)
                if normal is not value:
                    if out is attrs:
                        out = dict(attrs)
                    out[key] = normal
        return out

    def split_call(
        self, args: Sequence[Any], kwargs: dict[str, Any], what: str = "inputs",
        error: type[Exception] = SignatureError,
    ) -> tuple[Sequence[Any], dict[str, Any]]:
        """Split a call ``op(*inputs, *attrs, **attrs)`` into its inputs and bound attributes."""
        arity = len(self.inputs)
        if len(args) < arity or (not self.attrs and len(args) > arity):
            then = f" then attributes {list(self.attrs)}" if self.attrs else ""
            raise error(f"{self.name}: expected {arity} {what} {list(self.inputs)}{then}, "
                        f"found {len(args)} positional arguments")
        if not self.attrs and kwargs:
            raise error(f"{self.name}: takes no attributes, found {sorted(kwargs)}"
                        + _TORCH_HINT * bool({"dim", "keepdim"} & set(kwargs)))
        attrs = self.bind_attrs(args[arity:], kwargs) if self.attrs else {}
        return args[:arity], attrs

    def bind_attrs(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Attributes from positional-after-inputs and keyword arguments, defaults filled."""
        if not args and kwargs.keys() == self.attrs.keys():
            # Every attribute by keyword (the per-op hot path of the functional layer): nothing
            # unknown, missing or given twice, and the order is the one built below.
            return dict(kwargs)
        names = list(self.attrs)
        if len(args) > len(names):
            raise SignatureError(f"{self.name}: takes {len(names)} attributes {names}, "
                                 f"got {len(args)}")
        bound = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in self.attrs:
                raise SignatureError(f"{self.name}: unknown attribute {key!r}; expected one of "
                                     f"{names}")
            if key in bound:
                raise SignatureError(f"{self.name}: attribute {key!r} given twice")
            bound[key] = value
        for key, default in self.attrs.items():
            if key not in bound:
                if default is _REQUIRED:
                    raise SignatureError(f"{self.name}: missing attribute {key!r}")
                bound[key] = default
        return bound

    def apply_jvp(self, ops: Any, tangents: Sequence[Any], inputs: Sequence[Any], out: Any,
                  attrs: dict[str, Any]) -> Any:
        """The output tangent, ``None`` when it is zero. Raises for reverse-only ops."""
        if self.nondiff or all(t is None for t in tangents):
            return None
        if self.reverse_only:
            raise UnsupportedJvpError(
                f"{self.name}: this op has no forward-mode (JVP) rule; "
                "use reverse mode (vjp / grad) for it"
            )
        if self.linear:
            filled = [
                ops.zeros_like(x) if t is None else t for t, x in zip(tangents, inputs, strict=True)
            ]
            return getattr(ops, self.name)(*filled, **attrs)
        assert self.jvp is not None
        return self.jvp(ops, tangents, inputs, out, **attrs)

    def vjp_rule(self, attrs: dict[str, Any], needed: Sequence[bool] | None,
                 reduce: bool) -> tuple[Rule, dict[str, Any]]:
        """How this primitive's cotangents are computed at one node: ``(rule, kwargs)`` such
        that ``rule(ops, g, inputs, out, **kwargs)`` returns one cotangent per input.

        This is the one place that decides it (the reverse driver in ``autodiff`` binds it once
        per node): a selective rule gets ``needed`` (one bool per input, default all); when
        ``reduce`` is set (a broadcasting op whose inputs differ in shape from its output) the
        cotangents are summed back to the input shapes. Not for ``nondiff`` primitives.
        """
        assert self.vjp is not None, f"{self.name} is nondiff: it has no vjp rule"
        kwargs = attrs
        if self.selective:
            kwargs = {**attrs, "needed": (True,) * len(self.inputs) if needed is None
                      else tuple(needed)}
        if not reduce:
            return self.vjp, kwargs
        vjp = self.vjp

        def reducing(ops: Any, g: Any, inputs: Sequence[Any], out: Any, **kw: Any) -> Any:
            return tuple(None if c is None else unbroadcast(ops, c, x.shape)
                         for c, x in zip(vjp(ops, g, inputs, out, **kw), inputs, strict=True))

        return reducing, kwargs

    def apply_vjp(self, ops: Any, g: Any, inputs: Sequence[Any], out: Any,
                  attrs: dict[str, Any], needed: Sequence[bool] | None = None) -> Sequence[Any]:
        """One cotangent per input (``None`` for none), already reduced to each input's shape.

        ``needed`` (one bool per input, default all) lets a selective rule skip the rest. A
        one-node use of ``vjp_rule`` (checks and tests call this; the drivers bind once).
        """
        if self.nondiff:
            return (None,) * len(inputs)
        # The reducing rule sums a cotangent back only where its shape differs from its input's,
        # so it is right for any broadcasting call (the drivers decide from static shapes and
        # skip it when nothing broadcasts).
        rule, kwargs = self.vjp_rule(attrs, needed, self.broadcasting)
        return rule(ops, g, inputs, out, **kwargs)


# --- The kernel set: reference (the default) or fast ----------------------------------------

# Relative tolerance of a fast kernel against its reference (the ``torchlean verify`` column and
# the tests): the fast kernels sum the same products in another order (one GEMM instead of a
# batched one, a saved softmax instead of a recomputed one), so they differ by rounding only.
FAST_RTOL = {"float32": 1e-4, "float64": 1e-10}


# ``set_tensor_kernels``'s choice: what each thread's ``KERNELS.tensors`` starts from.
_TENSORS_DEFAULT = [True]


class _KernelSet(threading.local):
    """Which kernels the dispatchers run: ``fast`` is set only inside ``fast_kernels(True)``.

    ``tensors`` is the choice of the define-by-run door (``tl.Tensor`` ops and their
    ``backward()``, and optimiser steps outside any block): on by default, as PyTorch's eager
    mode runs its fast kernels, and set to ``on`` inside a ``fast_kernels(on)`` block (so
    ``fast_kernels(False)`` gives tensors the reference kernels too); ``set_tensor_kernels``
    changes the default. The door turns ``fast`` on around the calls it makes itself.

    Per thread, as PyTorch's grad mode is: a block or a tensor op in one thread never switches
    the kernels of another (a verifier in one thread must run the reference while a training
    loop in another runs the fast set)."""

    def __init__(self) -> None:
        self.fast = False
        self.tensors = _TENSORS_DEFAULT[0]


KERNELS = _KernelSet()

# Called when the outermost ``fast_kernels(True)`` block opens and when it closes: the fast
# kernels' residual store registers its ``clear`` here, so a residual never outlives the block
# (one training step) that made it.
FAST_BLOCK_HOOKS: list[Callable[[], None]] = []


class fast_kernels:  # noqa: N801  (used as a function: ``with fast_kernels(on):``)
    """Run the fast kernels (``on``) or the reference ones inside the block, then restore the
    previous choice. Training enters it with ``Options.fast_kernels``; code that must run the
    definition whatever its caller chose (bounds, checks) enters ``fast_kernels(False)``.

    (A class, not a ``contextlib.contextmanager`` generator: every training step enters it
    twice, and the generator's frame and wrapper cost about 2 us a block.)"""

    __slots__ = ("_on", "_before", "_tensors", "_edge")

    def __init__(self, on: bool = True) -> None:
        self._on = bool(on)
        self._before = False
        self._tensors = True
        self._edge = False

    def __enter__(self) -> None:
        before = self._before = KERNELS.fast
        self._tensors = KERNELS.tensors
        edge = self._edge = self._on and not before
        if edge:
            for hook in FAST_BLOCK_HOOKS:
                hook()
        KERNELS.fast = KERNELS.tensors = self._on

    def __exit__(self, *exc: object) -> None:
        KERNELS.fast = self._before
        KERNELS.tensors = self._tensors
        if self._edge:
            for hook in FAST_BLOCK_HOOKS:
                hook()


def set_tensor_kernels(on: bool) -> bool:
    """Whether ``tl.Tensor`` code outside any ``fast_kernels`` block runs the fast kernels
    (``True``, the default) or the reference ones, in this thread and in threads started
    after; returns this thread's previous choice."""
    if not isinstance(on, bool | np.bool_):
        raise SignatureError(f"set_tensor_kernels: expected a bool, found {type(on).__name__}")
    before = KERNELS.tensors
    KERNELS.tensors = _TENSORS_DEFAULT[0] = bool(on)
    return before


def _dispatch_forward(reference: Rule, fast: Rule) -> Rule:
    state = KERNELS

    def forward(*args: Any, **kwargs: Any) -> Any:
        # Fast kernels are NumPy-only: a device array (or the nullary form with ``xp=``) runs
        # the reference, which serves every namespace.
        if state.fast and "xp" not in kwargs and (not args or type(args[-1]) is np.ndarray):
            return fast(*args, **kwargs)
        return reference(*args, **kwargs)

    forward.__name__ = getattr(reference, "__name__", "forward")
    forward.__wrapped__ = reference  # type: ignore[attr-defined]
    return forward


def _dispatch_vjp(reference: Rule, fast: Rule) -> Rule:
    state = KERNELS

    def vjp(ops: Any, g: Any, inputs: Sequence[Any], out: Any, **kwargs: Any) -> Any:
        # A fast VJP computes numbers: it runs on the array interpreter only (a graph builder
        # records the reference rule, so the recorded backward stays differentiable).
        if state.fast and ops is ARRAY_OPS and type(g) is np.ndarray:
            return fast(ops, g, inputs, out, **kwargs)
        return reference(ops, g, inputs, out, **kwargs)

    vjp.__name__ = getattr(reference, "__name__", "vjp")
    vjp.__wrapped__ = reference  # type: ignore[attr-defined]
    return vjp


def check_device_kernel(prim: Primitive, xp: Any) -> None:
    """Refuse to run ``prim`` on a device namespace ``xp`` when it has no device kernel.

    NumPy always passes. On a device (``xp`` is CuPy or the tests' stand-in) a primitive declared
    with ``device_kernel=False`` raises ``DeviceError`` naming the op: nothing copies its inputs
    to the host behind the caller's back.
    """
    if xp is np or prim.device_kernel:
        return
    device = device_of(xp)
    raise DeviceError(
        f"{prim.name}: no device kernel for device {device!r}; this primitive runs only on the "
        f"CPU, and nothing is copied to the host implicitly (run it with device='cpu', or move "
        f"its inputs with torchlean.backend.to_host and back with to_device)")


# Device copies of host attribute arrays (masks, index arrays), one per (array, namespace, tag):
# key -> (weak reference to the host array, a snapshot of its contents, the device array).
_DEVICE_CONSTANTS: dict[tuple[int, int, str], tuple[Any, np.ndarray, Any]] = {}


def device_constant(value: Any, xp: Any, make: Callable[[Any], np.ndarray] | None = None,
                    tag: str = "") -> Any:
    """``make(value)`` (default ``np.asarray(value)``), a host array derived from a static
    attribute, as an array of namespace ``xp``: an explicit upload (``to_device``).

    On NumPy it is computed and returned. On a device, when ``value`` is a NumPy array the upload
    is cached for as long as that array lives and keeps its contents (compared on the host with a
    snapshot, never by reading the device), so a mask or an index array of a training step is
    uploaded once, not once per step, and a CUDA-graph capture never meets a host transfer. Other
    attribute values (lists, ints) are uploaded on each call. ``tag`` names what ``make`` derives,
    so two derivations of one attribute are cached apart.
    """
    host = np.asarray if make is None else make
    if xp is np:
        return host(value)
    if not isinstance(value, np.ndarray):
        return to_device(host(value), xp)
    key = (id(value), id(xp), tag)
    hit = _DEVICE_CONSTANTS.get(key)
    if hit is not None:
        ref, snapshot, device = hit
        if (ref() is value and snapshot.shape == value.shape and snapshot.dtype == value.dtype
                and np.array_equal(snapshot, value)):
            return device
    device = to_device(host(value), xp)
    _DEVICE_CONSTANTS[key] = (weakref.ref(value, _forget(key)), value.copy(), device)
    return device


def _forget(key: tuple[int, int, str]) -> Callable[[Any], None]:
    """The weakref callback dropping ``key`` from the cache. It holds the cache itself: at
    interpreter exit the module's globals may be gone when the last host arrays die."""
    cache = _DEVICE_CONSTANTS

    def forget(_: Any) -> None:
        cache.pop(key, None)

    return forget


def unbroadcast(ops: Any, cotangent: Any, shape: tuple[int, ...]) -> Any:
    """Sum a broadcast cotangent back to ``shape`` (the one place broadcasting is undone)."""
    if cotangent.shape == shape:
        return cotangent
    return ops.sum_to(cotangent, shape=shape)


def _size_limited(name: str, infer: Rule) -> Rule:
    """``infer`` followed by the allocation limit on the result's entries (``attr_kinds``)."""
    limit = attr_kinds.max_elements

    def checked(*shapes: Any, **attrs: Any) -> Any:
        out = infer(*shapes, **attrs)
        n = 1
        for d in out:
            n *= d
        if n > limit():
            attr_kinds.check_size(name, "result shape", tuple(out))
        return out

    checked.__name__ = getattr(infer, "__name__", "infer")
    checked.__wrapped__ = infer  # type: ignore[attr-defined]
    return checked


REGISTRY: dict[str, Primitive] = {}


class ArrayOps:
    """The Ops interpreter over concrete arrays: each method runs a primitive's forward kernel.

    Methods are attached as primitives register (``ARRAY_OPS.mul is mul's forward``), so a rule's
    ``ops.mul(a, b)`` costs one call. Rules call nothing but primitives on ``ops`` (``zeros_like``
    too is a registered, zero-derivative primitive), so each rule runs unchanged on every
    interpreter.
    """

    name = "array"

    def __getattr__(self, name: str) -> Callable[..., Any]:
        raise AttributeError(f"no primitive named {name!r} is registered")


ARRAY_OPS = ArrayOps()


def register(prim: Primitive) -> Primitive:
    """Add a primitive to the registry and to the array interpreter."""
    if prim.name in REGISTRY:
        raise TypeError(f"primitive {prim.name} registered twice")
    REGISTRY[prim.name] = prim
    setattr(ARRAY_OPS, prim.name, prim.forward)
    return prim


def attach_fast(name: str, forward: Rule | None = None, vjp: Rule | None = None) -> Primitive:
    """Give the registered primitive ``name`` a fast forward and/or VJP (the ``ops.fast``
    modules call this once at import). Its ``forward`` / ``vjp`` become dispatchers that run
    the fast kernel inside ``fast_kernels(True)`` and the reference otherwise; the array
    interpreter's method follows. Attaching twice is refused (one fast kernel per rule)."""
    prim = get(name)
    if (forward is not None and prim.fast_forward is not None) or (
            vjp is not None and prim.fast_vjp is not None):
        raise TypeError(f"primitive {name}: a fast kernel is already attached")
    reference_vjp = prim.reference_vjp
    if vjp is not None and reference_vjp is None:
        raise TypeError(f"primitive {name}: has no vjp rule to make fast")
    if forward is not None:
        prim.fast_forward = forward
        prim.forward = _dispatch_forward(prim.reference_forward, forward)
        setattr(ARRAY_OPS, name, prim.forward)
    if vjp is not None and reference_vjp is not None:
        prim.fast_vjp = vjp
        prim.vjp = _dispatch_vjp(reference_vjp, vjp)
    return prim


def get(name: str) -> Primitive:
    """The primitive registered as ``name``, or ``UnknownOpError`` (a ``KeyError``) listing them."""
    prim = REGISTRY.get(name) if isinstance(name, str) else None
    if prim is None:
        raise UnknownOpError(f"no primitive named {name!r}; known: {sorted(REGISTRY)}")
    return prim


def kind_of(prim: Primitive) -> str:
    """How the primitive's derivatives are declared, in a word (for the docs table)."""
    if prim.nondiff:
        return "zero derivative"
    if prim.reverse_only:
        return "reverse only"
    return "linear" if prim.linear else "vjp + jvp"


# --- Helpers for declaring whole kinds of primitive -------------------------------------------


def elementwise_unary(
    name: str,
    forward: Rule,
    derivative: Rule,
    *,
    semantics: str,
    samples: Callable[[np.random.Generator], list[Sample]],
    attrs: dict[str, Any] | Sequence[str] = (),
    attr_kinds: dict[str, Callable[[str, str, Any], Any]] | None = None,
    torch_ref: Rule | None = None,
    fd_smooth: bool = True,
    infer: Rule | None = None,
    error_inputs: Sequence[ErrorInput] = (),
) -> Primitive:
    """Declare an elementwise op from its forward and its derivative ``f'(x)``.

    ``derivative(ops, x, y, **attrs)`` returns f' at x (``y`` is the forward value, handy for tanh
    or sigmoid). The VJP is ``g * f'`` and the JVP is ``t * f'``: one derivative, both modes.
    """

    def vjp(ops: Any, g: Any, inputs: Sequence[Any], out: Any, **kw: Any) -> tuple[Any]:
        return (ops.mul(g, derivative(ops, inputs[0], out, **kw)),)

    def jvp(ops: Any, tangents: Sequence[Any], inputs: Sequence[Any], out: Any, **kw: Any) -> Any:
        return ops.mul(tangents[0], derivative(ops, inputs[0], out, **kw))

    if not error_inputs and not attrs:
        # An attribute-free elementwise op accepts every shape: a wrong call is all it refuses.
        error_inputs = (arity_error(("x",)),)
    return register(Primitive(
        name, ("x",), infer or same_shape, forward, attrs=attrs, attr_kinds=attr_kinds, vjp=vjp,
        jvp=jvp,
        semantics=semantics, samples=samples, torch_ref=torch_ref, fd_smooth=fd_smooth,
        error_inputs=error_inputs,
    ))


def same_shape(shape: tuple[int, ...], **_: Any) -> tuple[int, ...]:
    """Shape rule of elementwise unary ops."""
    return shape


def add_tangents(ops: Any, a: Any, b: Any) -> Any:
    """``a + b`` where ``None`` is a zero tangent (so ``None + None`` stays ``None``)."""
    if a is None:
        return b
    if b is None:
        return a
    return ops.add(a, b)


def bilinear(ops: Any, f: Callable[[Any, Any], Any], a: Any, b: Any, ta: Any, tb: Any) -> Any:
    """The JVP of a bilinear ``f`` at ``(a, b)``: ``f(ta, b) + f(a, tb)``, skipping ``None``
    tangents (as JAX's ``defbilinear``). ``None`` when both tangents are."""
    left = None if ta is None else f(ta, b)
    right = None if tb is None else f(a, tb)
    return add_tangents(ops, left, right)


def bilinear_jvp(name: str) -> Rule:
    """The JVP rule of primitive ``name``, bilinear in its two inputs (attributes pass through)."""

    def jvp(ops: Any, tangents: Sequence[Any], inputs: Sequence[Any], out: Any,
            **attrs: Any) -> Any:
        op = getattr(ops, name)
        return bilinear(ops, lambda a, b: op(a, b, **attrs), inputs[0], inputs[1],
                        tangents[0], tangents[1])

    return jvp
