"""Soundness and tightness of torchlean.bounds (IBP, CROWN, alpha-CROWN) and the attacks.

Every check here can fail: sampled float32 executions (corners included) and PGD points must lie
inside every node's bounds; on ReLU nets small enough for an exact MILP the bounds must enclose
the true range; CROWN is never looser than IBP and alpha-CROWN never looser than CROWN; CROWN is
exact on linear nets; outward rounding keeps a value that round-to-nearest loses.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import torchlean as tl
from torchlean import attack, nn
from torchlean import bounds as B
from torchlean.bounds.rounding import mid_rad
from torchlean.engine import ops_interface as F

METHODS = ("ibp", "crown", "alpha-crown")


def _compile(model, shape):
    return tl.compile(lambda x: model(x), shape)


def _sample_values(model, lo, hi, n, rng):
    """Float32 node values of ``n`` points of the box [lo, hi] (batch 1): a fifth are random
    corners, the rest uniform; run through a graph traced for batch ``n`` (same nodes)."""
    u = rng.random((n,) + lo.shape[1:])
    corners = rng.random((n // 5,) + lo.shape[1:]) < 0.5
    u[: n // 5] = corners
    x = (lo + (hi - lo) * u).astype(np.float32)
    # float32 rounding may step just outside the (float64) box: step back in
    x = np.where(x < lo, np.nextafter(x, np.float32(np.inf)), x)
    x = np.where(x > hi, np.nextafter(x, np.float32(-np.inf)), x)
    assert np.all((x >= lo) & (x <= hi))
    big = _compile(model, x.shape)
    return big.graph.evaluate(big.graph.check_inputs("sample", big._full([x])))


def _assert_inside(result, values, where):
    checked = 0
    for i, (lo, hi) in enumerate(result.nodes):
        if lo is None:
            continue
        v = np.asarray(values[i], dtype=np.float64)
        if v.shape[1:] != np.shape(lo)[1:] and v.shape != np.shape(lo):
            continue  # a node whose shape bakes in the batch size (reshape to (B, ...))
        lo_b = lo if v.shape == np.shape(lo) else np.broadcast_to(lo, (1,) + np.shape(lo)[1:])
        hi_b = hi if v.shape == np.shape(hi) else np.broadcast_to(hi, (1,) + np.shape(hi)[1:])
        below, above = v < lo_b, v > hi_b
        assert not below.any() and not above.any(), (
            f"{where}: node %{i} has {int(below.sum() + above.sum())} values outside its bounds "
            f"(worst {float(np.max(np.maximum(lo_b - v, v - hi_b)))})")
        checked += 1
    assert checked >= 3


def mlp(act=nn.ReLU, sizes=(6, 16, 12, 4)):
    layers = []
    for a, b in zip(sizes[:-2], sizes[1:-1], strict=True):
        layers += [nn.Linear(a, b), act()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


def cnn(batch_norm=False, pool=nn.MaxPool2d):
    layers = [nn.Conv2d(1, 4, 3, padding=1)]
    if batch_norm:
        bn = nn.BatchNorm2d(4)
        bn.running_mean = np.linspace(-0.2, 0.2, 4).astype(np.float32)
        bn.running_var = np.linspace(0.5, 1.5, 4).astype(np.float32)
        layers.append(bn)
    layers += [nn.ReLU(), pool(2), nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(), nn.Flatten(),
               nn.Linear(6 * 4 * 4, 5)]
    model = nn.Sequential(*layers)
    model.eval()
    return model


CASES = {
    "mlp-relu": (lambda: mlp(), (6,)),
    "mlp-tanh": (lambda: mlp(nn.Tanh), (6,)),
    "mlp-sigmoid": (lambda: mlp(nn.Sigmoid), (6,)),
    "cnn-maxpool": (lambda: cnn(), (1, 8, 8)),
    "cnn-avgpool-bn": (lambda: cnn(batch_norm=True, pool=nn.AvgPool2d), (1, 8, 8)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sampled_points_and_pgd_inside_every_node(case):
    make, shape = CASES[case]
    tl.manual_seed(3)
    model = make()
    rng = np.random.default_rng(7)
    c = _compile(model, (1, *shape))
    centre = rng.random((1, *shape))
    eps = 0.15
    lo, hi = B.box(centre, eps)
    n_out = c.out_shape[1]
    spec = B.margin_spec([1], n_out)
    values = _sample_values(model, lo, hi, 10_000, rng)
    adv = attack.pgd(c, centre.astype(np.float32), np.array([1]), eps, steps=10, restarts=2,
                     seed=1)
    adv_values = c.graph.evaluate(c.graph.check_inputs("pgd", c._full([adv.inputs])))
    previous = None
    for method in METHODS:
        result = B.compute_bounds(c, lo, hi, method=method, spec=spec, alpha_steps=5)
        _assert_inside(result, values, f"{case} {method} samples")
        _assert_inside(result, adv_values, f"{case} {method} pgd")
        # The specification rows bound the sampled margins too.
        out = np.asarray(values[c.graph.output], np.float64)
        margins = np.einsum("kc,nc->nk", spec[0], out)
        assert np.all(margins >= result.spec[0][0]) and np.all(margins <= result.spec[1][0])
        if previous is not None:  # each method at least as tight as the one before
            assert np.all(result.spec[0] >= previous.spec[0])
            assert np.all(result.output[0] >= previous.output[0])
            assert np.all(result.output[1] <= previous.output[1])
        previous = result


def _milp_range(weights, lo, hi, out_index, sign, boxes):
    """Exact min of ``sign * out[out_index]`` over the box for a ReLU net, by a big-M MILP whose
    M are sound interval bounds (``boxes``: pre-activation intervals per hidden layer)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    n_in = lo.size
    sizes = [w.shape[0] for w, _ in weights]
    # variable layout: x, then per hidden layer (z, a, d), then the output
    idx, pos = {}, n_in
    for k, h in enumerate(sizes[:-1]):
        idx[k] = (pos, pos + h, pos + 2 * h)
        pos += 3 * h
    out_pos, total = pos, pos + sizes[-1]
    rows, lbs, ubs = [], [], []
    var_lo = np.full(total, -np.inf)
    var_hi = np.full(total, np.inf)
    var_lo[:n_in], var_hi[:n_in] = lo, hi
    integrality = np.zeros(total)
    prev = list(range(n_in))
    for k, (w, b) in enumerate(weights):
        h = w.shape[0]
        target = range(out_pos, out_pos + h) if k == len(weights) - 1 else range(idx[k][0],
                                                                                idx[k][0] + h)
        for j, t in enumerate(target):  # z_j - W_j . prev = b_j
            r = np.zeros(total)
            r[t] = 1.0
            r[prev] -= w[j]
            rows.append(r)
            lbs.append(b[j])
            ubs.append(b[j])
        if k == len(weights) - 1:
            break
        z0, a0, d0 = idx[k]
        zl, zu = boxes[k]
        integrality[d0:d0 + h] = 1
        var_lo[d0:d0 + h], var_hi[d0:d0 + h] = 0, 1
        var_lo[a0:a0 + h] = 0
        for j in range(h):
            for coeffs, lb, ub in (
                ({a0 + j: 1, z0 + j: -1}, 0, np.inf),                      # a >= z
                ({a0 + j: 1, z0 + j: -1, d0 + j: -zl[j]}, -np.inf, -zl[j]),  # a <= z - l(1-d)
                ({a0 + j: 1, d0 + j: -zu[j]}, -np.inf, 0),                 # a <= u d
            ):
                r = np.zeros(total)
                for key, val in coeffs.items():
                    r[key] = val
                rows.append(r)
                lbs.append(lb)
                ubs.append(ub)
        prev = list(range(a0, a0 + h))
    cost = np.zeros(total)
    cost[out_pos + out_index] = sign
    res = milp(cost, constraints=LinearConstraint(np.array(rows), lbs, ubs),
               integrality=integrality, bounds=Bounds(var_lo, var_hi),
               options={"mip_rel_gap": 1e-9})
    assert res.success, res.message
    return sign * res.fun


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bounds_enclose_exact_range_of_small_relu_nets(seed):
    tl.manual_seed(seed)
    model = mlp(sizes=(2, 8, 8, 2))
    c = _compile(model, (1, 2))
    rng = np.random.default_rng(seed)
    centre = rng.uniform(0.3, 0.7, (1, 2))
    lo, hi = B.box(centre, 0.3)
    results = {m: B.compute_bounds(c, lo, hi, method=m, spec=np.eye(2)[None], kernel=False)
               for m in METHODS}
    ibp = results["ibp"]
    weights = [(np.asarray(layer.weight.array, np.float64),
                np.asarray(layer.bias.array, np.float64))
               for layer in model if isinstance(layer, nn.Linear)]
    linear_ids = [i for i, n in enumerate(c.graph.nodes) if n.op is not None
                  and n.op.name == "linear"]
    boxes = [(ibp.nodes[i][0][0], ibp.nodes[i][1][0]) for i in linear_ids[:-1]]
    for j in range(2):
        true_min = _milp_range(weights, lo[0], hi[0], j, 1.0, boxes)
        true_max = _milp_range(weights, lo[0], hi[0], j, -1.0, boxes)
        for method, r in results.items():
            assert r.output[0][0, j] <= true_min + 1e-7, method
            assert r.output[1][0, j] >= true_max - 1e-7, method
            assert r.spec[0][0, j] <= true_min + 1e-7, method
        # tightness order on the output and on the specification rows
        assert results["crown"].output[0][0, j] >= ibp.output[0][0, j]
        assert results["crown"].output[1][0, j] <= ibp.output[1][0, j]
        assert results["alpha-crown"].spec[0][0, j] >= results["crown"].spec[0][0, j]
        assert results["crown"].spec[0][0, j] >= ibp.spec[0][0, j]


