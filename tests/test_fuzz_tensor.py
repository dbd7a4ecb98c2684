"""Seeded differential fuzz of the ``tl.Tensor`` API against PyTorch (issue 25).

Each case is one small program written once against a module-like ``lib`` and run twice: with
``torch`` and with ``torchlean``. Rules: torchlean may only raise ``TorchLeanError`` subclasses
(torch raising too is fine); where both succeed, shape, dtype and values must agree; torchlean
may raise where torch succeeds only for the cases in ``INTENDED`` (each with its reason). The run
is bounded by a case count (never by time); a per-case alarm turns a hang into a failure.
Run as a script to print the counts.
"""

from __future__ import annotations

import operator
import signal
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import torchlean as tl
from torchlean.core.errors import TorchLeanError

torch = pytest.importorskip("torch")

SEED = 2025
COUNT = 1500
HANG_GUARD_S = 20

DTYPES = ["float32", "float64", "int64", "bool"]

# Where torchlean refuses (a named error) and torch answers: a part of torchlean's message, and
# why the refusal is intended.
INTENDED: dict[str, str] = {
    "needs at least one entry": "a mean over no entries is refused rather than answered as NaN",
    "is empty": "std/var over no entries: the same refusal (their mean has no entries)",
    "is out of bounds for dimension": "an index out of range is refused even when the result "
                                      "is empty (torch skips its range check then)",
}

# Where torch refuses and torchlean answers: a part of torch's message, and why answering is
# fine (torch lacks a kernel, or refuses a call whose meaning is clear).
TORCH_GAPS: dict[str, str] = {
    "not implemented for 'Bool'": "torch has no bool kernel for this op (abs, floor, ceil, "
                                  "round, matmul); torchlean computes it as on integers",
    "does not support bool input": "argmax/argmin of a bool tensor: the position of the first "
                                   "True (or False), as for 0/1 integers",
    "Boolean inputs not supported": "relu of a bool tensor is the tensor itself",
    "missing 1 required positional arguments": "permute() of a 0-d tensor: the empty "
                                               "permutation, the tensor itself",
}


def _array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype == "int64":
        return rng.integers(-4, 5, size=shape).astype(np.int64)
    return rng.normal(size=shape).astype(dtype)


def _shape(rng: np.random.Generator) -> tuple[int, ...]:
    ndim = int(rng.integers(0, 4))
    return tuple(int(rng.choice([0, 1, 2, 3])) if rng.random() < 0.1 else int(rng.integers(1, 4))
                 for _ in range(ndim))


def _tensor(lib: Any, a: np.ndarray) -> Any:
    return lib.tensor(a.tolist() if a.ndim else a.item(), dtype=getattr(lib, str(a.dtype)
                      if a.dtype != bool else "bool"))


def _scalar(rng: np.random.Generator) -> Any:
    return [0, 1, -2, 3, 0.5, -1.5, 0.0, True, False, float("nan"), float("inf")][
        int(rng.integers(0, 11))]


def _dim(rng: np.random.Generator, ndim: int) -> int:
    return int(rng.integers(-ndim - 2, ndim + 2)) if ndim else int(rng.integers(-2, 2))


BINARY = ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "eq", "ne", "lt", "le", "gt",
          "ge", "and_", "or_", "xor", "matmul"]
UNARY = ["neg", "abs", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu", "square",
         "rsqrt", "floor", "ceil", "round", "sign", "invert", "isnan", "float", "long", "bool"]
REDUCE = ["sum", "mean", "prod", "max", "min", "argmax", "argmin", "std", "var", "any", "all"]


