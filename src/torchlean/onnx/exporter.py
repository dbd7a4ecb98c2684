"""torchlean to ONNX: write a compiled graph as a standard opset-17 model onnxruntime runs.

Each primitive node becomes either its one ONNX operator (``relu`` -> Relu, ``linear`` on a
batch -> Gemm, ``conv2d`` -> Conv, ...), which ``load`` maps back to the same primitive, or, for
primitives without one (attention, one-hot, torchlean's total ``sqrt``, unbatched convolutions,
...), a call to a model-local ONNX function in domain ``torchlean`` whose body is a small
subgraph of standard operators. onnxruntime inlines those bodies; ``load`` recognises the calls
from the metadata and records the original primitive, so export-then-load is bitwise exact.
Parameters become initialisers (named as the module names them), graph constants ``Constant``
nodes. A primitive with no ONNX form (random draws, backward-only helpers) is an error that lists
every such node at once.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.errors import TorchLeanError
from ..core.shape import per_axis
from ..engine.graph import Graph
from ..engine.transforms import Compiled
from ..engine.transforms import compile as tl_compile
from ..ops.elementwise import GELU_C, GELU_K, INV_SQRT2
from ..ops.general import check_perm
from ..ops.pool import geometry
from . import codec
from .errors import OnnxError, UnsupportedOnnxError, require_onnx

OPSET = 17
MIN_OPSET = OPSET
MAX_OPSET = 23  # the newest opset whose exports were checked to run in onnxruntime
_ELEM = {np.dtype(np.float32): 1, np.dtype(np.float64): 11}

Shape = tuple[int, ...]


class _Emit:
    """Appends ONNX nodes to one node list (the main graph or a function body)."""

    def __init__(self, writer: _Writer, nodes: list[Any], dtype: np.dtype) -> None:
        self.writer = writer
        self.nodes = nodes
        self.dtype = dtype

    def node(self, op: str, inputs: Sequence[str], out: str | None = None, **attrs: Any) -> str:
        onnx = require_onnx()
        name = out or self.writer.fresh(op.lower())
        self.nodes.append(onnx.helper.make_node(op, list(inputs), [name], **attrs))
        return name

    def const(self, value: Any, dtype: Any = None) -> str:
        onnx = require_onnx()
        array = np.asarray(value, dtype=self.dtype if dtype is None else dtype)
        name = self.writer.fresh("const")
        tensor = onnx.numpy_helper.from_array(array, name=name)
        self.nodes.append(onnx.helper.make_node("Constant", [], [name], value=tensor))
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), np.int64)

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        return self.node("Reshape", [x, self.ints(shape)])

    def reduce(self, op: str, x: str, axes: Sequence[int], keepdims: int) -> str:
        """A Reduce* node over ``axes``: an input from opset 18 on (13 for ReduceSum), an
        attribute before."""
        if op == "ReduceSum" or self.writer.opset >= 18:
            return self.node(op, [x, self.ints(axes)], keepdims=keepdims)
        return self.node(op, [x], axes=list(axes), keepdims=keepdims)


Emitter = Callable[[_Emit, list[str], list[Shape], Shape, dict[str, Any]], str]


def _unary(op: str) -> Emitter:
    return lambda e, ins, shapes, out, attrs: e.node(op, ins)


def _perm_of(name: str, shape: Shape, attrs: dict[str, Any]) -> tuple[int, ...]:
    fixed = {"transpose2d": (1, 0), "transpose3d_first_to_last": (1, 2, 0),
             "transpose3d_last_to_first": (2, 0, 1), "transpose3d_last_two": (0, 2, 1)}
    if name in fixed:
        return fixed[name]
    if name == "swap_adjacent_at_depth":
        perm = list(range(len(shape)))
        d = int(attrs["depth"])
        perm[d], perm[d + 1] = perm[d + 1], perm[d]
        return tuple(perm)
    return check_perm(name, attrs["perm"], len(shape))


def _transpose(name: str) -> Emitter:
    return lambda e, ins, shapes, out, attrs: e.node(
        "Transpose", ins, perm=list(_perm_of(name, shapes[0], attrs)))


def _conv_attrs(name: str, w: Shape, attrs: dict[str, Any], transpose: bool) -> dict[str, Any]:
    d = len(w) - 2
    s = per_axis(name, "stride", attrs.get("stride", 1), d, 1)
    p = per_axis(name, "padding", attrs.get("padding", 0), d, 0)
    out = {"kernel_shape": list(w[2:]), "strides": list(s), "pads": list(p) * 2}
    if transpose:
        out["output_padding"] = list(per_axis(name, "output_padding",
                                              attrs.get("output_padding", 0), d, 0))
    return out


def _conv(name: str, transpose: bool, core: bool) -> Emitter:
    def emit(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
             attrs: dict[str, Any]) -> str:
        w, x = ins[0], ins[-1]
        w_shape, x_shape = shapes[0], shapes[-1]
        op = "ConvTranspose" if transpose else "Conv"
        args = [x, w] if core else [x, w, ins[1]]
        kw = _conv_attrs(name, w_shape, attrs, transpose)
        if len(x_shape) == len(w_shape):
            return e.node(op, args, **kw)
        args[0] = e.reshape(x, (1,) + x_shape)  # unbatched (C, spatial...): add N = 1
        return e.reshape(e.node(op, args, **kw), out)

    return emit


def _pool_geometry(name: str, x: Shape, attrs: dict[str, Any]) -> tuple[int, Any, Any, Any]:
    fixed = 2 if name.endswith(("2d", "2d_pad")) else None
    (d, k, s, p), _ = geometry(name, x, attrs["kernel_size"], attrs.get("stride"),
                               attrs.get("padding", 0), fixed)
    return d, k, s, p


def _pool(name: str, op: str) -> Emitter:
    def emit(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
             attrs: dict[str, Any]) -> str:
        d, k, s, p = _pool_geometry(name, shapes[0], attrs)
        kw: dict[str, Any] = {"kernel_shape": list(k), "strides": list(s), "pads": list(p) * 2}
        if op == "AveragePool":
            kw["count_include_pad"] = 1
        if len(shapes[0]) == d + 2:
            return e.node(op, ins, **kw)
        batched = e.reshape(ins[0], (1,) + shapes[0])
        return e.reshape(e.node(op, [batched], **kw), out)

    return emit


def _linear(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
            attrs: dict[str, Any]) -> str:
    w, b, x = ins
    i, x_shape = shapes[0][1], shapes[2]
    if len(x_shape) == 2:
        return e.node("Gemm", [x, w, b], transB=1)
    rows = int(np.prod(x_shape[:-1], dtype=np.int64))
    flat = e.reshape(x, (rows, i))
    return e.reshape(e.node("Gemm", [flat, w, b], transB=1), out)


def _reshape(e: _Emit, x: str, shape: Shape, out: Shape) -> str:
    """Reshape to ``out``; a kept leading (batch) axis is written as 0, ONNX's "copy this axis",
    so the node also serves other batch sizes (as PyTorch's flatten exports do)."""
    target = list(out)
    if len(shape) > 1 and len(target) > 1 and target[0] == shape[0] > 0:
        target[0] = 0
    return e.node("Reshape", [x, e.ints(target)])


def _scalar_op(op: str) -> Emitter:
    return lambda e, ins, shapes, out, attrs: e.node(op, [ins[0], e.const(float(attrs["c"]))])


def _reduce_axis(op: str) -> Emitter:
    def emit(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
             attrs: dict[str, Any]) -> str:
        axis = int(attrs["axis"])
        axis = axis + len(shapes[0]) if axis < 0 else axis
        return e.reduce(op, ins[0], [axis], 0)

    return emit


def _masked_softmax_body(e: _Emit, x: str, mask: Any) -> str:
    if mask is None:
        return e.node("Softmax", [x], axis=-1)
    allowed = e.const(np.asarray(mask, dtype=bool), np.bool_)
    masked = e.node("Where", [allowed, x, e.const(-np.inf)])
    m = e.reduce("ReduceMax", masked, [-1], 1)
    # A fully masked row has max -inf: shift by 0 instead; its weights are all 0 anyway.
    m = e.node("Where", [e.node("IsInf", [m]), e.const(0.0), m])
    ex = e.node("Exp", [e.node("Sub", [masked, m])])
    s = e.reduce("ReduceSum", ex, [-1], 1)
    safe = e.node("Where", [e.node("Greater", [s, e.const(0.0)]), s, e.const(1.0)])
    return e.node("Div", [ex, safe])


def _masked_softmax(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
                    attrs: dict[str, Any]) -> str:
    return _masked_softmax_body(e, ins[0], attrs.get("mask"))


def _attention(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
               attrs: dict[str, Any]) -> str:
    wq, wk, wv, wo, x = ins
    x_shape = shapes[4]
    n, dm = x_shape[-2], x_shape[-1]
    b = 1 if len(x_shape) == 2 else x_shape[0]
    hd = shapes[0][1]
    h = int(attrs.get("num_heads", 1))
    d = hd // h
    x2 = e.reshape(x, (b * n, dm))

    def heads(w: str) -> str:  # (B*n, H*D) -> (B, H, n, D)
        split = e.reshape(e.node("MatMul", [x2, w]), (b, n, h, d))
        return e.node("Transpose", [split], perm=[0, 2, 1, 3])

    q, k, v = heads(wq), heads(wk), heads(wv)
    kt = e.node("Transpose", [k], perm=[0, 1, 3, 2])
    scores = e.node("Mul", [e.node("MatMul", [q, kt]), e.const(1.0 / math.sqrt(d))])
    p = _masked_softmax_body(e, scores, attrs.get("mask"))
    o = e.node("Transpose", [e.node("MatMul", [p, v])], perm=[0, 2, 1, 3])
    merged = e.node("MatMul", [e.reshape(o, (b * n, hd)), wo])
    return e.reshape(merged, x_shape)


def _one_hot(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
             attrs: dict[str, Any]) -> str:
    n = int(attrs["num_classes"])
    ids = e.node("Unsqueeze", [ins[0], e.ints([-1])])
    hit = e.node("Equal", [ids, e.const(np.arange(n))])
    return e.node("Cast", [hit], to=_ELEM[e.dtype])


def _sum_to(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
            attrs: dict[str, Any]) -> str:
    x_shape = shapes[0]
    lead = len(x_shape) - len(out)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(out)
                                if d == 1 and x_shape[lead + i] != 1]
    if not axes:
        return e.reshape(ins[0], out)
    return e.reshape(e.reduce("ReduceSum", ins[0], axes, 1), out)


