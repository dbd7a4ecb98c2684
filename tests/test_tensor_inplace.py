"""In-place ops, assignment and version counters on ``tl.Tensor``, against PyTorch: values,
aliases, gradients through in-place ops, and torch's errors for a changed saved value and for
in-place on a leaf that requires grad."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import torchlean as tl

torch = pytest.importorskip("torch")


def _pair(values: Any, requires_grad: bool = False) -> tuple[Any, Any]:
    arr = np.asarray(values, dtype=np.float32)
    return (tl.tensor(arr, requires_grad=requires_grad),
            torch.tensor(arr, requires_grad=requires_grad))


CASES: dict[str, Callable[[Any, Any, Any], Any]] = {
    "add_": lambda m, x, y: x.add_(y),
    "add_alpha": lambda m, x, y: x.add_(y, alpha=2.0),
    "sub_": lambda m, x, y: x.sub_(y),
    "mul_": lambda m, x, y: x.mul_(y),
    "div_": lambda m, x, y: x.div_(y),
    "iadd": lambda m, x, y: x.__iadd__(y),
    "imul_scalar": lambda m, x, y: x.__imul__(3.0),
    "clamp_": lambda m, x, y: x.clamp_(-0.5, 0.5),
    "pow_": lambda m, x, y: x.pow_(2),
    "masked_fill_": lambda m, x, y: x.masked_fill_(x > 0, 0.0),
    "setitem_row": lambda m, x, y: x.__setitem__(1, y[0]),
    "setitem_mask": lambda m, x, y: x.__setitem__(x < 0, 0.0),
    "setitem_slice": lambda m, x, y: x.__setitem__((slice(None), slice(1, 3)), y[:, :2]),
    "setitem_ints": lambda m, x, y: x.__setitem__(m.tensor([0, 2]), y[1]),
    "copy_": lambda m, x, y: x.copy_(y),
    "fill_": lambda m, x, y: x.fill_(1.5),
    "zero_": lambda m, x, y: x.zero_(),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_inplace_values_and_gradients_match_torch(name: str) -> None:
    rng = np.random.default_rng(len(name))
    a0 = rng.standard_normal((3, 4)).astype(np.float32)
    b0 = rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
    results = []
    for m in (tl, torch):
        a = m.tensor(a0, requires_grad=True)
        b = m.tensor(b0, requires_grad=True)
        x = a * 1.0  # a non-leaf: in-place on it is recorded
        y = b * 1.0
        out = CASES[name](m, x, y)
        assert out is None or out is x
        loss = (x * m.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))).sum()
        loss.backward()
        grads = [t.grad.numpy() if t.grad is not None else np.zeros_like(a0) for t in (a, b)]
        results.append((x.detach().numpy().copy(), grads, x._version))
    (xv, (ga, gb), version), (xv_t, (ga_t, gb_t), version_t) = results
    np.testing.assert_allclose(xv, xv_t, rtol=1e-6)
    np.testing.assert_allclose(ga, ga_t, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gb, gb_t, rtol=1e-5, atol=1e-6)
    assert version >= 1 and version_t >= 1


def test_inplace_changes_the_tensor_and_its_aliases() -> None:
    x = tl.tensor([1.0, 2.0, 3.0])
    alias = x
    d = x.detach()
    x += 1
    assert alias is x and x.tolist() == [2.0, 3.0, 4.0] and d.tolist() == [2.0, 3.0, 4.0]
    d.mul_(2)
    assert x.tolist() == [4.0, 6.0, 8.0]
    assert x._version == d._version == 2  # a detached alias shares torch's version counter
    x.data.zero_()
    assert x.tolist() == [0.0, 0.0, 0.0]
    i = tl.tensor([1, 2, 3])
    i -= 1
    assert i.dtype == tl.int64 and i.tolist() == [0, 1, 2]
    with pytest.raises(tl.TorchLeanError, match="can't be cast"):
        i += 0.5  # as torch: an int64 tensor cannot hold a float result
    with pytest.raises(tl.ShapeError, match="doesn't match the broadcast shape"):
        tl.zeros(3).add_(tl.zeros(2, 3))


def test_setitem_with_every_index_kind_matches_torch() -> None:
    rng = np.random.default_rng(3)
    base = rng.standard_normal((4, 5, 3)).astype(np.float32)
    idx = np.array([0, 2])
    mask = base[:, 0, 0] > 0
    indices: list[Any] = [
        1, -1, slice(1, 3), (slice(None), 2), (1, slice(None), 0), (Ellipsis, 1),
        (None, 0), "ints", "mask", ("ints", slice(None), 1), (0, "ints"), "mask3",
    ]
    for raw in indices:
        for value in (7.0, "tensor"):
            got = tl.tensor(base.copy())
            want = torch.tensor(base.copy())

            def conv(e: Any, m: Any) -> Any:
                if e == "ints":
                    return m.tensor(idx)
                if e == "mask":
                    return m.tensor(mask)
                if e == "mask3":
                    return m.tensor(base > 0.5)
                return e

            index_g = tuple(conv(e, tl) for e in raw) if isinstance(raw, tuple) else conv(raw, tl)
            index_w = tuple(conv(e, torch) for e in raw) if isinstance(raw, tuple) else conv(
                raw, torch)
            shape = want[index_w].shape
            v = rng.standard_normal(tuple(shape)).astype(np.float32) if value == "tensor" else 7.0
            got[index_g] = tl.tensor(v) if value == "tensor" else v
            want[index_w] = torch.tensor(v) if value == "tensor" else v
            np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=str(raw))
            assert got._version == 1


def test_modifying_a_saved_value_raises_torchs_error() -> None:
    for m in (tl, torch):
        a = m.tensor([1.0, 2.0], requires_grad=True)
        b = a * 2
        c = b * b  # saves b
        b.add_(1)
        err = tl.TorchLeanError if m is tl else RuntimeError
        with pytest.raises(err, match="modified by an inplace operation"):
            c.sum().backward()
        # an op that saves nothing (add) does not mind, as in torch
        a2 = m.tensor([1.0, 2.0], requires_grad=True)
        w = m.tensor([3.0, 4.0], requires_grad=True)
        s = a2 + w
        with m.no_grad():
            w.mul_(2)
        s.sum().backward()
        assert a2.grad.tolist() == [1.0, 1.0]
        # a leaf requiring grad changed in place outside no_grad
        with pytest.raises(err, match="leaf Variable that requires grad"):
            w.add_(1)
        # a parameter changed (by hand, under no_grad) after a product used it
        p = m.nn.Parameter(m.tensor([1.0, 2.0]))
        y = (p * p).sum()
        with m.no_grad():
            p -= 0.1
        with pytest.raises(err, match="modified by an inplace operation"):
            y.backward()


def test_manual_sgd_on_parameters_matches_torch() -> None:
    rng = np.random.default_rng(5)
    x0 = rng.standard_normal((16, 3)).astype(np.float32)
    y0 = rng.standard_normal((16, 1)).astype(np.float32)
    w0 = rng.standard_normal((3, 1)).astype(np.float32)
    finals = []
    for m in (tl, torch):
        w = m.tensor(w0, requires_grad=True)
        b = m.zeros(1, requires_grad=True)
        x, y = m.tensor(x0), m.tensor(y0)
        for _ in range(20):
            loss = ((x @ w + b - y) ** 2).mean()
            loss.backward()
            with m.no_grad():
                w -= 0.1 * w.grad
                b -= 0.1 * b.grad
                w.grad.zero_()
                b.grad.zero_()
        finals.append((w.detach().numpy(), b.detach().numpy(), float(loss)))
    np.testing.assert_allclose(finals[0][0], finals[1][0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(finals[0][2], finals[1][2], rtol=1e-4)


def test_random_fills_use_the_generator_and_keep_the_dtype() -> None:
    tl.manual_seed(0)
    a = tl.zeros(1000).normal_(2.0, 0.5)
    b = tl.empty(1000).uniform_(-1, 1)
    assert a.dtype == tl.float32 and abs(float(a.mean()) - 2.0) < 0.1
    assert float(b.min()) >= -1 and float(b.max()) < 1
    tl.manual_seed(0)
    assert tl.zeros(1000).normal_(2.0, 0.5).equal(a)