def case_binary(rng: np.random.Generator) -> tuple[str, Callable[[Any], Any]]:
    op = BINARY[int(rng.integers(0, len(BINARY)))]
    a = _array(rng, _shape(rng), DTYPES[int(rng.integers(0, 4))])
    kind = int(rng.integers(0, 3))
    b: Any
    if kind == 0:
        b = _scalar(rng)
    else:
        shape = a.shape[int(rng.integers(0, a.ndim + 1)):] if rng.random() < 0.6 else _shape(rng)
        b = _array(rng, shape, DTYPES[int(rng.integers(0, 4))])
    reflected = kind == 0 and rng.random() < 0.4
    fn = getattr(operator, op)

    def run(lib: Any) -> Any:
        x = _tensor(lib, a)
        y = _tensor(lib, b) if isinstance(b, np.ndarray) else b
        return fn(y, x) if reflected else fn(x, y)

    shown = b if not isinstance(b, np.ndarray) else (b.dtype, b.shape)
    return f"{op}({a.dtype}{a.shape}, {shown}){' reflected' if reflected else ''}", run


def case_unary(rng: np.random.Generator) -> tuple[str, Callable[[Any], Any]]:
    op = UNARY[int(rng.integers(0, len(UNARY)))]
    a = _array(rng, _shape(rng), DTYPES[int(rng.integers(0, 4))])

    def run(lib: Any) -> Any:
        x = _tensor(lib, a)
        if op == "neg":
            return -x
        if op == "invert":
            return ~x
        if op in ("sigmoid", "relu", "exp", "log", "sqrt", "sin", "cos", "tanh", "rsqrt",
                  "abs", "square") and rng_choice[0]:
            return getattr(lib, op)(x)
        return getattr(x, op)()

    rng_choice = [bool(rng.random() < 0.5)]
    return f"{op}({a.dtype}{a.shape})", run


def case_reduce(rng: np.random.Generator) -> tuple[str, Callable[[Any], Any]]:
    op = REDUCE[int(rng.integers(0, len(REDUCE)))]
    a = _array(rng, _shape(rng), DTYPES[int(rng.integers(0, 4))])
    kwargs: dict[str, Any] = {}
    r = rng.random()
    if r < 0.4:
        kwargs["dim"] = _dim(rng, a.ndim)
    elif r < 0.5 and op in ("sum", "mean"):
        kwargs["dim"] = ()
    elif r < 0.55:
        kwargs["dimm"] = 0
    if "dim" in kwargs and rng.random() < 0.5:
        kwargs["keepdim"] = True

    def run(lib: Any) -> Any:
        return getattr(_tensor(lib, a), op)(**kwargs)

    return f"{op}({a.dtype}{a.shape}, {kwargs})", run


def _index(rng: np.random.Generator, shape: tuple[int, ...]) -> Any:
    parts: list[Any] = []
    n = int(rng.integers(1, 4))
    for i in range(n):
        size = shape[i] if i < len(shape) else 1
        k = int(rng.integers(0, 8))
        if k == 0:
            parts.append(int(rng.integers(-size - 1, size + 1)))
        elif k == 1:
            parts.append(slice(int(rng.integers(-3, 4)), None, int(rng.integers(1, 3))))
        elif k == 2:
            length = size if rng.random() < 0.7 else size + 1
            parts.append(("bool", rng.integers(0, 2, size=length).astype(bool)))
        elif k == 3:
            parts.append(("int", rng.integers(-size, max(size, 1) + (rng.random() < 0.2), size=2)))
        elif k == 4:
            parts.append(None)
        elif k == 5 and Ellipsis not in parts:
            parts.append(Ellipsis)
        elif k == 6:
            parts.append([int(v) for v in rng.integers(-size, max(size, 1), size=2)])
        else:
            parts.append(slice(None))
    return parts[0] if len(parts) == 1 and rng.random() < 0.5 else tuple(parts)


def _materialise(lib: Any, idx: Any) -> Any:
    if isinstance(idx, tuple) and len(idx) == 2 and isinstance(idx[0], str):
        return lib.tensor(idx[1].tolist(), dtype=lib.bool if idx[0] == "bool" else lib.int64)
    if isinstance(idx, tuple):
        return tuple(_materialise(lib, i) for i in idx)
    return idx


