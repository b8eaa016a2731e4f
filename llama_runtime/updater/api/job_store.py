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
import math
import os
import re
import threading
import warnings
from collections.abc import Callable, ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.runtime.fsutil import read_cache, write_record
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.procinfo import pid_alive, process_start_ticks
from llama_runtime.updater.logs import warn_state

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import InstalledRuntime
    from llama_runtime.updater.progress import Progress


# -- job_state: One snapshot of an update job, and the record other processes read. ------------------------------

JobPhase = Literal["resolve", "download", "verify", "activate", "stop_server", "health", "done", "failed", "cancelled"]
TERMINAL_PHASES: Final[frozenset[str]] = frozenset({"done", "failed", "cancelled"})
_PHASES: Final[frozenset[str]] = (
    frozenset({"resolve", "download", "verify", "activate", "stop_server", "health"}) | TERMINAL_PHASES
)
#: Job ids are ``secrets.token_hex(8)``; any plain name of letters, digits, ``-`` and ``_`` is
#: accepted (a job id becomes a file name in ``jobs/``: no separators, no dots, so no ``../``).
_JOB_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: Larger pids exist on no OS we run on (Linux pid_max is 2**22; Windows ids are 32-bit).
MAX_PID: Final[int] = 2**31 - 1
#: Byte counts beyond this (8 EiB) are not progress of a real download.
MAX_BYTES: Final[int] = 2**63 - 1
#: Results without a ``result`` word (a doctor job's report) are recorded as this.
_NO_RESULT_WORD: Final[str] = ""


class _RecordView:
    """A job's stored JSON object behind typed, read-only attributes; dict-style reads are deprecated.

    Plain slotted classes, not dataclasses: start-up parses the last job record,
    and these stay cheap to define. Dict-style reads (``obj["key"]``,
    ``obj.get("key")``, ``in``, ``keys()``, iteration) still answer from the stored
    object but warn with :class:`DeprecationWarning`: read the attributes instead.
    """

    __slots__ = ("record",)
    record: Mapping[str, Any]

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def _set(self, **values: object) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __bool__(self) -> bool:
        return True  # an outcome is there, whatever its record holds (``if state.error:``)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and isinstance(other, _RecordView) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(sorted(self.to_json()))))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__ if name != "record")
        return f"{type(self).__name__}({shown})"

    def to_json(self) -> dict[str, Any]:
        """The stored JSON object, as ``job status`` prints it (built from the attributes without one)."""
        return dict(self.record) if self.record else self._attributes_json()

    def _attributes_json(self) -> dict[str, Any]:
        raise NotImplementedError

    # -- deprecated: the dicts these objects replace ------------------------------------

    def _dict(self) -> dict[str, Any]:
        warnings.warn(
            f"dict-style access to {type(self).__name__} is deprecated; read its attributes "
            f"(or {type(self).__name__}.to_json()) instead",
            DeprecationWarning,
            stacklevel=3,
        )
        return self.to_json()

    def __getitem__(self, key: str) -> Any:
        return self._dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        """Deprecated: ``obj.get(key)`` as on the dict it replaces."""
        return self._dict().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._dict()

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self.to_json())

    def keys(self) -> KeysView[str]:
        """Deprecated: the stored object's keys."""
        return self._dict().keys()

    def items(self) -> ItemsView[str, Any]:
        """Deprecated: the stored object's items."""
        return self._dict().items()

    def values(self) -> ValuesView[Any]:
        """Deprecated: the stored object's values."""
        return self._dict().values()


class JobResult(_RecordView):
    """What a finished (``done``) job produced.

    For an update job (``update``, ``check --apply``, the button, start-up) this
    is the ``update`` object of the CLI contract; for a ``doctor --repair`` job
    it is the doctor report (``result`` is then empty and ``healthy`` is set).

    Attributes:
        result: ``installed``, ``switched`` or ``up_to_date`` (empty for a doctor job).
        warnings: Sentences for people about what the job did.
        healthy: A doctor job's verdict; ``None`` for an update job.
        record: The whole stored object (the CLI contract's fields, all of them).
    """

    __slots__ = ("_active", "_previous", "healthy", "result", "warnings")
    _active: Mapping[str, Any] | None  # the stored runtime objects the properties load
    _previous: Mapping[str, Any] | None
    result: str
    warnings: tuple[str, ...]
    healthy: bool | None

    def __init__(
        self,
        result: str,
        active: Mapping[str, Any] | None = None,
        previous: Mapping[str, Any] | None = None,
        warnings: tuple[str, ...] = (),
        healthy: bool | None = None,
        record: Mapping[str, Any] | None = None,
    ) -> None:
        self._set(
            result=result,
            _active=active,
            _previous=previous,
            warnings=warnings,
            healthy=healthy,
            record=MappingProxyType(dict(record or {})),
        )

    @property
    def active(self) -> InstalledRuntime | None:
        """The runtime the job left active, its marker read now; ``None`` when it is gone or damaged."""
        return _installed(self._active)

    @property
    def previous(self) -> InstalledRuntime | None:
        """The runtime it left as the rollback target, read likewise; ``None`` when there is none."""
        return _installed(self._previous)

    @classmethod
    def from_json(cls, payload: Mapping[str, Any]) -> JobResult:
        """The typed view of a stored ``result`` object (unknown fields stay in ``record``)."""
        active, previous, words = payload.get("active"), payload.get("previous"), payload.get("warnings")
        healthy = payload.get("healthy")
        return cls(
            result=str(payload.get("result") or _NO_RESULT_WORD),
            active=MappingProxyType(dict(active)) if isinstance(active, dict) else None,
            previous=MappingProxyType(dict(previous)) if isinstance(previous, dict) else None,
            warnings=tuple(str(w) for w in words) if isinstance(words, list) else (),
            healthy=healthy if isinstance(healthy, bool) else None,
            record=payload,
        )

    def _attributes_json(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "result": self.result,
            "active": dict(self._active) if self._active is not None else None,
            "previous": dict(self._previous) if self._previous is not None else None,
            "warnings": list(self.warnings),
        }
        if self.healthy is not None:
            payload["healthy"] = self.healthy
        return payload


