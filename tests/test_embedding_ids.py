"""Embedding lookups whose ids are traced into a graph (issue 25 item 6).

On the compiled backend (``tl.compile``, ``Session(Options(backend="compiled"))``, ONNX models
whose ids arrive at run time) the ids are an input of the ``embedding`` primitive: the rows are
gathered, not ``one_hot(ids) @ W``. So the compiled path agrees with the eager one bitwise, an
id out of range, negative or fractional is a named error when the graph runs (never a zero row),
one non-finite entry of the table reaches only the lookups of its row, and the table's gradient
is torch's. The primitive's own columns (finite differences, PyTorch, spec, fuzz, error inputs)
run in the registry-wide tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from strict_device import strict_cuda

import torchlean as tl
import torchlean.onnx as tlo
from torchlean import nn
from torchlean.core.backend import to_device, to_host
from torchlean.core.errors import IndexRangeError
from torchlean.core.registry import REGISTRY
from torchlean.engine.session import Options
from torchlean.training.trainers import Session
from torchlean.zoo import models


def _table(rows: int = 5, width: int = 3, seed: int = 0) -> nn.Embedding:
    emb = nn.Embedding(rows, width, dtype="float64")
    emb.weight.assign(np.random.default_rng(seed).standard_normal((rows, width)))
    return emb


def _graph_ops(compiled: Any) -> set[str]:
    return {node.op.name for node in compiled.graph.nodes if node.op is not None}


def test_compiled_gathers_and_agrees_with_eager() -> None:
    emb = _table()
    ids = np.array([[1, 4, 4], [0, 2, 1]], dtype=np.float64)
    compiled = tl.compile(emb, ids.shape, dtype="float64")
    ops = _graph_ops(compiled)
    assert "embedding" in ops and "one_hot" not in ops and "matmul" not in ops
    np.testing.assert_array_equal(compiled.forward(ids), emb(ids.astype(np.int64)))
    np.testing.assert_array_equal(compiled.forward(ids), emb.weight.value[ids.astype(int)])


@pytest.mark.parametrize("bad", [5.0, -1.0, 0.5, np.nan, np.inf])
def test_compiled_refuses_bad_ids_when_it_runs(bad: float) -> None:
    emb = _table()
    compiled = tl.compile(emb, (3,), dtype="float64")
    compiled.forward(np.array([0.0, 1.0, 4.0]))  # in range: fine
    with pytest.raises(IndexRangeError, match=r"embedding: ids must be integers in \[0, 5\)"):
        compiled.forward(np.array([0.0, bad, 1.0]))
    with pytest.raises(IndexRangeError, match="embedding"):
        compiled.vjp([np.array([bad])[[0, 0, 0]]], np.ones((3, 3)))


def test_session_compiled_refuses_out_of_range_ids() -> None:
    emb = _table()
    s = Session(Options(backend="compiled", dtype="float64"))
    with pytest.raises(IndexRangeError, match="embedding"):
        s.value(emb(s.input(np.array([[0, 7]]))))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_row_reaches_only_its_own_lookups(bad: float) -> None:
    emb = _table(4, 3)
    w = emb.weight.value.copy()
    w[2, 1] = bad
    emb.weight.assign(w)
    ids = np.array([[0, 2], [3, 1]], dtype=np.float64)
    out = tl.compile(emb, ids.shape, dtype="float64").forward(ids)
    assert np.isfinite(out[0, 0]).all() and np.isfinite(out[1]).all()
    assert not np.isfinite(out[0, 1, 1])
    theirs = torch.nn.functional.embedding(torch.tensor(ids).long(), torch.tensor(w))
    np.testing.assert_array_equal(out, theirs.numpy())


def test_gradient_matches_torch_with_repeats_and_padding() -> None:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 4))
    ids = np.array([[1, 5, 1], [0, 3, 3]], dtype=np.float64)
    cot = rng.standard_normal((2, 3, 4))
    for padding_idx in (None, 3):
        def fn(table: tl.Ref, i: tl.Ref, p: int | None = padding_idx) -> tl.Ref:
            return nn.functional.embedding(i, table, padding_idx=p)

        compiled = tl.compile(fn, w.shape, ids.shape, dtype="float64")
        g_w, g_ids = compiled.vjp([w, ids], cot)
        leaf = torch.tensor(w, requires_grad=True)
        out = torch.nn.functional.embedding(torch.tensor(ids).long(), leaf,
                                            padding_idx=padding_idx)
        out.backward(torch.tensor(cot))
        assert leaf.grad is not None
        np.testing.assert_allclose(g_w, leaf.grad.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(g_ids, np.zeros_like(ids))  # ids get no gradient


def test_forward_mode_and_second_order_through_the_lookup() -> None:
    """The JVP of the lookup is the lookup of the tangent; hvp (forward over the recorded
    backward, which runs ``embedding_scatter``) matches finite differences of the gradient."""
    rng = np.random.default_rng(4)
    w, ids = rng.standard_normal((4, 2)), np.array([2.0, 0.0, 2.0])

    def loss(table: tl.Ref, i: tl.Ref) -> tl.Ref:
        e = nn.functional.embedding(i, table)
        return (e * e * e).sum()

    compiled = tl.compile(loss, w.shape, ids.shape, dtype="float64")
    u = rng.standard_normal(w.shape)
    hv = compiled.hvp([w, ids], [u, None])[0]
    h = 1e-6
    grad = lambda t: compiled.vjp([t, ids], np.array(1.0))[0]  # noqa: E731
    np.testing.assert_allclose(hv, (grad(w + h * u) - grad(w - h * u)) / (2 * h), rtol=1e-6,
                               atol=1e-8)


def test_transformer_trains_the_same_on_both_backends() -> None:
    """A few SGD steps of the zoo transformer: the compiled backend's losses equal the eager
    backend's (both gather rows now; they used to differ, one_hot @ W against a gather)."""
    config = {"model": "transformer", "vocab_size": 11, "seq_len": 6, "d_model": 8,
              "num_heads": 2, "num_layers": 1, "d_ff": 16}
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 11, (4, 6)).astype(np.float64)
    target = np.eye(11)[rng.integers(0, 11, (4, 6))]
    losses = {}
    for backend in ("eager", "compiled"):
        tl.manual_seed(0)
        model = models.build(config)
        for p in model.parameters():
            p.assign(np.asarray(p.value, dtype=np.float64))
        trace = []
        for _ in range(3):
            s = Session(Options(backend=backend, dtype="float64"))
            logits = model(s.input(tokens))
            loss = nn.functional.cross_entropy(
                logits.reshape((24, 11)), s.input(target.reshape(24, 11)))
            s.backward(loss)
            trace.append(float(s.value(loss)))
            for p in model.parameters():
                p.assign(p.value - 0.5 * p.grad)
                p.zero_grad()
        losses[backend] = trace
    np.testing.assert_allclose(losses["compiled"], losses["eager"], rtol=1e-10)
    assert losses["eager"][-1] < losses["eager"][0]