def case_index(rng: np.random.Generator) -> tuple[str, Callable[[Any], Any]]:
    a = _array(rng, _shape(rng), DTYPES[int(rng.integers(0, 3))])
    idx = _index(rng, a.shape)
    set_value = _scalar(rng) if rng.random() < 0.4 else None

    def run(lib: Any) -> Any:
        x = _tensor(lib, a)
        i = _materialise(lib, idx)
        if set_value is None:
            return x[i]
        x[i] = set_value
        return x

    return f"{'set' if set_value is not None else 'get'}item({a.dtype}{a.shape}, {idx!r})", run


def case_shape(rng: np.random.Generator) -> tuple[str, Callable[[Any], Any]]:
    a = _array(rng, _shape(rng), DTYPES[int(rng.integers(0, 4))])
    op = ["reshape", "view", "permute", "transpose", "unsqueeze", "squeeze", "cat", "stack",
          "flatten", "t"][int(rng.integers(0, 10))]
    nd = a.ndim
    if op in ("reshape", "view"):
        sizes = tuple(int(rng.integers(-1, 4)) for _ in range(int(rng.integers(0, 3))))
        args: tuple[Any, ...] = (sizes,)
        if rng.random() < 0.5 and a.size:
            args = ((-1,),)
    elif op == "permute":
        args = tuple(int(v) for v in rng.permutation(max(nd, 1))[:nd + int(rng.integers(-1, 2))])
    elif op == "transpose":
        args = (_dim(rng, nd), _dim(rng, nd))
    elif op in ("unsqueeze", "squeeze"):
        args = (_dim(rng, nd + (op == "unsqueeze")),) if rng.random() < 0.8 else ()
    elif op in ("cat", "stack"):
        other = a if rng.random() < 0.6 else _array(rng, _shape(rng), str(a.dtype))
        args = (other, _dim(rng, nd))
    else:
        args = ()

    def run(lib: Any) -> Any:
        x = _tensor(lib, a)
        if op in ("cat", "stack"):
            y = _tensor(lib, args[0]) if rng_int[0] else 3
            return getattr(lib, op)([x, y], dim=args[1])
        return getattr(x, op)(*args)

    rng_int = [bool(rng.random() < 0.95)]
    shown = [x.shape if isinstance(x, np.ndarray) else x for x in args]
    return f"{op}({a.dtype}{a.shape}, {shown})", run


def case_matmul(rng: np.random.Generator) -> tuple[str, Callable[[Any], Any]]:
    a = _array(rng, _shape(rng), ["float32", "float64"][int(rng.integers(0, 2))])
    b = _array(rng, _shape(rng) if rng.random() < 0.5 else a.shape[::-1], str(a.dtype))

    def run(lib: Any) -> Any:
        return lib.matmul(_tensor(lib, a), _tensor(lib, b))

    return f"matmul({a.shape}, {b.shape})", run


