"""``torchlean.func``: torch.func's composable transforms over tensors.

``grad``, ``grad_and_value``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd``, ``hessian``, ``vmap``,
``functional_call`` and ``stack_module_state``, with torch.func's signatures and result
structures (``argnums`` as an int or a tuple, ``has_aux``, arguments and results that are
tensors or nested tuples, lists and dicts of them, as ``functional_call``'s parameter dicts are).

How they run: every derivative comes from the one reverse driver (``autograd.grad``) on the
same tape as ``backward()``. A transform makes its differentiated inputs leaves of a fresh
computation (an input that already carries a history, an enclosing transform's, is used as it
is), and keeps its results differentiable (``create_graph``) when it runs inside another
transform or its inputs had a history, so transforms nest: ``hessian`` is ``jacfwd(jacrev(f))``
and ``vmap(grad(f))`` gives per-sample gradients. Two departures from torch, both in how the
values are computed, not in what they are:

- ``jacfwd`` and ``jvp`` compute in reverse mode (``jvp`` through the double-vjp identity): the
  same derivative, reached another way, so their values equal torch's to rounding.
- ``vmap`` runs the function once per batch entry and stacks the results, instead of rewriting
  it into batched ops: the same values for functions without side effects, at the cost of a
  Python loop. ``randomness="same"`` (one random draw shared by every entry) is refused, since
  each call draws its own; ``"error"`` and ``"different"`` run with a draw per entry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .core.errors import ShapeError, TorchLeanError, UnsupportedArgumentError
from .engine.tensor import Tensor, autograd, enable_grad, stack, tensor, zeros
from .nn.modules import Module

__all__ = ["functional_call", "grad", "grad_and_value", "hessian", "jacfwd", "jacrev", "jvp",
           "stack_module_state", "vjp", "vmap"]

# ---------------------------------------------------------------------------------------------
# nesting level and pytrees

_LEVEL = threading.local()


def _depth() -> int:
    return getattr(_LEVEL, "depth", 0)


@contextmanager
def _level() -> Iterator[None]:
    """One transform deeper: derivatives taken inside must stay differentiable for it."""
    _LEVEL.depth = _depth() + 1
    try:
        yield
    finally:
        _LEVEL.depth -= 1


def _flatten(tree: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """The leaves of a nested tuple/list/dict (in order) and the function that rebuilds the same
    structure from new leaves."""
    if isinstance(tree, dict):
        keys = list(tree)
        parts = [_flatten(tree[k]) for k in keys]
        return _join(parts, lambda items: dict(zip(keys, items, strict=True)))
    if isinstance(tree, tuple | list):
        parts = [_flatten(v) for v in tree]
        kind = type(tree)
        if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a namedtuple
            return _join(parts, lambda items: kind(*items))
        return _join(parts, lambda items: kind(items))
    return [tree], lambda leaves: leaves[0]


def _join(parts: list[tuple[list[Any], Callable[[list[Any]], Any]]],
          build: Callable[[list[Any]], Any]) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    leaves = [leaf for part, _ in parts for leaf in part]
    sizes = [len(part) for part, _ in parts]

    def unflatten(new: list[Any]) -> Any:
        items, start = [], 0
        for size, (_, rebuild) in zip(sizes, parts, strict=True):
            items.append(rebuild(new[start:start + size]))
            start += size
        return build(items)

    return leaves, unflatten


def _float_leaf(op: str, leaf: Any) -> Tensor:
    if not isinstance(leaf, Tensor) or leaf.dtype.kind != "f":
        found = type(leaf).__name__ if not isinstance(leaf, Tensor) else f"a {leaf.dtype} tensor"
        raise TorchLeanError(f"func.{op}: the differentiated arguments must be floating-point "
                             f"tensors (or nested tuples, lists and dicts of them), found {found}")
    return leaf


def _argnums(op: str, argnums: Any, count: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) and not isinstance(argnums, bool) else argnums
    if not isinstance(nums, tuple) or not nums or any(
            isinstance(n, bool) or not isinstance(n, int) for n in nums):
        raise TorchLeanError(f"func.{op}: argnums must be an int or a non-empty tuple of ints, "
                             f"found {argnums!r}")
    out = tuple(n + count if n < 0 else n for n in nums)
    if any(not 0 <= n < count for n in out):
        raise TorchLeanError(f"func.{op}: argnums {argnums!r} out of range for a function "
                             f"called with {count} positional arguments")
    return out


def _differentiable(op: str, args: tuple[Any, ...], nums: tuple[int, ...], outer: int
                    ) -> tuple[list[Any], list[Tensor], list[Callable[[list[Any]], Any]], bool]:
    """The arguments with the differentiated ones as leaves of a fresh computation, those leaves
    per argnum (flattened), their rebuilders, and whether derivatives must stay differentiable
    (inside another transform: ``outer``, the depth the caller was called at, or an input with
    a history)."""
    new_args = list(args)
    leaves: list[Tensor] = []
    rebuilders = []
    keep = outer > 0
    for n in nums:
        flat, rebuild = _flatten(args[n])
        prepared = []
        for leaf in flat:
            t = _float_leaf(op, leaf)
            keep = keep or t.requires_grad
            prepared.append(t if t.requires_grad else t.detach().requires_grad_(True))
        leaves.extend(prepared)
        rebuilders.append(rebuild)
        new_args[n] = rebuild(prepared)
    return new_args, leaves, rebuilders, keep


def _gradients(outputs: list[Tensor], leaves: list[Tensor], seeds: list[Any] | None,
               keep: bool) -> list[Tensor]:
    """d(outputs . seeds)/d(leaves), zeros for a leaf the outputs do not reach."""
    live = [(o, s) for o, s in zip(outputs, seeds or [None] * len(outputs), strict=True)
            if o.requires_grad]
    if not live:
        return [zeros(*leaf.shape, dtype=leaf.dtype) for leaf in leaves]
    found = autograd.grad([o for o, _ in live], leaves,
                          grad_outputs=None if seeds is None else [s for _, s in live],
                          retain_graph=True, create_graph=keep, allow_unused=True)
    out = [zeros(*leaf.shape, dtype=leaf.dtype) if g is None else g
           for g, leaf in zip(found, leaves, strict=True)]
    return out if keep else [g.detach() for g in out]


def _split(values: list[Any], leaves_per_arg: list[int],
           rebuilders: list[Callable[[list[Any]], Any]], single: bool) -> Any:
    trees, start = [], 0
    for size, rebuild in zip(leaves_per_arg, rebuilders, strict=True):
        trees.append(rebuild(values[start:start + size]))
        start += size
    return trees[0] if single else tuple(trees)


def _counts(args: tuple[Any, ...], nums: tuple[int, ...]) -> list[int]:
    return [len(_flatten(args[n])[0]) for n in nums]


def _with_aux(op: str, out: Any, has_aux: bool) -> tuple[Any, Any]:
    if not has_aux:
        return out, None
    if not isinstance(out, tuple) or len(out) != 2:
        raise TorchLeanError(f"func.{op}(has_aux=True): the function must return a pair "
                             f"(output, aux), found {type(out).__name__}")
    return out[0], out[1]


def _detached(tree: Any, keep: bool) -> Any:
    if keep:
        return tree
    leaves, rebuild = _flatten(tree)
    return rebuild([leaf.detach() if isinstance(leaf, Tensor) else leaf for leaf in leaves])


# ---------------------------------------------------------------------------------------------
# grad, vjp, jvp


def grad_and_value(func: Callable[..., Any], argnums: int | tuple[int, ...] = 0,
                   has_aux: bool = False) -> Callable[..., Any]:
    """``func``'s gradient w.r.t. the ``argnums`` arguments, and its value: ``(grads, value)``,
    or ``(grads, (value, aux))`` with ``has_aux``. ``func`` returns a one-element tensor."""
    if not callable(func):
        raise TorchLeanError(f"func.grad: expected a function, found {type(func).__name__}")

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nums = _argnums("grad", argnums, len(args))
        outer = _depth()
        with _level(), enable_grad():
            new_args, leaves, rebuilders, keep = _differentiable("grad", args, nums, outer)
            out, aux = _with_aux("grad", func(*new_args, **kwargs), has_aux)
            if not isinstance(out, Tensor) or out.numel() != 1:
                found = (f"shape {tuple(out.shape)}" if isinstance(out, Tensor)
                         else type(out).__name__)
                raise ShapeError(f"func.grad: the function must return a one-element tensor, "
                                 f"found {found}")
            gs = _gradients([out.reshape(())], leaves, None, keep)
        grads = _split(gs, _counts(args, nums), rebuilders, isinstance(argnums, int))
        value = _detached(out, keep)
        return (grads, (value, aux)) if has_aux else (grads, value)

    return wrapper


def grad(func: Callable[..., Any], argnums: int | tuple[int, ...] = 0,
         has_aux: bool = False) -> Callable[..., Any]:
    """``func``'s gradient w.r.t. the ``argnums`` arguments (``(grads, aux)`` with
    ``has_aux``)."""
    both = grad_and_value(func, argnums, has_aux)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        grads, value = both(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return wrapper


def vjp(func: Callable[..., Any], *primals: Any, has_aux: bool = False) -> Any:
    """``(func(*primals), vjp_fn)``: ``vjp_fn(cotangents)`` (shaped as the output) gives one
    cotangent per primal, a tuple. ``(output, vjp_fn, aux)`` with ``has_aux``."""
    nums = tuple(range(len(primals)))
    if not nums:
        raise TorchLeanError("func.vjp: expected at least one primal")
    outer = _depth()
    with _level(), enable_grad():
        new_args, leaves, rebuilders, keep = _differentiable("vjp", primals, nums, outer)
        out, aux = _with_aux("vjp", func(*new_args), has_aux)
    outs, _ = _flatten(out)
    if not outs or not all(isinstance(o, Tensor) for o in outs):
        raise TorchLeanError("func.vjp: the function must return tensors (or nested tuples, "
                             "lists and dicts of them)")
    counts = _counts(primals, nums)

    def vjp_fn(cotangents: Any, *, retain_graph: bool = True, create_graph: bool | None = None
               ) -> tuple[Any, ...]:
        seeds, _ = _flatten(cotangents)
        if len(seeds) != len(outs):
            raise TorchLeanError(f"func.vjp: {len(seeds)} cotangents for {len(outs)} outputs")
        for s, o in zip(seeds, outs, strict=True):
            if not isinstance(s, Tensor) or tuple(s.shape) != tuple(o.shape):
                found = tuple(s.shape) if isinstance(s, Tensor) else type(s).__name__
                raise ShapeError(f"func.vjp: a cotangent must be a tensor shaped as its "
                                 f"output {tuple(o.shape)}, found {found}")
        with enable_grad():
            gs = _gradients(outs, leaves, seeds, keep or _depth() > 0 or bool(create_graph))
        result = _split(gs, counts, rebuilders, False)
        return tuple(result)

    value = _detached(out, keep)
    return (value, vjp_fn, aux) if has_aux else (value, vjp_fn)


def jvp(func: Callable[..., Any], primals: Any, tangents: Any, *, strict: bool = False,
        has_aux: bool = False) -> Any:
    """``(func(*primals), J tangents)`` (``primals`` and ``tangents`` are tuples of the same
    structure); computed by the double-vjp identity: the vjp is linear in its seed."""
    if not isinstance(primals, tuple) or not isinstance(tangents, tuple):
        raise TorchLeanError("func.jvp: primals and tangents must be tuples, found "
                             f"{type(primals).__name__} and {type(tangents).__name__}")
    nums = tuple(range(len(primals)))
    if not nums or len(tangents) != len(primals):
        raise TorchLeanError(f"func.jvp: expected one tangent per primal, found "
                             f"{len(tangents)} for {len(primals)}")
    outer = _depth()
    with _level(), enable_grad():
        new_args, leaves, _, keep = _differentiable("jvp", primals, nums, outer)
        flat_t, _ = _flatten(tangents)
        for t, leaf in zip(flat_t, leaves, strict=True):
            if not isinstance(t, Tensor) or tuple(t.shape) != tuple(leaf.shape):
                found = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise ShapeError(f"func.jvp: a tangent must be a tensor shaped as its primal "
                                 f"{tuple(leaf.shape)}, found {found}")
        out, aux = _with_aux("jvp", func(*new_args), has_aux)
        outs, rebuild = _flatten(out)
        # the vjp with a seed u that is itself a variable: linear in u, so its u-gradient
        # against the tangents is J t
        dummies = [zeros(*o.shape, dtype=o.dtype).requires_grad_(True) for o in outs]
        seeded = sum(((o * u).sum() for o, u in zip(outs, dummies, strict=True)),
                     start=zeros((), dtype=outs[0].dtype))
        gs = _gradients([seeded], leaves, None, True)
        inner = [g for g in gs if g.requires_grad]
        used = [t for g, t in zip(gs, flat_t, strict=True) if g.requires_grad]
        if inner:
            total = sum(((g * t).sum() for g, t in zip(inner, used, strict=True)),
                        start=zeros((), dtype=outs[0].dtype))
            result = _gradients([total], dummies, None, keep)
        else:
            result = [zeros(*o.shape, dtype=o.dtype) for o in outs]
    value = _detached(out, keep)
    tangent_out = rebuild(result)
    return (value, tangent_out, aux) if has_aux else (value, tangent_out)


# ---------------------------------------------------------------------------------------------
# Jacobians


def jacrev(func: Callable[..., Any], argnums: int | tuple[int, ...] = 0, *,
           has_aux: bool = False, chunk_size: int | None = None) -> Callable[..., Any]:
    """The Jacobian of ``func`` w.r.t. the ``argnums`` arguments, one reverse pass per output
    entry: for output ``o`` and input ``x`` a tensor shaped ``o.shape + x.shape``, in the
    output's structure, each holding the inputs' structure."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nums = _argnums("jacrev", argnums, len(args))
        outer = _depth()
        with _level(), enable_grad():
            new_args, leaves, rebuilders, keep = _differentiable("jacrev", args, nums, outer)
            out, aux = _with_aux("jacrev", func(*new_args, **kwargs), has_aux)
            outs, rebuild_out = _flatten(out)
            if not outs or not all(isinstance(o, Tensor) for o in outs):
                raise TorchLeanError("func.jacrev: the function must return tensors (or "
                                     "nested tuples, lists and dicts of them)")
            blocks = []
            for o in outs:
                flat = o.reshape(-1)
                rows: list[list[Tensor]] = [[] for _ in leaves]
                for k in range(flat.shape[0]):
                    for i, g in enumerate(_gradients([flat[k]], leaves, None, keep)):
                        rows[i].append(g)
                per_leaf = [(stack(r) if r else zeros(0, *x.shape, dtype=x.dtype)).reshape(
                    *o.shape, *x.shape) for r, x in zip(rows, leaves, strict=True)]
                blocks.append(_split(per_leaf, _counts(args, nums), rebuilders,
                                     isinstance(argnums, int)))
        jac = rebuild_out(blocks)
        return (jac, aux) if has_aux else jac

    return wrapper


