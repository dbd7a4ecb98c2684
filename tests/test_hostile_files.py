"""Files from outside are hostile (issue 25, items 1-4 and the importer part of 7).

ONNX: external data only beside a model loaded from a path; sizes declared in the file checked
before anything is allocated (initialisers, folded ``ConstantOfShape``/``Range``/``Expand``, the
``torchlean.primitives`` metadata, decoded lazily and bounded); the importer's odd inputs
(segments, unknown data types, non-UTF-8 names, no outputs) give named errors.
Checkpoints: the checksum covers header, metadata and data (swapped offsets, a changed dtype or
shape, an edited config are refused); older files load with a warning.
Both: only regular files are opened (a FIFO or ``/dev/zero`` never blocks or is read).
Anything that could block runs in a subprocess with a generous timeout (a hang fails the test).
"""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn
from torchlean.core import safe_files
from torchlean.core.errors import CheckpointError, TorchLeanError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import torchlean.onnx as tlo  # noqa: E402
from torchlean.onnx import limits  # noqa: E402
from torchlean.onnx.errors import (  # noqa: E402
    OnnxError,
    OnnxExternalDataError,
    OnnxLimitError,
)

SRC = Path(__file__).resolve().parent.parent / "src"
HANG_GUARD_S = 120  # only turns a hang into a failure; never reached by a passing run


def _model(nodes: list, inits: tuple = (), outs: list | None = None,
           inputs: list | None = None, metadata: dict[str, str] | None = None,
           functions: list | None = None) -> onnx.ModelProto:
    g = h.make_graph(nodes, "g", inputs or [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 3])] if outs is None else outs,
                     initializer=list(inits))
    opsets = [h.make_opsetid("", 17)] + ([h.make_opsetid("torchlean", 1)] if functions else [])
    m = h.make_model(g, opset_imports=opsets, functions=functions or [])
    for k, v in (metadata or {}).items():
        m.metadata_props.add(key=k, value=v)
    return m


def _add_w(w: np.ndarray | T, **kw: object) -> onnx.ModelProto:
    t = w if isinstance(w, T) else nh.from_array(w, "w")
    return _model([h.make_node("Add", ["x", "w"], ["y"])], (t,), **kw)


def _external(tmp: Path, location: str, name: str = "m.onnx", data: bytes | None = None,
              offset: int = 0, length: int | None = None) -> tuple[Path, np.ndarray]:
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = nh.from_array(w, "w")
    t.ClearField("raw_data")
    t.data_location = T.EXTERNAL
    t.external_data.add(key="location", value=location)
    if offset:
        t.external_data.add(key="offset", value=str(offset))
    if length is not None:
        t.external_data.add(key="length", value=str(length))
    if data is not None:
        (tmp / location).write_bytes(data)
    path = tmp / name
    path.write_bytes(_add_w(t).SerializeToString())
    return path, w


# ---------------------------------------------------------------------------------------------
# 1. External data


def test_external_data_beside_the_model_is_read(tmp_path: Path) -> None:
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    path, _ = _external(tmp_path, "w.bin", data=b"junk" + w.tobytes(), offset=4)
    model = tlo.load(path)
    np.testing.assert_array_equal(model.parameters["w"].value, w)
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(model.run(x)[0], x + w)


@pytest.mark.parametrize("as_proto", [False, True])
def test_external_data_is_refused_for_bytes_and_protos(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_proto: bool) -> None:
    # The case: a relative location (no '..') read from the current directory.
    secret = np.full(6, 7.0, np.float32).tobytes()
    path, _ = _external(tmp_path, "secret.bin", data=secret)
    monkeypatch.chdir(tmp_path)
    source = path.read_bytes()
    if as_proto:
        source = onnx.load_from_string(source)
    with pytest.raises(OnnxExternalDataError, match="secret.bin.*read only for a model loaded "
                                                     "from a path"):
        tlo.load(source)


@pytest.mark.parametrize("location", ["../w.bin", "sub/w.bin", "/etc/passwd", ".", ""])
def test_external_data_outside_the_model_directory_is_refused(tmp_path: Path,
                                                              location: str) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.bin").write_bytes(bytes(24))
    (tmp_path / "w.bin").write_bytes(bytes(24))
    model_dir = tmp_path / "sub"
    path, _ = _external(model_dir, location)
    with pytest.raises(OnnxExternalDataError, match="not a file name beside the model"):
        tlo.load(path)


