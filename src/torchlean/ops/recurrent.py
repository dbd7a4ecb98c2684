"""Fused recurrent scans: one direction of one recurrent layer over a whole sequence, one node.

``lstm_scan(xw, h0, c0, w_hh, b_hh, reverse=False)`` and
``rnn_scan(xw, h0, w_hh, b_hh, mode="tanh"|"relu"|"gru", reverse=False)`` take the input
projections of every step already made (``xw[t] = x_t W_ih^T + b_ih``, ``(L, B, G*H)``, one
GEMM outside the loop), the initial state ``(B, H)`` and the recurrent weights ``W_hh``
``(G*H, H)``, ``b_hh`` ``(G*H,)``, and run the recurrence in torch's gate order and formulas
(LSTM i, f, g, o; GRU r, z, n with ``n = tanh(x_n + r * (W_hn h + b_hn))``). ``reverse`` runs
the steps from last to first (a bidirectional layer's backward direction); ``out[t]`` is always
the state after step ``t``.

Outputs (a primitive has one output): ``rnn_scan`` gives the state sequence ``(L, B, H)``;
``lstm_scan`` gives ``(2, L, B, H)``, the hidden states then the cell states, so the layer
reads ``h`` and ``c`` with first-axis slices (as every backend, the verifier and the ONNX
exporter read them). The final state is the last processed step's entry.

Without these, a recurrent layer recorded about 20 primitives per time step. The reference
forward loops over time in NumPy; the reference VJP (backpropagation through time) and JVP are
written with primitives (the gate activations recomputed from the saved states in one
``linear`` over all steps, then one short loop over time), so hvp and double backward work
through a recurrent layer. ``ops.fast.recurrent`` holds the fused NumPy VJP training runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core import attr_kinds as K
from ..core.backend import namespace_of
from ..core.errors import ShapeError
from ..core.registry import ErrorInput, Primitive, Sample, register
from ..core.shape import Shape
from .elementwise import _sigmoid
from .samples import normal

GATES = {"tanh": 1, "relu": 1, "gru": 3, "lstm": 4}
RNN_MODES = ("tanh", "relu", "gru")  # (K.RNN_MODE checks them)


# ---------------------------------------------------------------------------------------------
# shapes


def _check(op: str, gates: int, xw: Shape, h0: Shape, w: Shape, b: Shape) -> tuple[int, ...]:
    if len(xw) != 3 or 0 in xw:
        raise ShapeError(f"{op}: xw must be a non-empty (L, B, {gates}*H) sequence of input "
                         f"projections, found shape {xw}")
    steps, batch, width = xw
    if len(h0) != 2 or h0[0] != batch or h0[1] == 0:
        raise ShapeError(f"{op}: h0 must be (B, H) = ({batch}, H) with H > 0 for xw {xw}, "
                         f"found {h0}")
    hidden = h0[1]
    if width != gates * hidden:
        raise ShapeError(f"{op}: xw's last axis must be {gates}*H = {gates * hidden} "
                         f"(H = {hidden} from h0), found {width}")
    if tuple(w) != (gates * hidden, hidden):
        raise ShapeError(f"{op}: w_hh must be ({gates}*H, H) = ({gates * hidden}, {hidden}), "
                         f"found {w}")
    if tuple(b) != (gates * hidden,):
        raise ShapeError(f"{op}: b_hh must be ({gates}*H,) = ({gates * hidden},), found {b}")
    return steps, batch, hidden


def _lstm_infer(xw: Shape, h0: Shape, c0: Shape, w: Shape, b: Shape,
                reverse: bool = False) -> Shape:
    steps, batch, hidden = _check("lstm_scan", 4, xw, h0, w, b)
    if tuple(c0) != tuple(h0):
        raise ShapeError(f"lstm_scan: c0 must have h0's shape {h0}, found {c0}")
    return (2, steps, batch, hidden)


def _rnn_infer(xw: Shape, h0: Shape, w: Shape, b: Shape, mode: str = "tanh",
               reverse: bool = False) -> Shape:
    K.RNN_MODE("rnn_scan", "mode", mode)
    return _check("rnn_scan", GATES[mode], xw, h0, w, b)


# ---------------------------------------------------------------------------------------------
# reference forward (NumPy or any array namespace)


def _order(steps: int, reverse: bool) -> range:
    return range(steps - 1, -1, -1) if reverse else range(steps)


def _lstm_forward(xw: Any, h0: Any, c0: Any, w: Any, b: Any, reverse: bool = False) -> Any:
    xp = namespace_of(xw)
    hidden = h0.shape[-1]
    out = xp.empty((2,) + xw.shape[:2] + (hidden,), dtype=xw.dtype)
    wt = w.T
    h, c = h0, c0
    for t in _order(xw.shape[0], reverse):
        pre = xw[t, ...] + (h @ wt + b)
        i = _sigmoid(pre[:, :hidden])
        f = _sigmoid(pre[:, hidden:2 * hidden])
        g = xp.tanh(pre[:, 2 * hidden:3 * hidden])
        o = _sigmoid(pre[:, 3 * hidden:])
        c = f * c + i * g
        h = o * xp.tanh(c)
        out[0, t, ...] = h
        out[1, t, ...] = c
    return out


def _rnn_forward(xw: Any, h0: Any, w: Any, b: Any, mode: str = "tanh",
                 reverse: bool = False) -> Any:
    xp = namespace_of(xw)
    hidden = h0.shape[-1]
    out = xp.empty(xw.shape[:2] + (hidden,), dtype=xw.dtype)
    wt = w.T
    h = h0
    for t in _order(xw.shape[0], reverse):
        hw = h @ wt + b
        x = xw[t, ...]
        if mode == "gru":
            r = _sigmoid(x[:, :hidden] + hw[:, :hidden])
            z = _sigmoid(x[:, hidden:2 * hidden] + hw[:, hidden:2 * hidden])
            n = xp.tanh(x[:, 2 * hidden:] + r * hw[:, 2 * hidden:])
            h = (1 - z) * n + z * h
        elif mode == "relu":
            h = xp.maximum(x + hw, 0)
        else:
            h = xp.tanh(x + hw)
        out[t, ...] = h
    return out


# ---------------------------------------------------------------------------------------------
# rules written with primitives (they differentiate again)


def _one_minus(ops: Any, y: Any) -> Any:
    return ops.add_scalar(ops.scale(y, c=-1.0), c=1.0)


def _sigmoid_slope(ops: Any, y: Any) -> Any:
    return ops.mul(y, _one_minus(ops, y))


def _tanh_slope(ops: Any, y: Any) -> Any:
    return _one_minus(ops, ops.square(y))


def _stack(ops: Any, items: Sequence[Any]) -> Any:
    """``items`` (each of one shape) stacked on a new first axis: a balanced tree of
    ``concat_dim0`` (L log L copies, not the L^2 of a left fold)."""
    parts = [ops.reshape(x, shape=(1,) + tuple(x.shape)) for x in items]
    while len(parts) > 1:
        parts = [ops.concat_dim0(parts[k], parts[k + 1]) if k + 1 < len(parts) else parts[k]
                 for k in range(0, len(parts), 2)]
    return parts[0]


def _unstack(ops: Any, x: Any) -> list[Any]:
    """The first-axis entries of ``x``."""
    rest = tuple(x.shape[1:])
    return [ops.reshape(ops.slice_range0(x, start=k, length=1), shape=rest)
            for k in range(x.shape[0])]


def _split_gates(ops: Any, x: Any, gates: int) -> list[Any]:
    """``(L, B, G*H) -> G`` blocks ``(L, B, H)``: gate-major through one permute, then
    first-axis slices (no primitive slices a last axis)."""
    steps, batch, width = x.shape
    hidden = width // gates
    if gates == 1:
        return [x]
    major = ops.permute(ops.reshape(x, shape=(steps, batch, gates, hidden)), perm=(2, 0, 1, 3))
    return _unstack(ops, major)


def _join_gates(ops: Any, parts: Sequence[Any]) -> Any:
    """``_split_gates``'s inverse: G blocks ``(L, B, H) -> (L, B, G*H)``."""
    if len(parts) == 1:
        return parts[0]
    steps, batch, hidden = parts[0].shape
    major = ops.permute(_stack(ops, parts), perm=(1, 2, 0, 3))
    return ops.reshape(major, shape=(steps, batch, len(parts) * hidden))


