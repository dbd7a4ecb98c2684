"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` and their single-step cells, as ``torch.nn``.

Each direction of each layer is one fused scan primitive (``lstm_scan``, or ``rnn_scan`` with
mode tanh / relu / gru: see ``ops.recurrent``) over every step's input projection (one
``linear``), so a layer records a handful of ops, not about 20 per time step, and still runs on
tensors, in a session, and traced by ``tl.compile`` (the ONNX exporter writes the scan unrolled).
A packed batch (per-step masks hold each sequence's state past its end) and LSTM's projection
(``proj_size``, which feeds the projected ``h`` back) keep the step written with primitives
(``linear`` per gate on first-axis slices of the stacked weights, ``sigmoid``, ``tanh``,
products and sums, ``stack``). A compiled graph is specific to the sequence length (as any
traced graph is).

Parameter names, shapes, gate order and initialisation follow torch: ``weight_ih_l{k}``
``(G * hidden, in)``, ``weight_hh_l{k}`` ``(G * hidden, hidden)``, ``bias_ih_l{k}``,
``bias_hh_l{k}`` (suffix ``_reverse`` for the backward direction), G = 1 (RNN), 4 (LSTM: input,
forget, cell, output gates), 3 (GRU: reset, update, new), all drawn from
U(-1/sqrt(hidden), 1/sqrt(hidden)); so a torch ``state_dict`` loads unchanged. Inputs are
``(L, N, in)``, ``(N, L, in)`` with ``batch_first=True``, or unbatched ``(L, in)``; states are
``(num_layers * directions, N, hidden)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.errors import ShapeError, TorchLeanError
from ..engine import ops_interface as F
from ..engine.ops_interface import Ref
from ..engine.params import Param
from .modules import Module, _const, _positive, _shape, _use, uniform_init
from .utils.rnn import PackedSequence

__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}
_SCAN_MODE = {"RNN_TANH": "tanh", "RNN_RELU": "relu", "GRU": "gru"}


def _gate_rows(w: Any, gates: int) -> list[Any]:
    """The per-gate blocks of a gate-stacked weight ``(G * hidden, ...)`` or bias ``(G * hidden,)``:
    slices along the first axis (``slice_range0``), which every backend, the verifier and the ONNX
    exporter read, so a layer never slices along its last axis."""
    size = _shape(w)[0] // gates
    return [w[g * size:(g + 1) * size] for g in range(gates)]


def _step(mode: str, xw: list[Any], h: Any, c: Any, w_hh: list[Any], b_hh: list[Any]
          ) -> tuple[Any, Any]:
    """One time step given the per-gate input projections ``xw[g] = x @ W_ig.T + b_ig``: the new
    ``(h, c)`` (``c`` is None except for LSTM). The formulas and gate order are torch's."""
    hw = [F.linear(w, b, h) for w, b in zip(w_hh, b_hh, strict=True)]
    if mode == "RNN_TANH":
        return F.tanh(xw[0] + hw[0]), None
    if mode == "RNN_RELU":
        return F.relu(xw[0] + hw[0]), None
    if mode == "LSTM":
        i = F.sigmoid(xw[0] + hw[0])
        f = F.sigmoid(xw[1] + hw[1])
        g = F.tanh(xw[2] + hw[2])
        o = F.sigmoid(xw[3] + hw[3])
        c_new = f * c + i * g
        return o * F.tanh(c_new), c_new
    r = F.sigmoid(xw[0] + hw[0])
    z = F.sigmoid(xw[1] + hw[1])
    n = F.tanh(xw[2] + r * hw[2])
    return (1.0 - z) * n + z * h, None


def _weights(owner: Module, x: Any, kind: str, suffix: str) -> tuple[list[Any], list[Any]]:
    """The per-gate blocks of ``weight_<kind><suffix>`` and its bias (zeros without bias) as
    refs where ``x`` lives."""
    gates = _GATES[owner.mode]
    w = _use(x, getattr(owner, f"weight_{kind}{suffix}"))
    b = (_use(x, getattr(owner, f"bias_{kind}{suffix}")) if owner.bias
         else _const(x, np.zeros(gates * owner.hidden_size)))
    return _gate_rows(w, gates), _gate_rows(b, gates)


