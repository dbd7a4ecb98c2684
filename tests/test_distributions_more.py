"""torchlean.distributions against torch.distributions: densities, moments, cdfs, entropies and
their gradients on fixed parameters (float32 and float64), shapes, seeded sample moments within
five standard errors, the implicit reparameterisation gradients, KL rules and validation."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl

torch = pytest.importorskip("torch")
TD = torch.distributions
D = tl.distributions
R = np.random.default_rng(7)

LOC = np.array([[0.3, -1.2, 2.0], [0.0, 0.5, -0.7]])
SCALE = np.array([[0.5, 1.3, 2.0], [0.9, 0.2, 1.1]])
P = np.array([[0.2, 0.7, 0.45], [0.9, 0.05, 0.5]])
CONC = np.array([[0.7, 2.5, 4.0], [1.3, 0.4, 9.0]])
RATE = np.array([[1.5, 0.3, 2.0], [0.8, 1.0, 4.5]])
VEC = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
A = R.standard_normal((2, 3, 3))
COV = A @ np.swapaxes(A, -1, -2) + 0.5 * np.eye(3)


def _real(shape=(4, 2, 3)):
    return np.random.default_rng(1).standard_normal(shape) * 1.5


def _pos(shape=(4, 2, 3)):
    return np.random.default_rng(2).gamma(2.0, 1.0, shape) + 0.05


def _unit(shape=(4, 2, 3)):
    return np.random.default_rng(3).uniform(0.02, 0.98, shape)


def _counts(top, shape=(4, 2, 3)):
    return np.random.default_rng(4).integers(0, top, shape).astype(float)


def _simplex(shape=(4, 2, 3)):
    g = np.random.default_rng(5).gamma(1.5, 1.0, shape)
    return g / g.sum(-1, keepdims=True)


# name: (constructor over a namespace and params, params, values, torch has rsample)
CASES = {
    "Normal": (lambda M, p: M.Normal(p["loc"], p["scale"]), {"loc": LOC, "scale": SCALE},
               _real()),
    "Uniform": (lambda M, p: M.Uniform(p["low"], p["high"]),
                {"low": LOC, "high": LOC + SCALE + 3.0}, LOC + 0.4 * (SCALE + 3.0)),
    "Exponential": (lambda M, p: M.Exponential(p["rate"]), {"rate": RATE}, _pos()),
    "Laplace": (lambda M, p: M.Laplace(p["loc"], p["scale"]), {"loc": LOC, "scale": SCALE},
                _real()),
    "Cauchy": (lambda M, p: M.Cauchy(p["loc"], p["scale"]), {"loc": LOC, "scale": SCALE},
               _real()),
    "Gumbel": (lambda M, p: M.Gumbel(p["loc"], p["scale"]), {"loc": LOC, "scale": SCALE},
               _real()),
    "Gamma": (lambda M, p: M.Gamma(p["c"], p["rate"]), {"c": CONC, "rate": RATE}, _pos()),
    "Chi2": (lambda M, p: M.Chi2(p["df"]), {"df": CONC * 2}, _pos()),
    "Beta": (lambda M, p: M.Beta(p["a"], p["b"]), {"a": CONC, "b": RATE + 0.5}, _unit()),
    "StudentT": (lambda M, p: M.StudentT(p["df"], p["loc"], p["scale"]),
                 {"df": CONC + 0.5, "loc": LOC, "scale": SCALE}, _real()),
    "LogNormal": (lambda M, p: M.LogNormal(p["loc"], p["scale"]), {"loc": LOC, "scale": SCALE},
                  _pos()),
    "HalfNormal": (lambda M, p: M.HalfNormal(p["scale"]), {"scale": SCALE}, _pos()),
    "HalfCauchy": (lambda M, p: M.HalfCauchy(p["scale"]), {"scale": SCALE}, _pos()),
    "Pareto": (lambda M, p: M.Pareto(p["scale"], p["alpha"]), {"scale": SCALE, "alpha": RATE + 2},
               SCALE + _pos()),
    "Weibull": (lambda M, p: M.Weibull(p["scale"], p["c"]), {"scale": SCALE, "c": CONC + 0.3},
                _pos()),
    "Bernoulli": (lambda M, p: M.Bernoulli(probs=p["p"]), {"p": P}, _counts(2)),
    "BernoulliLogits": (lambda M, p: M.Bernoulli(logits=p["l"]), {"l": LOC}, _counts(2)),
    "Binomial": (lambda M, p: M.Binomial(p["n"], probs=p["p"]),
                 {"n": np.full((2, 3), 9.0), "p": P}, _counts(10)),
    "BinomialLogits": (lambda M, p: M.Binomial(6, logits=p["l"]), {"l": LOC}, _counts(7)),
    "Geometric": (lambda M, p: M.Geometric(probs=p["p"]), {"p": P}, _counts(8)),
    "Poisson": (lambda M, p: M.Poisson(p["rate"]), {"rate": RATE * 3}, _counts(9)),
    "NegativeBinomial": (lambda M, p: M.NegativeBinomial(p["r"], probs=p["p"]),
                         {"r": CONC + 1, "p": P * 0.9}, _counts(9)),
    "Categorical": (lambda M, p: M.Categorical(probs=p["p"]), {"p": VEC},
                    _counts(3, (4, 2))),
    "CategoricalLogits": (lambda M, p: M.Categorical(logits=p["l"]), {"l": LOC},
                          _counts(3, (4, 2))),
    "OneHotCategorical": (lambda M, p: M.OneHotCategorical(probs=p["p"]), {"p": VEC},
                          np.eye(3)[np.random.default_rng(6).integers(0, 3, (4, 2))]),
    "Multinomial": (lambda M, p: M.Multinomial(5, logits=p["l"]), {"l": LOC},
                    np.array([[[1.0, 4, 0], [2, 2, 1]], [[0, 0, 5], [3, 1, 1]]])),
    "Dirichlet": (lambda M, p: M.Dirichlet(p["c"]), {"c": CONC}, _simplex()),
    "MultivariateNormal": (lambda M, p: M.MultivariateNormal(p["loc"], covariance_matrix=p["cov"]),
                           {"loc": LOC, "cov": COV}, _real()),
    "MVNScaleTril": (lambda M, p: M.MultivariateNormal(p["loc"], scale_tril=p["L"]),
                     {"loc": LOC, "L": np.linalg.cholesky(COV)}, _real()),
    "MVNPrecision": (lambda M, p: M.MultivariateNormal(p["loc"], precision_matrix=p["P"]),
                     {"loc": LOC, "P": np.linalg.inv(COV)}, _real()),
    "LowRankMVN": (lambda M, p: M.LowRankMultivariateNormal(p["loc"], p["W"], p["d"]),
                   {"loc": LOC, "W": A[..., :2], "d": SCALE}, _real()),
    "Independent": (lambda M, p: M.Independent(M.Normal(p["loc"], p["scale"]), 1),
                    {"loc": LOC, "scale": SCALE}, _real()),
    "RelaxedBernoulli": (lambda M, p: M.RelaxedBernoulli(p["t"], probs=p["p"]),
                         {"t": np.array(0.7), "p": P}, _unit()),
    "RelaxedOneHot": (lambda M, p: M.RelaxedOneHotCategorical(p["t"], logits=p["l"]),
                      {"t": np.array(0.6), "l": LOC}, _simplex()),
    "MixtureSameFamily": (lambda M, p: M.MixtureSameFamily(
        M.Categorical(logits=p["l"]), M.Normal(p["loc"], p["scale"])),
        {"l": LOC, "loc": LOC * 2, "scale": SCALE}, _real((4, 2))),
    "TransformedTanh": (lambda M, p: M.TransformedDistribution(
        M.Normal(p["loc"], p["scale"]),
        [M.transforms.TanhTransform(), M.transforms.AffineTransform(0.5, 2.0)]),
        {"loc": LOC, "scale": SCALE}, 0.5 + 2 * np.tanh(_real())),
}

PROPS = ["mean", "variance", "stddev", "mode"]


def _build(name, dtype, grad):
    make, params, _ = CASES[name]
    ours = {k: tl.tensor(np.asarray(v, dtype), requires_grad=grad) for k, v in params.items()}
    theirs = {k: torch.tensor(np.asarray(v, dtype), requires_grad=grad)
              for k, v in params.items()}
    return make(D, ours), make(TD, theirs), ours, theirs


def _close(a, b, dtype, rtol=None):
    a = np.asarray(a.detach().numpy() if hasattr(a, "detach") else a, np.float64)
    b = np.asarray(b.detach().numpy() if hasattr(b, "detach") else b, np.float64)
    tol = rtol or (2e-4 if dtype == np.float32 else 1e-8)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _torch_has(fn):
    try:
        return fn(), True
    except NotImplementedError:
        return None, False


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_match_torch(name, dtype):
    ours, theirs, _, _ = _build(name, dtype, False)
    value = np.asarray(CASES[name][2], dtype)
    assert tuple(ours.batch_shape) == tuple(theirs.batch_shape)
    assert tuple(ours.event_shape) == tuple(theirs.event_shape)
    assert ours.has_rsample == theirs.has_rsample
    lp = ours.log_prob(tl.tensor(value))
    assert lp.dtype == np.dtype(dtype)
    _close(lp, theirs.log_prob(torch.tensor(value)), dtype)
    for prop in PROPS:
        ref, has = _torch_has(lambda prop=prop: getattr(theirs, prop))
        if has:
            _close(getattr(ours, prop), ref, dtype)
    ref, has = _torch_has(theirs.entropy)
    if has:
        _close(ours.entropy(), ref, dtype, 1e-4 if dtype == np.float32 else 1e-7)
    ref, has = _torch_has(lambda: theirs.cdf(torch.tensor(value)))
    if has:
        _close(ours.cdf(tl.tensor(value)), ref, dtype)
        q = np.resize(np.array([0.1, 0.5, 0.93], dtype), value.shape)
        ref, has = _torch_has(lambda: theirs.icdf(torch.tensor(q)))
        if has:
            _close(ours.icdf(tl.tensor(q)), ref, dtype, 1e-3 if dtype == np.float32 else 1e-7)
    for shape in [(), (5,), (2, 1)]:
        assert tuple(ours.sample(shape).shape) == tuple(theirs.sample(shape).shape)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_torch(name):
    ours, theirs, po, pt = _build(name, np.float64, True)
    value = np.asarray(CASES[name][2], np.float64)
    total_o = ours.log_prob(tl.tensor(value)).sum()
    total_t = theirs.log_prob(torch.tensor(value)).sum()
    ent, has = _torch_has(theirs.entropy)
    if has:
        total_o = total_o + ours.entropy().sum()
        total_t = total_t + ent.sum()
    mean, has = _torch_has(lambda: theirs.mean)
    if has and bool(torch.isfinite(mean).all()):
        total_o = total_o + ours.mean.sum()
        total_t = total_t + mean.sum()
    total_t.backward()
    total_o.backward()
    for k in po:
        if pt[k].grad is None:
            continue
        _close(po[k].grad, pt[k].grad, np.float64, 1e-6)


SAMPLED = [n for n in sorted(CASES) if n not in (
    "Cauchy", "HalfCauchy", "RelaxedOneHot", "RelaxedBernoulli", "TransformedTanh",
    "Categorical", "CategoricalLogits")]  # no moments (or none in closed form): other tests


@pytest.mark.parametrize("name", SAMPLED)
def test_sample_moments_within_five_standard_errors(name):
    ours, theirs, _, _ = _build(name, np.float64, False)
    tl.manual_seed(1234)
    n = 20000
    x = ours.sample((n,)).numpy().astype(np.float64)
    mean = theirs.mean.numpy()
    var = theirs.variance.numpy()
    ok = np.isfinite(var)  # StudentT with df <= 2 has no finite variance (checked by its cdf)
    assert ok.sum() >= min(3, ok.size)
    se = np.sqrt(var / n)
    assert np.all((np.abs(x.mean(0) - mean) <= 5 * se + 1e-12)[ok]), (x.mean(0), mean)
    # the sample variance's standard error needs a finite fourth moment (StudentT df > 4)
    ok4 = ok & (np.asarray(CASES[name][1].get("df", 9.0)) + 0 > 4.5)
    m4 = ((x - x.mean(0)) ** 4).mean(0)
    se_var = np.sqrt(np.maximum(m4 - var ** 2, 0) / n)
    assert np.all((np.abs(x.var(0) - var) <= 5 * se_var + 1e-9)[ok4]), (x.var(0), var)
    assert np.all(np.isfinite(theirs.log_prob(torch.tensor(x[:50])).numpy()))  # in support


@pytest.mark.parametrize("name", ["Cauchy", "HalfCauchy", "StudentT", "RelaxedBernoulli",
                                  "TransformedTanh"])
def test_heavy_or_transformed_samples_match_the_cdf(name):
    """Where moments are infinite or not closed-form: the fraction of draws under torch's
    cdf quantiles (or the median) is within five standard errors."""
    ours, theirs, _, _ = _build(name, np.float64, False)
    tl.manual_seed(99)
    n = 20000
    x = torch.tensor(ours.sample((n,)).numpy())
    if name in ("RelaxedBernoulli", "TransformedTanh"):
        ref = theirs.sample((n,))  # two samples: their medians agree within the noise
        for q in (0.25, 0.5, 0.75):
            a, b = torch.quantile(x, q, dim=0), torch.quantile(ref, q, dim=0)
            frac = (ref <= a).double().mean(0).numpy()
            assert np.all(np.abs(frac - q) <= 5 * np.sqrt(2 * q * (1 - q) / n)), (a, b)
        return
    if name == "StudentT":  # torch has no StudentT.cdf: scipy's
        stats = pytest.importorskip("scipy.stats")
        p = CASES[name][1]
        cdf = torch.tensor(stats.t.cdf(x.numpy(), p["df"], p["loc"], p["scale"]))
    else:
        cdf = theirs.cdf(x)
    for q in (0.1, 0.5, 0.9):
        frac = (cdf <= q).double().mean(0).numpy()
        assert np.all(np.abs(frac - q) <= 5 * np.sqrt(q * (1 - q) / n))


@pytest.mark.parametrize("name", ["Normal", "Laplace", "Cauchy", "Gumbel", "Uniform",
                                  "LogNormal", "StudentT", "MultivariateNormal",
                                  "TransformedTanh", "Exponential", "Weibull", "Pareto"])
def test_rsample_is_a_differentiable_function_of_the_parameters(name):
    """Reparameterised draws: the gradient of sum(rsample) equals the derivative of the
    sampling map at the same noise, which the finite difference of two draws seeded alike
    gives (the noise is the same for the same seed)."""
    make, params, _ = CASES[name]
    # StudentT's df enters through a Gamma draw, whose implicit gradient holds the draw's
    # quantile fixed, not the sampler's noise (tested below against the inverse cdf)
    for key in [k for k in params if not (name == "StudentT" and k == "df")]:
        base = {k: tl.tensor(np.asarray(v, np.float64), requires_grad=(k == key))
                for k, v in params.items()}
        tl.manual_seed(5)
        x = make(D, base).rsample((3,))
        x.sum().backward()
        grad = base[key].grad.numpy()
        h = 1e-6
        # the finite difference of the summed draws, one parameter element at a time
        fd = np.zeros_like(np.asarray(params[key], np.float64))
        for idx in np.ndindex(fd.shape):
            moved = [{k: np.array(v, np.float64) for k, v in params.items()} for _ in range(2)]
            moved[0][key][idx] += h
            moved[1][key][idx] -= h
            draws = []
            for m in moved:
                tl.manual_seed(5)
                draws.append(make(D, {k: tl.tensor(v) for k, v in m.items()}).rsample(
                    (3,)).numpy().sum())
            fd[idx] = (draws[0] - draws[1]) / (2 * h)
        if key == "cov":  # the factorisation reads one triangle; torch's gradient is symmetric
            fd = (fd + np.swapaxes(fd, -1, -2)) / 2
        np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-5)
        assert np.abs(grad).sum() > 0


@pytest.mark.parametrize("name, key, dmean", [
    ("Gamma", "c", lambda p: 1 / p["rate"]),
    ("Beta", "a", lambda p: p["b"] / (p["a"] + p["b"]) ** 2),
    ("Chi2", "df", lambda p: np.ones_like(p["df"])),
])
def test_implicit_reparameterisation_gradient_is_unbiased(name, key, dmean):
    """Gamma/Beta/Chi2 rsample carry torch's implicit gradient: averaged over many draws,
    d rsample / d concentration is d mean / d concentration."""
    make, params, _ = CASES[name]
    base = {k: tl.tensor(np.asarray(v, np.float64), requires_grad=(k == key))
            for k, v in params.items()}
    tl.manual_seed(11)
    n = 4000
    x = make(D, base).rsample((n,))
    x.sum().backward()
    est = base[key].grad.numpy() / n
    exact = dmean({k: np.asarray(v, np.float64) for k, v in params.items()})
    np.testing.assert_allclose(est, exact, rtol=0.1, atol=0.02)


def test_gamma_implicit_gradient_matches_the_inverse_cdf_derivative():
    scipy_special = pytest.importorskip("scipy.special")
    alpha = tl.tensor(np.array([0.3, 1.0, 2.5, 8.0]), requires_grad=True)
    tl.manual_seed(3)
    x = D.Gamma(alpha, 1.0).rsample()
    x.sum().backward()
    xv, av = x.detach().numpy(), alpha.detach().numpy()
    u = scipy_special.gammainc(av, xv)
    h = 1e-6
    fd = (scipy_special.gammaincinv(av + h, u) - scipy_special.gammaincinv(av - h, u)) / (2 * h)
    np.testing.assert_allclose(alpha.grad.numpy(), fd, rtol=1e-4)


def test_dirichlet_rsample_gradient_is_unbiased():
    c = tl.tensor(np.array([0.8, 2.0, 3.5]), requires_grad=True)
    tl.manual_seed(8)
    n = 4000
    x = D.Dirichlet(c).rsample((n,))
    (x[:, 0].sum()).backward()
    c0 = 6.3
    exact = np.array([(c0 - 0.8) / c0 ** 2, -0.8 / c0 ** 2, -0.8 / c0 ** 2])
    np.testing.assert_allclose(c.grad.numpy() / n, exact, atol=0.01)
    assert np.allclose(x.detach().numpy().sum(-1), 1.0)


class _Namespace:
    """The distributions and the few factories a KL pair's builder names, as one namespace."""

    def __init__(self, dist, lib):
        self._dist, self._lib = dist, lib

    def __getattr__(self, name):
        return getattr(self._dist, name) if hasattr(self._dist, name) else getattr(self._lib, name)