def _previous(ops: Any, seq: Any, first: Any, reverse: bool) -> Any:
    """The state before each step: ``first`` then ``seq`` shifted one step along the order."""
    steps, batch, hidden = seq.shape
    head = ops.reshape(first, shape=(1, batch, hidden))
    if steps == 1:
        return head
    if reverse:
        return ops.concat_dim0(ops.slice_range0(seq, start=1, length=steps - 1), head)
    return ops.concat_dim0(head, ops.slice_range0(seq, start=0, length=steps - 1))


def _weight_blocks(ops: Any, w: Any, gates: int, transpose: bool) -> list[Any]:
    """``W_hh``'s per-gate blocks ``W_hg`` (transposed: ``h @ block`` is ``W_hg h``, the
    JVP's product; untransposed: ``d @ block`` carries a cotangent back to ``h``)."""
    hidden = w.shape[1]
    blocks = [ops.slice_range0(w, start=k * hidden, length=hidden) for k in range(gates)]
    return [ops.transpose2d(x) for x in blocks] if transpose else blocks


def _sequence_grads(ops: Any, dpre: Any, hprev: Any) -> tuple[Any, Any]:
    """``W_hh``'s and ``b_hh``'s cotangents from the recurrent pre-activations' ``(L, B, G*H)``:
    one GEMM over all steps and a sum."""
    steps, batch, width = dpre.shape
    flat = ops.reshape(dpre, shape=(steps * batch, width))
    hflat = ops.reshape(hprev, shape=(steps * batch, hprev.shape[-1]))
    return ops.matmul(ops.transpose2d(flat), hflat), ops.sum_to(flat, shape=(width,))


