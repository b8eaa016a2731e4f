"""Which archives this home has seen verified, so a later install without their bundle says so.

"Verified" is decided from bytes at install. A build once installed
verified and later installed again from a source that lists no attestation for
it (a mirror synced without its bundle, a cache restored elsewhere) is not
``absent``: its builder is known to attest it, only the proof is missing. The
home remembers each verified archive in ``attested.json`` at its root (outside
the runtime directories, so removing a runtime does not forget it), and such an
install reads ``unverified`` with the reason "attested upstream, bundle missing".

The file is data, not trust: it can only turn ``absent`` into ``unverified``,
never anything into ``verified``. A damaged or foreign file reads as no record,
entries are bounded in number, and writing is atomic and best effort.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from llama_runtime.runtime.fsutil import read_record, write_record

__all__ = ["ATTESTED_FILE", "ATTESTED_UPSTREAM_BUNDLE_MISSING", "remember_attested", "was_attested"]

ATTESTED_FILE: Final = "attested.json"
#: The reason of an install whose archive verified here before and has no bundle now.
ATTESTED_UPSTREAM_BUNDLE_MISSING: Final = "attested upstream, bundle missing"
#: Newest digests kept: one or two verified installs a day is years of them; the file stays a few kB.
MAX_DIGESTS: Final = 512
_MAX_FILE_BYTES: Final = 256 * 1024
_HEX: Final = frozenset("0123456789abcdef")


def _path(home_root: Path) -> Path:
    return home_root / ATTESTED_FILE


def _is_sha256(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX


def _load(home_root: Path) -> list[str]:
    try:
        payload: Any = read_record(_path(home_root), max_bytes=_MAX_FILE_BYTES)
    except (OSError, ValueError):
        return []
    entries = payload.get("sha256") if isinstance(payload, dict) else None
    if not isinstance(entries, list):
        return []
    return [e for e in entries[: MAX_DIGESTS * 2] if _is_sha256(e)][:MAX_DIGESTS]


def was_attested(home_root: Path, sha256: str) -> bool:
    """Whether an archive with ``sha256`` was installed verified in this home."""
    return sha256.lower() in _load(home_root)


def remember_attested(home_root: Path, digests: Iterable[str]) -> None:
    """Remember ``digests`` (archives just installed verified), newest first."""
    new = [d.lower() for d in digests if _is_sha256(d.lower())]
    if not new:
        return
    known = _load(home_root)
    if all(d in known for d in new):
        return
    kept = list(dict.fromkeys([*new, *known]))[:MAX_DIGESTS]
    # Best effort: a home we cannot write loses the memory, never the install's result.
    with contextlib.suppress(OSError):
        write_record(_path(home_root), {"sha256": kept})