def test_external_data_symlink_out_of_the_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.bin"
    outside.write_bytes(bytes(24))
    (tmp_path / "m").mkdir()
    os.symlink(outside, tmp_path / "m" / "w.bin")
    path, _ = _external(tmp_path / "m", "w.bin")
    with pytest.raises(OnnxExternalDataError, match="leads out of the model's directory"):
        tlo.load(path)


def test_external_data_ranges_and_lengths_are_checked(tmp_path: Path) -> None:
    path, _ = _external(tmp_path, "w.bin", data=bytes(24), offset=8)  # 16 bytes left, 24 needed
    with pytest.raises(OnnxExternalDataError, match=r"bytes 8\.\.32 asked for, the file holds 24"):
        tlo.load(path)
    path, _ = _external(tmp_path, "v.bin", name="n.onnx", data=bytes(24), length=12)
    with pytest.raises(OnnxExternalDataError, match="length 12 does not match its shape"):
        tlo.load(path)


def test_external_data_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "w.bin")
    path, _ = _external(tmp_path, "w.bin")
    _no_hang(f"import torchlean.onnx as o; o.load({str(path)!r})",
             "OnnxExternalDataError", "is a FIFO")


# ---------------------------------------------------------------------------------------------
# 2. Sizes declared in the file


def test_constant_of_shape_is_capped_before_allocating() -> None:
    shape = nh.from_array(np.array([1 << 19, 1 << 19], np.int64), "s")  # 256 GiB of float32
    m = _model([h.make_node("ConstantOfShape", ["s"], ["c"]),
                h.make_node("Shape", ["c"], ["y"])], (shape,),
               outs=[h.make_tensor_value_info("y", T.INT64, [2])])
    with pytest.raises(OnnxLimitError, match=r"ConstantOfShape.*274877906944 entries"):
        tlo.load(m.SerializeToString())


def test_range_is_capped_before_allocating() -> None:
    consts = [nh.from_array(np.array(v, np.int64), n) for v, n in
              ((0, "a"), (1 << 43, "b"), (1, "d"))]  # 8 Ti entries
    m = _model([h.make_node("Range", ["a", "b", "d"], ["r"]),
                h.make_node("Shape", ["r"], ["y"])], tuple(consts),
               outs=[h.make_tensor_value_info("y", T.INT64, [1])])
    with pytest.raises(OnnxLimitError, match=r"Range.*8796093022208 entries"):
        tlo.load(m.SerializeToString())
    zero = [nh.from_array(np.array(v, np.int64), n) for v, n in ((0, "a"), (5, "b"), (0, "d"))]
    m = _model([h.make_node("Range", ["a", "b", "d"], ["r"]),
                h.make_node("Shape", ["r"], ["y"])], tuple(zero),
               outs=[h.make_tensor_value_info("y", T.INT64, [1])])
    with pytest.raises(OnnxError, match="delta is 0"):
        tlo.load(m.SerializeToString())


def test_broadcast_folding_is_capped() -> None:
    a = nh.from_array(np.zeros((1 << 13, 1), np.int64), "a")
    b = nh.from_array(np.zeros((1, 1 << 13), np.int64), "b")  # 64 Mi entries when added
    m = _model([h.make_node("Add", ["a", "b"], ["c"]), h.make_node("Shape", ["c"], ["y"])],
               (a, b), outs=[h.make_tensor_value_info("y", T.INT64, [2])])
    with pytest.raises(OnnxLimitError, match="67108864 entries"):
        tlo.load(m.SerializeToString())


def test_initialiser_declaring_more_than_it_holds_is_refused() -> None:
    t = nh.from_array(np.ones(6, np.float32), "w")
    del t.dims[:]
    t.dims.extend([1 << 20, 1 << 20])
    with pytest.raises(OnnxError):  # ONNX's checker or our limit, never an allocation
        tlo.load(_add_w(t).SerializeToString())
    t2 = T(name="w", data_type=T.FLOAT, dims=[1 << 40, 1 << 40])
    with pytest.raises(OnnxLimitError, match="more than the 2147483648 accepted"):
        limits.check_tensor(t2, "test")
    t3 = nh.from_array(np.ones((2, 3), np.float32), "w")
    t3.raw_data = t3.raw_data[:8]
    with pytest.raises(OnnxLimitError, match="holds 8 bytes, expected 24"):
        limits.check_tensor(t3, "test")


