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


# --- views: one storage, one version counter (torch's views) ----------------------------------

def _both(build: Callable[[Any], Any]) -> list[Any]:
    """``build(m)`` for torchlean and torch: the gradient it returns, or the error's class."""
    out = []
    for m in (tl, torch):
        try:
            out.append(build(m))
        except (tl.TorchLeanError, RuntimeError) as exc:
            out.append(type(exc))
    return out


def test_a_reshape_shares_the_version_counter_of_its_source() -> None:
    for m in (tl, torch):
        x = m.tensor(np.ones(6, np.float32))
        y = x.view(2, 3)
        y.add_(1.0)
        assert x._version == y._version == 1
        z = x.reshape(3, 2)
        x.mul_(2.0)
        assert z._version == 2
        np.testing.assert_array_equal(np.asarray(z.numpy()), np.full((3, 2), 4.0))


def _saved_value_changed_through_a_view(m: Any) -> Any:
    # a * a saved a; a changes through its view (torchlean computed 12 per entry, a wrong
    # gradient, when views had counters of their own)
    x = m.tensor(np.ones(4, np.float32), requires_grad=True)
    a = x * 2.0
    b = a * a
    a.reshape(2, 2).add_(1.0)
    b.sum().backward()
    return x.grad.numpy()


def _output_changed_through_a_view_under_no_grad(m: Any) -> Any:
    # exp's VJP reads its output, changed through a view without grad mode
    x = m.tensor(np.zeros(4, np.float32), requires_grad=True)
    a = x.exp()
    with m.no_grad():
        a.view(2, 2).mul_(2.0)
    a.sum().backward()
    return x.grad.numpy()


def _change_before_a_snapshot(m: Any) -> Any:
    # a no_grad change of exp's output, then a recorded in-place op: the snapshot that op
    # keeps carries the change (and the version), so exp's VJP is refused as in torch
    x = m.tensor(np.zeros(4, np.float32), requires_grad=True)
    a = x.exp()
    with m.no_grad():
        a.mul_(2.0)
    a.add_(1.0)
    a.sum().backward()
    return x.grad.numpy()


@pytest.mark.parametrize("program", [_saved_value_changed_through_a_view,
                                     _output_changed_through_a_view_under_no_grad,
                                     _change_before_a_snapshot])
def test_a_backward_reading_a_value_changed_since_raises_as_in_torch(
        program: Callable[[Any], Any]) -> None:
    ours, theirs = _both(program)
    assert ours is tl.TapeError and theirs is RuntimeError


def test_in_place_on_a_view_whose_base_is_not_used_again_matches_torch() -> None:
    # The pattern of flatten-then-relu_(): the view's new node carries the gradient.
    def build(m: Any) -> Any:
        x = m.tensor(np.linspace(-1, 1, 6, dtype=np.float32), requires_grad=True)
        a = x * 3.0
        y = a.view(2, 3)
        y.mul_(m.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)))
        y.relu_()
        (y * y).sum().backward()
        return x.grad.numpy()

    ours, theirs = _both(build)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def _base_after_its_view_changed(m: Any) -> Any:
    # the base's history is rewritten (torch's CopySlices): 6, not x * 2's 2
    x = m.tensor(np.ones(4, np.float32), requires_grad=True)
    a = x * 2.0
    a.view(2, 2).mul_(3.0)
    a.sum().backward()
    return x.grad.numpy()


def _sibling_view_after_a_view_changed(m: Any) -> Any:
    # another view of the same base is regenerated from the base's new history
    x = m.tensor(np.arange(6, dtype=np.float32), requires_grad=True)
    a = x * 2.0
    v1, v2 = a.view(2, 3), a.reshape(6)
    v1.t().mul_(m.tensor(np.arange(6, dtype=np.float32).reshape(3, 2)))
    (v2 * v2).sum().backward()
    return x.grad.numpy()


def _views_written_twice(m: Any) -> Any:
    # two writes through one view, then a slice of the base and the base itself
    x = m.tensor(np.linspace(-1, 1, 6, dtype=np.float32), requires_grad=True)
    a = x * 3.0
    y = a.view(2, 3)
    s = a[2:]
    y.mul_(m.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)))
    y.relu_()
    (y * y).sum().backward(retain_graph=True)
    (a * s.sum()).sum().backward()
    return x.grad.numpy()


def _base_written_after_its_view_was_written(m: Any) -> Any:
    # a view with its own in-place history, then the base changed in place: the view's
    # history is regenerated from the base's
    x = m.tensor(np.linspace(-1, 1, 6, dtype=np.float32), requires_grad=True)
    e = x * 0.5 + 1.0
    v = e[1:]
    v.add_(1.0)
    e.clamp_(-1.2, 1.6)
    (v * v).sum().backward()
    return x.grad.numpy()