def _gather_model(rows: int, width: int) -> bytes:
    table = np.random.default_rng(6).standard_normal((rows, width)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["out"], axis=0)], "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3, width])],
        [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def test_onnx_gather_with_run_time_ids_imports_as_the_lookup(tmp_path: Path) -> None:
    data = _gather_model(7, 4)
    ids = np.array([[0, 6, 6], [3, 1, 0]])
    (expected,) = ort.InferenceSession(data).run(None, {"ids": ids})
    model = tlo.load(data)
    ops = _graph_ops(model)
    assert "embedding" in ops and "one_hot" not in ops
    np.testing.assert_array_equal(model(ids.astype(np.float32)), expected)
    with pytest.raises(IndexRangeError, match="embedding"):
        model(np.array([[0, 7, 1], [0, 0, 0]], dtype=np.float32))
    # Export again (Cast + Gather), run in onnxruntime, import again: the same rows.
    path = tmp_path / "again.onnx"
    tlo.export(model, path)
    session = ort.InferenceSession(str(path))
    (runtime,) = session.run(None, {session.get_inputs()[0].name: ids.astype(np.float32)})
    np.testing.assert_array_equal(runtime, expected)
    np.testing.assert_array_equal(tlo.load(path)(ids.astype(np.float32)), expected)


def test_device_kernels_use_the_namespace_and_download_one_count() -> None:
    """On the strict stand-in for CuPy: gather and scatter-add run through the namespace (no
    implicit host reads), agree with NumPy, and the id check downloads one count per call."""
    rng = np.random.default_rng(8)
    w, ids = rng.standard_normal((5, 3)), np.array([[4.0, 0.0], [4.0, 2.0]])
    lookup, scatter = REGISTRY["embedding"], REGISTRY["embedding_scatter"]
    g = rng.standard_normal((2, 2, 3))
    with strict_cuda() as xp:
        dw, dids, dg = to_device(w, xp), to_device(ids, xp), to_device(g, xp)
        rows = lookup.forward(dw, dids)
        back = scatter.forward(dg, dids, rows=5)
        assert xp.transfers.downloads == 2
        np.testing.assert_array_equal(to_host(rows), lookup.forward(w, ids))
        np.testing.assert_array_equal(to_host(back), scatter.forward(g, ids, rows=5))
        before = xp.transfers.downloads
        with pytest.raises(IndexRangeError, match="1 of 4 are not, the first is 5.0"):
            lookup.forward(dw, to_device(np.array([[4.0, 0.0], [5.0, 2.0]]), xp))
        assert xp.transfers.downloads == before + 2  # the count, then the first bad id