def _tril(M, b):
    return b.diag_embed() + M.ones(3, 3, dtype=b.dtype).tril(-1) * 0.3


KL_PAIRS = {
    "Normal": lambda M, a, b: (M.Normal(a[0], b[0]), M.Normal(a[1], b[1])),
    "Laplace": lambda M, a, b: (M.Laplace(a[0], b[0]), M.Laplace(a[1], b[1])),
    "Exponential": lambda M, a, b: (M.Exponential(b[0]), M.Exponential(b[1])),
    "Gamma": lambda M, a, b: (M.Gamma(b[0], b[1]), M.Gamma(b[1] + 0.3, b[0])),
    "Beta": lambda M, a, b: (M.Beta(b[0], b[1]), M.Beta(b[1] + 0.3, b[0])),
    "Dirichlet": lambda M, a, b: (M.Dirichlet(b[0]), M.Dirichlet(b[1])),
    "Bernoulli": lambda M, a, b: (M.Bernoulli(logits=a[0]), M.Bernoulli(logits=a[1])),
    "Categorical": lambda M, a, b: (M.Categorical(logits=a[0]), M.Categorical(probs=b[1])),
    "OneHot": lambda M, a, b: (M.OneHotCategorical(logits=a[0]),
                               M.OneHotCategorical(probs=b[1])),
    "Uniform-Normal": lambda M, a, b: (M.Uniform(a[0], a[0] + b[0]), M.Normal(a[1], b[1])),
    "Uniform": lambda M, a, b: (M.Uniform(a[0] - 0.1, a[0] + b[0]),
                                M.Uniform(a[0] - 0.5, a[0] + b[0] + b[1])),
    "Poisson": lambda M, a, b: (M.Poisson(b[0]), M.Poisson(b[1])),
    "Geometric": lambda M, a, b: (M.Geometric(b[0] / 3), M.Geometric(b[1] / 3)),
    "MVN": lambda M, a, b: (M.MultivariateNormal(a[0], scale_tril=_tril(M, b[0])),
                            M.MultivariateNormal(a[1], covariance_matrix=(
                                M.ones(3, 3, dtype=b.dtype) * 0.2 + (b[1] + 0.5).diag_embed()))),
    "Independent": lambda M, a, b: (M.Independent(M.Normal(a[0], b[0]), 1),
                                    M.Independent(M.Normal(a[1], b[1]), 1)),
    "LogNormal": lambda M, a, b: (M.LogNormal(a[0], b[0]), M.LogNormal(a[1], b[1])),
}