@pytest.mark.parametrize("program", [_base_after_its_view_changed,
                                     _sibling_view_after_a_view_changed, _views_written_twice,
                                     _base_written_after_its_view_was_written])
def test_histories_after_writes_through_views_match_torch(
        program: Callable[[Any], Any]) -> None:
    ours, theirs = _both(program)
    assert not isinstance(theirs, type), theirs
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_in_place_on_a_view_of_a_leaf_that_requires_grad_is_refused_as_in_torch() -> None:
    for m, err in ((tl, tl.TorchLeanError), (torch, RuntimeError)):
        x = m.tensor(np.ones(4, np.float32), requires_grad=True)
        with pytest.raises(err, match="view of a leaf Variable"):
            x.view(2, 2).add_(1.0)
        np.testing.assert_array_equal(x.detach().numpy(), np.ones(4))  # nothing changed
        with m.no_grad():
            x.view(2, 2).add_(1.0)  # allowed without grad mode, as in torch
        assert x._version == 1


def test_a_view_made_without_history_is_not_written_under_grad_mode() -> None:
    for m, err in ((tl, tl.TorchLeanError), (torch, RuntimeError)):
        x = m.tensor(np.ones(4, np.float32), requires_grad=True)
        a = x * 2.0
        with m.no_grad():
            v = a.view(2, 2)
        with pytest.raises(err, match="(?i)no_grad mode"):
            v.mul_(m.tensor(np.ones((2, 2), np.float32), requires_grad=True))


def test_permute_and_transpose_are_views_as_in_torch() -> None:
    rng = np.random.default_rng(7)
    a0 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    seen = []
    for m in (tl, torch):
        x = m.tensor(a0.copy())
        p = x.permute(2, 0, 1)
        t = x.transpose(0, 2)
        m2 = x[0].t()
        layout = (p.is_contiguous(), p.stride(), t.stride(), m2.stride(), x[0].T.stride(),
                  p.contiguous().is_contiguous(), p.contiguous().stride())
        p[1, 0, 2] = 50.0    # x[0, 2, 1]
        t[3, 1, 1] = -7.0    # x[1, 1, 3]
        m2[2, 0] = 9.0       # x[0, 0, 2]
        c = p.contiguous()
        c[0, 0, 0] = 123.0   # a copy: x unchanged
        seen.append((layout, x.numpy().copy(), x._version))
    assert seen[0][0] == seen[1][0]
    np.testing.assert_array_equal(seen[0][1], seen[1][1])
    assert seen[0][2] == seen[1][2] == 3


def test_gradients_through_transposed_views_match_torch() -> None:
    rng = np.random.default_rng(8)
    q0, k0 = (rng.standard_normal((2, 5, 3, 4)).astype(np.float32) for _ in range(2))
    w0 = rng.standard_normal((4, 6)).astype(np.float32)
    grads = []
    for m in (tl, torch):
        q, k, w = (m.tensor(v, requires_grad=True) for v in (q0, k0, w0))
        qh, kh = q.transpose(1, 2), k.permute(0, 2, 3, 1)      # (2, 3, 5, 4), (2, 3, 4, 5)
        s = (qh @ kh).softmax(-1) @ qh                           # strided operands
        out = s.transpose(1, 2).reshape(2, 5, 12) @ m.tensor(np.ones((12, 2), np.float32))
        loss = (out * out).sum() + (q.reshape(10, 12)[:, :4] @ w).t().sum()
        loss.backward()
        grads.append([t.grad.numpy() for t in (q, k, w)])
    for ours, theirs in zip(*grads, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5)


def test_in_place_on_a_transposed_view_follows_the_view_rules() -> None:
    # relu_ on a transposed view of a non-leaf that nothing else uses: the gradient torch gives
    def build(m: Any) -> Any:
        x = m.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
        y = (x * 2.0).t()
        y.relu_()
        (y * m.tensor(np.arange(6, dtype=np.float32).reshape(3, 2))).sum().backward()
        return x.grad.numpy()

    ours, theirs = _both(build)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    x = tl.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(tl.TorchLeanError, match="view of a leaf Variable"):
        x.t().mul_(2.0)


def test_diagonal_is_a_view_as_in_torch() -> None:
    # A.diagonal().add_(eps): the common regularisation idiom must change A.
    seen = []
    for m in (tl, torch):
        x = m.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
        x[0].diagonal(1).mul_(-1.0)
        x.diagonal(0, 1, 2).add_(100.0)
        w = m.tensor(np.arange(9, dtype=np.float32).reshape(3, 3), requires_grad=True)
        a = w * 2.0
        d = a.diagonal()
        d.mul_(3.0)
        (d * d).sum().backward()
        seen.append((x.numpy().copy(), x._version, a.detach().numpy().copy(), w.grad.numpy()))
    for ours, theirs in zip(*seen, strict=True):
        np.testing.assert_array_equal(ours, theirs)
