"""Real-GPU tests (marker ``gpu``): the same comparisons as the stand-in device suite, on CuPy.

Skipped as a whole, with the reason, where ``backend.namespace_for("cuda")`` raises
``DeviceError`` (no CuPy, or no usable GPU). On a GPU machine they check: every registered
primitive's forward, VJP and JVP against the CPU within 1e-4 in float32; random bits (the
counter-based SplitMix64 stream) bitwise equal to the CPU's; short MLP, CNN and transformer
trainings against the CPU within 1e-4, with each parameter uploaded once; a compiled step
replayed from a CUDA graph equal to the plain compiled step; device memory flat over 10,000
steps; and ``torchlean train --device cuda`` for every default model.

``TORCHLEAN_GPU_DRY_RUN=1`` runs these tests on the strict stand-in device instead (a check of
the test code itself where there is no GPU; it proves nothing about CuPy). Tests that need
CuPy's own machinery (its memory pool) skip in a dry run, saying so.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean import cli, optim
from torchlean.core import backend
from torchlean.core.backend import is_cupy, to_device, to_host
from torchlean.core.errors import DeviceError
from torchlean.core.registry import ARRAY_OPS, REGISTRY, Primitive
from torchlean.engine.params import Param
from torchlean.training import cuda_graph
from torchlean.training.fit import fit
from torchlean.zoo import datasets, models

pytestmark = pytest.mark.gpu

DRY_RUN = os.environ.get("TORCHLEAN_GPU_DRY_RUN") == "1"
RTOL = 1e-4  # CPU vs GPU in float32: different kernels, different summation orders
SEED = 7


def _no_gpu_reason() -> str | None:
    if DRY_RUN:
        return None
    try:
        backend.namespace_for("cuda")
    except DeviceError as exc:
        if importlib.util.find_spec("cupy") is None:
            return "CuPy not installed"
        return f"no CUDA GPU: {exc}"
    return None


_REASON = _no_gpu_reason()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)


@pytest.fixture
def xp() -> Iterator[Any]:
    """The device namespace: CuPy, or in a dry run the strict stand-in (active for the test)."""
    if DRY_RUN:
        from strict_device import strict_cuda

        with strict_cuda() as ns:
            yield ns
        return
    yield backend.namespace_for("cuda")


def _sync(xp: Any) -> None:
    if is_cupy(xp):
        xp.cuda.get_current_stream().synchronize()


def _is_device(x: Any, xp: Any) -> bool:
    return backend.namespace_of(x) is xp


def _close(got: Any, want: Any, what: str, rtol: float = RTOL) -> None:
    """``got`` (a device array) equals ``want`` (host) within ``rtol`` of the largest entry."""
    want = np.asarray(want)
    host = to_host(got)
    assert host.shape == want.shape, f"{what}: shape {host.shape} vs {want.shape}"
    if want.dtype.kind not in "fc":
        np.testing.assert_array_equal(host, want, err_msg=what)
        return
    scale = max(1.0, float(np.max(np.abs(want[np.isfinite(want)]), initial=0.0)))
    np.testing.assert_allclose(host, want, rtol=rtol, atol=rtol * scale, err_msg=what)


def _close_tree(got: Any, want: Any, what: str, rtol: float = RTOL) -> None:
    if want is None:
        assert got is None, what
        return
    if isinstance(want, tuple | list):
        assert len(got) == len(want), what
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            _close_tree(g, w, f"{what}[{k}]", rtol)
        return
    _close(got, want, what, rtol)


# ---------------------------------------------------------------------------------------------
# Every primitive: forward, VJP, JVP (float32), CPU vs GPU
# ---------------------------------------------------------------------------------------------

RANDOM = {"rand_uniform", "bernoulli_mask"}


def _forward(prim: Primitive, inputs: tuple[Any, ...], attrs: dict[str, Any], xp: Any) -> Any:
    if not prim.inputs:
        return prim.forward(**attrs, xp=xp)
    return prim.forward(*inputs, **attrs)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_primitive_matches_the_cpu_in_float32(name: str, xp: Any) -> None:
    prim = REGISTRY[name]
    rtol = 0.0 if name in RANDOM else RTOL
    for k, sample in enumerate(prim.samples(np.random.default_rng(SEED))):
        what = f"{name} sample {k}"
        attrs = prim.check_attrs(dict(sample.attrs))
        host_in = tuple(np.asarray(x, dtype=np.float32) for x in sample.inputs)
        host_out = _forward(prim, host_in, attrs, np)
        dev_in = tuple(to_device(x, xp) for x in host_in)
        dev_out = _forward(prim, dev_in, attrs, xp)
        _close_tree(dev_out, host_out, f"{what} forward", rtol)
        if prim.nondiff:
            continue
        rng = np.random.default_rng(SEED + k)
        g = rng.standard_normal(np.shape(host_out)).astype(np.float32)
        host_ct = prim.apply_vjp(ARRAY_OPS, g, host_in, host_out, attrs)
        dev_ct = prim.apply_vjp(ARRAY_OPS, to_device(g, xp), dev_in, dev_out, attrs)
        _close_tree(list(dev_ct), list(host_ct), f"{what} vjp", rtol)
        if prim.reverse_only:
            continue
        tangents = [rng.standard_normal(x.shape).astype(np.float32) for x in host_in]
        host_t = prim.apply_jvp(ARRAY_OPS, tangents, host_in, host_out, attrs)
        dev_t = prim.apply_jvp(ARRAY_OPS, [to_device(t, xp) for t in tangents], dev_in,
                               dev_out, attrs)
        _close_tree(dev_t, host_t, f"{what} jvp", rtol)


# ---------------------------------------------------------------------------------------------
# Random bits: bitwise equal
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rand_uniform_bits_equal_the_cpu(dtype: str, xp: Any) -> None:
    prim = REGISTRY["rand_uniform"]
    for shape in [(7,), (3, 5, 2), (1000,), ()]:
        for seed in (0, 1, 2**40 + 3):
            for counter in (0, 5, 2**33 + 1):
                attrs = prim.check_attrs({"shape": shape, "seed": seed, "counter": counter,
                                          "dtype": dtype})
                host = prim.forward(**attrs)
                dev = prim.forward(**attrs, xp=xp)
                assert _is_device(dev, xp)
                got = to_host(dev)
                assert got.dtype == host.dtype
                np.testing.assert_array_equal(got, host, err_msg=f"{shape} {seed} {counter}")


def test_bernoulli_masks_and_session_draws_equal_the_cpu(xp: Any) -> None:
    prim = REGISTRY["bernoulli_mask"]
    for keep in (0.0, 0.3, 0.9, 1.0):
        attrs = prim.check_attrs({"shape": (64, 33), "seed": 11, "counter": 4})
        host = prim.forward(np.asarray(keep, np.float32), **attrs)
        dev = prim.forward(to_device(np.asarray(keep, np.float32), xp), **attrs)
        np.testing.assert_array_equal(to_host(dev), host, err_msg=f"keep {keep}")
    for backend_name in ("eager", "compiled"):
        drawn = []
        for device in ("cpu", "cuda"):
            s = tl.Session(tl.Options(device=device, seed=5, backend=backend_name))
            u = s.rand_uniform((17, 3))
            m = s.bernoulli_mask(0.25, (9, 9))
            drawn.append([to_host(s.value(u)), to_host(s.value(m))])
        for a, b in zip(*drawn, strict=True):
            np.testing.assert_array_equal(a, b)


def test_generator_uniform_bits_equal_the_cpu(xp: Any) -> None:
    for dtype in ("float32", "float64"):
        host_gen, dev_gen = tl.Generator(9), tl.Generator(9)
        for shape in [(5,), (4, 6), (257,)]:
            host = host_gen.uniform(shape, dtype)
            dev = dev_gen.uniform(shape, dtype, xp=xp)
            assert _is_device(dev, xp)
            np.testing.assert_array_equal(to_host(dev), host)
        # normal: Box-Muller in float64 on both; log/cos kernels may differ in the last bits.
        _close(tl.Generator(4).normal((300,), xp=xp), tl.Generator(4).normal((300,)),
               "Generator.normal", rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Short trainings of the default models, CPU vs GPU; parameters uploaded once
# ---------------------------------------------------------------------------------------------

def _subset(model_name: str, n: int) -> tuple[Any, datasets.DatasetBundle]:
    dataset = models.DEFAULT_DATASET[model_name]
    data = datasets.load(dataset, seed=0, **models.dataset_options(model_name, dataset))
    return data.train[np.arange(n)], data


def _train(model_name: str, device: str, backend_name: str, epochs: int = 2
           ) -> tuple[list[float], list[np.ndarray], list[list[int]]]:
    """Two epochs of 4 steps (batch 32); returns the epoch losses, the final parameters and the
    ids of the parameters' arrays after the move and at the end of each epoch."""
    train, data = _subset(model_name, 128)
    model = models.build(models.config_for(model_name, data, seed=0))
    params = model.parameters()
    opt = optim.Adam(params, lr=1e-3)
    if device == "cuda":
        model.to("cuda")
    ids = [[id(p.array) for p in params]]
    history = fit(model, F.cross_entropy, opt, train, epochs, batch_size=32, shuffle=False,
                  backend=backend_name, progress=False, device=device,
                  on_epoch=lambda _: ids.append([id(p.array) for p in params]))
    return [h.train_loss for h in history], [to_host(p.array) for p in params], ids


