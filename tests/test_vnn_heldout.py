"""Held-out networks and properties "of the same kind" as VNN-COMP 2021's ACAS Xu and MNIST-FC,
end to end through ``torchlean vnn``, against the exact truth.

A seeded generator writes one small ReLU MLP in the forms exporters use (``onnx.helper``
directly): Gemm with ``transB`` 0 or 1 and ``alpha``/``beta``, MatMul + Add with the bias on
either side, a last layer without bias, Sub/Div or Mul/Add input normalisation, Flatten or
Reshape, inputs of rank 2 or 4 or without a batch axis, a symbolic batch axis, relu as Relu,
Max or Clip, Identity and Constant nodes, initialisers listed as graph inputs, opsets 9 to 17.
Each file is checked against onnxruntime on random inputs, then decided with properties in the
VNN-LIB forms benchmarks use (several output disjuncts, a disjunction of input boxes,
``(<= Y_0 Y_1)`` or ``(>= Y_1 Y_0)``, comments, declarations in shuffled order, numbers in
scientific notation, MNIST-FC's one-vs-all).

The truth: every activation pattern of the neurons whose interval sign is not fixed gives a
linear program (scipy's ``linprog``) for the least value over the box of the largest violated
row of an unsafe conjunction, in real arithmetic; thresholds are placed a margin away from it,
so float32 agrees. Networks with more inputs than ``BAB_MAX_INPUTS`` must be recognised as relu
chains (so ``--method bab`` ends in relu splitting, not "unknown"), and relu splitting itself
is run on each form with a weak root bound (so it splits). Every ``sat`` result file is parsed
back: the point lies in the box and onnxruntime maps it into the unsafe set.
"""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
from relu_patterns import interval_signs

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("scipy")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from torchlean.bounds import beta, relu_bab  # noqa: E402
from torchlean.vnn import instance, vnnlib  # noqa: E402

MAX_FREE = 6  # unstable neurons enumerated at most
GAP = 0.05  # the truth's margin from the threshold, relative to the outputs' spread


# ---------------------------------------------------------------- the network and its forms
def _layers(seed, n_in, hidden, n_out):
    rng = np.random.default_rng(seed)
    sizes = [n_in, *hidden, n_out]
    return [((rng.normal(size=(o, i)) / np.sqrt(i)).astype(np.float32),
             (rng.normal(size=o) * 0.3).astype(np.float32))
            for i, o in zip(sizes[:-1], sizes[1:], strict=True)]


NORM = {"subdiv": (np.float32(0.25), np.float32(2.0)),  # (x - 0.25) / 2
        "muladd": (np.float32(1.5), np.float32(-0.5))}  # x * 1.5 + (-0.5)


def _tensor(name, a):
    a = np.asarray(a)
    return numpy_helper.from_array(a.astype(np.float32) if a.dtype.kind == "f" else a, name)


