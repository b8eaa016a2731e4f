"""Claim a home's one update job and run it: single-flight across threads and processes.

The claim (:meth:`~updater.api.job_store.JobStore.claim`) decides who runs;
the runner then carries the request out through the engine's installer, in a
thread (the button) or here (the CLI, the scheduled check), and every way the
work can end, a bug or Ctrl-C included, ends the job record too.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock, when_text
from llama_runtime.runtime.errors import (
    BusyError,
    CancelledError,
    LlamaRuntimeError,
    RateLimitError,
    UserInputError,
    os_failure,
)
from llama_runtime.runtime.lock import BUTTON_WAIT_SECONDS, UpdateLock
from llama_runtime.updater.api.boundary import front_door, front_door_iterator
from llama_runtime.updater.api.job_store import JobError, JobListener, JobPhase, JobResult, JobState
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.progress import RateMeter

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import Home
    from llama_runtime.updater.activate.attempts import UpdateOutcome
    from llama_runtime.updater.api.job_store import JobStore
    from llama_runtime.updater.choice.decide import UpdateRequest
    from llama_runtime.updater.engine import Engine
    from llama_runtime.updater.progress import CancelCheck, ProgressCallback
    from llama_runtime.updater.sources.source import BuildSource

    JobWork = Callable[[ProgressCallback, CancelCheck], tuple[dict[str, object], UpdateOutcome | None]]
    from llama_runtime.updater.progress import Progress

__all__ = ["JobRunner", "UpdateJob", "busy_error", "refuse_if_locked", "validate_seconds"]


# -- job_recorder: The job as its own process runs it: events in, job states out. --------------------------------

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
        """Call ``listener`` with every new state; returns the unsubscribe function.

        A job already over calls ``listener`` once, here, with its final state: a
        progress dialog opened late still learns how the job ended.
        """
        with self._lock:
            # finish() publishes the final state before it copies the listeners, both under
            # this lock: a listener is either notified by finish() or sees it ended here, never both.
            ended = None if self._state.running else self._state
            if ended is None:
                self._listeners.append(listener)
        if ended is not None:
            with contextlib.suppress(Exception):  # a listener's bug must not break the caller, as in _notify
                listener(ended)

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
            said = to_json() if callable(to_json) else None
            error = JobError.from_json(
                said if isinstance(said, dict) else {"code": "internal_error", "message": str(exc)}
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


# -- job_handle: A handle on an update job: its state, waiting for it, following it, cancelling it. --------------

# How often a handle on another process's job re-reads the job file; the
# owner persists at most four times a second, so faster polling sees nothing new.
FOLLOW_POLL_SECONDS: Final[float] = 0.1


class UpdateJob:
    """A handle on an update job, in this process or in another one.

    Every state is a :class:`~updater.api.job_store.JobState`; the job's own process
    sees every event, a follower sees the states persisted in the job file.
    """

    def __init__(self, store: JobStore, job_id: str, recorder: JobRecorder | None = None) -> None:
        self._store = store
        self._recorder = recorder
        self.id = job_id

    @property
    @front_door
    def owned(self) -> bool:
        """Whether this process runs the job (else it follows the job file)."""
        return self._recorder is not None

    @property
    @front_door
    def outcome(self) -> UpdateOutcome | None:
        """What an owned job installed (or found up to date); ``None`` until it is done."""
        return self._recorder.outcome if self._recorder else None

    @property
    @front_door
    def exception(self) -> BaseException | None:
        """The error that ended an owned job, if any."""
        return self._recorder.exception if self._recorder else None

    @front_door
    def state(self) -> JobState:
        """The latest state of the job."""
        if self._recorder is not None:
            return self._recorder.state
        state = self._store.get(self.id)
        if state is None:
            error = JobError.from_json({"code": "job_lost", "message": f"The record of update job {self.id} is gone."})
            return JobState(id=self.id, phase="failed", pid=0, error=error)
        return state

    @front_door
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

    @front_door
    def cancel(self) -> None:
        """Ask the job to stop; it discards what it staged and keeps the downloaded bytes."""
        self._store.request_cancel(self.id)
        if self._recorder is not None:
            self._recorder.cancel()

    @front_door
    def subscribe(self, callback: JobListener) -> Callable[[], None]:
        """Call ``callback`` with each new state until the job is over; returns unsubscribe.

        The last call is always the final state (``done``, ``failed`` or ``cancelled``);
        on a job already over, ``callback`` is called once with that state. For another
        process's job, a daemon thread polls the job file.
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

    @front_door_iterator
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


# -- jobs --------------------------------------------------------------------------------------------------------

# The button returns once the job holds the lock (its first event): lock
# acquisition never waits, so this bound is only hit by a hung filesystem.
START_TIMEOUT_SECONDS: Final[float] = 30.0
#: Pause before claiming again after another process won the claim (seconds): long enough
#: for its job record to be readable, short next to any --wait a person types.
_CLAIM_RETRY_SECONDS: Final[float] = 0.05


