"""Soundness audit of ``torchlean vnn`` on new, held-out-style VNN-COMP 2021 instances.

Three subcommands, meant to run in this order (see ``--help`` of each):

``generate``
    Writes new instances "of the same kind" as the public VNN-COMP 2021 ACAS Xu and MNIST-FC
    benchmarks (``../shared/vnncomp2021`` beside the checkout) into ``--out`` (default
    ``/tmp/audit``), with one instances CSV per kind (absolute paths,
    ``onnx,vnnlib,timeout``) and ``meta.json`` (what each property is, and what the public
    answers imply about it):

    * ``acas_sub``: random sub-boxes (1/4 to 1/64 of the volume, sometimes snapped to a face) of
      ``prop_1`` .. ``prop_4`` (and a few of ``prop_5`` .. ``prop_10``) on random networks, in the
      exact layout of the originals. A sub-box of a published ``unsat`` must be ``unsat``.
    * ``acas_cross``: the original ``prop_5`` .. ``prop_10`` paired with networks the CSV does not
      pair them with.
    * ``mnist``: L-inf robustness properties around the 15 images of the public MNIST-FC
      properties (recovered from the boxes' midpoints, snapped to k/255), and around noisy copies
      of them, with new epsilons, written exactly as the competition's generator writes them
      (float32 bounds clipped to [0, 1]; unsafe: some other logit >= the label's). With the
      unperturbed image, a smaller epsilon than a published ``unsat`` must be ``unsat``.
    * ``edge``: valid VNN-LIB variants (one ``(assert (and ...))`` box, ``(or (and box outputs))``
      in the 2022 style, ``(<= Y_1 Y_0)`` vs ``(>= Y_0 Y_1)``, reversed operands, scientific
      notation, linear terms, comments, tabs, CRLF, repeated bounds, point boxes) of published
      instances, whose answer they must keep, and point boxes, whose answer is computed here.

``run``
    Runs ``torchlean vnn MODEL PROP --timeout T --out RESULT`` once per CSV row, one process at a
    time (``--threads 1``), recording the answer file, exit code, stdout/stderr and seconds in
    ``runs.jsonl``.

``check``
    Checks every recorded answer independently of torchlean: the result file's format; every
    ``sat`` counterexample (box membership in exact rational arithmetic of the float64 values
    written, which must also be float32 numbers; the unsafe constraints in exact arithmetic on
    the outputs onnxruntime computes in float32); every ``unsat`` against an attack (uniform,
    vertex and face sampling plus Adam PGD for ACAS Xu; multi-restart targeted signed PGD for
    MNIST-FC; gradients exact from the ONNX weights in numpy, candidates confirmed by
    onnxruntime); and every answer against the published answers and the implications above.
    Prints a summary and writes ``check.json``; a wrong answer is saved under ``wrong/``.

Example::

    python benchmarks/heldout_audit.py generate --seed 0
    python benchmarks/heldout_audit.py run --csv /tmp/audit/acas_sub.csv --timeout 20
    python benchmarks/heldout_audit.py check
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import time
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

# ../shared beside the checkout (as CI lays it out)
SHARED = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                       "shared", "vnncomp2021"))
ACAS = os.path.join(SHARED, "acasxu")
MNIST = os.path.join(SHARED, "mnistfc")
MNIST_NETS = ["mnist-net_256x2.onnx", "mnist-net_256x4.onnx", "mnist-net_256x6.onnx"]
ACAS_NETS = [f"ACASXU_run2a_{a}_{b}_batch_2000.onnx" for a in range(1, 6) for b in range(1, 10)]
STATUSES = ("sat", "unsat", "unknown", "timeout")

# ----------------------------------------------------------------------------------------------
# An independent VNN-LIB reader (s-expressions, and/or/<=/>=, linear terms): regions as
# (lower, upper, [conjunction]) with Fractions; a conjunction is a list of (coef dict, rhs)
# meaning sum(coef[j] * Y_j) <= rhs.
# ----------------------------------------------------------------------------------------------


def _tokens(text: str) -> list[str]:
    text = "\n".join(line.split(";", 1)[0] for line in text.splitlines())
    return re.findall(r"[()]|[^\s()]+", text)


def _sexprs(text: str) -> list[Any]:
    out: list[Any] = []
    stack: list[list[Any]] = []
    for tok in _tokens(text):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            done = stack.pop()
            (stack[-1] if stack else out).append(done)
        else:
            stack[-1].append(tok)
    assert not stack, "unbalanced parentheses"
    return out


def _term(node: Any) -> tuple[dict[str, Fraction], Fraction]:
    if isinstance(node, str):
        if re.fullmatch(r"[XY]_\d+", node):
            return {node: Fraction(1)}, Fraction(0)
        return {}, Fraction(node)
    head, args = node[0], [_term(a) for a in node[1:]]
    if head == "-" and len(args) == 1:
        return {k: -v for k, v in args[0][0].items()}, -args[0][1]
    if head in "+-":
        coef, const = dict(args[0][0]), args[0][1]
        sign = 1 if head == "+" else -1
        for c, k in args[1:]:
            for name, v in c.items():
                coef[name] = coef.get(name, Fraction(0)) + sign * v
            const += sign * k
        return coef, const
    if head == "*":
        factor, lin = Fraction(1), ({}, Fraction(1))
        for c, k in args:
            if c:
                lin = (c, k)
            else:
                factor *= k
        return {n: factor * v for n, v in lin[0].items()}, factor * lin[1]
    raise ValueError(f"term {node!r}")


def _dnf(node: Any) -> list[list[tuple[dict[str, Fraction], Fraction]]]:
    head = node[0]
    if head in ("<=", ">="):
        (ca, ka), (cb, kb) = _term(node[1]), _term(node[2])
        if head == ">=":
            (ca, ka), (cb, kb) = (cb, kb), (ca, ka)
        coef = dict(ca)
        for n, v in cb.items():
            coef[n] = coef.get(n, Fraction(0)) - v
        return [[({n: v for n, v in coef.items() if v}, kb - ka)]]  # coef . v <= rhs
    if head == "and":
        acc: list[list[Any]] = [[]]
        for a in node[1:]:
            acc = [x + y for x in acc for y in _dnf(a)]
        return acc
    if head == "or":
        return [d for a in node[1:] for d in _dnf(a)]
    raise ValueError(f"formula {head!r}")


def read_vnnlib(path: str) -> dict[str, Any]:
    """The property in ``path``: ``n_in``, ``n_out`` and ``regions`` (lo, hi, conjunctions)."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    n_in = n_out = 0
    acc: list[list[Any]] = [[]]
    for form in _sexprs(text):
        if form[0] == "declare-const":
            if form[1].startswith("X_"):
                n_in += 1
            else:
                n_out += 1
        elif form[0] == "assert":
            acc = [x + y for x in acc for y in _dnf(form[1])]
    regions: list[Any] = []
    for conj in acc:
        lo: list[Fraction | None] = [None] * n_in
        hi: list[Fraction | None] = [None] * n_in
        outs: list[tuple[np.ndarray, Fraction, dict[int, Fraction]]] = []
        feasible = True
        for coef, rhs in conj:
            names = list(coef)
            if not names:
                feasible &= Fraction(0) <= rhs
            elif all(n.startswith("X_") for n in names):
                assert len(names) == 1
                i, a = int(names[0][2:]), coef[names[0]]
                v = rhs / a
                if a > 0:
                    hi[i] = v if hi[i] is None else min(hi[i], v)
                else:
                    lo[i] = v if lo[i] is None else max(lo[i], v)
            else:
                terms = {int(n[2:]): a for n, a in coef.items()}
                outs.append((terms, rhs))
        if not feasible or any(a > b for a, b in zip(lo, hi, strict=True)):
            continue
        for r in regions:
            if r[0] == lo and r[1] == hi:
                r[2].append(outs)
                break
        else:
            regions.append([lo, hi, [outs]])
    return {"n_in": n_in, "n_out": n_out, "regions": regions}


