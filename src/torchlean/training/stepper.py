"""One loss-and-gradients pass, eager or compiled: the path ``ScalarTrainer`` and ``fit`` share.

``Stepper(fn, opts)`` records ``fn`` on a fresh eager tape per call, or traces it once per input
shape and replays the compiled graph (on a device, optionally from a captured CUDA graph).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.backend import as_dtype
from ..core.errors import DeviceError, ShapeError
from ..core.kernels import array_on
from ..core.registry import fast_kernels
from ..engine import anomaly
from ..engine.ops_interface import Ref
from ..engine.params import Param
from ..engine.session import Options, Session
from ..engine.transforms import Compiled
from ..ops.fast import blas as fast_blas
from . import cuda_graph


class Stepper:
    """Value and parameter gradients of one pass, eager or compiled: the one path that
    ``ScalarTrainer`` and ``train.fit`` share.

    ``fn(owner, *input_refs)`` builds the output; parameters enter through ``owner.use(param)``
    (as ``nn`` layers do). Inputs are data (no gradient). On the compiled backend one graph is
    traced per key (the input shapes plus ``extra_key``) and reused; on the eager backend each
    call records a fresh tape and frees it before returning (holding a step's arrays while the
    next one allocates defeats the allocator's reuse: measured 6.4 -> 3.9 ms per MLP step).

    On a device (``opts.device``) inputs given as host data are uploaded explicitly, once per
    call; inputs already there are used without a copy; parameters are moved there once and then
    read where they live, so an optimiser's in-place update is seen by the next call with no
    upload. Results (value, gradients) are device arrays.
    """

    def __init__(self, fn: Callable[..., Ref], opts: Options) -> None:
        self.fn = fn
        self.opts = opts
        self.dtype = as_dtype(opts.dtype)
        self._compiled: dict[tuple[Any, ...], Compiled] = {}
        self._ungraphed: set[Compiled] = set()  # auto mode: capture failed, run them plainly
        self._session = Session(opts)
        self.xp = self._session.xp

    def _graphed(self, c: Compiled, xs: Sequence[Any]) -> tuple[Any, tuple[Any, ...]]:
        """``c.value_and_backward(*xs)`` replayed from a captured CUDA graph. The gradients are
        the graph's buffers, overwritten by the next step (``Param.accumulate_grad`` and the
        optimisers consume them within the step). In auto mode (``cuda_graph=None``) a capture
        that fails warns once and this compiled step runs plainly from then on."""
        try:
            return cuda_graph.maybe_graphed(c, xs)
        except DeviceError as exc:
            if self.opts.cuda_graph:
                raise
            warnings.warn(f"{exc}; running this compiled step without a CUDA graph "
                          "(Options(cuda_graph=False) silences this)", RuntimeWarning,
                          stacklevel=3)
            self._ungraphed.add(c)
            return c.value_and_backward(*xs)  # type: ignore[no-any-return]

    def _arrays(self, inputs: Sequence[Any]) -> list[Any]:
        xp, dtype = self.xp, self.dtype
        if xp is np:
            return [x.astype(dtype, copy=False) if type(x) is np.ndarray
                    else array_on("input", x, np).astype(dtype, copy=False) for x in inputs]
        return [x if isinstance(x, xp.ndarray) and x.dtype == dtype
                else array_on("input", x, xp).astype(dtype, copy=False) for x in inputs]

    def compiled_for(self, xs: Sequence[Any], extra_key: Any = ()) -> Compiled:
        key = (tuple(x.shape for x in xs), extra_key)
        c = self._compiled.get(key)
        if c is None:
            # The inputs are data (wrt=()): only the parameters met while tracing get gradients.
            c = self._compiled[key] = Compiled(self.fn, [x.shape for x in xs], dtype=self.dtype,
                                               wrt=(), owner_arg=True, device=self.opts.device)
        return c

    def forward(self, inputs: Sequence[Any], extra_key: Any = ()) -> Any:
        # The kernel set of ``Options.fast_kernels`` (registry.fast_kernels), for this pass only.
        with fast_kernels(self.opts.fast_kernels):
            return self._forward(inputs, extra_key)

    def _forward(self, inputs: Sequence[Any], extra_key: Any) -> Any:
        xs = self._arrays(inputs)
        if self.opts.backend == "compiled":
            return self.compiled_for(xs, extra_key).forward(*xs)
        s = self._session
        s.reset()
        out = self.fn(s._backend, *[s.input(x, requires_grad=False) for x in xs])
        value = s.value(out)
        s.reset()
        return value

    def sgd_step(self, inputs: Sequence[Any], lr: float) -> tuple[Any, list[Param]] | None:
        """One plain SGD step (``p -= lr * grad`` for every trainable parameter) run as the
        compiled graph's generated plan, which updates the parameters in place
        (``Compiled.sgd_step``): the loss and the parameters it updated; or ``None``, having
        changed nothing, where the general path must run. Only compiled host training under
        the fast kernels, without the finite check, and with NumPy's BLAS and SciPy's at one
        thread (above one, NumPy's threaded GEMM beats the one-thread GEMM this plan calls:
        ``ops.fast.blas``)."""
        opts = self.opts
        if (opts.backend != "compiled" or self.xp is not np or not opts.fast_kernels
                or opts.check_finite or fast_blas.scipy_blas() is None
                or not fast_blas.serial() or not fast_blas.numpy_serial()):
            return None
        with fast_kernels(True):
            xs = self._arrays(inputs)
            c = self.compiled_for(xs)
            if c.out_shape != ():
                return None  # (the general path names the error)
            update = [False] * len(xs) + [p.requires_grad for p in c.params]
            value = c.sgd_step(xs, lr, update)
        if value is None:
            return None
        return value, [p for p in c.params if p.requires_grad]

    def value_and_grads(self, inputs: Sequence[Any], extra_key: Any = (),
                        on_param_grad: Callable[[Param, Any], None] | None = None
                        ) -> tuple[Any, list[tuple[Param, Any]]]:
        """The scalar output and ``(param, gradient or None)`` for every parameter used.

        ``on_param_grad(param, g)`` is called during the reverse pass as soon as a trainable
        parameter's gradient is final (data-parallel training starts its allreduce there).
        Runs the fast kernels when ``Options.fast_kernels`` (the default)."""
        with fast_kernels(self.opts.fast_kernels):
            return self._value_and_grads(inputs, extra_key, on_param_grad)

    def _value_and_grads(self, inputs: Sequence[Any], extra_key: Any,
                         on_param_grad: Callable[[Param, Any], None] | None
                         ) -> tuple[Any, list[tuple[Param, Any]]]:
        xs = self._arrays(inputs)
        if self.opts.backend == "compiled":
            c = self.compiled_for(xs, extra_key)
            if c.out_shape != ():
                raise ShapeError(f"loss has shape {c.out_shape}, expected a scalar ()")
            on_input = None
            if on_param_grad is not None:
                first, params, report = len(xs), c.params, on_param_grad

                def on_input(k: int, g: Any) -> None:
                    if k >= first and params[k - first].requires_grad:
                        report(params[k - first], g)

            if on_input is None and self.opts.graphs_steps and c not in self._ungraphed:
                value, grads = self._graphed(c, xs)
            else:
                value, grads = c.value_and_backward(*xs, on_input=on_input)
            if self.opts.check_finite:  # names the first non-finite node, forward or reverse
                anomaly.check_graph_run(c, xs, value, grads)
            pairs = [(p, g if p.requires_grad else None)
                     for p, g in zip(c.params, grads[len(xs):], strict=True)]
            return value, pairs
        s = self._session
        s.reset()
        backend = s._backend
        # The batch as data leaves without a copy: the tape is freed before this returns, so
        # no later edit of the caller's arrays can reach it (W2: one 400 KB copy a step).
        out = self.fn(backend, *[backend.leaf("input", x, False, copy=False) for x in xs])
        if not isinstance(out, Ref) or out.shape != ():
            raise ShapeError("loss must be a scalar ref")
        on_leaf = None
        if on_param_grad is not None:
            used, report_param = backend.params, on_param_grad

            def on_leaf(i: int, g: Any) -> None:
                param = used.get(i)
                if param is not None and param.requires_grad:
                    report_param(param, g)

        # Only the parameters' cotangents are read (fused reverse steps allowed), except when
        # the finite check below names the first non-finite node of the whole pass.
        by_id = backend.linked_tape().backward_scalar(out.id, on_leaf,
                                                      leaves_only=not self.opts.check_finite)
        if self.opts.check_finite:  # forward values were checked as they were recorded
            anomaly.check_tape_grads(backend.linked_tape(), by_id)
        value = s.value(out)
        pairs = [(p, by_id.get(i) if p.requires_grad else None)
                 for i, p in sorted(backend.params.items())]
        s.reset()
        return value, pairs
