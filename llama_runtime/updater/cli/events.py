"""``--events``: an update as JSON Lines on stdout, for apps in any language.

One object a line, flushed as it happens (schema: ``docs/events.md``):

* ``{"type": "phase", "phase", "message", "job"}`` when the job enters a phase;
* ``{"type": "progress", "phase", "done_bytes", "total_bytes", "rate", "eta", "message", "job"}``
  while bytes move, at most :data:`MAX_PROGRESS_PER_SECOND` a second;
* ``{"type": "warning", "message"}`` for each warning of the result;
* last, ``{"type": "result", …}`` with the keys of the command's ``--json`` object, or
  ``{"type": "error", "error": {"code", "message", …}}``.

Cancelling: the first SIGINT or SIGTERM asks the job to stop (the same request as
``llama-runtime job cancel``): the partial download is kept for a resume and the last
line is an error with code ``cancelled``. A second signal interrupts at once.

A reader that goes away or stops reading: lines are written by a writer thread
(:class:`_LineWriter`), never by the thread that runs the job, so a full pipe cannot
stall a download, hold the update lock past the job's own deadlines, or keep a cancel
(``job cancel``, the first signal) from being seen. The queue is bounded by keeping one
progress line at most: a newer one replaces an unwritten one (a progress bar only needs
the newest); phase, warning, result and error lines are never dropped (a job has a few
of them, so they bound the queue). The last line is waited for at most
:data:`LAST_LINE_TIMEOUT_SECONDS`; then the command exits with its own code without it.
A closed stdout (``EPIPE``) drops every later line and points stdout at the null device,
as the Python docs' note on SIGPIPE advises, so the update's own exit code stands and the
interpreter's last flush cannot print a ``BrokenPipeError``. Blocking writes on a thread
were chosen over a non-blocking descriptor: the same code for every platform's pipes and
for an app's own stream, and a partly written line never has to be kept and retried.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, Final

from llama_runtime import BusyError

if TYPE_CHECKING:
    from llama_runtime import JobState, LlamaRuntimeError, Progress

#: A progress bar redraws about ten times a second; more lines only cost the app parsing.
MAX_PROGRESS_PER_SECOND: Final[float] = 10.0
_PROGRESS_INTERVAL_SECONDS: Final[float] = 1.0 / MAX_PROGRESS_PER_SECOND

#: Every ``type`` a line can have; docs/events.md documents each (a test keeps them equal).
EVENT_TYPES: Final[tuple[str, ...]] = ("phase", "progress", "warning", "result", "error")

#: How often a writer retries a full non-blocking stdout: often enough for a progress bar, cheap enough to idle.
_FULL_PIPE_RETRY_SECONDS: Final[float] = 0.05

#: How long the command waits for a reader that stopped reading to take the last line; after
#: that it exits with its own code (the job is over and the lock released already), line unsaid.
LAST_LINE_TIMEOUT_SECONDS: Final[float] = 2.0


class _LineWriter:
    """Writes queued lines on its own daemon thread; ``put`` never blocks on the reader.

    At most one progress line waits (the newest); other lines wait in order, each after
    the progress line that came before it. Once the reader has gone (``EPIPE`` or any
    other write error), every line is dropped.

    Args:
        write: Writes one whole line to the reader (blocking as long as the reader lets it).
    """

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self._ready = threading.Condition()
        self._lines: deque[str] = deque()
        self._progress: str | None = None  # the newest progress line not written yet
        self._writing = False
        self._gone = False
        self._thread: threading.Thread | None = None

    def put(self, line: str, *, droppable: bool) -> None:
        """Queue ``line``; a ``droppable`` one replaces the progress line that still waits."""
        with self._ready:
            if self._gone:
                return
            if droppable:
                self._progress = line
            else:
                if self._progress is not None:  # keep the order the job reported in
                    self._lines.append(self._progress)
                    self._progress = None
                self._lines.append(line)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="llama-runtime-events", daemon=True)
                self._thread.start()
            self._ready.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for every queued line to be written (or dropped)."""
        with self._ready:
            return self._ready.wait_for(self._idle, timeout)

    def _idle(self) -> bool:
        return self._gone or (not self._writing and not self._lines and self._progress is None)

    def _run(self) -> None:
        while True:
            with self._ready:
                self._writing = False
                self._ready.notify_all()
                self._ready.wait_for(lambda: bool(self._lines) or self._progress is not None)
                if self._lines:
                    line = self._lines.popleft()
                else:
                    line, self._progress = self._progress or "", None
                self._writing = True
            try:
                self._write(line)
            except (OSError, ValueError):  # EPIPE, or a closed stream: the reader is gone for good
                with self._ready:
                    self._gone = True
                    self._lines.clear()
                    self._progress = None
                    self._ready.notify_all()
                return


def _stdout_writer() -> Callable[[str], None]:
    """Whole lines to standard output: its file descriptor when it has one, else its ``write``.

    Writing the descriptor, not ``sys.stdout``'s buffer, leaves that buffer's lock free: a
    writer thread blocked on a reader that stopped cannot stall the interpreter's exit.
    """
    stream = sys.stdout
    try:
        fd = stream.fileno()
        stream.flush()
    except (AttributeError, OSError, ValueError):  # no descriptor (an app's or a test's own stream)
        return _stream_writer(stream)

    def write(line: str) -> None:
        data = memoryview(line.encode("utf-8"))
        try:
            while data:  # a signal may cut a write short
                try:
                    data = data[os.write(fd, data) :]
                except BlockingIOError:  # an app's non-blocking pipe that is full: this thread may wait
                    time.sleep(_FULL_PIPE_RETRY_SECONDS)
        except OSError:
            # EPIPE (EINVAL on Windows): the reader is gone. Later writes and the interpreter's
            # last flush go nowhere, silently (Python docs, signal module, "Note on SIGPIPE").
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
            raise

    return write


