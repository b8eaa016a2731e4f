"""The progress bar people see on a terminal: one line that fits, redrawn at most ten times a second.

It reads installer progress events and job states alike (:class:`ProgressLike`) and
measures the download rate itself.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, TextIO

from llama_runtime import Progress

if TYPE_CHECKING:
    from llama_runtime import Clock

__all__ = ["ProgressLike", "TerminalProgress", "format_bar", "terminal_progress", "terminal_width"]

# Redraws faster than this flicker and cost syscalls for nothing a person can read.
_REDRAW_SECONDS: Final[float] = 0.1
# Characters of the bar itself at most; it narrows to fit the terminal.
_BAR_WIDTH: Final[int] = 28
# A bar narrower than this says nothing the percentage does not: leave it out.
_MIN_BAR_WIDTH: Final[int] = 8
# Fewer columns than this for the asset name: leave the name out.
_MIN_LABEL: Final[int] = 8


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


def format_bar(done: int, total: int | None, rate: float | None, eta: float | None, label: str, width: int = 80) -> str:
    """One line of progress that fits ``width`` columns, e.g.
    ``[#####-----]  45%  12.3 MB/27.0 MB  3.2 MB/s  ETA 5s  name``.

    The numbers always show; the bar narrows, then the label is shortened, so a
    narrow terminal never wraps the line (a wrapped line leaves stale rows behind
    every redraw).
    """
    from llama_runtime import Vocabulary

    numbers = (
        [f"{min(done / total, 1.0) * 100:3.0f}%", f"{Vocabulary.size(done)}/{Vocabulary.size(total)}"] if total else []
    )
    numbers = numbers or [Vocabulary.size(done)]
    if rate:
        numbers.append(f"{Vocabulary.size(int(rate))}/s")
    if eta is not None:
        numbers.append(f"ETA {int(eta)}s")
    text = "  ".join(numbers)
    room = max(width - 1, 1)  # never the last column: terminals differ in when they wrap there
    if total:
        # The bar gives way to the label first, down to its narrowest.
        spare = room - len(text) - len("[]  ") - len("  ") - len(label)
        bar_width = max(min(_BAR_WIDTH, spare), _MIN_BAR_WIDTH)
        if len(text) + len("[]  ") + bar_width > room:
            bar_width = 0
        if bar_width >= _MIN_BAR_WIDTH:
            filled = int(min(done / total, 1.0) * bar_width)
            text = f"[{'#' * filled}{'-' * (bar_width - filled)}]  {text}"
    space = room - len(text) - 2
    if space >= _MIN_LABEL and label:
        text += "  " + (label if len(label) <= space else label[: space - 1] + "…")
    return text[:room].rstrip()


def terminal_width(stream: TextIO, default: int = 80) -> int:
    """Columns of the terminal ``stream`` writes to (``default`` when it cannot tell)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or default
    except (AttributeError, ValueError, OSError):
        return default


@dataclass
class TerminalProgress:
    """A progress callback (installer events or job states) that draws on a TTY."""

    stream: TextIO
    clock: Clock | None = None  # None: the system's
    _open_line: bool = False
    _last_draw: float = 0.0
    _phase: str = ""

    def __post_init__(self) -> None:
        self.meter = Progress.rate_meter(self.clock)  # the bar and its rates read one clock

    def __call__(self, event: ProgressLike) -> None:
        if event.phase == "download":
            self._download(event)
            return
        if event.phase != self._phase:
            self._end_line()
            text = f"{event.phase}: {event.message}" if event.message else event.phase
            self.stream.write(text[: max(terminal_width(self.stream) - 1, 1)] + "\n")
            self.stream.flush()
        self._phase = event.phase

    def _download(self, event: ProgressLike) -> None:
        self._phase = "download"
        rate, eta = self.meter.sample(event.message, event.done_bytes, event.total_bytes)
        now = self.meter.clock.monotonic()
        finished = event.total_bytes is not None and event.done_bytes >= event.total_bytes
        if not finished and now - self._last_draw < _REDRAW_SECONDS:
            return
        self._last_draw = now
        line = format_bar(event.done_bytes, event.total_bytes, rate, eta, event.message, terminal_width(self.stream))
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