@pytest.mark.parametrize("backend_name", ["eager", "compiled"])
@pytest.mark.parametrize("model_name", ["mlp", "cnn", "transformer"])
def test_short_training_matches_the_cpu(model_name: str, backend_name: str, xp: Any) -> None:
    cpu_losses, cpu_params, _ = _train(model_name, "cpu", backend_name)
    gpu_losses, gpu_params, ids = _train(model_name, "cuda", backend_name)
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=RTOL)
    for k, (g, c) in enumerate(zip(gpu_params, cpu_params, strict=True)):
        _close(g, c, f"{model_name} parameter {k}")
    # Uploaded once: every parameter keeps the array it got when the model moved.
    assert all(step == ids[0] for step in ids[1:]), "a parameter array was replaced"


# ---------------------------------------------------------------------------------------------
# CUDA graph replay
# ---------------------------------------------------------------------------------------------

def _mlp_step() -> tuple[list[Param], Any]:
    rng = np.random.default_rng(1)
    sizes = [32, 64, 64, 10]
    params = []
    for fan_in, fan_out in zip(sizes, sizes[1:], strict=False):
        params += [Param((rng.standard_normal((fan_out, fan_in)) / np.sqrt(fan_in))
                         .astype(np.float32)), Param(np.zeros(fan_out, np.float32))]

    def loss(owner: Any, x: Any, y: Any) -> Any:
        w1, b1, w2, b2, w3, b3 = (owner.use(p) for p in params)
        h = F.relu(F.linear(w1, b1, x))
        h = F.relu(F.linear(w2, b2, h))
        return F.cross_entropy(F.linear(w3, b3, h), y)

    return params, loss