def _installed(runtime: Mapping[str, Any] | None) -> InstalledRuntime | None:
    """The installed runtime a stored runtime object names, loaded through its home; ``None`` if it is not there.

    Only ``<home>/runtimes/<name>`` is ever read: a record naming another directory names no runtime.
    """
    from llama_runtime.runtime.errors import CorruptStateError
    from llama_runtime.runtime.layout import RUNTIMES_DIR_NAME, UnsafeHomeError

    if runtime is None or not isinstance(runtime.get("name"), str) or not isinstance(runtime.get("runtime_dir"), str):
        return None
    where = Path(runtime["runtime_dir"])
    if where.name != runtime["name"] or where.parent.name != RUNTIMES_DIR_NAME:
        return None
    try:
        return Home(where.parent.parent).load(runtime["name"])
    except (CorruptStateError, UnsafeHomeError, OSError):
        return None


class JobError(_RecordView):
    """Why a job ended ``failed`` or ``cancelled``: the error object of the CLI contract.

    Attributes:
        code: Machine-readable reason, e.g. ``verification_failed``, ``stale_job``.
        message: One sentence for people.
        hint: What to do next, if known.
        exit_code: The CLI's exit code for this error, if recorded.
        record: The whole stored object (details such as ``attempts`` included).
    """

    __slots__ = ("code", "exit_code", "hint", "message")
    code: str
    message: str
    hint: str | None
    exit_code: int | None

    def __init__(
        self,
        code: str,
        message: str,
        hint: str | None = None,
        exit_code: int | None = None,
        record: Mapping[str, Any] | None = None,
    ) -> None:
        self._set(
            code=code, message=message, hint=hint, exit_code=exit_code, record=MappingProxyType(dict(record or {}))
        )

    @classmethod
    def from_json(cls, payload: Mapping[str, Any]) -> JobError:
        """The typed view of a stored ``error`` object (unknown fields stay in ``record``)."""
        hint, exit_code = payload.get("hint"), payload.get("exit_code")
        return cls(
            code=str(payload.get("code", "error")),
            message=str(payload.get("message", "")),
            hint=hint if isinstance(hint, str) else None,
            exit_code=exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
            record=payload,
        )

    def _attributes_json(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.hint is not None:
            payload["hint"] = self.hint
        if self.exit_code is not None:
            payload["exit_code"] = self.exit_code
        return payload


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
        result: What the job produced once ``done`` (see :class:`JobResult`); dict-style
            reads (``state.result["active"]``) still work but are deprecated.
        error: Why it ended once ``failed`` or ``cancelled`` (see :class:`JobError`);
            dict-style reads are deprecated likewise.
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
    result: JobResult | None = None
    error: JobError | None = None
    started_at: float = 0.0
    updated_at: float = 0.0
    stale: bool = False
    proc_start: int | None = None

    @property
    def running(self) -> bool:
        """Whether the job has not finished yet."""
        return self.phase not in TERMINAL_PHASES

    @property
    def progress(self) -> Progress:
        """The job's latest progress event (the job file keeps its fields flat, as here)."""
        from llama_runtime.updater.progress import Progress  # deferred: start-up reads jobs only

        phase: Any = self.phase  # a finished job's "failed"/"cancelled" is carried as it is
        return Progress(phase, self.done_bytes, self.total_bytes, self.message, self.rate, self.eta)

    def with_progress(self, event: Progress, *, at: float) -> JobState:
        """This state after ``event`` arrived at epoch ``at``."""
        return replace(
            self,
            phase=event.phase,
            done_bytes=event.done_bytes,
            total_bytes=event.total_bytes,
            rate=event.rate,
            eta=event.eta,
            message=event.message,
            updated_at=at,
        )

    def to_json(self) -> dict[str, Any]:
        """The job object of ``llama-runtime job status``."""
        payload = {f.name: getattr(self, f.name) for f in fields(self)}
        payload["result"] = self.result.to_json() if self.result is not None else None
        payload["error"] = self.error.to_json() if self.error is not None else None
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
                result=JobResult.from_json(payload["result"]) if isinstance(payload.get("result"), dict) else None,
                error=JobError.from_json(payload["error"]) if isinstance(payload.get("error"), dict) else None,
                started_at=_finite(payload.get("started_at", 0.0)),
                updated_at=_finite(payload.get("updated_at", 0.0)),
                stale=bool(payload.get("stale", False)),
                proc_start=_opt_int(payload.get("proc_start")),
            )
        except (KeyError, TypeError, ValueError, OverflowError):
            return None  # numbers out of range are no job either, never a crash

    def describe(self) -> str:
        """One line for people, e.g. ``download 12 MB of 30 MB (40%), ETA 5s``."""
        from llama_runtime.updater.fetch.cache import human_size

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


def stale_error(pid: int) -> JobError:
    """The error recorded for a job whose process died."""
    return JobError.from_json(
        {
            "code": "stale_job",
            "message": (
                f"The update job's process (pid {pid}) ended before the job finished; "
                "`llama-runtime status` shows which runtime is active."
            ),
        }
    )


#: Receives every new state of a job (a progress bar, a UI, the CLI's event stream).
JobListener = Callable[[JobState], None]


# -- job_store ---------------------------------------------------------------------------------------------------

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
        return JobState.from_json(read_cache(path, warn=warn_state))

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
