"""Per-primitive checks: every column of ``torchlean verify`` for one primitive.

``check_op(prim)`` runs each column over the primitive's samples (the registry's own, seeded extra
draws from the same generator, and planted kink points from ``differences.KINKS``) and returns an
``OpResult``; ``check_ops(names)`` does it for registered primitives and returns a ``Report``. The
single-sample checks (``check_vjp_fd``, ``check_dot``, ...) raise ``Mismatch`` and are what the
test battery calls directly. What each column checks is ``report.COLUMNS``; the bounds are in
``numeric.TOLERANCES`` and ``symbolic``'s docstring.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.errors import TorchLeanError, UnknownOpError, UnsupportedJvpError
from ..core.registry import (
    ARRAY_OPS,
    FAST_RTOL,
    REGISTRY,
    Primitive,
    Sample,
    fast_kernels,
)
from ..engine import ops_interface as F
from ..engine.transforms import compile as compile_fn
from ..ops.fast import pool as fast_pool
from ..ops.fast import pool_jit
from ..ops.fast import softmax as fast_softmax
from ..spec import get_spec
from . import numeric as N
from . import symbolic as S
from .differences import KINKS, torch_skips
from .report import COLUMNS, FAIL, NA, PASS, CheckResult, OpResult, Report

Mismatch = N.Mismatch


class VerifyError(TorchLeanError):
    """``torchlean.verify`` cannot run as asked (a missing extra, bad arguments)."""


def require_sympy(what: str = "torchlean verify") -> None:
    """Raise ``VerifyError`` naming the extra to install when sympy is missing."""
    try:
        import sympy  # noqa: F401
    except ImportError:
        raise VerifyError(f"{what}: sympy is not installed; install the verify extra: "
                          "pip install 'torchlean[verify]'") from None


@dataclass(frozen=True)
class Settings:
    """How much work each column does. ``quick`` keeps the whole registry under a minute."""

    quick: bool = False
    seed: int = 0
    extra_rounds: int = 2  # sample draws beyond the registry's own (seeded rng streams)
    symbolic_limit: int = 80  # largest sample (input scalars) differentiated by sympy
    symbolic_samples: int = 3  # smooth samples per primitive that go through sympy
    symbolic_entries: int = 16  # output entries per sample that sympy differentiates
    columns: tuple[str, ...] = field(default_factory=lambda: tuple(COLUMNS))

    @classmethod
    def make(cls, quick: bool = False, seed: int = 0,
             columns: Sequence[str] | None = None) -> Settings:
        cols = tuple(COLUMNS) if columns is None else tuple(columns)
        unknown = [c for c in cols if c not in COLUMNS]
        if unknown:
            raise VerifyError(f"verify: unknown column(s) {unknown}; expected some of "
                              f"{list(COLUMNS)}")
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise VerifyError(f"verify: seed must be a non-negative integer, found {seed!r}")
        if quick:
            return cls(True, int(seed), 0, 40, 1, 4, cols)
        return cls(False, int(seed), 2, 80, 3, 16, cols)


# --- samples ----------------------------------------------------------------------------------


def size_of(sample: Sample) -> int:
    return sum(int(np.size(x)) for x in sample.inputs)


def smooth_samples(prim: Primitive, settings: Settings) -> list[Sample]:
    """The registry's samples at ``seed``, then ``extra_rounds`` more seeded draws."""
    out = list(prim.samples(np.random.default_rng(settings.seed)))
    for r in range(settings.extra_rounds):
        out += prim.samples(np.random.default_rng(settings.seed + 1000 * (r + 1)))
    return out


def kink_samples(prim: Primitive, base: Sequence[Sample]) -> list[Sample]:
    """Samples with kink points planted (for primitives that document a kink convention)."""
    kink = KINKS.get(prim.name)
    if kink is None:
        return []
    return [kink.plant(s) for s in base]


def spec_of(prim: Primitive) -> tuple[Callable[..., Any], bool] | None:
    """The primitive's reference definition and whether it is rational, or None."""
    entry = get_spec(prim.name)
    if entry is None:
        return None
    return entry.fn, entry.rational


# --- single-sample checks (raise Mismatch) ---------------------------------------------------


