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

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.runtime.fsutil import atomic_write_json
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.procinfo import pid_alive, process_start_ticks
from llama_runtime.updater.logs import get_logger

if TYPE_CHECKING:
    from llama_runtime.updater.install.outcome import UpdateOutcome

log = get_logger("llama_runtime.jobs")

JobPhase = Literal["resolve", "download", "verify", "activate", "done", "failed", "cancelled"]
TERMINAL_PHASES: Final[frozenset[str]] = frozenset({"done", "failed", "cancelled"})
_PHASES: Final[frozenset[str]] = frozenset({"resolve", "download", "verify", "activate"}) | TERMINAL_PHASES

CURRENT_NAME: Final = "current.json"
#: Job ids are ``secrets.token_hex(8)``; any plain name of letters, digits, ``-`` and ``_`` is
#: accepted (a job id becomes a file name in ``jobs/``: no separators, no dots, so no ``../``).
_JOB_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: Larger pids exist on no OS we run on (Linux pid_max is 2**22; Windows ids are 32-bit).
MAX_PID: Final[int] = 2**31 - 1
#: Byte counts beyond this (8 EiB) are not progress of a real download.
MAX_BYTES: Final[int] = 2**63 - 1
# Writing the state on every chunk would fsync hundreds of times a second;
# four times a second is smooth enough for a progress bar in another process.
PERSIST_INTERVAL_SECONDS: Final[float] = 0.25
# A cancel file is a stat() per check; ten checks a second stop a job within
# one chunk without measurable cost.
CANCEL_POLL_SECONDS: Final[float] = 0.1
# Finished job records kept next to current.json, for a caller that follows an
# older job id; more would only accumulate.
KEEP_FINISHED: Final[int] = 5

# Jobs this process claimed and has not finished, as (jobs dir, job id). A
# running record that carries our own pid is alive only if it is in here: the
# pid alone cannot tell us from a crashed predecessor that had the same pid.
_OWN_JOBS: set[tuple[str, str]] = set()
_OWN_JOBS_LOCK: Final = threading.Lock()


@dataclass(frozen=True)
class JobState:
    """One snapshot of an update job (also the typed progress event).

    Attributes:
        id: Job id (hex).
        phase: ``resolve``, ``download``, ``verify``, ``activate`` while it runs;
            ``done``, ``failed`` or ``cancelled`` once over.
        pid: Process that runs the job.
        operation: Who started it (``button``, ``schedule``, ``startup``).
        tag: The requested tag, or ``None`` for the newest release.
        done_bytes: Bytes of the current file on disk.
        total_bytes: Size of the current file, if known.
        rate: Download rate in bytes per second, once measurable.
        eta: Seconds left for the current file, once measurable.
        message: What is happening, for people (the asset name while downloading).
        result: The ``update`` object of the CLI contract once ``done``.
        error: ``{"code", "message", …}`` once ``failed`` or ``cancelled``.
        started_at: Epoch seconds when the job was claimed.
        updated_at: Epoch seconds of this snapshot.
        stale: The owning process died before the job finished.
        proc_start: Start time of the owning process (see
            :func:`~runtime.procinfo.process_start_ticks`), to tell it from a
            later process that got the same pid; ``None`` where unknown.
    """

    id: str
    phase: JobPhase
    pid: int
    operation: str = "button"
    tag: str | None = None
    done_bytes: int = 0
    total_bytes: int | None = None
    rate: float | None = None
    eta: float | None = None
    message: str = ""
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    started_at: float = 0.0
    updated_at: float = 0.0
    stale: bool = False
    proc_start: int | None = None

    @property
    def running(self) -> bool:
        """Whether the job has not finished yet."""
        return self.phase not in TERMINAL_PHASES

    def to_json(self) -> dict[str, Any]:
        """The job object of ``llama-runtime job status``."""
        payload = asdict(self)
        payload["running"] = self.running
        return payload

    @classmethod
    def from_json(cls, payload: object) -> JobState | None:
        """Parse a stored state; ``None`` when it is not one (a damaged file is no job)."""
        if not isinstance(payload, dict):
            return None
        try:
            phase = str(payload["phase"])
            if phase not in _PHASES or not is_job_id(payload["id"]):
                return None
            return cls(
                id=str(payload["id"]),
                phase=phase,  # type: ignore[arg-type]
                pid=_bounded(payload["pid"], 1, MAX_PID),
                operation=str(payload.get("operation", "button")),
                tag=payload.get("tag") if isinstance(payload.get("tag"), str) else None,
                done_bytes=_bounded(payload.get("done_bytes", 0), 0, MAX_BYTES),
                total_bytes=_opt_int(payload.get("total_bytes")),
                rate=_opt_float(payload.get("rate")),
                eta=_opt_float(payload.get("eta")),
                message=str(payload.get("message", "")),
                result=payload.get("result") if isinstance(payload.get("result"), dict) else None,
                error=payload.get("error") if isinstance(payload.get("error"), dict) else None,
                started_at=_finite(payload.get("started_at", 0.0)),
                updated_at=_finite(payload.get("updated_at", 0.0)),
                stale=bool(payload.get("stale", False)),
                proc_start=_opt_int(payload.get("proc_start")),
            )
        except (KeyError, TypeError, ValueError, OverflowError):
            return None  # numbers out of range are no job either, never a crash

    def describe(self) -> str:
        """One line for people, e.g. ``download 12 MB of 30 MB (40%), ETA 5s``."""
        from llama_runtime.updater.install.download import human_size

        if self.phase != "download":
            return self.phase + (f" ({self.message})" if self.message else "")
        text = f"download {human_size(self.done_bytes)}"
        if self.total_bytes:
            text += f" of {human_size(self.total_bytes)} ({self.done_bytes * 100 // self.total_bytes}%)"
        if self.eta is not None:
            text += f", ETA {int(self.eta)}s"
        return text


