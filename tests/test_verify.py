"""``torchlean verify`` and its library, tested: the whole registry passes ``--quick``; a
deliberately wrong forward, VJP, JVP, spec or kink convention fails exactly the columns that
check that object (the expected sets below, every other column passing); a freshly trained digits
MLP passes the model report, and a broken rule in its graph fails it.

Which columns look at which object (so a planted error must fail exactly these):
forward kernel -> forward (vs spec), fd (finite differences of the kernel), torch (forward),
  and 2nd when the op's own VJP records that op (mul's VJP is made of mul nodes);
VJP rule -> vjp (vs sympy), fd, dot, 2nd (the VJP differentiated again), torch (autograd);
JVP rule -> jvp (vs sympy), fd, dot, 2nd (forward mode runs over the recorded VJP);
spec -> forward, vjp, jvp (and 2nd when its second derivative changes).
An error below PyTorch's and finite differences' tolerances is seen by the spec columns alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from torchlean import cli
from torchlean.core.registry import REGISTRY, Primitive
from torchlean.spec import SPECS, SpecEntry
from torchlean.verify import COLUMNS, Settings, VerifyError, check_op, check_ops
from torchlean.verify.model import check_checkpoint

QUICK = Settings.make(quick=True)


def failing(prim: Primitive) -> set[str]:
    result = check_op(prim, QUICK)
    assert set(result.checks) == set(COLUMNS)
    return set(result.failed)


@pytest.fixture
def mul() -> Primitive:
    prim = REGISTRY["mul"]
    assert failing(prim) == set(), "mul must pass before an error is planted"
    return prim


def _replace_spec(monkeypatch: pytest.MonkeyPatch, name: str, fn: Any) -> None:
    entry = SPECS[name]
    monkeypatch.setitem(SPECS, name, SpecEntry(name, fn, entry.rational))


# --- the tester, tested ----------------------------------------------------------------------


def test_wrong_forward_fails_forward_fd_and_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    square = REGISTRY["square"]
    assert failing(square) == set()
    original = square.forward
    monkeypatch.setattr(square, "forward", lambda x: original(x) + x)
    assert failing(square) == {"forward", "fd", "torch"}


def test_wrong_forward_of_an_op_its_own_vjp_uses_also_fails_2nd(
        monkeypatch: pytest.MonkeyPatch, mul: Primitive) -> None:
    """mul's VJP is made of mul nodes: differentiating the recorded reverse pass runs the
    (wrong) kernel, so the second-order column sees it too."""
    original = mul.forward
    monkeypatch.setattr(mul, "forward", lambda a, b: original(a, b) + a)
    assert failing(mul) == {"forward", "fd", "torch", "2nd"}


def test_tiny_forward_error_is_seen_by_the_spec_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative error of 2^-34 (6e-11) is below PyTorch's 1e-10 and FD's 1e-5 tolerances;
    only the exact comparison with the spec catches it."""
    square = REGISTRY["square"]
    original = square.forward
    monkeypatch.setattr(square, "forward", lambda x: original(x) * (1 + 2.0**-34))
    result = check_op(square, QUICK)
    assert set(result.failed) == {"forward"}
    assert "x the stated bound" in result.checks["forward"].detail
    assert result.checks["forward"].sample is not None


def test_wrong_vjp_fails_the_vjp_columns(monkeypatch: pytest.MonkeyPatch, mul: Primitive) -> None:
    # Swapped operands: the classic wrong product rule.
    monkeypatch.setattr(mul, "vjp", lambda ops, g, xs, out: (ops.mul(g, xs[0]),
                                                               ops.mul(g, xs[1])))
    result = check_op(mul, QUICK)
    assert set(result.failed) == {"vjp", "fd", "dot", "2nd", "torch"}
    assert "exact derivative of the spec" in result.checks["vjp"].detail
    assert result.checks["jvp"].status == "pass"


