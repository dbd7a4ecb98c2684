"""JSON encoding of primitive attributes, for the ``torchlean`` function nodes an export writes.

A primitive without a one-to-one ONNX operator is exported as a call to a model-local ONNX
function (domain ``torchlean``) whose body computes it; the call's primitive name and exact
attributes are stored in the model's metadata under ``METADATA_KEY`` so that loading the file
back records the very same primitive (hence a bitwise round trip). Attributes hold tuples, NumPy
arrays (masks, index vectors), dtypes and numbers, which plain JSON cannot tell apart.

The metadata comes from the file, so decoding it is bounded (``limits``): its length and nesting
depth are checked before the JSON decoder runs, and only plain numeric and boolean dtypes are
accepted (a structured or sub-array dtype could ask for gigabytes from a few bytes of text).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from . import limits
from .errors import OnnxError

DOMAIN = "torchlean"
METADATA_KEY = "torchlean.primitives"


def _encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": value.dtype.str}
    if isinstance(value, np.dtype):
        return {"__dtype__": value.str}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise OnnxError(f"onnx export: cannot store attribute value {value!r} "
                    f"({type(value).__name__}) in the model")


def _dtype(text: Any) -> np.dtype:
    """A plain numeric or boolean dtype named in the metadata; anything else is refused."""
    if not isinstance(text, str) or len(text) > 8:
        raise OnnxError(f"onnx load: metadata dtype must be a short string, found {text!r}")
    try:
        dtype = np.dtype(text)
    except (TypeError, ValueError):
        raise OnnxError(f"onnx load: metadata dtype {text!r} is not a NumPy dtype") from None
    if dtype.kind not in "biuf" or dtype.shape != () or dtype.fields is not None:
        raise OnnxError(f"onnx load: metadata dtype {text!r} is not a plain number or bool type")
    return dtype


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return np.array(value["__ndarray__"], dtype=_dtype(value.get("dtype")))
        if "__dtype__" in value:
            return _dtype(value["__dtype__"])
        if "__tuple__" in value:
            return tuple(_decode(v) for v in value["__tuple__"])
        raise OnnxError(f"onnx load: unknown encoded attribute {value!r}")
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def encode_call(op: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """One call's record: the primitive name and its attributes, JSON-ready."""
    return {"op": op, "attrs": {k: _encode(v) for k, v in attrs.items()}}


def dumps(calls: dict[str, dict[str, Any]]) -> str:
    return json.dumps(calls, sort_keys=True, allow_nan=True)


def loads(text: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Function name -> (primitive name, attributes), from the metadata string."""
    limits.check_metadata_text(text, METADATA_KEY)  # length and depth, before decoding
    try:
        raw = json.loads(text)
        return {name: (str(call["op"]), {k: _decode(v) for k, v in call["attrs"].items()})
                for name, call in raw.items()}
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        raise OnnxError(f"onnx load: the {METADATA_KEY!r} metadata is not valid "
                        f"({type(exc).__name__}: {exc})") from None
