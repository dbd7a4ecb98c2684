"""Worker of tests/test_fuzz_hostile.py (not collected by pytest): runs one batch of seeded
hostile cases in this process and prints one JSON line per case.

``python fuzz_hostile_worker.py KIND SEED COUNT WORKDIR`` with KIND ``onnx`` (mutated ONNX files
through ``torchlean.onnx.load``, from bytes and from a path), ``checkpoint`` (tampered
safetensors headers through ``torchlean.load``) or ``tensor`` (the callables in
``TENSOR_CASES``: a hook for the Tensor API fuzz, empty here). Before each case it prints
``{"start": i}`` (flushed), so a hang names the case the parent's guard caught; after it
``{"case": i, "outcome": ...}`` where the outcome is ``ok``, ``named:<TorchLeanError class>`` or
``bare:<class>: <message>`` (the failures the test counts).
"""

from __future__ import annotations

import functools
import io
import json
import os
import struct
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import torchlean as tl
from torchlean import nn
from torchlean.core.errors import TorchLeanError

TENSOR_CASES: list[Callable[[np.random.Generator], Any]] = []
"""Tensor-API fuzz cases (each gets a seeded generator and may raise only TorchLeanError)."""


# ---------------------------------------------------------------------------------------------
# ONNX seeds and mutations


