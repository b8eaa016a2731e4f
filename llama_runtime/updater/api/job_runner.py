"""Claim a home's one update job and run it: single-flight across threads and processes.

The claim (:meth:`~updater.api.job_store.JobStore.claim`) decides who runs;
the runner then carries the request out through the engine's installer, in a
thread (the button) or here (the CLI, the scheduled check), and every way the
work can end, a bug or Ctrl-C included, ends the job record too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.errors import BusyError, CancelledError, FileSystemError, LlamaRuntimeError
from llama_runtime.runtime.lock import BUTTON_WAIT_SECONDS, UpdateLock
from llama_runtime.updater.api.job_handle import UpdateJob
from llama_runtime.updater.api.job_recorder import JobRecorder
from llama_runtime.updater.api.job_state import JobListener, JobPhase, JobState

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import Home
    from llama_runtime.updater.activate.outcome import UpdateOutcome
    from llama_runtime.updater.api.job_store import JobStore
    from llama_runtime.updater.choice.decide import UpdateRequest
    from llama_runtime.updater.engine import Engine
    from llama_runtime.updater.progress import CancelCheck, ProgressCallback
    from llama_runtime.updater.sources.source import ReleaseSource

    #: One job's work: it reports progress, polls the cancel check, and returns the job's
    #: ``result`` object with the update outcome (``None`` for work that installs nothing).
    JobWork = Callable[[ProgressCallback, CancelCheck], tuple[dict[str, object], UpdateOutcome | None]]

__all__ = ["JobRunner", "busy_error", "refuse_if_locked"]

# The button returns once the job holds the lock (its first event): lock
# acquisition never waits, so this bound is only hit by a hung filesystem.
START_TIMEOUT_SECONDS: Final[float] = 30.0


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
        """

        def work(progress: ProgressCallback, cancel: CancelCheck) -> tuple[dict[str, object], UpdateOutcome | None]:
            source: ReleaseSource | None = None
            try:
                source = self.engine.open_source()
                # The claim found the lock free; the grace only rides over another
                # process's non-blocking probe of it (``update_running``).
                outcome = self.engine.installer(source).update(
                    request, progress=progress, cancel=cancel, lock_timeout=max(lock_timeout, BUTTON_WAIT_SECONDS)
                )
                return outcome.to_json(), outcome
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
            BusyError: Another job runs and ``join`` is false, or (``refuse_locked``)
                another process holds the update lock without a job record.
        """
        self.home.ensure()
        refuse: Callable[[], None] | None = (lambda: refuse_if_locked(self.home, self.jobs)) if refuse_locked else None
        state, claimed = self.jobs.claim(self._new_state(tag, operation, phase), before_claim=refuse)
        if not claimed:
            if not join:
                raise BusyError(f"An update is already running ({state.describe()}, job {state.id}).")
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
            recorder.finish("cancelled", exc=exc)
        except LlamaRuntimeError as exc:
            recorder.finish("failed", exc=exc)
        except OSError as exc:  # the system refused (permissions, a broken disk): no bug, say which file
            recorder.finish("failed", exc=FileSystemError.from_os_error(exc))
        except Exception as exc:  # a bug must still end the job, never leave it "running"
            err = LlamaRuntimeError(f"Internal error ({type(exc).__name__}: {exc}); the active runtime is unchanged.")
            recorder.finish("failed", exc=err)
        except BaseException:  # Ctrl-C or exit: the caller stops the job; that is no bug
            recorder.finish(
                "cancelled",
                exc=CancelledError(f"The update was interrupted before it finished; {self.home.describe_active()}."),
            )
            raise
