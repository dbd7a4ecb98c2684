"""Every primitive's error inputs, driven through every entry point (issue 9, item 7).

Each ``ErrorInput`` in ``Primitive.error_inputs`` is a call the op must refuse. It is driven
through the eager tape (``tape.apply``), F on plain arrays (``F.apply``, and the generated
``F.<op>`` where there is one) and the graph tracer (``tl.compile``), asserting the named error
class exactly, a message that starts with the op's name and matches the record, and that the tape
and the input arrays are unchanged.

Two differences between entry points are part of the records rather than of this file:
``tape_error`` (the tape counts node ids, so a wrong number of inputs is a ``TapeError`` there)
and ``at_run`` (a check of values, which a traced graph makes when it runs). Records of the call
signature (``SignatureError``) go through ``F.<op>``: ``F.apply`` takes inputs and attributes
already split. The nullary ``rand_uniform`` has no F function and no refs to trace with, so the
tape and ``F.apply`` are its entry points.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import torchlean as tl
import torchlean.engine.ops_interface as F
from torchlean.core.errors import SignatureError, TorchLeanError
from torchlean.core.registry import REGISTRY, ErrorInput

RECORDS = [
    (name, k, record)
    for name in sorted(REGISTRY)
    for k, record in enumerate(REGISTRY[name].error_inputs() if REGISTRY[name].error_inputs
                               else [])
]
IDS = [f"{name}-{k}" for name, k, _ in RECORDS]
TRACEABLE = [r for r in RECORDS if REGISTRY[r[0]].inputs]
TRACEABLE_IDS = [f"{name}-{k}" for name, k, _ in TRACEABLE]


def _check(name: str, record: ErrorInput, err: BaseException, expected: type) -> None:
    assert type(err) is expected, f"{name}: raised {type(err).__name__}: {err}"
    message = str(err)
    assert re.match(rf"{re.escape(name)}\b", message), f"does not name the op first: {message!r}"
    assert re.search(record.match, message), f"{record.match!r} not in {message!r}"


def _raises(name: str, record: ErrorInput, expected: type, call: Callable[[], Any]) -> None:
    with pytest.raises(TorchLeanError) as info:
        call()
    _check(name, record, info.value, expected)


def _f_calls(name: str, record: ErrorInput) -> list[Callable[..., Any]]:
    function = getattr(F, name, None)
    if record.error is SignatureError:
        assert function is not None, f"{name}: a signature record needs an F function"
        return [function]
    calls: list[Callable[..., Any]] = [lambda *xs, **kw: F.apply(name, *xs, **kw)]
    return calls + ([function] if function is not None else [])


def test_every_primitive_has_error_inputs() -> None:
    missing = sorted(name for name, prim in REGISTRY.items()
                     if prim.error_inputs is None or not prim.error_inputs())
    assert not missing, f"primitives without error inputs: {missing}"


def test_records_are_well_formed() -> None:
    assert RECORDS
    for name, _, record in RECORDS:
        assert issubclass(record.error, TorchLeanError), name
        assert record.tape_error is None or issubclass(record.tape_error, TorchLeanError), name
        assert record.match, f"{name}: a record must say what the message holds"
        # Fresh arrays each time: a call that wrote into its inputs cannot change the record.
        first = record.arrays()
        for a in first:
            a[...] = 7.0
        assert all(not np.any(b == 7.0) for b in record.arrays()), name
        assert record.shapes() == tuple(a.shape for a in first), name


@pytest.mark.parametrize(("name", "k", "record"), RECORDS, ids=IDS)
def test_tape_refuses_and_records_nothing(name: str, k: int, record: ErrorInput) -> None:
    tape = tl.Tape(dtype="float64")
    ids = [tape.leaf(a) for a in record.arrays()]
    before = tape.size
    _raises(name, record, record.tape_error or record.error,
            lambda: tape.apply(name, *ids, **record.attrs))
    assert tape.size == before


@pytest.mark.parametrize(("name", "k", "record"), RECORDS, ids=IDS)
def test_functional_refuses_plain_arrays(name: str, k: int, record: ErrorInput) -> None:
    arrays = record.arrays()
    for call in _f_calls(name, record):
        _raises(name, record, record.error, lambda call=call: call(*arrays, **record.attrs))
    for seen, fresh in zip(arrays, record.arrays(), strict=True):
        np.testing.assert_array_equal(seen, fresh)


@pytest.mark.parametrize(("name", "k", "record"), TRACEABLE, ids=TRACEABLE_IDS)
def test_graph_tracer_refuses(name: str, k: int, record: ErrorInput) -> None:
    call = _f_calls(name, record)[0]

    def fn(*refs: Any) -> Any:
        return call(*refs, **record.attrs)

    if record.at_run:
        compiled = tl.compile(fn, *record.shapes(), dtype="float64")
        _raises(name, record, record.error, lambda: compiled.forward(*record.arrays()))
    else:
        _raises(name, record, record.error,
                lambda: tl.compile(fn, *record.shapes(), dtype="float64"))
