"""Reading an ONNX model from outside: a path, bytes or an ``onnx.ModelProto``, treated as hostile.

- A path must name a regular file (a FIFO, a device such as ``/dev/zero`` or a symlink to one is
  refused without blocking), read up to its own size and at most ``limits.MAX_MODEL_BYTES``.
- External tensor data is read only for a model loaded from a path, only from a regular file
  directly beside the model file (the location is a bare file name; ``..``, absolute paths,
  sub-directories and symlinks leading out of the directory are refused), and only the byte
  range the tensor declares, which must match its shape. A model given as bytes or as a
  ``ModelProto`` has no directory its data may come from: external data is refused (ONNX's own
  reader would resolve it against the current directory).
- Every tensor then declares a size within limits and holds exactly the data it declares
  (``limits.check_tensor``), before any is converted to an array.
"""

from __future__ import annotations

import os
from typing import Any

from ..core.errors import TorchLeanError
from ..core.safe_files import read_regular
from . import limits
from .errors import OnnxError, OnnxExternalDataError, require_onnx

__all__ = ["read_model"]


def _parse(onnx: Any, data: bytes, label: str) -> Any:
    try:
        return onnx.load_from_string(data)
    except RecursionError:
        raise OnnxError(f"onnx load: {label} is not a readable ONNX model (nested too "
                        "deeply)") from None
    except Exception as exc:  # protobuf decode errors and the like, whatever their class
        raise OnnxError(f"onnx load: {label} is not a readable ONNX model (malformed or "
                        f"truncated: {type(exc).__name__}: {exc})") from None


def _external_entry(tensor: Any, label: str) -> tuple[str, int, int | None]:
    entries = {e.key: e.value for e in tensor.external_data}
    where = f"onnx load: {label}: tensor {tensor.name!r}"
    location = entries.get("location", "")
    try:
        offset = int(entries.get("offset", "0"))
        length = int(entries["length"]) if "length" in entries else None
    except ValueError:
        raise OnnxExternalDataError(f"{where}: external data offset/length must be integers, "
                                    f"found {entries.get('offset')!r}/{entries.get('length')!r}"
                                    ) from None
    if offset < 0 or (length is not None and length < 0):
        raise OnnxExternalDataError(f"{where}: negative external data offset or length")
    return location, offset, length


def _beside(directory: str, location: str, where: str) -> str:
    """The path of ``location`` in ``directory``, refused unless it is a bare file name there
    whose real path (symlinks followed) is still in that directory."""
    if (not location or "\x00" in location or os.path.isabs(location)
            or os.path.basename(location) != location or location in (".", "..")
            or "/" in location or "\\" in location):
        raise OnnxExternalDataError(f"{where}: external data location {location!r} is not a "
                                    "file name beside the model file (no directories, '..' or "
                                    "absolute paths)")
    path = os.path.join(directory, location)
    real_dir = os.path.realpath(directory)
    if os.path.dirname(os.path.realpath(path)) != real_dir:
        raise OnnxExternalDataError(f"{where}: external data file {location!r} is a link that "
                                    "leads out of the model's directory")
    return path


def _read_external(onnx: Any, model: Any, label: str, directory: str | None) -> None:
    """Replace every external tensor's reference by its bytes (or refuse it)."""
    from onnx.external_data_helper import _get_all_tensors  # the tensors ONNX itself resolves

    for tensor in _get_all_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        where = f"onnx load: {label}: tensor {tensor.name!r}"
        location, offset, length = _external_entry(tensor, label)
        if directory is None:
            raise OnnxExternalDataError(
                f"{where}: its data is in the external file {location!r}, which is read only "
                "for a model loaded from a path (beside the model file); this model was given "
                "as bytes or a ModelProto")
        limits.check_tensor_shape(tensor, where)
        need = limits.declared_bytes(tensor, where)
        if length is not None and length != need:
            raise OnnxExternalDataError(f"{where}: external data length {length} does not "
                                        f"match its shape {list(tensor.dims)} ({need} bytes)")
        path = _beside(directory, location, where)
        tensor.raw_data = read_regular(path, f"{where}: external data {location!r}",
                                       limits.MAX_MODEL_BYTES, OnnxExternalDataError,
                                       offset=offset, length=need)
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def read_model(source: Any) -> tuple[Any, str]:
    """``(ModelProto, label)`` for a path, bytes or ``ModelProto`` (see the module doc)."""
    onnx = require_onnx()
    directory: str | None = None
    if isinstance(source, onnx.ModelProto):
        model, label = source, "<model>"
    elif isinstance(source, bytes | bytearray | memoryview):
        label = "<bytes>"
        if len(source) > limits.MAX_MODEL_BYTES:
            raise OnnxError(f"onnx load: {label}: {len(source)} bytes, more than the "
                            f"{limits.MAX_MODEL_BYTES} an ONNX file may hold")
        model = _parse(onnx, bytes(source), label)
    elif isinstance(source, str | os.PathLike):
        label = os.fspath(source)
        if not isinstance(label, str):
            raise OnnxError(f"onnx load: expected a str path, found {type(label).__name__}")
        data = read_regular(label, f"onnx load: {label}", limits.MAX_MODEL_BYTES, OnnxError)
        model = _parse(onnx, data, label)
        directory = os.path.dirname(os.path.abspath(label))
    else:
        raise OnnxError(f"onnx load: expected a path, bytes or onnx.ModelProto, found "
                        f"{type(source).__name__}")
    try:
        _read_external(onnx, model, label, directory)
    except TorchLeanError:
        raise
    except RecursionError:
        raise OnnxError(f"onnx load: {label}: subgraphs nested too deeply") from None
    return model, label
