"""The one way a JSON state file is read and written.

Every file the project keeps state in goes through here: the active pointer
(``active.json``), install markers, the job records (``jobs/*.json``), the
ETag cache, the rate-limit backoff (``ratelimit.json``), the gate settings
(``gate.json``), the server record (``server.json``), a partial download's
sidecar (``*.part.meta``) and range record (``*.ranges``), the failed builds,
the lock owner and the mirror's own JSON.

Reading is bounded: at most ``max_bytes`` are read (a file grown by a bug, or
replaced by someone else, cannot take the machine's memory) and the JSON may
nest at most ``max_depth`` levels (a deep file cannot exhaust the recursion
limit). Writing is the one atomic write (:func:`runtime.fsutil.atomic_write_json`:
temp file, fsync, rename, fsync of the directory).

Invariant: a file that is too large, too deep or not JSON raises
:class:`DamagedRecordError`, a :class:`json.JSONDecodeError` (so a
``ValueError``): each reader's existing "not JSON" branch decides what a
damaged file leads to, as it did before this module existed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, Final

from llama_runtime.runtime.fsutil import atomic_write_json

__all__ = [
    "MAX_RECORD_BYTES",
    "MAX_RECORD_DEPTH",
    "DamagedRecordError",
    "flag",
    "integer",
    "mapping",
    "nests_deeper",
    "number",
    "parse_record",
    "read_record",
    "text",
    "write_record",
]

#: Largest state file read (bytes). The biggest one, the ETag cache, keeps itself
#: under 16 MiB of compact JSON (``updater.sources.github.MAX_CACHE_BYTES``),
#: which the pretty-printed file on disk can double; every other one is a few KB.
MAX_RECORD_BYTES: Final[int] = 64 * 1024 * 1024
#: Deepest nesting accepted. The deepest file is the ETag cache: a release list
#: (4 levels, see ``updater.sources.bounded_json.MAX_JSON_DEPTH``) under two of its
#: own; 64 leaves room and stays far below the interpreter's recursion limit.
MAX_RECORD_DEPTH: Final[int] = 64
# Read size once the file's own size (read first) was not all of it: small, since
# each read allocates its whole size up front.
_READ_STEP_BYTES: Final[int] = 64 * 1024


class DamagedRecordError(json.JSONDecodeError):
    """A state file that is not JSON, is larger than its bound or nests too deep."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "", 0)


def read_record(path: Path, *, max_bytes: int = MAX_RECORD_BYTES, max_depth: int = MAX_RECORD_DEPTH) -> Any:
    """The decoded JSON of the state file ``path`` (any JSON value; the caller checks its shape).

    Raises:
        FileNotFoundError: There is no such file.
        OSError: It could not be read.
        DamagedRecordError: It is not JSON, is over ``max_bytes`` or nests deeper than ``max_depth``.
    """
    with path.open("rb") as handle:
        raw = _read_at_most(handle, max_bytes + 1)
    return parse_record(raw, what=str(path), max_bytes=max_bytes, max_depth=max_depth)


def _read_at_most(handle: BinaryIO, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``handle``, in reads sized by the file, never one of ``limit`` bytes.

    ``read(n)`` allocates ``n`` bytes before it reads: one read of the whole bound
    would cost 64 MiB of memory for a 200-byte pointer.
    """
    size = os.fstat(handle.fileno()).st_size  # a hint only: a file can grow, a FIFO says 0
    step = min(limit, size + 1)
    chunks: list[bytes] = []
    total = 0
    while total < limit:
        chunk = handle.read(min(step, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        step = _READ_STEP_BYTES
    return b"".join(chunks)


def parse_record(
    raw: bytes, *, what: str = "the record", max_bytes: int = MAX_RECORD_BYTES, max_depth: int = MAX_RECORD_DEPTH
) -> Any:
    """:func:`read_record` of bytes already read (``what`` names them in the error).

    Raises:
        DamagedRecordError: ``raw`` is not UTF-8 JSON, is over ``max_bytes`` or nests deeper than ``max_depth``.
    """
    if len(raw) > max_bytes:
        raise DamagedRecordError(f"{what} is larger than {max_bytes} bytes")
    try:
        value = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise DamagedRecordError(f"{what} is not UTF-8 ({exc.reason})") from None
    except RecursionError:
        raise DamagedRecordError(f"{what} nests more than {max_depth} levels deep") from None
    except json.JSONDecodeError as exc:
        raise DamagedRecordError(f"{what} is not JSON ({exc.msg})") from None
    if nests_deeper(value, max_depth):
        raise DamagedRecordError(f"{what} nests more than {max_depth} levels deep")
    return value


def write_record(path: Path, payload: object, *, mode: int | None = None) -> None:
    """Replace the state file ``path`` with ``payload`` as JSON, atomically and durably.

    Raises:
        OSError: Writing, fsync or the rename failed; ``path`` is unchanged.
    """
    atomic_write_json(path, payload, mode=mode)


def nests_deeper(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests deeper than ``max_depth`` (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


# -- typed getters: a field of the wrong type reads as absent ---------------------------------


def text(payload: Mapping[str, Any], key: str) -> str | None:
    """``payload[key]`` when it is a string."""
    value = payload.get(key)
    return value if isinstance(value, str) else None


def integer(payload: Mapping[str, Any], key: str) -> int | None:
    """``payload[key]`` when it is an integer (``true``/``false`` are not numbers)."""
    value = payload.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number(payload: Mapping[str, Any], key: str) -> float | None:
    """``payload[key]`` as a float when it is a number (never a bool; NaN and infinities included)."""
    value = payload.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def flag(payload: Mapping[str, Any], key: str) -> bool | None:
    """``payload[key]`` when it is ``true`` or ``false``."""
    value = payload.get(key)
    return value if isinstance(value, bool) else None


def mapping(payload: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """``payload[key]`` when it is a JSON object."""
    value = payload.get(key)
    return value if isinstance(value, dict) else None