def jacfwd(func: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False,
           *, randomness: str = "error") -> Callable[..., Any]:
    """The Jacobian, as ``jacrev`` gives it (computed in reverse mode: the same values to
    rounding; torch computes it column by column in forward mode)."""
    return jacrev(func, argnums, has_aux=has_aux)


def hessian(func: Callable[..., Any], argnums: int | tuple[int, ...] = 0) -> Callable[..., Any]:
    """The Hessian of a scalar ``func``: ``jacfwd(jacrev(func))``, as torch.func's."""
    return jacfwd(jacrev(func, argnums), argnums)


# ---------------------------------------------------------------------------------------------
# vmap


def _dims_tree(op: str, dims: Any, tree: Any) -> list[Any]:
    """One dimension (or None) per leaf of ``tree``: ``dims`` is an int/None for the whole
    subtree, or has the tree's structure."""
    if dims is None or (isinstance(dims, int) and not isinstance(dims, bool)):
        return [dims] * len(_flatten(tree)[0])
    if isinstance(dims, dict) and isinstance(tree, dict):
        if set(dims) != set(tree):
            raise TorchLeanError(f"func.{op}: in_dims keys {sorted(dims)} do not match the "
                                 f"argument's keys {sorted(tree)}")
        return [d for k in tree for d in _dims_tree(op, dims[k], tree[k])]
    if isinstance(dims, tuple | list) and isinstance(tree, tuple | list) \
            and len(dims) == len(tree):
        return [d for sub_d, sub in zip(dims, tree, strict=True)
                for d in _dims_tree(op, sub_d, sub)]
    raise TorchLeanError(f"func.{op}: in_dims {dims!r} does not match the structure of the "
                         f"argument ({type(tree).__name__})")