def _stacked(owner: Module, x: Any, kind: str, suffix: str) -> tuple[Any, Any]:
    """``weight_<kind><suffix>`` and its bias (zeros without bias) whole, as refs where ``x``
    lives."""
    w = _use(x, getattr(owner, f"weight_{kind}{suffix}"))
    b = (_use(x, getattr(owner, f"bias_{kind}{suffix}")) if owner.bias
         else _const(x, np.zeros(_shape(w)[0])))
    return w, b


def _scan(mode: str, xw: Any, h0: Any, c0: Any, w_hh: Any, b_hh: Any, reverse: bool
          ) -> tuple[Any, Any, Any]:
    """The fused recurrence over input projections ``xw`` ``(L, B, G*H)``: the state sequence
    ``(L, B, H)`` and the final ``h`` and ``c`` (``c`` is None except for LSTM; the final
    state is the last processed step's, the first one when ``reverse``)."""
    steps = _shape(xw)[0]
    last = 0 if reverse else steps - 1
    if mode == "LSTM":
        out = F.lstm_scan(xw, h0, c0, w_hh, b_hh, reverse=reverse)
        hs, cs = out[0], out[1]
        return hs, hs[last], cs[last]
    hs = F.rnn_scan(xw, h0, w_hh, b_hh, mode=_SCAN_MODE[mode], reverse=reverse)
    return hs, hs[last], None


def _check_float_input(layer: str, x: Any, ndims: tuple[int, ...], size: int) -> tuple[int, ...]:
    shape = _shape(x)
    if len(shape) not in ndims:
        raise ShapeError(f"{layer}: expected input with {' or '.join(map(str, ndims))} "
                         f"dimensions, found shape {shape}")
    if shape[-1] != size:
        raise ShapeError(f"{layer}: input.size(-1) must be equal to input_size. Expected "
                         f"{size}, got {shape[-1]}")
    dtype = np.dtype(getattr(x, "dtype", np.float64))
    if dtype.kind != "f":
        raise TorchLeanError(f"{layer}: input must be a float tensor, found dtype {dtype}")
    return shape


def _init_params(owner: Module, suffix: str, gates: int, hidden: int, inputs: int, bias: bool,
                 dtype: Any, generator: Any, proj: int = 0) -> None:
    bound = 1.0 / math.sqrt(hidden)
    names = [f"weight_ih{suffix}", f"weight_hh{suffix}"]
    shapes: list[tuple[int, ...]] = [(gates * hidden, inputs), (gates * hidden, proj or hidden)]
    if bias:
        names += [f"bias_ih{suffix}", f"bias_hh{suffix}"]
        shapes += [(gates * hidden,), (gates * hidden,)]
    if proj:  # LSTM's projection of h (torch's weight_hr, registered last)
        names.append(f"weight_hr{suffix}")
        shapes.append((proj, hidden))
    for name, shape in zip(names, shapes, strict=True):
        setattr(owner, name, Param(uniform_init(shape, bound, dtype, generator), name))


