"""Running one primitive's kernel on arrays: the checks every interpreter shares.

``run_checked`` applies a primitive to concrete arrays after its shape rule and the dtype check;
``array_on`` is the one way user data becomes an array of a namespace (one explicit upload from
the host, never a silent copy between devices); ``device_kernel_check`` is what executors call
before running a node on a device. Engine-neutral: the tape, the graph, tensors and sessions
all use these, so none of them has to import another interpreter for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import registry as _registry
from .backend import device_of, namespace_of, numeric_array, to_device
from .errors import device_mismatch, dtypes_differ
from .registry import Primitive


def run_checked(prim: Primitive, values: Sequence[Any], attrs: dict[str, Any],
                xp: Any = None) -> Any:
    """``prim``'s forward on ``values`` after the checks every recording makes (the eager tape
    and ``tl.Tensor`` share it): the shape rule, then one dtype for all inputs. ``xp`` is the
    namespace a nullary op (``rand_uniform``) makes its value in; ``None`` or NumPy: the
    kernel's default (the host)."""
    if not attrs:  # the per-op hot path of tensors and tapes, spelled out for 1-3 inputs
        arity = len(values)
        if arity == 1:
            x = values[0]
            prim.infer(x.shape)
            return prim.forward(x)
        if arity == 2:
            a, b = values
            prim.infer(a.shape, b.shape)
            if a.dtype != b.dtype:
                raise dtypes_differ(prim.name, [a.dtype, b.dtype])
            return prim.forward(a, b)
        if arity == 3:  # linear(w, b, x): every layer of an MLP
            a, b, c = values
            prim.infer(a.shape, b.shape, c.shape)
            if a.dtype != b.dtype or a.dtype != c.dtype:
                raise dtypes_differ(prim.name, [a.dtype, b.dtype, c.dtype])
            return prim.forward(a, b, c)
    if "dtype" in attrs:  # the output dtype of a nullary op is not part of its shape rule
        prim.infer(*[v.shape for v in values],
                   **{k: v for k, v in attrs.items() if k != "dtype"})
    else:
        prim.infer(*[v.shape for v in values], **attrs)
    if len(values) > 1:
        dtype = values[0].dtype
        for v in values:
            if v.dtype != dtype:
                raise dtypes_differ(prim.name, [w.dtype for w in values])
    if xp is not None and xp is not np and not values:
        return prim.forward(**attrs, xp=xp)
    return prim.forward(*values, **attrs)


def device_kernel_check(xp: Any) -> Callable[[Primitive, Any], None] | None:
    """The registry's ``check_device_kernel(prim, xp)`` for a device namespace (``None`` on the
    host, where every primitive has its kernel)."""
    return None if xp is np else _registry.check_device_kernel


def array_on(op: str, data: Any, xp: Any, dtype: Any = None) -> Any:
    """User data as an array of namespace ``xp`` (then ``dtype`` if given), checked as
    ``numeric_array`` checks it: host data goes to a device by one explicit upload; data
    already on a device stays there, and on another device than ``xp`` is a ``DeviceError``
    naming ``op`` and both devices."""
    src = namespace_of(data)
    if src is xp:
        return numeric_array(op, data, xp, dtype)
    if src is not np:
        raise device_mismatch(op, device_of(src), device_of(xp))
    arr = numeric_array(op, data, np, dtype)
    return to_device(arr, xp)