def test_crown_is_exact_on_a_linear_network():
    tl.manual_seed(5)
    model = nn.Sequential(nn.Linear(5, 7), nn.Linear(7, 3))
    c = _compile(model, (2, 5))
    rng = np.random.default_rng(5)
    lo, hi = B.box(rng.random((2, 5)), 0.2)
    r = B.compute_bounds(c, lo, hi, method="crown", kernel=False)
    w1, b1 = (np.asarray(p.array, np.float64) for p in (model[0].weight,
                                                       model[0].bias))
    w2, b2 = (np.asarray(p.array, np.float64) for p in (model[1].weight,
                                                       model[1].bias))
    a = w2 @ w1
    centre, radius = (lo + hi) / 2, (hi - lo) / 2
    exact_lo = centre @ a.T + w2 @ b1 + b2 - radius @ np.abs(a).T
    exact_hi = centre @ a.T + w2 @ b1 + b2 + radius @ np.abs(a).T
    assert np.all(r.output[0] <= exact_lo) and np.all(r.output[1] >= exact_hi)
    np.testing.assert_allclose(r.output[0], exact_lo, rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.output[1], exact_hi, rtol=0, atol=1e-12)
    ibp = B.compute_bounds(c, lo, hi, method="ibp", kernel=False)
    assert np.max(ibp.output[1] - ibp.output[0]) > np.max(r.output[1] - r.output[0]) + 1e-3