def test_wrong_jvp_fails_the_jvp_columns(monkeypatch: pytest.MonkeyPatch, mul: Primitive) -> None:
    # Forgets the tangent of b.
    monkeypatch.setattr(mul, "jvp", lambda ops, ts, xs, out: ops.mul(ts[0], xs[1]))
    result = check_op(mul, QUICK)
    assert set(result.failed) == {"jvp", "fd", "dot", "2nd"}
    assert result.checks["vjp"].status == "pass"


def test_wrong_spec_fails_forward_vjp_and_jvp(monkeypatch: pytest.MonkeyPatch,
                                              mul: Primitive) -> None:
    right = SPECS["mul"].fn
    _replace_spec(monkeypatch, "mul", lambda a, b: right(a, b) + a)
    # d^2/dt^2 of the extra term a + t u is 0: the second-order column still passes.
    assert failing(mul) == {"forward", "vjp", "jvp"}


def test_tiny_spec_error_fails_forward_only(monkeypatch: pytest.MonkeyPatch,
                                            mul: Primitive) -> None:
    right = SPECS["mul"].fn
    _replace_spec(monkeypatch, "mul", lambda a, b: right(a, b) + 2.0**-30)
    assert failing(mul) == {"forward"}


def test_missing_spec_fails(monkeypatch: pytest.MonkeyPatch, mul: Primitive) -> None:
    monkeypatch.delitem(SPECS, mul.name)
    result = check_op(mul, QUICK)
    assert result.failed == ["forward"]
    assert "no spec" in result.checks["forward"].detail
    assert result.checks["vjp"].status == "n/a"
    # Second order still runs, against finite differences of the VJP.
    assert result.checks["2nd"].status == "pass" and result.checks["2nd"].cases > 0


def test_wrong_kink_convention_fails_vjp_and_jvp_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """relu's documented derivative at 0 is 0; a rule giving 1 there is right everywhere else,
    so finite differences, PyTorch's random samples and the dot test cannot see it."""
    relu = REGISTRY["relu"]
    good = check_op(relu, QUICK)
    assert not good.failed and good.checks["jvp"].conventions == ["zero"]

    def at_least_zero(ops: Any, x: Any) -> Any:  # 1 where x >= 0, as graph ops or arrays
        one = ops.add_scalar(ops.zeros_like(x), c=1.0)
        return ops.sub(one, ops.positive_mask(ops.scale(x, c=-1.0)))

    monkeypatch.setattr(relu, "vjp", lambda ops, g, xs, out: (ops.mul(g, at_least_zero(ops,
                                                                                       xs[0])),))
    monkeypatch.setattr(relu, "jvp", lambda ops, ts, xs, out: ops.mul(ts[0], at_least_zero(
        ops, xs[0])))
    result = check_op(relu, QUICK)
    assert set(result.failed) == {"vjp", "jvp"}
    assert "kink" in result.checks["jvp"].detail


def test_a_crashing_rule_is_a_failure_not_an_error(monkeypatch: pytest.MonkeyPatch,
                                                   mul: Primitive) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("planted")

    monkeypatch.setattr(mul, "jvp", boom)
    result = check_op(mul, QUICK)
    assert "jvp" in result.failed and "planted" in result.checks["jvp"].detail


def test_bad_arguments_are_named_errors() -> None:
    with pytest.raises(KeyError, match="no_such_op"):
        check_ops(["no_such_op"], quick=True)
    with pytest.raises(VerifyError, match="unknown column"):
        Settings.make(columns=["fwd"])
    with pytest.raises(VerifyError, match="seed"):
        Settings.make(seed=-1)


# --- the command line ------------------------------------------------------------------------