@pytest.mark.parametrize("name", sorted(KL_PAIRS))
def test_kl_divergence_matches_torch(name):
    a = np.array([[0.3, -1.2, 2.0], [0.0, 0.5, -0.7]])
    b = np.array([[0.5, 1.3, 2.0], [0.9, 0.2, 1.1]])
    ta, tb = tl.tensor(a, requires_grad=True), tl.tensor(b, requires_grad=True)
    ra, rb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ours = D.kl_divergence(*KL_PAIRS[name](_Namespace(D, tl), ta, tb))
    theirs = TD.kl_divergence(*KL_PAIRS[name](_Namespace(TD, torch), ra, rb))
    _close(ours, theirs, np.float64, 1e-8)
    ours.sum().backward()
    theirs.sum().backward()
    for o, t in ((ta, ra), (tb, rb)):
        if t.grad is not None:
            _close(o.grad, t.grad, np.float64, 1e-6)
        else:
            assert o.grad is None or not np.any(o.grad.numpy())


def test_kl_without_a_rule_raises_and_register_kl_dispatches_to_the_closest_pair():
    with pytest.raises(NotImplementedError):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Gamma(1.0, 1.0))

    class MyNormal(D.Normal):
        pass

    @D.register_kl(MyNormal, D.Normal)
    def _mine(p, q):
        return tl.tensor(42.0)

    assert float(D.kl_divergence(MyNormal(0.0, 1.0), D.Normal(0.0, 2.0))) == 42.0
    assert float(D.kl_divergence(D.Normal(0.0, 1.0), MyNormal(0.0, 1.0))) == 0.0
    with pytest.raises(TypeError):
        D.register_kl(int, D.Normal)


