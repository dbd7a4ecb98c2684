"""``tl.nn`` modules: PyTorch-style layers with parameters, buffers and train/eval mode.

A ``Module`` owns ``Param``s and sub-modules (registered by attribute assignment, in order) and
array buffers (such as BatchNorm's running statistics). Its ``forward`` is written once with ``F``
and runs wherever its input ref lives: a layer asks the input's owner for its parameters with
``x.owner.use(param)``, so the same model runs eagerly in a ``Session`` and traced by
``tl.compile`` (where the parameters become graph inputs). Plain arrays work too: then the layer
reads the parameters' current values and computes the output directly (no autodiff).

Parameter and buffer names, shapes and layouts follow ``torch.nn`` (``"0.weight"``,
``"bn.running_mean"``, conv-transpose kernels ``(in, out, kH, kW)``, attention's
``in_proj_weight``), so ``load_state_dict`` accepts a converted PyTorch state dict.

Initialisation follows PyTorch's defaults and draws from a counter-based generator (the
``rand_uniform`` kernel: SplitMix64 of ``(seed, counter)``): ``manual_seed(seed)`` resets it, and
every parameter draw takes the next counter, so a model's initial weights depend only on the seed
and the order in which its layers are built. Draws are made in float64 and rounded once to the
layer's dtype. The default generator is per thread (models built in several threads at once get
the serial weights); layers and init functions also take ``generator=tl.Generator(seed)``.

Intended differences from torch.nn: ``Embedding`` takes
class indices as a float ref (what ``Session.input`` makes of an integer array);
``MultiheadAttention`` called ``attn(x, mask=...)`` (the verifiable bias-free self-attention
form, ``causal=...``) takes ``(n, d)`` or batch-first ``(B, n, d)`` input, with boolean masks
where ``True`` means *allowed*; called torch's way ``attn(q, k, v, ...)`` it is torch's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from ..core.backend import as_dtype, check_device, namespace_for, namespace_of, to_device, to_host
from ..core.errors import (
    CheckpointError,
    DeviceError,
    IndexRangeError,
    ShapeError,
    TorchLeanError,
    TraceError,
    UnsupportedArgumentError,
    checked_keywords,
)
from ..core.rng import Generator, check_generator, init_generator
from ..engine import ops_interface as F
from ..engine.ops_interface import Ref
from ..engine.params import Param
from ..engine.tensor import CompiledModule, Tensor, no_grad, tensor
from . import functional, hooks
from .attention import attention_forward
from .functional import gelu

__all__ = [
    "AvgPool2d", "BatchNorm2d", "Conv2d", "ConvTranspose2d", "Dropout", "Embedding", "Flatten",
    "GELU", "LayerNorm", "Linear", "MaxPool2d", "Module", "MultiheadAttention", "ReLU",
    "Sequential", "SiLU", "Sigmoid", "Tanh", "initial_seed", "manual_seed",
]


# ---------------------------------------------------------------------------------------------
# Seeded initialisation


# The default init generator is ``rng.init_generator`` (thread-local). Layers and init functions
# also take an explicit ``generator``.
_GENERATOR = init_generator


def manual_seed(seed: int) -> None:
    """Restart this thread's parameter initialisation from ``seed`` (and counter 0)."""
    _GENERATOR.manual_seed(seed)


def initial_seed() -> int:
    """The seed given to this thread's last ``manual_seed`` (0 before any)."""
    return _GENERATOR.seed


def _generator(op: str, generator: Any) -> Generator:
    """``generator`` checked (a ``tl.Generator``), or this thread's init generator for None."""
    return check_generator(op, generator, _GENERATOR)


def uniform_init(shape: tuple[int, ...], bound: float, dtype: Any,
                 generator: Generator | None = None) -> np.ndarray:
    """U(-bound, bound) from ``generator`` (default: the thread's init generator)."""
    u = _generator("uniform_init", generator).uniform(shape)
    return ((2.0 * u - 1.0) * bound).astype(as_dtype(dtype))


def normal_init(shape: tuple[int, ...], dtype: Any, generator: Generator | None = None
                ) -> np.ndarray:
    """N(0, 1) from two uniform draws of ``generator`` (Box-Muller; 1 - u lies in (0, 1], so the
    log is finite)."""
    gen = _generator("normal_init", generator)
    u1, u2 = gen.uniform(shape), gen.uniform(shape)
    z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * math.pi * u2)
    return z.astype(as_dtype(dtype))


def kaiming_uniform_bound(fan_in: int) -> float:
    """PyTorch's default Linear/Conv bound: kaiming_uniform(a=sqrt(5)) gives 1/sqrt(fan_in)."""
    return 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0


# ---------------------------------------------------------------------------------------------
# Module


class LoadResult(NamedTuple):
    """What ``load_state_dict(strict=False)`` skipped (empty lists under ``strict=True``)."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class _Parameters(list):  # type: ignore[type-arg]
    """``Module.parameters()``: a list (len, indexing, as the seed's) that ``next()`` also
    walks, as torch's generator."""

    _cursor = 0

    def __next__(self) -> Any:
        k = self._cursor
        if k >= len(self):
            raise StopIteration
        self._cursor = k + 1
        return self[k]


def _use(x: Any, param: Param) -> Any:
    """The parameter where ``x`` lives: a ref from x's owner, or the value for plain arrays
    (which must live where the parameter does: nothing is moved implicitly)."""
    if isinstance(x, Ref):
        return x.owner.use(param)
    data = param.array
    if namespace_of(x) is not namespace_of(data):
        raise DeviceError(f"parameter {param.name or '(unnamed)'} lives on {param.device} but "
                          "the input is on another device; move the module with .to(device) "
                          "or the input with torchlean.backend.to_device")
    return data


def _const(x: Any, array: Any) -> Any:
    """A constant next to ``x`` (in x's dtype): a const ref of x's owner, or an array where x
    lives (uploaded explicitly when x is a device array)."""
    if isinstance(x, Ref):
        return x.owner.const(np.asarray(array, dtype=x.dtype))
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        return to_device(np.asarray(array, dtype=x.dtype), namespace_of(x))
    return np.asarray(array, dtype=np.asarray(x).dtype)


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if hasattr(x, "shape") else tuple(np.shape(x))


def _pair(name: str, value: Any, minimum: int = 0) -> tuple[int, int]:
    """An int or a pair of ints >= ``minimum`` as a pair (kernel sizes, strides, paddings)."""
    pair = (value, value) if isinstance(value, int | np.integer) else (
        tuple(value) if isinstance(value, tuple | list) else ())
    if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, int | np.integer)
                             for v in pair):
        raise TorchLeanError(f"{name}: expected an int or a pair of ints, found {value!r}")
    if min(pair) < minimum:
        raise TorchLeanError(f"{name}: must be >= {minimum}, found {value!r}")
    return int(pair[0]), int(pair[1])


