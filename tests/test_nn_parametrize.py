"""``nn.utils`` reparametrisations and helpers against PyTorch: the hook-based and the
parametrization-based ``weight_norm``/``spectral_norm`` (state-dict keys equal torch's; with
torch's state loaded, a few SGD steps give torch's outputs, parameters and power-iteration
buffers), ``parametrize`` itself (custom parametrizations, assignment through
``right_inverse``, removal, ``cached``), batch-norm fusion, ``get_total_norm`` /
``clip_grads_with_norm_`` and ``nn.init``'s ``sparse_`` and deprecated aliases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from differential import assert_same, norm

import torchlean as tl
from torchlean.core.errors import TorchLeanError

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

X = np.random.default_rng(0).standard_normal((4, 5))
XC = np.random.default_rng(1).standard_normal((2, 3, 6, 6))


def _trajectory(m: Any, module: Any, x: np.ndarray, dtype: Any, steps: int = 3) -> Any:
    opt = m.optim.SGD(module.parameters(), lr=0.1)
    outs = []
    for _ in range(steps):
        opt.zero_grad()
        y = module(m.tensor(x.astype(dtype)))
        (y * y).sum().backward()
        opt.step()
        outs.append(y)
    return norm({"outs": outs, "state": module.state_dict()})


WRAPS: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any], Any], np.ndarray]] = {
    "weight_norm": (lambda m, l: m.nn.utils.weight_norm(l), lambda m: m.nn.Linear(5, 3), X),
    "weight_norm_dim_none": (lambda m, l: m.nn.utils.weight_norm(l, dim=None),
                             lambda m: m.nn.Conv2d(3, 4, 3), XC),
    "weight_norm_dim1": (lambda m, l: m.nn.utils.weight_norm(l, dim=1),
                         lambda m: m.nn.Linear(5, 3), X),
    "spectral_norm": (lambda m, l: m.nn.utils.spectral_norm(l), lambda m: m.nn.Linear(5, 3), X),
    "spectral_norm_conv": (lambda m, l: m.nn.utils.spectral_norm(l, n_power_iterations=2),
                           lambda m: m.nn.Conv2d(3, 4, 3), XC),
    "p_weight_norm": (lambda m, l: m.nn.utils.parametrizations.weight_norm(l),
                      lambda m: m.nn.Linear(5, 3), X),
    "p_weight_norm_conv": (lambda m, l: m.nn.utils.parametrizations.weight_norm(l, dim=None),
                           lambda m: m.nn.Conv2d(3, 4, 3), XC),
    "p_spectral_norm": (lambda m, l: m.nn.utils.parametrizations.spectral_norm(l),
                        lambda m: m.nn.Linear(5, 3), X),
    "p_spectral_norm_conv": (lambda m, l: m.nn.utils.parametrizations.spectral_norm(l),
                             lambda m: m.nn.Conv2d(3, 4, 3), XC),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(WRAPS))
def test_reparametrised_training_matches_torch(name: str, dtype: Any) -> None:
    wrap, make, x = WRAPS[name]
    torch.manual_seed(0)
    theirs = make(torch)
    ours = make(tl)
    if dtype == np.float64:
        theirs, ours = theirs.double(), ours.double()
    theirs, ours = wrap(torch, theirs), wrap(tl, ours)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours.load_state_dict({k: tl.tensor(v) for k, v in norm(theirs.state_dict()).items()})
    expected = _trajectory(torch, theirs, x, dtype)
    got = _trajectory(tl, ours, x, dtype)
    tol = (1e-4, 1e-4) if dtype == np.float32 else (1e-9, 1e-10)
    assert_same(got, expected, name, *tol)


def test_spectral_norm_eval_mode_freezes_the_power_iteration() -> None:
    layer = tl.nn.utils.parametrizations.spectral_norm(tl.nn.Linear(6, 4))
    u0 = layer.parametrizations.weight[0]._u.numpy().copy()
    layer.eval()
    w = layer.weight.detach().numpy()
    assert np.array_equal(layer.parametrizations.weight[0]._u.numpy(), u0)
    assert abs(np.linalg.svd(w, compute_uv=False)[0] - 1.0) < 1e-3  # 15 warm-up iterations
    layer.train()
    _ = layer.weight
    assert not np.array_equal(layer.parametrizations.weight[0]._u.numpy(), u0) or \
        np.allclose(layer.parametrizations.weight[0]._u.numpy(), u0, atol=1e-6)


def test_remove_weight_and_spectral_norm_restore_a_plain_parameter() -> None:
    layer = tl.nn.utils.weight_norm(tl.nn.Linear(5, 3))
    x = tl.tensor(X.astype(np.float32))
    before = layer(x).detach().numpy()
    tl.nn.utils.remove_weight_norm(layer)
    assert list(layer.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(layer(x).detach().numpy(), before, rtol=1e-6)
    layer = tl.nn.utils.spectral_norm(tl.nn.Linear(5, 3))
    layer.eval()
    before = layer(x).detach().numpy()
    tl.nn.utils.remove_spectral_norm(layer)
    assert sorted(layer.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(layer(x).detach().numpy(), before, rtol=1e-6)
    with pytest.raises(TorchLeanError, match="remove_weight_norm: weight_norm of 'weight'"):
        tl.nn.utils.remove_weight_norm(layer)
    with pytest.raises(TorchLeanError, match="two WeightNorm hooks"):
        tl.nn.utils.weight_norm(tl.nn.utils.weight_norm(tl.nn.Linear(2, 2)))


class _Symmetric:
    """A parametrization written once for torch and torchlean."""

    @staticmethod
    def make(m: Any) -> Any:
        class Symmetric(m.nn.Module):
            def forward(self, x: Any) -> Any:
                return x.triu() + x.triu(1).transpose(0, 1)

            def right_inverse(self, a: Any) -> Any:
                return a.triu()
        return Symmetric()


def test_register_parametrization_as_torch() -> None:
    def program(m: Any) -> Any:
        torch.manual_seed(0)
        layer = m.nn.Linear(4, 4)
        with m.no_grad():
            layer.weight.copy_(m.tensor(np.arange(16.0).reshape(4, 4).astype(np.float32)))
        m.nn.utils.parametrize.register_parametrization(layer, "weight", _Symmetric.make(m))
        seen: dict[str, Any] = {"name": type(layer).__name__,
                                "keys": list(layer.state_dict()),
                                "is": m.nn.utils.parametrize.is_parametrized(layer, "weight"),
                                "weight": layer.weight}
        x = m.tensor(X[:, :4].astype(np.float32))
        layer(x).sum().backward()
        seen["grad"] = layer.parametrizations.weight.original.grad
        layer.weight = m.tensor(np.eye(4, dtype=np.float32) * 2)  # through right_inverse
        seen["assigned"] = layer.parametrizations.weight.original
        with m.nn.utils.parametrize.cached():
            seen["same"] = layer.weight is layer.weight
        m.nn.utils.parametrize.remove_parametrizations(layer, "weight")
        seen["after"] = (type(layer).__name__, list(layer.state_dict()),
                         m.nn.utils.parametrize.is_parametrized(layer))
        seen["final"] = layer.weight
        return norm(seen)
    assert_same(program(tl), program(torch), "", 1e-6, 1e-7)


def test_fuse_batch_norm_into_conv_and_linear() -> None:
    def program(m: Any) -> Any:
        conv, bn = m.nn.Conv2d(3, 4, 3), m.nn.BatchNorm2d(4)
        lin, bn1 = m.nn.Linear(5, 4), m.nn.BatchNorm1d(4)
        rng = np.random.default_rng(3)
        with m.no_grad():
            for mod in (conv, bn, lin, bn1):
                for p in mod.parameters():
                    p.copy_(m.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32)))
            for b in (bn, bn1):
                b.running_mean.copy_(m.tensor(rng.standard_normal(4).astype(np.float32)))
                b.running_var.copy_(m.tensor(rng.uniform(0.5, 2, 4).astype(np.float32)))
        for mod in (conv, bn, lin, bn1):
            mod.eval()
        fused = m.nn.utils.fuse_conv_bn_eval(conv, bn)
        fused_lin = m.nn.utils.fuse_linear_bn_eval(lin, bn1)
        xc, x = m.tensor(XC.astype(np.float32)), m.tensor(X.astype(np.float32))
        return norm({"conv": fused(xc), "ref": bn(conv(xc)), "w": fused.weight,
                     "lin": fused_lin(x), "lin_ref": bn1(lin(x))})
    ours, theirs = program(tl), program(torch)
    assert_same(ours, theirs, "", 1e-4, 1e-5)
    np.testing.assert_allclose(ours["conv"], ours["ref"], rtol=1e-4, atol=1e-5)
    with pytest.raises(TorchLeanError, match="fuse_conv_bn_eval: fusion only for eval"):
        tl.nn.utils.fuse_conv_bn_eval(tl.nn.Conv2d(1, 1, 1), tl.nn.BatchNorm2d(1))


def test_total_norm_and_clip_with_norm_as_torch() -> None:
    def program(m: Any) -> Any:
        rng = np.random.default_rng(4)
        params = [m.nn.Parameter(m.tensor(rng.standard_normal(s).astype(np.float32)))
                  for s in ((3, 4), (5,))]
        for p in params:
            p.grad = m.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32))
        total = m.nn.utils.get_total_norm([p.grad for p in params])
        inf = m.nn.utils.get_total_norm([p.grad for p in params], norm_type=float("inf"))
        m.nn.utils.clip_grads_with_norm_(params, 1.5, total)
        return norm({"total": total, "inf": inf, "grads": [p.grad for p in params]})
    assert_same(program(tl), program(torch), "", 1e-5, 1e-6)


def test_init_sparse_and_deprecated_aliases() -> None:
    w = tl.nn.Parameter(tl.zeros(10, 7))
    tl.nn.init.sparse_(w, 0.35, std=2.0)
    zeros = (w.detach().numpy() == 0).sum(0)
    assert np.all(zeros == 4)  # ceil(0.35 * 10) rows of every column, as torch's
    assert w.detach().numpy().std() > 1.0
    with pytest.warns(FutureWarning, match="nn.init.constant` is now deprecated"):
        tl.nn.init.constant(w, 3.0)
    assert np.all(w.detach().numpy() == 3.0)
    with pytest.raises(TorchLeanError, match="sparse_: only 2-D"):
        tl.nn.init.sparse_(tl.nn.Parameter(tl.zeros(3)), 0.5)
    for name in ("uniform", "normal", "xavier_uniform", "xavier_normal", "kaiming_uniform",
                 "kaiming_normal", "orthogonal", "sparse", "dirac"):
        assert callable(getattr(tl.nn.init, name)) and hasattr(torch.nn.init, name)


def test_skip_init_builds_the_module() -> None:
    layer = tl.nn.utils.skip_init(tl.nn.Linear, 3, 2, device="cpu")
    assert type(layer) is tl.nn.Linear and tuple(layer.weight.shape) == (2, 3)
    with pytest.raises(TorchLeanError, match="skip_init: expected a Module class"):
        tl.nn.utils.skip_init(3)
