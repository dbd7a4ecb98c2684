"""Reloading a saved model of the zoo: its config, whether it fits a dataset, its weights.

A checkpoint written by ``torchlean train --save`` (format ``torchlean.train/1``: the model under
``model.``, the optimiser under ``optimizer.``) or by ``tl.save(model, path)`` of a zoo model
(``torchlean.save/1``: the module's own state dict) records the model's config as JSON in its
metadata. ``read_config`` reads and checks it, ``check_fits`` says whether the model can take a
dataset (``check_user_data``: the user's own examples and labels), and ``load_trained`` rebuilds
the model and loads its weights, naming every tensor that does not fit. The command line's
``eval``, ``certify``, ``verify`` and ``export`` use these, and so can any program.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .. import checkpoint
from ..core.errors import CheckpointError
from . import datasets, models

__all__ = ["TRAIN_FORMAT", "check_fits", "check_user_data", "load_data", "load_trained",
           "read_config"]

TRAIN_FORMAT = "torchlean.train/1"
"""The metadata format of ``torchlean train --save``."""

_NESTING_LIMIT = 32  # a config is a flat-ish dict; deeper JSON is a crafted file


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of JSON data, stopping (and returning ``limit + 1``) once past ``limit``."""
    stack = [(value, 1)]
    deepest = 0
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def _json_object(path: str, what: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise CheckpointError(f"checkpoint {path}: {what} is not valid JSON ({reason})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"checkpoint {path}: {what} must be a JSON object, found "
                              f"{type(value).__name__}")
    if _depth(value, _NESTING_LIMIT) > _NESTING_LIMIT:
        raise CheckpointError(f"checkpoint {path}: {what} is nested deeper than "
                              f"{_NESTING_LIMIT} levels")
    return value


def _config_of(path: str, metadata: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    formats = (TRAIN_FORMAT, checkpoint.SAVE_FORMAT)
    if metadata.get("format") not in formats or "config" not in metadata:
        raise CheckpointError(
            f"checkpoint {path}: not written by 'torchlean train --save' or by tl.save(model, "
            "path) of a torchlean zoo model (no model config in its metadata)")
    config = _json_object(path, "model config", metadata["config"])
    settings = _json_object(path, "training settings", metadata.get("settings", "{}"))
    if config.get("model") not in models.NAMES:
        raise CheckpointError(f"checkpoint {path}: unknown model {config.get('model')!r}; valid "
                              f"models: {', '.join(models.NAMES)}")
    # Whoever crafts a file can also compute its checksum: every entry is checked before a
    # model is built from it (types, bounds, parameter count).
    models.check_config(config, f"checkpoint {path}: model config")
    seed = settings.get("seed", config.get("seed", 0))
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 63:
        raise CheckpointError(f"checkpoint {path}: seed must be an integer in [0, 2**63), found "
                              f"{str(seed)[:40]}")
    return config, settings


def read_config(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model config and the training settings a zoo checkpoint records."""
    return _config_of(path, checkpoint.read_metadata(path))


def load_data(model: str, dataset: str, seed: int) -> datasets.DatasetBundle:
    """The dataset as ``model`` takes it (the CNN wants images), split by ``seed``."""
    return datasets.load(dataset, seed=seed, **models.dataset_options(model, dataset))


def check_fits(config: dict[str, Any], data: datasets.DatasetBundle, path: str) -> None:
    """The saved model must take this dataset's inputs and produce its classes."""
    models.check_compatible(config["model"], data.name)
    wanted = models.config_for(config["model"], data)
    for key in ("in_features", "image_shape", "num_classes", "vocab_size", "seq_len"):
        if key in config and key in wanted and config[key] != wanted[key]:
            raise CheckpointError(f"checkpoint {path}: its {config['model']} has {key} = "
                                  f"{config[key]}, but dataset {data.name} needs {wanted[key]}")


def check_user_data(config: dict[str, Any], inputs: Any, targets: Any, path: str,
                    what: str) -> None:
    """The user's examples (``inputs``, examples first) must have the shape the saved
    classifier takes, and ``targets`` (when given) be its class indices."""
    model = config["model"]
    if model == "mlp":
        wanted: tuple[int, ...] = (int(config["in_features"]),)
    elif model == "cnn":
        wanted = tuple(int(v) for v in config["image_shape"])
    else:
        raise CheckpointError(f"{what}: checkpoint {path} holds a {model!r}; --data takes "
                              "classifiers of feature vectors or images (mlp, cnn)")
    found = tuple(np.shape(inputs)[1:])
    if found != wanted:
        raise CheckpointError(f"{what}: checkpoint {path}'s {model} takes examples of shape "
                              f"{wanted}, but --data's 'x' holds examples of shape {found}")
    if targets is None:
        return
    y = np.asarray(targets)
    classes = int(config["num_classes"])
    if (y.ndim != 1 or y.dtype.kind not in "iu" or np.any(y < 0) or np.any(y >= classes)):
        raise CheckpointError(f"{what}: --data's 'y' must hold one class index in [0, "
                              f"{classes}) per example for checkpoint {path}'s {model}, found "
                              f"{y.dtype} {y.shape}")


def load_trained(path: str) -> Any:
    """Rebuild the zoo model saved at ``path`` and load its weights (the file is read once).

    The model's ``model_config`` is the config the checkpoint records and its
    ``train_settings`` the training settings (``{}`` for ``tl.save``). Every tensor that is
    missing, extra or of the wrong shape is named in one ``CheckpointError``.
    """
    arrays, metadata = checkpoint.read_file(path)
    config, settings = _config_of(path, metadata)
    try:
        model = models.build(config)
    except CheckpointError:
        raise
    except (TypeError, ValueError, OverflowError, MemoryError, RecursionError) as exc:
        raise CheckpointError(f"checkpoint {path}: its model config cannot be built "
                              f"({type(exc).__name__}: {exc})") from None
    if metadata.get("format") == checkpoint.SAVE_FORMAT:
        found = arrays  # tl.save(model, path): the module's own state dict, unprefixed
    else:  # torchlean train --save: {"model": ..., "optimizer": ...}
        found = {k[len("model."):]: v for k, v in arrays.items() if k.startswith("model.")}
    problems = checkpoint.describe_mismatches(model.state_dict(), found)
    if problems:
        raise CheckpointError(f"checkpoint {path} does not fit the {config['model']} its config "
                              "describes:\n  " + "\n  ".join(problems))
    model.load_state_dict(found)
    model.train_settings = dict(settings)
    return model