class _RNNBase(Module):
    """The shared multi-layer, optionally bidirectional loop of ``RNN``, ``LSTM`` and ``GRU``."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, dtype: Any = "float32",
                 generator: Any = None) -> None:
        super().__init__()
        layer = type(self).__name__
        _positive(layer, input_size=input_size, hidden_size=hidden_size, num_layers=num_layers)
        if isinstance(proj_size, bool) or not isinstance(proj_size, int | np.integer) \
                or proj_size < 0:
            raise TorchLeanError(f"{layer}: proj_size must be a non-negative int, found "
                                 f"{proj_size!r}")
        if proj_size and mode != "LSTM":
            raise TorchLeanError(f"{layer}: proj_size argument is only supported for LSTM, not "
                                 "RNN or GRU")
        if proj_size and proj_size >= hidden_size:
            raise TorchLeanError(f"{layer}: proj_size has to be smaller than hidden_size, "
                                 f"found {proj_size} >= {hidden_size}")
        self.proj_size = int(proj_size)
        if isinstance(dropout, bool) or not isinstance(dropout, int | float) \
                or not 0 <= dropout < 1:
            raise TorchLeanError(f"{layer}: dropout must be a number in [0, 1), found "
                                 f"{dropout!r}")
        for flag, value in (("bias", bias), ("batch_first", batch_first),
                            ("bidirectional", bidirectional)):
            if not isinstance(value, bool | np.bool_):
                raise TorchLeanError(f"{layer}: {flag} must be a bool, found {value!r}")
        self.mode = mode
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.bias = int(num_layers), bool(bias)
        self.batch_first, self.dropout = bool(batch_first), float(dropout)
        self.bidirectional = bool(bidirectional)
        directions = 2 if bidirectional else 1
        out_size = self.proj_size or self.hidden_size
        for k in range(self.num_layers):
            inputs = self.input_size if k == 0 else out_size * directions
            for d in range(directions):
                suffix = f"_l{k}" + ("_reverse" if d else "")
                _init_params(self, suffix, _GATES[mode], self.hidden_size, inputs, self.bias,
                             dtype, generator, self.proj_size)

    def _state(self, x: Any, given: Any, name: str, batch: int, batched: bool) -> list[Any]:
        """The per-(layer, direction) initial states: given, or zeros like torch's default
        (h has ``proj_size`` entries when the LSTM projects)."""
        count = self.num_layers * (2 if self.bidirectional else 1)
        size = self.proj_size if self.proj_size and name == "h_0" else self.hidden_size
        if given is None:
            zero = _const(x, np.zeros((batch, size)))
            return [zero] * count
        expected = (count, batch, size) if batched else (count, size)
        if _shape(given) != expected:
            raise ShapeError(f"{type(self).__name__}: expected {name} of shape {expected}, found "
                             f"{_shape(given)}")
        if not batched:
            given = F.unsqueeze(given, 1)
        return [given[k] for k in range(count)]

    def _direction(self, xw: list[list[Any]], h: Any, c: Any, suffix: str, reverse: bool,
                   masks: list[Any] | None = None) -> tuple[list[Any], Any, Any]:
        """Run one direction of one layer over the per-step, per-gate input projections;
        ``masks[t]`` ``(B, 1)`` (packed input) holds a sequence's state past its end and zeroes
        its output there."""
        w_hh, b_hh = _weights(self, h, "hh", suffix)
        if self.proj_size:
            w_hr = _use(h, getattr(self, f"weight_hr{suffix}"))
            no_bias = _const(h, np.zeros(self.proj_size))
        outputs: list[Any] = [None] * len(xw)
        order = range(len(xw) - 1, -1, -1) if reverse else range(len(xw))
        for t in order:
            h_new, c_new = _step(self.mode, xw[t], h, c, w_hh, b_hh)
            if self.proj_size:
                h_new = F.linear(w_hr, no_bias, h_new)
            if masks is None:
                h, c = h_new, c_new
                outputs[t] = h
                continue
            m, keep = masks[t]
            h = h_new * m + h * keep
            if c is not None:
                c = c_new * m + c * keep
            outputs[t] = h_new * m
        return outputs, h, c

    def _scan(self, x: Any, h0: Any, c0: Any, suffix: str, reverse: bool
              ) -> tuple[Any, Any, Any]:
        """One direction of one layer as one fused scan (``lstm_scan`` / ``rnn_scan``) over
        every step's input projection (one ``linear``): the output sequence and final states."""
        xw = F.linear(*_stacked(self, x, "ih", suffix), x)
        w_hh, b_hh = _stacked(self, x, "hh", suffix)
        return _scan(self.mode, xw, h0, c0, w_hh, b_hh, reverse)

    def forward(self, input: Any, hx: Any = None) -> Any:  # noqa: A002  (torch's name)
        if isinstance(input, PackedSequence):
            return self._packed(input, hx)
        return self._run(input, hx, None)

    def _packed(self, packed: PackedSequence, hx: Any) -> Any:
        """A packed batch: the padded time-major batch run with per-step masks."""
        x = packed.padded
        steps = _shape(x)[0]
        valid = np.arange(steps)[:, None] < packed.lengths[None, :]
        masks = [(_const(x, valid[t][:, None].astype(np.float64)),
                  _const(x, (~valid[t])[:, None].astype(np.float64))) for t in range(steps)]
        output, state = self._run(x, hx, masks)
        return PackedSequence(output, packed.lengths), state

    def _run(self, input: Any, hx: Any, masks: list[Any] | None) -> Any:  # noqa: A002
        layer = type(self).__name__
        shape = _check_float_input(layer, input, (2, 3), self.input_size)
        batch_first = self.batch_first and masks is None  # a packed batch is time-major
        batched = len(shape) == 3
        x = input
        if not batched:
            x = F.unsqueeze(x, 1)
        elif batch_first:
            x = F.transpose(x, 0, 1)
        steps, batch = _shape(x)[0], _shape(x)[1]
        if steps == 0:
            raise ShapeError(f"{layer}: the input sequence is empty (shape {shape})")
        lstm = self.mode == "LSTM"
        if lstm and hx is not None and not (isinstance(hx, tuple | list) and len(hx) == 2):
            raise TorchLeanError(f"{layer}: hx must be a tuple (h_0, c_0), found "
                                 f"{type(hx).__name__}")
        h0 = self._state(x, hx[0] if lstm and hx is not None else hx, "h_0", batch, batched)
        c0 = (self._state(x, hx[1] if hx is not None else None, "c_0", batch, batched)
              if lstm else [None] * len(h0))
        directions = 2 if self.bidirectional else 1
        h_n, c_n = [], []
        for k in range(self.num_layers):
            if k > 0 and self.dropout > 0 and self.training:
                if not isinstance(x, Ref):
                    raise TorchLeanError(f"{layer}: training-mode dropout needs tensors or a "
                                         "session (its seeded random stream)")
                x = x.owner.dropout(x, self.dropout, True)
            per_direction = []
            for d in range(directions):
                suffix = f"_l{k}" + ("_reverse" if d else "")
                if masks is None and not self.proj_size:
                    out, h, c = self._scan(x, h0[k * directions + d], c0[k * directions + d],
                                           suffix, bool(d))
                    per_direction.append(out)
                    h_n.append(h)
                    c_n.append(c)
                    continue
                w_ih, b_ih = _weights(self, x, "ih", suffix)
                # every step's input projection at once, per gate
                projected = [F.linear(w, b, x) for w, b in zip(w_ih, b_ih, strict=True)]
                xw = [[p[t] for p in projected] for t in range(steps)]
                outs, h, c = self._direction(xw, h0[k * directions + d],
                                             c0[k * directions + d], suffix, bool(d), masks)
                per_direction.append(F.stack(outs, 0))
                h_n.append(h)
                c_n.append(c)
            x = per_direction[0] if directions == 1 else F.cat(per_direction, 2)
        output = x
        h_out = F.stack(h_n, 0)
        c_out = F.stack(c_n, 0) if lstm else None
        if not batched:
            output = F.squeeze(output, 1)
            h_out = F.squeeze(h_out, 1)
            c_out = F.squeeze(c_out, 1) if lstm else None
        elif batch_first:
            output = F.transpose(output, 0, 1)
        return (output, (h_out, c_out)) if lstm else (output, h_out)

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        if not self.bias:
            text += ", bias=False"
        if self.batch_first:
            text += ", batch_first=True"
        if self.dropout:
            text += f", dropout={self.dropout}"
        if self.bidirectional:
            text += ", bidirectional=True"
        if self.proj_size:
            text += f", proj_size={self.proj_size}"
        return text


