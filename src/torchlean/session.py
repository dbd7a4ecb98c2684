"""The PyTorch-style front-end (TorchLean's Torch session): Options, Session, refs, ParamList,
ScalarTrainer.

A ``Session`` records one forward pass, either eagerly on a ``Tape`` (values computed as each op
is recorded) or as a compiled ``Graph`` (values computed when asked for, then backward runs on the
graph's linked tape). User code is the same for both: ``F.*`` and operators on ``TensorRef``s.
Parameters (``Param``) live across sessions; ``backward`` accumulates into ``param.grad`` like
PyTorch's ``loss.backward()``.

Randomness (``rand_uniform``, ``bernoulli_mask``, ``dropout``) is counter-based: draw k of a session
uses key ``seed + k``, so the same seed gives the same bits in both backends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import functional as F
from .backend import as_dtype, check_device, namespace_for, numeric_array, to_host
from .errors import ShapeError, TapeError, TorchLeanError
from .functional import NatRef, Ref
from .graph import Graph, GraphBuilder
from .ops.registry import Primitive
from .params import Param
from .shape import as_shape
from .tape import Tape
from .transforms import Compiled

BACKENDS = ("eager", "compiled")


@dataclass(frozen=True)
class Options:
    """How a session runs. ``fast_kernels`` is accepted for TorchLean parity: the NumPy kernels
    are always the fast ones, and the spec layer is what the verification suite compares with."""

    backend: str = "eager"
    device: str = "cpu"
    dtype: str = "float32"
    seed: int = 0
    requires_grad_by_default: bool = True
    fast_kernels: bool = True
    check_finite: bool = False

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise TorchLeanError(f"Options: backend must be one of {BACKENDS}, found "
                                 f"{self.backend!r}")
        check_device(self.device)
        as_dtype(self.dtype)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise TorchLeanError(f"Options: seed must be a non-negative int, found {self.seed!r}")


class TensorRef(Ref):
    """A value recorded in a session; use it with F.* and operators."""

    __slots__ = ()


class Session:
    """One recorded forward pass over parameters, inputs and constants. See the module docstring."""

    def __init__(self, opts: Options | None = None) -> None:
        self.opts = opts or Options()
        self.dtype = as_dtype(self.opts.dtype)
        self.xp = namespace_for(self.opts.device)
        self._optimizers: dict[tuple[Any, ...], Any] = {}
        self.reset()

    # --- lifecycle ---------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the recorded pass (parameters and optimiser state are kept)."""
        self._params: dict[int, Param] = {}       # node id -> Param
        self._param_ids: dict[int, int] = {}      # id(Param) -> node id
        self._random_draws = 0
        if self.opts.backend == "eager":
            self.tape: Tape | None = Tape(self.dtype, self.opts.device, self.opts.check_finite)
            self._builder: GraphBuilder | None = None
        else:
            self.tape = None
            self._builder = GraphBuilder(Graph(self.dtype))
            self._leaf_values: list[Any] = []
            self._linked: tuple[int, Tape] | None = None

    @property
    def graph(self) -> Graph:
        """The recorded graph (compiled backend only)."""
        if self._builder is None:
            raise TorchLeanError("graph: the eager backend records a tape, not a graph")
        return self._builder.graph

    # --- leaves ------------------------------------------------------------------------------

    def _leaf(self, op: str, array: Any, requires_grad: bool, name: str | None = None) -> TensorRef:
        """A leaf holding ``array`` converted to the session's dtype (the one place data of
        another dtype enters; inside ops, mixed dtypes are an error)."""
        if self.tape is not None:
            arr = self.tape.as_array(op, array)
            if arr.dtype.kind == "f" and arr.dtype != self.dtype:
                arr = arr.astype(self.dtype)
            return self._ref(self.tape.leaf(arr, name=name, requires_grad=requires_grad))
        assert self._builder is not None
        arr = numeric_array(op, to_host(array) if not isinstance(array, list | tuple | float | int)
                            else array).astype(self.dtype)
        if requires_grad:
            var = self._builder.input(arr.shape)
            self._leaf_values.append(arr)
        else:
            var = self._builder.const(arr)
        self._linked = None
        return TensorRef(self, var._id, var.shape, var.dtype)

    def _ref(self, node_id: int) -> TensorRef:
        assert self.tape is not None
        value = self.tape.nodes[node_id].value
        return TensorRef(self, node_id, tuple(value.shape), value.dtype)

    def use(self, param: Param) -> TensorRef:
        """The ref of a parameter in this pass (the same ref if used twice)."""
        if not isinstance(param, Param):
            raise TorchLeanError(f"use: expected a Param, found {type(param).__name__}")
        node = self._param_ids.get(id(param))
        if node is not None:
            return self._ref_for(node)
        ref = self._leaf("use", param.data, param.requires_grad, param.name)
        self._params[ref._id] = param
        self._param_ids[id(param)] = ref._id
        return ref

    def _ref_for(self, node_id: int) -> TensorRef:
        if self.tape is not None:
            return self._ref(node_id)
        assert self._builder is not None
        var = self._builder.var(node_id)
        return TensorRef(self, node_id, var.shape, var.dtype)

    def input(self, array: Any, requires_grad: bool | None = None) -> TensorRef:
        """A data leaf. Integer arrays become float leaves (class labels) without gradient."""
        arr = numeric_array("input", array) if isinstance(array, list | tuple | int | float) \
            else array
        is_int = getattr(arr, "dtype", np.dtype(float)).kind in "iub"
        if requires_grad is None:
            requires_grad = self.opts.requires_grad_by_default and not is_int
        if is_int and requires_grad:
            raise TorchLeanError("input: integer data cannot require gradient")
        return self._leaf("input", arr, bool(requires_grad))

    def const(self, array: Any) -> TensorRef:
        """A constant leaf (never receives gradient)."""
        return self._leaf("const", array, False)

    def nat(self, i: int) -> NatRef:
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or i < 0:
            raise TorchLeanError(f"nat: expected a non-negative int, found {i!r}")
        return NatRef(int(i))

    def nat_vec(self, ints: Iterable[int]) -> NatRef:
        if not isinstance(ints, np.ndarray | Iterable):
            raise TorchLeanError(f"nat_vec: expected a vector of non-negative ints, found {ints!r}")
        arr = numeric_array("nat_vec", list(ints) if not isinstance(ints, np.ndarray) else ints)
        if arr.ndim != 1 or (arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0)):
            raise TorchLeanError(f"nat_vec: expected a vector of non-negative ints, found {ints!r}")
        return NatRef(arr.astype(np.int64))

    # --- recording (the owner protocol used by F) ----------------------------------------------

    def apply(self, prim: Primitive, refs: Sequence[Ref], attrs: dict[str, Any]) -> TensorRef:
        attrs = {k: (v.value if isinstance(v, NatRef) else v) for k, v in attrs.items()}
        for r in refs:
            if r._owner is not self:
                raise TorchLeanError(f"{prim.name}: a ref from another session or graph was used")
        if self.tape is not None:
            return self._ref(self.tape.record(prim, [r._id for r in refs], attrs))
        assert self._builder is not None
        var = self._builder.apply(prim, [self._builder.var(r._id) for r in refs], attrs)
        self._linked = None
        return TensorRef(self, var._id, var.shape, var.dtype)

    # --- randomness --------------------------------------------------------------------------

    def _next_counter(self) -> int:
        self._random_draws += 1
        return self._random_draws - 1

    def rand_uniform(self, shape: Sequence[int]) -> TensorRef:
        """U[0, 1) of ``shape`` from the session seed and its next draw counter."""
        target = as_shape("rand_uniform", shape)  # checked before the draw counter moves
        return self._nullary("rand_uniform", shape=target, seed=self.opts.seed,
                             counter=self._next_counter())

    def bernoulli_mask(self, keep_prob: Any, shape: Sequence[int]) -> TensorRef:
        """{0, 1} mask with P(1) = keep_prob (a scalar ref or number)."""
        # Check everything before a keep_prob constant is recorded or the draw counter moves.
        target = as_shape("bernoulli_mask", shape)
        if isinstance(keep_prob, Ref):
            self._check_ref("bernoulli_mask", keep_prob)
        else:
            keep_prob = numeric_array("bernoulli_mask", keep_prob)
        if tuple(keep_prob.shape) != ():
            raise ShapeError(f"bernoulli_mask: keep_prob must be a scalar (), found "
                             f"{tuple(keep_prob.shape)}")
        kp = keep_prob if isinstance(keep_prob, Ref) else self.const(keep_prob)
        return F.apply("bernoulli_mask", kp, shape=target, seed=self.opts.seed,
                       counter=self._next_counter())

    def _nullary(self, name: str, **attrs: Any) -> TensorRef:
        from .ops.registry import REGISTRY

        return self.apply(REGISTRY[name], [], attrs)

    def dropout(self, x: Ref, p: float, training: bool = True) -> Ref:
        """Inverted dropout: zero each entry with probability p, scale the rest by 1/(1-p)."""
        if isinstance(p, bool) or not isinstance(p, int | float | np.integer | np.floating) \
                or not 0 <= p < 1:
            raise TorchLeanError(f"dropout: p must be a number in [0, 1), found {p!r}")
        if not training or p == 0:
            return x
        mask = self.bernoulli_mask(1.0 - p, x.shape)
        return F.apply("scale", F.apply("mul", x, mask), c=1.0 / (1.0 - p))

    def detach(self, x: Ref) -> Ref:
        return F.apply("detach", x)

    # --- reading and differentiating ---------------------------------------------------------

    def _check_ref(self, op: str, ref: Any) -> int:
        if not isinstance(ref, Ref) or ref._owner is not self:
            raise TapeError(f"{op}: expected a ref recorded in this session, found {ref!r}")
        return ref._id

    def _linked_tape(self) -> Tape:
        """The compiled graph replayed on its linked runtime tape (cached until it grows)."""
        if self.tape is not None:
            return self.tape
        assert self._builder is not None
        graph = self._builder.graph
        if self._linked is None or self._linked[0] != len(graph):
            graph.outputs = [len(graph) - 1] if len(graph) else []
            tape, _, _ = graph.to_tape(self._leaf_values)
            self._linked = (len(graph), tape)
        return self._linked[1]

    def value(self, ref: Ref) -> Any:
        return self._linked_tape().value(self._check_ref("value", ref))

    def backward(self, out: Ref, seed: Any = None) -> dict[int, Any]:
        """Cotangents of the reached nodes (keyed by ref id); accumulates into ``Param.grad``."""
        out_id = self._check_ref("backward", out)
        tape = self._linked_tape()
        if seed is None:
            if out.shape != ():
                raise ShapeError(f"backward: output has shape {out.shape}; a non-scalar output "
                                 "needs an explicit seed")
            grads = tape.backward_scalar(out_id)
        else:
            grads = tape.backward(out_id, seed)
        for node_id, param in self._params.items():
            g = grads.get(node_id)
            if g is not None and param.requires_grad:
                param.grad = g.copy() if param.grad is None else param.grad + g
        return grads

    def grad(self, grads: dict[int, Any], ref: Ref) -> Any:
        """The gradient of ``ref`` in ``grads`` (zeros when it was not reached)."""
        node_id = self._check_ref("grad", ref)
        g = grads.get(node_id)
        return self.xp.zeros(ref.shape, dtype=ref.dtype) if g is None else g

    def jvp(self, out: Ref, tangents: dict[Ref, Any]) -> Any:
        """Forward-mode tangent of ``out`` given tangents of some refs (both backends)."""
        out_id = self._check_ref("jvp", out)
        if not isinstance(tangents, dict):
            raise TapeError(f"jvp: tangents must be a dict {{ref: tangent}}, found "
                            f"{type(tangents).__name__}")
        seeds = {self._check_ref("jvp", r): t for r, t in tangents.items()}
        return self._linked_tape().jvp(out_id, seeds)

    # --- optimiser steps ---------------------------------------------------------------------

    def params(self) -> list[Param]:
        """The parameters used in this pass, in first-use order."""
        return [self._params[i] for i in sorted(self._params)]

    def _grads_for(self, params: list[Param], grads: dict[int, Any]) -> list[Any]:
        return [grads.get(self._param_ids[id(p)]) for p in params]

    def _optimizer(self, kind: str, params: list[Param], **hyper: Any) -> Any:
        from . import optim

        key = (kind,) + tuple(id(p) for p in params)
        opt = self._optimizers.get(key)
        if opt is None:
            opt = getattr(optim, kind)(params, **hyper)
            self._optimizers[key] = opt
        else:
            # Same parameters as before: keep the state, take this call's hyper-parameters.
            flat = dict(hyper)
            if "betas" in flat:
                flat["beta1"], flat["beta2"] = flat.pop("betas")
            opt._set_hyper({**opt.hyper, **flat})
        return opt

    def sgd_step(self, lr: float, grads: dict[int, Any]) -> None:
        """p <- p - lr * g for every used parameter that requires grad."""
        params = [p for p in self.params() if p.requires_grad]
        self._optimizer("SGD", params, lr=lr).step(self._grads_for(params, grads))

    def adam_step(self, lr: float, grads: dict[int, Any], beta1: float = 0.9,
                  beta2: float = 0.999, eps: float = 1e-8) -> None:
        """One Adam step (torch.optim.Adam's formula); state persists across ``reset``."""
        params = [p for p in self.params() if p.requires_grad]
        self._optimizer("Adam", params, lr=lr, betas=(beta1, beta2), eps=eps).step(
            self._grads_for(params, grads))

    def adamw_step(self, lr: float, grads: dict[int, Any], beta1: float = 0.9,
                   beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        """One AdamW step (decoupled weight decay, torch.optim.AdamW's formula)."""
        params = [p for p in self.params() if p.requires_grad]
        self._optimizer("AdamW", params, lr=lr, betas=(beta1, beta2), eps=eps,
                        weight_decay=weight_decay).step(self._grads_for(params, grads))


class ParamList:
    """An ordered list of parameters made from arrays, with per-parameter requires_grad flags."""

    def __init__(self, arrays: Sequence[Any], requires_grad: Sequence[bool] | None = None,
                 names: Sequence[str] | None = None, dtype: Any = "float32") -> None:
        flags = list(requires_grad) if requires_grad is not None else [True] * len(arrays)
        if len(flags) != len(arrays):
            raise TorchLeanError(f"ParamList: {len(arrays)} arrays but {len(flags)} "
                                 "requires_grad flags")
        labels = list(names) if names is not None else [str(i) for i in range(len(arrays))]
        self.params = [a if isinstance(a, Param) else Param(a, name=n, requires_grad=f,
                                                            dtype=dtype)
                       for a, f, n in zip(arrays, flags, labels, strict=True)]

    def __len__(self) -> int:
        return len(self.params)

    def __getitem__(self, i: int) -> Param:
        return self.params[i]

    def __iter__(self) -> Any:
        return iter(self.params)

    def values(self) -> list[Any]:
        return [p.value for p in self.params]

    def set_values(self, values: Sequence[Any]) -> None:
        if len(values) != len(self.params):
            raise ShapeError(f"ParamList.set_values: {len(values)} values for "
                             f"{len(self.params)} params")
        for p, v in zip(self.params, values, strict=True):
            if tuple(np.shape(v)) != p.shape:  # check all before changing any
                raise ShapeError(f"ParamList.set_values: {p.name}: shape {np.shape(v)}, "
                                 f"expected {p.shape}")
        for p, v in zip(self.params, values, strict=True):
            p.assign(v)

    def sgd_step(self, lr: float, grads: Sequence[Any]) -> None:
        """p <- p - lr * g, skipping frozen parameters and missing gradients."""
        if len(grads) != len(self.params):
            raise ShapeError(f"ParamList.sgd_step: {len(grads)} grads for {len(self.params)} "
                             "params")
        for p, g in zip(self.params, grads, strict=True):
            if p.requires_grad and g is not None:
                if tuple(np.shape(g)) != p.shape:
                    raise ShapeError(f"ParamList.sgd_step: grad {np.shape(g)} for {p.shape}")
        for p, g in zip(self.params, grads, strict=True):
            if p.requires_grad and g is not None:
                p.assign(p.data - lr * g)

    def parameters(self) -> list[Param]:
        return list(self.params)

    def state_dict(self) -> dict[str, Any]:
        return {p.name or str(i): p.value for i, p in enumerate(self.params)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        keys = [p.name or str(i) for i, p in enumerate(self.params)]
        missing = [k for k in keys if k not in state]
        if missing or set(state) - set(keys):
            raise ShapeError(f"ParamList.load_state_dict: missing {missing}, unexpected "
                             f"{sorted(set(state) - set(keys))}")
        self.set_values([state[k] for k in keys])


class ScalarTrainer:
    """Parameters plus a scalar loss ``loss_fn(*param_refs, *input_refs)`` written against F.

    ``forward``/``backward``/``step`` run on the eager tape or, with ``backend="compiled"``, on a
    graph traced once per distinct input shape and reused.
    """

    def __init__(self, params: Sequence[Any], loss_fn: Callable[..., Ref],
                 opts: Options | None = None) -> None:
        self.opts = opts or Options()
        self.param_list = params if isinstance(params, ParamList) else ParamList(
            list(params), dtype=self.opts.dtype)
        self.loss_fn = loss_fn
        self._compiled: dict[tuple[Any, ...], Compiled] = {}
        self._session = Session(self.opts)

    def params(self) -> list[Any]:
        return self.param_list.values()

    def _inputs(self, inputs: Sequence[Any]) -> list[Any]:
        dtype = as_dtype(self.opts.dtype)
        return [np.asarray(x).astype(dtype, copy=False) for x in inputs]

    def _compiled_for(self, inputs: list[Any]) -> Compiled:
        shapes = tuple(p.shape for p in self.param_list) + tuple(x.shape for x in inputs)
        c = self._compiled.get(shapes)
        if c is None:
            # Only trainable parameters are differentiable: no rule computes a data cotangent.
            wrt = [k for k, p in enumerate(self.param_list) if p.requires_grad]
            c = Compiled(self.loss_fn, shapes, dtype=self.opts.dtype, wrt=wrt)
            if c.out_shape != ():
                raise ShapeError(f"ScalarTrainer: loss has shape {c.out_shape}, expected scalar")
            self._compiled[shapes] = c
        return c

    def value_and_grads(self, *inputs: Any) -> tuple[float, list[Any]]:
        if self.opts.backend == "compiled":
            xs = self._inputs(inputs)
            c = self._compiled_for(xs)
            loss, all_grads = c.value_and_backward(*[p.data for p in self.param_list], *xs)
            n = len(self.param_list)
            return float(loss), [g if p.requires_grad else None
                                 for p, g in zip(self.param_list, all_grads[:n], strict=True)]
        s = self._session
        s.reset()
        refs = [s.use(p) for p in self.param_list]
        loss = self.loss_fn(*refs, *[s.input(x, requires_grad=False) for x in inputs])
        if not isinstance(loss, Ref) or loss.shape != ():
            raise ShapeError("ScalarTrainer: loss_fn must return a scalar ref")
        by_id = s.tape.backward_scalar(loss._id) if s.tape is not None else {}
        value = float(s.value(loss))
        grads = [by_id.get(r._id) if p.requires_grad else None
                 for p, r in zip(self.param_list, refs, strict=True)]
        # Free the tape now, not at the next step: holding a step's arrays while the next one
        # allocates defeats the allocator's reuse (measured: 6.4 -> 3.9 ms per MLP step).
        s.reset()
        return value, grads

    def forward(self, *inputs: Any) -> float:
        if self.opts.backend == "compiled":
            xs = self._inputs(inputs)
            return float(self._compiled_for(xs).forward(*[p.data for p in self.param_list], *xs))
        return self.value_and_grads(*inputs)[0]

    def backward(self, *inputs: Any) -> list[Any]:
        """One gradient per parameter (zeros for unreached, None for frozen)."""
        _, grads = self.value_and_grads(*inputs)
        return [None if g is None and not p.requires_grad else
                (np.zeros(p.shape, p.dtype) if g is None else g)
                for p, g in zip(self.param_list, grads, strict=True)]

    def _step(self, kind: str, inputs: Sequence[Any], **hyper: Any) -> float:
        loss, grads = self.value_and_grads(*inputs)
        params = [p for p in self.param_list if p.requires_grad]
        chosen = [g for p, g in zip(self.param_list, grads, strict=True) if p.requires_grad]
        self._session._optimizer(kind, params, **hyper).step(chosen)
        return loss

    def step(self, lr: float, *inputs: Any) -> float:
        """One SGD step; returns the loss before the step."""
        return self._step("SGD", inputs, lr=lr)

    def adam_step(self, lr: float, beta1: float, beta2: float, eps: float, *inputs: Any) -> float:
        return self._step("Adam", inputs, lr=lr, betas=(beta1, beta2), eps=eps)

    def adamw_step(self, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float,
                   *inputs: Any) -> float:
        return self._step("AdamW", inputs, lr=lr, betas=(beta1, beta2), eps=eps,
                          weight_decay=weight_decay)