@pytest.mark.parametrize("make, arg", [
    (lambda: D.Normal(0.0, -1.0), "scale"),
    (lambda: D.Bernoulli(probs=1.5), "probs"),
    (lambda: D.Gamma(tl.tensor([1.0, -2.0]), 1.0), "concentration"),
    (lambda: D.Beta(0.0, 1.0), "concentration1"),
    (lambda: D.Dirichlet(tl.tensor([1.0, 0.0])), "concentration"),
    (lambda: D.Categorical(probs=tl.tensor([0.5, -0.1])), "probs"),
    (lambda: D.MultivariateNormal(tl.zeros(2), tl.tensor([[1.0, 2.0], [2.0, 1.0]])),
     "covariance_matrix"),
    (lambda: D.MultivariateNormal(tl.zeros(2), scale_tril=tl.tensor([[1.0, 1.0], [0.0, 1.0]])),
     "scale_tril"),
    (lambda: D.Uniform(1.0, 0.0), "low"),
    (lambda: D.Poisson(-1.0), "rate"),
])
def test_invalid_arguments_raise_naming_the_distribution_and_argument(make, arg):
    with pytest.raises(D.DistributionValueError, match=arg) as info:
        make()
    assert isinstance(info.value, tl.TorchLeanError) and isinstance(info.value, ValueError)
    name = str(info.value).split(":")[0]
    assert name in {"Normal", "Bernoulli", "Gamma", "Beta", "Dirichlet", "Categorical",
                    "MultivariateNormal", "Uniform", "Poisson"}


