"""Checkpoints: safetensors files for modules, parameter lists and optimiser state.

``save(path, obj)`` flattens ``obj`` into named arrays and writes them with ``safetensors.numpy``
(imported lazily, so the core package needs only NumPy); ``load(path, into)`` reads them back into
an object of the same structure. The format holds raw arrays and a JSON header only, so loading
never unpickles or executes anything.

PyTorch's order works too: ``save(obj, path)`` (the call is told apart by which argument is the
path: a ``str`` or ``os.PathLike``), and ``load(path)`` with no target returns the state dict
``{name: array}`` (what ``model.load_state_dict`` takes); a saved dict of dicts or objects, such as
``{"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3}``, comes back nested the
same way (the prefixes where nested dicts began are kept in the metadata; lists come back as
their flat ``"name.0"`` keys and numbers as 0-d arrays). Saving an ``nn.Module`` in either order
records ``SAVE_FORMAT``, its class name and, when the module carries a ``model_config`` dict
(``torchlean.models.build`` sets it), that config as JSON in the metadata, so ``torchlean eval
--checkpoint`` can rebuild a model saved with ``tl.save(model, path)``.

What can be saved or loaded into (``into`` must have the structure that was saved):

- anything with ``state_dict()`` / ``load_state_dict()`` (modules, optimisers, parameter lists):
  its state dict's keys;
- a list or tuple of ``Param`` (or a list of arrays): keys ``"0"``, ``"1"``, ...;
- a dict of arrays or Params: its keys (a bare Param or array has no name: wrap it in a dict);
- a dict of named objects, e.g. ``{"model": model, "optim": opt}``: each object's keys
  prefixed with ``"model."``, ``"optim."`` (nesting works the same way at every level).

Writes are atomic: the file is written to a temporary file in the same directory, flushed and
fsynced, moved over ``path`` with ``os.replace``, and the directory is fsynced. If anything fails
the temporary file is removed and an existing file at ``path`` is untouched. A save killed
before it finishes (``kill -9``) leaves ``.<name>.<pid>.<random>.tmp``: the next save or load of
that path removes it once process ``<pid>`` is gone. Saving to a symlink writes the file it points
to (the link stays). The data section's SHA-256 is stored in the metadata and verified on every
load; files without it (older ones, other tools) load with a warning (``safe_files``).

Device data: saving reads every device array back explicitly (``to_host``; a device parameter's
``value``, an optimiser's ``state_dict``); loading into device parameters or optimiser state
uploads explicitly and leaves them on the device (``Param.assign`` keeps a parameter where it
lives). ``load(path, map_location="cuda")`` returns the state dict uploaded to the device.

A bare array or tensor can be saved (``save(tensor, path)``, as torch): it is stored under
the key ``"tensor"`` and ``load(path)`` returns it alone. File objects work as in torch:
``save(obj, f)`` writes the whole file with one ``f.write``
(``f`` opened in binary mode, e.g. ``io.BytesIO`` or ``open(name, "wb")``; atomicity is then the
caller's), and ``load(f)`` reads ``f.read()`` and checks it exactly as a file on disk.

Loads check the file against ``into`` first (key set, shapes, dtypes) and report every mismatch
in one ``CheckpointError`` naming the file; nothing in ``into`` changes unless everything fits.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .core import safe_files
from .core.backend import check_device, namespace_for, namespace_of, to_device, to_host
from .core.errors import CheckpointError
from .engine.tensor import Tensor, tensor

__all__ = ["SAVE_FORMAT", "describe_mismatches", "load", "read_arrays", "read_metadata", "save"]

SAVE_FORMAT = "torchlean.save/1"
"""``metadata["format"]`` of a module saved by ``save``: its state-dict keys, unprefixed."""
GROUPS_KEY = "torchlean.groups"
"""Metadata key: JSON list of the key prefixes where a nested dict or state dict began."""

SINGLE_KEY = "torchlean.single"
"""Metadata key: the one array's key when a bare array or tensor was saved (``load`` returns
that array, as ``torch.load`` returns a saved tensor)."""

_INSTALL_HINT = "safetensors is not installed (pip install safetensors, or torchlean[examples])"


def _safetensors() -> Any:
    try:
        import safetensors.numpy as st_numpy
    except ImportError:
        raise CheckpointError(f"checkpoint: {_INSTALL_HINT}") from None
    return st_numpy


def _is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray | np.generic) or hasattr(x, "__array_namespace__")


def _is_tensor(x: Any) -> bool:
    """A ``tl.Tensor`` (a ref that holds its value): saved as its detached value."""
    return hasattr(x, "owner") and callable(getattr(x, "detach", None)) and callable(
        getattr(x, "numpy", None))


def _host(x: Any) -> Any:
    """``x``'s value on the host (a device tensor's copied there: a state dict's entries share
    the parameters' storage, wherever it lives)."""
    if _is_tensor(x):
        value = getattr(x, "array", None)
        return to_host(value) if value is not None else x.detach().numpy()
    return to_host(x)


