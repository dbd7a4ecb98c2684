"""Decide one VNN-LIB instance: does an ONNX network meet a property? ``unsat`` / ``sat`` / ...

``verify_instance(model, property, timeout, method)`` runs, within the time limit:

1. the centre of every input box through the network (a cheap falsification);
2. one bound pass per region (``refute``): ``method``, for alpha-CROWN after the CROWN pass it
   starts from; the instance is ``unsat`` when every conjunction of every region is refuted (no
   IBP pass first: on the 2021 benchmarks it refuted no conjunction that CROWN left open, and
   cost a third of CROWN's time);
3. an attack on the conjunctions left (``attack.sample_box``, ``attack.pgd_box``, on a batched
   copy of the network when the file allows one): for a few inputs (``LOW_DIMENSION``), uniform
   samples, then Adam-stepped PGD from the best samples and from output-diversified restarts,
   escalating with ``effort``; for many inputs (images), a multi-targeted signed-gradient PGD
   from output-diversified starts, every unsafe conjunction attacked by its own chains
   (alpha-beta-CROWN's attack, with ODI starts), then the same PGD, untargeted, from the box
   vertices that switch on the first relu's unstable neurons (``attack.switch_on_starts``:
   where a neuron is off along every descent path, no gradient leads there).

A point is reported ``sat`` only after the network itself (the float32 compiled graph that the
bound engine encloses, batch of one) maps it into the unsafe set, checked exactly
(``Property.violated_by``), and the bound engine's enclosure of the outputs at that point (every
float32 evaluation order, and the real value) lies in the unsafe set too
(``properties.confirm``): a point on the boundary within rounding is not reported, since another
runtime (onnxruntime) may sum in another order and land on the safe side. Otherwise the answer
is ``unknown`` (everything ran) or ``timeout``.
Each ``unsat`` is a claim about the float32 network in round-to-nearest (``rounding="float32"``,
the bound engine's ``kernel=True``) or about the real-valued network (``rounding="real"``);
``Result.claim`` says which.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import attack, onnx
from ..bounds import METHODS, bab, properties, relu_bab
from ..bounds.properties import Property, PropertyError
from ..core.errors import TorchLeanError
from ..onnx.errors import require_onnx as onnx_module
from ..onnx.files import read_model
from . import vnnlib

__all__ = ["CLAIMS", "MAX_MODEL_BYTES", "ROUNDINGS", "STATUSES", "Network", "Result",
           "VnnError", "verify_instance"]

STATUSES = ("unsat", "sat", "unknown", "timeout")
VNN_METHODS = ("bab", *METHODS)  # bab: branch and bound over input boxes (bounds.bab)
# Input splitting pays off on few inputs (ACAS Xu: 5); over hundreds (MNIST-FC: 784) halving one
# input at a time barely moves the bounds, so ``bab`` there runs the CROWN pass and the attacks.
BAB_MAX_INPUTS = 32
# Input branch and bound first gets this share of the time (at least BAB_FIRST_SECONDS): most
# instances end there; one it leaves open gets the first attempt of step 3's attack (branch and
# bound's own attack is a short sign-gradient descent, which misses counterexamples that
# sampling and PGD find), then branch and bound again with what is left (going on from the
# first run's open domains), then, if that leaves it open with time to spare, the attack's
# later attempts. A first run stopped by the domain cap gets the whole attack at once.
BAB_FIRST_SHARE = 0.1
BAB_FIRST_SECONDS = 2.0
ROUNDINGS = ("float32", "real")
CLAIMS = {
    "float32": "unsat is proved for the network's float32 computation (torchlean's float32 "
               "kernels, IEEE round-to-nearest) on every input in the box",
    "real": "unsat is proved for the real-valued network (exact arithmetic on its float32 "
            "weights); its float32 computation is not covered",
}
SAT_CLAIM = ("sat: the counterexample was run through the float32 network and meets the unsafe "
             "constraints exactly, as does every output the bound engine encloses at it (any "
             "float32 summation order, and the real-valued network)")
MAX_MODEL_BYTES = 2 * 2**30
SAMPLE_BATCH = 1024  # points per network call when sampling, if the network takes a batch
SAMPLES = 16384  # samples in the first attack attempt (half of them on the box's faces)
MAX_SAMPLES = 2**20  # each further attempt samples 4 times more, up to this many
LOW_DIMENSION = 32  # above this many inputs, sampling budgets shrink in proportion
PGD_STEPS = 200
# The attack for many inputs (alpha-beta-CROWN's defaults for its PGD: steps of a quarter of the
# radius, i.e. an eighth of the box's width, decaying by 0.98 a step, 100 steps), with starts
# moved by ODI steps; two restarts per attempt, every chain aimed at one conjunction.
SIGN_STEPS = 100
SIGN_STEP = 0.125
SIGN_DECAY = 0.98
SIGN_RESTARTS = 2
DIVERSIFY = 10
# PGD from the vertices switching on the first relu's unstable neurons, after the signed PGD
# (``_attack``'s ``switched``): at most this many batches of chains, this many steps (MNIST-FC
# 256x2 prop_0_0.05 needs 20, at seeds 0-9; 15 find it at 3 of them), and this share of the
# coordinates redrawn in the chains beyond one per neuron
SWITCH_BATCHES = 2
SWITCH_STEPS = 30
SWITCH_REDRAW = 0.25
MAX_CANDIDATES = 8  # attack points checked on the network per attack call
# alpha-CROWN's steps (auto_LiRPA's count; it stops once every conjunction is refuted): 20 left
# 4 ACAS Xu instances open that 100 prove (the last margins come in the last steps)
ALPHA_STEPS = 100


class VnnError(TorchLeanError):
    """An instance that cannot be run: a network and property that do not fit, a bad option."""


@dataclass
class Result:
    """The answer for one instance, how long it took and what it rests on."""

    status: str
    seconds: float
    method: str
    rounding: str
    claim: str = ""
    counterexample: tuple[Any, Any] | None = None  # flat input and output, as float64 arrays
    regions: int = 0
    conjunctions: int = 0
    refuted: int = 0
    fallback: list[str] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)
    message: str = ""
    domains: int = 0  # domains bounded by branch and bound (0 where none ran)

    def as_dict(self) -> dict[str, Any]:
        cex = None
        if self.counterexample is not None:
            cex = {"x": [float(v) for v in self.counterexample[0]],
                   "y": [float(v) for v in self.counterexample[1]]}
        return {"status": self.status, "seconds": self.seconds, "method": self.method,
                "rounding": self.rounding, "claim": self.claim, "regions": self.regions,
                "conjunctions": self.conjunctions, "refuted": self.refuted,
                "fallback": self.fallback, "stages": self.stages, "message": self.message,
                "domains": self.domains, "counterexample": cex}

    def competition_text(self) -> str:
        """The result file of the VNN competition: the status line, and for ``sat`` the
        assignment ``((X_0 v) ... (Y_0 v) ...)`` (values round-trip exactly as floats)."""
        if self.status != "sat" or self.counterexample is None:
            return self.status + "\n"
        x, y = self.counterexample
        pairs = [f"(X_{i} {float(v)!r})" for i, v in enumerate(x)]
        pairs += [f"(Y_{j} {float(v)!r})" for j, v in enumerate(y)]
        return "sat\n(" + "\n ".join(pairs) + ")\n"


class Network:
    """An ONNX network (``.onnx`` or ``.onnx.gz``) loaded once: the model itself (the batch of
    one that properties are stated for) and, lazily, a batched copy for attacks. A symbolic
    batch axis is fixed at 1; a file without a leading batch axis of 1 is given one (see
    ``__init__``), its own graph still checking counterexamples (``run``)."""

    def __init__(self, path: Any) -> None:
        label = os.fspath(path)
        if not os.path.isfile(label):
            raise VnnError(f"vnn: network {label}: no such file")
        self.label = label
        source: Any = label
        if label.endswith(".gz"):
            source = vnnlib.read_bytes(label, MAX_MODEL_BYTES, VnnError, "vnn")
        try:
            try:
                self.model = onnx.load(source)
            except onnx.UnsupportedOnnxError:
                # a symbolic batch axis (``batch_size``, ``N``, ``unk__``): the properties
                # are stated for one example, so it is fixed at 1 (else the first error)
                shapes = _batch_of_one(source)
                if shapes is None:
                    raise
                self.model = onnx.load(source, shapes)
        except onnx.OnnxError as exc:
            if isinstance(source, bytes):  # name the file, not "<bytes>"
                raise onnx.OnnxError(f"{label}: {exc}") from None
            raise
        graph = self.model.graph
        self.input_shape = tuple(graph.nodes[graph.inputs[0]].shape)
        self.output_shape = tuple(self.model.out_shape)
        if len(self.model.input_names) != 1:
            raise VnnError(f"vnn: network {label}: expected one input, found "
                           f"{len(self.model.input_names)}")
        self._batched: dict[int, Any] = {}
        # A file without a leading batch axis of 1 on its input and output (input ``(n,)``,
        # a column vector ``(n, 1)`` times weights on the left, ...): branch and bound and the
        # attacks need one, so the model becomes the same file given input ``(1, n)`` where
        # that imports (then batched copies exist too), else the file wrapped in reshapes from
        # ``(1, n)`` and to ``(1, m)`` (``_batch_adapter``: data movement only, the same
        # float32 values), if either agrees with it on random inputs. Counterexamples are
        # still checked on the file's own graph (``run``).
        self._plain: Any = None
        self._plain_shape = self.input_shape
        if self.input_shape[:1] != (1,) or self.output_shape[:1] != (1,):
            wrapped = self._with_batch_axis()
            if wrapped is not None:
                self._plain, self.model = self.model, wrapped
                graph = wrapped.graph
                self.input_shape = tuple(graph.nodes[graph.inputs[0]].shape)
                self.output_shape = tuple(wrapped.out_shape)

    def _with_batch_axis(self) -> Any:
        """See ``__init__``: a copy of the model with a batch axis of 1 on its input and output,
        or None when neither way imports, keeps the sizes and agrees with the model."""
        n = int(np.prod(self.input_shape))
        m = int(np.prod(self.output_shape))
        candidates: list[Any] = []
        if len(self.input_shape) == 1:
            candidates.append((self.model.proto, [(1, n)]))
        adapter = _batch_adapter(self.model.proto, self.input_shape, m)
        if adapter is not None:
            candidates.append((adapter, None))
        x = np.random.default_rng(0).uniform(-1, 1, size=(2, n)).astype(self.model.dtype)
        for proto, shapes in candidates:
            try:
                wrapped = onnx.load(proto, shapes)
            except TorchLeanError:
                continue
            graph = wrapped.graph
            shape_in = tuple(graph.nodes[graph.inputs[0]].shape)
            out = tuple(wrapped.out_shape)
            if (shape_in != (1, n) or not _leading_one(out) or int(np.prod(out)) != m
                    or wrapped.dtype != self.model.dtype):
                continue
            if all(np.allclose(np.asarray(wrapped.forward(row[None])).reshape(-1),
                               self.run(row), rtol=1e-4, atol=1e-5) for row in x):
                return wrapped
        return None

    def run(self, x: Any) -> Any:
        """The network's output for a flat input, flattened (float32 values): the file's own
        graph (for a file without a batch axis, not the copy given one)."""
        model = self.model if self._plain is None else self._plain
        return np.asarray(model.forward(
            np.asarray(x, dtype=model.dtype).reshape(self._plain_shape))).reshape(-1)

    def batched(self, n: int) -> Any:
        """The network with a batch of ``n`` examples, or None when the file fixes its batch
        (checked: the copy must agree with the model on two random inputs)."""
        if n in self._batched:
            return self._batched[n]
        copy = None
        shape = self.input_shape
        if shape and shape[0] == 1 and len(shape) >= 2:
            try:
                candidate = onnx.load(self.model.proto, [(n, *shape[1:])])
            except TorchLeanError:
                candidate = None
            if (candidate is not None and tuple(candidate.out_shape)
                    == (n, *self.output_shape[1:])):
                x = np.random.default_rng(0).uniform(-1, 1, size=(n, *shape[1:]))
                x = x.astype(self.model.dtype)
                mine = np.asarray(candidate.forward(x)).reshape(n, -1)
                ok = all(np.allclose(mine[k], self.run(x[k]), rtol=1e-4, atol=1e-5)
                         for k in (0, n - 1))
                copy = candidate if ok else None
        self._batched[n] = copy
        return copy


def _leading_one(shape: tuple[int, ...]) -> bool:
    return len(shape) >= 2 and shape[0] == 1


def _batch_adapter(proto: Any, input_shape: tuple[int, ...], n_out: int) -> Any:
    """``proto`` (one data input of ``input_shape``, one output of ``n_out`` values) with a new
    input ``(1, n)`` reshaped to ``input_shape`` and its output reshaped to ``(1, n_out)``;
    None for a file this cannot wrap (several outputs, an opset before Reshape's shape input)."""
    module = onnx_module()
    helper = module.helper
    inits = {t.name for t in proto.graph.initializer}
    data = [i for i in proto.graph.input if i.name not in inits]
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                default=0)
    if len(data) != 1 or len(proto.graph.output) != 1 or opset < 5:
        return None
    model = module.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    taken = ({i.name for i in graph.input} | inits | {o.name for o in graph.output}
             | {v for nd in graph.node for v in (*nd.input, *nd.output)})

    def fresh(stem: str) -> str:
        k = 0
        while f"{stem}_{k}" in taken:
            k += 1
        taken.add(f"{stem}_{k}")
        return f"{stem}_{k}"

    old_in, old_out = data[0], graph.output[0]
    elem = old_in.type.tensor_type.elem_type
    out_elem = old_out.type.tensor_type.elem_type
    new_in, new_out = fresh("batch1_input"), fresh("batch1_output")
    shape_in, shape_out = fresh("batch1_input_shape"), fresh("batch1_output_shape")
    graph.initializer.extend([
        module.numpy_helper.from_array(np.array(input_shape, np.int64), shape_in),
        module.numpy_helper.from_array(np.array([1, n_out], np.int64), shape_out)])
    nodes = [helper.make_node("Reshape", [new_in, shape_in], [old_in.name]), *graph.node,
             helper.make_node("Reshape", [old_out.name, shape_out], [new_out])]
    del graph.node[:]
    graph.node.extend(nodes)
    n_in = int(np.prod(input_shape))
    inputs = [helper.make_tensor_value_info(new_in, elem, [1, n_in]) if i.name == old_in.name
              else i for i in graph.input]
    del graph.input[:]
    graph.input.extend(inputs)
    del graph.output[:]
    graph.output.extend([helper.make_tensor_value_info(new_out, out_elem, [1, n_out])])
    return model


