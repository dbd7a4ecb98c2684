"""``torchlean.func`` (torch.func's transforms) and Module hooks, against torch.

Each program is written once against a module ``m`` and run with ``m=torch`` and ``m=tl``
(``tests/differential.py``): per-sample gradients by ``vmap(grad(...))`` over
``functional_call``, Jacobians, Hessians, vjp/jvp, nested transforms, model ensembling with
``stack_module_state``, and forward / backward hooks that observe and replace values.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from differential import agree

import torchlean as tl

torch = pytest.importorskip("torch")

RTOL, ATOL = 1e-5, 1e-6


def _func(m: Any) -> Any:
    return m.func


def _det(m: Any, model: Any, shift: float = 0.0) -> Any:
    """Deterministic weights (the two libraries draw different random streams)."""
    with m.no_grad():
        for i, p in enumerate(model.parameters()):
            values = np.sin(np.arange(p.numel()) * 0.7 + i + shift).reshape(tuple(p.shape)) * 0.5
            p.copy_(m.tensor(values.astype(np.float32)))
    return model


def _mlp(m: Any, shift: float = 0.0) -> Any:
    return _det(m, m.nn.Sequential(m.nn.Linear(4, 8), m.nn.Tanh(), m.nn.Linear(8, 3)), shift)


DATA = np.cos(np.arange(20, dtype=np.float32)).reshape(5, 4)
LABELS = np.array([0, 1, 2, 1, 0])


def test_per_sample_gradients_by_vmap_of_grad() -> None:
    def program(m: Any) -> Any:
        f = _func(m)
        model = _mlp(m)
        params = {k: v.detach() for k, v in model.named_parameters()}

        def loss(params: Any, x: Any, y: Any) -> Any:
            out = f.functional_call(model, params, (x.unsqueeze(0),))
            return m.nn.functional.cross_entropy(out, y.unsqueeze(0))

        grads = f.vmap(f.grad(loss), in_dims=(None, 0, 0))(params, m.tensor(DATA),
                                                            m.tensor(LABELS))
        # the same per-sample gradients one sample at a time through backward()
        model.zero_grad()
        m.nn.functional.cross_entropy(model(m.tensor(DATA[2:3])), m.tensor(LABELS[2:3])).backward()
        return [grads, [p.grad for p in model.parameters()]]
    agree(program, RTOL, ATOL, strict=True)


def test_per_sample_gradient_equals_one_sample_backward() -> None:
    model = _mlp(tl)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(params: Any, x: Any) -> Any:
        return tl.func.functional_call(model, params, (x.unsqueeze(0),)).pow(2).sum()

    grads = tl.func.vmap(tl.func.grad(loss), in_dims=(None, 0))(params, tl.tensor(DATA))
    model.zero_grad()
    model(tl.tensor(DATA[3:4])).pow(2).sum().backward()
    for name, p in model.named_parameters():
        np.testing.assert_allclose(grads[name][3].numpy(), p.grad.numpy(), rtol=1e-6, atol=1e-7)
    # functional_call restored the module's own parameters
    assert all(type(p) is tl.nn.Parameter for p in model.parameters())


def test_jacobians_hessian_vjp_jvp() -> None:
    def program(m: Any) -> Any:
        f = _func(m)
        x = m.tensor([0.1, 0.5, -0.3, 0.9])

        def g(x: Any) -> Any:
            return x.sin().sum() * x.cos()

        out, fn = f.vjp(g, x)
        value, tangent = f.jvp(g, (x,), (m.tensor([1.0, -2.0, 0.5, 0.0]),))
        h = f.hessian(lambda x: (x ** 3).sum() * x[0])(x)
        two = f.jacrev(lambda a, b: a * b.sum(), argnums=(0, 1))(x, x * 2)
        return [f.jacrev(g)(x), f.jacfwd(g)(x), h, out, fn(m.ones(4)), value, tangent, two]
    agree(program, RTOL, ATOL)


def test_nested_and_aux() -> None:
    def program(m: Any) -> Any:
        f = _func(m)
        x = m.tensor([0.2, -0.4, 1.5])
        gg = f.grad(f.grad(lambda a: a.sin().sum() if a.dim() == 0 else a.sin()))(m.tensor(0.3))
        gx, aux = f.grad(lambda a: ((a ** 2).sum(), a.mean()), has_aux=True)(x)
        (ga, gb), val = f.grad_and_value(lambda a, b: (a * b).sum(), argnums=(0, 1))(x, x + 1)
        return [gg, gx, aux, ga, gb, val,
                f.vmap(lambda a, b: a * b, in_dims=(0, None), out_dims=1)(m.tensor(DATA), x[:1]),
                m.vmap(m.dot)(m.tensor(DATA), m.tensor(DATA))]
    agree(program, RTOL, ATOL)


def test_model_ensembling() -> None:
    def program(m: Any) -> Any:
        f = _func(m)
        models = [_mlp(m, s) for s in (0.0, 1.0, 2.0)]
        params, buffers = f.stack_module_state(models)
        base = copy.deepcopy(models[0]).to("meta")

        def fmodel(p: Any, b: Any, x: Any) -> Any:
            return f.functional_call(base, (p, b), (x,))

        x = m.tensor(DATA)
        return [f.vmap(fmodel, in_dims=(0, 0, None))(params, buffers, x), models[1](x),
                params["0.weight"].requires_grad]
    agree(program, RTOL, ATOL)


def test_func_refusals() -> None:
    f = tl.func
    with pytest.raises(tl.ShapeError, match="one-element"):
        f.grad(lambda a: a * 2)(tl.tensor([1.0, 2.0]))
    with pytest.raises(tl.TorchLeanError, match="argnums"):
        f.grad(lambda a: a.sum(), argnums=3)(tl.tensor([1.0]))
    with pytest.raises(tl.TorchLeanError, match="floating-point"):
        f.grad(lambda a: a.sum())(tl.tensor([1, 2]))
    with pytest.raises(tl.ShapeError, match="different sizes"):
        f.vmap(lambda a, b: a + b)(tl.ones(3), tl.ones(4))
    with pytest.raises(tl.TorchLeanError, match="randomness='same'"):
        f.vmap(lambda a: a, randomness="same")
    model = _mlp(tl)
    with pytest.raises(tl.TorchLeanError, match="unexpected key"):
        f.functional_call(model, {"nope": tl.ones(1)}, (tl.ones(1, 4),))
    with pytest.raises(tl.TorchLeanError, match="missing key"):
        f.functional_call(model, {}, (tl.ones(1, 4),), strict=True)
    before = [p.detach().numpy().copy() for p in model.parameters()]
    with pytest.raises(tl.ShapeError):  # a wrong-shaped weight fails inside the call...
        f.functional_call(model, {"0.weight": tl.ones(2, 2)}, (tl.ones(1, 4),))
    # ... and the module's own parameters are back
    for b, p in zip(before, model.parameters(), strict=True):
        np.testing.assert_array_equal(b, p.detach().numpy())


# --- hooks ---------------------------------------------------------------------------------------


def _hooked_program(m: Any) -> Any:
    model = _det(m, m.nn.Sequential(m.nn.Linear(4, 6), m.nn.ReLU(), m.nn.Linear(6, 2)))
    x = m.tensor(DATA[:3]).requires_grad_()
    log: list[Any] = []

    def pre(mod: Any, args: Any) -> Any:
        log.append(("pre", tuple(args[0].shape)))
        return (args[0] * 2,)

    def fwd(mod: Any, args: Any, out: Any) -> Any:
        log.append(("fwd", tuple(out.shape)))
        return out + 1

    def bpre(mod: Any, gout: Any) -> Any:
        log.append(("bpre", gout[0]))
        return (gout[0] * 0.5,)

    def bwd(mod: Any, gin: Any, gout: Any) -> Any:
        log.append(("bwd", type(mod).__name__, gin[0], gout[0]))
        if isinstance(mod, m.nn.ReLU):
            return (gin[0].clamp(min=0),)
        return None

    handles = [model[0].register_forward_pre_hook(pre), model[2].register_forward_hook(fwd),
               model[1].register_full_backward_hook(bwd),
               model[2].register_full_backward_pre_hook(bpre),
               model[0].register_full_backward_hook(bwd)]
    model(x).pow(2).sum().backward()
    first = [x.grad.clone(), model[0].weight.grad.clone()]
    for h in handles:
        h.remove()
    x.grad = None
    model.zero_grad()
    model(x).pow(2).sum().backward()
    feats = {}
    for name, mod in model.named_modules():
        if isinstance(mod, m.nn.Linear):
            mod.register_forward_hook(lambda mod, i, o, name=name: feats.__setitem__(name,
                                                                                    o.detach()))
    model(x)
    return [log, first, x.grad, feats]


def test_module_hooks_observe_and_replace_as_torch() -> None:
    agree(_hooked_program, RTOL, ATOL)


def test_backward_hook_without_input_gradient_and_kwargs_hooks() -> None:
    def program(m: Any) -> Any:
        lin = _det(m, m.nn.Linear(4, 2))
        seen: list[Any] = []
        lin.register_full_backward_hook(lambda mod, gin, gout: seen.append([gin[0], gout[0]]))
        lin.register_forward_pre_hook(lambda mod, a, k: ((a[0] * 3,), k), with_kwargs=True)
        lin.register_forward_hook(lambda mod, a, k, o: o * 2, with_kwargs=True, prepend=True)
        out = lin(m.tensor(DATA[:2]))  # data that needs no gradient: grad_input is (None,)
        out.sum().backward()
        return [out, seen, lin.weight.grad]
    agree(program, RTOL, ATOL)


def test_hooks_refusals_and_removal() -> None:
    lin = tl.nn.Linear(2, 2)
    with pytest.raises(tl.TorchLeanError, match="callable"):
        lin.register_forward_hook(3)
    with pytest.raises(tl.TorchLeanError, match="register_full_backward_hook"):
        lin.register_backward_hook(lambda *a: None)
    calls = []
    with lin.register_forward_hook(lambda *a: calls.append(1)):
        lin(tl.ones(1, 2))
    lin(tl.ones(1, 2))
    assert calls == [1]
    class Two(tl.nn.Module):
        def forward(self, a: Any, b: Any) -> Any:
            return a * b

    bil = Two()
    bil.register_full_backward_hook(lambda mod, gin, gout: (gin[0], gin[1]))
    a, b = tl.ones(1, 2, requires_grad=True), tl.ones(1, 2, requires_grad=True)
    with pytest.raises(tl.TorchLeanError, match="one input"):
        bil(a, b).sum().backward()
