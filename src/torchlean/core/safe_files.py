"""The file side of checkpoints: temporary files, symlinks, checksums and readable OS errors.

``checkpoint.save`` writes to a temporary file next to the target and renames it over the target.
This module names those files so that a process killed mid-write leaves something a later save
(or load) recognises and removes: ``.<name>.<pid>.<random>.tmp``, removed once process ``pid``
no longer runs. A target that is a symlink is resolved first, so saving updates the file the link
points to and keeps the link.

Payloads carry a SHA-256 of the whole file (the 8-byte header length, the JSON header with its
metadata, and the data section) in the safetensors metadata (``torchlean.file_sha256``), computed
with the digest itself replaced by a placeholder of the same length and checked on every read: a
swapped offset, a changed dtype or shape, or an edited config no longer loads silently. Files
from older torchlean versions carry ``torchlean.sha256`` (the data section only): their data is
checked and a warning says the header was not; files without either (other tools) load with a
warning saying nothing was verified.

Files from outside are hostile: ``read_regular`` opens only regular files (a FIFO, a device such
as ``/dev/zero``, or a symlink to one is refused without blocking: the file is opened
non-blocking and checked with ``fstat`` before any read) and reads at most the size the file
declares, under a caller-given limit.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import stat
import struct
import warnings
from typing import Any

from .errors import CheckpointError, TorchLeanError

CHECKSUM_KEY = "torchlean.file_sha256"
"""Metadata key of the SHA-256 over the whole file (header, metadata and data)."""
DATA_CHECKSUM_KEY = "torchlean.sha256"
"""Metadata key of older files' SHA-256 over the data section only."""
_PLACEHOLDER = "0" * 64
_HEX = frozenset("0123456789abcdef")
MAX_CHECKPOINT_BYTES = 1 << 40
"""Largest checkpoint ``read_bytes`` reads (1 TiB: a sanity bound, the file's size is the real
one)."""
# A safetensors header is at most 100 MB (the format's own limit); more means a corrupt file.
_MAX_HEADER = 100_000_000


def resolve_target(path: str) -> str:
    """The file a save to ``path`` must replace: the final target of a symlink (so the link
    survives and its target is updated), else ``path`` itself.

    Only a regular file (or nothing) may be replaced: renaming over ``/dev/zero``, a FIFO or a
    socket, which a root process is allowed to do, would destroy a device node or pipe (a link
    to one is followed first, so the link does not hide it).
    """
    target = os.path.realpath(path) if os.path.islink(path) else path
    kind = non_regular_kind(target)
    if kind is not None:
        raise CheckpointError(f"checkpoint {path}: is {kind}; only a regular file can be "
                              "replaced by a save")
    return target


def non_regular_kind(path: str) -> str | None:
    """What ``path`` is when it exists and is not a regular file ("a character device", ...);
    ``None`` for a regular file or nothing at all."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else _kind(mode)


def temp_prefix(path: str) -> str:
    """The prefix of this process's temporary files for ``path`` (``mkstemp`` adds the rest)."""
    return f".{os.path.basename(path)}.{os.getpid()}."


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    except OSError:
        return True  # when in doubt, keep the file
    return True


def remove_stale_temps(path: str) -> list[str]:
    """Remove temporary files for ``path`` left by processes that no longer run (killed during
    a save); returns the removed paths. Files of running processes, this one included, stay."""
    directory = os.path.dirname(os.path.abspath(path))
    pattern = os.path.join(glob.escape(directory), f".{glob.escape(os.path.basename(path))}.*.tmp")
    removed = []
    for candidate in glob.glob(pattern):
        parts = os.path.basename(candidate)[len(os.path.basename(path)) + 2:].split(".")
        if len(parts) != 3 or not parts[0].isdigit():
            continue  # not one of ours: <pid>.<random>.tmp
        pid = int(parts[0])
        if pid == os.getpid() or _running(pid):
            continue
        with contextlib.suppress(OSError):
            os.unlink(candidate)
            removed.append(candidate)
    return removed


