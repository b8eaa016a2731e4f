"""Trust records: what the updater accepted, kept outside every runtime folder.

A runtime folder holds its install marker (``llama-runtime.json``) with every file's size and
sha256, but a folder the same user can write proves nothing about itself: a process that
appends to ``llama-server`` can rewrite the marker's hash too, and drop a ``libggml-evil.so``
(upstream builds load ``libggml-*.so`` backends from the binary's folder) the marker never
mentions. So when a runtime is accepted, the updater keeps in ``<home>/trust/<name>.json``:

* the sha256 of the marker's bytes as written (every recorded file hash is trusted through it);
* every entry of the folder: files, folders and links (with their targets).

Every check of an installed runtime (``status``, ``doctor``, ``use``, ``rollback``, an update's
view of the active runtime) compares against that record: a marker changed since, a file or link
the record does not list (named), or a listed one gone is damage. The runtime folder is also
made read-only (files ``0444``/``0555``, folders ``0555``), so a slip is refused by the OS; a
same-user process could still ``chmod`` it, which the record then catches.

Invariants:

* Only the updater writes a record, under the update lock, after the folder's bytes were verified.
* A runtime without a record (installed by an older llama-runtime) is checked as before, against
  its marker; the next verification that hashes every file records it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.fsutil import read_record, walk_tree, write_record
from llama_runtime.runtime.marker import MARKER_NAME

if TYPE_CHECKING:
    from llama_runtime.runtime.marker import InstallMarker

__all__ = [
    "TRUST_DIR_NAME",
    "accept_runtime",
    "forget_trust",
    "has_record",
    "make_read_only",
    "make_writable",
    "record_trust",
    "rewrite_accepted_marker",
    "trust_problems",
]

#: The home's folder of trust records (beside ``runtimes/``, never inside it).
TRUST_DIR_NAME: Final = "trust"
_SCHEMA: Final = 1
#: A record lists a runtime's entries: a CUDA build has a few hundred at most.
_MAX_RECORD_BYTES: Final = 4 * 1024 * 1024
#: Modes of an accepted runtime: nothing in it is writable, executables stay executable.
READ_ONLY_DIR: Final = 0o555
READ_ONLY_EXEC: Final = 0o555
READ_ONLY_FILE: Final = 0o444
#: How many unlisted or missing entries a message names before it counts the rest.
_SHOWN: Final = 5


def _home_of(runtime_dir: Path) -> Path:
    """The home a runtime folder belongs to: ``<home>/runtimes/<name>`` (any other folder has no record there)."""
    return runtime_dir.parent.parent


def record_path(home_root: Path, name: str) -> Path:
    """Where the trust record of the runtime ``name`` lives."""
    return home_root / TRUST_DIR_NAME / f"{name}.json"


def _marker_digest(runtime_dir: Path) -> str | None:
    try:
        return hashlib.sha256((runtime_dir / MARKER_NAME).read_bytes()).hexdigest()
    except OSError:
        return None


def _entries(runtime_dir: Path) -> dict[str, str]:
    """Every entry below ``runtime_dir``: ``f`` (file), ``d`` (folder), ``l:<target>`` (link), ``?`` (other)."""
    found: dict[str, str] = {}
    for top, dirs, files in walk_tree(runtime_dir):
        base = Path(top).relative_to(runtime_dir)
        for name in dirs:
            found[(base / name).as_posix()] = "d"
        for name in files:
            path = Path(top) / name
            rel = (base / name).as_posix()
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                found[rel] = "l:" + os.readlink(path)
            else:
                found[rel] = "f" if stat.S_ISREG(mode) else "?"
    return found


def record_trust(home_root: Path, name: str, runtime_dir: Path) -> None:
    """Record the runtime ``name`` as accepted now: its marker's digest and every entry of its folder.

    Raises:
        OSError: The record could not be written (the caller's operation fails: an accepted
            runtime without a record would read as the older kind).
    """
    digest = _marker_digest(runtime_dir)
    if digest is None:
        raise FileNotFoundError(f"{runtime_dir / MARKER_NAME} cannot be read")
    path = record_path(home_root, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_record(path, {"schema_version": _SCHEMA, "marker_sha256": digest, "entries": _entries(runtime_dir)})


def has_record(home_root: Path, name: str) -> bool:
    """Whether the runtime ``name`` has a trust record."""
    return record_path(home_root, name).is_file()


def forget_trust(home_root: Path, name: str) -> None:
    """Drop the record of a runtime that was removed."""
    record_path(home_root, name).unlink(missing_ok=True)


def _read(home_root: Path, name: str) -> dict[str, object] | None:
    payload = read_record(record_path(home_root, name), max_bytes=_MAX_RECORD_BYTES)
    return payload if isinstance(payload, dict) else None


def trust_problems(runtime_dir: Path) -> list[str]:
    """What differs between ``runtime_dir`` and what was accepted (empty: as accepted, or no record).

    A damaged record is itself a problem: it can no longer vouch for the folder.
    """
    home_root = _home_of(runtime_dir)
    if not record_path(home_root, runtime_dir.name).exists():
        return []
    try:
        record = _read(home_root, runtime_dir.name)
    except (OSError, ValueError):
        record = None
    entries = record.get("entries") if record else None
    if record is None or not isinstance(entries, dict) or not isinstance(record.get("marker_sha256"), str):
        return [f"its trust record {record_path(home_root, runtime_dir.name)} is damaged"]
    problems: list[str] = []
    if _marker_digest(runtime_dir) != record["marker_sha256"]:
        problems.append(f"{MARKER_NAME} was changed after the runtime was accepted")
    now = _entries(runtime_dir)
    unlisted = sorted(rel for rel in now if rel not in entries)
    problems += [f"{rel} is not part of the accepted runtime" for rel in unlisted[:_SHOWN]]
    if len(unlisted) > _SHOWN:
        problems.append(f"{len(unlisted) - _SHOWN} more entries are not part of the accepted runtime")
    for rel, kind in sorted(entries.items()):
        if rel not in now:
            problems.append(f"{rel} is missing")
        elif now[rel] != kind:
            problems.append(f"{rel} changed kind or target ({now[rel]!r}, accepted as {kind!r})")
    return problems


def make_read_only(runtime_dir: Path) -> None:
    """Make an accepted runtime folder read-only: files 0444 (0555 when executable), folders 0555.

    Links are left alone (their modes mean nothing on Linux). Children first, so a folder is
    still writable while its entries change.
    """
    for top, dirs, files in walk_tree(runtime_dir):
        for name in files:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                os.chmod(path, READ_ONLY_EXEC if st.st_mode & 0o111 else READ_ONLY_FILE)
        for name in dirs:
            os.chmod(os.path.join(top, name), READ_ONLY_DIR)
    os.chmod(runtime_dir, READ_ONLY_DIR)


def make_writable(runtime_dir: Path) -> None:
    """Let the owner write ``runtime_dir`` itself again (its marker is replaced in it)."""
    os.chmod(runtime_dir, READ_ONLY_DIR | stat.S_IWUSR)


def accept_runtime(home_root: Path, name: str, runtime_dir: Path) -> None:
    """Make the verified runtime ``name`` read-only and record it as accepted (the caller holds the lock).

    Raises:
        OSError: A mode could not be set or the record written; the runtime is not accepted.
    """
    make_read_only(runtime_dir)
    record_trust(home_root, name, runtime_dir)


def rewrite_accepted_marker(home_root: Path, name: str, runtime_dir: Path, marker: InstallMarker) -> None:
    """Replace the marker of the accepted runtime ``name`` in ``runtime_dir`` and record it again.

    For a new stored request (backend, channel); the caller holds the lock.

    The folder is writable only while the marker is replaced; a runtime with no record yet keeps none.

    Raises:
        OSError: The marker could not be replaced; the old one and its record stand.
    """
    from llama_runtime.runtime.marker import write_marker

    recorded = has_record(home_root, name)
    make_writable(runtime_dir)
    try:
        write_marker(runtime_dir, marker)
    finally:
        if recorded:
            make_read_only(runtime_dir)
    if recorded:
        record_trust(home_root, name, runtime_dir)
