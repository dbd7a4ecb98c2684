"""Resampling: ``interpolate`` in the linear modes, ``affine_grid`` and ``grid_sample``.

Each is written with tensor ops over constant index arrays: an output entry is a weighted sum
of gathered input entries, the integer positions computed from values (no gradient flows
through a floor, as in torch) and the weights from the coordinates, so the gradient reaches the
input and, for ``grid_sample``, the sampling grid (what a spatial transformer learns). The
coordinate rules are torch's (``align_corners`` both ways, ``scale_factor`` used as the scale
when given, zero or border padding).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import ShapeError, TorchLeanError
from ..engine.tensor import Tensor, tensor

__all__ = ["affine_grid", "grid_sample", "linear_resize"]


def _source(n_in: int, n_out: int, align_corners: bool, scale: float | None) -> np.ndarray:
    """torch's source coordinate of every output position along one axis (linear modes)."""
    i = np.arange(n_out, dtype=np.float64)
    if align_corners:
        return i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    ratio = (1.0 / scale) if scale is not None else n_in / n_out
    return np.maximum((i + 0.5) * ratio - 0.5, 0.0)


def linear_resize(x: Tensor, target: list[int], align_corners: bool,
                  factors: list[float] | None) -> Tensor:
    """``(N, C, *spatial)`` resized to ``target`` by (bi/tri)linear interpolation, one axis
    at a time (separable, as torch's kernels compute it)."""
    out = x
    spatial = x.shape[2:]
    for k, (n_in, n_out) in enumerate(zip(spatial, target, strict=True)):
        axis = 2 + k
        src = _source(n_in, n_out, align_corners, None if factors is None else factors[k])
        lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
        hi = np.minimum(lo + 1, n_in - 1)
        frac = (src - lo).astype(np.dtype(x.dtype))
        shape = [1] * out.ndim
        shape[axis] = n_out
        index = (slice(None),) * axis
        w_hi = tensor(frac.reshape(shape))
        w_lo = tensor((1.0 - frac).reshape(shape))
        out = out[index + (lo,)] * w_lo + out[index + (hi,)] * w_hi
    return out


def _base(n: int, align_corners: bool) -> np.ndarray:
    if align_corners:
        return np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
    return (np.arange(n) * 2.0 + 1.0) / n - 1.0


def affine_grid(theta: Any, size: Any, align_corners: bool | None = None) -> Tensor:
    """The ``(N, H, W, 2)`` sampling grid of the 2-D affine maps ``theta (N, 2, 3)`` over
    normalised output coordinates (``[-1, 1]``, x before y)."""
    fn = "affine_grid"
    if not isinstance(theta, Tensor) or theta.ndim != 3 or tuple(theta.shape[1:]) != (2, 3):
        raise ShapeError(f"{fn}: expected theta as an (N, 2, 3) float tensor, found "
                         f"{getattr(theta, 'shape', type(theta).__name__)}")
    dims = [int(s) for s in size]
    if len(dims) != 4 or dims[0] != theta.shape[0]:
        raise ShapeError(f"{fn}: size must be (N, C, H, W) with N = {theta.shape[0]}, found "
                         f"{tuple(size)}")
    h, w = dims[2], dims[3]
    corners = bool(align_corners)
    xs, ys = _base(w, corners), _base(h, corners)
    base = np.stack([np.tile(xs, h), np.repeat(ys, w), np.ones(h * w)], axis=1)
    grid = tensor(base.astype(np.dtype(theta.dtype))) @ theta.transpose(1, 2)  # (N, H*W, 2)
    return grid.reshape(dims[0], h, w, 2)


def _unnormalise(coord: Any, n: int, align_corners: bool) -> Any:
    if align_corners:
        return (coord + 1.0) * ((n - 1) / 2.0)
    return ((coord + 1.0) * n - 1.0) / 2.0


def grid_sample(input: Any, grid: Any, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = None) -> Any:
    """``input (N, C, H, W)`` sampled at ``grid (N, Ho, Wo, 2)`` (normalised x, y), bilinear
    or nearest, zero or border padding: ``(N, C, Ho, Wo)``."""
    fn = "grid_sample"
    if mode not in ("bilinear", "nearest"):
        raise TorchLeanError(f"{fn}: mode must be 'bilinear' or 'nearest', found {mode!r}")
    if padding_mode not in ("zeros", "border"):
        raise TorchLeanError(f"{fn}: padding_mode must be 'zeros' or 'border', found "
                             f"{padding_mode!r}")
    if not isinstance(input, Tensor) or input.ndim != 4:
        raise ShapeError(f"{fn}: expected input as an (N, C, H, W) tensor, found "
                         f"{getattr(input, 'shape', type(input).__name__)}")
    n, c, h, w = input.shape
    if not isinstance(grid, Tensor) or grid.ndim != 4 or grid.shape[0] != n \
            or grid.shape[3] != 2:
        raise ShapeError(f"{fn}: expected grid as an ({n}, Ho, Wo, 2) tensor, found "
                         f"{getattr(grid, 'shape', type(grid).__name__)}")
    ho, wo = grid.shape[1], grid.shape[2]
    corners = bool(align_corners)
    ix = _unnormalise(grid[..., 0].reshape(n, 1, ho * wo), w, corners)
    iy = _unnormalise(grid[..., 1].reshape(n, 1, ho * wo), h, corners)
    if padding_mode == "border":
        ix, iy = ix.clamp(0, w - 1), iy.clamp(0, h - 1)
    flat: Any = input.reshape(n, c, h * w)
    dt = np.dtype(input.dtype)

    def corner(xi: np.ndarray, yi: np.ndarray) -> Any:
        inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
        idx = np.where(inside, np.clip(yi, 0, h - 1) * w + np.clip(xi, 0, w - 1), 0)
        values = flat.gather(2, tensor(np.broadcast_to(idx, (n, c, ho * wo)).copy()))
        return values * tensor(inside.astype(dt))

    x_val, y_val = ix.detach().numpy(), iy.detach().numpy()
    if mode == "nearest":
        xn = np.rint(x_val).astype(np.int64)  # round half to even, as torch's nearbyint
        yn = np.rint(y_val).astype(np.int64)
        return corner(xn, yn).reshape(n, c, ho, wo)
    x0, y0 = np.floor(x_val).astype(np.int64), np.floor(y_val).astype(np.int64)
    wx1 = ix - tensor(x0.astype(dt))
    wy1 = iy - tensor(y0.astype(dt))
    wx0, wy0 = 1.0 - wx1, 1.0 - wy1
    out = (corner(x0, y0) * (wx0 * wy0) + corner(x0 + 1, y0) * (wx1 * wy0)
           + corner(x0, y0 + 1) * (wx0 * wy1) + corner(x0 + 1, y0 + 1) * (wx1 * wy1))
    return out.reshape(n, c, ho, wo)