def _is_param(x: Any) -> bool:
    return hasattr(x, "assign") and hasattr(x, "value") and hasattr(x, "grad")


def _has_state(x: Any) -> bool:
    return callable(getattr(x, "state_dict", None)) and callable(getattr(x, "load_state_dict",
                                                                         None))


def _join(prefix: str, key: Any) -> str:
    if not isinstance(key, str):
        raise CheckpointError(f"checkpoint: keys must be strings, found {key!r}")
    return f"{prefix}.{key}" if prefix else key


def _flatten(obj: Any, prefix: str, out: dict[str, np.ndarray],
             loaders: list[tuple[str, Any, list[str]]] | None = None,
             groups: list[str] | None = None) -> None:
    """Add ``obj``'s arrays (host copies or views) to ``out`` under ``prefix``.

    ``loaders`` (when given) collects ``(key, target, keys)`` for every place a load writes to:
    an object with ``load_state_dict`` (``keys`` its flattened keys), a Param, a ``(container,
    slot)`` pair for an array held in a dict or list, or ``None`` where nothing can be written
    (an array inside a tuple).
    """

    def add(key: str, value: Any) -> None:
        if not key:
            raise CheckpointError("checkpoint: a bare array or Param has no name; "
                                  "wrap it in a dict, e.g. {'w': w}")
        if key in out:
            raise CheckpointError(f"checkpoint: two entries flatten to the key {key!r}")
        out[key] = np.asarray(_host(value))

    def leaf(key: str, value: Any, target: Any) -> None:
        add(key, value)
        if loaders is not None:
            loaders.append((key, target, [key]))

    if groups is not None and prefix and (_has_state(obj) or isinstance(obj, Mapping)):
        groups.append(prefix)  # a nested dict (or state dict) starts here
    if _has_state(obj):
        state = obj.state_dict()
        if not isinstance(state, Mapping):
            raise CheckpointError(f"checkpoint: {type(obj).__name__}.state_dict() returned a "
                                  f"{type(state).__name__}, expected a dict of arrays")
        names = [_join(prefix, key) for key in state]
        for name, value in zip(names, state.values(), strict=True):
            add(name, value)
        if loaders is not None:
            loaders.append((prefix, obj, names))
    elif _is_param(obj):
        leaf(prefix, obj.value, obj)
    elif _is_scalar_or_array(obj):
        leaf(prefix, obj, None)
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            if _is_scalar_or_array(value):
                leaf(_join(prefix, key), value, (obj, key))
            else:
                _flatten(value, _join(prefix, key), out, loaders, groups)
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            if _is_scalar_or_array(value) and isinstance(obj, list):
                leaf(_join(prefix, str(i)), value, (obj, i))
            else:
                _flatten(value, _join(prefix, str(i)), out, loaders, groups)
    else:
        raise CheckpointError(f"checkpoint: cannot save or load a {type(obj).__name__} "
                              f"(at {prefix or 'top level'}): expected an object with "
                              "state_dict()/load_state_dict(), a Param, a list of Params, "
                              "or a dict of arrays or named objects")


