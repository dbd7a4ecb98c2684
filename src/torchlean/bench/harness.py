"""The benchmark harness of ``torchlean bench``: five workloads timed side by side in one process.

Every workload (W1 elementwise chain, W2 MLP step, W3 CNN step, W4 Hessian-vector product, W5
pre-LN transformer block step) is built from the same seeded float32 data in every framework
that is installed: torchlean eager and compiled, PyTorch's own code of the workload run with
``torchlean`` in place of ``torch`` (``torchlean-tensors``: the ``tl.Tensor`` door), PyTorch
eager, JAX jit, HIPS autograd, and a hand-written NumPy version with no tape (the floor any
NumPy-based engine can reach). Before
anything is timed, each framework's loss and gradients (W4: the Hessian-vector product) are
compared with the reference (PyTorch when installed, else torchlean eager); a disagreement is an
error, not a row. Timing is interleaved: after a warm-up, each round runs a block of steps of
every framework in a shuffled order, and the table shows the median over rounds (with min-max),
the ratio to PyTorch and to the NumPy floor of the same run, and minor page faults per step.

``main_jobs`` times the main job side by side: ``torchlean train`` on digits (MLP, CNN; eager and
compiled) and the same training in PyTorch (``torch_main_job``), fresh one-thread processes.

``--isolated`` also times torchlean alone in fresh processes (only NumPy loaded, as in
``torchlean train``) and measures the peak memory of 200 W2 steps per framework, each in a fresh
process. Timings are measurements, never checks: ``run_agreement`` is what the tests call.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import torchlean as tl

from .. import optim
from ..core.backend import is_cupy, to_device, to_host
from ..core.errors import TorchLeanError
from ..engine import ops_interface as F
from ..engine.params import Param
from ..engine.session import Options
from ..ops.fast import blas as fast_blas
from ..ops.fast import pool_jit
from ..training.cuda_graph import maybe_graphed
from ..training.stepper import Stepper
from ..zoo import models, trained

WORKLOADS = ("W1", "W2", "W3", "W4", "W5")
FRAMEWORKS = ("torchlean-eager", "torchlean-compiled", "torchlean-tensors", "torch", "jax",
              "autograd", "numpy")
# Not run by default: the compiled graph with its plan interpreted (``Compiled.codegen = False``),
# the "before" of generated code, timed in the same run as the rest.
EXTRA_FRAMEWORKS = ("torchlean-interpreted",)
TITLES = {
    "W1": "500-op elementwise chain, fwd+bwd, length-16 vectors",
    "W2": "MLP 784-512-512-10, batch 128, CE, SGD step",
    "W3": "CNN (32,1,28,28) conv3x3(16)+relu+pool2, conv3x3(32)+relu+pool2, linear, CE, SGD",
    "W4": "Hessian-vector product of W2's loss (forward-over-reverse)",
    "W5": "pre-LN transformer block, seq 32, d 64, 4 heads, MLP 256, batch 8, MSE, SGD",
}
# Steps per timed block: enough that one block is well above the timer's resolution.
BLOCK = {"W1": 8, "W2": 4, "W3": 2, "W4": 3, "W5": 4}
LR = 0.01
EPS = 1e-5  # layer norm epsilon in W5, the same in every framework
HEADS = 4
CHAIN_OPS = 500


class BenchError(TorchLeanError):
    """A benchmark could not be built, or two frameworks disagree on a workload."""


@dataclass
class Impl:
    """One workload in one framework: ``step`` is what is timed (one training step, or one
    forward + backward, or one hvp); ``check`` returns the loss and gradients (W4: the hvp)
    at the initial point, for the agreement check. ``check`` must run before ``step``."""

    step: Callable[[], Any]
    check: Callable[[], tuple[float, list[np.ndarray]]]
    note: str = ""
    extra: dict[str, Callable[[], Any]] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Seeded data (identical arrays for every framework)
# ---------------------------------------------------------------------------------------------

def _uniform(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def make_data(workload: str) -> dict[str, Any]:
    """The workload's parameters (a list, in the order every framework uses) and data."""
    rng = np.random.default_rng({"W1": 0, "W2": 1, "W3": 2, "W4": 1, "W5": 3}[workload])
    if workload == "W1":
        x = rng.standard_normal(16).astype(np.float32)
        y = (rng.standard_normal(16) * 0.1).astype(np.float32)
        return {"params": [x, y]}
    if workload in ("W2", "W4"):
        sizes = [784, 512, 512, 10]
        params = []
        for fan_in, fan_out in zip(sizes, sizes[1:], strict=False):
            params += [_uniform(rng, (fan_out, fan_in), fan_in), _uniform(rng, (fan_out,), fan_in)]
        x = rng.standard_normal((128, 784)).astype(np.float32)
        labels = rng.integers(0, 10, size=128)
        data = {"params": params, "x": x, "labels": labels}
        if workload == "W4":
            data["v"] = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
        return data
    if workload == "W3":
        params = [_uniform(rng, (16, 1, 3, 3), 9), _uniform(rng, (16,), 9),
                  _uniform(rng, (32, 16, 3, 3), 144), _uniform(rng, (32,), 144),
                  _uniform(rng, (10, 32 * 7 * 7), 32 * 49), _uniform(rng, (10,), 32 * 49)]
        x = rng.standard_normal((32, 1, 28, 28)).astype(np.float32)
        return {"params": params, "x": x, "labels": rng.integers(0, 10, size=32)}
    if workload == "W5":
        d, ff = 64, 256
        params = [np.ones(d, np.float32), np.zeros(d, np.float32),        # ln1 gamma, beta
                  *[_uniform(rng, (d, d), d) for _ in range(4)],          # wq wk wv wo (x @ w)
                  np.ones(d, np.float32), np.zeros(d, np.float32),        # ln2 gamma, beta
                  _uniform(rng, (ff, d), d), _uniform(rng, (ff,), d),     # mlp in (torch layout)
                  _uniform(rng, (d, ff), ff), _uniform(rng, (d,), ff)]    # mlp out
        x = rng.standard_normal((8, 32, d)).astype(np.float32)
        target = rng.standard_normal((8, 32, d)).astype(np.float32)
        return {"params": params, "x": x, "target": target}
    raise BenchError(f"bench: unknown workload {workload!r}, expected one of {WORKLOADS}")


# ---------------------------------------------------------------------------------------------
# torchlean (eager tape and compiled graph, through ScalarTrainer: F -> session -> engine)
# ---------------------------------------------------------------------------------------------

