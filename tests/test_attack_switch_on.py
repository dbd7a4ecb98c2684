"""PGD from the vertices that switch on the first relu's neurons (``attack.switch_on_starts``, the
``switched`` stage of ``vnn.instance``'s attack for many inputs).

The constructed network: 40 inputs in ``[0, 1]``, two hidden neurons, two outputs. ``A`` is on
over half the box (the centre too) and pulls every descent towards the corner opposite a vertex
``v``; ``B`` is
off everywhere except within L1 distance 0.25 of ``v``. The unsafe set ``Y_1 >= Y_0`` holds
only where ``B`` is well on: within L1 distance 0.042 of ``v`` (``Y_1 = 4.8 relu(B)`` must reach
``Y_0 = 1``). No gradient step ever sees ``B`` (it passes no gradient where it is off), so
PGD cannot find that corner, but ``B``'s maximising vertex is ``v`` itself.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean import attack, nn
from torchlean.bounds.properties import Property
from torchlean.vnn import instance, vnnlib
from torchlean.vnn.instance import Network, verify_instance

N_IN = 40
SIGNS = np.where(np.random.default_rng(7).uniform(size=N_IN) < 0.5, -1.0, 1.0)
VERTEX = (SIGNS > 0).astype(np.float64)  # where s . (x - 1/2) is largest: N_IN / 2
CUT = N_IN / 2 - 0.25  # B = s . (x - 1/2) - CUT: 0.25 at the vertex, <= -0.75 at every other


def _weights(scale):
    w1 = np.stack([-SIGNS, SIGNS])
    b1 = np.array([SIGNS.sum() / 2 + 0.5, -SIGNS.sum() / 2 - CUT])  # A: on at the centre
    w2 = np.array([[-0.02, 0.0], [0.0, scale]])
    b2 = np.array([1.0, 0.0])
    return w1, b1, w2, b2


def _exact(x, scale):
    """Y_1 - Y_0 in float64 from the weights (>= 0: x is a counterexample)."""
    w1, b1, w2, b2 = _weights(scale)
    y = w2 @ np.maximum(w1 @ np.asarray(x, np.float64) + b1, 0) + b2
    return y[1] - y[0]


def _files(tmp_path, scale):
    """The network (an ONNX file) and the property: ``Y_1 >= Y_0`` somewhere in the box."""
    model = nn.Sequential(nn.Linear(N_IN, 2), nn.ReLU(), nn.Linear(2, 2))
    w1, b1, w2, b2 = _weights(scale)
    model.load_state_dict({"0.weight": w1.astype(np.float32), "0.bias": b1.astype(np.float32),
                           "2.weight": w2.astype(np.float32), "2.bias": b2.astype(np.float32)})
    onnx_path = tmp_path / "corner.onnx"
    tl.onnx.export(model, onnx_path, [(1, N_IN)])
    lines = [f"(declare-const X_{i} Real)" for i in range(N_IN)]
    lines += ["(declare-const Y_0 Real)", "(declare-const Y_1 Real)"]
    for i in range(N_IN):
        lines += [f"(assert (>= X_{i} 0.0))", f"(assert (<= X_{i} 1.0))"]
    lines.append("(assert (>= Y_1 Y_0))")
    prop_path = tmp_path / "corner.vnnlib"
    prop_path.write_text("\n".join(lines) + "\n")
    return onnx_path, prop_path


def test_only_the_switch_on_vertices_reach_a_corner_pgd_cannot_see(tmp_path):
    onnx_path, prop_path = _files(tmp_path, 4.8)
    net, prop = Network(onnx_path), vnnlib.read(prop_path)
    region = prop.regions[0]
    lo, hi = region.inner_box(np.float32)
    objectives = [region.outputs[0].matrix(prop.n_outputs)]
    chains = net.batched(instance._chains(net))
    assert chains is not None
    # the attack that ran before: the signed PGD from output-diversified starts, as the
    # instance runs it (a fixed seed and fixed counts), gets no lower than A's corner (0.59)
    signed = attack.pgd_box(chains, lo, hi, objectives, steps=instance.SIGN_STEPS,
                            restarts=instance.SIGN_RESTARTS, seed=3,
                            step_size=instance.SIGN_STEP, rule="sign",
                            decay=instance.SIGN_DECAY, diversify=instance.DIVERSIFY,
                            loss="hinge")
    assert signed.objective.min() > 0.5
    # A's and B's maximising vertices, B's (off at the centre) first
    starts = attack.switch_on_starts(chains, lo, hi)
    assert starts.shape == (2, N_IN) and starts.dtype == np.float32
    np.testing.assert_array_equal(starts[0], VERTEX)
    np.testing.assert_array_equal(starts[1], 1 - VERTEX)
    assert _exact(starts[0], 4.8) > 0 and _exact(starts[1], 4.8) < 0
    assert attack.switch_on_starts(chains, lo, hi, limit=1).shape == (1, N_IN)


@pytest.mark.parametrize("method", ["crown", "alpha-crown"])
def test_the_single_pass_finds_the_corner_counterexample(tmp_path, method):
    onnx_path, prop_path = _files(tmp_path, 4.8)
    result = verify_instance(onnx_path, prop_path, None, method, effort=0)
    assert result.status == "sat", result.message
    assert "switch-on" in result.message
    x, y = result.counterexample
    assert np.abs(x - VERTEX).sum() <= 0.042 + 1e-6  # inside the corner
    assert _exact(x, 4.8) >= 0 and y[1] >= y[0]


def test_a_wrong_acceptance_of_an_attack_point_is_caught(tmp_path, monkeypatch):
    # Scale 3.6: Y_1 - Y_0 <= -0.1 everywhere (0.9 - 1 at the vertex): no counterexample. The
    # switch-on PGD still proposes the vertex (its objective 0.1 is the best), and the network
    # run on it rejects it: unknown. (IBP: CROWN would prove it and skip the attack.)
    onnx_path, prop_path = _files(tmp_path, 3.6)
    assert _exact(VERTEX, 3.6) == pytest.approx(-0.1)
    result = verify_instance(onnx_path, prop_path, None, "ibp", effort=0)
    assert result.status == "unknown" and result.counterexample is None
    # A planted lax acceptance (violations up to 0.2 short accepted, by the exact check of the
    # output and by that of its enclosure) turns the vertex into a "sat" that the exact checks
    # above refute: the checks are what keep sat sound.
    real, real_throughout = Property.violated_by, Property.violated_throughout
    shift = np.array([-0.2, 0.0])

    def lax(self, x, y):
        return real(self, x, np.asarray(y, np.float64) + shift)

    def lax_throughout(self, x, y_lo, y_hi):
        return real_throughout(self, x, np.asarray(y_lo, np.float64) + shift,
                               np.asarray(y_hi, np.float64) + shift)

    monkeypatch.setattr(Property, "violated_by", lax)
    planted = verify_instance(onnx_path, prop_path, None, "ibp", effort=0)
    assert planted.status == "unknown"  # the enclosure's check alone still refuses it
    monkeypatch.setattr(Property, "violated_throughout", lax_throughout)
    planted = verify_instance(onnx_path, prop_path, None, "ibp", effort=0)
    assert planted.status == "sat" and "switch-on" in planted.message
    assert _exact(planted.counterexample[0], 3.6) < 0


def test_switch_on_starts_are_each_unstable_neurons_maximising_vertex():
    # a random first layer over a random box: exact against the weights
    rng = np.random.default_rng(0)
    tl.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))
    net = tl.compile(lambda x: model(x), (5, 6))
    lo = rng.uniform(-1, 0, size=6).astype(np.float32)
    hi = (lo + rng.uniform(0.1, 1, size=6)).astype(np.float32)
    w = np.asarray(model[0].weight.array, np.float64)
    b = np.asarray(model[0].bias.array, np.float64)
    centre = (lo + (hi - lo) / 2).astype(np.float32).astype(np.float64)
    z = w @ centre + b
    reach = np.abs(w) @ ((hi.astype(np.float64) - lo) / 2)
    unstable = np.flatnonzero((z + reach > 0) & (z - reach < 0))
    assert 2 <= len(unstable) < 12
    starts = attack.switch_on_starts(net, lo, hi)
    assert len(starts) == len(unstable)
    expected = {tuple(np.where(w[i] > 0, hi, lo)) for i in unstable}
    assert {tuple(s) for s in starts} == expected
    # the neurons off at the centre come first, each group by its largest value
    first = [i for i in unstable if z[i] <= 0]
    order = sorted(first, key=lambda i: -(z[i] + reach[i]))
    for k, i in enumerate(order):
        np.testing.assert_array_equal(starts[k], np.where(w[i] > 0, hi, lo))
    # a cap on the neurons examined: evenly spaced ones
    few = attack.switch_on_starts(net, lo, hi, neurons=3)
    spaced = [i for i in (0, 6, 11) if i in unstable]
    assert {tuple(s) for s in few} == {tuple(np.where(w[i] > 0, hi, lo)) for i in spaced}
    # no relu: no starts; bad inputs: a named error
    linear = tl.compile(lambda x: nn.Linear(6, 2)(x), (5, 6))
    assert attack.switch_on_starts(linear, lo, hi).shape == (0, 6)
    with pytest.raises(attack.AttackError, match="limit"):
        attack.switch_on_starts(net, lo, hi, limit=-1)
    with pytest.raises(attack.AttackError, match="neurons"):
        attack.switch_on_starts(net, lo, hi, neurons=0)
    with pytest.raises(attack.AttackError, match="lower <= upper"):
        attack.switch_on_starts(net, hi + 1, hi)