def _is_scalar_or_array(x: Any) -> bool:
    return _is_array(x) or _is_tensor(x) or isinstance(x, int | float | bool)


def flatten(obj: Any) -> dict[str, np.ndarray]:
    """The flat ``{key: host array}`` view of ``obj`` that ``save`` writes."""
    out: dict[str, np.ndarray] = {}
    _flatten(obj, "", out)
    return out


def describe_mismatches(expected: Mapping[str, Any], found: Mapping[str, Any]) -> list[str]:
    """One line per difference in key set, shape or dtype between two flat array dicts."""
    problems: list[str] = []
    missing = [k for k in expected if k not in found]
    unexpected = [k for k in found if k not in expected]
    if missing:
        problems.append(f"missing keys: {', '.join(sorted(missing))}")
    if unexpected:
        problems.append(f"unexpected keys: {', '.join(sorted(unexpected))}")
    for key in expected:
        if key not in found:
            continue
        want, got = expected[key], found[key]
        if tuple(want.shape) != tuple(got.shape):
            problems.append(f"{key}: shape mismatch: expected {tuple(want.shape)}, "
                            f"found {tuple(got.shape)}")
        if np.dtype(want.dtype) != np.dtype(got.dtype):
            problems.append(f"{key}: dtype mismatch: expected {np.dtype(want.dtype).name}, "
                            f"found {np.dtype(got.dtype).name}")
    return problems


def _check_metadata(metadata: Any, path: str) -> dict[str, str] | None:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise CheckpointError(f"checkpoint {path}: metadata must be a dict of str to str "
                              "(serialise configs with json.dumps)")
    return dict(metadata)


def _fsync_directory(directory: str) -> None:
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _file_mode(path: str) -> int:
    try:
        return os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _is_path(x: Any) -> bool:
    return isinstance(x, str | os.PathLike)


def _is_writer(x: Any) -> bool:
    """A binary file object to save into (torch's ``save(obj, f)``)."""
    return not _is_path(x) and callable(getattr(x, "write", None))


def _is_reader(x: Any) -> bool:
    """A binary file object to load from (torch's ``load(f)``)."""
    return not _is_path(x) and callable(getattr(x, "read", None))


def _file_label(f: Any) -> str:
    """How messages name a file object: its name when it has one."""
    name = getattr(f, "name", None)
    return f"<file object {name}>" if isinstance(name, str) else f"<{type(f).__name__}>"


def _save_order(first: Any, second: Any) -> tuple[str, Any, Any]:
    """``(path or label, obj, file object or None)`` from ``save(path, obj)`` or torch's
    ``save(obj, path)`` / ``save(obj, f)``."""
    if _is_path(first) and _is_path(second):
        raise CheckpointError(f"save: both arguments are paths ({first!r}, {second!r}); call "
                              "save(obj, path) (torch's order) or save(path, obj)")
    if _is_path(first):
        return os.fspath(first), second, None
    if _is_path(second):
        return os.fspath(second), first, None
    if _is_writer(second):
        return _file_label(second), first, second
    raise CheckpointError(f"save: expected save(obj, path) (torch's order) or save(path, obj) "
                          f"with the path a str or os.PathLike, or save(obj, f) with f a binary "
                          f"file object; found ({type(first).__name__}, "
                          f"{type(second).__name__})")


def _module_metadata(obj: Any, path: str) -> dict[str, str]:
    """What a saved module records about itself: format, class and (if known) its config."""
    if not (_has_state(obj) and callable(getattr(obj, "named_parameters", None))):
        return {}
    meta = {"format": SAVE_FORMAT, "class": type(obj).__name__}
    config = getattr(obj, "model_config", None)
    if isinstance(config, Mapping):
        try:
            meta["config"] = json.dumps(dict(config))
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {path}: the module's model_config is not "
                                  f"JSON-serialisable ({exc})") from None
    return meta