def check_vjp_fd(prim: Primitive, sample: Sample, rng: np.random.Generator) -> float:
    """The VJP ``J^T v`` equals central finite differences of ``<v, f(x)>`` (float64)."""
    _, v = N.directions(prim, sample, rng)
    got = N.vjp(prim, sample.inputs, sample.attrs, v)
    want = N.fd_vjp(N.kernel(prim, sample.attrs), sample.inputs, v, N.step(prim),
                    N.index_positions(prim))
    rtol, atol = N.TOLERANCES["fd"]
    return max([N.compare(a, e, rtol, atol, f"VJP vs finite differences, input {j}")
                for j, (a, e) in enumerate(zip(got, want, strict=True))], default=0.0)


def check_jvp_fd(prim: Primitive, sample: Sample, rng: np.random.Generator) -> float:
    """The JVP ``J u`` equals ``(f(x + h u) - f(x - h u)) / 2h``."""
    us, _ = N.directions(prim, sample, rng)
    got = N.jvp(prim, sample.inputs, sample.attrs, us)
    want = N.fd_jvp(N.kernel(prim, sample.attrs), sample.inputs, us, N.step(prim))
    rtol, atol = N.TOLERANCES["fd"]
    return N.compare(got, want, rtol, atol, "JVP vs finite differences")


def check_dot(prim: Primitive, sample: Sample, rng: np.random.Generator) -> float:
    """``<v, J u> == <J^T v, u>``: the JVP and VJP rules describe the same Jacobian."""
    us, v = N.directions(prim, sample, rng)
    ju = N.jvp(prim, sample.inputs, sample.attrs, us)
    jtv = N.vjp(prim, sample.inputs, sample.attrs, v)
    for j, (g, x) in enumerate(zip(jtv, sample.inputs, strict=True)):
        if g.shape != np.shape(x):
            raise Mismatch(f"VJP cotangent {j} has shape {g.shape}, input has {np.shape(x)}")
    left = float(np.sum(v * ju))
    right = float(sum(np.sum(g * u) for g, u in zip(jtv, us, strict=True)))
    rtol, atol = N.TOLERANCES["dot"]
    return N.compare(left, right, rtol, atol, "dot-product test <v, J u> vs <J^T v, u>")


def check_nondiff(prim: Primitive, sample: Sample, rng: np.random.Generator) -> float:
    """A nondiff op's output needs no gradient, passes no cotangent, has a zero tangent."""
    tape, ids, out = N.record(prim, sample.inputs, sample.attrs)
    if tape.node(out).requires_grad:
        raise Mismatch("a nondiff op's output must not require grad")
    grads = tape.backward_dense(out, np.ones(tape.value(out).shape))
    if any(grads[i] is not None for i in ids):
        raise Mismatch("a nondiff op passed a cotangent to its inputs")
    if ids:
        us, _ = N.directions(prim, sample, rng)
        tangent = tape.jvp(out, dict(zip(ids, us, strict=True)))
        N.compare(tangent, np.zeros(tape.value(out).shape), 0.0, 0.0, "nondiff tangent")
    return 0.0


def check_reverse_only(prim: Primitive, sample: Sample, rng: np.random.Generator) -> float:
    """A reverse-only op raises UnsupportedJvpError naming itself in forward mode."""
    us, _ = N.directions(prim, sample, rng)
    try:
        N.jvp(prim, sample.inputs, sample.attrs, us)
    except UnsupportedJvpError as exc:
        if prim.name not in str(exc):
            raise Mismatch(f"UnsupportedJvpError must name the op: {exc}") from None
        return 0.0
    raise Mismatch("reverse-only op gave a JVP instead of raising")


def check_torch(prim: Primitive, sample: Sample, rng: np.random.Generator) -> float:
    """Forward and (for differentiable ops) VJP against PyTorch's ``torch_ref`` in float64."""
    import torch  # only this column needs PyTorch

    attrs = prim.bind_attrs((), sample.attrs)
    leaves = [torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=not prim.nondiff)
              for x in sample.inputs]
    assert prim.torch_ref is not None
    ref = prim.torch_ref(torch, *leaves, **attrs)
    ours = N.forward(prim, sample.inputs, sample.attrs)
    rtol, atol = N.TOLERANCES["torch_forward"]
    worst = N.compare(ours, ref.detach().numpy(), rtol, atol, "forward vs PyTorch")
    if prim.nondiff or not leaves or not ref.requires_grad:
        return worst
    v = rng.standard_normal(ours.shape)
    grads = torch.autograd.grad(ref, leaves, torch.tensor(v), allow_unused=True)
    mine = N.vjp(prim, sample.inputs, sample.attrs, v)
    rtol, atol = N.TOLERANCES["torch_vjp"]
    for j, (g_t, g_ours) in enumerate(zip(grads, mine, strict=True)):
        expected = np.zeros(leaves[j].shape) if g_t is None else g_t.numpy()
        worst = max(worst, N.compare(g_ours, expected, rtol, atol,
                                     f"VJP vs PyTorch autograd, input {j}"))
    return worst


