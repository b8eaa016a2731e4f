"""The embeddable API: one engine for app start-up, an update button and a scheduled job.

::

    from llama_runtime import RuntimeUpdater

    updater = RuntimeUpdater(backend="vulkan")
    ready = updater.ensure()                 # start-up: no network, never waits
    job = updater.start_update()             # the button: single-flight, follow or cancel
    job.subscribe(lambda s: print(s.phase, s.done_bytes, s.total_bytes))
    result = updater.check(apply=False)      # the scheduler: conditional, rate-limit aware

Locking policy per caller:
    * ``ensure`` never waits for the update lock; it reads the pointer and the
      marker and reports ``update_running`` from a non-blocking probe of the
      lock (an owner record alone may be left over from a crash).
    * ``start_update`` joins a running job (also one of another process) and
      otherwise fails fast with :class:`~runtime.errors.BusyError`.
    * ``check(apply=True)`` skips with ``BusyError`` or waits up to ``wait`` seconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from llama_runtime.runtime.errors import (
    BusyError,
    CancelledError,
    CorruptStateError,
    FileSystemError,
    LlamaRuntimeError,
    RemoteError,
)
from llama_runtime.runtime.integrity import file_problems
from llama_runtime.runtime.layout import Home, InstalledRuntime

if TYPE_CHECKING:
    from llama_runtime.runtime.marker import InstallMarker
    from llama_runtime.runtime.process import ServerControl
    from llama_runtime.runtime.runner import ProcessRunner
    from llama_runtime.updater.api.jobs import JobListener, JobRecorder, JobState, JobStore
    from llama_runtime.updater.api.schedule import CheckResult
    from llama_runtime.updater.choice.channel import Channel
    from llama_runtime.updater.choice.decide import UpdateRequest
    from llama_runtime.updater.choice.host import HostFacts
    from llama_runtime.updater.config import Settings
    from llama_runtime.updater.engine import Engine
    from llama_runtime.updater.install.outcome import Progress, UpdateOutcome
    from llama_runtime.updater.sources.release import Release
    from llama_runtime.updater.sources.source import ReleaseSource

__all__ = ["EnsureResult", "NotReady", "Ready", "RuntimeUpdater", "UpdateJob"]

# How often a handle on another process's job re-reads the job file; the
# owner persists at most four times a second, so faster polling sees nothing new.
FOLLOW_POLL_SECONDS: Final[float] = 0.1
# The button returns once the job holds the lock (its first event): lock
# acquisition never waits, so this bound is only hit by a hung filesystem.
START_TIMEOUT_SECONDS: Final[float] = 30.0


@dataclass(frozen=True)
class Ready:
    """Start-up found a verified runtime: ``binary`` is the ``llama-server`` to run.

    Check ``result.ready`` and a type checker narrows :data:`EnsureResult` to
    this class, where ``binary`` is a ``Path``, never ``None``.

    Attributes:
        runtime: The active, cheaply verified runtime.
        update_running: Another caller is updating right now (start-up did not wait).
        installed: This call installed the runtime (``install_if_missing``).
    """

    runtime: InstalledRuntime
    update_running: bool
    installed: bool = False
    ready: Literal[True] = field(default=True, init=False)
    problem: None = field(default=None, init=False)

    @property
    def binary(self) -> Path:
        """The ``llama-server`` to run."""
        return self.runtime.binary


@dataclass(frozen=True)
class NotReady:
    """Start-up found no usable runtime; ``problem`` says why, for people.

    Attributes:
        update_running: Another caller is updating right now (start-up did not wait).
        problem: Why there is no usable runtime.
    """

    update_running: bool
    problem: str
    ready: Literal[False] = field(default=False, init=False)
    runtime: None = field(default=None, init=False)
    installed: bool = field(default=False, init=False)

    @property
    def binary(self) -> None:
        """Nothing to run."""
        return None


#: What :meth:`RuntimeUpdater.ensure` returns; ``if result.ready:`` tells the two apart.
EnsureResult: TypeAlias = Ready | NotReady


def _ensure_result(
    runtime: InstalledRuntime | None, running: bool, problem: str | None, *, installed: bool = False
) -> EnsureResult:
    if runtime is not None:
        return Ready(runtime, running, installed=installed)
    return NotReady(running, problem or "No usable llama.cpp runtime is active.")


class UpdateJob:
    """A handle on an update job, in this process or in another one.

    Every state is a :class:`~updater.jobs.JobState`; the job's own process
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
            from llama_runtime.updater.api.jobs import JobState

            error = {"code": "job_lost", "message": f"The record of update job {self.id} is gone."}
            return JobState(id=self.id, phase="failed", pid=0, error=error)
        return state

    def wait(self, timeout: float | None = None) -> JobState:
        """Wait until the job is over or ``timeout`` seconds pass; returns the latest state."""
        if self._recorder is not None:
            self._recorder.finished.wait(timeout)
            return self._recorder.state
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
        deadline = None if timeout is None else time.monotonic() + timeout
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


