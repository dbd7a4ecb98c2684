"""Module hooks, as torch's: forward pre-hooks, forward hooks and full backward (pre-)hooks.

``Module.register_forward_pre_hook`` / ``register_forward_hook`` /
``register_full_backward_pre_hook`` / ``register_full_backward_hook`` return a
``RemovableHandle``; ``Module.__call__`` runs ``call_with_hooks`` only while a module has hooks,
so an unhooked call costs nothing more.

Backward hooks on tensors: the module's tensor inputs and outputs pass through identity nodes
(one-off reverse-only primitives, as ``autograd.Function`` records) whose reverse steps see the
cotangents. An output's step calls the backward pre-hooks with ``grad_output`` (a hook may return
a replacement); an input's step calls the backward hooks with ``grad_input`` and
``grad_output`` (a hook may return a replacement ``grad_input``). With no input that requires a
gradient the hooks are called from the output's step with ``grad_input`` all None, as torch
does. A module with several inputs that require gradients has one identity per input, reached at
different times of the reverse pass, so its hooks run once all of them are known and may not
replace them (refused by name: the earlier ones have already flowed on).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ..core.errors import TorchLeanError, UnsupportedArgumentError
from ..core.registry import ARRAY_OPS, Primitive
from ..engine.tensor import Tensor, _leaf, is_grad_enabled

__all__ = ["RemovableHandle", "call_with_hooks", "has_hooks"]

_ids = itertools.count()
KINDS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


class RemovableHandle:
    """What ``register_*_hook`` returns: ``remove()`` unregisters the hook (also as a context
    manager's exit)."""

    def __init__(self, table: dict[int, Any]) -> None:
        self.id = next(_ids)
        self._table = table

    def remove(self) -> None:
        self._table.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def add_hook(module: Any, kind: str, hook: Callable[..., Any], prepend: bool,
             **flags: bool) -> RemovableHandle:
    """Register ``hook`` in the module's ``kind`` table (first with ``prepend``)."""
    if not callable(hook):
        raise TorchLeanError(f"{type(module).__name__}.register{kind[:-1]}: expected a callable "
                             f"hook, found {type(hook).__name__}")
    table = module.__dict__.get(kind)
    if table is None:
        table = {}
        object.__setattr__(module, kind, table)
    handle = RemovableHandle(table)
    entry = (hook, flags)
    if prepend:
        items = list(table.items())
        table.clear()
        table[handle.id] = entry
        table.update(items)
    else:
        table[handle.id] = entry
    return handle


def has_hooks(module: Any) -> bool:
    d = module.__dict__
    return any(d.get(k) for k in KINDS)


def _tensors(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _replace(value: Any, new: dict[int, Tensor]) -> Any:
    if isinstance(value, Tensor):
        return new.get(id(value), value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_replace(v, new) for v in value))
    if isinstance(value, tuple | list):
        return type(value)(_replace(v, new) for v in value)
    if isinstance(value, dict):
        return {k: _replace(v, new) for k, v in value.items()}
    return value


def _identity(x: Tensor, name: str, on_grad: Callable[[Any, bool], Any]) -> Tensor:
    """``x`` again, as a node whose reverse step hands the cotangent to ``on_grad`` (which
    returns the cotangent to pass on)."""

    def vjp(ops: Any, g: Any, xs: Any, out: Any) -> tuple[Any, ...]:
        return (on_grad(g, ops is ARRAY_OPS),)

    prim = Primitive(name, ("input",), lambda s: s, lambda v: v, vjp=vjp, reverse_only=True,
                     semantics=f"identity carrying {name}'s backward hooks (not traceable)",
                     samples=lambda rng: [])
    return Tensor._result(x._value, prim, (x,), {})


def _as_tensor(g: Any, first_order: bool) -> Tensor:
    return _leaf(g) if first_order else g


def _check_grads(module: Any, what: str, new: Any, old: list[Any]) -> list[Any]:
    items = list(new) if isinstance(new, tuple | list) else [new]
    if len(items) != len(old):
        raise TorchLeanError(f"{type(module).__name__} backward hook: returned {len(items)} "
                             f"{what} for {len(old)}")
    for n, o in zip(items, old, strict=True):
        if o is not None and n is not None and tuple(n.shape) != tuple(o.shape):
            raise TorchLeanError(f"{type(module).__name__} backward hook: a replacement {what} "
                                 f"has shape {tuple(n.shape)}, expected {tuple(o.shape)}")
    return items


class _Backward:
    """The state of one hooked call's reverse pass: grad_output as it arrives, then
    grad_input."""

    def __init__(self, module: Any, inputs: list[Tensor]) -> None:
        self.module = module
        self.n_out = 0
        self.grad_output: list[Any] = []
        self.outputs_left = 0
        self.inputs = inputs
        self.grad_input: list[Any] = [None] * len(inputs)
        self.inputs_left = len(inputs)

    def output_grad(self, k: int, g: Any, first_order: bool) -> Any:
        self.grad_output[k] = _as_tensor(g, first_order)
        self.outputs_left -= 1
        if self.outputs_left == 0:
            for hook, _ in list(self.module.__dict__.get("_backward_pre_hooks", {}).values()):
                new = hook(self.module, tuple(self.grad_output))
                if new is not None:
                    self.grad_output = _check_grads(self.module, "grad_output", new,
                                                    self.grad_output)
            if not self.inputs:  # nothing upstream needs a gradient: torch calls the hooks now
                self._call_hooks(allow_replace=False)
            self.outputs_left = self.n_out  # ready for another reverse pass (retain_graph)
        new_g = self.grad_output[k]
        return new_g._value if first_order and isinstance(new_g, Tensor) else new_g

    def input_grad(self, k: int, g: Any, first_order: bool) -> Any:
        self.grad_input[k] = _as_tensor(g, first_order)
        self.inputs_left -= 1
        if self.inputs_left == 0:
            self._call_hooks(allow_replace=len(self.inputs) == 1)
            self.inputs_left = len(self.inputs)
        new_g = self.grad_input[k]
        return new_g._value if first_order and isinstance(new_g, Tensor) else new_g

    def _call_hooks(self, allow_replace: bool) -> None:
        for hook, _ in list(self.module.__dict__.get("_backward_hooks", {}).values()):
            grad_input = tuple(self.grad_input) if self.inputs else (None,)
            new = hook(self.module, grad_input, tuple(self.grad_output))
            if new is None:
                continue
            if not allow_replace:
                raise UnsupportedArgumentError(
                    f"{type(self.module).__name__} backward hook: replacing grad_input is "
                    "supported for modules with one input that requires a gradient (this one "
                    f"has {len(self.inputs)})")
            self.grad_input = _check_grads(self.module, "grad_input", new, self.grad_input)


def _relay(receive: Callable[[int, Any, bool], Any], k: int) -> Callable[[Any, bool], Any]:
    """The reverse step of identity ``k``: hands its cotangent to ``receive``."""
    def on_grad(g: Any, first_order: bool) -> Any:
        return receive(k, g, first_order)
    return on_grad


def call_with_hooks(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``module.forward(*args, **kwargs)`` with its hooks, in torch's order."""
    d = module.__dict__
    for hook, flags in list(d.get("_forward_pre_hooks", {}).values()):
        if flags.get("with_kwargs"):
            new = hook(module, args, kwargs)
            if new is not None:
                if not (isinstance(new, tuple) and len(new) == 2):
                    raise TorchLeanError(f"{type(module).__name__} forward pre-hook "
                                         "(with_kwargs=True): must return None or a pair "
                                         f"(args, kwargs), found {type(new).__name__}")
                args, kwargs = new
        else:
            new = hook(module, args)
            if new is not None:
                args = new if isinstance(new, tuple) else (new,)
    backward = bool(d.get("_backward_hooks") or d.get("_backward_pre_hooks")) \
        and is_grad_enabled()
    state = None
    if backward:
        wanting = [t for t in _tensors((args, kwargs)) if t.requires_grad]
        state = _Backward(module, wanting)
        name = type(module).__name__
        wrapped = {id(t): _identity(t, name, _relay(state.input_grad, k))
                   for k, t in enumerate(wanting)}
        args, kwargs = _replace(args, wrapped), _replace(kwargs, wrapped)
    try:
        output = module.forward(*args, **kwargs)
    except BaseException:
        for hook, flags in list(d.get("_forward_hooks", {}).values()):
            if flags.get("always_call"):
                hook(module, args, kwargs, None) if flags.get("with_kwargs") else \
                    hook(module, args, None)
        raise
    for hook, flags in list(d.get("_forward_hooks", {}).values()):
        new = (hook(module, args, kwargs, output) if flags.get("with_kwargs")
               else hook(module, args, output))
        if new is not None:
            output = new
    if state is not None:
        outs = [t for t in _tensors(output) if t.requires_grad]
        state.n_out = state.outputs_left = len(outs)
        state.grad_output = [None] * len(outs)
        name = type(module).__name__
        wrapped_out = {id(t): _identity(t, name, _relay(state.output_grad, k))
                       for k, t in enumerate(outs)}
        output = _replace(output, wrapped_out)
    return output