def violated(prop: dict[str, Any], x: Any, y: Any) -> bool:
    """Exactly (rationals of the float values): does (x, y) lie in the unsafe set?"""
    xf = [Fraction(float(v)) for v in x]
    yf = [Fraction(float(v)) for v in y]
    for lo, hi, conjs in prop["regions"]:
        if not all(a <= v <= b for v, a, b in zip(xf, lo, hi, strict=True)):
            continue
        for conj in conjs:
            if all(sum(a * yf[j] for j, a in terms.items()) <= rhs for terms, rhs in conj):
                return True
    return False


def margin(conjs: list[Any], y: np.ndarray) -> np.ndarray:
    """Per row of ``y`` (batch, n_out): min over conjunctions of max over rows of a.y - b
    (<= 0: unsafe), in float64."""
    best = np.full(y.shape[0], np.inf)
    for conj in conjs:
        worst = np.full(y.shape[0], -np.inf)
        for terms, rhs in conj:
            val = sum(float(a) * y[:, j] for j, a in terms.items()) - float(rhs)
            worst = np.maximum(worst, val)
        best = np.minimum(best, worst)
    return best


# ----------------------------------------------------------------------------------------------
# Networks: onnxruntime (float32, the reference) and a numpy copy with exact gradients.
# ----------------------------------------------------------------------------------------------


