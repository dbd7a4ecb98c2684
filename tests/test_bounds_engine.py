"""The bound engine on the ops imported networks use: soundness, tightness and honesty.

Random small nets built from matrix products with a constant factor on either side (ONNX MatMul +
Add, Gemm), imported max pooling, permutes, ReLU, sigmoid and tanh, with and without a batch axis.
For random boxes and specification rows, sampled float32 executions and points found by gradient
descent on each row must never fall below (or above) the bounds; alpha-CROWN is never looser than
CROWN; on ReLU nets small enough to enumerate every activation pattern, the exact range (one
linear program per pattern) is enclosed; a deliberately wrong relaxation is caught by the same
checks; a node CROWN cannot relax is named in ``Bounds.interval_fallbacks``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import linprog

import torchlean as tl
from torchlean import bounds as B
from torchlean.bounds import engine
from torchlean.engine import ops_interface as F

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from torchlean import onnx as tlo  # noqa: E402

F32 = np.float32


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(F32)


# --- networks -------------------------------------------------------------------------------


def _matmul_mlp(rng, batch):
    """x @ W + b with tanh and relu: the ONNX MatMul + Add form (batched)."""
    w1, b1, w2, b2, w3 = _w(rng, 4, 6), _w(rng, 6), _w(rng, 6, 5), _w(rng, 5), _w(rng, 5, 3)

    def f(x):
        h = F.relu(F.matmul_any(x, w1) + b1)
        h = F.tanh(F.matmul_any(h, w2) + b2)
        return F.matmul_any(h, w3)

    return tl.compile(f, (batch, 4))


def _no_batch(rng, batch):
    """VNN test_small's shape: input (3,), W @ column + b, no batch axis anywhere."""
    w1, b1, w2, b2 = _w(rng, 5, 3), _w(rng, 5), _w(rng, 2, 5), _w(rng, 2)

    def f(x):
        h = F.reshape(F.matmul_any(w1, F.reshape(x, shape=(3, 1))), shape=(5,)) + b1
        h = F.sigmoid(h)
        h = F.reshape(F.matmul_any(w2, F.reshape(h, shape=(5, 1))), shape=(2,)) + b2
        return F.relu(h)

    return tl.compile(f, (3,))


def _nd_permute(rng, batch):
    """matmul_nd over a (B, 2, 3) input, a permute keeping the batch first, sigmoid."""
    w1, w2 = _w(rng, 3, 4), _w(rng, 2, 3)

    def f(x):
        h = F.sigmoid(F.matmul_any(x, w1))           # (B, 2, 4)
        h = F.permute(h, perm=(0, 2, 1))             # (B, 4, 2)
        h = F.relu(F.matmul_any(h, w2))              # (B, 4, 3)
        return F.reshape(h, shape=(batch, 12))

    return tl.compile(f, (batch, 2, 3))


def _convex(rng, batch):
    """softplus and exp (convex: tangent below, chord above)."""
    w1, w2, w3 = _w(rng, 3, 5), 0.5 * _w(rng, 5, 4), _w(rng, 4, 2)

    def f(x):
        h = F.softplus(F.matmul_any(x, w1))
        h = F.exp(F.matmul_any(h, w2))
        return F.matmul_any(h, w3)

    return tl.compile(f, (batch, 3))


def _gathers(rng, batch):
    """Linear primitives without a dedicated rule (a strided ``take``, ``reduce_mean``): CROWN
    passes through their own VJP."""
    w1, w2 = _w(rng, 6, 8), _w(rng, 4, 3)

    def f(x):
        h = F.relu(F.matmul_any(x, w1))[:, 0:8:2]     # (B, 4) via take
        m = F.reshape(F.reduce_mean(h, axis=1), shape=(batch, 1))
        return F.tanh(F.matmul_any(h, w2)) - m

    return tl.compile(f, (batch, 6))


