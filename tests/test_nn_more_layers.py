"""The torch.nn layers, losses and functional forms of ``nn.layers_more``, ``nn.losses_more``
and ``nn.functional_more``, against PyTorch.

Layers run through the differential hunt's ``_check_layer`` (parameters from one seeded NumPy
draw, outputs, input and parameter gradients and the state dict after SGD steps, float32 and
float64); functional forms and losses through ``agree`` on their outputs and input gradients;
constructors are compared by ``repr`` (torch's ``extra_repr``) and parameter shapes; random
layers by their eval-mode identity and training-mode statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from differential import agree
from test_fuzz_nn_layers import _check_layer, _x

import torchlean as tl
from torchlean.core.errors import ShapeError, TorchLeanError

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def _weighted(m: Any, out: Any, seed: int = 5) -> Any:
    rng = np.random.default_rng(seed)
    return (out * m.tensor(rng.standard_normal(tuple(out.shape))).to(out.dtype)).sum()


def _fn_check(call: Callable[..., Any], arrays: list[np.ndarray], grads: int | None = None,
              float64: bool = True) -> None:
    """``call(m.nn.functional, *tensors)`` agrees with torch: the output(s) and the gradients
    of the first ``grads`` float inputs (all float inputs by default)."""
    dtypes = [(np.float32, 1e-4, 1e-5)] + ([(np.float64, 1e-9, 1e-10)] if float64 else [])
    for dtype, rtol, atol in dtypes:
        def program(m: Any, dtype: Any = dtype) -> Any:
            xs = []
            for i, a in enumerate(arrays):
                if a.dtype.kind == "f":
                    xs.append(m.tensor(a.astype(dtype),
                                       requires_grad=grads is None or i < grads))
                else:
                    xs.append(m.tensor(a))
            out = call(m.nn.functional, *xs)
            first = out[0] if isinstance(out, tuple) else out
            _weighted(m, first).backward()
            return {"out": out, "grads": [x.grad for x in xs if x.requires_grad]}
        agree(program, rtol, atol, strict=True)


X1 = _x((2, 4, 9))
X2 = _x((2, 4, 6, 6))
X2S = _x((1, 3, 5, 7), seed=3)


# --- layers with parameters or deterministic forward passes ----------------------------------


LAYERS: dict[str, tuple[Callable[[Any], Any], list[np.ndarray]]] = {
    "bilinear": (lambda m: m.nn.Bilinear(4, 3, 5), [_x((6, 4)), _x((6, 3), seed=2)]),
    "bilinear_nobias": (lambda m: m.nn.Bilinear(4, 3, 2, bias=False),
                        [_x((2, 6, 4)), _x((2, 6, 3), seed=2)]),
    "rmsnorm": (lambda m: m.nn.RMSNorm(6), [X2]),
    "rmsnorm_2d_eps": (lambda m: m.nn.RMSNorm([6, 6], eps=1e-3), [X2]),
    "rmsnorm_noaffine": (lambda m: m.nn.RMSNorm(9, elementwise_affine=False), [X1]),
    "lrn": (lambda m: m.nn.LocalResponseNorm(3), [X2]),
    "lrn_3d": (lambda m: m.nn.LocalResponseNorm(2, alpha=0.1, beta=0.5, k=2.0), [X1]),
    "convT1d": (lambda m: m.nn.ConvTranspose1d(4, 3, 3), [X1]),
    "convT1d_stride": (lambda m: m.nn.ConvTranspose1d(4, 2, 3, stride=2, padding=1,
                                                      output_padding=1), [X1]),
    "convT1d_groups_dil": (lambda m: m.nn.ConvTranspose1d(4, 6, 2, groups=2, dilation=2,
                                                          bias=False), [X1]),
    "constpad1d": (lambda m: m.nn.ConstantPad1d((1, 2), 3.5), [X1]),
    "constpad2d": (lambda m: m.nn.ConstantPad2d(1, -1.0), [X2]),
    "constpad3d": (lambda m: m.nn.ConstantPad3d((1, 0, 0, 1, 2, 0), 0.5), [X2]),
    "zeropad1d": (lambda m: m.nn.ZeroPad1d(2), [X1]),
    "reflpad1d": (lambda m: m.nn.ReflectionPad1d((2, 1)), [X1]),
    "reflpad2d": (lambda m: m.nn.ReflectionPad2d((1, 2, 0, 2)), [X2]),
    "reppad1d": (lambda m: m.nn.ReplicationPad1d(3), [X1]),
    "reppad2d": (lambda m: m.nn.ReplicationPad2d((2, 0, 1, 3)), [X2]),
    "circpad1d": (lambda m: m.nn.CircularPad1d((1, 2)), [X1]),
    "circpad2d": (lambda m: m.nn.CircularPad2d(1), [X2]),
    "pixel_unshuffle": (lambda m: m.nn.PixelUnshuffle(2), [X2]),
    "channel_shuffle": (lambda m: m.nn.ChannelShuffle(2), [X2]),
    "upsampling_nearest": (lambda m: m.nn.UpsamplingNearest2d(scale_factor=2), [X2S]),
    "upsampling_bilinear": (lambda m: m.nn.UpsamplingBilinear2d(size=(7, 9)), [X2S]),
    "softmax2d": (lambda m: m.nn.Softmax2d(), [X2]),
    "hardshrink": (lambda m: m.nn.Hardshrink(0.7), [X2]),
    "softshrink": (lambda m: m.nn.Softshrink(0.3), [X2]),
    "adaptive_avg1d": (lambda m: m.nn.AdaptiveAvgPool1d(4), [X1]),
    "adaptive_max1d": (lambda m: m.nn.AdaptiveMaxPool1d(4), [X1]),
    "adaptive_max1d_idx": (lambda m: m.nn.AdaptiveMaxPool1d(5, return_indices=True), [X1]),
    "adaptive_max2d": (lambda m: m.nn.AdaptiveMaxPool2d((4, 3)), [X2]),
    "adaptive_max2d_idx": (lambda m: m.nn.AdaptiveMaxPool2d((4, None), return_indices=True),
                           [X2S]),
    "lppool1d": (lambda m: m.nn.LPPool1d(2, 3, stride=2), [np.abs(X1) + 0.1]),
    "lppool2d": (lambda m: m.nn.LPPool2d(3, (2, 3)), [np.abs(X2) + 0.1]),
    "unfold": (lambda m: m.nn.Unfold((2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), [X2]),
    "fold": (lambda m: m.nn.Fold((5, 6), (2, 3), padding=1, stride=(2, 1)),
             [_x((2, 12, 18))]),
    "fold_dilation": (lambda m: m.nn.Fold(4, 2, dilation=2), [_x((1, 8, 4))]),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layers_match_torch(name: str) -> None:
    make, arrays = LAYERS[name]
    _check_layer(make, arrays)


def test_rrelu_and_alpha_dropouts_are_deterministic_in_eval_mode() -> None:
    for make in (lambda m: m.nn.RReLU(0.1, 0.3), lambda m: m.nn.AlphaDropout(0.4),
                 lambda m: m.nn.FeatureAlphaDropout(0.3)):
        _check_layer(make, [X2], train=False)


def test_max_unpool_inverts_max_pool_as_torch() -> None:
    for d, x in ((1, X1), (2, X2)):
        def program(m: Any, d: int = d, x: np.ndarray = x) -> Any:
            pool = (m.nn.MaxPool1d if d == 1 else m.nn.MaxPool2d)(2, return_indices=True)
            unpool = (m.nn.MaxUnpool1d if d == 1 else m.nn.MaxUnpool2d)(2)
            t = m.tensor(x, requires_grad=True)
            y, idx = pool(t)
            out = unpool(y, idx, output_size=t.shape)
            _weighted(m, out).backward()
            return {"out": out, "idx": idx, "grad": t.grad, "repr": repr(unpool)}
        agree(program, 1e-5, 1e-6, strict=True)


def test_lazy_layers_become_the_plain_layer_on_first_call() -> None:
    lin = tl.nn.LazyLinear(3)
    out = lin(tl.randn(2, 5))
    assert type(lin) is tl.nn.Linear and lin.in_features == 5
    assert tuple(out.shape) == (2, 3) and tuple(lin.weight.shape) == (3, 5)
    assert list(lin.state_dict()) == ["weight", "bias"]
    conv = tl.nn.LazyConv2d(4, 3, padding=1)
    conv.eval()
    assert tuple(conv(tl.randn(2, 6, 5, 5)).shape) == (2, 4, 5, 5)
    assert type(conv) is tl.nn.Conv2d and tuple(conv.weight.shape) == (4, 6, 3, 3)
    assert not conv.training
    conv1 = tl.nn.LazyConv1d(2, 3, bias=False)
    conv1(tl.randn(3, 7))
    assert type(conv1) is tl.nn.Conv1d and conv1.bias is None
    assert tuple(conv1.weight.shape) == (2, 3, 3)


REPRS: dict[str, Callable[[Any], Any]] = {
    "bilinear": lambda m: m.nn.Bilinear(2, 3, 4, bias=False),
    "rmsnorm": lambda m: m.nn.RMSNorm([3, 4], eps=1e-6),
    "lrn": lambda m: m.nn.LocalResponseNorm(5, k=2),
    "convT1d": lambda m: m.nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1,
                                              groups=2, dilation=2),
    "constpad": lambda m: m.nn.ConstantPad2d((1, 2, 3, 4), 3),
    "zeropad": lambda m: m.nn.ZeroPad1d(2),
    "reflpad": lambda m: m.nn.ReflectionPad1d(2),
    "circpad": lambda m: m.nn.CircularPad2d((1, 0, 1, 0)),
    "pixel_unshuffle": lambda m: m.nn.PixelUnshuffle(3),
    "channel_shuffle": lambda m: m.nn.ChannelShuffle(2),
    "up_nearest": lambda m: m.nn.UpsamplingNearest2d(scale_factor=2),
    "up_bilinear": lambda m: m.nn.UpsamplingBilinear2d(size=4),
    "softmax2d": lambda m: m.nn.Softmax2d(),
    "hardshrink": lambda m: m.nn.Hardshrink(),
    "softshrink": lambda m: m.nn.Softshrink(1),
    "rrelu": lambda m: m.nn.RReLU(0.1, 0.2, inplace=True),
    "alpha_dropout": lambda m: m.nn.AlphaDropout(0.2),
    "feature_alpha_dropout": lambda m: m.nn.FeatureAlphaDropout(),
    "adaptive_avg1d": lambda m: m.nn.AdaptiveAvgPool1d(3),
    "adaptive_max2d": lambda m: m.nn.AdaptiveMaxPool2d((2, None)),
    "lppool": lambda m: m.nn.LPPool2d(2, 3, stride=1),
    "maxunpool": lambda m: m.nn.MaxUnpool2d(2, padding=1),
    "fold": lambda m: m.nn.Fold((4, 5), 2, stride=2),
    "unfold": lambda m: m.nn.Unfold(3, padding=1),
    "triplet": lambda m: m.nn.TripletMarginLoss(margin=0.5),
    "multimargin": lambda m: m.nn.MultiMarginLoss(p=2),
}


@pytest.mark.parametrize("name", sorted(REPRS))
def test_constructors_print_and_shape_as_torch(name: str) -> None:
    ours, theirs = REPRS[name](tl), REPRS[name](torch)
    assert repr(ours) == repr(theirs)
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in theirs.state_dict().items()}


def test_default_initialisation_bounds_follow_torch() -> None:
    tl.manual_seed(0)
    bil = tl.nn.Bilinear(16, 3, 200)
    bound = 1 / np.sqrt(16)
    w = bil.weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert abs(float(w.mean())) < 0.02
    conv = tl.nn.ConvTranspose1d(4, 6, 3, groups=2)
    bound = 1 / np.sqrt(3 * 3)  # fan-in from the weight's second axis: out / groups * k
    w = conv.weight.detach().numpy()
    assert w.shape == (4, 3, 3) and np.abs(w).max() <= bound
    assert np.all(tl.nn.RMSNorm(5).weight.detach().numpy() == 1.0)


def test_bad_arguments_name_the_class_and_argument() -> None:
    with pytest.raises(TorchLeanError, match="Bilinear: in1_features"):
        tl.nn.Bilinear(0, 2, 3)
    with pytest.raises(TorchLeanError, match="ConvTranspose1d: in_channels .* divisible"):
        tl.nn.ConvTranspose1d(3, 4, 2, groups=2)
    with pytest.raises(TorchLeanError, match="RReLU: lower"):
        tl.nn.RReLU(0.5, 0.1)
    with pytest.raises(TorchLeanError, match="AlphaDropout: p must be"):
        tl.nn.AlphaDropout(1.5)
    with pytest.raises(TorchLeanError, match="ConstantPad1d: padding"):
        tl.nn.ConstantPad1d((1, 2, 3), 0.0)
    with pytest.raises(TorchLeanError, match="'device2'"):
        tl.nn.RMSNorm(3, device2=None)
    with pytest.raises(ShapeError, match="pixel_unshuffle"):
        tl.nn.PixelUnshuffle(2)(tl.randn(1, 2, 3, 4))
    with pytest.raises(ShapeError, match="ReflectionPad2d: expected a 3-D or 4-D"):
        tl.nn.ReflectionPad2d(1)(tl.randn(4, 4))
    with pytest.raises(TorchLeanError, match="TripletMarginLoss: margin"):
        tl.nn.TripletMarginLoss(margin=0.0)


# --- random layers ---------------------------------------------------------------------------


def test_rrelu_training_slopes_lie_in_range_and_vary() -> None:
    tl.manual_seed(3)
    x = -tl.ones(20000)
    y = tl.nn.RReLU(0.1, 0.3)(x).numpy()
    slopes = -y
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3
    assert abs(slopes.mean() - 0.2) < 0.005 and slopes.std() > 0.05
    pos = tl.nn.RReLU()(tl.ones(10)).numpy()
    assert np.all(pos == 1.0)


def test_alpha_dropout_keeps_mean_and_variance() -> None:
    tl.manual_seed(4)
    x = tl.randn(200000)
    layer = tl.nn.AlphaDropout(0.3)
    y = layer(x).numpy()
    assert abs(y.mean()) < 0.02 and abs(y.std() - 1.0) < 0.02
    dropped = 1.7580993408473766 * (1 / np.sqrt((1.7580993408473766 ** 2 * 0.3 + 1) * 0.7))
    frac = np.isclose(y, -dropped + dropped * 0.3).mean()  # a * alpha' * (p - 1)
    assert abs(frac - 0.3) < 0.01
    layer.eval()
    assert np.array_equal(layer(x).numpy(), x.numpy())


def test_feature_alpha_dropout_drops_whole_channels() -> None:
    tl.manual_seed(5)
    y = tl.nn.FeatureAlphaDropout(0.5)(tl.randn(8, 16, 4, 4)).numpy()
    per_channel = y.reshape(8, 16, -1)
    constant = np.all(per_channel == per_channel[..., :1], axis=-1)
    assert 0.3 < constant.mean() < 0.7  # dropped channels are one constant value


def test_gumbel_softmax_samples_follow_the_softmax() -> None:
    tl.manual_seed(6)
    logits = tl.tensor(np.log([[0.2, 0.5, 0.3]]).repeat(30000, 0))
    hard = tl.nn.functional.gumbel_softmax(logits, tau=0.5, hard=True).numpy()
    assert np.all(hard.sum(-1) == 1.0) and set(np.unique(hard)) == {0.0, 1.0}
    np.testing.assert_allclose(hard.mean(0), [0.2, 0.5, 0.3], atol=0.015)
    soft = tl.nn.functional.gumbel_softmax(logits[:5], tau=2.0)
    np.testing.assert_allclose(soft.numpy().sum(-1), 1.0, rtol=1e-6)
    leaf = tl.tensor(np.zeros((2, 3)), requires_grad=True)
    out = tl.nn.functional.gumbel_softmax(leaf, hard=True, dim=0)
    (out * tl.tensor(np.arange(6.0).reshape(2, 3))).sum().backward()
    assert leaf.grad is not None and np.abs(leaf.grad.numpy()).sum() > 0  # the soft gradient


# --- functional forms ----------------------------------------------------------------------


FUNCTIONAL: dict[str, tuple[Callable[..., Any], list[np.ndarray], int | None]] = {
    "bilinear": (lambda f, a, b, w, c: f.bilinear(a, b, w, c),
                 [_x((5, 3)), _x((5, 2), seed=2), _x((4, 3, 2), seed=3), _x((4,), seed=4)], None),
    "rms_norm": (lambda f, x, w: f.rms_norm(x, (6,), w, 1e-5), [X2, _x((6,), seed=2)], None),
    "local_response_norm": (lambda f, x: f.local_response_norm(x, 4, k=1.5), [X2], None),
    "pixel_unshuffle": (lambda f, x: f.pixel_unshuffle(x, 3), [_x((4, 6, 9))], None),
    "channel_shuffle": (lambda f, x: f.channel_shuffle(x, 4), [X1], None),
    "hardshrink": (lambda f, x: f.hardshrink(x, 0.4), [X2], None),
    "softshrink": (lambda f, x: f.softshrink(x), [X2], None),
    "rrelu_eval": (lambda f, x: f.rrelu(x, 0.2, 0.4), [X2], None),
    "alpha_dropout_eval": (lambda f, x: f.alpha_dropout(x, 0.5, training=False), [X2], None),
    "lp_pool1d": (lambda f, x: f.lp_pool1d(x, 1.5, 2), [np.abs(X1) + 0.1], None),
    "lp_pool2d_ceil": (lambda f, x: f.lp_pool2d(x, 2, 3, stride=2, ceil_mode=True),
                       [np.abs(X2S) + 0.1], None),
    "adaptive_avg_pool1d": (lambda f, x: f.adaptive_avg_pool1d(x, 4), [X1], None),
    "adaptive_max_pool1d_idx": (lambda f, x: f.adaptive_max_pool1d(x, 4, return_indices=True),
                                [X1], None),
    "adaptive_max_pool2d_idx": (lambda f, x: f.adaptive_max_pool2d_with_indices(x, (3, 4)),
                                [X2S], None),
    "max_pool2d_idx": (lambda f, x: f.max_pool2d_with_indices(x, 2, 1), [X2], None),
    "max_pool1d_idx": (lambda f, x: f.max_pool1d_with_indices(x, 3, 2, 1), [X1], None),
    "unfold": (lambda f, x: f.unfold(x, 3, padding=1, stride=2), [X2], None),
    "fold": (lambda f, x: f.fold(x, (4, 4), 2), [_x((2, 8, 9))], None),
    "conv_transpose1d": (lambda f, x, w, b: f.conv_transpose1d(x, w, b, stride=3, padding=2,
                                                              output_padding=1, dilation=2),
                         [X1, _x((4, 2, 3), seed=2), _x((2,), seed=3)], None),
    "upsample": (lambda f, x: f.upsample(x, scale_factor=2, mode="nearest"), [X2S], None),
    "upsample_nearest": (lambda f, x: f.upsample_nearest(x, size=(6, 8)), [X2S], None),
    "upsample_bilinear": (lambda f, x: f.upsample_bilinear(x, scale_factor=2), [X2S], None),
    "pdist": (lambda f, x: f.pdist(x), [_x((6, 4))], None),
    "pdist_p1": (lambda f, x: f.pdist(x, 1), [_x((5, 3))], None),
    "pdist_p3": (lambda f, x: f.pdist(x, 3.0), [_x((5, 3))], None),
    "pdist_inf": (lambda f, x: f.pdist(x, float("inf")), [_x((5, 3))], None),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_functional_forms_match_torch(name: str) -> None:
    call, arrays, grads = FUNCTIONAL[name]
    _fn_check(call, arrays, grads)


def test_max_unpool_functional_with_padding_and_stride() -> None:
    x = _x((2, 3, 7, 8))
    ref = torch.nn.functional.max_pool2d(torch.tensor(x), 3, 2, 1, return_indices=True)
    values, idx = ref[0].numpy(), ref[1].numpy()
    _fn_check(lambda f, v, i: f.max_unpool2d(v, i, 3, 2, 1, output_size=(7, 8)), [values, idx])
    ref1 = torch.nn.functional.max_pool1d(torch.tensor(X1), 2, return_indices=True)
    _fn_check(lambda f, v, i: f.max_unpool1d(v, i, 2), [ref1[0].numpy(), ref1[1].numpy()])


# --- losses ------------------------------------------------------------------------------------


_PM = np.array([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])
_A, _B, _C = _x((6, 5)), _x((6, 5), seed=2), _x((6, 5), seed=3)
_CLASSES = np.array([0, 4, 2, 1, 3, 4])
_MULTI = np.array([[3, 0, -1, 1, 2], [1, 2, 3, 4, -1], [0, -1, 2, 2, 2], [4, 4, -1, 0, 0],
                   [-1, 0, 1, 2, 3], [0, 1, 2, 3, 4]])

LOSSES: dict[str, tuple[Callable[..., Any], list[np.ndarray], int]] = {
    "margin_ranking": (lambda f, a, b, y, r: f.margin_ranking_loss(a, b, y, 0.3, reduction=r),
                       [_A[:, 0], _B[:, 0], _PM], 2),
    "hinge_embedding": (lambda f, x, y, r: f.hinge_embedding_loss(x, y, 0.5, reduction=r),
                        [_A, np.sign(_B)], 1),
    "soft_margin": (lambda f, x, y, r: f.soft_margin_loss(x, y, reduction=r),
                    [_A, np.sign(_B)], 1),
    "multilabel_soft_margin": (lambda f, x, y, r: f.multilabel_soft_margin_loss(
        x, y, reduction=r), [_A, (_B > 0).astype(np.float32)], 1),
    "multilabel_soft_margin_w": (lambda f, x, y, w, r: f.multilabel_soft_margin_loss(
        x, y, w, reduction=r), [_A, (_B > 0).astype(np.float32),
                               np.arange(1, 6).astype(np.float32)], 1),
    "cosine_embedding": (lambda f, a, b, y, r: f.cosine_embedding_loss(a, b, y, 0.1,
                                                                       reduction=r),
                         [_A, _B, _PM], 2),
    "cosine_embedding_1d": (lambda f, a, b, y, r: f.cosine_embedding_loss(a, b, y,
                                                                          reduction=r),
                            [_A[0], _B[0], np.array(-1.0)], 2),
    "triplet": (lambda f, a, p, n, r: f.triplet_margin_loss(a, p, n, 2.0, reduction=r),
                [_A, _B, _C], 3),
    "triplet_swap_p1": (lambda f, a, p, n, r: f.triplet_margin_loss(a, p, n, 2.0, p=1,
                                                                    swap=True, reduction=r),
                        [_A, _B, _C], 3),
    "triplet_distance": (lambda f, a, p, n, r: f.triplet_margin_with_distance_loss(
        a, p, n, distance_function=lambda u, v: (u - v).abs().sum(-1), margin=3.0, swap=True,
        reduction=r), [_A, _B, _C], 3),
    "multi_margin": (lambda f, x, y, r: f.multi_margin_loss(x, y, reduction=r),
                     [_A, _CLASSES], 1),
    "multi_margin_p2_w": (lambda f, x, y, w, r: f.multi_margin_loss(x, y, 2, 0.7, w,
                                                                    reduction=r),
                          [_A, _CLASSES, np.arange(1, 6).astype(np.float32)], 1),
    "multilabel_margin": (lambda f, x, y, r: f.multilabel_margin_loss(x, y, reduction=r),
                          [_A, _MULTI], 1),
    "poisson_nll": (lambda f, x, y, r: f.poisson_nll_loss(x, y, reduction=r),
                    [_A, np.abs(_B) * 3], 1),
    "poisson_nll_full": (lambda f, x, y, r: f.poisson_nll_loss(x, y, log_input=False,
                                                               full=True, reduction=r),
                         [np.abs(_A) + 0.1, np.abs(_B) * 3], 1),
    "gaussian_nll": (lambda f, x, y, v, r: f.gaussian_nll_loss(x, y, v, full=True,
                                                               reduction=r),
                     [_A, _B, np.abs(_C) + 0.01], 3),
    "gaussian_nll_var_per_row": (lambda f, x, y, v, r: f.gaussian_nll_loss(
        x, y, v, eps=0.3, reduction=r), [_A, _B, np.abs(_C[:, 0])], 3),
    "gaussian_nll_var_last1": (lambda f, x, y, v, r: f.gaussian_nll_loss(x, y, v,
                                                                         reduction=r),
                               [_A, _B, np.abs(_C[:, :1])], 3),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_functionals_match_torch(name: str, reduction: str) -> None:
    call, arrays, grads = LOSSES[name]
    _fn_check(lambda f, *xs: call(f, *xs, reduction), arrays, grads)


LOSS_MODULES: dict[str, tuple[Callable[[Any], Any], list[np.ndarray], int]] = {
    "MarginRankingLoss": (lambda m: m.nn.MarginRankingLoss(0.2, reduction="sum"),
                          [_A[:, 0], _B[:, 0], _PM], 2),
    "HingeEmbeddingLoss": (lambda m: m.nn.HingeEmbeddingLoss(2.0), [_A, np.sign(_B)], 1),
    "SoftMarginLoss": (lambda m: m.nn.SoftMarginLoss(reduction="none"), [_A, np.sign(_B)], 1),
    "MultiLabelSoftMarginLoss": (lambda m: m.nn.MultiLabelSoftMarginLoss(
        weight=m.tensor(np.arange(1, 6).astype(np.float32))),
        [_A, (_B > 0).astype(np.float32)], 1),
    "CosineEmbeddingLoss": (lambda m: m.nn.CosineEmbeddingLoss(-0.2), [_A, _B, _PM], 2),
    "TripletMarginLoss": (lambda m: m.nn.TripletMarginLoss(p=3.0, swap=True), [_A, _B, _C], 3),
    "TripletMarginWithDistanceLoss": (lambda m: m.nn.TripletMarginWithDistanceLoss(
        margin=0.5), [_A, _B, _C], 3),
    "MultiMarginLoss": (lambda m: m.nn.MultiMarginLoss(margin=2.0, size_average=False),
                        [_A, _CLASSES], 1),
    "MultiLabelMarginLoss": (lambda m: m.nn.MultiLabelMarginLoss(), [_A, _MULTI], 1),
    "PoissonNLLLoss": (lambda m: m.nn.PoissonNLLLoss(full=True), [_A, np.abs(_B) * 3], 1),
    "GaussianNLLLoss": (lambda m: m.nn.GaussianNLLLoss(full=True, eps=1e-3),
                        [_A, _B, np.abs(_C)], 3),
}


@pytest.mark.parametrize("name", sorted(LOSS_MODULES))
def test_loss_modules_match_torch(name: str) -> None:
    make, arrays, grads = LOSS_MODULES[name]
    _fn_check(lambda f, *xs: make(tl if f is tl.nn.functional else torch)(*xs), arrays, grads)
    assert repr(make(tl)) == repr(make(torch))


def test_loss_argument_errors() -> None:
    f = tl.nn.functional
    with pytest.raises(TorchLeanError, match="reduction"):
        f.soft_margin_loss(tl.randn(3), tl.ones(3), reduction="avg")
    with pytest.raises(TorchLeanError, match="multi_margin_loss: only p == 1 and p == 2"):
        f.multi_margin_loss(tl.randn(2, 3), tl.tensor([0, 1]), p=3)
    with pytest.raises(ShapeError, match="multi_margin_loss: target"):
        f.multi_margin_loss(tl.randn(2, 3), tl.tensor([0, 3]))
    with pytest.raises(TorchLeanError, match="gaussian_nll_loss: var has negative"):
        f.gaussian_nll_loss(tl.randn(2, 3), tl.randn(2, 3), -tl.ones(2, 3))
    with pytest.raises(ShapeError, match="gaussian_nll_loss: var of shape"):
        f.gaussian_nll_loss(tl.randn(2, 3), tl.randn(2, 3), tl.ones(3, 2))
