"""The persisted state of the update job, shared by every process on one home.

``<home>/jobs/current.json`` describes the newest update job: which process
runs it, its phase, bytes, rate, ETA and, once over, its result or error. A
second caller (another thread, another process, a restarted app, the CLI)
reads it to follow the job instead of starting a second download.

Invariants:
    * The file is replaced atomically, so readers see one whole state.
    * At most one job is claimed as running: :meth:`JobStore.claim` reads and
      writes the file under ``jobs/current.lock``.
    * A job whose owning process is gone is reported as failed (``stale``),
      never as running forever. "Gone" includes a pid that now names another
      process (its start time differs from ``proc_start``) and, for our own
      pid, a job this process did not claim (a container restarted with the
      same pid finds the crashed run's record).
    * Cancelling is a file (``jobs/<id>.cancel``) that the running job polls,
      so any process can cancel it.
"""

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Final

from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.procinfo import pid_alive, process_start_ticks
from llama_runtime.runtime.record import read_record, write_record
from llama_runtime.updater.api.job_state import JobState, stale_error, validate_job_id

CURRENT_NAME: Final = "current.json"
# Finished job records kept next to current.json, for a caller that follows an
# older job id; more would only accumulate.
KEEP_FINISHED: Final[int] = 5

# Jobs this process claimed and has not finished, as (jobs dir, job id). A
# running record that carries our own pid is alive only if it is in here: the
# pid alone cannot tell us from a crashed predecessor that had the same pid.
_OWN_JOBS: set[tuple[str, str]] = set()
_OWN_JOBS_LOCK: Final = threading.Lock()


class JobStore:
    """Reads and writes the job files of one home.

    Args:
        home: The llama-runtime home.
        alive: Whether a pid is alive (injectable for tests).
        start_ticks: When a pid started, ``None`` where unknown (injectable for tests).
    """

    def __init__(
        self,
        home: Home,
        *,
        alive: Callable[[int], bool] = pid_alive,
        start_ticks: Callable[[int], int | None] = process_start_ticks,
    ) -> None:
        self.home = home
        self.dir = home.jobs_dir
        self.current_path = home.jobs_dir / CURRENT_NAME
        self._alive = alive
        self._start_ticks = start_ticks

    def _own_key(self, job_id: str) -> tuple[str, str]:
        return (str(self.dir), job_id)

    def owns(self, job_id: str) -> bool:
        """Whether this process claimed job ``job_id`` and has not finished it."""
        with _OWN_JOBS_LOCK:
            return self._own_key(job_id) in _OWN_JOBS

    def adopt(self, job_id: str) -> None:
        """Mark job ``job_id`` as run by this process (until :meth:`disown`)."""
        with _OWN_JOBS_LOCK:
            _OWN_JOBS.add(self._own_key(job_id))

    def disown(self, job_id: str) -> None:
        """This process no longer runs job ``job_id`` (it finished, or never started)."""
        with _OWN_JOBS_LOCK:
            _OWN_JOBS.discard(self._own_key(job_id))

    def _job_path(self, job_id: str) -> Path:
        return self.dir / f"{validate_job_id(job_id)}.json"

    def cancel_path(self, job_id: str) -> Path:
        """The file whose existence asks job ``job_id`` to stop (only ever inside ``jobs/``)."""
        return self.dir / f"{validate_job_id(job_id)}.cancel"

    @staticmethod
    def _load(path: Path) -> JobState | None:
        try:
            return JobState.from_json(read_record(path))
        except (OSError, ValueError):
            return None

    def _checked(self, state: JobState | None) -> JobState | None:
        if state is None or not state.running or self._owner_alive(state):
            return state
        return replace(state, phase="failed", stale=True, error=stale_error(state.pid), rate=None, eta=None)

    def _owner_alive(self, state: JobState) -> bool:
        if state.pid == os.getpid():
            return self.owns(state.id)
        if not self._alive(state.pid):
            return False
        started = self._start_ticks(state.pid)
        if started is None:
            return True  # a platform without start times: the pid is all we have
        # Where start times exist, every claim records one: a record without
        # it (an older version's, or a hand-made one) cannot prove its owner.
        return started == state.proc_start

    def current(self) -> JobState | None:
        """The newest job, with a dead owner reported as failed; ``None`` if there was none."""
        return self._checked(self._load(self.current_path))

    def get(self, job_id: str) -> JobState | None:
        """The state of job ``job_id``, from ``current.json`` or its finished record."""
        state = self._load(self.current_path)
        if state is None or state.id != job_id:
            state = self._load(self._job_path(job_id))
        return self._checked(state)

    def write(self, state: JobState) -> None:
        """Replace ``current.json`` (and, once over, the job's own record) atomically."""
        self.dir.mkdir(parents=True, exist_ok=True)
        write_record(self.current_path, state.to_json())
        if not state.running:
            write_record(self._job_path(state.id), state.to_json())
            self._prune()

    def _prune(self) -> None:
        dated: list[tuple[float, Path]] = []
        for path in self.dir.glob("*.json"):
            if path.name == CURRENT_NAME:
                continue
            try:
                dated.append((path.stat().st_mtime, path))
            except OSError:
                continue  # another process pruned it meanwhile
        dated.sort(reverse=True)
        for _mtime, old in dated[KEEP_FINISHED:]:
            with contextlib.suppress(OSError):
                old.unlink()

    def drop_running(self, job_id: str) -> None:
        """Remove ``current.json`` if it still says job ``job_id`` runs.

        The fallback when the final state cannot be written: no record is
        better than one that says "running" for as long as this process lives.
        """
        state = self._load(self.current_path)
        if state is not None and state.id == job_id and state.running:
            with contextlib.suppress(OSError):
                self.current_path.unlink()

    def claim(self, new: JobState, *, before_claim: Callable[[], None] | None = None) -> tuple[JobState, bool]:
        """Make ``new`` the running job unless one is running already.

        A job claimed with this process's pid counts as running only until
        :meth:`disown` (which :meth:`JobRecorder.finish` calls).

        Args:
            new: The job to start; its ``proc_start`` is filled in when unset.
            before_claim: Called under the claim lock when no job runs; may raise
                (e.g. :class:`~runtime.errors.BusyError`) to refuse the claim.

        Returns:
            ``(new, True)`` when claimed, else ``(the running job, False)``.
        """
        import filelock

        if new.proc_start is None:
            new = replace(new, proc_start=self._start_ticks(new.pid))
        self.dir.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(self.dir / "current.lock"), thread_local=False):
            running = self.current()
            if running is not None and running.running:
                return running, False
            if before_claim is not None:
                before_claim()
            self.clear_cancel(new.id)
            if new.pid == os.getpid():
                self.adopt(new.id)
            try:
                self.write(new)
            except BaseException:
                self.disown(new.id)
                raise
            return new, True

    def request_cancel(self, job_id: str) -> None:
        """Ask job ``job_id`` to stop at its next check (any process may call this)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cancel_path(job_id).write_bytes(b"")

    def cancel_requested(self, job_id: str) -> bool:
        """Whether someone asked job ``job_id`` to stop."""
        return self.cancel_path(job_id).exists()

    def clear_cancel(self, job_id: str) -> None:
        """Forget a cancel request (the job is over)."""
        with contextlib.suppress(OSError):
            self.cancel_path(job_id).unlink()
