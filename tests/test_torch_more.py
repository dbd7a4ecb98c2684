"""The order statistics, scatter/index forms and small math names of ``engine/torch_more.py``
against torch: values, and gradients where torch gives them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from differential import agree

import torchlean as tl

torch = pytest.importorskip("torch")

A = np.array([[3.0, 1.0, 2.0, 8.0], [0.5, 5.0, 4.0, 4.0], [2.0, -1.0, 7.0, 0.0]], np.float32)
W = np.cos(np.arange(96.0)).astype(np.float32)


def _weighted(m: Any, t: Any) -> Any:
    w = m.tensor(W[: t.numel()].reshape(tuple(t.shape)))
    return (t * w).sum()


def _with_grad(fn: Any) -> Any:
    def program(m: Any) -> Any:
        x = m.tensor(A, requires_grad=True)
        out = fn(m, x)
        _weighted(m, out).backward()
        return [out, x.grad]
    return program


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), (0, True), (-1, True)])
def test_quantile(interpolation: str, dim: Any, keepdim: bool) -> None:
    agree(_with_grad(lambda m, x: m.quantile(x, m.tensor([0.1, 0.5, 0.85]), dim=dim,
                                             keepdim=keepdim, interpolation=interpolation)),
          1e-6, 1e-6)
    agree(_with_grad(lambda m, x: x.quantile(0.3, dim=dim, keepdim=keepdim,
                                             interpolation=interpolation)), 1e-6, 1e-6)


def test_nanquantile_nanmedian_and_nan_rows() -> None:
    def program(m: Any) -> Any:
        x = m.tensor([[1.0, float("nan"), 3.0, 0.0], [float("nan")] * 4, [2.0, 1.0, 5.0, 4.0]])
        return [m.nanquantile(x, 0.4, dim=1), m.quantile(x, 0.4, dim=1),
                m.nanquantile(x, m.tensor([0.2, 0.9]), dim=1, keepdim=True),
                m.nanmedian(x, dim=1).values, m.nanmedian(x, dim=1).indices[::2], m.nanmedian(x[0])]
        # (an all-NaN row's index is an artefact of torch's kernel: not compared)
    agree(program, 1e-6, 1e-6)


def test_mode_msort_aminmax_std_mean() -> None:
    def program(m: Any) -> Any:
        ints = m.tensor([[3, 1, 3, 2], [2, 2, 1, 1], [5, 5, 5, 0]])
        x = m.tensor(A)
        mm = m.aminmax(x, dim=1)
        return [m.mode(ints).values, m.mode(ints).indices, m.mode(ints, 0, keepdim=True).values,
                m.mode(m.tensor([1, 2, 2, 3, 3])).indices, m.msort(x), mm.min, mm.max,
                list(m.aminmax(x)), list(m.std_mean(x, 1)), list(m.var_mean(x, 0, keepdim=True))]
    agree(program, 1e-6, 1e-6)


def test_logcumsumexp_and_combinations_gradients() -> None:
    agree(_with_grad(lambda m, x: m.logcumsumexp(x * 30, dim=1)), 1e-5, 1e-5)
    agree(_with_grad(lambda m, x: m.combinations(x[0], r=2)), 1e-6, 1e-6)
    agree(_with_grad(lambda m, x: m.combinations(x[1], r=3, with_replacement=True)), 1e-6, 1e-6)


@pytest.mark.parametrize("reduce", ["sum", "mean", "prod", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce: str, include_self: bool) -> None:
    index = np.array([[0, 0, 2, 1], [3, 3, 3, 0], [1, 2, 1, 1]])

    def program(m: Any) -> Any:
        return m.tensor(A).scatter_reduce(1, m.tensor(index), m.tensor(A[::-1].copy()),
                                          reduce=reduce, include_self=include_self)
    agree(program, 1e-6, 1e-6)
    if reduce in ("sum", "mean"):
        def graded(m: Any) -> Any:
            src = m.tensor(A[::-1].copy(), requires_grad=True)
            x = m.tensor(A, requires_grad=True)
            out = x.scatter_reduce(1, m.tensor(index), src, reduce=reduce,
                                   include_self=include_self)
            _weighted(m, out).backward()
            return [out, x.grad, src.grad]
        agree(graded, 1e-6, 1e-6)


def test_index_add_copy_fill() -> None:
    def program(m: Any) -> Any:
        x = m.tensor(A, requires_grad=True)
        src = m.tensor(np.arange(6.0, dtype=np.float32).reshape(3, 2), requires_grad=True)
        idx = m.tensor([3, 0])
        a = x.index_add(1, idx, src, alpha=2.0)
        c = x.index_copy(1, idx, src)
        f = x.index_fill(0, m.tensor([1]), -7.0)
        _weighted(m, a + c + f).backward()
        y = m.tensor(A).clone()
        y.index_add_(0, m.tensor([2, 2]), m.ones(2, 4))
        return [a, c, f, x.grad, src.grad, y]
    agree(program, 1e-6, 1e-6)


def test_small_math_names() -> None:
    def program(m: Any) -> Any:
        x = m.tensor([1.2345, 2.5, -2.675, 1250.0, 0.125])
        out, inverse, counts = m.unique_consecutive(m.tensor([1, 1, 2, 2, 3, 1, 1]),
                                                    return_inverse=True, return_counts=True)
        return [m.round(x, decimals=2), x.round(decimals=-2), x.round(),
                m.copysign(x, m.tensor([-1.0, 1.0, -0.0, 0.0, -3.0])), m.positive(x),
                m.sgn(x), m.ldexp(x, m.tensor([1, 2, 3, 0, -1])),
                m.gcd(m.tensor([12, 18]), m.tensor([8, 27])),
                m.lcm(m.tensor([4, 6]), m.tensor([6, 4])),
                m.digamma(m.tensor([0.5, 2.0])), m.polygamma(1, m.tensor([0.5, 2.0])),
                m.row_stack([m.tensor([1.0, 2.0]), m.tensor([3.0, 4.0])]),
                m.addr(m.ones(2, 3), m.tensor([1.0, 2.0]), m.tensor([1.0, 0.0, -1.0]), beta=2.0),
                out, inverse, counts, m.isreal(x), m.conj(x), m.resolve_conj(x),
                m.can_cast(m.float32, m.int32), m.can_cast(m.int64, m.float32)]
    agree(program, 1e-6, 1e-6)


def test_refusals() -> None:
    x = tl.tensor(A)
    with pytest.raises(tl.TorchLeanError, match="interpolation"):
        tl.quantile(x, 0.5, interpolation="cubic")
    with pytest.raises(tl.TorchLeanError, match="q must be"):
        tl.quantile(x, 1.5)
    with pytest.raises(tl.TorchLeanError, match="reduce must be"):
        x.scatter_reduce(0, tl.tensor([[0]]), x, reduce="max")
    with pytest.raises(tl.TorchLeanError, match="gradient of reduce='amax'"):
        x.clone().requires_grad_().scatter_reduce(1, tl.tensor([[0]] * 3), x, reduce="amax")
    with pytest.raises(tl.ShapeError, match="1-D"):
        tl.combinations(x)
    with pytest.raises(tl.ShapeError, match="index out of range"):
        x.index_add(1, tl.tensor([9]), tl.ones(3, 1))
    with pytest.raises(tl.TorchLeanError, match="integer tensors"):
        tl.gcd(x, x)


def test_broadcasting_masked_fill_xlogy_and_predicates_on_tensors_with_history() -> None:
    def program(m: Any) -> Any:
        a = m.tensor([0.5, -1.0, 2.0], requires_grad=True)
        mask = m.tensor([[True, False, False], [False, True, False]])
        filled = a.masked_fill(mask, 2.0)  # the result takes the broadcast shape
        y = m.xlogy(m.tensor([[1.0, 2.0], [0.0, 3.0]]), m.tensor([2.0, 0.5]))
        _weighted(m, filled).backward()
        inf = m.tensor([1.0, -float("inf"), float("inf")], requires_grad=True)
        return [filled, a.grad, y, m.isneginf(inf), m.isposinf(inf), m.isinf(inf),
                m.isclose(inf, inf), m.signbit(inf), (inf > 0), m.count_nonzero(inf)]
    agree(program, 1e-6, 1e-6)
