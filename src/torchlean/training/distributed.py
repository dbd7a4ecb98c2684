"""Data-parallel training over MPI: the communicator seam and the gradient averaging of ``fit``.

The seam is ``Communicator``: ``world_size``, ``rank``, ``allreduce_mean`` (a list of arrays
through one fused buffer), ``iallreduce_sum`` (non-blocking, in place), ``broadcast`` from rank
0, ``allgather_bytes``, ``barrier`` and ``abort``. The base class is the single-process world
(the default: no MPI import, every collective is the identity); ``MPICommunicator`` implements
it with mpi4py's buffer interface (never its pickle-based lower-case methods), installed by the
``distributed`` extra (``mpi4py`` + the ``mpich`` wheel, which brings ``mpiexec``).

``DataParallel`` is what ``torchlean.train.fit(..., distributed=True)`` runs:

- start-up: every rank describes its run (parameter names, shapes and dtypes, optimiser and its
  hyper-parameters, batch size, epochs, seed, data size and a CRC of the data); the descriptions
  are all-gathered and any difference is reported, naming the field and each rank's value, on
  every rank (so no rank waits for another). Then parameters and optimiser state are broadcast
  from rank 0, so every rank starts from rank 0's weights.
- each global batch of ``B`` examples (the same seeded shuffle on every rank) is cut into
  ``world_size`` contiguous shards whose sizes differ by at most one; their union is exactly the
  single-process batch. Rank ``r`` computes the mean loss of its ``b_r`` examples and its
  gradients; they are scaled by ``b_r / B`` and summed over ranks, which is the gradient of the
  mean loss over the whole batch (for any loss that is a mean over examples, as
  ``F.cross_entropy`` is), also for an uneven last batch or a rank with an empty shard.
- gradients travel in buckets of about ``bucket_bytes``, in reverse parameter order (the order
  the reverse pass finishes them): each bucket is packed and its ``Iallreduce`` started before
  the next one is packed, and all are waited for before the optimiser step. The overlap is the
  approximation the design allows: buckets start after the backward pass returns (hooking the
  shared reverse driver ``autodiff.run_reverse`` per parameter was judged too invasive), so
  communication overlaps the packing of later buckets, not the backward pass itself.
- with ``check_every = N > 0`` a hash of every parameter is compared across ranks every N
  steps; a difference raises ``DistributedError`` on every rank.
- a rank that raises prints its message (prefixed with its rank) and aborts the communicator,
  which ends every rank at once instead of leaving them blocked in a collective.
- a rank that never gets there (it exited before MPI started, was stopped, or runs something
  else) is caught by the collective watchdog (``training.watchdog``): every wait, ``MPI_Init``
  included, is bounded by a collective timeout (``timeout_s``, ``TORCHLEAN_MPI_TIMEOUT``; 600 s by
  default) and by the liveness of the ranks on this node, and the job is aborted with a message
  naming the missing rank.
- everything that decides the sequence of collectives (``check_every``, the bucket layout,
  whether a stop request is polled, and the settings ``fit`` passes) is compared across ranks
  in the first collective, before any other.

Data-parallel training is host-only: ``DataParallel`` raises ``DeviceError`` for parameters on a
device (``fit`` and ``torchlean train --distributed --device cuda`` refuse before any work).
mpi4py's buffer path moves host memory, and staging every gradient through the host each step
would cost the GPU its advantage; a CUDA-aware MPI path is future work.

The reduction order is fixed: MPICH's allreduce algorithms pick their order from the message
size and the number of ranks, not from timing, so a run is reproducible and every rank ends
with the same bits (checked by the hash).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
import traceback
import zlib
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np

from ..core.errors import DeviceError, TorchLeanError
from . import watchdog

__all__ = ["Communicator", "DataParallel", "DistributedError", "MPICommunicator", "communicator",
           "shard_slice"]

_INSTALL_HINT = "mpi4py is not installed (pip install 'torchlean[distributed]')"


class DistributedError(TorchLeanError):
    """A distributed run is misconfigured or its ranks disagree.

    ``collective`` is true when every rank raises the same error at the same point (a start-up
    mismatch, a failed hash check): then no rank is left waiting and nothing needs aborting.
    """

    def __init__(self, message: str, collective: bool = False) -> None:
        super().__init__(message)
        self.collective = collective


class _Done:
    """The handle of a collective that finished when it was started."""

    def wait(self) -> None:
        return None


def _float_arrays(op: str, arrays: Any) -> list[np.ndarray]:
    if isinstance(arrays, np.ndarray) or not isinstance(arrays, Sequence):
        raise DistributedError(f"{op}: expected a list of arrays, found {type(arrays).__name__}")
    out = []
    for i, a in enumerate(arrays):
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
            raise DistributedError(f"{op}: item {i} must be a float NumPy array, found "
                                   f"{getattr(a, 'dtype', type(a).__name__)}")
        out.append(a)
    if out and any(a.dtype != out[0].dtype for a in out):
        raise DistributedError(f"{op}: all arrays must share one dtype (one fused buffer), found "
                               f"{sorted({a.dtype.name for a in out})}")
    return out


class Communicator:
    """The single-process world (the default): one rank, every collective is the identity."""

    world_size = 1
    rank = 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that prints, plots and writes files."""
        return self.rank == 0

    def allreduce_mean(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The mean over ranks of each array (new arrays), through one fused buffer."""
        arrays = _float_arrays("allreduce_mean", arrays)
        if not arrays:
            return []
        buf = np.concatenate([a.ravel() for a in arrays])
        self.iallreduce_sum(buf).wait()
        if self.world_size > 1:
            buf /= self.world_size
        out, offset = [], 0
        for a in arrays:
            out.append(buf[offset:offset + a.size].reshape(a.shape))
            offset += a.size
        return out

    def iallreduce_sum(self, buffer: np.ndarray) -> Any:
        """Start summing the contiguous ``buffer`` over ranks in place; ``.wait()`` finishes."""
        _contiguous("iallreduce_sum", buffer)
        return _Done()

    def broadcast(self, arrays: Sequence[np.ndarray]) -> None:
        """Overwrite each contiguous array with rank 0's (in place)."""
        for a in arrays:
            _contiguous("broadcast", a)

    def allgather_bytes(self, data: bytes) -> list[bytes]:
        """Every rank's ``data``, in rank order."""
        if not isinstance(data, bytes):
            raise DistributedError(f"allgather_bytes: expected bytes, found {type(data).__name__}")
        return [data]

    def barrier(self) -> None:
        return None

    def abort(self, code: int = 1) -> NoReturn:
        """End every rank now (here: this process)."""
        raise SystemExit(code)


def _contiguous(op: str, a: Any) -> None:
    if not isinstance(a, np.ndarray) or not a.flags.c_contiguous or not a.flags.writeable:
        raise DistributedError(f"{op}: expected a writable C-contiguous NumPy array, found "
                               f"{type(a).__name__}")


def check_timeout(timeout_s: Any, what: str = "timeout_s") -> float:
    """A collective timeout in seconds: a finite number in (0, 1e9)."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not (
            0 < float(timeout_s) < 1e9):
        raise DistributedError(f"distributed: {what} must be a number of seconds in (0, 1e9), "
                               f"found {timeout_s!r}")
    return float(timeout_s)


class _Watched:
    """A non-blocking collective's handle whose ``wait`` is watched (see ``training.watchdog``)."""

    def __init__(self, request: Any, dog: watchdog.Watchdog | None, name: str) -> None:
        self.request, self.dog, self.name = request, dog, name

    def wait(self) -> None:
        with _waiting(self.dog, self.name):
            self.request.Wait()


def _waiting(dog: watchdog.Watchdog | None, name: str) -> Any:
    return contextlib.nullcontext() if dog is None else dog.waiting(name)


class MPICommunicator(Communicator):
    """The seam over an mpi4py communicator (``MPI.COMM_WORLD`` by default).

    Under an MPI launcher with more than one rank, every wait (``MPI_Init`` included) is
    watched: ``timeout_s`` (else ``TORCHLEAN_MPI_TIMEOUT``, else 600 s) bounds it, and a rank on
    this node that exits makes the job abort within seconds (``training.watchdog``)."""

    def __init__(self, comm: Any = None, timeout_s: float | None = None) -> None:
        if timeout_s is not None:
            timeout_s = check_timeout(timeout_s)
        try:
            self._dog = watchdog.start(timeout_s)
        except ValueError as exc:  # a bad TORCHLEAN_MPI_TIMEOUT
            raise DistributedError(f"distributed: {exc}") from None
        if self._dog is not None:  # MPI_Init itself cannot be watched (it holds the GIL)
            self._dog.rendezvous("start-up (the meeting of this node's ranks before MPI_Init)")
        try:
            from mpi4py import MPI
        except ImportError:
            raise DistributedError(f"distributed: {_INSTALL_HINT}") from None
        self._mpi = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.world_size = int(self.comm.Get_size())
        self.rank = int(self.comm.Get_rank())
        if self._dog is not None:
            self._dog.abort = self.comm.Abort

    def _watch(self, name: str) -> Any:
        return _waiting(self._dog, name)

    def iallreduce_sum(self, buffer: np.ndarray) -> Any:
        _contiguous("iallreduce_sum", buffer)
        if self.world_size == 1:
            return _Done()
        request = self.comm.Iallreduce(self._mpi.IN_PLACE, buffer, op=self._mpi.SUM)
        return _Watched(request, self._dog, "an allreduce")

    def broadcast(self, arrays: Sequence[np.ndarray]) -> None:
        for a in arrays:
            _contiguous("broadcast", a)
            if self.world_size > 1:
                with self._watch("a broadcast"):
                    self.comm.Bcast(a, root=0)

    def allgather_bytes(self, data: bytes) -> list[bytes]:
        if not isinstance(data, bytes):
            raise DistributedError(f"allgather_bytes: expected bytes, found {type(data).__name__}")
        if self.world_size == 1:
            return [data]
        counts = np.zeros(self.world_size, dtype=np.int64)
        with self._watch("an allgather"):
            self.comm.Allgather(np.array([len(data)], dtype=np.int64), counts)
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        recv = np.empty(int(counts.sum()), dtype=np.uint8)
        send = np.frombuffer(data, dtype=np.uint8) if data else np.empty(0, np.uint8)
        with self._watch("an allgather"):
            self.comm.Allgatherv(send, [recv, counts, displs, self._mpi.BYTE])
        return [recv[d:d + c].tobytes() for d, c in zip(displs, counts, strict=True)]

    def barrier(self) -> None:
        with self._watch("a barrier"):
            self.comm.Barrier()

    def abort(self, code: int = 1) -> NoReturn:
        # MPI_Abort makes the launcher kill every rank, and whatever this rank wrote that the
        # launcher has not yet forwarded (its failure message) is lost with it: flush, then
        # give the launcher a moment to forward before pulling the plug (failure path only).
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(ABORT_GRACE_S)
        self.comm.Abort(code)
        raise SystemExit(code)  # not reached: Abort ends the process


# Seconds a failing rank waits after writing its message and before MPI_Abort.
ABORT_GRACE_S = 1.0

_SINGLE = Communicator()
_WORLD: MPICommunicator | None = None


def communicator(distributed: Any = True, timeout_s: float | None = None) -> Communicator:
    """The communicator that ``distributed`` names: ``False``/``None`` the single-process world,
    ``True`` MPI's world (mpi4py imported only now; ``timeout_s`` is its collective timeout, see
    ``MPICommunicator``), or a ``Communicator`` itself."""
    global _WORLD
    if distributed is None or distributed is False:
        return _SINGLE
    if distributed is True:
        if _WORLD is None:
            _WORLD = MPICommunicator(timeout_s=timeout_s)
        return _WORLD
    if isinstance(distributed, Communicator):
        return distributed
    raise DistributedError(f"distributed: expected True, False or a Communicator, found "
                           f"{distributed!r}")


def shard_slice(n: int, world_size: int, rank: int) -> slice:
    """Rank ``rank``'s contiguous part of ``n`` items: sizes differ by at most one, the first
    ``n % world_size`` ranks take the extra one, and the parts cover ``range(n)`` in order."""
    if world_size < 1 or not 0 <= rank < world_size or n < 0:
        raise DistributedError(f"shard_slice: need n >= 0 and 0 <= rank < world_size, found "
                               f"n={n}, rank={rank}, world_size={world_size}")
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


def _describe_differences(descriptions: list[dict[str, Any]]) -> list[str]:
    keys = sorted({k for d in descriptions for k in d})
    lines = []
    for key in keys:
        values = [json.dumps(d.get(key), sort_keys=True) for d in descriptions]
        if len(set(values)) > 1:
            shown = ", ".join(f"rank {r} = {_clip(v)}" for r, v in enumerate(values))
            lines.append(f"{key}: {shown}")
    return lines


def compare_settings(comm: Communicator, settings: dict[str, Any], what: str) -> None:
    """All-gather ``settings`` (JSON-able; other values compared by their ``str``) and raise
    ``DistributedError`` (collective: every rank raises it) naming each field where ranks
    differ. Call it before any other collective, with everything that decides their sequence."""
    payload = json.dumps(settings, sort_keys=True, default=str).encode()
    gathered = [json.loads(b) for b in comm.allgather_bytes(payload)]
    problems = _describe_differences(gathered)
    if problems:
        raise DistributedError(f"{what}: the {comm.world_size} ranks are not running the same "
                               "configuration:\n  " + "\n  ".join(problems), collective=True)


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def data_crc(*arrays: Any) -> int:
    """CRC32 of the arrays' bytes, shapes and dtypes (to spot ranks holding different data)."""
    crc = 0
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        crc = zlib.crc32(f"{a.shape}{a.dtype.str}".encode(), crc)
        crc = zlib.crc32(a.reshape(-1).view(np.uint8).data, crc)
    return crc


class DataParallel:
    """Gradient averaging over a communicator for one model and optimiser (see the module doc).

    ``stats`` accumulates, per step: ``steps``, ``pack_s`` (packing buffers and starting the
    allreduces), ``wait_s`` (time blocked finishing them: communication the overlap did not
    hide) and ``unpack_s``.
    """

    def __init__(self, params: Sequence[Any], optimizer: Any, comm: Communicator,
                 bucket_bytes: int = 1 << 20, check_every: int = 0) -> None:
        if not isinstance(comm, Communicator):
            raise DistributedError(f"DataParallel: comm must be a Communicator, found "
                                   f"{type(comm).__name__}")
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 1:
            raise DistributedError(f"DataParallel: bucket_bytes must be a positive int, found "
                                   f"{bucket_bytes!r}")
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 0:
            raise DistributedError(f"DataParallel: check_every must be an int >= 0, found "
                                   f"{check_every!r}")
        on_device = [getattr(p, "name", None) or f"#{i}" for i, p in enumerate(params)
                     if getattr(p, "device", "cpu") != "cpu"]
        if on_device:
            # Host-only by design: MPI moves host buffers here, and staging every gradient
            # through the host each step would cost more than the GPU saves.
            raise DeviceError(f"DataParallel: data-parallel training runs on the host; "
                              f"parameters {', '.join(on_device[:5])} live on a device (move "
                              "the model with .to('cpu'))")
        self.comm = comm
        self.optimizer = optimizer
        self.params = [p for p in params if getattr(p, "requires_grad", True)]
        self.check_every = check_every
        self.step_count = 0
        self.stats = {"steps": 0, "pack_s": 0.0, "wait_s": 0.0, "unpack_s": 0.0,
                      "early_buckets": 0}
        self._buckets = self._make_buckets(bucket_bytes)
        self._bucket_of: dict[int, int] = {}   # parameter index -> its bucket
        self._offsets: dict[int, int] = {}     # parameter index -> its offset in the bucket
        offset = 0
        for k, (idx, _) in enumerate(self._buckets):
            offset = 0
            for i in idx:
                self._bucket_of[i], self._offsets[i] = k, offset
                offset += int(np.prod(self.params[i].shape))
        self._tail = offset  # the loss and the flags follow the last bucket's gradients

    def _make_buckets(self, bucket_bytes: int) -> list[tuple[list[int], np.ndarray]]:
        """Parameter indices in reverse order, cut where a bucket reaches ``bucket_bytes`` or the
        dtype changes; the last bucket also carries the loss and one has-gradient flag per
        parameter (so a parameter no rank produced a gradient for keeps ``grad = None``)."""
        groups: list[list[int]] = []
        size = 0
        for i in reversed(range(len(self.params))):
            p = self.params[i]
            same = groups and self.params[groups[-1][0]].dtype == p.dtype
            if not groups or not same or size >= bucket_bytes:
                groups.append([])
                size = 0
            groups[-1].append(i)
            size += int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize
        if not groups:
            groups.append([])
        buckets = []
        for k, idx in enumerate(groups):
            n = sum(int(np.prod(self.params[i].shape)) for i in idx)
            if k == len(groups) - 1:
                n += 1 + len(self.params)
            dtype = self.params[idx[0]].dtype if idx else np.dtype(np.float64)
            buckets.append((idx, np.zeros(n, dtype=dtype)))
        return buckets

    # -- start-up -------------------------------------------------------------------------------
    def start(self, settings: dict[str, Any]) -> None:
        """Check that every rank runs the same configuration, then broadcast rank 0's
        parameters and optimiser state."""
        description = dict(settings)
        # What decides the sequence of collectives must agree before any other collective.
        description["check_every"] = self.check_every
        description["gradient buckets"] = [len(idx) for idx, _ in self._buckets]
        # One flat key per item, so a difference names the exact parameter or setting.
        description["parameter count"] = len(self.params)
        for i, p in enumerate(self.params):
            description[f"parameter {i} ({getattr(p, 'name', None)})"] = (
                f"shape {tuple(p.shape)} {p.dtype}")
        opt = self.optimizer
        state = opt.state_dict() if hasattr(opt, "state_dict") else {}
        description["optimizer"] = type(opt).__name__
        for k, v in getattr(opt, "hyper", {}).items():
            description[f"optimizer {k}"] = float(v)
        for k, v in sorted(state.items()):
            description[f"optimizer state {k}"] = f"shape {tuple(v.shape)} {v.dtype}"
        compare_settings(self.comm, description, "distributed fit")
        values = [np.array(p.array, copy=True, order="C") for p in self.params]
        self.comm.broadcast(values)
        for p, v in zip(self.params, values, strict=True):
            p.assign(v)
        if state:
            arrays = {k: np.array(v, copy=True, order="C") for k, v in sorted(state.items())}
            self.comm.broadcast(list(arrays.values()))
            opt.load_state_dict(arrays)

    # -- one step -------------------------------------------------------------------------------
    def shard(self, n: int) -> slice:
        """This rank's part of a global batch of ``n`` examples."""
        return shard_slice(n, self.comm.world_size, self.comm.rank)

    def loss_and_grads(self, stepper: Any, x: Any, y: Any) -> float:
        """The global batch's mean loss; each parameter's ``.grad`` is set to the gradient of
        the whole batch (as one process computing it alone would)."""
        n = len(x)
        part = self.shard(n)
        count = part.stop - part.start
        weight = count / n if n else 0.0
        early = _EarlyBuckets(self, weight)
        local = (stepper.loss_and_grads(np.asarray(x[part], dtype=stepper.dtype),
                                        np.asarray(y[part]), on_param_grad=early.on_grad)
                 if count else 0.0)
        loss = self.reduce(local, weight, early.started)
        self.step_count += 1
        if self.check_every and self.step_count % self.check_every == 0:
            self.check_in_sync()
        return loss

    def _slot(self, i: int) -> slice:
        """Where parameter ``i``'s gradient lies in its bucket."""
        offset = self._offsets[i]
        return slice(offset, offset + int(np.prod(self.params[i].shape)))

    def pack_into(self, k: int, i: int, grad: Any, weight: float) -> None:
        """``weight * grad`` of parameter ``i`` into its place in bucket ``k`` (zeros for
        ``None``: a parameter this rank produced no gradient for)."""
        out = self._buckets[k][1][self._slot(i)]
        if grad is None:
            out[:] = 0
        else:  # copy and scale in one pass over the gradient
            np.multiply(np.asarray(grad).reshape(-1), weight, out=out, casting="unsafe")

    def reduce(self, local_loss: float, weight: float,
               started: dict[int, Any] | None = None) -> float:
        """Sum ``weight * gradient`` and ``weight * loss`` over ranks (bucketed, non-blocking);
        returns the summed loss and leaves the summed gradients in ``.grad``. ``started`` holds
        the buckets whose allreduce already began during the reverse pass (``_EarlyBuckets``);
        the others are packed from ``.grad`` and started here."""
        t0 = time.perf_counter()
        started = {} if started is None else started
        handles = list(started.values())
        last = len(self._buckets) - 1
        tail = self._tail
        for k, (idx, buf) in enumerate(self._buckets):
            if k in started:
                continue
            for i in idx:
                self.pack_into(k, i, self.params[i].grad.array, weight)
            if k == last:
                buf[tail] = local_loss * weight
                # Has-gradient flags: their sum over ranks is positive exactly when some rank
                # produced that gradient.
                buf[tail + 1:] = [p.grad is not None for p in self.params]
            handles.append(self.comm.iallreduce_sum(buf))
        t1 = time.perf_counter()
        for h in handles:
            h.wait()
        t2 = time.perf_counter()
        buf = self._buckets[last][1]
        loss = float(buf[tail])
        has_grad = buf[tail + 1:] > 0
        for k, (idx, buf) in enumerate(self._buckets):
            for i in idx:
                p = self.params[i]
                p.grad = buf[self._slot(i)].reshape(p.shape) if has_grad[i] else None
            # The gradients are views of this buffer, so the next step packs into a new one
            # (no copy here, and no gradient anyone still holds is overwritten).
            self._buckets[k] = (idx, np.empty_like(buf))
        t3 = time.perf_counter()
        s = self.stats
        s["steps"] += 1
        s["early_buckets"] += len(started)
        s["pack_s"] += t1 - t0
        s["wait_s"] += t2 - t1
        s["unpack_s"] += t3 - t2
        return loss

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any (a stop request, for example)."""
        buf = np.array([1.0 if flag else 0.0])
        self.comm.iallreduce_sum(buf).wait()
        return bool(buf[0] > 0)

    def params_hash(self) -> str:
        h = hashlib.sha256()
        for p in self.params:
            h.update(np.ascontiguousarray(p.array).reshape(-1).view(np.uint8).data)
        return h.hexdigest()[:16]

    def check_in_sync(self) -> None:
        """Raise ``DistributedError`` on every rank if any rank's parameters differ."""
        hashes = [b.decode() for b in self.comm.allgather_bytes(self.params_hash().encode())]
        if len(set(hashes)) > 1:
            shown = ", ".join(f"rank {r} = {h}" for r, h in enumerate(hashes))
            raise DistributedError(f"distributed fit: parameters differ across ranks after step "
                                   f"{self.step_count} ({shown})", collective=True)

    # -- failure --------------------------------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        """Called with an exception escaping training: a collective error (or a world of one)
        returns so the caller re-raises it; any other error is printed with this rank's name
        and the communicator is aborted, so no other rank stays blocked in a collective."""
        if self.comm.world_size == 1 or getattr(exc, "collective", False):
            return
        abort_with(self.comm, exc)


class _EarlyBuckets:
    """One step's overlap: as the reverse pass reports each parameter's final gradient, it is
    scaled into its bucket, and a bucket whose parameters have all arrived starts its allreduce
    at once, while the reverse pass goes on with earlier layers. The last bucket also carries
    the loss and the has-gradient flags, so it always starts after the pass (in ``reduce``)."""

    def __init__(self, dp: DataParallel, weight: float) -> None:
        self.dp = dp
        self.weight = weight
        self.index = {id(p): i for i, p in enumerate(dp.params)}
        self.missing = [len(idx) for idx, _ in dp._buckets]
        self.started: dict[int, Any] = {}

    def on_grad(self, param: Any, grad: Any) -> None:
        i = self.index.get(id(param))
        if i is None:
            return
        dp = self.dp
        k = dp._bucket_of[i]
        dp.pack_into(k, i, grad, self.weight)
        self.missing[k] -= 1
        if self.missing[k] == 0 and k != len(dp._buckets) - 1:
            self.started[k] = dp.comm.iallreduce_sum(dp._buckets[k][1])


def abort_with(comm: Communicator, exc: BaseException, code: int = 1) -> NoReturn:
    """Print ``exc`` (with its traceback when ``TORCHLEAN_DEBUG`` is set) naming this rank, then
    abort every rank with exit status ``code``."""
    if os.environ.get("TORCHLEAN_DEBUG"):
        traceback.print_exception(exc, file=sys.stderr)
    message = str(exc) or type(exc).__name__
    print(f"torchlean: rank {comm.rank} of {comm.world_size} failed: {type(exc).__name__}: "
          f"{message}; aborting all ranks", file=sys.stderr, flush=True)
    comm.abort(code)