def vmap(func: Callable[..., Any], in_dims: Any = 0, out_dims: Any = 0,
         randomness: str = "error", *, chunk_size: int | None = None) -> Callable[..., Any]:
    """``func`` mapped over a batch axis of its arguments (``in_dims``: per argument an int, None
    for an unmapped argument, or a nested structure of those), the results stacked along
    ``out_dims``. Runs ``func`` once per entry (see the module docstring)."""
    if not callable(func):
        raise TorchLeanError(f"func.vmap: expected a function, found {type(func).__name__}")
    if randomness not in ("error", "different", "same"):
        raise TorchLeanError(f"func.vmap: randomness must be 'error', 'different' or 'same', "
                             f"found {randomness!r}")
    if randomness == "same":
        raise UnsupportedArgumentError("func.vmap: randomness='same' (one draw shared by the "
                                       "batch) is not supported: vmap runs the function once "
                                       "per entry, each with its own draws")

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if isinstance(in_dims, tuple) and len(in_dims) != len(args):
            raise TorchLeanError(f"func.vmap: in_dims has {len(in_dims)} entries for "
                                 f"{len(args)} positional arguments")
        dims = _dims_tree("vmap", in_dims, args)
        leaves, rebuild = _flatten(args)
        sizes = set()
        for leaf, d in zip(leaves, dims, strict=True):
            if d is None:
                continue
            if not isinstance(leaf, Tensor):
                raise TorchLeanError(f"func.vmap: in_dim {d} given for a non-tensor argument "
                                     f"({type(leaf).__name__}); use None")
            if not -leaf.dim() <= d < leaf.dim():
                raise ShapeError(f"func.vmap: in_dim {d} out of range for a tensor of shape "
                                 f"{tuple(leaf.shape)}")
            sizes.add(leaf.shape[d])
        if len(sizes) != 1:
            raise ShapeError("func.vmap: " + ("no argument is mapped (every in_dim is None)"
                                              if not sizes else
                                              f"mapped arguments have different sizes "
                                              f"{sorted(sizes)} along their in_dims"))
        (size,) = sizes
        results = []
        for i in range(size):
            entry = [leaf.select(d, i) if d is not None else leaf
                     for leaf, d in zip(leaves, dims, strict=True)]
            results.append(func(*rebuild(entry), **kwargs))
        return _stack_results(results, out_dims)

    return wrapper


