"""The eager hot path's cached step plan (``engine.replay``): hits, misses, errors and bits.

A session remembers what its last pass's checks concluded; a pass repeating the same ops on the
same shapes skips them (``tape.replayed`` counts the nodes taken from the cache), and anything
that differs falls back to full recording, with the same values, gradients and errors as a
session without a cache.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.core.attr_kinds import set_max_elements
from torchlean.core.autodiff import run_reverse
from torchlean.core.errors import ShapeError, TorchLeanError
from torchlean.core.registry import ARRAY_OPS, REGISTRY
from torchlean.engine import replay
from torchlean.engine.anomaly import NonFiniteError
from torchlean.engine.replay import PlanCache, same_attrs
from torchlean.engine.session import Options, StaleSessionError
from torchlean.engine.tape import Tape
from torchlean.training.trainers import ScalarTrainer, Session


def _chain(s: Session, x: Any, y: Any, w: tl.Param, ops: int = 6) -> Any:
    h = F.mul(s.input(x), s.use(w))
    yr = s.input(y, requires_grad=False)
    for i in range(ops):
        h = F.tanh(F.add(h, yr)) if i % 2 else F.relu(F.scale(h, c=0.5 + i))
    return F.sum(F.sigmoid(h))


def _pass(s: Session, x: Any, y: Any, w: tl.Param, ops: int = 6) -> tuple[Any, Any, Tape]:
    s.reset()
    out = _chain(s, x, y, w, ops)
    grads = s.backward(out)
    tape = s.tape
    assert tape is not None
    return s.value(out), grads, tape


def _fresh(x: Any, y: Any, w0: Any, ops: int = 6) -> tuple[Any, Any]:
    """The same pass in a new session: nothing cached."""
    s = Session(Options())
    value, grads, tape = _pass(s, x, y, tl.Param(w0, "w", dtype="float32"), ops)
    assert tape.replayed == 0
    return value, grads


def _same(a: tuple[Any, Any], b: tuple[Any, Any]) -> None:
    assert np.array_equal(a[0], b[0])
    assert sorted(a[1]) == sorted(b[1])
    for k, g in a[1].items():
        assert g.dtype == b[1][k].dtype and np.array_equal(g, b[1][k])


def _data(n: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32),
            rng.standard_normal(n).astype(np.float32))


def test_a_repeated_pass_replays_every_node_with_the_same_bits() -> None:
    x, y, w0 = _data()
    s = Session(Options())
    w = tl.Param(w0, "w", dtype="float32")
    v1, g1, t1 = _pass(s, x, y, w)
    assert t1.replayed == 0
    v2, g2, t2 = _pass(s, x, y, w)
    assert t2.replayed == t2.size == t1.size
    _same((v2, g2), (v1, g1))
    _same((v2, g2), _fresh(x, y, w0))
    # New data of the same shapes: still a hit, and the same bits as an uncached pass.
    x3, y3, _ = _data(seed=1)
    v3, g3, t3 = _pass(s, x3, y3, w)
    assert t3.replayed == t3.size
    _same((v3, g3), _fresh(x3, y3, w0))
    # The nodes of a replayed tape read as any tape's.
    assert [n.op_name for n in t3.nodes] == [n.op_name for n in t1.nodes]
    assert all(np.array_equal(n.value, t3.value(i)) for i, n in enumerate(t3.nodes))


def test_a_changed_sequence_falls_back_to_recording_from_the_first_difference() -> None:
    x, y, w0 = _data()
    s = Session(Options())
    w = tl.Param(w0, "w", dtype="float32")
    _, _, t1 = _pass(s, x, y, w, ops=6)
    v, g, t2 = _pass(s, x, y, w, ops=4)  # a shorter chain: differs where sigmoid comes first
    assert 0 < t2.replayed < t2.size
    _same((v, g), _fresh(x, y, w0, ops=4))
    # The cache now holds the last sequence: it replays, and the old one misses again.
    assert _pass(s, x, y, w, ops=4)[2].replayed == t2.size
    v, g, t4 = _pass(s, x, y, w, ops=6)
    assert t4.replayed < t4.size
    _same((v, g), _fresh(x, y, w0, ops=6))


def test_a_changed_shape_or_dtype_misses_and_the_checks_run_again() -> None:
    x, y, w0 = _data()
    s = Session(Options())
    w = tl.Param(w0, "w", dtype="float32")
    _pass(s, x, y, w)
    # Another input length: the parameter (5,) no longer matches and the shape rule says so.
    s.reset()
    with pytest.raises(ShapeError, match="mul"):
        F.mul(s.input(np.ones(4, np.float32)), s.use(w))
    # The same op sequence on a tape with a cache: a float64 leaf where float32 was recorded is
    # a miss, and the mixed-dtype check refuses the op as on a tape without a cache.
    cache = PlanCache()
    for dtype, ok in ((np.float32, True), (np.float32, True), (np.float64, False)):
        tape = Tape(cache=cache)
        a = tape.leaf(np.ones(3, np.float32))
        b = tape.leaf(np.ones(3, dtype))
        if ok:
            tape.mul(a, b)
        else:
            with pytest.raises(TorchLeanError, match="mul"):
                tape.mul(a, b)
            assert tape.replayed == 1


def test_attributes_are_compared_by_value_and_type_and_checked_on_a_miss() -> None:
    cache = PlanCache()
    for c, expected in ((1.0, 2.0), (1.0, 2.0), (2, 4.0), (3.0, 6.0)):
        tape = Tape(cache=cache)
        out = tape.scale(tape.leaf(np.full(2, 2.0, np.float32)), c=c)
        np.testing.assert_array_equal(tape.value(out), [expected, expected])
    # True == 1.0 in Python, but a bool is not a real number here: the miss runs the check.
    tape = Tape(cache=cache)
    tape.scale(tape.leaf(np.ones(2, np.float32)), c=1.0)
    tape = Tape(cache=cache)
    with pytest.raises(ShapeError, match="c must be a real number"):
        tape.scale(tape.leaf(np.ones(2, np.float32)), c=True)
    assert same_attrs({"k": (1, 2)}, {"k": (1, 2)}) and not same_attrs({"k": (1, 2)}, {"k": [1, 2]})
    assert not same_attrs({"k": np.ones(2)}, {"k": np.ones(2)})  # arrays: never by value
    assert not same_attrs({"c": float("nan")}, {"c": float("nan")})


def test_a_callers_attribute_dict_edited_later_does_not_change_the_cache() -> None:
    cache = PlanCache()
    attrs = {"c": 2.0}
    tape = Tape(cache=cache)
    tape.record(REGISTRY["scale"], (tape.leaf(np.ones(2, np.float32)),), attrs)
    attrs["c"] = 5.0
    tape = Tape(cache=cache)
    out = tape.record(REGISTRY["scale"], (tape.leaf(np.ones(2, np.float32)),), attrs)
    np.testing.assert_array_equal(tape.value(out), [5.0, 5.0])


def test_value_checks_still_run_on_a_replayed_pass() -> None:
    x, y, w0 = _data()
    # check_finite reads every value: an overflow in a replayed node is found there.
    cache = PlanCache()
    for v in (1.0, 2.0, 100.0):
        tape = Tape(check_finite=True, cache=cache)
        leaf = tape.leaf(np.full(2, v, np.float32))
        if v < 100:
            tape.exp(leaf)
        else:
            with pytest.raises(NonFiniteError, match="exp"):
                tape.exp(leaf)
            assert tape.replayed == 1
    # A parameter changed after it was recorded: the version check (per pass) still refuses.
    s = Session(Options())
    w = tl.Param(w0, "w", dtype="float32")
    _pass(s, x, y, w)
    s.reset()
    out = _chain(s, x, y, w)
    assert s.tape is not None and s.tape.replayed == s.tape.size
    w.assign(w0 * 2)
    with pytest.raises(StaleSessionError):
        s.backward(out)


def test_lowering_the_allocation_limit_drops_the_cache() -> None:
    cache = PlanCache()
    for _ in range(2):
        tape = Tape(cache=cache)
        tape.relu(tape.leaf(np.ones(100, np.float32)))
    previous = set_max_elements(50)
    try:
        tape = Tape(cache=cache)
        with pytest.raises(ShapeError, match="relu"):
            tape.relu(tape.leaf(np.ones(100, np.float32)))
    finally:
        set_max_elements(previous)


def test_random_draws_replay_with_the_same_bits() -> None:
    s = Session(Options(seed=3))
    draws = []
    for _ in range(3):
        s.reset()
        draws.append(s.value(F.relu(s.rand_uniform((4,)))))
    assert s.tape is not None and s.tape.replayed == s.tape.size
    assert all(np.array_equal(d, draws[0]) for d in draws)


def test_trainer_steps_use_the_cache_and_match_a_fresh_trainer() -> None:
    rng = np.random.default_rng(0)
    params = [rng.standard_normal((3, 4)).astype(np.float32),
              rng.standard_normal(3).astype(np.float32)]
    x = rng.standard_normal((6, 4)).astype(np.float32)
    labels = rng.integers(0, 3, size=6).astype(np.float32)

    def loss(w: Any, b: Any, xs: Any, ys: Any) -> Any:
        return F.cross_entropy(F.relu(F.linear(w, b, xs)), ys)

    cached = ScalarTrainer([p.copy() for p in params], loss)
    for _ in range(3):
        cached.step(0.1, x, labels)
    assert len(cached._stepper._session._plan_cache.entries) > 0
    for _ in range(3):  # each step of a fresh trainer starts with an empty cache
        fresh = ScalarTrainer([p.copy() for p in cached.params()], loss)
        got, want = cached.value_and_grads(x, labels), fresh.value_and_grads(x, labels)
        assert got[0] == want[0]
        assert all(np.array_equal(a, b) for a, b in zip(got[1], want[1], strict=True))
        cached.step(0.1, x, labels)


def test_a_cache_serves_only_tapes_of_its_dtype() -> None:
    cache = PlanCache()
    t32 = Tape("float32", cache=cache)
    t32.rand_uniform(shape=(3,), seed=0, counter=0)
    t64 = Tape("float64", cache=cache)
    i = t64.rand_uniform(shape=(3,), seed=0, counter=0)
    assert t64.value(i).dtype == np.float64 and t64.replayed == 0
    again = Tape("float64", cache=cache)
    again.rand_uniform(shape=(3,), seed=0, counter=0)
    assert again.replayed == 1 and np.array_equal(again.value(0), t64.value(i))


def test_a_repeated_pass_reruns_the_last_reverse_steps_only_for_the_same_output() -> None:
    x, y, w0 = _data()
    s = Session(Options())
    w = tl.Param(w0, "w", dtype="float32")
    _pass(s, x, y, w)
    cache = s._plan_cache
    assert cache.reverse is None  # a first pass records: nothing it ran is kept
    _pass(s, x, y, w)
    kept = cache.reverse
    assert kept is not None and kept[0] is cache.entries
    x3, y3, _ = _data(seed=2)
    v3, g3, t3 = _pass(s, x3, y3, w)  # runs the kept steps
    assert cache.reverse is kept
    _same((v3, g3), _fresh(x3, y3, w0))
    # Another output of the same repeated pass: its own steps, with the same bits as a fresh
    # session's (which has nothing kept).
    s.reset()
    h = _chain(s, x3, y3, w)
    tape = s.tape
    assert tape is not None and tape.replayed == tape.size
    inner = F.sum(s._backend.ref(h.id - 1))
    got = s.backward(inner)
    fresh = Session(Options())
    h2 = _chain(fresh, x3, y3, tl.Param(w0, "w", dtype="float32"))
    want = fresh.backward(F.sum(fresh._backend.ref(h2.id - 1)))
    assert sorted(got) == sorted(want)
    assert all(np.array_equal(got[k], want[k]) for k in got)
    # A shorter pass misses: the kept steps are not used for it.
    v, g, _ = _pass(s, x, y, w, ops=4)
    _same((v, g), _fresh(x, y, w0, ops=4))


def _mlp_loss(w1: Any, b1: Any, w2: Any, b2: Any, xs: Any, ys: Any, act: Any = F.relu) -> Any:
    # h, w2 and b2 are used twice: their cotangents are sums of two contributions.
    h = act(F.linear(w1, b1, xs))
    logits = F.add(F.linear(w2, b2, h), F.linear(w2, b2, F.scale(h, c=0.5)))
    return F.cross_entropy(logits, ys)


def _mlp_data(seed: int = 0, batch: int = 6) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal((5, 4)).astype(np.float32),
              rng.standard_normal(5).astype(np.float32),
              rng.standard_normal((3, 5)).astype(np.float32),
              rng.standard_normal(3).astype(np.float32)]
    x = rng.standard_normal((batch, 4)).astype(np.float32)
    labels = rng.integers(0, 3, size=batch).astype(np.float32)
    return params, x, labels


def test_a_repeated_pass_runs_the_kept_reverse_steps_as_one_emitted_function() -> None:
    params, x, labels = _mlp_data()
    trainer = ScalarTrainer([p.copy() for p in params], _mlp_loss)
    cache = trainer._stepper._session._plan_cache
    trainer.step(0.1, x, labels)  # records
    trainer.step(0.1, x, labels)  # repeats: keeps its reverse steps
    assert cache.reverse is not None and cache.emitted is None
    trainer.step(0.1, x, labels)  # reruns them: emitted now, and used
    assert cache.emitted is not None
    fn = cache.emitted[1]
    assert fn is not None and "def reverse(values, seed, on_leaf)" in fn.source
    calls = []

    def counting(*args: Any) -> Any:
        calls.append(1)
        return fn(*args)

    cache.emitted = (cache.emitted[0], counting)
    trainer.step(0.1, x, labels)
    assert calls == [1]
    # The emitted function and the loop over the same kept steps give the same bits, and
    # report the leaves' cotangents in the same order.
    s = trainer._stepper._session
    s.reset()
    out = trainer._stepper.fn(s._backend, s.input(x, requires_grad=False),
                              s.input(labels, requires_grad=False))
    tape = s.tape
    assert tape is not None
    seed = np.ones((), np.float32)
    from_loop: list[int] = []
    from_fn: list[int] = []
    _, key, run = cache.reverse
    want = run_reverse(run, tape._values, out.id, seed, True, ARRAY_OPS,
                       lambda i, g: from_loop.append(i))
    got = fn(tape._values, seed, lambda i, g: from_fn.append(i))
    assert key[1] == out.id and len(got) == len(want) == tape.size
    assert from_fn == from_loop and len(from_fn) == 4
    for a, b in zip(got, want, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == b.dtype and np.array_equal(a, b)


def test_emitted_reverse_steps_train_with_the_same_bits_as_no_cache() -> None:
    """Parameters after several steps, and each step's loss and gradients, equal bitwise to a
    trainer whose cache is dropped before every step (full recording, the loop); a changed
    shape or op sequence mid-training falls back and stays equal; gradients a caller holds
    from an earlier step are not changed by later ones."""
    params, x, labels = _mlp_data()
    x9, labels9 = _mlp_data(seed=1, batch=9)[1:]
    act = [F.relu]

    def loss(w1: Any, b1: Any, w2: Any, b2: Any, xs: Any, ys: Any) -> Any:
        return _mlp_loss(w1, b1, w2, b2, xs, ys, act[0])

    cached = ScalarTrainer([p.copy() for p in params], loss)
    plain = ScalarTrainer([p.copy() for p in params], loss)
    cache = cached._stepper._session._plan_cache
    held: list[tuple[list[Any], list[np.ndarray]]] = []
    emitted_at = []
    for step in range(14):
        xs, ys = (x9, labels9) if step == 4 else (x, labels)  # one step of another shape
        act[0] = F.tanh if 7 <= step < 10 else F.relu  # another op sequence for three steps
        plain._stepper._session._plan_cache = PlanCache()  # nothing cached: records fully
        got, want = cached.value_and_grads(xs, ys), plain.value_and_grads(xs, ys)
        assert got[0] == want[0]
        assert all(g.dtype == w.dtype and np.array_equal(g, w)
                   for g, w in zip(got[1], want[1], strict=True))
        held.append((got[1], [np.copy(g) for g in got[1]]))
        cached.step(0.1, xs, ys)
        plain.step(0.1, xs, ys)
        assert all(np.array_equal(a, b)
                   for a, b in zip(cached.params(), plain.params(), strict=True))
        emitted_at.append(cache.emitted is not None and cache.emitted[1] is not None)
    # Emitted while a sequence repeats; dropped at each change (the shape at 4, tanh at 7 and
    # relu again at 10), emitted again once the new sequence repeats.
    assert emitted_at[3] and emitted_at[9] and emitted_at[13]
    assert not emitted_at[4] and not emitted_at[7] and not emitted_at[10]
    for grads, copies in held:
        assert all(np.array_equal(a, b) for a, b in zip(grads, copies, strict=True))


def test_a_pass_longer_than_the_emission_limit_runs_the_loop() -> None:
    x, y, w0 = _data()
    s = Session(Options())
    w = tl.Param(w0, "w", dtype="float32")
    limit = replay.MAX_EMITTED_NODES
    replay.MAX_EMITTED_NODES = 3
    try:
        for _ in range(3):
            got = _pass(s, x, y, w)
    finally:
        replay.MAX_EMITTED_NODES = limit
    emitted = s._plan_cache.emitted
    assert emitted is not None and emitted[1] is None
    _same(got[:2], _fresh(x, y, w0))
