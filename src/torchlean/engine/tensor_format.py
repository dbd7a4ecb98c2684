"""Tensor values printed as torch prints them (``torch/_tensor_str.py``'s formatter).

One width for every entry, taken from the finite nonzero values: integer-valued floats as
``1.``, otherwise 4 decimals, scientific notation when the values span more than 1000x, exceed
1e8 or (non-integer) fall below 1e-4; entries right-aligned to that width; rows wrapped at 80
columns; tensors over 1000 entries summarised to 3 edge items with ``...``. NumPy print options
``PRINT_OPTIONS`` holds torch's print options (``torch.set_printoptions`` changes them).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["PRINT_OPTIONS", "format_values", "grad_fn_name"]

# torch's defaults; torch.set_printoptions changes them
PRINT_OPTIONS: dict[str, Any] = {"precision": 4, "threshold": 1000, "edgeitems": 3,
                                 "linewidth": 80, "sci_mode": None}


class _Formatter:
    def __init__(self, values: np.ndarray, precision: int) -> None:
        self.floating = values.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        self.precision = precision
        flat = values.reshape(-1)
        if not self.floating:
            for v in flat.tolist():
                self.max_width = max(self.max_width, len(str(v)))
            return
        finite = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if finite.size == 0:
            return
        absval = np.abs(finite)
        lo, hi = float(absval.min()), float(absval.max())
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        if self.int_mode:
            if hi / lo > 1000.0 or hi > 1.0e8:
                self.sci_mode = True
                widths = [len(f"{v:.{precision}e}") for v in finite.tolist()]
            else:
                widths = [len(f"{v:.0f}") + 1 for v in finite.tolist()]
        elif hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4:
            self.sci_mode = True
            widths = [len(f"{v:.{precision}e}") for v in finite.tolist()]
        else:
            widths = [len(f"{v:.{precision}f}") for v in finite.tolist()]
        self.max_width = max([self.max_width, *widths])
        if PRINT_OPTIONS["sci_mode"] is not None:
            self.sci_mode = bool(PRINT_OPTIONS["sci_mode"])

    def width(self) -> int:
        return self.max_width

    def format(self, value: Any) -> str:
        if self.floating:
            v = float(value)
            if self.sci_mode:
                text = f"{v:{self.max_width}.{self.precision}e}"
            elif self.int_mode:
                text = f"{v:.0f}"
                if not (math.isinf(v) or math.isnan(v)):
                    text += "."
            else:
                text = f"{v:.{self.precision}f}"
        else:
            text = str(value.item() if hasattr(value, "item") else value)
        return (self.max_width - len(text)) * " " + text


def _summarized(values: np.ndarray, edge: int) -> np.ndarray:
    if values.ndim == 0:
        return values
    if values.shape[0] > 2 * edge:
        start = [_summarized(values[i], edge) for i in range(edge)]
        end = [_summarized(values[i], edge) for i in range(len(values) - edge, len(values))]
        return np.stack(start + end)
    return np.stack([_summarized(v, edge) for v in values]) if values.ndim > 1 else values


def _vector(values: np.ndarray, indent: int, summarize: bool, fmt: _Formatter, edge: int,
            linewidth: int) -> str:
    element_length = fmt.width() + 2
    per_line = max(1, int(math.floor((linewidth - indent) / element_length)))
    if summarize and values.shape[0] > 2 * edge:
        data = ([fmt.format(v) for v in values[:edge]] + [" ..."]
                + [fmt.format(v) for v in values[-edge:]])
    else:
        data = [fmt.format(v) for v in values]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(values: np.ndarray, indent: int, summarize: bool, fmt: _Formatter, edge: int,
            linewidth: int) -> str:
    if values.ndim == 0:
        return fmt.format(values)
    if values.ndim == 1:
        return _vector(values, indent, summarize, fmt, edge, linewidth)
    n = values.shape[0]
    if summarize and n > 2 * edge:
        slices = ([_nested(values[i], indent + 1, summarize, fmt, edge, linewidth)
                   for i in range(edge)] + ["..."]
                  + [_nested(values[i], indent + 1, summarize, fmt, edge, linewidth)
                     for i in range(n - edge, n)])
    else:
        slices = [_nested(values[i], indent + 1, summarize, fmt, edge, linewidth)
                  for i in range(n)]
    joiner = "," + "\n" * (values.ndim - 1) + " " * (indent + 1)
    return "[" + joiner.join(slices) + "]"


def format_values(values: np.ndarray, indent: int = 7) -> str:
    """The body of ``tensor(...)`` for ``values`` (``indent``: the prefix's length)."""
    if values.size == 0:
        return "[]"
    precision, threshold, edge, linewidth = (int(PRINT_OPTIONS[k]) for k in (
        "precision", "threshold", "edgeitems", "linewidth"))
    summarize = values.size > threshold
    shown = _summarized(values, edge) if summarize else values
    fmt = _Formatter(shown, precision)
    if values.ndim == 0:
        return fmt.format(values)
    return _nested(values, indent, summarize, fmt, edge, linewidth)


# torch's autograd node names for the primitives a tensor op records (``grad_fn=<...>``).
_GRAD_FN = {
    "add": "AddBackward0", "add_scalar": "AddBackward0", "sub": "SubBackward0",
    "mul": "MulBackward0", "scale": "MulBackward0", "inv": "ReciprocalBackward0",
    "matmul": "MmBackward0", "matmul_nd": "BmmBackward0", "bmm": "BmmBackward0",
    "linear": "AddmmBackward0", "sum": "SumBackward0", "reduce_sum": "SumBackward1",
    "reduce_mean": "MeanBackward0", "relu": "ReluBackward0", "sigmoid": "SigmoidBackward0",
    "tanh": "TanhBackward0", "exp": "ExpBackward0", "log": "LogBackward0",
    "sqrt": "SqrtBackward0", "square": "PowBackward0", "abs": "AbsBackward0",
    "sin": "SinBackward0", "cos": "CosBackward0", "pow": "PowBackward0",
    "softmax": "SoftmaxBackward0", "log_softmax": "LogSoftmaxBackward0",
    "reshape": "ViewBackward0", "flatten": "ViewBackward0", "permute": "PermuteBackward0",
    "transpose2d": "TBackward0", "conv2d": "ConvolutionBackward0",
    "conv": "ConvolutionBackward0", "max_pool2d": "MaxPool2DWithIndicesBackward0",
    "layer_norm": "NativeLayerNormBackward0", "embedding": "EmbeddingBackward0",
    "gather_rows_nat": "EmbeddingBackward0", "clamp": "ClampBackward1",
    "mse_loss": "MseLossBackward0", "concat_dim0": "CatBackward0", "max": "MaxBackward0",
    "min": "MinBackward0", "erf": "ErfBackward0", "softplus": "SoftplusBackward0",
    "take": "IndexBackward0", "slice_range0": "SliceBackward0",
    "broadcast_to": "ExpandBackward0",
}


def grad_fn_name(prim: str) -> str:
    """torch's node name for a primitive (``MulBackward0``), or ``<Prim>Backward0``."""
    return _GRAD_FN.get(prim) or "".join(p.capitalize() for p in prim.split("_")) + "Backward0"