def _tl_loss(workload: str, data: dict[str, Any]) -> Callable[..., Any]:

    if workload == "W1":
        def chain(x: Any, y: Any) -> Any:
            h = x
            for i in range(CHAIN_OPS // 4):
                h = F.tanh(F.mul(F.add(h, y), y))
                h = F.relu(h) if i % 2 else F.tanh(h)
            return F.sum(h)
        return chain
    if workload in ("W2", "W4"):
        def mlp(w1: Any, b1: Any, w2: Any, b2: Any, w3: Any, b3: Any, x: Any, y: Any) -> Any:
            h = F.relu(F.linear(w1, b1, x))
            h = F.relu(F.linear(w2, b2, h))
            return F.cross_entropy(F.linear(w3, b3, h), y)
        return mlp
    if workload == "W3":
        def cnn(w1: Any, b1: Any, w2: Any, b2: Any, w3: Any, b3: Any, x: Any, y: Any) -> Any:
            h = F.max_pool2d(F.relu(F.conv2d(w1, b1, x, padding=1)), kernel_size=2)
            h = F.max_pool2d(F.relu(F.conv2d(w2, b2, h, padding=1)), kernel_size=2)
            h = F.reshape(h, (h.shape[0], 32 * 7 * 7))
            return F.cross_entropy(F.linear(w3, b3, h), y)
        return cnn

    def block(g1: Any, be1: Any, wq: Any, wk: Any, wv: Any, wo: Any, g2: Any, be2: Any,
              m1: Any, c1: Any, m2: Any, c2: Any, x: Any, target: Any) -> Any:
        h = F.add(x, F.multi_head_attention(wq, wk, wv, wo, F.layer_norm(x, g1, be1, eps=EPS),
                                            num_heads=HEADS))
        u = F.gelu(F.linear(m1, c1, F.layer_norm(h, g2, be2, eps=EPS)))
        return F.mse_loss(F.add(h, F.linear(m2, c2, u)), target)
    return block


def _tl_inputs(workload: str, data: dict[str, Any]) -> list[np.ndarray]:
    if workload == "W1":
        return []
    if workload == "W5":
        return [data["x"], data["target"]]
    return [data["x"], data["labels"].astype(np.float32)]


def build_torchlean(workload: str, data: dict[str, Any], backend: str,
                    codegen: bool = True) -> Impl:

    loss = _tl_loss(workload, data)
    inputs = _tl_inputs(workload, data)
    if workload == "W4":
        params, vs = data["params"], data["v"]
        x, y = inputs
        # As in torch.func.grad(argnums=params) and jax.grad(loss)(params), only the parameters
        # are differentiated; the batch is data (no cotangent of x is computed).
        if backend == "eager":
            labels = data["labels"]

            def of_params(*ps: Any) -> Any:
                return loss(*ps, x, labels)

            # tl.hvp traces the function on every call: the define-by-run form of hvp.
            def hvp() -> tuple[Any, ...]:
                return tl.hvp(of_params, params, vs)
        else:
            c = tl.compile(loss, *[p.shape for p in params], x.shape, y.shape,
                           wrt=tuple(range(len(params))))
            c.codegen = codegen

            def hvp() -> tuple[Any, ...]:
                # The data are constants of the Hessian (None = zero direction).
                return c.hvp([*params, x, y], [*vs, None, None])[:6]
        return Impl(hvp, lambda: (float("nan"), [np.asarray(g) for g in hvp()]))
    trainer = tl.ScalarTrainer([p.copy() for p in data["params"]], loss,
                               tl.Options(backend=backend))
    if not codegen:
        _interpret(trainer, inputs)
    if workload == "W1":
        def step() -> Any:
            return trainer.value_and_grads()
    else:
        def step() -> Any:
            return trainer.step(LR, *inputs)

    def check() -> tuple[float, list[np.ndarray]]:
        value, grads = trainer.value_and_grads(*inputs)
        return value, [np.asarray(g) for g in grads]
    return Impl(step, check)


def _interpret(trainer: Any, inputs: Sequence[Any]) -> None:
    """Make ``trainer``'s compiled graph for ``inputs`` interpret its plan (``codegen`` off)."""
    stepper = trainer._stepper
    stepper.compiled_for(stepper._arrays(inputs)).codegen = False


# ---------------------------------------------------------------------------------------------
# PyTorch eager
# ---------------------------------------------------------------------------------------------

def _torch_loss(torch: Any, workload: str, data: dict[str, Any], device: str = "cpu"
                ) -> Callable[..., Any]:
    nnf = torch.nn.functional
    if workload == "W1":
        def chain(x: Any, y: Any) -> Any:
            h = x
            for i in range(CHAIN_OPS // 4):
                h = torch.tanh((h + y) * y)
                h = torch.relu(h) if i % 2 else torch.tanh(h)
            return h.sum()
        return chain
    if workload in ("W2", "W4"):
        xt, yt = (torch.tensor(data["x"], device=device),
                  torch.tensor(data["labels"], device=device))

        def mlp(w1: Any, b1: Any, w2: Any, b2: Any, w3: Any, b3: Any) -> Any:
            h = torch.relu(nnf.linear(xt, w1, b1))
            h = torch.relu(nnf.linear(h, w2, b2))
            return nnf.cross_entropy(nnf.linear(h, w3, b3), yt)
        return mlp
    if workload == "W3":
        xt, yt = (torch.tensor(data["x"], device=device),
                  torch.tensor(data["labels"], device=device))

        def cnn(w1: Any, b1: Any, w2: Any, b2: Any, w3: Any, b3: Any) -> Any:
            h = nnf.max_pool2d(torch.relu(nnf.conv2d(xt, w1, b1, padding=1)), 2)
            h = nnf.max_pool2d(torch.relu(nnf.conv2d(h, w2, b2, padding=1)), 2)
            return nnf.cross_entropy(nnf.linear(h.reshape(h.shape[0], -1), w3, b3), yt)
        return cnn
    xt, tt = (torch.tensor(data["x"], device=device),
              torch.tensor(data["target"], device=device))

    def block(g1: Any, be1: Any, wq: Any, wk: Any, wv: Any, wo: Any, g2: Any, be2: Any,
              m1: Any, c1: Any, m2: Any, c2: Any) -> Any:
        b, n, dm = xt.shape
        d = dm // HEADS

        def heads(m: Any) -> Any:
            return m.reshape(b, n, HEADS, d).transpose(1, 2)

        a = nnf.layer_norm(xt, (dm,), g1, be1, eps=EPS)
        q, k, v = heads(a @ wq), heads(a @ wk), heads(a @ wv)
        p = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1)
        h = xt + (p @ v).transpose(1, 2).reshape(b, n, dm) @ wo
        u = nnf.gelu(nnf.linear(nnf.layer_norm(h, (dm,), g2, be2, eps=EPS), m1, c1),
                     approximate="tanh")
        return nnf.mse_loss(h + nnf.linear(u, m2, c2), tt)
    return block


def build_torch(workload: str, data: dict[str, Any]) -> Impl:
    import torch

    loss = _torch_loss(torch, workload, data)
    params = [torch.tensor(p, requires_grad=True) for p in data["params"]]
    if workload == "W4":
        plain = tuple(p.detach() for p in params)
        vs = tuple(torch.tensor(v) for v in data["v"])
        grad_fn = torch.func.grad(loss, argnums=tuple(range(len(plain))))

        def jvp_of_grad() -> Any:
            return torch.func.jvp(grad_fn, plain, vs)[1]

        def double_backward() -> Any:
            return _double_backward(torch, loss, params, vs)

        def hvp_check() -> tuple[float, list[np.ndarray]]:
            return float("nan"), [t.detach().numpy() for t in jvp_of_grad()]
        return Impl(jvp_of_grad, hvp_check, note="torch.func jvp(grad)",
                    extra={"torch double backward": double_backward})
    if workload == "W1":
        def step() -> Any:
            return torch.autograd.grad(loss(*params), params)

        return Impl(step, _torch_check(torch, loss, params))
    return _torch_sgd_impl(torch, loss, params)


def _double_backward(torch: Any, loss: Any, params: list[Any], vs: Sequence[Any]) -> Any:
    """W4 as PyTorch writes it without ``torch.func``: the gradient with ``create_graph``, then
    its vector-Jacobian product with ``vs`` (``torch`` may be ``torchlean``)."""
    g = torch.autograd.grad(loss(*params), params, create_graph=True)
    return torch.autograd.grad(g, params, grad_outputs=vs)


def build_tensors(workload: str, data: dict[str, Any]) -> Impl:
    """PyTorch's own code of the workload (``_torch_loss``, ``torch.optim.SGD``,
    ``torch.autograd.grad``) with ``torch`` replaced by ``torchlean``: define-by-run
    ``tl.Tensor``s, the door a PyTorch program takes when only its import changes. W4 is the
    double-backward form (torchlean has no ``torch.func``)."""
    loss = _torch_loss(tl, workload, data)
    params = [tl.tensor(p, requires_grad=True) for p in data["params"]]
    if workload == "W4":
        vs = [tl.tensor(v) for v in data["v"]]

        def double_backward() -> Any:
            return _double_backward(tl, loss, params, vs)

        def hvp_check() -> tuple[float, list[np.ndarray]]:
            return float("nan"), [t.detach().numpy() for t in double_backward()]
        return Impl(double_backward, hvp_check, note="double backward")
    if workload == "W1":
        def step() -> Any:
            return tl.autograd.grad(loss(*params), params)

        return Impl(step, _torch_check(tl, loss, params))
    return _torch_sgd_impl(tl, loss, params)


def _torch_check(torch: Any, loss: Any, params: list[Any]) -> Callable[[], Any]:
    """The loss and gradients at the current parameters, on the host (the agreement check)."""
    def check() -> tuple[float, list[np.ndarray]]:
        out = loss(*params)
        grads = torch.autograd.grad(out, params)
        return float(out.detach().cpu()), [g.cpu().numpy() for g in grads]
    return check


def _torch_sgd_impl(torch: Any, loss: Any, params: list[Any], note: str = "") -> Impl:
    """PyTorch's training step (zero_grad, backward, SGD step), on whatever device the
    parameters are."""
    opt = torch.optim.SGD(params, lr=LR)

    def step() -> Any:
        opt.zero_grad()
        out = loss(*params)
        out.backward()
        opt.step()
        return out
    return Impl(step, _torch_check(torch, loss, params), note=note)


# ---------------------------------------------------------------------------------------------
# JAX (jit) and HIPS autograd share one NumPy-style definition of each loss
# ---------------------------------------------------------------------------------------------

def _np_style_loss(xp: Any, workload: str, data: dict[str, Any], conv: Any = None
                   ) -> Callable[[Sequence[Any]], Any]:
    """The loss as a function of the parameter list, written against ``xp`` (jax.numpy or
    autograd.numpy). ``conv(x, w)`` is a 'same' 3x3 convolution (W3 only)."""

    def relu(z: Any) -> Any:
        return xp.maximum(z, 0.0)

    def ce(logits: Any, labels: np.ndarray) -> Any:
        z = logits - xp.max(logits, axis=-1, keepdims=True)
        logp = z - xp.log(xp.sum(xp.exp(z), axis=-1, keepdims=True))
        onehot = np.eye(logits.shape[-1], dtype=np.float32)[labels]
        return -xp.sum(logp * onehot) / logits.shape[0]

    if workload == "W1":
        def chain(ps: Sequence[Any]) -> Any:
            h, y = ps
            for i in range(CHAIN_OPS // 4):
                h = xp.tanh((h + y) * y)
                h = relu(h) if i % 2 else xp.tanh(h)
            return xp.sum(h)
        return chain
    if workload in ("W2", "W4"):
        x, labels = data["x"], data["labels"]

        def mlp(ps: Sequence[Any]) -> Any:
            w1, b1, w2, b2, w3, b3 = ps
            h = relu(x @ w1.T + b1)
            h = relu(h @ w2.T + b2)
            return ce(h @ w3.T + b3, labels)
        return mlp
    if workload == "W3":
        x, labels = data["x"], data["labels"]

        def pool(h: Any) -> Any:
            n, c, hh, ww = h.shape
            return xp.max(h.reshape(n, c, hh // 2, 2, ww // 2, 2), axis=(3, 5))

        def cnn(ps: Sequence[Any]) -> Any:
            w1, b1, w2, b2, w3, b3 = ps
            h = pool(relu(conv(x, w1) + b1[None, :, None, None]))
            h = pool(relu(conv(h, w2) + b2[None, :, None, None]))
            return ce(h.reshape(h.shape[0], -1) @ w3.T + b3, labels)
        return cnn
    x, target = data["x"], data["target"]

    def ln(z: Any, g: Any, b: Any) -> Any:
        mu = xp.mean(z, axis=-1, keepdims=True)
        var = xp.mean((z - mu) ** 2, axis=-1, keepdims=True)
        return (z - mu) / xp.sqrt(var + EPS) * g + b

    def gelu(z: Any) -> Any:
        return 0.5 * z * (1.0 + xp.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z ** 3)))

    def block(ps: Sequence[Any]) -> Any:
        g1, be1, wq, wk, wv, wo, g2, be2, m1, c1, m2, c2 = ps
        b, n, dm = x.shape
        d = dm // HEADS

        def heads(m: Any) -> Any:
            return xp.transpose(xp.reshape(m, (b, n, HEADS, d)), (0, 2, 1, 3))

        a = ln(x, g1, be1)
        q, k, v = heads(a @ wq), heads(a @ wk), heads(a @ wv)
        s = xp.einsum("bhnd,bhmd->bhnm", q, k) / np.sqrt(d)
        s = s - xp.max(s, axis=-1, keepdims=True)
        e = xp.exp(s)
        p = e / xp.sum(e, axis=-1, keepdims=True)
        o = xp.reshape(xp.transpose(xp.einsum("bhnm,bhmd->bhnd", p, v), (0, 2, 1, 3)),
                       (b, n, dm))
        h = x + o @ wo
        u = gelu(ln(h, g2, be2) @ m1.T + c1)
        return xp.mean((h + u @ m2.T + c2 - target) ** 2)
    return block


def build_jax(workload: str, data: dict[str, Any]) -> Impl:
    import jax
    import jax.numpy as jnp

    def conv(x: Any, w: Any) -> Any:
        return jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)))

    loss = _np_style_loss(jnp, workload, data, conv)
    params = [jnp.asarray(p) for p in data["params"]]
    value_and_grad = jax.jit(jax.value_and_grad(loss))
    if workload == "W4":
        vs = [jnp.asarray(v) for v in data["v"]]
        hvp = jax.jit(lambda ps, ts: jax.jvp(jax.grad(loss), (ps,), (ts,))[1])

        def run() -> Any:
            return jax.block_until_ready(hvp(params, vs))
        return Impl(run, lambda: (float("nan"), [np.asarray(g) for g in run()]),
                    note="jit(jvp(grad))")
    if workload == "W1":
        def step() -> Any:
            return jax.block_until_ready(value_and_grad(params))
    else:
        @jax.jit
        def sgd(ps: list[Any]) -> tuple[Any, list[Any]]:
            value, grads = jax.value_and_grad(loss)(ps)
            return value, [p - LR * g for p, g in zip(ps, grads, strict=True)]

        state = [params]

        def step() -> Any:
            value, state[0] = sgd(state[0])
            return jax.block_until_ready(value)

    def check() -> tuple[float, list[np.ndarray]]:
        value, grads = value_and_grad(params)
        return float(value), [np.asarray(g) for g in grads]
    return Impl(step, check, note="jit")


