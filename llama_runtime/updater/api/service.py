"""The embeddable API: one engine for app start-up, an update button and a scheduled job.

::

    from llama_runtime import RuntimeUpdater

    updater = RuntimeUpdater(backend="vulkan")
    ready = updater.ensure()                 # start-up: no network, never waits
    job = updater.start_update()             # the button: single-flight, follow or cancel
    job.subscribe(lambda s: print(s.phase, s.done_bytes, s.total_bytes))
    result = updater.check(apply=False)      # the scheduler: conditional, rate-limit aware
    updater.rollback()                       # the manager: use, rollback, remove, install_file,
    updater.doctor(repair=True)              # gc, doctor and plan, each with a typed result

Locking policy per caller:
    * ``ensure`` never waits for the update lock; it reads the pointer and the
      marker and reports ``update_running`` from a non-blocking probe of the
      lock (an owner record alone may be left over from a crash).
    * ``start_update`` joins a running job (also one of another process) and
      otherwise fails fast with :class:`~runtime.errors.BusyError`.
    * ``check(apply=True)`` skips with ``BusyError`` or waits up to ``wait`` seconds.
    * ``doctor(repair=True)`` claims the home's job like an update and fails fast
      with ``BusyError`` while another job or update runs.
    * ``use``, ``rollback``, ``install_file``, ``remove`` and ``gc`` take the
      update lock without waiting (``BusyError`` when it is held).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock
from llama_runtime.runtime.layout import Home
from llama_runtime.updater.api.boundary import front_door
from llama_runtime.updater.api.ready import EnsureResult, active_marker, diagnose_active, ensure_result, trial_on_record

if TYPE_CHECKING:
    from llama_runtime.runtime.binary import ProcessRunner
    from llama_runtime.runtime.errors import BusyError
    from llama_runtime.runtime.server import ServerControl
    from llama_runtime.updater.activate.attempts import UpdateOutcome
    from llama_runtime.updater.api.check import CheckResult
    from llama_runtime.updater.api.context import UseCaseContext
    from llama_runtime.updater.api.inventory import ListResult, StatusResult
    from llama_runtime.updater.api.job_store import JobListener, JobStore
    from llama_runtime.updater.api.jobs import JobRunner, UpdateJob
    from llama_runtime.updater.api.manage import (
        DoctorResult,
        GcResult,
        JobRecords,
        PinResult,
        PlanResult,
        RemoveResult,
        RollbackResult,
    )
    from llama_runtime.updater.api.server import RuntimeServer
    from llama_runtime.updater.choice.decide import UpdateRequest
    from llama_runtime.updater.choice.host import HostFacts
    from llama_runtime.updater.config import GatePolicy, Settings
    from llama_runtime.updater.engine import Engine
    from llama_runtime.updater.offline.export import ExportResult
    from llama_runtime.updater.offline.mirror import MirrorReport
    from llama_runtime.updater.offline.registry_push import Promotion, PushReport
    from llama_runtime.updater.progress import ProgressCallback
    from llama_runtime.updater.release.channel import Channel
    from llama_runtime.updater.sources.source import BuildSource

__all__ = ["RuntimeUpdater"]


def _checked_host(host: Callable[[], object]) -> Callable[[], HostFacts]:
    """The ``host`` seam, checked when called: anything but host facts is a clear error."""

    def facts() -> HostFacts:
        from llama_runtime.runtime.errors import UserInputError
        from llama_runtime.updater.choice.host import HostFacts

        value = host()
        if not isinstance(value, HostFacts):
            raise UserInputError(f"host= must return host facts (see host_for_platform), not {type(value).__name__}.")
        return value

    return facts


class RuntimeUpdater:
    """Keeps one home's llama.cpp runtime current; safe to use from many threads and processes.

    Args:
        home: The llama-runtime home (default: ``LLAMA_RUNTIME_HOME``, else the
            platform's user data dir).
        repo: ``owner/name`` releases come from (default: ``LLAMA_RUNTIME_REPO``, else
            the repository the active runtime came from, else ggml-org/llama.cpp).
        backend: ``auto`` (keep the active runtime's request) or a backend name
            (default: ``LLAMA_RUNTIME_BACKEND``, else ``auto``).
        channel: ``stable`` or ``nightly`` (default: ``LLAMA_RUNTIME_CHANNEL``, else the
            active runtime's stored channel, else ``stable``).
        api_url: GitHub REST API base (default: ``LLAMA_RUNTIME_GITHUB_API``, else GitHub's).
        token: GitHub token; default: what the contract allows for ``api_url`` from the environment.
        source_factory: Builds the :class:`~llama_runtime.BuildSource` every verb asks (an app's
            own source, a test's); default the one ``api_url`` names (GitHub, a mirror directory,
            a registry) with the home's ETag cache.
        host: A test seam returning the host facts (an internal object, as
            ``llama_runtime.updater.choice.host.host_for_platform`` builds one);
            default: detect this machine once.
        runner: Runs the staged binary to verify it.
        clock: Wall and monotonic time (job records and rates, the rate-limit backoff).
        server: The app's own llama-server (a :class:`~runtime.server.ServerControl`)
            to stop, switch and restart around an activation; by default the
            server ``llama-runtime server start`` manages in this home.
        ca_bundle: A PEM file of the CAs HTTPS servers are trusted by (else ``LLAMA_RUNTIME_CA_BUNDLE``,
            OpenSSL's variables, the OS trust store).
        require_provenance: Refuse assets without a verified build attestation
            (also ``LLAMA_RUNTIME_REQUIRE_PROVENANCE=1``).
        env: The environment to read settings from (default ``os.environ``).

    Raises:
        UserInputError: A malformed repository, backend, URL or timeout.
    """

    @front_door
    def __init__(
        self,
        home: Path | None = None,
        *,
        repo: str | None = None,
        backend: str | None = None,
        channel: str | None = None,
        api_url: str | None = None,
        token: str | None = None,
        source_factory: Callable[[], BuildSource] | None = None,
        host: Callable[[], object] | None = None,
        runner: ProcessRunner | None = None,
        clock: Clock = SYSTEM_CLOCK,
        server: ServerControl | None = None,
        env: Mapping[str, str] | None = None,
        require_provenance: bool = False,
        ca_bundle: str | None = None,
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
            ca_bundle=ca_bundle,
        )

        def build_engine() -> Engine:
            from llama_runtime.updater.engine import Engine, Seams

            facts = _checked_host(host) if host is not None else None
            seams = Seams(source_factory=source_factory, host=facts, runner=runner, server=server, clock=clock)
            return Engine(settings, seams)

        def file_repo() -> str:
            from llama_runtime.updater.config import DEFAULT_REPO

            return settings.repo if settings.repo_explicit else DEFAULT_REPO

        self._bind(settings, Home(settings.home), build_engine, file_repo)

    @classmethod
    @front_door
    def from_settings(cls, settings: Settings) -> RuntimeUpdater:
        """An updater over settings already resolved (:meth:`Settings.resolve`: flags over the environment).

        The engine is built on first use, as for an updater built from arguments; these settings
        do not follow the active runtime's repository, so their repo is also ``install_file``'s
        default origin.

        Args:
            settings: What :meth:`Settings.resolve` returned.
        """

        def build_engine() -> Engine:
            from llama_runtime.updater.engine import Engine

            return Engine(settings)

        updater = cls.__new__(cls)
        updater._bind(settings, Home(settings.home), build_engine, lambda: settings.repo)
        return updater

    def _bind(
        self,
        settings: Settings,
        home: Home,
        build_engine: Callable[[], Engine],
        file_repo: Callable[[], str],
    ) -> None:
        # The engine is built on first use: start-up (``ensure``) needs only the home.
        self._build_engine = build_engine
        self._settings = settings
        self._file_repo = file_repo
        self._engine: Engine | None = None
        self._home = home
        self._repo = settings.repo
        # "auto" keeps the active runtime's stored request (the decision's rule).
        self._backend = settings.backend if settings.backend_explicit else "auto"
        # What an explicitly given backend asks (``auto`` included: choose afresh); ``None`` keeps
        # the active runtime's stored request. ``update`` and ``plan`` go by this, as the CLI always did.
        self._backend_request: str | None = settings.backend if settings.backend_explicit else None
        self._api_url = settings.api_url
        self._channel: Channel | None = settings.channel
        self._jobs: JobStore | None = None

    # -- what the updater was made with (read-only) --------------------------------

    @property
    @front_door
    def home(self) -> Path:
        """The home's directory: ``home``, else ``LLAMA_RUNTIME_HOME``, else the platform's user data dir."""
        return self._home.root

    @property
    @front_door
    def repo(self) -> str:
        """``owner/name`` releases come from."""
        return self._repo

    @property
    @front_door
    def backend(self) -> str:
        """The backend asked for, or ``auto`` (keep the active runtime's stored request)."""
        return self._backend

    @property
    @front_door
    def channel(self) -> str | None:
        """``stable`` or ``nightly`` as asked for; ``None`` keeps the active runtime's stored channel."""
        return self._channel

    @property
    @front_door
    def api_url(self) -> str:
        """The release source: GitHub's REST API, a mirror (``https://``, ``file://``) or a registry (``oci://``)."""
        return self._api_url

    @property
    def _core(self) -> Engine:
        """The composition root that builds this updater's collaborators (internal)."""
        if self._engine is None:
            self._engine = self._build_engine()
        return self._engine

    @property
    @front_door
    def jobs(self) -> JobRecords:
        """The home's job records: ``jobs.current()`` is the newest job's state, ``jobs.get(id)`` one job's.

        Built on first use: a start-up without jobs never loads them.
        """
        return self._job_store

    @property
    @front_door
    def server(self) -> RuntimeServer:
        """The llama-server this home manages: ``start``, ``stop``, ``restart``, ``status``, ``wait``.

        Its port (``LLAMA_RUNTIME_SERVER_PORT``, else 8080) and its wait for ``/health``
        (``LLAMA_RUNTIME_SERVER_WAIT``, else 300 s) are settings, read with the others.
        """
        from llama_runtime.updater.api.server import RuntimeServer

        return RuntimeServer(self._home, port=self._settings.server_port, wait=self._settings.server_wait)

    @property
    def _job_store(self) -> JobStore:
        if self._jobs is None:
            from llama_runtime.updater.api.job_store import JobStore

            self._jobs = JobStore(self._home)
        return self._jobs

    # -- collaborators -----------------------------------------------------------

    @front_door
    def update_running(self) -> bool:
        """Whether an update holds the lock or a job runs now (probes the lock; never waits)."""
        from llama_runtime.runtime.lock import UpdateLock

        if UpdateLock(self._home.lock_path).is_held():
            return True
        current = self._job_store.current()
        return current is not None and current.running

    # -- start-up ------------------------------------------------------------------

    @front_door
    def ensure(self, *, install_if_missing: bool = False) -> EnsureResult:
        """The runtime to start, found without network and without waiting.

        A runtime counts as ready when the pointer names it, its marker is
        valid and every file it records (the binary included) exists with the
        recorded size and stat fingerprint, or hashes to its recorded sha256
        (``runtime.fingerprint``). A damaged runtime is not ready:
        ``install_if_missing`` then reinstalls it through the full verification.

        Args:
            install_if_missing: With no usable runtime and no update running,
                install the newest release now (blocks until done).

        Raises:
            LlamaRuntimeError: Only from the install that ``install_if_missing`` asked for.
        """
        runtime, code, problem = diagnose_active(self._home)
        running = self.update_running()
        if runtime is not None or running or not install_if_missing:
            return ensure_result(runtime, running, problem, code=code, trial=trial_on_record(self._home))
        # A damaged runtime is repaired as the same build, not upgraded behind the app's back.
        marker, _ = active_marker(self._home)
        same = marker.tag if marker is not None and marker.repo == self._repo else None
        job = self.start_update(tag=same, operation="startup")
        job.wait()
        if job.exception is not None:
            raise job.exception
        runtime, code, problem = diagnose_active(self._home)
        return ensure_result(runtime, False, problem, code=code, installed=runtime is not None)

    # -- the button ----------------------------------------------------------------

    @front_door
    def current_job(self) -> UpdateJob | None:
        """A handle on the newest job (running or finished), if there was one."""
        from llama_runtime.updater.api.jobs import UpdateJob

        state = self._job_store.current()
        return UpdateJob(self._job_store, state.id) if state else None

    @front_door
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
            join: Return the running job (default) when it is for the same ``tag`` (any
                job when ``tag`` is ``None``); ``False`` raises ``BusyError`` instead.
            lock_timeout: Seconds to wait for the update lock (the button: 0).
            operation: Who asks (recorded in the job and the lock owner).
            background: Run in a thread (default); ``False`` runs here and returns when over.
            listener: Called with every state of a job this call starts (e.g. a progress bar).
            cuda_version: CUDA line to prefer, e.g. ``"12.4"``.
            require_digest: Refuse assets without a published sha256.

        Raises:
            BusyError: Another process updates without a job record, a job for
                another tag runs, or ``join`` is false and a job runs; the message
                names that job and carries its progress (the CLI's exit 3).
            UserInputError: A malformed tag (``7000``: did you mean ``b7000``?), backend or CUDA version, or a
                ``lock_timeout`` that is negative or not finite.
        """
        from llama_runtime.updater.api.jobs import validate_seconds

        lock_timeout = validate_seconds(lock_timeout, "lock timeout")
        request = self._request(
            tag, backend, cuda_version, require_digest, None if self._backend == "auto" else self._backend
        )
        return self._runner().start(
            request,
            join=join,
            lock_timeout=lock_timeout,
            operation=operation,
            background=background,
            listener=listener,
        )

    @front_door
    def update(
        self,
        tag: str | None = None,
        backend: str | None = None,
        *,
        cuda_version: str | None = None,
        require_digest: bool = False,
        wait: float = 0.0,
        operation: str = "update",
        listener: JobListener | None = None,
        allow_no_device: bool = False,
        pin: bool = False,
        retry_skipped: bool = False,
    ) -> UpdateJob:
        """Run an update here, as the home's job others follow; returns the job once it has succeeded.

        Unlike :meth:`start_update` a running job is waited for (at most ``wait``
        seconds), never joined: the caller asked for its own tag and backend.
        ``job.outcome`` is what it installed (or found up to date). A job that
        failed or was cancelled raises its error here, as :meth:`use` does; the
        job's record (``jobs.get(job_id)``) keeps it for followers.

        Args:
            tag: Exact tag, or ``None`` for the newest release.
            backend: Backend request; ``None``: the updater's explicit ``backend``
                (``auto`` chooses afresh), else the active runtime's stored request.
            cuda_version: CUDA line to prefer, e.g. ``"12.4"``.
            require_digest: Refuse assets without a published sha256.
            wait: Seconds to wait for another update to finish.
            operation: Who asks (recorded in the job and the lock owner).
            listener: Called with every state of the job.
            allow_no_device: Install an explicit GPU backend's build that lists no device of it
                (a machine image made on another host), with a warning ``status`` keeps showing.

            pin: Pin ``tag`` once installed, as ``llama-runtime update --tag`` does (:meth:`pin`): later
                plain updates and checks stay on it.
            retry_skipped: Try the newest build again even though it failed verification here before
                (``job.outcome.skipped`` names such a build when an update passes it over).

        Raises:
            BusyError: Another update still runs after ``wait`` seconds.
            UserInputError: A malformed tag, backend or CUDA version, or a bad ``wait``.
            LlamaRuntimeError: The error that ended the job (a ``CancelledError`` when it was
                cancelled); the active runtime is unchanged.
        """
        from dataclasses import replace

        request = self._request(tag, backend, cuda_version, require_digest, self._backend_request)
        request = replace(
            request, allow_no_device=allow_no_device, pin=pin and tag is not None, retry_skipped=retry_skipped
        )
        return self._runner().run_here(request, wait=wait, operation=operation, listener=listener)

    def _request(
        self,
        tag: str | None,
        backend: str | None,
        cuda_version: str | None,
        require_digest: bool,
        default_backend: str | None,
    ) -> UpdateRequest:
        """The decision's request: the arguments checked, over the updater's repo and channel.

        ``default_backend`` is the request when ``backend`` is ``None`` (``None``: the
        active runtime's stored request decides).
        """
        from llama_runtime.runtime.marker import parse_backend
        from llama_runtime.updater.api.manage import user_tag
        from llama_runtime.updater.choice.decide import UpdateRequest
        from llama_runtime.updater.choice.host import parse_cuda_version

        return UpdateRequest(
            repo=self._repo,
            # The CLI's check, before any request: "7000" is "did you mean b7000?" here too.
            tag=user_tag(tag) if tag is not None else None,
            backend=parse_backend(backend) if backend is not None else default_backend,
            cuda_version=parse_cuda_version(cuda_version) if cuda_version is not None else None,
            require_digest=require_digest,
            channel=self._channel,
            follow_exact=self._core.settings.follow_exact,
        )

    @front_door
    def busy_error(self) -> BusyError:
        """Who updates this home now, in one sentence: the lock's holder and its job's progress."""
        from llama_runtime.updater.api.jobs import busy_error

        return busy_error(self._home, self._job_store)

    def _context(self) -> UseCaseContext:
        """What the use cases are given: the engine, the job store and this updater's defaults."""
        from llama_runtime.updater.api.context import UseCaseContext

        return UseCaseContext(
            engine=self._core,
            jobs=self._job_store,
            repo=self._repo,
            backend=self._backend,
            backend_request=self._backend_request,
            channel=self._channel,
            file_repo=self._file_repo,
        )

    def _runner(self) -> JobRunner:
        from llama_runtime.updater.api.jobs import JobRunner

        return JobRunner(self._home, self._job_store, self._core)

    # -- the scheduler -------------------------------------------------------------

    @front_door
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
        from llama_runtime.updater.api.check import run_check

        return run_check(self._context(), apply=apply, wait=wait, listener=listener)

    # -- what the home holds --------------------------------------------------------

    @front_door
    def status(self) -> StatusResult:
        """What is active, what is installed, whether an override is in force; no network, no lock.

        Raises:
            CorruptStateError: The pointer or the active runtime is damaged (the message names the repair).
            UnsafeHomeError: The home is not safely a directory of ours.
        """
        from llama_runtime.updater.api.inventory import status_of

        return status_of(self._home)

    @front_door
    def list(self, *, available: bool = False, limit: int = 10) -> ListResult:
        """The installed runtimes, their files checked against their markers; ``available`` adds releases.

        Args:
            available: Also ask the release source for the newest builds with an asset for this
                host and the backend asked for (else the active runtime's request).
            limit: With ``available``: at most this many releases (1 or more).

        Raises:
            UserInputError: ``limit`` is below 1.
            CorruptStateError: The pointer cannot be read.
            RemoteError: ``available`` and the release source failed.
        """
        from llama_runtime.runtime.errors import UserInputError
        from llama_runtime.updater.api.inventory import available_for, list_home

        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UserInputError(f"limit must be 1 or more, not {limit}.")
        result, active, installed = list_home(self._home)
        if not available:
            return result
        engine = self._core
        with engine.open_source() as source:
            found = available_for(engine.settings, source, engine.host(), installed, active, limit)
        return dataclasses.replace(result, available=found, repo=engine.settings.repo)

    # -- the runtime manager -------------------------------------------------------

    @front_door
    def pin(self, tag: str | None = None, *, force: bool = False) -> PinResult:
        """Pin ``tag`` (default: the active build): ``check --apply``, scheduled jobs and plain updates keep it.

        A tag not installed here is resolved first, as :meth:`plan` resolves it; ``result.checked`` says how.

        Args:
            tag: The build to pin; ``None``: the active one.
            force: Pin a tag the release source cannot confirm right now (offline, a mirror not synced yet).

        Raises:
            UserInputError: A malformed tag, or none given and nothing active.
            ReleaseNotFoundError: The source does not list ``tag`` (without ``force``).
            BackendUnavailableError: No asset of it fits this machine (without ``force``).
            RemoteError: The source cannot be asked (without ``force``).
            BusyError: An update holds the lock.
        """
        from llama_runtime.updater.api.manage import pin

        return pin(self._context(), tag, force=force)

    @front_door
    def unpin(self) -> PinResult:
        """Remove the pin: the next plain update or scheduled check moves to the newest build again.

        Raises:
            BusyError: An update holds the lock.
        """
        from llama_runtime.updater.api.manage import unpin

        return unpin(self._context())

    @front_door
    def use(self, tag: str, *, repo: str | None = None, progress: ProgressCallback | None = None) -> UpdateOutcome:
        """Activate an installed runtime (no download), verified and switched like an update.

        Args:
            tag: An installed build (``b7000``) or a runtime name as ``llama-runtime list`` shows it.
            repo: Only runtimes from this ``owner/name`` (when one build came from several).
            progress: Receives the verification's progress events.

        Raises:
            UserInputError: ``tag`` is malformed or not installed (the message lists what is),
                or several runtimes match and ``repo`` or the updater's backend must choose.
            BusyError: Another update holds the lock.
            VerificationError: The runtime fails verification; the active one is unchanged.
        """
        from llama_runtime.updater.api.manage import use

        return use(self._context(), tag, repo, progress)

    @front_door
    def rollback(self) -> RollbackResult:
        """Re-activate the previous runtime (the current one becomes previous), like an update switches.

        Raises:
            UserInputError: There is no previous runtime to go back to.
            CorruptStateError: The previous runtime is damaged; nothing changed.
            BusyError: Another update holds the lock.
            VerificationError: The server could not be switched; nothing changed.
        """
        from llama_runtime.updater.api.manage import rollback

        return rollback(self._context())

    @front_door
    def remove(self, tag: str, *, repo: str | None = None) -> RemoveResult:
        """Delete an installed runtime that is neither active nor the rollback target.

        Raises:
            UserInputError: Not installed, ambiguous, active, previous, or in use by a process.
        """
        from llama_runtime.updater.api.manage import remove

        return remove(self._context(), tag, repo)

    @front_door
    def install_file(
        self,
        archive: str | Path,
        *,
        tag: str | None = None,
        repo: str | None = None,
        sha256: str | None = None,
        attestation: str | Path | None = None,
        allow_no_device: bool = False,
    ) -> UpdateOutcome:
        """Install a release archive or an exported bundle from disk and activate it (no network).

        Args:
            archive: The file (a release asset, or what ``llama-runtime export`` wrote).
            tag: The build it is, when its name does not say.
            repo: The repository to record as its origin; default: the updater's
                ``repo`` argument (or ``LLAMA_RUNTIME_REPO``), else ggml-org/llama.cpp,
                never the active runtime's.
            sha256: The digest the bytes must have.
            attestation: A Sigstore bundle for the archive (its build provenance).
            allow_no_device: With the updater's ``backend`` a GPU one given by name, install the
                build even when it lists no device of it here (a machine image made elsewhere),
                with the ``device_warning`` that ``status`` and ``doctor`` keep showing.

        Raises:
            UserInputError: The file is missing or unreadable, or tag/backend are unclear.
            DigestMismatchError: ``sha256`` does not match.
            VerificationError: The runtime fails verification (a ``backend`` given by name whose build
                lists no device of it included); the active one is unchanged.
        """
        from llama_runtime.updater.api.manage import install_file

        return install_file(
            self._context(),
            Path(archive),
            tag=tag,
            repo=repo,
            sha256=sha256,
            attestation=Path(attestation) if attestation is not None else None,
            allow_no_device=allow_no_device,
        )

    @front_door
    def export(self, output: str | Path) -> ExportResult:
        """Write the active runtime and its marker as one bundle that ``install_file`` restores elsewhere.

        The bundle appears at ``output`` only when complete; it carries the release archive
        when the download cache still holds it (its provenance then travels too).

        Raises:
            UserInputError: Nothing is active, or ``output`` cannot be written there.
            CorruptStateError: The active runtime's files differ from its marker.
            BusyError: An update is running.
        """
        from llama_runtime.updater.offline.export import export_bundle

        return export_bundle(self._home, Path(output))

    @front_door
    def mirror_sync(
        self,
        dest: str | Path,
        *,
        tag: str | None = None,
        newest: int = 1,
        platforms: Sequence[str] = (),
        backends: Sequence[str] = (),
        prune: bool = False,
        progress: ProgressCallback | None = None,
    ) -> MirrorReport:
        """Bring a mirror directory up to date with the updater's repository, as its one writer.

        Machines pointed at it (``api_url=dest.as_uri()``, or the URL a static web server gives
        it) update from it as from GitHub, attestations included. What it fetches is checked as
        ``update`` checks it; this home's runtimes are not touched.

        Args:
            dest: The mirror directory (created if missing); never inside this home.
            tag: One exact release; otherwise the ``newest`` builds the updater's channel names.
            newest: How many builds to mirror (1 or more).
            platforms: ``OS-ARCH`` filters, e.g. ``linux-x64`` (empty: all).
            backends: Backend filters, e.g. ``vulkan`` (empty: all).
            prune: Remove mirrored releases other than the ``newest`` ones.
            progress: Receives the downloads' progress events.

        Raises:
            UserInputError: ``dest`` is in this home or not a directory we can write, a malformed tag,
                platform or backend, ``newest`` below 1, or ``prune`` with an exact ``tag``.
            BusyError: Another sync writes ``dest`` now.
            RemoteError: Network or GitHub failures.
        """
        from llama_runtime.runtime.marker import parse_backend
        from llama_runtime.updater.api.mirror_args import mirror_dest, platform_filter
        from llama_runtime.updater.offline.mirror import MirrorFetch, sync_mirror
        from llama_runtime.updater.release.tags import validate_tag

        engine = self._core
        wanted = [parse_backend(b, allow_auto=False, source="--backend") for b in backends]
        filters = [platform_filter(p) for p in platforms]
        checked_tag = validate_tag(tag) if tag is not None else None
        where = mirror_dest(Path(dest), self._home.root)
        with engine.open_source(etag_cache=False, api_deadline=False) as client:
            return sync_mirror(
                client,
                where,
                tag=checked_tag,
                latest=newest,
                platforms=filters,
                backends=wanted,
                prune=prune,
                channel=self._channel or "stable",
                # Fetched as `update` fetches: parallel ranges, one pass.
                fetch=MirrorFetch(engine.fetch_options(), progress),
            )

    @front_door
    def registry_sync(
        self,
        dest: str,
        *,
        tag: str | None = None,
        newest: int = 1,
        platforms: Sequence[str] = (),
        backends: Sequence[str] = (),
        progress: ProgressCallback | None = None,
        channels: Sequence[str] | None = None,
    ) -> PushReport:
        """Push the builds a mirror sync would choose to an OCI registry, each as one artifact.

        Every layer is upstream's original bytes (its digest the published sha256), each
        asset's attestations go along as referrers, and the build, semver and channel tags
        move last. A blob the registry already has is not downloaded or uploaded again.

        Args:
            dest: ``oci://HOST[:PORT]/NAMESPACE/NAME`` (the repository only: no tag or digest).
            tag, newest, platforms, backends, progress: As :meth:`mirror_sync`.
            channels: The channel tags the sync may move (``[]``: none; ``None``: the channel
                resolved); each only while the previous sync put it where it is.

        Raises:
            UserInputError: ``dest`` is not a registry repository, or a malformed filter.
            RegistryAuthError: The registry refused the credentials.
            RemoteError: Network, GitHub or registry failures.
        """
        from llama_runtime.runtime.marker import parse_backend
        from llama_runtime.updater.api.mirror_args import platform_filter, registry_repository
        from llama_runtime.updater.offline.mirror import MirrorFetch
        from llama_runtime.updater.offline.registry_push import sync_registry
        from llama_runtime.updater.release.tags import validate_tag

        engine = self._core
        wanted = [parse_backend(b, allow_auto=False, source="--backend") for b in backends]
        filters = [platform_filter(p) for p in platforms]
        checked_tag = validate_tag(tag) if tag is not None else None
        with (
            engine.open_registry(registry_repository(dest)) as registry,
            engine.open_source(etag_cache=False, api_deadline=False) as client,
        ):
            return sync_registry(
                client,
                registry,
                tag=checked_tag,
                latest=newest,
                platforms=filters,
                backends=wanted,
                channel=self._channel or "stable",
                channels=None if channels is None else list(channels),
                fetch=MirrorFetch(engine.fetch_options(), progress),
            )

    @front_door
    def registry_promote(self, dest: str, tag: str | None, channel: str, *, to_sync: bool = False) -> Promotion:
        """Move the channel tag ``channel`` of the registry repository ``dest`` to the pushed build ``tag``.

        The promotion is recorded in the registry: a scheduled ``mirror sync`` leaves the
        channel there. ``to_sync`` hands the channel back to the sync instead.

        Returns:
            The repository, build, channel and the manifest digest the channel tag now names.

        Raises:
            UserInputError: ``dest`` is not a registry repository, or ``tag`` was never pushed there.
            RegistryAuthError, RemoteError: The registry refused or failed.
        """
        from llama_runtime.updater.api.mirror_args import registry_repository
        from llama_runtime.updater.offline.registry_push import Promotion, promote

        with self._core.open_registry(registry_repository(dest)) as registry:
            digest = promote(registry, tag, channel, to_sync=to_sync)
            return Promotion(registry.ref.display, tag or "", channel, digest, to_sync)

    @front_door
    def gate_settings(self, policy: GatePolicy | None = None) -> GatePolicy:
        """The inference gate's settings every later update of this home applies; ``policy`` stores new ones.

        Args:
            policy: Settings to store first (``None``: only read what is stored).

        Returns:
            The stored settings (the defaults when nothing valid is stored).

        Raises:
            UserInputError: ``policy``'s smoke model is missing or not a GGUF file.
        """
        from llama_runtime.updater.verify.gate import load_gate_settings, save_gate_settings

        if policy is not None:
            save_gate_settings(self._home.root, policy)
        return load_gate_settings(self._home.root)

    @front_door
    def gc(self, *, keep: int | None = None, dry_run: bool = False, cache_only: bool = False) -> GcResult:
        """Remove old runtimes, stale downloads and leftovers; the active and previous are always kept.

        Args:
            keep: Runtimes to keep in all, as ``update``'s ``--keep`` counts them: the active, the
                previous and the newest others up to ``keep`` (0 keeps every runtime; 1 is refused,
                the previous one is always kept); default the updater's (``LLAMA_RUNTIME_KEEP``, else 3).
            dry_run: Only say what would be removed.
            cache_only: Only downloads and leftovers, no runtime.
        """
        from llama_runtime.updater.api.manage import gc

        return gc(self._context(), keep=keep, dry_run=dry_run, cache_only=cache_only)

    @front_door
    def doctor(self, *, repair: bool = False, listener: JobListener | None = None) -> DoctorResult:
        """Re-verify the home and the active runtime; ``repair`` points the home at a verified one.

        A repair runs as the home's job, here, until it is over: ``job status``
        (and :meth:`current_job`) see it, and no update runs beside it.

        Args:
            repair: Reinstall a damaged active build, else point at the newest runtime that verifies.
            listener: Receives the repair job's states.

        Raises:
            BusyError: ``repair`` while another job or update runs.
            UnsafeHomeError: The home is not safely a directory of ours.
        """
        from llama_runtime.updater.api.manage import doctor

        return doctor(self._context(), repair=repair, listener=listener)

    @front_door
    def plan(
        self,
        tag: str | None = None,
        *,
        platform: str | None = None,
        cuda_version: str | None = None,
        host_file: str | Path | None = None,
    ) -> PlanResult:
        """What an update would install and why, for this machine or another; downloads nothing.

        Args:
            tag: Plan for this release (default: the newest on the updater's channel).
            platform: Plan for another machine, ``OS-ARCH`` (e.g. ``windows-x64``).
            cuda_version: The (other) machine's driver CUDA version; with ``host_file``, the line.
            host_file: Plan for the machine a ``doctor --json`` host object describes.

        Raises:
            UserInputError: Malformed input, or both ``platform`` and ``host_file``.
            ReleaseNotFoundError: ``tag`` is not released.
            BackendUnavailableError: No asset of the release fits the machine and backend.
            RemoteError: Network or GitHub failures.
        """
        from llama_runtime.updater.api.manage import plan, user_tag

        return plan(
            self._context(),
            user_tag(tag) if tag is not None else None,
            platform=platform,
            cuda_version=cuda_version,
            host_file=Path(host_file) if host_file is not None else None,
        )
