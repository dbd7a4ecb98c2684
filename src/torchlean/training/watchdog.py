"""The collective watchdog of MPI runs: no rank waits forever for another.

An MPI job hangs when one rank waits in a collective (or in ``MPI_Init``) that another rank will
never reach: it exited early (an argument error, a run without ``--distributed``, another
program), it was stopped (``SIGSTOP``), or it went down another code path. The watchdog is a
daemon thread in every rank that is *armed* while the rank waits (``with dog.waiting(name):``)
and fires when

- a rank on this node has exited while this one waits (checked every ``poll_s``; fired after a
  short grace, and only if the same wait is still going on, so a peer that finished the last
  collective and exited is not mistaken for a lost one), or
- the wait has lasted ``timeout_s`` (the collective timeout: generous by default,
  ``TORCHLEAN_MPI_TIMEOUT`` or ``--collective-timeout`` to change it).

Firing prints one message naming this rank, the wait, and each rank that is missing (exited,
stopped, or not yet at this collective: every rank records how many collectives it has started
in a small file beside its peers', which the message compares), then ends the whole job:
``MPI_Abort`` once MPI is initialised (the launcher kills every rank, stopped ones included),
and before that (stuck in ``MPI_Init``) by killing this node's ranks directly.

``MPI_Init`` holds Python's GIL while it waits, so no thread could watch it: before it, the
ranks on this node meet in a rendezvous written in Python (``rendezvous``: each rank's progress
file must appear, from a live rank), which the watchdog does watch. A rank that exits before
MPI starts (an argument error) or never arrives (another program) is caught there.

Peers are found through the launcher's environment (``PMI_RANK``, ``PMI_SIZE``,
``MPI_LOCALNRANKS``: MPICH's Hydra) and ``/proc``: the ranks on this node are the launcher
proxy's children. Elsewhere (other launchers, other systems) only the timeout applies, and ranks
on other nodes are only covered once MPI has started.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

DEFAULT_TIMEOUT_S = 600.0
"""Seconds one rank waits in a collective before the job is aborted (start-up included)."""
TIMEOUT_ENV = "TORCHLEAN_MPI_TIMEOUT"
EXIT_GRACE_S = 2.0
"""Seconds a wait may go on after a peer on this node exited (it may have finished its part)."""
ABORT_CODE = 124
FORWARD_GRACE_S = 1.5
"""Seconds between printing the message and aborting: the launcher forwards a rank's stderr
through its proxy, and an abort processed first would drop the message (seen on a busy host)."""


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def launcher_world() -> tuple[int, int] | None:
    """``(rank, size)`` from the launcher's environment, or ``None`` outside a launcher."""
    for rank_key, size_key in (("PMI_RANK", "PMI_SIZE"),
                               ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        rank, size = _env_int(rank_key), _env_int(size_key)
        if rank is not None and size is not None:
            return rank, size
    return None


def timeout_from_env(default: float = DEFAULT_TIMEOUT_S) -> float:
    """The collective timeout ``TORCHLEAN_MPI_TIMEOUT`` asks for, else ``default``."""
    text = os.environ.get(TIMEOUT_ENV)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e9:
        raise ValueError(f"{TIMEOUT_ENV}={text!r}: expected a number of seconds in (0, 1e9)")
    return value


def _proc_state(pid: int) -> str | None:
    """The one-letter state of process ``pid`` ('R', 'S', 'T' stopped, 'Z' zombie...), or
    ``None`` when it no longer exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
        return text[text.rindex(")") + 2]
    except (OSError, ValueError, IndexError):
        return None


def _children(ppid: int) -> dict[int, str]:
    """pid -> state of the processes whose parent is ``ppid`` (Linux ``/proc``)."""
    out: dict[int, str] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                text = f.read().decode(errors="replace")
            fields = text[text.rindex(")") + 2:].split()
            if int(fields[1]) == ppid:
                out[int(name)] = fields[0]
        except (OSError, ValueError, IndexError):
            continue
    return out


def _rank_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"PMI_RANK="):
            with contextlib.suppress(ValueError):
                return int(item[9:])
    return None


class Watchdog:
    """See the module doc. ``abort`` (set once MPI is initialised) ends the job; before that
    the ranks on this node are killed."""

    def __init__(self, rank: int, world_size: int, timeout_s: float = DEFAULT_TIMEOUT_S,
                 poll_s: float = 0.2) -> None:
        self.rank, self.world_size = rank, world_size
        self.timeout_s, self.poll_s = float(timeout_s), float(poll_s)
        self.abort: Callable[[int], Any] | None = None
        self.local_size = _env_int("MPI_LOCALNRANKS") or 1
        self.ppid = os.getppid()
        self.peers: dict[int, int] = {}  # rank -> pid, for the ranks seen on this node
        self.count = 0                   # collectives started by this rank
        self._wait: tuple[int, str, float] | None = None  # (count, name, since)
        self._lost_since: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._dir = os.path.join(tempfile.gettempdir(),
                                 f"torchlean-mpi-{os.getuid()}-{self.ppid}")
        self._fd: int | None = None
        with contextlib.suppress(OSError):
            os.makedirs(self._dir, mode=0o700, exist_ok=True)
            self._fd = os.open(os.path.join(self._dir, f"rank-{rank}"),
                               os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self._record("start-up")
        self._thread = threading.Thread(target=self._run, name="torchlean-mpi-watchdog",
                                        daemon=True)
        self._thread.start()

    # -- what this rank does --------------------------------------------------------------------
    def _record(self, name: str) -> None:
        if self._fd is None:
            return
        line = f"{os.getpid()} {self.count} {name}".encode()[:120].ljust(128)
        with contextlib.suppress(OSError):
            os.pwrite(self._fd, line, 0)

    @contextlib.contextmanager
    def waiting(self, name: str) -> Iterator[None]:
        """Armed for the duration: this rank waits in the collective ``name``."""
        with self._lock:
            self.count += 1
            self._wait = (self.count, name, time.monotonic())
            self._lost_since = None
        self._record(name)
        try:
            yield
        finally:
            with self._lock:
                self._wait = None

    def rendezvous(self, name: str) -> None:
        """Wait (watched) until every rank on this node has started its watchdog: called just
        before ``MPI_Init``, which cannot be watched (see the module doc)."""
        if self.local_size <= 1 or self.ppid <= 1 or self._fd is None:
            return
        with self.waiting(name):
            while True:
                children = _children(self.ppid)
                here = 1  # this rank
                for pid, state in children.items():
                    if pid != os.getpid() and state != "Z":
                        rank = _rank_of(pid)
                        progress = None if rank is None else self._progress(rank)
                        here += progress is not None and progress[0] == pid
                if here >= self.local_size:
                    return
                time.sleep(self.poll_s / 2)

    def close(self) -> None:
        self._stop.set()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
                os.unlink(os.path.join(self._dir, f"rank-{self.rank}"))
            self._fd = None
            with contextlib.suppress(OSError):
                os.rmdir(self._dir)  # the last rank out removes the directory

    # -- the thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            with self._lock:
                wait = self._wait
            if wait is None:
                continue
            count, name, since = wait
            lost = self._lost_peers()
            now = time.monotonic()
            if lost:
                if self._lost_since is None:
                    self._lost_since = now
                elif now - self._lost_since >= EXIT_GRACE_S and self._still(count):
                    self._fire(name, count, "a rank on this node has exited")
            if now - since >= self.timeout_s and self._still(count):
                self._fire(name, count, f"it did not complete within {self.timeout_s:g} s "
                                        f"(the collective timeout, {TIMEOUT_ENV} or "
                                        "--collective-timeout)")

    def _still(self, count: int) -> bool:
        with self._lock:
            return self._wait is not None and self._wait[0] == count

    def _scan(self) -> dict[int, str]:
        """State of this node's other ranks (pid -> state), learning their ranks."""
        children = _children(self.ppid)
        children.pop(os.getpid(), None)
        for pid, state in children.items():
            if pid not in self.peers.values() and state != "Z":
                rank = _rank_of(pid)
                if rank is not None:
                    self.peers[rank] = pid
        return children

    def _lost_peers(self) -> bool:
        if self.local_size <= 1 or self.ppid <= 1:
            return False
        children = self._scan()
        alive = [pid for pid, state in children.items() if state != "Z"]
        return len(alive) + 1 < self.local_size

    def describe_peers(self) -> list[str]:
        """One line per other rank that this one is waiting for, and why."""
        children = self._scan()
        lines = []
        for rank in range(self.world_size):
            if rank == self.rank:
                continue
            pid = self.peers.get(rank)
            state = None if pid is None else children.get(pid, _proc_state(pid))
            progress = self._progress(rank)
            if progress is not None and progress[0] != pid:
                progress = None  # left by another process
            if pid is not None and state in (None, "Z"):
                lines.append(f"rank {rank} (pid {pid}) has exited")
            elif state in ("T", "t"):
                lines.append(f"rank {rank} (pid {pid}) is stopped (SIGSTOP or a debugger)")
            elif pid is not None and progress is None:
                lines.append(f"rank {rank} (pid {pid}) has not started torchlean's collectives "
                             "(another program, or still starting)")
            elif progress is not None and progress[1] < self.count:
                lines.append(f"rank {rank} has not reached it (it is at collective "
                             f"#{progress[1]}, {progress[2]})")
            elif pid is None and self.local_size == self.world_size:
                lines.append(f"rank {rank} is not running on this node (it exited early or "
                             "never started)")
        return lines

    def _progress(self, rank: int) -> tuple[int, int, str] | None:
        """``(pid, collectives started, the last one's name)`` as rank ``rank`` recorded."""
        try:
            with open(os.path.join(self._dir, f"rank-{rank}"), "rb") as f:
                pid, count, name = f.read(128).decode(errors="replace").strip().split(" ", 2)
            return int(pid), int(count), name
        except (OSError, ValueError):
            return None

    def _fire(self, name: str, count: int, why: str) -> None:
        missing = self.describe_peers()
        shown = "; ".join(missing) if missing else "no rank on this node could be named"
        print(f"torchlean: rank {self.rank} of {self.world_size}: waiting in {name} (collective "
              f"#{count}): {why}; missing: {shown}; aborting all ranks", file=sys.stderr,
              flush=True)
        sys.stdout.flush()
        self._stop.set()
        time.sleep(FORWARD_GRACE_S)
        if self.abort is not None:
            with contextlib.suppress(Exception):
                self.abort(ABORT_CODE)
        # MPI not initialised yet (stuck in MPI_Init), or Abort failed: end this node's ranks.
        for pid in list(self.peers.values()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os._exit(ABORT_CODE)


_DOG: Watchdog | None = None


def start(timeout_s: float | None = None, poll_s: float = 0.2) -> Watchdog | None:
    """The process's watchdog, started on first call when running under an MPI launcher with
    more than one rank (``None`` otherwise). ``timeout_s`` (else ``TORCHLEAN_MPI_TIMEOUT``, else
    ``DEFAULT_TIMEOUT_S``) only applies to the first call."""
    global _DOG
    if _DOG is None:
        world = launcher_world()
        if world is None or world[1] <= 1:
            return None
        rank, size = world
        _remove_stale_directories()
        _DOG = Watchdog(rank, size, timeout_from_env() if timeout_s is None else timeout_s,
                        poll_s)
        atexit.register(_DOG.close)
    return _DOG


def _remove_stale_directories() -> None:
    """Progress directories of jobs whose launcher proxy no longer runs (aborted jobs)."""
    prefix = f"torchlean-mpi-{os.getuid()}-"
    with contextlib.suppress(OSError):
        for name in os.listdir(tempfile.gettempdir()):
            if name.startswith(prefix) and name[len(prefix):].isdigit() and _proc_state(
                    int(name[len(prefix):])) in (None, "Z"):
                shutil.rmtree(os.path.join(tempfile.gettempdir(), name), ignore_errors=True)
