"""ONNX models and user data as the commands take them: ``eval``, ``verify`` and ``certify``
with ``--onnx MODEL`` and a bundled ``--dataset``, or the user's own ``--data file.npz``.

``load_for_data`` loads the model, checks it has one input and one output and that its input
takes the dataset's examples (so a mismatch is one clear error, not a failure deep inside), and
``predict`` runs it over a whole test set in chunks of the model's fixed batch size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import TorchLeanError
from ..onnx import load
from ..zoo import datasets

MAX_DATA_BYTES = 2 * 2**30


class OnnxCliError(TorchLeanError):
    """Bad command-line input to a command given ``--onnx``."""


@dataclass
class Split:
    inputs: Any
    targets: Any


@dataclass
class UserData:
    """A user's ``--data`` file in the shape of a bundled dataset (``train`` is ``test``:
    there is no other split; it only tells commands the inputs' range)."""

    train: Split
    test: Split


def load_data_file(path: str, what: str, labels: bool = True) -> UserData:
    """``x`` (float32, examples first) and ``y`` (class labels, or regression targets; None
    when absent and ``labels`` is False) from a user's ``.npz``, checked before use: plain arrays
    only (nothing unpickled), at most ``MAX_DATA_BYTES``, finite, one target per example."""
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise OnnxCliError(f"{what} --data: cannot read {path}: {exc.strerror}") from None
    if size > MAX_DATA_BYTES:
        raise OnnxCliError(f"{what} --data: {path} is {size} bytes, above the limit of "
                           f"{MAX_DATA_BYTES}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            names = sorted(archive.files)
            if "x" not in names:
                raise OnnxCliError(f"{what} --data: {path} must hold an array 'x' (examples "
                                   f"first), found {names}")
            x = np.asarray(archive["x"])
            y = np.asarray(archive["y"]) if "y" in names else None
    except OnnxCliError:
        raise
    except (OSError, ValueError, EOFError, AttributeError) as exc:  # not an npz, pickles, cut
        raise OnnxCliError(f"{what} --data: {path} is not a readable .npz of plain arrays "
                           f"({type(exc).__name__}: {exc})") from None
    if x.dtype.kind not in "fiu" or x.ndim < 2 or len(x) == 0:
        raise OnnxCliError(f"{what} --data: 'x' must be a numeric array (N, ...) with N >= 1, "
                           f"found {x.dtype} {x.shape}")
    x = x.astype(np.float32)
    if not np.all(np.isfinite(x)):
        raise OnnxCliError(f"{what} --data: 'x' has non-finite entries")
    if y is None and labels:
        raise OnnxCliError(f"{what} --data: {path} has no targets 'y'")
    if y is not None:
        if y.dtype.kind not in "fiu" or len(y) != len(x) or not np.all(np.isfinite(y)):
            raise OnnxCliError(f"{what} --data: 'y' must hold one finite target per example "
                               f"({len(x)}, ...), found {y.dtype} {y.shape}")
    return UserData(Split(x, y), Split(x, y))


def load_for_data(path: str, dataset: str | None, seed: int, what: str,
                  data_file: str | None = None, labels: bool = True) -> tuple[Any, Any]:
    """The loaded model and its dataset (the image layout when the model takes images), or
    the user's ``data_file`` (``labels``: whether it must hold targets ``y``)."""
    if data_file is not None:
        if dataset is not None:
            raise OnnxCliError(f"{what}: give either --dataset or --data, not both")
        user = load_data_file(data_file, what, labels)
        model = _one_in_one_out(path, what)
        shape = tuple(model.input_shapes[0])
        example = tuple(user.test.inputs.shape[1:])
        if shape[1:] != example:
            raise OnnxCliError(f"{what} --onnx: {path} takes inputs {shape} (batch first), but "
                               f"{data_file}'s 'x' holds examples of shape {example}")
        return model, user
    if dataset is None:
        raise OnnxCliError(f"{what} --onnx: --dataset (or --data file.npz) is needed (an ONNX "
                           "file records no dataset)")
    if dataset not in datasets.NAMES:
        raise OnnxCliError(f"{what} --onnx: unknown dataset {dataset!r}; valid datasets: "
                           f"{', '.join(datasets.NAMES)}")
    model = _one_in_one_out(path, what)
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


def _one_in_one_out(path: str, what: str) -> Any:
    model = load(path)
    if len(model.input_names) != 1 or len(model.output_names) != 1:
        raise OnnxCliError(f"{what} --onnx: {path} must have one input and one output, found "
                           f"{model.input_names} -> {model.output_names}")
    return model


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
