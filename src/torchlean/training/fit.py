"""Training helpers (TorchLean's Train.TapeM) and a small ``fit`` loop.

``mean_scalar_over`` is the seed's mean of per-sample scalar losses: a left-to-right sum scaled by
1/N. ``fit`` trains a module on a ``Dataset`` with any optimiser, on the eager tape or on a graph
compiled once per batch shape, and reports per-epoch metrics (with a tqdm progress bar when tqdm
is installed and the output is a terminal).

Batch order: one NumPy generator per run, ``numpy.random.default_rng(SeedSequence(seed))``,
draws each epoch's permutation in turn (``epoch_orders``). Epochs of one run and runs of
different seeds are therefore independent draws (a run does not see another seed's epochs
shifted by one, as a seed of ``seed + epoch`` per epoch would make it), and the same seed gives
the same batches on every run.

On a device (``fit(..., device="cuda")``, or a model already moved there with ``model.to``)
everything that moves between host and device moves explicitly, and only this: the parameters
once (``model.to``; they stay there after ``fit``), each batch's inputs and labels once per step
(two uploads), the step's loss once per step (one 0-d download, so a NaN stops training at the
batch that produced it, as on the CPU), the parameters once per epoch (the last finite state kept
in case training diverges), and in evaluation each batch's inputs, the labels once and the
metric counts once. The optimiser updates the parameters where they live.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..core.backend import check_device, namespace_for, namespace_of, on_host, to_device, to_host
from ..core.errors import DeviceError, ShapeError, TorchLeanError
from ..data import Dataset
from ..engine import anomaly
from ..engine.ops_interface import Ref
from ..engine.session import Options, Session
from .distributed import DataParallel, communicator, data_crc
from .stepper import Stepper

__all__ = ["Dataset", "mean_scalar_over", "fit", "evaluate", "EpochMetrics", "epoch_orders"]


def mean_scalar_over(xs: Iterable[Any], loss_of: Callable[[Any], Any]) -> Any:
    """(loss_of(x_1) + ... + loss_of(x_N)) / N, summed left to right; an empty input raises."""
    total = None
    count = 0
    for x in xs:
        loss = loss_of(x)
        shape = loss.shape if isinstance(loss, Ref) else np.shape(loss)
        if tuple(shape) != ():
            raise ShapeError(f"mean_scalar_over: loss_of returned shape {tuple(shape)}, expected "
                             "a scalar")
        total = loss if total is None else total + loss
        count += 1
    if total is None:
        raise TorchLeanError("mean_scalar_over: empty input; the mean of no losses is undefined")
    return total * (1.0 / count)


def epoch_orders(seed: int, size: int, first_epoch: int = 1) -> Iterator[np.ndarray]:
    """The example orders of epochs ``first_epoch``, ``first_epoch + 1``, ... of a run seeded
    ``seed`` over ``size`` examples: successive permutations from one generator seeded with
    ``SeedSequence(seed)`` (the orders of earlier epochs are drawn and dropped, so a run resumed
    at ``first_epoch`` sees the batches the whole run would have)."""
    for name, value, low in (("seed", seed, 0), ("size", size, 0),
                             ("first_epoch", first_epoch, 1)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise TorchLeanError(f"fit: {name} must be an int >= {low}, found {value!r}")
    rng = np.random.default_rng(np.random.SeedSequence(int(seed)))
    for _ in range(int(first_epoch) - 1):
        rng.permutation(size)
    return _permutations(rng, int(size))


def _permutations(rng: np.random.Generator, size: int) -> Iterator[np.ndarray]:
    while True:
        yield rng.permutation(size)


@dataclass
class EpochMetrics:
    """What one epoch of ``fit`` measured."""

    epoch: int
    train_loss: float
    test_loss: float | None = None
    test_accuracy: float | None = None
    examples_per_second: float = 0.0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time in the epoch's training (shared machines)
    extra: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "extra"}
        out.update(self.extra)
        return out


def _labels_as_floats(y: Any, dtype: Any) -> Any:
    # Integer labels travel as float class indices so one compiled graph serves every batch.
    return y.astype(dtype) if y.dtype.kind in "iub" else y.astype(dtype, copy=False)


def _on(xp: Any, x: Any, dtype: Any = None) -> Any:
    """Batch data ``x`` (host or device) as an array of ``xp`` (one explicit upload for host
    data on a device), converted to ``dtype`` if given (on the host, before the upload)."""
    if on_host(x):
        return to_device(np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype), xp)
    x = to_device(x, xp)
    return x if dtype is None else x.astype(dtype, copy=False)


def resolve_device(model: Any, device: str | None, owner: str = "fit") -> str:
    """The device to run ``model`` on: ``device`` (the parameters are moved there) or, for
    ``None``, where its parameters already live (all on one device)."""
    params = list(model.parameters())
    if device is None:
        where = {p.device for p in params}
        if len(where) > 1:
            raise DeviceError(f"{owner}: the model's parameters live on {sorted(where)}; move it "
                              "with model.to(device) or pass device=")
        return where.pop() if where else "cpu"
    if not isinstance(device, str):
        raise DeviceError(f"{owner}: device must be 'cpu' or 'cuda', found {device!r}")
    xp = namespace_for(check_device(device))  # DeviceError when CuPy or a GPU is missing
    for p in params:
        p.on(xp)  # one explicit transfer per parameter that lives elsewhere; then resident
    return device


class _Stepper:
    """Loss and parameter gradients of a batch for ``fit``: two ``session.Stepper``s (the path
    ``ScalarTrainer`` takes too), one for the loss and one for the model's outputs."""

    def __init__(self, model: Any, loss_fn: Callable[[Any, Any], Any], backend: str,
                 dtype: Any, check_finite: bool = False, device: str = "cpu",
                 cuda_graph: bool | None = None) -> None:
        if backend not in ("eager", "compiled"):
            raise TorchLeanError(f"fit: backend must be 'eager' or 'compiled', found {backend!r}")
        self.model = model
        self.dtype = np.dtype(dtype)
        self.device = device
        self.xp = namespace_for(device)
        opts = Options(backend=backend, dtype=self.dtype.name, check_finite=check_finite,
                       device=device, cuda_graph=cuda_graph)
        self._loss = Stepper(lambda owner, x, y: loss_fn(model(x), y), opts)
        self._outputs = Stepper(lambda owner, x: model(x), opts)

    def loss_and_grads(self, x: Any, y: Any,
                       on_param_grad: Callable[[Any, Any], None] | None = None) -> float:
        """Loss of the batch; gradients are accumulated into each parameter's ``.grad``
        (``on_param_grad(param, g)`` also sees each one as soon as it is final). On a device
        the batch is uploaded here (inputs and labels: one transfer each) and the loss read
        back (one 0-d transfer)."""
        xp = self.xp
        value, pairs = self._loss.value_and_grads(
            [_on(xp, x, self.dtype), _labels_as_floats(_on(xp, y), self.dtype)],
            extra_key=self.model.training, on_param_grad=on_param_grad)
        for p, g in pairs:
            if g is not None:
                p.accumulate_grad(g)
        return float(to_host(value))

    def outputs(self, x: Any) -> Any:
        """The model's outputs for a batch, where the model runs (a device array on a device).
        """
        return self._outputs.forward([_on(self.xp, x, self.dtype)],
                                     extra_key=(self.model.training, _buffers_key(self.model)))