def _stack_results(results: list[Any], out_dims: Any) -> Any:
    flats = [_flatten(r) for r in results]
    rebuild = flats[0][1]
    dims = _dims_tree("vmap", out_dims, results[0])
    stacked = []
    for k, d in enumerate(dims):
        column = [f[0][k] for f in flats]
        column = [c if isinstance(c, Tensor) else tensor(c) for c in column]
        if d is None:
            stacked.append(column[0])
            continue
        out = stack(column, 0)
        stacked.append(out.movedim(0, d) if d != 0 else out)
    return rebuild(stacked)


# ---------------------------------------------------------------------------------------------
# modules as functions


def _owner(module: Module, name: str) -> tuple[Module, str]:
    *path, leaf = name.split(".")
    owner = module
    for part in path:
        sub = owner._modules.get(part)
        if sub is None:
            raise TorchLeanError(f"func.functional_call: {name!r} names no parameter or buffer "
                                 f"of {type(module).__name__} (no sub-module {part!r})")
        owner = sub
    return owner, leaf


def functional_call(module: Module, parameter_and_buffer_dicts: Any, args: Any = None,
                    kwargs: dict[str, Any] | None = None, *, tie_weights: bool = True,
                    strict: bool = False) -> Any:
    """``module(*args, **kwargs)`` with the named parameters and buffers replaced by the given
    tensors for this one call (restored afterwards, also on an error). Weights tied in the
    module (one parameter under two names) are replaced together, as torch's ``tie_weights``."""
    if not isinstance(module, Module):
        raise TorchLeanError(f"func.functional_call: expected a Module, found "
                             f"{type(module).__name__}")
    dicts = (parameter_and_buffer_dicts if isinstance(parameter_and_buffer_dicts, tuple | list)
             else (parameter_and_buffer_dicts,))
    given: dict[str, Any] = {}
    for d in dicts:
        if not isinstance(d, dict):
            raise TorchLeanError(f"func.functional_call: expected dicts of tensors, found "
                                 f"{type(d).__name__}")
        repeated = set(given) & set(d)
        if repeated:
            raise TorchLeanError(f"func.functional_call: {sorted(repeated)} given twice")
        given.update(d)
    known: dict[str, Any] = dict(module.named_parameters(remove_duplicate=False))
    known.update(dict(module.named_buffers(remove_duplicate=False)))
    unexpected = sorted(set(given) - set(known))
    if unexpected:
        raise TorchLeanError(f"func.functional_call: unexpected key(s) {unexpected} for "
                             f"{type(module).__name__}")
    if strict:
        missing = sorted(set(known) - set(given))
        if missing:
            raise TorchLeanError(f"func.functional_call: missing key(s) {missing} (strict=True)")
    for name, value in given.items():
        if not isinstance(value, Tensor):
            raise TorchLeanError(f"func.functional_call: {name!r} must be a tensor, found "
                                 f"{type(value).__name__}")
    if tie_weights:  # a tied parameter given under one name is used under all of its names
        by_id: dict[int, list[str]] = {}
        for name, value in known.items():
            by_id.setdefault(id(value), []).append(name)
        for name in list(given):
            for other in by_id.get(id(known[name]), []):
                given.setdefault(other, given[name])
    swapped: list[tuple[dict[str, Any], str, Any]] = []
    try:
        for name, value in given.items():
            owner, leaf = _owner(module, name)
            table = owner._parameters if leaf in owner._parameters else owner._buffers
            swapped.append((table, leaf, table[leaf]))
            table[leaf] = value
        call_args = () if args is None else (args if isinstance(args, tuple) else (args,))
        return module(*call_args, **(kwargs or {}))
    finally:
        for table, leaf, old in reversed(swapped):
            table[leaf] = old


def stack_module_state(models: Sequence[Module]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The parameters and buffers of same-shaped models stacked on a new first axis, for
    ``vmap(functional_call...)`` over an ensemble: ``(params, buffers)``; the stacked parameters
    are new leaves that require grad where the originals do."""
    models = list(models)
    if not models or not all(isinstance(m, Module) for m in models):
        raise TorchLeanError("func.stack_module_state: expected a non-empty sequence of Modules")
    names = [n for n, _ in models[0].named_parameters()]
    buffer_names = [n for n, _ in models[0].named_buffers()]
    for m in models[1:]:
        if [n for n, _ in m.named_parameters()] != names or \
                [n for n, _ in m.named_buffers()] != buffer_names:
            raise TorchLeanError("func.stack_module_state: the models do not have the same "
                                 "parameters and buffers")
    params = {}
    for name in names:
        values = [dict(m.named_parameters())[name] for m in models]
        params[name] = stack([v.detach() for v in values]).requires_grad_(
            values[0].requires_grad)
    buffers = {name: stack([dict(m.named_buffers())[name].detach() for m in models])
               for name in buffer_names}
    return params, buffers