def build_autograd(workload: str, data: dict[str, Any]) -> Impl | str:
    if workload == "W3":
        return "HIPS autograd has no convolution primitive"
    import autograd
    import autograd.numpy as anp

    loss = _np_style_loss(anp, workload, data)
    params = [p.copy() for p in data["params"]]
    if workload == "W4":
        grad = autograd.grad(loss)
        vs = list(data["v"])

        def dot_grad(ps: list[Any]) -> Any:
            return sum(anp.sum(g * v) for g, v in zip(grad(ps), vs, strict=True))

        hvp = autograd.grad(dot_grad)

        def run() -> Any:
            return hvp(params)
        return Impl(run, lambda: (float("nan"), [np.asarray(g) for g in run()]),
                    note="reverse-over-reverse")
    value_and_grad = autograd.value_and_grad(loss)
    if workload == "W1":
        def step() -> Any:
            return value_and_grad(params)
    else:
        def step() -> Any:
            value, grads = value_and_grad(params)
            for p, g in zip(params, grads, strict=True):
                p -= np.float32(LR) * g
            return value

    def check() -> tuple[float, list[np.ndarray]]:
        value, grads = value_and_grad(params)
        return float(value), [np.asarray(g) for g in grads]
    return Impl(step, check)


# ---------------------------------------------------------------------------------------------
# NumPy by hand, no tape: the floor
# ---------------------------------------------------------------------------------------------

