"""torch's top-level functions, Tensor methods, indexing rules, ``nn.Parameter``,
``torchlean.autograd`` and the named errors of the Tensor API, against PyTorch on the same
inputs (issue 24's tensor half, issue 25's tensor semantics)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import torchlean as tl
from torchlean import autograd

torch = pytest.importorskip("torch")


def _both(arr: Any, requires_grad: bool = False) -> tuple[Any, Any]:
    a = np.asarray(arr)
    return tl.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad)


def _close(got: Any, want: Any, **kw: Any) -> None:
    g = got.detach().numpy() if isinstance(got, tl.Tensor) else np.asarray(got)
    w = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert g.shape == w.shape, (g.shape, w.shape)
    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-5,
                               atol=1e-6, **kw)


FUNCTIONS = {
    "sin": lambda m, x: m.sin(x), "cos": lambda m, x: m.cos(x), "exp": lambda m, x: m.exp(x),
    "log": lambda m, x: m.log(x.abs() + 0.5), "sum": lambda m, x: m.sum(x, dim=1),
    "sum_all": lambda m, x: m.sum(x), "max": lambda m, x: m.max(x),
    "max_dim": lambda m, x: m.max(x, dim=0)[0], "flatten": lambda m, x: m.flatten(x),
    "tril": lambda m, x: m.tril(x), "triu": lambda m, x: m.triu(x, 1),
    "matmul": lambda m, x: m.matmul(x, x.t()), "mm": lambda m, x: m.mm(x.t(), x),
    "pow_tensor": lambda m, x: m.pow(x.abs() + 0.5, x), "rpow": lambda m, x: 2.0 ** x,
    "pow_frac": lambda m, x: (x.abs() + 0.1) ** 1.7, "std": lambda m, x: x.std(),
    "std_dim": lambda m, x: x.std(dim=0), "var": lambda m, x: x.var(1, keepdim=True),
    "masked_fill": lambda m, x: x.masked_fill(x > 0.3, -1.0),
    "expand": lambda m, x: x[:1].expand(4, 3), "clone": lambda m, x: x.clone() * 2,
    "view_as": lambda m, x: x.view_as(m.zeros(3, 4)),
    "where": lambda m, x: m.where(x > 0, x, 0.1 * x),
    "maximum": lambda m, x: m.maximum(x, x.t().t() * 0.5), "sort": lambda m, x: m.sort(x, dim=1)[0],
    "topk": lambda m, x: m.topk(x, 2, dim=1)[0], "clamp_t": lambda m, x: x.clamp(min=m.zeros(3)),
    "cumsum": lambda m, x: x.cumsum(0), "norm": lambda m, x: x.norm(),
    "norm_dim": lambda m, x: x.norm(dim=1), "sort_method": lambda m, x: x.sort(0)[0],
    "sqrt_nan": lambda m, x: x.sqrt(), "floor": lambda m, x: x.floor() + x,
    "div0": lambda m, x: x / 0, "sqrt_neg": lambda m, x: (x - 10).abs().sqrt(),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_functions_and_their_gradients_match_torch(name: str) -> None:
    rng = np.random.default_rng(len(name))
    x0 = rng.standard_normal((4, 3)).astype(np.float32)
    x, xt = _both(x0, requires_grad=True)
    got = FUNCTIONS[name](tl, x)
    want = FUNCTIONS[name](torch, xt)
    _close(got, want)
    if name == "div0":
        return
    w = rng.standard_normal(tuple(want.shape)).astype(np.float32)
    (got * tl.tensor(w)).sum().backward()
    (want * torch.tensor(w)).sum().backward()
    _close(x.grad, xt.grad)


def test_factories_match_torch() -> None:
    _close(tl.linspace(-1, 2, 7), torch.linspace(-1, 2, 7))
    _close(tl.eye(3, 4), torch.eye(3, 4))
    assert tl.eye(2).dtype == tl.float32 and tl.linspace(0, 1, 3).dtype == tl.float32
    tl.manual_seed(0)
    r = tl.randint(0, 5, (1000,))
    assert r.dtype == tl.int64 and r.shape == (1000,) and set(r.tolist()) == set(range(5))
    assert tl.randint(3, (2, 2)).shape == (2, 2)
    assert tl.rand_like(tl.zeros(2, 3)).shape == (2, 3)
    probs = tl.tensor([0.0, 0.7, 0.3])
    draws = tl.multinomial(probs, 400, replacement=True)
    counts = np.bincount(draws.numpy(), minlength=3)
    assert counts[0] == 0 and 220 < counts[1] < 340
    no_rep = tl.multinomial(tl.tensor([1.0, 1.0, 1.0, 1.0]), 4)
    assert sorted(no_rep.tolist()) == [0, 1, 2, 3]
    assert tl.full((2,), 3).dtype == tl.int64 and tl.full((2,), 1.5).dtype == tl.float32
    assert tl.LongTensor([1, 2]).tolist() == [1, 2] and tl.Tensor(2, 3).shape == (2, 3)
    assert tl.tensor([1.0, 2.0]).size() == (2,) and tl.zeros(2, 3).size(-1) == 3
    assert tl.zeros(2, 3).numel() == 6 and tl.numel(tl.zeros(4)) == 4


def test_indexing_follows_torch() -> None:
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x, xt = _both(base)
    cases = [
        (0, slice(None), [1, 2]),  # an int selects first in torch (NumPy moves the axes)
        ([0, 1], slice(None), [1, 2]),
        (slice(None), [0, 2], 1),
        (Ellipsis, [3, 0]),
        (None, 1, slice(1, 3)),
        (1, -1, -1),
    ]
    for index in cases:
        want = xt[tuple(torch.tensor(e) if isinstance(e, list) else e for e in index)]
        got = x[tuple(tl.tensor(e) if isinstance(e, list) else e for e in index)]
        _close(got, want)
    assert x[tl.tensor(1)].shape == xt[torch.tensor(1)].shape == (3, 4)  # 0-d index: shape ()
    assert tl.tensor([1.0, 2.0])[tl.tensor(0)].shape == ()
    mask = base[:, 0, 0] > 5
    _close(x[tl.tensor(mask)], xt[torch.tensor(mask)])
    with pytest.raises(tl.IndexRangeError, match="mask"):
        tl.tensor([1.0, 2.0, 3.0])[[True]]
    with pytest.raises(tl.IndexRangeError, match="out of bounds"):
        x[2]
    with pytest.raises(tl.IndexRangeError, match="out of bounds"):
        x[tl.tensor([0, 5])]
    with pytest.raises(tl.IndexRangeError, match="too many"):
        x[0, 0, 0, 0]
    # gradient of a mixed index is torch's
    g, gt = _both(base, requires_grad=True)
    g[0, :, [1, 2]].sum().backward()
    gt[0, :, [1, 2]].sum().backward()
    _close(g.grad, gt.grad)


def test_parameters_are_tensors() -> None:
    tl.manual_seed(0)
    lin = tl.nn.Linear(3, 2)
    w = lin.weight
    assert isinstance(w, tl.nn.Parameter) and isinstance(w, tl.Tensor)
    assert w.is_leaf and w.requires_grad and w.size() == (2, 3) and w.numel() == 6
    assert list(lin.parameters())[0] is w
    assert w.detach().numpy().shape == (2, 3) and (w[0] * 2).shape == (3,)
    out = lin(tl.ones(4, 3)).sum()
    out.backward()
    assert isinstance(w.grad, tl.Tensor) and w.grad.shape == (2, 3)
    np.testing.assert_allclose(w.grad.numpy(), np.full((2, 3), 4.0))
    assert isinstance(w.data, tl.Tensor) and not w.data.requires_grad
    # the seed's API on the same object
    assert w.name == "weight" and w.value.shape == (2, 3) and w.version == 0
    opt = tl.optim.SGD(lin.parameters(), lr=0.5)
    opt.step()
    assert w.version == 1
    np.testing.assert_allclose(w.detach().numpy(), w.value)
    opt.zero_grad(set_to_none=False)
    assert w.grad is not None and float(w.grad.abs().sum()) == 0.0
    opt.zero_grad()
    assert w.grad is None
    p = tl.nn.Parameter(tl.tensor([1.0, 2.0]), requires_grad=False)
    assert not p.requires_grad and p.name is None
    lin.double()
    assert lin.weight.dtype == tl.float64
    out = lin(tl.ones(1, 3, dtype=tl.double)).sum(dim=1, keepdims=True)
    assert out.dtype == tl.float64 and out.shape == (1, 1)
    out.sum().backward()
    assert lin.weight.grad.dtype == tl.float64


def test_sgd_updates_a_plain_leaf_tensor() -> None:
    for m in (tl, torch):
        x = m.tensor([1.0, -2.0], requires_grad=True)
        opt = m.optim.SGD([x], lr=0.1)
        (x * x).sum().backward()
        opt.step()
        assert np.allclose(x.detach().numpy(), [0.8, -1.6])


def _cube_function(base: Any) -> Any:
    """The same user-written autograd.Function, derived from torchlean's or torch's base."""

    class Cube(base):  # type: ignore[misc, valid-type]
        @staticmethod
        def forward(ctx: Any, x: Any, k: float) -> Any:
            ctx.save_for_backward(x)
            ctx.k = k
            return x * x * x * k

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            (x,) = ctx.saved_tensors
            return grad * 3 * x * x * ctx.k, None

    return Cube


Cube = _cube_function(autograd.Function)
TorchCube = _cube_function(torch.autograd.Function)


def test_custom_autograd_function_matches_torch_and_is_refused_by_tracing() -> None:
    x, xt = _both(np.array([0.5, -1.0, 2.0], np.float32), requires_grad=True)
    y = Cube.apply(x.sin(), 2.0)
    yt = TorchCube.apply(xt.sin(), 2.0)
    _close(y, yt)
    assert y.grad_fn is not None and y.grad_fn.next_functions[0][0] is not None
    y.sum().backward()
    yt.sum().backward()
    _close(x.grad, xt.grad)
    # second order through the user's backward
    (g,) = autograd.grad(Cube.apply(x, 1.0).sum(), x, create_graph=True)
    (gt,) = torch.autograd.grad(TorchCube.apply(xt, 1.0).sum(), xt, create_graph=True)
    (h,) = autograd.grad(g.sum(), x)
    (ht,) = torch.autograd.grad(gt.sum(), xt)
    _close(h, ht)
    assert autograd.Variable(tl.tensor([1.0]), requires_grad=True).requires_grad
    with pytest.raises(tl.TraceError, match="cannot be traced"):
        tl.compile(lambda r: Cube.apply(r, 1.0), (3,))


def test_grad_fn_names_and_next_functions() -> None:
    a = tl.tensor([1.0, 2.0], requires_grad=True)
    b = (a * 2).sum()
    assert b.grad_fn.name().endswith("Backward0")  # torch's node names
    (prev, _), = b.grad_fn.next_functions
    (leaf, _), _ = prev.next_functions if len(prev.next_functions) == 2 else (
        prev.next_functions[0], None)
    assert leaf.name() == "AccumulateGrad" and leaf.variable is a


def test_named_errors_instead_of_bare_exceptions() -> None:
    x = tl.tensor([1.0, 2.0, 3.0])
    bad = [
        lambda: x < tl.zeros(2),
        lambda: tl.arange(0, 10, 0),
        lambda: tl.full((2,), "a"),
        lambda: tl.zeros(2 ** 63),
        lambda: tl.tensor([], dtype=tl.float32).argmax(),
        lambda: x.sum(dim=3),
        lambda: tl.cat([x, 1]),
        lambda: tl.zeros(2, bogus=1),
        lambda: x.no_such_method_in_torch(),
        lambda: tl.no_such_torch_function,
    ]
    for fn in bad:
        with pytest.raises(tl.TorchLeanError):
            fn()
    assert str(pytest.raises(tl.TorchLeanError, lambda: tl.fft).value).startswith(
        "torchlean has no torch.fft")
    assert not hasattr(tl, "fft")  # also an AttributeError, as Python expects
    with np.errstate(all="ignore"):
        _close(x ** float("nan"), torch.tensor([1.0, 2.0, 3.0]) ** float("nan"), equal_nan=True)
        assert (x / 0).tolist() == [float("inf")] * 3
    assert (2 ** tl.tensor([1, 2])).tolist() == [2, 4]
    assert tl.tensor([1.0, 2.0]).sum(dim=()).shape == ()
    assert (tl.tensor([True, False]) + tl.tensor([True, True])).tolist() == [True, True]


def test_printing_and_copies_match_torch() -> None:
    import copy

    for values in ([1.0, 2.0], [0.12345, 2.5], [1e-5, 3.0], [[1.5, 2.0], [3.0, 4.0]], 3.25,
                   [1, 2], [True, False]):
        assert repr(tl.tensor(values)) == repr(torch.tensor(values))
    assert repr(tl.tensor([1.0], dtype=tl.float64)) == repr(torch.tensor([1.0],
                                                                         dtype=torch.float64))
    lin = tl.nn.Linear(2, 2)
    twin = copy.deepcopy(lin)
    assert twin.weight is not lin.weight and twin.weight.name == "weight"
    assert twin.weight.equal(lin.weight) and isinstance(twin.weight, tl.nn.Parameter)
    with pytest.raises(tl.TorchLeanError, match="leaf"):
        copy.deepcopy(tl.tensor([1.0], requires_grad=True) * 2)


def test_non_finite_scalars_and_views_follow_torch() -> None:
    cases = [lambda x: x * float("inf"), lambda x: x + float("-inf"),
             lambda x: x - float("nan"), lambda x: float("inf") - x, lambda x: x / 0,
             lambda x: 1 / x, lambda x: x / float("inf")]
    for fn in cases:
        with np.errstate(all="ignore"):
            x, xt = _both(np.array([1.0, 0.0, -1.0], np.float32), requires_grad=True)
            _close(fn(x), fn(xt), equal_nan=True)
    # basic indexing is a view without history, as in torch: writes reach the base
    for m in (tl, torch):
        base = m.zeros(3, 4)
        row = base[1]
        row += 1
        base[0][2] = 5.0
        assert base.sum().item() == 9.0 and base._version >= 1