def test_outward_rounding_keeps_what_round_to_nearest_loses():
    # y = 1 * 1 + 2**-60 * 1: every weight and input is a float32, the true y is 1 + 2**-60.
    model = nn.Linear(2, 1)
    model.weight.array[...] = np.array([[1.0, 2.0 ** -60]], dtype=np.float32)
    model.bias.array[...] = 0.0
    c = _compile(model, (1, 2))
    x = np.ones((1, 2))
    naive32 = np.float32(1.0) * np.float32(1.0) + np.float32(2.0 ** -60) * np.float32(1.0)
    naive64 = 1.0 * 1.0 + 2.0 ** -60
    true = Fraction(1) + Fraction(1, 2 ** 60)
    assert Fraction(float(naive32)) < true and Fraction(naive64) < true  # both lose it
    for kernel in (False, True):
        r = B.compute_bounds(c, x, x, method="ibp", kernel=kernel)
        lo, hi = float(r.output[0][0, 0]), float(r.output[1][0, 0])
        assert Fraction(lo) <= true <= Fraction(hi)
        assert lo <= float(c.forward(x.astype(np.float32))[0, 0]) <= hi or not kernel
    # the centre-radius split never loses a point either
    c_, r_ = mid_rad(np.array([0.1]), np.array([0.1 + 2 ** -50]))
    assert c_ - r_ <= 0.1 and c_ + r_ >= 0.1 + 2 ** -50


