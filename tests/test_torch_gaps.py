"""torch API pieces the public scripts needed (issue 24), each checked against PyTorch.

The composite Tensor methods (``engine/torch_methods``) forward and backward, buffers that are
tensors, ``LBFGS(line_search_fn="strong_wolfe")``, ``LSTM(proj_size=...)``,
``nn.init.trunc_normal_``, ``torch.distributions.Categorical``, the samplers of
``torch.utils.data``, ``backward()`` of a one-element output and ``x[range(n), y]``.
"""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest

import torchlean as tl
from torchlean.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 5)).astype(np.float64)

# name -> f(module, x) for a (4, 5) float64 input; each is compared value and gradient.
METHODS = {
    "split": lambda m, x: m.cat(x.split([2, 3], 1), 1) * m.arange(5.0, dtype=x.dtype),
    "chunk": lambda m, x: x.chunk(3, 1)[1] * 2,
    "unbind": lambda m, x: x.unbind(1)[3] * 3,
    "diag": lambda m, x: x[:, :4].diag(1),
    "diag_vec": lambda m, x: x[0].diag(-1),
    "diagonal": lambda m, x: x.diagonal(),
    "trace": lambda m, x: x[:, :4].trace(),
    "gather": lambda m, x: x.gather(1, m.tensor([[0, 1], [2, 2], [4, 0], [3, 3]])),
    "index_select": lambda m, x: x.index_select(1, m.tensor([4, 0, 0])),
    "flip": lambda m, x: x.flip(0, 1) * m.arange(5.0, dtype=x.dtype),
    "roll": lambda m, x: x.roll(2, 1) * m.arange(5.0, dtype=x.dtype),
    "logsumexp": lambda m, x: x.logsumexp(1),
    "tril": lambda m, x: x.tril(-1),
    "masked_select": lambda m, x: x.masked_select(x > 0),
    "addmm": lambda m, x: m.ones(4, 4, dtype=x.dtype).addmm(x, x.t(), beta=0.5, alpha=2),
    "lerp": lambda m, x: x.lerp(x * x, 0.25),
    "cumprod": lambda m, x: x.cumprod(1),
    "narrow": lambda m, x: x.narrow(1, 1, 3),
    "repeat_interleave": lambda m, x: x.repeat_interleave(2, dim=0),
    "einsum": lambda m, x: m.einsum("ij,kj->ik", x, x * 2),
    "log1p": lambda m, x: (x * x).log1p(),
    "tan": lambda m, x: (x * 0.3).tan(),
    "sdpa_causal": lambda m, x: m.nn.functional.scaled_dot_product_attention(
        x.reshape(1, 4, 5), x.reshape(1, 4, 5) * 0.5, x.reshape(1, 4, 5), is_causal=True),
    # torch_math: values in NumPy with the first derivative carried, or compositions
    "asin": lambda m, x: (x * 0.3).asin(),
    "acos": lambda m, x: m.acos(x * 0.3),
    "atan": lambda m, x: m.arctan(x),
    "asinh": lambda m, x: x.asinh(),
    "acosh": lambda m, x: (x * x + 1.5).acosh(),
    "atanh": lambda m, x: (x * 0.3).atanh(),
    "erf": lambda m, x: m.erf(x) + m.erfc(x * 2),
    "erfinv": lambda m, x: (x * 0.3).erfinv(),
    "lgamma": lambda m, x: (x * x + 0.5).lgamma(),
    "atan2": lambda m, x: m.atan2(x, x.flip(0)),
    "hypot": lambda m, x: m.hypot(x, x.flip(1)),
    "logaddexp": lambda m, x: m.logaddexp(x, x * 2),
    "xlogy": lambda m, x: m.xlogy(x.relu(), x * x + 1),
    "logit": lambda m, x: m.logit(x.sigmoid()),
    "sinc": lambda m, x: m.sinc(x),
    "deg2rad": lambda m, x: m.deg2rad(x),
    "cross": lambda m, x: m.cross(x[:3, :3], x[1:, 2:], dim=1),
    "cummax": lambda m, x: x.cummax(1)[0] + x.cummin(0)[0],
    "rot90": lambda m, x: m.rot90(x, 1, (0, 1)) * m.arange(20.0, dtype=x.dtype).reshape(5, 4),
    "unfold": lambda m, x: x.unfold(1, 2, 2) * 3,
    "inv": lambda m, x: m.linalg.inv(x[:, :4]),
    "det": lambda m, x: m.linalg.det(x[:, :4]) + m.det(x[:3, 1:4]),
    "slogdet": lambda m, x: m.linalg.slogdet(x[:, :4])[1],
    "solve": lambda m, x: m.linalg.solve(x[:, :4], x[:, 4]),
    "solve_matrix": lambda m, x: m.linalg.solve(x[:, :4], x[:, 3:]),
    "norm": lambda m, x: m.linalg.norm(x) + m.linalg.norm(x, dim=1).sum(),
    "vector_norm_inf": lambda m, x: m.linalg.vector_norm(x, float("inf"), dim=0),
    "matrix_norm_1": lambda m, x: m.linalg.matrix_norm(x, 1),
    "matrix_power": lambda m, x: m.linalg.matrix_power(x[:, :4], 3),
    "kron": lambda m, x: m.kron(x[:2, :3], x[2:, 3:]),
    "tensordot": lambda m, x: m.tensordot(x.reshape(2, 2, 5), x.reshape(5, 4)[:, :2].t()
                                          .reshape(2, 5), dims=([1, 2], [0, 1])),
    "block_diag": lambda m, x: m.block_diag(x[:2, :2], x[2:, 3:]) * 2,
    "cov": lambda m, x: m.cov(x),
    "trapezoid": lambda m, x: m.trapezoid(x, dim=1),
    "nan_to_num": lambda m, x: m.nan_to_num(x.log()),
}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_composite_methods_match_torch(name):
    fn = METHODS[name]
    xt = torch.tensor(X, requires_grad=True)
    expected = fn(torch, xt)
    expected.backward(torch.ones_like(expected))
    xl = tl.tensor(X, requires_grad=True)
    got = fn(tl, xl)
    got.backward(tl.ones_like(got))
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_methods_check_their_arguments():
    x = tl.zeros(3, 4)
    with pytest.raises(tl.TorchLeanError, match="split_with_sizes"):
        x.split([1, 1], 1)
    with pytest.raises(tl.IndexRangeError, match="dimension out of range"):
        x.unbind(2)
    with pytest.raises(tl.ShapeError, match="gather"):
        x.gather(1, tl.tensor([0, 1]))
    with pytest.raises(tl.TorchLeanError, match="float16"):
        x.half()


