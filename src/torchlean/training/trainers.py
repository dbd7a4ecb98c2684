"""The seed's training front-ends over sessions: ``Session`` with optimiser steps, ``ParamList``
and ``ScalarTrainer``.

``Session`` here is the recording session of ``torchlean.engine.session`` plus the seed's
``sgd_step``/``adam_step``/``adamw_step``, which update the parameters a pass used with the
``tl.optim`` optimisers (kept per parameter set, so momenta persist): recording lives in the
interpreter layer, updating parameters in this one. ``tl.Session`` is this class.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import optim
from ..core.backend import namespace_of, to_host
from ..core.errors import ShapeError, TorchLeanError
from ..core.registry import fast_kernels
from ..engine import anomaly
from ..engine import session as _recording
from ..engine.ops_interface import Ref
from ..engine.params import Param
from ..engine.session import Options
from .stepper import Stepper


class Session(_recording.Session):
    """A recording session (``torchlean.engine.session.Session``) that can also take the seed's
    optimiser steps on the parameters it used."""

    def __init__(self, opts: Options | None = None) -> None:
        super().__init__(opts)
        self._optimizers: dict[tuple[Any, ...], Any] = {}

    def _step(self, kind: str, grads: dict[int, Any], **hyper: Any) -> None:
        params = [p for p in self.params() if p.requires_grad]
        ids = self._backend.param_ids
        with fast_kernels(self.opts.fast_kernels):  # (SGD's in-place axpy: optim.fast_update)
            optimizer_for(self._optimizers, kind, params, **hyper).step(
                [grads.get(ids[id(p)]) for p in params])
        if self.opts.check_finite:
            anomaly.check_parameters(params, f"check_finite ({kind} step)")

    def sgd_step(self, lr: float, grads: dict[int, Any]) -> None:
        """p <- p - lr * g for every used parameter that requires grad."""
        self._step("SGD", grads, lr=lr)

    def adam_step(self, lr: float, grads: dict[int, Any], beta1: float = 0.9,
                  beta2: float = 0.999, eps: float = 1e-8) -> None:
        """One Adam step (torch.optim.Adam's formula); state persists across ``reset``."""
        self._step("Adam", grads, lr=lr, betas=(beta1, beta2), eps=eps)

    def adamw_step(self, lr: float, grads: dict[int, Any], beta1: float = 0.9,
                   beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        """One AdamW step (decoupled weight decay, torch.optim.AdamW's formula)."""
        self._step("AdamW", grads, lr=lr, betas=(beta1, beta2), eps=eps,
                   weight_decay=weight_decay)


def optimizer_for(cache: dict[tuple[Any, ...], Any], kind: str, params: list[Param],
                  **hyper: Any) -> Any:
    """The ``tl.optim`` optimiser of ``kind`` for exactly these parameters, kept in ``cache`` so
    its state (momenta, step counts) persists; this call's hyper-parameters replace the old."""
    key = (kind, *map(id, params))
    opt = cache.get(key)
    if opt is None:
        opt = cache[key] = getattr(optim, kind)(params, **hyper)
    else:
        flat = dict(hyper)
        if "betas" in flat:
            flat["beta1"], flat["beta2"] = flat.pop("betas")
        # A training loop passes the same hyper-parameters every step: when each is a plain
        # float its group already holds (so ``check_hyper`` passed on it), nothing changes.
        for group in opt.param_groups:
            for k, v in flat.items():
                held = dict.get(group, k)
                if type(v) is not float or type(held) is not float or held != v:
                    opt._set_hyper({**opt.hyper, **flat})
                    return opt
    return opt


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
            shape = tuple(v.shape) if hasattr(v, "__array_namespace__") else np.shape(v)
            if tuple(shape) != p.shape:  # check all before changing any
                raise ShapeError(f"ParamList.set_values: {p.name}: shape {shape}, "
                                 f"expected {p.shape}")
        for p, v in zip(self.params, values, strict=True):
            p.assign(v)

    def sgd_step(self, lr: float, grads: Sequence[Any]) -> None:
        """p <- p - lr * g, skipping frozen parameters and missing gradients (``tl.optim.SGD``,
        which checks every gradient before any parameter changes)."""
        if len(grads) != len(self.params):
            raise ShapeError(f"ParamList.sgd_step: {len(grads)} grads for {len(self.params)} "
                             "params")
        optim.SGD(self.params, lr=lr).step(list(grads))

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
    graph traced once per distinct input shape and reused (both through ``Stepper``).
    """

    def __init__(self, params: Sequence[Any], loss_fn: Callable[..., Ref],
                 opts: Options | None = None) -> None:
        self.opts = opts or Options()
        self.param_list = params if isinstance(params, ParamList) else ParamList(
            list(params), dtype=self.opts.dtype)
        self.loss_fn = loss_fn
        self._optimizers: dict[tuple[Any, ...], Any] = {}

        def loss_of(owner: Any, *inputs: Ref) -> Ref:
            loss = loss_fn(*[owner.use(p) for p in self.param_list], *inputs)
            if not isinstance(loss, Ref) or loss.shape != ():
                raise ShapeError("ScalarTrainer: loss_fn must return a scalar ref")
            return loss

        self._stepper = Stepper(loss_of, self.opts)

    def params(self) -> list[Any]:
        return self.param_list.values()

    def value_and_grads(self, *inputs: Any) -> tuple[float, list[Any]]:
        """The loss and one gradient per parameter (``None`` for frozen or unreached ones)."""
        value, pairs = self._stepper.value_and_grads(inputs)
        by_param = {id(p): g for p, g in pairs}
        return float(to_host(value)), [by_param.get(id(p)) for p in self.param_list]

    def forward(self, *inputs: Any) -> float:
        return float(to_host(self._stepper.forward(inputs)))

    def backward(self, *inputs: Any) -> list[Any]:
        """One gradient per parameter (zeros for unreached, None for frozen)."""
        _, grads = self.value_and_grads(*inputs)
        return [None if g is None and not p.requires_grad else
                (namespace_of(p.array).zeros(p.shape, p.dtype) if g is None else g)
                for p, g in zip(self.param_list, grads, strict=True)]

    def _step(self, kind: str, inputs: Sequence[Any], **hyper: Any) -> float:
        params = [p for p in self.param_list if p.requires_grad]
        optimizer = optimizer_for(self._optimizers, kind, params, **hyper)  # (checks hyper)
        if kind == "SGD" and optimizer.plain():
            # One generated plan for the whole step where the stepper can (compiled host
            # training: linear weights updated by their gradient's GEMM, ops.fast.sgd).
            fused = self._stepper.sgd_step(inputs, optimizer.lr)
            if fused is not None:
                value, updated = fused
                optimizer.count_step(updated)
                return float(to_host(value))
        loss, grads = self.value_and_grads(*inputs)
        chosen = [g for p, g in zip(self.param_list, grads, strict=True) if p.requires_grad]
        with fast_kernels(self.opts.fast_kernels):  # (SGD's in-place axpy: optim.fast_update)
            optimizer.step(chosen)
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