def busy_error(home: Home, jobs: JobStore) -> BusyError:
    """Who updates ``home`` now, in one sentence: the lock's holder and its job's progress."""
    owner = UpdateLock(home.lock_path).owner()
    doing = f" ({owner.operation}, pid {owner.pid})" if owner is not None else ""
    message = f"Another llama-runtime process is updating this runtime{doing}."
    job = jobs.current()
    if job is not None and job.running:
        message += f" Its job {job.id}: {job.describe()}."
    return BusyError(message, hint="Wait for it to finish, or follow it with `llama-runtime job wait`.")


def refuse_if_locked(home: Home, jobs: JobStore) -> None:
    """Raise :func:`busy_error` while another update holds the lock of ``home``.

    Only a real probe of the lock decides: the owner record survives a crash
    (kill -9) and its pid may be ours again after a restart.
    """
    if UpdateLock(home.lock_path).is_held():
        raise busy_error(home, jobs)


def validate_seconds(value: float, what: str) -> float:
    """``value`` if it is a finite number of seconds, 0 or more.

    Raises:
        UserInputError: NaN, infinite or negative (``what`` names the option).
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise UserInputError(f"Invalid {what} {value!r}; use a finite number of seconds, 0 or more.")
    return float(value)


class JobRunner:
    """Starts update jobs on one home and runs them through the engine.

    Args:
        home: The llama-runtime home.
        jobs: Its job records.
        engine: Builds the release source and the installer.
    """

    def __init__(self, home: Home, jobs: JobStore, engine: Engine) -> None:
        self.home = home
        self.jobs = jobs
        self.engine = engine

    def start(
        self,
        request: UpdateRequest,
        *,
        join: bool,
        lock_timeout: float,
        operation: str,
        background: bool,
        listener: JobListener | None,
    ) -> UpdateJob:
        """Claim the job for ``request`` and run it, or join (``join``) the one that runs.

        Raises:
            BusyError: Another update runs and ``join`` is false, or it holds the lock
                without a job record (no ``lock_timeout`` to wait for it).
            UnsafeHomeError: The home is not safely ours (checked before any job record is read).
        """
        self.home.check_safe()

        def work(progress: ProgressCallback, cancel: CancelCheck) -> tuple[dict[str, object], UpdateOutcome | None]:
            source: BuildSource | None = None
            try:
                source = self.engine.open_source()
                self._hold_while_rate_limited(source)
                # The claim found the lock free; the grace only rides over another
                # process's non-blocking probe of it (``update_running``).
                outcome = self.engine.installer(source).update(
                    request, progress=progress, cancel=cancel, lock_timeout=max(lock_timeout, BUTTON_WAIT_SECONDS)
                )
                return outcome.to_json(), outcome
            except RateLimitError as exc:
                self._store_backoff(exc)
                raise
            finally:
                if source is not None:
                    source.close()

        return self.start_work(
            work,
            tag=request.tag,
            join=join,
            refuse_locked=not lock_timeout,
            operation=operation,
            background=background,
            listener=listener,
        )

    def run_here(
        self,
        request: UpdateRequest,
        *,
        wait: float = 0.0,
        operation: str = "cli",
        listener: JobListener | None = None,
    ) -> UpdateJob:
        """Run ``request`` here, as the job others follow; returns once it has succeeded.

        A job that runs already is waited for (at most ``wait`` seconds), never
        joined: the caller asked for its own request.

        Raises:
            BusyError: Another update still runs after ``wait`` seconds.
            UserInputError: ``wait`` is negative or not finite.
            LlamaRuntimeError: The error that ended the job (its record keeps it for followers).
        """
        wait = validate_seconds(wait, "wait")
        # Before any job record is read: a record that is a link out of the home is refused, not set aside.
        self.home.check_safe()
        # A deadline of a wait, so the real clock (runtime.clock: waiting needs real time to
        # pass, whatever a fake clock says; a frozen test clock would wait here for ever).
        deadline = time.monotonic() + wait
        while True:
            running = self.jobs.current()
            if running is not None and running.running and deadline > time.monotonic():
                UpdateJob(self.jobs, running.id).wait(deadline - time.monotonic())
            try:
                job = self.start(
                    request,
                    join=False,
                    lock_timeout=max(deadline - time.monotonic(), 0.0),
                    operation=operation,
                    background=False,
                    listener=listener,
                )
            except BusyError:
                # Another process claimed the job between the look above and this claim
                # (it may still be resolving, before any lock): wait for it in turn.
                if deadline <= time.monotonic():
                    raise
                time.sleep(_CLAIM_RETRY_SECONDS)
                continue
            # The job ran here: its error is this call's, as use() and rollback() raise theirs.
            if job.exception is not None:
                raise job.exception
            return job

    def _hold_while_rate_limited(self, source: BuildSource) -> None:
        """Ask the source nothing while the home's stored rate-limit back-off runs (``check`` honours it too)."""
        from llama_runtime.updater.api.backoff import Backoff

        if self.engine.settings.api_url.startswith("file://"):
            return  # a mirror directory keeps no quota
        now = self.engine.seams.clock.time()
        not_before = Backoff(self.home.cache_dir).not_before(now)
        if not_before is not None and now < not_before:
            source.net.hold(
                not_before - now,
                "An earlier request used up the source's rate limit; not asking again before "
                f"{when_text(not_before, now)}.",
            )

    def _store_backoff(self, exc: RateLimitError) -> None:
        """Remember when GitHub may be asked again, as ``check`` does, so the next update waits too."""
        from llama_runtime.updater.api.backoff import Backoff, not_before_after_error

        if self.engine.settings.api_url.startswith("file://"):
            return
        now = self.engine.seams.clock.time()
        Backoff(self.home.cache_dir).set(not_before_after_error(exc, now), exc.message, now=now)

    def start_work(
        self,
        work: JobWork,
        *,
        tag: str | None,
        join: bool,
        refuse_locked: bool,
        operation: str,
        background: bool,
        listener: JobListener | None,
        phase: JobPhase = "resolve",
    ) -> UpdateJob:
        """Claim the home's one job for ``work`` and run it, or join (``join``) the one that runs.

        Every job of a home goes through here (updates, ``doctor --repair``), so
        ``job status`` sees each one and two never run at once.

        Raises:
            BusyError: Another job runs and ``join`` is false or it is for another
                ``tag`` than this one, or (``refuse_locked``) another process holds
                the update lock without a job record.
        """
        self.home.ensure()
        refuse: Callable[[], None] | None = (lambda: refuse_if_locked(self.home, self.jobs)) if refuse_locked else None
        state, claimed = self.jobs.claim(self._new_state(tag, operation, phase), before_claim=refuse)
        if not claimed:
            if not join:
                raise BusyError(f"An update is already running ({state.describe()}, job {state.id}).")
            if tag is not None and state.tag != tag:
                # Joining would report another build as this request's outcome.
                raise BusyError(
                    f"An update to {state.tag or 'the newest release'} is already running "
                    f"({state.describe()}, job {state.id}); {tag} was not started.",
                    hint=f"Wait for it with `llama-runtime job wait`, then ask for {tag} again.",
                )
            return UpdateJob(self.jobs, state.id)
        recorder = JobRecorder(self.jobs, state, clock=self.engine.seams.clock)
        job = UpdateJob(self.jobs, state.id, recorder)
        if listener is not None:
            recorder.subscribe(listener)
        if not background:
            self._run(recorder, work)
            return job
        self._run_in_thread(recorder, work)
        return job

    def _new_state(self, tag: str | None, operation: str, phase: JobPhase) -> JobState:
        now = self.engine.seams.clock.time()
        return JobState(
            id=os.urandom(8).hex(),
            phase=phase,
            pid=os.getpid(),
            operation=operation,
            tag=tag,
            started_at=now,
            updated_at=now,
            message="waiting for the update lock",
        )

    def _run_in_thread(self, recorder: JobRecorder, work: JobWork) -> None:
        """Run the job in a daemon thread; return once it holds the lock (its first event)."""
        import threading

        job_id = recorder.state.id
        thread = threading.Thread(
            target=self._run, args=(recorder, work), name=f"llama-runtime-job-{job_id}", daemon=True
        )
        try:
            thread.start()
        except RuntimeError as exc:  # no thread to run it: end the claimed job rather than leave it "running"
            recorder.finish("failed", exc=LlamaRuntimeError(f"The update job could not start ({exc})."))
            raise
        recorder.started.wait(START_TIMEOUT_SECONDS)
        if isinstance(recorder.exception, BusyError):
            raise recorder.exception

    def _run(self, recorder: JobRecorder, work: JobWork) -> None:
        try:
            result, outcome = work(recorder.on_progress, recorder.cancel_requested)
            recorder.outcome = outcome
            recorder.finish("done", result=result)
        except CancelledError as exc:
            # Whoever cancelled wants to know what runs now (read from the pointer, never assumed).
            exc.message = f"{exc.message.rstrip('.')}; {self.home.describe_active()}."
            recorder.finish("cancelled", exc=exc)
        except LlamaRuntimeError as exc:
            recorder.finish("failed", exc=exc)
        except OSError as exc:  # the system refused (permissions, a broken disk): no bug, say which file
            recorder.finish("failed", exc=os_failure(exc))
        except Exception as exc:  # a bug must still end the job, never leave it "running"
            err = LlamaRuntimeError(f"Internal error ({type(exc).__name__}: {exc}); the active runtime is unchanged.")
            recorder.finish("failed", exc=err)
        except BaseException:  # Ctrl-C or exit: the caller stops the job; that is no bug
            recorder.finish(
                "cancelled",
                exc=CancelledError(f"The update was interrupted before it finished; {self.home.describe_active()}."),
            )
            raise