def test_float32_kernel_term_widens_the_bounds_to_cover_the_kernel():
    tl.manual_seed(1)
    model = mlp(sizes=(6, 16, 4))
    c = _compile(model, (1, 6))
    x = np.random.default_rng(0).random((1, 6))
    real = B.compute_bounds(c, x, x, method="crown", kernel=False)
    f32 = B.compute_bounds(c, x, x, method="crown", kernel=True)
    assert np.all(f32.output[0] <= real.output[0]) and np.all(f32.output[1] >= real.output[1])
    y = c.forward(x.astype(np.float32))
    assert np.all(f32.output[0] <= y) and np.all(y <= f32.output[1])


def test_unsupported_primitive_is_named():
    def attention_like(x):
        return F.masked_softmax(x, mask=None)

    c = tl.compile(attention_like, (1, 4))
    with pytest.raises(B.UnsupportedOpError, match="masked_softmax"):
        B.compute_bounds(c, np.zeros((1, 4)), np.ones((1, 4)), method="ibp")


def test_bad_inputs_raise_torchlean_errors():
    model = mlp()
    c = _compile(model, (2, 6))
    lo, hi = np.zeros((2, 6)), np.ones((2, 6))
    with pytest.raises(tl.TorchLeanError, match="method"):
        B.compute_bounds(c, lo, hi, method="deeppoly")
    with pytest.raises(tl.TorchLeanError, match="shape"):
        B.compute_bounds(c, np.zeros((3, 6)), np.ones((3, 6)))
    with pytest.raises(tl.TorchLeanError, match="lower > upper"):
        B.compute_bounds(c, hi, lo)
    with pytest.raises(tl.TorchLeanError, match="spec"):
        B.compute_bounds(c, lo, hi, spec=np.zeros((2, 3, 5)))
    with pytest.raises(tl.TorchLeanError, match="compiled"):
        B.compute_bounds(model, lo, hi)
    with pytest.raises(tl.TorchLeanError, match="eps"):
        B.box(lo, -1.0)
    with pytest.raises(tl.TorchLeanError, match="labels"):
        B.margin_spec([0, 7], 4)
    with pytest.raises(tl.TorchLeanError, match="steps"):
        attack.pgd(c, lo, np.array([0, 1]), 0.1, steps=0)
    with pytest.raises(tl.TorchLeanError, match="labels"):
        attack.fgsm(c, lo, np.array([0, 9]), 0.1)


def test_fgsm_and_pgd_stay_in_the_ball_and_are_seeded():
    tl.manual_seed(2)
    model = mlp()
    c = _compile(model, (8, 6))
    rng = np.random.default_rng(3)
    x = rng.random((8, 6)).astype(np.float32)
    y = np.argmax(c.forward(x), axis=1)
    eps = 0.1
    for res in (attack.fgsm(c, x, y, eps), attack.pgd(c, x, y, eps, steps=5, seed=4)):
        assert np.all(np.abs(res.inputs - x) <= eps + 1e-6)
        assert np.all((res.inputs >= 0) & (res.inputs <= 1))
        np.testing.assert_array_equal(res.broken, np.argmax(c.forward(res.inputs), 1) != y)
    a = attack.pgd(c, x, y, eps, steps=5, seed=4)
    b = attack.pgd(c, x, y, eps, steps=5, seed=4)
    np.testing.assert_array_equal(a.inputs, b.inputs)


def test_pgd_breaks_what_it_must_and_never_what_is_certified():
    # logits (x0 - 0.5, 0.5 - x0): class 0 iff x0 > 0.5; at x0 = 0.6 the decision is 0.1 away.
    model = nn.Linear(3, 2)
    model.weight.array[...] = np.array([[1, 0, 0], [-1, 0, 0]], dtype=np.float32)
    model.bias.array[...] = np.array([-0.5, 0.5], dtype=np.float32)
    c = _compile(model, (1, 3))
    x = np.array([[0.6, 0.3, 0.3]], dtype=np.float32)
    y = np.array([0])
    spec = B.margin_spec(y, 2)
    for eps, breakable in ((0.05, False), (0.09, False), (0.11, True), (0.3, True)):
        adv = attack.pgd(c, x, y, eps, steps=10, seed=0)
        assert bool(adv.broken[0]) == breakable, eps
        assert bool(attack.fgsm(c, x, y, eps).broken[0]) == breakable, eps
        for method in METHODS:
            lo, hi = B.box(x, eps)
            certified = B.compute_bounds(c, lo, hi, method=method, spec=spec).spec[0].min() > 0
            assert certified == (not breakable), (eps, method)