def _lstm_parts(ops: Any, xs: Any, out: Any, reverse: bool) -> dict[str, Any]:
    """The gate activations and state sequences of an LSTM scan, recomputed from its output."""
    xw, h0, c0, w, b = xs
    _, steps, batch, hidden = out.shape
    hs = ops.reshape(ops.slice_range0(out, start=0, length=1), shape=(steps, batch, hidden))
    cs = ops.reshape(ops.slice_range0(out, start=1, length=1), shape=(steps, batch, hidden))
    hprev, cprev = _previous(ops, hs, h0, reverse), _previous(ops, cs, c0, reverse)
    pi, pf, pg, po = _split_gates(ops, ops.add(xw, ops.linear(w, b, hprev)), 4)
    i, f, g, o = ops.sigmoid(pi), ops.sigmoid(pf), ops.tanh(pg), ops.sigmoid(po)
    tc = ops.tanh(cs)
    return {"hprev": hprev, "cprev": cprev, "i": i, "f": f, "g": g, "o": o, "tc": tc,
            # d h_t / d c_t along the output gate
            "a": ops.mul(o, _tanh_slope(ops, tc))}


def _lstm_vjp(ops: Any, gout: Any, xs: Any, out: Any, reverse: bool = False) -> tuple[Any, ...]:
    w = xs[3]
    _, steps, batch, hidden = out.shape
    p = _lstm_parts(ops, xs, out, reverse)
    gh, gc = _unstack(ops, gout)
    # per-step factors that do not depend on the carried cotangents, for all steps at once
    factors = [ops.mul(p["g"], _sigmoid_slope(ops, p["i"])),
               ops.mul(p["cprev"], _sigmoid_slope(ops, p["f"])),
               ops.mul(p["i"], _tanh_slope(ops, p["g"])),
               ops.mul(p["tc"], _sigmoid_slope(ops, p["o"]))]
    per_step = [_unstack(ops, x) for x in (gh, gc, p["a"], p["f"], *factors)]
    blocks = _weight_blocks(ops, w, 4, False)
    grads: list[list[Any]] = [[None] * steps for _ in range(4)]
    carry_h = carry_c = None
    for t in reversed(_order(steps, reverse)):
        gh_t, gc_t, a_t, f_t, bi, bf, bg, bo = (s[t] for s in per_step)
        dh = gh_t if carry_h is None else ops.add(gh_t, carry_h)
        dc = ops.add(gc_t, ops.mul(dh, a_t))
        if carry_c is not None:
            dc = ops.add(dc, carry_c)
        step = (ops.mul(dc, bi), ops.mul(dc, bf), ops.mul(dc, bg), ops.mul(dh, bo))
        for k in range(4):
            grads[k][t] = step[k]
        carry_h = ops.matmul(step[0], blocks[0])
        for k in range(1, 4):
            carry_h = ops.add(carry_h, ops.matmul(step[k], blocks[k]))
        carry_c = ops.mul(dc, f_t)
    dpre = _join_gates(ops, [_stack(ops, g) for g in grads])
    gw, gb = _sequence_grads(ops, dpre, p["hprev"])
    return dpre, carry_h, carry_c, gw, gb


