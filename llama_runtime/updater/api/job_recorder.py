"""The job as its own process runs it: progress events in, persisted job states out.

Only the process that runs an update job records it; every other caller reads
the states it persists (:mod:`~updater.api.job_store`) or receives them as a
listener. Writes are throttled, phase changes and finished files never are.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock
from llama_runtime.updater.api.job_state import JobError, JobListener, JobPhase, JobResult, JobState
from llama_runtime.updater.logs import get_logger

if TYPE_CHECKING:
    from llama_runtime.updater.activate.outcome import UpdateOutcome
    from llama_runtime.updater.api.job_store import JobStore
    from llama_runtime.updater.progress import Progress

log = get_logger("llama_runtime.jobs")

# Writing the state on every chunk would fsync hundreds of times a second;
# four times a second is smooth enough for a progress bar in another process.
PERSIST_INTERVAL_SECONDS: Final[float] = 0.25
# A cancel file is a stat() per check; ten checks a second stop a job within
# one chunk without measurable cost.
CANCEL_POLL_SECONDS: Final[float] = 0.1


class JobRecorder:
    """Turns the installer's progress events into job states: persisted, and sent to listeners.

    Used only by the process that runs the job. Thread-safe: listeners may
    subscribe from other threads while the job runs.
    """

    def __init__(self, store: JobStore, state: JobState, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.store = store
        self._state = state
        self._clock = clock
        from llama_runtime.updater.api.progress import RateMeter  # deferred: only a running job meters

        self._meter = RateMeter(clock)
        self._lock = threading.Lock()
        self._listeners: list[JobListener] = []
        self._last_persist = 0.0
        self._last_cancel_poll = 0.0
        self._cancelled = threading.Event()
        #: What the job's work returned (its process only; others read ``state.result``).
        self.outcome: UpdateOutcome | None = None
        self.started = threading.Event()
        self.finished = threading.Event()
        self.exception: BaseException | None = None
        if state.running and state.pid == os.getpid():
            store.adopt(state.id)

    @property
    def state(self) -> JobState:
        """The latest snapshot."""
        with self._lock:
            return self._state

    def subscribe(self, listener: JobListener) -> Callable[[], None]:
        """Call ``listener`` with every new state; returns the unsubscribe function."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unsubscribe

    def on_progress(self, event: Progress) -> None:
        """Record one installer progress event (the installer's progress callback)."""
        self.started.set()
        rate, eta = (None, None)
        if event.phase == "download":
            rate, eta = self._meter.sample(event.message, event.done_bytes, event.total_bytes)
        event = replace(event, rate=rate, eta=eta)
        with self._lock:
            changed_phase = event.phase != self._state.phase
            state = self._state.with_progress(event, at=self._clock.time())
        now = self._clock.monotonic()
        finished_file = event.total_bytes is not None and event.done_bytes >= event.total_bytes
        if changed_phase or finished_file or now - self._last_persist >= PERSIST_INTERVAL_SECONDS:
            self._last_persist = now
            self.store.write(state)
        # Published in memory only once persisted: whoever sees a new phase here
        # (this process) finds it in the job file too (other processes, busy errors).
        with self._lock:
            self._state = state
        self._notify(state)

    def finish(
        self, phase: JobPhase, *, result: dict[str, Any] | None = None, exc: BaseException | None = None
    ) -> None:
        """Record the end of the job (``done``, ``failed`` or ``cancelled``) and wake waiters."""
        error: JobError | None = None
        if exc is not None:
            to_json = getattr(exc, "to_json", None)
            error = JobError.from_json(
                to_json() if callable(to_json) else {"code": "internal_error", "message": str(exc)}
            )
        with self._lock:
            self.exception = exc
            self._state = replace(
                self._state,
                phase=phase,
                result=JobResult.from_json(result) if result is not None else None,
                error=error,
                rate=None,
                eta=None,
                updated_at=self._clock.time(),
            )
            state = self._state
        try:
            self.store.write(state)
        except OSError as write_error:
            # The job is over either way; a record left saying "running" would
            # block every later update for as long as this process lives.
            log.warning("could not record the end of the update job", job=state.id, error=str(write_error))
            self.store.drop_running(state.id)
        finally:
            self.store.disown(state.id)
            self.store.clear_cancel(state.id)
            # Listeners first: whoever returns from wait() may rely on every
            # subscriber having seen the final state (a UI's last redraw).
            self._notify(state)
            self.started.set()
            self.finished.set()

    def _notify(self, state: JobState) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            with contextlib.suppress(Exception):  # a listener's bug must not break the update
                listener(state)

    def cancel(self) -> None:
        """Ask the job to stop (this process)."""
        self._cancelled.set()

    def cancel_requested(self) -> bool:
        """The installer's cancel check: this process asked, or a cancel file appeared."""
        if self._cancelled.is_set():
            return True
        now = self._clock.monotonic()
        if now - self._last_cancel_poll < CANCEL_POLL_SECONDS:
            return False
        self._last_cancel_poll = now
        if self.store.cancel_requested(self.state.id):
            self._cancelled.set()
            return True
        return False