def _buffers_key(model: Any) -> Any:
    """A key of the model's buffers' values (batch norm's running statistics): a graph traced
    in eval mode holds them as constants, so a new value needs a new graph."""
    named = getattr(model, "named_buffers", None)
    if named is None:
        return ()
    return hash(tuple(np.asarray(to_host(b.array)).tobytes() for _, b in named()))


def _default_metrics(outputs: Any, targets: Any) -> dict[str, float]:
    """Loss-independent metrics: accuracy when targets are class labels (counted where the
    outputs live; the count is the one value read back)."""
    if targets.dtype.kind in "iu" and outputs.shape[:-1] == targets.shape:
        right = int(to_host((outputs.argmax(axis=-1) == targets).sum()))
        return {"accuracy": right / targets.size if targets.size else float("nan")}
    return {}


def evaluate(model: Any, loss_fn: Callable[[Any, Any], Any], data: Dataset,
             batch_size: int = 256, backend: str = "eager", dtype: Any = "float32",
             metrics: Callable[[Any, Any], dict[str, float]] = _default_metrics,
             _stepper: _Stepper | None = None, device: str | None = None) -> dict[str, float]:
    """Mean loss and metrics of ``model`` (in eval mode) over ``data``.

    ``device`` as in ``fit`` (``None``: where the parameters live). ``metrics(outputs,
    targets)`` receives arrays where the model ran: on a device, device arrays (compute with
    their namespace and read back what you report, as ``datasets.score`` does)."""
    if _stepper is None:
        _stepper = _Stepper(model, loss_fn, backend, dtype,
                            device=resolve_device(model, device, "evaluate"))
    stepper = _stepper
    xp = stepper.xp
    was_training = model.training
    model.eval()
    try:
        outs = []
        for x, _ in data.batches(batch_size):
            outs.append(stepper.outputs(x))
        outputs = xp.concatenate(outs, axis=0)
        targets = _on(xp, data.targets)  # one upload of every label
        session = Session(Options(dtype=stepper.dtype.name, device=stepper.device))
        loss_ref = loss_fn(session.const(outputs),
                           session.input(_labels_as_floats(targets, stepper.dtype),
                                         requires_grad=False))
        result = {"loss": float(to_host(session.value(loss_ref)))}
        result.update(metrics(outputs, targets))
        return result
    finally:
        if was_training:
            model.train()