def _standardize_body(e: _Emit, x: str, axes: list[int], eps: float) -> str:
    mean = e.reduce("ReduceMean", x, axes, 1)
    centred = e.node("Sub", [x, mean])
    var = e.reduce("ReduceMean", e.node("Mul", [centred, centred]), axes, 1)
    std = e.node("Sqrt", [e.node("Add", [var, e.const(eps)])])
    return e.node("Div", [centred, std])


def _standardize(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
                 attrs: dict[str, Any]) -> str:
    rank = len(shapes[0])
    axes = attrs["axes"]
    axes = [axes] if isinstance(axes, int | np.integer) else list(axes)
    return _standardize_body(e, ins[0], [int(a) % rank for a in axes], float(attrs["eps"]))


def _batch_norm(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
                attrs: dict[str, Any]) -> str:
    x, gamma, beta = ins
    rank = len(shapes[0])
    axes = [a for a in range(rank) if a != rank - 3]  # every axis but the channel axis
    per_channel = (shapes[1][0], 1, 1)
    normed = _standardize_body(e, x, axes, float(attrs.get("eps", 1e-6)))
    scaled = e.node("Mul", [normed, e.reshape(gamma, per_channel)])
    return e.node("Add", [scaled, e.reshape(beta, per_channel)])


def _gather(kind: str) -> Emitter:
    def emit(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
             attrs: dict[str, Any]) -> str:
        n = shapes[0][0]
        idx = np.asarray(attrs["idx"] if "idx" in attrs else attrs["i"], dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise _Inexpressible(f"indices outside [0, {n}) (torchlean reads zeros there; ONNX "
                                 "Gather has no such rule)")
        return e.node("Gather", [ins[0], e.const(idx, np.int64)], axis=0)

    return emit


def _embedding(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
               attrs: dict[str, Any]) -> str:
    # The ids travel as integer-valued floats; Gather needs integers. onnxruntime refuses an
    # id outside [-rows, rows) (torchlean refuses negatives too) and Cast truncates fractions.
    ids = e.node("Cast", [ins[1]], to=7)  # INT64
    return e.node("Gather", [ins[0], ids], axis=0)


def _slice_range0(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
                  attrs: dict[str, Any]) -> str:
    start, length = int(attrs["start"]), int(attrs["length"])
    return e.node("Slice", [ins[0], e.ints([start]), e.ints([start + length]), e.ints([0])])


def _pad_range0(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
                attrs: dict[str, Any]) -> str:
    rank = len(shapes[0])
    start, total = int(attrs["start"]), int(attrs["total"])
    after = total - start - shapes[0][0]
    return e.node("Pad", [ins[0], e.ints([start] + [0] * (rank - 1) + [after] + [0] * (rank - 1))])


def _cast(e: _Emit, x: str) -> str:
    return e.node("Cast", [x], to=_ELEM[e.dtype])


def _zeros_like(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
                attrs: dict[str, Any]) -> str:
    onnx = require_onnx()
    zero = onnx.numpy_helper.from_array(np.zeros(1, dtype=e.dtype))
    return e.node("ConstantOfShape", [e.ints(out)], value=zero)


def _mse_loss(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
              attrs: dict[str, Any]) -> str:
    d = e.node("Sub", ins)
    total = e.node("ReduceSum", [e.node("Mul", [d, d])], keepdims=0)
    return e.node("Div", [total, e.const(float(np.prod(shapes[0], dtype=np.int64)))])


def _max_weight(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
                attrs: dict[str, Any]) -> str:
    # 1 where a > b, 0.5 at ties, 0 below: (greater + (1 - less)) / 2.
    greater = _cast(e, e.node("Greater", ins))
    not_less = e.node("Sub", [e.const(1.0), _cast(e, e.node("Less", ins))])
    return e.node("Mul", [e.node("Add", [greater, not_less]), e.const(0.5)])


def _gelu(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
          attrs: dict[str, Any]) -> str:
    # ONNX has Gelu from opset 20; before, the ops of the reference kernel in its order.
    approximate = str(attrs.get("approximate", "tanh"))
    if e.writer.opset >= 20:
        return e.node("Gelu", ins, approximate=approximate)
    x = ins[0]
    if approximate == "tanh":
        cube = e.node("Mul", [e.node("Mul", [x, x]), x])
        inner = e.node("Mul", [e.node("Add", [x, e.node("Mul", [cube, e.const(GELU_K)])]),
                               e.const(GELU_C)])
        factor = e.node("Add", [e.node("Tanh", [inner]), e.const(1.0)])
    else:
        factor = e.node("Add", [e.node("Erf", [e.node("Mul", [x, e.const(INV_SQRT2)])]),
                                e.const(1.0)])
    return e.node("Mul", [e.node("Mul", [x, factor]), e.const(0.5)])


def _scan(lstm: bool) -> Emitter:
    """``lstm_scan`` / ``rnn_scan`` unrolled over the (static) sequence length: per step a
    Gather of its input projection, one MatMul against ``W_hh^T``, gate Slices on the last axis
    and the gate formulas; the states stacked with Unsqueeze and Concat. (ONNX's LSTM / GRU /
    RNN operators take the input weights and another gate order; a body of plain operators is
    the scan's own definition.)"""

    def emit(e: _Emit, ins: list[str], shapes: list[Shape], out: Shape,
             attrs: dict[str, Any]) -> str:
        xw, h = ins[0], ins[1]
        c = ins[2] if lstm else None
        w, b = ins[-2], ins[-1]
        steps, hidden = shapes[0][0], shapes[1][1]
        mode = "lstm" if lstm else str(attrs.get("mode", "tanh"))
        wt = e.node("Transpose", [w], perm=[1, 0])

        def gate(x: str, k: int) -> str:
            return e.node("Slice", [x, e.ints([k * hidden]), e.ints([(k + 1) * hidden]),
                                    e.ints([1])])

        def one_minus(x: str) -> str:
            return e.node("Sub", [e.const(1.0), x])

        hs: list[str] = [""] * steps
        cs: list[str] = [""] * steps
        order = range(steps - 1, -1, -1) if attrs.get("reverse") else range(steps)
        for t in order:
            x = e.node("Gather", [xw, e.const(np.int64(t), np.int64)], axis=0)
            hw = e.node("Add", [e.node("MatMul", [h, wt]), b])
            if mode == "lstm":
                pre = e.node("Add", [x, hw])
                i, f = e.node("Sigmoid", [gate(pre, 0)]), e.node("Sigmoid", [gate(pre, 1)])
                g, o = e.node("Tanh", [gate(pre, 2)]), e.node("Sigmoid", [gate(pre, 3)])
                assert c is not None
                c = e.node("Add", [e.node("Mul", [f, c]), e.node("Mul", [i, g])])
                h = e.node("Mul", [o, e.node("Tanh", [c])])
                cs[t] = e.node("Unsqueeze", [c, e.ints([0])])
            elif mode == "gru":
                r = e.node("Sigmoid", [e.node("Add", [gate(x, 0), gate(hw, 0)])])
                z = e.node("Sigmoid", [e.node("Add", [gate(x, 1), gate(hw, 1)])])
                n = e.node("Tanh", [e.node("Add", [gate(x, 2), e.node("Mul", [r, gate(hw, 2)])])])
                h = e.node("Add", [e.node("Mul", [one_minus(z), n]), e.node("Mul", [z, h])])
            else:
                h = e.node("Tanh" if mode == "tanh" else "Relu", [e.node("Add", [x, hw])])
            hs[t] = e.node("Unsqueeze", [h, e.ints([0])])
        seq = hs[0] if steps == 1 else e.node("Concat", hs, axis=0)
        if not lstm:
            return seq
        cseq = cs[0] if steps == 1 else e.node("Concat", cs, axis=0)
        return e.node("Concat", [e.node("Unsqueeze", [seq, e.ints([0])]),
                                 e.node("Unsqueeze", [cseq, e.ints([0])])], axis=0)

    return emit


class _Inexpressible(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# One ONNX operator each; ``load`` maps them back to the same primitive.
DIRECT: dict[str, Emitter] = {
    "add": _unary("Add"), "sub": _unary("Sub"), "mul": _unary("Mul"),
    "max": _unary("Max"), "min": _unary("Min"),
    "relu": _unary("Relu"), "tanh": _unary("Tanh"), "sigmoid": _unary("Sigmoid"),
    "exp": _unary("Exp"), "log": _unary("Log"), "abs": _unary("Abs"), "erf": _unary("Erf"),
    "inv": _unary("Reciprocal"), "softplus": _unary("Softplus"), "sign": _unary("Sign"),
    "matmul": _unary("MatMul"), "bmm": _unary("MatMul"), "matmul_nd": _unary("MatMul"),
    "scale": _scalar_op("Mul"), "add_scalar": _scalar_op("Add"),
    "softmax": lambda e, ins, shapes, out, attrs: e.node("Softmax", ins, axis=-1),
    "log_softmax": lambda e, ins, shapes, out, attrs: e.node("LogSoftmax", ins, axis=-1),
    "reshape": lambda e, ins, shapes, out, attrs: _reshape(e, ins[0], shapes[0], out),
    "flatten": lambda e, ins, shapes, out, attrs: _reshape(e, ins[0], shapes[0], out),
    "broadcast_to": lambda e, ins, shapes, out, attrs: e.node("Expand", [ins[0], e.ints(out)]),
    "concat_dim0": lambda e, ins, shapes, out, attrs: e.node("Concat", ins, axis=0),
    "concat_vectors": lambda e, ins, shapes, out, attrs: e.node("Concat", ins, axis=0),
    "clamp": lambda e, ins, shapes, out, attrs: e.node(
        "Clip", [ins[0], e.const(float(attrs["lo"])), e.const(float(attrs["hi"]))]),
    "layer_norm": lambda e, ins, shapes, out, attrs: e.node(
        "LayerNormalization", ins, axis=-1, epsilon=float(attrs.get("eps", 1e-6))),
    "reduce_sum": _reduce_axis("ReduceSum"), "reduce_mean": _reduce_axis("ReduceMean"),
    "sum": lambda e, ins, shapes, out, attrs: e.node("ReduceSum", ins, keepdims=0),
    "slice_range0": _slice_range0,
    "linear": _linear,
    "conv": _conv("conv", False, False), "conv2d": _conv("conv2d", False, False),
    "conv_core": _conv("conv_core", False, True),
    "conv_transpose": _conv("conv_transpose", True, False),
    "conv_transpose2d": _conv("conv_transpose2d", True, False),
    "conv_transpose_core": _conv("conv_transpose_core", True, True),
    "max_pool": _pool("max_pool", "MaxPool"), "max_pool2d": _pool("max_pool2d", "MaxPool"),
    "max_pool2d_pad": _pool("max_pool2d_pad", "MaxPool"),
    "avg_pool": _pool("avg_pool", "AveragePool"),
    "avg_pool2d": _pool("avg_pool2d", "AveragePool"),
    "avg_pool2d_pad": _pool("avg_pool2d_pad", "AveragePool"),
    **{name: _transpose(name) for name in (
        "transpose2d", "transpose3d_first_to_last", "transpose3d_last_to_first",
        "transpose3d_last_two", "swap_adjacent_at_depth", "permute")},
}

# Written as the body of a torchlean function (no single ONNX operator has their semantics).
COMPOSED: dict[str, Emitter] = {
    "sqrt": lambda e, ins, shapes, out, attrs: e.node("Sqrt", [e.node("Relu", ins)]),
    "square": lambda e, ins, shapes, out, attrs: e.node("Mul", [ins[0], ins[0]]),
    "detach": lambda e, ins, shapes, out, attrs: e.node("Identity", ins),
    "safe_log": lambda e, ins, shapes, out, attrs: e.node(
        "Log", [e.node("Add", [e.node("Softplus", ins), e.const(float(attrs.get("eps", 1e-6)))])]),
    "sum_to": _sum_to,
    "one_hot": _one_hot,
    "masked_softmax": _masked_softmax,
    "multi_head_attention": _attention,
    "standardize": _standardize,
    "batch_norm": _batch_norm,
    "gather_rows_nat": _gather("rows"), "gather_vec_nat": _gather("vec"),
    "gather_row": _gather("row"), "gather_scalar": _gather("scalar"),
    "pad_range0": _pad_range0,
    "zeros_like": _zeros_like,
    "mse_loss": _mse_loss,
    "positive_mask": lambda e, ins, shapes, out, attrs: _cast(
        e, e.node("Greater", [ins[0], e.const(0.0)])),
    "interval_mask": lambda e, ins, shapes, out, attrs: _cast(e, e.node("And", [
        e.node("Greater", [ins[0], e.const(float(attrs["lo"]))]),
        e.node("Less", [ins[0], e.const(float(attrs["hi"]))])])),
    "max_weight": _max_weight,
    "gather_scalar_nat": _gather("scalar"),
    "embedding": _embedding,
    "gelu": _gelu,
    "lstm_scan": _scan(True),
    "rnn_scan": _scan(False),
}

EXPORTED_PRIMITIVES: tuple[str, ...] = tuple(sorted(set(DIRECT) | set(COMPOSED)))
"""Primitives ``export`` writes (every other primitive is an error naming its nodes)."""


def _direct_here(name: str, shapes: list[Shape], attrs: dict[str, Any]) -> bool:
    """Whether the one-operator form applies (its import gives back the same primitive)."""
    if name == "linear":
        return len(shapes[2]) == 2
    if name.startswith("conv"):
        return len(shapes[-1]) == len(shapes[0])
    if "pool" in name:
        d = _pool_geometry(name, shapes[0], attrs)[0]
        return len(shapes[0]) == d + 2
    return name in DIRECT


class _Writer:
    """Builds the ONNX graph, functions and metadata for one torchlean graph."""

    def __init__(self, graph: Graph, opset: int) -> None:
        self.graph = graph
        self.opset = opset
        self.dtype = graph.dtype
        self.count = 0
        self.nodes: list[Any] = []
        self.functions: list[Any] = []
        self.calls: dict[str, dict[str, Any]] = {}

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def op_node(self, i: int, names: dict[int, str]) -> None:
        onnx = require_onnx()
        node = self.graph.nodes[i]
        assert node.op is not None
        prim = node.op.name
        attrs = {k: v for k, v in node.attrs.items() if k != "dtype"}
        ins = [names[p] for p in node.parents]
        shapes = [self.graph.nodes[p].shape for p in node.parents]
        out = f"v{i}"
        if _direct_here(prim, shapes, attrs):
            emit = _Emit(self, self.nodes, self.dtype)
            result = DIRECT[prim](emit, ins, shapes, node.shape, attrs)
            names[i] = result
            return
        body_emitter = COMPOSED.get(prim) or DIRECT.get(prim)
        if body_emitter is None:
            raise _Inexpressible("no ONNX form (random draws and backward-only helpers have "
                                 "none)")
        fname = f"{prim}_{i}"
        body: list[Any] = []
        formals = [f"x{k}" for k in range(len(ins))]
        result = body_emitter(_Emit(self, body, self.dtype), formals, shapes, node.shape, attrs)
        fn_out = "y"
        body.append(onnx.helper.make_node("Identity", [result], [fn_out]))
        self.functions.append(onnx.helper.make_function(
            codec.DOMAIN, fname, formals, [fn_out], body,
            [onnx.helper.make_opsetid("", self.opset)]))
        self.nodes.append(onnx.helper.make_node(fname, ins, [out], domain=codec.DOMAIN))
        self.calls[fname] = codec.encode_call(prim, attrs)
        names[i] = out


def _live(graph: Graph) -> list[bool]:
    live = [False] * len(graph.nodes)
    for o in graph.outputs:
        live[o] = True
    for i in range(len(graph.nodes) - 1, -1, -1):
        if live[i]:
            for p in graph.nodes[i].parents:
                live[p] = True
    return live


def _param_names(compiled: Compiled, module: Any) -> list[str]:
    """An initialiser name per parameter: the module's dotted names where known, unique."""
    dotted = {}
    if module is not None and hasattr(module, "named_parameters"):
        dotted = {id(p): name for name, p in module.named_parameters()}
    names: list[str] = []
    for k, p in enumerate(compiled.params):
        base = dotted.get(id(p)) or getattr(p, "name", None) or f"param_{k}"
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base}_{n}"
        names.append(name)
    return names


def _compiled_of(model: Any, example_shapes: Any, dtype: Any) -> tuple[Compiled, Any]:
    if isinstance(model, Compiled):
        return model, getattr(model, "module", None)
    if example_shapes is None:
        raise OnnxError("onnx export: example_shapes (one shape per input) is needed to trace "
                        f"a {type(model).__name__}")
    shapes = [example_shapes] if example_shapes and isinstance(example_shapes[0], int) \
        else list(example_shapes)
    if not callable(model):
        raise OnnxError(f"onnx export: expected a Compiled, an nn.Module or a function, found "
                        f"{type(model).__name__}")
    return tl_compile(model, *shapes, dtype=dtype or "float32"), model


def export(model: Any, path: Any = None, example_shapes: Any = None, *,
           dtype: Any = None, opset: int = OPSET, input_names: Sequence[str] | None = None,
           output_names: Sequence[str] | None = None) -> Any:
    """Write ``model`` as ONNX; see ``torchlean.onnx.export``. Returns the ``ModelProto``."""
    onnx = require_onnx()
    if (isinstance(opset, bool) or not isinstance(opset, int)
            or not MIN_OPSET <= opset <= MAX_OPSET):
        raise OnnxError(f"onnx export: opset must be an int from {MIN_OPSET} to {MAX_OPSET}, "
                        f"found {opset!r}")
    compiled, module = _compiled_of(model, example_shapes, dtype)
    graph = compiled.graph
    if graph.dtype not in _ELEM:
        raise OnnxError(f"onnx export: graph dtype {graph.dtype} has no ONNX counterpart")
    elem = _ELEM[graph.dtype]
    n_leaves = len(graph.inputs) - len(graph.params)
    in_names = list(input_names) if input_names is not None else (
        ["input"] if n_leaves == 1 else [f"input_{k}" for k in range(n_leaves)])
    out_names = list(output_names) if output_names is not None else (
        ["output"] if len(graph.outputs) == 1 else [f"output_{k}" for k in range(
            len(graph.outputs))])
    if len(in_names) != n_leaves or len(out_names) != len(graph.outputs):
        raise OnnxError(f"onnx export: {len(in_names)} input names for {n_leaves} inputs, "
                        f"{len(out_names)} output names for {len(graph.outputs)} outputs")
    writer = _Writer(graph, opset)
    names: dict[int, str] = {}
    param_names = _param_names(compiled, module)
    initialisers = []
    for k, i in enumerate(graph.inputs):
        if k < n_leaves:
            names[i] = in_names[k]
        else:
            p = graph.params[k - n_leaves]
            names[i] = param_names[k - n_leaves]
            value = np.asarray(p.value, dtype=graph.dtype)
            initialisers.append(onnx.numpy_helper.from_array(value, name=names[i]))
    problems: list[tuple[str, str, str]] = []
    live = _live(graph)
    for i, node in enumerate(graph.nodes):
        if not live[i] or node.kind == "input":
            continue
        if node.kind == "const":
            names[i] = _Emit(writer, writer.nodes, graph.dtype).const(graph.consts[i])
            continue
        assert node.op is not None
        try:
            writer.op_node(i, names)
        except _Inexpressible as exc:
            problems.append((f"%{i}", node.op.name, exc.reason))
            names[i] = f"v{i}"
        except (TorchLeanError, KeyError, TypeError) as exc:
            problems.append((f"%{i}", node.op.name, f"{type(exc).__name__}: {exc}"))
            names[i] = f"v{i}"
    if problems:
        raise UnsupportedOnnxError("onnx export", problems)
    for o, name in zip(graph.outputs, out_names, strict=True):
        writer.nodes.append(onnx.helper.make_node("Identity", [names[o]], [name]))
    inputs = [onnx.helper.make_tensor_value_info(in_names[k], elem, graph.nodes[i].shape)
              for k, i in enumerate(graph.inputs[:n_leaves])]
    outputs = [onnx.helper.make_tensor_value_info(name, elem, graph.nodes[o].shape)
               for o, name in zip(graph.outputs, out_names, strict=True)]
    onnx_graph = onnx.helper.make_graph(writer.nodes, "torchlean", inputs, outputs, initialisers)
    opsets = [onnx.helper.make_opsetid("", opset)]
    if writer.functions:
        opsets.append(onnx.helper.make_opsetid(codec.DOMAIN, 1))
    proto = onnx.helper.make_model(onnx_graph, opset_imports=opsets, functions=writer.functions,
                                   producer_name="torchlean")
    proto.ir_version = 8  # opset 17's IR version: what onnxruntime releases of that era read
    if writer.calls:
        onnx.helper.set_model_props(proto, {codec.METADATA_KEY: codec.dumps(writer.calls)})
    try:
        onnx.checker.check_model(proto)
    except Exception as exc:
        raise OnnxError(f"onnx export: the written model fails the ONNX checker: {exc}") from None
    if path is not None:
        target = os.fspath(path)
        try:
            onnx.save(proto, target)
        except OSError as exc:
            raise OnnxError(f"onnx export: cannot write {target}: {exc}") from None
    return proto
