"""Limits on what an ONNX file may make ``load`` allocate, checked before allocating.

An ONNX file is hostile until checked: every tensor it carries declares its shape, and integer
shape arithmetic folded at load time (``ConstantOfShape``, ``Range``, ``Expand``, broadcasting)
can ask for arrays far larger than the file. Each check here compares a size declared in the
file with a limit (or with the data actually present) and raises ``OnnxLimitError`` naming the
tensor or node, what the file declared and the limit, so nothing is allocated first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import OnnxError, OnnxLimitError

MAX_MODEL_BYTES = (1 << 31) - 1
"""Largest ONNX file read (protobuf's own limit on one message)."""
MAX_TENSOR_ELEMENTS = 1 << 31
"""Most entries one initialiser or constant may declare."""
MAX_FOLD_ELEMENTS = 1 << 24
"""Most entries an integer computation folded at load time may produce (16 Mi)."""
MAX_METADATA_CHARS = 1 << 24
"""Longest ``torchlean.primitives`` metadata string decoded (16 MiB)."""
MAX_METADATA_DEPTH = 32
"""Deepest nesting of lists and objects in that metadata."""
MAX_FUNCTION_DEPTH = 16
"""Deepest nesting of model-local function calls inlined (a function may not call itself)."""

_COMPLEX = (14, 15)  # COMPLEX64, COMPLEX128: two stored numbers per entry
_HALF_BYTE = (21, 22, 23)  # UINT4, INT4, FLOAT4E2M1


def _count(dims: Sequence[int], where: str) -> int:
    if any(int(d) < 0 for d in dims):
        raise OnnxLimitError(f"{where}: negative dimension in shape {list(dims)}")
    return math.prod(int(d) for d in dims)


def _name(tensor: Any, where: str) -> str:
    return f"{where} tensor {tensor.name!r}" if tensor.name else f"{where} tensor"


def check_tensor_shape(tensor: Any, where: str) -> int:
    """The number of entries ``tensor`` declares, refused beyond ``MAX_TENSOR_ELEMENTS``;
    segments and unknown data types are refused by name."""
    import onnx  # checked by the caller (require_onnx); a third-party import, kept lazy

    name = _name(tensor, where)
    if tensor.HasField("segment"):
        raise OnnxError(f"{name}: segmented tensors (TensorProto.segment) are not supported")
    n = _count(tensor.dims, name)
    if n > MAX_TENSOR_ELEMENTS:
        raise OnnxLimitError(f"{name}: declares shape {list(tensor.dims)} ({n} entries), more "
                             f"than the {MAX_TENSOR_ELEMENTS} accepted")
    elem = int(tensor.data_type)
    try:
        onnx.helper.tensor_dtype_to_np_dtype(elem)
        onnx.helper.tensor_dtype_to_field(elem)
    except (KeyError, ValueError, TypeError):
        raise OnnxError(f"{name}: unknown data type {elem}") from None
    if elem == onnx.TensorProto.UNDEFINED:
        raise OnnxError(f"{name}: data type UNDEFINED")
    return n


def declared_bytes(tensor: Any, where: str) -> int:
    """The bytes of raw data ``tensor``'s shape and data type call for."""
    import onnx

    n = check_tensor_shape(tensor, where)
    elem = int(tensor.data_type)
    if elem == onnx.TensorProto.STRING:
        raise OnnxError(f"{_name(tensor, where)}: STRING tensors cannot be stored as raw data")
    # 4-bit types (UINT4, INT4, FLOAT4E2M1) pack two entries per byte.
    return -(-n // 2) if elem in _HALF_BYTE else n * np.dtype(
        onnx.helper.tensor_dtype_to_np_dtype(elem)).itemsize


def check_tensor(tensor: Any, where: str) -> None:
    """``tensor`` (a ``TensorProto``) declares a shape within ``MAX_TENSOR_ELEMENTS`` and holds
    exactly the data that shape needs, so converting it allocates no more than the file holds.
    Segments, unknown data types and unread external data are refused by name."""
    import onnx

    name = _name(tensor, where)
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise OnnxError(f"{name}: its external data was not read")
    n = check_tensor_shape(tensor, where)
    elem = int(tensor.data_type)
    if tensor.HasField("raw_data") and elem != onnx.TensorProto.STRING:
        need = declared_bytes(tensor, where)
        if len(tensor.raw_data) != need:
            raise OnnxLimitError(f"{name}: declares shape {list(tensor.dims)} ({n} entries of "
                                 f"{onnx.helper.tensor_dtype_to_string(elem)}), but holds "
                                 f"{len(tensor.raw_data)} bytes, expected {need}")
        return
    field = onnx.helper.tensor_dtype_to_field(elem)
    held = len(getattr(tensor, field))
    per = 2 if elem in _COMPLEX else 1
    if held != n * per:
        raise OnnxLimitError(f"{name}: declares shape {list(tensor.dims)} ({n} entries), but "
                             f"holds {held} values in {field}")


def check_fold(op: str, where: str, args: Sequence[Any], attrs: dict[str, Any]) -> None:
    """The result of folding ``op`` on the constant ``args`` stays within ``MAX_FOLD_ELEMENTS``
    (checked from the shapes and values, before the result is computed)."""
    n = _fold_size(op, args, attrs)
    if n is not None and n > MAX_FOLD_ELEMENTS:
        raise OnnxLimitError(f"{where} ({op}): folding it at load time would make {n} entries, "
                             f"more than the {MAX_FOLD_ELEMENTS} accepted")


def _ints(value: Any, what: str) -> list[int]:
    array = np.asarray(value).reshape(-1)
    if array.dtype.kind not in "biu":
        raise OnnxError(f"{what} must be integers, found {array.dtype}")
    return [int(v) for v in array]


def _fold_size(op: str, args: Sequence[Any], attrs: dict[str, Any]) -> int | None:
    arrays = [a for a in args if a is not None]
    if op == "ConstantOfShape":
        if not arrays:
            return None
        return _count(_ints(arrays[0], "ConstantOfShape: the shape"), "ConstantOfShape")
    if op == "Range":
        if len(arrays) != 3 or any(np.asarray(a).size != 1 for a in arrays):
            return None  # the kernel says what is wrong
        start, limit, delta = (float(np.asarray(a).reshape(())) for a in arrays)
        if not all(math.isfinite(v) for v in (start, limit, delta)):
            raise OnnxError(f"Range: start, limit and delta must be finite, found "
                            f"{start}, {limit}, {delta}")
        if delta == 0:
            raise OnnxError("Range: delta is 0")
        return max(math.ceil((limit - start) / delta), 0)
    if op == "Expand":
        if len(arrays) != 2:
            return None
        target = _ints(arrays[1], "Expand: the shape")
        return _broadcast_count([np.shape(arrays[0]), tuple(target)])
    if op == "Gather":
        if len(arrays) != 2:
            return None
        x, i = np.shape(arrays[0]), np.shape(arrays[1])
        axis = int(attrs.get("axis", 0))
        if not -len(x) <= axis < len(x):
            return None  # the kernel says what is wrong
        axis %= len(x)
        return _count([*x[:axis], *i, *x[axis + 1:]], "Gather")
    if op in ("Concat", "Cast", "Unsqueeze", "Squeeze", "Slice", "Reshape", "Transpose",
              "Neg", "Abs", "Sqrt", "Floor", "Ceil", "Not", "Trilu", "ReduceProd", "ReduceSum",
              "Size", "Shape"):
        return None  # no larger than their inputs
    return _broadcast_count([np.shape(a) for a in arrays])


def _broadcast_count(shapes: list[tuple[int, ...]]) -> int:
    """Entries of the broadcast of ``shapes`` (the largest size per axis; a mismatch is left to
    the kernel, which reports it)."""
    if not shapes:
        return 0
    ndim = max(len(s) for s in shapes)
    out = []
    for k in range(ndim):
        sizes = [int(s[len(s) - ndim + k]) for s in shapes if len(s) - ndim + k >= 0]
        out.append(max(sizes) if sizes else 1)
    return _count(out, "broadcast")


def check_metadata_text(text: str, key: str) -> None:
    if len(text) > MAX_METADATA_CHARS:
        raise OnnxLimitError(f"onnx load: the {key!r} metadata is {len(text)} characters, more "
                             f"than the {MAX_METADATA_CHARS} accepted")
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:  # JSON nesting depth, counted before the recursive decoder runs
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_METADATA_DEPTH:
                raise OnnxLimitError(f"onnx load: the {key!r} metadata nests lists and objects "
                                     f"more than {MAX_METADATA_DEPTH} deep")
        elif ch in "]}":
            depth -= 1
