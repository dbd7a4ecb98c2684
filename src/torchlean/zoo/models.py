"""The models of the main job (``torchlean train``): mlp, cnn and a small decoder-only transformer.

Each model is built from a plain config dict (``build(config)``), and that dict is what a
checkpoint stores in its metadata (as JSON), so ``torchlean eval`` can rebuild the model without
being told its sizes. ``config_for(name, dataset)`` derives a config from a dataset's info, and
``RECIPES`` holds the default training settings per model and dataset (the ones whose accuracy
``benchmarks/accuracy.py`` reports).

Everything here is built from ``tl.nn`` layers; initial weights depend only on ``config["seed"]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import nn
from ..core.backend import namespace_of
from ..core.errors import TorchLeanError
from ..engine.ops_interface import Ref
from .datasets import NAMES as DATASETS
from .datasets import DatasetBundle

__all__ = ["COMPATIBLE", "NAMES", "RECIPES", "Block", "Transformer", "build", "check_compatible",
           "config_for"]


def _norm(config: dict[str, Any], channels: int, image: bool) -> list[nn.Module]:
    """A batch-norm layer before each hidden ReLU when ``config["batch_norm"]`` (as the
    certified-training reference's cnn_7layer models), none otherwise."""
    if not config.get("batch_norm", False):
        return []
    return [nn.BatchNorm2d(channels) if image else nn.BatchNorm1d(channels)]


def mlp(config: dict[str, Any]) -> nn.Module:
    """Linear-ReLU stacks: ``in_features -> hidden... -> num_classes`` (``batch_norm``: with
    batch normalisation before each ReLU)."""
    sizes = [int(config["in_features"]), *(int(h) for h in config["hidden"])]
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(fan_in, fan_out), *_norm(config, fan_out, False), nn.ReLU()]
    layers.append(nn.Linear(sizes[-1], int(config["num_classes"])))
    return nn.Sequential(*layers)


