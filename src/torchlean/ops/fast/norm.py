"""Fast layer normalisation (NumPy only; see ``ops.fast``).

The reference VJP computes the row statistics twice more (``standardize_backward`` and
``norm_param_grad`` each centre the rows again). Here the forward (the reference's statistics
and affine, the same bits) keeps ``xhat`` and ``rstd`` against its output, and the VJP is one
fused pass over them: ``gx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat))`` with
``gxhat = g * gamma``, ``ggamma = sum(g * xhat)``, ``gbeta = sum(g)`` over the rows. A VJP that
finds no residual recomputes them with the forward's code (the same bits).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.registry import attach_fast
from ..norm import _stats
from . import residuals

_SAVED = "layer_norm.stats"


def _key(x: Any, eps: float) -> Any:
    return (x.shape, x.dtype.str, eps)


def forward_saving(x: Any, gamma: Any, beta: Any, eps: float = 1e-6
                   ) -> tuple[Any, tuple[Any, Any]]:
    """The output and ``(xhat, rstd)`` (``vjp_from``'s ``saved``)."""
    xhat, rstd = _stats(x, (x.ndim - 1,), eps)
    y = xhat * gamma
    y += beta
    return y, (xhat, rstd)


def forward(x: Any, gamma: Any, beta: Any, eps: float = 1e-6) -> Any:
    """Fast ``layer_norm`` forward: the reference's arithmetic, keeping ``xhat`` and ``rstd``."""
    y, saved = forward_saving(x, gamma, beta, eps)
    residuals.save(y, _SAVED, _key(x, eps), saved)
    return y


def vjp(ops: Any, g: Any, xs: Any, out: Any, eps: float = 1e-6) -> tuple[Any, Any, Any]:
    """Fast ``layer_norm`` VJP from the saved (or recomputed) statistics."""
    return vjp_from(ops, g, xs, out, residuals.load(out, _SAVED, _key(xs[0], eps)), eps)


def vjp_from(ops: Any, g: Any, xs: Any, out: Any, saved: Any, eps: float = 1e-6,
             needed: tuple[bool, ...] = (True, True, True)) -> tuple[Any, Any, Any]:
    """The VJP from ``forward_saving``'s ``saved`` (recomputed when ``None``: the same bits);
    ``x``'s cotangent is skipped (``None``) where ``needed`` says so (generated code: a data
    input, as the first layer norm of W5)."""
    x, gamma, _ = xs
    xhat, rstd = _stats(x, (x.ndim - 1,), eps) if saved is None else saved
    d = x.shape[-1]
    g2 = g.reshape(-1, d)
    xh2 = xhat.reshape(-1, d)
    ggamma = np.einsum("ij,ij->j", g2, xh2)
    # A GEMV, not NumPy's axis-0 sum (2.0-2.5 against 7.1-7.8 us on W5's 256 rows of 64, one
    # thread, CPU time): another summation order, within the fast kernels' tolerance.
    gbeta = np.ones(g2.shape[0], dtype=g2.dtype) @ g2
    if not needed[0]:
        return None, ggamma, gbeta
    gxhat = g2 * gamma
    # Row means as a matrix-vector product (NumPy's mean reduces a short last axis row by row:
    # 10.8 -> 1.7 us on W5's 256 rows of 64).
    mean_g = (gxhat @ np.full(d, 1.0 / d, dtype=gxhat.dtype))[:, None]
    mean_gx = np.einsum("ij,ij->i", gxhat, xh2)[:, None]
    mean_gx *= 1.0 / d
    gxhat -= mean_g
    gxhat -= xh2 * mean_gx
    gxhat *= rstd.reshape(-1, 1)
    return gxhat.reshape(x.shape), ggamma, gbeta


attach_fast("layer_norm", forward=forward, vjp=vjp)
residuals.explicit("layer_norm", forward_saving, vjp_from, skips=True)
