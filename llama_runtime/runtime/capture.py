"""A child's output, read to its end in bounded memory, and its wait bounded by a timeout.

A build's ``--version`` or ``--list-devices`` prints a few kB. One that prints without end (a hostile
first run, a build stuck in a loop) must neither fill the updater's memory nor block on a full pipe:
its output is drained as it comes, and only its beginning and its end are kept.

Invariant: memory held per child is at most :data:`OUTPUT_CAP_BYTES` plus one read, whatever it prints.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Final

if TYPE_CHECKING:
    import subprocess

__all__ = ["OUTPUT_CAP_BYTES", "wait_and_capture"]

#: Bytes of a child's output kept (half from its beginning, half from its end): 1 MiB is hundreds of
#: times what any llama-server prints for ``--version`` or ``--list-devices``.
OUTPUT_CAP_BYTES: Final = 1024 * 1024
#: Bytes read from the pipe at a time.
_READ_BYTES: Final = 64 * 1024
#: Seconds to wait for the end of the output once the child is gone: a process it left behind may
#: hold the pipe open (the sandbox's launcher kills those; an unconfined run may not).
DRAIN_SECONDS: Final = 5.0


class _Kept:
    """The first and last bytes of a stream, and how many fell between them."""

    def __init__(self, cap: int) -> None:
        self.half = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def drain(self, stream: IO[bytes]) -> None:
        """Read ``stream`` to its end, then close it (only this thread reads or closes it)."""
        try:
            while chunk := os.read(stream.fileno(), _READ_BYTES):
                self._keep(chunk)
        except (OSError, ValueError):  # what was read stands
            pass
        finally:
            stream.close()

    def _keep(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > self.half:
            cut = len(self.tail) - self.half
            del self.tail[:cut]
            self.dropped += cut

    def text(self) -> str:
        gap = f"\n[… {self.dropped} bytes of output left out …]\n".encode() if self.dropped else b""
        return bytes(self.head + gap + self.tail).decode("utf-8", "replace")


def wait_and_capture(
    child: subprocess.Popen[bytes],
    timeout: float,
    stop: Callable[[subprocess.Popen[bytes]], None],
    cap: int = OUTPUT_CAP_BYTES,
) -> tuple[str, bool]:
    """Wait up to ``timeout`` seconds for ``child`` (``stop`` ends it past that), reading its stdout.

    The pipe is read, and closed at its end, by a thread of its own: a process the child left
    behind may hold it open past :data:`DRAIN_SECONDS`, and then what arrived by then is returned.

    Returns:
        The output kept (its first and last ``cap / 2`` bytes, the gap named), and whether the
        timeout passed.
    """
    import subprocess

    kept = _Kept(cap)
    stream = child.stdout
    reader = None
    if stream is not None:
        reader = threading.Thread(target=kept.drain, args=(stream,), name="child-output", daemon=True)
        reader.start()
    timed_out = False
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        stop(child)
    if reader is not None:
        reader.join(DRAIN_SECONDS)
    return kept.text(), timed_out