def save(obj_or_path: Any, path_or_obj: Any, metadata: Mapping[str, str] | None = None
         ) -> None:
    """Write an object to a path as safetensors, atomically (see the module doc).

    Both orders work: ``save(obj, path)`` (torch's) and ``save(path, obj)``; the path is the
    ``str`` / ``os.PathLike`` argument. ``metadata`` is optional text stored in the header
    (``read_metadata`` returns it); for a module it is added to what the module records
    (``format``, ``class``, ``config``), and its own keys win.
    """
    path, obj, fileobj = _save_order(obj_or_path, path_or_obj)
    meta = _check_metadata(metadata, path)
    recorded = _module_metadata(obj, path)
    if recorded:
        meta = {**recorded, **(meta or {})}
    # safetensors writes an array's buffer as if it were C-ordered: copy the others first.
    # (np.asarray(order="C"), not np.ascontiguousarray, which turns 0-d arrays into shape (1,).)
    flat: dict[str, np.ndarray] = {}
    groups: list[str] = []
    if _is_array(obj) or _is_tensor(obj) or _is_param(obj):  # torch.save(tensor, f)
        flat["tensor"] = np.asarray(_host(obj.value if _is_param(obj) else obj))
        meta = {SINGLE_KEY: "tensor", **(meta or {})}
    else:
        _flatten(obj, "", flat, groups=groups)
    if groups:  # so load(path) can give back {"model": {...}, "optim": {...}} as torch does
        meta = {GROUPS_KEY: json.dumps(groups), **(meta or {})}
    tensors = {key: np.asarray(value, order="C") for key, value in flat.items()}
    st_numpy = _safetensors()
    try:
        payload = st_numpy.save(tensors, metadata=safe_files.metadata_with_checksum_slot(meta))
    except Exception as exc:  # safetensors rejects e.g. object dtypes with its own errors
        raise CheckpointError(f"checkpoint {path}: cannot serialise ({exc})") from exc
    payload = safe_files.fill_checksum(payload, path)  # SHA-256 of the data, checked on load
    if fileobj is not None:
        try:
            fileobj.write(payload)
        except (OSError, TypeError, ValueError) as exc:  # closed, text mode, read-only...
            raise CheckpointError(f"checkpoint {path}: write failed ({type(exc).__name__}: "
                                  f"{exc}); save(obj, f) needs a file opened for binary "
                                  "writing") from exc
        return
    path = safe_files.resolve_target(path)  # through a symlink: update its target, keep it
    directory = os.path.dirname(os.path.abspath(path))
    safe_files.remove_stale_temps(path)  # left by saves that were killed mid-write
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=safe_files.temp_prefix(path),
                                   suffix=".tmp")
    except OSError as exc:
        raise CheckpointError(f"checkpoint {path}: cannot create a file in {directory} "
                              f"({exc})") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _file_mode(path))
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise CheckpointError(f"checkpoint {path}: write failed, previous file left "
                                  f"intact ({exc})") from exc
        raise
    try:
        _fsync_directory(directory)
    except OSError as exc:
        raise CheckpointError(f"checkpoint {path}: written, but fsync of the directory "
                              f"failed ({exc})") from exc


def _read_file_object(f: Any, label: str) -> bytes:
    """All of a binary file object's bytes (at most the size limit of a checkpoint file)."""
    try:
        data = f.read(safe_files.MAX_CHECKPOINT_BYTES + 1)
    except (OSError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {label}: read failed ({type(exc).__name__}: {exc}); "
                              "load(f) needs a file opened for binary reading") from exc
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CheckpointError(f"checkpoint {label}: load(f) needs a file opened in binary mode "
                              f"(read() gave {type(data).__name__})")
    if len(data) > safe_files.MAX_CHECKPOINT_BYTES:
        raise CheckpointError(f"checkpoint {label}: larger than the "
                              f"{safe_files.MAX_CHECKPOINT_BYTES}-byte limit")
    return bytes(data)