def _lstm_jvp(ops: Any, ts: Any, xs: Any, out: Any, reverse: bool = False) -> Any:
    xw, h0, c0, w, b = xs
    txw, th0, tc0, tw, tb = ts
    _, steps, batch, hidden = out.shape
    p = _lstm_parts(ops, xs, out, reverse)
    # the tangent of each step's pre-activation that does not go through the carried state
    tpre = ops.zeros_like(xw) if txw is None else txw
    if tw is not None or tb is not None:
        tpre = ops.add(tpre, ops.linear(ops.zeros_like(w) if tw is None else tw,
                                        ops.zeros_like(b) if tb is None else tb, p["hprev"]))
    slopes = [_sigmoid_slope(ops, p["i"]), _sigmoid_slope(ops, p["f"]),
              _tanh_slope(ops, p["g"]), _sigmoid_slope(ops, p["o"])]
    pre_steps = [_unstack(ops, x) for x in _split_gates(ops, tpre, 4)]
    slope_steps = [_unstack(ops, x) for x in slopes]
    vals = {k: _unstack(ops, p[k]) for k in ("i", "f", "g", "tc", "a", "cprev")}
    blocks = _weight_blocks(ops, w, 4, True)
    th = ops.zeros_like(h0) if th0 is None else th0
    tc = ops.zeros_like(c0) if tc0 is None else tc0
    hs: list[Any] = [None] * steps
    cs: list[Any] = [None] * steps
    for t in _order(steps, reverse):
        gate = [ops.mul(ops.add(pre_steps[k][t], ops.matmul(th, blocks[k])), slope_steps[k][t])
                for k in range(4)]
        tc = ops.add(ops.add(ops.mul(gate[1], vals["cprev"][t]), ops.mul(vals["f"][t], tc)),
                     ops.add(ops.mul(gate[0], vals["g"][t]), ops.mul(vals["i"][t], gate[2])))
        th = ops.add(ops.mul(gate[3], vals["tc"][t]), ops.mul(vals["a"][t], tc))
        hs[t], cs[t] = th, tc
    return _stack(ops, [_stack(ops, hs), _stack(ops, cs)])


def _rnn_parts(ops: Any, xs: Any, out: Any, mode: str, reverse: bool) -> dict[str, Any]:
    """What an RNN / GRU scan's rules need, recomputed from its output."""
    xw, h0, w, b = xs
    hprev = _previous(ops, out, h0, reverse)
    if mode != "gru":
        slope = (_tanh_slope(ops, out) if mode == "tanh" else ops.positive_mask(out))
        return {"hprev": hprev, "slope": slope}
    xr, xz, xn = _split_gates(ops, xw, 3)
    hr, hz, hn = _split_gates(ops, ops.linear(w, b, hprev), 3)
    r, z = ops.sigmoid(ops.add(xr, hr)), ops.sigmoid(ops.add(xz, hz))
    n = ops.tanh(ops.add(xn, ops.mul(r, hn)))
    return {"hprev": hprev, "r": r, "z": z, "n": n, "hn": hn,
            "pn": ops.mul(_one_minus(ops, z), _tanh_slope(ops, n))}


