"""Damage seen by stat calls, confirmed by a hash: the stat fingerprints of installed files.

The home keeps, in ``fingerprints.json`` beside the pointer (outside every runtime
directory), one *stamp* per recorded file of each installed runtime: its size,
mtime, ctime and inode when its bytes last matched the marker's sha256. A file
whose stat still gives that stamp is taken as intact without being read; one
whose stamp differs (or was never recorded) is *suspect* and hashed against the
marker, as git's index does (Documentation/technical/racy-git.txt in git/git).
Intact bytes — after a ``touch``, a restore from backup, a ``cp -a`` of the home
(new inodes), a re-link to an identical copy — refresh the stamp; other bytes
are *damage*: a same-size garbage ``llama-server`` is no longer "ready".

Invariants:

* The marker, vouched for by the home's trust record (``runtime.trust``), is the trust; this
  file only caches checks made against it. A
  missing, damaged or foreign file reads as no stamps, which costs hashes once,
  never a wrong answer.
* A stamp is recorded only from a stat taken before the bytes were hashed (or
  right after an install verified them) and equal to one taken after: a write
  while hashing is never blessed. ctime is part of it because setting mtime back
  (``touch -r``) moves ctime; the link count is not, because a hard-link dedupe
  changes it without changing a byte (and the re-link's new inode and ctime
  make the file suspect-then-intact, not damage).
* Writing it is best effort and atomic: a read-only home still answers, it only
  hashes the suspect files again next time.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, NamedTuple

from llama_runtime.runtime.fsutil import read_record, sha256_file, write_record
from llama_runtime.runtime.marker import InstallMarker
from llama_runtime.runtime.trust import trust_problems

__all__ = ["FINGERPRINTS_NAME", "Fingerprints", "RuntimeCheck", "Stamp", "check_runtime", "record_runtime"]

#: The file in the home root that holds the stamps.
FINGERPRINTS_NAME: Final = "fingerprints.json"
_SCHEMA: Final = 1
#: A stamp is ~60 bytes of JSON; hundreds of files in a few runtimes are well under this.
_MAX_FILE_BYTES: Final = 4 * 1024 * 1024
#: Nesting of the file: {"runtimes": {name: {file: [4 ints]}}}.
_MAX_DEPTH: Final = 5

#: ``(size, mtime_ns, ctime_ns, inode)`` of a file whose bytes matched its record.
Stamp = tuple[int, int, int, int]


def stamp_of(st: os.stat_result) -> Stamp:
    """The stamp of a stat result (the link count is deliberately not in it; see the module docstring)."""
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


class RuntimeCheck(NamedTuple):  # not a dataclass: building one costs start-up 0.5 ms
    """What a check of one runtime's files found.

    Attributes:
        damage: One sentence fragment per file that is missing, changed size or
            no longer matches its recorded sha256 (empty: intact).
        suspect: Files whose stat differed from their stamp (or had none) and
            were therefore hashed, damaged or not.
    """

    damage: tuple[str, ...] = ()
    suspect: tuple[str, ...] = ()


def _valid_stamp(raw: object) -> Stamp | None:
    if isinstance(raw, list) and len(raw) == 4 and all(type(v) is int and v >= 0 for v in raw):
        return (raw[0], raw[1], raw[2], raw[3])
    return None


class Fingerprints:
    """The home's stamps, read once per operation (:meth:`load`) and written once (:meth:`save`).

    Args:
        path: The fingerprint file.
        runtimes: Runtime name -> recorded file (marker path) -> stamp.
    """

    def __init__(self, path: Path, runtimes: dict[str, dict[str, Stamp]] | None = None) -> None:
        self.path = path
        self.runtimes: dict[str, dict[str, Stamp]] = runtimes or {}
        self.changed = False

    @classmethod
    def load(cls, home_root: Path) -> Fingerprints:
        """The stamps of the home at ``home_root``; a missing or damaged file reads as none."""
        path = Path(home_root) / FINGERPRINTS_NAME
        return cls(path, _read(path))

    def check(
        self, name: str, root: Path, marker: InstallMarker, digest: Callable[[Path], str] | None = None
    ) -> RuntimeCheck:
        """Compare the runtime ``name`` in ``root`` with its marker: stat every file, hash the suspect ones.

        Stamps of files found intact are refreshed, those of damaged files dropped. ``digest``
        computes a file's sha256 (``HomeSnapshot.sha256``: each file hashed once per operation).
        """
        hasher = digest or sha256_file
        known = self.runtimes.get(name, {})
        fresh: dict[str, Stamp] = {}
        # First what the trust record says: a changed marker vouches for nothing below it.
        damage: list[str] = trust_problems(root)
        suspect: list[str] = []
        records = dict(marker.files)
        if marker.binary not in records and not (root / marker.binary).is_file():
            damage.append(f"{marker.binary} is missing")
        base = os.fspath(root) + "/"  # strings, not Paths: building hundreds of Paths cost more than their stats
        for rel, record in records.items():
            path = base + rel
            try:
                before = os.stat(path)
                if not stat.S_ISREG(before.st_mode):
                    damage.append(f"{rel} is missing")
                    continue
                if before.st_size != record.size:
                    damage.append(f"{rel} has {before.st_size} bytes, expected {record.size}")
                    continue
                seen = stamp_of(before)
                if known.get(rel) == seen:
                    fresh[rel] = seen
                    continue
                suspect.append(rel)
                intact = hasher(Path(path)) == record.sha256
                after = stamp_of(os.stat(path))
            except (FileNotFoundError, NotADirectoryError):
                damage.append(f"{rel} is missing")
                continue
            except OSError as exc:
                damage.append(f"{rel} cannot be read ({exc.strerror or exc})")
                continue
            if not intact:
                damage.append(f"{rel} does not match its recorded sha256")
            elif after == seen:  # unchanged while it was hashed: these stat values are these bytes
                fresh[rel] = seen
        if fresh != known:
            self.runtimes[name] = fresh
            self.changed = True
        return RuntimeCheck(tuple(damage), tuple(suspect))

    def record(self, name: str, root: Path, marker: InstallMarker) -> None:
        """Stamp every recorded file of a runtime whose bytes were just verified (install, repair).

        A file that is gone or has another size than its record gets no stamp (a later check hashes it).
        """
        fresh: dict[str, Stamp] = {}
        for rel, record in marker.files.items():
            try:
                st = os.stat(root / rel)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size == record.size:
                fresh[rel] = stamp_of(st)
        self.runtimes[name] = fresh
        self.changed = True

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget the stamps of runtimes not in ``names`` (removed since, by ``remove``, ``gc`` or hand)."""
        wanted = set(names)
        gone = [n for n in self.runtimes if n not in wanted]
        for name in gone:
            del self.runtimes[name]
        self.changed = self.changed or bool(gone)

    def save(self) -> bool:
        """Write the stamps when they changed; whether they are on disk now (a read-only home: no)."""
        if not self.changed:
            return True
        payload = {
            "schema_version": _SCHEMA,
            "runtimes": {n: {rel: list(s) for rel, s in files.items()} for n, files in sorted(self.runtimes.items())},
        }
        try:
            write_record(self.path, payload)
        except OSError:  # a cache: the next check hashes the suspect files again
            return False
        self.changed = False
        return True


