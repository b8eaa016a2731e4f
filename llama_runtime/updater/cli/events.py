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
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, Final

from llama_runtime.runtime.errors import BusyError

if TYPE_CHECKING:
    from llama_runtime.runtime.errors import LlamaRuntimeError
    from llama_runtime.updater.api.job_store import JobState
    from llama_runtime.updater.api.jobs import UpdateJob
    from llama_runtime.updater.api.service import RuntimeUpdater
    from llama_runtime.updater.cli.main import Output
    from llama_runtime.updater.progress import Progress

#: A progress bar redraws about ten times a second; more lines only cost the app parsing.
MAX_PROGRESS_PER_SECOND: Final[float] = 10.0
_PROGRESS_INTERVAL_SECONDS: Final[float] = 1.0 / MAX_PROGRESS_PER_SECOND

#: Every ``type`` a line can have; docs/events.md documents each (a test keeps them equal).
EVENT_TYPES: Final[tuple[str, ...]] = ("phase", "progress", "warning", "result", "error")


class EventStream:
    """Writes a job's states as JSON Lines; also the job listener of ``--events`` commands.

    Thread-safe: the job may report from its own thread while the command writes its result.

    Args:
        stream: Where lines go (default: standard output at write time).
        monotonic: Clock for the progress throttle.
    """

    def __init__(self, stream: IO[str] | None = None, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
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
            from llama_runtime.updater.progress import Progress  # the CLI has it loaded by now

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
        """Write one line; nothing after the last one."""
        with self._lock:
            self._write_locked(event)
            if last:
                self._closed = True

    def _write_locked(self, event: dict[str, Any]) -> None:
        if self._closed:
            return
        stream = self._stream if self._stream is not None else sys.stdout
        stream.write(json.dumps(event, sort_keys=True, default=str) + "\n")
        stream.flush()


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


def follow_events(job: UpdateJob, out: Output, timeout: float | None, *, attached: bool = False) -> int:
    """Stream another process's job as ``--events`` lines until it ends; its end is the last line.

    The last line has the ``--json`` keys of the command that follows: ``job wait``'s
    ``{"job": …}``, or for an attached ``update`` the update's own keys plus ``attached``.
    A job still running when ``timeout`` passes ends with an ``error`` line
    (``busy``, exit 3) beside ``job``, whose ``running`` is true: the follower
    stopped, the job did not.
    """
    assert out.events is not None
    events = out.events
    state = job.state()
    for state in job.events(timeout):
        events(state)
    result = state.result.to_json() if state.result else {}
    payload: dict[str, Any] = {**result, "attached": True, "job": state.id} if attached else {"job": state.to_json()}
    if state.phase in ("failed", "cancelled") and state.error:
        events.error_payload(state.error.to_json(), payload)
        code = state.error.exit_code
        return code if code is not None else (130 if state.phase == "cancelled" else 1)
    if state.running and not attached:
        events.error_payload(gave_up_error(state.id, timeout), payload)
        return BUSY_EXIT
    out.result(payload, [])
    return 0


def attach_events(updater: RuntimeUpdater, out: Output, busy: LlamaRuntimeError) -> int:
    """``update --events`` while another update job runs: follow that job instead of failing busy.

    Two windows pressing "Update" then show one progress; the lines carry ``attached: true``.
    Without a job record to follow (an update without one holds the lock), the busy error stands.
    """
    current = updater._job_store.current()
    if current is None or not current.running:
        raise busy
    from llama_runtime.updater.api.jobs import UpdateJob

    assert out.events is not None
    out.events.write({"type": "phase", "phase": "attached", "message": current.describe(), "job": current.id})
    return follow_events(UpdateJob(updater._job_store, current.id), out, None, attached=True)