def _onnx_cnn(rng, batch):
    """Conv, Relu, MaxPool (imported as ``max_pool``), Flatten, Gemm with transB=0, Tanh."""
    w = _w(rng, 3, 1, 3, 3)
    bc = _w(rng, 3)
    g = _w(rng, 12, 4)
    gb = _w(rng, 4)
    nodes = [
        helper.make_node("Conv", ["x", "w", "bc"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "g", "gb"], ["y0"]),
        helper.make_node("Tanh", ["y0"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (bc, "bc"), (g, "g"),
                                                         (gb, "gb"))]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [batch, 1, 4, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [batch, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return tlo.load(model)


NETS = {"matmul-mlp": _matmul_mlp, "no-batch": _no_batch, "nd-permute": _nd_permute,
        "onnx-cnn": _onnx_cnn, "convex": _convex, "gathers": _gathers}


# --- checking -------------------------------------------------------------------------------


def _box(rng, shape, width):
    centre = rng.uniform(-1, 1, shape)
    return centre - width, centre + width


def _spec(rng, c, k=3):
    out = c.graph.nodes[c.graph.output].shape
    return rng.standard_normal((out[0], k) + tuple(out[1:]))


def _points(rng, lo, hi, n):
    """``n`` float32 points of the box: a third of them corners."""
    u = rng.random((n,) + lo.shape)
    u[: n // 3] = u[: n // 3] < 0.5
    x = (lo + (hi - lo) * u).astype(F32)
    x = np.where(x < lo, np.nextafter(x, F32(np.inf)), x)
    return np.where(x > hi, np.nextafter(x, F32(-np.inf)), x)


def _descend(c, spec, lo, hi, x, sign, steps=8):
    """Projected gradient steps pushing ``sign * sum(spec * y)`` down from ``x``."""
    lo32, hi32 = np.ceil(lo * 2**20) / 2**20, np.floor(hi * 2**20) / 2**20
    step = 0.25 * float(np.max(hi - lo))
    for _ in range(steps):
        g = c.vjp([x], (sign * spec.sum(axis=1)).astype(F32))[0]
        x = np.clip(x - step * np.sign(g), lo32, hi32).astype(F32)
        step *= 0.7
    return x


def _violations(c, result, spec, lo, hi, rng, n=40):
    """Entries of node and specification bounds that sampled or descended points break."""
    graph = c.graph
    bad = 0
    starts = _points(rng, lo, hi, n)
    pts = list(starts)
    for x in starts[:4]:
        pts.append(_descend(c, spec, lo, hi, x, 1.0))
        pts.append(_descend(c, spec, lo, hi, x, -1.0))
    for x in pts:
        values = graph.evaluate(graph.check_inputs("check", c._full([x])))
        for i, (nlo, nhi) in enumerate(result.nodes):
            if nlo is None or graph.nodes[i].kind != "op":
                continue
            v = np.asarray(values[i], np.float64)
            bad += int(np.sum(v < nlo) + np.sum(v > nhi))
        y = np.asarray(values[graph.output], np.float64)
        b, k = spec.shape[:2]
        rows = (spec.reshape(b, k, -1) * y.reshape(b, 1, -1)).sum(axis=-1)
        bad += int(np.sum(rows < result.spec[0]) + np.sum(rows > result.spec[1]))
    return bad


@pytest.mark.parametrize("net", sorted(NETS))
def test_random_nets_sound_and_alpha_never_looser(net):
    rng = np.random.default_rng(sum(map(ord, net)))
    for trial in range(2):
        c = NETS[net](rng, 2)
        shape = c.graph.nodes[c.graph.inputs[0]].shape
        lo, hi = _box(rng, shape, 0.3 * (trial + 1))
        spec = _spec(rng, c)
        crown = B.compute_bounds(c, lo, hi, method="crown", spec=spec)
        alpha = B.compute_bounds(c, lo, hi, method="alpha-crown", spec=spec, alpha_steps=4)
        ibp = B.compute_bounds(c, lo, hi, method="ibp", spec=spec)
        for result in (crown, alpha):
            assert result.interval_fallbacks == [], f"{net}: {result.interval_fallbacks}"
            assert _violations(c, result, spec, lo, hi, rng) == 0
        assert np.all(alpha.spec[0] >= crown.spec[0])
        assert np.all(crown.spec[0] >= ibp.spec[0])
        for (a_lo, a_hi), (c_lo, c_hi) in zip(alpha.nodes, crown.nodes, strict=True):
            if a_lo is not None:  # alpha only tightens intermediate bounds
                assert np.all(a_lo >= c_lo) and np.all(a_hi <= c_hi)


def test_planted_wrong_relaxation_is_caught(monkeypatch):
    """The checks above are not vacuous: a matmul rule that halves the multiplier (unsound)
    breaks sampled bounds."""
    rng = np.random.default_rng(7)
    c = _matmul_mlp(rng, 2)
    lo, hi = _box(rng, (2, 4), 0.4)
    spec = _spec(rng, c)
    right = engine._HANDLERS["matmul"]

    def wrong(prop, i, v, nu, terms, slack):
        return right(prop, i, 0.5 * v, nu, terms, slack)

    monkeypatch.setitem(engine._HANDLERS, "matmul", wrong)
    result = B.compute_bounds(c, lo, hi, method="crown", spec=spec)
    assert _violations(c, result, spec, lo, hi, rng) > 0


def _exact_min(ws, bs, lo, hi, c_row):
    """min of c_row . f(x) over the box for the relu net f (one LP per activation pattern)."""
    sizes = [w.shape[1] for w in ws[:-1]]
    best = np.inf
    for pattern in itertools.product((0, 1), repeat=sum(sizes)):
        # affine map x -> pre-activation per layer under this pattern; constraints on signs
        a, a0 = np.eye(len(lo)), np.zeros(len(lo))
        rows, rhs, k = [], [], 0
        for w, b, n in zip(ws[:-1], bs[:-1], sizes, strict=True):
            z, z0 = (a.T @ w).T, a0 @ w + b
            s = np.array(pattern[k:k + n], dtype=float)
            k += n
            for j in range(n):  # active: z >= 0 -> -z <= 0; inactive: z <= 0
                sign = -1.0 if s[j] else 1.0
                rows.append(sign * z[j])
                rhs.append(-sign * z0[j])
            a, a0 = z * s[:, None], z0 * s
        zf, zf0 = (a.T @ ws[-1]).T, a0 @ ws[-1] + bs[-1]
        obj = c_row @ zf
        res = linprog(obj, A_ub=np.array(rows), b_ub=np.array(rhs),
                      bounds=list(zip(lo, hi, strict=True)), method="highs")
        if res.status == 0:
            best = min(best, res.fun + c_row @ zf0)
    return best


@pytest.mark.parametrize("batched", [True, False])
def test_exact_relu_ranges_enclosed(batched):
    rng = np.random.default_rng(3 + batched)
    for _ in range(2):
        ws = [_w(rng, 2, 3), _w(rng, 3, 3), _w(rng, 3, 2)]
        bs = [_w(rng, 3), _w(rng, 3), _w(rng, 2)]

        def f(x, ws=ws, bs=bs):
            h = x if batched else F.reshape(x, shape=(1, 2))
            h = F.relu(F.matmul_any(h, ws[0]) + bs[0])
            h = F.relu(F.matmul_any(h, ws[1]) + bs[1])
            out = F.matmul_any(h, ws[2]) + bs[2]
            return out if batched else F.reshape(out, shape=(2,))

        c = tl.compile(f, (1, 2) if batched else (2,))
        lo, hi = _box(rng, (1, 2) if batched else (2,), 0.7)
        spec = rng.standard_normal((1, 2, 2))
        w64 = [w.astype(np.float64) for w in ws]
        b64 = [b.astype(np.float64) for b in bs]
        exact = [_exact_min(w64, b64, lo.ravel(), hi.ravel(), spec[0, k]) for k in range(2)]
        for method in ("crown", "alpha-crown"):
            r = B.compute_bounds(c, lo, hi, method=method, spec=spec, alpha_steps=10)
            assert np.all(r.spec[0][0] <= np.array(exact)), (method, r.spec[0], exact)


def test_interval_fallback_is_reported():
    """``abs`` has no linear relaxation: CROWN bounds it by its interval and says so."""
    rng = np.random.default_rng(1)
    w = _w(rng, 3, 3)

    def f(x):
        return F.matmul_any(F.abs(F.matmul_any(x, w)), w)

    c = tl.compile(f, (2, 3))
    node = [i for i, n in enumerate(c.graph.nodes) if n.op is not None and n.op.name == "abs"]
    lo, hi = _box(rng, (2, 3), 0.2)
    result = B.compute_bounds(c, lo, hi, method="crown", spec=_spec(rng, c))
    assert result.interval_fallbacks == [(node[0], "abs")]
    assert B.compute_bounds(c, lo, hi, method="ibp").interval_fallbacks == []


def test_thresholds_early_stop_and_reuse():
    rng = np.random.default_rng(11)
    c = _matmul_mlp(rng, 2)
    lo, hi = _box(rng, (2, 4), 0.3)
    spec = _spec(rng, c)
    crown = B.compute_bounds(c, lo, hi, method="crown", spec=spec)
    low = crown.spec[0] - 1.0  # every row already above these thresholds
    easy = B.compute_bounds(c, lo, hi, method="alpha-crown", spec=spec, thresholds=low,
                            alpha_steps=50)
    assert easy.proved.all() and easy.info["alpha_steps"] == 0
    high = crown.spec[0] + 1e6  # never provable: all steps run, proved stays False
    hard = B.compute_bounds(c, lo, hi, method="alpha-crown", spec=spec, thresholds=high,
                            alpha_steps=3, reuse=crown)
    assert not hard.proved.any() and hard.info["alpha_steps"] == 3
    again = B.compute_bounds(c, lo, hi, method="alpha-crown", spec=spec, thresholds=high,
                             alpha_steps=3)
    np.testing.assert_allclose(hard.spec[0], again.spec[0], rtol=1e-9, atol=1e-12)
    with pytest.raises(B.BoundsError, match="reuse"):
        B.compute_bounds(c, lo + 0.01, hi, method="alpha-crown", spec=spec, reuse=crown)
    with pytest.raises(B.BoundsError, match="thresholds"):
        B.compute_bounds(c, lo, hi, method="crown", spec=spec, thresholds=np.zeros((5, 5)))


def test_groups_stop_once_every_conjunction_has_one_proved_row():
    """Rows in one group are a conjunction: one proved row refutes it, so alpha-CROWN stops
    there even though the other rows of the group can never be proved."""
    rng = np.random.default_rng(11)
    c = _matmul_mlp(rng, 2)
    lo, hi = _box(rng, (2, 4), 0.3)
    spec = _spec(rng, c)
    k = spec.shape[1]
    crown = B.compute_bounds(c, lo, hi, method="crown", spec=spec)
    t = crown.spec[0] + 1e6
    t[:, 0] = crown.spec[0][:, 0] - 1.0  # row 0 already above its threshold
    groups = np.zeros(k, dtype=np.int64)  # one conjunction of every row
    done = B.compute_bounds(c, lo, hi, method="alpha-crown", spec=spec, thresholds=t,
                            groups=groups, alpha_steps=5)
    assert done.info["alpha_steps"] == 0 and done.proved[:, 0].all()
    apart = B.compute_bounds(c, lo, hi, method="alpha-crown", spec=spec, thresholds=t,
                             alpha_steps=5)  # every row its own conjunction: all steps run
    assert apart.info["alpha_steps"] == 5 and not apart.proved[:, 1:].any()
    assert np.all(apart.spec[0] >= crown.spec[0] - 1e-9)
    for bad in (np.zeros(k + 1, np.int64), -np.ones(k, np.int64), np.zeros(k)):
        with pytest.raises(B.BoundsError, match="groups"):
            B.compute_bounds(c, lo, hi, method="alpha-crown", spec=spec, groups=bad)


def test_graph_without_batch_axis_accepts_both_spec_forms():
    """VNN test_small: input (1,), a (2, 1) hidden column; CROWN must not crash, and a spec
    given per output (1, K, *out) or batched (B, K, *out[1:]) means the same rows."""
    rng = np.random.default_rng(5)
    w1, b1, w2 = _w(rng, 2, 1), _w(rng, 2), _w(rng, 1, 2)

    def f(x):
        h = F.relu(F.reshape(F.matmul_any(w1, F.reshape(x, shape=(1, 1))), shape=(2,)) + b1)
        return F.reshape(F.matmul_any(w2, F.reshape(h, shape=(2, 1))), shape=(1,))

    c = tl.compile(f, (1,))
    lo, hi = np.array([-1.0]), np.array([1.0])
    a = B.compute_bounds(c, lo, hi, method="crown", spec=np.ones((1, 1, 1)))
    xs = np.linspace(-1, 1, 41, dtype=F32)
    ys = [float(c.forward(np.array([x]))[0]) for x in xs]
    assert a.spec[0][0, 0] <= min(ys) and a.spec[1][0, 0] >= max(ys)
    assert a.interval_fallbacks == []
    with pytest.raises(B.BoundsError, match="spec must have shape"):
        B.compute_bounds(c, lo, hi, method="crown", spec=np.ones((2, 1, 1)))


@pytest.mark.parametrize("act", ["relu", "tanh", "sigmoid"])
def test_alpha_optimises_every_layer(act):
    """On a 3-hidden-layer net alpha-CROWN beats CROWN on the specification; with the
    intermediate slopes optimised it also narrows the last hidden pre-activation bounds and
    does at least as well as optimising the final slopes alone."""
    rng = np.random.default_rng(0)
    ws = [(2 * rng.standard_normal((a, b)) / np.sqrt(a)).astype(F32)
          for a, b in ((10, 30), (30, 30), (30, 30), (30, 5))]

    def f(x):
        h = x
        for w in ws[:-1]:
            h = getattr(F, act)(F.matmul_any(h, w))
        return F.matmul_any(h, ws[-1])

    c = tl.compile(f, (1, 10))
    lo, hi = _box(rng, (1, 10), 0.3)
    spec = np.concatenate([np.eye(5), -np.eye(5)])[None]
    crown = B.compute_bounds(c, lo, hi, method="crown", spec=spec)
    last = B.compute_bounds(c, lo, hi, method="alpha-crown", spec=spec,
                            alpha_intermediate=False)
    full = B.compute_bounds(c, lo, hi, method="alpha-crown", spec=spec)
    assert full.info["alpha_targets"] == 2
    assert np.mean(full.spec[0]) > np.mean(crown.spec[0])
    assert np.mean(full.spec[0]) >= np.mean(last.spec[0]) - 1e-9
    pre = [i for i, n in enumerate(c.graph.nodes) if n.op is not None and n.op.name == act][-1]
    pre = c.graph.nodes[pre].parents[0]
    width = {name: np.mean(r.nodes[pre][1] - r.nodes[pre][0])
             for name, r in (("crown", crown), ("last", last), ("full", full))}
    assert width["last"] == width["crown"] and width["full"] < width["crown"]


def test_bad_arguments_raise_named_errors():
    rng = np.random.default_rng(2)
    c = _matmul_mlp(rng, 2)
    lo, hi = _box(rng, (2, 4), 0.1)
    spec = _spec(rng, c)
    for kwargs, words in ((dict(alpha_lr=0.0), "alpha_lr"), (dict(alpha_steps=-1), "alpha_steps"),
                          (dict(thresholds=[[np.nan] * 3] * 2), "NaN"),
                          (dict(reuse="crown"), "reuse"), (dict(method="beta"), "method")):
        with pytest.raises(B.BoundsError, match=words):
            B.compute_bounds(c, lo, hi, **{"method": "alpha-crown", "spec": spec, **kwargs})
    with pytest.raises(B.BoundsError, match="thresholds need a spec"):
        B.compute_bounds(c, lo, hi, thresholds=0.0)
