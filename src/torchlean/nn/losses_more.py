"""torch's remaining loss functions, as functional forms and as ``nn`` loss modules.

Margin and embedding losses (``margin_ranking``, ``hinge_embedding``, ``cosine_embedding``,
``triplet_margin`` with and without a custom distance), multi-class / multi-label margins
(``multi_margin``, ``multilabel_margin``, ``soft_margin``, ``multilabel_soft_margin``) and the
likelihood losses (``poisson_nll``, ``gaussian_nll``), each written with tensor operations in
torch's formula (so gradients agree, subgradient choices included), then reduced by
``reduction`` ('mean', 'sum', 'none'; torch's deprecated ``size_average``/``reduce`` mapped).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.errors import ShapeError, TorchLeanError
from ..engine.tensor import Tensor, tensor
from ..engine.torch_api import where
from . import functional as TF
from .extras import PairwiseDistance
from .functional_more import _t
from .loss import _Loss

__all__ = [
    "CosineEmbeddingLoss", "GaussianNLLLoss", "HingeEmbeddingLoss", "MarginRankingLoss",
    "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss", "PoissonNLLLoss",
    "SoftMarginLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss",
    "cosine_embedding_loss", "gaussian_nll_loss", "hinge_embedding_loss", "margin_ranking_loss",
    "multi_margin_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss",
    "poisson_nll_loss", "soft_margin_loss", "triplet_margin_loss",
    "triplet_margin_with_distance_loss",
]


def _how(fn: str, size_average: Any, reduce: Any, reduction: Any) -> str:
    return TF._reduction(fn, TF._legacy_reduction(fn, size_average, reduce, reduction))


def _reduce(loss: Any, reduction: str) -> Any:
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def _labels(fn: str, name: str, x: Any) -> np.ndarray:
    values = x.detach().numpy() if isinstance(x, Tensor) else np.asarray(x)
    if values.dtype.kind not in "iu":
        raise TorchLeanError(f"{fn}: {name} must be an integer tensor, found {values.dtype}")
    return values.astype(np.int64)


# --- pairwise margins -------------------------------------------------------------------------


def margin_ranking_loss(input1: Any, input2: Any, target: Any, margin: float = 0.0,
                        size_average: Any = None, reduce: Any = None,
                        reduction: str = "mean") -> Any:
    """``max(0, -y (x1 - x2) + margin)``, ``y`` in {1, -1}."""
    fn = "margin_ranking_loss"
    how = _how(fn, size_average, reduce, reduction)
    a, b, y = _t(fn, "input1", input1), _t(fn, "input2", input2), _t(fn, "target", target)
    return _reduce((-y * (a - b) + float(margin)).clamp(min=0.0), how)


def hinge_embedding_loss(input: Any, target: Any, margin: float = 1.0, size_average: Any = None,
                         reduce: Any = None, reduction: str = "mean") -> Any:
    """``x`` where ``y = 1``, ``max(0, margin - x)`` where ``y = -1`` (torch's sum of both
    masks, so other target values contribute both terms)."""
    fn = "hinge_embedding_loss"
    how = _how(fn, size_average, reduce, reduction)
    x, y = _t(fn, "input", input), _t(fn, "target", target)
    zero = x * 0.0
    loss = where(y != 1, (float(margin) - x).clamp(min=0.0), zero) + where(y != -1, x, zero)
    return _reduce(loss, how)


def soft_margin_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
                     reduction: str = "mean") -> Any:
    """``log(1 + exp(-y x))`` per entry."""
    fn = "soft_margin_loss"
    how = _how(fn, size_average, reduce, reduction)
    x, y = _t(fn, "input", input), _t(fn, "target", target)
    return _reduce(TF.softplus(-y * x), how)


def multilabel_soft_margin_loss(input: Any, target: Any, weight: Any = None,
                                size_average: Any = None, reduce: Any = None,
                                reduction: str = "mean") -> Any:
    """Binary cross-entropy with logits per class, averaged over the classes (last axis)."""
    fn = "multilabel_soft_margin_loss"
    how = _how(fn, size_average, reduce, reduction)
    x, y = _t(fn, "input", input), _t(fn, "target", target)
    loss = -(y * TF.logsigmoid(x) + (1.0 - y) * TF.logsigmoid(-x))
    if weight is not None:
        loss = loss * _t(fn, "weight", weight)
    return _reduce(loss.sum(-1) / float(x.shape[-1]), how)


def cosine_embedding_loss(input1: Any, input2: Any, target: Any, margin: float = 0.0,
                          size_average: Any = None, reduce: Any = None,
                          reduction: str = "mean") -> Any:
    """``1 - cos(x1, x2)`` where ``y = 1``, ``max(0, cos - margin)`` where ``y = -1`` (torch's
    cosine: squared norms each plus 1e-12)."""
    fn = "cosine_embedding_loss"
    how = _how(fn, size_average, reduce, reduction)
    a, b, y = _t(fn, "input1", input1), _t(fn, "input2", input2), _t(fn, "target", target)
    if a.ndim not in (1, 2) or tuple(a.shape) != tuple(b.shape) or y.ndim != a.ndim - 1:
        raise ShapeError(f"{fn}: expected inputs (N, D) or (D,) of one shape and target (N,) "
                         f"or (), found {tuple(a.shape)}, {tuple(b.shape)}, {tuple(y.shape)}")
    dim = a.ndim - 1
    eps = 1e-12
    cos = (a * b).sum(dim) / (((a * a).sum(dim) + eps) * ((b * b).sum(dim) + eps)).sqrt()
    zero = cos * 0.0
    loss = where(y == 1, 1.0 - cos, zero) + where(y == -1, (cos - float(margin)).clamp(min=0.0),
                                                  zero)
    return _reduce(loss, how)


def triplet_margin_loss(anchor: Any, positive: Any, negative: Any, margin: float = 1.0,
                        p: float = 2, eps: float = 1e-6, swap: bool = False,
                        size_average: Any = None, reduce: Any = None,
                        reduction: str = "mean") -> Any:
    """``max(0, margin + d(a, p) - d(a, n))`` with ``d`` the ``pairwise_distance``
    (``swap``: ``d(a, n)`` replaced by ``d(p, n)`` where that is smaller)."""
    fn = "triplet_margin_loss"
    how = _how(fn, size_average, reduce, reduction)
    a, pos, neg = (_t(fn, n, v) for n, v in (("anchor", anchor), ("positive", positive),
                                             ("negative", negative)))
    if not a.ndim == pos.ndim == neg.ndim or a.ndim not in (1, 2):
        raise ShapeError(f"{fn}: anchor, positive and negative must all be 1-D or 2-D, found "
                         f"{tuple(a.shape)}, {tuple(pos.shape)}, {tuple(neg.shape)}")
    d_pos = TF.pairwise_distance(a, pos, p, eps)
    d_neg = TF.pairwise_distance(a, neg, p, eps)
    if swap:
        d_swap = TF.pairwise_distance(pos, neg, p, eps)
        d_neg = where(d_swap < d_neg, d_swap, d_neg)
    return _reduce((float(margin) + d_pos - d_neg).clamp(min=0.0), how)


def triplet_margin_with_distance_loss(anchor: Any, positive: Any, negative: Any, *,
                                      distance_function: Callable[[Any, Any], Any] | None = None,
                                      margin: float = 1.0, swap: bool = False,
                                      reduction: str = "mean") -> Any:
    """``triplet_margin_loss`` with any distance (default ``pairwise_distance``)."""
    fn = "triplet_margin_with_distance_loss"
    how = TF._reduction(fn, reduction)
    if float(margin) <= 0:
        raise TorchLeanError(f"{fn}: margin must be greater than 0, found {margin}")
    dist = distance_function if distance_function is not None else TF.pairwise_distance
    a, pos, neg = (_t(fn, n, v) for n, v in (("anchor", anchor), ("positive", positive),
                                             ("negative", negative)))
    d_pos, d_neg = dist(a, pos), dist(a, neg)
    if swap:
        d_swap = dist(pos, neg)
        d_neg = where(d_swap < d_neg, d_swap, d_neg)
    return _reduce((float(margin) + d_pos - d_neg).clamp(min=0.0), how)


# --- multi-class margins ----------------------------------------------------------------------


def multi_margin_loss(input: Any, target: Any, p: int = 1, margin: float = 1.0,
                      weight: Any = None, size_average: Any = None, reduce: Any = None,
                      reduction: str = "mean") -> Any:
    """``sum over i != y of max(0, margin - x[y] + x[i])^p / C`` per sample (times
    ``weight[y]``)."""
    fn = "multi_margin_loss"
    how = _how(fn, size_average, reduce, reduction)
    if p not in (1, 2):
        raise TorchLeanError(f"{fn}: only p == 1 and p == 2 are supported, found {p!r}")
    x = _t(fn, "input", input)
    two = x if x.ndim == 2 else x.reshape(1, -1)
    y = _labels(fn, "target", target).reshape(-1)
    n, c = two.shape
    if y.shape != (n,) or (y.size and (y.min() < 0 or y.max() >= c)):
        raise ShapeError(f"{fn}: target must hold {n} class indices in [0, {c}), found "
                         f"{y.tolist()}")
    picked = two.gather(1, tensor(y.reshape(n, 1)))
    others = tensor((np.arange(c)[None, :] != y[:, None]).astype(np.dtype(x.dtype)))
    terms = (float(margin) - picked + two).clamp(min=0.0)
    if p == 2:
        terms = terms * terms
    if weight is not None:
        w = _t(fn, "weight", weight)
        terms = terms * w.index_select(0, tensor(y)).reshape(n, 1)
    loss = (terms * others).sum(1) / float(c)
    return _reduce(loss if x.ndim == 2 else loss.reshape(()), how)


def multilabel_margin_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
                           reduction: str = "mean") -> Any:
    """``sum over target classes j, non-target classes i of max(0, 1 - (x[j] - x[i])) / C``;
    each row of ``target`` lists class indices up to its first -1."""
    fn = "multilabel_margin_loss"
    how = _how(fn, size_average, reduce, reduction)
    x = _t(fn, "input", input)
    two = x if x.ndim == 2 else x.reshape(1, -1)
    y = _labels(fn, "target", target).reshape(two.shape)
    n, c = two.shape
    counts = np.zeros((n, c))
    for row in range(n):
        for cls in y[row]:
            if cls < 0:
                break
            if cls >= c:
                raise ShapeError(f"{fn}: target class {cls} out of range [0, {c})")
            counts[row, cls] += 1  # a class listed twice counts twice, as torch's loop
    pairs = counts[:, :, None] * (counts[:, None, :] == 0)
    hinge = (1.0 - two.unsqueeze(2) + two.unsqueeze(1)).clamp(min=0.0)
    loss = (hinge * tensor(pairs.astype(np.dtype(x.dtype)))).sum((1, 2)) / float(c)
    return _reduce(loss if x.ndim == 2 else loss.reshape(()), how)


# --- likelihoods ------------------------------------------------------------------------------


def poisson_nll_loss(input: Any, target: Any, log_input: bool = True, full: bool = False,
                     size_average: Any = None, eps: float = 1e-8, reduce: Any = None,
                     reduction: str = "mean") -> Any:
    """Poisson negative log-likelihood: ``exp(x) - y x`` (``log_input``) or
    ``x - y log(x + eps)``; ``full`` adds Stirling's term where ``y > 1``."""
    fn = "poisson_nll_loss"
    how = _how(fn, size_average, reduce, reduction)
    x, y = _t(fn, "input", input), _t(fn, "target", target)
    loss = x.exp() - y * x if log_input else x - y * (x + float(eps)).log()
    if full:
        safe = where(y > 1, y, y * 0.0 + 1.0)
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + where(y > 1, stirling, stirling * 0.0)
    return _reduce(loss, how)


