"""torch's type system on ``tl.Tensor``: dtype names, devices, the default dtype, and the result
dtype of every elementwise operator on every pair of dtypes, against PyTorch (the oracle)."""

from __future__ import annotations

import itertools
import operator

import numpy as np
import pytest

import torchlean as tl

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64", "int64", "int32", "uint8", "bool"]
OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
       "truediv": operator.truediv, "floordiv": operator.floordiv, "mod": operator.mod,
       "pow": operator.pow}


def _pair(dtype: str, zero_dim: bool) -> tuple[tl.Tensor, object]:
    values = np.array([3, 1, 2] if dtype != "bool" else [True, False, True])
    if zero_dim:
        values = values[:1].reshape(())
    return tl.tensor(values.astype(dtype)), torch.tensor(values.astype(dtype))


def _outcome(fn: object, *args: object) -> object:
    try:
        return fn(*args)  # type: ignore[operator]
    except (RuntimeError, ZeroDivisionError, TypeError, ValueError) as exc:
        return exc


@pytest.mark.parametrize("op", sorted(OPS))
def test_result_dtypes_of_every_operator_on_every_dtype_pair_match_torch(op: str) -> None:
    fn = OPS[op]
    checked = 0
    for da, db, za, zb in itertools.product(DTYPES, DTYPES, (False, True), (False, True)):
        a, ta = _pair(da, za)
        b, tb = _pair(db, zb)
        expected = _outcome(fn, ta, tb)
        got = _outcome(fn, a, b)
        if isinstance(expected, Exception):
            assert isinstance(got, tl.TorchLeanError), (op, da, db, za, zb, got)
            continue
        assert not isinstance(got, Exception), (op, da, db, za, zb, got)
        assert got.dtype == np.dtype(str(expected.dtype).removeprefix("torch.")), (
            op, da, db, za, zb, got.dtype, expected.dtype)
        np.testing.assert_allclose(got.numpy().astype(np.float64),
                                   expected.numpy().astype(np.float64), rtol=1e-6)
        checked += 1
    assert checked > 60


@pytest.mark.parametrize("scalar", [2, 2.5, True, 0, 0.0, -1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_python_scalars_promote_as_in_torch(dtype: str, scalar: object) -> None:
    a, ta = _pair(dtype, False)
    for name, fn in OPS.items():
        for args, targs in (((a, scalar), (ta, scalar)), ((scalar, a), (scalar, ta))):
            expected = _outcome(fn, *targs)
            got = _outcome(fn, *args)
            if isinstance(expected, Exception):
                assert isinstance(got, tl.TorchLeanError), (name, dtype, scalar, got)
                continue
            assert not isinstance(got, Exception), (name, dtype, scalar, got)
            assert got.dtype == np.dtype(str(expected.dtype).removeprefix("torch.")), (
                name, dtype, scalar)
            np.testing.assert_allclose(got.numpy().astype(np.float64),
                                       expected.numpy().astype(np.float64), rtol=1e-6)


def test_the_issue_cases() -> None:
    assert (tl.tensor([1, 2, 3]) + 1).dtype == tl.int64
    assert (tl.tensor([1, 2, 3]) + 1).tolist() == [2, 3, 4]
    assert tl.Tensor([0]).dtype == tl.float32
    assert tl.Tensor(2, 3).shape == (2, 3) and tl.Tensor(2, 3).dtype == tl.float
    assert (tl.tensor([1, 2]) / 2).dtype == tl.float32
    assert tl.tensor([1, 2]).sigmoid().dtype == tl.float32
    np.testing.assert_allclose(tl.tensor([0, 1]).sigmoid().numpy(),
                               torch.tensor([0, 1]).sigmoid().numpy())
    np.testing.assert_allclose(tl.nn.functional.silu(tl.tensor([0, 1])).numpy(),
                               torch.nn.functional.silu(torch.tensor([0.0, 1.0])).numpy())


def test_dtype_names_devices_and_the_default_dtype() -> None:
    assert tl.float is tl.float32 and tl.double == tl.float64 and tl.long == tl.int64
    assert tl.tensor([1.0]).dtype == tl.float and tl.tensor([1]).dtype == tl.long
    assert tl.zeros(2, dtype=tl.double).dtype == tl.float64
    assert tl.tensor([1, 2], dtype=tl.bool).dtype == tl.bool
    for bad in (tl.float16, tl.bfloat16, tl.half):
        with pytest.raises(tl.TorchLeanError, match="not supported"):
            tl.zeros(2, dtype=bad)
    d = tl.device("cpu")
    assert d == "cpu" and d.type == "cpu" and str(tl.device("cuda:1")) == "cuda:1"
    assert tl.tensor([1.0], device=d).device == "cpu"
    with pytest.raises(tl.DeviceError):
        tl.device("tpu")
    assert tl.get_default_dtype() == tl.float32
    tl.set_default_dtype(tl.float64)
    try:
        assert tl.tensor([1.5]).dtype == tl.float64 and tl.zeros(2).dtype == tl.float64
        assert (tl.tensor([1]) * 0.5).dtype == tl.float64
    finally:
        tl.set_default_dtype(tl.float32)
    with pytest.raises(tl.TorchLeanError, match="floating"):
        tl.set_default_dtype(tl.int64)
    assert tl.tensor([1.0]).type() == "torch.FloatTensor"
    assert tl.tensor([1.5]).type(tl.long).dtype == tl.int64
    assert tl.LongTensor([1, 2]).dtype == tl.int64 and tl.FloatTensor(2, 2).shape == (2, 2)


def test_float_mixes_keep_gradients_through_the_cast() -> None:
    x = tl.tensor([1.0, 2.0], requires_grad=True)
    y = tl.tensor([3.0, 4.0], dtype=tl.float64, requires_grad=True)
    z = x * y
    assert z.dtype == tl.float64
    z.sum().backward()
    assert x.grad.dtype == tl.float32 and x.grad.tolist() == [3.0, 4.0]
    assert y.grad.tolist() == [1.0, 2.0]
    d = x.double()
    assert d.dtype == tl.float64 and d.requires_grad
