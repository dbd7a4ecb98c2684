"""torchlean.distributed: the communicator seam in one process, and data-parallel training under
``mpiexec`` (launched from here as subprocesses running tests/dist_worker.py or the CLI).

The MPI tests need the ``distributed`` extra (mpi4py + the mpich wheel, part of ``test``); they
skip, saying why, only when mpiexec is missing or cannot start two ranks. Every run is bounded
by steps; the subprocess timeouts only turn a hang into a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from torchlean import checkpoint, nn, optim
from torchlean.cli import main as cli_main
from torchlean.core.errors import TorchLeanError
from torchlean.engine import ops_interface as F
from torchlean.training.distributed import (
    Communicator,
    DataParallel,
    DistributedError,
    communicator,
    shard_slice,
)
from torchlean.training.fit import Dataset, fit

HERE = Path(__file__).parent
WORKER = HERE / "dist_worker.py"
TIMEOUT = 240  # seconds; generous for a loaded 2-core machine, only a hang reaches it


# ---------------------------------------------------------------------------------------------
# One process: the seam and the sharding arithmetic


@pytest.mark.parametrize("n", [0, 1, 2, 5, 10, 11, 256])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shards_cover_the_batch_in_order(n: int, world: int) -> None:
    parts = [shard_slice(n, world, r) for r in range(world)]
    covered = [i for p in parts for i in range(n)[p]]
    assert covered == list(range(n))
    sizes = [p.stop - p.start for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)


def test_shard_slice_rejects_bad_rank() -> None:
    with pytest.raises(DistributedError, match="rank"):
        shard_slice(10, 2, 2)


def test_single_process_seam_is_identity() -> None:
    comm = communicator(False)
    assert (comm.world_size, comm.rank, comm.is_main) == (1, 0, True)
    a, b = np.arange(6.0).reshape(2, 3), np.array([0.5, -1.0])
    out = comm.allreduce_mean([a, b])
    assert [o.shape for o in out] == [a.shape, b.shape]
    assert all(np.array_equal(o, x) for o, x in zip(out, [a, b], strict=True))
    assert comm.allgather_bytes(b"abc") == [b"abc"]
    buf = np.ones(3)
    comm.iallreduce_sum(buf).wait()
    assert np.array_equal(buf, np.ones(3))


@pytest.mark.parametrize("bad", [np.zeros(3), [np.zeros(2, dtype=np.int64)],
                                 [np.zeros(2), np.zeros(2, dtype=np.float32)], [[1.0, 2.0]]])
def test_allreduce_mean_rejects_bad_input(bad: object) -> None:
    with pytest.raises(DistributedError, match="allreduce_mean"):
        communicator(False).allreduce_mean(bad)  # type: ignore[arg-type]


def test_communicator_rejects_unknown_value() -> None:
    with pytest.raises(DistributedError, match="expected True, False or a Communicator"):
        communicator("yes")
    model = nn.Linear(2, 2)
    with pytest.raises(TorchLeanError, match="distributed"):
        fit(model, F.cross_entropy, optim.SGD(model.parameters(), lr=0.1),
            Dataset(np.zeros((4, 2)), np.zeros(4, dtype=np.int64)), 1, distributed="yes")


def test_data_parallel_rejects_bad_settings() -> None:
    model = nn.Linear(2, 2)
    opt = optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(DistributedError, match="bucket_bytes"):
        DataParallel(model.parameters(), opt, Communicator(), bucket_bytes=0)
    with pytest.raises(DistributedError, match="check_every"):
        DataParallel(model.parameters(), opt, Communicator(), check_every=-1)
    with pytest.raises(DistributedError, match="Communicator"):
        DataParallel(model.parameters(), opt, "world")  # type: ignore[arg-type]


def _tiny(dtype: str) -> tuple[nn.Module, optim.Optimizer, Dataset]:
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(5, 8, dtype=dtype), nn.ReLU(), nn.Linear(8, 3, dtype=dtype))
    for p in model.parameters():
        p.assign(rng.normal(scale=0.4, size=p.shape))
    x = rng.normal(size=(23, 5)).astype(dtype)
    return model, optim.SGD(model.parameters(), lr=0.1, momentum=0.9), Dataset(
        x, rng.integers(0, 3, size=23))


def test_fit_on_the_single_process_communicator_equals_plain_fit() -> None:
    # The whole data-parallel path (buckets, weights, flags) with a world of one changes nothing.
    m1, o1, data = _tiny("float64")
    m2, o2, _ = _tiny("float64")
    h1 = fit(m1, F.cross_entropy, o1, data, 2, 5, progress=False)
    h2 = fit(m2, F.cross_entropy, o2, data, 2, 5, progress=False, distributed=Communicator(),
             check_every=2)
    for p, q in zip(m1.parameters(), m2.parameters(), strict=True):
        assert np.array_equal(p.array, q.array)
    assert [r.train_loss for r in h1] == [r.train_loss for r in h2]


def test_small_buckets_give_the_same_gradients() -> None:
    model, opt, data = _tiny("float64")
    dp = DataParallel(model.parameters(), opt, Communicator(), bucket_bytes=8)
    assert len(dp._buckets) == len(model.parameters())  # one parameter per bucket
    x, y = data.inputs[:7], data.targets[:7]
    from torchlean.training.fit import _Stepper

    stepper = _Stepper(model, F.cross_entropy, "eager", "float64")
    loss_plain = stepper.loss_and_grads(x, y)
    plain = [p.grad.numpy().copy() for p in model.parameters()]
    opt.zero_grad()
    loss_dp = dp.loss_and_grads(stepper, x, y)
    assert loss_dp == loss_plain
    for p, g in zip(model.parameters(), plain, strict=True):
        assert np.array_equal(p.grad, g)


class _Recording(Communicator):
    """The single-process world, noting which parameters already hold a ``.grad`` (set only
    after the reverse pass returns) each time an allreduce starts."""

    def __init__(self, params: list[object]) -> None:
        self.params = params
        self.starts: list[int] = []

    def iallreduce_sum(self, buffer: np.ndarray) -> object:
        self.starts.append(sum(p.grad is not None for p in self.params))  # type: ignore[attr-defined]
        return super().iallreduce_sum(buffer)


@pytest.mark.parametrize("backend", ["eager", "compiled"])
def test_buckets_start_inside_the_reverse_pass(backend: str) -> None:
    from torchlean.training.fit import _Stepper

    model, opt, data = _tiny("float64")
    params = model.parameters()
    comm = _Recording(params)
    dp = DataParallel(params, opt, comm, bucket_bytes=8)  # one parameter per bucket
    stepper = _Stepper(model, F.cross_entropy, backend, "float64")
    x, y = data.inputs[:7], data.targets[:7]
    plain_loss = stepper.loss_and_grads(x, y)
    plain = [p.grad.numpy().copy() for p in params]
    opt.zero_grad()
    loss = dp.loss_and_grads(stepper, x, y)
    # Every bucket but the last (which carries the loss and flags) started while no parameter
    # had its .grad yet, i.e. during the reverse pass, as its gradient became final.
    assert comm.starts[: len(params) - 1] == [0] * (len(params) - 1)
    assert dp.stats["early_buckets"] == len(params) - 1
    assert loss == plain_loss
    for p, g in zip(params, plain, strict=True):
        assert np.array_equal(p.grad, g)


# ---------------------------------------------------------------------------------------------
# Under mpiexec


def _mpiexec() -> str | None:
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # One BLAS thread per rank: several ranks share this machine's cores.
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    # The workers import this checkout's torchlean, as the tests here do.
    paths = [str(HERE.parent / "src"), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _run(n: int, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = _mpiexec()
    assert exe is not None
    return subprocess.run([exe, "-n", str(n), sys.executable, *args], capture_output=True,
                          text=True, timeout=TIMEOUT, env=_env(), cwd=cwd or HERE)


@pytest.fixture(scope="module")
def mpi() -> None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py is not installed (pip install 'torchlean[distributed]')")
    if _mpiexec() is None:
        pytest.skip("no mpiexec found (pip install mpich)")
    probe = _run(2, "-c", "from mpi4py import MPI; assert MPI.COMM_WORLD.Get_size() == 2")
    if probe.returncode != 0:
        pytest.skip(f"mpiexec -n 2 cannot start here: {probe.stderr.strip()[-400:]}")


@pytest.fixture(scope="module")
def runs(mpi: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ranks, then three ranks (uneven batches) resuming the two-rank checkpoint."""
    out = tmp_path_factory.mktemp("dist")
    for n in (2, 3):
        done = _run(n, str(WORKER), "equiv", str(out))
        assert done.returncode == 0, done.stderr
    done = _run(3, str(WORKER), "resume", str(out), str(out / "ckpt-2.safetensors"))
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_float64_equals_one_process_after_20_steps(runs: Path, world: int) -> None:
    result = json.loads((runs / f"equiv-{world}.json").read_text())
    assert result["world_size"] == world
    assert set(result["runs"]) == {"float64-sgd-eager", "float64-adam-compiled"}
    for name, r in result["runs"].items():
        assert r["steps"] == 20, name
        assert r["moved"] > 0.05, name  # training really changed the parameters
        assert r["max_abs_diff"] <= 1e-12, name
        assert r["ranks_identical"], name
        np.testing.assert_allclose(r["train_loss"], r["ref_train_loss"], rtol=1e-12)