class RNN(_RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (or ReLU)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, dtype: Any = "float32",
                 generator: Any = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise TorchLeanError(f"RNN: unknown nonlinearity {nonlinearity!r} (expected 'tanh' "
                                 "or 'relu')")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         dtype=dtype, generator=generator)
        self.nonlinearity = nonlinearity


class LSTM(_RNNBase):
    """Long short-term memory; ``forward(x, (h_0, c_0))`` returns ``output, (h_n, c_n)``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, dtype: Any = "float32", generator: Any = None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size, dtype, generator)


class GRU(_RNNBase):
    """Gated recurrent unit (torch's formulation: the reset gate scales ``W_hn h + b_hn``)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 dtype: Any = "float32", generator: Any = None) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, dtype=dtype, generator=generator)


class _CellBase(Module):
    """One step of a recurrent layer over ``(N, input_size)`` or unbatched ``(input_size,)``."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, bias: bool,
                 dtype: Any, generator: Any) -> None:
        super().__init__()
        _positive(type(self).__name__, input_size=input_size, hidden_size=hidden_size)
        self.mode = mode
        self.input_size, self.hidden_size, self.bias = int(input_size), int(hidden_size), bias
        _init_params(self, "", _GATES[mode], self.hidden_size, self.input_size, bool(bias), dtype,
                     generator)

    def _state(self, x: Any, given: Any, name: str, batched: bool) -> Any:
        n = _shape(x)[0]
        if given is None:
            return _const(x, np.zeros((n, self.hidden_size)))
        expected = (n, self.hidden_size) if batched else (self.hidden_size,)
        if _shape(given) != expected:
            raise ShapeError(f"{type(self).__name__}: expected {name} of shape {expected}, found "
                             f"{_shape(given)}")
        return given if batched else F.unsqueeze(given, 0)

    def _run(self, input: Any, hx: Any) -> tuple[Any, Any, bool]:  # noqa: A002
        layer = type(self).__name__
        shape = _check_float_input(layer, input, (1, 2), self.input_size)
        batched = len(shape) == 2
        x = input if batched else F.unsqueeze(input, 0)
        lstm = self.mode == "LSTM"
        if lstm and hx is not None and not (isinstance(hx, tuple | list) and len(hx) == 2):
            raise TorchLeanError(f"{layer}: hx must be a tuple (h, c), found "
                                 f"{type(hx).__name__}")
        h = self._state(x, hx[0] if lstm and hx is not None else hx, "hx", batched)
        c = self._state(x, hx[1] if hx is not None else None, "cx", batched) if lstm else None
        # one step of the fused scan: fewer recorded ops than the step written out gate by gate
        xw = F.linear(*_stacked(self, x, "ih", ""), x)
        xw = F.reshape(xw, (1,) + _shape(xw))
        w_hh, b_hh = _stacked(self, x, "hh", "")
        _, h, c = _scan(self.mode, xw, h, c, w_hh, b_hh, False)
        return h, c, batched

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(_CellBase):
    """One Elman step: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or ReLU)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", dtype: Any = "float32", generator: Any = None
                 ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise TorchLeanError(f"RNNCell: unknown nonlinearity {nonlinearity!r} (expected "
                                 "'tanh' or 'relu')")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, bias, dtype, generator)
        self.nonlinearity = nonlinearity

    def forward(self, input: Any, hx: Any = None) -> Any:  # noqa: A002
        h, _, batched = self._run(input, hx)
        return h if batched else F.squeeze(h, 0)


class LSTMCell(_CellBase):
    """One LSTM step: ``forward(x, (h, c))`` returns ``(h', c')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 dtype: Any = "float32", generator: Any = None) -> None:
        super().__init__("LSTM", input_size, hidden_size, bias, dtype, generator)

    def forward(self, input: Any, hx: Any = None) -> Any:  # noqa: A002
        h, c, batched = self._run(input, hx)
        return (h, c) if batched else (F.squeeze(h, 0), F.squeeze(c, 0))


class GRUCell(_CellBase):
    """One GRU step: ``forward(x, h)`` returns ``h'``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 dtype: Any = "float32", generator: Any = None) -> None:
        super().__init__("GRU", input_size, hidden_size, bias, dtype, generator)

    def forward(self, input: Any, hx: Any = None) -> Any:  # noqa: A002
        h, _, batched = self._run(input, hx)
        return h if batched else F.squeeze(h, 0)
