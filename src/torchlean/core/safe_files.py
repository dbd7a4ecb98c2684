"""The file side of checkpoints: temporary files, symlinks, checksums and readable OS errors.

``checkpoint.save`` writes to a temporary file next to the target and renames it over the target.
This module names those files so that a process killed mid-write leaves something a later save
(or load) recognises and removes: ``.<name>.<pid>.<random>.tmp``, removed once process ``pid``
no longer runs. A target that is a symlink is resolved first, so saving updates the file the link
points to and keeps the link. Payloads carry a SHA-256 of their data section in the safetensors
metadata (``torchlean.sha256``), checked on every read; a file without one (an older torchlean,
another tool) still loads, with a warning saying it was not verified.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import struct
import warnings
from typing import Any

from .errors import CheckpointError

CHECKSUM_KEY = "torchlean.sha256"
_PLACEHOLDER = "0" * 64
# A safetensors header is at most 100 MB (the format's own limit); more means a corrupt file.
_MAX_HEADER = 100_000_000


def resolve_target(path: str) -> str:
    """The file a save to ``path`` must replace: the final target of a symlink (so the link
    survives and its target is updated), else ``path`` itself."""
    return os.path.realpath(path) if os.path.islink(path) else path


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
        header = json.loads(data[8:8 + n])
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


def fill_checksum(payload: bytes, path: str) -> bytes:
    """Write the SHA-256 of ``payload``'s data section over its placeholder (same length, so
    the header and the data section keep their offsets)."""
    header, start = _header(payload, path)
    if header.get("__metadata__", {}).get(CHECKSUM_KEY) != _PLACEHOLDER:
        raise CheckpointError(f"checkpoint {path}: internal error: no checksum slot")
    digest = hashlib.sha256(memoryview(payload)[start:]).hexdigest()
    slot = json.dumps(CHECKSUM_KEY) + ":" + json.dumps(_PLACEHOLDER)
    head = payload[8:start].decode("utf-8")
    if head.count(slot) != 1:
        raise CheckpointError(f"checkpoint {path}: internal error: checksum slot not unique")
    filled = head.replace(slot, json.dumps(CHECKSUM_KEY) + ":" + json.dumps(digest))
    return payload[:8] + filled.encode("utf-8") + payload[start:]


def read_bytes(path: str) -> bytes:
    """The file's bytes; missing files, directories and permission problems say so."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path}: no such file") from None
    except IsADirectoryError:
        raise CheckpointError(f"checkpoint {path}: is a directory, not a file") from None
    except PermissionError:
        raise CheckpointError(f"checkpoint {path}: permission denied (cannot read the file)") \
            from None
    except OSError as exc:
        raise CheckpointError(f"checkpoint {path}: cannot read ({exc.strerror or exc})") \
            from None


def verify(data: bytes, path: str) -> dict[str, str]:
    """Check ``data`` (a whole file) against its stored checksum; returns its metadata (without
    the checksum).

    A mismatch is a ``CheckpointError`` naming the file; a file without a checksum loads with a
    warning (it was written before checksums, or by another tool)."""
    header, start = _header(data, path)
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict):
        raise CheckpointError(f"checkpoint {path}: not a valid safetensors file (metadata is "
                              f"{type(metadata).__name__})")
    stored = metadata.pop(CHECKSUM_KEY, None)  # the caller's metadata is what was saved
    if stored is None:
        warnings.warn(f"checkpoint {path}: no {CHECKSUM_KEY} in its metadata (written by an "
                      "older torchlean or another tool); loaded without an integrity check",
                      stacklevel=3)
        return dict(metadata)
    actual = hashlib.sha256(memoryview(data)[start:]).hexdigest()
    if actual != stored:
        raise CheckpointError(f"checkpoint {path}: data section does not match its SHA-256 "
                              f"(stored {stored[:12]}..., found {actual[:12]}...): the file is "
                              "corrupt or was changed after it was written")
    return dict(metadata)