def _inside(points, box):
    """Float32 points stepped back into a float64 box where rounding pushed them out."""
    p = points.astype(np.float32)
    p = np.where(p < box.lo, np.nextafter(p, np.float32(np.inf)), p)
    return np.where(p > box.hi, np.nextafter(p, np.float32(-np.inf)), p)


def test_every_interval_rule_encloses_its_float32_kernel_on_the_samples():
    from torchlean.bounds import ibp
    from torchlean.bounds.rounding import down, up
    from torchlean.core.registry import REGISTRY

    rng = np.random.default_rng(0)
    ctx = ibp.Context.for_dtype("float32")
    checked = set()
    for name in sorted(ibp.RULES):
        prim = REGISTRY[name]
        assert not hasattr(prim, "bounds")  # the rule lives in the side table, keyed by name
        for sample in prim.samples(rng):
            xs = [np.asarray(a, np.float64) for a in sample.inputs]
            rad = [0.05 * np.abs(x) + 0.01 if x.dtype.kind == "f" else 0 * x for x in xs]
            boxes = [ibp.Interval(x - r, x + r) for x, r in zip(xs, rad, strict=True)]
            iv = ibp.RULES[name](boxes, dict(sample.attrs), ctx)
            lo, hi = down(iv.lo - iv.eps), up(iv.hi + iv.eps)
            for _ in range(50):
                pts = [_inside(x + r * rng.uniform(-1, 1, x.shape), b)
                       for x, r, b in zip(xs, rad, boxes, strict=True)]
                try:
                    y = np.asarray(prim.forward(*pts, **sample.attrs), np.float64)
                except tl.TorchLeanError:  # e.g. log of a point the box lets reach 0
                    continue
                assert np.all(y >= lo) and np.all(y <= hi), name
                checked.add(name)
    assert len(checked) >= 50


@pytest.mark.parametrize("seed", [0, 1])
def test_alpha_crown_optimisation_tightens_crown(seed):
    tl.manual_seed(seed)
    model = mlp(sizes=(6, 32, 32, 4))
    c = _compile(model, (4, 6))
    rng = np.random.default_rng(seed)
    lo, hi = B.box(rng.random((4, 6)), 0.1)
    spec = B.margin_spec(np.arange(4), 4)
    crown = B.compute_bounds(c, lo, hi, method="crown", spec=spec)
    alpha = B.compute_bounds(c, lo, hi, method="alpha-crown", spec=spec, alpha_steps=20)
    gain = alpha.spec[0] - crown.spec[0]
    assert np.all(gain >= 0) and gain.sum() > 1e-3  # the slopes moved, and for the better
    assert alpha.info["alpha_examples"] > 0
    none = B.compute_bounds(c, lo, hi, method="alpha-crown", spec=spec, alpha_steps=0)
    np.testing.assert_array_equal(none.spec[0], crown.spec[0])


@pytest.mark.parametrize("name", ["tanh", "sigmoid"])
def test_smooth_relaxation_terms_bound_sigma_minus_a_line(name):
    from torchlean.bounds.engine import max_g, min_g, smooth_slopes

    rng = np.random.default_rng(1)
    centre = rng.normal(0, 3, 400)
    width = np.abs(rng.normal(0, 1, 400)) * rng.choice([1e-6, 0.1, 1.0, 5.0], 400)
    lo, hi = centre - width, centre + width
    a_lo, a_hi = smooth_slopes(name, lo, hi)
    for a in (a_lo, a_hi, rng.uniform(-0.5, 1.5, 400)):
        mn, mx = min_g(name, lo, hi, a), max_g(name, lo, hi, a)
        t = lo[:, None] + (hi - lo)[:, None] * np.linspace(0, 1, 2001)[None, :]
        f = np.tanh(t) if name == "tanh" else 1 / (1 + np.exp(-t))
        g = f - a[:, None] * t
        slack = 4e-16 * (1 + np.abs(g).max(axis=1))  # the grid's own float rounding
        assert np.all(mn <= g.min(axis=1) + slack) and np.all(mx >= g.max(axis=1) - slack)
        assert np.max(g.min(axis=1) - mn) < 1e-3 and np.max(mx - g.max(axis=1)) < 1e-3  # tight
