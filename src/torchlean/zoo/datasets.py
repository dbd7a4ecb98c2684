"""The datasets of the main job (``torchlean train``): digits, iris and adder.

Nothing here touches the network. ``digits`` and ``iris`` are the tables scikit-learn ships inside
its package (``load_digits`` / ``load_iris`` read files on disk; scikit-learn comes with the
``examples`` extra and is imported only when one of them is asked for). ``adder`` is generated
from the seed. Every dataset is split into train and test with a seeded shuffle
(``Dataset.split``), so the same seed gives the same split on every machine.

Targets are integer class labels. For ``adder`` they are token ids per position, with
``IGNORE`` (-1) where no prediction is scored: ``F.cross_entropy`` one-hot encodes a -1 label as a
zero row, so those positions add nothing to the loss (torch's ``ignore_index``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.backend import namespace_of, on_host, to_device, to_host
from ..core.errors import TorchLeanError
from ..data import Dataset

__all__ = ["AdderVocab", "DatasetBundle", "IGNORE", "NAMES", "adder", "digits", "iris", "load",
           "score"]

IGNORE = -1
"""Target label of positions that are not scored (one-hot encodes to a zero row)."""


@dataclass
class DatasetBundle:
    """A train/test split plus what a model needs to know about its inputs."""

    name: str
    train: Dataset
    test: Dataset
    info: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (f"DatasetBundle({self.name!r}, train={len(self.train)}, test={len(self.test)}, "
                f"info={self.info})")


def _sklearn() -> Any:
    try:
        import sklearn.datasets as sk_datasets
    except ImportError:
        raise TorchLeanError("datasets: scikit-learn is not installed "
                             "(pip install 'torchlean[examples]')") from None
    return sk_datasets


def digits(seed: int = 0, layout: str = "flat", test_fraction: float = 0.2) -> DatasetBundle:
    """scikit-learn's 1,797 8x8 handwritten digits, pixels scaled to [0, 1].

    ``layout="flat"`` gives inputs of shape ``(N, 64)`` (for an MLP); ``"image"`` gives
    ``(N, 1, 8, 8)`` (for a CNN). Labels are ``int64`` in 0..9. The 80/20 split is a seeded
    shuffle.
    """
    if layout not in ("flat", "image"):
        raise TorchLeanError(f"digits: layout must be 'flat' or 'image', found {layout!r}")
    raw = _sklearn().load_digits()
    images = (np.asarray(raw.images, dtype=np.float32) / 16.0)  # pixel values are 0..16
    inputs = images.reshape(-1, 64) if layout == "flat" else images[:, None, :, :]
    labels = np.asarray(raw.target, dtype=np.int64)
    train, test = Dataset(inputs, labels).split(1.0 - test_fraction, seed)
    return DatasetBundle("digits", train, test,
                         {"num_classes": 10, "features": 64, "image_shape": (1, 8, 8),
                          "layout": layout})


def iris(seed: int = 0, test_fraction: float = 0.2) -> DatasetBundle:
    """scikit-learn's iris table (150 flowers, 4 features, 3 species).

    Features are standardised with the mean and standard deviation of the training split only
    (so nothing about the test set leaks into training).
    """
    raw = _sklearn().load_iris()
    features = np.asarray(raw.data, dtype=np.float64)
    labels = np.asarray(raw.target, dtype=np.int64)
    train, test = Dataset(features, labels).split(1.0 - test_fraction, seed)
    mean = train.inputs.mean(axis=0)
    std = train.inputs.std(axis=0)
    train = Dataset(((train.inputs - mean) / std).astype(np.float32), train.targets)
    test = Dataset(((test.inputs - mean) / std).astype(np.float32), test.targets)
    return DatasetBundle("iris", train, test, {"num_classes": 3, "features": 4})


@dataclass(frozen=True)
class AdderVocab:
    """Tokens of the adder task: digits 0..9, then ``+`` and ``=``."""

    plus: int = 10
    equals: int = 11
    size: int = 12

    def decode(self, tokens: Any) -> str:
        names = {self.plus: "+", self.equals: "="}
        return "".join(names.get(int(t), str(int(t))) for t in tokens)


ADDER_VOCAB = AdderVocab()


def adder_sequences(a: np.ndarray, b: np.ndarray, digits_per_operand: int) -> np.ndarray:
    """Token rows ``a_digits + b_digits = reversed(sum digits)``.

    Operands are written most significant digit first, zero padded to ``k`` digits; the ``k + 1``
    sum digits are written least significant first, which is the order a carry is computed in.
    The row has ``3k + 3`` tokens.
    """
    k = digits_per_operand
    place = 10 ** np.arange(k - 1, -1, -1)
    a_digits = (a[:, None] // place) % 10
    b_digits = (b[:, None] // place) % 10
    total = a + b
    sum_digits = (total[:, None] // 10 ** np.arange(k + 1)) % 10  # least significant first
    n = len(a)
    plus = np.full((n, 1), ADDER_VOCAB.plus)
    equals = np.full((n, 1), ADDER_VOCAB.equals)
    return np.concatenate([a_digits, plus, b_digits, equals, sum_digits], axis=1).astype(np.int64)


def adder(seed: int = 0, digits_per_operand: int = 2, size: int = 10_000,
          test_fraction: float = 0.2) -> DatasetBundle:
    """Addition of two ``k``-digit numbers as next-token prediction, generated from ``seed``.

    Each example is a distinct pair ``(a, b)`` with ``0 <= a, b < 10**k`` (all pairs when there
    are no more than ``size`` of them), so no test pair was seen in training. The input is the
    token row without its last token, shape ``(3k + 2,)``, and the target is the row shifted by
    one with ``IGNORE`` everywhere except the ``k + 1`` answer positions: a model is scored on the
    sum only. Inputs are ``int64`` token ids (``fit`` passes them on as float ids, which
    ``nn.Embedding`` takes).
    """
    k = digits_per_operand
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 6:
        raise TorchLeanError(f"adder: digits_per_operand must be an int in 1..6, found {k!r}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 2:
        raise TorchLeanError(f"adder: size must be an int >= 2, found {size!r}")
    limit = 10 ** k
    pairs = limit * limit
    rng = np.random.default_rng(seed)
    if pairs <= size:
        codes = np.arange(pairs)
    else:
        codes = rng.choice(pairs, size=size, replace=False)
    a, b = codes // limit, codes % limit
    rows = adder_sequences(a, b, k)
    inputs = rows[:, :-1]
    targets = np.full_like(rows[:, 1:], IGNORE)
    answer = slice(2 * k + 1, 3 * k + 2)  # positions whose next token is a sum digit
    targets[:, answer] = rows[:, 2 * k + 2:]
    train, test = Dataset(inputs, targets).split(1.0 - test_fraction, seed)
    return DatasetBundle("adder", train, test,
                         {"vocab_size": ADDER_VOCAB.size, "seq_len": 3 * k + 2,
                          "digits_per_operand": k, "answer_positions": (2 * k + 1, 3 * k + 2)})


def score(outputs: Any, targets: Any) -> dict[str, float]:
    """Accuracy of ``outputs`` (scores with a trailing class axis) against integer ``targets``.

    For one label per example this is the fraction of correct argmax predictions. For sequence
    targets (``adder``) ``accuracy`` is exact match: an example counts only when every scored
    position (target not ``IGNORE``) is right; ``token_accuracy`` is the fraction of scored
    positions that are right. (With teacher forcing, all answer positions right is the same event
    as greedy decoding producing the whole answer, so exact match here is generation accuracy.)

    Device arrays are scored where they live (targets given on the host are uploaded once); the
    counts are the one thing read back.
    """
    if on_host(outputs):
        outputs = np.asarray(outputs)
    xp = namespace_of(outputs)
    targets = to_device(np.asarray(targets) if on_host(targets) else targets, xp)
    n = len(targets)
    predicted = outputs.argmax(axis=-1)
    if targets.ndim == 1:
        right = int(to_host((predicted == targets).sum()))
        return {"accuracy": right / n if n else float("nan")}
    scored = targets != IGNORE
    right = (predicted == targets) & scored
    per_example = (right | ~scored).reshape(n, -1).all(axis=1)
    exact, tokens, total = (int(c) for c in to_host(
        xp.stack([per_example.sum(), right.sum(), scored.sum()])))
    return {"accuracy": exact / n if n else float("nan"),
            "token_accuracy": tokens / max(total, 1)}


_LOADERS: dict[str, Callable[..., DatasetBundle]] = {"digits": digits, "iris": iris,
                                                      "adder": adder}
NAMES: tuple[str, ...] = tuple(_LOADERS)
LAYOUTS: dict[str, tuple[str, ...]] = {"digits": ("flat", "image")}
"""The ``layout=`` options each dataset takes (the others have one layout and no option)."""


def load(name: str, seed: int = 0, **options: Any) -> DatasetBundle:
    """The dataset called ``name`` (one of ``NAMES``), split with ``seed``."""
    loader = _LOADERS.get(name)
    if loader is None:
        raise TorchLeanError(f"unknown dataset {name!r}; valid datasets: {', '.join(NAMES)}")
    unknown = sorted(set(options) - ({"layout"} if name in LAYOUTS else set())
                     - ({"digits_per_operand", "size"} if name == "adder" else set())
                     - {"test_fraction"})
    if unknown:
        raise TorchLeanError(f"dataset {name!r} takes no option {', '.join(unknown)}")
    return loader(seed=seed, **options)
