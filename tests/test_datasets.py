"""The main job's datasets: shapes, value ranges, seeded splits, and adder sums that add up."""

from __future__ import annotations

import numpy as np
import pytest
import sklearn  # noqa: F401  (a test dependency: missing means failing, not skipping)
from hypothesis import given, settings
from hypothesis import strategies as st

from torchlean.core.errors import TorchLeanError
from torchlean.zoo import datasets
from torchlean.zoo.datasets import ADDER_VOCAB, IGNORE


def _rows(a: np.ndarray) -> set[bytes]:
    return {row.tobytes() for row in np.ascontiguousarray(a).reshape(len(a), -1)}


# ---------------------------------------------------------------------------------------------
# digits


def test_digits_flat_shapes_ranges_and_labels() -> None:
    d = datasets.digits(seed=0)
    assert (len(d.train), len(d.test)) == (1438, 359)  # 80/20 of 1,797, rounded
    assert d.train.inputs.shape == (1438, 64) and d.test.inputs.shape == (359, 64)
    assert d.train.inputs.dtype == np.float32
    for part in (d.train, d.test):
        assert part.inputs.min() == 0.0 and part.inputs.max() == 1.0
        assert part.targets.dtype == np.int64
    labels = np.concatenate([d.train.targets, d.test.targets])
    assert sorted(set(labels.tolist())) == list(range(10))
    assert d.info["num_classes"] == 10


def test_digits_image_layout_is_the_flat_data_reshaped() -> None:
    flat, image = datasets.digits(seed=3), datasets.digits(seed=3, layout="image")
    assert image.train.inputs.shape == (1438, 1, 8, 8)
    np.testing.assert_array_equal(image.train.inputs.reshape(-1, 64), flat.train.inputs)
    np.testing.assert_array_equal(image.test.targets, flat.test.targets)


def test_digits_split_is_a_partition_determined_by_the_seed() -> None:
    a, b, c = datasets.digits(seed=7), datasets.digits(seed=7), datasets.digits(seed=8)
    np.testing.assert_array_equal(a.train.inputs, b.train.inputs)
    np.testing.assert_array_equal(a.test.targets, b.test.targets)
    assert not np.array_equal(a.test.targets, c.test.targets)
    # Train and test together are the whole table: the label counts add up.
    whole = np.bincount(np.concatenate([c.train.targets, c.test.targets]), minlength=10)
    np.testing.assert_array_equal(
        whole, np.bincount(np.concatenate([a.train.targets, a.test.targets]), minlength=10))
    assert whole.sum() == 1797


def test_digits_rejects_unknown_layout() -> None:
    with pytest.raises(TorchLeanError, match="layout"):
        datasets.digits(layout="nchw")


# ---------------------------------------------------------------------------------------------
# iris


