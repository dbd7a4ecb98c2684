"""The model report: evidence that a user's own model, as compiled, is the network that runs and
that its gradient is right.

``check_model(model, loss_fn, x, y)`` compiles the loss graph on a real batch and checks: the
graph verifier; every primitive in the graph passes the op checks (run for those primitives);
compiled == eager bitwise (loss and every gradient) in the model's own dtype; ``to_tape`` +
``backward_dense_all`` == ``backprop_all`` bitwise, node by node; the full gradient against
float64 central differences along random directions in parameter space; and one
Hessian-vector product (over all parameters, forward mode over the recorded reverse pass)
against central differences of gradients. Float64 checks run on a float64 copy of the model;
the model itself is not changed.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.errors import TorchLeanError
from ..core.registry import REGISTRY
from ..engine import ops_interface as F
from ..engine.graph import grad_graph
from ..engine.params import Param
from ..engine.session import Options, Session
from ..engine.transforms import compile as compile_fn
from ..zoo import datasets, models
from ..zoo.trained import check_fits, load_data, load_trained
from . import numeric as N
from .checks import Settings, check_op, require_sympy
from .report import FAIL, PASS, CheckResult, ModelReport, Report

FD_STEPS = (1e-6, 1e-7)  # two steps: a wrong gradient misses both; a relu kink crossed by one
GRAD_RTOL = 1e-6
HVP_RTOL = 1e-5


def float64_copy(model: Any) -> Any:
    """A deep copy of ``model`` whose parameters are float64 (each replaced by a new Param)."""
    twin = copy.deepcopy(model)
    for _, module in twin.named_modules():
        for name, p in list(module._parameters.items()):
            setattr(module, name, Param(np.asarray(p.value, dtype=np.float64), p.name,
                                        p.requires_grad, dtype="float64"))
    return twin


def _result(fn: Callable[[], str]) -> CheckResult:
    try:
        return CheckResult(PASS, fn(), cases=1)
    except N.Mismatch as exc:
        return CheckResult(FAIL, str(exc), exc.error, cases=1)
    except Exception as exc:  # noqa: BLE001  (a crash is a failed check, reported as one)
        return CheckResult(FAIL, f"raised {type(exc).__name__}: {exc}", cases=1)


def _loss_program(model: Any, loss_fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def program(x: Any, y: Any) -> Any:
        return loss_fn(model(x), y)

    return program


def check_model(model: Any, loss_fn: Callable[[Any, Any], Any] | None, x: Any, y: Any, *,
                quick: bool = False, seed: int = 0, title: str = "model",
                directions: int | None = None) -> Report:
    """The model report (see the module docstring) plus the op rows of the primitives it uses."""
    require_sympy("verify.check_model")
    loss_fn = loss_fn or F.cross_entropy
    if not callable(loss_fn) or not hasattr(model, "parameters"):
        raise TorchLeanError("check_model: expected an nn.Module model and a loss function "
                             f"(found {type(model).__name__}, {type(loss_fn).__name__})")
    params = model.parameters()
    if not params:
        raise TorchLeanError("check_model: the model has no parameters")
    dtype = np.dtype(params[0].dtype)
    x = np.asarray(x, dtype=dtype)
    y = np.asarray(y).astype(dtype)
    settings = Settings.make(quick, seed)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()  # dropout off: the loss must be a deterministic function of the weights
    try:
        checks: dict[str, CheckResult] = {}
        program = _loss_program(model, loss_fn)
        c = compile_fn(program, x.shape, y.shape, dtype=dtype.name)
        graph = c.graph
        used = sorted({n.op.name for n in graph.nodes if n.op is not None})
        facts: dict[str, Any] = {
            "batch": f"x {x.shape}, y {y.shape} ({dtype.name})",
            "parameters": f"{len(params)} tensors, {sum(int(p.value.size) for p in params):,} "
                          "scalars",
            "graph": f"{len(graph.nodes)} nodes, {len(used)} distinct primitives",
        }

        def verifier() -> str:
            try:
                graph.verify()
            except TorchLeanError as exc:
                raise N.Mismatch(f"graph verifier: {exc}") from None
            return f"{len(graph.nodes)} nodes well-formed"

        checks["graph verifier"] = _result(verifier)

        op_rows = [check_op(_registered(name), settings) for name in used]
        bad = [f"{r.name} ({', '.join(r.failed)})" for r in op_rows if r.failed]
        checks["primitives pass op checks"] = (
            CheckResult(FAIL, "failing: " + "; ".join(bad)) if bad else
            CheckResult(PASS, f"all {len(used)} primitives pass: {', '.join(used)}",
                        cases=len(used)))

        def compiled_vs_eager() -> str:
            value_c, grads_c = c.value_and_backward(x, y)
            s = Session(Options(dtype=dtype.name))
            xr, yr = s.input(x, requires_grad=True), s.input(y, requires_grad=False)
            out = program(xr, yr)
            grads = s.backward(out)
            N.bitwise(value_c, s.value(out), "loss: compiled vs eager")
            N.bitwise(grads_c[0], s.grad(grads, xr), "input gradient: compiled vs eager")
            for k, p in enumerate(c.params):  # the graph's parameter order (first use)
                N.bitwise(grads_c[2 + k], s.grad(grads, s.use(p)),
                          f"gradient of parameter {p.name or k}: compiled vs eager")
            return f"loss and {len(params) + 1} gradients bitwise equal ({dtype.name})"

        checks["compiled == eager"] = _result(compiled_vs_eager)

        def link() -> str:
            seed_value = np.ones((), dtype=dtype)
            tape, _, out_id = c.to_tape(x, y)
            a = tape.backward_dense_all(out_id, seed_value)
            b = c.backprop_all([x, y], seed_value)
            if len(a) != len(b):
                raise N.Mismatch(f"to_tape has {len(a)} nodes, the graph {len(b)}")
            for k, (u, v) in enumerate(zip(a, b, strict=True)):
                N.bitwise(u, v, f"node {k}: to_tape + backward_dense_all vs backprop_all")
            return f"{len(a)} node cotangents bitwise equal"

        checks["to_tape == backprop_all"] = _result(link)

        twin = float64_copy(model)
        twin.eval()
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        c64 = compile_fn(_loss_program(twin, loss_fn), x64.shape, y64.shape, dtype="float64")
        twin_params = c64.params  # gradients come in the graph's parameter order
        k_dirs = directions or (2 if quick else 4)

        def gradient_fd() -> str:
            _, grads = c64.value_and_backward(x64, y64)
            pgrads = grads[2:]
            base = [p.value.copy() for p in twin_params]
            worst = 0.0
            try:
                for _ in range(k_dirs):
                    us = [rng.standard_normal(b.shape) for b in base]
                    analytic = float(sum(np.sum(g * u) for g, u in zip(pgrads, us, strict=True)))
                    errors = []
                    for h in FD_STEPS:
                        vals = []
                        for sign in (1.0, -1.0):
                            for p, b, u in zip(twin_params, base, us, strict=True):
                                p.assign(b + sign * h * u)
                            vals.append(float(c64.forward(x64, y64)))
                        fd = (vals[0] - vals[1]) / (2 * h)
                        errors.append(abs(fd - analytic) / max(1.0, abs(analytic)))
                    err = min(errors)
                    if err > GRAD_RTOL:
                        raise N.Mismatch(f"<grad, u> = {analytic:.10g} but central differences "
                                         f"give relative error {err:.3g} (> {GRAD_RTOL})", err)
                    worst = max(worst, err)
            finally:
                for p, b in zip(twin_params, base, strict=True):
                    p.assign(b)
            return (f"{k_dirs} random directions over all parameters: relative error "
                    f"<= {worst:.2g} (bound {GRAD_RTOL})")

        checks["gradient vs finite differences"] = _result(gradient_fd)

        def hvp_fd() -> str:
            # Forward-over-reverse w.r.t. the parameters: the recorded reverse pass
            # (graph.grad_graph) run in forward mode with a tangent on every parameter.
            gg = grad_graph(c64.graph)
            base = [p.value.copy() for p in twin_params]
            vs = [rng.standard_normal(b.shape) for b in base]
            arrays = gg.check_inputs("hvp", [x64, y64] + base)
            values = gg.evaluate(arrays)
            tangents = gg.tangents(values, [None, None] + vs)
            hv = [np.zeros_like(b) if tangents[o] is None else tangents[o]
                  for o, b in zip(gg.outputs[2:], base, strict=True)]
            failure: N.Mismatch | None = None
            for h in FD_STEPS:  # the first step whose differences cross no relu kink
                try:
                    grads = []
                    for sign in (1.0, -1.0):
                        for p, b, v in zip(twin_params, base, vs, strict=True):
                            p.assign(b + sign * h * v)
                        grads.append(c64.value_and_backward(x64, y64)[1][2:])
                finally:
                    for p, b in zip(twin_params, base, strict=True):
                        p.assign(b)
                try:
                    worst = 0.0
                    for k, (a, gp, gm) in enumerate(zip(hv, grads[0], grads[1], strict=True)):
                        worst = max(worst, N.compare(
                            a, (gp - gm) / (2 * h), HVP_RTOL, 1e-7,
                            f"hvp of parameter {k} vs central differences of the gradient"))
                    failure = None
                    break
                except N.Mismatch as exc:
                    failure = failure or exc
            if failure is not None:
                raise failure
            total = float(sum(np.sum(np.abs(a)) for a in hv))
            return (f"H v over all parameters (sum |H v| = {total:.3g}) within rtol {HVP_RTOL} "
                    f"of central differences of gradients: max abs diff {worst:.2g}")

        checks["hvp vs finite differences"] = _result(hvp_fd)
    finally:
        if was_training and hasattr(model, "train"):
            model.train()
    report = ModelReport(title, checks, facts)
    return Report(op_rows, quick, settings.seed, time.perf_counter() - start, report)


def _registered(name: str) -> Any:
    return REGISTRY[name]


def check_checkpoint(path: str, *, dataset: str | None = None, batch_size: int = 32,
                     quick: bool = False, seed: int = 0) -> Report:
    """Rebuild a ``torchlean train --save`` checkpoint as ``torchlean eval`` does and run
    ``check_model`` on a batch of its test set."""
    model = load_trained(path)
    config, settings = model.model_config, model.train_settings
    model_name = config["model"]
    dataset_name = dataset or config.get("dataset")
    if dataset_name not in datasets.NAMES:
        raise TorchLeanError(f"checkpoint {path}: unknown dataset {dataset_name!r}")
    data_seed = int(settings.get("seed", config.get("seed", 0)))
    data = load_data(model_name, dataset_name, data_seed)
    check_fits(config, data, path)
    return _on_batch(model, data, batch_size, quick, seed,
                     f"model report: {model_name} from {path} on {dataset_name}")


def check_fresh(model_name: str, dataset_name: str | None = None, *, batch_size: int = 32,
                quick: bool = False, seed: int = 0) -> Report:
    """``check_model`` on a freshly initialised model, as ``torchlean train`` would build it."""
    dataset_name = dataset_name or models.DEFAULT_DATASET[model_name]
    models.check_compatible(model_name, dataset_name)
    data = load_data(model_name, dataset_name, seed)
    model = models.build(models.config_for(model_name, data, seed=seed))
    return _on_batch(model, data, batch_size, quick, seed,
                     f"model report: {model_name} (freshly initialised, seed {seed}) on "
                     f"{dataset_name}")


def _on_batch(model: Any, data: Any, batch_size: int, quick: bool, seed: int,
              title: str) -> Report:
    test = data.test
    n = min(batch_size, len(test))
    x = np.asarray(test.inputs[:n])
    y = np.asarray(test.targets[:n])
    return check_model(model, F.cross_entropy, x, y, quick=quick, seed=seed,
                       title=f"{title}, batch of {n} test examples")


__all__: Sequence[str] = ["check_model", "check_checkpoint", "check_fresh", "float64_copy"]
