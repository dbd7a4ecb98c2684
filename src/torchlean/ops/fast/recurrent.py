"""Fast recurrent-scan VJPs (NumPy only; see ``ops.fast``): backpropagation through time fused.

The reference VJPs of ``lstm_scan`` / ``rnn_scan`` are written with primitives (so they
differentiate again) and cost about 15 kernel calls per time step. Here the gate activations of
every step are recomputed from the saved states at once (one GEMM over all ``L * B`` rows and
whole-sequence elementwise passes), and the loop over time keeps only what the recurrence needs:
per step a few elementwise products into one preallocated ``(L, B, G*H)`` cotangent buffer and
one GEMM against ``W_hh`` to carry the cotangent to the previous state. The weight cotangents
are one GEMM over the whole buffer. The LSTM's fast forward also keeps its gate activations
(``residuals``), so its VJP skips even the recomputation. Same formulas as the reference rule,
rounded differently (within ``registry.FAST_RTOL``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.registry import attach_fast
from ..elementwise import _sigmoid
from ..recurrent import GATES  # noqa: F401  (registers the scans before they are made fast)
from . import residuals

_GATES_SAVED = "lstm_scan.gates"


def _sigmoid_in_place(x: Any) -> Any:
    """``sigmoid(x) = (1 + tanh(x / 2)) / 2`` in place: one transcendental per entry, no
    branch (the reference's overflow-free form takes an exp, a where and two divisions)."""
    x *= 0.5
    np.tanh(x, out=x)
    x *= 0.5
    x += 0.5
    return x


def lstm_forward(xw: Any, h0: Any, c0: Any, w: Any, b: Any, reverse: bool = False) -> Any:
    """Fast ``lstm_scan`` forward: per step one GEMM into a gate buffer, the activations in
    place, and the gates ``(L, B, 4H)`` (g as tanh, the others as sigmoids) kept for the VJP."""
    steps, batch, width = xw.shape
    hidden = width // 4
    out = np.empty((2, steps, batch, hidden), dtype=xw.dtype)
    gates = np.empty_like(xw)
    wt = w.T
    h, c = h0, c0
    for t in _forward_order(steps, reverse):
        pre = gates[t]
        np.matmul(h, wt, out=pre)
        pre += xw[t]
        pre += b
        g = pre[:, 2 * hidden:3 * hidden]
        tg = np.tanh(g)
        _sigmoid_in_place(pre)
        g[...] = tg
        i, f, o = pre[:, :hidden], pre[:, hidden:2 * hidden], pre[:, 3 * hidden:]
        c_new = out[1, t]
        np.multiply(f, c, out=c_new)
        c_new += i * g
        h_new = out[0, t]
        np.tanh(c_new, out=h_new)
        h_new *= o
        h, c = h_new, c_new
    residuals.save(out, _GATES_SAVED, (xw.shape, reverse), gates)
    return out


def _forward_order(steps: int, reverse: bool) -> range:
    return range(steps - 1, -1, -1) if reverse else range(steps)


def _previous(seq: Any, first: Any, reverse: bool) -> Any:
    """The state before each step, ``(L, B, H)``."""
    prev = np.empty_like(seq)
    if reverse:
        prev[:-1] = seq[1:]
        prev[-1] = first
    else:
        prev[1:] = seq[:-1]
        prev[0] = first
    return prev


def _order(steps: int, reverse: bool) -> range:
    """The steps in backward order: the reverse of the forward's."""
    return range(steps) if reverse else range(steps - 1, -1, -1)


def _weight_grads(dpre: Any, hprev: Any) -> tuple[Any, Any]:
    width = dpre.shape[-1]
    flat = dpre.reshape(-1, width)
    return flat.T @ hprev.reshape(-1, hprev.shape[-1]), flat.sum(axis=0)


def lstm_vjp(ops: Any, g: Any, xs: Any, out: Any, reverse: bool = False) -> tuple[Any, ...]:
    """Fast ``lstm_scan`` VJP."""
    xw, h0, c0, w, b = xs
    _, steps, batch, hidden = out.shape
    hs, cs = out[0], out[1]
    hprev, cprev = _previous(hs, h0, reverse), _previous(cs, c0, reverse)
    gates = residuals.load(out, _GATES_SAVED, (xw.shape, reverse))
    if gates is None:  # recomputed from the states: one GEMM over every step
        gates = (hprev.reshape(-1, hidden) @ w.T).reshape(xw.shape)
        gates += xw
        gates += b
        gates[..., :2 * hidden] = _sigmoid(gates[..., :2 * hidden])
        gates[..., 2 * hidden:3 * hidden] = np.tanh(gates[..., 2 * hidden:3 * hidden])
        gates[..., 3 * hidden:] = _sigmoid(gates[..., 3 * hidden:])
    i, f = gates[..., :hidden], gates[..., hidden:2 * hidden]
    gg, o = gates[..., 2 * hidden:3 * hidden], gates[..., 3 * hidden:]
    tc = np.tanh(cs)
    # step-independent factors: dc -> (di, df, dg), dh -> do, and dh -> dc through tanh(c)
    fi, ff, fg = gg * i * (1 - i), cprev * f * (1 - f), i * (1 - gg * gg)
    fo = tc * o * (1 - o)
    a = o * (1 - tc * tc)
    dpre = np.empty_like(gates)
    gh, gc = g[0], g[1]
    carry_h = carry_c = None
    for t in _order(steps, reverse):
        dh = gh[t] if carry_h is None else gh[t] + carry_h
        dc = gc[t] + dh * a[t]
        if carry_c is not None:
            dc += carry_c
        d = dpre[t]
        np.multiply(dc, fi[t], out=d[:, :hidden])
        np.multiply(dc, ff[t], out=d[:, hidden:2 * hidden])
        np.multiply(dc, fg[t], out=d[:, 2 * hidden:3 * hidden])
        np.multiply(dh, fo[t], out=d[:, 3 * hidden:])
        carry_h = d @ w
        carry_c = dc * f[t]
    gw, gb = _weight_grads(dpre, hprev)
    return dpre, carry_h, carry_c, gw, gb


def rnn_vjp(ops: Any, g: Any, xs: Any, out: Any, mode: str = "tanh",
            reverse: bool = False) -> tuple[Any, ...]:
    """Fast ``rnn_scan`` VJP (tanh, relu, gru)."""
    xw, h0, w, b = xs
    steps, batch, hidden = out.shape
    hprev = _previous(out, h0, reverse)
    carry = None
    if mode != "gru":
        slope = 1 - out * out if mode == "tanh" else (out > 0).astype(out.dtype)
        dpre = np.empty_like(out)
        for t in _order(steps, reverse):
            dh = g[t] if carry is None else g[t] + carry
            np.multiply(dh, slope[t], out=dpre[t])
            carry = dpre[t] @ w
        gw, gb = _weight_grads(dpre, hprev)
        return dpre, carry, gw, gb
    hw = (hprev.reshape(-1, hidden) @ w.T).reshape(xw.shape)
    hw += b
    r = _sigmoid(xw[..., :hidden] + hw[..., :hidden])
    z = _sigmoid(xw[..., hidden:2 * hidden] + hw[..., hidden:2 * hidden])
    hn = hw[..., 2 * hidden:]
    n = np.tanh(xw[..., 2 * hidden:] + r * hn)
    pn = (1 - z) * (1 - n * n)
    pz = (hprev - n) * z * (1 - z)
    pr = pn * hn * r * (1 - r)
    qn = pn * r
    dhw = np.empty_like(xw)  # the cotangent of W_hh h + b_hh: differs from xw's in the n gate
    us = np.empty_like(out)  # each step's cotangent of its new state
    for t in _order(steps, reverse):
        u = us[t]
        if carry is None:
            u[...] = g[t]
        else:
            np.add(g[t], carry, out=u)
        d = dhw[t]
        np.multiply(u, pr[t], out=d[:, :hidden])
        np.multiply(u, pz[t], out=d[:, hidden:2 * hidden])
        np.multiply(u, qn[t], out=d[:, 2 * hidden:])
        carry = d @ w
        carry += u * z[t]
    dxw = np.empty_like(xw)
    dxw[..., :2 * hidden] = dhw[..., :2 * hidden]
    np.multiply(us, pn, out=dxw[..., 2 * hidden:])
    gw, gb = _weight_grads(dhw, hprev)
    return dxw, carry, gw, gb


attach_fast("lstm_scan", forward=lstm_forward, vjp=lstm_vjp)
attach_fast("rnn_scan", vjp=rnn_vjp)
