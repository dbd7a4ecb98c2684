"""Randomness without a global (issue 15, item 6): explicit ``tl.Generator`` objects for layer
constructors and init functions, and a thread-local default generator behind ``manual_seed``, so
models built in several threads at once get the weights a serial build gets."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import torchlean as tl
from torchlean.core.errors import TorchLeanError

THREADS = 8
ROUNDS = 3


def _build(seed: int) -> dict[str, np.ndarray]:
    tl.nn.manual_seed(seed)
    model = tl.nn.Sequential(
        tl.nn.Conv2d(1, 4, 3, padding=1), tl.nn.ReLU(), tl.nn.Flatten(),
        tl.nn.Linear(4 * 6 * 6, 16), tl.nn.ReLU(), tl.nn.Linear(16, 10))
    extra = tl.nn.Embedding(7, 5)  # normal_init draws too
    state = {k: np.array(v, copy=True) for k, v in model.state_dict().items()}
    state["embedding"] = np.array(extra.weight.value, copy=True)
    return state


def _work(k: int, barrier: threading.Barrier, results: list[Any]) -> None:
    barrier.wait()  # every thread seeds and draws at the same time
    results[k] = _build(k)


def test_concurrent_builds_match_serial_builds() -> None:
    serial = [_build(seed) for seed in range(THREADS)]
    for _ in range(ROUNDS):
        results: list[Any] = [None] * THREADS
        barrier = threading.Barrier(THREADS)
        threads = [threading.Thread(target=_work, args=(k, barrier, results))
                   for k in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for k in range(THREADS):
            assert results[k].keys() == serial[k].keys()
            for key, value in serial[k].items():
                np.testing.assert_array_equal(results[k][key], value, err_msg=f"{k} {key}")
    # Different seeds really give different weights (the comparison above can fail).
    assert not np.array_equal(serial[0]["0.weight"], serial[1]["0.weight"])


def test_a_thread_starts_from_seed_zero_and_leaves_others_alone() -> None:
    tl.nn.manual_seed(123)
    seen: dict[str, Any] = {}

    def other() -> None:
        seen["seed"] = tl.nn.initial_seed()
        seen["weight"] = tl.nn.Linear(3, 2).weight.value

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen["seed"] == 0
    tl.nn.manual_seed(0)
    np.testing.assert_array_equal(seen["weight"], tl.nn.Linear(3, 2).weight.value)
    tl.nn.manual_seed(123)
    assert tl.nn.initial_seed() == 123


def test_layers_and_init_functions_take_a_generator() -> None:
    tl.nn.manual_seed(7)
    expected = tl.nn.Linear(3, 2)
    tl.nn.manual_seed(99)
    default_next = tl.nn.Linear(3, 2).weight.value
    tl.nn.manual_seed(99)
    g = tl.Generator(7)
    layer = tl.nn.Linear(3, 2, generator=g)
    np.testing.assert_array_equal(layer.weight.value, expected.weight.value)
    np.testing.assert_array_equal(layer.bias.value, expected.bias.value)
    # The explicit generator did not move the default one.
    np.testing.assert_array_equal(tl.nn.Linear(3, 2).weight.value, default_next)
    # One generator shared by several layers draws in order, as the default does.
    tl.nn.manual_seed(11)
    a, b = tl.nn.Linear(3, 2), tl.nn.Conv2d(1, 2, 3)
    g = tl.Generator(11)
    a2, b2 = tl.nn.Linear(3, 2, generator=g), tl.nn.Conv2d(1, 2, 3, generator=g)
    np.testing.assert_array_equal(a.weight.value, a2.weight.value)
    np.testing.assert_array_equal(b.weight.value, b2.weight.value)
    for make in (lambda gen: tl.nn.ConvTranspose2d(2, 1, 3, generator=gen),
                 lambda gen: tl.nn.Embedding(4, 3, generator=gen),
                 lambda gen: tl.nn.MultiheadAttention(4, 2, generator=gen)):
        first, second = make(tl.Generator(5)), make(tl.Generator(5))
        for p, q in zip(first.parameters(), second.parameters(), strict=True):
            np.testing.assert_array_equal(p.value, q.value)
    u = tl.nn.uniform_init((2, 3), 0.5, "float64", generator=tl.Generator(1))
    np.testing.assert_array_equal(
        u, tl.nn.uniform_init((2, 3), 0.5, "float64", generator=tl.Generator(1)))
    assert np.all(np.abs(u) <= 0.5)
    z = tl.nn.normal_init((4,), "float32", generator=tl.Generator(2))
    assert z.dtype == np.float32


def test_a_bad_generator_is_named() -> None:
    with pytest.raises(TorchLeanError, match="generator must be a tl.Generator"):
        tl.nn.Linear(3, 2, generator=3)
    with pytest.raises(TorchLeanError, match="generator must be a tl.Generator"):
        tl.nn.uniform_init((2,), 1.0, "float32", generator="seed")