class RuntimeUpdater:
    """Keeps one home's llama.cpp runtime current; safe to use from many threads and processes.

    Args:
        home: The llama-runtime home (default: ``LLAMA_RUNTIME_HOME``, else the
            platform's user data dir).
        repo: ``owner/name`` releases come from (default: ``LLAMA_RUNTIME_REPO``,
            else ggml-org/llama.cpp).
        backend: ``auto`` (keep the active runtime's request) or a backend name
            (default: ``LLAMA_RUNTIME_BACKEND``, else ``auto``).
        channel: ``stable`` or ``nightly`` (default: ``LLAMA_RUNTIME_CHANNEL``, else the
            active runtime's stored channel, else ``stable``).
        api_url: GitHub REST API base (default: ``LLAMA_RUNTIME_GITHUB_API``, else GitHub's).
        token: GitHub token; default: what the contract allows for ``api_url`` from the environment.
        source_factory: Builds the release client (tests, mirrors); default a
            :class:`~updater.sources.github.GitHubClient` with the home's ETag cache.
        host: Returns the host facts; default :func:`~updater.host.detect_host`.
        runner: Runs the staged binary to verify it.
        clock: Epoch seconds (rate-limit backoff).
        server: The app's own llama-server (a :class:`~runtime.process.ServerControl`)
            to stop, switch and restart around an activation; by default the
            server ``llama-runtime server start`` manages in this home.
        require_provenance: Refuse assets without a verified build attestation
            (also ``LLAMA_RUNTIME_REQUIRE_PROVENANCE=1``).
        env: The environment to read settings from (default ``os.environ``).

    Raises:
        UserInputError: A malformed repository, backend, URL or timeout.
    """

    def __init__(
        self,
        home: Path | None = None,
        *,
        repo: str | None = None,
        backend: str | None = None,
        channel: str | None = None,
        api_url: str | None = None,
        token: str | None = None,
        source_factory: Callable[[], ReleaseSource] | None = None,
        host: Callable[[], HostFacts] | None = None,
        runner: ProcessRunner | None = None,
        clock: Callable[[], float] = time.time,
        server: ServerControl | None = None,
        env: Mapping[str, str] | None = None,
        require_provenance: bool = False,
    ) -> None:
        from llama_runtime.updater.config import resolve_settings

        settings = resolve_settings(
            home=home,
            api_url=api_url,
            repo=repo,
            backend=backend,
            token=token,
            require_provenance=require_provenance,
            env=env,
            channel=channel,
        )

        def build_engine() -> Engine:
            from llama_runtime.updater.engine import Engine, Seams

            seams = Seams(source_factory=source_factory, host=host, runner=runner, server=server, clock=clock)
            return Engine(settings, seams)

        self._bind(settings, Home(settings.home), build_engine)

    @classmethod
    def from_engine(cls, engine: Engine) -> RuntimeUpdater:
        """An updater over an engine the caller built (the CLI's composition root)."""
        updater = cls.__new__(cls)
        updater._bind(engine.settings, engine.home, lambda: engine)
        return updater

    def _bind(self, settings: Settings, home: Home, build_engine: Callable[[], Engine]) -> None:
        # The engine is built on first use: start-up (``ensure``) needs only the home.
        self._build_engine = build_engine
        self._engine: Engine | None = None
        self.home = home
        self.repo = settings.repo
        # "auto" keeps the active runtime's stored request (the decision's rule).
        self.backend = settings.backend if settings.backend_explicit else "auto"
        self.api_url = settings.api_url
        self.token = settings.token
        self.channel: Channel | None = settings.channel
        self._jobs: JobStore | None = None

    @property
    def engine(self) -> Engine:
        """The composition root that builds this updater's collaborators."""
        if self._engine is None:
            self._engine = self._build_engine()
        return self._engine

    @property
    def _clock(self) -> Callable[[], float]:
        return self.engine.seams.clock

    @property
    def jobs(self) -> JobStore:
        """The home's job records (built on first use: a start-up without jobs never loads them)."""
        if self._jobs is None:
            from llama_runtime.updater.api.jobs import JobStore

            self._jobs = JobStore(self.home)
        return self._jobs

    # -- collaborators -----------------------------------------------------------

    def host(self) -> HostFacts:
        """Host facts, detected once per updater."""
        return self.engine.host()

    def update_running(self) -> bool:
        """Whether an update holds the lock or a job runs now (probes the lock; never waits)."""
        from llama_runtime.runtime.lock import UpdateLock

        if UpdateLock(self.home.lock_path).is_held():
            return True
        current = self.jobs.current()
        return current is not None and current.running

    # -- start-up ------------------------------------------------------------------

    def ensure(self, *, install_if_missing: bool = False) -> EnsureResult:
        """The runtime to start, found without network and without waiting.

        A runtime counts as ready when the pointer names it, its marker is
        valid and every file it records (the binary included) exists with the
        recorded size. A damaged runtime is not ready: ``install_if_missing``
        then reinstalls it through the full verification.

        Args:
            install_if_missing: With no usable runtime and no update running,
                install the newest release now (blocks until done).

        Raises:
            LlamaRuntimeError: Only from the install that ``install_if_missing`` asked for.
        """
        runtime, problem = self._active_checked()
        running = self.update_running()
        if runtime is not None or running or not install_if_missing:
            return _ensure_result(runtime, running, problem)
        # A damaged runtime is repaired as the same build, not upgraded behind the app's back.
        marker, _ = self._active_marker()
        same = marker.tag if marker is not None and marker.repo == self.repo else None
        job = self.start_update(tag=same, operation="startup")
        job.wait()
        if job.exception is not None:
            raise job.exception
        runtime, problem = self._active_checked()
        return _ensure_result(runtime, False, problem, installed=runtime is not None)

    def _active_checked(self) -> tuple[InstalledRuntime | None, str | None]:
        try:
            pointer = self.home.read_pointer()
            if not pointer.active:
                return None, "No llama.cpp runtime is installed yet."
            runtime = self.home.load(pointer.active)
        except CorruptStateError as exc:
            return None, exc.message

        # Sizes of every recorded file, the binary included: stat calls only,
        # so start-up stays cheap and a truncated llama-server is not "ready".
        problems = file_problems(runtime.path, runtime.marker, "size")
        if problems:
            shown = "; ".join(problems[:3])
            where = f"The active runtime {runtime.marker.tag} in {runtime.path}"
            return None, f"{where} differs from what was installed: {shown}."
        return runtime, None

    # -- the button ----------------------------------------------------------------

    def current_job(self) -> UpdateJob | None:
        """A handle on the newest job (running or finished), if there was one."""
        state = self.jobs.current()
        return UpdateJob(self.jobs, state.id) if state else None

    def start_update(
        self,
        tag: str | None = None,
        backend: str | None = None,
        *,
        join: bool = True,
        lock_timeout: float = 0.0,
        operation: str = "button",
        background: bool = True,
        listener: JobListener | None = None,
        cuda_version: str | None = None,
        require_digest: bool = False,
    ) -> UpdateJob:
        """Start an update job, or return the one already running (single-flight).

        Args:
            tag: Exact tag, or ``None`` for the newest release.
            backend: Backend request; ``None`` keeps the updater's (or the active runtime's).
            join: Return the running job (default); ``False`` raises ``BusyError`` instead.
            lock_timeout: Seconds to wait for the update lock (the button: 0).
            operation: Who asks (recorded in the job and the lock owner).
            background: Run in a thread (default); ``False`` runs here and returns when over.
            listener: Called with every state of a job this call starts (e.g. a progress bar).
            cuda_version: CUDA line to prefer, e.g. ``"12.4"``.
            require_digest: Refuse assets without a published sha256.

        Raises:
            BusyError: Another process updates without a job record, or ``join`` is
                false and a job runs; the message carries its progress.
            UserInputError: A malformed tag or backend, or a ``lock_timeout``
                that is negative or not finite.
        """
        from llama_runtime.runtime.backends import parse_backend
        from llama_runtime.updater.api.schedule import validate_seconds
        from llama_runtime.updater.choice.decide import UpdateRequest
        from llama_runtime.updater.choice.tags import validate_tag

        lock_timeout = validate_seconds(lock_timeout, "lock timeout")
        request = UpdateRequest(
            repo=self.repo,
            tag=validate_tag(tag) if tag is not None else None,
            backend=parse_backend(backend)
            if backend is not None
            else (None if self.backend == "auto" else self.backend),
            cuda_version=cuda_version,
            require_digest=require_digest,
            channel=self.channel,
        )
        return self._start(request, join, lock_timeout, operation, background, listener)

    def run_update(
        self,
        request: UpdateRequest,
        *,
        wait: float = 0.0,
        operation: str = "cli",
        listener: JobListener | None = None,
    ) -> UpdateJob:
        """Run ``request`` here, as the job others follow; returns when it is over.

        A job that runs already is waited for (at most ``wait`` seconds), never
        joined: the caller asked for its own request.

        Raises:
            BusyError: Another update still runs after ``wait`` seconds.
            UserInputError: ``wait`` is negative or not finite.
        """
        from llama_runtime.updater.api.schedule import validate_seconds

        wait = validate_seconds(wait, "wait")
        deadline = time.monotonic() + wait
        running = self.jobs.current()
        if running is not None and running.running and wait:
            UpdateJob(self.jobs, running.id).wait(wait)
        lock_timeout = max(deadline - time.monotonic(), 0.0)
        return self._start(request, False, lock_timeout, operation, False, listener)

    def _start(
        self,
        request: UpdateRequest,
        join: bool,
        lock_timeout: float,
        operation: str,
        background: bool,
        listener: JobListener | None,
    ) -> UpdateJob:
        import threading

        from llama_runtime.updater.api.jobs import JobRecorder, JobState

        self.home.ensure()
        now = self._clock()
        new = JobState(
            id=os.urandom(8).hex(),
            phase="resolve",
            pid=os.getpid(),
            operation=operation,
            tag=request.tag,
            started_at=now,
            updated_at=now,
            message="waiting for the update lock",
        )
        state, claimed = self.jobs.claim(new, before_claim=None if lock_timeout else self._refuse_if_locked)
        if not claimed:
            if not join:
                raise BusyError(f"An update is already running ({state.describe()}, job {state.id}).")
            return UpdateJob(self.jobs, state.id)
        recorder = JobRecorder(self.jobs, state, clock=self._clock)
        job = UpdateJob(self.jobs, state.id, recorder)
        if listener is not None:
            recorder.subscribe(listener)
        if not background:
            self._run(recorder, request, lock_timeout)
            return job
        thread = threading.Thread(
            target=self._run, args=(recorder, request, lock_timeout), name=f"llama-runtime-job-{state.id}", daemon=True
        )
        try:
            thread.start()
        except RuntimeError as exc:  # no thread to run it: end the claimed job rather than leave it "running"
            recorder.finish("failed", exc=LlamaRuntimeError(f"The update job could not start ({exc})."))
            raise
        recorder.started.wait(START_TIMEOUT_SECONDS)
        if isinstance(recorder.exception, BusyError):
            raise recorder.exception
        return job

    def _refuse_if_locked(self) -> None:
        # Only a real probe of the lock decides: the owner record survives a
        # crash (kill -9) and its pid may be ours again after a restart.
        from llama_runtime.runtime.lock import UpdateLock

        if UpdateLock(self.home.lock_path).is_held():
            raise self.busy_error()

    def busy_error(self) -> BusyError:
        """Who updates this home now, in one sentence: the lock's holder and its job's progress."""
        from llama_runtime.runtime.lock import UpdateLock

        owner = UpdateLock(self.home.lock_path).owner()
        doing = f" ({owner.operation}, pid {owner.pid})" if owner is not None else ""
        message = f"Another llama-runtime process is updating this runtime{doing}."
        job = self.jobs.current()
        if job is not None and job.running:
            message += f" Its job {job.id}: {job.describe()}."
        return BusyError(message, hint="Wait for it to finish, or follow it with `llama-runtime job wait`.")

    def _run(self, recorder: JobRecorder, request: UpdateRequest, lock_timeout: float) -> None:
        from llama_runtime.runtime.lock import BUTTON_WAIT_SECONDS

        def progress(event: Progress) -> None:
            recorder.on_progress(event.phase, event.done_bytes, event.total_bytes, event.message)

        source: ReleaseSource | None = None
        try:
            source = self.engine.open_source()
            installer = self.engine.installer(source)
            # The claim found the lock free; the grace only rides over another
            # process's non-blocking probe of it (``update_running``).
            outcome = installer.update(
                request,
                progress=progress,
                cancel=recorder.cancel_requested,
                lock_timeout=max(lock_timeout, BUTTON_WAIT_SECONDS),
            )
            recorder.outcome = outcome
            recorder.finish("done", result=outcome.to_json())
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
        finally:
            if source is not None:
                source.close()

    # -- the scheduler -------------------------------------------------------------

    def check(self, *, apply: bool = False, wait: float = 0.0, listener: JobListener | None = None) -> CheckResult:
        """Is a strictly newer build for the active repo and backend out? ``apply`` installs it.

        One conditional request when nothing changed (a 304 that GitHub does not
        count); skips without a request while a stored rate-limit backoff runs.

        The active runtime's recorded tag is the baseline even when its binary
        is damaged (never a downgrade); the damage is reported in ``problem``.
        The decision and ``apply`` use one backend request: the updater's
        explicit backend, else the active runtime's stored request.

        Args:
            apply: Install the newer build (as a job others can follow).
            wait: Seconds ``apply`` may wait for another update to finish.
            listener: Receives the states of the update ``apply`` runs.

        Raises:
            UserInputError: ``wait`` is negative or not finite.
            BusyError: ``apply`` and another update holds the lock (after ``wait``).
            RateLimitError: GitHub refused right now; the backoff is stored.
            RemoteError: Network or GitHub failures.
        """
        from llama_runtime.runtime.errors import RateLimitError
        from llama_runtime.updater.api.schedule import (
            Backoff,
            CheckResult,
            not_before_after_error,
            not_before_after_success,
            validate_seconds,
        )
        from llama_runtime.updater.choice.decide import (
            ActiveState,
            UpdateRequest,
            backend_request,
            channel_request,
            decide,
        )

        wait = validate_seconds(wait, "wait")
        self.home.ensure()
        marker, problem = self._active_marker()
        installed = marker.tag if marker else None
        backoff = Backoff(self.home.cache_dir)
        now = self._clock()
        not_before = backoff.not_before(now)
        if not_before is not None and now < not_before:
            return CheckResult(
                installed,
                None,
                False,
                skipped="rate_limited",
                not_before=not_before,
                reason="GitHub's rate limit was reached; the check resumes after the stored time.",
                problem=problem,
            )
        if apply and not wait:
            self._refuse_if_locked()
        request = UpdateRequest(
            repo=self.repo, backend=None if self.backend == "auto" else self.backend, channel=self.channel
        )
        channel = channel_request(request, marker)
        with self.engine.open_source() as source:
            try:
                latest, latest_version, release = self._latest_for_check(source, channel, marker)
            except RateLimitError as exc:
                refused_at = self._clock()
                backoff.set(not_before_after_error(exc, refused_at), exc.message, now=refused_at)
                raise
            answered_at = self._clock()
            after = not_before_after_success(source.last_rate_limit, answered_at)
        if after is not None:
            backoff.set(after, "the last request used GitHub's remaining quota", now=answered_at)
        else:
            backoff.clear()
        from llama_runtime.runtime.failed_builds import load_failed

        if release is None:  # the channel's build is the active one: nothing newer to look up
            available, reason = False, f"{latest} is the newest release."
            backend = backend_request(request, marker)[0]
        else:
            active = ActiveState(marker) if marker is not None else None
            failed = {b.key: b.reason for b in load_failed(self.home.root)}
            plan = decide(request, active, release, self.host(), mode="upgrade_only", failed=failed)
            available, reason, backend = plan.action == "install", plan.reason, plan.backend_request
        if problem is not None:
            reason = f"{reason} {problem}"
            if not available and marker is not None:
                reason += f" Reinstall it with `llama-runtime update --tag {marker.tag}`."
        if not (apply and available):
            return CheckResult(
                installed,
                latest,
                available,
                latest_version=latest_version,
                not_before=after,
                reason=reason,
                problem=problem,
            )
        from llama_runtime.runtime.backends import parse_backend

        # The semver release when there is one, so the runtime records both names.
        apply_request = UpdateRequest(
            repo=self.repo, tag=latest_version or latest, backend=parse_backend(backend), channel=channel
        )
        job = self.run_update(apply_request, wait=wait, operation="schedule", listener=listener)
        if job.exception is not None:
            raise job.exception
        state = job.state()
        if state.result is None:
            raise RemoteError(f"The update to {latest} ended without a result ({state.phase}).")
        return CheckResult(
            installed,
            latest,
            True,
            latest_version=latest_version,
            applied=True,
            not_before=after,
            reason=reason,
            outcome=state.result,
            problem=problem,
        )

    @staticmethod
    def _latest_for_check(
        source: ReleaseSource, channel: Channel, marker: InstallMarker | None
    ) -> tuple[str, str | None, Release | None]:
        """``(build tag, semver, build release)``; the release is ``None`` when the
        build is the one installed (nothing more to look up: one request for stable)."""
        from llama_runtime.updater.choice.channel import pointer_asset
        from llama_runtime.updater.sources.resolve import peek_latest_build, resolve_fetched

        tag, version, fetched = peek_latest_build(source, channel)
        if marker is not None and marker.repo == source.repo and marker.tag == tag:
            return tag, version, None
        if pointer_asset(fetched) is not None:
            return tag, version, resolve_fetched(source, fetched).release
        return tag, version, fetched

    def _active_marker(self) -> tuple[InstallMarker | None, str | None]:
        """The active runtime's marker, also when its binary is damaged, and what is wrong."""
        runtime, problem = self._active_checked()
        if runtime is not None:
            return runtime.marker, None
        try:
            pointer = self.home.read_pointer()
            if not pointer.active:
                return None, None  # nothing installed is no problem for a check
            return self.home.load(pointer.active).marker, problem
        except CorruptStateError as exc:
            return None, exc.message
