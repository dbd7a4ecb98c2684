"""``torchlean.autograd``: torch.autograd's names for tensors.

``grad``, ``no_grad``/``enable_grad`` and ``backward`` run the one reverse driver (see
``tensor.py``). ``Function`` is torch's custom-op class: ``forward(ctx, *args)`` and
``backward(ctx, *grads)`` are the user's, ``ctx.save_for_backward`` keeps tensors for the
backward, and ``apply`` records one node on the tensor graph whose VJP calls the user's
backward (so the same ``backward()`` and ``autograd.grad`` reach through it, and with
``create_graph=True`` the user's backward is itself recorded). A custom Function is opaque to the
op registry: it cannot be traced, so ``compile``, ``verify`` and ONNX export refuse it (a graph
ref given to ``apply`` raises ``TraceError``). ``Variable`` is torch's deprecated wrapper.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence
from typing import Any

import numpy as np

from .core.errors import ShapeError, TorchLeanError, TraceError
from .core.registry import ARRAY_OPS, Primitive
from .engine import autograd_functional as functional
from .engine.ops_interface import Ref
from .engine.tensor import Tensor, _leaf, enable_grad, is_grad_enabled, no_grad
from .engine.tensor import autograd as _namespace

grad = _namespace.grad


def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool = False,
             create_graph: bool = False) -> None:
    """``torch.autograd.backward``: ``backward`` of each output with its gradient."""
    outs = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    grads = [grad_tensors] if grad_tensors is None or isinstance(grad_tensors, Tensor) \
        else list(grad_tensors)
    if len(grads) == 1 and len(outs) > 1 and grads[0] is None:
        grads = grads * len(outs)
    if len(grads) != len(outs):
        raise TorchLeanError(f"autograd.backward: {len(grads)} gradients for {len(outs)} "
                             "outputs")
    for k, (out, g) in enumerate(zip(outs, grads, strict=True)):
        out.backward(g, retain_graph=retain_graph or k < len(outs) - 1,
                     create_graph=create_graph)


def Variable(data: Any, requires_grad: bool = False) -> Tensor:  # noqa: N802  (torch's name)
    """torch's deprecated ``Variable``: the tensor itself (a tensor has a history already);
    ``requires_grad=True`` gives a leaf sharing the data that requires grad."""
    t = data if isinstance(data, Tensor) else _leaf(np.asarray(data))
    if requires_grad:
        return t.detach().requires_grad_(True)
    return t


class FunctionCtx:
    """The ``ctx`` of a custom Function: ``save_for_backward`` / ``saved_tensors``,
    ``needs_input_grad``, and any attribute the user sets."""

    def __init__(self) -> None:
        self.saved_tensors: tuple[Any, ...] = ()
        self.needs_input_grad: tuple[bool, ...] = ()
        self.non_differentiable: set[int] = set()
        self.materialize_grads = True

    def save_for_backward(self, *tensors: Any) -> None:
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TorchLeanError(f"save_for_backward: can only save tensors (or None), "
                                     f"found {type(t).__name__}")
        self.saved_tensors = tuple(tensors)

    def mark_non_differentiable(self, *tensors: Any) -> None:
        self.non_differentiable.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors: Any) -> None:
        raise TorchLeanError("mark_dirty: in-place custom Functions are not supported; return "
                             "a new tensor from forward")

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)


class Function:
    """Subclass with static ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)``; call
    ``MyFunction.apply(*args)``."""

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a custom Function must define forward(ctx, ...)")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError("a custom Function must define backward(ctx, ...)")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        name = cls.__name__
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, Ref) and not isinstance(a, Tensor):
                raise TraceError(f"{name}.apply: a custom autograd.Function cannot be traced "
                                 "(compile, verify and ONNX export cannot see inside the user's "
                                 "forward and backward); write it with torchlean ops instead")
        ctx = FunctionCtx()
        inputs = [(k, a) for k, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with no_grad():
            out = cls.forward(ctx, *args, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        for o in outs:
            if not isinstance(o, Tensor):
                raise TorchLeanError(f"{name}.forward: must return a Tensor or a tuple of "
                                     f"Tensors, found {type(o).__name__}")
        if not is_grad_enabled() or not any(a.requires_grad for _, a in inputs):
            return out
        parents = tuple(a for _, a in inputs)
        recorded = []
        for k, o in enumerate(outs):
            if id(o) in ctx.non_differentiable or o.dtype.kind != "f":
                recorded.append(o)
                continue
            prim = _node(cls, ctx, args, inputs, outs, k)
            t = Tensor._result(o._value, prim, parents, {})
            recorded.append(t)
        return tuple(recorded) if isinstance(out, tuple) else recorded[0]


def _node(cls: Any, ctx: FunctionCtx, args: Sequence[Any], inputs: list[tuple[int, Tensor]],
          outs: Sequence[Tensor], k: int) -> Primitive:
    """A one-off primitive for output ``k`` of one call: its VJP calls the user's backward
    with ``g`` for this output and zeros for the others (the backward is linear in the output
    gradients, so the per-output results add up to torch's single call)."""
    name = cls.__name__
    value = outs[k]._value
    shapes = [tuple(a.shape) for _, a in inputs]

    def vjp(ops: Any, g: Any, xs: Any, out: Any) -> tuple[Any, ...]:
        first_order = ops is ARRAY_OPS
        grads_out = []
        for j, o in enumerate(outs):
            if j == k:
                grads_out.append(_leaf(g) if first_order else g)
            else:
                grads_out.append(_leaf(np.zeros_like(o._value)) if ctx.materialize_grads
                                 else None)
        mode = no_grad() if first_order else enable_grad()
        with mode:
            result = cls.backward(ctx, *grads_out)
        result = result if isinstance(result, tuple) else (result,)
        if len(result) < len(args):
            raise TorchLeanError(f"{name}.backward: returned {len(result)} gradients, expected "
                                 f"{len(args)} (one per forward input, None for non-tensors)")
        cotangents = []
        for (pos, a), shape in zip(inputs, shapes, strict=True):
            r = result[pos]
            if r is None:
                r = _leaf(np.zeros(shape, a.dtype))
            if not isinstance(r, Tensor):
                raise TorchLeanError(f"{name}.backward: gradient {pos} must be a Tensor or "
                                     f"None, found {type(r).__name__}")
            if tuple(r.shape) != shape:
                raise ShapeError(f"{name}.backward: gradient {pos} has shape {tuple(r.shape)}, "
                                 f"the input has shape {shape}")
            cotangents.append(r._value.astype(a.dtype, copy=False) if first_order else r)
        return tuple(cotangents)

    return Primitive(
        f"{name}", tuple(f"input{j}" for j in range(len(inputs))), lambda *s: value.shape,
        lambda *xs: value, vjp=vjp, reverse_only=True,
        semantics=f"The user's autograd.Function {name} (opaque: not traceable).",
        samples=lambda rng: [])


# torch.autograd.functional and torch.autograd.profiler (importable by their dotted names too)
profiler = types.ModuleType("torchlean.autograd.profiler",
                            "torch.autograd.profiler stand-in: profile times the block only.")
profiler.profile = functional.profile  # type: ignore[attr-defined]
profiler.record_function = functional.record_function  # type: ignore[attr-defined]
sys.modules.setdefault("torchlean.autograd.functional", functional)
sys.modules.setdefault("torchlean.autograd.profiler", profiler)

__all__ = ["Function", "FunctionCtx", "Variable", "backward", "enable_grad", "functional", "grad",
           "no_grad", "profiler"]