def test_values_outside_the_support_raise_unless_validation_is_off():
    with pytest.raises(D.DistributionValueError, match="support"):
        D.Exponential(1.0).log_prob(tl.tensor(-1.0))
    with pytest.raises(D.DistributionValueError, match="support"):
        D.Beta(2.0, 2.0).log_prob(tl.tensor(1.5))
    with pytest.raises(D.DistributionValueError, match="support"):
        D.Poisson(2.0).log_prob(tl.tensor(1.5))
    with pytest.raises(D.DistributionValueError, match="support"):
        D.Categorical(probs=tl.tensor([0.5, 0.5])).log_prob(tl.tensor(2))
    with pytest.raises(D.DistributionValueError, match="shape"):
        D.Dirichlet(tl.ones(3)).log_prob(tl.tensor([0.5, 0.5]))
    out = D.Uniform(0.0, 1.0, validate_args=False).log_prob(tl.tensor(2.0))
    assert float(out) == float("-inf")
    D.Normal(0.0, -1.0, validate_args=False)  # no check when switched off
    try:
        D.Distribution.set_default_validate_args(False)
        D.Normal(0.0, -1.0)
    finally:
        D.Distribution.set_default_validate_args(True)
    with pytest.raises(D.DistributionValueError):
        D.Normal(0.0, -1.0)
    with pytest.raises(D.DistributionValueError, match="probs"):
        D.Bernoulli(probs=0.3, logits=0.1)