def _seed_models(workdir: str) -> list[bytes]:
    """A few valid models: an exported MLP (torchlean functions and metadata), an embedding
    lookup with shape arithmetic, and hand-built constant folding."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    import torchlean.onnx as tlo

    rng = np.random.default_rng(0)
    mlp = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3), nn.Softmax(dim=-1))
    exported = tlo.export(mlp, None, [(2, 4)]).SerializeToString()

    w = nh.from_array(rng.normal(size=(6, 3)).astype(np.float32), "w")
    shape = nh.from_array(np.array([2, 3], np.int64), "s")
    r = [nh.from_array(np.array(v, np.int64), n) for v, n in ((0, "a"), (3, "b"), (1, "d"))]
    nodes = [h.make_node("ConstantOfShape", ["s"], ["c"],
                         value=nh.from_array(np.array([1.0], np.float32))),
             h.make_node("Range", ["a", "b", "d"], ["r"]),
             h.make_node("Gather", ["w", "ids"], ["e"], axis=0),
             h.make_node("Add", ["x", "c"], ["xc"]),
             h.make_node("Shape", ["r"], ["rs"]),
             h.make_node("Concat", ["rs", "rs"], ["sh"], axis=0),
             h.make_node("Reshape", ["xc", "s"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3]),
                                  h.make_tensor_value_info("ids", T.INT64, [2])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 3]),
                      h.make_tensor_value_info("e", T.FLOAT, [2, 3])],
                     initializer=[w, shape, *r])
    folded = h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    conv = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 2))
    conv_bytes = tlo.export(conv, None, [(1, 1, 6, 6)]).SerializeToString()
    onnx.load_from_string(folded)  # the seeds themselves are valid
    return [exported, folded, conv_bytes]


def _mutate_bytes(data: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(data)
    for _ in range(int(rng.integers(1, 6))):
        kind = int(rng.integers(0, 6))
        pos = int(rng.integers(0, max(len(b), 1)))
        if kind == 0 and b:  # flip bits
            b[pos % len(b)] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1 and b:  # a random byte
            b[pos % len(b)] = int(rng.integers(0, 256))
        elif kind == 2:  # insert bytes (often 0xff: huge varints)
            b[pos:pos] = bytes([0xFF] * int(rng.integers(1, 10)))
        elif kind == 3 and b:  # delete a run
            del b[pos:pos + int(rng.integers(1, 16))]
        elif kind == 4:  # truncate
            b = b[:pos]
        else:  # duplicate a chunk
            b[pos:pos] = b[pos:pos + int(rng.integers(1, 64))]
    return bytes(b)


_HUGE = [0, -1, 1 << 20, 1 << 31, 1 << 40, (1 << 62), -(1 << 62)]


def pick(rng: np.random.Generator, items: list[Any]) -> Any:
    """One of ``items`` (Python objects as they are: NumPy's choice would convert them)."""
    return items[int(rng.integers(0, len(items)))]


def _mutate_proto(data: bytes, rng: np.random.Generator, workdir: str) -> tuple[bytes, str]:
    """A structural mutation: dims, data types, attributes, external data, outputs, metadata."""
    import onnx

    m = onnx.load_from_string(data)
    graph = m.graph
    kind = int(rng.integers(0, 9))
    tensors = list(graph.initializer)
    if kind == 0 and tensors:
        t = tensors[int(rng.integers(0, len(tensors)))]
        if t.dims:
            t.dims[int(rng.integers(0, len(t.dims)))] = pick(rng, _HUGE)
        else:
            t.dims.append(pick(rng, _HUGE))
    elif kind == 1 and tensors:
        tensors[int(rng.integers(0, len(tensors)))].data_type = int(rng.integers(-2, 30))
    elif kind == 2 and graph.node:
        node = graph.node[int(rng.integers(0, len(graph.node)))]
        for a in node.attribute:
            if a.type == onnx.AttributeProto.INT:
                a.i = pick(rng, _HUGE)
            elif a.type == onnx.AttributeProto.INTS and len(a.ints):
                a.ints[int(rng.integers(0, len(a.ints)))] = pick(rng, _HUGE)
            elif a.type == onnx.AttributeProto.FLOAT:
                a.f = pick(rng, [np.nan, np.inf, -1e30, 0.0])
    elif kind == 3 and tensors:  # external data, relative / escaping / absolute / fifo
        t = tensors[int(rng.integers(0, len(tensors)))]
        t.ClearField("raw_data")
        del t.float_data[:]
        del t.int64_data[:]
        t.data_location = onnx.TensorProto.EXTERNAL
        loc = pick(rng, ["w.bin", "../w.bin", "/etc/hostname", "fifo", "zero", "sub/w.bin",
                              "missing.bin", ""])
        t.external_data.add(key="location", value=loc)
        t.external_data.add(key="offset", value=str(pick(rng, [0, 4, -1, 1 << 40])))
        if rng.random() < 0.5:
            t.external_data.add(key="length", value=str(pick(rng, [0, 8, 24, 1 << 40])))
    elif kind == 4:
        del graph.output[:]
    elif kind == 5:  # metadata: deep, long, odd dtypes
        text = pick(rng, ["[" * 5000, '{"a": {"op": 1, "attrs": 2}}', "{" * 40 + "}" * 40,
                               json.dumps({"relu_0": {"op": "relu", "attrs": {"x": {
                                   "__ndarray__": [[1] * 3] * 3, "dtype": "(99,99)f8"}}}}),
                               "not json", json.dumps({"k": {"op": "linear", "attrs": {
                                   "n": {"__tuple__": [1, 2, {"__dtype__": "V8"}]}}}})])
        for p in m.metadata_props:
            if p.key == "torchlean.primitives":
                p.value = text
                break
        else:
            m.metadata_props.add(key="torchlean.primitives", value=text)
    elif kind == 6 and tensors:  # segments, raw data shorter than declared
        t = tensors[int(rng.integers(0, len(tensors)))]
        if rng.random() < 0.5:
            t.segment.begin, t.segment.end = 0, 1
        elif t.raw_data:
            t.raw_data = t.raw_data[: len(t.raw_data) // 2]
    elif kind == 7 and graph.input:  # graph input dims
        dims = graph.input[0].type.tensor_type.shape.dim
        if len(dims):
            dims[0].dim_value = pick(rng, [1 << 20, 1 << 40, 0])
    elif kind == 8 and graph.node:  # node names / op types
        node = graph.node[int(rng.integers(0, len(graph.node)))]
        node.op_type = pick(rng, ["ConstantOfShape", "Range", "Expand", "Loop", "If",
                                  node.op_type + "X"])
    return m.SerializeToString(), f"proto mutation {kind}"


def onnx_case(seeds: list[bytes], rng: np.random.Generator, workdir: str) -> None:
    import torchlean.onnx as tlo

    seed = seeds[int(rng.integers(0, len(seeds)))]
    if rng.random() < 0.5:
        data, _ = _mutate_proto(seed, rng, workdir)
        if rng.random() < 0.3:
            data = _mutate_bytes(data, rng)
    else:
        data = _mutate_bytes(seed, rng)
    if rng.random() < 0.5:
        tlo.load(data)
    else:
        path = os.path.join(workdir, "model.onnx")
        with open(path, "wb") as f:
            f.write(data)
        tlo.load(path)


def _onnx_workdir(workdir: str) -> None:
    with open(os.path.join(workdir, "w.bin"), "wb") as f:
        f.write(np.arange(64, dtype=np.float32).tobytes())
    os.makedirs(os.path.join(workdir, "sub"), exist_ok=True)
    with open(os.path.join(workdir, "sub", "w.bin"), "wb") as f:
        f.write(bytes(256))
    for name, make in (("fifo", lambda p: os.mkfifo(p)),
                       ("zero", lambda p: os.symlink("/dev/zero", p))):
        path = os.path.join(workdir, name)
        if not os.path.lexists(path):
            make(path)


# ---------------------------------------------------------------------------------------------
# Checkpoint tampering


def _checkpoint_seed(workdir: str) -> bytes:
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    model.model_config = {"model": "mlp", "hidden": 4}
    path = os.path.join(workdir, "seed.safetensors")
    tl.save(model, path)
    with open(path, "rb") as f:
        return f.read()


_DTYPES = ["F32", "F64", "I32", "I64", "U8", "BOOL", "F16", "BF16", "XX", "", 3, None]


def _tamper(data: bytes, rng: np.random.Generator) -> bytes:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    keys = [k for k in header if k != "__metadata__"]
    if rng.random() < 0.5:  # drop the checksum: reach the parser and the loaders
        header.get("__metadata__", {}).pop("torchlean.file_sha256", None)
    for _ in range(int(rng.integers(1, 4))):
        kind = int(rng.integers(0, 8))
        key = pick(rng, keys)
        entry = header[key] if isinstance(header.get(key), dict) else {}
        if kind == 0:
            entry["dtype"] = pick(rng, _DTYPES)
        elif kind == 1:
            entry["shape"] = [pick(rng, _HUGE + [1, 2, 3]) for _ in
                              range(int(rng.integers(0, 4)))]
        elif kind == 2:
            entry["data_offsets"] = [pick(rng, _HUGE + [4, 8]) for _ in range(2)]
        elif kind == 3:
            other = header.get(pick(rng, keys))
            if isinstance(other, dict):
                entry["data_offsets"], other["data_offsets"] = (
                    other.get("data_offsets"), entry.get("data_offsets"))
        elif kind == 4:
            meta = header.setdefault("__metadata__", {})
            if isinstance(meta, dict):
                meta[pick(rng, ["config", "format", "torchlean.groups", "class",
                                "torchlean.tree"])] = pick(
                    rng, ["[" * 3000, "{}", "1e999", '{"model": [1]}', "null", '["a", "a.b"]',
                          '["dict", [[["str", "0.weight"], ["tensor", "2.bias"]]]]',
                          '["kind", "optimizer_state", [], [{"params": [-1]}]]',
                          '["list", [["int", "0.bias"]]]', '["tuple", 5]',
                          "torchlean.save/1", '{"model": "mlp", "hidden": 1e308}',
                          '{"model": "mlp", "hidden": -5}',
                          '{"model": "mlp", "hidden": 99999999999}'])
        elif kind == 5:
            header[pick(rng, ["__metadata__", key])] = pick(rng, [None, 1, "x", [], {}])
        elif kind == 6:
            body = body[: int(rng.integers(0, len(body) + 1))]
        else:
            header[key + ".extra"] = dict(entry)
    text = json.dumps(header).encode()
    if rng.random() < 0.2:
        return struct.pack("<Q", pick(rng, [1 << 20, 1 << 40, len(text) + 5, 0])) + text + body
    return struct.pack("<Q", len(text)) + text + body


def checkpoint_case(seed: bytes, rng: np.random.Generator, workdir: str) -> None:
    path = os.path.join(workdir, "ckpt.safetensors")
    with open(path, "wb") as f:
        f.write(_tamper(seed, rng) if rng.random() < 0.9 else _mutate_bytes(seed, rng))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if rng.random() < 0.5:
            tl.load(path)
        else:
            target = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
            tl.load(path, target)


# ---------------------------------------------------------------------------------------------
# torchlean eval on crafted configs (a valid checksum: whoever crafts a file can compute one)


def _eval_seed(workdir: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    from torchlean import checkpoint
    from torchlean.cli import main as cli_main

    path = os.path.join(workdir, "trained.safetensors")
    with open(os.devnull, "w") as quiet:
        saved, sys.stdout = sys.stdout, quiet
        try:
            assert cli_main(["train", "--dataset", "iris", "--epochs", "1", "--save", path]) == 0
        finally:
            sys.stdout = saved
    return checkpoint.read_arrays(path), checkpoint.read_metadata(path)


_CONFIG_VALUES: list[Any] = [1e308, -1, 0, "x", [10 ** 9], [[1]], 10 ** 30, None, True, 2.5,
                             [16] * 40, [], {"a": 1}, 1 << 40, [1 << 62, 1], -(10 ** 30)]


def eval_case(seed: tuple[dict[str, np.ndarray], dict[str, str]], rng: np.random.Generator,
              workdir: str) -> None:
    from torchlean.cli import main as cli_main

    arrays, metadata = seed
    config = json.loads(metadata["config"])
    settings = json.loads(metadata.get("settings", "{}"))
    for _ in range(int(rng.integers(1, 3))):
        target = config if rng.random() < 0.8 else settings
        key = pick(rng, [*config, "seed", "model", "d_model", "image_shape"])
        target[key] = pick(rng, _CONFIG_VALUES + [pick(rng, ["mlp", "cnn", "transformer"])])
    text = json.dumps(config)
    if rng.random() < 0.1:
        text = "[" * int(rng.integers(1000, 100_000)) + text
    meta = {**metadata, "config": text, "settings": json.dumps(settings)}
    path = os.path.join(workdir, "crafted.safetensors")
    tl.save(dict(arrays), path, metadata=meta)
    saved_out, saved_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    try:
        code = cli_main(["eval", "--checkpoint", path])
    finally:
        err = sys.stderr.getvalue()
        sys.stdout, sys.stderr = saved_out, saved_err
    # The command turns any exception into one line; these lines are bugs it caught, not
    # checks that named the problem.
    caught = ("Traceback", "internal error", "MemoryError", "RecursionError", "OverflowError")
    if any(text in err for text in caught) or code not in (0, 2):
        raise AssertionError(f"torchlean eval exited {code}: {err[-300:]}")
    if code == 2:  # refused with one message: count it as the named error it printed
        raise TorchLeanError(err.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------


def _runner(kind: str, workdir: str) -> Callable[[np.random.Generator], Any] | None:
    """The case function of ``kind`` (``None``: nothing to run)."""
    if kind == "onnx":
        _onnx_workdir(workdir)
        seeds = _seed_models(workdir)
        return functools.partial(onnx_case, seeds, workdir=workdir)
    if kind == "checkpoint":
        return functools.partial(checkpoint_case, _checkpoint_seed(workdir), workdir=workdir)
    if kind == "eval":
        return functools.partial(eval_case, _eval_seed(workdir), workdir=workdir)
    if kind == "tensor":
        if not TENSOR_CASES:
            return None
        return lambda r: TENSOR_CASES[int(r.integers(0, len(TENSOR_CASES)))](r)
    raise SystemExit(f"unknown kind {kind!r}")


def main() -> int:
    kind, seed, count, workdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    os.makedirs(workdir, exist_ok=True)
    run = _runner(kind, workdir)
    if run is None:
        return 0
    for i in range(count):
        print(json.dumps({"start": i}), flush=True)
        rng = np.random.default_rng([seed, i])
        try:
            run(rng)
            outcome = "ok"
        except TorchLeanError as exc:
            outcome = f"named:{type(exc).__name__}"
        except Exception as exc:  # noqa: BLE001  (what the test counts)
            last = traceback.extract_tb(exc.__traceback__)[-1]
            outcome = (f"bare:{type(exc).__name__}: {str(exc)[:200]} "
                       f"[{os.path.basename(last.filename)}:{last.lineno}]")
        print(json.dumps({"case": i, "outcome": outcome}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