def _opt_int(value: object) -> int | None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return None
    number = int(value)
    return number if 0 <= number <= MAX_BYTES else None


def _opt_float(value: object) -> float | None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return None
    return float(value)


def _bounded(value: object, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{value!r} is not a number from {low} to {high}")
    return value


def _finite(value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    return float(value)


def is_job_id(value: object) -> bool:
    """Whether ``value`` can be a job id (a plain name; see ``_JOB_ID``)."""
    return isinstance(value, str) and _JOB_ID.fullmatch(value) is not None


def validate_job_id(job_id: str) -> str:
    """``job_id`` if it is one; a job id names a file in ``jobs/``, so nothing else may pass.

    Raises:
        UserInputError: Not a job id (``../../x`` and the like).
    """
    if not is_job_id(job_id):
        raise UserInputError(
            f"'{job_id}' is not a job id; job ids are letters, digits, '-' and '_' (16 hex digits as "
            "`llama-runtime job status` shows them)."
        )
    return job_id


def stale_error(pid: int) -> dict[str, Any]:
    """The error recorded for a job whose process died."""
    return {
        "code": "stale_job",
        "message": (
            f"The update job's process (pid {pid}) ended before the job finished; "
            "`llama-runtime status` shows which runtime is active."
        ),
    }


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
            return JobState.from_json(json.loads(path.read_bytes()))
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
        atomic_write_json(self.current_path, state.to_json())
        if not state.running:
            atomic_write_json(self._job_path(state.id), state.to_json())
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


JobListener = Callable[[JobState], None]


class JobRecorder:
    """Turns the installer's progress events into job states: persisted, and sent to listeners.

    Used only by the process that runs the job. Thread-safe: listeners may
    subscribe from other threads while the job runs.
    """

    def __init__(
        self,
        store: JobStore,
        state: JobState,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._state = state
        self._clock = clock
        self._monotonic = monotonic
        from llama_runtime.updater.api.progress import RateMeter  # deferred: only a running job meters

        self._meter = RateMeter(clock=monotonic)
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

    def on_progress(self, phase: str, done: int, total: int | None, message: str) -> None:
        """Record one installer progress event."""
        self.started.set()
        rate, eta = (None, None)
        if phase == "download":
            rate, eta = self._meter.sample(message, done, total)
        with self._lock:
            changed_phase = phase != self._state.phase
            state = replace(
                self._state,
                phase=phase,  # type: ignore[arg-type]
                done_bytes=done,
                total_bytes=total,
                rate=rate,
                eta=eta,
                message=message,
                updated_at=self._clock(),
            )
        now = self._monotonic()
        finished_file = total is not None and done >= total
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
        error: dict[str, Any] | None = None
        if exc is not None:
            to_json = getattr(exc, "to_json", None)
            error = to_json() if callable(to_json) else {"code": "internal_error", "message": str(exc)}
        with self._lock:
            self.exception = exc
            self._state = replace(
                self._state, phase=phase, result=result, error=error, rate=None, eta=None, updated_at=self._clock()
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
        now = self._monotonic()
        if now - self._last_cancel_poll < CANCEL_POLL_SECONDS:
            return False
        self._last_cancel_poll = now
        if self.store.cancel_requested(self.state.id):
            self._cancelled.set()
            return True
        return False