def cnn(config: dict[str, Any]) -> nn.Module:
    """Two 3x3 conv / ReLU / 2x2 max-pool stages, then a linear classifier (``batch_norm``: with
    batch normalisation before each ReLU)."""
    c_in, height, width = (int(s) for s in config["image_shape"])
    c1, c2 = (int(c) for c in config["channels"])
    if height % 4 or width % 4:
        raise TorchLeanError(f"cnn: image height and width must be multiples of 4 (two 2x2 "
                             f"poolings), found {height}x{width}")
    return nn.Sequential(
        nn.Conv2d(c_in, c1, 3, padding=1), *_norm(config, c1, True), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 3, padding=1), *_norm(config, c2, True), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(c2 * (height // 4) * (width // 4), int(config["num_classes"])),
    )


class Block(nn.Module):
    """A pre-LN transformer block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, num_heads, causal=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(approximate="tanh"),
                                 nn.Linear(d_ff, d_model))

    def forward(self, x: Any) -> Any:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    """Decoder-only transformer over token ids ``(B, T)``: logits ``(B, T, vocab_size)``.

    Token embedding plus learned position embedding, ``num_layers`` pre-LN blocks with causal
    multi-head attention and a GELU MLP, a final LayerNorm and a linear head.
    """

    def __init__(self, vocab_size: int, seq_len: int, d_model: int, num_heads: int,
                 num_layers: int, d_ff: int) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.Sequential(*(Block(d_model, num_heads, d_ff) for _ in range(num_layers)))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: Any) -> Any:
        length = tokens.shape[-1]
        if length > self.seq_len:
            raise TorchLeanError(f"Transformer: sequence of {length} tokens is longer than the "
                                 f"{self.seq_len} positions it was built for")
        # Position ids as a ref next to the tokens (0, 1, ..., T-1 in every row), so the
        # position table is used where the tokens live and receives gradients.
        # (Plain token arrays get the ids in their own namespace: on a device, made there.)
        ids = (np.arange(length, dtype=tokens.dtype) if isinstance(tokens, Ref | np.ndarray)
               else namespace_of(tokens).arange(length, dtype=tokens.dtype))
        positions = tokens * 0.0 + ids
        x = self.tok(tokens) + self.pos(positions)
        return self.head(self.ln_f(self.blocks(x)))


def transformer(config: dict[str, Any]) -> nn.Module:
    return Transformer(int(config["vocab_size"]), int(config["seq_len"]),
                       int(config["d_model"]), int(config["num_heads"]),
                       int(config["num_layers"]), int(config["d_ff"]))


_BUILDERS: dict[str, Callable[[dict[str, Any]], nn.Module]] = {
    "mlp": mlp, "cnn": cnn, "transformer": transformer}
NAMES: tuple[str, ...] = tuple(_BUILDERS)

COMPATIBLE: dict[str, tuple[str, ...]] = {
    "mlp": ("digits", "iris"),   # feature vectors
    "cnn": ("digits",),          # images
    "transformer": ("adder",),   # token sequences
}
"""Which datasets each model can be trained on."""

DEFAULT_DATASET = {"mlp": "digits", "cnn": "digits", "transformer": "adder"}

RECIPES: dict[tuple[str, str], dict[str, Any]] = {
    ("mlp", "digits"): {"epochs": 30, "batch_size": 32, "lr": 3e-3, "optimizer": "adam"},
    ("mlp", "iris"): {"epochs": 60, "batch_size": 16, "lr": 1e-2, "optimizer": "adam"},
    ("cnn", "digits"): {"epochs": 30, "batch_size": 32, "lr": 2e-3, "optimizer": "adam"},
    ("transformer", "adder"): {"epochs": 12, "batch_size": 64, "lr": 2e-3,
                               "optimizer": "adamw"},
}
"""Default training settings per (model, dataset): what ``torchlean train`` uses unless told."""


def check_compatible(model: str, dataset: str) -> None:
    """Raise a ``TorchLeanError`` for unknown names or a model that cannot take the dataset."""
    if model not in _BUILDERS:
        raise TorchLeanError(f"unknown model {model!r}; valid models: {', '.join(NAMES)}")
    if dataset not in DATASETS:
        raise TorchLeanError(f"unknown dataset {dataset!r}; valid datasets: "
                             f"{', '.join(DATASETS)}")
    if dataset not in COMPATIBLE[model]:
        fits = [m for m, ds in COMPATIBLE.items() if dataset in ds]
        raise TorchLeanError(f"model {model!r} cannot be trained on dataset {dataset!r}: "
                             f"{model} takes {' or '.join(COMPATIBLE[model])}; for {dataset} "
                             f"use --model {' or '.join(fits)}")


def dataset_options(model: str, dataset: str) -> dict[str, Any]:
    """Keyword options the dataset loader needs for this model (the CNN wants images)."""
    return {"layout": "image"} if (model, dataset) == ("cnn", "digits") else {}


def config_for(model: str, data: DatasetBundle, seed: int = 0) -> dict[str, Any]:
    """The default config of ``model`` sized for ``data`` (JSON-serialisable)."""
    check_compatible(model, data.name)
    info = data.info
    config: dict[str, Any] = {"model": model, "dataset": data.name, "seed": int(seed)}
    if model == "mlp":
        hidden = [256, 128] if data.name == "digits" else [16]
        config.update(in_features=info["features"], hidden=hidden,
                      num_classes=info["num_classes"])
    elif model == "cnn":
        config.update(image_shape=list(info["image_shape"]), channels=[16, 32],
                      num_classes=info["num_classes"])
    else:
        config.update(vocab_size=info["vocab_size"], seq_len=info["seq_len"], d_model=64,
                      num_heads=4, num_layers=3, d_ff=256,
                      digits_per_operand=info["digits_per_operand"])
    return config


# Config entries: (what they hold, the largest value). A config may come from a checkpoint
# file (``torchlean eval``), so every entry is checked before a model is built from it.
_SIZE = 1 << 16
_ENTRIES: dict[str, tuple[str, int]] = {
    "seed": ("int", (1 << 63) - 1), "in_features": ("int", 1 << 20), "num_classes": ("int", _SIZE),
    "hidden": ("ints", _SIZE), "image_shape": ("ints", 4096), "channels": ("ints", 4096),
    "vocab_size": ("int", 1 << 20), "seq_len": ("int", _SIZE), "d_model": ("int", _SIZE),
    "num_heads": ("int", 1024), "num_layers": ("int", 256), "d_ff": ("int", _SIZE),
    "digits_per_operand": ("int", 64),
}
_LENGTHS = {"hidden": (0, 16), "image_shape": (3, 3), "channels": (2, 2)}
MAX_PARAMETERS = 200_000_000
"""Most parameters a config may describe (so a crafted config cannot exhaust memory)."""


def _count_parameters(config: dict[str, Any]) -> int:
    name = config["model"]
    if name == "mlp":
        sizes = [config["in_features"], *config["hidden"], config["num_classes"]]
        return sum((a + 1) * b for a, b in zip(sizes, sizes[1:], strict=False))
    if name == "cnn":
        c_in, height, width = config["image_shape"]
        c1, c2 = config["channels"]
        return (9 * c_in + 1) * c1 + (9 * c1 + 1) * c2 + (c2 * (height // 4) * (width // 4)
                                                         + 1) * config["num_classes"]
    d, ff = config["d_model"], config["d_ff"]
    return (2 * config["vocab_size"] + config["seq_len"]) * d + config["num_layers"] * (
        4 * d * d + 2 * d * ff)


def check_config(config: Any, where: str = "model config") -> None:
    """A ``TorchLeanError`` naming the entry unless ``config`` describes a model ``build`` can
    make: a known model, every entry it needs present, each a positive integer (or a list of
    them) within its bound, and at most ``MAX_PARAMETERS`` parameters in all."""
    if not isinstance(config, dict):
        raise TorchLeanError(f"{where}: expected a JSON object, found {type(config).__name__}")
    name = config.get("model")
    if not isinstance(name, str) or name not in _BUILDERS:
        raise TorchLeanError(f"{where}: unknown model {name!r}; valid models: {', '.join(NAMES)}")
    needed = {"mlp": ("in_features", "hidden", "num_classes"),
              "cnn": ("image_shape", "channels", "num_classes"),
              "transformer": ("vocab_size", "seq_len", "d_model", "num_heads", "num_layers",
                              "d_ff")}[name]
    for key in needed:
        if key not in config:
            raise TorchLeanError(f"{where}: the {name} config lacks the entry {key!r}")
    if not isinstance(config.get("batch_norm", False), bool):
        raise TorchLeanError(f"{where}: batch_norm must be true or false, found "
                             f"{str(config['batch_norm'])[:80]}")
    for key, value in config.items():
        if key not in _ENTRIES:
            continue
        kind, limit = _ENTRIES[key]
        items = value if kind == "ints" else [value]
        low = 0 if key == "seed" else 1
        if kind == "ints" and not isinstance(value, list):
            raise TorchLeanError(f"{where}: {key} must be a list of integers, found {value!r}")
        lo, hi = _LENGTHS.get(key, (1, 1))
        if kind == "ints" and not lo <= len(items) <= hi:
            raise TorchLeanError(f"{where}: {key} must hold {lo}..{hi} integers, found "
                                 f"{len(items)}")
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int) or not low <= item <= limit:
                raise TorchLeanError(f"{where}: {key} must hold integers in [{low}, {limit}], "
                                     f"found {str(value)[:80]}")
    if name == "transformer" and config["d_model"] % config["num_heads"]:
        raise TorchLeanError(f"{where}: d_model {config['d_model']} is not a multiple of "
                             f"num_heads {config['num_heads']}")
    count = _count_parameters(config)
    if count > MAX_PARAMETERS:
        raise TorchLeanError(f"{where}: describes {count} parameters, more than the "
                             f"{MAX_PARAMETERS} accepted")


def build(config: dict[str, Any]) -> nn.Module:
    """The model a config describes (checked by ``check_config``), initialised from
    ``config["seed"]``."""
    check_config(config)
    name = config["model"]
    builder = _BUILDERS[name]
    nn.manual_seed(int(config.get("seed", 0)))
    try:
        model = builder(config)
    except KeyError as exc:
        raise TorchLeanError(f"model config for {name!r} lacks the entry {exc.args[0]!r}: "
                             f"{config}") from None
    # The model knows its config, so tl.save(model, path) records it for torchlean eval.
    model.model_config = dict(config)
    return model
