"""Download rate and ETA, and the progress bar people see on a terminal.

Invariant: the bar writes to stderr only, and only when stderr is a TTY, so
``--json`` output and logs piped to a file carry nothing extra.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol, TextIO

# Below this much elapsed time a rate is mostly noise from the first chunk.
_MIN_RATE_WINDOW_SECONDS: Final[float] = 0.2
# Redraws faster than this flicker and cost syscalls for nothing a person can read.
_REDRAW_SECONDS: Final[float] = 0.1
# Characters of the bar itself; fits an 80-column terminal with the numbers.
_BAR_WIDTH: Final[int] = 28


class ProgressLike(Protocol):
    """What the bar reads: an installer ``Progress`` or a job state."""

    @property
    def phase(self) -> str: ...
    @property
    def done_bytes(self) -> int: ...
    @property
    def total_bytes(self) -> int | None: ...
    @property
    def message(self) -> str: ...


@dataclass
class RateMeter:
    """Average download rate since the first byte seen for the current file.

    Bytes already on disk when a resumed download starts are not counted as
    transferred, so a resume does not show an absurd rate.
    """

    clock: Callable[[], float] = time.monotonic
    _key: str | None = None
    _start_bytes: int = 0
    _start_time: float = 0.0

    def sample(self, key: str, done: int, total: int | None) -> tuple[float | None, float | None]:
        """Record ``done`` bytes of file ``key``; returns ``(bytes_per_second, eta_seconds)``."""
        now = self.clock()
        if key != self._key or done < self._start_bytes:
            self._key, self._start_bytes, self._start_time = key, done, now
            return None, None
        elapsed = now - self._start_time
        if elapsed < _MIN_RATE_WINDOW_SECONDS:
            return None, None
        rate = (done - self._start_bytes) / elapsed
        if rate <= 0 or total is None:
            return (rate if rate > 0 else None), None
        return rate, max(total - done, 0) / rate


def format_bar(done: int, total: int | None, rate: float | None, eta: float | None, label: str) -> str:
    """One line of progress, e.g. ``[#####-----]  45%  12.3/27.0 MB  3.2 MB/s  ETA 5s  name``."""
    from llama_runtime.updater.install.download import human_size

    if total:
        frac = min(done / total, 1.0)
        filled = int(frac * _BAR_WIDTH)
        head = (
            f"[{'#' * filled}{'-' * (_BAR_WIDTH - filled)}] {frac * 100:3.0f}%  {human_size(done)}/{human_size(total)}"
        )
    else:
        head = f"{human_size(done)}"
    parts = [head]
    if rate:
        parts.append(f"{human_size(int(rate))}/s")
    if eta is not None:
        parts.append(f"ETA {int(eta)}s")
    parts.append(label)
    return "  ".join(parts)


@dataclass
class TerminalProgress:
    """A progress callback for :meth:`updater.install.Installer.update` that draws on a TTY."""

    stream: TextIO
    clock: Callable[[], float] = time.monotonic
    meter: RateMeter = field(default_factory=RateMeter)
    _open_line: bool = False
    _last_draw: float = 0.0
    _phase: str = ""

    def __call__(self, event: ProgressLike) -> None:
        if event.phase == "download":
            self._download(event)
            return
        if event.phase != self._phase:
            self._end_line()
            self.stream.write(f"{event.phase}: {event.message}\n" if event.message else f"{event.phase}\n")
            self.stream.flush()
        self._phase = event.phase

    def _download(self, event: ProgressLike) -> None:
        self._phase = "download"
        rate, eta = self.meter.sample(event.message, event.done_bytes, event.total_bytes)
        now = self.clock()
        finished = event.total_bytes is not None and event.done_bytes >= event.total_bytes
        if not finished and now - self._last_draw < _REDRAW_SECONDS:
            return
        self._last_draw = now
        line = format_bar(event.done_bytes, event.total_bytes, rate, eta, event.message)
        self.stream.write("\r\x1b[2K" + line)
        self.stream.flush()
        self._open_line = True

    def _end_line(self) -> None:
        if self._open_line:
            self.stream.write("\n")
            self._open_line = False

    def close(self) -> None:
        """Finish an open bar line."""
        self._end_line()
        self.stream.flush()


def terminal_progress(stream: TextIO | None = None) -> TerminalProgress | None:
    """A progress bar on ``stream`` (stderr by default) if it is a terminal, else ``None``."""
    target = sys.stderr if stream is None else stream
    try:
        is_tty = target.isatty()
    except (AttributeError, ValueError):
        is_tty = False
    return TerminalProgress(target) if is_tty else None