class _DuplicateKey(Exception):
    """A JSON object that names one key twice (which value wins is parser-dependent)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _header(data: bytes, path: str) -> tuple[dict[str, Any], int]:
    """The parsed JSON header of a safetensors payload and the offset of its data section."""
    if len(data) < 8:
        raise CheckpointError(f"checkpoint {path}: not a valid safetensors file (truncated: "
                              f"{len(data)} bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > min(_MAX_HEADER, len(data) - 8):
        raise CheckpointError(f"checkpoint {path}: not a valid safetensors file (truncated or "
                              f"corrupt: header length {n}, file {len(data)} bytes)")
    try:
        header = json.loads(data[8:8 + n], object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        raise CheckpointError(f"checkpoint {path}: not a valid safetensors file (the header "
                              f"names {exc.args[0]!r} twice)") from None
    except RecursionError:
        raise CheckpointError(f"checkpoint {path}: not a valid safetensors file (header nested "
                              "too deeply)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {path}: not a valid safetensors file (corrupt "
                              f"header: {exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"checkpoint {path}: not a valid safetensors file (header is "
                              f"{type(header).__name__}, expected an object)")
    return header, 8 + n


def metadata_with_checksum_slot(metadata: dict[str, str] | None) -> dict[str, str]:
    """``metadata`` plus a placeholder checksum that ``fill_checksum`` overwrites in place."""
    return {**(metadata or {}), CHECKSUM_KEY: _PLACEHOLDER}


def _slot(value: str) -> str:
    return json.dumps(CHECKSUM_KEY) + ":" + json.dumps(value)


def fill_checksum(payload: bytes, path: str) -> bytes:
    """Write the SHA-256 of the whole ``payload`` (with the placeholder in place) over its
    placeholder (same length, so the header and the data section keep their offsets)."""
    header, start = _header(payload, path)
    if header.get("__metadata__", {}).get(CHECKSUM_KEY) != _PLACEHOLDER:
        raise CheckpointError(f"checkpoint {path}: internal error: no checksum slot")
    head = payload[8:start].decode("utf-8")
    if head.count(_slot(_PLACEHOLDER)) != 1:
        raise CheckpointError(f"checkpoint {path}: internal error: checksum slot not unique")
    digest = hashlib.sha256(payload).hexdigest()
    filled = head.replace(_slot(_PLACEHOLDER), _slot(digest))
    return payload[:8] + filled.encode("utf-8") + payload[start:]


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str, what: str, limit: int,
                 error: type[TorchLeanError] = CheckpointError, offset: int = 0,
                 length: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (``what`` names it in errors, e.g.
    ``"checkpoint x.safetensors"``), read without blocking on special files.

    The file is opened non-blocking (opening a FIFO for reading then returns at once instead of
    waiting for a writer), checked with ``fstat`` to be a regular file (not a FIFO, device,
    socket or directory; a symlink counts as what it points to), refused when its size exceeds
    ``limit``, and read up to the size ``fstat`` declared (a file that grows meanwhile is cut
    there; one that shrinks is reported as truncated). With ``length``, exactly the ``length``
    bytes from ``offset`` are read, which must lie inside the file (ONNX external data). Every
    failure is ``error``."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{what}: no such file") from None
    except IsADirectoryError:
        raise error(f"{what}: is a directory, not a file") from None
    except PermissionError:
        raise error(f"{what}: permission denied (cannot read the file)") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise error(f"{what}: cannot open ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{what}: is {_kind(info.st_mode)}; only regular files are read")
        size = info.st_size
        if length is None:
            if size > limit:
                raise error(f"{what}: the file is {size} bytes, more than the {limit} this "
                            "reader accepts")
            offset = 0
        else:
            if length > limit:
                raise error(f"{what}: {length} bytes asked for, more than the {limit} this "
                            "reader accepts")
            if offset < 0 or length < 0 or offset + length > size:
                raise error(f"{what}: bytes {offset}..{offset + length} asked for, the file "
                            f"holds {size}")
            size = length
        chunks, left = [], size
        while left > 0:
            chunk = os.pread(fd, min(left, 1 << 24), offset + size - left)
            if not chunk:
                raise error(f"{what}: the file shrank while being read ({size - left} of "
                            f"{size} bytes)")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"{what}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def read_head(path: str, n: int) -> bytes:
    """The first ``n`` bytes of the regular file at ``path``, or ``b""`` when it is not one (or
    cannot be read): a sniffing helper that never blocks on a FIFO or reads a device."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return b""
    try:
        return os.read(fd, n) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def read_bytes(path: str) -> bytes:
    """The checkpoint file's bytes: missing files, directories, special files (FIFOs, devices)
    and permission problems each say so (``read_regular``)."""
    return read_regular(path, f"checkpoint {path}", MAX_CHECKPOINT_BYTES)


def verify(data: bytes, path: str) -> dict[str, str]:
    """Check ``data`` (a whole file) against its stored checksum; returns its metadata (without
    the checksum).

    A mismatch is a ``CheckpointError`` naming the file. A file with only the older data-section
    checksum has its data checked and loads with a warning that its header was not; a file
    without a checksum loads with a warning (written by another tool)."""
    header, start = _header(data, path)
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise CheckpointError(f"checkpoint {path}: not a valid safetensors file (metadata must "
                              "map strings to strings)")
    stored = metadata.pop(CHECKSUM_KEY, None)  # the caller's metadata is what was saved
    old = metadata.pop(DATA_CHECKSUM_KEY, None)
    if stored is not None:
        if len(stored) != 64 or not set(stored) <= _HEX:
            raise CheckpointError(f"checkpoint {path}: {CHECKSUM_KEY} is not a SHA-256 hex "
                                  f"digest (found {stored[:80]!r})")
        head = data[8:start].decode("utf-8")
        if head.count(_slot(stored)) != 1:
            raise CheckpointError(f"checkpoint {path}: its header was changed after it was "
                                  f"written ({CHECKSUM_KEY} not found where it was stored)")
        blank = head.replace(_slot(stored), _slot(_PLACEHOLDER)).encode("utf-8")
        actual = hashlib.sha256(data[:8] + blank + memoryview(data)[start:]).hexdigest()
        if actual != stored:
            raise CheckpointError(f"checkpoint {path}: does not match its SHA-256 (stored "
                                  f"{stored[:12]}..., found {actual[:12]}...): the file (its "
                                  "header, metadata or data) is corrupt or was changed after it "
                                  "was written")
        return dict(metadata)
    if old is None:
        warnings.warn(f"checkpoint {path}: no {CHECKSUM_KEY} in its metadata (written by "
                      "another tool); loaded without an integrity check", stacklevel=3)
        return dict(metadata)
    actual = hashlib.sha256(memoryview(data)[start:]).hexdigest()
    if actual != old:
        raise CheckpointError(f"checkpoint {path}: data section does not match its SHA-256 "
                              f"(stored {old[:12]}..., found {actual[:12]}...): the file is "
                              "corrupt or was changed after it was written")
    warnings.warn(f"checkpoint {path}: written by an older torchlean ({DATA_CHECKSUM_KEY} covers "
                  "the data only); its header and metadata were not verified", stacklevel=3)
    return dict(metadata)