def _open(path: str, data: bytes | None = None) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The arrays and metadata of the checkpoint at ``path`` (or in ``data``, read from a file
    object that ``path`` then only names)."""
    st_numpy = _safetensors()
    from_disk = data is None
    if data is None:
        data = safe_files.read_bytes(path)  # missing, directory, permission: each said as such
    metadata = safe_files.verify(data, path)  # the SHA-256 of the data section, when stored
    try:
        arrays = dict(sorted(st_numpy.load(data).items()))  # by key, as safe_open lists them
    except Exception as exc:  # SafetensorError, bad JSON headers...
        raise CheckpointError(f"checkpoint {path}: not a valid safetensors file "
                              f"(truncated or corrupt?): {exc}") from exc
    if from_disk:
        with contextlib.suppress(OSError):
            safe_files.remove_stale_temps(path)
    return arrays, metadata


def read_file(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Every array and the text metadata of the checkpoint at ``path``, read and checked once."""
    return _open(os.fspath(path))


def read_arrays(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array in the checkpoint at ``path``, by key, without a target to check against."""
    return _open(os.fspath(path))[0]


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The text metadata stored with the checkpoint at ``path`` (``{}`` if none)."""
    return _open(os.fspath(path))[1]


_NO_TARGET = object()


def _nest(path: str, arrays: dict[str, np.ndarray], groups_json: str | None) -> dict[str, Any]:
    """The flat arrays as the nested dicts that were saved (the recorded group prefixes)."""
    if groups_json is None:
        return arrays
    try:
        groups = json.loads(groups_json)
    except (json.JSONDecodeError, RecursionError):
        groups = None
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        raise CheckpointError(f"checkpoint {path}: metadata {GROUPS_KEY!r} must be a JSON list "
                              f"of key prefixes, found {groups_json!r}")
    root: dict[str, Any] = {}
    for key, array in arrays.items():
        chain = sorted((g for g in groups if key.startswith(g + ".")), key=len)
        node, parent = root, ""
        for group in chain:  # each is a prefix of the next: descend one level per group
            child = node.setdefault(group[len(parent) + 1 if parent else 0:], {})
            if not isinstance(child, dict):
                raise CheckpointError(f"checkpoint {path}: key {key!r} lies under {group!r}, "
                                      "which is also an array")
            node, parent = child, group
        leaf = key[len(parent) + 1 if parent else 0:]
        if isinstance(node.get(leaf), dict):
            raise CheckpointError(f"checkpoint {path}: key {key!r} is an array and also a "
                                  "group of nested keys")
        node[leaf] = array
    return root


def load(path: Any, into: Any = _NO_TARGET, *, map_location: Any = None,
         weights_only: bool = True) -> Any:
    """Read the checkpoint at ``path``.

    ``load(path)`` (torch's form) returns its state dict ``{name: array}``, nested as it was
    saved (see the module doc).
    ``load(path, into)`` loads it into ``into`` and returns the file's metadata: the file must
    hold exactly ``into``'s keys with the same shapes and dtypes; otherwise a ``CheckpointError``
    lists every mismatch and ``into`` is unchanged (device targets stay on their device).
    ``map_location`` may be ``None`` or ``"cpu"`` (arrays load on the host) or ``"cuda"``
    (``load(path)`` uploads every array; ``load(path, into)`` loads where ``into`` lives
    either way); ``weights_only`` is accepted for torch's sake: a
    safetensors file holds only arrays, so nothing is ever unpickled either way.
    """
    if not (_is_path(path) or _is_reader(path)):
        hint = " (torch's order is load(path); torchlean's is load(path, into))" if _is_path(
            into) else ""
        raise CheckpointError(f"load: the first argument must be the path (a str or "
                              f"os.PathLike) or a binary file object, found "
                              f"{type(path).__name__}{hint}")
    if map_location not in (None, "cpu", "cuda"):
        raise CheckpointError(f"load: map_location must be None or 'cpu' (host) or 'cuda' "
                              f"(device), found {map_location!r}")
    if not isinstance(weights_only, bool):
        raise CheckpointError(f"load: weights_only must be a bool, found {weights_only!r}")
    data = None
    if _is_reader(path):  # torch's load(f): the bytes, checked as a file on disk would be
        label = _file_label(path)
        data = _read_file_object(path, label)
        path = label
    else:
        path = os.fspath(path)
    if into is _NO_TARGET:
        xp = namespace_for(check_device(map_location or "cpu"))  # DeviceError: no CuPy/GPU
        arrays, metadata = _open(path, data)
        if xp is not np:
            arrays = {k: to_device(v, xp) for k, v in arrays.items()}  # explicit uploads
        single = metadata.get(SINGLE_KEY)
        if single is not None:  # a bare array was saved: it comes back alone
            if set(arrays) != {single}:
                raise CheckpointError(f"checkpoint {path}: metadata {SINGLE_KEY!r} names "
                                      f"{single!r}, but the file holds {sorted(arrays)[:5]}")
            return arrays[single]
        return _nest(path, arrays, metadata.get(GROUPS_KEY))
    if into is None or _is_path(into):
        raise CheckpointError(f"load: into must be the object to load into (a module, "
                              f"optimiser, list or dict), found {into!r}; for a state dict "
                              "call load(path)")
    expected: dict[str, np.ndarray] = {}
    loaders: list[tuple[str, Any, list[str]]] = []
    _flatten(into, "", expected, loaders)
    for key, target, _ in loaders:
        if target is None:
            raise CheckpointError(f"checkpoint {path}: cannot load into {key!r}: arrays held in "
                                  "a tuple cannot be replaced (use a list or dict)")
    found, metadata = _open(path, data)
    problems = describe_mismatches(expected, found)
    if problems:
        raise CheckpointError(f"checkpoint {path} does not fit the target:\n  "
                              + "\n  ".join(problems))

    # Everything fits. Writing can still fail inside a target's own load_state_dict; then the
    # targets already written are restored (only needed when there is more than one).
    undo: list[Callable[[], None]] = []
    keep_undo = len(loaders) > 1
    try:
        for key, target, names in loaders:
            if isinstance(target, tuple):
                container, slot = target
                old = container[slot]
                value: Any = found[key]
                if isinstance(old, bool | int | float):
                    value = value.item()
                elif _is_tensor(old):  # a new tensor with the loaded value (no history)
                    value = (tensor(value, requires_grad=bool(old.requires_grad))
                             if type(old) is Tensor else
                             type(old)(value, requires_grad=bool(old.requires_grad)))
                elif not isinstance(old, np.ndarray | np.generic):
                    value = to_device(value, namespace_of(old))  # back onto old's device
                container[slot] = value
                undo.append(functools.partial(container.__setitem__, slot, old))
            elif _has_state(target):
                cut = len(key) + 1 if key else 0
                sub = {name[cut:]: found[name] for name in names}
                if keep_undo:
                    backup = {k: np.array(_host(v), copy=True)
                              for k, v in target.state_dict().items()}
                    undo.append(functools.partial(target.load_state_dict, backup))
                target.load_state_dict(sub)
            else:  # a Param
                old_value = np.array(target.value, copy=True)
                target.assign(found[key])
                undo.append(functools.partial(target.assign, old_value))
    except Exception as exc:
        for restore in reversed(undo):
            with contextlib.suppress(Exception):
                restore()
        raise CheckpointError(f"checkpoint {path}: loading into the target failed, target "
                              f"restored ({type(exc).__name__}: {exc})") from exc
    return metadata