def check_link(prim: Primitive, sample: Sample, rng: np.random.Generator) -> float:
    """Compiled == eager bitwise (forward and VJP); ``to_tape`` + ``backward_dense_all`` ==
    ``backprop_all`` bitwise, node by node."""

    attrs = dict(sample.attrs)
    xs = [np.array(x, dtype=np.float64) for x in sample.inputs]
    c = compile_fn(lambda *refs: F.apply(prim, *refs, **attrs), *[x.shape for x in xs],
                   dtype="float64")
    c.graph.verify()
    N.bitwise(c.forward(*xs), N.forward(prim, xs, attrs), "compiled forward vs eager tape")
    if prim.nondiff:
        return 0.0
    v = rng.standard_normal(c.out_shape)
    tape, _, out_id = c.to_tape(*xs)
    from_tape = tape.backward_dense_all(out_id, v)
    from_graph = c.backprop_all(xs, v)
    if len(from_tape) != len(from_graph):
        raise Mismatch(f"to_tape has {len(from_tape)} nodes, the graph {len(from_graph)}")
    for k, (a, b) in enumerate(zip(from_tape, from_graph, strict=True)):
        N.bitwise(a, b, f"node {k}: to_tape + backward_dense_all vs backprop_all")
    eager = N.vjp(prim, xs, attrs, v)
    for j, (a, b) in enumerate(zip(c.vjp(xs, v), eager, strict=True)):
        N.bitwise(a, b, f"compiled VJP vs eager tape, input {j}")
    return 0.0


def _values_and_vjp(prim: Primitive, inputs: Sequence[np.ndarray], attrs: dict[str, Any],
                    v: np.ndarray | None, dtype: str) -> list[np.ndarray]:
    """The output, then (``v`` given) the cotangent of every input, recorded in ``dtype`` with
    whatever kernel set is active."""
    tape, ids, out = N.record(prim, inputs, attrs, dtype)
    values = [np.asarray(tape.value(out))]
    if v is None:
        return values
    grads = tape.backward_dense_all(out, v)
    return values + [np.asarray(grads[i]) for i in ids]


def check_fast(prim: Primitive, sample: Sample, rng: np.random.Generator) -> float:
    """The fast kernel set (``registry.fast_kernels``) against the reference: forward and VJP in
    float64 and float32 within ``FAST_RTOL``, same dtypes; then the link (compiled == eager,
    ``to_tape`` == graph) bitwise with the fast kernels on both sides."""
    worst = 0.0
    for dtype in ("float64", "float32"):
        inputs = [np.asarray(x, dtype=dtype) for x in sample.inputs]
        out = _values_and_vjp(prim, inputs, sample.attrs, None, dtype)[0]
        v = None if prim.nondiff else rng.standard_normal(out.shape).astype(dtype)
        want = _values_and_vjp(prim, inputs, sample.attrs, v, dtype)
        with fast_kernels(True), fast_softmax.every_size():  # (small samples too)
            got = _values_and_vjp(prim, inputs, sample.attrs, v, dtype)
        rtol = FAST_RTOL[dtype]
        for k, (a, e) in enumerate(zip(got, want, strict=True)):
            what = f"{dtype} fast " + ("forward" if k == 0 else f"VJP, input {k - 1}")
            if a.dtype != e.dtype:
                raise Mismatch(f"{what}: dtype {a.dtype} != reference {e.dtype}")
            worst = max(worst, N.compare(a, e, rtol, rtol, f"{what} vs reference"))
    if prim.name in fast_pool.RELU_FUSED:
        worst = max(worst, _check_pool_loops(prim, sample, rng))
    with fast_kernels(True):
        check_link(prim, sample, rng)
    return worst