class Net:
    """An ONNX MLP (Sub/Div/Flatten/MatMul/Gemm/Add/Relu chain) as numpy layers, plus an
    onnxruntime session for the float32 reference output."""

    def __init__(self, path: str) -> None:
        import onnx
        import onnxruntime as ort
        from onnx import numpy_helper

        model = onnx.load(path)
        init = {t.name: numpy_helper.to_array(t).astype(np.float64)
                for t in model.graph.initializer}
        names = {i.name for i in model.graph.initializer}
        data = [i for i in model.graph.input if i.name not in names][0]
        self.in_name = data.name
        self.in_shape = [d.dim_value or 1 for d in data.type.tensor_type.shape.dim]
        # affine maps x -> x @ w + b, with a relu after each but the last
        self.layers: list[tuple[np.ndarray, np.ndarray]] = []
        self.pre: list[tuple[str, np.ndarray]] = []  # elementwise sub/div before the first map
        w = None
        for node in model.graph.node:
            op = node.op_type
            const = [init[n] for n in node.input if n in init]
            if op in ("Sub", "Div") and not self.layers and w is None:
                self.pre.append((op, const[0].reshape(-1)))
            elif op == "Flatten":
                continue
            elif op == "MatMul":
                w = const[0]
            elif op == "Add" and w is not None:
                self.layers.append((w, const[0].reshape(-1)))
                w = None
            elif op == "Gemm":
                attrs = {a.name: a for a in node.attribute}
                wt = const[0]
                if "transB" in attrs and attrs["transB"].i:
                    wt = wt.T
                alpha = attrs["alpha"].f if "alpha" in attrs else 1.0
                beta = attrs["beta"].f if "beta" in attrs else 1.0
                self.layers.append((alpha * wt, beta * const[1].reshape(-1)))
            elif op == "Relu":
                continue
            else:
                raise ValueError(f"{path}: unsupported op {op}")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])

    def ort(self, x: np.ndarray) -> np.ndarray:
        """onnxruntime's float32 output for each row of ``x`` (one call per row)."""
        xs = np.asarray(x, dtype=np.float32).reshape(-1, int(np.prod(self.in_shape)))
        return np.stack([self.sess.run(None, {self.in_name: r.reshape(self.in_shape)})[0]
                         .reshape(-1) for r in xs]).astype(np.float64)

    def forward(self, x: np.ndarray, dtype: Any = np.float64) -> tuple[np.ndarray, list[Any]]:
        h = np.asarray(x, dtype=dtype)
        for op, c in self.pre:
            h = h - c.astype(dtype) if op == "Sub" else h / c.astype(dtype)
        acts = []
        for k, (w, b) in enumerate(self.layers):
            h = h @ w.astype(dtype) + b.astype(dtype)
            if k < len(self.layers) - 1:
                acts.append(h > 0)
                h = np.maximum(h, 0)
        return h, acts

    def grad(self, x: np.ndarray, gy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The output and d(sum(gy * y))/dx, for a batch."""
        y, acts = self.forward(x)
        g = gy
        for k in range(len(self.layers) - 1, -1, -1):
            g = g @ self.layers[k][0].T
            if k > 0:
                g = g * acts[k - 1]
        for op, c in reversed(self.pre):
            if op == "Div":
                g = g / c
        return y, g


# ----------------------------------------------------------------------------------------------
# generate
# ----------------------------------------------------------------------------------------------

HEADER_X = "".join(f"(declare-const X_{i} Real)\n" for i in range(5))
HEADER_Y = "".join(f"(declare-const Y_{i} Real)\n" for i in range(5))


def _output_text(text: str) -> str:
    """The verbatim text of the top-level asserts that mention no input (the output spec),
    with the comment lines just before them."""
    lines = text.splitlines(keepends=True)
    keep, depth, block, comments = [], 0, [], []
    for line in lines:
        code = line.split(";", 1)[0]
        if depth == 0 and not code.strip():
            if line.strip().startswith(";"):
                comments.append(line)
            elif not line.strip():
                comments = []
            continue
        block.append(line)
        depth += code.count("(") - code.count(")")
        if depth == 0:
            body = "".join(block)
            if "assert" in body and "X_" not in "".join(b.split(";", 1)[0] for b in block):
                keep.extend(comments + block)
            block, comments = [], []
    return "".join(keep)


def _fmt(v: Fraction | float) -> str:
    return f"{float(v):.9f}".rstrip("0").rstrip(".") if float(v) != 0 else "0.0"


def _acas_box_text(lo: list[Any], hi: list[Any]) -> str:
    return "".join(f"(assert (<= X_{i} {_fmt(hi[i])}))\n(assert (>= X_{i} {_fmt(lo[i])}))\n"
                   for i in range(len(lo)))


def _published() -> dict[tuple[str, str], str]:
    """(onnx, vnnlib) -> 'sat' / 'unsat' where a published tool decided it."""
    out: dict[tuple[str, str], str] = {}
    with open(os.path.join(SHARED, "PUBLISHED.csv"), newline="") as handle:
        for row in csv.DictReader(handle):
            ans = {"holds": "unsat", "violated": "sat"}
            got = {row["abcrown_result"], ans.get(row["nnenum_result"], "")} & {"sat", "unsat"}
            if len(got) == 1:
                out[(row["onnx"], row["vnnlib"])] = got.pop()
    return out


def _sub_box(rng: np.random.Generator, lo: list[Fraction], hi: list[Fraction]
             ) -> tuple[list[float], list[float], float]:
    n = len(lo)
    vol = 2.0 ** -rng.uniform(2, 6)  # 1/4 .. 1/64 of the volume
    shares = rng.dirichlet(np.ones(n))
    frac = vol ** shares
    snap = rng.uniform() < 0.35
    new_lo, new_hi = [], []
    for i in range(n):
        a, b = float(lo[i]), float(hi[i])
        w = (b - a) * frac[i]
        if snap and rng.uniform() < 0.5:
            start = a if rng.uniform() < 0.5 else b - w
        else:
            start = a + rng.uniform() * (b - a - w)
        s, e = round(start, 9), round(start + w, 9)
        s, e = max(s, a), min(e, b)  # stay inside the original box
        if s > e:
            s = e
        new_lo.append(s)
        new_hi.append(e)
    return new_lo, new_hi, vol


def _mnist_images() -> list[tuple[int, int, np.ndarray]]:
    """(index, label, pixels as float32 k/255) of the public properties' images."""
    out = []
    for k in range(15):
        path = os.path.join(MNIST, f"prop_{k}_0.03.vnnlib")
        with open(path) as handle:
            label = int(re.search(r"label: (\d+)", handle.readline()).group(1))
        prop = read_vnnlib(path)
        lo, hi, _ = prop["regions"][0]
        lo, hi = np.array([float(v) for v in lo]), np.array([float(v) for v in hi])
        eps = 0.03
        c = np.where(lo <= 0, hi - eps, np.where(hi >= 1, lo + eps, (lo + hi) / 2))
        pix = np.clip(np.round(c * 255), 0, 255)
        img = (pix / 255).astype(np.float32)
        # check: the competition's boxes come back from the image exactly
        e32 = np.float32(eps)
        assert np.array_equal(np.clip(img - e32, 0, 1).astype(np.float64), lo), k
        assert np.array_equal(np.clip(img + e32, 0, 1).astype(np.float64), hi), k
        out.append((k, label, img))
    return out


def _mnist_text(img: np.ndarray, eps: float, label: int) -> str:
    e32 = np.float32(eps)
    lo = np.clip(img - e32, 0, 1).astype(np.float32)
    hi = np.clip(img + e32, 0, 1).astype(np.float32)
    parts = [f"; Mnist property with label: {label}.\n", "\n"]
    parts += [f"(declare-const X_{i} Real)\n" for i in range(784)]
    parts += ["\n", "\n"] + [f"(declare-const Y_{i} Real)\n" for i in range(10)] + ["\n"]
    parts.append("; Input constraints:\n")
    for i in range(784):
        parts.append(f"(assert (<= X_{i} {float(hi[i])!r}))\n(assert (>= X_{i} "
                     f"{float(lo[i])!r}))\n\n")
    parts += ["\n", "; Output constraints:\n", "(assert (or\n"]
    parts += [f"    (and (>= Y_{i} Y_{label}))\n" for i in range(10) if i != label]
    parts.append("))")
    return "".join(parts)


def generate(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    out = args.out
    os.makedirs(os.path.join(out, "props"), exist_ok=True)
    pub = _published()
    meta: dict[str, Any] = {}
    kinds = ("acas_sub", "acas_cross", "mnist", "edge", "ulp")
    rows: dict[str, list[tuple[str, str, int]]] = {k: [] for k in kinds}

    def add(kind: str, net: str, prop: str, timeout: int, **info: Any) -> None:
        rows[kind].append((net, prop, timeout))
        meta[f"{os.path.basename(net)}|{prop}"] = {"kind": kind, **info}

    acas_props = {p: read_vnnlib(os.path.join(ACAS, f"prop_{p}.vnnlib")) for p in range(1, 11)}
    acas_text = {p: open(os.path.join(ACAS, f"prop_{p}.vnnlib")).read() for p in range(1, 11)}
    paired = {(r[0], r[1]) for r in csv.reader(open(os.path.join(ACAS, "acasxu_instances.csv")))}

    # ACAS Xu sub-boxes
    for n in range(args.acas_sub):
        p = int(rng.choice([1, 2, 3, 4])) if n < args.acas_sub * 0.8 else int(
            rng.choice([5, 7, 8, 9, 10]))
        net = ACAS_NETS[int(rng.integers(45))]
        lo, hi, _ = acas_props[p]["regions"][0]
        slo, shi, vol = _sub_box(rng, lo, hi)
        name = f"acas_sub_{n:03d}_p{p}.vnnlib"
        text = (f"; ACAS Xu property {p}, a random sub-box (volume {vol:.4f})\n" + HEADER_X
                + HEADER_Y + _acas_box_text(slo, shi) + _output_text(acas_text[p]))
        path = os.path.join(out, "props", name)
        open(path, "w").write(text)
        parent = pub.get((net, f"prop_{p}.vnnlib")) if p <= 4 else None
        add("acas_sub", os.path.join(ACAS, net), path, args.acas_timeout, parent=f"prop_{p}",
            must=("unsat" if parent == "unsat" else None))
    # ACAS Xu: original properties 5-10 on networks they are not paired with
    pairs = [(net, p) for p in range(5, 11) for net in ACAS_NETS
             if (net, f"prop_{p}.vnnlib") not in paired]
    for k in rng.choice(len(pairs), size=min(args.acas_cross, len(pairs)), replace=False):
        net, p = pairs[int(k)]
        add("acas_cross", os.path.join(ACAS, net), os.path.join(ACAS, f"prop_{p}.vnnlib"),
            args.acas_timeout, parent=f"prop_{p}")

    # MNIST-FC
    images = _mnist_images()
    epsilons = [float(e) for e in args.eps.split(",")]
    for n in range(args.mnist):
        k, label, img = images[int(rng.integers(len(images)))]
        eps = epsilons[n % len(epsilons)]
        net = MNIST_NETS[int(rng.integers(3))]
        noisy = rng.uniform() < 0.5
        centre = img
        sigma = 0.0
        if noisy:
            sigma = float(rng.choice([0.005, 0.01, 0.02]))
            centre = np.clip(img + rng.normal(0, sigma, img.shape), 0, 1).astype(np.float32)
        name = f"mnist_{n:03d}_img{k}_{eps}{'_noisy' if noisy else ''}.vnnlib"
        path = os.path.join(out, "props", name)
        open(path, "w").write(_mnist_text(centre, eps, label))
        must = None
        if not noisy:
            p03 = pub.get((net, f"prop_{k}_0.03.vnnlib"))
            p05 = pub.get((net, f"prop_{k}_0.05.vnnlib"))
            if eps <= 0.03 and p03 == "unsat" or eps <= 0.05 and p05 == "unsat":
                must = "unsat"
            if eps >= 0.05 and p05 == "sat" or eps >= 0.03 and p03 == "sat":
                must = "sat"
        add("mnist", os.path.join(MNIST, net), path, args.mnist_timeout, image=k, label=label,
            eps=eps, sigma=sigma, must=must)

    _edge(rng, out, pub, acas_props, acas_text, images, add, args)
    _ulp(rng, out, images, add, args)

    for kind, items in rows.items():
        with open(os.path.join(out, f"{kind}.csv"), "w") as handle:
            for net, prop, timeout in items:
                handle.write(f"{net},{prop},{timeout}\n")
        print(f"{kind}: {len(items)} instances -> {os.path.join(out, kind + '.csv')}")
    json.dump(meta, open(os.path.join(out, "meta.json"), "w"), indent=1)


def _edge(rng: np.random.Generator, out: str, pub: dict[tuple[str, str], str],
          acas_props: dict[int, Any], acas_text: dict[int, str], images: list[Any],
          add: Any, args: argparse.Namespace) -> None:
    """Format variants of published instances (same answer expected) and point boxes."""
    t = args.acas_timeout

    def write(name: str, text: str, newline: str = "\n") -> str:
        path = os.path.join(out, "props", name)
        with open(path, "w", newline=newline) as handle:
            handle.write(text)
        return path

    def box_and(p: int, reverse: bool = False, sci: bool = False) -> str:
        lo, hi, _ = acas_props[p]["regions"][0]
        parts = []
        for i in range(5):
            a, b = (f"{float(lo[i]):.9e}", f"{float(hi[i]):.9e}") if sci else (
                _fmt(lo[i]), _fmt(hi[i]))
            if reverse:
                parts.append(f"(>= {b} X_{i})\t(<= {a} X_{i})")
            else:
                parts.append(f"(>= X_{i} {a}) (<= X_{i} {b})")
        return "(assert (and " + "\n   ".join(parts) + "))\n"

    # outputs of prop_3/4 (unsafe: Y_0 is minimal) and prop_2 (Y_0 is maximal), rewritten
    def coc_min(style: str) -> str:
        if style == "le":
            return "(assert (and (<= Y_0 Y_1) (<= Y_0 Y_2) (<= Y_0 Y_3) (<= Y_0 Y_4)))\n"
        if style == "ge":
            return "(assert (or (and (>= Y_1 Y_0) (>= Y_2 Y_0) (>= Y_3 Y_0) (>= Y_4 Y_0))))\n"
        return ("(assert (<= (- Y_0 Y_1) 0))\n(assert (>= (+ Y_2 (* -1 Y_0)) 0.0))\n"
                "(assert (<= (* 2 Y_0) (* 2.0 Y_3)))\n(assert (>= 0 (- Y_0 Y_4)))\n")

    def coc_max(style: str) -> str:
        if style == "le":
            return "(assert (and (<= Y_1 Y_0) (<= Y_2 Y_0) (<= Y_3 Y_0) (<= Y_4 Y_0)))\n"
        return "(assert (or (and (>= Y_0 Y_1) (>= Y_0 Y_2) (>= Y_0 Y_3) (>= Y_0 Y_4))))\n"

    edge_nets = [n for n in ACAS_NETS if pub.get((n, "prop_3.vnnlib")) == "sat"][:2]
    edge_nets += [ACAS_NETS[int(k)] for k in rng.choice(45, 4, replace=False)]
    head = "; edge-format variant\n\n" + HEADER_X + "\n" + HEADER_Y + "\n"
    variants = [
        ("p3_and_le", 3, lambda: head + box_and(3) + coc_min("le")),
        ("p3_rev_ge", 3, lambda: head + box_and(3, reverse=True) + "; outputs\n" + coc_min("ge")),
        ("p4_sci_lin", 4, lambda: head + box_and(4, sci=True) + coc_min("lin")),
        ("p2_le", 2, lambda: head + _acas_box_text(*acas_props[2]["regions"][0][:2])
         + coc_max("le")),
        ("p2_ge_sci", 2, lambda: head + box_and(2, sci=True) + coc_max("ge")),
    ]
    for n, net in enumerate(edge_nets):
        tag, p, make = variants[n % len(variants)]
        path = write(f"edge_{n}_{tag}.vnnlib", make())
        add("edge", os.path.join(ACAS, net), path, t, parent=f"prop_{p}",
            must=pub.get((net, f"prop_{p}.vnnlib")))
    # 2022 style: box and outputs in one (or (and ...)) with CRLF and tabs, prop_2 on a sat net
    for net in ("ACASXU_run2a_1_2_batch_2000.onnx", "ACASXU_run2a_1_1_batch_2000.onnx"):
        lo, hi, _ = acas_props[2]["regions"][0]
        box = " ".join(f"(>= X_{i} {_fmt(lo[i])}) (<= X_{i} {_fmt(hi[i])})" for i in range(5))
        text = (head.replace("\n", "  ; trailing comment\n", 1) + "(assert (or\n\t(and " + box
                + "\n\t     (>= Y_0 Y_1) (>= Y_0 Y_2) (>= Y_0 Y_3) (>= Y_0 Y_4))\n))\n")
        path = write(f"edge_or_and_crlf_{net[13:16]}.vnnlib", text, newline="\r\n")
        add("edge", os.path.join(ACAS, net), path, t, parent="prop_2",
            must=pub.get((net, "prop_2.vnnlib")))
    # prop_6's two boxes, the outputs written as >= inside one (or (and box out) (and box out))
    lo6 = [r[0] for r in acas_props[6]["regions"]]
    hi6 = [r[1] for r in acas_props[6]["regions"]]
    dis = []
    for lo, hi in zip(lo6, hi6, strict=True):
        box = " ".join(f"(<= X_{i} {_fmt(hi[i])}) (>= X_{i} {_fmt(lo[i])})" for i in range(5))
        for j in range(1, 5):
            dis.append(f"  (and {box} (>= Y_0 Y_{j}))")
    path = write("edge_p6_flat_or.vnnlib", head + "(assert (or\n" + "\n".join(dis) + "\n))\n")
    add("edge", os.path.join(ACAS, "ACASXU_run2a_1_1_batch_2000.onnx"), path, t,
        parent="prop_6", must=pub.get(("ACASXU_run2a_1_1_batch_2000.onnx", "prop_6.vnnlib")))
    # repeated (looser and tighter) bounds: the tightest must count; prop_1 on a random net
    lo, hi, _ = acas_props[1]["regions"][0]
    loose = "".join(f"(assert (<= X_{i} {_fmt(hi[i] + 1)}))\n(assert (>= X_{i} "
                    f"{_fmt(lo[i] - 1)}))\n" for i in range(5))
    net = ACAS_NETS[int(rng.integers(45))]
    path = write("edge_p1_repeated.vnnlib", head + loose + _acas_box_text(lo, hi) + loose
                 + "\n\n(assert (<= 3.991125645861615 Y_0))   ; reversed operands\n")
    add("edge", os.path.join(ACAS, net), path, t, parent="prop_1",
        must=pub.get((net, "prop_1.vnnlib")))
    # point boxes (lower == upper): float32 numbers inside prop_3's box, and decimals that are
    # not float32 numbers; the answer (sat/unsat) is computed by onnxruntime in check
    for n in range(args.points):
        p = [1, 2, 3, 4][n % 4]
        lo, hi, _ = acas_props[p]["regions"][0]
        pt = [float(np.float32(float(a) + rng.uniform() * float(b - a))) for a, b in
              zip(lo, hi, strict=True)]
        if n % 3 == 2:  # a decimal with 6 digits: generally not a float32 number
            pt = [round(v, 6) for v in pt]
        net = ACAS_NETS[int(rng.integers(45))]
        text = head + "".join(f"(assert (<= X_{i} {pt[i]!r}))\n(assert (>= X_{i} {pt[i]!r}))\n"
                              for i in range(5)) + _output_text(acas_text[p])
        path = write(f"edge_point_{n}_p{p}.vnnlib", text)
        add("edge", os.path.join(ACAS, net), path, t, parent=f"point in prop_{p}",
            point=pt, f32=all(float(np.float32(v)) == v for v in pt))
        # the same point written with the exact decimal expansion of each float32 value
        exact = [str(Decimal(float(np.float32(v)))) for v in pt]
        text = head + "".join(f"(assert (<= X_{i} {exact[i]}))\n(assert (>= X_{i} {exact[i]}))\n"
                              for i in range(5)) + _output_text(acas_text[p])
        path = write(f"edge_pointx_{n}_p{p}.vnnlib", text)
        add("edge", os.path.join(ACAS, net), path, t, parent=f"exact point in prop_{p}",
            point=pt, f32=True)
    # MNIST-FC: a published instance with its outputs as (<= Y_label Y_i) and the box in one
    # (assert (and ...)) per pixel line; and the unperturbed image as a point box
    for k, net in ((0, "mnist-net_256x2.onnx"), (1, "mnist-net_256x4.onnx")):
        k, label, img = images[k]
        text = _mnist_text(img, 0.03, label)
        text = re.sub(r"\(assert \(<= (X_\d+) (\S+)\)\)\n\(assert \(>= X_\d+ (\S+)\)\)",
                      r"(assert (and (>= \1 \3) (<= \1 \2)))", text)
        text = re.sub(r"\(and \(>= Y_(\d+) Y_(\d+)\)\)", r"(and (<= Y_\2 Y_\1))", text)
        path = write(f"edge_mnist_{k}_0.03_le.vnnlib", text)
        add("edge", os.path.join(MNIST, net), path, args.mnist_timeout, image=k,
            parent=f"prop_{k}_0.03", must=pub.get((net, f"prop_{k}_0.03.vnnlib")))
        path = write(f"edge_mnist_{k}_point.vnnlib", _mnist_text(img, 0.0, label))
        add("edge", os.path.join(MNIST, net), path, args.mnist_timeout, image=k,
            parent="point", point="image")
        text = _mnist_text(img, 0.0, label)
        text = re.sub(r"(X_\d+) ([0-9.e-]+)\)", lambda m: f"{m.group(1)} "
                      f"{Decimal(float(np.float32(float(m.group(2)))))})", text)
        path = write(f"edge_mnist_{k}_pointx.vnnlib", text)
        add("edge", os.path.join(MNIST, net), path, args.mnist_timeout, image=k,
            parent="exact point", point="image")


def _ulp(rng: np.random.Generator, out: str, images: list[Any], add: Any,
         args: argparse.Namespace) -> None:
    """Point boxes (exact float32 decimals) whose output threshold sits at, or one float32 step
    beyond, the output onnxruntime computes there: the answer is onnxruntime's, and any
    difference between the verifier's float32 arithmetic and onnxruntime's shows."""
    for n in range(args.ulp):
        net = ACAS_NETS[int(rng.integers(45))]
        x = rng.uniform(-0.5, 0.5, 5).astype(np.float32)
        y = Net(os.path.join(ACAS, net)).ort(x)[0].astype(np.float32)
        j = int(rng.integers(5))
        box = "".join(f"(assert (<= X_{i} {Decimal(float(v))}))\n(assert (>= X_{i} "
                      f"{Decimal(float(v))}))\n" for i, v in enumerate(x))
        variants = {"ge_eq": (">=", y[j]), "le_eq": ("<=", y[j]),
                    "ge_up": (">=", np.nextafter(y[j], np.float32(np.inf))),
                    "le_down": ("<=", np.nextafter(y[j], np.float32(-np.inf)))}
        for tag, (op, t) in variants.items():
            text = ("; ulp test\n" + HEADER_X + HEADER_Y + box
                    + f"(assert ({op} Y_{j} {Decimal(float(t))}))\n")
            path = os.path.join(out, "props", f"ulp_{n:02d}_{tag}.vnnlib")
            open(path, "w").write(text)
            add("ulp", os.path.join(ACAS, net), path, args.acas_timeout, point=x.tolist())
    for n, net in enumerate(MNIST_NETS * 2):
        k, label, img = images[int(rng.integers(len(images)))]
        centre = np.clip(img + rng.normal(0, 0.02, img.shape), 0, 1).astype(np.float32)
        y = Net(os.path.join(MNIST, net)).ort(centre)[0].astype(np.float32)
        j = int(np.argsort(y)[-2])  # the runner-up: Y_j - Y_label >= d
        d = Fraction(float(y[j])) - Fraction(float(y[label]))
        text = _mnist_text(centre, 0.0, label)
        text = re.sub(r"(X_\d+) ([0-9.e-]+)\)", lambda m: f"{m.group(1)} "
                      f"{Decimal(float(np.float32(float(m.group(2)))))})", text)
        text = text[:text.index("; Output constraints:")]
        for tag, dd in (("eq", d), ("up", d + Fraction(1, 2**40))):
            dec = Decimal(float(dd))  # exact: a dyadic rational of few bits
            assert Fraction(dec) == dd
            path = os.path.join(out, "props", f"ulp_mnist_{n}_{tag}.vnnlib")
            open(path, "w").write(text + f"(assert (>= (- Y_{j} Y_{label}) {dec}))\n")
            add("ulp", os.path.join(MNIST, net), path, args.mnist_timeout, point="image")


# ----------------------------------------------------------------------------------------------
# run
# ----------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    os.makedirs(os.path.join(args.out, "results"), exist_ok=True)
    log = os.path.join(args.out, "runs.jsonl")
    done = set()
    if os.path.exists(log):
        for line in open(log):
            r = json.loads(line)
            done.add((r["onnx"], r["vnnlib"], r["seed"]))
    rows = list(csv.reader(open(args.csv)))
    if args.limit:
        rows = rows[:args.limit]
    start = time.monotonic()
    for net, prop, timeout in rows:
        limit = args.timeout or float(timeout)
        if (net, prop, args.seed) in done:
            continue
        if args.budget and time.monotonic() - start > args.budget:
            print("budget spent; stopping", flush=True)
            break
        tag = f"{os.path.basename(net)[:-5]}__{os.path.basename(prop)[:-7]}__s{args.seed}"
        result = os.path.join(args.out, "results", tag + ".txt")
        cmd = ["torchlean", "vnn", net, prop, "--timeout", f"{limit:g}", "--out", result,
               "--seed", str(args.seed), "--threads", "1"]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit * 2 + 60)
            rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, stdout, stderr = -9, str(exc.stdout), "HARD TIMEOUT (killed)"
        wall = time.monotonic() - t0
        rec = {"onnx": net, "vnnlib": prop, "seed": args.seed, "timeout": limit, "rc": rc,
               "wall": round(wall, 2), "result": result, "cmd": " ".join(cmd),
               "stdout": stdout[-2000:], "stderr": stderr[-4000:]}
        with open(log, "a") as handle:
            handle.write(json.dumps(rec) + "\n")
        first = stdout.splitlines()[0] if stdout else f"(no stdout; rc {rc})"
        print(f"{wall:6.1f}s rc={rc} {first:8s} {os.path.basename(net)} "
              f"{os.path.basename(prop)}", flush=True)


# ----------------------------------------------------------------------------------------------
# check
# ----------------------------------------------------------------------------------------------


def parse_result(path: str) -> tuple[str | None, dict[str, float], list[str]]:
    """The status, the assignment and format problems of a competition result file."""
    problems: list[str] = []
    if not os.path.exists(path):
        return None, {}, ["no result file"]
    text = open(path).read()
    lines = text.splitlines()
    status = lines[0].strip() if lines else None
    if status not in STATUSES:
        problems.append(f"first line {status!r}")
    values: dict[str, float] = {}
    if status == "sat":
        body = "\n".join(lines[1:]).strip()
        if not (body.startswith("(") and body.endswith(")")):
            problems.append("sat without a ( ... ) assignment")
        for name, v in re.findall(r"\((\s*[XY]_\d+)\s+([^\s()]+)\s*\)", body):
            values[name.strip()] = float(v)
    elif len([ln for ln in lines if ln.strip()]) > 1:
        problems.append("extra lines after a non-sat status")
    return status, values, problems


def attack(net: Net, prop: dict[str, Any], rng: np.random.Generator, seconds: float
           ) -> tuple[float, np.ndarray | None]:
    """Search every region for an unsafe input; (best float64 margin, a confirmed input)."""
    best_m, best_x = np.inf, None
    t_end = time.monotonic() + seconds
    per_region = seconds / max(1, len(prop["regions"]))
    for lo, hi, conjs in prop["regions"]:
        lo32 = np.array([float(v) for v in lo], dtype=np.float64)
        hi32 = np.array([float(v) for v in hi], dtype=np.float64)
        # inward float32 rounding (only float32 inputs reach the float32 network)
        lo32 = np.where(lo32.astype(np.float32) < lo32,
                        np.nextafter(lo32.astype(np.float32), np.float32(np.inf)),
                        lo32.astype(np.float32)).astype(np.float64)
        hi32 = np.where(hi32.astype(np.float32) > hi32,
                        np.nextafter(hi32.astype(np.float32), np.float32(-np.inf)),
                        hi32.astype(np.float32)).astype(np.float64)
        if np.any(lo32 > hi32):
            continue
        n = len(lo32)
        stop = min(t_end, time.monotonic() + per_region)
        m, x = (_attack_low if n <= 32 else _attack_high)(net, lo32, hi32, conjs, rng, stop)
        if m < best_m:
            best_m, best_x = m, x
    if best_x is None:
        return best_m, None
    return best_m, best_x


def _confirm(net: Net, prop_conjs: list[Any], lo: np.ndarray, hi: np.ndarray, xs: np.ndarray,
             ) -> tuple[float, np.ndarray]:
    xs = np.clip(xs, lo, hi).astype(np.float32)
    xs = np.minimum(np.maximum(xs, lo.astype(np.float32)), hi.astype(np.float32))
    y = net.ort(xs)
    m = margin(prop_conjs, y)
    k = int(np.argmin(m))
    return float(m[k]), xs[k].astype(np.float64)


def _loss_grad(net: Net, x: np.ndarray, conjs: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per row: min over conjunctions of a smooth max (sum of hinge + max) and its gradient."""
    y, _ = net.forward(x)
    n_out = y.shape[1]
    vals, grads = [], []
    for conj in conjs:
        a = np.zeros((len(conj), n_out))
        b = np.zeros(len(conj))
        for r, (terms, rhs) in enumerate(conj):
            for j, c in terms.items():
                a[r, j] = float(c)
            b[r] = float(rhs)
        g = y @ a.T - b  # rows: a.y - b, want all <= 0
        worst = g.max(axis=1)
        # d(max + 0.5 * sum relu)/dy
        w = (g == worst[:, None]).astype(float) + 0.5 * (g > 0)
        vals.append(worst + 0.5 * np.maximum(g, 0).sum(axis=1))
        grads.append(w @ a)
    vals_a = np.stack(vals)
    pick = np.argmin(vals_a, axis=0)
    gy = np.stack(grads)[pick, np.arange(x.shape[0])]
    _, gx = net.grad(x, gy)
    return vals_a[pick, np.arange(x.shape[0])], gx


def _attack_low(net: Net, lo: np.ndarray, hi: np.ndarray, conjs: list[Any],
                rng: np.random.Generator, stop: float) -> tuple[float, np.ndarray]:
    n = len(lo)
    width = hi - lo
    # vertices, uniform samples, points on faces
    verts = np.array(np.meshgrid(*[[0, 1]] * n)).reshape(n, -1).T if n <= 12 else rng.integers(
        0, 2, (4096, n))
    pts = [lo + verts * width, lo + rng.uniform(size=(60000, n)) * width]
    face = lo + rng.uniform(size=(40000, n)) * width
    snap = rng.uniform(size=face.shape) < 0.4
    face = np.where(snap, np.where(rng.uniform(size=face.shape) < 0.5, lo, hi), face)
    pts.append(face)
    x = np.concatenate(pts)
    m = margin(conjs, net.forward(x.astype(np.float32), np.float32)[0].astype(np.float64))
    order = np.argsort(m)
    best = [(float(m[order[0]]), x[order[0]])]
    # Adam PGD from the best 128 samples and 128 random points, restarted until time is up
    starts = np.concatenate([x[order[:128]], lo + rng.uniform(size=(128, n)) * width])
    rounds = 0
    while time.monotonic() < stop or rounds == 0:
        rounds += 1
        z = starts.copy()
        mom, vel = np.zeros_like(z), np.zeros_like(z)
        lr = 0.05 * width
        for step in range(1, 151):
            val, g = _loss_grad(net, z, conjs)
            mom = 0.9 * mom + 0.1 * g
            vel = 0.999 * vel + 0.001 * g * g
            upd = (mom / (1 - 0.9**step)) / (np.sqrt(vel / (1 - 0.999**step)) + 1e-12)
            z = np.clip(z - lr * upd * (0.98 ** step), lo, hi)
        m = margin(conjs, net.forward(z.astype(np.float32), np.float32)[0].astype(np.float64))
        k = int(np.argmin(m))
        best.append((float(m[k]), z[k]))
        starts = lo + rng.uniform(size=(256, n)) * width
        starts[:32] = np.clip(z[np.argsort(m)[:32]] + rng.normal(0, 0.02, (32, n)) * width,
                              lo, hi)
    cands = np.array([b[1] for b in sorted(best, key=lambda t: t[0])[:16]])
    return _confirm(net, conjs, lo, hi, cands)


def _attack_high(net: Net, lo: np.ndarray, hi: np.ndarray, conjs: list[Any],
                 rng: np.random.Generator, stop: float) -> tuple[float, np.ndarray]:
    """Targeted signed PGD per conjunction (chains of 64), restarted until ``stop``."""
    n = len(lo)
    width = hi - lo
    best: list[tuple[float, np.ndarray]] = []
    rounds = 0
    chains = 64
    while time.monotonic() < stop or rounds == 0:
        for c, conj in enumerate(conjs):
            z = lo + rng.uniform(size=(chains, n)) * width
            if rounds == 0 and c == 0:
                z[: chains // 4] = np.where(rng.uniform(size=(chains // 4, n)) < 0.5, lo, hi)
            step = 0.25 * width
            for _ in range(100):
                val, g = _loss_grad(net, z, [conj])
                z = np.clip(z - step * np.sign(g), lo, hi)
                step = step * 0.97
            m = margin(conjs, net.forward(z.astype(np.float32), np.float32)[0]
                       .astype(np.float64))
            k = int(np.argmin(m))
            best.append((float(m[k]), z[k]))
            if time.monotonic() > stop and rounds > 0:
                break
        rounds += 1
    cands = np.array([b[1] for b in sorted(best, key=lambda t: t[0])[:16]])
    return _confirm(net, conjs, lo, hi, cands)


def check(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    meta = json.load(open(os.path.join(args.out, "meta.json")))
    pub = _published()
    recs = [json.loads(line) for line in open(os.path.join(args.out, "runs.jsonl"))]
    nets: dict[str, Net] = {}
    props: dict[str, Any] = {}
    report: list[dict[str, Any]] = []
    wrong_dir = os.path.join(args.out, "wrong")
    by_instance: dict[tuple[str, str], set[str]] = {}
    for rec in recs:
        net_path, prop_path = rec["onnx"], rec["vnnlib"]
        key = f"{os.path.basename(net_path)}|{prop_path}"
        info = meta.get(key, {"kind": "other"})
        if args.kinds and info["kind"] not in args.kinds.split(","):
            continue
        if net_path not in nets:
            nets[net_path] = Net(net_path)
        if prop_path not in props:
            props[prop_path] = read_vnnlib(prop_path)
        net, prop = nets[net_path], props[prop_path]
        status, values, problems = parse_result(rec["result"])
        cli_status = rec["stdout"].splitlines()[0].strip() if rec["stdout"] else None
        if rec["rc"] != 0 or "Traceback" in rec["stderr"]:
            problems.append(f"rc {rec['rc']}: {rec['stderr'].strip()[-300:]}")
        if cli_status != status:
            problems.append(f"stdout says {cli_status!r}, file says {status!r}")
        entry: dict[str, Any] = {"onnx": os.path.basename(net_path), "vnnlib": prop_path,
                                 "seed": rec["seed"], "kind": info["kind"], "status": status,
                                 "wall": rec["wall"], "problems": problems, "cmd": rec["cmd"]}
        by_instance.setdefault((net_path, prop_path), set()).add(str(status))
        verdict = "ok"
        if status == "sat":
            x = np.array([values.get(f"X_{i}", np.nan) for i in range(prop["n_in"])])
            y_rep = np.array([values.get(f"Y_{j}", np.nan) for j in range(prop["n_out"])])
            f32 = bool(np.all(x.astype(np.float32).astype(np.float64) == x))
            y = net.ort(x)[0]
            ok = bool(np.all(np.isfinite(x))) and violated(prop, x, y)
            entry.update(cex_float32=f32, cex_ok=ok, y_diff=float(np.max(np.abs(y - y_rep))))
            if not ok:
                # also: inside the box, outputs only (to say which part failed)
                inside = any(all(a <= Fraction(float(v)) <= b for v, a, b in
                                 zip(x, lo, hi, strict=True)) for lo, hi, _ in prop["regions"])
                entry["cex_inside_box"] = inside
                verdict = "WRONG SAT (counterexample fails)"
            if info.get("must") == "unsat":
                verdict = f"CONTRADICTS implied unsat ({verdict})"
        elif status == "unsat":
            if info.get("must") == "sat":
                verdict = "WRONG UNSAT (contradicts published sat)"
            budget = args.acas_seconds if prop["n_in"] <= 32 else args.mnist_seconds
            m, x = attack(net, prop, rng, budget)
            entry["attack_margin"] = m
            if x is not None and violated(prop, x, net.ort(x)[0]):
                verdict = "WRONG UNSAT (attack found a counterexample)"
                os.makedirs(wrong_dir, exist_ok=True)
                np.save(os.path.join(wrong_dir, os.path.basename(prop_path) + "__"
                                     + entry["onnx"] + ".npy"), x)
            elif m < 1e-4:
                entry["near_miss"] = True
        if info.get("point") is not None and status in ("sat", "unsat"):
            # a point box: the answer is what onnxruntime says at the float32 point(s)
            lo, hi, _ = prop["regions"][0] if prop["regions"] else (None, None, None)
            if lo is not None:
                xs = np.array([float(v) for v in lo])
                if all(Fraction(float(v)) == a for v, a in zip(xs, lo, strict=True)):
                    truth = "sat" if violated(prop, xs, net.ort(xs)[0]) else "unsat"
                    entry["point_truth"] = truth
                    if truth != status:
                        verdict = f"WRONG on a point box (truth {truth})"
        pub_ans = pub.get((os.path.basename(net_path), os.path.basename(prop_path)))
        if pub_ans and prop_path.startswith(SHARED) and status in ("sat", "unsat"):
            entry["published"] = pub_ans
            if pub_ans != status:
                verdict = f"DIFFERS from published {pub_ans}"
        if info.get("must") in ("sat", "unsat") and status in ("sat", "unsat") \
                and status != info["must"] and verdict == "ok":
            verdict = f"DIFFERS from implied {info['must']}"
        if problems and verdict == "ok":
            verdict = "FORMAT/CRASH"
        entry["verdict"] = verdict
        report.append(entry)
        if verdict != "ok":
            print(f"!! {verdict}: {rec['cmd']}\n   {entry}", flush=True)
    for (net_path, prop_path), seen in by_instance.items():
        if {"sat", "unsat"} <= seen:
            print(f"!! INCONSISTENT across runs: {os.path.basename(net_path)} {prop_path}: {seen}")
    # summary per kind
    kinds: dict[str, dict[str, int]] = {}
    for e in report:
        k = kinds.setdefault(e["kind"], {s: 0 for s in (*STATUSES, "None")})
        k[str(e["status"])] = k.get(str(e["status"]), 0) + 1
    wall = sum(e["wall"] for e in report)
    for kind, counts in sorted(kinds.items()):
        print(f"{kind:11s} " + " ".join(f"{s}={c}" for s, c in counts.items()))
    bad = [e for e in report if e["verdict"] != "ok"]
    near = [e for e in report if e.get("near_miss")]
    margins = [e["attack_margin"] for e in report if "attack_margin" in e]
    print(f"runs: {len(report)}, verifier wall {wall:.0f} s, findings {len(bad)}, "
          f"near misses {len(near)}; closest unsat attack margin "
          f"{min(margins) if margins else float('nan'):.3g}")
    json.dump(report, open(os.path.join(args.out, "check.json"), "w"), indent=1, default=str)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="write held-out-style instances")
    g.add_argument("--out", default="/tmp/audit")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--acas-sub", type=int, default=80)
    g.add_argument("--acas-cross", type=int, default=30)
    g.add_argument("--mnist", type=int, default=60)
    g.add_argument("--points", type=int, default=6)
    g.add_argument("--ulp", type=int, default=10)
    g.add_argument("--eps", default="0.01,0.02,0.04,0.06,0.08,0.025")
    g.add_argument("--acas-timeout", type=int, default=20)
    g.add_argument("--mnist-timeout", type=int, default=30)
    r = sub.add_parser("run", help="run torchlean vnn on every row of a CSV, one at a time")
    r.add_argument("--out", default="/tmp/audit")
    r.add_argument("--csv", required=True)
    r.add_argument("--timeout", type=float, default=None, help="override the rows' timeouts")
    r.add_argument("--seed", type=int, default=0, help="the verifier's --seed")
    r.add_argument("--limit", type=int, default=0, help="only the first N rows")
    r.add_argument("--budget", type=float, default=0, help="stop starting rows after S seconds")
    c = sub.add_parser("check", help="check every recorded answer")
    c.add_argument("--out", default="/tmp/audit")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--acas-seconds", type=float, default=4.0)
    c.add_argument("--mnist-seconds", type=float, default=8.0)
    c.add_argument("--kinds", default="", help="only these kinds (comma-separated)")
    args = parser.parse_args(argv)
    {"generate": generate, "run": run, "check": check}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