def _stream_writer(stream: IO[str]) -> Callable[[str], None]:
    def write(line: str) -> None:
        stream.write(line)
        stream.flush()

    return write


class EventStream:
    """Writes a job's states as JSON Lines; also the job listener of ``--events`` commands.

    Thread-safe: the job may report from its own thread while the command writes its result.
    Never blocks on the reader: lines go through a :class:`_LineWriter` (see the module docstring).

    Args:
        stream: Where lines go (default: standard output at write time).
        monotonic: Clock for the progress throttle.
    """

    def __init__(self, stream: IO[str] | None = None, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._writer: _LineWriter | None = None
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._phase: str | None = None
        self._last_progress = float("-inf")
        self._closed = False
        #: The id of the job whose states arrive, once one has.
        self.job_id: str | None = None

    def __call__(self, state: JobState | Progress) -> None:
        """Report one state: a phase line on a change, a throttled progress line while bytes move.

        ``state`` is a job state (``JobState``: with ``id``, ``rate``, ``eta``) or a bare
        installer progress event (``use``, which runs no job).
        """
        job_id: str | None = getattr(state, "id", None)
        if job_id is not None:
            self.job_id = job_id
        if not getattr(state, "running", True):
            return  # the command's own last line (result or error) says how it ended
        with self._lock:
            if state.phase != self._phase:
                self._phase = state.phase
                self._last_progress = float("-inf")
                self._write_locked({"type": "phase", "phase": state.phase, "message": state.message, "job": job_id})
            if state.phase != "download":
                return
            now = self._monotonic()
            complete = state.total_bytes is not None and state.done_bytes >= state.total_bytes
            if not complete and now - self._last_progress < _PROGRESS_INTERVAL_SECONDS:
                return
            self._last_progress = now
            from llama_runtime import Progress  # the CLI has it loaded by now

            event = state if isinstance(state, Progress) else state.progress
            # The one place a progress event becomes a line (docs/events.md, ``type: progress``).
            self._write_locked({"type": "progress", **event.to_json(), "job": job_id})

    def warning(self, message: str) -> None:
        """A warning line."""
        self.write({"type": "warning", "message": message})

    def result(self, payload: dict[str, Any]) -> None:
        """The last line of a command that succeeded: its ``--json`` object, typed ``result``."""
        for message in payload.get("warnings") or ():
            if isinstance(message, str):
                self.warning(message)
        if self._phase is not None:  # a job ran: its end is a phase too
            self.write({"type": "phase", "phase": "done", "message": "", "job": self.job_id})
        self.write({"type": "result", **payload}, last=True)

    def error(self, exc: LlamaRuntimeError) -> None:
        """The last line of a command that failed (or was cancelled)."""
        self.write({"type": "error", "error": exc.to_json()}, last=True)

    def error_payload(self, error: dict[str, Any], extra: dict[str, Any] | None = None) -> None:
        """The last line for a failure known only as its JSON (a followed job's ``error``)."""
        self.write({"type": "error", "error": error, **(extra or {})}, last=True)

    def write(self, event: dict[str, Any], *, last: bool = False) -> None:
        """Queue one line; nothing after the last one, which is waited for a few seconds at most."""
        with self._lock:
            self._write_locked(event)
            if last:
                self._closed = True
        if last:
            self.drain(LAST_LINE_TIMEOUT_SECONDS)

    def drain(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the queued lines to reach the reader; whether they did.

        Lines the reader will never take (it closed its end) count as done.
        """
        with self._lock:
            writer = self._writer
        return writer is None or writer.drain(timeout)

    def _write_locked(self, event: dict[str, Any]) -> None:
        if self._closed:
            return
        if self._writer is None:  # the stream is resolved at the first line (tests swap sys.stdout)
            write = _stream_writer(self._stream) if self._stream is not None else _stdout_writer()
            self._writer = _LineWriter(write)
        line = json.dumps(event, sort_keys=True, default=str) + "\n"
        self._writer.put(line, droppable=event.get("type") == "progress")


@contextlib.contextmanager
def cancel_on_signals(request_cancel: Callable[[], bool]) -> Iterator[None]:
    """While inside, the first SIGINT/SIGTERM asks the job to stop; a second one interrupts.

    ``request_cancel`` asks the running job to stop and says whether there was one to ask;
    with none yet (still resolving before the job is claimed), the signal interrupts at once.
    Only the main thread can install handlers: elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    asked = threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        if asked.is_set() or not request_cancel():
            raise KeyboardInterrupt
        asked.set()

    handled = [signal.SIGINT, signal.SIGTERM]
    if sys.platform == "win32":  # what a parent sends a console child on Windows
        handled.append(signal.SIGBREAK)
    previous = {sig: signal.signal(sig, handle) for sig in handled}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: ``job wait`` that gave up while the job still runs: the contract's "busy" (the job is not over).
BUSY_EXIT: Final = BusyError.exit_code


def gave_up_error(job_id: str, timeout: float | None) -> dict[str, object]:
    """The contract's error object of a ``job wait --timeout`` that stopped waiting before the job ended."""
    waited = f" after {timeout:g}s" if timeout is not None else ""
    return {
        "code": BusyError.code,
        "message": f"Stopped waiting{waited}: job {job_id} is still running.",
        "exit_code": BUSY_EXIT,
        "hint": "Run `llama-runtime job wait` again to keep following it, or `llama-runtime job cancel` to stop it.",
    }
