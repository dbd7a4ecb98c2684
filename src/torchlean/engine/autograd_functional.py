"""``torch.autograd.functional`` (``jacobian``, ``hessian``, ``vjp``, ``jvp``, ``hvp``,
``vhp``) and a stand-in ``torch.autograd.profiler``, over tensors.

Each function runs the user's function on detached copies of the inputs that require grad and
differentiates it with ``autograd.grad`` (the one reverse driver): a Jacobian one output entry
at a time (reverse mode, as torch's default strategy), a Hessian as the Jacobian of the gradient
(``create_graph=True``), ``jvp`` through the double-vjp identity. Result structures follow
torch's: a tensor for one input and one output, tuples otherwise. The profiler records the wall
time of the block only (torch's per-op tables have no counterpart here); ``key_averages().table()``
prints that one row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..core.errors import TorchLeanError
from .tensor import Tensor, autograd, enable_grad, stack, zeros

__all__ = ["hessian", "hvp", "jacobian", "jvp", "profile", "vhp", "vjp"]


def _inputs(op: str, inputs: Any) -> tuple[bool, list[Tensor]]:
    single = isinstance(inputs, Tensor)
    items = [inputs] if single else list(inputs)
    if not items or not all(isinstance(t, Tensor) for t in items):
        raise TorchLeanError(f"autograd.functional.{op}: inputs must be a Tensor or a tuple of "
                             "Tensors")
    return single, [t.detach().requires_grad_(True) if t.dtype.kind == "f" else t
                    for t in items]


def _outputs(op: str, out: Any) -> tuple[bool, list[Tensor]]:
    single = isinstance(out, Tensor)
    items = [out] if single else list(out)
    if not all(isinstance(t, Tensor) for t in items):
        raise TorchLeanError(f"autograd.functional.{op}: the function must return a Tensor or "
                             "a tuple of Tensors")
    return single, items


def _grads(out: Any, xs: list[Tensor], create_graph: bool) -> list[Any]:
    if not out.requires_grad:
        return [zeros(*x.shape, dtype=x.dtype) for x in xs]
    gs = autograd.grad(out, xs, retain_graph=True, create_graph=create_graph,
                       allow_unused=True)
    return [zeros(*x.shape, dtype=x.dtype) if g is None else g for g, x in zip(gs, xs,
                                                                                 strict=True)]


def jacobian(func: Callable[..., Any], inputs: Any, create_graph: bool = False,
             strict: bool = False, vectorize: bool = False,
             strategy: str = "reverse-mode") -> Any:
    """The Jacobian of ``func`` at ``inputs``: for output ``o`` and input ``x`` a tensor of
    shape ``o.shape + x.shape``."""
    single_in, xs = _inputs("jacobian", inputs)
    with enable_grad():
        single_out, outs = _outputs("jacobian", func(*xs))
        blocks = []
        for o in outs:
            flat = o.reshape(-1)
            rows: list[list[Tensor]] = [[] for _ in xs]
            for k in range(flat.shape[0]):
                for i, g in enumerate(_grads(flat[k], xs, create_graph)):
                    rows[i].append(g)
            per_input = tuple(
                (stack(r) if r else zeros(0, *x.shape, dtype=x.dtype)).reshape(
                    *o.shape, *x.shape) for r, x in zip(rows, xs, strict=True))
            blocks.append(per_input[0] if single_in else per_input)
    if not create_graph:
        blocks = [b.detach() if isinstance(b, Tensor) else tuple(t.detach() for t in b)
                  for b in blocks]
    return blocks[0] if single_out else tuple(blocks)


def hessian(func: Callable[..., Any], inputs: Any, create_graph: bool = False,
            strict: bool = False, vectorize: bool = False,
            outer_jacobian_strategy: str = "reverse-mode") -> Any:
    """The Hessian of a scalar ``func``: the Jacobian of its gradient."""
    single_in, _ = _inputs("hessian", inputs)

    def gradient(*xs: Tensor) -> Any:
        out = func(*xs)
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise TorchLeanError("autograd.functional.hessian: the function must return a "
                                 "single-element Tensor")
        gs = _grads(out.reshape(()), list(xs), True)
        return gs[0] if single_in else tuple(gs)

    return jacobian(gradient, inputs, create_graph=create_graph)


def _seed_list(op: str, v: Any, like: list[Tensor]) -> list[Tensor]:
    if v is None:
        if any(t.numel() != 1 for t in like):
            raise TorchLeanError(f"autograd.functional.{op}: v can only be None for "
                                 "single-element outputs")
        return [t.detach() * 0 + 1 for t in like]
    items = [v] if isinstance(v, Tensor) else list(v)
    if len(items) != len(like):
        raise TorchLeanError(f"autograd.functional.{op}: v has {len(items)} entries for "
                             f"{len(like)} tensors")
    return items


def vjp(func: Callable[..., Any], inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), v^T J)``."""
    single_in, xs = _inputs("vjp", inputs)
    with enable_grad():
        single_out, outs = _outputs("vjp", func(*xs))
        seeds = _seed_list("vjp", v, outs)
        total = sum(((o * s).sum() for o, s in zip(outs, seeds, strict=True)),
                    start=zeros((), dtype=outs[0].dtype))
        gs = _grads(total, xs, create_graph)
    out_value = outs[0].detach() if single_out else tuple(o.detach() for o in outs)
    gs = gs if create_graph else [g.detach() for g in gs]
    return out_value, (gs[0] if single_in else tuple(gs))


