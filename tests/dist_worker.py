"""Worker run under ``mpiexec`` by tests/test_distributed.py (not collected by pytest itself).

``python dist_worker.py MODE OUTDIR [ARGS]`` with MODE:

- ``equiv``: data-parallel ``fit`` against one process on the same global batches (float64 MLP
  with SGD+momentum and Adam, eager and compiled; float32 final accuracy); rank 0 also writes a
  checkpoint after epoch 1 of the SGD run. Rank 0 writes ``equiv-<world size>.json``.
- ``resume CKPT``: load that checkpoint (written with another number of ranks) and train the
  second epoch, distributed and in one process; rank 0 writes ``resume-<world size>.json``.
- ``raise``: rank 1's loss raises at its third step (the job must end promptly with its message).
- ``mismatch``: rank 1 builds a wider model and a different batch size (start-up must say so).
- ``stop``: only rank 1's ``should_stop`` asks to stop, after its third batch; every rank must
  stop at the same step (rank 0 writes ``stop.json``).
- ``diverge``: rank 1 changes its weights after epoch 1; the hash check must catch it.

Everything is bounded by steps (two epochs of ten batches), never by time.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from torchlean import checkpoint, nn, optim
from torchlean.engine import ops_interface as F
from torchlean.training.distributed import DistributedError, communicator
from torchlean.training.fit import Dataset, evaluate, fit

N_EXAMPLES, BATCH, SEED = 95, 10, 3  # 10 batches per epoch, the last one of 5 examples


def make_data(dtype: str) -> tuple[Dataset, Dataset]:
    rng = np.random.default_rng(1234)
    x = rng.normal(size=(N_EXAMPLES + 40, 6)).astype(dtype)
    w = rng.normal(size=(6, 3))
    y = (x @ w).argmax(axis=1).astype(np.int64)
    return Dataset(x[:N_EXAMPLES], y[:N_EXAMPLES]), Dataset(x[N_EXAMPLES:], y[N_EXAMPLES:])


def make_model(dtype: str, hidden: int = 16) -> nn.Module:
    rng = np.random.default_rng(7)
    model = nn.Sequential(nn.Linear(6, hidden, dtype=dtype), nn.Tanh(),
                          nn.Linear(hidden, 3, dtype=dtype))
    # Deterministic start, then every rank but 0 perturbs it: the broadcast must undo that.
    for p in model.parameters():
        p.assign(rng.normal(scale=0.5, size=p.shape).astype(dtype))
    return model


def make_optimizer(kind: str, model: nn.Module) -> optim.Optimizer:
    if kind == "sgd":
        return optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return optim.Adam(model.parameters(), lr=0.01)


def arrays(model: nn.Module) -> list[np.ndarray]:
    return [np.array(p.array, copy=True) for p in model.parameters()]


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def perturb_unless_rank0(model: nn.Module, rank: int) -> None:
    if rank:
        for p in model.parameters():
            p.assign(p.array + rank)


def train(dtype: str, kind: str, backend: str, distributed: bool, rank: int, epochs: int = 2,
          on_epoch=None) -> tuple[nn.Module, optim.Optimizer, list]:  # noqa: ANN001
    model = make_model(dtype)
    if distributed:
        perturb_unless_rank0(model, rank)
    opt = make_optimizer(kind, model)
    train_data, _ = make_data(dtype)
    hist = fit(model, F.cross_entropy, opt, train_data, epochs, BATCH, backend=backend,
               seed=SEED, progress=False, distributed=distributed, check_every=5,
               on_epoch=on_epoch)
    return model, opt, hist


def equiv(outdir: str) -> None:
    comm = communicator(True)
    rank, world = comm.rank, comm.world_size
    result: dict = {"world_size": world, "runs": {}}
    ckpt = os.path.join(outdir, f"ckpt-{world}.safetensors")
    for dtype, kind, backend in [("float64", "sgd", "eager"), ("float64", "adam", "compiled")]:
        holder: dict = {}

        def save_after_first(record, holder=holder, kind=kind) -> None:  # noqa: ANN001
            if kind == "sgd" and record.epoch == 1:
                if comm.is_main:
                    checkpoint.save(ckpt, {"model": holder["model"], "optim": holder["opt"]})
                comm.barrier()

        model = make_model(dtype)
        perturb_unless_rank0(model, rank)
        opt = make_optimizer(kind, model)
        holder.update(model=model, opt=opt)
        train_data, _ = make_data(dtype)
        hist = fit(model, F.cross_entropy, opt, train_data, 2, BATCH, backend=backend,
                   seed=SEED, progress=False, distributed=True, check_every=5,
                   on_epoch=save_after_first)
        dist_params = arrays(model)
        hashes = [b.decode() for b in comm.allgather_bytes(_hash(dist_params).encode())]
        if comm.is_main:
            ref_model, _, ref_hist = train(dtype, kind, backend, False, 0)
            ref = arrays(ref_model)
            start = arrays(make_model(dtype))
            result["runs"][f"{dtype}-{kind}-{backend}"] = {
                "steps": opt.step_count,
                "max_abs_diff": max_diff(dist_params, ref),
                "moved": max_diff(dist_params, start),
                "ranks_identical": len(set(hashes)) == 1,
                "train_loss": [r.train_loss for r in hist],
                "ref_train_loss": [r.train_loss for r in ref_hist],
            }
    # float32: the same final test accuracy as one process.
    model, _, _ = train("float32", "adam", "eager", True, rank, epochs=2)
    _, test_data = make_data("float32")
    acc = evaluate(model, F.cross_entropy, test_data, dtype="float32")["accuracy"]
    if comm.is_main:
        ref_model, _, _ = train("float32", "adam", "eager", False, 0, epochs=2)
        ref_acc = evaluate(ref_model, F.cross_entropy, test_data, dtype="float32")["accuracy"]
        result["float32"] = {"accuracy": acc, "ref_accuracy": ref_acc,
                             "max_abs_diff": max_diff(arrays(model), arrays(ref_model))}
        _write(outdir, f"equiv-{world}.json", result)


def resume(outdir: str, ckpt: str) -> None:
    comm = communicator(True)
    world = comm.world_size

    def resumed(distributed: bool) -> list[np.ndarray]:
        model = make_model("float64")
        opt = make_optimizer("sgd", model)
        checkpoint.load(ckpt, {"model": model, "optim": opt})
        train_data, _ = make_data("float64")
        # The run seeded SEED, resumed at its second epoch (that epoch's batch order).
        fit(model, F.cross_entropy, opt, train_data, 1, BATCH, seed=SEED, first_epoch=2,
            progress=False, distributed=distributed, check_every=5)
        return arrays(model)

    got = resumed(True)
    if comm.is_main:
        ref_model, _, _ = train("float64", "sgd", "eager", False, 0)
        ref = arrays(ref_model)
        _write(outdir, f"resume-{world}.json", {
            "world_size": world, "max_abs_diff": max_diff(got, ref),
            "single_process_max_abs_diff": max_diff(resumed(False), ref)})


def fail_raise() -> None:
    comm = communicator(True)
    calls = {"n": 0}

    def loss(out, y):  # noqa: ANN001, ANN202
        calls["n"] += 1
        if comm.rank == 1 and calls["n"] == 3:
            raise RuntimeError("rank one exploded at its third step")
        return F.cross_entropy(out, y)

    model = make_model("float64")
    train_data, _ = make_data("float64")
    fit(model, loss, make_optimizer("sgd", model), train_data, 2, BATCH, progress=False,
        distributed=True)
    print("fail_raise: training finished, which it must not", flush=True)


def mismatch() -> None:
    comm = communicator(True)
    model = make_model("float64", hidden=17 if comm.rank == 1 else 16)
    train_data, _ = make_data("float64")
    try:
        fit(model, F.cross_entropy, make_optimizer("sgd", model), train_data, 1,
            BATCH + comm.rank, progress=False, distributed=True)
    except DistributedError as exc:
        if comm.is_main:
            print(f"mismatch: {exc}", file=sys.stderr, flush=True)
        sys.exit(3)
    print("mismatch: training started, which it must not", flush=True)


def stop_on_one_rank(outdir: str) -> None:
    comm = communicator(True)
    calls = {"n": 0}

    def should_stop() -> bool:
        calls["n"] += 1
        return comm.rank == 1 and calls["n"] >= 3

    model = make_model("float64")
    train_data, _ = make_data("float64")
    opt = make_optimizer("sgd", model)
    hist = fit(model, F.cross_entropy, opt, train_data, 2, BATCH, progress=False,
               distributed=True, should_stop=should_stop)
    steps = [int(b) for b in comm.allgather_bytes(str(opt.step_count).encode())]
    if comm.is_main:
        _write(outdir, "stop.json", {"steps": steps, "epochs": len(hist)})


def diverge(outdir: str) -> None:
    comm = communicator(True)

    def nudge(record) -> None:  # noqa: ANN001
        if comm.rank == 1:  # a bug that changes one rank's weights behind fit's back
            p = model.parameters()[0]
            p.assign(p.array + 1e-9)

    model = make_model("float64")
    train_data, _ = make_data("float64")
    try:
        fit(model, F.cross_entropy, make_optimizer("sgd", model), train_data, 2, BATCH,
            progress=False, distributed=True, check_every=1, on_epoch=nudge)
    except DistributedError as exc:
        if comm.is_main:
            print(f"diverge: {exc}", file=sys.stderr, flush=True)
        sys.exit(3)
    print("diverge: training finished, which it must not", flush=True)


def _hash(params: list[np.ndarray]) -> str:
    import hashlib

    h = hashlib.sha256()
    for p in params:
        h.update(p.tobytes())
    return h.hexdigest()


def _write(outdir: str, name: str, data: dict) -> None:
    with open(os.path.join(outdir, name), "w") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "equiv":
        equiv(out)
    elif mode == "resume":
        resume(out, sys.argv[3])
    elif mode == "raise":
        fail_raise()
    elif mode == "mismatch":
        mismatch()
    elif mode == "stop":
        stop_on_one_rank(out)
    elif mode == "diverge":
        diverge(out)
    else:
        raise SystemExit(f"dist_worker: unknown mode {mode!r}")
