"""alpha-CROWN's traced objective: its reverse-mode gradient is the derivative of the bound.

The optimiser climbs the gradient of a traced CROWN bound in the relu slopes. A slope at 0 (CROWN's
starting slope for half of the unstable neurons, and wherever the projection clips) makes
multiplier entries exactly 0; written with ``relu(v)`` / ``relu(-v)`` splits, the bias terms and
stable neurons then lost their derivative there, and the ascent went the wrong way on some slopes.
Checked here against central finite differences of the traced bound itself (the bound is
piecewise linear in each slope, and linear near CROWN's slopes for a small enough step).
"""

from __future__ import annotations

import numpy as np

import torchlean as tl
from torchlean import bounds as B
from torchlean.bounds import alpha
from torchlean.bounds.engine import relu_slopes
from torchlean.engine.transforms import compile as compile_fn


def _chain_gradient_and_differences(seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(seed)
    # matmul + add, as ONNX MatMul/Add imports (the bias is a constant operand of ``add``)
    sizes = (3, 12, 12, 4)
    ws = [(rng.normal(size=(m, n)) / np.sqrt(m)).astype(np.float32)
          for m, n in zip(sizes, sizes[1:], strict=False)]
    bs = [(rng.normal(size=(n,)) * 0.5).astype(np.float32) for n in sizes[1:]]

    def net(x):
        for k, (w, b) in enumerate(zip(ws, bs, strict=True)):
            x = x @ w + b
            if k < len(ws) - 1:
                x = x.relu()
        return x

    compiled = tl.compile(net, (1, 3))
    lo = rng.uniform(-1.0, 0.0, (1, 3))
    hi = lo + 0.6
    crown = B.compute_bounds(compiled, lo, hi, method="crown", kernel=False)
    prop = crown._prop
    nodes = prop.nodes
    relus = [i for i, n in enumerate(nodes) if n.op is not None and n.op.name == "relu"]
    spec = rng.normal(size=(1, 2, 4))
    starts = [np.repeat(relu_slopes(prop.bx(nodes[r].parents[0]).lo,
                                    prop.bx(nodes[r].parents[0]).hi)[0][:, None], 2, axis=1)
              for r in relus]
    chain = alpha._Chain(prop)

    def objective(*slopes):
        owner = slopes[0].owner
        return chain.bound(owner, compiled.graph.output, spec, dict(zip(relus, slopes,
                                                                        strict=True)), {})

    graph = compile_fn(objective, *[s.shape for s in starts], dtype="float64").graph

    def value(slopes):
        return np.asarray(graph.evaluate(graph.check_inputs("t", slopes))[graph.output]).sum()

    values = graph.evaluate(graph.check_inputs("t", starts))
    seed_ = np.ones(np.shape(values[graph.output]))
    dense = graph.backprop(values, graph.output, seed_)
    grads, diffs, at_zero = [], [], 0
    h = 1e-6
    for j, s in enumerate(starts):
        for idx in np.ndindex(s.shape):
            up, down = [x.copy() for x in starts], [x.copy() for x in starts]
            up[j][idx] += h
            down[j][idx] -= h
            grads.append(dense[graph.inputs[j]][idx])
            diffs.append((value(up) - value(down)) / (2 * h))
            at_zero += s[idx] == 0.0
    return np.array(grads), np.array(diffs), at_zero


def test_traced_bound_gradient_matches_finite_differences():
    checked = 0
    for seed in range(3):
        grads, diffs, at_zero = _chain_gradient_and_differences(seed)
        assert at_zero > 0  # slopes starting at 0: where the split form lost derivatives
        np.testing.assert_allclose(grads, diffs, rtol=1e-5, atol=1e-7)
        checked += int(np.sum(np.abs(diffs) > 1e-6))
    assert checked >= 10  # slopes that move the bound: the comparison is not all zeros
