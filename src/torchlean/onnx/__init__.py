"""ONNX interchange: load an ONNX model as a compiled torchlean graph, export one to ONNX.

``load(path_or_model)`` turns every ONNX node into registry primitives in one SSA graph and
returns an ``OnnxModel`` (a ``Compiled``: forward, vjp, jvp, hvp and ``to_tape`` work unchanged;
float initialisers become named parameters). ``export(compiled_or_module, path, shapes)`` writes
a standard opset-17 model that onnxruntime runs. Both need the ``onnx`` package, from the
``torchlean[onnx]`` extra; without it every entry point raises ``OnnxMissingError`` saying so.

Operators covered by ``load`` are listed in ``IMPORTED_OPS``; primitives ``export`` writes are
those in ``EXPORTED_PRIMITIVES``.
"""

from __future__ import annotations

from typing import Any

from .errors import OnnxError, OnnxMissingError, UnsupportedOnnxError
from .exporter import EXPORTED_PRIMITIVES
from .exporter import export as _export
from .importer import IMPORTED_OPS, OnnxModel
from .importer import load as _load


def load(source: Any, input_shapes: Any = None) -> Any:
    """An ONNX model (a path, bytes or an ``onnx.ModelProto``) as an ``OnnxModel``.

    ``input_shapes`` (a dict from input name to shape, or a list in input order) fixes inputs
    whose shapes the file leaves symbolic. Unsupported nodes raise one ``UnsupportedOnnxError``
    listing every such node; a malformed file raises ``OnnxError``.
    """
    return _load(source, input_shapes)


def export(model: Any, path: Any = None, example_shapes: Any = None, **options: Any) -> Any:
    """Write ``model`` (a ``Compiled``, an ``nn.Module`` or a function of refs) as ONNX.

    ``example_shapes`` gives the input shapes for modules and functions (ignored for a
    ``Compiled``, which has its traced shapes). Returns the ``onnx.ModelProto``; writes it to
    ``path`` when one is given. See ``torchlean.onnx.exporter.export`` for the options.
    """
    return _export(model, path, example_shapes, **options)


__all__ = ["EXPORTED_PRIMITIVES", "IMPORTED_OPS", "OnnxError", "OnnxMissingError", "OnnxModel",
           "UnsupportedOnnxError", "export", "load"]