def test_batch_event_and_sample_shapes_and_expand():
    loc = tl.zeros(4, 3)
    mvn = D.MultivariateNormal(loc, tl.eye(3))
    assert mvn.batch_shape == (4,) and mvn.event_shape == (3,)
    assert tuple(mvn.rsample((2, 5)).shape) == (2, 5, 4, 3)
    ind = D.Independent(D.Normal(loc, 1.0), 1)
    assert ind.batch_shape == (4,) and ind.event_shape == (3,)
    assert tuple(ind.log_prob(tl.zeros(7, 4, 3)).shape) == (7, 4)
    for d, ref in [(D.Normal(0.0, 1.0), TD.Normal(0.0, 1.0)),
                   (D.Gamma(tl.ones(3), 2.0), TD.Gamma(torch.ones(3), 2.0)),
                   (D.Categorical(logits=tl.zeros(3, 5)), TD.Categorical(logits=torch.zeros(3, 5))),
                   (D.MultivariateNormal(tl.zeros(3), tl.eye(3)),
                    TD.MultivariateNormal(torch.zeros(3), torch.eye(3))),
                   (D.Independent(D.Normal(tl.zeros(3), 1.0), 1),
                    TD.Independent(TD.Normal(torch.zeros(3), 1.0), 1)),
                   (D.LogNormal(tl.zeros(3), 1.0), TD.LogNormal(torch.zeros(3), 1.0))]:
        shape = (2,) + tuple(ref.batch_shape) if ref.batch_shape else (4,)
        if ref.batch_shape == (3,) and isinstance(ref, TD.Categorical):
            shape = (2, 3)
        e, er = d.expand(shape), ref.expand(shape)
        assert e.batch_shape == er.batch_shape and e.event_shape == er.event_shape
        assert tuple(e.sample((6,)).shape) == tuple(er.sample((6,)).shape)
        value = er.sample()
        np.testing.assert_allclose(e.log_prob(tl.tensor(value.numpy())).numpy(),
                                   er.log_prob(value).numpy(), rtol=1e-5)