def _metadata_model(text: str) -> onnx.ModelProto:
    body = h.make_node("Relu", ["a"], ["b"])
    fn = h.make_function("torchlean", "relu_0", ["a"], ["b"], [body],
                         [h.make_opsetid("", 17)])
    return _model([h.make_node("relu_0", ["x"], ["y"], domain="torchlean")],
                  metadata={"torchlean.primitives": text}, functions=[fn])


def test_metadata_nesting_and_length_are_limited() -> None:
    with pytest.raises(OnnxLimitError, match="nests lists and objects more than 32 deep"):
        tlo.load(_metadata_model("[" * 100_000 + "]" * 100_000).SerializeToString())
    with pytest.raises(OnnxLimitError, match="characters, more than"):
        tlo.load(_metadata_model(" " * (limits.MAX_METADATA_CHARS + 1)).SerializeToString())


@pytest.mark.parametrize("dtype", ["(1000,1000,1000)f8", "V1000000000", "O", "U100000000"])
def test_metadata_dtypes_are_plain_numbers(dtype: str) -> None:
    text = json.dumps({"relu_0": {"op": "relu", "attrs": {
        "a": {"__ndarray__": [], "dtype": dtype}}}})
    with pytest.raises(OnnxError, match="metadata dtype"):
        tlo.load(_metadata_model(text).SerializeToString())


def test_metadata_is_decoded_only_when_a_torchlean_call_needs_it() -> None:
    m = _model([h.make_node("Relu", ["x"], ["y"])],
               metadata={"torchlean.primitives": "[" * 100_000})
    model = tlo.load(m.SerializeToString())  # never decoded: no torchlean function node
    assert model.run(np.full((2, 3), -1.0, np.float32))[0].max() == 0.0


def test_a_function_calling_itself_is_refused() -> None:
    body = h.make_node("loop_0", ["a"], ["b"], domain="mine")
    fn = h.make_function("mine", "loop_0", ["a"], ["b"], [body], [h.make_opsetid("", 17)])
    g = h.make_graph([h.make_node("loop_0", ["x"], ["y"], domain="mine")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("mine", 1)],
                     functions=[fn])
    with pytest.raises(OnnxError):
        tlo.load(m)


# ---------------------------------------------------------------------------------------------
# 7. The importer's odd inputs: named errors, never a bare exception


def test_segmented_tensor_is_named() -> None:
    t = nh.from_array(np.ones((2, 3), np.float32), "w")
    t.segment.begin, t.segment.end = 0, 3
    with pytest.raises(OnnxError, match="segment"):
        tlo.load(_add_w(t).SerializeToString())


def test_unknown_data_type_is_named() -> None:
    t = nh.from_array(np.ones((2, 3), np.float32), "w")
    t.data_type = 99
    with pytest.raises(OnnxError, match="99"):
        tlo.load(_add_w(t).SerializeToString())
    with pytest.raises(OnnxError, match="unknown data type 99"):
        limits.check_tensor(t, "test")


def test_non_utf8_names_are_named() -> None:
    m = _model([h.make_node("Relu", ["x"], ["AAAA"], name="BBBB"),
                h.make_node("Identity", ["AAAA"], ["y"])])
    data = m.SerializeToString().replace(b"AAAA", b"\xff\xfe\xfd\xfc")
    x = np.full((2, 3), -1.0, np.float32)
    try:  # a value name is only an identifier: loading may work, or say why it does not
        assert tlo.load(data).run(x)[0].max() == 0.0
    except OnnxError:
        pass
    attr = h.make_node("Pad", ["x", "p"], ["y"])
    attr.attribute.add(name="mode", type=onnx.AttributeProto.STRING, s=b"\xff\xfe")
    pads = nh.from_array(np.zeros(4, np.int64), "p")
    with pytest.raises(OnnxError, match="not UTF-8"):
        tlo.load(_model([attr], (pads,)))


def test_no_outputs_is_named() -> None:
    with pytest.raises(OnnxError, match="has no outputs"):
        tlo.load(_model([h.make_node("Relu", ["x"], ["y"])], outs=[]))


# ---------------------------------------------------------------------------------------------
# 4. Special files never block and are never read