def fit(model: Any, loss_fn: Callable[[Any, Any], Any], optimizer: Any, train_data: Dataset,
        epochs: int, batch_size: int = 32, *, test_data: Dataset | None = None,
        backend: str = "eager", seed: int = 0, shuffle: bool = True, progress: bool = True,
        metrics: Callable[[np.ndarray, np.ndarray], dict[str, float]] = _default_metrics,
        on_epoch: Callable[[EpochMetrics], None] | None = None,
        should_stop: Callable[[], bool] | None = None, distributed: Any = False,
        check_every: int = 0, check_finite: bool = False,
        device: str | None = None, cuda_graph: bool | None = None,
        objective: Any = None, first_epoch: int = 1) -> list[EpochMetrics]:
    """Train ``model`` for ``epochs`` and return one ``EpochMetrics`` per epoch.

    ``loss_fn(outputs_ref, targets_ref)`` returns a scalar ref (for example ``F.cross_entropy``;
    integer labels arrive as float class indices, which it accepts). With ``shuffle`` each epoch
    takes the next permutation of one generator seeded with ``seed`` (``epoch_orders``), so a run
    is reproducible and its epochs, and runs of different seeds, are independent draws.
    ``first_epoch=k`` resumes a run at its epoch ``k`` (numbered from 1): the epochs are numbered
    from ``k`` and see the orders the uninterrupted run would have given them.

    ``distributed=True`` (or a ``torchlean.distributed.Communicator``) trains data-parallel over
    MPI, run under ``mpiexec``: every rank calls ``fit`` with the same arguments, takes its shard
    of each global batch of ``batch_size`` examples, and the averaged gradients make the result
    equal to one process training on the whole batch (``loss_fn`` must be a mean over the
    batch). Only rank 0 shows a progress bar; every rank returns the same history.
    ``check_every=N`` compares a hash of the parameters across ranks every N steps.

    A loss that becomes NaN or infinite stops training with ``anomaly.TrainingDiverged`` (a
    ``DomainError``; its ``history`` holds the epochs completed) and the parameters hold the last
    finite state (restored from the start of the epoch when the step made them non-finite), as
    Keras's ``TerminateOnNaN``. ``check_finite=True`` also checks every forward value and
    gradient (naming the first op and node that produced a non-finite one) and every
    optimiser update (naming the parameter), on both backends.

    ``device="cuda"`` trains on the GPU (CuPy): the parameters are moved there once and stay
    (the optimiser's state follows them at its first step); ``None`` trains where the
    parameters already live. See the module doc for what crosses between host and device.
    Data-parallel training is host-only (``DeviceError``). With ``backend="compiled"`` on a
    device each training step is replayed from a captured CUDA graph (``cuda_graph``: None uses
    one where it applies and falls back with a warning if capture fails, True requires one, False
    never; see ``Options``).

    ``objective`` replaces the training loss (``loss_fn`` still scores the test set): an object
    with ``bind(model, steps_per_epoch, backend, dtype, device, check_finite)``, ``step(x, y)``
    (the batch's loss, gradients accumulated into the parameters), ``postfix()`` (progress-bar
    fields) and ``epoch_stats()`` (merged into each epoch's ``extra``); for example
    ``torchlean.bounds.certified_training.CertifiedTraining`` (certified training).
    Single-process only.
    """
    if not isinstance(check_finite, bool):
        raise TorchLeanError(f"fit: check_finite must be a bool, found {check_finite!r}")
    if not isinstance(epochs, int) or epochs < 1:
        raise TorchLeanError(f"fit: epochs must be a positive int, found {epochs!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise TorchLeanError(f"fit: batch_size must be a positive int, found {batch_size!r}")
    orders = epoch_orders(seed, len(train_data), first_epoch)  # checks seed and first_epoch
    params = list(model.parameters())
    dtype = params[0].dtype if params else np.dtype(np.float32)
    parallel = distributed is not False and distributed is not None
    if parallel and device not in (None, "cpu"):
        raise DeviceError("fit: data-parallel training runs on the host (MPI moves host "
                          f"buffers); found device={device!r}: use device='cpu'")
    device = resolve_device(model, device)
    stepper = _Stepper(model, loss_fn, backend, dtype, check_finite, device, cuda_graph)
    if objective is not None:
        if parallel:
            raise TorchLeanError("fit: a training objective runs in one process; found "
                                 "distributed training")
        objective.bind(model, -(-len(train_data) // batch_size), backend, dtype, device,
                       check_finite)
    if parallel:
        dp = DataParallel(params, optimizer, communicator(distributed), check_every=check_every)
        try:
            dp.start({"epochs": epochs, "batch_size": batch_size, "backend": backend,
                      "seed": seed, "shuffle": shuffle, "dtype": str(dtype),
                      "first_epoch": first_epoch,
                      # polling a stop request is a collective at every batch
                      "should_stop": should_stop is not None,
                      "train_examples": len(train_data),
                      "train_crc": _data_crc(train_data),
                      "test_examples": None if test_data is None else len(test_data)})
            return _fit_epochs(model, loss_fn, optimizer, train_data, epochs, batch_size,
                               test_data, backend, orders if shuffle else None,
                               progress and dp.comm.is_main, metrics, on_epoch, should_stop,
                               stepper, dtype, dp, check_finite, None, first_epoch)
        except BaseException as exc:
            dp.fail(exc)  # aborts every rank unless all of them raise this together
            raise
    return _fit_epochs(model, loss_fn, optimizer, train_data, epochs, batch_size, test_data,
                       backend, orders if shuffle else None, progress, metrics, on_epoch,
                       should_stop, stepper, dtype, None, check_finite, objective, first_epoch)


def _data_crc(data: Dataset) -> int:
    return data_crc(data.inputs, data.targets)


def _fit_epochs(model: Any, loss_fn: Callable[[Any, Any], Any], optimizer: Any,
                train_data: Dataset, epochs: int, batch_size: int, test_data: Dataset | None,
                backend: str, orders: Iterator[np.ndarray] | None, progress: bool,
                metrics: Callable[[np.ndarray, np.ndarray], dict[str, float]],
                on_epoch: Callable[[EpochMetrics], None] | None,
                should_stop: Callable[[], bool] | None, stepper: _Stepper, dtype: Any,
                dp: Any, check_finite: bool = False, objective: Any = None,
                first_epoch: int = 1) -> list[EpochMetrics]:
    """The epoch loop of ``fit``; ``orders`` gives each epoch's example order (``None``: the
    data's own order); ``dp`` (a ``DataParallel``) or ``None`` for one process."""

    def stop_requested() -> bool:
        if should_stop is None:
            return False
        # Every rank must leave the loop at the same batch, or the others wait forever.
        return dp.any_rank(should_stop()) if dp is not None else should_stop()

    history: list[EpochMetrics] = []
    params = list(model.parameters())
    # the last finite state, should training diverge
    saved, saved_epoch = anomaly.snapshot(params), first_epoch
    last_epoch = first_epoch + epochs - 1
    for epoch in range(first_epoch, last_epoch + 1):
        # p.value: the host value (on a device one readback per epoch, reused by snapshot).
        if epoch > first_epoch and all(anomaly.all_finite(p.value) for p in params):
            saved, saved_epoch = anomaly.snapshot(params), epoch
        model.train()
        data = train_data if orders is None else train_data[next(orders)]
        start, cpu_start = time.perf_counter(), time.process_time()
        total, seen = 0.0, 0
        batches = _progress(data.batches(batch_size), -(-len(data) // batch_size),
                            f"epoch {epoch}/{last_epoch}", progress)
        for batch, (x, y) in enumerate(batches, 1):
            optimizer.zero_grad()
            try:
                if objective is not None:
                    loss = objective.step(np.asarray(x, dtype=dtype), np.asarray(y))
                elif dp is None:
                    loss = stepper.loss_and_grads(np.asarray(x, dtype=dtype), np.asarray(y))
                else:
                    loss = dp.loss_and_grads(stepper, x, y)  # casts only its own shard
                if not math.isfinite(loss):
                    raise anomaly.NonFiniteError(f"the loss is {loss}")
                optimizer.step()
                if check_finite:
                    _check_parameters(params, f"{type(optimizer).__name__} step")
            except anomaly.NonFiniteError as exc:
                raise _diverged(exc, params, saved, saved_epoch, epoch, batch, history,
                                check_finite) from None
            total += loss * len(x)
            seen += len(x)
            if hasattr(batches, "set_postfix"):
                batches.set_postfix(loss=f"{loss:.4f}",
                                    **(objective.postfix() if objective is not None else {}))
            if stop_requested():
                break
        seconds = time.perf_counter() - start
        record = EpochMetrics(epoch, total / max(seen, 1), seconds=seconds,
                              examples_per_second=seen / seconds if seconds > 0 else 0.0,
                              cpu_seconds=time.process_time() - cpu_start)
        if test_data is not None:
            result = evaluate(model, loss_fn, test_data, backend=backend, dtype=dtype,
                              metrics=metrics, _stepper=stepper, device=stepper.device)
            record.test_loss = result.pop("loss")
            record.test_accuracy = result.pop("accuracy", None)
            record.extra = result
        if objective is not None:
            record.extra.update(objective.epoch_stats())
        history.append(record)
        if on_epoch is not None:
            on_epoch(record)
        if stop_requested():
            break
    return history


def _diverged(exc: Exception, params: list[Any], saved: list[np.ndarray], saved_epoch: int,
              epoch: int, batch: int, history: list[EpochMetrics],
              check_finite: bool) -> anomaly.TrainingDiverged:
    """Put the parameters in their last finite state and say where training stopped."""
    if all(anomaly.all_finite(p.value) for p in params):
        state = "the parameters are finite and kept"
    else:
        anomaly.restore(params, saved)
        state = f"the parameters are restored to their values at the start of epoch {saved_epoch}"
    hint = "" if check_finite else "; fit(..., check_finite=True) names the op that produced it"
    return anomaly.TrainingDiverged(
        f"fit: stopped at epoch {epoch}, batch {batch}: {exc}; {state}{hint} (a lower learning "
        "rate usually helps)", history, epoch, batch, unchecked=not check_finite)


def _check_parameters(params: list[Any], where: str) -> None:
    """``anomaly.check_parameters`` where the parameters live: on a device the finiteness
    flags are computed there and read back together (one transfer); only when one is false are
    the values read back, to name the parameter."""
    if all(on_host(p.array) for p in params):
        anomaly.check_parameters(params, where)
        return
    xp = namespace_of(params[0].array)
    flags = to_host(xp.stack([xp.isfinite(p.array).all() for p in params]))
    if not flags.all():
        anomaly.check_parameters([SimpleNamespace(name=p.name, data=p.value) for p in params],
                                 where)


def _progress(items: Iterable[Any], total: int, desc: str, enabled: bool) -> Any:
    """A tqdm bar on a terminal when tqdm is installed; the plain iterable otherwise."""
    if not enabled or not sys.stderr.isatty():
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, total=total, desc=desc, leave=False)