def gaussian_nll_loss(input: Any, target: Any, var: Any, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean") -> Any:
    """``0.5 (log(var) + (x - y)^2 / var)`` (+ ``0.5 log(2 pi)`` when ``full``); ``var``
    shaped as the input, or without its last axis, or with a last axis of 1. ``var`` is
    clamped to ``eps`` for the value only (torch clamps in place under no_grad, so the
    gradient passes as if unclamped)."""
    fn = "gaussian_nll_loss"
    how = TF._reduction(fn, reduction)
    x, y = _t(fn, "input", input), _t(fn, "target", target)
    v = var if isinstance(var, Tensor) else _t(fn, "var", var)
    xs, vs = tuple(x.shape), tuple(v.shape)
    if vs != xs:
        if xs[:-1] == vs:
            v = v.unsqueeze(-1)
        elif not (xs[:-1] == vs[:-1] and vs[-1:] == (1,)):
            raise ShapeError(f"{fn}: var of shape {vs} is incompatible with input {xs}")
    if bool((v.detach() < 0).any()):
        raise TorchLeanError(f"{fn}: var has negative entry/entries")
    v = v + (v.detach().clamp(min=float(eps)) - v.detach())
    loss = 0.5 * (v.log() + (x - y) ** 2 / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, how)


# --- modules ----------------------------------------------------------------------------------


class MarginRankingLoss(_Loss):
    def __init__(self, margin: float = 0.0, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__("MarginRankingLoss", size_average, reduce, reduction)
        self.margin = TF._number("MarginRankingLoss", "margin", margin)

    def forward(self, input1: Any, input2: Any, target: Any) -> Any:
        return margin_ranking_loss(input1, input2, target, self.margin,
                                   reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    def __init__(self, margin: float = 1.0, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__("HingeEmbeddingLoss", size_average, reduce, reduction)
        self.margin = TF._number("HingeEmbeddingLoss", "margin", margin)

    def forward(self, input: Any, target: Any) -> Any:
        return hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    def __init__(self, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__("SoftMarginLoss", size_average, reduce, reduction)

    def forward(self, input: Any, target: Any) -> Any:
        return soft_margin_loss(input, target, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_Loss):
    def __init__(self, weight: Any = None, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__("MultiLabelSoftMarginLoss", size_average, reduce, reduction)
        if weight is None:
            self.weight = None
        else:  # a buffer, as torch's weighted losses
            self.register_buffer("weight", weight)

    def forward(self, input: Any, target: Any) -> Any:
        return multilabel_soft_margin_loss(input, target, self.weight, reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    def __init__(self, margin: float = 0.0, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__("CosineEmbeddingLoss", size_average, reduce, reduction)
        self.margin = TF._number("CosineEmbeddingLoss", "margin", margin)

    def forward(self, input1: Any, input2: Any, target: Any) -> Any:
        return cosine_embedding_loss(input1, input2, target, self.margin,
                                     reduction=self.reduction)


class TripletMarginLoss(_Loss):
    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                 swap: bool = False, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__("TripletMarginLoss", size_average, reduce, reduction)
        name = "TripletMarginLoss"
        self.margin = TF._number(name, "margin", margin)
        if self.margin <= 0:
            raise TorchLeanError(f"{name}: margin must be greater than 0, found {margin}")
        self.p, self.eps = TF._number(name, "p", p), TF._number(name, "eps", eps)
        self.swap = bool(swap)

    def forward(self, anchor: Any, positive: Any, negative: Any) -> Any:
        return triplet_margin_loss(anchor, positive, negative, self.margin, self.p, self.eps,
                                   self.swap, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    def __init__(self, *, distance_function: Callable[[Any, Any], Any] | None = None,
                 margin: float = 1.0, swap: bool = False, reduction: str = "mean") -> None:
        super().__init__("TripletMarginWithDistanceLoss", None, None, reduction)
        self.margin = TF._number("TripletMarginWithDistanceLoss", "margin", margin)
        if self.margin <= 0:
            raise TorchLeanError(f"TripletMarginWithDistanceLoss: margin must be greater than "
                                 f"0, found {margin}")
        # torch's default is a PairwiseDistance child module (it shows in the repr)
        self.distance_function = (distance_function if distance_function is not None
                                  else PairwiseDistance())
        self.swap = bool(swap)

    def forward(self, anchor: Any, positive: Any, negative: Any) -> Any:
        return triplet_margin_with_distance_loss(
            anchor, positive, negative, distance_function=self.distance_function,
            margin=self.margin, swap=self.swap, reduction=self.reduction)


class MultiMarginLoss(_Loss):
    def __init__(self, p: int = 1, margin: float = 1.0, weight: Any = None,
                 size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> None:
        super().__init__("MultiMarginLoss", size_average, reduce, reduction)
        if p not in (1, 2):
            raise TorchLeanError(f"MultiMarginLoss: only p == 1 and p == 2 are supported, "
                                 f"found {p!r}")
        self.p, self.margin = int(p), TF._number("MultiMarginLoss", "margin", margin)
        if weight is None:
            self.weight = None
        else:
            self.register_buffer("weight", weight)

    def forward(self, input: Any, target: Any) -> Any:
        return multi_margin_loss(input, target, self.p, self.margin, self.weight,
                                 reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    def __init__(self, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__("MultiLabelMarginLoss", size_average, reduce, reduction)

    def forward(self, input: Any, target: Any) -> Any:
        return multilabel_margin_loss(input, target, reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    def __init__(self, log_input: bool = True, full: bool = False, size_average: Any = None,
                 eps: float = 1e-8, reduce: Any = None, reduction: str = "mean") -> None:
        super().__init__("PoissonNLLLoss", size_average, reduce, reduction)
        self.log_input, self.full = bool(log_input), bool(full)
        self.eps = TF._number("PoissonNLLLoss", "eps", eps)

    def forward(self, log_input: Any, target: Any) -> Any:
        return poisson_nll_loss(log_input, target, self.log_input, self.full, eps=self.eps,
                                reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"
                 ) -> None:
        super().__init__("GaussianNLLLoss", None, None, reduction)
        self.full, self.eps = bool(full), TF._number("GaussianNLLLoss", "eps", eps)

    def forward(self, input: Any, target: Any, var: Any) -> Any:
        return gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)
