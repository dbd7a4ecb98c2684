"""torch's process-wide runtime switches: thread counts, float32 matmul precision, determinism.

``set_num_threads(n)`` limits the BLAS and OpenMP pools NumPy uses (through threadpoolctl, an
optional extra; without it only the request is remembered); ``get_num_threads()`` reports the
limit in force. torchlean's float32 products are float32 products and its kernels are
deterministic already, so ``set_float32_matmul_precision`` and ``use_deterministic_algorithms``
check their argument and record it (the getters report it back, as torch's do).
"""

from __future__ import annotations

import os
from typing import Any

from ..core.errors import TorchLeanError

__all__ = ["are_deterministic_algorithms_enabled", "get_float32_matmul_precision",
           "get_num_interop_threads", "get_num_threads",
           "is_deterministic_algorithms_warn_only_enabled",
           "set_float32_matmul_precision", "set_num_interop_threads", "set_num_threads",
           "use_deterministic_algorithms"]

_STATE: dict[str, Any] = {"threads": None, "interop": 1, "precision": "highest",
                          "deterministic": False, "warn_only": False}
_LIMITERS: list[Any] = []  # the threadpoolctl limit in force (kept alive: dropping it restores)


def _count(op: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TorchLeanError(f"{op}: expected a positive int, found {n!r}")
    return n


def set_num_threads(n: int) -> None:
    """Use at most ``n`` threads in NumPy's BLAS/OpenMP pools from now on."""
    _STATE["threads"] = _count("set_num_threads", n)
    try:
        from threadpoolctl import threadpool_limits  # optional extra
    except ImportError:
        return
    _LIMITERS[:] = [threadpool_limits(limits=n)]


def get_num_threads() -> int:
    """The thread limit set, else the BLAS pool's size (else the CPU count)."""
    if _STATE["threads"] is not None:
        return int(_STATE["threads"])
    try:
        from threadpoolctl import threadpool_info  # optional extra
    except ImportError:
        return os.cpu_count() or 1
    sizes = [int(info.get("num_threads", 1)) for info in threadpool_info()]
    return max(sizes) if sizes else (os.cpu_count() or 1)


def set_num_interop_threads(n: int) -> None:
    _STATE["interop"] = _count("set_num_interop_threads", n)


def get_num_interop_threads() -> int:
    return int(_STATE["interop"])


def set_float32_matmul_precision(precision: str) -> None:
    """Accepts torch's three settings; float32 products stay float32 products here."""
    if precision not in ("highest", "high", "medium"):
        raise TorchLeanError(f"set_float32_matmul_precision: expected 'highest', 'high' or "
                             f"'medium', found {precision!r}")
    _STATE["precision"] = precision


def get_float32_matmul_precision() -> str:
    return str(_STATE["precision"])


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Accepted and recorded: torchlean's kernels give the same bits on every run."""
    if not isinstance(mode, bool) or not isinstance(warn_only, bool):
        raise TorchLeanError(f"use_deterministic_algorithms: mode and warn_only must be bools, "
                             f"found {mode!r}, {warn_only!r}")
    _STATE["deterministic"], _STATE["warn_only"] = mode, warn_only


def are_deterministic_algorithms_enabled() -> bool:
    return bool(_STATE["deterministic"])


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return bool(_STATE["warn_only"])
