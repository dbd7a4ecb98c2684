"""``nn.utils.parametrize``: a module's tensor computed from stored originals, as torch's.

``register_parametrization(module, "weight", p)`` moves ``module.weight`` into
``module.parametrizations.weight.original`` (or ``original0``, ``original1``, ... when ``p``'s
``right_inverse`` returns several tensors) and swaps the module's class for a subclass whose
``weight`` property is ``p(original)``, so the layer's own ``forward`` reads the parametrized
tensor and gradients reach the originals. State-dict keys, class names
(``ParametrizedLinear``) and ``cached()`` are torch's. The computed tensor is a ``tl.Tensor``:
parametrized modules run on tensors (the torch door), not on session refs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...core.errors import TorchLeanError
from ...engine.params import Param
from ...engine.tensor import Tensor, no_grad
from ..containers import ModuleDict, ModuleList
from ..modules import Module

__all__ = ["ParametrizationList", "cached", "is_parametrized", "register_parametrization",
           "remove_parametrizations", "type_before_parametrizations"]

_cache_enabled = 0
_cache: dict[tuple[int, str], Any] = {}


@contextmanager
def cached() -> Iterator[None]:
    """Inside the block each parametrized tensor is computed once per module (torch's)."""
    global _cache_enabled
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache.clear()


def _write(param: Param, value: Any) -> None:
    """Overwrite ``param``'s values in place (its identity, and so optimizer state, kept)."""
    if tuple(value.shape) != tuple(param.shape):
        raise TorchLeanError(f"parametrize: cannot write a value of shape {tuple(value.shape)} "
                             f"into an original of shape {tuple(param.shape)}")
    with no_grad():
        param.copy_(value.detach() if isinstance(value, Tensor) else value)


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor (``"0"``, ``"1"``, ...) and its ``original``(s)."""

    def __init__(self, modules: list[Module], original: Param, unsafe: bool = False) -> None:
        super().__init__(modules)
        self.unsafe = unsafe
        first = modules[0]
        with no_grad():
            new = first.right_inverse(original) if hasattr(first, "right_inverse") else original
        if isinstance(new, Tensor):
            self.is_tensor, self.ntensors = True, 1
            if new is not original:
                _write(original, new)
            self.original = original
        else:
            if not isinstance(new, tuple | list):
                raise TorchLeanError(f"register_parametrization: right_inverse must return a "
                                     f"tensor or a sequence of tensors, found "
                                     f"{type(new).__name__}")
            self.is_tensor, self.ntensors = False, len(new)
            for i, t in enumerate(new):
                setattr(self, f"original{i}", Param(t.detach(), f"original{i}",
                                                    requires_grad=original.requires_grad))

    def right_inverse(self, value: Any) -> None:
        """Write ``value`` back through the parametrizations into the originals."""
        with no_grad():
            for module in reversed(list(self)):
                if not hasattr(module, "right_inverse"):
                    raise TorchLeanError(f"parametrize: {type(module).__name__} has no "
                                         "right_inverse, so the tensor cannot be assigned")
                value = module.right_inverse(value)
            if self.is_tensor:
                _write(self.original, value)
            else:
                for i, t in enumerate(value):
                    _write(getattr(self, f"original{i}"), t)

    def forward(self) -> Any:
        modules = list(self)
        if self.is_tensor:
            x = modules[0](self.original)
        else:
            x = modules[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for module in modules[1:]:
            x = module(x)
        return x


def _property(name: str) -> property:
    def get(self: Module) -> Any:
        plist = self.parametrizations[name]
        if _cache_enabled:
            key = (id(self), name)
            if key not in _cache:
                _cache[key] = plist()
            return _cache[key]
        return plist()

    def put(self: Module, value: Any) -> None:
        self.parametrizations[name].right_inverse(value)

    return property(get, put)


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    plist = module.__dict__.get("_modules", {}).get("parametrizations")
    if not isinstance(plist, ModuleDict):
        return False
    return len(plist) > 0 if tensor_name is None else tensor_name in plist


def type_before_parametrizations(module: Module) -> type:
    return type(module).__bases__[0] if is_parametrized(module) else type(module)


def register_parametrization(module: Module, tensor_name: str, parametrization: Module, *,
                             unsafe: bool = False) -> Module:
    """Make ``module.<tensor_name>`` be ``parametrization(original)``; returns ``module``."""
    if not isinstance(parametrization, Module):
        raise TorchLeanError(f"register_parametrization: the parametrization must be an "
                             f"nn.Module, found {type(parametrization).__name__}")
    if is_parametrized(module, tensor_name):
        if not unsafe:
            with no_grad():
                y = getattr(module, tensor_name)
                x = parametrization(y)
            if tuple(x.shape) != tuple(y.shape) or x.dtype != y.dtype:
                raise TorchLeanError(f"register_parametrization: the new parametrization "
                                     f"changes {tensor_name!r} from {tuple(y.shape)} "
                                     f"{y.dtype} to {tuple(x.shape)} {x.dtype}; pass "
                                     "unsafe=True to allow it")
        module.parametrizations[tensor_name].append(parametrization)
        _cache.clear()
        return module
    original = module._parameters.get(tensor_name)
    if original is None:
        raise TorchLeanError(f"register_parametrization: {type(module).__name__} has no "
                             f"parameter {tensor_name!r} (found "
                             f"{sorted(module._parameters)})")
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    del module._parameters[tensor_name]
    if not is_parametrized(module):
        cls = type(module)
        module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), {})
        module.parametrizations = ModuleDict()
    setattr(type(module), tensor_name, _property(tensor_name))
    module.parametrizations[tensor_name] = plist
    return module


def remove_parametrizations(module: Module, tensor_name: str,
                            leave_parametrized: bool = True) -> Module:
    """Undo ``register_parametrization`` for ``tensor_name``: the parameter comes back with
    the parametrized value (``leave_parametrized``) or the original one."""
    if not is_parametrized(module, tensor_name):
        raise TorchLeanError(f"remove_parametrizations: {type(module).__name__} does not have "
                             f"a parametrization on {tensor_name!r}")
    plist = module.parametrizations[tensor_name]
    if plist.is_tensor:
        original = plist.original
        if leave_parametrized:
            with no_grad():
                value = getattr(module, tensor_name)
            _write(original, value)
    else:
        if not leave_parametrized:
            raise TorchLeanError("remove_parametrizations: cannot leave the tensor "
                                 "unparametrized when the parametrization has several "
                                 "originals (leave_parametrized=False)")
        with no_grad():
            value = getattr(module, tensor_name)
        original = Param(value.detach(), tensor_name,
                         requires_grad=plist.original0.requires_grad)
    delattr(type(module), tensor_name)
    del module.parametrizations[tensor_name]
    _cache.clear()
    if not is_parametrized(module):
        del module.parametrizations
        module.__class__ = type(module).__bases__[0]
    setattr(module, tensor_name, original)
    return module