def _rnn_vjp(ops: Any, gout: Any, xs: Any, out: Any, mode: str = "tanh",
             reverse: bool = False) -> tuple[Any, ...]:
    w = xs[2]
    steps = out.shape[0]
    p = _rnn_parts(ops, xs, out, mode, reverse)
    g_steps = _unstack(ops, gout)
    if mode != "gru":
        slope = _unstack(ops, p["slope"])
        (block,) = _weight_blocks(ops, w, 1, False)
        grads: list[Any] = [None] * steps
        carry = None
        for t in reversed(_order(steps, reverse)):
            dh = g_steps[t] if carry is None else ops.add(g_steps[t], carry)
            grads[t] = ops.mul(dh, slope[t])
            carry = ops.matmul(grads[t], block)
        dpre = _stack(ops, grads)
        gw, gb = _sequence_grads(ops, dpre, p["hprev"])
        return dpre, carry, gw, gb
    # h' = (1 - z) n + z h, n = tanh(xn + r hn): cotangent factors of every step at once
    pz = ops.mul(ops.sub(p["hprev"], p["n"]), _sigmoid_slope(ops, p["z"]))
    pr = ops.mul(ops.mul(p["pn"], p["hn"]), _sigmoid_slope(ops, p["r"]))
    qn = ops.mul(p["pn"], p["r"])
    per_step = [_unstack(ops, x) for x in (pr, pz, p["pn"], qn, p["z"])]
    blocks = _weight_blocks(ops, w, 3, False)
    dx: list[list[Any]] = [[None] * steps for _ in range(3)]
    dhn: list[Any] = [None] * steps
    carry = None
    for t in reversed(_order(steps, reverse)):
        u = g_steps[t] if carry is None else ops.add(g_steps[t], carry)
        fr, fz, fn, fq, z_t = (s[t] for s in per_step)
        dx[0][t], dx[1][t], dx[2][t] = ops.mul(u, fr), ops.mul(u, fz), ops.mul(u, fn)
        dhn[t] = ops.mul(u, fq)
        carry = ops.add(ops.add(ops.matmul(dx[0][t], blocks[0]),
                                ops.matmul(dx[1][t], blocks[1])),
                        ops.add(ops.matmul(dhn[t], blocks[2]), ops.mul(u, z_t)))
    dr, dz = _stack(ops, dx[0]), _stack(ops, dx[1])
    dxw = _join_gates(ops, [dr, dz, _stack(ops, dx[2])])
    gw, gb = _sequence_grads(ops, _join_gates(ops, [dr, dz, _stack(ops, dhn)]), p["hprev"])
    return dxw, carry, gw, gb


def _rnn_jvp(ops: Any, ts: Any, xs: Any, out: Any, mode: str = "tanh",
             reverse: bool = False) -> Any:
    xw, h0, w, b = xs
    txw, th0, tw, tb = ts
    steps = out.shape[0]
    gates = GATES[mode]
    p = _rnn_parts(ops, xs, out, mode, reverse)
    # tangents of xw and of W_hh h + b_hh that do not go through the carried state
    tx = ops.zeros_like(xw) if txw is None else txw
    thw = (None if tw is None and tb is None else
           ops.linear(ops.zeros_like(w) if tw is None else tw,
                      ops.zeros_like(b) if tb is None else tb, p["hprev"]))
    blocks = _weight_blocks(ops, w, gates, True)
    th = ops.zeros_like(h0) if th0 is None else th0
    hs: list[Any] = [None] * steps
    if mode != "gru":
        base = _unstack(ops, tx if thw is None else ops.add(tx, thw))
        slope = _unstack(ops, p["slope"])
        for t in _order(steps, reverse):
            th = ops.mul(ops.add(base[t], ops.matmul(th, blocks[0])), slope[t])
            hs[t] = th
        return _stack(ops, hs)
    xparts = [_unstack(ops, x) for x in _split_gates(ops, tx, 3)]
    hparts = (None if thw is None else [_unstack(ops, x) for x in _split_gates(ops, thw, 3)])
    vals = {k: _unstack(ops, p[k]) for k in ("hprev", "r", "z", "n", "hn")}
    r_slope = _unstack(ops, _sigmoid_slope(ops, p["r"]))
    z_slope = _unstack(ops, _sigmoid_slope(ops, p["z"]))
    n_slope = _unstack(ops, _tanh_slope(ops, p["n"]))
    for t in _order(steps, reverse):
        hw = [ops.matmul(th, blocks[k]) for k in range(3)]
        if hparts is not None:
            hw = [ops.add(hw[k], hparts[k][t]) for k in range(3)]
        tr = ops.mul(ops.add(xparts[0][t], hw[0]), r_slope[t])
        tz = ops.mul(ops.add(xparts[1][t], hw[1]), z_slope[t])
        inner = ops.add(ops.add(xparts[2][t], ops.mul(tr, vals["hn"][t])),
                        ops.mul(vals["r"][t], hw[2]))
        tn = ops.mul(inner, n_slope[t])
        th = ops.add(ops.add(ops.mul(tz, ops.sub(vals["hprev"][t], vals["n"][t])),
                             ops.mul(_one_minus(ops, vals["z"][t]), tn)),
                     ops.mul(vals["z"][t], th))
        hs[t] = th
    return _stack(ops, hs)


