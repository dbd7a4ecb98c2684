"""The cheap outward steps (``rounding.up_wide``/``down_wide``, used by ``bounds.chain_crown``)
are never inside ``numpy.nextafter``'s step, at every binade, at powers of two and their
neighbours, at subnormals, zeros and infinities; and a planted step one ulp short is caught."""

import numpy as np

from torchlean.bounds import rounding
from torchlean.bounds.rounding import down_wide, up_wide


def _points() -> np.ndarray:
    rng = np.random.default_rng(0)
    scale = 2.0 ** rng.integers(-1074, 1023, 200_000).astype(np.float64)
    p2 = 2.0 ** np.arange(-1074, 1024, dtype=np.float64)
    edges = [p2, np.nextafter(p2, 0.0), np.nextafter(p2, np.inf)]
    special = np.array([0.0, -0.0, np.inf, -np.inf, 5e-324, 2.2250738585072014e-308,
                        np.finfo(np.float64).max])
    pos = np.concatenate([rng.uniform(1.0, 2.0, scale.size) * scale, *edges, special])
    return np.concatenate([pos, -pos])


@np.errstate(over="ignore", invalid="ignore")
def test_wide_steps_enclose_nextafter():
    x = _points()
    up, down = up_wide(x), down_wide(x)
    assert np.all(up >= np.nextafter(x, np.inf))
    assert np.all(down <= np.nextafter(x, -np.inf))
    finite = np.isfinite(x)
    # and they stay close: at most two steps out
    assert np.all(up[finite] <= np.nextafter(np.nextafter(np.nextafter(x[finite], np.inf),
                                                          np.inf), np.inf))
    assert not np.isnan(up).any() and not np.isnan(down).any()
    # not float64 arrays: the exact step
    assert up_wide(1.0) == np.nextafter(1.0, np.inf)
    f32 = np.array([1.0, -3.0], np.float32)
    assert np.array_equal(up_wide(f32), np.nextafter(f32, np.float32(np.inf)))


@np.errstate(over="ignore", invalid="ignore")
def test_a_step_one_ulp_short_is_caught(monkeypatch):
    # a planted step of a quarter of |x| 2**-52 (under half the spacing): rounds back to x
    def short(x, sign):
        return np.abs(x) * (sign * 2.0 ** -54) + x

    monkeypatch.setattr(rounding, "_wide", short)
    x = _points()
    x = x[np.isfinite(x)]
    assert not np.all(rounding.up_wide(x) >= np.nextafter(x, np.inf))
