"""Reference definitions of the recurrent scans ``lstm_scan`` and ``rnn_scan``.

Entry by entry, in the gate order and formulas of torch.nn.LSTM / GRU / RNN: each step's gate
pre-activations are ``xw[t, b, k] + sum_j W_hh[k, j] h[b, j] + b_hh[k]``, gate ``q`` owning
entries ``q*H .. q*H + H - 1``; the loop runs from the first step to the last (the last to the
first when ``reverse``), and the output holds the state after each step. They use ``exp`` and
``tanh``, so neither is rational.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import sample_entry
from ._calls import checked, signature_checked
from .defs import define
from .elementwise import _sigmoid
from .scalar import constant, select, tanh


def _recurrent(xw: Any, h: list[list[Any]], w: Any, b: Any, t: int, hidden: int,
               gates: int) -> list[list[list[Any]]]:
    """``pre[b][q][j] = xw[t, b, q*H + j]`` and ``hw[b][q][j] = (W_hh h + b_hh)[q*H + j]``."""
    rows = range(len(h))
    hw = [[[_affine(w, b, h[r], q * hidden + j) for j in range(hidden)] for q in range(gates)]
          for r in rows]
    x = [[[xw[t, r, q * hidden + j] for j in range(hidden)] for q in range(gates)] for r in rows]
    return [x, hw]


def _affine(w: Any, b: Any, h: list[Any], k: int) -> Any:
    total = b[k]
    for j, v in enumerate(h):
        total = total + w[k, j] * v
    return total


def _steps(n: int, reverse: bool) -> range:
    return range(n - 1, -1, -1) if reverse else range(n)


@define("lstm_scan", rational=False)
@signature_checked
def lstm_scan(xw: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, reverse: bool = False
              ) -> np.ndarray:
    """``[i, f, g, o] = xw[t] + W_hh h + b_hh`` (four blocks of H); ``c = sigmoid(f) c +
    sigmoid(i) tanh(g)``, ``h = sigmoid(o) tanh(c)``; ``out[0, t] = h``, ``out[1, t] = c``."""
    (xw, h0, c0, w, b), attrs = checked("lstm_scan", (xw, h0, c0, w_hh, b_hh),
                                        {"reverse": reverse})
    steps, batch, hidden = xw.shape[0], xw.shape[1], h0.shape[1]
    out = np.empty((2, steps, batch, hidden), dtype=object)
    h = [[h0[r, j] for j in range(hidden)] for r in range(batch)]
    c = [[c0[r, j] for j in range(hidden)] for r in range(batch)]
    for t in _steps(steps, attrs["reverse"]):
        x, hw = _recurrent(xw, h, w, b, t, hidden, 4)
        for r in range(batch):
            for j in range(hidden):
                i, f, g, o = (x[r][q][j] + hw[r][q][j] for q in range(4))
                c[r][j] = _sigmoid(f) * c[r][j] + _sigmoid(i) * tanh(g)
                h[r][j] = _sigmoid(o) * tanh(c[r][j])
                out[0, t, r, j], out[1, t, r, j] = h[r][j], c[r][j]
    return out


@define("rnn_scan", rational=False)
@signature_checked
def rnn_scan(xw: Any, h0: Any, w_hh: Any, b_hh: Any, mode: str = "tanh",
             reverse: bool = False) -> np.ndarray:
    """'tanh' / 'relu': ``h = act(xw[t] + W_hh h + b_hh)``. 'gru': ``[r, z, n]`` blocks,
    ``r = sigmoid(x_r + hw_r)``, ``z = sigmoid(x_z + hw_z)``, ``n = tanh(x_n + r hw_n)``,
    ``h = (1 - z) n + z h`` with ``hw = W_hh h + b_hh``. ``out[t] = h``."""
    (xw, h0, w, b), attrs = checked("rnn_scan", (xw, h0, w_hh, b_hh),
                                    {"mode": mode, "reverse": reverse})
    mode = attrs["mode"]
    steps, batch, hidden = xw.shape[0], xw.shape[1], h0.shape[1]
    zero = constant(0, sample_entry(xw))
    one = constant(1, sample_entry(xw))
    out = np.empty((steps, batch, hidden), dtype=object)
    h = [[h0[r, j] for j in range(hidden)] for r in range(batch)]
    for t in _steps(steps, attrs["reverse"]):
        x, hw = _recurrent(xw, h, w, b, t, hidden, 3 if mode == "gru" else 1)
        new = [[zero] * hidden for _ in range(batch)]
        for r in range(batch):
            for j in range(hidden):
                if mode == "gru":
                    rg = _sigmoid(x[r][0][j] + hw[r][0][j])
                    z = _sigmoid(x[r][1][j] + hw[r][1][j])
                    n = tanh(x[r][2][j] + rg * hw[r][2][j])
                    new[r][j] = (one - z) * n + z * h[r][j]
                else:
                    pre = x[r][0][j] + hw[r][0][j]
                    new[r][j] = tanh(pre) if mode == "tanh" else select(pre > 0, pre, zero)
                out[t, r, j] = new[r][j]
        h = new
    return out
