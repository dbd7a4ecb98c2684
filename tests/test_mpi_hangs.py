"""MPI jobs never hang (issue 25, item 5), under ``mpiexec -n 2``.

Each case launches a job whose ranks disagree: one fails argument parsing before MPI starts,
one is given ``--check-every`` alone, one runs without ``--distributed`` or runs another
program, one is stopped with SIGSTOP. The job must end with a non-zero status and a message
naming the missing rank. The cases that a rank's exit should end use a collective timeout far
beyond the subprocess guard (so only the exit detection can end them in time); the stopped-rank
case uses a small one. The subprocess timeout only turns a hang into a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from torchlean.training import watchdog
from torchlean.training.distributed import (
    Communicator,
    DataParallel,
    DistributedError,
    compare_settings,
)

HERE = Path(__file__).resolve().parent
HANG_GUARD_S = 150
TRAIN = ["-m", "torchlean", "train", "--dataset", "iris", "--epochs", "1"]


def _mpiexec() -> str | None:
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def _env(timeout_s: float) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent / "src"),
                                         *filter(None, [env.get("PYTHONPATH")])])
    env[watchdog.TIMEOUT_ENV] = str(timeout_s)
    return env


def _job(rank0: list[str], rank1: list[str], timeout_s: float = 100_000.0
         ) -> subprocess.CompletedProcess[str]:
    """``mpiexec -n 1 python RANK0 : -n 1 python RANK1`` (MPMD: each rank its own command)."""
    exe = _mpiexec()
    assert exe is not None
    return subprocess.run([exe, "-n", "1", sys.executable, *rank0, ":", "-n", "1",
                           sys.executable, *rank1], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, env=_env(timeout_s), cwd=HERE)


@pytest.fixture(scope="module")
def mpi() -> None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py is not installed (pip install 'torchlean[distributed]')")
    if _mpiexec() is None:
        pytest.skip("no mpiexec found (pip install mpich)")


def test_a_rank_failing_argument_parsing_ends_the_job(mpi: None) -> None:
    done = _job([*TRAIN, "--distributed"], [*TRAIN, "--distributed", "--epochs", "0"])
    assert done.returncode != 0
    assert "argument --epochs: expected" in done.stderr, done.stderr
    assert "torchlean: rank 0 of 2: waiting in start-up" in done.stderr, done.stderr
    assert "rank 1 is not running on this node" in done.stderr or \
        "rank 1 (pid" in done.stderr, done.stderr


def test_check_every_on_one_rank_is_reported_at_start_up(mpi: None) -> None:
    done = _job([*TRAIN, "--distributed", "--check-every", "3"], [*TRAIN, "--distributed"])
    assert done.returncode != 0
    assert "not running the same configuration" in done.stderr, done.stderr
    assert "check_every: rank 0 = 3, rank 1 = 0" in done.stderr, done.stderr
    assert "epoch 1/1" not in done.stdout


def test_a_rank_without_distributed_ends_the_job(mpi: None) -> None:
    done = _job([*TRAIN, "--distributed"], TRAIN)
    assert done.returncode != 0
    assert "rank 1 of 2 under an MPI launcher without --distributed" in done.stderr, done.stderr
    assert "torchlean: rank 0 of 2: waiting in start-up" in done.stderr, done.stderr


def test_another_program_that_exits_ends_the_job(mpi: None) -> None:
    done = _job([*TRAIN, "--distributed"], ["-c", "print('something else')"])
    assert done.returncode != 0
    assert "a rank on this node has exited" in done.stderr, done.stderr


def test_another_program_that_never_joins_hits_the_timeout(mpi: None) -> None:
    done = _job([*TRAIN, "--distributed"], ["-c", "import time; time.sleep(600)"],
                timeout_s=4)
    assert done.returncode != 0
    assert "did not complete within 4 s" in done.stderr, done.stderr
    assert "rank 1 (pid" in done.stderr and "has not started" in done.stderr, done.stderr


_STOPPED = """
import os, signal
from torchlean.training import watchdog
from torchlean.training.distributed import communicator
comm = communicator(True)
comm.barrier()
watchdog.start().timeout_s = 30  # armed only now: start-up skew on a busy machine cannot fire it
if comm.rank == 1:
    os.kill(os.getpid(), signal.SIGSTOP)  # never continued: the watchdog must end the job
comm.barrier()
print("second barrier passed", flush=True)
"""


def test_a_stopped_rank_fires_the_watchdog(mpi: None) -> None:
    # Start-up runs under the default (huge) collective timeout; each rank sets 30 s after the
    # first barrier, so the watchdog can only fire at the barrier the stopped rank never
    # reaches, however slow the ranks' start-up on a busy machine.
    done = _job(["-c", _STOPPED], ["-c", _STOPPED])
    assert done.returncode != 0
    assert "second barrier passed" not in done.stdout
    assert "torchlean: rank 0 of 2: waiting in a barrier (collective #3)" in done.stderr, \
        done.stderr
    assert "did not complete within 30 s" in done.stderr
    assert "rank 1 (pid" in done.stderr and "is stopped" in done.stderr, done.stderr


# ---------------------------------------------------------------------------------------------
# Without mpiexec


class _Recording(Communicator):
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def allgather_bytes(self, data: bytes) -> list[bytes]:
        self.sent.append(data)
        return [data, data.replace(b'"check_every": 0', b'"check_every": 5')]


def test_start_up_compares_what_decides_the_collectives() -> None:
    from torchlean import nn, optim

    model = nn.Linear(2, 2)
    comm = _Recording()
    dp = DataParallel(model.parameters(), optim.SGD(model.parameters(), lr=0.1), comm)
    with pytest.raises(DistributedError, match="check_every: rank 0 = 0, rank 1 = 5"):
        dp.start({"should_stop": True})
    assert b'"gradient buckets"' in comm.sent[0] and b'"should_stop": true' in comm.sent[0]
    with pytest.raises(DistributedError, match="x: rank 0 = 1, rank 1 = 2"):
        compare_settings(_Pair({"x": 2}), {"x": 1}, "test")


class _Pair(Communicator):
    def __init__(self, other: dict) -> None:
        self.other = other
        self.world_size = 2

    def allgather_bytes(self, data: bytes) -> list[bytes]:
        import json

        return [data, json.dumps(self.other).encode()]


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "abc", "1e9"])
def test_bad_timeouts_are_refused(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(watchdog.TIMEOUT_ENV, bad)
    with pytest.raises(ValueError, match=watchdog.TIMEOUT_ENV):
        watchdog.timeout_from_env()


def test_cli_refuses_mpi_options_without_distributed(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    from torchlean.cli import main

    assert main(["train", "--dataset", "iris", "--epochs", "1", "--check-every", "2"]) == 2
    assert "--check-every applies only with --distributed" in capsys.readouterr().err
    assert main(["train", "--collective-timeout", "0"]) == 2
    assert np.isfinite(watchdog.DEFAULT_TIMEOUT_S)
