"""``torchlean.distributions``: torch.distributions as training scripts use it.

Laws with torch's constructor arguments, shapes (``batch_shape``/``event_shape``), ``sample`` /
``rsample`` / ``log_prob`` / ``entropy`` / moments / ``cdf`` / ``icdf``, argument and value
validation, ``kl_divergence`` with ``register_kl``, and ``TransformedDistribution`` with the
``transforms`` and ``constraints`` submodules. Densities are tensor-op compositions, so gradients
reach the parameters; samples come from the generator ``tl.manual_seed`` seeds (other numbers than
torch's stream, the same law).
"""

from . import constraints, kl, transforms
from .base import Distribution, DistributionValueError
from .continuous import (
    Beta,
    Cauchy,
    Chi2,
    Exponential,
    Gamma,
    Gumbel,
    Laplace,
    Normal,
    StudentT,
    Uniform,
)
from .derived import (
    ExpRelaxedCategorical,
    HalfCauchy,
    HalfNormal,
    LogitRelaxedBernoulli,
    LogNormal,
    Pareto,
    RelaxedBernoulli,
    RelaxedOneHotCategorical,
    Weibull,
)
from .discrete import (
    Bernoulli,
    Binomial,
    Categorical,
    Geometric,
    Multinomial,
    NegativeBinomial,
    OneHotCategorical,
    OneHotCategoricalStraightThrough,
    Poisson,
)
from .kl import kl_divergence, register_kl
from .multivariate import (
    Dirichlet,
    Independent,
    LowRankMultivariateNormal,
    MixtureSameFamily,
    MultivariateNormal,
)
from .transforms import (
    AbsTransform,
    AffineTransform,
    ComposeTransform,
    ExpTransform,
    PowerTransform,
    SigmoidTransform,
    SoftmaxTransform,
    TanhTransform,
    Transform,
    TransformedDistribution,
)

__all__ = [
    "constraints", "kl", "transforms", "Distribution", "DistributionValueError",
    "Beta", "Cauchy", "Chi2", "Exponential", "Gamma", "Gumbel", "Laplace", "Normal", "StudentT",
    "Uniform", "ExpRelaxedCategorical", "HalfCauchy", "HalfNormal", "LogitRelaxedBernoulli",
    "LogNormal", "Pareto", "RelaxedBernoulli", "RelaxedOneHotCategorical", "Weibull",
    "Bernoulli", "Binomial", "Categorical", "Geometric", "Multinomial", "NegativeBinomial",
    "OneHotCategorical", "OneHotCategoricalStraightThrough", "Poisson", "kl_divergence",
    "register_kl", "Dirichlet", "Independent", "LowRankMultivariateNormal",
    "MixtureSameFamily", "MultivariateNormal", "AbsTransform", "AffineTransform",
    "ComposeTransform", "ExpTransform", "PowerTransform", "SigmoidTransform",
    "SoftmaxTransform", "TanhTransform", "Transform", "TransformedDistribution",
]