# ---------------------------------------------------------------------------------------------
# torch oracle, samples, error inputs


def _torch_scan(torch: Any, mode: str, xw: Any, h0: Any, c0: Any, w: Any, b: Any,
                reverse: bool) -> Any:
    hidden = h0.shape[-1]
    h, c = h0, c0
    hs: list[Any] = [None] * xw.shape[0]
    cs: list[Any] = [None] * xw.shape[0]
    for t in _order(xw.shape[0], reverse):
        hw = h @ w.T + b
        x = xw[t]
        if mode == "lstm":
            i, f, g, o = (x + hw).split(hidden, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        elif mode == "gru":
            xr, xz, xn = x.split(hidden, dim=-1)
            hr, hz, hn = hw.split(hidden, dim=-1)
            r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
            h = (1 - z) * torch.tanh(xn + r * hn) + z * h
        else:
            h = torch.tanh(x + hw) if mode == "tanh" else torch.relu(x + hw)
        hs[t], cs[t] = h, c
    return torch.stack([torch.stack(hs), torch.stack(cs)]) if mode == "lstm" \
        else torch.stack(hs)


def _scan_sample(rng: np.random.Generator, gates: int, steps: int, batch: int, hidden: int,
                 lstm: bool) -> tuple[np.ndarray, ...]:
    # scaled so the gates are away from saturation (finite differences stay informative)
    xw = normal(rng, steps, batch, gates * hidden) * 0.7
    h0 = normal(rng, batch, hidden) * 0.5
    w = normal(rng, gates * hidden, hidden) * 0.4
    b = normal(rng, gates * hidden) * 0.3
    return (xw, h0, normal(rng, batch, hidden) * 0.5, w, b) if lstm else (xw, h0, w, b)


# The sympy columns of ``torchlean verify`` differentiate samples of at most 80 scalars
# (``Settings.symbolic_limit``); nested sigmoids over several steps make sympy's piecewise
# simplification explode, so only the one-step samples are that small: the recurrence over
# several steps is checked by the numerical columns (finite differences, fast vs reference)
# on the larger samples.


def _lstm_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample(_scan_sample(rng, 4, 3, 2, 3, True), {"reverse": False}),
            Sample(_scan_sample(rng, 4, 4, 2, 2, True), {"reverse": True}, note="reverse"),
            Sample(_scan_sample(rng, 4, 1, 3, 2, True), {"reverse": False}, note="one step")]


def _rnn_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample(_scan_sample(rng, 1, 3, 4, 4, False), {"mode": "tanh", "reverse": False}),
            Sample(_scan_sample(rng, 1, 1, 2, 3, False), {"mode": "tanh", "reverse": False},
                   note="tanh, one step"),
            Sample(_scan_sample(rng, 1, 4, 4, 4, False), {"mode": "relu", "reverse": True},
                   note="relu, reverse"),
            Sample(_scan_sample(rng, 1, 1, 3, 2, False), {"mode": "relu", "reverse": True},
                   note="relu, one step"),
            Sample(_scan_sample(rng, 3, 3, 2, 3, False), {"mode": "gru", "reverse": False},
                   note="gru"),
            Sample(_scan_sample(rng, 3, 4, 3, 2, False), {"mode": "gru", "reverse": True},
                   note="gru, reverse"),
            Sample(_scan_sample(rng, 3, 1, 3, 2, False), {"mode": "gru", "reverse": False},
                   note="gru, one step")]