@pytest.mark.parametrize("world", [2, 3])
def test_float32_same_final_accuracy(runs: Path, world: int) -> None:
    result = json.loads((runs / f"equiv-{world}.json").read_text())["float32"]
    assert result["accuracy"] == result["ref_accuracy"]
    assert result["max_abs_diff"] < 1e-4


def test_checkpoint_from_two_ranks_resumes_on_three(runs: Path) -> None:
    result = json.loads((runs / "resume-3.json").read_text())
    assert result["world_size"] == 3
    assert result["max_abs_diff"] <= 1e-12
    assert result["single_process_max_abs_diff"] <= 1e-12


def test_a_failing_rank_takes_the_job_down_with_its_message(mpi: None, tmp_path: Path) -> None:
    done = _run(2, str(WORKER), "raise", str(tmp_path))  # TIMEOUT turns a hang into a failure
    assert done.returncode != 0, done.stdout
    assert "rank 1 of 2 failed" in done.stderr, done.stderr
    assert "rank one exploded at its third step" in done.stderr, done.stderr
    assert "training finished" not in done.stdout


def test_mismatched_ranks_are_reported_at_start_up(mpi: None, tmp_path: Path) -> None:
    done = _run(2, str(WORKER), "mismatch", str(tmp_path))
    assert done.returncode == 3, done.stderr
    assert "not running the same configuration" in done.stderr
    assert "batch_size: rank 0 = 10, rank 1 = 11" in done.stderr
    assert 'parameter 0 (weight): rank 0 = "shape (16, 6) float64", rank 1 = ' \
           '"shape (17, 6) float64"' in done.stderr
    assert "training started" not in done.stdout