FACTORIES: list[tuple[str, Callable[[Any], Any]]] = [
    ("arange(0,10,0)", lambda lib: lib.arange(0, 10, 0)),
    ("arange(5)", lambda lib: lib.arange(5)),
    ("arange(0,1,0.25)", lambda lib: lib.arange(0, 1, 0.25)),
    ("arange(10,0)", lambda lib: lib.arange(10, 0)),
    ("arange(nan)", lambda lib: lib.arange(float("nan"))),
    ("full((2,),'a')", lambda lib: lib.full((2,), "a")),
    ("full((2,),1.5)", lambda lib: lib.full((2,), 1.5)),
    ("full((2,),True)", lambda lib: lib.full((2,), True)),
    ("zeros(2**63)", lambda lib: lib.zeros(2**63)),
    ("zeros(2**40)", lambda lib: lib.zeros(2**40, 2**40)),
    ("zeros(-1)", lambda lib: lib.zeros(-1)),
    ("ones(2,-3)", lambda lib: lib.ones(2, -3)),
    ("ones(2.5)", lambda lib: lib.ones(2.5)),
    ("zeros('a')", lambda lib: lib.zeros("a")),
    ("zeros(2,3)", lambda lib: lib.zeros(2, 3)),
    ("zeros((2,3),dtype=int64)", lambda lib: lib.zeros((2, 3), dtype=lib.int64)),
    ("eye(-1)", lambda lib: lib.eye(-1)),
    ("eye(3,2)", lambda lib: lib.eye(3, 2)),
    ("linspace(0,1,-1)", lambda lib: lib.linspace(0, 1, -1)),
    ("linspace(0,1,5)", lambda lib: lib.linspace(0, 1, 5)),
    ("zeros(2,foo=1)", lambda lib: lib.zeros(2, foo=1)),
    ("tensor([1,2],bar=1)", lambda lib: lib.tensor([1, 2], bar=1)),
    ("tensor([[1],[1,2]])", lambda lib: lib.tensor([[1], [1, 2]])),
    ("tensor('a')", lambda lib: lib.tensor("a")),
    ("tensor([])", lambda lib: lib.tensor([])),
    ("tensor(2**70)", lambda lib: lib.tensor(2**70)),
    ("argmax(empty)", lambda lib: lib.tensor([]).argmax()),
    ("max(empty)", lambda lib: lib.tensor([]).max()),
    ("sum(empty)", lambda lib: lib.tensor([]).sum()),
    ("cat([])", lambda lib: lib.cat([])),
    ("stack([])", lambda lib: lib.stack([])),
    ("cat(int)", lambda lib: lib.cat(3)),
    ("randn(-2)", lambda lib: lib.randn(-2)),
    ("full_like(x,'b')", lambda lib: lib.full_like(lib.zeros(2), "b")),
    ("x.sum(foo=1)", lambda lib: lib.zeros(2).sum(foo=1)),
    ("x.reshape(foo=1)", lambda lib: lib.zeros(2).reshape(2, foo=1)),
    ("x[1.5]", lambda lib: lib.zeros(2)[1.5]),
    ("x['a']", lambda lib: lib.zeros(2)["a"]),
    ("x / 0", lambda lib: lib.ones(2) / 0),
    ("int x / 0", lambda lib: lib.ones(2, dtype=lib.int64) / 0),
    ("int x // 0", lambda lib: lib.ones(2, dtype=lib.int64) // 0),
    ("x ** nan", lambda lib: lib.ones(2) ** float("nan")),
    ("2 ** x", lambda lib: 2 ** lib.arange(3)),
    ("x + 'a'", lambda lib: lib.ones(2) + "a"),
    ("x + None", lambda lib: lib.ones(2) + None),
    ("x == 'a'", lambda lib: lib.ones(2) == "a"),
    ("bool(x)", lambda lib: bool(lib.ones(2))),
    ("int(x)", lambda lib: int(lib.ones(1))),
    ("float(x0)", lambda lib: float(lib.tensor(2.5))),
    ("len(x0)", lambda lib: len(lib.tensor(2.5))),
    ("x.item()", lambda lib: lib.ones(2).item()),
    ("x.view(3)", lambda lib: lib.ones(2).view(3)),
]


def case_factory(rng: np.random.Generator) -> tuple[str, Callable[[Any], Any]]:
    return FACTORIES[int(rng.integers(0, len(FACTORIES)))]


GENERATORS = [case_binary, case_binary, case_unary, case_reduce, case_index, case_index,
              case_shape, case_matmul, case_factory]


def _to_numpy(value: Any) -> Any:
    """A comparable form: (shape, dtype name, array) for tensors, recursively for tuples."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        return ("T", tuple(value.shape), str(value.dtype).replace("torch.", ""), value.numpy())
    if isinstance(value, tl.Tensor):
        arr = np.asarray(value.numpy())
        return ("T", tuple(value.shape), str(value.dtype), arr)
    if isinstance(value, torch.Size):
        return tuple(value)
    if isinstance(value, tuple | list):
        return tuple(_to_numpy(v) for v in value)
    return value


def _agree(expected: Any, found: Any) -> str | None:
    if isinstance(expected, tuple) and expected and expected[0] == "T":
        if not (isinstance(found, tuple) and found and found[0] == "T"):
            return f"expected a tensor, found {found!r}"
        _, shape, dtype, arr = expected
        _, fshape, fdtype, farr = found
        if shape != fshape:
            return f"shape {fshape} != torch {shape}"
        if dtype != fdtype:
            return f"dtype {fdtype} != torch {dtype}"
        if arr.dtype.kind == "f":
            ok = np.allclose(farr.astype(np.float64), arr.astype(np.float64), rtol=1e-4,
                             atol=1e-5, equal_nan=True)
        else:
            ok = np.array_equal(farr, arr)
        return None if ok else f"values {farr!r} != torch {arr!r}"
    if isinstance(expected, tuple):
        if not isinstance(found, tuple) or len(found) != len(expected):
            return f"{found!r} != torch {expected!r}"
        for e, f in zip(expected, found, strict=True):
            why = _agree(e, f)
            if why:
                return why
        return None
    if isinstance(expected, float) and isinstance(found, float | int):
        return None if np.isclose(found, expected, equal_nan=True) else f"{found} != {expected}"
    return None if expected == found and type(expected) is type(found) else \
        f"{found!r} != torch {expected!r}"


def _is_empty(value: Any) -> bool:
    return isinstance(value, tuple) and bool(value) and value[0] == "T" and value[3].size == 0


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang


def run_fuzz(seed: int = SEED, count: int = COUNT) -> dict[str, Any]:
    """Run ``count`` cases; returns the counts and the list of failures (case, why)."""
    rng = np.random.default_rng(seed)
    counts = {"cases": 0, "agree": 0, "both_raise": 0, "intended": 0, "torch_gap": 0,
              "failures": 0}
    failures: list[tuple[str, str]] = []
    use_alarm = hasattr(signal, "SIGALRM")
    if use_alarm:
        previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for _ in range(count):
            gen = GENERATORS[int(rng.integers(0, len(GENERATORS)))]
            name, fn = gen(rng)
            counts["cases"] += 1
            torch_error: BaseException | None = None
            try:
                with np.errstate(all="ignore"):
                    expected = _to_numpy(fn(torch))
            except Exception as exc:  # torch's own refusal: any type
                torch_error = exc
            if use_alarm:
                signal.alarm(HANG_GUARD_S)
            try:
                found = _to_numpy(fn(tl))
            except _Hang:
                failures.append((name, "hang"))
                continue
            except TorchLeanError as exc:
                if torch_error is not None:
                    counts["both_raise"] += 1
                elif any(key in str(exc) for key in INTENDED) and (
                        "out of bounds" not in str(exc) or _is_empty(expected)):
                    counts["intended"] += 1
                else:
                    failures.append((name, f"torchlean raised {exc!r}, torch succeeded"))
                continue
            except Exception as exc:
                failures.append((name, f"bare {type(exc).__name__}: {exc}"))
                continue
            finally:
                if use_alarm:
                    signal.alarm(0)
            if torch_error is not None:
                if any(key in str(torch_error) for key in TORCH_GAPS):
                    counts["torch_gap"] += 1
                    continue
                failures.append((name, f"torch raised {torch_error!r}, torchlean answered"))
                continue
            why = _agree(expected, found)
            if why is None:
                counts["agree"] += 1
            else:
                failures.append((name, why))
    finally:
        if use_alarm:
            signal.signal(signal.SIGALRM, previous)
    counts["failures"] = len(failures)
    return {"counts": counts, "failures": failures}


def test_tensor_fuzz_against_torch() -> None:
    result = run_fuzz()
    counts = result["counts"]
    assert counts["cases"] == COUNT
    # Enough of the cases exercise real agreement, not only errors.
    assert counts["agree"] > COUNT // 3
    assert result["failures"] == [], "\n".join(f"{n}: {w}" for n, w in result["failures"][:40])


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else COUNT
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else SEED
    out = run_fuzz(seed, count)
    for name, why in out["failures"]:
        print(f"FAIL {name}: {why}"[:400])
    print(out["counts"])