def _no_hang(code: str, *expected: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get(
        "PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, env=env)
    for text in expected:
        assert text in done.stderr + done.stdout, done.stderr
    return done.stderr


def test_load_of_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "ckpt.safetensors"
    os.mkfifo(fifo)
    _no_hang(f"import torchlean as tl; tl.load({str(fifo)!r})", "CheckpointError", "is a FIFO")
    _no_hang(f"import torchlean.onnx as o; o.load({str(fifo)!r})", "OnnxError", "is a FIFO")


def test_eval_of_a_fifo_checkpoint_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "ckpt.safetensors"
    os.mkfifo(fifo)
    err = _no_hang(f"import sys; from torchlean.cli import main; "
                   f"sys.exit(main(['eval', '--checkpoint', {str(fifo)!r}]))", "is a FIFO")
    assert "Traceback" not in err


@pytest.mark.parametrize("link", [False, True])
def test_devices_are_refused(tmp_path: Path, link: bool) -> None:
    path = "/dev/zero"
    if link:
        os.symlink(path, tmp_path / "zero.safetensors")
        path = str(tmp_path / "zero.safetensors")
    with pytest.raises(CheckpointError, match="is a character device; only regular files"):
        tl.load(path)
    with pytest.raises(OnnxError, match="is a character device"):
        tlo.load(path)


def test_reads_stop_at_the_declared_size(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(100))
    assert len(safe_files.read_regular(str(path), "f", 100)) == 100
    with pytest.raises(CheckpointError, match="100 bytes, more than the 99"):
        safe_files.read_regular(str(path), "f", 99)


# ---------------------------------------------------------------------------------------------
# 3. The checkpoint checksum covers header, metadata and data


def _saved(tmp_path: Path) -> tuple[Path, nn.Module]:
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    model.model_config = {"model": "mlp", "hidden": 3}
    path = tmp_path / "m.safetensors"
    tl.save(model, path)
    return path, model


def _edit_header(path: Path, edit: object) -> None:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    edit(header)  # type: ignore[operator]
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (n - len(text))  # same length where it fits (the data offsets are relative)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n:])


def _swap_offsets(header: dict) -> None:
    header["0.weight"]["data_offsets"], header["1.weight"]["data_offsets"] = (
        header["1.weight"]["data_offsets"], header["0.weight"]["data_offsets"])


def _to_i32(header: dict) -> None:
    header["0.weight"]["dtype"] = "I32"


def _transpose(header: dict) -> None:
    header["0.bias"]["shape"] = [1, 3]


def _config(header: dict) -> None:
    header["__metadata__"]["config"] = header["__metadata__"]["config"].replace("3", "4")


@pytest.mark.parametrize("edit", [_swap_offsets, _to_i32, _transpose, _config])
def test_edited_headers_are_refused(tmp_path: Path, edit: object) -> None:
    path, model = _saved(tmp_path)
    assert tl.load(path)  # loads before the edit
    _edit_header(path, edit)
    with pytest.raises(CheckpointError, match="does not match its SHA-256"):
        tl.load(path)
    with pytest.raises(CheckpointError, match="does not match its SHA-256"):
        tl.load(path, model)


def test_duplicate_header_keys_are_refused(tmp_path: Path) -> None:
    path, _ = _saved(tmp_path)
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    head = data[8:8 + n].decode()
    twice = head.rstrip()[:-1] + ',"__metadata__":{}}'
    path.write_bytes(struct.pack("<Q", len(twice)) + twice.encode() + data[8 + n:])
    with pytest.raises(CheckpointError, match="names '__metadata__' twice"):
        tl.load(path)


def test_older_files_with_a_data_checksum_load_with_a_warning(tmp_path: Path) -> None:
    import hashlib

    from safetensors.numpy import save

    arrays = {"w": np.arange(6, dtype=np.float32)}
    probe = save(arrays, metadata={"torchlean.sha256": "0" * 64})
    (n,) = struct.unpack("<Q", probe[:8])
    digest = hashlib.sha256(probe[8 + n:]).hexdigest()
    path = tmp_path / "old.safetensors"
    path.write_bytes(save(arrays, metadata={"torchlean.sha256": digest}))
    with pytest.warns(UserWarning, match="older torchlean.*header and metadata were not"):
        loaded = tl.load(path)
    np.testing.assert_array_equal(loaded["w"], arrays["w"])
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="data section does not match"):
        tl.load(path)


def test_deeply_nested_group_metadata_is_named(tmp_path: Path) -> None:
    path = tmp_path / "g.safetensors"
    tl.save({"a": {"w": np.ones(2, np.float32)}}, path)
    deep = "[" * 100_000 + "]" * 100_000
    tl.save({"a.w": np.ones(2, np.float32)}, path, metadata={"torchlean.groups": deep})
    with pytest.raises(CheckpointError, match="must be a JSON list of key prefixes"):
        tl.load(path)


def test_export_refuses_opsets_outside_its_range() -> None:
    from torchlean.onnx.exporter import MAX_OPSET, MIN_OPSET

    model = nn.Sequential(nn.Linear(2, 2))
    assert MAX_OPSET <= onnx.defs.onnx_opset_version()  # onnx (and onnxruntime) know it
    assert tlo.export(model, None, [(1, 2)], opset=MAX_OPSET).opset_import[0].version == \
        MAX_OPSET
    for bad in (MIN_OPSET - 1, MAX_OPSET + 1, 99999):
        with pytest.raises(OnnxError, match=f"opset must be an int from {MIN_OPSET} to "
                                            f"{MAX_OPSET}"):
            tlo.export(model, None, [(1, 2)], opset=bad)


def test_eval_of_an_edited_config_fails_without_traceback(tmp_path: Path) -> None:
    from torchlean.cli import main

    path = tmp_path / "c.safetensors"
    assert main(["train", "--dataset", "iris", "--epochs", "1", "--save", str(path)]) == 0

    def edit(header: dict) -> None:
        config = header["__metadata__"]["config"]
        k = next(i for i, c in enumerate(config) if c.isdigit())  # one digit of the config
        header["__metadata__"]["config"] = config[:k] + str((int(config[k]) + 1) % 10) + \
            config[k + 1:]

    _edit_header(path, edit)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["eval", "--checkpoint", str(path)]) != 0


