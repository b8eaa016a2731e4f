"""The spans of a ranged download and their record on disk (``<partial>.ranges``).

Pure span arithmetic (how an asset is split, how much of it is contiguous from
byte 0) and the record that lets a later run resume each range.

Invariant: the record is a hint. It is replaced atomically (the one state-file
write, :func:`runtime.record.write_record`), but the data file it describes is
not fsynced: after a power cut it may claim bytes the file lost, and the digest
then fails and the download starts over (never a bad install). A record for another URL or size, or one
whose spans do not tile the asset, is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from llama_runtime.runtime.record import read_record, write_record

__all__ = [
    "Span",
    "contiguous",
    "data_path",
    "discard_ranged",
    "load_record",
    "plan_spans",
    "save_record",
    "state_path",
]

_DATA_SUFFIX: Final = ".ranged"
_STATE_SUFFIX: Final = ".ranges"


@dataclass
class Span:
    """Bytes ``start``..``end`` (exclusive) of the asset, ``done`` of them on disk."""

    start: int
    end: int
    done: int = 0

    @property
    def next(self) -> int:
        """The first byte not yet on disk."""
        return self.start + self.done

    @property
    def complete(self) -> bool:
        """Whether every byte of the span is on disk."""
        return self.next >= self.end


def plan_spans(size: int, parallel: int) -> list[Span]:
    """Split ``size`` bytes into ``parallel`` spans of (nearly) equal length (pure)."""
    count = max(1, min(parallel, size))
    bounds = [size * i // count for i in range(count + 1)]
    return [Span(bounds[i], bounds[i + 1]) for i in range(count)]


def contiguous(spans: list[Span]) -> int:
    """Bytes from offset 0 that are on disk, given ``spans`` in order (pure)."""
    total = 0
    for span in spans:
        total = span.next
        if not span.complete:
            break
    return total


def data_path(partial: Path) -> Path:
    """Where the ranges of ``partial`` are reassembled."""
    return partial.with_name(partial.name + _DATA_SUFFIX)


def state_path(partial: Path) -> Path:
    """The per-range record of ``partial``."""
    return partial.with_name(partial.name + _STATE_SUFFIX)


def _tmp_path(partial: Path) -> Path:
    # The temp file of earlier versions (written beside the record, then renamed): still removed.
    return partial.with_name(partial.name + _STATE_SUFFIX + ".tmp")


def discard_ranged(partial: Path) -> None:
    """Delete a ranged download's file and record (any may be missing)."""
    for path in (data_path(partial), state_path(partial), _tmp_path(partial)):
        path.unlink(missing_ok=True)


def load_record(partial: Path, url: str, size: int) -> tuple[list[Span], str | None] | None:
    """The spans and validator recorded for ``partial`` when they fit this asset and its data file, else ``None``."""
    try:
        raw = read_record(state_path(partial))
        on_disk = data_path(partial).stat().st_size
    except (OSError, ValueError):
        return None
    spans = _spans_from(raw, url, size) if on_disk == size else None
    if spans is None:
        return None
    validator = raw.get("validator") if isinstance(raw, dict) else None
    return spans, validator


def save_record(partial: Path, url: str, size: int, validator: str | None, spans: list[Span]) -> None:
    """Record each span's progress (a hint: a failure to write it only costs a fresh start)."""
    payload = {"url": url, "size": size, "validator": validator, "spans": [[s.start, s.end, s.done] for s in spans]}
    try:
        write_record(state_path(partial), payload)
    except OSError:
        # Only a hint is lost (resuming then starts this download over); a full
        # disk is reported by the next write of the data itself.
        return


def _spans_from(raw: object, url: str, size: int) -> list[Span] | None:
    """The spans of a record written for ``url`` and ``size``, or ``None`` if it is not one."""
    if not isinstance(raw, dict) or raw.get("url") != url or raw.get("size") != size:
        return None
    validator = raw.get("validator")
    items = raw.get("spans")
    if not (validator is None or isinstance(validator, str)) or not isinstance(items, list) or not items:
        return None
    spans: list[Span] = []
    expected_start = 0
    for item in items:
        if not (isinstance(item, list) and len(item) == 3 and all(type(v) is int for v in item)):
            return None
        start, end, done = item
        if start != expected_start or end <= start or not 0 <= done <= end - start:
            return None
        spans.append(Span(start, end, done))
        expected_start = end
    return spans if expected_start == size else None