def _read(path: Path) -> dict[str, dict[str, Stamp]]:
    """The stamps in ``path``; anything but a regular file of our shape reads as none (the marker is the trust)."""
    try:
        # Never blocks on a FIFO planted at this name; a link planted there is not ours to read
        # (writing replaces the link, never its target).
        payload = read_record(path, max_bytes=_MAX_FILE_BYTES, max_depth=_MAX_DEPTH, follow_links=False)
    except (OSError, ValueError):  # missing, not a regular file, unreadable, damaged: hash instead
        return {}
    if not isinstance(payload, dict) or payload.get("schema_version") != _SCHEMA:
        return {}
    runtimes = payload.get("runtimes")
    found: dict[str, dict[str, Stamp]] = {}
    for name, files in runtimes.items() if isinstance(runtimes, dict) else ():
        if isinstance(files, dict):
            found[name] = {rel: s for rel, raw_stamp in files.items() if (s := _valid_stamp(raw_stamp)) is not None}
    return found


def check_runtime(home_root: Path, name: str, root: Path, marker: InstallMarker) -> RuntimeCheck:
    """:meth:`Fingerprints.check` of one runtime, with the home's stamps read once and written back."""
    stamps = Fingerprints.load(home_root)
    found = stamps.check(name, root, marker)
    stamps.save()
    return found


def record_runtime(home_root: Path, name: str, root: Path, marker: InstallMarker) -> None:
    """:meth:`Fingerprints.record` of one runtime just verified; stamps of vanished runtimes are dropped.

    Best effort: a home where the file cannot be written is checked by hashing instead.
    """
    stamps = Fingerprints.load(home_root)
    runtimes_dir = root.parent
    stamps.keep_only(n for n in stamps.runtimes if (runtimes_dir / n).is_dir())
    stamps.record(name, root, marker)
    stamps.save()
