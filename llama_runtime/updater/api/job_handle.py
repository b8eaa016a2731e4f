"""A handle on an update job: its state, waiting for it, following it, cancelling it.

The process that runs the job holds its :class:`~updater.api.job_recorder.JobRecorder`
and sees every event; any other process (or a restarted app) follows the states
the job persists in ``<home>/jobs/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final

from llama_runtime.updater.api.job_state import JobError, JobListener, JobState

if TYPE_CHECKING:
    from llama_runtime.updater.activate.outcome import UpdateOutcome
    from llama_runtime.updater.api.job_recorder import JobRecorder
    from llama_runtime.updater.api.job_store import JobStore

__all__ = ["UpdateJob"]

# How often a handle on another process's job re-reads the job file; the
# owner persists at most four times a second, so faster polling sees nothing new.
FOLLOW_POLL_SECONDS: Final[float] = 0.1


class UpdateJob:
    """A handle on an update job, in this process or in another one.

    Every state is a :class:`~updater.api.job_state.JobState`; the job's own process
    sees every event, a follower sees the states persisted in the job file.
    """

    def __init__(self, store: JobStore, job_id: str, recorder: JobRecorder | None = None) -> None:
        self._store = store
        self._recorder = recorder
        self.id = job_id

    @property
    def owned(self) -> bool:
        """Whether this process runs the job (else it follows the job file)."""
        return self._recorder is not None

    @property
    def outcome(self) -> UpdateOutcome | None:
        """What an owned job installed (or found up to date); ``None`` until it is done."""
        return self._recorder.outcome if self._recorder else None

    @property
    def exception(self) -> BaseException | None:
        """The error that ended an owned job, if any."""
        return self._recorder.exception if self._recorder else None

    def state(self) -> JobState:
        """The latest state of the job."""
        if self._recorder is not None:
            return self._recorder.state
        state = self._store.get(self.id)
        if state is None:
            error = JobError.from_json({"code": "job_lost", "message": f"The record of update job {self.id} is gone."})
            return JobState(id=self.id, phase="failed", pid=0, error=error)
        return state

    def wait(self, timeout: float | None = None) -> JobState:
        """Wait until the job is over or ``timeout`` seconds pass; returns the latest state."""
        if self._recorder is not None:
            self._recorder.finished.wait(timeout)
            return self._recorder.state
        # Waiting stays on the real clock (runtime.clock): a frozen test clock would never time out.
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = self.state()
            if not state.running or (deadline is not None and time.monotonic() >= deadline):
                return state
            time.sleep(FOLLOW_POLL_SECONDS)

    def cancel(self) -> None:
        """Ask the job to stop; it discards what it staged and keeps the downloaded bytes."""
        self._store.request_cancel(self.id)
        if self._recorder is not None:
            self._recorder.cancel()

    def subscribe(self, callback: JobListener) -> Callable[[], None]:
        """Call ``callback`` with each new state until the job is over; returns unsubscribe.

        For another process's job, a daemon thread polls the job file.
        """
        if self._recorder is not None:
            return self._recorder.subscribe(callback)
        import threading  # deferred, like everything start-up does not need

        stop = threading.Event()

        def follow() -> None:
            last: JobState | None = None
            while not stop.is_set():
                state = self.state()
                if state != last:
                    callback(state)
                    last = state
                if not state.running:
                    return
                stop.wait(FOLLOW_POLL_SECONDS)

        threading.Thread(target=follow, name=f"llama-runtime-follow-{self.id}", daemon=True).start()
        return stop.set

    def events(self, timeout: float | None = None) -> Iterator[JobState]:
        """Iterate over the job's states until it is over (the last one is terminal)."""
        import queue  # deferred, like everything start-up does not need

        inbox: queue.Queue[JobState] = queue.Queue()
        unsubscribe = self.subscribe(inbox.put)
        deadline = None if timeout is None else time.monotonic() + timeout  # a wait: the real clock, as above
        try:
            current = self.state()
            yield current
            while current.running:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                try:
                    current = inbox.get(timeout=min(left, 1.0) if left is not None else 1.0)
                except queue.Empty:
                    current = self.state()  # an owner that died sends nothing more
                    if not current.running:
                        yield current
                    continue
                yield current
        finally:
            unsubscribe()