def _np_ce(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=1, keepdims=True)
    n = logits.shape[0]
    loss = float(np.log(s[:, 0]).sum() - z[np.arange(n), labels].sum()) / n
    g = e / s
    g[np.arange(n), labels] -= 1.0
    g *= np.float32(1.0 / n)
    return loss, g


def _np_conv_same(x: np.ndarray, w: np.ndarray, b: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """'Same' 3x3 convolution by im2col + one GEMM; returns (output, the im2col matrix)."""
    n, c, hh, ww = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n c h w 3 3
    cols = np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4, 5)).reshape(n * hh * ww, c * 9)
    out = cols @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, hh, ww, -1).transpose(0, 3, 1, 2), cols


def _np_conv_back(g: np.ndarray, cols: np.ndarray, w: np.ndarray, x_shape: tuple[int, ...],
                  need_x: bool) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    n, c, hh, ww = x_shape
    g2 = g.transpose(0, 2, 3, 1).reshape(n * hh * ww, -1)
    gw = (g2.T @ cols).reshape(w.shape)
    gb = g2.sum(axis=0)
    if not need_x:
        return None, gw, gb
    gcols = (g2 @ w.reshape(w.shape[0], -1)).reshape(n, hh, ww, c, 3, 3)
    gxp = np.zeros((n, c, hh + 2, ww + 2), np.float32)
    for i in range(3):
        for j in range(3):
            gxp[:, :, i:i + hh, j:j + ww] += gcols[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return gxp[:, :, 1:-1, 1:-1], gw, gb


def _np_pool(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, c, hh, ww = h.shape
    r = h.reshape(n, c, hh // 2, 2, ww // 2, 2)
    m = r.max(axis=(3, 5))
    return m, r == m[:, :, :, None, :, None]


def _np_pool_back(g: np.ndarray, mask: np.ndarray) -> np.ndarray:
    n, c, h2, _, w2, _ = mask.shape
    return (mask * g[:, :, :, None, :, None]).reshape(n, c, h2 * 2, w2 * 2)


def build_numpy(workload: str, data: dict[str, Any]) -> Impl | str:
    if workload in ("W4", "W5"):
        return "no hand-written NumPy version (the floor is for W1-W3)"
    params = [p.copy() for p in data["params"]]
    if workload == "W1":
        def grads_w1() -> tuple[float, list[np.ndarray]]:
            h, y = params
            saved = []
            for i in range(CHAIN_OPS // 4):
                a = h + y
                t = np.tanh(a * y)
                h = np.maximum(t, 0.0) if i % 2 else np.tanh(t)
                saved.append((a, t, h))
            gh = np.ones_like(h)
            gy = np.zeros_like(y)
            for i in range(CHAIN_OPS // 4 - 1, -1, -1):
                a, t, out = saved[i]
                gt = gh * (t > 0) if i % 2 else gh * (1 - out * out)
                gm = gt * (1 - t * t)
                gy += gm * a
                ga = gm * y
                gy += ga
                gh = ga
            return float(h.sum()), [gh, gy]
        return Impl(grads_w1, grads_w1)
    x, labels = data["x"], data["labels"]
    if workload == "W2":
        def grads_w2() -> tuple[float, list[np.ndarray]]:
            w1, b1, w2, b2, w3, b3 = params
            h1 = np.maximum(x @ w1.T + b1, 0.0)
            h2 = np.maximum(h1 @ w2.T + b2, 0.0)
            loss, g = _np_ce(h2 @ w3.T + b3, labels)
            gw3, gb3 = g.T @ h2, g.sum(axis=0)
            g = (g @ w3) * (h2 > 0)
            gw2, gb2 = g.T @ h1, g.sum(axis=0)
            g = (g @ w2) * (h1 > 0)
            return loss, [g.T @ x, g.sum(axis=0), gw2, gb2, gw3, gb3]
        grads = grads_w2
    else:
        def grads_w3() -> tuple[float, list[np.ndarray]]:
            w1, b1, w2, b2, w3, b3 = params
            c1, cols1 = _np_conv_same(x, w1, b1)
            r1 = np.maximum(c1, 0.0)
            p1, m1 = _np_pool(r1)
            c2, cols2 = _np_conv_same(p1, w2, b2)
            r2 = np.maximum(c2, 0.0)
            p2, m2 = _np_pool(r2)
            flat = p2.reshape(p2.shape[0], -1)
            loss, g = _np_ce(flat @ w3.T + b3, labels)
            gw3, gb3 = g.T @ flat, g.sum(axis=0)
            g4 = _np_pool_back((g @ w3).reshape(p2.shape), m2) * (c2 > 0)
            gp1, gw2, gb2 = _np_conv_back(g4, cols2, w2, p1.shape, True)
            assert gp1 is not None
            g1 = _np_pool_back(gp1, m1) * (c1 > 0)
            _, gw1, gb1 = _np_conv_back(g1, cols1, w1, x.shape, False)
            return loss, [gw1, gb1, gw2, gb2, gw3, gb3]
        grads = grads_w3

    def step() -> float:
        loss, gs = grads()
        for p, g in zip(params, gs, strict=True):
            p -= np.float32(LR) * g
        return loss
    return Impl(step, grads)


# ---------------------------------------------------------------------------------------------
# Building, agreement, timing
# ---------------------------------------------------------------------------------------------

def build(workload: str, framework: str, data: dict[str, Any]) -> Impl | str:
    """The workload in one framework, or a note saying why it is not available."""
    try:
        if framework == "torchlean-eager":
            return build_torchlean(workload, data, "eager")
        if framework == "torchlean-compiled":
            return build_torchlean(workload, data, "compiled")
        if framework == "torchlean-tensors":
            return build_tensors(workload, data)
        if framework == "torchlean-interpreted":
            return build_torchlean(workload, data, "compiled", codegen=False)
        if framework == "torch":
            return build_torch(workload, data)
        if framework == "jax":
            return build_jax(workload, data)
        if framework == "autograd":
            return build_autograd(workload, data)
        if framework == "numpy":
            return build_numpy(workload, data)
    except ImportError as exc:
        return f"not installed ({exc.name})"
    raise BenchError(f"bench: unknown framework {framework!r}, expected one of {FRAMEWORKS}")


def _close(a: np.ndarray, b: np.ndarray, rtol: float) -> tuple[bool, float]:
    """Agreement of two float32 results relative to the reference's largest entry."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False, float("inf")
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    return err <= rtol * scale + 1e-6, err / (scale + 1e-30)


def agree(workload: str, results: dict[str, tuple[float, list[np.ndarray]]],
          rtol: float = 2e-3) -> dict[str, float]:
    """Compare every framework's (loss, gradients) with the reference; raise on disagreement.
    Returns each framework's largest relative gradient error."""
    ref_name = "torch" if "torch" in results else "torchlean-eager"
    if ref_name not in results:
        ref_name = next(iter(results))
    ref_loss, ref_grads = results[ref_name]
    errors: dict[str, float] = {}
    for name, (loss, grads) in results.items():
        if len(grads) != len(ref_grads):
            raise BenchError(f"bench {workload}: {name} returned {len(grads)} gradients, "
                             f"{ref_name} {len(ref_grads)}")
        if not np.isnan(ref_loss) and abs(loss - ref_loss) > rtol * max(1.0, abs(ref_loss)):
            raise BenchError(f"bench {workload}: {name} loss {loss!r} disagrees with "
                             f"{ref_name} {ref_loss!r}")
        worst = 0.0
        for k, (g, r) in enumerate(zip(grads, ref_grads, strict=True)):
            ok, rel = _close(g, r, rtol)
            if not ok:
                raise BenchError(f"bench {workload}: {name} gradient {k} disagrees with "
                                 f"{ref_name} (relative error {rel:.2e}, allowed {rtol:g})")
            worst = max(worst, rel)
        errors[name] = worst
    return errors


def run_agreement(workloads: Sequence[str] = WORKLOADS,
                  frameworks: Sequence[str] = FRAMEWORKS
                  ) -> dict[str, dict[str, float | str]]:
    """Build every workload in every installed framework, run each step once, and check
    agreement. Returns per workload: framework -> largest relative error, or a note."""
    out: dict[str, dict[str, float | str]] = {}
    for w in workloads:
        data = make_data(w)
        results: dict[str, tuple[float, list[np.ndarray]]] = {}
        notes: dict[str, float | str] = {}
        for fw in frameworks:
            impl = build(w, fw, data)
            if isinstance(impl, str):
                notes[fw] = impl
                continue
            results[fw] = impl.check()
            impl.step()
            for fn in impl.extra.values():
                fn()
        notes.update(agree(w, results))
        out[w] = notes
    return out


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@dataclass
class Timing:
    """Seconds per step of each round, and minor page faults per step of each round."""

    seconds: list[float] = field(default_factory=list)
    faults: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        s = np.asarray(self.seconds) * 1e3
        return {"median_ms": float(np.median(s)), "min_ms": float(s.min()),
                "max_ms": float(s.max()), "faults_per_step": float(np.median(self.faults)),
                "rounds": len(self.seconds)}


# What ``--clock`` reads: wall time, or this process's CPU time (every thread's, so at 1 thread
# it is the step's own work, unswollen by other processes on a shared machine).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


# Above one thread, the pause before each timed block (seconds, untimed): the previous block's
# thread pools (OpenBLAS workers spin about 0.1 s after a call, OpenMP's a while) go idle first,
# so no framework is timed against another one's spinning workers. Without it, on 2 cores at 2
# threads, PyTorch's W2 step measured 12.2 ms against 10.2 ms at one thread.
SETTLE_S = 0.25
# After the pause, this many untimed steps of the block's own entry: they wake the pools the
# pause let sleep and refill the caches, so the block times steady steps, not a cold start.
# Without it (Intel Xeon, 2 cores, 2 threads, 9 rounds) the pause's wake-up cost swelled every
# framework's first steps unevenly: PyTorch's W3 step 5.0 ms against 3.7 with it (3.5 over 50
# steps in a row), W5's 3.5 against 1.5, which made torchlean's ratios look 10-40% better than
# in steady state.
REWARM = 1


def time_interleaved(steps: dict[str, Callable[[], Any]], block: int, rounds: int,
                     warmup: int = 2, seed: int = 0, sync: Callable[[], Any] | None = None,
                     clock: str = "wall", settle: float = 0.0) -> dict[str, dict[str, float]]:
    """Warm up every step, then ``rounds`` rounds; each round runs a block of ``block`` steps
    of every entry in a shuffled order. Medians and min-max over rounds. ``sync`` (the GPU
    benchmark: wait for the device) is called before each block's clock starts and before it
    stops, so a block's time includes all the device work it queued. ``clock``: a key of
    ``CLOCKS``; ``settle``: seconds to sleep before each block (``SETTLE_S``), then ``REWARM``
    untimed steps of the block's entry."""
    now = CLOCKS[clock]
    wait = sync or (lambda: None)
    for fn in steps.values():
        for _ in range(warmup):
            fn()
    timings = {name: Timing() for name in steps}
    order = list(steps)
    shuffle = random.Random(seed)
    for _ in range(rounds):
        shuffle.shuffle(order)
        for name in order:
            fn = steps[name]
            if settle:
                time.sleep(settle)
                for _ in range(REWARM):
                    fn()  # (untimed: wakes the pools the pause let sleep)
            wait()
            f0 = _faults()
            t0 = now()
            for _ in range(block):
                fn()
            wait()
            t1 = now()
            timings[name].seconds.append((t1 - t0) / block)
            timings[name].faults.append((_faults() - f0) / block)
    return {name: t.summary() for name, t in timings.items()}


def step_table(title: str, times: dict[str, dict[str, float]], ref: str = "torch") -> str:
    """``time_interleaved``'s medians as lines under ``title``, each with its ratio to ``ref``'s
    median where ``ref`` was timed (the side-by-side benchmarks' one-table output)."""
    base = times[ref]["median_ms"] if ref in times else None
    width = max(len(name) for name in times) + 2
    lines = [title]
    for name, t in times.items():
        m = t["median_ms"]
        ratio = f"  {m / base:.3f}x {ref}" if base else ""
        lines.append(f"  {name:<{width}}{m:8.3f} ms{ratio}")
    return "\n".join(lines)


def pin_threads(threads: int) -> Any:
    """Pin BLAS (threadpoolctl) and PyTorch to ``threads`` (SciPy's own BLAS pool, if loaded,
    back to one); returns the threadpoolctl limiter (keep it alive) or None. JAX's XLA pool
    follows the cores available (2 here)."""
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    limiter = threadpool_limits(limits=threads, user_api="blas")
    # torchlean's own rule after a limit on every library: SciPy's second OpenBLAS pool (the
    # fast kernels' axpy) stays at one thread, never spinning against NumPy's (ops.fast.blas).
    fast_blas.hold_serial()
    return limiter


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    parts = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} "
             f"({i.get('num_threads')} threads, {os.path.basename(i.get('filepath', ''))})"
             for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(parts) or "no BLAS found by threadpoolctl"


def machine_info() -> dict[str, Any]:
    return {"python": platform.python_version(), "numpy": np.__version__,
            "machine": platform.machine(), "processor": platform.processor() or "",
            "cpus": os.cpu_count(), "load_average": list(os.getloadavg()),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
            "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE", "(unset)"),
            "blas": blas_info()}


def bench_workload(workload: str, frameworks: Sequence[str], rounds: int, check: bool = True,
                   clock: str = "wall", threads: int = 1) -> dict[str, Any]:
    """Build, check agreement (unless ``check`` is false) and time one workload on ``clock``
    (``CLOCKS``); above one thread each block waits ``SETTLE_S`` first."""
    data = make_data(workload)
    impls: dict[str, Impl] = {}
    notes: dict[str, str] = {}
    for fw in frameworks:
        impl = build(workload, fw, data)
        if isinstance(impl, str):
            notes[fw] = impl
        else:
            impls[fw] = impl
    if not impls:
        reasons = "; ".join(f"{fw}: {why}" for fw, why in notes.items())
        raise BenchError(f"bench {workload}: none of the frameworks asked for can run here "
                         f"({reasons})")
    errors: dict[str, float] = {}
    if check:
        errors = agree(workload, {fw: impl.check() for fw, impl in impls.items()})
    steps: dict[str, Callable[[], Any]] = {fw: impl.step for fw, impl in impls.items()}
    for impl in impls.values():
        steps.update(impl.extra)
    times = time_interleaved(steps, BLOCK[workload], rounds, clock=clock,
                             settle=SETTLE_S if threads > 1 else 0.0)
    for fw, impl in impls.items():
        if impl.note:
            times[fw]["note"] = impl.note  # type: ignore[assignment]
    return {"title": TITLES[workload], "times": times, "notes": notes, "max_rel_err": errors}


# ---------------------------------------------------------------------------------------------
# Isolated runs (fresh processes with only NumPy and torchlean loaded) and peak memory
# ---------------------------------------------------------------------------------------------

def peak_rss_mib() -> float:
    """This process's peak resident set (VmHWM). Not ru_maxrss: that survives execve, so a child
    would report its parent's peak."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _spawn(extra: list[str], threads: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "torchlean", "bench", "--threads", str(threads), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"bench --isolated: child {' '.join(extra)} failed: "
                         f"{proc.stderr.strip()[-500:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def run_isolated(workloads: Sequence[str], frameworks: Sequence[str], rounds: int,
                 threads: int, clock: str = "wall") -> dict[str, Any]:
    tl_fws = [f for f in frameworks if f.startswith("torchlean")]
    # The NumPy floor runs in the same fresh process (it loads nothing but NumPy), so isolated
    # ratios are taken at the same moment: on a shared machine the load moves between runs.
    got = _spawn(["--child", "time", "--frameworks", ",".join([*tl_fws, "numpy"]),
                  "--workloads", ",".join(workloads), "--rounds", str(rounds),
                  "--clock", clock], threads)
    times: dict[str, dict[str, Any]] = {w: got[w] for w in workloads}
    memory: dict[str, Any] = {}
    for fw in [*tl_fws, "torch", "numpy"]:
        got = _spawn(["--child", "memory", "--frameworks", fw], threads)
        memory[fw] = got.get("peak_mib", got.get("note"))
    return {"times": times, "peak_memory_mib_200_W2_steps": memory}


# ---------------------------------------------------------------------------------------------
# The main job side by side: ``torchlean train`` (digits MLP and CNN) and the same training in
# PyTorch, each in a fresh process with one thread
# ---------------------------------------------------------------------------------------------

MAIN_JOBS = ("mlp", "cnn")
# Peak memory of a fresh process over 200 W2 steps before issue 26 (README, Performance): the
# issue's bound for "peak memory no higher than today". That run's NumPy floor was 239 MiB; what
# a fresh process holds before any step depends on the environment (280 MiB for the same floor
# with this project's current dependencies), so where this run measured the floor the bound is
# the margin above it then (``PEAK_MIB_BEFORE - FLOOR_MIB_BEFORE``), not the absolute figure.
PEAK_MIB_BEFORE = {"torchlean-eager": 241.0, "torchlean-compiled": 240.0}
FLOOR_MIB_BEFORE = 239.0
_ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def torch_main_job(model_name: str, epochs: int | None = None, seed: int = 0) -> dict[str, Any]:
    """``torchlean train --model M --dataset digits`` redone in PyTorch: the same split, initial
    weights (copied from the torchlean model the command builds), optimiser (the recipe's Adam
    and learning rate, cosine decay per epoch), batch size and epochs, a test evaluation after
    every epoch as ``fit`` does; one thread. Returns the training seconds and test accuracy."""
    import torch

    torch.set_num_threads(1)
    recipe = models.RECIPES[(model_name, "digits")]
    if recipe["optimizer"] != "adam":
        raise BenchError(f"bench main job: the {model_name} recipe uses {recipe['optimizer']}, "
                         "which this replica does not mirror")
    data = trained.load_data(model_name, "digits", seed)
    config = models.config_for(model_name, data, seed=seed)
    reference = models.build(config)
    nn = torch.nn
    if model_name == "mlp":
        sizes = [int(config["in_features"]), *config["hidden"]]
        layers: list[Any] = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
        net = nn.Sequential(*layers, nn.Linear(sizes[-1], int(config["num_classes"])))
    else:
        c_in, height, width = config["image_shape"]
        c1, c2 = config["channels"]
        net = nn.Sequential(nn.Conv2d(c_in, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Flatten(),
                            nn.Linear(c2 * (height // 4) * (width // 4),
                                      int(config["num_classes"])))
    with torch.no_grad():
        for theirs, ours in zip(net.parameters(), reference.parameters(), strict=True):
            value = np.asarray(to_host(ours.array), dtype=np.float32)
            if tuple(theirs.shape) != value.shape:
                raise BenchError(f"bench main job: parameter shapes differ, {tuple(theirs.shape)}"
                                 f" vs {value.shape}")
            theirs.copy_(torch.from_numpy(value))
    n_epochs = epochs or int(recipe["epochs"])
    lr, batch = float(recipe["lr"]), int(recipe["batch_size"])
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    x = torch.from_numpy(np.asarray(data.train.inputs, dtype=np.float32))
    y = torch.from_numpy(np.asarray(data.train.targets, dtype=np.int64))
    tx = torch.from_numpy(np.asarray(data.test.inputs, dtype=np.float32))
    ty = torch.from_numpy(np.asarray(data.test.targets, dtype=np.int64))
    rng = np.random.default_rng(seed)
    accuracy = float("nan")
    start = time.perf_counter()
    for epoch in range(1, n_epochs + 1):
        order = torch.from_numpy(rng.permutation(len(x)))
        for k in range(0, len(x), batch):
            idx = order[k:k + batch]
            loss = torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            logits = net(tx)
            torch.nn.functional.cross_entropy(logits, ty)
            accuracy = float((logits.argmax(1) == ty).float().mean())
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1.0 + np.cos(np.pi * epoch / n_epochs))
    return {"seconds": time.perf_counter() - start, "accuracy": accuracy, "epochs": n_epochs}


def _run_json(cmd: list[str], what: str) -> dict[str, Any]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          env={**os.environ, **_ONE_THREAD})
    if proc.returncode != 0:
        raise BenchError(f"bench main job: {what} failed: {proc.stderr.strip()[-500:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _torchlean_main_job(model_name: str, epochs: int | None, backend: str) -> dict[str, Any]:
    """One run of the real command, ``torchlean train``, in a fresh one-thread process."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "metrics.json")
        cmd = [sys.executable, "-m", "torchlean", "train", "--model", model_name, "--dataset",
               "digits", "--backend", backend, "--json", path]
        if epochs:
            cmd += ["--epochs", str(epochs)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                              env={**os.environ, **_ONE_THREAD})
        if proc.returncode != 0:
            raise BenchError(f"bench main job: torchlean train {model_name} failed: "
                             f"{proc.stderr.strip()[-500:]}")
        with open(path, encoding="utf-8") as fh:
            summary = json.load(fh)
    return {"seconds": float(summary["seconds"]),
            "accuracy": float(summary["final"].get("test_accuracy") or float("nan")),
            "epochs": int(summary["epochs_run"])}


def has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def format_main_jobs(main: dict[str, Any]) -> str:
    """The main-job table: training seconds (median, min-max) and test accuracy per side."""
    lines = ["main job side by side (torchlean train --dataset digits vs the same training in "
             "PyTorch; fresh processes, 1 thread, median training seconds):"]
    for name, sides in main.items():
        base = sides.get("torch")
        for side, r in sides.items():
            ratio = f"{r['median_s'] / base['median_s']:.2f}x" if base else "-"
            lines.append(f"  {name:<5}{side:<22}{r['median_s']:>8.2f} s  "
                         f"({r['min_s']:.2f}-{r['max_s']:.2f})  x torch {ratio:>6}  "
                         f"test acc {r['accuracy']:.3f}  ({r['epochs']} epochs, "
                         f"{r['rounds']} rounds)")
    cnn = main.get("cnn", {})
    if "torch" in cnn:
        for side in ("torchlean-eager", "torchlean-compiled"):
            r = cnn[side]["median_s"] / cnn["torch"]["median_s"]
            lines.append(f"  target: digits CNN {side} no slower than PyTorch: {r:.2f}x: "
                         f"{'met' if r <= 1.0 else f'missed by {r:.2f}x'}")
    return "\n".join(lines)


def main_jobs(names: Sequence[str] = MAIN_JOBS, rounds: int = 3, epochs: int | None = None,
              torch_available: bool = True) -> dict[str, Any]:
    """Each main job ``rounds`` times per side, interleaved (torchlean eager, torchlean
    compiled, PyTorch, in a shuffled order each round); medians of the training seconds (the
    command's own ``seconds``: data loaded, model built, then ``fit`` with its per-epoch test
    evaluation, against the same loop in PyTorch) and the last round's test accuracy."""
    out: dict[str, Any] = {}
    shuffle = random.Random(0)
    for name in names:
        runs: dict[str, list[dict[str, Any]]] = {"torchlean-eager": [],
                                                 "torchlean-compiled": []}
        if torch_available:
            runs["torch"] = []
        for _ in range(rounds):
            order = list(runs)
            shuffle.shuffle(order)
            for side in order:
                if side == "torch":
                    got = _run_json([sys.executable, "-m", "torchlean", "bench", "--child",
                                     "main", "--main-jobs", name, "--main-epochs",
                                     str(epochs or 0)], "PyTorch replica")
                else:
                    got = _torchlean_main_job(name, epochs, side.split("-")[1])
                runs[side].append(got)
        out[name] = {side: {"median_s": float(np.median([r["seconds"] for r in rs])),
                            "min_s": float(min(r["seconds"] for r in rs)),
                            "max_s": float(max(r["seconds"] for r in rs)),
                            "accuracy": rs[-1]["accuracy"], "epochs": rs[-1]["epochs"],
                            "rounds": len(rs)}
                     for side, rs in runs.items()}
    return out


# ---------------------------------------------------------------------------------------------
# GPU (--device cuda): torchlean eager, compiled and compiled + CUDA graph vs PyTorch CUDA eager
# ---------------------------------------------------------------------------------------------

GPU_WORKLOADS = ("W2", "W3", "W5")
GPU_FRAMEWORKS = ("torchlean-eager", "torchlean-compiled", "torchlean-graph", "torch")


def _device_sync(xp: Any) -> Callable[[], None]:
    """Wait for all work on the device (every stream, CuPy's and PyTorch's); nothing to wait
    for on a namespace that is not real CuPy (the tests' stand-in device)."""

    if not is_cupy(xp):
        return lambda: None
    return xp.cuda.runtime.deviceSynchronize  # type: ignore[no-any-return]


def build_torchlean_gpu(workload: str, data: dict[str, Any], variant: str, xp: Any) -> Impl:
    """torchlean on the device: parameters and the batch uploaded once, then ``Stepper`` (the
    path of ``fit``) and ``tl.optim.SGD`` on the device. ``variant`` is "eager", "compiled", or
    "graph" (the compiled step replayed from a CUDA graph, ``cuda_graph.maybe_graphed``). A step
    leaves its loss on the device: no host transfer inside the timed loop."""

    loss = _tl_loss(workload, data)
    params = [Param(to_device(p, xp)) for p in data["params"]]
    inputs = [to_device(x, xp) for x in _tl_inputs(workload, data)]

    def fn(owner: Any, *refs: Any) -> Any:
        return loss(*[owner.use(p) for p in params], *refs)

    stepper = Stepper(fn, Options(backend="eager" if variant == "eager" else "compiled",
                                  device="cuda"))
    opt = optim.SGD(params, lr=LR)

    def grads_now() -> tuple[Any, list[Any]]:
        if variant == "graph":
            c = stepper.compiled_for(inputs)
            value, grads = maybe_graphed(c, inputs)
            by_param = dict(zip(map(id, c.params), grads[len(inputs):], strict=True))
        else:
            value, pairs = stepper.value_and_grads(inputs)
            by_param = {id(p): g for p, g in pairs}
        return value, [by_param.get(id(p)) for p in params]

    def step() -> Any:
        value, grads = grads_now()
        opt.step(grads)
        return value

    def check() -> tuple[float, list[np.ndarray]]:
        value, grads = grads_now()
        return float(to_host(value)), [to_host(g) for g in grads]

    note = {"eager": "", "compiled": "", "graph": "CUDA graph"}[variant]
    return Impl(step, check, note=note)


def build_torch_cuda(workload: str, data: dict[str, Any]) -> Impl | str:
    """PyTorch CUDA eager: the CPU benchmark's step with parameters and data on the GPU."""
    import torch

    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} has no CUDA here"
    loss = _torch_loss(torch, workload, data, device="cuda")
    params = [torch.tensor(p, device="cuda", requires_grad=True) for p in data["params"]]
    return _torch_sgd_impl(torch, loss, params, note="CUDA eager")


def build_gpu(workload: str, framework: str, data: dict[str, Any], xp: Any) -> Impl | str:
    try:
        if framework.startswith("torchlean-"):
            return build_torchlean_gpu(workload, data, framework.removeprefix("torchlean-"), xp)
        if framework == "torch":
            return build_torch_cuda(workload, data)
    except ImportError as exc:
        return f"not installed ({exc.name})"
    raise BenchError(f"bench --device cuda: unknown framework {framework!r}, expected one of "
                     f"{GPU_FRAMEWORKS}")


def gpu_info(xp: Any) -> str:

    if not is_cupy(xp):
        return f"{getattr(xp, '__name__', type(xp).__name__)} (not a real GPU)"
    props = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    free, total = xp.cuda.runtime.memGetInfo()
    return (f"{name}, {total / 2**30:.0f} GiB, CUDA runtime {xp.cuda.runtime.runtimeGetVersion()},"
            f" CuPy {xp.__version__}")


def bench_workload_gpu(workload: str, frameworks: Sequence[str], rounds: int, xp: Any
                       ) -> dict[str, Any]:
    """Build, check agreement and time one workload on the device (synchronised timing)."""
    data = make_data(workload)
    impls: dict[str, Impl] = {}
    notes: dict[str, str] = {}
    for fw in frameworks:
        impl = build_gpu(workload, fw, data, xp)
        if isinstance(impl, str):
            notes[fw] = impl
        else:
            impls[fw] = impl
    errors = agree(workload, {fw: impl.check() for fw, impl in impls.items()})
    times = time_interleaved({fw: impl.step for fw, impl in impls.items()}, BLOCK[workload],
                             rounds, sync=_device_sync(xp))
    for fw, impl in impls.items():
        if impl.note:
            times[fw]["note"] = impl.note  # type: ignore[assignment]
    return {"title": TITLES[workload], "times": times, "notes": notes, "max_rel_err": errors}


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

def _ratio(t: dict[str, Any], base: dict[str, Any] | None) -> str:
    if base is None:
        return "-"
    return f"{t['median_ms'] / base['median_ms']:.2f}x"


def _iso_ratio(t: dict[str, Any], base: dict[str, Any] | None, iso_floor: Any,
               floor: Any) -> float | None:
    """An isolated time over an in-process ``base``. Where both runs timed the NumPy floor,
    go through it (isolated / isolated floor x in-process floor / base), so that the load
    change between the two runs cancels; otherwise the direct ratio."""
    if base is None:
        return None
    if iso_floor is not None and floor is not None:
        return (t["median_ms"] / iso_floor["median_ms"]) * (floor["median_ms"]
                                                            / base["median_ms"])
    return float(t["median_ms"] / base["median_ms"])


def _baseline(workload: str, times: dict[str, Any]) -> dict[str, Any] | None:
    """PyTorch's time: for W4 the faster of torch.func jvp(grad) and double backward."""
    cands = [times[k] for k in ("torch", "torch double backward") if k in times]
    return min(cands, key=lambda t: t["median_ms"]) if cands else None


def format_report(result: dict[str, Any]) -> str:
    lines: list[str] = []
    m = result["machine"]
    lines.append(f"torchlean bench: python {m['python']}, numpy {m['numpy']}, {m['machine']}, "
                 f"{m['cpus']} CPUs, threads {result['threads']}, rounds {result['rounds']}")
    lines.append(f"BLAS: {m['blas']}; OPENBLAS_CORETYPE={m['OPENBLAS_CORETYPE']}, "
                 f"OPENBLAS_L2_SIZE={m['OPENBLAS_L2_SIZE']}")
    lines.append(f"GEMMs: NumPy's matmul; linear's fast forward: {fast_blas.describe()}")
    lines.append(f"max pooling (2x2, channels-last) as compiled loops: {pool_jit.describe()}")
    lines.append("load average at start {:.2f} {:.2f} {:.2f}; at end {:.2f} {:.2f} {:.2f}".format(
        *m["load_average"], *result["load_average_end"]))
    if result.get("clock", "wall") == "cpu":
        lines.append("clock: cpu (this process's CPU time, all threads: ms of CPU per step, not "
                     "of waiting; above 1 thread it sums the threads)")
    if result.get("device") == "cuda":
        lines.append(f"device cuda: {result['gpu']}; timing synchronises the device before "
                     "and after each block of steps")
    for w, res in result["workloads"].items():
        times = res["times"]
        base = _baseline(w, times)
        floor = times.get("numpy")
        lines.append("")
        lines.append(f"{w}: {res['title']}")
        lines.append(f"  {'framework':<30}{'median ms':>10}{'min-max ms':>18}{'x torch':>9}"
                     f"{'x numpy':>9}{'faults/step':>13}")
        iso = result.get("isolated", {}).get("times", {}).get(w, {})
        iso_floor = iso.get("numpy")
        rows = [(k, v, _ratio(v, base), _ratio(v, floor)) for k, v in times.items()]
        for k, v in iso.items():
            r = _iso_ratio(v, base, iso_floor, floor)
            rows.append((f"{k} (isolated)", v, "-" if r is None else f"{r:.2f}x",
                         _ratio(v, iso_floor if iso_floor is not None else floor)))
        for name, t, r_torch, r_floor in rows:
            label = name + (f" [{t['note']}]" if t.get("note") else "")
            lines.append(f"  {label:<30}{t['median_ms']:>10.3f}"
                         f"{t['min_ms']:>9.3f}-{t['max_ms']:<8.3f}{r_torch:>9}"
                         f"{r_floor:>9}{t['faults_per_step']:>13.0f}")
        for fw, note in res["notes"].items():
            lines.append(f"  {fw:<30}- ({note})")
        if res["max_rel_err"]:
            errs = ", ".join(f"{k} {v:.1e}" for k, v in res["max_rel_err"].items())
            lines.append(f"  agreement (max relative gradient error vs reference): {errs}")
    mem = result.get("isolated", {}).get("peak_memory_mib_200_W2_steps")
    if mem:
        lines.append("")
        lines.append("peak memory (max RSS) of a fresh process over 200 W2 steps: " + ", ".join(
            f"{k} {v:.0f} MiB" if isinstance(v, float) else f"{k} -" for k, v in mem.items()))
    lines.append("")
    lines.extend(targets(result))
    return "\n".join(lines)


def targets(result: dict[str, Any]) -> list[str]:
    """The issue's targets as met / missed lines (ratios of this run's medians)."""
    if result.get("device") == "cuda":
        return gpu_targets(result)
    out = ["targets (ratio to PyTorch eager in the same run):"]
    ws = result["workloads"]
    iso = result.get("isolated", {}).get("times", {})

    def check(label: str, w: str, fw: str, base_of: Callable[[dict[str, Any]], Any],
              limit: float) -> None:
        if w not in ws:
            return
        times = ws[w]["times"]
        base = base_of(times)
        if base is None:
            return
        for where, table in (("in-process", times), ("isolated", iso.get(w, {}))):
            if fw not in table:
                continue
            if where == "in-process":
                r = table[fw]["median_ms"] / base["median_ms"]
            elif base is times.get("numpy"):
                r = table[fw]["median_ms"] / table.get("numpy", base)["median_ms"]
            else:
                r = _iso_ratio(table[fw], base, table.get("numpy"), times.get("numpy")) or 0.0
            verdict = "met" if r <= limit else f"missed by {r / limit:.2f}x"
            out.append(f"  {label} ({where}): {r:.2f}x <= {limit}x: {verdict}")

    def torch_of(w: str) -> Callable[[dict[str, Any]], Any]:
        return lambda t: _baseline(w, t)

    def key(name: str) -> Callable[[dict[str, Any]], Any]:
        return lambda t: t.get(name)

    # Issue 26's targets.
    check("W1 eager vs torch", "W1", "torchlean-eager", torch_of("W1"), 0.8)
    check("W1 compiled vs torch", "W1", "torchlean-compiled", torch_of("W1"), 0.3)
    check("W2 eager vs torch", "W2", "torchlean-eager", torch_of("W2"), 0.9)
    check("W2 compiled vs torch", "W2", "torchlean-compiled", torch_of("W2"), 0.8)
    check("W2 compiled vs numpy floor", "W2", "torchlean-compiled", key("numpy"), 1.05)
    check("W3 eager vs torch", "W3", "torchlean-eager", torch_of("W3"), 1.0)
    check("W3 compiled vs torch", "W3", "torchlean-compiled", torch_of("W3"), 0.9)
    check("W4 eager hvp vs faster torch", "W4", "torchlean-eager", torch_of("W4"), 0.5)
    check("W4 compiled hvp vs faster torch", "W4", "torchlean-compiled", torch_of("W4"), 0.5)
    check("W4 compiled hvp vs JAX jit", "W4", "torchlean-compiled", key("jax"), 1.5)
    check("W5 eager vs torch", "W5", "torchlean-eager", torch_of("W5"), 1.0)
    check("W5 compiled vs torch", "W5", "torchlean-compiled", torch_of("W5"), 0.85)
    # PyTorch's code with the import changed (``tl.Tensor``): held to the eager targets.
    for w, limit in (("W1", 0.8), ("W2", 0.9), ("W3", 1.0), ("W4", 0.5), ("W5", 1.0)):
        check(f"{w} tensors vs torch", w, "torchlean-tensors", torch_of(w), limit)
    for w in ("W2", "W3", "W5"):
        for fw, t in iso.get(w, {}).items():
            if not fw.startswith("torchlean"):
                continue
            f = t["faults_per_step"]
            out.append(f"  {w} {fw} minor faults/step (isolated): {f:.0f} = 0: "
                       f"{'met' if f < 1 else 'missed'}")
    mem = result.get("isolated", {}).get("peak_memory_mib_200_W2_steps", {})
    if isinstance(mem.get("torch"), float):
        for fw in ("torchlean-eager", "torchlean-compiled"):
            if isinstance(mem.get(fw), float):
                out.append(f"  peak memory {fw} {mem[fw]:.0f} MiB <= torch {mem['torch']:.0f} "
                           f"MiB: {'met' if mem[fw] <= mem['torch'] else 'missed'}")
    floor = mem.get("numpy")
    for fw, before in PEAK_MIB_BEFORE.items():
        if not isinstance(mem.get(fw), float):
            continue
        if isinstance(floor, float):
            bound = floor + (before - FLOOR_MIB_BEFORE)
            ok = mem[fw] <= bound + 0.02 * floor
            out.append(f"  peak memory {fw} {mem[fw]:.0f} MiB no higher than before issue 26 "
                       f"(then {before - FLOOR_MIB_BEFORE:.0f} MiB above the NumPy floor; this "
                       f"run's floor {floor:.0f} MiB, bound {bound:.0f} MiB, +2% noise): "
                       f"{'met' if ok else 'missed'}")
        else:
            ok = mem[fw] <= before * 1.02
            out.append(f"  peak memory {fw} {mem[fw]:.0f} MiB no higher than before issue 26 "
                       f"({before:.0f} MiB, +2% noise; no NumPy floor measured in this run): "
                       f"{'met' if ok else 'missed'}")
    return out


def gpu_targets(result: dict[str, Any]) -> list[str]:
    """Issue 16's GPU targets: compiled + CUDA graph at most 1.0x PyTorch CUDA eager on W2 and
    W3, eager at most 2x (ratios of this run's medians)."""
    out = ["targets (issue 16, GPU):"]
    for w in ("W2", "W3"):
        times = result["workloads"].get(w, {}).get("times", {})
        base = times.get("torch")
        for fw, limit in (("torchlean-graph", 1.0), ("torchlean-eager", 2.0)):
            if base is None or fw not in times:
                continue
            r = times[fw]["median_ms"] / base["median_ms"]
            verdict = "met" if r <= limit else f"missed by {r / limit:.2f}x"
            out.append(f"  {w} {fw} vs torch CUDA eager: {r:.2f}x <= {limit}x: {verdict}")
    if len(out) == 1:
        out.append("  (no PyTorch CUDA timing in this run: no ratios)")
    return out