def write_onnx(layers, form):
    """The MLP ``layers`` as ONNX bytes in ``form`` (see the module docstring)."""
    n_in, n_out = layers[0][0].shape[1], layers[-1][0].shape[0]
    opset, batch = form.get("opset", 13), form.get("batch", 1)
    rank = form.get("rank", 2)
    in_shape = {1: [n_in], 2: [batch, n_in], 4: [batch, 1, 1, n_in], "col": [n_in, 1]}[rank]
    nodes, inits = [], []
    counter = itertools.count()

    def const(a):
        name = f"c{next(counter)}"
        if form.get("constants"):  # Constant nodes instead of initialisers
            nodes.append(helper.make_node("Constant", [], [name], value=_tensor(name, a)))
        else:
            inits.append(_tensor(name, a))
        return name

    def node(op, ins, **attrs):
        name = f"v{next(counter)}"
        nodes.append(helper.make_node(op, ins, [name], **attrs))
        return name

    cur = "x"
    norm = form.get("norm")
    if norm == "subdiv":
        mean, std = NORM[norm]
        cur = node("Div", [node("Sub", [cur, const(np.full(in_shape[1:], mean))]),
                           const(np.full(in_shape[1:], std))])
    elif norm == "submul":  # the same with the reciprocal stored (float32)
        mean, std = NORM["subdiv"]
        cur = node("Mul", [node("Sub", [cur, const(np.full(in_shape[1:], mean))]),
                           const(np.full(in_shape[1:], np.float32(1) / std))])
    elif norm == "muladd":
        scale, shift = NORM[norm]
        cur = node("Add", [node("Mul", [cur, const(scale)]), const(shift)])
    if rank in (1, "col"):  # no batch axis: the vector goes straight into MatMul
        pass
    elif form.get("flat", "flatten") == "flatten":
        cur = node("Flatten", [cur], axis=1)
    else:
        cur = node("Reshape", [cur, const(np.array([-1, n_in], np.int64))])
    if form.get("identity"):
        cur = node("Identity", [cur])
    kind = form.get("layer", "gemm_t")
    for k, (w, b) in enumerate(layers):
        bias = not (form.get("nobias") and k == len(layers) - 1)
        if kind == "gemm_t":
            cur = node("Gemm", [cur, const(w)] + ([const(b)] if bias else []), transB=1)
        elif kind == "gemm_n":
            cur = node("Gemm", [cur, const(w.T)] + ([const(b)] if bias else []))
        elif kind == "gemm_ab":  # alpha (x W'^T) + beta b' with W' = W / 2, b' = b / 4
            cur = node("Gemm", [cur, const(w / np.float32(2)), const(b / np.float32(4))],
                       transB=1, alpha=2.0, beta=4.0)
        elif kind == "left":  # W @ x on a column vector, plus a column bias
            cur = node("Add", [node("MatMul", [const(w), cur]), const(b[:, None])])
        else:  # MatMul + Add, the bias second ("matmul_add") or first ("add_first")
            cur = node("MatMul", [cur, const(w.T)])
            if bias:
                cur = node("Add", [cur, const(b)] if kind == "matmul_add" else [const(b), cur])
        if k < len(layers) - 1:
            relu = form.get("relu")
            if relu == "max":  # relu as Max(x, 0) (the zero an initialiser)
                cur = node("Max", [cur, const(np.float32(0))])
            elif relu == "clip":  # relu as Clip(x, 0) without a max
                cur = node("Clip", [cur, const(np.float32(0))])
            else:
                cur = node("Relu", [cur])
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)]
    if form.get("listed"):  # initialisers also listed as graph inputs (IR 3 files)
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in inits]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                        {1: [n_out], "col": [n_out, 1]}.get(rank, [batch, n_out]))
    graph = helper.make_graph(nodes, "mlp", inputs, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3 if form.get("listed") else min(model.ir_version, 8)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def real_layers(layers, form):
    """The network as float64 affine maps of the raw input (normalisation folded in, in real
    arithmetic: the truth's network)."""
    out = [(np.asarray(w, np.float64), np.asarray(b, np.float64)) for w, b in layers]
    if form.get("norm"):
        p, q = (float(v) for v in NORM[form["norm"]])
        s, t = (1 / q, -p / q) if form["norm"] == "subdiv" else (p, q)
        w, b = out[0]
        out[0] = (w * s, b + w.sum(axis=1) * t)
    if form.get("nobias"):
        out[-1] = (out[-1][0], np.zeros_like(out[-1][1]))
    return out


FORMS = {
    "gemm_transB1": {},
    "gemm_transB0": {"layer": "gemm_n"},
    "gemm_alpha_beta": {"layer": "gemm_ab"},
    "matmul_add": {"layer": "matmul_add", "rank": 4},
    "add_bias_first": {"layer": "add_first"},
    "no_last_bias_gemm": {"nobias": True},
    "no_last_bias_matmul": {"layer": "matmul_add", "nobias": True},
    "sub_div_norm": {"norm": "subdiv", "rank": 4},
    "mul_add_norm": {"norm": "muladd", "layer": "matmul_add"},
    "reshape": {"flat": "reshape", "identity": True},
    "symbolic_batch": {"batch": "N"},
    "symbolic_batch_matmul": {"batch": "batch_size", "layer": "matmul_add", "rank": 4},
    "constant_nodes_opset9": {"constants": True, "opset": 9, "flat": "flatten"},
    "listed_initialisers_opset9": {"listed": True, "opset": 9},
    "opset17": {"opset": 17, "layer": "gemm_n"},
    "no_batch_axis": {"rank": 1, "layer": "matmul_add"},
    "relu_as_max": {"relu": "max", "layer": "matmul_add"},
    "relu_as_clip": {"relu": "clip"},
    "weights_on_the_left": {"rank": "col", "layer": "left"},
}
# forms that are not relu chains of examples along a batch axis: without a batch axis to
# batch along, a column-vector network gets input branch and bound for few inputs, and one
# bound pass and the attacks for many
NOT_CHAINS = ("weights_on_the_left",)


# ---------------------------------------------------------------- the exact truth
def _least_violation(layers, lo, hi, rows, b):
    """``min over x in [lo, hi] of max_r (rows[r] . f(x) - b[r])`` for the real network,
    by one LP per activation pattern of the neurons interval arithmetic leaves free; None
    when more than ``MAX_FREE`` are free. ``<= 0``: the conjunction is met somewhere."""
    from scipy.optimize import linprog

    fixed = interval_signs(layers[:-1], lo, hi)
    free = [(k, j) for k, f in enumerate(fixed) for j in np.flatnonzero(f < 0)]
    if len(free) > MAX_FREE:
        return None
    n, best = len(lo), np.inf
    for bits in itertools.product((0, 1), repeat=len(free)):
        pattern = [f.copy() for f in fixed]
        for (k, j), s in zip(free, bits, strict=True):
            pattern[k][j] = s
        m, v = np.eye(n), np.zeros(n)
        a_ub, b_ub = [], []
        for (w, bb), p in zip(layers[:-1], pattern, strict=True):
            m, v = w @ m, w @ v + bb
            sgn = (1 - 2 * p)[:, None]
            a_ub.append(np.hstack([sgn * m, np.zeros((len(m), 1))]))
            b_ub.append(-(sgn[:, 0] * v))
            m, v = p[:, None] * m, p * v
        w, bb = layers[-1]
        m, v = w @ m, w @ v + bb
        # rows . (m x + v) - b - t <= 0, minimise t
        a_ub.append(np.hstack([rows @ m, -np.ones((len(rows), 1))]))
        b_ub.append(b - rows @ v)
        cost = np.zeros(n + 1)
        cost[-1] = 1.0
        res = linprog(cost, A_ub=np.concatenate(a_ub), b_ub=np.concatenate(b_ub),
                      bounds=[*zip(lo, hi, strict=True), (None, None)], method="highs")
        if res.status == 0:
            best = min(best, res.fun)
        elif res.status != 2:
            raise AssertionError(f"linprog failed: {res.message}")
    return best


def _box(rng, n_in, layers, radius):
    """A box around a random centre shrunk until few neurons are free (float32 ends)."""
    centre = rng.uniform(-0.5, 0.5, n_in)
    while True:
        lo = (centre - radius).astype(np.float32).astype(np.float64)
        hi = (centre + radius).astype(np.float32).astype(np.float64)
        free = sum(int((f < 0).sum()) for f in interval_signs(layers[:-1], lo, hi))
        if free <= MAX_FREE:
            return lo, hi
        radius *= 0.8


def _spread(layers, lo, hi, rows, rng):
    x = rng.uniform(lo, hi, size=(500, len(lo)))
    for w, b in layers[:-1]:
        x = np.maximum(x @ w.T + b, 0)
    w, b = layers[-1]
    return float(np.ptp((x @ w.T + b) @ rows.T)) + 1e-3


# ---------------------------------------------------------------- VNN-LIB writers
def _num(v, sci):
    return f"{v:.9e}" if sci else repr(float(v))


def _box_text(lo, hi, sci, as_and=False):
    parts = []
    for i, (a, b) in enumerate(zip(lo, hi, strict=True)):
        parts += [f"(>= X_{i} {_num(a, sci)})", f"(<= X_{i} {_num(b, sci)})"]
    if as_and:
        return "(and " + " ".join(parts) + ")"
    return "\n".join(f"(assert {p})" for p in parts)


def _row_text(row, b, style):
    """``row . Y <= b`` for a row ``e_i - e_j`` or ``e_i`` in a style benchmarks use."""
    pos, neg = np.flatnonzero(row > 0), np.flatnonzero(row < 0)
    i = int(pos[0])
    if len(neg):
        j = int(neg[0])
        if b == 0:
            return f"(<= Y_{i} Y_{j})" if style == "le" else f"(>= Y_{j} Y_{i})"
        return f"(<= (- Y_{i} Y_{j}) {_num(b, False)})"
    return f"(<= Y_{i} {_num(b, False)})" if style == "le" else f"(>= {_num(b, False)} Y_{i})"


def _declarations(n_in, n_out, shuffled, rng):
    decl = [f"(declare-const X_{i} Real)" for i in range(n_in)]
    decl += [f"(declare-const Y_{j} Real)" for j in range(n_out)]
    if shuffled:
        decl = [decl[k] for k in rng.permutation(len(decl))]
    return "; generated held-out property\n" + "\n".join(decl) + "\n"


def _case(seed, n_in, form_name, kind, want):
    """(onnx bytes, vnnlib text, truth, regions) for one seeded instance. ``kind``:
    ``one_vs_all`` (MNIST-FC's form; ``want`` decides the radius), ``conj`` (one conjunction
    of two rows with constants, ACAS Xu's form), ``disj`` (two output disjuncts) or ``boxes``
    (a disjunction of two input boxes, each with the same two disjuncts)."""
    rng = np.random.default_rng(1000 + seed)
    form = FORMS[form_name]
    layers = _layers(seed, n_in, [6, 5], 3)
    real = real_layers(layers, form)
    data = write_onnx(layers, form)
    sci, style = bool(seed % 2), ("le", "ge")[seed % 3 == 0]
    text = _declarations(n_in, 3, seed % 2 == 0, rng)
    if kind == "one_vs_all":
        for radius in (0.02, 0.05, 0.1, 0.2, 0.4, 0.8) if want == "sat" else (0.01, 0.003):
            rng_box = np.random.default_rng(seed)
            lo, hi = _box(rng_box, n_in, real, radius)
            c = (lo + hi) / 2
            y = c
            for w, b in real[:-1]:
                y = np.maximum(w @ y + b, 0)
            label = int(np.argmax(real[-1][0] @ y + real[-1][1]))
            conjs = [(np.eye(3)[label] - np.eye(3)[j])[None] for j in range(3) if j != label]
            margins = [_least_violation(real, lo, hi, r, np.zeros(1)) for r in conjs]
            if any(m is None for m in margins):
                continue
            spread = _spread(real, lo, hi, np.concatenate(conjs), rng)
            least = min(margins)
            truth = "sat" if least <= 0 else "unsat"
            if abs(least) > 1e-3 * spread and truth == want:
                break
        else:
            pytest.skip("no radius gives the wanted verdict with a clear margin")
        text += _box_text(lo, hi, sci) + "\n(assert (or "
        text += " ".join("(and " + _row_text(r[0], 0.0, style) + ")" for r in conjs) + "))\n"
        return data, text, truth, [(lo, hi)]
    n_box = 2 if kind == "boxes" else 1
    boxes = [_box(rng, n_in, real, 0.15) for _ in range(n_box)]
    if kind == "conj":
        groups = [np.array([[1.0, -1.0, 0.0], [0.0, 0.0, 1.0]])]
    else:
        groups = [np.array([[1.0, 0.0, -1.0]]), np.array([[0.0, 1.0, 0.0]])]
    base = [np.zeros(len(g)) for g in groups]
    least = min(_least_violation(real, lo, hi, g, b)
                for lo, hi in boxes for g, b in zip(groups, base, strict=True))
    assert least is not None
    spread = max(_spread(real, lo, hi, np.concatenate(groups), rng) for lo, hi in boxes)
    # shifting every threshold by d moves the least violation by -d: truth = want, clearly
    shift = least + (GAP if want == "sat" else -GAP) * spread
    thresholds = [b + shift for b in base]
    truth = want
    rows = [[_row_text(r, float(v), style) for r, v in zip(g, t, strict=True)]
            for g, t in zip(groups, thresholds, strict=True)]
    if kind == "boxes":
        text += "(assert (or " + " ".join(_box_text(lo, hi, sci, True) for lo, hi in boxes)
        text += "))\n"
    else:
        text += _box_text(*boxes[0], sci) + "\n"
    if len(rows) == 1:  # one conjunction, a row per assert (ACAS Xu's form)
        text += "".join(f"(assert {r})\n" for r in rows[0])
    else:
        text += "(assert (or " + " ".join("(and " + " ".join(r) + ")" for r in rows) + "))\n"
    return data, text, truth, boxes


def _check_sat_file(text, data, prop_text, boxes):
    """The result file's assignment: inside a box, and onnxruntime maps it into the unsafe
    set (``Property.violated_by``)."""
    lines = text.splitlines()
    assert lines[0] == "sat"
    body = " ".join(lines[1:]).strip()
    assert body.startswith("((X_0 ") and body.endswith("))")
    values = dict(re.findall(r"\(([XY]_\d+) ([^()\s]+)\)", body))
    prop = vnnlib.parse(prop_text)
    x = np.array([float(values[f"X_{i}"]) for i in range(prop.n_inputs)])
    assert any(np.all(x >= lo) and np.all(x <= hi) for lo, hi in boxes)
    sess = ort.InferenceSession(data)
    shape = [1 if not isinstance(d, int) else d for d in sess.get_inputs()[0].shape]
    y = sess.run(None, {"x": x.astype(np.float32).reshape(shape)})[0].reshape(-1)
    assert prop.violated_by(x, y.astype(np.float64)) is not None
    reported = np.array([float(values[f"Y_{j}"]) for j in range(prop.n_outputs)])
    np.testing.assert_allclose(reported, y, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- the tests
@pytest.mark.parametrize("form_name", sorted(FORMS))
def test_every_form_imports_as_onnxruntime_runs_it_and_is_a_relu_chain(form_name, tmp_path):
    layers = _layers(7, 40, [6, 5], 3)
    data = write_onnx(layers, FORMS[form_name])
    path = tmp_path / "net.onnx"
    path.write_bytes(data)
    net = instance.Network(path)
    assert net.input_shape[0] == 1
    sess = ort.InferenceSession(data)
    shape = [1 if not isinstance(d, int) else d for d in sess.get_inputs()[0].shape]
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.uniform(-1, 1, size=40).astype(np.float32)
        want = sess.run(None, {"x": x.reshape(shape)})[0].reshape(-1)
        np.testing.assert_allclose(net.run(x), want, rtol=1e-5, atol=1e-5)
    if form_name in NOT_CHAINS:
        assert beta.relu_chain(net.model) is None
        return
    # recognised as a relu chain, with the network's real affine maps (normalisation folded)
    chain = beta.relu_chain(net.model)
    assert chain is not None and relu_bab.supports(net.model)
    real = real_layers(layers, FORMS[form_name])
    for (w, b), (w2, b2) in zip(chain.layers, real, strict=True):
        np.testing.assert_allclose(w, w2, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(b, b2, rtol=1e-6, atol=1e-6)
    # the batched copies the attacks and the search use are chains too
    assert net.batched(4) is not None and beta.relu_chain(net.batched(4)) is not None


CASES = [  # (seed, inputs, form, property kind, truth wanted)
    (0, 40, "gemm_transB0", "one_vs_all", "unsat"),
    (15, 40, "matmul_add", "one_vs_all", "sat"),
    (2, 40, "sub_div_norm", "disj", "unsat"),
    (3, 40, "gemm_alpha_beta", "disj", "unsat"),
    (4, 40, "symbolic_batch_matmul", "boxes", "sat"),
    (5, 40, "no_last_bias_matmul", "disj", "sat"),
    (6, 40, "mul_add_norm", "conj", "sat"),
    (7, 5, "matmul_add", "conj", "unsat"),
    (8, 5, "sub_div_norm", "disj", "sat"),
    (9, 5, "symbolic_batch", "boxes", "unsat"),
    (10, 5, "listed_initialisers_opset9", "conj", "sat"),
    (11, 5, "add_bias_first", "one_vs_all", "unsat"),
    (12, 5, "no_batch_axis", "conj", "sat"),
    (13, 40, "no_batch_axis", "disj", "unsat"),
    (14, 40, "relu_as_max", "one_vs_all", "unsat"),
    (16, 5, "relu_as_clip", "disj", "unsat"),
    (17, 5, "weights_on_the_left", "disj", "unsat"),
    (18, 5, "weights_on_the_left", "conj", "sat"),
    (19, 40, "weights_on_the_left", "one_vs_all", "unsat"),
]


@pytest.mark.parametrize(("seed", "n_in", "form_name", "kind", "want"), CASES)
def test_vnn_command_answers_held_out_forms_with_the_truth(seed, n_in, form_name, kind, want,
                                                          tmp_path):
    from torchlean.cli import main

    data, text, truth, boxes = _case(seed, n_in, form_name, kind, want)
    assert truth == want
    net, prop, out, js = (tmp_path / n for n in ("n.onnx", "p.vnnlib", "r.txt", "r.json"))
    net.write_bytes(data)
    prop.write_text(text)
    assert main(["vnn", str(net), str(prop), "--timeout", "60", "--out", str(out),
                 "--json", str(js)]) == 0
    result = json.loads(js.read_text())
    assert result["status"] == truth, result
    if n_in > instance.BAB_MAX_INPUTS:  # the complete method applies: relu splitting
        assert ("relu splitting" in result["method"]) == (form_name not in NOT_CHAINS)
    else:
        assert result["method"] == "bab"
    written = out.read_text()
    if truth == "sat":
        _check_sat_file(written, data, text, boxes)
    else:
        assert written == "unsat\n"


@pytest.mark.parametrize("want", ["unsat", "sat"])
@pytest.mark.parametrize("form_name", ["gemm_transB0", "gemm_alpha_beta", "add_bias_first",
                                       "sub_div_norm", "mul_add_norm", "no_last_bias_matmul"])
def test_relu_splitting_decides_every_form_with_a_weak_root(form_name, want, tmp_path):
    """``relu_bab`` itself (no attacks first; alpha-CROWN without steps at the root, so it
    splits) on each form's graph: the rigorous passes run over its own ops."""
    data, text, truth, boxes = _case(23, 40, form_name, "disj", want)
    path = tmp_path / "n.onnx"
    path.write_bytes(data)
    net = instance.Network(path)
    found = relu_bab.verify_network(net, vnnlib.parse(text), timeout=60, root_steps=0)
    assert found.status == truth, found.reason
    if truth == "unsat":
        assert found.domains > 1  # it split
    else:
        x, _ = found.counterexample
        result = instance.Result("sat", 0.0, "bab", "float32", counterexample=(x, net.run(x)))
        _check_sat_file(result.competition_text(), data, text, boxes)


def test_a_two_row_conjunction_over_many_inputs_is_never_answered_wrongly(tmp_path):
    """Relu splitting bounds each row of a conjunction on its own, so an unsafe conjunction
    whose rows are each reachable but never together (here: on a domain with every neuron
    fixed) stays open: ``unknown``, never a wrong answer. (Input splitting, for few inputs,
    decides such properties: the boxes shrink until one row is refuted.)"""
    data, text, truth, _ = _case(2, 40, "sub_div_norm", "conj", "unsat")
    net, prop = tmp_path / "n.onnx", tmp_path / "p.vnnlib"
    net.write_bytes(data)
    prop.write_text(text)
    result = instance.verify_instance(net, prop, 60)
    assert "relu splitting" in result.method
    assert result.status in (truth, "unknown"), result.message
    if result.status == "unknown":  # and says why (not "round-off")
        assert "conjunction of several rows" in result.message, result.message


@pytest.mark.parametrize("form_name", sorted(FORMS))
def test_input_splitting_uses_the_chain_bounder_on_every_common_form(form_name, tmp_path):
    """For few inputs (ACAS Xu's kind) input branch and bound bounds relu chains with
    ``ChainCrown`` (``Models.chain_crown``; other graphs get the slower backward CROWN, still
    complete). Every form but Gemm with ``alpha``/``beta`` (scalings around the product, which
    its float32 error model does not cover) imports as one; a Gemm without bias imports as a
    ``linear`` with a zero bias (the same float32 values)."""
    from torchlean.bounds import bab

    path = tmp_path / "n.onnx"
    path.write_bytes(write_onnx(_layers(3, 5, [6, 5], 3), FORMS[form_name]))
    net = instance.Network(path)
    models = bab.Models(lambda n: net.model if n == 1 else net.batched(n))
    found = models.chain_crown(True)
    assert (found is None) == (form_name in ("gemm_alpha_beta", *NOT_CHAINS))


def test_crown_multiplies_by_a_computed_reciprocal_without_an_interval_fallback(tmp_path):
    """A Div normalisation imports as ``x * inv(std)``; ``inv(std)`` is computed by the network,
    so its float32 value is only enclosed (an interval, not a point). CROWN multiplies by the
    interval's midpoint with the rest as slack (it used to bound the product by intervals,
    losing its dependence on x): the bounds enclose the network's outputs and are as tight as
    those of the same network with the reciprocal stored."""
    from torchlean.bounds import compute_bounds

    layers = _layers(5, 40, [6, 5], 3)
    nets = []
    for norm in ("subdiv", "submul"):
        path = tmp_path / f"{norm}.onnx"
        path.write_bytes(write_onnx(layers, {"norm": norm}))
        nets.append(instance.Network(path))
    rng = np.random.default_rng(0)
    lo = rng.uniform(-0.5, 0.5, 40).astype(np.float32)
    hi = lo + np.float32(0.05)
    found = [compute_bounds(n.model, lo[None], hi[None], method="crown", kernel=True)
             for n in nets]
    assert found[0].interval_fallbacks == [] and found[1].interval_fallbacks == []
    (low_div, up_div), (low_mul, up_mul) = (
        (np.asarray(b.nodes[n.model.graph.output][0]).reshape(-1),
         np.asarray(b.nodes[n.model.graph.output][1]).reshape(-1)) for b, n in zip(found, nets,
                                                                                   strict=True))
    np.testing.assert_allclose(low_div, low_mul, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(up_div, up_mul, rtol=1e-4, atol=1e-5)
    xs = rng.uniform(lo, hi, size=(300, 40)).astype(np.float32)
    ys = np.array([nets[0].run(x) for x in xs])
    assert np.all(ys >= low_div) and np.all(ys <= up_div)