def _batch_of_one(source: Any) -> dict[str, tuple[int, ...]] | None:
    """The input shapes of an ONNX file whose one data input (a graph input that is not an
    initialiser) has a symbolic or unset first axis and fixed others, with that axis set to 1;
    None for any other file (nothing to fix, or more than the batch axis unknown)."""
    try:
        proto, _ = read_model(source)
    except TorchLeanError:
        return None
    inits = {t.name for t in proto.graph.initializer}
    data = [i for i in proto.graph.input if i.name not in inits]
    if len(data) != 1 or not data[0].type.HasField("tensor_type"):
        return None
    tensor = data[0].type.tensor_type
    if not tensor.HasField("shape") or not tensor.shape.dim:
        return None
    dims = [int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else 0
            for d in tensor.shape.dim]
    if dims[0] or len(dims) < 2 or not all(dims[1:]):
        return None
    return {data[0].name: (1, *dims[1:])}


class _Clock:
    def __init__(self, timeout: float | None) -> None:
        self.start = time.monotonic()
        self.deadline = None if timeout is None else self.start + timeout
        self.stages: dict[str, float] = {}
        self._mark = self.start

    def over(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def stage(self, name: str) -> None:
        now = time.monotonic()
        self.stages[name] = self.stages.get(name, 0.0) + now - self._mark
        self._mark = now

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def _check_fit(net: Network, prop: Property) -> None:
    n_in = int(np.prod(net.input_shape))
    n_out = int(np.prod(net.output_shape))
    if (n_in, n_out) != (prop.n_inputs, prop.n_outputs):
        raise VnnError(f"vnn: {prop.label} declares {prop.n_inputs} inputs and "
                       f"{prop.n_outputs} outputs, the network {net.label} has {n_in} "
                       f"(shape {net.input_shape}) and {n_out} (shape {net.output_shape})")


def _fallbacks(bounds: Any) -> list[str]:
    """Nodes the bound engine bounded by intervals inside CROWN (``node %i (op)``)."""
    found = getattr(bounds, "interval_fallbacks", None) or []
    return [f"%{i} ({name})" for i, name in found]


def _counterexample(net: Network, prop: Property, points: Any, order: Any
                    ) -> tuple[Any, Any] | None:
    """The first of ``points`` (in ``order``) that the network maps into the unsafe set, with
    every output the bound engine encloses there (``properties.confirm``)."""
    for k in order[:MAX_CANDIDATES]:
        x = np.asarray(points[k], dtype=net.model.dtype).reshape(-1)
        y = net.run(x)
        if properties.confirm(net.model, prop, x, y):
            return x.astype(np.float64), y.astype(np.float64)
    return None


def _chains(net: Network) -> int:
    """PGD chains run side by side: 256 for a handful of inputs, 83 for a 28x28 image."""
    return int(np.clip(2**16 // max(int(np.prod(net.input_shape)), 1), 16, 256))


def _attack_models(net: Network) -> tuple[Any, Any] | None:
    """The networks the attacks run (sampling, PGD): batched copies, else the model when it has
    a batch axis of one (then one point at a time), else None (no batch axis at all)."""
    sampler, chains = net.batched(SAMPLE_BATCH), net.batched(_chains(net))
    if sampler is not None and chains is not None:
        return sampler, chains
    if len(net.input_shape) >= 2 and net.input_shape[0] == 1 and net.output_shape[:1] == (1,):
        return net.model, net.model
    return None


def _best(found: attack.BoxAttackResult, n: int) -> attack.BoxAttackResult:
    order = np.argsort(found.objective, kind="stable")[:n]
    if len(order) < n:  # fewer samples than chains: repeat the best ones
        order = np.resize(order, n)
    return attack.BoxAttackResult(found.inputs[order], found.objective[order],
                                  found.target[order])


def _attack(net: Network, models: tuple[Any, Any], prop: Property, region: properties.Region,
            open_conj: list[int], clock: _Clock, seed: int, effort: int, first: int = 0
            ) -> tuple[tuple[Any, Any] | None, str]:
    """The attack of step 3 (see the module doc), ``effort + 1`` times with fresh seeds (once
    for many inputs), on one region's open conjunctions; a checked counterexample or None.
    ``first``: skip the attempts before this one (run by an earlier call)."""
    sampler, chains = models
    lo, hi = region.inner_box(net.model.dtype)
    objectives = [region.outputs[c].matrix(prop.n_outputs) for c in open_conj]
    feat = tuple(sampler.graph.nodes[sampler.graph.inputs[0]].shape)[1:]
    lo, hi = lo.reshape(feat), hi.reshape(feat)
    n_chains = tuple(chains.graph.nodes[chains.graph.inputs[0]].shape)[0]
    batch = sampler.out_shape[0]
    # In many dimensions further attempts have not paid (every MNIST-FC counterexample came
    # from the first): one there; the escalating attempts are for low dimensions.
    attempts = effort + 1 if prop.n_inputs <= LOW_DIMENSION else 1

    def signed(rng_seed: int) -> tuple[tuple[Any, Any] | None, bool]:
        # A multi-targeted signed-gradient PGD from output-diversified starts (every unsafe
        # conjunction attacked by its own chains).
        result = attack.pgd_box(chains, lo, hi, objectives, steps=SIGN_STEPS,
                                restarts=SIGN_RESTARTS, seed=rng_seed + 3, step_size=SIGN_STEP,
                                rule="sign", decay=SIGN_DECAY, diversify=DIVERSIFY,
                                loss="hinge", deadline=clock.deadline)
        cex = _counterexample(net, prop, result.inputs, np.argsort(result.objective))
        return cex, result.timed_out or clock.over()

    def switched(rng_seed: int) -> tuple[tuple[Any, Any] | None, bool]:
        # The same PGD, untargeted, from the vertices that switch on the first relu's unstable
        # neurons (``attack.switch_on_starts``; the chains left over start from copies with
        # a share of the coordinates redrawn).
        starts = attack.switch_on_starts(chains, lo, hi, limit=SWITCH_BATCHES * n_chains)
        if not len(starts):
            return None, False
        # a batch of the next power of two (at least 16) when fewer starts than chains: the
        # PGD's cost is in proportion to its chains
        size = min(n_chains, max(16, 1 << (len(starts) - 1).bit_length()))
        model = net.batched(size) if size < n_chains else chains
        if model is None:
            model, size = chains, n_chains
        rng = np.random.default_rng(rng_seed + 5)
        for first in range(0, len(starts), size):
            points = np.resize(starts[first:first + size], (size, *feat))
            copies = np.arange(size) >= len(starts) - first
            redraw = (rng.uniform(size=points.shape) < SWITCH_REDRAW) & copies.reshape(
                (-1,) + (1,) * len(feat))
            drawn = lo + rng.uniform(size=points.shape) * (hi - lo)
            points = np.where(redraw, drawn, points).astype(lo.dtype)
            result = attack.pgd_box(
                model, lo, hi, objectives, steps=SWITCH_STEPS, seed=rng_seed + 6,
                step_size=SIGN_STEP, rule="sign", decay=SIGN_DECAY, loss="hinge",
                untargeted=True, deadline=clock.deadline,
                starts=attack.BoxAttackResult(points, np.zeros(size),
                                              np.zeros(size, dtype=np.int64)))
            cex = _counterexample(net, prop, result.inputs, np.argsort(result.objective))
            if cex is not None or result.timed_out or clock.over():
                return cex, True
        return None, False

    for attempt in range(first, attempts):
        rng_seed = seed + 7919 * attempt
        if prop.n_inputs > LOW_DIMENSION:
            # Many inputs: the signed PGD finds what sampling cannot. Sampling and Adam-stepped
            # PGD after it found none of the 21 MNIST-FC counterexamples it finds (and all
            # that they found), so they are not run here.
            cex, stop = signed(rng_seed)
            if cex is not None or stop:
                return cex, f"diversified PGD, attempt {attempt + 1}"
            cex, stop = switched(rng_seed)
            if cex is not None or stop:
                return cex, f"PGD from switch-on vertices, attempt {attempt + 1}"
            continue
        # Escalate: cheap first (most counterexamples are easy), then up to a million samples
        # (for low-dimensional inputs they find what PGD's local steps miss).
        # In many dimensions uniform samples are nearly useless (PGD does the work there).
        scale = min(1.0, LOW_DIMENSION / prop.n_inputs)
        samples = int(min(SAMPLES * 4**attempt, MAX_SAMPLES, 256 * batch) * scale)
        rounds = max(1, samples // (2 * batch))
        plain = attack.sample_box(sampler, lo, hi, objectives, rounds=rounds, seed=rng_seed)
        # Half the samples with coordinates moved to the box's faces: counterexamples of
        # ACAS Xu-like properties often sit there.
        faces = attack.sample_box(sampler, lo, hi, objectives, rounds=rounds,
                                  seed=rng_seed + 1, snap=0.4)
        found = attack.BoxAttackResult(np.concatenate([plain.inputs, faces.inputs]),
                                       np.concatenate([plain.objective, faces.objective]),
                                       np.concatenate([plain.target, faces.target]))
        cex = _counterexample(net, prop, found.inputs, np.argsort(found.objective))
        if cex is not None or clock.over():
            return cex, f"sampling, attempt {attempt + 1}"
        # From the best samples, then from output-diversified random starts; the hinge loss
        # moves every unmet row of a conjunction at once (ACAS Xu's "Y_0 is the largest"
        # counterexamples sit where several rows are nearly equal).
        result = attack.pgd_box(chains, lo, hi, objectives, steps=PGD_STEPS, seed=rng_seed + 2,
                                starts=_best(found, n_chains), untargeted=True, restarts=2,
                                diversify=DIVERSIFY, loss="hinge", deadline=clock.deadline)
        cex = _counterexample(net, prop, result.inputs, np.argsort(result.objective))
        if cex is not None or result.timed_out or clock.over():
            return cex, f"PGD, attempt {attempt + 1}"
        # Each PGD finds ACAS Xu counterexamples the other misses at a given seed.
        cex, stop = signed(rng_seed)
        if cex is not None or stop:
            return cex, f"diversified PGD, attempt {attempt + 1}"
    return None, ""


def _unbatched_search(net: Network, prop: Property, region: properties.Region, seed: int,
                      samples: int) -> tuple[Any, Any] | None:
    """Uniform samples one at a time, for networks without a batch axis (tiny ones)."""
    lo, hi = region.inner_box(net.model.dtype)
    rng = np.random.default_rng(seed)
    points = lo + rng.uniform(size=(samples, len(lo))) * (hi - lo)
    points = np.minimum(np.maximum(points.astype(lo.dtype), lo), hi)
    return _counterexample(net, prop, points, list(range(samples)))


def _attack_regions(net: Network, prop: Property, regions: list[properties.Region],
                    clock: _Clock, seed: int, effort: int,
                    todos: list[list[int]] | None = None, first: int = 0
                    ) -> tuple[tuple[Any, Any] | None, str]:
    """Step 3's attack on each region's open conjunctions (all of them when ``todos`` is None),
    region by region until a checked counterexample or the time limit; ``first``: the attempt
    to start from (``_attack``)."""
    for k, region in enumerate(regions):
        if clock.over():
            break
        todo = list(range(len(region.outputs))) if todos is None else todos[k]
        models = _attack_models(net)
        if models is None:
            cex = _unbatched_search(net, prop, region, seed + k + 7919 * first,
                                    64 * (effort + 1 - first))
            how = "sampling"
        else:
            cex, how = _attack(net, models, prop, region, todo, clock, seed + 1000 * k, effort,
                               first)
        if cex is not None:
            return cex, how
    return None, ""


def verify_instance(model: Any, prop: Any, timeout: float | None = None, method: str = "bab",
                    *, rounding: str = "float32", seed: int = 0, effort: int = 4,
                    alpha_steps: int = ALPHA_STEPS,
                    progress: Callable[[dict[str, Any]], None] | None = None) -> Result:
    """Decide whether ``model`` (a path to ``.onnx``/``.onnx.gz`` or a ``Network``) violates
    ``prop`` (a path to ``.vnnlib``/``.vnnlib.gz`` or a ``Property``) within ``timeout`` seconds.

    ``method``: ``bab`` (branch and bound over input boxes, the default, for networks of at most
    ``BAB_MAX_INPUTS`` inputs; above that one CROWN pass and the attacks) or one bound pass
    (``ibp``, ``crown``, ``alpha-crown``); ``rounding``:
    ``float32`` (bounds enclose the float32 network) or ``real``; ``effort``: attack attempts per
    region after the first, each with more samples (networks of at most ``LOW_DIMENSION``
    inputs; larger ones get one attempt); ``progress``: called during branch and bound with the
    running counts (``domains`` bounded, ``proved``, ``open``; ``bounds.bab.search``). Bad
    files raise their named errors
    (``VnnlibError``, ``OnnxError``); a network and property that do not fit raise ``VnnError``.
    """
    if method not in VNN_METHODS:
        raise VnnError(f"vnn: unknown method {method!r}; expected one of {VNN_METHODS}")
    if rounding not in ROUNDINGS:
        raise VnnError(f"vnn: unknown rounding {rounding!r}; expected one of {ROUNDINGS}")
    if timeout is not None and (not isinstance(timeout, int | float) or not timeout > 0):
        raise VnnError(f"vnn: timeout must be a number of seconds > 0, found {timeout!r}")
    for name, value in (("seed", seed), ("effort", effort)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise VnnError(f"vnn: {name} must be an integer >= 0, found {value!r}")
    clock = _Clock(timeout)
    net = model if isinstance(model, Network) else Network(model)
    if not isinstance(prop, Property):
        prop = vnnlib.read(prop)
    _check_fit(net, prop)
    clock.stage("load")
    result = Result("unknown", 0.0, method, rounding, regions=len(prop.regions),
                    conjunctions=sum(len(r.outputs) for r in prop.regions))

    def finish(status: str, cex: Any = None, message: str = "") -> Result:
        clock.stage("other")
        result.status, result.counterexample = status, cex
        result.claim = {"unsat": CLAIMS[rounding], "sat": SAT_CLAIM}.get(status, "")
        result.message = message
        result.seconds = clock.elapsed()
        result.stages = {k: round(v, 6) for k, v in clock.stages.items()}
        return result

    # 1. the centre of every box: many unsafe sets contain the unperturbed point
    live = [r for r in prop.regions if not r.empty]
    centres = []
    for region in live:
        try:
            lo, hi = region.inner_box(net.model.dtype)
        except PropertyError as exc:
            raise VnnError(f"vnn: {exc}") from None
        centres.append(lo + (hi - lo) / 2)
    cex = _counterexample(net, prop, centres, list(range(len(centres))))
    clock.stage("centre")
    if cex is not None:
        return finish("sat", cex, "counterexample: the centre of the input box")

    # 2. bound passes: the method (alpha-CROWN after CROWN, whose bounds it reuses)
    kernel = rounding == "float32"
    relu_split = False  # branch and bound over relu splits after the attacks (bounds.relu_bab)
    if method == "bab" and int(np.prod(net.input_shape)) > BAB_MAX_INPUTS:
        method = "crown"  # see BAB_MAX_INPUTS; the result's method says what ran
        relu_split = relu_bab.supports(net.model)
        result.method = ("bab (crown pass, attacks, then relu splitting)" if relu_split
                         else "bab (crown pass: too many inputs to split)")
    if method == "bab":  # branch and bound (bounds.bab) decides it all
        if clock.over():
            return finish("timeout", None, "the time limit ran out before branch and bound")
        left = None if timeout is None else max(timeout - clock.elapsed(), 1e-3)
        first = None if left is None else min(left, max(BAB_FIRST_SECONDS, BAB_FIRST_SHARE * left))
        found = bab.verify_network(net, prop, timeout=first, kernel=kernel, seed=seed,
                                   progress=progress)
        clock.stage("bab")
        result.domains = found.domains
        # the attack's first attempt between the runs (the later, bigger ones cost 4x more: on
        # ACAS Xu 1.6 s against 8.4 s for all five; every counterexample found between the
        # runs came from the first), the rest after the second run if it leaves time
        later = 1 if found.status == "timeout" else None
        if found.status in ("timeout", "unknown") and not clock.over():
            cex, how = _attack_regions(net, prop, live, clock, seed,
                                       0 if later is not None else effort)
            clock.stage("attack")
            if cex is not None:
                return finish("sat", cex, f"counterexample from {how} (after {result.domains} "
                              "domains of branch and bound)")
            if found.status == "timeout" and not clock.over():  # "unknown": the domain cap
                left = None if timeout is None else max(timeout - clock.elapsed(), 1e-3)
                # on from the first run's open domains where it reached its second phase (and
                # no region was left unknown); else afresh, without the look-ahead phase if
                # that ran to its budget
                again: dict[str, Any] = {"resume": found.queue}
                if not isinstance(found.queue, bab.Resume):
                    again = {"lookahead": "off"} if found.looked_ahead else {}
                if progress is not None:  # (one running count over both runs)
                    again["progress"] = bab.shift_progress(progress, found)
                found = bab.verify_network(net, prop, timeout=left, kernel=kernel, seed=seed,
                                           **again)
                clock.stage("bab")
                result.domains += found.domains
        if (later is not None and effort >= later and found.status in ("timeout", "unknown")
                and not clock.over()):
            cex, how = _attack_regions(net, prop, live, clock, seed, effort, first=later)
            clock.stage("attack")
            if cex is not None:
                return finish("sat", cex, f"counterexample from {how} (after {result.domains} "
                              "domains of branch and bound)")
        result.refuted = result.conjunctions if found.status == "unsat" else 0
        return finish(found.status, found.counterexample,
                      f"branch and bound: {result.domains} domains; {found.reason}")
    open_sets: list[tuple[properties.Region, list[int]]] = []
    for region in live:
        if clock.over():
            return finish("timeout", message="time ran out during the bound passes")
        passes = {"ibp": ["ibp"], "crown": ["crown"],
                  "alpha-crown": ["crown", "alpha-crown"]}[method]
        todo = list(range(len(region.outputs)))
        crown = None
        for name in passes:
            options: dict[str, Any] = {}
            if name == "alpha-crown":
                options = {"alpha_steps": alpha_steps, "reuse": crown}
            refutation = properties.refute(net.model, prop, region, method=name, kernel=kernel,
                                           **options)
            crown = refutation.bounds
            result.fallback = sorted(set(result.fallback) | set(_fallbacks(refutation.bounds)))
            todo = [c for c in todo if not refutation.proved[c]]
            if not todo:
                break
        result.refuted += len(region.outputs) - len(todo)
        if todo:
            open_sets.append((region, todo))
    clock.stage("bounds")
    if not open_sets:
        return finish("unsat")

    # 3. attacks on what is left
    cex, how = _attack_regions(net, prop, [r for r, _ in open_sets], clock, seed, effort,
                               [todo for _, todo in open_sets])
    clock.stage("attack")
    if cex is not None:
        return finish("sat", cex, f"counterexample from {how}")
    if clock.over():
        return finish("timeout", message="time ran out during the attack")
    if relu_split:
        left = None if timeout is None else max(timeout - clock.elapsed(), 1e-3)
        found = relu_bab.verify_network(net, prop, timeout=left, kernel=kernel,
                                        progress=progress)
        clock.stage("bab")
        result.domains = found.domains
        if found.status == "unsat":
            result.refuted = result.conjunctions
        return finish(found.status, found.counterexample,
                      f"relu branch and bound: {found.domains} domains; {found.reason}")
    return finish("unknown", message=f"{result.refuted} of {result.conjunctions} unsafe "
                  "conjunctions refuted; no counterexample found")
