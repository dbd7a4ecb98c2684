"""Checkpoints: safetensors files for modules, parameter lists and optimiser state.

``save(path, obj)`` flattens ``obj`` into named arrays and writes them with ``safetensors.numpy``
(imported lazily, so the core package needs only NumPy); ``load(path, into)`` reads them back into
an object of the same structure. The format holds raw arrays and a JSON header only, so loading
never unpickles or executes anything.

PyTorch's order works too: ``save(obj, path)`` (the call is told apart by which argument is the
path: a ``str`` or ``os.PathLike``), and ``load(path)`` with no target returns what was saved,
as ``torch.load`` does: a state dict ``{name: array}`` (what ``model.load_state_dict`` takes) in
its order, and a general checkpoint such as ``{"model": model.state_dict(), "optim":
opt.state_dict(), "epoch": 3, "losses": [0.5, 0.25], "note": "run 1"}`` nested the same way,
with its dicts in their order (int and other non-string keys kept), lists, tuples, Python
numbers, strings and None as they were, and an optimiser's state dict as one again
(``["state"]``, ``["param_groups"]``). The structure is JSON in the metadata (``TREE_KEY``;
arrays are stored by their flat dotted key, ``"model.0.weight"``, as before), read as data
only: its size and depth are capped and every node is checked (``_Tree``). Files written
before it nest by their recorded group prefixes, with keys sorted. Saving an ``nn.Module`` in
either order records ``SAVE_FORMAT``, its class name and, when the module carries a
``model_config`` dict (``torchlean.models.build`` sets it), that config as JSON in the
metadata, so ``torchlean eval --checkpoint`` can rebuild a model saved with
``tl.save(model, path)``.

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
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .core import safe_files
from .core.backend import check_device, namespace_for, namespace_of, to_device, to_host
from .core.errors import CheckpointError
from .engine.tensor import Tensor, tensor

__all__ = ["SAVE_FORMAT", "describe_mismatches", "load", "read_arrays", "read_metadata",
           "register_mapping_kind", "save"]

SAVE_FORMAT = "torchlean.save/1"
"""``metadata["format"]`` of a module saved by ``save``: its state-dict keys, unprefixed."""
GROUPS_KEY = "torchlean.groups"
"""Metadata key of older files: JSON list of the key prefixes where a nested dict or state dict
began (read, no longer written: ``TREE_KEY`` holds the whole structure)."""

TREE_KEY = "torchlean.tree"
"""Metadata key: the saved Python value as JSON (``_flatten``'s nodes; arrays by their key in
the file), so ``load(path)`` gives back dicts in their order, lists, tuples, Python numbers,
strings and None as they were saved. Read only as data: never code, never a class by name
beyond those registered with ``register_mapping_kind``."""
MAX_TREE_CHARS = 32 << 20
"""Largest ``TREE_KEY`` text saved or loaded (32 MiB: a state dict of 100k tensors is ~10 MB)."""
MAX_DEPTH = 64
"""Deepest nesting of containers (dicts, lists, tuples) saved or loaded."""

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
    if not isinstance(key, _KEY_TYPES):
        raise CheckpointError(f"checkpoint: keys must be strings (or numbers, bools, None), "
                              f"found {key!r} (at {prefix or 'top level'})")
    key = key if isinstance(key, str) else str(key)
    return f"{prefix}.{key}" if prefix else key


_KEY_TYPES = (str, int, float, bool, type(None))

# Mapping types (beyond dict and OrderedDict) that a load rebuilds, by the name saved for them:
# name -> class with ``checkpoint_extra()`` (JSON data kept beside the items) and a classmethod
# ``from_checkpoint(items, extra)`` (``ValueError`` for data it does not accept).
_MAPPING_KINDS: dict[str, type] = {}


def register_mapping_kind(name: str, cls: type) -> None:
    """Save mappings of exactly type ``cls`` under ``name``, and rebuild them as ``cls`` on
    load (the optimisers' state dicts register theirs)."""
    _MAPPING_KINDS[name] = cls


def _key_node(key: Any) -> list[Any]:
    """A dict key as a tree node (inline: keys are never arrays)."""
    if isinstance(key, str):
        return ["str", key]
    if isinstance(key, bool):
        return ["bool", key]
    if isinstance(key, int):
        return ["int", key]
    if isinstance(key, float):
        return ["float", repr(key)]
    return ["none"]


def _leaf_node(value: Any, key: str) -> list[Any]:
    """The tree node of a leaf stored as the array ``key``: a Python number keeps its type."""
    for kind in (bool, int, float):  # (bool first: a bool is an int)
        if isinstance(value, kind):
            return [kind.__name__, key]
    return ["tensor", key]


def _mapping_node(obj: Mapping[Any, Any], items: list[Any]) -> list[Any]:
    for name, cls in _MAPPING_KINDS.items():
        if type(obj) is cls:
            extra = obj.checkpoint_extra()  # type: ignore[attr-defined]
            try:
                json.dumps(extra)
            except (TypeError, ValueError) as exc:
                raise CheckpointError(f"checkpoint: a {cls.__name__} holds data that JSON "
                                      f"cannot represent ({exc})") from None
            return ["kind", name, items, extra]
    return ["odict" if isinstance(obj, OrderedDict) else "dict", items]


def _flatten(obj: Any, prefix: str, out: dict[str, np.ndarray],
             loaders: list[tuple[str, Any, list[str]]] | None = None, depth: int = 0
             ) -> list[Any]:
    """Add ``obj``'s arrays (host copies or views) to ``out`` under ``prefix``; returns
    ``obj``'s node of the saved structure (``TREE_KEY``).

    ``loaders`` (when given) collects ``(key, target, keys)`` for every place a load writes to:
    an object with ``load_state_dict`` (``keys`` its flattened keys), a Param, a ``(container,
    slot)`` pair for an array held in a dict or list, or ``None`` where nothing can be written
    (an array inside a tuple). Strings and None hold no array: nothing is loaded into them.
    """
    if depth > MAX_DEPTH:
        raise CheckpointError(f"checkpoint: nested more than {MAX_DEPTH} levels deep (at "
                              f"{prefix or 'top level'}; a container that holds itself?)")

    def add(key: str, value: Any) -> None:
        if not key:
            raise CheckpointError("checkpoint: a bare array or Param has no name; "
                                  "wrap it in a dict, e.g. {'w': w}")
        if key in out:
            raise CheckpointError(f"checkpoint: two entries flatten to the key {key!r}")
        out[key] = np.asarray(_host(value))

    def leaf(key: str, value: Any, target: Any) -> list[Any]:
        add(key, value)
        if loaders is not None:
            loaders.append((key, target, [key]))
        return _leaf_node(value, key)

    if _has_state(obj):
        state = obj.state_dict()
        if not isinstance(state, Mapping):
            raise CheckpointError(f"checkpoint: {type(obj).__name__}.state_dict() returned a "
                                  f"{type(state).__name__}, expected a dict of arrays")
        names = [_join(prefix, key) for key in state]
        items = []
        for key, name, value in zip(state, names, state.values(), strict=True):
            add(name, value)
            items.append([_key_node(key), _leaf_node(value, name)])
        if loaders is not None:
            loaders.append((prefix, obj, names))
        return _mapping_node(state, items)
    if _is_param(obj):
        return leaf(prefix, obj.value, obj)
    if _is_scalar_or_array(obj):
        return leaf(prefix, obj, None)
    if isinstance(obj, str):
        return ["str", obj]
    if obj is None:
        return ["none"]
    if isinstance(obj, Mapping):
        items = []
        for key, value in obj.items():
            name = _join(prefix, key)
            node = (leaf(name, value, (obj, key)) if _is_scalar_or_array(value)
                    else _flatten(value, name, out, loaders, depth + 1))
            items.append([_key_node(key), node])
        return _mapping_node(obj, items)
    if isinstance(obj, list | tuple):
        nodes = []
        for i, value in enumerate(obj):
            name = _join(prefix, str(i))
            nodes.append(leaf(name, value, (obj, i))
                         if _is_scalar_or_array(value) and isinstance(obj, list)
                         else _flatten(value, name, out, loaders, depth + 1))
        return ["list" if isinstance(obj, list) else "tuple", nodes]
    raise CheckpointError(f"checkpoint: cannot save or load a {type(obj).__name__} "
                          f"(at {prefix or 'top level'}): expected an object with "
                          "state_dict()/load_state_dict(), a Param, a list of Params, "
                          "a dict of arrays or named objects, or Python numbers, strings "
                          "and None inside them")


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
    if _is_array(obj) or _is_tensor(obj) or _is_param(obj):  # torch.save(tensor, f)
        flat["tensor"] = np.asarray(_host(obj.value if _is_param(obj) else obj))
        meta = {SINGLE_KEY: "tensor", **(meta or {})}
    else:  # the structure, so that load(path) gives the value back as torch's does
        tree = json.dumps(_flatten(obj, "", flat), separators=(",", ":"))
        if len(tree) > MAX_TREE_CHARS:
            raise CheckpointError(f"checkpoint {path}: the structure of the saved value takes "
                                  f"{len(tree)} characters, more than the {MAX_TREE_CHARS} a "
                                  "load accepts (save fewer, larger entries)")
        meta = {TREE_KEY: tree, **(meta or {})}
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
    object that ``path`` then only names). The metadata includes the saved structure
    (``TREE_KEY``), which ``_public`` leaves out."""
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
    arrays, metadata = _open(os.fspath(path))
    return arrays, _public(metadata)


def read_arrays(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array in the checkpoint at ``path``, by key, without a target to check against."""
    return _open(os.fspath(path))[0]


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The text metadata stored with the checkpoint at ``path`` (``{}`` if none)."""
    return _public(_open(os.fspath(path))[1])


def _public(metadata: dict[str, str]) -> dict[str, str]:
    """The metadata a caller gave (and a module's own), without the saved structure."""
    return {k: v for k, v in metadata.items() if k != TREE_KEY}


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


class _Tree:
    """``load(path)``'s reading of the saved structure (``TREE_KEY``, untrusted): every node
    checked (its form, its depth, each array named exactly once and of the kind the node says),
    every problem a ``CheckpointError`` naming the file, the place, what was expected and what
    was found. Arrays come back as they are (uploaded to ``xp``'s device when not NumPy)."""

    _SCALARS = {"int": "iu", "float": "f", "bool": "b"}

    def __init__(self, path: str, arrays: dict[str, np.ndarray], xp: Any) -> None:
        self.path, self.arrays, self.xp = path, arrays, xp
        self.used: set[str] = set()

    def fail(self, where: str, expected: str, found: Any) -> CheckpointError:
        text = repr(found)
        text = text if len(text) <= 80 else text[:77] + "..."
        return CheckpointError(f"checkpoint {self.path}: metadata {TREE_KEY!r} at {where}: "
                               f"expected {expected}, found {text}")

    def value(self, text: str) -> Any:
        if len(text) > MAX_TREE_CHARS:
            raise CheckpointError(f"checkpoint {self.path}: metadata {TREE_KEY!r} takes "
                                  f"{len(text)} characters, more than the {MAX_TREE_CHARS} "
                                  "allowed")
        try:
            node = json.loads(text)
        except RecursionError:
            raise CheckpointError(f"checkpoint {self.path}: metadata {TREE_KEY!r} is nested "
                                  "too deeply") from None
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"checkpoint {self.path}: metadata {TREE_KEY!r} is not JSON "
                                  f"({exc})") from None
        out = self.node(node, "root", 0)
        unnamed = sorted(set(self.arrays) - self.used)
        if unnamed:
            raise CheckpointError(f"checkpoint {self.path}: metadata {TREE_KEY!r} names "
                                  f"{len(self.used)} of the file's {len(self.arrays)} arrays; "
                                  f"not named: {', '.join(map(repr, unnamed[:5]))}")
        return out

    def node(self, node: Any, where: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.fail(where, f"at most {MAX_DEPTH} levels of nesting", "deeper")
        if not (isinstance(node, list) and node and isinstance(node[0], str)):
            raise self.fail(where, "a node [kind, ...]", node)
        kind, body = node[0], node[1:]
        if kind == "none" and not body:
            return None
        if kind == "str" and len(body) == 1 and isinstance(body[0], str):
            return body[0]
        if kind in ("tensor", *self._SCALARS) and len(body) == 1:
            return self.array(kind, body[0], where)
        if kind in ("list", "tuple") and len(body) == 1 and isinstance(body[0], list):
            values = [self.node(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(body[0])]
            return values if kind == "list" else tuple(values)
        if kind in ("dict", "odict") and len(body) == 1:
            items = self.items(body[0], where, depth)
            return items if kind == "dict" else OrderedDict(items)
        if kind == "kind" and len(body) == 3 and body[0] in _MAPPING_KINDS:
            cls = _MAPPING_KINDS[body[0]]
            items = self.items(body[1], where, depth)
            try:
                return cls.from_checkpoint(items, body[2])  # type: ignore[attr-defined]
            except ValueError as exc:
                raise CheckpointError(f"checkpoint {self.path}: metadata {TREE_KEY!r} at "
                                      f"{where}: not a valid {cls.__name__}: {exc}") from None
        expected = ("one of none, str, tensor, int, float, bool, list, tuple, dict, odict, "
                    f"kind (with {', '.join(sorted(_MAPPING_KINDS)) or 'no'} kinds), each with "
                    "its own fields")
        raise self.fail(where, expected, node)

    def array(self, kind: str, key: Any, where: str) -> Any:
        if not isinstance(key, str) or key not in self.arrays:
            raise self.fail(where, "the key of an array in the file", key)
        if key in self.used:
            raise self.fail(where, "an array named once", f"{key!r} named again")
        self.used.add(key)
        arr = self.arrays[key]
        if kind == "tensor":
            return arr if self.xp is np else to_device(arr, self.xp)
        if arr.shape != () or arr.dtype.kind not in self._SCALARS[kind]:
            raise self.fail(where, f"a 0-d array holding a Python {kind}",
                            f"{key!r}: shape {arr.shape}, dtype {arr.dtype}")
        return {"int": int, "float": float, "bool": bool}[kind](arr.item())

    def items(self, pairs: Any, where: str, depth: int) -> dict[Any, Any]:
        if not isinstance(pairs, list):
            raise self.fail(where, "a list of [key, value] pairs", pairs)
        out: dict[Any, Any] = {}
        for pair in pairs:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise self.fail(where, "a [key, value] pair", pair)
            key = self.key(pair[0], where)
            if key in out:
                raise self.fail(where, "each key once", f"{key!r} twice")
            out[key] = self.node(pair[1], f"{where}[{key!r}]", depth + 1)
        return out

    def key(self, node: Any, where: str) -> Any:
        if isinstance(node, list) and node:
            kind, body = node[0], node[1:]
            if kind == "none" and not body:
                return None
            if len(body) == 1:
                v = body[0]
                if kind == "str" and isinstance(v, str):
                    return v
                if kind == "bool" and isinstance(v, bool):
                    return v
                if kind == "int" and isinstance(v, int) and not isinstance(v, bool):
                    return v
                if kind == "float" and isinstance(v, str) and len(v) <= 40:
                    try:
                        return float(v)
                    except ValueError:
                        pass
        raise self.fail(where, "a dict key: [\"str\", text], [\"int\", n], [\"float\", "
                        "text], [\"bool\", b] or [\"none\"]", node)


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
        single = metadata.get(SINGLE_KEY)
        if single is not None:  # a bare array was saved: it comes back alone
            if set(arrays) != {single}:
                raise CheckpointError(f"checkpoint {path}: metadata {SINGLE_KEY!r} names "
                                      f"{single!r}, but the file holds {sorted(arrays)[:5]}")
            return arrays[single] if xp is np else to_device(arrays[single], xp)
        if TREE_KEY in metadata and GROUPS_KEY not in metadata:
            return _Tree(path, arrays, xp).value(metadata[TREE_KEY])
        # older files (nested by their group prefixes), other tools' files (flat, by key)
        if xp is not np:
            arrays = {k: to_device(v, xp) for k, v in arrays.items()}  # explicit uploads
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
    return _public(metadata)