def test_backward_of_a_one_element_output_and_range_index():
    x = tl.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    picked = x[range(2), tl.tensor([1, 0])]  # the nll-by-indexing idiom
    np.testing.assert_array_equal(picked.detach().numpy(), [2.0, 3.0])
    picked.sum().reshape(1).backward()  # shape (1,): torch accepts one element
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1], [1, 0]])
    y = tl.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(tl.ShapeError, match="scalar outputs"):
        (y * 2).backward()
    t = tl.randn(5, 5, requires_grad=True)
    assert t[tl.tensor(1), tl.tensor(2)].shape == ()  # 0-d index tensors select, as ints


def test_buffers_are_tensors_changed_in_place():
    class Counter(tl.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", tl.zeros(2))
            self.register_buffer("scratch", tl.ones(1), persistent=False)

        def forward(self, x):
            with tl.no_grad():
                self.total.add_(x.sum(0))
            return x * 2

    m = Counter()
    held = m.total
    m(tl.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert isinstance(m.total, tl.Tensor) and m.total is held
    np.testing.assert_array_equal(held.numpy(), [4.0, 6.0])
    state = m.state_dict()
    assert list(state) == ["total"] and isinstance(state["total"], tl.Tensor)
    assert [name for name, _ in m.named_buffers()] == ["total", "scratch"]
    other = Counter()
    other.load_state_dict(state)
    np.testing.assert_array_equal(other.total.numpy(), [4.0, 6.0])
    assert not list(m.parameters())
    buf = io.BytesIO()
    tl.save(m.state_dict(), buf)
    buf.seek(0)
    np.testing.assert_array_equal(np.asarray(tl.load(buf)["total"]), [4.0, 6.0])
    with pytest.raises(tl.TorchLeanError, match="register_buffer"):
        m.register_buffer("bad", "text")


@pytest.mark.parametrize("name", ["Upsample", "PixelShuffle", "GroupNorm", "InstanceNorm2d",
                                  "ZeroPad2d"])
def test_image_layers_match_torch(name):
    make = {"Upsample": lambda m: m.nn.Upsample(size=(7, 9)),
            "PixelShuffle": lambda m: m.nn.PixelShuffle(2),
            "GroupNorm": lambda m: m.nn.GroupNorm(2, 4).double(),
            "InstanceNorm2d": lambda m: m.nn.InstanceNorm2d(4),
            "ZeroPad2d": lambda m: m.nn.ZeroPad2d((1, 2, 0, 1))}[name]
    x = RNG.standard_normal((2, 4, 3, 5))
    found = []
    for m in (tl, torch):
        a = m.tensor(x, requires_grad=True)
        y = make(m)(a * 1.0)
        (y * y).sum().backward()
        found.append((y.detach().numpy(), a.grad.numpy()))
    for ours, theirs in zip(*found, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_functional_batch_norm_updates_buffer_tensors_as_torch():
    x = RNG.standard_normal((8, 3))
    got = []
    for m in (tl, torch):
        mean, var = m.zeros(3, dtype=m.float64), m.ones(3, dtype=m.float64)
        out = m.nn.functional.batch_norm(m.tensor(x), mean, var, training=True, momentum=0.2)
        got.append((out.numpy(), mean.numpy().copy(), var.numpy().copy()))
    for a, b in zip(*got, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_lbfgs_strong_wolfe_matches_torch():
    a = RNG.standard_normal((20, 5))
    b = RNG.standard_normal(20)

    def run(m):
        x = m.nn.Parameter(m.zeros(5, dtype=m.float64))
        y = m.nn.Parameter(m.tensor([1.5, -0.5], dtype=m.float64))
        opt = m.optim.LBFGS([x, y], lr=1, max_iter=10, history_size=5,
                            line_search_fn="strong_wolfe")
        am, bm = m.tensor(a), m.tensor(b)
        calls = [0]

        def closure():
            opt.zero_grad()
            calls[0] += 1
            r = am @ x - bm
            loss = (r * r).sum() + (1 - y[0]) ** 2 + 100 * (y[1] - y[0] ** 2) ** 2
            loss.backward()
            return loss

        losses = [float(opt.step(closure)) for _ in range(3)]
        return losses, calls[0], x.detach().numpy(), y.detach().numpy()

    ours, theirs = run(tl), run(torch)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-10)
    assert ours[1] == theirs[1]  # the same number of closure evaluations
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(ours[3], theirs[3], rtol=1e-8, atol=1e-12)
    with pytest.raises(tl.optim.OptimizerError, match="line_search_fn"):
        tl.optim.LBFGS([tl.nn.Parameter(tl.zeros(1))], line_search_fn="armijo")


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_proj_size_matches_torch(bidirectional):
    t = torch.nn.LSTM(4, 6, num_layers=2, proj_size=3, bidirectional=bidirectional,
                      batch_first=True)
    m = tl.nn.LSTM(4, 6, num_layers=2, proj_size=3, bidirectional=bidirectional,
                   batch_first=True)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    layers = 4 if bidirectional else 2
    x = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    h0 = RNG.standard_normal((layers, 2, 3)).astype(np.float32)
    c0 = RNG.standard_normal((layers, 2, 6)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    out, (h, c) = t(xt, (torch.tensor(h0), torch.tensor(c0)))
    (out.sum() + 2 * h.sum() + c.sum()).backward()
    xl = tl.tensor(x, requires_grad=True)
    out2, (h2, c2) = m(xl, (tl.tensor(h0), tl.tensor(c0)))
    (out2.sum() + 2 * h2.sum() + c2.sum()).backward()
    for a, b in ((out2, out), (h2, h), (c2, c), (xl.grad, xt.grad),
                 (m.weight_hr_l1.grad, t.weight_hr_l1.grad)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=2e-6)
    with pytest.raises(tl.TorchLeanError, match="proj_size"):
        tl.nn.LSTM(4, 6, proj_size=-1)
    with pytest.raises(tl.TorchLeanError, match="smaller than hidden_size"):
        tl.nn.LSTM(4, 6, proj_size=6)


def test_trunc_normal_is_bounded_and_lazy_about_scipy():
    w = tl.nn.Parameter(tl.zeros(300, 200))
    tl.nn.init.trunc_normal_(w, std=0.02, a=-0.04, b=0.04)
    v = w.detach().numpy()
    assert -0.04 <= v.min() and v.max() <= 0.04
    ref = torch.nn.init.trunc_normal_(torch.zeros(300, 200), std=0.02, a=-0.04, b=0.04)
    assert abs(v.std() - float(ref.std())) < 1e-3  # the truncated law's spread
    assert abs(v.mean()) < 1e-3
    code = "import sys, torchlean; print('scipy' in sys.modules, 'argparse' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "False"]


def test_categorical_matches_torch():
    logits = RNG.standard_normal((3, 4))
    ours = tl.distributions.Categorical(logits=tl.tensor(logits, requires_grad=True))
    theirs = torch.distributions.Categorical(logits=torch.tensor(logits))
    value = [0, 3, 2]
    np.testing.assert_allclose(ours.log_prob(tl.tensor(value)).detach().numpy(),
                               theirs.log_prob(torch.tensor(value)).numpy(), rtol=1e-12)
    np.testing.assert_allclose(ours.entropy().detach().numpy(), theirs.entropy().numpy(),
                               rtol=1e-12)
    probs = tl.distributions.Categorical(probs=tl.tensor([0.1, 0.0, 0.9]))
    tl.manual_seed(0)
    draws = probs.sample((4000,)).numpy()
    assert draws.dtype == np.int64 and not (draws == 1).any()
    assert abs((draws == 2).mean() - 0.9) < 0.02
    with pytest.raises(tl.TorchLeanError, match="probs"):
        tl.distributions.Categorical()


def test_samplers_and_batch_sampler():
    ds = TensorDataset(tl.arange(10))
    order = list(RandomSampler(ds, generator=tl.Generator(1)))
    assert sorted(order) == list(range(10)) and order != list(range(10))
    batches = list(BatchSampler(range(10), 4, drop_last=False))
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    loader = DataLoader(ds, batch_sampler=BatchSampler(range(10), 3, drop_last=True))
    assert [b[0].tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert len(loader) == 3
    with pytest.raises(tl.TorchLeanError, match="mutually exclusive"):
        DataLoader(ds, batch_size=2, batch_sampler=[[0]])


# --- attention and the Transformer layers (torch's layout: a torch state dict loads) ---------

def _load_perturbed(theirs, ours):
    """The same weights on both sides: torch's, nudged so zero biases are exercised."""
    state = {k: v.detach().numpy() + 0.05 * RNG.standard_normal(tuple(v.shape))
             for k, v in theirs.state_dict().items()}
    theirs.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    ours.load_state_dict(state)


def _same_forward_backward(make, inputs, masks):
    theirs, ours = make(torch).double().eval(), make(tl).double().eval()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    _load_perturbed(theirs, ours)
    results = []
    for m, module in ((torch, theirs), (tl, ours)):
        xs = [m.tensor(a, requires_grad=True) for a in inputs]
        out = module(*xs, **{k: m.tensor(v) for k, v in masks.items()})
        out = out[0] if isinstance(out, tuple) else out
        (out * out).sum().backward()
        grads = dict((n, p.grad.numpy()) for n, p in module.named_parameters())
        results.append((out.detach().numpy(), [x.grad.numpy() for x in xs], grads))
    (a, ag, ap), (b, bg, bp) = results
    np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-11)
    for g, h in zip(bg, ag, strict=True):
        np.testing.assert_allclose(h, g, rtol=1e-9, atol=1e-11)
    for name, g in ap.items():
        np.testing.assert_allclose(bp[name], g, rtol=1e-9, atol=1e-11, err_msg=name)


S, T, N, E = 5, 4, 3, 8
SRC, TGT = RNG.standard_normal((S, N, E)), RNG.standard_normal((T, N, E))
CAUSAL_S = np.triu(np.full((S, S), -np.inf), 1)
CAUSAL_T = np.triu(np.full((T, T), -np.inf), 1)
PAD = np.zeros((N, S), bool)
PAD[0, -1] = PAD[2, -2:] = True

TRANSFORMERS = {
    "mha_cross_masks": (lambda m: m.nn.MultiheadAttention(E, 2), [TGT, SRC, SRC],
                        {"attn_mask": np.triu(np.ones((T, S), bool), 1),
                         "key_padding_mask": PAD}),
    "mha_batch_first": (lambda m: m.nn.MultiheadAttention(E, 4, batch_first=True),
                        [SRC.transpose(1, 0, 2)] * 3, {}),
    "encoder_post_norm": (lambda m: m.nn.TransformerEncoder(
        m.nn.TransformerEncoderLayer(E, 2, 16), 2), [SRC],
        {"mask": CAUSAL_S, "src_key_padding_mask": PAD}),
    "encoder_pre_norm_gelu": (lambda m: m.nn.TransformerEncoder(
        m.nn.TransformerEncoderLayer(E, 2, 16, activation="gelu", norm_first=True,
                                     batch_first=True), 2, norm=m.nn.LayerNorm(E)),
        [SRC.transpose(1, 0, 2)], {"mask": np.triu(np.ones((S, S), bool), 1)}),
    "decoder": (lambda m: m.nn.TransformerDecoder(m.nn.TransformerDecoderLayer(E, 2, 16), 2),
                [TGT, SRC], {"tgt_mask": CAUSAL_T, "memory_key_padding_mask": PAD}),
    "decoder_pre_norm": (lambda m: m.nn.TransformerDecoderLayer(E, 2, 16, norm_first=True),
                         [TGT, SRC], {"tgt_mask": CAUSAL_T}),
    "transformer": (lambda m: m.nn.Transformer(E, 2, 1, 2, 16), [SRC, TGT],
                    {"tgt_mask": CAUSAL_T, "src_key_padding_mask": PAD}),
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(TRANSFORMERS))
def test_transformer_layers_match_torch(name):
    make, inputs, masks = TRANSFORMERS[name]
    _same_forward_backward(make, inputs, masks)


def test_transformer_helpers_and_errors():
    mask = tl.nn.Transformer.generate_square_subsequent_mask(3)
    np.testing.assert_array_equal(
        mask.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(3).numpy())
    attn = tl.nn.MultiheadAttention(4, 2)
    assert [n for n, _ in attn.named_parameters()] == [
        "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    out, weights = attn(tl.randn(3, 4), tl.randn(5, 4), tl.randn(5, 4))  # unbatched
    assert out.shape == (3, 4) and weights.shape == (3, 5)
    np.testing.assert_allclose(weights.sum(-1).detach().numpy(), 1.0, rtol=1e-6)
    with pytest.raises(tl.TorchLeanError, match="bias-free"):
        attn(tl.randn(3, 4))
    with pytest.raises(tl.ShapeError, match="attn_mask"):
        attn(tl.randn(3, 1, 4), tl.randn(5, 1, 4), tl.randn(5, 1, 4), attn_mask=tl.zeros(3, 3))
    with pytest.raises(tl.TorchLeanError, match="activation"):
        tl.nn.TransformerEncoderLayer(4, 2, activation="swish")
    with pytest.raises(tl.TorchLeanError, match="num_layers"):
        tl.nn.TransformerEncoder(tl.nn.TransformerEncoderLayer(4, 2), 0)


# --- resampling, embedding bags, channel dropout ---------------------------------------------

X4 = RNG.standard_normal((2, 3, 5, 7))
THETA = RNG.standard_normal((2, 2, 3)) * 0.7

SAMPLING = {
    "bilinear_size": (lambda m, x: m.nn.functional.interpolate(
        x, size=(8, 4), mode="bilinear", align_corners=False), [X4]),
    "bilinear_factor_corners": (lambda m, x: m.nn.functional.interpolate(
        x, scale_factor=2.5, mode="bilinear", align_corners=True), [X4]),
    "linear": (lambda m, x: m.nn.functional.interpolate(x[:, :, 0], scale_factor=1.7,
                                                        mode="linear"), [X4]),
    "nearest_fractional": (lambda m, x: m.nn.functional.interpolate(x, scale_factor=1.5),
                           [X4]),
    "upsample_bilinear": (lambda m, x: m.nn.Upsample(scale_factor=2, mode="bilinear",
                                                     align_corners=True)(x), [X4]),
    "affine_grid": (lambda m, t: m.nn.functional.affine_grid(t, (2, 3, 4, 6),
                                                             align_corners=False), [THETA]),
    "grid_sample": (lambda m, x, t: m.nn.functional.grid_sample(
        x, m.nn.functional.affine_grid(t, (2, 3, 4, 6), align_corners=False),
        align_corners=False), [X4, THETA]),
    "grid_sample_border_corners": (lambda m, x, t: m.nn.functional.grid_sample(
        x, m.nn.functional.affine_grid(t, (2, 3, 6, 4), align_corners=True),
        padding_mode="border", align_corners=True), [X4, THETA]),
    "embedding_bag_mean_offsets": (lambda m, w: m.nn.functional.embedding_bag(
        m.tensor([1, 2, 4, 5, 4, 3, 2, 9]), w, m.tensor([0, 4, 4])),
        [RNG.standard_normal((10, 4))]),
    "embedding_bag_max_2d": (lambda m, w: m.nn.functional.embedding_bag(
        m.tensor([[1, 2, 4, 5], [4, 3, 2, 9]]), w, mode="max"), [RNG.standard_normal((10, 4))]),
    "embedding_bag_sum_weights": (lambda m, w, p: m.nn.functional.embedding_bag(
        m.tensor([1, 2, 4, 5, 4, 3]), w, m.tensor([0, 2]), mode="sum", per_sample_weights=p),
        [RNG.standard_normal((10, 4)), RNG.standard_normal(6)]),
}


@pytest.mark.parametrize("name", sorted(SAMPLING))
def test_resampling_and_bags_match_torch(name):
    fn, inputs = SAMPLING[name]
    weight = RNG.standard_normal(16)
    found = []
    for m in (torch, tl):
        xs = [m.tensor(a, requires_grad=True) for a in inputs]
        out = fn(m, *xs)
        w = m.tensor(np.resize(weight, out.numel()).reshape(tuple(out.shape)))
        (out * w).sum().backward()
        found.append([out.detach().numpy()] + [x.grad.numpy() for x in xs])
    for theirs, ours in zip(*found, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-11)


def test_embedding_bag_module_and_channel_dropout():
    bag = tl.nn.EmbeddingBag(10, 3, mode="sum")
    assert list(bag.state_dict()) == list(torch.nn.EmbeddingBag(10, 3).state_dict())
    out = bag(tl.tensor([1, 2, 3]), tl.tensor([0, 1]))
    w = bag.weight.detach().numpy()
    np.testing.assert_allclose(out.detach().numpy(), [w[1], w[2] + w[3]], rtol=1e-6)
    with pytest.raises(tl.IndexRangeError, match="embedding_bag"):
        bag(tl.tensor([10]), tl.tensor([0]))
    with pytest.raises(tl.ShapeError, match="offsets"):
        bag(tl.tensor([1, 2]))
    tl.manual_seed(0)
    drop = tl.nn.Dropout2d(0.5)
    y = drop(tl.ones(16, 8, 3, 3)).numpy()
    per_channel = y.reshape(16 * 8, 9)
    assert set(np.unique(per_channel)) == {0.0, 2.0}
    assert (per_channel == per_channel[:, :1]).all()  # whole channels kept or dropped
    assert 0.35 < (per_channel[:, 0] == 0).mean() < 0.65
    drop.eval()
    np.testing.assert_array_equal(drop(tl.ones(2, 2, 1, 1)).numpy(), 1.0)


# --- torch.autograd.functional, retain_grad, printing --------------------------------------------

def _exp_adder(x, y):
    return 2 * x.exp() + 3 * y * x


def _cubes(x):
    return (x ** 3).sum() + (x[0] * x[1])


def _scaled(t):
    return t * t.sum()


FUNCTIONAL = {
    "jacobian": lambda af, x, y: af.jacobian(_exp_adder, (x, y)),
    "jacobian_single": lambda af, x, y: af.jacobian(_scaled, x),
    "hessian": lambda af, x, y: af.hessian(_cubes, x),
    "vjp": lambda af, x, y: af.vjp(_scaled, x, v=y)[1],
    "jvp": lambda af, x, y: af.jvp(_scaled, x, v=y)[1],
    "hvp": lambda af, x, y: af.hvp(_cubes, x, v=y)[1],
}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_autograd_functional_matches_torch(name):
    a, b = RNG.standard_normal(3), RNG.standard_normal(3)
    found = []
    for m in (torch, tl):
        out = FUNCTIONAL[name](m.autograd.functional, m.tensor(a), m.tensor(b))
        found.append([t.numpy() for t in out] if isinstance(out, tuple) else [out.numpy()])
    for ours, theirs in zip(found[1], found[0], strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_retain_grad_keeps_a_non_leaf_gradient():
    found = []
    for m in (torch, tl):
        x = m.tensor([1.0, -2.0, 3.0], dtype=m.float64, requires_grad=True)
        h = (x * 2).tanh()
        h.retain_grad()
        (h * h).sum().backward()
        found.append((h.grad.numpy(), x.grad.numpy()))
    np.testing.assert_allclose(found[1][0], found[0][0], rtol=1e-6)
    np.testing.assert_allclose(found[1][1], found[0][1], rtol=1e-6)


def test_retain_grad_persists_holds_no_reference_and_checks_its_input():
    found = []
    for m in (torch, tl):
        x = m.tensor([1.0, -2.0], dtype=m.float64, requires_grad=True)
        y = x * 3
        flags = [y.retains_grad]
        before = sys.getrefcount(y)
        y.retain_grad()
        held = sys.getrefcount(y) - before  # torch keeps the flag on the tensor too
        flags += [y.retains_grad, x.retains_grad]
        z = (y * y).sum()
        z.backward(retain_graph=True)
        z.backward()  # the flag persists: the second backward accumulates into y.grad
        found.append((flags, held, y.grad.numpy().copy()))
        with pytest.raises(Exception, match="requires_grad"):
            m.tensor([1.0]).retain_grad()
    assert found[1][0] == found[0][0] == [False, True, False]
    assert found[1][1] == found[0][1] == 0
    np.testing.assert_array_equal(found[1][2], found[0][2])


def test_tensors_print_as_torch():
    cases = [lambda m: m.tensor([-0.8115, 0.5084, -0.7322, -0.2080]),
             lambda m: m.tensor([[1e-5, 1.0], [1000.0, 2.0]]),
             lambda m: m.tensor([100.5, 2.25]),
             lambda m: m.arange(12).reshape(3, 4),
             lambda m: m.tensor([[True, False]]),
             lambda m: m.triu(m.full((3, 3), float("-inf")), diagonal=1),
             lambda m: m.zeros(2, 1, 2, dtype=m.float64),
             lambda m: m.tensor([1.5, -2.0], requires_grad=True),
             lambda m: m.tensor([1.5, -2.0], requires_grad=True) * 2,
             lambda m: m.arange(2000.0) / 7,
             lambda m: m.linspace(0, 1, 40)]
    for make in cases:
        assert repr(make(tl)) == repr(make(torch))


def test_modules_print_as_torch():
    def build(m):
        return m.nn.Sequential(
            m.nn.Conv2d(3, 6, 5), m.nn.MaxPool2d(2, 2), m.nn.Conv2d(6, 4, 3, padding=1, bias=False),
            m.nn.BatchNorm2d(4), m.nn.ReLU(inplace=True), m.nn.Dropout2d(0.25), m.nn.Flatten(),
            m.nn.LayerNorm(8), m.nn.Dropout(0.5), m.nn.LeakyReLU(0.2, inplace=True),
            m.nn.ModuleList([m.nn.Linear(2, 2) for _ in range(3)] + [m.nn.Tanh()]),
            m.nn.TransformerEncoderLayer(8, 2, 16), m.nn.EmbeddingBag(10, 3, mode="sum"),
            m.nn.CrossEntropyLoss(), m.nn.LogSoftmax(dim=1))

    assert repr(build(tl)) == repr(build(torch))


@pytest.mark.parametrize("mode", ["GRU", "LSTM"])
def test_packed_sequences_match_torch(mode):
    theirs = getattr(torch.nn, mode)(3, 4, num_layers=2, bidirectional=True,
                                     batch_first=True).double()
    ours = getattr(tl.nn, mode)(3, 4, num_layers=2, bidirectional=True, batch_first=True,
                                dtype="float64")
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = RNG.standard_normal((3, 5, 3))
    lengths = [2, 5, 3]  # unsorted: enforce_sorted=False
    found = []
    for m, module in ((torch, theirs), (tl, ours)):
        xt = m.tensor(x, requires_grad=True)
        rnn = m.nn.utils.rnn
        packed = rnn.pack_padded_sequence(xt, lengths, batch_first=True, enforce_sorted=False)
        out, h = module(packed)
        padded, lens = rnn.pad_packed_sequence(out, batch_first=True, total_length=6)
        hh = h[0] if mode == "LSTM" else h
        ((padded ** 2).sum() + (hh * 3).sum()).backward()
        found.append([padded.detach().numpy(), hh.detach().numpy(), xt.grad.numpy(),
                      lens.numpy(), packed.batch_sizes.numpy(), packed.data.detach().numpy()])
    for ours_value, theirs_value in zip(found[1], found[0], strict=True):
        np.testing.assert_allclose(ours_value, theirs_value, rtol=1e-10, atol=1e-12)
    with pytest.raises(tl.TorchLeanError, match="sorted in decreasing order"):
        tl.nn.utils.rnn.pack_padded_sequence(tl.zeros(5, 3, 3), [2, 5, 3])
