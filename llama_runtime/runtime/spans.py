"""Where an update's wall time goes: named spans and per-thread tallies, recorded only when asked for.

``scripts/bench.py --breakdown`` calls :func:`collect` before it runs an update
in-process and reads the :class:`Breakdown` afterwards. Nothing else turns it on:
then :func:`span` is one global lookup and :func:`timer` returns ``None``, so
the hot loops (one chunk of 1 MiB at a time) skip their clock reads entirely.

Two shapes, because phases overlap: a *span* is one stretch of a thread's wall
time with a start and an end (the download, the tree's flush, the switch); a
*tally* sums the seconds many short calls spent doing one thing (inflating,
writing, hashing, fsyncing), whichever thread made them. Clock: ``time.monotonic``
(CLOCK_MONOTONIC on Linux), so a parent process can place spans against its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Breakdown", "Span", "collect", "span", "stop_collecting", "tally", "timer"]


class Span:
    """One named stretch of wall time on one thread (``time.monotonic`` seconds)."""

    # A plain class, not a dataclass: this module is on every start-up's path, and building a
    # dataclass costs about half a millisecond of import time.
    __slots__ = ("end", "name", "start", "thread")

    def __init__(self, name: str, thread: str, start: float, end: float) -> None:
        self.name, self.thread, self.start, self.end = name, thread, start, end

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Breakdown:
    """What was recorded since :func:`collect`: spans in the order they ended, tallies (seconds) and counts by name."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.tallies: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()

    def add(self, name: str, seconds: float) -> None:
        with self.lock:
            self.tallies[name] = self.tallies.get(name, 0.0) + seconds
            self.counts[name] = self.counts.get(name, 0) + 1


_collector: Breakdown | None = None


def collect() -> Breakdown:
    """Start recording (a fresh :class:`Breakdown`, which is also returned)."""
    global _collector
    _collector = Breakdown()
    return _collector


def stop_collecting() -> None:
    """Stop recording; spans and tallies already taken stay in their :class:`Breakdown`."""
    global _collector
    _collector = None


@contextmanager
def span(name: str) -> Iterator[None]:
    """Record the block's wall time as one span named ``name`` (nothing when not collecting)."""
    collector = _collector
    if collector is None:
        yield
        return
    start = time.monotonic()
    try:
        yield
    finally:
        end = time.monotonic()
        with collector.lock:
            collector.spans.append(Span(name, threading.current_thread().name, start, end))


def timer() -> float | None:
    """A start time for :func:`tally`, or ``None`` when not collecting (the caller then skips it)."""
    return time.monotonic() if _collector is not None else None


def tally(name: str, started: float | None) -> None:
    """Add the seconds since ``started`` (from :func:`timer`) to the tally ``name``."""
    collector = _collector
    if started is not None and collector is not None:
        collector.add(name, time.monotonic() - started)