def test_a_stop_on_one_rank_stops_every_rank_at_the_same_step(mpi: None,
                                                               tmp_path: Path) -> None:
    done = _run(2, str(WORKER), "stop", str(tmp_path))
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "stop.json").read_text())
    assert result == {"steps": [3, 3], "epochs": 1}


def test_hash_check_catches_ranks_that_drift_apart(mpi: None, tmp_path: Path) -> None:
    done = _run(2, str(WORKER), "diverge", str(tmp_path))
    assert done.returncode == 3, done.stderr
    # Epoch 1 has 10 steps; the nudge comes after it, the check after step 11.
    assert "parameters differ across ranks after step 11" in done.stderr, done.stderr
    assert "training finished" not in done.stdout


def test_cli_trains_distributed_like_one_process(mpi: None, tmp_path: Path) -> None:
    args = ["train", "--dataset", "iris", "--epochs", "2", "--seed", "1"]
    done = _run(2, "-m", "torchlean", *args, "--distributed", "--check-every", "3",
                "--save", str(tmp_path / "d.safetensors"), "--json", str(tmp_path / "d.json"))
    assert done.returncode == 0, done.stderr
    assert "distributed: 2 MPI rank(s)" in done.stdout, done.stdout
    # Only rank 0 prints: each epoch line appears once.
    assert done.stdout.count("epoch 1/2") == 1 and done.stdout.count("epoch 2/2") == 1
    assert cli_main([*args, "--json", str(tmp_path / "s.json")]) == 0
    dist = json.loads((tmp_path / "d.json").read_text())
    single = json.loads((tmp_path / "s.json").read_text())
    np.testing.assert_allclose([r["train_loss"] for r in dist["history"]],
                               [r["train_loss"] for r in single["history"]], rtol=1e-5)
    assert dist["final"]["test_accuracy"] == single["final"]["test_accuracy"]
    arrays = checkpoint.read_arrays(tmp_path / "d.safetensors")
    assert any(k.startswith("model.") for k in arrays)


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_cli_trains_cnn_and_transformer(mpi: None, tmp_path: Path, model: str) -> None:
    done = _run(2, "-m", "torchlean", "train", "--model", model, "--epochs", "1",
                "--distributed", "--backend", "compiled", "--json", str(tmp_path / "m.json"))
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "m.json").read_text())
    assert summary["model"] == model and summary["epochs_run"] == 1
    assert np.isfinite(summary["final"]["train_loss"])


def test_cli_error_on_one_rank_aborts_all(mpi: None, tmp_path: Path) -> None:
    # Only rank 0 checks --save; the other rank is already waiting in start-up.
    done = _run(2, "-m", "torchlean", "train", "--dataset", "iris", "--epochs", "1",
                "--distributed", "--save", str(tmp_path / "missing" / "c.safetensors"))
    assert done.returncode != 0, done.stdout
    assert "rank 0 of 2 failed" in done.stderr and "does not exist" in done.stderr, done.stderr
