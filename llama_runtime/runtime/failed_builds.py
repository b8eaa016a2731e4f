"""Builds that failed verification on this machine, so a scheduled job never fetches one again.

A build that does not run here (``--version`` fails, no device listed, the wrong version, a
newer macOS needed) fails the same way every time. ``failed-builds.json`` in the home
remembers each one with the reason; the update decision skips it until a newer build
appears or the user asks for it by tag, and a later success forgets it.

The file is data, not trust: a damaged or foreign file reads as no record, entries are
bounded in number and length, and writing is atomic.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from llama_runtime.runtime.fsutil import read_cache, write_record

FAILED_BUILDS_FILE: Final = "failed-builds.json"
#: Newest records kept: a scheduled job meets one new build a day at most; 32 is weeks of them.
MAX_RECORDS: Final = 32
#: A reason is one sentence for people; longer text is cut (a binary's output can be huge).
MAX_REASON_CHARS: Final = 500
_MAX_FILE_BYTES: Final = 256 * 1024


@dataclass(frozen=True)
class FailedBuild:
    """One build that failed verification here.

    Attributes:
        repo: Repository it came from.
        tag: Its build tag.
        asset: The runtime archive's file name (the same tag may have another, working backend).
        backend: Its backend.
        reason: Why it failed, for people.
        at: When (epoch seconds), for ordering only.
    """

    repo: str
    tag: str
    asset: str
    backend: str
    reason: str
    at: float = 0.0

    @property
    def key(self) -> tuple[str, str, str]:
        """``(repo, tag, asset)``: what identifies the build."""
        return (self.repo, self.tag, self.asset)

    def describe(self) -> str:
        """One line for people."""
        return f"{self.repo} {self.tag} ({self.backend}, {self.asset}): {self.reason}"


@dataclass(frozen=True)
class SkippedBuild:
    """A build an update passed over because it failed verification on this machine before.

    Attributes:
        tag: Its build tag.
        backend: Its backend.
        reason: Why it failed here, for people.
        until: When it is tried again, for people (a newer build, or being asked for).
    """

    tag: str
    backend: str
    reason: str
    until: str = "a newer build appears, or `update --retry-skipped` asks for it"

    def sentence(self) -> str:
        """The skip in one sentence for people."""
        return (
            f"{self.tag} ({self.backend}) failed verification on this machine before ({self.reason}); "
            f"skipped until {self.until}."
        )

    def to_json(self) -> dict[str, str]:
        """``{tag, backend, reason, until}``, as ``update``, ``check`` and ``status`` print it."""
        return {"tag": self.tag, "backend": self.backend, "reason": self.reason, "until": self.until}


def _path(home_root: Path) -> Path:
    return home_root / FAILED_BUILDS_FILE


def _parse(entry: object) -> FailedBuild | None:
    if not isinstance(entry, dict):
        return None
    texts = [entry.get(k) for k in ("repo", "tag", "asset", "backend", "reason")]
    at = entry.get("at", 0.0)
    if not all(isinstance(t, str) and 0 < len(t) <= 1000 for t in texts):
        return None
    if isinstance(at, bool) or not isinstance(at, int | float) or not 0 <= at < 1e11:
        at = 0.0
    repo, tag, asset, backend, reason = (str(t) for t in texts)
    return FailedBuild(repo, tag, asset, backend, reason[:MAX_REASON_CHARS], float(at))


def load_failed(home_root: Path) -> tuple[FailedBuild, ...]:
    """The records, newest first; a missing, damaged or foreign file is no record."""
    payload: Any = read_cache(_path(home_root), max_bytes=_MAX_FILE_BYTES)
    entries = payload.get("failed") if isinstance(payload, dict) else None
    if not isinstance(entries, list):
        return ()
    found = [b for b in (_parse(e) for e in entries[: MAX_RECORDS * 4]) if b is not None]
    return tuple(sorted(found, key=lambda b: b.at, reverse=True)[:MAX_RECORDS])


def _write(home_root: Path, builds: list[FailedBuild]) -> None:
    # Best effort: a home we cannot write (read-only, full) loses the memory, never the update's result.
    with contextlib.suppress(OSError):
        write_record(_path(home_root), {"failed": [asdict(b) for b in builds[:MAX_RECORDS]]})


def record_failed(home_root: Path, build: FailedBuild) -> None:
    """Remember ``build`` (replacing an older record of it)."""
    kept = [b for b in load_failed(home_root) if b.key != build.key]
    trimmed = FailedBuild(build.repo, build.tag, build.asset, build.backend, build.reason[:MAX_REASON_CHARS], build.at)
    _write(home_root, [trimmed, *kept])


def forget_failed(home_root: Path, repo: str, tag: str, asset: str) -> None:
    """Forget a build that has now verified here."""
    records = load_failed(home_root)
    kept = [b for b in records if b.key != (repo, tag, asset)]
    if len(kept) != len(records):
        _write(home_root, kept)