def test_categorical_frequencies_and_enumerate_support():
    probs = np.array([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25]])
    d = D.Categorical(probs=tl.tensor(probs))
    tl.manual_seed(4)
    n = 20000
    x = d.sample((n,)).numpy()
    assert x.dtype == np.int64
    freq = np.stack([(x == k).mean(0) for k in range(3)], -1)
    assert np.all(np.abs(freq - probs) <= 5 * np.sqrt(probs * (1 - probs) / n))
    assert d.enumerate_support().tolist() == [[0, 0], [1, 1], [2, 2]]
    b = D.Bernoulli(probs=tl.tensor([0.2, 0.9]))
    np.testing.assert_array_equal(b.enumerate_support().numpy(),
                                  TD.Bernoulli(torch.tensor([0.2, 0.9])).enumerate_support())


def test_straight_through_and_relaxed_rsample_carry_gradients():
    logits = tl.tensor([0.2, -0.5, 1.0], requires_grad=True)
    st = D.OneHotCategoricalStraightThrough(logits=logits)
    tl.manual_seed(0)
    y = st.rsample()
    assert sorted(y.detach().numpy().tolist()) == [0.0, 0.0, 1.0]
    (y * tl.tensor([1.0, 2.0, 3.0])).sum().backward()
    ref_logits = torch.tensor([0.2, -0.5, 1.0], requires_grad=True)
    p = torch.softmax(ref_logits, -1)
    (p * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_allclose(logits.grad.numpy(), ref_logits.grad.numpy(), rtol=1e-6)
    temp = tl.tensor(0.5, requires_grad=True)
    r = D.RelaxedOneHotCategorical(temp, logits=tl.tensor([0.2, -0.5, 1.0]))
    s = r.rsample((4,))
    np.testing.assert_allclose(s.detach().numpy().sum(-1), 1.0, rtol=1e-6)
    (s[:, 0]).sum().backward()
    assert temp.grad is not None and float(temp.grad) != 0.0


def test_transforms_match_torch():
    x = np.linspace(-2.0, 2.0, 7)
    pairs = [
        (D.transforms.ExpTransform(), TD.transforms.ExpTransform()),
        (D.transforms.AffineTransform(1.5, -2.0), TD.transforms.AffineTransform(1.5, -2.0)),
        (D.transforms.SigmoidTransform(), TD.transforms.SigmoidTransform()),
        (D.transforms.TanhTransform(), TD.transforms.TanhTransform()),
        (D.transforms.ComposeTransform([D.transforms.TanhTransform(),
                                        D.transforms.AffineTransform(0.5, 3.0)]),
         TD.transforms.ComposeTransform([TD.transforms.TanhTransform(),
                                         TD.transforms.AffineTransform(0.5, 3.0)])),
    ]
    for ours, theirs in pairs:
        y = ours(tl.tensor(x))
        ry = theirs(torch.tensor(x))
        np.testing.assert_allclose(y.numpy(), ry.numpy(), rtol=1e-10)
        np.testing.assert_allclose(ours.inv(y).numpy(), x, rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(ours.log_abs_det_jacobian(tl.tensor(x), y).numpy(),
                                   theirs.log_abs_det_jacobian(torch.tensor(x), ry).numpy(),
                                   rtol=1e-9)
    pos = np.array([0.5, 1.0, 2.5])
    power = D.transforms.PowerTransform(tl.tensor(2.0))
    ref = TD.transforms.PowerTransform(torch.tensor(2.0))
    np.testing.assert_allclose(power.log_abs_det_jacobian(tl.tensor(pos), power(tl.tensor(pos)))
                               .numpy(), ref.log_abs_det_jacobian(
                                   torch.tensor(pos), ref(torch.tensor(pos))).numpy())
    soft = D.transforms.SoftmaxTransform()(tl.tensor([[1.0, 2.0, 0.5]]))
    np.testing.assert_allclose(soft.numpy(), torch.softmax(torch.tensor([[1.0, 2.0, 0.5]]), -1),
                               rtol=1e-6)
    assert D.transforms.AbsTransform()(tl.tensor([-1.5])).tolist() == [1.5]


def test_squashed_gaussian_policy_as_sac_writes_it():
    """SAC's tanh-squashed Normal: log_prob of rsample, gradients to the mean and log-std."""
    mu = np.array([[0.1, -0.4], [1.2, 0.3]])
    log_std = np.array([[-0.5, 0.2], [0.0, -1.0]])
    outs = []
    for lib, M in ((tl, D), (torch, TD)):
        m = lib.tensor(mu, requires_grad=True)
        s = lib.tensor(log_std, requires_grad=True)
        dist = M.TransformedDistribution(M.Normal(m, s.exp()), [M.transforms.TanhTransform()])
        a = lib.tensor(np.tanh(np.array([[0.3, -0.2], [0.9, 0.1]])))
        lp = M.Independent(dist, 1).log_prob(a)
        lp.sum().backward()
        outs.append((lp.detach().numpy(), m.grad.numpy(), s.grad.numpy()))
    for o, t in zip(*outs, strict=True):
        np.testing.assert_allclose(o, t, rtol=1e-9)