def test_every_error_here_is_a_torchlean_error() -> None:
    for cls in (OnnxLimitError, OnnxExternalDataError, OnnxError, CheckpointError):
        assert issubclass(cls, TorchLeanError)


@pytest.mark.parametrize("edit,fragment", [
    ({"seed": 1e308}, "seed must hold integers"),          # was OverflowError
    ({"seed": "abc"}, "seed must hold integers"),          # was ValueError
    ({"hidden": [10 ** 9]}, "hidden must hold integers"),  # was MemoryError
    ({"hidden": [60000, 60000, 60000]}, "parameters, more than"),
    ({"in_features": True}, "in_features must hold integers"),
    ({"model": ["mlp"]}, "unknown model"),
    (None, "nested too deeply"),                           # was RecursionError
])
def test_eval_of_crafted_configs_is_refused_by_name(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    edit: dict | None, fragment: str) -> None:
    # Whoever crafts a file can also compute its checksum: the config itself is checked.
    from torchlean import checkpoint
    from torchlean.cli import main

    path = tmp_path / "c.safetensors"
    assert main(["train", "--dataset", "iris", "--epochs", "1", "--save", str(path)]) == 0
    metadata = checkpoint.read_metadata(path)
    config = json.loads(metadata["config"])
    text = "[" * 100_000 + "]" * 100_000 if edit is None else json.dumps({**config, **edit})
    crafted = tmp_path / "crafted.safetensors"
    tl.save(checkpoint.read_arrays(path), crafted, metadata={**metadata, "config": text})
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(crafted)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err, err


@pytest.mark.parametrize("link", [False, True])
def test_a_save_never_replaces_a_device_or_fifo(tmp_path: Path, link: bool) -> None:
    """Renaming over a device node is allowed to root: a save through a link to one (or to a
    FIFO) must refuse instead of destroying it."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    targets = [str(fifo)]
    if link:
        for name, dest in (("zero.safetensors", "/dev/zero"), ("pipe.safetensors", str(fifo))):
            os.symlink(dest, tmp_path / name)
        targets = [str(tmp_path / "zero.safetensors"), str(tmp_path / "pipe.safetensors")]
    model = tl.nn.Linear(2, 2)
    for target in targets:
        with pytest.raises(CheckpointError, match="only a regular file can be replaced"):
            tl.save(model, target)
    assert os.path.exists("/dev/zero") and not os.path.isfile("/dev/zero")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_cli_outputs_never_replace_a_device(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from torchlean.cli import main

    link = tmp_path / "out.json"
    os.symlink("/dev/zero", link)
    assert main(["train", "--epochs", "1", "--json", str(link)]) == 2
    assert "is a character device" in capsys.readouterr().err
    assert not os.path.isfile("/dev/zero")
