"""Counter-based random sources: ``tl.Generator`` (``torch.Generator``'s role) and the
thread-local default generators behind ``tl.manual_seed``.

Draw k of a generator uses the key (seed, k) of the SplitMix64 stream that ``rand_uniform``
defines, so a seed gives the same numbers on every backend and in every process, and no global
state is shared between threads: each thread's default generator has its own seed and counter.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import TorchLeanError
from .registry import REGISTRY

float64 = np.dtype(np.float64)


class Generator:
    """A counter-based random source (SplitMix64, as ``rand_uniform``): draw k uses key
    (seed, k), so a seed gives the same numbers on every backend. ``torch.Generator``'s role."""

    def __init__(self, seed: int = 0, device: Any = None) -> None:
        # torch.Generator(device=...): the draws are the same bits on every device, so the
        # device only has to be one torchlean knows
        name = str(getattr(device, "type", device)).split(":")[0]
        if device is not None and name not in ("cpu", "cuda"):
            raise TorchLeanError(f"Generator: device must be 'cpu' or 'cuda', found {device!r}")
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> Generator:
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise TorchLeanError(f"manual_seed: seed must be a non-negative int, found {seed!r}")
        self.seed = int(seed)
        self.counter = 0
        return self

    def uniform(self, shape: Sequence[int], dtype: Any = float64, xp: Any = np) -> Any:
        """U[0, 1) draws of ``shape``, made in namespace ``xp`` (NumPy by default; a device
        namespace computes the same bits on the device, with no upload)."""
        prim = REGISTRY["rand_uniform"]
        attrs = prim.check_attrs({"shape": shape, "dtype": dtype})  # before the counter moves
        counter = self.counter
        self.counter += 1
        return prim.forward(shape=attrs["shape"], seed=self.seed, counter=counter,
                            dtype=attrs["dtype"], xp=xp)

    def normal(self, shape: Sequence[int], dtype: Any = float64, xp: Any = np) -> Any:
        """Standard normal draws (Box-Muller on two uniform draws, in float64), made in
        namespace ``xp``."""
        u1 = self.uniform(shape, xp=xp)
        u2 = self.uniform(shape, xp=xp)
        radius = xp.sqrt(-2.0 * xp.log1p(-u1))  # 1 - u1 lies in (0, 1]: log is finite
        return (radius * xp.cos(2.0 * np.pi * u2)).astype(np.dtype(dtype))


class ThreadLocalGenerator(Generator):
    """A generator whose seed and counter are per thread: the default ones (``manual_seed``).

    Threads that seed and draw at the same time (building models concurrently) each get what a
    serial run gives, instead of interleaving one counter. A thread starts from seed 0, counter 0
    until it calls ``manual_seed``. Pass an explicit ``Generator`` to share one stream on purpose.
    """

    def __init__(self, seed: int = 0) -> None:
        self._local = threading.local()
        super().__init__(seed)

    def _state(self) -> Any:
        local = self._local
        if not hasattr(local, "seed"):
            local.seed, local.counter = 0, 0
        return local

    @property  # type: ignore[override]
    def seed(self) -> int:
        return int(self._state().seed)

    @seed.setter
    def seed(self, value: int) -> None:
        self._state().seed = value

    @property  # type: ignore[override]
    def counter(self) -> int:
        return int(self._state().counter)

    @counter.setter
    def counter(self, value: int) -> None:
        self._state().counter = value


default_generator = ThreadLocalGenerator(0)
"""The source of ``tl.rand``/``tl.randn`` and dropout masks (``torch.default_generator``)."""

init_generator = ThreadLocalGenerator(0)
"""The source of ``tl.nn``'s initial weights. Thread-local: each thread seeds and draws its own
(seed, counter), so models built in several threads at once get the weights a serial build gets.
``tl.manual_seed`` seeds both; ``tl.nn.manual_seed`` this one alone."""


def check_generator(op: str, generator: Any, default: Generator | None = None) -> Generator:
    """``generator`` checked (a ``tl.Generator``), or ``default`` for ``None`` (the tensors'
    default generator unless another is given, as ``tl.nn`` gives its init generator)."""
    if generator is None:
        return default_generator if default is None else default
    if not isinstance(generator, Generator):
        raise TorchLeanError(f"{op}: generator must be a tl.Generator, found "
                             f"{type(generator).__name__} {generator!r}")
    return generator