def test_iris_standardised_with_training_statistics() -> None:
    d = datasets.iris(seed=0)
    assert (len(d.train), len(d.test)) == (120, 30)
    assert d.train.inputs.shape == (120, 4) and d.train.inputs.dtype == np.float32
    np.testing.assert_allclose(d.train.inputs.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(d.train.inputs.std(axis=0), 1.0, atol=1e-5)
    # The test set is scaled with the training statistics, so it is not exactly standard.
    assert np.abs(d.test.inputs.mean(axis=0)).max() > 1e-3
    assert set(np.concatenate([d.train.targets, d.test.targets]).tolist()) == {0, 1, 2}


def test_iris_is_deterministic() -> None:
    np.testing.assert_array_equal(datasets.iris(seed=5).test.inputs,
                                  datasets.iris(seed=5).test.inputs)


# ---------------------------------------------------------------------------------------------
# adder


def _decode(inputs: np.ndarray, targets: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    place = 10 ** np.arange(k - 1, -1, -1)
    a = (inputs[:, :k] * place).sum(axis=1)
    b = (inputs[:, k + 1:2 * k + 1] * place).sum(axis=1)
    answer = targets[:, 2 * k + 1:]  # sum digits, least significant first
    total = (answer * 10 ** np.arange(k + 1)).sum(axis=1)
    return a, b, total


def test_adder_two_digits_every_sum_is_right() -> None:
    d = datasets.adder(seed=0)
    k = 2
    assert (len(d.train), len(d.test)) == (8000, 2000)  # all 10,000 pairs
    assert d.train.inputs.shape == (8000, 3 * k + 2) and d.train.targets.shape == (8000, 3 * k + 2)
    for part in (d.train, d.test):
        x, y = part.inputs, part.targets
        assert x.min() >= 0 and x.max() < ADDER_VOCAB.size
        assert (x[:, k] == ADDER_VOCAB.plus).all() and (x[:, 2 * k + 1] == ADDER_VOCAB.equals).all()
        assert (y[:, :2 * k + 1] == IGNORE).all()
        assert ((y[:, 2 * k + 1:] >= 0) & (y[:, 2 * k + 1:] <= 9)).all()
        # The target is the input shifted by one on the answer positions.
        np.testing.assert_array_equal(y[:, 2 * k + 1:-1], x[:, 2 * k + 2:])
        a, b, total = _decode(x, y, k)
        np.testing.assert_array_equal(a + b, total)
    a_train, b_train, _ = _decode(d.train.inputs, d.train.targets, k)
    a_test, b_test, _ = _decode(d.test.inputs, d.test.targets, k)
    train_pairs = set(zip(a_train.tolist(), b_train.tolist(), strict=True))
    test_pairs = set(zip(a_test.tolist(), b_test.tolist(), strict=True))
    assert not train_pairs & test_pairs
    assert len(train_pairs | test_pairs) == 10_000


def test_adder_decodes_readably() -> None:
    rows = datasets.adder_sequences(np.array([47]), np.array([85]), 2)
    assert ADDER_VOCAB.decode(rows[0]) == "47+85=231"  # 132, least significant digit first


@settings(max_examples=12, deadline=None)
@given(k=st.integers(1, 4), seed=st.integers(0, 2**31 - 1))
def test_adder_sums_for_any_width_and_seed(k: int, seed: int) -> None:
    d = datasets.adder(seed=seed, digits_per_operand=k, size=300)
    total_pairs = min(300, 10 ** (2 * k))
    assert len(d.train) + len(d.test) == total_pairs
    x = np.concatenate([d.train.inputs, d.test.inputs])
    y = np.concatenate([d.train.targets, d.test.targets])
    a, b, total = _decode(x, y, k)
    assert a.max() < 10 ** k and b.max() < 10 ** k
    np.testing.assert_array_equal(a + b, total)
    assert len(set(zip(a.tolist(), b.tolist(), strict=True))) == total_pairs  # distinct pairs
    again = datasets.adder(seed=seed, digits_per_operand=k, size=300)
    np.testing.assert_array_equal(again.test.inputs, d.test.inputs)


def test_adder_seed_changes_the_sample() -> None:
    a = datasets.adder(seed=1, digits_per_operand=3, size=200)
    b = datasets.adder(seed=2, digits_per_operand=3, size=200)
    assert _rows(a.train.inputs) != _rows(b.train.inputs)


@pytest.mark.parametrize("kwargs, message", [
    ({"digits_per_operand": 0}, "digits_per_operand"),
    ({"digits_per_operand": 2.5}, "digits_per_operand"),
    ({"size": 1}, "size"),
])
def test_adder_rejects_bad_options(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(TorchLeanError, match=message):
        datasets.adder(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# score and names


def test_score_classification_accuracy() -> None:
    outputs = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert datasets.score(outputs, np.array([1, 0, 0, 0])) == {"accuracy": 0.75}


def test_score_sequences_is_exact_match_over_scored_positions() -> None:
    eye = np.eye(3)
    predicted = np.array([[0, 2, 1], [0, 2, 1]])
    outputs = eye[predicted]  # (2, 3, 3): argmax is `predicted`
    targets = np.array([[IGNORE, 2, 1],      # both scored positions right
                        [1, 2, 0]])          # only the middle position right
    result = datasets.score(outputs, targets)
    assert result["accuracy"] == 0.5
    assert result["token_accuracy"] == pytest.approx(3 / 5)


def test_unknown_dataset_lists_the_valid_names() -> None:
    with pytest.raises(TorchLeanError, match="unknown dataset 'mnist'; valid datasets: "
                                             "digits, iris, adder"):
        datasets.load("mnist")