register(Primitive(
    "lstm_scan", ("xw", "h0", "c0", "w_hh", "b_hh"), _lstm_infer, _lstm_forward,
    attrs={"reverse": False}, attr_kinds={"reverse": K.BOOL}, vjp=_lstm_vjp, jvp=_lstm_jvp,
    semantics="One direction of an LSTM layer over a sequence: xw (L, B, 4H) holds every step's "
              "input projection x_t W_ih^T + b_ih; with (h, c) = (h0, c0) and, for t = 0..L-1 "
              "(L-1..0 when reverse), [i, f, g, o] = xw[t] + h W_hh^T + b_hh split in four, "
              "c = sigmoid(f) c + sigmoid(i) tanh(g), h = sigmoid(o) tanh(c) (torch.nn.LSTM). "
              "Output (2, L, B, H): out[0, t] = h and out[1, t] = c after step t. VJP "
              "(backpropagation through time) and JVP are written with primitives, the gates "
              "recomputed from the output.",
    samples=_lstm_samples,
    torch_ref=lambda torch, xw, h0, c0, w, b, reverse=False: _torch_scan(
        torch, "lstm", xw, h0, c0, w, b, reverse),
    error_inputs=[ErrorInput(((3, 2, 8), (2, 3), (2, 3), (8, 2), (8,)), {}, ShapeError,
                             r"xw's last axis must be 4\*H = 12"),
                  ErrorInput(((3, 2, 8), (2, 2), (2, 2), (8, 3), (8,)), {}, ShapeError,
                             r"w_hh must be \(4\*H, H\) = \(8, 2\)"),
                  ErrorInput(((3, 2, 8), (2, 2), (1, 2), (8, 2), (8,)), {}, ShapeError,
                             r"c0 must have h0's shape \(2, 2\)"),
                  ErrorInput(((2, 8), (2, 2), (2, 2), (8, 2), (8,)), {}, ShapeError,
                             r"xw must be a non-empty \(L, B, 4\*H\)"),
                  ErrorInput(((3, 2, 8), (2, 2), (2, 2), (8, 2), (8,)), {"reverse": 1},
                             ShapeError, "reverse must be a bool")],
))

register(Primitive(
    "rnn_scan", ("xw", "h0", "w_hh", "b_hh"), _rnn_infer, _rnn_forward,
    attrs={"mode": "tanh", "reverse": False},
    attr_kinds={"mode": K.RNN_MODE, "reverse": K.BOOL},
    vjp=_rnn_vjp, jvp=_rnn_jvp,
    semantics="One direction of an Elman RNN (mode 'tanh' / 'relu': h = act(xw[t] + h W_hh^T "
              "+ b_hh)) or GRU layer (mode 'gru': [r, z, n] gates, r = sigmoid(x_r + W_hr h + "
              "b_hr), z = sigmoid(x_z + W_hz h + b_hz), n = tanh(x_n + r (W_hn h + b_hn)), h = "
              "(1 - z) n + z h, torch.nn.GRU) over xw (L, B, G*H), the input projections x_t "
              "W_ih^T + b_ih, from h0 (B, H), for t = 0..L-1 (L-1..0 when reverse). Output "
              "(L, B, H): the state after each step. VJP (backpropagation through time) and "
              "JVP are written with primitives, the gates recomputed from the output.",
    samples=_rnn_samples,
    torch_ref=lambda torch, xw, h0, w, b, mode="tanh", reverse=False: _torch_scan(
        torch, mode, xw, h0, None, w, b, reverse),
    error_inputs=[ErrorInput(((3, 2, 4), (2, 2), (6, 2), (6,)), {"mode": "gru"}, ShapeError,
                             r"xw's last axis must be 3\*H = 6"),
                  ErrorInput(((3, 2, 2), (2, 2), (2, 2), (2,)), {"mode": "lstm"}, ShapeError,
                             "mode must be 'tanh' or 'relu' or 'gru'"),
                  ErrorInput(((3, 2, 2), (3, 2), (2, 2), (2,)), {}, ShapeError,
                             r"h0 must be \(B, H\) = \(2, H\)"),
                  ErrorInput(((3, 2, 2), (2, 2), (2, 2), (3,)), {}, ShapeError,
                             r"b_hh must be \(1\*H,\) = \(2,\)")],
))