def _batches(xp: Any, n: int) -> list[list[Any]]:
    rng = np.random.default_rng(2)
    return [[to_device(rng.standard_normal((16, 32)).astype(np.float32), xp),
             to_device(rng.integers(0, 10, 16).astype(np.float32), xp)] for _ in range(n)]


def _sgd_steps(xp: Any, graphed: bool, steps: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    params, loss = _mlp_step()
    for p in params:
        p.on(xp)
    c = tl.Compiled(loss, [(16, 32), (16,)], wrt=(), owner_arg=True)
    losses = []
    for xs in _batches(xp, steps):
        value, grads = cuda_graph.maybe_graphed(c, xs, enabled=graphed)
        losses.append(value)
        for p, g in zip(params, grads[2:], strict=True):
            p.array[...] = p.array - np.float32(0.05) * g  # in place: the graph reads this array
            p.mark_updated()
    if graphed:
        step = cuda_graph.graphed_step(c)
        assert step.captures == 1 and step.graphed == is_cupy(xp)
    return [to_host(v) for v in losses], [to_host(p.array) for p in params]


def test_graph_replay_equals_the_plain_compiled_step(xp: Any) -> None:
    plain_losses, plain_params = _sgd_steps(xp, False, 20)
    graph_losses, graph_params = _sgd_steps(xp, True, 20)
    # The same kernels in the same order: equal up to the order of atomic adds (scatter-add).
    np.testing.assert_allclose(graph_losses, plain_losses, rtol=1e-6)
    for g, p in zip(graph_params, plain_params, strict=True):
        np.testing.assert_allclose(g, p, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# Device memory flat over 10,000 steps
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend_name", ["eager", "compiled"])
def test_device_memory_is_flat_over_10000_steps(backend_name: str, xp: Any) -> None:
    """CuPy's pool holds the same bytes after step 10,000 as after step 100. (In a dry run, 150
    steps, and what is checked is that no step uploads anything: the stand-in has no pool.)"""
    rng = np.random.default_rng(3)
    sizes = [32, 64, 10]
    weights = []
    for fan_in, fan_out in zip(sizes, sizes[1:], strict=False):
        weights += [(rng.standard_normal((fan_out, fan_in)) / np.sqrt(fan_in)).astype(np.float32),
                    np.zeros(fan_out, np.float32)]

    def loss(w1: Any, b1: Any, w2: Any, b2: Any, x: Any, y: Any) -> Any:
        return F.cross_entropy(F.linear(w2, b2, F.relu(F.linear(w1, b1, x))), y)

    trainer = tl.ScalarTrainer(weights, loss, tl.Options(device="cuda", backend=backend_name))
    x = to_device(rng.standard_normal((16, 32)).astype(np.float32), xp)
    y = to_device(rng.integers(0, 10, 16).astype(np.float32), xp)
    last = 10_000 if is_cupy(xp) else 150

    def used() -> int:
        if not is_cupy(xp):
            return int(xp.transfers.uploads)
        _sync(xp)
        return int(xp.get_default_memory_pool().used_bytes())

    at = {}
    for step in range(1, last + 1):
        trainer.step(0.01, x, y)
        if step in (100, last):
            at[step] = used()
    assert abs(at[last] - at[100]) <= (64 * 1024 if is_cupy(xp) else 0), at


# ---------------------------------------------------------------------------------------------
# torchlean train --device cuda, every default model
# ---------------------------------------------------------------------------------------------

def _cli_train(model_name: str, device: str, path: str) -> dict[str, Any]:
    status = cli.main(["train", "--model", model_name, "--device", device, "--epochs", "1",
                       "--json", path])
    assert status == 0, f"torchlean train --model {model_name} --device {device}: {status}"
    with open(path, encoding="utf-8") as fh:
        return dict(json.load(fh))


@pytest.mark.parametrize("model_name", models.NAMES)
def test_torchlean_train_device_cuda(model_name: str, xp: Any, tmp_path: Any) -> None:
    gpu = _cli_train(model_name, "cuda", str(tmp_path / "gpu.json"))
    if not is_cupy(xp):  # a dry run: the model really went to the stand-in device
        assert xp.transfers.uploads > 0
    cpu = _cli_train(model_name, "cpu", str(tmp_path / "cpu.json"))
    g, c = gpu["final"], cpu["final"]
    assert np.isfinite(g["train_loss"]) and np.isfinite(g["test_loss"])
    # One epoch of tens of float32 steps: the runs drift apart only by rounding.
    np.testing.assert_allclose(g["train_loss"], c["train_loss"], rtol=1e-3)
    np.testing.assert_allclose(g["test_loss"], c["test_loss"], rtol=1e-3)


# ---------------------------------------------------------------------------------------------
# torchlean bench --device cuda (agreement is checked before timing; timings are not asserted)
# ---------------------------------------------------------------------------------------------

def test_gpu_benchmark_runs_and_agrees(xp: Any, tmp_path: Any) -> None:
    path = tmp_path / "bench.json"
    assert cli.main(["bench", "--device", "cuda", "--rounds", "1", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    for w in ("W2", "W3", "W5"):
        times = result["workloads"][w]["times"]
        assert {"torchlean-eager", "torchlean-compiled", "torchlean-graph"} <= set(times)
        if is_cupy(xp) and importlib.util.find_spec("torch") is not None:
            import torch

            assert ("torch" in times) == torch.cuda.is_available()
