"""``torch.amp`` (also ``torch.cuda.amp`` and ``torch.autocast``): automatic
mixed precision's two names, ``autocast`` and ``GradScaler``.

torchlean computes in float32 or float64 only (no float16 or bfloat16 kernels), so ``autocast``
is a context manager (and decorator) that checks its arguments and leaves every op in its
tensors' own dtype: a program written for mixed precision runs at full precision, its values
then being what the float32 program gives (closer to the exact ones than torch's low-precision
run, never further). ``GradScaler`` is torch's loss scaler, whole: ``scale`` multiplies the
loss, ``unscale_``/``step`` divide the gradients back and skip the step when one is not finite,
``update`` grows or backs off the scale; a scaler for ``"cuda"`` where no GPU is usable disables
itself, as torch's does (``scale`` and ``unscale_`` then do nothing, ``step`` steps).
"""

from __future__ import annotations

import functools
import math
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from . import cuda
from .core.errors import TorchLeanError
from .engine.tensor import Tensor, no_grad

__all__ = ["GradScaler", "autocast", "is_autocast_available"]

_DTYPES = ("float16", "bfloat16", "float32", "float64")


class autocast:  # noqa: N801  (torch's name)
    """``with autocast("cuda", dtype=torch.float16): ...``: arguments checked, ops unchanged
    (see the module docstring)."""

    def __init__(self, device_type: str = "cuda", dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        if not isinstance(device_type, str) or device_type.split(":")[0] not in (
                "cpu", "cuda", "mps", "xpu"):
            raise TorchLeanError(f"autocast: device_type must be 'cpu' or 'cuda', found "
                                 f"{device_type!r}")
        name = getattr(dtype, "__name__", None) or str(dtype)
        if dtype is not None and not any(d in name for d in _DTYPES):
            raise TorchLeanError(f"autocast: dtype must be a floating dtype, found {dtype!r}")
        if not isinstance(enabled, bool):
            raise TorchLeanError(f"autocast: enabled must be a bool, found {enabled!r}")
        self.device_type, self.fast_dtype, self.enabled = device_type, dtype, enabled

    def __enter__(self) -> autocast:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)
        return wrapped


def is_autocast_available(device_type: str) -> bool:
    return device_type in ("cpu", "cuda")


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise TorchLeanError(f"GradScaler: {name} must be a positive number, found {value!r}")
    return float(value)


class GradScaler:
    """torch's dynamic loss scaler (``torch.amp.GradScaler(device, init_scale=2**16, ...)``)."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        if not isinstance(device, str):
            raise TorchLeanError(f"GradScaler: device must be a str, found {device!r}")
        self._scale = _positive("init_scale", init_scale)
        self._growth_factor = _positive("growth_factor", growth_factor)
        if self._growth_factor <= 1.0:
            raise TorchLeanError("GradScaler: growth_factor must be > 1")
        self._backoff_factor = _positive("backoff_factor", backoff_factor)
        if self._backoff_factor >= 1.0:
            raise TorchLeanError("GradScaler: backoff_factor must be < 1")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) \
                or growth_interval < 1:
            raise TorchLeanError(f"GradScaler: growth_interval must be a positive int, found "
                                 f"{growth_interval!r}")
        self._growth_interval = growth_interval
        # torch disables a CUDA scaler where CUDA is not available (with a warning)
        self._enabled = bool(enabled) and not (device.startswith("cuda")
                                               and not cuda.is_available())
        self._growth_tracker = 0
        self._unscaled: dict[int, bool] = {}  # optimiser id -> found a non-finite gradient

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def scale(self, outputs: Any) -> Any:
        """The loss (or nested outputs) times the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * self._scale
        if isinstance(outputs, list | tuple):
            return type(outputs)(self.scale(o) for o in outputs)
        raise TorchLeanError(f"GradScaler.scale: expected a tensor or a sequence of tensors, "
                             f"found {type(outputs).__name__}")

    def unscale_(self, optimizer: Any) -> None:
        """Divide the optimiser's gradients by the scale (once per step), noting whether any is
        not finite."""
        if not self._enabled:
            return
        if id(optimizer) in self._unscaled:
            raise TorchLeanError("GradScaler.unscale_: already called on this optimizer since "
                                 "the last update()")
        inv = 1.0 / self._scale
        found = False
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = p.grad
                    g.mul_(inv)
                    if not bool(np.isfinite(g.detach().numpy()).all()):
                        found = True
        self._unscaled[id(optimizer)] = found

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """``optimizer.step()`` unless a gradient is not finite (unscaling first if needed)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        if self._unscaled[id(optimizer)]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale: Any = None) -> None:
        """Back off after a skipped step, grow after ``growth_interval`` clean ones."""
        if not self._enabled:
            return
        if new_scale is not None:
            value = float(new_scale.item() if isinstance(new_scale, Tensor) else new_scale)
            self._scale = _positive("new_scale", value)
        elif any(self._unscaled.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        elif self._unscaled:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                self._scale *= self._growth_factor
                self._growth_tracker = 0
        if not math.isfinite(self._scale):
            raise TorchLeanError("GradScaler.update: the scale overflowed")
        self._unscaled = {}

    def state_dict(self) -> dict[str, Any]:
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if not state_dict:
            raise TorchLeanError("GradScaler.load_state_dict: the state dict is empty (saved "
                                 "from a disabled scaler)")
        self._scale = _positive("scale", state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])


def _namespace(name: str) -> types.ModuleType:
    """``torch.cuda.amp``: the same two names (their deprecated home)."""
    module = types.ModuleType(name, "torch's deprecated per-device amp names (torchlean.amp).")
    device = name.split(".")[1]

    class _DeviceAutocast(autocast):
        def __init__(self, enabled: bool = True, dtype: Any = None,
                     cache_enabled: bool | None = None) -> None:
            super().__init__(device, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    class _DeviceScaler(GradScaler):
        def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                     backoff_factor: float = 0.5, growth_interval: int = 2000,
                     enabled: bool = True) -> None:
            super().__init__(device, init_scale, growth_factor, backoff_factor, growth_interval,
                             enabled)

    _DeviceAutocast.__name__ = "autocast"
    _DeviceScaler.__name__ = "GradScaler"
    module.autocast = _DeviceAutocast  # type: ignore[attr-defined]
    module.GradScaler = _DeviceScaler  # type: ignore[attr-defined]
    sys.modules.setdefault(name, module)
    return module


cuda_amp = _namespace("torchlean.cuda.amp")
# ``torch.cuda.amp.GradScaler`` as an attribute path too (the package imports this module)
cuda.amp = cuda_amp  # type: ignore[attr-defined]
