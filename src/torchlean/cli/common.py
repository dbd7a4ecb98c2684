"""What every ``torchlean`` command shares: its error, argument types, output files, threads.

Outputs are written the way a user expects of a command-line tool: atomically (a temporary file
beside the target, then a rename, so an interrupted run leaves the old file or none) and with the
user's umask (``0666 & ~umask``, as ``open`` would create them; ``mkstemp`` alone makes 0600).
Every check a command can make before it starts work (an output path that cannot be written, two
outputs on one path, a missing optional library, an unusable device) is made here, up front.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..core.backend import namespace_for
from ..core.errors import TorchLeanError
from ..core.safe_files import non_regular_kind

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_DIVERGED = 1  # training stopped on a NaN or infinite value


class CliError(TorchLeanError):
    """Bad command-line input that is not any other torchlean error."""


# ---------------------------------------------------------------------------------------------
# Argument types: each names what it expected and what it found.


def int_in(minimum: int, maximum: int | None = None, what: str = "") -> Callable[[str], int]:
    """An argparse type for integers in ``[minimum, maximum]``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, found {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            span = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            raise argparse.ArgumentTypeError(f"expected {what or 'an integer'} {span}, found "
                                             f"{value}")
        return value

    return parse


positive_int = int_in(1, what="an integer")
non_negative_int = int_in(0, what="an integer")
seed_int = int_in(0, (1 << 63) - 1, "a seed")  # what NumPy's generators (and configs) take
MAX_THREADS = 1024  # more BLAS threads than any machine has cores is a typo, not a request
threads_int = int_in(1, MAX_THREADS, "a thread count")


def float_in(low: float, high: float, what: str = "a number",
             low_open: bool = False) -> Callable[[str], float]:
    """An argparse type for finite floats in ``[low, high]`` (``(low, high]`` if ``low_open``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, found {text!r}") from None
        below = value <= low if low_open else value < low
        if not math.isfinite(value) or below or value > high:
            bracket = "(" if low_open else "["
            raise argparse.ArgumentTypeError(f"expected {what} in {bracket}{low:g}, {high:g}], "
                                             f"found {text}")
        return value

    return parse


positive_float = float_in(0.0, float(np.finfo(np.float64).max), "a positive number", low_open=True)


def output_path(text: str) -> str:
    """An argparse type for an output file: a non-empty path."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file path, found an empty string")
    return text


def add_runtime_options(p: argparse.ArgumentParser, backend_help: str | None = None) -> None:
    """``--backend``, ``--device`` and ``--threads``, shared by train and eval.

    ``backend_help``: the command chooses the default backend itself (``--backend`` defaults
    to ``None``) and says how in this help text.
    """
    p.add_argument("--backend", choices=("eager", "compiled"),
                   default=None if backend_help else "eager",
                   help=backend_help or "eager tape, or a graph compiled once per batch shape "
                                        "(default eager)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where to run (cuda needs CuPy and a GPU; default cpu)")
    add_threads_option(p)


def add_threads_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=threads_int, default=1,
                   help="BLAS threads (default 1: these models' matrices are small, and more "
                        "threads cost more in synchronisation than they give)")


# ---------------------------------------------------------------------------------------------
# Outputs


def check_outputs(outputs: Iterable[tuple[str | None, str]]) -> None:
    """Each output path must be writable, and no two outputs (or an input) may share a path.

    ``outputs`` pairs a path (``None``: not asked for) with its option name; an input is named
    with a leading ``<`` (``"<--checkpoint"``) and is only checked for clashes.
    """
    seen: dict[str, str] = {}
    for path, what in outputs:
        if not path:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise CliError(f"{what.lstrip('<')} {path}: the same file as {seen[key].lstrip('<')}; "
                           "give each output its own path")
        seen[key] = what
        if not what.startswith("<"):
            check_writable(path, what)


def check_writable(path: str, what: str) -> None:
    """Fail now, before any work, if ``path`` cannot be written (no file is left behind)."""
    if os.path.isdir(path):
        raise CliError(f"{what} {path}: is a directory")
    kind = non_regular_kind(path)  # renaming over a device node or FIFO would destroy it
    if kind is not None:
        raise CliError(f"{what} {path}: is {kind}; outputs are written as regular files")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CliError(f"{what} {path}: directory {directory} does not exist")
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".torchlean-probe-")
    except OSError as exc:
        raise CliError(f"{what} {path}: cannot write in {directory} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise CliError(f"{what} {path}: file exists and is not writable")


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[str]:
    """A temporary path beside ``path``; on success it replaces ``path`` with the umask's mode."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.",
                               suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def save_png(fig: Any, path: str) -> None:
    """Write a matplotlib figure as a PNG, atomically and with the user's umask; close it."""
    import matplotlib.pyplot as plt  # an optional library, checked before the command's work

    try:
        with atomic_output(path) as tmp:
            fig.savefig(tmp, format="png", dpi=100)
    finally:
        plt.close(fig)


def write_text(path: str, text: str) -> None:
    """Write ``text`` atomically, with the user's umask."""
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


def check_libraries(save: bool = False, plot: bool = False) -> None:
    """The optional libraries an output needs, checked before the work rather than after."""
    if save:
        try:
            import safetensors  # noqa: F401
        except ImportError:
            raise CliError("--save: safetensors is not installed (pip install "
                           "'torchlean[examples]')") from None
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CliError("--plot: matplotlib is not installed (pip install "
                           "'torchlean[examples]')") from None


def check_device(device: str, distributed: bool = False) -> None:
    """Fail before loading data or training when ``--device`` cannot be used here."""
    if device == "cuda":
        if distributed:
            raise CliError("--device cuda: data-parallel training (--distributed) runs on the "
                           "host; use --device cpu")
        namespace_for("cuda")  # DeviceError naming what is missing (CuPy, a GPU)


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """Limit BLAS threads for the duration (threadpoolctl comes with scikit-learn)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=n, user_api="blas"):
        yield


def progress_bars() -> bool:
    """Progress bars only on a terminal: a log file gets the result lines, not the redraws."""
    return sys.stderr.isatty()


class StopFlag:
    """SIGINT sets a flag that ``fit`` polls after each batch; a second Ctrl-C aborts."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __call__(self) -> bool:
        return self.requested

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\ninterrupt: stopping after this batch (Ctrl-C again to abort)", file=sys.stderr,
              flush=True)

    def __enter__(self) -> StopFlag:
        with contextlib.suppress(ValueError):  # not the main thread: no handler, no flag
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