def _check_pool_loops(prim: Primitive, sample: Sample, rng: np.random.Generator) -> float:
    """A max pooling's fast kernels on a channels-last copy of the sample, with the compiled
    loops (``ops.fast.pool_jit``) at every size: forward and VJP against the reference, within
    ``FAST_RTOL``. (Recording copies inputs into C order, so the check above never reaches the
    layout the loops take; where numba is missing, this checks the NumPy kernels on it.)"""
    worst = 0.0
    x = np.asarray(sample.inputs[0])
    forward, vjp, fast_vjp = prim.reference_forward, prim.reference_vjp, prim.vjp
    if x.ndim != 4 or forward is None or vjp is None or fast_vjp is None:
        return worst
    for dtype in ("float64", "float32"):
        xc = np.ascontiguousarray(x.astype(dtype).transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        want_out = forward(xc, **sample.attrs)
        g = rng.standard_normal(want_out.shape).astype(dtype)
        want = vjp(ARRAY_OPS, g, [xc], want_out, **sample.attrs)[0]
        with fast_kernels(True), pool_jit.every_size():
            out = prim.forward(xc, **sample.attrs)
            got = fast_vjp(ARRAY_OPS, g, [xc], out, **sample.attrs)[0]
        rtol = FAST_RTOL[dtype]
        for what, a, e in (("forward", out, want_out), ("VJP", got, want)):
            label = f"{dtype} fast {what}, channels-last input (compiled loops)"
            if a.dtype != e.dtype or a.shape != e.shape:
                raise Mismatch(f"{label}: {a.dtype} {a.shape} != reference {e.dtype} {e.shape}")
            worst = max(worst, N.compare(np.asarray(a), np.asarray(e), rtol, rtol,
                                         f"{label} vs reference"))
    return worst


def hvp(prim: Primitive, sample: Sample, us: Sequence[np.ndarray],
        v: np.ndarray) -> list[np.ndarray]:
    """``H_v u`` per input, H_v the Hessian of ``<v, f(x)>``: the VJP rule differentiated again
    by forward mode over the recorded reverse pass (``tl.compile(...).hvp``)."""

    attrs = dict(sample.attrs)
    xs = [np.array(x, dtype=np.float64) for x in sample.inputs]
    n = len(xs)

    def fn(*refs: Any) -> Any:
        return F.sum(F.mul(F.apply(prim, *refs[:n], **attrs), refs[n]))

    c = compile_fn(fn, *[x.shape for x in xs], np.shape(v), dtype="float64", wrt=range(n))
    out = c.hvp(xs + [np.asarray(v, dtype=np.float64)], list(us) + [None])
    return [np.asarray(h) for h in out[:n]]


def check_second_fd(prim: Primitive, sample: Sample, rng: np.random.Generator) -> float:
    """The VJP rule differentiated again (hvp) equals central differences of the VJP."""
    us, v = N.directions(prim, sample, rng)
    got = hvp(prim, sample, us, v)
    want = N.fd_jvp(lambda *xs: N.vjp(prim, xs, sample.attrs, v), sample.inputs, us,
                    N.FD_STEP)
    rtol, atol = N.TOLERANCES["second_fd"]
    return max(N.compare(a, e, rtol, atol, f"hvp vs finite differences of the VJP, input {j}")
               for j, (a, e) in enumerate(zip(got, want, strict=True)))


# --- columns ----------------------------------------------------------------------------------


class _Column:
    """Runs one single-sample check over samples, keeping the worst error and the first failure."""

    def __init__(self, prim: Primitive) -> None:
        self.prim = prim
        self.cases = 0
        self.worst = 0.0
        self.failure: CheckResult | None = None
        self.conventions: set[str] = set()

    def run(self, sample: Sample, fn: Callable[..., float | None], *args: Any) -> None:
        if self.failure is not None:
            return
        self.cases += 1
        try:
            err = fn(*args)
        except Mismatch as exc:
            self.failure = CheckResult(FAIL, str(exc), exc.error,
                                       N.describe(self.prim, sample), self.cases)
            return
        except Exception as exc:  # noqa: BLE001  (a crash in a kernel or rule is a failure)
            self.failure = CheckResult(FAIL, f"raised {type(exc).__name__}: {exc}", None,
                                       N.describe(self.prim, sample), self.cases)
            return
        if err is not None and np.isfinite(err):
            self.worst = max(self.worst, float(err))

    def result(self, detail: str) -> CheckResult:
        if self.failure is not None:
            self.failure.cases = self.cases
            return self.failure
        if self.cases == 0:
            return CheckResult(NA, "no applicable samples")
        return CheckResult(PASS, detail, self.worst, None, self.cases, sorted(self.conventions))


def _rng(settings: Settings, name: str, salt: int) -> np.random.Generator:
    # One stream per (primitive, column): results do not depend on which columns run.
    return np.random.default_rng([settings.seed, salt, sum(map(ord, name))])


def column_forward(prim: Primitive, samples: Sequence[Sample], settings: Settings,
                   kinks: Sequence[Sample] = ()) -> CheckResult:
    found = spec_of(prim)
    if found is None:
        # Every primitive must have a reference definition: a missing one is a failure.
        return CheckResult(FAIL, "no spec: define one in torchlean.spec (spec.define)")
    entry, rational = found
    col = _Column(prim)
    totals = {"entries": 0, "exact": 0}
    ratio = [0.0]
    # --quick: the two smallest samples and the planted kinks, instead of every draw.
    chosen = list(samples) if not settings.quick else sorted(samples, key=size_of)[:2]

    def one(sample: Sample, dtype: str) -> float:
        inputs = [np.asarray(x, dtype=np.float64) for x in sample.inputs]
        if dtype == "float32":
            inputs = [x.astype(np.float32).astype(np.float64) for x in inputs]
        kernel_out = N.forward(prim, inputs, sample.attrs, dtype)
        if kernel_out.dtype != np.dtype(dtype):
            raise Mismatch(f"{dtype} inputs gave a {kernel_out.dtype} output")
        ref = S.reference(entry, rational, inputs, N.full_attrs(prim, sample.attrs, dtype),
                          high_precision=not settings.quick)
        if ref.shape != kernel_out.shape:
            raise Mismatch(f"{dtype} kernel output shape {kernel_out.shape} != spec output "
                           f"shape {ref.shape}")
        fe = S.forward_error(kernel_out, ref, rational, inputs, sample.attrs, dtype)
        if fe.worst_ratio > 1.0:
            raise Mismatch(f"{dtype} kernel vs spec: error {fe.worst_error:.3g} is "
                           f"{fe.worst_ratio:.3g} x the stated bound", fe.worst_error)
        if dtype == "float64":
            totals["entries"] += fe.entries
            totals["exact"] += fe.correctly_rounded
        ratio[0] = max(ratio[0], fe.worst_ratio)
        return fe.worst_error

    for sample in chosen + list(kinks):
        col.run(sample, one, sample, "float64")
        col.run(sample, one, sample, "float32")
    kind = "exact over Fraction" if rational else f"{S.DIGITS}-digit sympy"
    return col.result(f"{kind}: {totals['exact']}/{totals['entries']} float64 entries equal the "
                      f"correctly rounded spec value, worst error/bound {ratio[0]:.2g}")


def column_fd(prim: Primitive, samples: Sequence[Sample], settings: Settings) -> CheckResult:
    col = _Column(prim)
    rng = _rng(settings, prim.name, 1)
    if prim.nondiff:
        for s in samples:
            col.run(s, check_nondiff, prim, s, rng)
        return col.result("nondiff: no cotangent, zero tangent")
    if not prim.fd_smooth:
        return CheckResult(NA, "fd_smooth=False: finite differences straddle its steps")
    for s in samples:
        col.run(s, check_vjp_fd, prim, s, rng)
        if prim.reverse_only:
            col.run(s, check_reverse_only, prim, s, rng)
        else:
            col.run(s, check_jvp_fd, prim, s, rng)
    return col.result("VJP and JVP within rtol 1e-5 of central differences")


def column_dot(prim: Primitive, samples: Sequence[Sample], settings: Settings) -> CheckResult:
    if prim.nondiff:
        return CheckResult(NA, "nondiff: zero derivative")
    if prim.reverse_only:
        return CheckResult(NA, "reverse-only: no JVP rule")
    col = _Column(prim)
    rng = _rng(settings, prim.name, 2)
    for s in samples:
        col.run(s, check_dot, prim, s, rng)
    return col.result("<v, J u> == <J^T v, u> to 1e-9")


def column_link(prim: Primitive, samples: Sequence[Sample], settings: Settings) -> CheckResult:
    if not prim.inputs:
        return CheckResult(NA, "nullary: no inputs to trace over")
    col = _Column(prim)
    rng = _rng(settings, prim.name, 3)
    for s in samples:
        col.run(s, check_link, prim, s, rng)
    return col.result("bitwise equal")


def column_torch(prim: Primitive, samples: Sequence[Sample], settings: Settings) -> CheckResult:
    if prim.torch_ref is None:
        return CheckResult(NA, "no torch_ref")
    try:
        import torch  # noqa: F401
    except ImportError:
        return CheckResult(NA, "PyTorch not installed")
    col = _Column(prim)
    rng = _rng(settings, prim.name, 4)
    skipped = 0
    for s in samples:
        if torch_skips(prim.name, s):
            skipped += 1
            continue
        col.run(s, check_torch, prim, s, rng)
    note = f"; {skipped} sample(s) covered by an intended difference" if skipped else ""
    return col.result(f"forward to 1e-10, VJP to 1e-9{note}")


def column_fast(prim: Primitive, samples: Sequence[Sample], settings: Settings) -> CheckResult:
    if prim.fast_forward is None and prim.fast_vjp is None:
        return CheckResult(NA, "no fast kernel: training runs the reference")
    col = _Column(prim)
    rng = _rng(settings, prim.name, 5)
    for s in samples:
        col.run(s, check_fast, prim, s, rng)
    kinds = " and ".join(k for k, f in (("forward", prim.fast_forward), ("VJP", prim.fast_vjp))
                         if f is not None)
    return col.result(f"fast {kinds} within rtol {FAST_RTOL['float32']:g} (float32), "
                      f"{FAST_RTOL['float64']:g} (float64); link bitwise")


def _matching(conventions: Iterable[str], rule: np.ndarray, d: S.SpecDerivatives,
              mask: np.ndarray, scale: float) -> list[str]:
    """The documented conventions that the rule's values at the kink entries follow."""
    held = []
    for conv in conventions:
        if conv == "zero":
            want = np.zeros(int(mask.sum()))
        elif conv == "mean":
            want = (d.right[mask] + d.left[mask]) / 2
        elif conv == "right":
            want = d.right[mask]
        elif conv == "left":
            want = d.left[mask]
        elif conv == "first":
            if d.tie_first is None:
                continue
            want = d.tie_first[mask]
        else:
            raise VerifyError(f"unknown kink convention {conv!r}")
        if np.allclose(rule[mask], want, rtol=1e-12, atol=1e-12 * scale):
            held.append(conv)
    return held


def columns_symbolic(prim: Primitive, samples: Sequence[Sample], kinks: Sequence[Sample],
                     settings: Settings, wanted: Sequence[str]) -> dict[str, CheckResult]:
    """The ``vjp``, ``jvp`` and ``2nd`` columns (one sympy pass per sample serves all three)."""
    results: dict[str, CheckResult] = {}
    if prim.nondiff or not prim.inputs:
        reason = "nondiff: zero derivative" if prim.nondiff else "nullary"
        return {c: CheckResult(NA, reason) for c in ("vjp", "jvp", "2nd")}
    found = spec_of(prim)
    spec, rational = found if found is not None else (None, False)
    small = sorted((s for s in samples if size_of(s) <= settings.symbolic_limit), key=size_of)
    if not small:
        small = sorted(samples, key=size_of)[:1]
    smooth = small[: settings.symbolic_samples]
    kinky = sorted((s for s in kinks if size_of(s) <= settings.symbolic_limit), key=size_of)[:1]
    kink = KINKS.get(prim.name)
    declared = kink.conventions if kink else ()
    cols = {c: _Column(prim) for c in ("vjp", "jvp", "2nd")}
    rng = _rng(settings, prim.name, 5)
    exact_rtol, exact_atol = N.TOLERANCES["exact_derivative"]
    second_wanted = "2nd" in wanted and not prim.linear

    def sympy_pass(sample: Sample, at_kink: bool) -> None:
        us, v = N.directions(prim, sample, rng)
        attrs = N.full_attrs(prim, sample.attrs)
        holder: dict[str, Any] = {}

        def derivs() -> float:
            d = holder["d"] = S.spec_derivatives(
                spec, prim, sample, us, attrs, second=second_wanted and not at_kink,
                tie_break=at_kink and "first" in declared, rational=rational,
                limit=settings.symbolic_entries, rng=rng)
            # The cotangent lives on the differentiated entries only (zero elsewhere).
            holder["v"] = np.where(d.chosen, v, 0.0)
            return 0.0

        def jvp_check() -> float:
            d = holder["d"]
            rule = N.jvp(prim, sample.inputs, sample.attrs, us)
            if rule.shape != d.first.shape:
                raise Mismatch(f"JVP shape {rule.shape} != spec output {d.first.shape}")
            smooth_mask = d.chosen & ~d.kink
            err = N.compare(rule[smooth_mask], d.first[smooth_mask], exact_rtol, exact_atol,
                            "JVP vs exact derivative of the spec")
            if d.kink.any():
                scale = max(1.0, float(np.max(np.abs(d.first))))
                held = _matching(declared, rule, d, d.kink, scale)
                if not held:
                    where = kink.where if kink else "a branch boundary of the spec"
                    raise Mismatch(f"JVP at {int(d.kink.sum())} kink entries ({where}) follows "
                                   f"none of the documented conventions {list(declared)}")
                cols["jvp"].conventions.update(held)
            return err

        def vjp_check() -> float:
            d, v = holder["d"], holder["v"]
            grads = N.vjp(prim, sample.inputs, sample.attrs, v)
            for j, (g, x) in enumerate(zip(grads, sample.inputs, strict=True)):
                if g.shape != np.shape(x):
                    raise Mismatch(f"VJP cotangent {j} has shape {g.shape}, input {np.shape(x)}")
            got = float(sum(np.sum(g * u) for g, u in zip(grads, us, strict=True)))
            options: dict[str, np.ndarray] = {"exact": d.first}
            if d.kink.any():
                options = {}
                for conv in declared:
                    c = d.first.copy()
                    if conv == "zero":
                        c[d.kink] = 0.0
                    elif conv == "mean":
                        c[d.kink] = (d.right[d.kink] + d.left[d.kink]) / 2
                    elif conv in ("right", "left"):
                        c[d.kink] = (d.right if conv == "right" else d.left)[d.kink]
                    elif conv == "first" and d.tie_first is not None:
                        c[d.kink] = d.tie_first[d.kink]
                    options[conv] = c
                if not options:
                    raise Mismatch("the spec has a kink here and the op documents no convention")
            errors = {}
            for conv, c in options.items():
                want = float(np.sum(v * c))
                scale = max(1.0, float(np.sum(np.abs(v * c))),
                            float(sum(np.sum(np.abs(g * u)) for g, u in zip(grads, us,
                                                                         strict=True))))
                errors[conv] = abs(got - want)
                if errors[conv] <= exact_rtol * abs(want) + exact_atol * scale:
                    if conv != "exact":
                        cols["vjp"].conventions.add(conv)
                    return errors[conv]
            worst = min(errors.values())
            raise Mismatch(f"<J^T v, u> from the VJP rule is {got!r}; the exact derivative of "
                           f"the spec gives {float(np.sum(v * next(iter(options.values()))))!r}"
                           + (f" (conventions tried: {list(options)})" if d.kink.any() else ""),
                           worst)

        def second_check() -> float:
            d, v = holder["d"], holder["v"]
            assert d.second is not None
            h = hvp(prim, sample, us, v)
            got = float(sum(np.sum(a * u) for a, u in zip(h, us, strict=True)))
            want = float(np.sum(v * d.second))
            scale = max(1.0, float(np.sum(np.abs(v * d.second))),
                        float(sum(np.sum(np.abs(a * u)) for a, u in zip(h, us, strict=True))))
            err = abs(got - want)
            if err > exact_rtol * abs(want) + exact_atol * scale:
                raise Mismatch(f"u^T H u from the VJP rule differentiated again is {got!r}; "
                               f"sympy's second derivative gives {want!r}", err)
            return max(err, check_second_fd(prim, sample, _rng(settings, prim.name, 6)))

        # The sympy pass itself can fail (a spec that raises): every column that needs it fails.
        before = {c: col.failure for c, col in cols.items()}
        probe = _Column(prim)
        probe.run(sample, derivs)
        if probe.failure is not None:
            for c, col in cols.items():
                if before[c] is None and (c != "2nd" or second_wanted):
                    col.cases += 1
                    col.failure = CheckResult(FAIL, "spec derivative failed: "
                                              + probe.failure.detail, None, probe.failure.sample)
            return
        cols["jvp"].run(sample, jvp_check)
        cols["vjp"].run(sample, vjp_check)
        if second_wanted and not at_kink:
            cols["2nd"].run(sample, second_check)

    if spec is None:
        results["vjp"] = CheckResult(NA, "no spec (the forward column fails)")
        results["jvp"] = CheckResult(NA, "no spec (the forward column fails)")
    else:
        for s in smooth:
            sympy_pass(s, False)
        for s in kinky:
            sympy_pass(s, True)
        results["vjp"] = cols["vjp"].result("== exact derivative of the spec to 1e-12")
        results["jvp"] = cols["jvp"].result("== exact derivative of the spec to 1e-12")
        if prim.reverse_only:
            results["jvp"] = CheckResult(NA, "reverse-only: no JVP rule")
    if prim.linear:
        results["2nd"] = CheckResult(NA, "linear: second derivative is zero")
    elif spec is None:
        # No spec: the second-order check still runs against finite differences of the VJP.
        col = cols["2nd"]
        rng2 = _rng(settings, prim.name, 6)
        for s in smooth:
            col.run(s, check_second_fd, prim, s, rng2)
        res = col.result("hvp == finite differences of the VJP (no spec for sympy)")
        results["2nd"] = res
    else:
        results["2nd"] = cols["2nd"].result(
            "u^T H u == sympy's d^2/dt^2 <v, f(x + t u)> to 1e-12; hvp == FD of VJP to 1e-5")
    if results["2nd"].status == FAIL and "UnsupportedJvpError" in results["2nd"].detail:
        results["2nd"] = CheckResult(NA, "its VJP rule uses an op without a JVP rule")
    return results


def check_op(prim: Primitive, settings: Settings | None = None) -> OpResult:
    """Every column for one primitive (registered or not: test doubles work too)."""
    settings = settings or Settings.make()
    start = time.perf_counter()
    wanted = settings.columns
    try:
        samples = smooth_samples(prim, settings)
    except Exception as exc:  # noqa: BLE001
        bad = CheckResult(FAIL, f"its samples raised {type(exc).__name__}: {exc}")
        return OpResult(prim.name, {c: bad for c in wanted}, time.perf_counter() - start)
    if not samples:
        bad = CheckResult(FAIL, "no samples: add some to its declaration")
        return OpResult(prim.name, {c: bad for c in wanted}, time.perf_counter() - start)
    kinks = kink_samples(prim, samples[:3])
    checks: dict[str, CheckResult] = {}
    runners: dict[str, Callable[[], CheckResult]] = {
        "forward": lambda: column_forward(prim, samples, settings, kinks),
        "fd": lambda: column_fd(prim, samples, settings),
        "dot": lambda: column_dot(prim, list(samples) + list(kinks), settings),
        "link": lambda: column_link(prim, samples, settings),
        "torch": lambda: column_torch(prim, samples, settings),
        "fast": lambda: column_fast(prim, samples, settings),
    }
    symbolic: dict[str, CheckResult] = {}
    if any(c in wanted for c in ("vjp", "jvp", "2nd")):
        symbolic = columns_symbolic(prim, samples, kinks, settings, wanted)
    for c in COLUMNS:
        if c not in wanted:
            continue
        checks[c] = symbolic[c] if c in symbolic else runners[c]()
    return OpResult(prim.name, checks, time.perf_counter() - start)


def resolve_names(names: Iterable[str] | None) -> list[str]:
    """Registered primitive names to check (all, sorted, when ``names`` is None)."""
    if names is None:
        return sorted(REGISTRY)
    if isinstance(names, str):
        names = [n for n in names.split(",") if n]
    chosen = list(dict.fromkeys(names))
    unknown = [n for n in chosen if n not in REGISTRY]
    if unknown:
        raise UnknownOpError(f"verify: no primitive named {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(sorted(REGISTRY))}")
    if not chosen:
        raise VerifyError("verify: the list of primitives is empty")
    return chosen


def check_ops(names: Iterable[str] | None = None, quick: bool = False, seed: int = 0,
              columns: Sequence[str] | None = None,
              progress: Callable[[OpResult], None] | None = None) -> Report:
    """Run every column for the named registered primitives (default: all of them)."""
    require_sympy("verify.check_ops")
    settings = Settings.make(quick, seed, columns)
    start = time.perf_counter()
    results = []
    for name in resolve_names(names):
        result = check_op(REGISTRY[name], settings)
        results.append(result)
        if progress is not None:
            progress(result)
    return Report(results, quick, settings.seed, time.perf_counter() - start)
