"""ONNX models and user data as the commands take them: ``eval``, ``verify`` and ``certify``
with ``--onnx MODEL`` and a bundled ``--dataset``.

``load_for_data`` loads the model, checks it has one input and one output and that its input
takes the dataset's examples (so a mismatch is one clear error, not a failure deep inside), and
``predict`` runs it over a whole test set in chunks of the model's fixed batch size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import TorchLeanError
from ..onnx import load
from ..zoo import datasets


class OnnxCliError(TorchLeanError):
    """Bad command-line input to a command given ``--onnx``."""


def load_for_data(path: str, dataset: str | None, seed: int, what: str) -> tuple[Any, Any]:
    """The loaded model and its dataset (the image layout when the model takes images)."""
    if dataset is None:
        raise OnnxCliError(f"{what} --onnx: --dataset is needed (an ONNX file records no "
                           "dataset)")
    if dataset not in datasets.NAMES:
        raise OnnxCliError(f"{what} --onnx: unknown dataset {dataset!r}; valid datasets: "
                           f"{', '.join(datasets.NAMES)}")
    model = load(path)
    if len(model.input_names) != 1 or len(model.output_names) != 1:
        raise OnnxCliError(f"{what} --onnx: {path} must have one input and one output, found "
                           f"{model.input_names} -> {model.output_names}")
    shape = tuple(model.input_shapes[0])
    images = len(shape) == 4
    if images and "image" not in datasets.LAYOUTS.get(dataset, ()):
        raise OnnxCliError(f"{what} --onnx: {path} takes images {shape} (batch first), but "
                           f"dataset {dataset} has no image layout; use a model of feature "
                           "vectors, or --dataset digits")
    data = datasets.load(dataset, seed=seed, **({"layout": "image"} if images else {}))
    example = tuple(np.asarray(data.test.inputs).shape[1:])
    if shape[1:] != example:
        raise OnnxCliError(f"{what} --onnx: {path} takes inputs {shape} (batch first), but "
                           f"{dataset}'s examples have shape {example}")
    return model, data


def predict(model: Any, inputs: np.ndarray) -> np.ndarray:
    """The model's (single) output for every example, in chunks of its fixed batch size (the
    last chunk padded with zeros, whose rows are dropped)."""
    shape = model.input_shapes[0]
    batch = shape[0]
    outs = []
    for start in range(0, len(inputs), batch):
        chunk = inputs[start:start + batch]
        n = len(chunk)
        if n < batch:
            chunk = np.concatenate([chunk, np.zeros((batch - n,) + chunk.shape[1:], chunk.dtype)])
        outs.append(np.asarray(model(chunk))[:n])
    return np.concatenate(outs, axis=0)