def test_cli_quick_passes_for_every_primitive(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """CI's `torchlean verify --quick`: every registered primitive, every column."""
    out = tmp_path / "verify.json"
    assert cli.main(["verify", "--quick", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "\033[" not in text  # no colour when stdout is not a terminal
    data = json.loads(out.read_text())
    assert data["ok"] and data["counts"]["fail"] == 0
    rows = {r["name"]: r["checks"] for r in data["ops"]}
    assert set(rows) == set(REGISTRY)
    for name, checks in rows.items():
        assert checks["forward"]["status"] == "pass", name  # every primitive has a spec
        for column, cell in checks.items():
            assert cell["status"] in ("pass", "n/a"), (name, column, cell)
            if cell["status"] == "pass":
                assert cell["cases"] > 0, (name, column)
        if not REGISTRY[name].nondiff and REGISTRY[name].inputs:
            for column in ("fd", "vjp", "jvp", "dot", "link"):
                assert checks[column]["status"] == "pass", (name, column)
    # The documented conventions are the ones that held at the planted kinks.
    expected = {"relu": "zero", "abs": "zero", "sqrt": "zero", "clamp": "zero",
                "max": "mean", "min": "mean", "max_pool2d": "first"}
    for name, convention in expected.items():
        assert rows[name]["jvp"]["conventions"] == [convention], name
        assert rows[name]["vjp"]["conventions"] == [convention], name
    summary = text.strip().splitlines()[-2]
    assert summary.startswith(f"{len(REGISTRY)} primitives x {len(COLUMNS)} checks")


def test_cli_failure_exit_status_and_table(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    mul = REGISTRY["mul"]
    original = mul.forward
    monkeypatch.setattr(mul, "forward", lambda a, b: original(a, b) + a)
    assert cli.main(["verify", "--quick", "--ops", "mul,add"]) == 1
    text = capsys.readouterr().out
    lines = text.splitlines()
    header = lines[0].split()
    assert header == ["primitive", *COLUMNS]
    mul_row = next(line for line in lines if line.startswith("mul "))
    assert "FAIL" in mul_row
    add_row = next(line for line in lines if line.startswith("add "))
    assert "FAIL" not in add_row
    assert "mul [forward]" in text
    # mul's VJP is made of mul nodes, so 2nd fails with its kernel (see the module docstring).
    assert "2 primitives x 9 checks: 12 passed, 4 failed" in text


def test_cli_input_errors(monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["verify", "--ops", "no_such_op"]) == 2
    assert "no_such_op" in capsys.readouterr().err
    assert cli.main(["verify", "--ops", ","]) == 2
    assert cli.main(["verify", "--model", "mlp", "--checkpoint", "x.safetensors"]) == 2
    assert "give one of" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "sympy", None)  # import sympy now raises ImportError
    assert cli.main(["verify", "--ops", "relu"]) == 2
    assert "pip install 'torchlean[verify]'" in capsys.readouterr().err


# --- the model report ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("verify") / "mlp.safetensors"
    assert cli.main(["train", "--epochs", "2", "--save", str(path)]) == 0
    return path


def test_model_report_on_a_trained_digits_mlp(digits_checkpoint: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    out = tmp_path / "model.json"
    assert cli.main(["verify", "--checkpoint", str(digits_checkpoint), "--quick",
                     "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "model report: mlp" in text
    data = json.loads(out.read_text())
    checks = data["model"]["checks"]
    assert set(checks) == {"graph verifier", "primitives pass op checks", "compiled == eager",
                           "to_tape == backprop_all", "gradient vs finite differences",
                           "hvp vs finite differences"}
    assert all(c["status"] == "pass" for c in checks.values()), checks
    assert {r["name"] for r in data["ops"]} >= {"linear", "relu", "log_softmax"}


def test_model_report_fails_with_a_broken_rule(digits_checkpoint: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    relu = REGISTRY["relu"]
    right = relu.vjp
    assert right is not None
    # Twice the right cotangent: a plausible-looking slip in one rule of the graph.
    monkeypatch.setattr(relu, "vjp", lambda ops, g, xs, out: tuple(
        ops.scale(c, c=2.0) for c in right(ops, g, xs, out)))
    report = check_checkpoint(str(digits_checkpoint), quick=True)
    assert report.model is not None and not report.ok
    failed = set(report.model.failed)
    assert {"primitives pass op checks", "gradient vs finite differences"} <= failed
    # The graph is still well formed and the two engines still agree with each other.
    assert not failed & {"graph verifier", "compiled == eager", "to_tape == backprop_all"}
    assert "relu" in report.model.checks["primitives pass op checks"].detail