def _positive(layer: str, **sizes: int) -> None:
    for name, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise TorchLeanError(f"{layer}: {name} must be a positive int, found {v!r}")


class Module:
    """Base class of layers and models: parameters, buffers, sub-modules and train/eval mode.

    Assigning a ``Param`` or a ``Module`` to an attribute registers it (in assignment order);
    ``register_buffer`` adds a non-trainable array that ``state_dict`` saves. Subclasses
    implement ``forward``; calling the module calls it.
    """

    training: bool

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # torchlean's layers refuse a torch keyword they do not take by name (a user's own
        # subclass keeps Python's TypeError for its own signature)
        super().__init_subclass__(**kwargs)
        if cls.__module__.startswith("torchlean.") and "__init__" in cls.__dict__:
            cls.__init__ = checked_keywords(cls.__dict__["__init__"])  # type: ignore[method-assign]

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    # --- registration ------------------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        registries = self.__dict__.get("_parameters")
        if registries is None:
            raise TorchLeanError(f"{type(self).__name__}: call Module.__init__() before "
                                 "assigning attributes")
        if isinstance(value, Param):
            self._forget(name, keep=self._parameters)
            if value.name is None:
                value.name = name
            self._parameters[name] = value  # (an existing name keeps its place, as in torch)
        elif isinstance(value, Module):
            self._forget(name, keep=self._modules)
            self._modules[name] = value
        elif name in self._buffers:
            self._buffers[name] = self._as_buffer(name, value)
        else:
            self._forget(name)
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: the registered parameters, buffers, modules.
        for registry in ("_parameters", "_buffers", "_modules"):
            table = self.__dict__.get(registry)
            if table is not None and name in table:
                return table[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        if not self._forget(name):
            object.__delattr__(self, name)

    def _forget(self, name: str, keep: dict[str, Any] | None = None) -> bool:
        """Remove ``name`` from every registry but ``keep`` (where the caller replaces it in
        place, so that it keeps its position) and from the instance's attributes."""
        found = False
        for table in (self._parameters, self._buffers, self._modules):
            if name in table and table is not keep:
                del table[name]
                found = True
        if name in self.__dict__ and name not in ("_parameters", "_buffers", "_modules"):
            object.__delattr__(self, name)
        return found

    @staticmethod
    def _as_buffer(name: str, value: Any) -> Tensor | None:
        """A buffer is a tensor without history, as torch's: a tensor is kept as it is (the
        module and the caller share it, as in torch), an array is copied into one."""
        if value is None:
            return None
        if isinstance(value, Param | Module) or (isinstance(value, Ref) and
                                                 not isinstance(value, Tensor)):
            raise TorchLeanError(f"register_buffer: {name!r} must be a tensor or an array, "
                                 f"found {type(value).__name__}")
        if isinstance(value, Tensor):
            return value if not value.requires_grad else value.detach()
        try:
            array = np.array(to_host(value), copy=True)
        except Exception as exc:  # noqa: BLE001  (any unconvertible value is named)
            raise TorchLeanError(f"register_buffer: {name!r} must be a tensor or an array, "
                                 f"found {type(value).__name__}") from exc
        if array.dtype.kind not in "fiub":
            raise TorchLeanError(f"register_buffer: {name!r} must be numeric, found dtype "
                                 f"{array.dtype}")
        return tensor(array)

    def register_buffer(self, name: str, value: Any, persistent: bool = True) -> None:
        """A named tensor without gradient (e.g. running statistics) that moves with the
        module; ``state_dict`` saves it unless ``persistent=False``."""
        if not isinstance(name, str) or not name or "." in name:
            raise TorchLeanError(f"register_buffer: the name must be a non-empty string "
                                 f"without '.', found {name!r}")
        self._forget(name)
        self._buffers[name] = self._as_buffer(name, value)
        if not persistent:
            self._non_persistent.add(name)
        else:
            self._non_persistent.discard(name)

    def _check_new_name(self, what: str, name: Any, table: dict[str, Any]) -> None:
        """torch's checks of a name given to ``register_parameter`` / ``add_module``."""
        if not isinstance(name, str) or not name or "." in name:
            raise TorchLeanError(f"{type(self).__name__}.{what}: the name must be a non-empty "
                                 f"string without '.', found {name!r}")
        others = [t for t in (self._parameters, self._buffers, self._modules) if t is not table]
        # (a slot registered as None lives as a None attribute: it may be filled later)
        taken = name in self.__dict__ and self.__dict__[name] is not None
        if taken or hasattr(type(self), name) or any(name in t for t in others):
            raise TorchLeanError(f"{type(self).__name__}.{what}: attribute {name!r} already "
                                 "exists")

    def register_parameter(self, name: str, param: Param | None) -> None:
        """Add a parameter (``None``: a slot that reads as ``None`` and is left out of
        ``parameters()`` and ``state_dict``, as torch's ``bias`` of a layer without one)."""
        self._check_new_name("register_parameter", name, self._parameters)
        if param is None:
            self._parameters.pop(name, None)
            object.__setattr__(self, name, None)
            return
        if not isinstance(param, Param):
            raise TorchLeanError(f"{type(self).__name__}.register_parameter: cannot assign a "
                                 f"{type(param).__name__} as parameter {name!r} (an "
                                 "nn.Parameter or None expected)")
        setattr(self, name, param)

    def add_module(self, name: str, module: Module | None) -> None:
        """Add a sub-module under ``name`` (``None``: a slot that reads as ``None``), as an
        attribute assignment does."""
        self._check_new_name("add_module", name, self._modules)
        if module is None:
            self._modules.pop(name, None)
            object.__setattr__(self, name, None)
            return
        if not isinstance(module, Module):
            raise TorchLeanError(f"{type(self).__name__}.add_module: {type(module).__name__} "
                                 "is not a Module subclass")
        setattr(self, name, module)

    register_module = add_module

    # --- traversal ---------------------------------------------------------------------------

    def named_children(self) -> Iterator[tuple[str, Module]]:
        yield from self._modules.items()

    def children(self) -> Iterator[Module]:
        yield from self._modules.values()

    def named_modules(self, memo: set[Any] | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """This module and every descendant, depth first in registration order. As torch's,
        a module registered under several names appears once (``memo``: the modules already
        given, by identity), or under every name with ``remove_duplicate=False`` (what
        ``state_dict`` lists)."""
        stack: list[tuple[str, Module, tuple[int, ...]]] = [(prefix, self, ())]
        seen: set[int] = set() if memo is None else {id(m) for m in memo}
        while stack:
            name, module, path = stack.pop()
            if remove_duplicate:
                if id(module) in seen:
                    continue
                seen.add(id(module))
            elif id(module) in path:  # (torch recurses forever here)
                raise TorchLeanError(f"{type(self).__name__}.named_modules: module {name!r} "
                                     "contains itself (a cycle of sub-modules)")
            if memo is not None:
                memo.add(module)
            yield name, module
            inner = (*path, id(module))
            children = [(f"{name}.{k}" if name else k, m, inner)
                        for k, m in module._modules.items() if m is not None]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def apply(self, fn: Any) -> Module:
        """Call ``fn`` on every sub-module (children first) and then on this module, as
        ``torch.nn.Module.apply`` (the usual way to run a custom initialisation)."""
        if not callable(fn):
            raise TorchLeanError(f"{type(self).__name__}.apply: expected a function, found "
                                 f"{type(fn).__name__}")
        for child in list(self._modules.values()):
            child.apply(fn)
        fn(self)
        return self

    def _named_members(self, table: str, prefix: str, recurse: bool,
                       remove_duplicate: bool) -> Iterator[tuple[str, Any]]:
        """torch's ``_named_members``: each module's ``table`` entries under its dotted name;
        with ``remove_duplicate`` a module or entry registered under several names once."""
        seen: set[int] = set()
        modules = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
                   if recurse else iter([(prefix, self)]))
        for path, module in modules:
            for name, v in getattr(module, table).items():
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                seen.add(id(v))
                yield (f"{path}.{name}" if path else name), v

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Param]]:
        """``(dotted name, Param)`` pairs as torch names them; a shared Param appears once
        (under every name with ``remove_duplicate=False``)."""
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> list[Param]:
        """The parameters, as a list that is also an iterator (``next(model.parameters())``
        works, as on torch's generator)."""
        return _Parameters(p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # --- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Tensor]:
        """Every parameter and persistent buffer as a tensor without history sharing its
        storage (``detach()``, as torch's: an in-place change of an entry changes the module,
        and the entries follow later optimiser steps; copy them to keep a snapshot), keyed by
        torch-style dotted names. A module or parameter registered under several names is
        listed under each, as in torch."""
        state: dict[str, Tensor] = {}
        for prefix, module in self.named_modules(remove_duplicate=False):
            for name, p in module._parameters.items():
                state[f"{prefix}.{name}" if prefix else name] = p.detach()
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    state[f"{prefix}.{name}" if prefix else name] = (
                        b.detach() if isinstance(b, Tensor) else tensor(np.array(b, copy=True)))
        return state

    def _state_slots(self) -> dict[str, tuple[Module, str, bool]]:
        """Every state key -> (owning module, local name, is_param)."""
        slots: dict[str, tuple[Module, str, bool]] = {}
        for prefix, module in self.named_modules(remove_duplicate=False):
            for name in module._parameters:
                slots[f"{prefix}.{name}" if prefix else name] = (module, name, True)
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    slots[f"{prefix}.{name}" if prefix else name] = (module, name, False)
        return slots

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> LoadResult:
        """Copy values from ``state`` into the parameters and buffers.

        Everything is checked first; every missing key, unexpected key and mis-shaped or
        non-numeric value is reported at once in a ``CheckpointError``, and nothing changes
        unless all fit. With ``strict=False`` missing and unexpected keys are allowed (and
        returned); shapes must still match.
        """
        if not isinstance(state, Mapping):
            raise CheckpointError(f"load_state_dict: expected a mapping of names to arrays (a "
                                  f"state dict), found {type(state).__name__}")
        slots = self._state_slots()
        missing = [k for k in slots if k not in state]
        unexpected = [k for k in state if k not in slots]
        problems: list[str] = []
        if strict:
            problems += [f"missing key {k!r}" for k in missing]
            problems += [f"unexpected key {k!r}" for k in unexpected]
        arrays: dict[str, np.ndarray] = {}
        for key, (module, name, is_param) in slots.items():
            if key not in state:
                continue
            try:
                arr = np.asarray(to_host(state[key]))
            except Exception as exc:  # noqa: BLE001  (any unconvertible value is reported)
                problems.append(f"{key!r}: not an array ({type(exc).__name__}: {exc})")
                continue
            target = module._parameters[name].value if is_param else module._buffers[name]
            if arr.dtype.kind not in "fiub":
                problems.append(f"{key!r}: dtype {arr.dtype} is not numeric")
            elif arr.shape != target.shape:
                problems.append(f"{key!r}: shape {arr.shape}, expected {target.shape}")
            else:
                arrays[key] = arr
        if problems:
            raise CheckpointError(f"{type(self).__name__}.load_state_dict: "
                                  f"{len(problems)} problem(s): " + "; ".join(problems))
        for key, arr in arrays.items():
            module, name, is_param = slots[key]
            if is_param:
                module._parameters[name].assign(arr)
            else:  # in place, as torch: whoever holds the buffer sees the loaded values
                buf = module._buffers[name]
                with no_grad():
                    buf.copy_(tensor(arr.astype(buf.dtype, copy=True)))
        return LoadResult(missing if not strict else [], unexpected if not strict else [])

    # --- modes and gradients -----------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self) -> Module:
        return self.train(False)

    def to(self, device: Any = None, dtype: Any = None) -> Module:
        """Move every parameter to ``device`` ("cpu" or "cuda"), as ``torch.nn.Module.to``:
        one explicit transfer per parameter that lives elsewhere, none for those already there.
        Returns the module. Buffers (e.g. running statistics) stay host arrays; they enter a
        pass as constants. Optimisers built before the move take their state along at their
        next step."""
        if dtype is not None:
            self._cast(dtype)
        if device is None:
            return self
        if isinstance(device, np.dtype) or (isinstance(device, str) and device in (
                "float32", "float64")):
            return self._cast(device)  # .to(torch.float64)
        name = getattr(device, "type", device)  # a torch.device-like object has .type
        if not isinstance(name, str):
            raise DeviceError(f"{type(self).__name__}.to: expected a device name ('cpu' or "
                              f"'cuda'), found {device!r}")
        if name == "meta":
            # torch's data-less device, used for a template module whose values functional_call
            # replaces (model ensembling); torchlean has no data-less tensors, so the module
            # keeps its values, which a template never reads
            return self
        xp = namespace_for(check_device(name.split(":")[0]))
        for p in self.parameters():
            p.on(xp)
        return self

    def cuda(self) -> Module:
        """``to("cuda")``."""
        return self.to("cuda")

    def cpu(self) -> Module:
        """``to("cpu")``."""
        return self.to("cpu")

    def _cast(self, dtype: Any) -> Module:
        """Every float parameter (and its gradient) and float buffer converted to ``dtype`` in
        place, as torch's ``_apply``: the ``Param`` objects stay (an optimiser built before
        keeps updating them), each on its device."""
        target = np.dtype(as_dtype(dtype))
        for module in self.modules():
            for p in module._parameters.values():
                if p is None or p.dtype == target:
                    continue
                p.data = tensor(p.array.astype(target))
                if p.grad is not None:
                    p.grad = tensor(p.grad.array.astype(target))
            for name, b in module._buffers.items():
                if b is not None and b.dtype.kind == "f":
                    module._buffers[name] = tensor(b.numpy().astype(target))
        return self

    def double(self) -> Module:
        """Parameters and float buffers in float64 (``torch.nn.Module.double``)."""
        return self._cast(np.float64)

    def float(self) -> Module:
        """Parameters and float buffers in float32 (``torch.nn.Module.float``)."""
        return self._cast(np.float32)

    @property
    def device(self) -> str:
        """Where the parameters live ("cpu" without parameters); a module split across devices
        raises ``DeviceError``."""
        where = {p.device for p in self.parameters()}
        if len(where) > 1:
            raise DeviceError(f"{type(self).__name__}: parameters live on {sorted(where)}; "
                              "move the module with .to(device)")
        return where.pop() if where else "cpu"

    def compile(self) -> Any:
        """This module run as compiled graphs (one per input shape, dtype and mode); on tensors
        ``loss.backward()`` goes through the graph's backprop (``tensor.CompiledModule``)."""


        return CompiledModule(self)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient (torch's default), or zero it in place."""
        for p in self.parameters():
            p.zero_grad(set_to_none)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (False) or unfreeze every parameter."""
        for p in self.parameters():
            p.requires_grad = bool(requires_grad)
        return self

    # --- calling -----------------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.__dict__.get("_hooked"):
            if hooks.has_hooks(self):
                return hooks.call_with_hooks(self, args, kwargs)
            object.__setattr__(self, "_hooked", False)  # every hook was removed
        return self.forward(*args, **kwargs)

    # --- hooks (nn/hooks.py) -------------------------------------------------------------------

    def _hook(self, kind: str, hook: Any, prepend: bool, **flags: bool) -> hooks.RemovableHandle:
        handle = hooks.add_hook(self, kind, hook, prepend, **flags)
        object.__setattr__(self, "_hooked", True)
        return handle

    def register_forward_pre_hook(self, hook: Any, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> hooks.RemovableHandle:
        """``hook(module, args)`` (``(module, args, kwargs)`` with ``with_kwargs``) before each
        forward; a returned value replaces the arguments."""
        return self._hook("_forward_pre_hooks", hook, prepend, with_kwargs=with_kwargs)

    def register_forward_hook(self, hook: Any, *, prepend: bool = False,
                              with_kwargs: bool = False, always_call: bool = False
                              ) -> hooks.RemovableHandle:
        """``hook(module, args, output)`` (``(module, args, kwargs, output)`` with
        ``with_kwargs``) after each forward; a returned value replaces the output."""
        return self._hook("_forward_hooks", hook, prepend, with_kwargs=with_kwargs,
                          always_call=always_call)

    def register_full_backward_pre_hook(self, hook: Any, prepend: bool = False
                                        ) -> hooks.RemovableHandle:
        """``hook(module, grad_output)`` when the outputs' gradients are known; a returned
        tuple replaces them."""
        return self._hook("_backward_pre_hooks", hook, prepend)

    def register_full_backward_hook(self, hook: Any, prepend: bool = False
                                    ) -> hooks.RemovableHandle:
        """``hook(module, grad_input, grad_output)`` when the inputs' gradients are known; a
        returned tuple replaces ``grad_input`` (see nn/hooks.py for the one limit)."""
        return self._hook("_backward_hooks", hook, prepend)

    def register_backward_hook(self, hook: Any) -> hooks.RemovableHandle:
        raise UnsupportedArgumentError(
            f"{type(self).__name__}.register_backward_hook: torch's deprecated form (gradients of "
            "the module's last op only) is not supported; use register_full_backward_hook")

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        # torch's layout: a lone extra_repr on the head line, else one entry per line
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): " + repr(m).replace("\n", "\n  ")
                       for name, m in self._modules.items()]
        lines = extra_lines + child_lines
        text = f"{type(self).__name__}("
        if len(extra_lines) == 1 and not child_lines:
            text += extra_lines[0]
        elif lines:
            text += "\n  " + "\n  ".join(lines) + "\n"
        return text + ")"


class Sequential(Module):
    """Modules applied in order; registered as ``"0"``, ``"1"``, ... (torch's names)."""

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> Sequential:
        if not isinstance(module, Module):
            raise TorchLeanError(f"Sequential: expected a Module, found {type(module).__name__}")
        setattr(self, str(len(self._modules)), module)
        return self

    def __len__(self) -> int:
        return len(self._modules)

    def __getitem__(self, i: int | slice) -> Any:
        modules = list(self._modules.values())
        if isinstance(i, bool) or not isinstance(i, int | np.integer | slice):
            raise TorchLeanError(f"Sequential: index with an int, found {i!r}")
        if isinstance(i, slice):  # a Sequential of the same modules under their names, as torch
            part = Sequential()
            for name, module in list(self._modules.items())[i]:
                part.add_module(name, module)
            return part
        if not -len(modules) <= i < len(modules):
            raise IndexRangeError(f"Sequential: index {i} out of range for {len(modules)} "
                                  "modules")
        return modules[i]

    def __setitem__(self, i: int, module: Module) -> None:
        """Replace the module at position ``i`` (it keeps its name, as in torch)."""
        if not isinstance(module, Module):
            raise TorchLeanError(f"Sequential: expected a Module, found {type(module).__name__}")
        names = list(self._modules)
        if isinstance(i, bool) or not isinstance(i, int | np.integer):
            raise TorchLeanError(f"Sequential: index with an int, found {i!r}")
        if not -len(names) <= i < len(names):
            raise IndexRangeError(f"Sequential: index {i} out of range for {len(names)} "
                                  "modules")
        self._modules[names[int(i)]] = module

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x


# ---------------------------------------------------------------------------------------------
# Layers with parameters


class Linear(Module):
    """``y = x @ weight.T + bias`` over ``x (..., in_features)``; weight ``(out, in)``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype: Any = "float32", generator: Any = None) -> None:
        super().__init__()
        _positive("Linear", in_features=in_features, out_features=out_features)
        self.in_features, self.out_features = int(in_features), int(out_features)
        bound = kaiming_uniform_bound(in_features)
        self.weight = Param(uniform_init((out_features, in_features), bound, dtype, generator),
                            "weight")
        self.bias = (Param(uniform_init((out_features,), bound, dtype, generator), "bias")
                     if bias else None)

    def forward(self, x: Any) -> Any:
        weight, bias = self.weight, self.bias  # (each a ``Module.__getattr__`` call: once)
        b = _use(x, bias) if bias is not None else _const(x, np.zeros(self.out_features))
        return F.linear(_use(x, weight), b, x)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


def _conv_repr(m: Any) -> str:
    """torch's ``_ConvNd.extra_repr``: padding, output padding and bias only when not default."""
    text = (f"{m.in_channels}, {m.out_channels}, kernel_size={m.kernel_size}, "
            f"stride={m.stride}")
    if m.padding != (0, 0):
        text += f", padding={m.padding}"
    if getattr(m, "output_padding", (0, 0)) != (0, 0):
        text += f", output_padding={m.output_padding}"
    if getattr(m, "dilation", (1, 1)) != (1, 1):
        text += f", dilation={m.dilation}"
    if getattr(m, "groups", 1) != 1:
        text += f", groups={m.groups}"
    if m.bias is None:
        text += ", bias=False"
    return text


class Conv2d(Module):
    """2-D convolution over ``(C, H, W)`` or ``(N, C, H, W)``; weight ``(out, in, kH, kW)``."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", dtype: Any = "float32",
                 generator: Any = None) -> None:
        super().__init__()
        _positive("Conv2d", in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise TorchLeanError(f"Conv2d: in_channels ({in_channels}) and out_channels "
                                 f"({out_channels}) must be divisible by groups ({groups})")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise TorchLeanError(f"Conv2d: padding_mode must be 'zeros', 'reflect', 'replicate' "
                                 f"or 'circular', found {padding_mode!r}")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = _pair("Conv2d kernel_size", kernel_size, 1)
        self.stride = _pair("Conv2d stride", stride, 1)
        self.padding: Any = (padding if padding in ("same", "valid")
                             else _pair("Conv2d padding", padding))
        self.dilation = _pair("Conv2d dilation", dilation, 1)
        self.groups, self.padding_mode = int(groups), padding_mode
        kh, kw = self.kernel_size
        bound = kaiming_uniform_bound(in_channels // groups * kh * kw)
        self.weight = Param(uniform_init((out_channels, in_channels // groups, kh, kw), bound,
                                         dtype, generator), "weight")
        self.bias = (Param(uniform_init((out_channels,), bound, dtype, generator), "bias")
                     if bias else None)

    def forward(self, x: Any) -> Any:
        if (self.dilation != (1, 1) or self.groups != 1 or self.padding_mode != "zeros"
                or isinstance(self.padding, str)):
            # torch's other keywords: nn.functional's convolution (the primitive's form below
            # is what the verifier and the ONNX exporter read)
            weight = _use(x, self.weight)
            bias = None if self.bias is None else _use(x, self.bias)
            padding = self.padding
            if self.padding_mode != "zeros" and not isinstance(padding, str):
                ph, pw = padding
                x = functional.pad(x, (pw, pw, ph, ph), mode=self.padding_mode)
                padding = 0
            return functional.conv2d(x, weight, bias, self.stride, padding, self.dilation,
                                     self.groups)
        bias = (_use(x, self.bias) if self.bias is not None
                else _const(x, np.zeros(self.out_channels)))
        return F.conv2d(_use(x, self.weight), bias, x, stride=self.stride, padding=self.padding)

    def extra_repr(self) -> str:
        return _conv_repr(self)


class ConvTranspose2d(Module):
    """2-D transposed convolution; weight ``(in, out, kH, kW)`` as in torch.

    PyTorch computes the init fan-in of this weight from its second axis (``out * kH * kW``);
    so does this layer, to draw from the same distribution.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True,
                 dilation: Any = 1, padding_mode: str = "zeros", dtype: Any = "float32",
                 generator: Any = None) -> None:
        super().__init__()
        _positive("ConvTranspose2d", in_channels=in_channels, out_channels=out_channels,
                  groups=groups)
        if in_channels % groups or out_channels % groups:
            raise TorchLeanError(f"ConvTranspose2d: in_channels ({in_channels}) and out_channels "
                                 f"({out_channels}) must be divisible by groups ({groups})")
        if padding_mode != "zeros":
            # torch refuses the other modes for transposed convolutions as well
            raise TorchLeanError(f"ConvTranspose2d: only padding_mode='zeros' is supported, "
                                 f"found {padding_mode!r}")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = _pair("ConvTranspose2d kernel_size", kernel_size, 1)
        self.stride = _pair("ConvTranspose2d stride", stride, 1)
        self.padding = _pair("ConvTranspose2d padding", padding)
        self.output_padding = _pair("ConvTranspose2d output_padding", output_padding)
        self.dilation = _pair("ConvTranspose2d dilation", dilation, 1)
        self.groups, self.padding_mode = int(groups), padding_mode
        kh, kw = self.kernel_size
        per_group = out_channels // groups
        bound = kaiming_uniform_bound(per_group * kh * kw)
        self.weight = Param(
            uniform_init((in_channels, per_group, kh, kw), bound, dtype, generator), "weight")
        self.bias = (Param(uniform_init((out_channels,), bound, dtype, generator), "bias")
                     if bias else None)

    def forward(self, x: Any) -> Any:
        if self.dilation != (1, 1) or self.groups != 1:
            # nn.functional's form: the dilated kernel, one primitive per group
            bias = None if self.bias is None else _use(x, self.bias)
            return functional.conv_transpose2d(x, _use(x, self.weight), bias, self.stride,
                                               self.padding, self.output_padding, self.groups,
                                               self.dilation)
        bias = (_use(x, self.bias) if self.bias is not None
                else _const(x, np.zeros(self.out_channels)))
        return F.conv_transpose2d(_use(x, self.weight), bias, x, stride=self.stride,
                                  padding=self.padding, output_padding=self.output_padding)

    def extra_repr(self) -> str:
        return _conv_repr(self)


class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` axes, then ``* weight + bias``.

    One axis is the ``layer_norm`` primitive itself; several (``LayerNorm([C, H, W])``) go
    through ``nn.functional.layer_norm``, which flattens them into one for the primitive.
    ``bias=False`` keeps the scale only (torch >= 2.1), as does torch: ``bias`` is then None.
    """

    weight: Param | None
    bias: Param | None

    def __init__(self, normalized_shape: Any, eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True,
                 dtype: Any = "float32") -> None:
        super().__init__()
        shape = ((normalized_shape,) if isinstance(normalized_shape, int | np.integer)
                 else tuple(normalized_shape) if isinstance(normalized_shape, tuple | list)
                 else None)
        if not shape or any(isinstance(d, bool) or not isinstance(d, int | np.integer)
                            for d in shape):
            raise TorchLeanError(f"LayerNorm: normalized_shape must be an int or a non-empty "
                                 f"sequence of ints, found {normalized_shape!r}")
        for d in shape:
            _positive("LayerNorm", normalized_shape=d)
        self.normalized_shape = tuple(int(d) for d in shape)
        self.eps = float(eps)
        self.elementwise_affine, self._bias_given = bool(elementwise_affine), bool(bias)
        dt = as_dtype(dtype)
        weight, zero = np.ones(self.normalized_shape, dt), np.zeros(self.normalized_shape, dt)
        self.weight = Param(weight, "weight") if elementwise_affine else None
        self.bias = Param(zero, "bias") if elementwise_affine and bias else None
        self._fixed = (weight, zero)

    def forward(self, x: Any) -> Any:
        weight, bias = self.weight, self.bias  # (each a ``Module.__getattr__`` call: once)
        if len(self.normalized_shape) > 1:
            return functional.layer_norm(
                x, self.normalized_shape, None if weight is None else _use(x, weight),
                None if bias is None else _use(x, bias), self.eps)
        gamma = _const(x, self._fixed[0]) if weight is None else _use(x, weight)
        beta = _const(x, self._fixed[1]) if bias is None else _use(x, bias)
        return F.layer_norm(x, gamma, beta, eps=self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine="
                f"{self.elementwise_affine}, bias={self._bias_given}")


class BatchNorm2d(Module):
    """Batch normalisation over ``(N, C, H, W)`` (or one sample ``(C, H, W)``) per channel.

    Training mode normalises with the batch statistics (the ``batch_norm`` primitive: biased
    variance) and updates ``running_mean`` / ``running_var`` with ``momentum`` (the running
    variance uses the unbiased batch variance, as torch). That update needs the input's values,
    so it runs eagerly only. Eval mode normalises with the running statistics.
    """

    weight: Param | None
    bias: Param | None
    running_mean: Tensor
    running_var: Tensor
    num_batches_tracked: Tensor

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 dtype: Any = "float32") -> None:
        super().__init__()
        _positive("BatchNorm2d", num_features=num_features)
        if momentum is not None and (isinstance(momentum, bool)
                                     or not isinstance(momentum, int | float)):
            raise TorchLeanError(f"BatchNorm2d: momentum must be a number or None (the "
                                 f"cumulative moving average), found {momentum!r}")
        self.num_features = int(num_features)
        self.eps = float(eps)
        self.momentum = None if momentum is None else float(momentum)
        self.track_running_stats = bool(track_running_stats)
        dt = as_dtype(dtype)
        c = self.num_features
        if affine:
            self.weight = Param(np.ones(c, dt), "weight")
            self.bias = Param(np.zeros(c, dt), "bias")
        else:
            self.weight, self.bias = None, None
        if self.track_running_stats:
            self.register_buffer("running_mean", np.zeros(c, dt))
            self.register_buffer("running_var", np.ones(c, dt))
            self.register_buffer("num_batches_tracked", np.array(0, dtype=np.int64))

    def _affine(self, x: Any) -> tuple[Any, Any]:
        if self.weight is None or self.bias is None:
            return _const(x, np.ones(self.num_features)), _const(x, np.zeros(self.num_features))
        return _use(x, self.weight), _use(x, self.bias)

    def forward(self, x: Any) -> Any:
        shape = _shape(x)
        if len(shape) not in (3, 4) or shape[-3] != self.num_features:
            raise ShapeError(f"BatchNorm2d: expected (C, H, W) or (N, C, H, W) with C = "
                             f"{self.num_features}, found {shape}")
        if self.training or not self.track_running_stats:
            stats = self._batch_stats(x) if self.training and self.track_running_stats else None
            gamma, beta = self._affine(x)
            out = F.batch_norm(x, gamma, beta, eps=self.eps)
            if stats is not None:  # after the op was recorded: a failure changes nothing
                self._update_running(*stats)
            return out
        # Eval: (x - running_mean) / sqrt(running_var + eps) * weight + bias, per channel; the
        # statistics are constants, the affine parameters still receive gradients.
        per_channel = (self.num_features, 1, 1)
        inv_std = 1.0 / np.sqrt(self.running_var.numpy().astype(np.float64) + self.eps)
        centred = x - _const(x, self.running_mean.numpy().reshape(per_channel))
        normalised = centred * _const(x, inv_std.reshape(per_channel))
        gamma, beta = self._affine(x)
        return (normalised * F.reshape(gamma, shape=per_channel)
                + F.reshape(beta, shape=per_channel))

    def _batch_stats(self, x: Any) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(x, Ref):
            try:
                value = x.owner.value(x)
            except TraceError as exc:
                raise TraceError(
                    "BatchNorm2d: training mode updates the running statistics from the batch's "
                    "values, which a traced graph does not have; call model.eval() before "
                    "tracing, or train on the eager backend") from exc
        else:
            value = x
        value = np.asarray(to_host(value), dtype=np.float64)
        axes = (0, 2, 3) if value.ndim == 4 else (1, 2)
        if value.size // self.num_features < 2:
            raise ShapeError(f"BatchNorm2d: training needs more than one value per channel, "
                             f"found input shape {value.shape}")
        return value.mean(axis=axes), value.var(axis=axes, ddof=1)

    def _update_running(self, mean: np.ndarray, var: np.ndarray) -> None:
        dt = self.running_mean.dtype
        # momentum=None: torch's cumulative moving average, weight 1 / (batches seen, this one
        # included), so the running statistics are the plain mean of every batch's statistics
        m = (self.momentum if self.momentum is not None
             else 1.0 / (int(self.num_batches_tracked.numpy()) + 1))
        with no_grad():  # in place, as torch's: a caller holding the buffers sees the update
            self.running_mean.copy_(tensor(((1 - m) * self.running_mean.numpy() + m * mean)
                                           .astype(dt)))
            self.running_var.copy_(tensor(((1 - m) * self.running_var.numpy() + m * var)
                                          .astype(dt)))
            self.num_batches_tracked.add_(1)

    def extra_repr(self) -> str:
        affine = self.weight is not None
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={affine}, bias={affine}, "
                f"track_running_stats={self.track_running_stats}")


class NonDynamicallyQuantizableLinear(Linear):
    """torch's name for ``MultiheadAttention.out_proj`` (a ``Linear``), so the module prints
    as torch's does."""


class MultiheadAttention(Module):
    """Multi-head attention, called torch's way or torchlean's self-attention way.

    torch's way (``attn(query, key, value, key_padding_mask=..., attn_mask=...)`` returning
    ``(output, weights)``): torch's constructor ``(embed_dim, num_heads, dropout=0.0,
    bias=True, batch_first=False)``, parameters ``in_proj_weight (3 d, d)``, ``in_proj_bias``,
    ``out_proj.weight``/``out_proj.bias`` (torch's layout and init: a torch state dict loads),
    computed by ``nn.attention`` (boolean masks mark the *forbidden* pairs, as torch's).

    torchlean's way (``attn(x, mask=None)`` over ``(n, d)`` or batch-first ``(B, n, d)``,
    returning the output): self-attention through the verifiable ``multi_head_attention``
    primitive, for modules without biases (``causal=...`` given makes ``bias`` default to
    False, the form the zoo and the verifier use). Its masks are boolean ``(n, n)`` with
    ``True`` = may attend; ``causal=True`` also forbids the future.
    """

    in_proj_bias: Param | None

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0,
                 bias: bool | None = None, add_bias_kv: bool = False,
                 add_zero_attn: bool = False, kdim: Any = None, vdim: Any = None,
                 batch_first: bool = False, device: Any = None, dtype: Any = "float32", *,
                 causal: bool | None = None, generator: Any = None) -> None:
        super().__init__()
        _positive("MultiheadAttention", embed_dim=embed_dim, num_heads=num_heads)
        if embed_dim % num_heads:
            raise TorchLeanError(f"MultiheadAttention: embed_dim {embed_dim} is not divisible by "
                                 f"num_heads {num_heads}")
        if add_bias_kv or add_zero_attn or kdim not in (None, embed_dim) \
                or vdim not in (None, embed_dim):
            raise TorchLeanError("MultiheadAttention: add_bias_kv, add_zero_attn and kdim/vdim "
                                 "other than embed_dim are not supported")
        if isinstance(dropout, bool) or not isinstance(dropout, int | float) \
                or not 0 <= dropout < 1:
            raise TorchLeanError(f"MultiheadAttention: dropout must be in [0, 1), found "
                                 f"{dropout!r}")
        if device is not None:
            check_device(str(device))
        dtype = "float32" if dtype is None else dtype
        self.embed_dim, self.num_heads = int(embed_dim), int(num_heads)
        self.causal = bool(causal)
        self.dropout, self.batch_first = float(dropout), bool(batch_first)
        with_bias = (causal is None) if bias is None else bool(bias)
        d = self.embed_dim
        # torch: xavier_uniform_ on in_proj_weight, Linear's default init for out_proj, and
        # zero biases.
        self.in_proj_weight = Param(uniform_init((3 * d, d), math.sqrt(6.0 / (4 * d)), dtype,
                                                 generator),
                                    "in_proj_weight")
        self.in_proj_bias = (Param(np.zeros(3 * d, as_dtype(dtype)), "in_proj_bias")
                             if with_bias else None)
        out_proj = NonDynamicallyQuantizableLinear if causal is None else Linear
        self.out_proj = out_proj(d, d, bias=with_bias, dtype=dtype, generator=generator)
        if with_bias:
            assert self.out_proj.bias is not None
            self.out_proj.bias.assign(np.zeros(d, as_dtype(dtype)))

    def forward(self, x: Any, key: Any = None, value: Any = None, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None,
                average_attn_weights: bool = True, is_causal: bool = False, *,
                mask: Any = None) -> Any:
        if key is not None or value is not None:  # torch's call
            if mask is not None:
                raise TorchLeanError("MultiheadAttention: mask= belongs to the self-attention "
                                     "call attn(x, mask=...); torch's call takes attn_mask=")
            return attention_forward(self, x, key, value, key_padding_mask, need_weights,
                                     attn_mask, average_attn_weights, is_causal)
        if self.in_proj_bias is not None or (self.training and self.dropout > 0):
            raise TorchLeanError("MultiheadAttention: attn(x) is the bias-free self-attention "
                                 "form (causal=...); call attn(query, key, value) as in torch")
        shape = _shape(x)
        if len(shape) not in (2, 3) or shape[-1] != self.embed_dim:
            raise ShapeError(f"MultiheadAttention: expected (n, {self.embed_dim}) or "
                             f"(B, n, {self.embed_dim}), found {shape}")
        n = shape[-2]
        # The mask is a static attribute of the op: host data (a device mask is read back).
        allowed = None if mask is None else np.asarray(to_host(mask))
        if allowed is not None and (allowed.dtype != np.bool_ or allowed.shape != (n, n)):
            raise ShapeError(f"MultiheadAttention: mask must be a boolean ({n}, {n}) array "
                             f"(True = may attend), found {allowed.dtype} {allowed.shape}")
        if self.causal:
            tril = np.tril(np.ones((n, n), dtype=bool))
            allowed = tril if allowed is None else allowed & tril
        d = self.embed_dim
        w_in = _use(x, self.in_proj_weight)
        wq, wk, wv = (F.transpose2d(F.slice_range0(w_in, start=k * d, length=d))
                      for k in range(3))
        wo = F.transpose2d(_use(x, self.out_proj.weight))
        return F.multi_head_attention(wq, wk, wv, wo, x, mask=allowed, num_heads=self.num_heads)

    def extra_repr(self) -> str:
        # torch prints no extra line; the self-attention form says what it is
        if self.in_proj_bias is not None or not self.causal:
            return ""
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, causal={self.causal}"


class Embedding(Module):
    """Rows of ``weight (num_embeddings, embedding_dim)`` picked by class indices.

    ``forward(ids)`` takes the indices as an integer array or tensor, or as a float ref
    (``Session.input`` turns an integer array into one; in a compiled graph they are an input
    like any other), and computes ``nn.functional.embedding(ids, weight)``: known indices must
    be integers in ``[0, num_embeddings)`` (else ``IndexRangeError``, as torch raises) and their
    rows are gathered, the weight's gradient being the scatter-add of the upstream rows; indices
    traced into a graph are gathered by the ``embedding`` primitive, which checks them the same
    way when the graph runs (see ``nn.functional.embedding``).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 dtype: Any = "float32", generator: Any = None) -> None:
        super().__init__()
        _positive("Embedding", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        self.padding_idx = _padding_index(padding_idx, self.num_embeddings)
        weight = normal_init((num_embeddings, embedding_dim), dtype, generator)
        if self.padding_idx is not None:  # torch zeroes the padding row (it never learns)
            weight[self.padding_idx] = 0
        self.weight = Param(weight, "weight")

    @classmethod
    def from_pretrained(cls, embeddings: Any, freeze: bool = True,
                        padding_idx: int | None = None, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> Embedding:
        """An embedding whose weight is ``embeddings`` (2-D; a tensor's storage is shared, as
        torch's ``Parameter`` of it), frozen unless ``freeze=False``; ``padding_idx``'s row
        keeps its values and takes no gradient. Nothing is drawn from the generator."""
        for key, value, default in (("max_norm", max_norm, None), ("norm_type", norm_type, 2.0),
                                    ("scale_grad_by_freq", scale_grad_by_freq, False),
                                    ("sparse", sparse, False)):
            if value != default:
                raise functional.UnsupportedArgumentError(
                    f"Embedding.from_pretrained: {key}={value!r} is not supported (only "
                    f"{default!r})")
        source = embeddings if isinstance(embeddings, Tensor) else tensor(embeddings)
        if source.ndim != 2:
            raise ShapeError(f"Embedding.from_pretrained: embeddings must be 2-D, found shape "
                             f"{tuple(source.shape)}")
        if not isinstance(freeze, bool):
            raise TorchLeanError(f"Embedding.from_pretrained: freeze must be a bool, found "
                                 f"{freeze!r}")
        layer = cls.__new__(cls)
        Module.__init__(layer)
        layer.num_embeddings, layer.embedding_dim = (int(n) for n in source.shape)
        layer.padding_idx = _padding_index(padding_idx, layer.num_embeddings)
        layer.weight = Param(source.detach(), "weight", requires_grad=not freeze)
        return layer

    def forward(self, ids: Any) -> Any:
        if not isinstance(ids, Ref):
            xp = namespace_of(ids)
            ids = xp.asarray(ids).astype(self.weight.dtype)
        elif np.dtype(ids.dtype).kind != "f" and callable(getattr(ids, "to", None)):
            # An integer index tensor (tl.Tensor int64): ids travel as integer-valued floats.
            ids = getattr(ids, "to")(self.weight.dtype)  # noqa: B009  (Ref declares no .to)
        return functional.embedding(ids, _use(ids, self.weight), self.padding_idx)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


def _padding_index(padding_idx: Any, n: int) -> int | None:
    """torch's ``padding_idx`` of an embedding of ``n`` rows, as a row in ``[0, n)``."""
    if padding_idx is None:
        return None
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, int | np.integer) or not (
            -n <= padding_idx < n):
        raise IndexRangeError(f"Embedding: padding_idx must be an int within num_embeddings "
                              f"({n}), found {padding_idx!r}")
    return int(padding_idx) % n


# ---------------------------------------------------------------------------------------------
# Layers without parameters


class MaxPool2d(Module):
    """2-D max pooling; ``stride`` defaults to ``kernel_size``; padded cells never win."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 dilation: Any = 1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = _pair("MaxPool2d kernel_size", kernel_size, 1)
        self.stride = self.kernel_size if stride is None else _pair("MaxPool2d stride", stride, 1)
        self.padding = _pair("MaxPool2d padding", padding)
        self.dilation = _pair("MaxPool2d dilation", dilation, 1)
        self.return_indices, self.ceil_mode = bool(return_indices), bool(ceil_mode)
        self._given = (kernel_size, kernel_size if stride is None else stride, padding, dilation)

    def forward(self, x: Any) -> Any:
        if self.dilation != (1, 1) or self.return_indices or self.ceil_mode:
            return functional.max_pool2d(x, self.kernel_size, self.stride, self.padding,
                                         self.dilation, self.ceil_mode, self.return_indices)
        if self.padding == (0, 0):
            return F.max_pool2d(x, kernel_size=self.kernel_size, stride=self.stride)
        return F.max_pool2d_pad(x, kernel_size=self.kernel_size, stride=self.stride,
                                padding=self.padding)

    def extra_repr(self) -> str:
        k, st, pad, dil = self._given
        return (f"kernel_size={k}, stride={st}, padding={pad}, dilation={dil}, "
                f"ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """2-D average pooling; zero padding counts in the divisor (torch's default)."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: Any = None) -> None:
        super().__init__()
        self.kernel_size = _pair("AvgPool2d kernel_size", kernel_size, 1)
        self.stride = self.kernel_size if stride is None else _pair("AvgPool2d stride", stride, 1)
        self.padding = _pair("AvgPool2d padding", padding)
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)
        self.divisor_override = divisor_override
        self._given = (kernel_size, kernel_size if stride is None else stride, padding)

    def forward(self, x: Any) -> Any:
        if self.ceil_mode or not self.count_include_pad or self.divisor_override is not None:
            return functional.avg_pool2d(x, self.kernel_size, self.stride, self.padding,
                                         self.ceil_mode, self.count_include_pad,
                                         self.divisor_override)
        if self.padding == (0, 0):
            return F.avg_pool2d(x, kernel_size=self.kernel_size, stride=self.stride)
        return F.avg_pool2d_pad(x, kernel_size=self.kernel_size, stride=self.stride,
                                padding=self.padding)

    def extra_repr(self) -> str:
        k, st, pad = self._given
        return f"kernel_size={k}, stride={st}, padding={pad}"


class Dropout(Module):
    """Inverted dropout in training mode (the owner's seeded mask); identity in eval mode."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, int | float | np.integer | np.floating) \
                or not 0 <= p < 1:
            raise TorchLeanError(f"Dropout: p must be a number in [0, 1), found {p!r}")
        self.p = float(p)
        # accepted for torch's programs: the result is the same values, returned as a new
        # tensor (an in-place dropout only saves torch memory)
        self.inplace = bool(inplace)

    def forward(self, x: Any) -> Any:
        if isinstance(x, Ref):
            return x.owner.dropout(x, self.p, self.training)
        if self.training and self.p > 0:
            raise TorchLeanError("Dropout: training-mode dropout needs a session (its seeded "
                                 "random stream); call model.eval() for plain arrays")
        return x

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Flatten(Module):
    """Merge axes ``start_dim .. end_dim`` into one (torch's default keeps the batch axis)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        for name, dim in (("start_dim", start_dim), ("end_dim", end_dim)):
            if isinstance(dim, bool) or not isinstance(dim, int | np.integer):
                raise TorchLeanError(f"Flatten: {name} must be an int, found {dim!r}")
        self.start_dim, self.end_dim = int(start_dim), int(end_dim)

    def forward(self, x: Any) -> Any:
        shape = _shape(x)
        n = len(shape)
        start = self.start_dim + n if self.start_dim < 0 else self.start_dim
        end = self.end_dim + n if self.end_dim < 0 else self.end_dim
        if not 0 <= start <= end < n:
            raise ShapeError(f"Flatten: dims {self.start_dim}..{self.end_dim} out of range for "
                             f"shape {shape}")
        merged = math.prod(shape[start:end + 1])  # exact ints (np.prod costs ~5 us a call)
        return F.reshape(x, shape=shape[:start] + (merged,) + shape[end + 1:])

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class ReLU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = bool(inplace)

    def forward(self, x: Any) -> Any:
        if self.inplace:  # torch's in-place relu: on tensors, one recorded in-place op
            return functional.relu(x, inplace=True)
        return F.relu(x)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    """GELU: exact ``"none"`` (through the ``erf`` primitive; torch's default) or
    ``approximate="tanh"``."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("tanh", "none"):
            raise TorchLeanError(f"GELU: approximate must be 'tanh' or 'none', found "
                                 f"{approximate!r}")
        self.approximate = approximate

    def forward(self, x: Any) -> Any:
        if self.approximate == "tanh":
            return F.gelu(x)
        return gelu(x, approximate="none")

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = bool(inplace)

    def forward(self, x: Any) -> Any:
        if self.inplace:
            return functional.silu(x, inplace=True)
        return F.silu(x)


class Tanh(Module):
    def forward(self, x: Any) -> Any:
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Any) -> Any:
        return F.sigmoid(x)
