"""The errors of ONNX import and export, and the one guarded import of the ``onnx`` package."""

from __future__ import annotations

from typing import Any

from ..core.errors import TorchLeanError


class OnnxError(TorchLeanError):
    """An ONNX file that cannot be read, or a model that cannot be written."""


class OnnxMissingError(OnnxError, ImportError):
    """The ``onnx`` package is not installed (the ``torchlean[onnx]`` extra)."""


class OnnxLimitError(OnnxError):
    """A size or depth declared in an ONNX file beyond what ``load`` accepts (checked before
    anything is allocated: initialisers, folded constants, the torchlean metadata)."""


class OnnxExternalDataError(OnnxError):
    """External tensor data that ``load`` refuses to read: from bytes or a ``ModelProto`` (no
    directory it may come from), or not a regular file beside the model file."""


class UnsupportedOnnxError(OnnxError):
    """Nodes (or primitives, on export) that cannot be translated; ``problems`` lists each one as
    ``(name, op type, reason)``."""

    def __init__(self, what: str, problems: list[tuple[str, str, str]]) -> None:
        self.problems = list(problems)
        lines = [f"  - {name} ({op}): {reason}" for name, op, reason in self.problems]
        super().__init__(f"{what}: {len(self.problems)} unsupported "
                         f"node{'s' if len(self.problems) != 1 else ''}:\n" + "\n".join(lines))


def require_onnx() -> Any:
    """The top-level ``onnx`` module, or ``OnnxMissingError`` naming the extra to install."""
    try:
        import onnx  # the top-level package (absolute import), not torchlean.onnx
    except ImportError as exc:
        raise OnnxMissingError(
            "torchlean.onnx: the 'onnx' package is not installed; install the extra with "
            "`pip install torchlean[onnx]` (or `pip install onnx`)") from exc
    return onnx