def jvp(func: Callable[..., Any], inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), J v)`` by the double-vjp identity (the vjp is linear in its seed)."""
    single_in, xs = _inputs("jvp", inputs)
    tangents = _seed_list("jvp", v, xs)
    with enable_grad():
        single_out, outs = _outputs("jvp", func(*xs))
        dummies = [zeros(*o.shape, dtype=o.dtype).requires_grad_(True) for o in outs]
        total = sum(((o * u).sum() for o, u in zip(outs, dummies, strict=True)),
                    start=zeros((), dtype=outs[0].dtype))
        gs = _grads(total, xs, True)
        inner = sum(((g * t).sum() for g, t in zip(gs, tangents, strict=True)),
                    start=zeros((), dtype=outs[0].dtype))
        result = _grads(inner, dummies, create_graph)
    out_value = outs[0].detach() if single_out else tuple(o.detach() for o in outs)
    result = result if create_graph else [r.detach() for r in result]
    return out_value, (result[0] if single_out else tuple(result))


def vhp(func: Callable[..., Any], inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), v^T H)`` of a scalar ``func``."""
    single_in, xs = _inputs("vhp", inputs)
    seeds = _seed_list("vhp", v, xs)
    with enable_grad():
        out = func(*xs)
        gs = _grads(out.reshape(()), xs, True)
        inner = sum(((g * s).sum() for g, s in zip(gs, seeds, strict=True)),
                    start=zeros((), dtype=out.dtype))
        result = _grads(inner, xs, create_graph)
    result = result if create_graph else [r.detach() for r in result]
    return out.detach(), (result[0] if single_in else tuple(result))


hvp = vhp  # the Hessian is symmetric


class _Averages(list):  # type: ignore[type-arg]
    def table(self, sort_by: Any = None, row_limit: int = 100, **_: Any) -> str:
        rows = ["Name                 Self CPU total   Calls",
                "-------------------- ---------------- -----"]
        rows += [f"{name:<20} {seconds * 1e3:>13.3f}ms {calls:>5d}"
                 for name, seconds, calls in self[:row_limit]]
        return "\n".join(rows)


class profile:  # noqa: N801  (torch's name)
    """``torch.autograd.profiler.profile`` stand-in: times the block as one row."""

    def __init__(self, enabled: bool = True, use_cuda: bool = False, **_: Any) -> None:
        self.enabled = enabled
        self.total = 0.0

    def __enter__(self) -> profile:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.total = time.perf_counter() - self._start

    def key_averages(self, group_by_input_shape: bool = False) -> _Averages:
        return _Averages([("block", self.total, 1)])

    def table(self, **kwargs: Any) -> str:
        return self.key_averages().table(**kwargs)


def record_function(name: str) -> Any:
    """``torch.autograd.profiler.record_function``: accepted, records nothing."""
    return _Noop()


class _Noop:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None

